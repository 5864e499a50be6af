"""BCART-PCFG public API: estimators, model context, bad input, memory guard."""
from __future__ import annotations

import numpy as np
import pytest

import bayestrees as bt
from bayestrees.estimators.base import NotFittedError
from bayestrees.inference.pcfg.structure import build_box_structure, estimate_box_memory, n_boxes
from bayestrees.tree import n_leaves


@pytest.fixture(scope="module")
def iris_split():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.permutation(150)
    return X[idx[:100]], y[idx[:100]], X[idx[100:]], y[idx[100:]]


@pytest.fixture(scope="module")
def iris_clf(iris_split):
    X, y, _, _ = iris_split
    return bt.PCFGTreeClassifier(max_bins=5, draws=50, random_state=0).fit(X, y)


def test_classifier_fit_predict(iris_split, iris_clf):
    X, y, Xt, yt = iris_split
    clf = iris_clf
    assert clf.map_tree_.n_nodes.shape == ()
    assert np.isfinite(clf.log_evidence_) and clf.log_evidence_ < 0
    assert clf.idata_.posterior.sizes["draw"] == 50
    assert "lp" in clf.idata_.sample_stats
    assert np.all(clf.idata_.sample_stats["lp"].values <= 0)          # log posterior probabilities of trees
    assert clf.idata_.log_likelihood["y"].shape == (1, 50, len(X))
    assert np.all(clf.idata_.log_likelihood["y"].values < 0)
    for pw in ("map", "posterior", "samples"):
        clf.set_params(predict_with=pw)
        p = clf.predict_proba(Xt)
        assert p.shape == (len(Xt), 3)
        np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-5)
        assert clf.score(Xt, yt) > 0.85      # iris is easy; every mode should beat 0.85 on this split
    clf.set_params(predict_with="map")
    # the MAP tree is small (a few leaves), far smaller than the number of rows
    assert 2 <= int(n_leaves(clf.map_tree_)) <= 8
    rs = clf.root_split_posterior()
    assert sum(p for _, p in rs) == pytest.approx(1.0, rel=1e-4)
    dist = clf.n_leaves_posterior(24)
    assert dist.shape == (24,) and 0.5 < dist.sum() <= 1.0 + 1e-5
    lp = clf.log_predictive(Xt, yt)
    assert lp.shape == (len(Xt),) and np.all(lp <= 0)


def test_classifier_unseen_labels_and_not_fitted(iris_split, iris_clf):
    X, y, Xt, yt = iris_split
    with pytest.raises(ValueError, match="unseen"):
        iris_clf.log_predictive(Xt, np.full(len(Xt), 7))
    with pytest.raises(NotFittedError):
        bt.PCFGTreeClassifier().predict(Xt)


def test_regressor_fit_predict():
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.integers(0, 4, 80), rng.uniform(size=80)])   # feature 0 binned exactly
    y = np.where(X[:, 0] >= 2, 3.0, -1.0) + 0.1 * rng.normal(size=80)
    reg = bt.PCFGTreeRegressor(max_bins=4, draws=20, random_state=0).fit(X, y)
    for pw in ("map", "posterior", "samples"):
        reg.set_params(predict_with=pw)
        assert reg.score(X, y) > 0.95
    assert int(n_leaves(reg.map_tree_)) == 2


@pytest.mark.parametrize("kwargs, match", [
    (dict(phi=0.0), "phi must be"),
    (dict(phi=-1.0), "phi must be"),
    (dict(log_phi=float("nan")), "log_phi"),
    (dict(leaf_concentration=0.0), "alpha must be > 0"),
    (dict(leaf_concentration=[1.0, -1.0, 1.0]), "alpha must be > 0"),
    (dict(leaf_concentration=[1.0, 1.0]), "one value per class"),
    (dict(predict_with="mean"), "predict_with"),
])
def test_bad_hyperparameters(iris_split, kwargs, match):
    X, y, _, _ = iris_split
    with pytest.raises(ValueError, match=match):
        bt.PCFGTreeClassifier(max_bins=3, **kwargs).fit(X[:30], y[:30])


