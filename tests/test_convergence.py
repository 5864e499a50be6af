"""The convergence table and warning of MCMC fits (bayestrees.convergence)."""
from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pytest

from bayestrees.convergence import ConvergenceWarning, check_convergence, warn_convergence


def _idata(post: dict, lp=None):
    groups = {"posterior": post}
    if lp is not None:
        groups["sample_stats"] = {"lp": lp}
    idata = az.from_dict(**groups)
    idata.posterior.attrs["family"] = "bayesian_cart"
    return idata


def test_agreeing_chains_pass_and_disagreeing_chains_are_named():
    rng = np.random.default_rng(0)
    good = rng.normal(size=(4, 1000))
    report = check_convergence(_idata({"sigma": good}, lp=rng.normal(size=(4, 1000))))
    assert report.ok, report.problems
    assert report.table["sigma"]["status"] == "ok" and report.table["sigma"]["rhat"] < 1.01
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_convergence(report)  # nothing to say: no warning

    shifted = good + np.array([0.0, 0.0, 0.0, 3.0])[:, None]  # one chain in another mode
    report = check_convergence(_idata({"sigma": shifted, "n_leaves": good}))
    assert not report.ok
    assert report.table["sigma"]["status"].startswith("rhat") and report.table["sigma"]["rhat"] > 1.2
    assert report.table["n_leaves"]["status"] == "ok"
    with pytest.warns(ConvergenceWarning, match=r"R-hat of sigma \d\.\d{3}.*longer chains"):
        warn_convergence(report)


def test_a_stuck_chain_is_named_not_shown_as_a_huge_rhat():
    rng = np.random.default_rng(1)
    depth = rng.integers(2, 5, size=(4, 500)).astype(float)
    depth[2] = 3.0  # chain 2 never changed depth
    report = check_convergence(_idata({"depth": depth}))
    assert report.table["depth"]["status"] == "stuck"
    assert not np.isfinite(report.table["depth"]["rhat"])
    assert report.problems == ["depth never moved in chain [2]"]
    assert "stuck" in str(report)


def test_constant_everywhere_is_not_a_problem_and_low_ess_is():
    rng = np.random.default_rng(2)
    walk = np.cumsum(rng.normal(size=(4, 400)), axis=1)  # a random walk: tiny ESS
    report = check_convergence(_idata({"depth": np.full((4, 400), 2.0), "x": walk}))
    assert report.table["depth"]["status"] == "constant"
    assert "ess" in report.table["x"]["status"]
    assert any("bulk ESS of x" in p for p in report.problems)
    assert not any("depth" in p for p in report.problems)


def test_one_chain_has_no_rhat_but_still_an_ess_check():
    rng = np.random.default_rng(3)
    report = check_convergence(_idata({"sigma": rng.normal(size=(1, 1000))}))
    assert report.ok and not np.isfinite(report.table["sigma"]["rhat"])
    assert report.to_dataframe().loc["sigma", "status"] == "ok"


def test_unknown_variable_is_refused():
    with pytest.raises(ValueError, match="no scalar variable"):
        check_convergence(_idata({"sigma": np.zeros((2, 10))}), var_names=["mu"])


def _one_split_data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    return X, 4.0 * (X[:, 0] > 0.5) + 0.2 * rng.normal(size=n)


def test_a_converged_fit_is_quiet_and_keeps_its_table():
    """A posterior on stumps only (max_depth=1) of a clean one-split signal, by particle Gibbs (a
    whole new stump proposed every step: nearly independent draws); n_leaves and depth are
    constant; no warning, and ``convergence_`` says ok.  (With the local moves a chain can take
    hundreds of steps to propose the one good threshold among 2 x 31 rules: that fit is rightly
    reported.)"""
    import bayestrees as bt

    X, y = _one_split_data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = bt.BayesianCARTRegressor(max_depth=1, scheme="pgibbs", draws=400, tune=50, chains=2,
                                       random_state=0).fit(X, y)
    rep = est.convergence_
    assert rep.ok, rep.problems
    assert rep.table["n_leaves"]["status"] == "constant" and rep.table["sigma"]["status"] == "ok"


def test_a_stuck_or_short_fit_warns_in_the_estimator_and_the_model_context():
    """The issue's case (200 rows, a step plus a quadratic) with the local moves and short chains:
    the chains disagree; the estimator and the model context say so with one warning each."""
    import bayestrees as bt

    rng = np.random.default_rng(3)
    X = rng.uniform(size=(200, 4))
    y = 2 * (X[:, 2] > 0.3) + 4 * (X[:, 0] - 0.5) ** 2 + 0.3 * rng.normal(size=200)
    with pytest.warns(ConvergenceWarning, match="has not converged") as rec:
        est = bt.BayesianCARTRegressor(scheme="moves", draws=100, tune=100, chains=2, random_state=0).fit(X, y)
    assert len([w for w in rec if issubclass(w.category, ConvergenceWarning)]) == 1
    assert not est.convergence_.ok
    with bt.Model():
        rv = bt.BayesianCART("f", X, y, scheme="moves")
        with pytest.warns(ConvergenceWarning, match="has not converged"):
            bt.sample(draws=100, chains=2, tune=100, random_seed=0)
    assert not rv.convergence_.ok


def test_the_advice_for_tree_sums_is_more_kept_steps_not_more_tuning():
    """BART's and the tree functions' slow mode is not a burn-in (docs/lab-notes/bart.md, Mixing: longer tuning
    left R-hat of sigma where it was, more kept steps lowered it): their advice says so."""
    from bayestrees.convergence import ConvergenceReport

    for family in ("bart", "model"):
        msg = ConvergenceReport({}, 4, 100, ["R-hat of sigma 1.150"], family=family).message()
        assert "more kept steps" in msg and "more tune steps" not in msg, msg
