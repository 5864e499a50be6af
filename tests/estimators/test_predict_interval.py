"""``predict_interval`` of every family that has one, against quantiles computed here from the draws.

For the estimators with ``predict_draws`` (the Bayesian, empirical Bayesian and sub-sample forests,
Bayesian CART, BET; regressors and classifiers):

* the draws themselves are the fitted trees' values at the rows, found by routing the rows
  through the stored tree arrays in NumPy (BET: the ``w``-weighted average over the occupied
  components of each draw);
* the interval at level ``p`` is the pair of equal-tailed quantiles ``(1 - p) / 2`` and
  ``(1 + p) / 2`` of those draws, computed here by sorting and linear interpolation between
  order statistics (numpy's default "linear" rule, written out);
* the interval holds the draws' median at every level (an equal-tailed interval always does) and
  the intervals are nested, lower ends falling and upper ends rising as the level grows; the mean
  prediction (``predict``, ``predict_proba``) is the draws' mean, inside the interval as the level
  goes to 1 (the range of the draws).  The mean need not lie inside an equal-tailed interval of a
  lower level (a skewed posterior moves it out), so that is not asserted;
* a level outside (0, 1) is a ``ValueError``.

Classifiers return one interval per class, ``(n, n_classes, 2)``, of the drawn class probabilities.

The safe-Bayes regressor (``kind="mean"``) gives weighted quantiles of the trees' means with the
tree weights: its ends are checked against the definition (the smallest tree mean whose cumulative
weight reaches the level), computed from ``trees_`` and ``tree_weights``; its predictive kind is
checked in ``tests/inference/safebayes/test_safebayes.py``.  PCFG has no ``predict_interval``.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import bayestrees as bt
from bayestrees.convergence import ConvergenceWarning

LEVELS = (0.5, 0.8, 0.9, 0.99)


def _data(task: str, n: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    X[:, 0] = rng.integers(0, 6, n) / 6                   # six values: exact bins for every family
    f = np.where(X[:, 0] < 0.5, -1.0, 1.0) + 0.5 * X[:, 1]
    if task == "regression":
        return X, 10.0 + f + 0.4 * rng.normal(size=n)        # offset: the families standardise y inside
    return X, np.where(f + 0.5 * rng.normal(size=n) > 0.2, "b", "a")


_FAST_MCMC = dict(draws=40, tune=60, max_depth=2, max_bins=6, random_state=0)
_BET = dict(max_trees=3, active_trees=3, init_trees=2, min_leaf_rows=3)

FAMILIES = {
    "forest": (bt.BayesianForestRegressor, bt.BayesianForestClassifier, dict(draws=30, min_samples_leaf=3,
                                                                              random_state=0)),
    "ebf": (bt.EmpiricalBayesianForestRegressor, bt.EmpiricalBayesianForestClassifier,
            dict(draws=30, trunk_min_samples_leaf=20, min_samples_leaf=3, random_state=0)),
    "ssf": (bt.SubSampleForestRegressor, bt.SubSampleForestClassifier, dict(draws=30, n_blocks=3,
                                                                             min_samples_leaf=3, random_state=0)),
    "bcart": (bt.BayesianCARTRegressor, bt.BayesianCARTClassifier, dict(chains=2, **_FAST_MCMC)),
    "bet": (bt.BETRegressor, bt.BETClassifier, dict(**_BET, **_FAST_MCMC)),
}


@pytest.fixture(scope="module", params=[(f, t) for f in FAMILIES for t in ("regression", "classification")],
                ids=lambda p: f"{p[0]}-{p[1][:3]}")
def fitted(request):
    family, task = request.param
    reg, clf, kw = FAMILIES[family]
    X, y = _data(task)
    with warnings.catch_warnings():   # short chains: a ConvergenceWarning; BET's slice past max_trees: a RuntimeWarning
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        est = (reg if task == "regression" else clf)(**kw).fit(X, y)
    Xq = np.vstack([X[:7], [[0.0, 0.5], [0.5, 0.5], [5 / 6, 0.9]]])   # training rows and new points
    return family, task, est, Xq


# ------------------------------------------------------------------------------------------------
# independent references
# ------------------------------------------------------------------------------------------------
def _route(tree: bt.tree.Tree, codes) -> np.ndarray:
    """Leaf values of a batch of trees at coded rows, routing in NumPy (``code <= threshold`` goes left):
    ``batch + (n, V)``."""
    feature, threshold = np.asarray(tree.feature), np.asarray(tree.threshold)
    left, right, value = np.asarray(tree.left), np.asarray(tree.right), np.asarray(tree.value)
    batch, S = feature.shape[:-1], feature.shape[-1]
    feature, threshold = feature.reshape(-1, S), threshold.reshape(-1, S)
    left, right = left.reshape(-1, S), right.reshape(-1, S)
    value = value.reshape((-1, S) + value.shape[len(batch) + 1:])
    codes = np.asarray(codes, np.int64)
    out = np.empty((feature.shape[0], codes.shape[0], value.shape[-1]), value.dtype)
    for b in range(feature.shape[0]):
        for i, row in enumerate(codes):
            s = 0
            while left[b, s] >= 0:
                s = left[b, s] if row[feature[b, s]] <= threshold[b, s] else right[b, s]
            out[b, i] = value[b, s]
    return out.reshape(batch + out.shape[1:])


def _draws_by_hand(family: str, est, X) -> np.ndarray:
    """The draws of the fitted function at ``X`` from the stored trees: ``(draws, n[, C])``."""
    codes = est.binner_.transform(X)
    vals = _route(est.trees_, codes)                                # batch + (n, V)
    if family == "bet":                                             # (c, d, J, n, V): the ensemble estimator
        d = est.result_.draws
        w = np.where(np.asarray(d.occupied), np.asarray(d.w, np.float64), 0.0)
        w /= w.sum(-1, keepdims=True)
        vals = np.einsum("cdj,cdjnv->cdnv", w, vals)
    vals = vals.reshape((-1,) + vals.shape[-2:])
    return vals[..., 0] if est._task == "regression" else vals


def _quantile(draws, q: float) -> np.ndarray:
    """The ``q``-quantile along axis 0 by linear interpolation between the order statistics at
    position ``(N - 1) q`` (numpy's default rule, written out)."""
    s = np.sort(np.asarray(draws, np.float64), axis=0)
    h = (s.shape[0] - 1) * q
    lo = int(np.floor(h))
    hi = min(lo + 1, s.shape[0] - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])