def test_bad_data():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(20, 3))
    y = rng.integers(0, 2, 20)
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        bt.PCFGTreeClassifier(max_bins=3).fit(Xn, y)
    Xc = X.copy()
    Xc[:, 2] = 1.0
    with pytest.raises(ValueError, match="constant"):
        bt.PCFGTreeClassifier(max_bins=3).fit(Xc, y)
    with pytest.raises(ValueError, match="one class"):
        bt.PCFGTreeClassifier(max_bins=3).fit(X, np.zeros(20))
    clf = bt.PCFGTreeClassifier(max_bins=3, draws=5).fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        clf.predict(Xn)


def test_memory_budget_refused_before_allocation():
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 10, size=(50, 8))
    nb = [10] * 8
    need = estimate_box_memory(nb, 2)
    assert n_boxes(nb) == 55 ** 8
    with pytest.raises(ValueError, match=r"8 features with bin counts \[10, 10"):
        build_box_structure(codes, nb, np.eye(2)[codes[:, 0] % 2])     # default 4 GB budget: needs ~7e15 bytes
    assert need > 4 * 1024**3
    X = rng.normal(size=(40, 4))
    y = rng.integers(0, 2, 40)
    with pytest.raises(ValueError, match="max_bins or the number of features"):
        bt.PCFGTreeClassifier(max_bins=10, memory_budget=10_000).fit(X, y)


def test_model_context(iris_split):
    X, y, Xt, yt = iris_split
    with bt.Model():
        Xd = bt.Data("X", X)
        t = bt.PCFGTree("t", Xd, y, max_bins=4)
        idata = bt.sample(draws=30, chains=2, random_seed=0)
        bt.set_data({"X": Xt})
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True, random_seed=1)
    assert idata.posterior.sizes["chain"] == 2 and idata.posterior.sizes["draw"] == 30
    assert idata.predictions["t"].shape == (2, 30, len(Xt))
    assert float((idata.predictions["t"].values == yt).mean()) > 0.8
    assert idata.predictions["t_proba"].dims == ("chain", "draw", "obs", "class")
    assert list(idata.predictions["t_proba"]["class"].values) == [str(c) for c in np.unique(y)]
    assert idata.predictions["t_proba"].shape == (2, 30, len(Xt), 3)
    np.testing.assert_allclose(idata.predictions["t_proba"].values.sum(-1), 1.0, rtol=1e-5)
    assert np.isfinite(t.posterior_.log_evidence)
    assert idata.log_likelihood["t"].shape == (2, 30, len(X)) and idata.observed_data["t"].shape == (len(X),)


def test_row_method_hidden_xor():
    """Binary features, label = XOR of the first three: the row programme finds the 8-leaf tree.

    (The 20-feature, 4-way version runs in benchmarks/pcfg_paper.py; here a
    smaller one keeps the suite fast.)
    """
    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, size=(64, 10)).astype(float)
    y = X[:, :3].sum(1) % 2
    Xt = rng.integers(0, 2, size=(300, 10)).astype(float)
    yt = Xt[:, :3].sum(1) % 2
    with pytest.raises(ValueError, match="10 features"):
        bt.PCFGTreeClassifier(memory_budget=10**6).fit(X, y)      # 3**10 boxes: over a 1 MB budget
    clf = bt.PCFGTreeClassifier(method="row", draws=10, random_state=0).fit(X, y)
    assert clf.posterior_.structure.method == "row"
    assert clf.score(Xt, yt) == 1.0
    assert int(n_leaves(clf.map_tree_)) == 8


# --- the posterior contract ------------------------------------------------------------------------------

