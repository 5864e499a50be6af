"""BART through the estimators, the model context and the posterior contract."""
import warnings

import arviz as az
import numpy as np
import pytest

import bayestrees as bt
from bayestrees.convergence import ConvergenceWarning

KW = dict(m=20, draws=60, tune=150, chains=2, max_depth=3, max_bins=16, random_state=0)


def _friedman(X):
    return 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]


def _reg_data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    y = 3.0 * np.sin(3 * X[:, 0]) + 2.0 * (X[:, 1] > 0.5) + 0.3 * rng.normal(size=n) + 1000.0
    return X, y


def _loo(idata):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Pareto k of a few rows on 80 of them
        return bt.loo(idata)


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # short chains: the table is checked below
        return est.fit(X, y)


@pytest.fixture(scope="module")
def reg():
    X, y = _reg_data()
    return _fit(bt.BARTRegressor(**KW), X, y), X, y


@pytest.fixture(scope="module")
def clf():
    rng = np.random.default_rng(1)
    X = rng.random((120, 3))
    labels = np.where((X[:, 0] > 0.5) ^ (rng.random(120) < 0.1), "yes", "no")
    return _fit(bt.BARTClassifier(**KW), X, labels), X, labels


def test_regressor_shapes_and_response_units(reg):
    est, X, y = reg
    pred = est.predict(X)
    assert pred.shape == (len(y),)
    assert np.sqrt(np.mean((pred - y) ** 2)) < 0.6          # noise sd 0.3 around 1000 + a smooth function
    draws = est.predict_draws(X[:5])
    assert draws.shape == (120, 5)
    iv = est.predict_interval(X[:5], 0.9)
    assert iv.shape == (5, 2) and np.all(iv[:, 0] <= pred[:5] + 1e-9) and np.all(pred[:5] <= iv[:, 1] + 1e-9)
    assert set(est.acceptance_) == {"grow", "prune", "change", "swap"}
    assert float(est.idata_.posterior["sigma"].mean()) == pytest.approx(0.3, rel=0.5)
    # the fitted function at the training rows is the sum of the kept trees there
    np.testing.assert_allclose(est.predict_draws(X).reshape(est.result_.mu.shape), est.result_.mu, rtol=0,
                               atol=1e-3)
    # new rows of any number: one row, and more rows than training rows
    assert est.predict(X[:1]).shape == (1,)
    big = np.random.default_rng(9).random((1000, 3))
    assert est.predict(big).shape == (1000,)
    assert est.convergence_.table["sigma"]["ess_bulk"] > 0          # the MCMC table, as every MCMC family


def test_posterior_contract(reg, tmp_path):
    est, X, y = reg
    idata = est.idata_
    assert {"posterior", "trees", "log_likelihood", "observed_data", "constant_data", "sample_stats"} <= set(
        idata.groups())
    post = idata.posterior
    assert set(post.data_vars) == {"n_leaves", "depth", "split_counts", "sigma", "mu"}
    assert post["n_leaves"].dims == ("chain", "draw", "tree") and post.sizes["tree"] == KW["m"]
    assert post["split_counts"].dims == ("chain", "draw", "feature")
    assert post["mu"].dims == ("chain", "draw", "obs")
    assert int(post["split_counts"].sum()) == int((post["n_leaves"] - 1).sum())   # one split per extra leaf
    assert {"lp", "accepted", "move_possible", "at_max_depth"} <= set(idata.sample_stats.data_vars)
    ll = idata.log_likelihood["y"]
    assert ll.dims == ("chain", "draw", "obs") and np.all(np.isfinite(ll.values))
    assert np.isfinite(_loo(idata).elpd_loo)
    for g in idata.groups():
        assert idata[g].attrs["family"] == "bart"
    path = tmp_path / "idata.nc"
    idata.to_netcdf(str(path))
    back = az.from_netcdf(str(path))
    trees = bt.convert.trees_from_inferencedata(back)
    assert trees.feature.shape[:3] == (2, 60, KW["m"])
    # the trees of the file add up to the function (plus the offset in the attributes)
    from bayestrees.tree import predict

    vals = np.asarray(predict(bt.tree.index_tree(trees, (0, 0)), est.binner_.transform(X)))[..., 0].sum(0)
    np.testing.assert_allclose(vals + back.posterior.attrs["bart_offset"], post["mu"].values[0, 0], atol=1e-3)


