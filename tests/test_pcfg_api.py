"""BCART-PCFG public API: estimators, model context, bad input, memory guard."""
from __future__ import annotations

import numpy as np
import pytest

import bayestrees as bt
from bayestrees.estimators.base import NotFittedError
from bayestrees.inference.pcfg_structure import build_box_structure, estimate_box_memory, n_boxes
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
    return bt.PCFGTreeClassifier(max_bins=5, n_samples=50, random_state=0).fit(X, y)


def test_classifier_fit_predict(iris_split, iris_clf):
    X, y, Xt, yt = iris_split
    clf = iris_clf
    assert clf.map_tree_.n_nodes.shape == ()
    assert np.isfinite(clf.log_evidence_) and clf.log_evidence_ < 0
    assert clf.idata_.posterior.sizes["draw"] == 50
    assert "lp" in clf.idata_.sample_stats
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
    reg = bt.PCFGTreeRegressor(max_bins=4, n_samples=20, random_state=0).fit(X, y)
    for pw in ("map", "posterior", "samples"):
        reg.set_params(predict_with=pw)
        assert reg.score(X, y) > 0.95
    assert int(n_leaves(reg.map_tree_)) == 2


@pytest.mark.parametrize("kwargs, match", [
    (dict(phi=0.0), "phi must be"),
    (dict(phi=-1.0), "phi must be"),
    (dict(log_phi=float("nan")), "log_phi"),
    (dict(alpha=0.0), "alpha must be > 0"),
    (dict(alpha=[1.0, -1.0, 1.0]), "alpha must be > 0"),
    (dict(alpha=[1.0, 1.0]), "one value per class"),
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
    clf = bt.PCFGTreeClassifier(max_bins=3, n_samples=5).fit(X, y)
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
    assert np.isfinite(t.posterior_.log_evidence)


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
    clf = bt.PCFGTreeClassifier(method="row", n_samples=10, random_state=0).fit(X, y)
    assert clf.posterior_.structure.method == "row"
    assert clf.score(Xt, yt) == 1.0
    assert int(n_leaves(clf.map_tree_)) == 8
