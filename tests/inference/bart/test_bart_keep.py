"""BART without its trees (``keep_trees=False``, values kept at rows named when fitting) and row
weights (``sample_weight``) in the estimators and in the model context (``bt.BART``), issue 29.

Every fit here has the same shapes (50 rows, 3 features, 6 trees of depth 3, one chain of 10 + 10
steps), so the sampler compiles once per kind of kept draw.  Collecting a draw reads the chain's
state and changes nothing, so the draws with and without trees must agree to the bit.
"""
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

import bayestrees as bt
from bayestrees.convergence import ConvergenceWarning

KW = dict(m=6, max_depth=3, draws=10, tune=10, chains=1, max_bins=16, random_state=0)


def _data():
    rng = np.random.default_rng(0)
    X = rng.random((50, 3))
    y = np.sin(3 * X[:, 0]) + 0.3 * rng.normal(size=50) + 10.0
    return X, y, rng.random((6, 3))


def _fit(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # ten draws: the table is not the point
        return est.fit(X, y, **kw)


def _nbytes(obj) -> int:
    """Bytes of the arrays of a BARTResult or an InferenceData."""
    if hasattr(obj, "groups"):
        return sum(int(obj[g].nbytes) for g in obj.groups())
    return sum(a.nbytes for a in vars(obj).values() if isinstance(a, np.ndarray))


@pytest.fixture(scope="module")
def fits():
    X, y, Xn = _data()
    plain = _fit(bt.BARTRegressor(**KW), X, y)                               # trees, no named rows
    full = _fit(bt.BARTRegressor(**KW), X, y, X_predict=Xn)                  # trees and named rows
    lean = _fit(bt.BARTRegressor(keep_trees=False, **KW), X, y, X_predict=Xn)
    return plain, full, lean, X, y, Xn


def test_the_draws_are_the_same_without_trees(fits):
    plain, full, lean, *_ = fits
    for est in (full, lean):
        for group, names in (("posterior", ("n_leaves", "depth", "split_counts", "sigma", "mu")),
                             ("log_likelihood", ("y",)), ("sample_stats", ("lp", "accepted", "at_max_depth"))):
            for v in names:
                a, b = plain.idata_[group][v], est.idata_[group][v]
                assert a.dtype == b.dtype and a.dims == b.dims, (group, v)
                np.testing.assert_array_equal(a.values, b.values, err_msg=f"{group}.{v}")
    # the values at the named rows, kept during sampling, are the trees' there, to the bit
    np.testing.assert_array_equal(lean.result_.predict_fit, full.result_.predict_fit)
    np.testing.assert_array_equal(lean.idata_.predictions["y_mu"].values, full.idata_.predictions["y_mu"].values)
    assert "trees" not in lean.idata_.groups() and "trees" in full.idata_.groups()
    assert lean.idata_.posterior.attrs["keep_trees"] == 0 and full.idata_.posterior.attrs["keep_trees"] == 1


def _summaries_by_walking(feature, n_features):
    """Leaves, depth and splits per feature of one draw's heap trees ``(m, S)``, walking every tree from its root."""
    leaves, depths, splits = [], [], np.zeros(n_features, np.int64)
    for f in feature:
        n, deepest, stack = 0, 0, [(0, 0)]
        while stack:
            s, d = stack.pop()
            if f[s] >= 0:
                splits[f[s]] += 1
                stack += [(2 * s + 1, d + 1), (2 * s + 2, d + 1)]
            else:
                n, deepest = n + 1, max(deepest, d)
        leaves.append(n)
        depths.append(deepest)
    return np.array(leaves), np.array(depths), splits


def test_the_tree_summaries_are_those_of_walking_the_trees(fits):
    """The one tree summary (``bart.kernel.tree_summaries``): per draw in the compiled block (vmapped over
    chains there), for a batch of draws, and on the host's kept draws, the numbers of walking every tree."""
    import jax

    from bayestrees.inference.bart import kernel as K

    plain = fits[0]
    feature = plain.result_.feature.reshape((-1,) + plain.result_.feature.shape[2:]).astype(np.int32)
    want = [np.stack(a) for a in zip(*(_summaries_by_walking(f, 3) for f in feature))]
    got = jax.vmap(lambda f: K.tree_summaries(f, 3))(feature)
    one = K.tree_summaries(feature[3], 3)
    host = K.host_tree_summaries(plain.result_.feature, 3)
    for w, g, o, h in zip(want, got, one, host):
        np.testing.assert_array_equal(np.asarray(g), w)
        np.testing.assert_array_equal(np.asarray(o), w[3])
        assert h.dtype == np.int32
        np.testing.assert_array_equal(h, w.reshape(h.shape))


def test_predictions_at_the_named_rows_are_bit_identical(fits):
    plain, full, lean, X, y, Xn = fits
    for rows in (Xn, Xn[[4, 1, 1]]):                # the named rows, or any of them in any order
        for method in ("predict", "predict_draws", "predict_interval"):
            want = getattr(plain, method)(rows)
            np.testing.assert_array_equal(getattr(lean, method)(rows), want, err_msg=method)
            np.testing.assert_array_equal(getattr(full, method)(rows), want, err_msg=method)
    np.testing.assert_array_equal(lean.idata_.predictions["y_mu"].values.reshape(-1, len(Xn)),
                                  plain.predict_draws(Xn))


def test_other_rows_raise_a_clear_error(fits):
    plain, full, lean, X, y, Xn = fits
    for rows in (X[:3], np.vstack([Xn, X[:1]])):
        with pytest.raises(ValueError, match=r"kept no trees \(keep_trees=False\).*keep_trees=True.*X_predict"):
            lean.predict(rows)
    no_rows = _fit(bt.BARTRegressor(keep_trees=False, **KW), X, y)
    with pytest.raises(ValueError, match="kept no trees"):
        no_rows.predict_draws(Xn)
    assert no_rows.idata_.posterior["mu"].shape == (1, 10, 50)      # the training rows' function is kept
    assert full.predict(X[:3]).shape == (3,)                          # with trees: any row
    with pytest.raises(ValueError, match="keep_trees must be True or False"):
        _fit(bt.BARTRegressor(keep_trees="no", **KW), X, y)


def test_the_kept_arrays_are_smaller(fits):
    plain, full, lean, X, y, Xn = fits
    r_lean, r_full = lean.result_, full.result_
    assert r_lean.feature is None and r_lean.value is None and r_lean.threshold is None
    tree_bytes = r_full.feature.nbytes + r_full.threshold.nbytes + r_full.value.nbytes
    summary_bytes = r_lean.n_leaves.nbytes + r_lean.depth.nbytes + r_lean.split_counts.nbytes
    assert _nbytes(r_lean) == _nbytes(r_full) - tree_bytes + summary_bytes
    assert summary_bytes < tree_bytes / 10
    assert _nbytes(lean.idata_) < _nbytes(full.idata_) - tree_bytes


def test_save_load_without_trees(fits, tmp_path):
    plain, full, lean, X, y, Xn = fits
    path = tmp_path / "lean.pkl"
    lean.save(path)
    again = bt.load(path)
    np.testing.assert_array_equal(again.predict_draws(Xn), lean.predict_draws(Xn))
    np.testing.assert_array_equal(again.idata_.posterior["sigma"].values, lean.idata_.posterior["sigma"].values)
    with pytest.raises(ValueError, match="kept no trees"):
        again.predict(X[:2])
    nc = tmp_path / "lean.nc"
    lean.idata_.to_netcdf(str(nc))
    import arviz as az

    back = az.from_netcdf(str(nc))
    assert "trees" not in back.groups()
    np.testing.assert_array_equal(back.predictions["y_mu"].values, lean.idata_.predictions["y_mu"].values)


def test_classifier_without_trees():
    X, y, Xn = _data()
    labels = np.where(X[:, 0] > 0.5, "hi", "lo")
    full = _fit(bt.BARTClassifier(**KW), X, labels)
    lean = _fit(bt.BARTClassifier(keep_trees=False, **KW), X, labels, X_predict=Xn)
    for method in ("predict_proba", "predict", "predict_draws", "predict_interval"):
        np.testing.assert_array_equal(getattr(lean, method)(Xn), getattr(full, method)(Xn), err_msg=method)
    np.testing.assert_array_equal(lean.idata_.posterior["mu"].values, full.idata_.posterior["mu"].values)
    assert lean.idata_.predictions["y_proba"].dims == ("chain", "draw", "obs", "class")
    with pytest.raises(ValueError, match="kept no trees"):
        lean.predict_proba(X[:2])


def test_model_context_without_trees():
    X, y, Xn = _data()
    with bt.Model():
        feats = bt.Data("X", X)
        bt.BART("f", feats, y, keep_trees=False, X_predict=Xn, m=6, max_depth=3, max_bins=16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            idata = bt.sample(draws=10, tune=10, chains=1, random_seed=0)
        assert "trees" not in idata.groups() and idata.predictions["f_mu"].shape == (1, 10, 6)
        bt.set_data({"X": Xn[::-1]})
        pred = bt.sample_posterior_predictive(idata, predictions=True, random_seed=0)
        np.testing.assert_array_equal(pred.predictions["f_mu"].values, idata.predictions["f_mu"].values[..., ::-1])
        bt.set_data({"X": X[:4]})
        with pytest.raises(ValueError, match="kept no trees"):
            bt.sample_posterior_predictive(idata, predictions=True, random_seed=0)
    with bt.Model(), pytest.raises(ValueError, match="unknown parameter"):
        bt.BART("f", X, y, X_new=Xn)


# ------------------------------------------------------------------------------------------------
# sample_weight
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def unweighted():
    X, y, _ = _data()
    return _fit(bt.BARTRegressor(**KW), X, y), X, y


def test_weights_of_one_are_no_weights(unweighted):
    base, X, y = unweighted
    ones = _fit(bt.BARTRegressor(**KW), X, y, sample_weight=np.ones(len(y)))
    for name in ("value", "feature", "threshold", "fit", "sigma", "lp"):
        np.testing.assert_array_equal(getattr(ones.result_, name), getattr(base.result_, name), err_msg=name)


def test_weights_multiply_the_precision_and_only_their_ratios_matter(unweighted):
    """Weights 4 w: sigma_hat (the weighted linear fit's sd of a row of weight 1) doubles, and with it
    sigma's prior, so every draw of the function is the same and sigma doubles (exactly: powers of 2)."""
    base, X, y = unweighted
    four = _fit(bt.BARTRegressor(**KW), X, y, sample_weight=np.full(len(y), 4.0))
    np.testing.assert_array_equal(four.result_.sigma, 2.0 * base.result_.sigma)
    np.testing.assert_array_equal(four.result_.value, base.result_.value)
    np.testing.assert_array_equal(four.idata_.posterior["mu"].values, base.idata_.posterior["mu"].values)
    assert four.result_.sigma_hat == 2.0 * base.result_.sigma_hat


def test_a_row_of_weight_zero_has_no_influence(unweighted):
    base, X, y = unweighted
    w = np.ones(len(y))
    w[7] = 0.0
    y2 = y.copy()
    y2[7] = 0.5 * (y.min() + y.max()) + 0.123      # any value within the range (the range scales y)
    a = _fit(bt.BARTRegressor(**KW), X, y, sample_weight=w)
    b = _fit(bt.BARTRegressor(**KW), X, y2, sample_weight=w)
    for name in ("value", "feature", "sigma", "lp"):
        np.testing.assert_array_equal(getattr(a.result_, name), getattr(b.result_, name), err_msg=name)
    assert np.all(a.idata_.log_likelihood["y"].values[..., 7] == 0.0)
    assert not np.array_equal(a.result_.sigma, base.result_.sigma)


#: bad row weights for 50 rows and the estimators' message for each (the estimators and the model context)
BAD_WEIGHTS = [
    (np.ones(49), r"sample_weight must have one value per row \(50\)"),
    (-np.ones(50), "sample_weight must be finite and >= 0"),
    (np.r_[np.nan, np.ones(49)], "sample_weight must be finite and >= 0"),
    (np.r_[np.inf, np.ones(49)], "sample_weight must be finite and >= 0"),
    (np.zeros(50), "sample_weight: every weight is zero"),
    (["a"] * 50, "sample_weight must be numbers"),
]


@pytest.mark.parametrize("w, msg", BAD_WEIGHTS)
def test_bad_weights_are_refused(w, msg):
    X, y, _ = _data()
    with pytest.raises(ValueError, match=msg):
        bt.BARTRegressor(**KW).fit(X, y, sample_weight=w)


def test_classifier_weights():
    X, y, _ = _data()
    labels = np.where(X[:, 0] > 0.5, "hi", "lo")
    base = _fit(bt.BARTClassifier(**KW), X, labels)
    ones = _fit(bt.BARTClassifier(**KW), X, labels, sample_weight=[1] * len(y))
    np.testing.assert_array_equal(ones.result_.fit, base.result_.fit)
    with pytest.raises(ValueError, match=r"one class only"):
        bt.BARTClassifier(**KW).fit(X, labels, sample_weight=(labels == "hi").astype(float))


def test_other_families_take_no_sample_weight():
    X, y, _ = _data()
    with pytest.raises(TypeError, match="sample_weight"):
        bt.BayesianCARTRegressor(draws=2, tune=2, chains=1).fit(X, y, sample_weight=np.ones(len(y)))


# ------------------------------------------------------------------------------------------------
# sample_weight in the model context: bt.BART(..., sample_weight=w)
# ------------------------------------------------------------------------------------------------
MKW = dict(m=6, max_depth=3, max_bins=16)          # KW's settings for bt.BART
RUN = dict(draws=10, tune=10, chains=1, random_seed=0)


def _weights(n=50):
    w = np.random.default_rng(1).uniform(0.25, 4.0, n)
    w[[3, 11]] = 0.0                                  # rows without likelihood too
    return w


def _sample(X, y, w=None, *, container=False, **kw):
    """``(model, rv, idata)`` of ``bt.BART("f", bt.Data("X", X), y, sample_weight=w, **kw)`` run with
    RUN (``container``: ``sample_weight=bt.Data("w", w)``)."""
    with bt.Model() as model:
        rv = bt.BART("f", bt.Data("X", X), y, sample_weight=bt.Data("w", w) if container else w, **MKW, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            idata = bt.sample(**RUN)
    return model, rv, idata


def _same_draws(est, rv, idata):
    for name in ("value", "feature", "threshold", "fit", "sigma", "lp", "weights"):
        np.testing.assert_array_equal(getattr(rv.fitted_.result, name), getattr(est.result_, name), err_msg=name)
    np.testing.assert_array_equal(idata.posterior["mu"].values, est.idata_.posterior["mu"].values)
    np.testing.assert_array_equal(idata.log_likelihood["f"].values, est.idata_.log_likelihood["y"].values)


@pytest.mark.parametrize("container", [False, True])
def test_model_context_weights_give_the_estimators_draws(container):
    X, y, _ = _data()
    w = _weights()
    est = _fit(bt.BARTRegressor(**KW), X, y, sample_weight=w)
    _, rv, idata = _sample(X, y, w, container=container)
    _same_draws(est, rv, idata)
    assert np.all(idata.log_likelihood["f"].values[..., [3, 11]] == 0.0)
    # and the weights are not ignored: the draws differ from the unweighted ones
    _, plain, _ = _sample(X, y)
    assert not np.array_equal(plain.fitted_.result.sigma, rv.fitted_.result.sigma)


def test_model_context_classifier_weights_give_the_estimators_draws():
    X, y, _ = _data()
    labels = np.where(X[:, 0] > 0.5, "hi", "lo")
    w = _weights()
    est = _fit(bt.BARTClassifier(**KW), X, labels, sample_weight=w)
    _, rv, idata = _sample(X, labels, w)
    assert rv.task == "classification"
    for name in ("value", "feature", "fit", "lp", "weights"):
        np.testing.assert_array_equal(getattr(rv.fitted_.result, name), getattr(est.result_, name), err_msg=name)
    np.testing.assert_array_equal(idata.log_likelihood["f"].values, est.idata_.log_likelihood["y"].values)
    with bt.Model(), pytest.raises(ValueError, match="one class only"):
        bt.BART("f", X, labels, sample_weight=(labels == "hi").astype(float), **MKW)
        bt.sample(**RUN)


@pytest.mark.parametrize("w, msg", BAD_WEIGHTS)
def test_model_context_bad_weights_are_refused_when_made_and_when_sampled(w, msg):
    X, y, _ = _data()
    with bt.Model() as model:
        with pytest.raises(ValueError, match=msg):            # the estimators' messages
            bt.BART("f", X, y, sample_weight=w, **MKW)
        assert model.rvs == []                                 # nothing registered
        weights = bt.Data("w", np.ones(50))
        bt.BART("f", X, y, sample_weight=weights, **MKW)
        bt.set_data({"w": w})
        with pytest.raises(ValueError, match=msg):             # changed before sampling: checked again
            bt.sample(**RUN)
    with bt.Model(), pytest.raises(ValueError, match="row weights as sample_weight="):
        bt.BART("f", X, y, weights=np.ones(50), **MKW)


def test_model_context_predictive_draws_use_the_current_weights():
    """With a bt.Data container the predictive noise at a row of weight w is sigma / sqrt(w) (the same
    normal draws as at weight 1); with an array every row, the training rows included, has weight 1."""
    X, y, Xn = _data()
    w = _weights()
    model, rv, idata = _sample(X, y, w, container=True)
    model_arr, _, idata_arr = _sample(X, y, w)
    wn = np.array([1.0, 4.0, 0.25, 16.0, 1.0, 2.0])
    with model:
        bt.set_data({"X": Xn, "w": np.ones(6)})
        one = bt.sample_posterior_predictive(idata, predictions=True, random_seed=3).predictions
        bt.set_data({"w": wn})
        got = bt.sample_posterior_predictive(idata, predictions=True, random_seed=3).predictions
        np.testing.assert_array_equal(got["f_mu"].values, one["f_mu"].values)      # the function: no weights
        mu = one["f_mu"].values
        np.testing.assert_allclose((got["f"].values - mu) * np.sqrt(wn), one["f"].values - mu, rtol=1e-9,
                                   atol=1e-9)
        np.testing.assert_array_equal(got["f"].values[..., 0], one["f"].values[..., 0])   # weight 1: to the bit
        # the container not set with X, or a weight of 0 (no predictive distribution): clear errors
        bt.set_data({"X": Xn[:4]})
        with pytest.raises(ValueError, match=r"one value per row \(4\).*bt.set_data"):
            bt.sample_posterior_predictive(idata, predictions=True)
        bt.set_data({"X": Xn, "w": np.r_[0.0, np.ones(5)]})
        with pytest.raises(ValueError, match="weight 0 has no predictive distribution"):
            bt.sample_posterior_predictive(idata, predictions=True)
        # at the training rows: their own weights
        w_pos = np.where(w > 0, w, 1.0)
        bt.set_data({"X": X, "w": w_pos})
        ppc = bt.sample_posterior_predictive(idata, random_seed=3).posterior_predictive
    # an array: weight 1 at every row, as the estimators' predictive draws
    with model_arr:
        arr = bt.sample_posterior_predictive(idata_arr, random_seed=3).posterior_predictive
        bt.set_data({"X": Xn})
        arr_new = bt.sample_posterior_predictive(idata_arr, predictions=True, random_seed=3).predictions
    np.testing.assert_array_equal(arr_new["f"].values, one["f"].values)
    np.testing.assert_array_equal(arr["f_mu"].values, ppc["f_mu"].values)
    np.testing.assert_allclose((ppc["f"] - ppc["f_mu"]).values * np.sqrt(w_pos), (arr["f"] - arr["f_mu"]).values,
                               rtol=1e-9, atol=1e-9)


def test_model_context_classifier_predictive_weights():
    """Probit: a row of weight w draws its label with Phi(sqrt(w) (offset + f)); weight 1 is the
    unweighted probability to the bit.  The same without trees, from the values kept at named rows."""
    from scipy.special import ndtr, ndtri

    X, y, Xn = _data()
    labels = np.where(X[:, 0] > 0.5, "hi", "lo")
    wn = np.array([1.0, 4.0, 0.25, 16.0, 0.0, 2.0])     # weight 0: a fair coin
    out = []
    for keep in (True, False):
        model, _, idata = _sample(X, labels, np.ones(50), container=True, keep_trees=keep, X_predict=Xn)
        with model:
            bt.set_data({"X": Xn, "w": np.ones(6)})
            one = bt.sample_posterior_predictive(idata, predictions=True, random_seed=3).predictions
            bt.set_data({"w": wn})
            got = bt.sample_posterior_predictive(idata, predictions=True, random_seed=3).predictions
        np.testing.assert_array_equal(one["f_proba"].values, idata.predictions["f_proba"].values)
        p1 = one["f_proba"].values[..., 1]
        np.testing.assert_allclose(got["f_proba"].values[..., 1], ndtr(np.sqrt(wn) * ndtri(p1)), rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(got["f_proba"].values[..., 0, :], one["f_proba"].values[..., 0, :])
        assert np.all(got["f_proba"].values[..., 4, :] == 0.5)
        out.append(got)
    for v in ("f", "f_proba"):
        np.testing.assert_array_equal(out[0][v].values, out[1][v].values, err_msg=v)


def test_model_context_weighted_model_pickles():
    """The sampled model (its weights a bt.Data container) pickles, and the copy gives the same
    predictive draws; the weights travel in the fit (``fitted_.result.weights``) and the idata to NetCDF."""
    import pickle

    import arviz as az

    X, y, Xn = _data()
    w = _weights()
    model, rv, idata = _sample(X, y, w, container=True)
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.rvs[0].fitted_.result.weights, w)
    preds = []
    for m in (model, again):
        bt.set_data({"X": Xn, "w": np.arange(1.0, 7.0)}, model=m)
        preds.append(bt.sample_posterior_predictive(idata, model=m, predictions=True, random_seed=1).predictions)
    np.testing.assert_array_equal(preds[0]["f"].values, preds[1]["f"].values)
    back = az.from_netcdf(idata.to_netcdf(str(Path(tempfile.mkdtemp()) / "w.nc")))
    np.testing.assert_array_equal(back.log_likelihood["f"].values, idata.log_likelihood["f"].values)
