"""Bayesian CART through the estimators, the model context and the posterior contract."""
import arviz as az
import numpy as np
import pytest

import bayestrees as bt
from bayestrees.inference.moves import STEP_KINDS

KW = dict(draws=60, tune=400, chains=2, max_depth=3, max_bins=8, random_state=0)


def _reg_data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    X[:, 0] = rng.integers(0, 8, n) / 8          # 8 distinct values: exact bins, a split at 0.5 exists
    y = np.where(X[:, 0] < 0.5, -2.0, 2.0) + 0.3 * rng.normal(size=n) + 1000.0
    return X, y


@pytest.fixture(scope="module")
def reg():
    X, y = _reg_data()
    return bt.BayesianCARTRegressor(**KW).fit(X, y), X, y


@pytest.fixture(scope="module")
def clf():
    X, y = _reg_data(seed=1)
    labels = np.where(X[:, 0] < 0.5, "a", "b")
    return bt.BayesianCARTClassifier(**KW).fit(X, labels), X, labels


def test_regressor_learns_the_split_in_response_units(reg):
    est, X, y = reg
    pred = est.predict(X)
    assert np.sqrt(np.mean((pred - y) ** 2)) < 0.6                 # noise sd 0.3, two levels 4 apart
    draws = est.predict_draws(X)
    assert draws.shape == (120, len(y))
    lo, hi = est.predict_interval(X, 0.9).T
    assert np.all(lo <= pred + 1e-9) and np.all(pred <= hi + 1e-9)
    assert set(est.acceptance_) >= {"grow", "prune", "change", "swap"}


def test_particle_gibbs_regressor_learns_the_split():
    """scheme="pgibbs" through the estimator (the common-variance leaves' proposal score, the codes'
    bound from the binned data): from the root leaf, a few updates find the split and sigma."""
    X, y = _reg_data()
    est = bt.BayesianCARTRegressor(**{**KW, "tune": 20, "draws": 30}, scheme="pgibbs", particles=5).fit(X, y)
    assert np.sqrt(np.mean((est.predict(X) - y) ** 2)) < 0.6
    assert float(est.idata_.posterior["sigma"].mean()) == pytest.approx(0.3, rel=0.4)
    # every step was a particle Gibbs update (the rate is how often it changed the tree: the
    # posterior here is nearly one tree)
    assert np.all(est.idata_.sample_stats["move"].values == STEP_KINDS.index("pgibbs"))
    assert 0.0 <= est.acceptance_["pgibbs"] <= 1.0


def test_regressor_posterior_contract(reg, tmp_path):
    est, X, y = reg
    idata = est.idata_
    for g in ("posterior", "trees", "log_likelihood", "observed_data", "constant_data", "sample_stats"):
        assert g in idata.groups()
    assert set(idata.posterior.data_vars) == {"n_leaves", "depth", "split_counts", "sigma", "mu"}
    assert idata.posterior["mu"].dims == ("chain", "draw", "obs")
    assert float(idata.posterior["sigma"].mean()) == pytest.approx(0.3, rel=0.4)  # in the response's units
    assert list(idata.posterior["split_counts"].coords["feature"].values) == ["x0", "x1", "x2"]
    rows = az.summary(idata).index
    assert all(r.split("[")[0] in {"n_leaves", "depth", "split_counts", "sigma", "mu"} for r in rows)
    assert {"lp", "accepted", "move", "at_max_depth"} <= set(idata.sample_stats.data_vars)
    loo = bt.loo(idata)
    assert np.isfinite(loo.elpd_loo)
    path = tmp_path / "bcart.nc"
    idata.to_netcdf(str(path))
    back = bt.convert.trees_from_inferencedata(az.from_netcdf(str(path)))
    assert np.array_equal(np.asarray(back.threshold), np.asarray(est.trees_.threshold))


def test_classifier_probabilities_and_loo(clf):
    est, X, labels = clf
    assert np.mean(est.predict(X) == labels) > 0.95
    p = est.predict_proba(X)
    assert p.shape == (len(labels), 2) and np.allclose(p.sum(1), 1, atol=1e-5)
    idata = est.idata_
    assert idata.posterior["mu"].dims == ("chain", "draw", "obs", "class")
    assert "sigma" not in idata.posterior
    assert np.isfinite(bt.loo(idata).elpd_loo)


def test_save_load_round_trip(reg, tmp_path):
    est, X, _ = reg
    est.save(tmp_path / "m.pkl")
    back = bt.load(tmp_path / "m.pkl")
    np.testing.assert_array_equal(back.predict(X), est.predict(X))