# ------------------------------------------------------------------------------------------------
# the estimators with predict_draws
# ------------------------------------------------------------------------------------------------
def test_draws_are_the_trees_values(fitted):
    family, task, est, Xq = fitted
    draws = est.predict_draws(Xq)
    want = _draws_by_hand(family, est, Xq)
    assert draws.shape == want.shape and draws.shape[1] == len(Xq)
    np.testing.assert_allclose(draws, want, rtol=1e-5, atol=1e-6)
    assert np.ptp(draws, axis=0).max() > 0       # a posterior, not a point: the intervals below have width


def test_interval_is_the_equal_tailed_quantiles_of_the_draws(fitted):
    family, task, est, Xq = fitted
    draws = np.asarray(est.predict_draws(Xq), np.float64)
    for p in LEVELS:
        iv = est.predict_interval(Xq, p)
        assert iv.shape == draws.shape[1:] + (2,)
        np.testing.assert_allclose(iv[..., 0], _quantile(draws, (1 - p) / 2), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(iv[..., 1], _quantile(draws, (1 + p) / 2), rtol=1e-6, atol=1e-9)
    # the default level is 0.9
    np.testing.assert_array_equal(est.predict_interval(Xq), est.predict_interval(Xq, 0.9))


def test_intervals_are_nested_and_hold_the_median(fitted):
    family, task, est, Xq = fitted
    draws = np.asarray(est.predict_draws(Xq), np.float64)
    median = np.median(draws, axis=0)
    ivs = [est.predict_interval(Xq, p) for p in LEVELS]
    tol = 1e-9
    for iv in ivs:
        assert np.all(iv[..., 0] <= median + tol) and np.all(median <= iv[..., 1] + tol)
    for a, b in zip(ivs, ivs[1:]):                                # level grows: the interval widens
        assert np.all(b[..., 0] <= a[..., 0] + tol) and np.all(a[..., 1] <= b[..., 1] + tol)
        assert np.all(b[..., 1] - b[..., 0] >= a[..., 1] - a[..., 0] - tol)
    if task == "classification":
        # intervals of probabilities (float32 leaf probabilities: within rounding of [0, 1])
        assert np.all(ivs[-1] >= -1e-6) and np.all(ivs[-1] <= 1 + 1e-6)


def test_mean_prediction_is_the_draws_mean_and_lies_in_their_range(fitted):
    family, task, est, Xq = fitted
    draws = np.asarray(est.predict_draws(Xq), np.float64)
    mean = est.predict(Xq) if task == "regression" else est.predict_proba(Xq)
    np.testing.assert_allclose(mean, draws.mean(0) if task == "regression"
                               else draws.mean(0) / draws.mean(0).sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    full = est.predict_interval(Xq, 1 - 1e-12)                      # the range of the draws
    np.testing.assert_allclose(full[..., 0], draws.min(0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(full[..., 1], draws.max(0), rtol=1e-6, atol=1e-9)
    assert np.all(full[..., 0] <= mean + 1e-6) and np.all(mean <= full[..., 1] + 1e-6)


@pytest.mark.parametrize("prob", [0.0, 1.0, -0.1, 1.5])
def test_level_outside_the_open_unit_interval_is_refused(fitted, prob):
    _, _, est, Xq = fitted
    with pytest.raises(ValueError, match="prob"):
        est.predict_interval(Xq, prob)


# ------------------------------------------------------------------------------------------------
# safe-Bayes: weighted quantiles of the trees' means
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def safebayes():
    X, y = _data("regression")
    return bt.SafeBayesForestRegressor(40, effective_sample_size=8, max_internal=31, random_state=0).fit(X, y), X


@pytest.mark.parametrize("method", ["safe", "bma"])
def test_safebayes_mean_interval_is_the_weighted_quantiles_of_the_tree_means(safebayes, method):
    """Lower end ``L``: a tree mean with ``W(mean <= L) >= q`` and ``W(mean < L) < q`` (the smallest value
    whose cumulative weight reaches ``q``); the same for the upper end.  Tree means: the leaf values of
    ``trees_`` (on the scale of y) at the rows; weights ``tree_weights(method)``."""
    reg, X = safebayes
    Xq = X[:10]
    means = _route(reg.trees_, reg.binner_.transform(Xq))[..., 0].astype(np.float64)      # (K, n)
    w = np.asarray(reg.tree_weights(method), np.float64)
    np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-6)                                  # float32 weights
    w /= w.sum()
    np.testing.assert_allclose(reg.predict(Xq, method), w @ means, rtol=1e-5)            # the weighted mean
    rtol = 1e-6
    prev = None
    for p in LEVELS:
        iv = reg.predict_interval(Xq, p, method=method)
        assert iv.shape == (len(Xq), 2)
        for end, q in ((0, (1 - p) / 2), (1, (1 + p) / 2)):
            L = iv[:, end]
            close = np.isclose(means, L[None, :], rtol=rtol, atol=1e-9)
            assert np.all(close.any(0)), "each end is one of the tree means"
            at_or_below = (w[:, None] * ((means <= L[None, :]) | close)).sum(0)
            below = (w[:, None] * ((means < L[None, :]) & ~close)).sum(0)
            assert np.all(at_or_below >= q - 1e-9) and np.all(below < q + 1e-9), (p, end)
        if prev is not None:
            assert np.all(iv[:, 0] <= prev[:, 0] + 1e-9) and np.all(prev[:, 1] <= iv[:, 1] + 1e-9)
        prev = iv
    assert np.any(prev[:, 1] > prev[:, 0])            # the weights are spread: the widest interval has width
