"""BET's estimators, model variable, outputs (posterior contract names) and bad input."""
import numpy as np
import pytest

import bayestrees as bt
from bayestrees.inference.bet import fit as B

SMALL = dict(draws=30, tune=60, max_trees=4, max_depth=3, max_bins=5, random_state=0)
_FITS = {}


def _clf():
    if "clf" not in _FITS:
        rng = np.random.default_rng(0)
        X = rng.integers(0, 5, size=(90, 3)).astype(float)
        y = np.where((X[:, 0] >= 2) ^ (rng.random(90) < 0.1), "yes", "no")
        with _quiet():
            _FITS["clf"] = (bt.BETClassifier(**SMALL).fit(X, y), X, y)
    return _FITS["clf"]


def _reg():
    if "reg" not in _FITS:
        rng = np.random.default_rng(1)
        X = rng.integers(0, 5, size=(90, 3)).astype(float)
        y = np.where(X[:, 0] >= 2, 2.0, -1.0) + 0.3 * rng.normal(size=90)
        with _quiet():
            _FITS["reg"] = (bt.BETRegressor(**SMALL).fit(X, y), X, y)
    return _FITS["reg"]


def _quiet():
    import warnings

    cm = warnings.catch_warnings()
    cm.__enter__()
    warnings.simplefilter("ignore", RuntimeWarning)  # slice overflow warnings at J_max = 4 are expected here

    class _Exit:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            cm.__exit__(*a)

    return _Exit()


def test_classifier_outputs_and_posterior_names(tmp_path):
    clf, X, y = _clf()
    proba = clf.predict_proba(X)
    assert proba.shape == (90, 2) and np.allclose(proba.sum(1), 1.0, atol=1e-5)
    assert np.mean(clf.predict(X) == y) > 0.8
    assert np.mean(clf.predict_cluster() == y) > 0.8
    assert clf.predict_draws(X[:5]).shape == (30, 5, 2)
    idata = clf.idata_
    post = idata.posterior
    J = clf.max_trees
    assert post["n_trees"].dims == ("chain", "draw")
    assert post["w"].dims == ("chain", "draw", "component") and post["w"].sizes["component"] == J
    assert post["Z"].dims == ("chain", "draw", "obs")
    assert post["xi"].dims == ("chain", "draw", "component", "feature")
    assert post["xi_bar"].dims == ("chain", "draw", "feature")
    assert idata.trees["split_feature"].dims == ("chain", "draw", "component", "node")
    w, Z, nc = post["w"].values, post["Z"].values, post["n_components"].values
    assert np.all(w.sum(-1) <= 1 + 1e-5) and np.all((Z >= 0) & (Z < J))
    np.testing.assert_array_equal(nc, [[len(np.unique(z)) for z in zc] for zc in Z])
    q = clf.min_leaf_rows  # the model's trees: components of at least q rows
    np.testing.assert_array_equal(post["n_trees"].values,
                                  [[int(np.sum(np.bincount(z) >= q)) for z in zc] for zc in Z])
    np.testing.assert_allclose(post["xi_bar"].values.sum(-1), 1.0, atol=1e-5)
    ss = idata.sample_stats
    assert {"log_lik_y_given_z", "log_lik_y_z", "overflow"} <= set(ss.data_vars)
    assert np.all(ss["log_lik_y_z"].values <= ss["log_lik_y_given_z"].values + 1e-3)  # log p(Z) <= 0
    # the mixture density is a log-likelihood per row, and loo runs on it
    assert np.all(np.isfinite(idata.log_likelihood["y"].values))
    assert np.isfinite(bt.loo(idata).elpd_loo)
    best = clf.best_ensemble_
    assert np.isclose(best["log_lik_y_z"], ss["log_lik_y_z"].values.max())
    assert best["trees"].feature.shape[0] == J and best["n_components"] == int(best["occupied"].sum())
    assert best["n_trees"] == int(np.sum(np.bincount(Z[best["chain"], best["draw"]]) >= q))
    # every row's training label counts in its own tree: the root of an occupied tree holds its rows
    assert int(np.sum(best["trees"].count[:, 0][best["occupied"]])) == len(y)
    path = tmp_path / "bet.pkl"
    clf.save(path)
    back = bt.load(path)
    np.testing.assert_allclose(back.predict_proba(X), proba)


def test_regressor_predictions_and_cluster_estimator():
    reg, X, y = _reg()
    pred = reg.predict(X)
    assert pred.shape == (90,)
    assert np.sqrt(np.mean((pred - y) ** 2)) < 0.45          # noise sd 0.3
    assert np.sqrt(np.mean((reg.predict_cluster() - y) ** 2)) < 0.45
    iv = reg.predict_interval(X[:10])
    assert iv.shape == (10, 2) and np.all(iv[:, 0] <= iv[:, 1])
    assert reg.n_trees_.shape == (1, 30) and reg.xi_bar_.shape == (3,)
    # ensemble estimator by hand from the draws: sum_j w~_j theta_j(x) over occupied trees
    d = reg.result_.draws
    vals = np.asarray(bt.tree.predict(d.tree, reg._codes(X[:4])))[..., 0]          # (1, 30, J, 4)
    ww = np.where(d.occupied, d.w, 0.0)
    ww = ww / ww.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.einsum("cdj,cdjn->n", ww, vals) / 30, pred[:4], rtol=1e-5, atol=1e-5)