def test_new_rows_are_validated_as_in_fit(reg):
    est, X, _ = reg
    gap = X[:3].copy()
    gap[1, 2] = np.nan   # a feature without missing training values: the row goes right at its splits
    assert np.all(np.isfinite(est.predict(gap)))
    bad = X[:3].copy()
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match="infinite"):
        est.predict(bad)
    with pytest.raises(ValueError, match="infinite"):
        bt.BARTRegressor(**KW).fit(bad, np.ones(3))
    with pytest.raises(ValueError, match="features"):
        est.predict(X[:3, :2])


def test_save_load_round_trip(reg, tmp_path):
    est, X, _ = reg
    _ = est.idata_
    est.save(tmp_path / "m.pkl")
    assert est.__dict__.get("_idata") is not None                 # saving keeps the estimator's own idata_
    back = bt.load(tmp_path / "m.pkl")
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    np.testing.assert_array_equal(back.idata_.posterior["mu"].values, est.idata_.posterior["mu"].values)


@pytest.mark.slow
def test_friedman_sum_of_trees_beats_one_tree():
    """Friedman's function, n = 100, p = 10: BART's error against the true f is clearly below a single
    Bayesian CART tree's (on seeds 0-2: 1.70-1.83 against 3.19-3.35, ratios 0.53-0.55)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(100, 10))
    y = _friedman(X) + rng.normal(size=100)
    Xt = rng.uniform(size=(500, 10))
    bart = _fit(bt.BARTRegressor(m=50, draws=200, tune=300, chains=2, random_state=0), X, y)
    cart = _fit(bt.BayesianCARTRegressor(draws=500, tune=500, chains=2, scheme="moves", random_state=0), X, y)
    rmse = lambda est: float(np.sqrt(np.mean((est.predict(Xt) - _friedman(Xt)) ** 2)))  # noqa: E731
    assert rmse(bart) < 0.75 * rmse(cart), (rmse(bart), rmse(cart))
    assert rmse(bart) < 2.2


@pytest.mark.slow
def test_sparse_prior_finds_the_features_that_matter(reg):
    """Friedman's function of 5 of 25 features with the sparse Dirichlet prior: the posterior split
    probabilities are reported per feature, sum to 1, and put most of their mass on the 5 (their
    prior share is 5/25 = 0.2; data and fit seeds 0-2 gave 0.78-0.93, seed 0 0.93)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(200, 25))
    y = _friedman(X) + rng.normal(size=200)
    est = _fit(bt.BARTRegressor(m=20, sparse=True, draws=100, tune=200, chains=1, random_state=0), X, y)
    probs = est.idata_.posterior["split_probs"]
    assert probs.dims == ("chain", "draw", "feature") and probs.shape[-1] == 25
    np.testing.assert_allclose(probs.sum("feature"), 1.0, rtol=1e-4)
    assert float(probs.mean(("chain", "draw"))[:5].sum()) > 0.6
    assert "sparse_alpha" in est.idata_.posterior
    assert "split_probs" not in reg[0].idata_.posterior          # only with the sparse prior


def test_probit_classifier(clf):
    est, X, labels = clf
    proba = est.predict_proba(X)
    assert proba.shape == (len(labels), 2) and np.allclose(proba.sum(1), 1.0)
    assert list(est.classes_) == ["no", "yes"]
    rng = np.random.default_rng(2)
    Xt = rng.random((400, 3))
    truth = np.where(Xt[:, 0] > 0.5, "yes", "no")
    assert np.mean(est.predict(Xt) == truth) > 0.9                  # the Bayes rule's accuracy is 1 here
    draws = est.predict_draws(Xt[:4])
    assert draws.shape == (120, 4, 2)
    assert est.predict_interval(Xt[:4]).shape == (4, 2, 2)
    idata = est.idata_
    assert idata.posterior["mu"].dims == ("chain", "draw", "obs", "class")
    assert "sigma" not in idata.posterior
    assert np.isfinite(_loo(idata).elpd_loo)
    assert idata.posterior.attrs["link"] == "probit"


def test_settings_that_several_classes_do_not_take_are_refused_by_name():
    rng = np.random.default_rng(3)
    X = rng.random((30, 2))
    y = rng.integers(0, 3, 30)
    for params, name in (({"sparse": True}, "sparse prior"), ({"data_devices": 2}, "rows across devices")):
        with pytest.raises(ValueError, match=f"BART for 3 classes.*{name}"):
            bt.BARTClassifier(**{**KW, **params}).fit(X, y)