def test_model_context_sample_and_predictions():
    X, y = _reg_data()
    with bt.Model():
        xd = bt.Data("X", X)
        bt.BayesianCART("f", xd, y, max_depth=3, max_bins=8)
        idata = bt.sample(draws=60, tune=400, chains=2, random_seed=0)
        bt.set_data({"X": X[:7]})
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True, random_seed=1)
    assert idata.attrs.get("family", idata.posterior.attrs["family"]) == "bayesian_cart"
    pred = idata.predictions
    assert pred["f"].shape == (2, 60, 7) and pred["f_mu"].shape == (2, 60, 7)
    # a draw of the response scatters around the function by sigma
    resid = (pred["f"] - pred["f_mu"]).values.ravel()
    assert 0.1 < resid.std() < 0.6
    with bt.Model():  # the run settings reach the sampler's config (checked before anything runs)
        bt.BayesianCART("f", X, y, max_depth=3, max_bins=8)
        with pytest.raises(ValueError, match="chain_method"):
            bt.sample(draws=5, tune=5, chains=2, random_seed=0, chain_method="threads")


@pytest.mark.parametrize("kw, msg", [
    (dict(alpha=1.5), "alpha"), (dict(beta=-1.0), "beta"), (dict(draws=0), "draws"), (dict(chains=0), "chains"),
    (dict(tune=-1), "tune"), (dict(max_depth=40), "max_depth"), (dict(leaf_model="dirichlet"), "classification"),
    (dict(prior=bt.priors.LeafCountPrior(2.0), leaf_model="bogus"), "leaf_model"),
    (dict(chain_method="pmap"), "chain_method"), (dict(scheme="gibbs"), "scheme"),
    (dict(scheme="pgibbs", particles=1), "particles"), (dict(scheme="pgibbs", particles=2.5), "particles")])
def test_bad_parameters(kw, msg):
    X, y = _reg_data(20)
    with pytest.raises(ValueError, match=msg):
        bt.BayesianCARTRegressor(**{**KW, **kw}).fit(X, y)


def test_bad_prior_values():
    X, y = _reg_data(20)
    with pytest.raises(ValueError, match="log_phi"):
        bt.BayesianCARTRegressor(prior=bt.priors.LeafCountPrior(float("nan")), **KW).fit(X, y)


def test_fits_differing_only_in_the_prior_values_share_one_compilation(reg):
    """The prior's values reach the compiled sampler as arguments: a fit with other Chipman values
    reuses the cached block, and the values change the run (that they give the right target is
    the next test)."""
    from bayestrees.inference import loop

    model, X, y = reg
    n = loop._block._cache_size()
    other = bt.BayesianCARTRegressor(alpha=0.5, beta=0.5, **KW).fit(X, y)
    assert loop._block._cache_size() == n
    # same seed, same keys: had the new values been ignored, the two runs would be identical
    assert not np.allclose(other.result_.lp, model.result_.lp)


def _log_prior_of_draws(fit, X, y, cfg_prior, data_prior):
    """``evaluate``'s log prior of six draws of ``fit`` (chain 0), the config holding ``cfg_prior`` and
    the data ``data_prior`` (None: the config's values)."""
    import jax
    import jax.numpy as jnp

    from bayestrees.inference import moves as M

    codes = jnp.asarray(fit._codes(X), jnp.int32)
    yt = jnp.asarray((y - y.mean()) / y.std(), jnp.float32)
    lm = fit.result_.leaf_model
    data = M.MCMCData(codes, yt, lm.row_stats(yt), jnp.ones(len(y), jnp.float32), prior=data_prior)
    trees = jax.tree_util.tree_map(lambda a: jnp.asarray(a[0, :6]), fit.result_.trees)
    cfg = M.MCMCConfig(cfg_prior, lm, 3, X.shape[1])
    return np.asarray(jax.vmap(lambda t: M.evaluate(t, data, cfg).log_prior)(trees))


@pytest.mark.parametrize("prior", [bt.priors.ChipmanPrior(0.5, 0.5), bt.priors.LeafCountPrior(0.7),
                                   bt.priors.DepthDecayPrior(3.0)])
def test_traced_prior_values_give_the_log_prior_of_the_values_compiled_in(reg, prior):
    """``evaluate`` with the prior's values traced (the config naming only its kind) equals
    ``evaluate`` with those values in the static config, and differs from the kind's defaults."""
    import jax.numpy as jnp

    from bayestrees.priors import canonical, traced_params

    model, X, y = reg
    compiled_in = _log_prior_of_draws(model, X, y, prior, None)
    traced = _log_prior_of_draws(model, X, y, canonical(prior), traced_params(prior, jnp.float32))
    defaults = _log_prior_of_draws(model, X, y, canonical(prior), None)
    np.testing.assert_allclose(traced, compiled_in, rtol=1e-5, atol=1e-5)
    assert np.all(np.abs(defaults - compiled_in) > 1e-3)
