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
    return bt.BayesianForestRegressor(draws=24, min_samples_leaf=3, random_state=0).fit(X, y)


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
    from bayestrees.inference.forest.bootstrap import draw_weights
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


def test_inferencedata_follows_the_posterior_contract(bf, reg_data, tmp_path):
    X, y = reg_data
    idata = bf.idata_
    assert set(idata.groups()) == {"posterior", "trees", "observed_data", "constant_data"}  # no log_likelihood
    post = idata.posterior
    assert post.sizes["chain"] == 1 and post.sizes["draw"] == 24
    assert set(post.data_vars) == {"n_leaves", "depth", "split_counts", "mu"}  # no raw node arrays
    assert post.attrs["family"] == "bayesian_forest"
    np.testing.assert_array_equal(post["n_leaves"].values[0], bf.n_leaves_)
    np.testing.assert_array_equal(post["depth"].values[0], bf.depth_)
    internal = np.asarray(bf.trees_.left) >= 0
    feats = np.asarray(bf.trees_.feature)
    counts = np.stack([np.bincount(feats[t][internal[t]], minlength=3) for t in range(24)])
    np.testing.assert_array_equal(post["split_counts"].values[0], counts)
    assert list(post["split_counts"].coords["feature"].values) == ["x0", "x1", "x2"]
    # mu: each tree's prediction at the training rows, in the response's units
    assert post["mu"].dims == ("chain", "draw", "obs")
    np.testing.assert_array_equal(post["mu"].values[0], bf.predict_draws(X))
    np.testing.assert_array_equal(idata.observed_data["y"].values, y)
    assert list(idata.constant_data["feature_names"].values) == ["x0", "x1", "x2"]
    np.testing.assert_array_equal(idata.constant_data["n_bins"].values, bf.binner_.n_bins_)
    assert "node" in idata.trees["split_feature"].dims
    # az.summary with no arguments lists only the summaries: n_leaves, depth, split_counts, mu
    rows = az.summary(idata, kind="stats").index
    assert {r.split("[")[0] for r in rows} == {"n_leaves", "depth", "split_counts", "mu"}
    assert len(rows) == 2 + 3 + 300
    summ = az.summary(idata, var_names=["n_leaves"], kind="stats")
    assert summ.loc["n_leaves", "mean"] == pytest.approx(bf.n_leaves_.mean(), abs=1e-3)  # summary rounds to 3 d.p.
    # the trees survive a NetCDF round trip and predict as before
    path = tmp_path / "forest.nc"
    idata.to_netcdf(str(path))
    back = az.from_netcdf(str(path))
    trees = trees_from_inferencedata(back)
    for a, b in zip(trees, bf.trees_):
        np.testing.assert_array_equal(np.asarray(a)[0], np.asarray(b))
    from bayestrees.tree import predict

    flat = type(trees)(*(np.asarray(a)[0] for a in trees))
    pred = np.asarray(predict(flat, bf.binner_.transform(X), bf.config_.missing))[..., 0]
    np.testing.assert_array_equal(pred, back.posterior["mu"].values[0])
    az.plot_posterior(idata, var_names=["n_leaves"])


def test_loo_refuses_the_bootstrap_forests_with_a_clear_error(bf):
    """The Bayesian bootstrap defines no likelihood: bt.loo / bt.compare say so (not a bare ArviZ error)."""
    with pytest.raises(ValueError, match="Bayesian bootstrap.*no likelihood"):
        bt.loo(bf.idata_)
    with pytest.raises(ValueError, match="no likelihood"):
        bt.compare({"a": bf.idata_, "b": bf.idata_})


