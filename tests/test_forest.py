"""Forest estimators, model context, posterior views and outputs."""
import arviz as az
import numpy as np
import pytest

import bayestrees as bt
from bayestrees.convert import trees_from_inferencedata
from bayestrees.posterior import split_posterior, summarize_draws, trunk_stability


@pytest.fixture(scope="module")
def reg_data():
    r = np.random.default_rng(7)
    X = r.uniform(-2, 2, size=(300, 3))
    y = np.where(X[:, 0] > 0, 2.0, -1.0) + 0.5 * X[:, 1] + 0.2 * r.normal(size=300)
    return X, y


@pytest.fixture(scope="module")
def bf(reg_data):
    X, y = reg_data
    return bt.BayesianForestRegressor(n_estimators=24, min_samples_leaf=3, random_state=0).fit(X, y)


def test_bayesian_forest_predicts_well_and_draws_vary(bf, reg_data):
    X, y = reg_data
    draws = bf.predict_draws(X)
    assert draws.shape == (24, 300)
    np.testing.assert_allclose(bf.predict(X), draws.mean(0), rtol=1e-6)
    assert np.sqrt(np.mean((bf.predict(X) - y) ** 2)) < 0.35
    assert np.all(draws.std(0) > 0)  # the posterior is not a point mass
    lo_hi = bf.predict_interval(X, 0.9)
    assert lo_hi.shape == (300, 2) and np.all(lo_hi[:, 0] <= lo_hi[:, 1])


def test_same_seed_same_forest(reg_data):
    X, y = reg_data
    a = bt.BayesianForestRegressor(8, random_state=3).fit(X, y).predict_draws(X)
    b = bt.BayesianForestRegressor(8, random_state=3).fit(X, y).predict_draws(X)
    c = bt.BayesianForestRegressor(8, random_state=4).fit(X, y).predict_draws(X)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_single_unweighted_tree_is_cart(reg_data):
    from sklearn.tree import DecisionTreeRegressor

    X, y = reg_data
    Xi = np.round(X * 20)  # <= 255 distinct values: exact bins
    dt = bt.BayesianForestRegressor(1, weights="none", min_samples_leaf=5).fit(Xi, y)
    sk = DecisionTreeRegressor(min_samples_leaf=5, random_state=0).fit(Xi, y)
    np.testing.assert_allclose(dt.predict(Xi), sk.predict(Xi), rtol=1e-4, atol=1e-4)
    assert dt.n_leaves_[0] == sk.get_n_leaves()


def test_random_forest_weights_are_bootstrap_counts(reg_data):
    from bayestrees.inference.bootstrap import draw_weights
    import jax

    w = np.asarray(draw_weights(jax.random.key(0), 500, "multinomial"))
    assert w.sum() == 500 and np.all(w == np.round(w))
    # about 1 - 1/e of rows are drawn at least once
    assert abs(np.mean(w > 0) - (1 - np.exp(-1))) < 0.05
    e = np.asarray(draw_weights(jax.random.key(1), 20000, "exponential"))
    assert abs(e.mean() - 1) < 0.03 and abs(e.var() - 1) < 0.06


def test_empirical_bayesian_forest_keeps_the_trunk(reg_data):
    X, y = reg_data
    ebf = bt.EmpiricalBayesianForestRegressor(12, trunk_min_samples_leaf=60, min_samples_leaf=3,
                                              random_state=0).fit(X, y)
    trunk = ebf.trunk_
    internal = np.flatnonzero(np.asarray(trunk.left) >= 0)
    assert len(internal) >= 1
    # every tree starts with the trunk's splits
    for i in range(12):
        t = ebf.tree(i)
        np.testing.assert_array_equal(np.asarray(t.feature)[internal], np.asarray(trunk.feature)[internal])
        np.testing.assert_array_equal(np.asarray(t.threshold)[internal], np.asarray(trunk.threshold)[internal])
    assert np.sqrt(np.mean((ebf.predict(X) - y) ** 2)) < 0.4