def _reg_data(n=80, seed=1):
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.integers(0, 4, n), rng.uniform(size=n)])
    y = np.where(X[:, 0] >= 2, 3.0, -1.0) + 0.1 * rng.normal(size=n)
    return X, y


@pytest.fixture(scope="module")
def iris_reg():
    X, y = _reg_data()
    return X, y, bt.PCFGTreeRegressor(max_bins=4, draws=200, random_state=0).fit(X, y)


def _summary_names(idata):
    import arviz as az
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # one chain: ArviZ warns that R-hat needs two
        return {str(i).split("[")[0] for i in az.summary(idata).index}


def test_contract_classifier(iris_split, iris_clf):
    """posterior: n_leaves/depth/split_counts/mu only; mu = drawn leaf probabilities = the trees group's leaves."""
    from bayestrees.convert import trees_from_inferencedata
    from bayestrees.tree import predict

    X, y, _, _ = iris_split
    idata = iris_clf.idata_
    assert set(idata.posterior.data_vars) == {"n_leaves", "depth", "split_counts", "mu"}
    assert _summary_names(idata) == {"n_leaves", "depth", "split_counts", "mu"}
    mu = idata.posterior["mu"]
    assert mu.dims == ("chain", "draw", "obs", "class") and mu.shape == (1, 50, len(X), 3)
    assert list(mu["class"].values) == [str(c) for c in iris_clf.classes_]
    np.testing.assert_allclose(mu.values.sum(-1), 1.0, rtol=1e-5)
    trees = trees_from_inferencedata(idata)
    codes = iris_clf.binner_.transform(X).astype(np.int32)
    np.testing.assert_allclose(np.asarray(predict(trees, codes)), mu.values, rtol=1e-6)
    # the pointwise log-likelihood is the categorical density of the drawn probabilities
    yc = np.searchsorted(iris_clf.classes_, y)
    ref = np.log(np.take_along_axis(mu.values, yc[None, None, :, None], -1)[..., 0])
    np.testing.assert_allclose(idata.log_likelihood["y"].values, ref, rtol=1e-5)
    # draws are of the parameters, not the leaf predictive: they differ between draws of one tree
    np.testing.assert_array_equal(idata.observed_data["y"].values, y)
    assert list(idata.constant_data["feature_names"].values) == ["x0", "x1", "x2", "x3"]
    np.testing.assert_array_equal(idata.constant_data["n_bins"].values, iris_clf.binner_.n_bins_)
    assert "sigma" not in idata.posterior
    assert idata.posterior.attrs["family"] == "pcfg" and idata.posterior.attrs["task"] == "classification"


def test_contract_regressor(iris_reg):
    from bayestrees.convert import trees_from_inferencedata
    from bayestrees.tree import predict

    X, y, reg = iris_reg
    idata = reg.idata_
    assert set(idata.posterior.data_vars) == {"n_leaves", "depth", "split_counts", "mu"}
    assert _summary_names(idata) == {"n_leaves", "depth", "split_counts", "mu"}
    mu = idata.posterior["mu"]
    assert mu.dims == ("chain", "draw", "obs") and mu.shape == (1, 200, len(X))
    codes = reg.binner_.transform(X).astype(np.int32)
    np.testing.assert_allclose(np.asarray(predict(trees_from_inferencedata(idata), codes))[..., 0], mu.values,
                               rtol=1e-6)
    ll = idata.log_likelihood["y"].values
    assert ll.shape == (1, 200, len(X)) and np.all(np.isfinite(ll))
    # the drawn leaf means sit near the two group means (noise sd 0.1, 40 rows a side)
    grp = X[:, 0] >= 2
    assert abs(mu.values[..., grp].mean() - y[grp].mean()) < 0.1
    assert abs(mu.values[..., ~grp].mean() - y[~grp].mean()) < 0.1
    assert idata.posterior.attrs["task"] == "regression"