def test_classifier_inferencedata(reg_data):
    X, y = reg_data
    labels = np.where(y > 0.5, "hi", "lo")
    clf = bt.SubSampleForestClassifier(6, n_blocks=2, min_samples_leaf=2, random_state=0).fit(X, labels)
    idata = clf.idata_
    mu = idata.posterior["mu"]
    assert mu.dims == ("chain", "draw", "obs", "class")
    assert list(mu.coords["class"].values) == ["hi", "lo"]
    np.testing.assert_array_equal(mu.values[0], clf.predict_draws(X))
    np.testing.assert_allclose(mu.values.sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(idata.observed_data["y"].values, labels)
    assert idata.posterior.attrs["family"] == "bayesian_forest"
    assert idata.posterior.attrs["kind"] == "ssf"
    assert "log_likelihood" not in idata.groups()
    with pytest.raises(ValueError, match="no likelihood"):
        bt.loo(idata)


def test_float64_fit_is_exact_cart():
    """dtype="float64" (with x64 on) grows the same CART as scikit-learn to float64 precision; without
    x64 it is refused (never switched on behind the user's back)."""
    import jax
    from sklearn.tree import DecisionTreeRegressor

    r = np.random.default_rng(1)
    X = np.round(r.uniform(-2, 2, size=(150, 2)) * 10)
    y = 1e3 + np.where(X[:, 0] > 0, 2.0, -1.0) + 0.3 * r.normal(size=150)  # offset: float32 loses digits
    sk = DecisionTreeRegressor(min_samples_leaf=5, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="jax_enable_x64"):
        bt.BayesianForestRegressor(1, weights="none", min_samples_leaf=5, dtype="float64").fit(X, y)
    with jax.enable_x64(True):
        m = bt.BayesianForestRegressor(1, weights="none", min_samples_leaf=5, dtype="float64").fit(X, y)
        assert m.trees_.value.dtype == np.float64
        np.testing.assert_allclose(m.predict(X), sk.predict(X), rtol=1e-12)
        assert m.idata_.posterior["mu"].dtype == np.float64


def test_save_and_load(bf, reg_data, tmp_path):
    X, _ = reg_data
    bf.save(tmp_path / "m.pkl")
    m2 = bt.load(tmp_path / "m.pkl")
    np.testing.assert_array_equal(m2.predict(X), bf.predict(X))
    np.testing.assert_array_equal(m2.idata_.posterior["mu"].values, bf.idata_.posterior["mu"].values)


def test_model_context_sample_and_predictions(reg_data):
    X, y = reg_data
    with bt.Model():
        xd = bt.Data("X", X)
        f = bt.BayesianForest("f", xd, y, min_samples_leaf=3)
        idata = bt.sample(draws=6, chains=2, random_seed=1)
        assert idata.posterior.sizes["chain"] == 2 and idata.posterior.sizes["draw"] == 6
        assert idata.posterior["mu"].shape == (2, 6, 300)
        assert "log_likelihood" not in idata.groups()
        np.testing.assert_array_equal(idata.observed_data["f"].values, y)
        bt.set_data({"X": X[:17]})
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)
    assert f.task == "regression"
    pr = idata.predictions
    assert set(pr.data_vars) == {"f", "f_mu"}
    assert pr["f"].shape == (2, 6, 17)
    # no noise model: a draw of the response from a tree is the tree's prediction
    np.testing.assert_array_equal(pr["f"].values, pr["f_mu"].values)
    # at training rows the predictions are mu
    np.testing.assert_array_equal(pr["f_mu"].values, idata.posterior["mu"].values[..., :17])
    assert np.sqrt(np.mean((pr["f_mu"].mean(("chain", "draw")).values - y[:17]) ** 2)) < 0.5
    with pytest.raises(ValueError, match="no likelihood"):
        bt.loo(idata)


def test_model_variable_fits_the_estimators_forest(reg_data):
    """bt.BayesianForest and the estimator call the same inference function: one seed, one forest."""
    X, y = reg_data
    with bt.Model():
        rv = bt.BayesianForest("f", X, y, kind="ebf", trunk_min_samples_leaf=60, min_samples_leaf=3)
        idata = bt.sample(draws=4, chains=2, random_seed=5)
    est = bt.EmpiricalBayesianForestRegressor(8, trunk_min_samples_leaf=60, min_samples_leaf=3,
                                              random_state=5).fit(X, y)
    assert not isinstance(rv.fitted_, bt.EmpiricalBayesianForestRegressor)
    np.testing.assert_array_equal(idata.posterior["mu"].values.reshape(8, -1), est.predict_draws(X))
    trees = trees_from_inferencedata(idata)
    for a, b in zip(trees, est.trees_):
        np.testing.assert_array_equal(np.asarray(a).reshape(np.asarray(b).shape), np.asarray(b))
    assert idata.posterior.attrs["kind"] == "ebf"


def test_model_does_not_import_the_estimators():
    import ast
    from pathlib import Path

    tree = ast.parse((Path(bt.__file__).parent / "models" / "forest.py").read_text())
    mods = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    mods += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert any(m.startswith("inference.forest") for m in mods) and not any("estimators" in m for m in mods)


def test_model_classification_predictions(reg_data):
    X, y = reg_data
    labels = np.where(y > 0.5, "hi", "lo")
    with bt.Model():
        xd = bt.Data("X", X)
        f = bt.BayesianForest("f", xd, labels, min_samples_leaf=2)
        idata = bt.sample(draws=5, chains=1, random_seed=0)
        bt.set_data({"X": X[:40]})
        pp = bt.sample_posterior_predictive(idata, random_seed=1)
    assert f.task == "classification"
    assert idata.posterior["mu"].dims == ("chain", "draw", "obs", "class")
    np.testing.assert_array_equal(idata.observed_data["f"].values, labels)
    pr = pp.posterior_predictive
    assert set(pr.data_vars) == {"f", "f_proba"}
    proba = pr["f_proba"].values
    assert proba.shape == (1, 5, 40, 2)
    np.testing.assert_array_equal(proba, idata.posterior["mu"].values[:, :, :40])
    drawn = pr["f"].values
    assert drawn.shape == (1, 5, 40) and set(np.unique(drawn)) <= {"hi", "lo"}
    # a label is drawn from its tree's class probabilities: a class of probability 0 is never drawn
    idx = np.where(drawn == "hi", 0, 1)
    assert np.all(np.take_along_axis(proba, idx[..., None], -1) > 0)
    # where trees are unsure (noisy labels, large leaves) the labels are random: same seed, same labels;
    # new seed, new labels
    noisy = np.where(np.random.default_rng(0).random(300) < 0.3, "hi", labels)
    with bt.Model():
        bt.BayesianForest("f", X, noisy, min_samples_leaf=30)
        idata2 = bt.sample(draws=20, random_seed=0)
        a = bt.sample_posterior_predictive(idata2, random_seed=1).posterior_predictive["f"].values
        b = bt.sample_posterior_predictive(idata2, random_seed=2).posterior_predictive["f"].values
        c = bt.sample_posterior_predictive(idata2, random_seed=1).posterior_predictive["f"].values
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)