def test_sub_sample_forest_trees_see_one_block(reg_data):
    X, y = reg_data
    ssf = bt.SubSampleForestRegressor(10, n_blocks=5, min_samples_leaf=2, random_state=0).fit(X, y)
    counts = np.asarray(ssf.trees_.count)[:, 0]  # rows of positive weight at each root
    assert np.all(counts == 60)  # 300 rows / 5 blocks
    assert np.bincount(ssf.block_of_row_).tolist() == [60] * 5


def test_classifier_probabilities(reg_data):
    X, y = reg_data
    labels = np.where(y > 0.5, "hi", "lo")
    clf = bt.BayesianForestClassifier(16, min_samples_leaf=2, random_state=0).fit(X, labels)
    p = clf.predict_proba(X)
    assert p.shape == (300, 2)
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-5)
    assert set(clf.predict(X)) <= {"hi", "lo"}
    assert np.mean(clf.predict(X) == labels) > 0.9
    assert clf.predict_draws(X).shape == (16, 300, 2)
    for cls in (bt.EmpiricalBayesianForestClassifier(4, trunk_min_samples_leaf=50, random_state=0),
                bt.SubSampleForestClassifier(4, n_blocks=2, random_state=0)):
        assert np.mean(cls.fit(X, labels).predict(X) == labels) > 0.8


def test_missing_values_and_dataframes(reg_data):
    import pandas as pd

    X, y = reg_data
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    df["cat"] = pd.Categorical(np.where(X[:, 0] > 0, "pos", "neg"))
    df.loc[::7, "b"] = np.nan
    m = bt.BayesianForestRegressor(8, min_samples_leaf=3, random_state=0).fit(df, y)
    pred = m.predict(df)
    assert np.all(np.isfinite(pred)) and np.sqrt(np.mean((pred - y) ** 2)) < 0.5
    with pytest.raises(ValueError, match="unseen"):
        m.predict(df.assign(cat=pd.Categorical(["zero"] * len(df))))


def test_inferencedata_summary_netcdf_roundtrip(bf, tmp_path):
    idata = bf.idata_
    post = idata.posterior
    assert post.sizes["chain"] == 1 and post.sizes["draw"] == 24
    assert "node" in post["tree_feature"].dims
    np.testing.assert_array_equal(post["n_leaves"].values[0], bf.n_leaves_)
    summ = az.summary(idata, var_names=["n_leaves", "depth"], kind="stats")
    assert summ.loc["n_leaves", "mean"] == pytest.approx(bf.n_leaves_.mean(), abs=1e-3)  # summary rounds to 3 d.p.
    path = tmp_path / "forest.nc"
    idata.to_netcdf(str(path))
    back = az.from_netcdf(str(path))
    trees = trees_from_inferencedata(back)
    for a, b in zip(trees, bf.trees_):
        np.testing.assert_array_equal(np.asarray(a)[0], np.asarray(b))
    az.plot_posterior(idata, var_names=["n_leaves"])


def test_save_and_load(bf, reg_data, tmp_path):
    X, _ = reg_data
    bf.save(tmp_path / "m.pkl")
    m2 = bt.load(tmp_path / "m.pkl")
    np.testing.assert_array_equal(m2.predict(X), bf.predict(X))


def test_model_context_sample_and_predictions(reg_data):
    X, y = reg_data
    with bt.Model():
        xd = bt.Data("X", X)
        bt.BayesianForest("f", xd, y, min_samples_leaf=3)
        idata = bt.sample(draws=6, chains=2, random_seed=1)
        assert idata.posterior.sizes["chain"] == 2 and idata.posterior.sizes["draw"] == 6
        bt.set_data({"X": X[:17]})
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)
    pr = idata.predictions["f"]
    assert pr.shape == (2, 6, 17)
    assert np.sqrt(np.mean((pr.mean(("chain", "draw")).values - y[:17]) ** 2)) < 0.5