def test_loo_for_classifier_and_regressor(iris_clf, iris_reg):
    import warnings

    for est in (iris_clf, iris_reg[2]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")                   # Pareto k warnings on few draws
            res = bt.loo(est.idata_)
        n = est.idata_.observed_data["y"].shape[0]
        assert np.isfinite(res["elpd_loo"]) and res["n_data_points"] == n
        # elpd_loo is at most the in-sample log predictive density (lppd)
        ll = est.idata_.log_likelihood["y"].values.reshape(-1, n)
        lppd = float(np.sum(np.log(np.mean(np.exp(ll), 0))))
        assert res["elpd_loo"] <= lppd + 1e-6


def test_trees_group_netcdf_round_trip(tmp_path, iris_clf):
    import arviz as az
    from bayestrees.convert import trees_from_inferencedata

    path = tmp_path / "pcfg.nc"
    iris_clf.idata_.to_netcdf(str(path))
    back = az.from_netcdf(str(path))
    a, b = trees_from_inferencedata(iris_clf.idata_), trees_from_inferencedata(back)
    for f in a._fields:
        np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), err_msg=f)
    np.testing.assert_array_equal(back.posterior["mu"].values, iris_clf.idata_.posterior["mu"].values)
    np.testing.assert_array_equal(back.sample_stats["lp"].values, iris_clf.idata_.sample_stats["lp"].values)
    assert back.trees.attrs["family"] == "pcfg"


def test_model_variable_and_estimator_share_one_fit(iris_split):
    """Same seed, data and hyperparameters: bt.PCFGTree and the classifier give the same draws."""
    X, y, _, _ = iris_split
    clf = bt.PCFGTreeClassifier(max_bins=4, draws=20, random_state=3).fit(X, y)
    with bt.Model():
        bt.PCFGTree("t", bt.Data("X", X), y, max_bins=4)
        idata = bt.sample(draws=20, chains=1, random_seed=3)
    np.testing.assert_array_equal(idata.sample_stats["lp"].values, clf.idata_.sample_stats["lp"].values)
    np.testing.assert_array_equal(idata.posterior["mu"].values, clf.idata_.posterior["mu"].values)
    np.testing.assert_array_equal(idata.log_likelihood["t"].values, clf.idata_.log_likelihood["y"].values)


def test_model_regression_predictions_naming():
    """Regression: ``t`` (drawn responses) and ``t_mu`` (drawn leaf means); at the training rows t_mu is mu."""
    X, y = _reg_data(60, seed=4)
    with bt.Model():
        Xd = bt.Data("X", X)
        t = bt.PCFGTree("t", Xd, y, max_bins=4)
        assert t.task == "regression"                         # data.infer_task: non-integer floats
        idata = bt.sample(draws=100, chains=2, random_seed=0)
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, random_seed=1)
        bt.set_data({"X": X[:7]})
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True, random_seed=2)
    pp = idata.posterior_predictive
    assert set(pp.data_vars) == {"t", "t_mu"} and pp["t"].shape == (2, 100, len(X))
    np.testing.assert_array_equal(pp["t_mu"].values, idata.posterior["mu"].values)
    assert set(idata.predictions.data_vars) == {"t", "t_mu"}
    np.testing.assert_array_equal(idata.predictions["t_mu"].values, idata.posterior["mu"].values[..., :7])
    # drawn responses scatter around the drawn means with the leaves' posterior noise variance: with the
    # default prior NIG(mean(y), 0.1, 2, var(y)) and one leaf per group, E[s2] ~ b_n / (a_n - 1) in each group
    from bayestrees.leaves import default_nig_prior

    assert np.all(idata.posterior["n_leaves"].values == 2)
    r = pp["t"].values - pp["t_mu"].values
    _, _, a0, b0 = default_nig_prior(y)
    for grp in (X[:, 0] >= 2, X[:, 0] < 2):
        yg = y[grp]
        e_s2 = (b0 + 0.5 * np.sum((yg - yg.mean()) ** 2)) / (a0 + len(yg) / 2 - 1)
        assert abs(r[..., grp].mean()) < 5 * np.sqrt(e_s2 / r[..., grp].size)
        assert 0.8 * e_s2 < np.mean(r[..., grp] ** 2) < 1.2 * e_s2
    assert set(idata.log_likelihood.data_vars) == {"t"}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.isfinite(bt.loo(idata)["elpd_loo"])