def test_model_context_sample_and_predictions():
    X, y = _reg_data()
    with bt.Model():
        xd = bt.Data("X", X)
        bt.BART("f", xd, y, m=20, max_depth=3, max_bins=16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            idata = bt.sample(draws=60, tune=150, chains=2, random_seed=0)
        bt.set_data({"X": X[:7]})
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True, random_seed=1)
    assert idata.posterior.attrs["family"] == "bart"
    pred = idata.predictions
    assert pred["f"].shape == (2, 60, 7) and pred["f_mu"].shape == (2, 60, 7)
    # the function of the predictions is the posterior's mu at those rows
    np.testing.assert_allclose(pred["f_mu"].values, idata.posterior["mu"].values[..., :7], atol=1e-3)
    resid = (pred["f"] - pred["f_mu"]).values.ravel()
    assert 0.1 < resid.std() < 0.8                                   # a draw of y scatters by sigma


@pytest.mark.parametrize("kw, msg", [
    (dict(m=0), "m"), (dict(k=0.0), "k"), (dict(nu=-1.0), "nu"), (dict(q=1.5), "q"), (dict(alpha=1.5), "alpha"),
    (dict(draws=0), "draws"), (dict(max_depth=40), "max_depth"), (dict(sigma_hat=-1.0), "sigma_hat"),
    (dict(fixed_sigma=0.0), "fixed_sigma"), (dict(move_probs=(0.3, 0.2, 0.4, 0.1)), "move_probs"),
    (dict(chain_method="pmap"), "chain_method"), (dict(slide=-1), "slide"),
    (dict(slide=2, move_probs=(0.25, 0.25, 0.4, 0.1)), "swap and rotate must be 0"), (dict(slide=2), "change probability"),
    (dict(slide=2, move_probs=(0.25, 0.25, 0.4, 0.0, 0.1)), "swap and rotate must be 0"),
    (dict(move_probs=(0.2, 0.2, 0.2, 0.2, 0.1, 0.1)), "move_probs"),
    (dict(temperatures=(0.5, 1.0)), "temperatures"), (dict(temperatures=(1.0, 0.0)), "temperatures")])
def test_bad_parameters(kw, msg):
    X, y = _reg_data(20)
    with pytest.raises(ValueError, match=msg):
        bt.BARTRegressor(**{**KW, **kw}).fit(X, y)


def test_a_tempered_fit_keeps_the_cold_replica():
    """``temperatures``: each chain a ladder of replicas; the fit keeps the first replica's draws, in the
    shapes of an untempered fit, and says where tempering cannot go (probit)."""
    X, y = _reg_data(40)
    reg = bt.BARTRegressor(**{**KW, "temperatures": (1.0, 0.5)}).fit(X, y)
    post = reg.idata_.posterior
    assert post["sigma"].shape == (KW["chains"], KW["draws"]) and np.all(np.isfinite(post["mu"].values))
    assert reg.predict(X[:5]).shape == (5,)
    assert "temperatures" not in bt.BARTClassifier().get_params()
    from bayestrees.inference.bart import kernel as K
    from bayestrees.priors import ChipmanPrior

    with pytest.raises(ValueError, match="probit"):
        K.KernelConfig(prior=ChipmanPrior(0.95, 2.0), tau2=1.0, max_depth=2, m=2, probit=True, sample_sigma=False,
                       temperatures=(1.0, 0.5))


@pytest.mark.parametrize("make", [lambda: bt.BARTRegressor(**KW), lambda: bt.BARTRegressor(**{**KW, "sparse": True}),
                                  lambda: bt.BARTClassifier(**KW)], ids=["regression", "sparse", "probit"])
def test_fit_reports_convergence_without_building_the_inferencedata(make):
    """``fit`` reads the convergence table's draws from the result (the InferenceData, with its trees,
    is built when first asked for): the same table as the one read from the InferenceData."""
    from bayestrees.convergence import check_convergence

    X, y = _reg_data(40)
    est = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y if isinstance(est, bt.BARTRegressor) else y > np.median(y))
    assert est._idata is None                        # not built by fit
    assert est.convergence_.table == check_convergence(est.idata_).table
    assert est.convergence_.message() == check_convergence(est.idata_).message()


def test_a_response_beyond_float32_and_too_few_rows_are_said():
    """``y`` of 1e200 fails before sampling, saying what to do; fewer rows than two leaves need warn that
    every tree stays one leaf (the fit is still valid: a constant)."""
    X, y = _reg_data(20)
    with pytest.raises(ValueError, match="float32"):
        bt.BARTRegressor(**KW).fit(X, y * 1e200)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bt.BARTRegressor(**{**KW, "draws": 5, "tune": 5}).fit(X[:3], y[:3])
    assert any("no tree can split" in str(w.message) for w in caught)