def test_model_context_errors(reg_data):
    X, y = reg_data
    with pytest.raises(ValueError, match="no model"):
        bt.Data("X", X)
    with bt.Model():
        with pytest.raises(ValueError, match="no tree variable"):
            bt.sample()
        bt.BayesianForest("f", X, y)
        with pytest.raises(ValueError, match="already"):
            bt.BayesianForest("f", X, y)
        with pytest.raises(ValueError, match="no data named"):
            bt.set_data({"Z": X})


def test_posterior_views(bf, reg_data):
    X, _ = reg_data
    s = summarize_draws(bf.predict_draws(X[:5]), prob=0.8)
    assert np.all(s["lower"] <= s["mean"]) and np.all(s["mean"] <= s["upper"])
    sp = split_posterior(bf.trees_, levels=2, binner=bf.binner_)
    assert sp[""]["p_split"] == 1.0
    assert sp[""]["feature"].most_common(1)[0][0] == 0  # the step in x0 is the root split


def test_trunk_stability_on_a_clear_trunk(reg_data):
    X, y = reg_data
    r = trunk_stability(X, y, trunk_min_samples_leaf=100, n_draws=20, levels=1, random_state=0)
    assert r.root_feature_frequency == {0: 1.0}
    assert r.sample_trunk_frequency == 1.0
    assert "root split feature" in r.table()


def test_tree_exports(bf):
    from bayestrees.tree import to_dict, to_dot, to_text

    t = bf.tree(0)
    txt = to_text(t, bf.binner_)
    assert txt.count("value:") == bf.n_leaves_[0]
    dot = to_dot(t, bf.binner_)
    assert dot.startswith("digraph") and dot.count("->") == 2 * (bf.n_leaves_[0] - 1)
    d = to_dict(t, bf.binner_)
    assert "left" in d and "threshold" in d


def test_no_recompilation_within_a_shape_bucket():
    """New data sizes in one bucket, other forest sizes, and BF/EBF (trunk fit included) reuse the compiled
    program; the sub-sample forest (rows of weight 0: no ``positive_weights`` shortcut) has one of its own.

    (The node capacity is static and depends on ``min_samples_leaf``, so that one is kept fixed.)
    """
    from bayestrees.inference import cart

    r = np.random.default_rng(3)
    X, y = r.normal(size=(120, 3)), r.normal(size=120)
    bt.BayesianForestRegressor(3, min_samples_leaf=2, random_state=0).fit(X[:100], y[:100])
    size = cart._fit_batch._cache_size()
    bt.BayesianForestRegressor(5, min_samples_leaf=2, random_state=1).fit(X[:110], y[:110])
    bt.EmpiricalBayesianForestRegressor(3, trunk_min_samples_leaf=30, min_samples_leaf=2, random_state=0).fit(X[:105], y[:105])
    assert cart._fit_batch._cache_size() == size
    bt.SubSampleForestRegressor(4, n_blocks=2, min_samples_leaf=2, random_state=0).fit(X[:120], y[:120])
    size_ssf = cart._fit_batch._cache_size()
    assert size_ssf <= size + 1
    bt.SubSampleForestRegressor(6, n_blocks=3, min_samples_leaf=2, random_state=1).fit(X[:101], y[:101])
    assert cart._fit_batch._cache_size() == size_ssf


def test_extra_trees_thresholds_stay_within_the_present_codes():
    """uint16 codes (more than 255 distinct values) and weightless MISSING padding rows: every random
    threshold must fall between a node's smallest and largest present code, so with min_samples_leaf=1
    and distinct values an extra tree splits until every leaf holds one row."""
    r = np.random.default_rng(5)
    X = r.permutation(700).astype(float)[:, None] + 0.5
    y = r.normal(size=700)
    et = bt.BayesianForestRegressor(3, weights="none", splitter="random", min_samples_leaf=1, random_state=0).fit(X, y)
    assert et.binner_.dtype_ == np.uint16
    np.testing.assert_array_equal(et.n_leaves_, [700, 700, 700])