def test_model_context_errors(reg_data):
    X, y = reg_data
    with pytest.raises(ValueError, match="no model"):
        bt.Data("X", X)
    with bt.Model() as model:
        with pytest.raises(ValueError, match="no tree variable"):
            bt.sample()
        bt.BayesianForest("f", X, y)
        with pytest.raises(ValueError, match="already"):
            bt.BayesianForest("f", X, y)
        with pytest.raises(ValueError, match="no data named"):
            bt.set_data({"Z": X})
        with pytest.raises(ValueError, match="unknown parameter"):
            bt.BayesianForest("g", X, y, min_leaf=3)
        with pytest.raises(ValueError, match=r"draws \* chains"):
            bt.BayesianForest("g", X, y, n_estimators=3)
        with pytest.raises(ValueError, match="min_samples_leaf"):
            bt.BayesianForest("g", X, y, min_samples_leaf=0)
        with pytest.raises(ValueError, match="kind"):
            bt.BayesianForest("g", X, y, kind="rf")
        with pytest.raises(ValueError, match="jax_enable_x64"):
            bt.BayesianForest("g", X, y, dtype="float64")
        assert [rv.name for rv in model.rvs] == ["f"]  # a rejected variable is not registered


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
    from bayestrees.inference.forest import cart as cart
    from bayestrees.inference.forest import chunk as forest_chunk

    r = np.random.default_rng(3)
    X, y = r.normal(size=(120, 3)), r.normal(size=120)
    bt.BayesianForestRegressor(3, min_samples_leaf=2, random_state=0).fit(X[:100], y[:100])
    size = cart._fit_batch._cache_size()
    size_w = forest_chunk._draw_chunk_jit._cache_size()
    bt.BayesianForestRegressor(5, min_samples_leaf=2, random_state=1).fit(X[:110], y[:110])
    bt.EmpiricalBayesianForestRegressor(3, trunk_min_samples_leaf=30, min_samples_leaf=2, random_state=0).fit(X[:105], y[:105])
    assert cart._fit_batch._cache_size() == size
    assert forest_chunk._draw_chunk_jit._cache_size() == size_w  # the weight draws too (row count traced)
    bt.SubSampleForestRegressor(4, n_blocks=2, min_samples_leaf=2, random_state=0).fit(X[:120], y[:120])
    size_ssf = cart._fit_batch._cache_size()
    assert size_ssf <= size + 1
    bt.SubSampleForestRegressor(6, n_blocks=3, min_samples_leaf=2, random_state=1).fit(X[:101], y[:101])
    assert cart._fit_batch._cache_size() == size_ssf


@pytest.mark.parametrize("kind", ["exponential", "multinomial", "none"])
def test_weights_drawn_at_the_padded_length_are_the_data_rows_weights(kind):
    """``n_valid`` (traced) gives the data rows the weights of a draw at their own length, and padding 0."""
    import jax

    from bayestrees.inference.forest.chunk import draw_weights

    key = jax.random.key(7)
    n = 91
    draw = jax.jit(lambda k, nv: draw_weights(k, n, kind, n_valid=nv))
    for nv in (1, 40, 65, 91):
        got = np.asarray(draw(key, nv))
        want = np.concatenate([np.asarray(draw_weights(key, nv, kind)), np.zeros(n - nv, np.float32)])
        np.testing.assert_array_equal(got, want, err_msg=f"n_valid={nv}")
    assert draw._cache_size() == 1


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


def test_threads_by_default_give_the_same_trees_as_one_job(monkeypatch):
    """``n_jobs=2`` fits in threads of this process by default (``BAYESTREES_PARALLEL`` unset): the
    weights and seeds are drawn before the chunks are handed out, so the forest is the one-job forest."""
    from bayestrees.inference.forest import workers

    monkeypatch.delenv("BAYESTREES_PARALLEL", raising=False)
    assert not workers.use_processes(2)
    r = np.random.default_rng(4)
    X = r.normal(size=(150, 3))
    y = X[:, 0] - np.cos(2 * X[:, 1]) + 0.2 * r.normal(size=150)
    one = bt.BayesianForestRegressor(draws=6, chunk_size=1, random_state=3, n_jobs=1).fit(X, y)
    two = bt.BayesianForestRegressor(draws=6, chunk_size=1, random_state=3, n_jobs=2).fit(X, y)
    assert all(np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(one.trees_, two.trees_))
    np.testing.assert_array_equal(one.predict_draws(X), two.predict_draws(X))