def test_model_task_inference_and_checks():
    """"auto" uses data.infer_task; kind= is the former name; PCFG's own data checks give clear errors."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 2))
    with bt.Model():
        assert bt.PCFGTree("a", X, rng.integers(0, 3, 30).astype(float)).task == "classification"
    with bt.Model():
        assert bt.PCFGTree("b", X, rng.normal(size=30)).task == "regression"
    with bt.Model():
        assert bt.PCFGTree("c", X, rng.integers(0, 3, 30), kind="regression").task == "regression"
    with bt.Model():
        with pytest.raises(ValueError, match="task must be"):
            bt.PCFGTree("d", X, rng.integers(0, 3, 30), task="ranking")
    with bt.Model():
        with pytest.raises(ValueError, match="log_phi"):
            bt.PCFGTree("e", X, rng.integers(0, 3, 30), log_phi=float("inf"))
    Xn = X.copy()
    Xn[0, 1] = np.nan
    with bt.Model():
        bt.PCFGTree("f", Xn, rng.integers(0, 2, 30))
        with pytest.raises(ValueError, match="NaN"):
            bt.sample(draws=2)


def test_fit_pcfg_checks_prepared_data_and_config():
    """fit_pcfg refuses data with missing values or constant features, whoever prepared it."""
    from bayestrees.data import prepare_data
    from bayestrees.inference.pcfg.fit import PCFGConfig, fit_pcfg
    from bayestrees.keys import make_key

    rng = np.random.default_rng(6)
    X = rng.normal(size=(25, 3))
    y = rng.integers(0, 2, 25)
    Xn = X.copy()
    Xn[2, 2] = np.nan
    with pytest.raises(ValueError, match=r"missing values \(NaN\): features \['x2'\]"):
        fit_pcfg(make_key(0), prepare_data(Xn, y, max_bins=4), PCFGConfig())
    Xc = X.copy()
    Xc[:, 0] = 2.0
    with pytest.raises(ValueError, match=r"features \['x0'\] are constant"):
        fit_pcfg(make_key(0), prepare_data(Xc, y, max_bins=4), PCFGConfig())
    with pytest.raises(ValueError, match="one value per class"):
        fit_pcfg(make_key(0), prepare_data(X, y, max_bins=4), PCFGConfig(leaf_concentration=[1.0, 2.0, 3.0]))
    for bad, match in ((dict(draws=0), "draws"), (dict(chains=1.5), "chains"), (dict(method="dense"), "method"),
                       (dict(max_bins=1), "max_bins"), (dict(memory_budget=-1), "memory_budget"),
                       (dict(leaf_concentration=[[1.0]]), "alpha"), (dict(dtype="float16"), "dtype must be one of")):
        with pytest.raises(ValueError, match=match):
            PCFGConfig(**bad)
    res = fit_pcfg(make_key(0), prepare_data(X, y, max_bins=4), PCFGConfig(draws=4, chains=2))
    assert res.mu.shape == (2, 4, 25, 2) and res.lp.shape == (2, 4) and res.trees.feature.shape[:2] == (2, 4)


def test_model_module_imports_no_estimator():
    """bt.PCFGTree is a sibling of the estimators over fit_pcfg: models/pcfg.py imports nothing from estimators."""
    import ast
    from pathlib import Path

    import bayestrees.models.pcfg as mod

    tree = ast.parse(Path(mod.__file__).read_text())
    imported = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
    assert any("inference.pcfg" in m for m in imported)                  # the parser sees the real imports
    assert not [m for m in imported if "estimators" in m], imported