def test_model_context_and_predictive():
    _, X, y = _reg()
    with bt.Model():
        bt.BETMixture("f", bt.Data("X", X), y, max_trees=4, max_depth=3, max_bins=5)
        with _quiet():
            idata = bt.sample(draws=30, tune=60, chains=1, random_seed=0)
        bt.set_data({"X": X[:7]})
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)
    assert idata.predictions["f"].shape == (1, 30, 7)
    assert np.all(np.isfinite(idata.predictions["f"].values))
    assert idata.posterior.attrs["family"] == "bet"


@pytest.mark.parametrize("kw, match", [
    (dict(alpha_dp=0.0), "alpha_dp"), (dict(alpha_dp=-1.0), "alpha_dp"), (dict(delta=0), "delta"),
    (dict(min_leaf_rows=1), "min_leaf_rows"), (dict(max_trees=0), "max_trees"),
    (dict(max_trees=10_000), "max_trees"), (dict(active_trees=0), "active_trees"), (dict(draws=0), "draws"),
])
def test_bad_settings(kw, match):
    X = np.random.default_rng(0).uniform(size=(30, 2))
    y = X[:, 0]
    with pytest.raises(ValueError, match=match):
        bt.BETRegressor(**{**SMALL, **kw}).fit(X, y)


def test_bad_data(monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(30, 2))
    y = X[:, 0]
    Xn = X.copy()
    Xn[3, 1] = np.inf
    with pytest.raises(ValueError, match="infinite"):
        bt.BETRegressor(**SMALL).fit(Xn, y)
    with pytest.raises(ValueError, match="rows"):
        bt.BETRegressor(**SMALL).fit(X[:5], y[:5])
    with pytest.raises(ValueError):
        bt.BETRegressor(**SMALL).fit(X, y[:20])
    with pytest.raises(ValueError, match="features"):
        _reg()[0].predict(np.zeros((3, 5)))  # fitted (or cached) before MAX_ROWS is lowered below its rows
    monkeypatch.setattr(B, "MAX_ROWS", 20)
    with pytest.raises(ValueError, match="at most 20 rows"):
        bt.BETRegressor(**SMALL).fit(X, y)


def test_slice_overflow_is_reported_not_hidden():
    import dataclasses

    import jax

    from bayestrees.data import prepare_data

    reg, X, y = _reg()
    data = prepare_data(X, y, task="regression", max_bins=5, allow_nan=False)
    # a large alpha: the stick's remainder beyond J_max = 4 is large, slices reach past it (the other
    # settings are the cached regressor's, so the compiled sampler is shared: alpha_dp is an argument)
    cfg = dataclasses.replace(reg._config(), alpha_dp=50.0, on_overflow="raise")
    with pytest.raises(RuntimeError, match="max_trees=4"):
        B.fit_bet(jax.random.key(0), data, cfg)
    with pytest.warns(RuntimeWarning, match="raise max_trees"):
        res = B.fit_bet(jax.random.key(0), data, dataclasses.replace(cfg, on_overflow="warn"))
    assert res.overflow_total == int(np.sum(res.info.overflow)) > 0


def test_fits_differing_only_in_delta_share_one_compilation():
    """delta (the depth decay) reaches the compiled step as an argument too; that the traced value
    gives the prior's target is checked in test_bet (the no-likelihood run) and test_bcart_api."""
    from bayestrees.inference import loop

    reg, X, y = _reg()
    n_block = loop._block._cache_size()
    with _quiet():
        other = bt.BETRegressor(**{**SMALL, "delta": 6.0}).fit(X, y)
    assert loop._block._cache_size() == n_block
    # same seed, same keys: had the new delta been ignored, the two runs would be identical
    a, b = reg.idata_.sample_stats["log_lik_y_z"].values, other.idata_.sample_stats["log_lik_y_z"].values
    assert not np.allclose(a, b)


def test_fits_differing_only_in_alpha_dp_share_one_compilation():
    """alpha_dp reaches the compiled step as an argument: a second value compiles nothing, and the
    stick-breaking term log p(Z) of every draw is the one of the new alpha_dp."""
    from scipy.special import betaln

    from bayestrees.inference import loop

    reg, X, y = _reg()
    n_block = loop._block._cache_size()
    alpha = 5.0
    with _quiet():
        other = bt.BETRegressor(**{**SMALL, "alpha_dp": alpha}).fit(X, y)
    assert loop._block._cache_size() == n_block
    idata = other.idata_
    assert idata.posterior.attrs["alpha_dp"] == alpha
    Z = idata.posterior["Z"].values[0]                                             # (draws, n)
    J = other.max_trees
    nj = np.stack([np.bincount(z, minlength=J) for z in Z]).astype(float)         # rows per component
    mj = nj[:, ::-1].cumsum(1)[:, ::-1] - nj                                       # rows in later components
    log_pz = np.sum(betaln(1.0 + nj, alpha + mj) - betaln(1.0, alpha), axis=1)
    ss = idata.sample_stats
    got = (ss["log_lik_y_z"].values - ss["log_lik_y_given_z"].values)[0]
    np.testing.assert_allclose(got, log_pz, rtol=1e-4, atol=1e-2)
