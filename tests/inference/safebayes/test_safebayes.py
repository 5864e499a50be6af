"""Tests of the safe-Bayesian random forest (prior trees, importance weights, estimators, model variable).

Reference answers: the closed-form code-string prior, numpy/scipy computations
of the weights by a direct traversal on PIT values, an exact Bayesian model
average on a tiny one-feature problem by a recursion over intervals, and the
conjugate leaf posteriors (moments of the drawn leaf parameters).  The
InferenceData tests check the posterior contract (docs/design.md): equally
weighted draws (trees resampled by w^beta), mu and the pointwise
log-likelihood in the response's units, NetCDF round trip, bt.loo and
bt.compare with another family, and the predictive naming of bt.SafeBayesForest.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gammaln as sgammaln

import jax
import jax.numpy as jnp

import bayestrees as bt
from bayestrees.data import ecdf_transform
from bayestrees.inference.safebayes import importance as imp
from bayestrees.inference.safebayes import prior_trees as pt
from bayestrees.inference.safebayes import fit as sb
from bayestrees.leaves import DirichletLeaves

LAM = 0.475
K, KMAX = 40, 31  # one (trees, capacity) shape for most tests: one compilation


@pytest.fixture(scope="module")
def big_prior():
    """10000 prior trees at lam = 0.475, max_internal = 31, root always split (the default)."""
    return pt.sample_prior_forest(jax.random.key(0), 10000, 3, LAM, KMAX)


@pytest.fixture(scope="module")
def big_prior_root_leaf():
    """10000 prior trees at lam = 0.475, max_internal = 31, ``root_splits=False``."""
    return pt.sample_prior_forest(jax.random.key(0), 10000, 3, LAM, KMAX, root_splits=False)


def _parse(code):
    """Reference: left, right, depth of a pre-order code string by recursion."""
    n = len(code)
    left, right, depth = [-1] * n, [-1] * n, [0] * n
    pos = [0]

    def rec(d):
        i = pos[0]
        pos[0] += 1
        depth[i] = d
        if code[i]:
            left[i] = rec(d + 1)
            right[i] = rec(d + 1)
        return i

    rec(0)
    assert pos[0] == n
    return left, right, depth


# ---------------------------------------------------------------- prior trees


def _catalan(k):
    return np.exp(sgammaln(2 * k + 1) - sgammaln(k + 1) - sgammaln(k + 2))


@pytest.mark.parametrize("root_splits", [True, False])
def test_size_distribution_matches_closed_form(big_prior, big_prior_root_leaf, root_splits):
    """Sampled numbers of internal nodes against the closed form (10000 trees, seed 0):
    every frequency within 5 binomial standard errors (+1e-4), the sample mean within
    5 standard errors of the truncated closed-form mean."""
    kmax = KMAX
    pf = big_prior if root_splits else big_prior_root_leaf
    k = (np.asarray(pf.n_nodes) - 1) // 2
    assert k.max() <= kmax
    lp = np.asarray(pt._n_internal_log_prob_np(LAM, kmax, root_splits))
    # closed forms: P(I=k) = Catalan(k) lam^k (1-lam)^(k+1), divided by lam for k >= 1 and 0 at k = 0
    # when the root always splits
    kk = np.arange(6)
    ref = _catalan(kk) * LAM ** kk * (1 - LAM) ** (kk + 1)
    if root_splits:
        ref = np.where(kk >= 1, ref / LAM, 0.0)
    np.testing.assert_allclose(np.exp(lp[:6]), ref, rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.exp(np.asarray(pt.n_internal_log_prob(kk, LAM, root_splits))), ref, rtol=1e-5)
    p = np.exp(lp) / np.exp(lp).sum()
    freq = np.bincount(k, minlength=kmax + 1) / k.size
    se = np.sqrt(p * (1 - p) / k.size)
    assert np.all(np.abs(freq - p) <= 5 * se + 1e-4), (freq, p)
    kv = np.arange(kmax + 1)
    mean = np.sum(kv * p)
    sd = np.sqrt(np.sum((kv - mean) ** 2 * p))
    assert abs(k.mean() - mean) <= 5 * sd / np.sqrt(k.size), (k.mean(), mean)
    # number of internal symbols equals (n_nodes - 1) / 2; the root is internal exactly when k >= 1
    internal = np.asarray(pf.internal)
    assert np.all(internal.sum(1) == k)
    np.testing.assert_array_equal(internal[:, 0], k >= 1)
    if root_splits:
        assert k.min() >= 1
    else:  # a single leaf with probability P(I = 0) / P(I <= kmax)
        assert abs(np.mean(k == 0) - p[0]) <= 5 * se[0]


def test_root_split_prior_closed_forms():
    """Root always split: I = 1 + I_L + I_R with I_L, I_R i.i.d. under the root_splits=False prior,
    i.e. that prior conditioned on I >= 1; mean 1 / (1 - 2 lam); tail mass divided by lam."""
    for lam in (0.2, 0.4, LAM):
        q = np.exp(pt._n_internal_log_prob_np(lam, 80, root_splits=False))
        p = np.exp(pt._n_internal_log_prob_np(lam, 80, root_splits=True))
        np.testing.assert_allclose(p[1:], np.convolve(q, q)[:80], rtol=1e-10, atol=1e-300)
        assert p[0] == 0.0
        np.testing.assert_allclose(p[1:], q[1:] / lam, rtol=1e-12)
        # means: the series (to a negligible tail) against the closed forms
        kk = np.arange(200001, dtype=float)
        for rs, closed in ((True, 1 / (1 - 2 * lam)), (False, lam / (1 - 2 * lam))):
            pk = np.exp(pt._n_internal_log_prob_np(lam, 200000, rs))
            assert pk.sum() == pytest.approx(1.0, abs=1e-9)
            assert np.sum(kk * pk) == pytest.approx(closed, rel=1e-6)
            assert pt.mean_n_internal(lam, rs) == pytest.approx(closed, rel=1e-12)
        assert pt.truncated_mass(lam, 40) == pytest.approx(pt.truncated_mass(lam, 40, root_splits=False) / lam,
                                                           rel=1e-6)
    assert pt.mean_n_internal(LAM) == pytest.approx(20.0)
    assert pt.mean_n_internal(LAM, root_splits=False) == pytest.approx(9.5)


def test_truncated_mass_values():
    # tails of the closed forms (float64 sums)
    assert pt.truncated_mass(LAM, 511, root_splits=False) == pytest.approx(0.0015227383, rel=1e-6)
    assert pt.truncated_mass(LAM, 1023, root_splits=False) == pytest.approx(1.88796e-4, rel=1e-4)
    assert pt.truncated_mass(LAM, 511) == pytest.approx(0.0015227383 / LAM, rel=1e-6)
    assert pt.truncated_mass(0.3, 200) < 1e-12
    with pytest.raises(ValueError, match="split_prob"):
        pt.truncated_mass(0.5, 10)
    with pytest.raises(ValueError, match="max_internal"):
        pt.sample_prior_forest(jax.random.key(0), 3, 2, LAM, 0)
    one = pt.sample_prior_forest(jax.random.key(0), 3, 2, LAM, 0, root_splits=False)
    assert np.all(np.asarray(one.n_nodes) == 1)


def test_code_strings_valid_uniform_and_structure_exact(big_prior):
    pf = big_prior
    internal = np.asarray(pf.internal)
    n_nodes = np.asarray(pf.n_nodes)
    shapes = {}
    for i in range(5000):
        n = n_nodes[i]
        code = internal[i, :n]
        s = np.cumsum(np.where(code, 1, -1))
        assert s[-1] == -1 and np.all(s[:-1] >= 0)  # valid pre-order code string
        assert not internal[i, n:].any()
        if i < 200:
            left, right, depth = _parse(code.tolist())
            assert np.asarray(pf.left[i, :n]).tolist() == left
            assert np.asarray(pf.right[i, :n]).tolist() == right
            assert np.asarray(pf.depth[i, :n]).tolist() == depth
        if (n - 1) // 2 == 3:
            shapes[tuple(code)] = shapes.get(tuple(code), 0) + 1
    # given k = 3 internal nodes, the Catalan(3) = 5 shapes are equally likely
    assert len(shapes) == 5
    counts = np.array(list(shapes.values()))
    tot = counts.sum()
    assert np.all(np.abs(counts / tot - 0.2) < 5 * np.sqrt(0.16 / tot))
    feat = np.asarray(pf.feature)
    cut = np.asarray(pf.cut)
    assert np.all((feat >= 0) == internal)
    assert np.all((cut >= 0) & (cut < 1))


def test_prior_is_data_independent_and_reproducible():
    a = pt.sample_prior_forest(jax.random.key(3), K, 4, LAM, KMAX)
    b = pt.sample_prior_forest(jax.random.key(3), K, 4, LAM, KMAX)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    rng = np.random.default_rng(0)
    X1, X2 = rng.normal(size=(40, 4)), rng.uniform(size=(60, 4))
    y1, y2 = rng.integers(0, 2, 40), rng.integers(0, 3, 60)
    c1 = bt.SafeBayesForestClassifier(K, max_internal=KMAX, random_state=7).fit(X1, y1)
    c2 = bt.SafeBayesForestClassifier(K, max_internal=KMAX, random_state=7).fit(X2, y2)
    for x, y in zip(c1.prior_trees_, c2.prior_trees_):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_cut_thresholds_equal_pit_comparison():
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.integers(0, 5, 37), rng.normal(size=37), np.full(37, 2.0)]).astype(float)
    X[3, 1] = np.nan
    b = bt.data.Binner(max_bins=100).fit(X)
    codes = b.transform(X)
    cum, npres = pt.bin_cum_counts(codes, b.n_bins_)
    cuts = rng.uniform(size=(3, 500))
    feats = np.repeat(np.arange(3)[:, None], 500, axis=1)
    thr = pt.cut_thresholds(feats, cuts, cum, npres)
    for j in range(3):
        col = X[:, j]
        ok = ~np.isnan(col)
        u = ecdf_transform(col[ok], np.sort(col[ok]))
        left_pit = u[None, :] <= cuts[j][:, None]
        left_code = codes[ok, j][None, :].astype(int) <= thr[j][:, None]
        np.testing.assert_array_equal(left_pit, left_code)


def test_cuts_below_the_smallest_value_send_rows_right():
    """On a feature with many ties at its minimum a cut c < F(min) sends every row right
    (threshold -1 in cut_thresholds).  The trees route every row as the PIT walk does."""
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.integers(0, 2, 60), rng.integers(0, 3, 60), rng.normal(size=60)]).astype(float)
    X[::7, 1] = np.nan
    y = rng.integers(0, 2, 60)
    clf = bt.SafeBayesForestClassifier(K, effective_sample_size=5, max_internal=KMAX, random_state=2).fit(X, y)
    prior = pt.PriorForest(*[np.asarray(a) for a in clf.prior_trees_])
    cum, npres = pt.bin_cum_counts(clf._codes(X), clf.binner_.n_bins_)
    assert np.sum(pt.cut_thresholds(prior.feature, prior.cut, cum, npres)[prior.feature >= 0] < 0) >= 10
    u = np.column_stack([ecdf_transform(X[:, j], np.sort(X[~np.isnan(X[:, j]), j])) for j in range(3)])
    leaves = np.asarray(imp.apply_trees(clf.trees_, jnp.asarray(clf._codes(X))))
    for i in range(K):
        for r in range(60):
            node = 0
            while prior.left[i, node] >= 0:
                f = prior.feature[i, node]
                if np.isnan(X[r, f]):
                    go_left = prior.missing_left[i, node]
                else:
                    go_left = u[r, f] <= prior.cut[i, node]
                node = prior.left[i, node] if go_left else prior.right[i, node]
            assert leaves[i, r] == node, (i, r)
    assert np.all(np.asarray(clf.trees_.threshold) >= 0)


# ---------------------------------------------------------------- weights


def _direct_leaves(prior, i, u):
    """Leaf slot of each row of PIT values ``u`` (n, D) in prior tree ``i``, by a python walk."""
    out = []
    for row in u:
        node = 0
        while prior.left[i, node] >= 0:
            f = prior.feature[i, node]
            node = prior.left[i, node] if row[f] <= prior.cut[i, node] else prior.right[i, node]
        out.append(node)
    return np.array(out)


def _pit(X):
    return np.column_stack([ecdf_transform(X[:, j], np.sort(X[:, j])) for j in range(X.shape[1])])


def test_class_weights_and_predictions_against_direct_numpy():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(45, 3))
    y = (X[:, 0] + 0.5 * rng.normal(size=45) > 0).astype(int)
    Xt = X[:7] + 0.0  # training rows: PIT comparison is exact for them
    alpha = 0.7
    clf = bt.SafeBayesForestClassifier(K, effective_sample_size=9, leaf_concentration=alpha, max_internal=KMAX,
                                       random_state=1).fit(X, y)
    prior = pt.PriorForest(*[np.asarray(a) for a in clf.prior_trees_])
    u = _pit(X)
    lw = np.zeros(K)
    mag = np.zeros(K)  # sum of |log-gamma terms| behind each log weight: their float32 rounding scale
    probs = np.zeros((K, 7, 2))
    for i in range(K):
        leaves = _direct_leaves(prior, i, u)
        for leaf in np.unique(leaves):
            cnt = np.bincount(y[leaves == leaf], minlength=2).astype(float)
            terms = np.r_[sgammaln(cnt + alpha), -sgammaln(cnt.sum() + 2 * alpha), -2 * sgammaln(alpha),
                          sgammaln(2 * alpha)]
            lw[i] += terms.sum()
            mag[i] += np.abs(terms).sum()
        for r in range(7):
            cnt = np.bincount(y[leaves == leaves[r]], minlength=2).astype(float)
            probs[i, r] = (cnt + alpha) / (cnt.sum() + 2 * alpha)
    np.testing.assert_allclose(clf.log_weights_, lw, rtol=1e-5, atol=1e-4)
    for method, beta in (("safe", 9 / 45), ("bma", 1.0)):
        z = beta * lw
        w = np.exp(z - z.max())
        w /= w.sum()
        np.testing.assert_allclose(clf.predict_proba(Xt, method), np.einsum("k,knc->nc", w, probs), atol=1e-5)
        # tempering and normalisation exactly, from the library's own (float32) log weights ...
        z_lib = beta * np.asarray(clf.log_weights_, np.float64)
        w_lib = np.exp(z_lib - z_lib.max())
        np.testing.assert_allclose(clf.tree_weights(method), w_lib / w_lib.sum(), atol=1e-6)
        # ... and against the direct weights. A float32 log weight near -30 is a sum of log-gamma
        # terms of up to ~130 (lgamma(45.7)), each rounded to its own ulp (7.6e-6 to 1.5e-5 there), so
        # its error is bounded by a few float32 epsilons times the sum of |terms| (4 here: the
        # log-gamma evaluation plus one rounding per addition). Normalising the tempered weights
        # moves log w_i by beta * (error_i - a weighted mean of the errors), hence the bound.
        err = 4 * np.finfo(np.float32).eps * mag
        np.testing.assert_array_less(np.abs(np.asarray(clf.log_weights_, np.float64) - lw), err)
        bound = beta * (err + err.max())
        np.testing.assert_array_less(np.abs(np.log(clf.tree_weights(method)) - np.log(w)), bound)
    best = int(np.argmax(lw))
    np.testing.assert_allclose(clf.predict_proba(Xt, "best"), probs[best], atol=1e-6)


def test_log_weights_huge_leaves_no_overflow():
    counts = jnp.asarray([[[3e6, 1e6], [0.0, 0.0], [5e6, 2.0]]])  # (K=1, L=3, C=2)
    lw = np.asarray(DirichletLeaves(2, 1.0).log_marginal(counts, jnp.ones((1, 3), bool)))  # the empty leaf adds 0
    c = np.array([[3e6, 1e6], [5e6, 2.0]])
    ref = (sgammaln(c + 1).sum(1) - sgammaln(c.sum(1) + 2) + sgammaln(2.0)).sum()
    assert np.isfinite(lw).all()
    np.testing.assert_allclose(lw[0], ref, rtol=1e-5)  # float32: ~6e-8 * sum |gammaln| 
    tw = np.asarray(imp.tempered_log_weights(jnp.asarray([ref, ref - 1e7, ref + 3.0], jnp.float32), 1.0))
    ref_tw = np.array([-3.0, -1e7, 0.0]) - np.log1p(np.exp(-3.0))
    np.testing.assert_allclose(tw[[0, 2]], ref_tw[[0, 2]], atol=1e-6)
    assert np.exp(tw).sum() == pytest.approx(1.0, abs=1e-6)


def _exact_bma(x_codes_counts, lam, kmax, alpha, n_classes, root_splits=True):
    """Exact BMA marginal under the code-string prior (one feature), truncated to I <= kmax.

    Bins b = 0..n-1 at PIT (b + 1) / n hold class counts ``counts[b]``; a cut
    c in [b / n, (b + 1) / n) sends bins 0..b-1 left.  Z_k(i, j) = E[p(Y_i..j | T); I = k]
    under the root_splits=False prior by recursion on k; empty regions give the prior
    mass P(I = k).  With the root always split the prior is that one conditioned on
    I >= 1, so the sums below start at k = 1.
    """
    counts = np.asarray(x_codes_counts, float)
    n = counts.shape[0]
    pk = np.exp(pt._n_internal_log_prob_np(lam, kmax, root_splits=False))

    def leaf(i, j):
        c = counts[i:j].sum(0)
        return np.exp(sgammaln(c + alpha).sum() - sgammaln(c.sum() + n_classes * alpha)
                      - n_classes * sgammaln(alpha) + sgammaln(n_classes * alpha))

    Z = {}
    for k in range(kmax + 1):
        for length in range(0, n + 1):
            for i in range(0, n - length + 1):
                j = i + length
                if length == 0:
                    Z[k, i, j] = pk[k]
                    continue
                if k == 0:
                    Z[k, i, j] = (1 - lam) * leaf(i, j)
                    continue
                tot = 0.0
                for b in range(n):  # cut in [b/n, (b+1)/n): bins < b go left
                    m = min(max(b, i), j)
                    for a in range(k):
                        tot += Z[a, i, m] * Z[k - 1 - a, m, j]
                Z[k, i, j] = lam / n * tot
    k0 = 1 if root_splits else 0
    return sum(Z[k, 0, n] for k in range(k0, kmax + 1)) / pk[k0:].sum()


@pytest.mark.parametrize("root_splits", [True, False])
def test_bma_beta_one_matches_exact_model_average(root_splits):
    x = np.array([[1.0], [2.0], [3.0], [4.0], [5.0]])
    y = np.array([0, 0, 1, 1, 0])
    kmax, alpha = KMAX, 1.0
    clf = bt.SafeBayesForestClassifier(20000, split_prob=0.4, effective_sample_size=5, leaf_concentration=alpha,
                                       root_splits=root_splits, max_internal=kmax, random_state=0).fit(x, y)
    p = clf.predict_proba(x, "bma")
    assert clf.beta_ == 1.0
    base = np.eye(2)[y]
    z0 = _exact_bma(base, 0.4, kmax, alpha, 2, root_splits)
    for r in range(5):
        ref = []
        for c in range(2):
            cc = base.copy()
            cc[r, c] += 1
            ref.append(_exact_bma(cc, 0.4, kmax, alpha, 2, root_splits) / z0)
        assert sum(ref) == pytest.approx(1.0, abs=1e-9)
        # importance sampling with 20000 prior trees: Monte Carlo error about 0.004
        np.testing.assert_allclose(p[r], ref, atol=0.015)


def test_regression_weights_against_direct_numpy():
    rng = np.random.default_rng(5)
    X = rng.uniform(size=(50, 2))
    y = np.sin(4 * X[:, 0]) + 0.2 * rng.normal(size=50)
    reg = bt.SafeBayesForestRegressor(K, effective_sample_size=10, max_internal=KMAX, random_state=2).fit(X, y)
    m0, k0, a0, b0 = reg.leaf_prior_
    prior = pt.PriorForest(*[np.asarray(a) for a in reg.prior_trees_])
    u = _pit(X)
    lw = np.zeros(K)
    means = np.zeros((K, 50))
    for i in range(K):
        leaves = _direct_leaves(prior, i, u)
        for leaf in np.unique(leaves):
            yl = y[leaves == leaf]
            n = yl.size
            kn, an = k0 + n, a0 + n / 2
            bn = b0 + 0.5 * np.sum((yl - yl.mean()) ** 2) + k0 * n * (yl.mean() - m0) ** 2 / (2 * kn)
            lw[i] += (sgammaln(an) - sgammaln(a0) + a0 * np.log(b0) - an * np.log(bn)
                      + 0.5 * np.log(k0 / kn) - 0.5 * n * np.log(2 * np.pi))
            means[i, leaves == leaf] = (k0 * m0 + yl.sum()) / kn
    np.testing.assert_allclose(reg.log_weights_, lw, rtol=1e-4, atol=2e-3)
    z = 10 / 50 * lw
    w = np.exp(z - z.max())
    w /= w.sum()
    np.testing.assert_allclose(reg.predict(X), w @ means, atol=1e-4)


# ---------------------------------------------------------------- operating curve, auto m


def test_operating_curve_and_auto_cross_validation():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] > 0).astype(int)
    clf = bt.SafeBayesForestClassifier(K, max_internal=KMAX, random_state=0).fit(X, y)  # default: auto, 5-fold CV
    oc = clf.operating_curve_
    assert oc["on"] == "cross-validation" and oc["n_folds"] == 5 and oc["n_train"] == 120
    grid = imp.auto_m_grid(120)
    np.testing.assert_array_equal(oc["m"], grid)
    assert grid[0] == 1 and 120 in grid and grid[-1] == 120 * 1000  # prior average .. BMA .. towards the best tree
    assert oc["accuracy"].shape == oc["log_predictive"].shape == grid.shape
    # default criterion: largest CV accuracy, ties by log predictive, then smallest m
    top = oc["accuracy"] == oc["accuracy"].max()
    best = oc["m"][top][np.argmax(oc["log_predictive"][top])]
    assert clf.effective_sample_size_ == best and clf.beta_ == best / 120
    lp_clf = bt.SafeBayesForestClassifier(K, max_internal=KMAX, auto_criterion="log_predictive",
                                          random_state=0).fit(X, y)
    np.testing.assert_allclose(lp_clf.operating_curve_["log_predictive"], oc["log_predictive"])
    assert lp_clf.effective_sample_size_ == oc["m"][np.argmax(oc["log_predictive"])]
    # curve on given data: m = N is BMA, and matches predict_proba
    Xt = rng.normal(size=(30, 3))
    yt = (Xt[:, 0] > 0).astype(int)
    cur = clf.operating_curve(Xt, yt, m_grid=[5, 120])
    assert cur["log_predictive"][1] == pytest.approx(clf.log_predictive(Xt, yt, "bma"), abs=1e-5)
    acc_bma = np.mean(clf.predict(Xt, "bma") == yt)
    assert cur["accuracy"][1] == pytest.approx(acc_bma)
    # one hold-out split (validation_fraction), and the in-sample curve (validation_fraction=0)
    ho = bt.SafeBayesForestClassifier(K, max_internal=KMAX, validation_fraction=0.2, random_state=0).fit(X, y)
    assert ho.operating_curve_["on"] == "validation" and ho.operating_curve_["n_train"] == 96
    tr = bt.SafeBayesForestClassifier(K, max_internal=KMAX, validation_fraction=0.0, random_state=0).fit(X, y)
    assert tr.operating_curve_["on"] == "training"
    # fixed m: training-set curve
    clf2 = bt.SafeBayesForestClassifier(K, effective_sample_size=5, max_internal=KMAX, random_state=0).fit(X, y)
    assert clf2.operating_curve_["on"] == "training"
    assert clf2.effective_sample_size_ == 5.0
    # m > N is allowed: beta > 1 sharpens the weights towards the best tree
    sharp = bt.SafeBayesForestClassifier(K, effective_sample_size=120 * 1000, max_internal=KMAX,
                                         random_state=0).fit(X, y)
    np.testing.assert_allclose(sharp.tree_weights(), sharp.tree_weights("best"), atol=1e-3)


def test_cross_validation_folds_and_pooled_curve():
    """Stratified folds of near-equal size; the pooled curve equals a direct computation
    from per-fold fits with a fixed m on the same prior trees.

    The features take 8 values, each present in every fold's fitting rows: held-out rows
    then meet the same cuts whether they are coded by the full data's bins (as in the
    cross-validation) or by the fold's own bins (as new rows are)."""
    rng = np.random.default_rng(16)
    X = rng.integers(0, 8, size=(90, 2)).astype(float)
    y = np.r_[np.zeros(63, int), np.ones(27, int)]
    clf = bt.SafeBayesForestClassifier(K, max_internal=KMAX, random_state=4).fit(X, y)
    key_split = jax.random.split(clf._key())[1]
    fold = sb.fold_ids(y, 5, key_split, stratified=True)
    for f in range(5):
        assert np.sum(fold == f) == 18
        assert all(len(np.unique(X[fold != f, j])) == 8 for j in range(2))
        assert abs(np.sum(y[fold == f]) - 27 / 5) < 1  # 5 or 6 positives per fold
    grid = imp.auto_m_grid(90)
    acc, lp = np.zeros(grid.size), np.zeros(grid.size)
    for f in range(5):
        tr, va = fold != f, fold == f
        sub = bt.SafeBayesForestClassifier(K, effective_sample_size=1, max_internal=KMAX,
                                           random_state=4).fit(X[tr], y[tr])
        c = sub.operating_curve(X[va], y[va], m_grid=grid)
        acc += c["accuracy"] * va.sum() / 90
        lp += c["log_predictive"] * va.sum() / 90
    oc = clf.operating_curve_
    np.testing.assert_allclose(oc["accuracy"], acc, atol=1e-6)
    np.testing.assert_allclose(oc["log_predictive"], lp, atol=1e-5)


def test_pool_curves_equals_curve_on_union():
    rng = np.random.default_rng(17)
    X = rng.uniform(size=(70, 2))
    y = 2 * X[:, 0] + 0.3 * rng.normal(size=70)
    reg = bt.SafeBayesForestRegressor(K, effective_sample_size=7, max_internal=KMAX, random_state=0).fit(X, y)
    Xt = rng.uniform(size=(50, 2))
    yt = 2 * Xt[:, 0] + 0.3 * rng.normal(size=50)
    grid = [1, 7, 70, 700]
    whole = reg.operating_curve(Xt, yt, m_grid=grid)
    parts = [reg.operating_curve(Xt[:20], yt[:20], m_grid=grid), reg.operating_curve(Xt[20:], yt[20:], m_grid=grid)]
    pooled = imp.pool_curves(parts, [20, 30])
    np.testing.assert_allclose(pooled["rmse"], whole["rmse"], rtol=1e-5)
    np.testing.assert_allclose(pooled["log_predictive"], whole["log_predictive"], rtol=1e-5)


def _imbalanced(rng, n):
    """About 25% positives: x0 > 0.8 among 6 features, 5% of labels flipped."""
    X = rng.uniform(size=(n, 6))
    y = ((X[:, 0] > 0.8) ^ (rng.uniform(size=n) < 0.05)).astype(int)
    return X, y


def test_auto_not_majority_class_on_imbalanced_data():
    """On imbalanced data with a clear signal m = 5 predicts the majority class; the default
    ("auto", 5-fold CV on the training rows) does not, and is at least as accurate as the
    better of BMA and the best tree on fresh rows (up to 2 rows in 400)."""
    rng = np.random.default_rng(18)
    X, y = _imbalanced(rng, 300)
    Xt, yt = _imbalanced(rng, 400)
    m5 = bt.SafeBayesForestClassifier(K, effective_sample_size=5, max_internal=KMAX, random_state=0).fit(X, y)
    auto = bt.SafeBayesForestClassifier(K, max_internal=KMAX, random_state=0).fit(X, y)
    acc = {name: np.mean(est.predict(Xt, method) == yt)
           for name, est, method in (("m5", m5, "safe"), ("auto", auto, "safe"), ("bma", m5, "bma"),
                                     ("best", m5, "best"))}
    majority = max(np.mean(yt), 1 - np.mean(yt))
    assert np.all(m5.predict(Xt) == 0), acc
    assert acc["auto"] >= majority + 0.1, acc
    assert acc["auto"] >= max(acc["bma"], acc["best"]) - 2 / 400, acc


def test_regressor_auto_and_log_predictive():
    rng = np.random.default_rng(8)
    X = rng.uniform(size=(80, 1))
    y = 3 * (X[:, 0] > 0.5) + 0.3 * rng.normal(size=80)
    reg = bt.SafeBayesForestRegressor(K, max_internal=KMAX, random_state=3).fit(X, y)
    oc = reg.operating_curve_
    assert set(oc) >= {"m", "rmse", "log_predictive"} and oc["on"] == "cross-validation"
    assert reg.effective_sample_size_ == oc["m"][np.argmax(oc["log_predictive"])]
    pred = reg.predict(X)
    assert np.sqrt(np.mean((pred - y) ** 2)) < 0.8
    assert np.isfinite(reg.log_predictive(X, y))
    cur = reg.operating_curve(X, y, m_grid=[reg.effective_sample_size_])
    assert cur["log_predictive"][0] == pytest.approx(reg.log_predictive(X, y), abs=1e-4)
    assert cur["rmse"][0] == pytest.approx(np.sqrt(np.mean((pred - y) ** 2)), rel=1e-5)


@pytest.mark.parametrize("scale", [1e30, 1e-30])
def test_regressor_targets_of_any_scale(scale):
    """Targets of order 1e30 (or 1e-30) give the fit on y / scale, scaled back: the
    targets are standardised internally and every output is mapped back (log densities
    with the -log(scale) Jacobian, log weights with -N log(scale))."""
    rng = np.random.default_rng(15)
    X = rng.uniform(size=(60, 2))
    y = np.sin(4 * X[:, 0]) + 2.0 + 0.2 * rng.normal(size=60)
    Xt = rng.uniform(size=(9, 2))
    yt = np.sin(4 * Xt[:, 0]) + 2.0
    kw = dict(draws=K, max_internal=KMAX, random_state=1)
    ref = bt.SafeBayesForestRegressor(**kw).fit(X, y)
    big = bt.SafeBayesForestRegressor(**kw).fit(X, y * scale)
    assert big.effective_sample_size_ == ref.effective_sample_size_
    for method in ("safe", "bma", "best"):
        p = big.predict(Xt, method)
        assert np.all(np.isfinite(p))
        np.testing.assert_allclose(p / scale, ref.predict(Xt, method), rtol=1e-5)
        assert big.log_predictive(Xt, yt * scale, method) + np.log(scale) == pytest.approx(
            ref.log_predictive(Xt, yt, method), abs=1e-4)
    for kind in ("mean", "predictive"):
        iv = big.predict_interval(Xt, 0.8, kind=kind)
        assert np.all(np.isfinite(iv))
        np.testing.assert_allclose(iv / scale, ref.predict_interval(Xt, 0.8, kind=kind), rtol=1e-5)
    np.testing.assert_allclose(big.log_weights_ + 60 * np.log(scale), ref.log_weights_, rtol=1e-6)
    np.testing.assert_allclose(big.operating_curve_["rmse"] / scale, ref.operating_curve_["rmse"], rtol=1e-5)
    assert np.all(np.isfinite(np.asarray(big.trees_.value)))
    # the per-tree predictives of the inference layer are on the scale of y
    mean, scale2, df = sb.regression_predictive(big._result, big._codes(Xt))
    np.testing.assert_allclose(big.tree_weights() @ mean / scale, ref.predict(Xt), rtol=1e-5)


def test_predict_interval_quantiles():
    """The predictive interval ends are the mixture quantiles (mixture CDF evaluated with
    scipy); the mean interval of the single best tree is a point."""
    from scipy import stats

    rng = np.random.default_rng(19)
    X = rng.uniform(size=(50, 1))
    y = X[:, 0] + 0.2 * rng.normal(size=50)
    reg = bt.SafeBayesForestRegressor(K, effective_sample_size=10, max_internal=KMAX, random_state=0).fit(X, y)
    Xt = X[:4]
    iv = reg.predict_interval(Xt, 0.9, kind="predictive")
    mean, scale2, df = sb.regression_predictive(reg._result, reg._codes(Xt))
    w = reg.tree_weights()
    for q, col in ((0.05, 0), (0.95, 1)):
        cdf = np.einsum("k,kn->n", w, stats.t.cdf(iv[:, col][None, :], df, mean, np.sqrt(scale2)))
        np.testing.assert_allclose(cdf, q, atol=1e-6)
    pt_iv = reg.predict_interval(Xt, 0.9, method="best")
    np.testing.assert_allclose(pt_iv[:, 0], pt_iv[:, 1])
    np.testing.assert_allclose(pt_iv[:, 0], reg.predict(Xt, "best"), rtol=1e-6)
    mean_iv = reg.predict_interval(Xt, 0.9)
    assert np.all(mean_iv[:, 0] <= reg.predict(Xt) + 1e-6) and np.all(reg.predict(Xt) <= mean_iv[:, 1] + 1e-6)
    with pytest.raises(ValueError, match="prob"):
        reg.predict_interval(Xt, 1.0)


# ---------------------------------------------------------------- API


def _summary_names(idata):
    """Variable names of the rows of ``az.summary(idata)`` with no arguments."""
    import warnings

    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # one chain: ArviZ warns that R-hat needs two
        return {str(i).split("[")[0] for i in az.summary(idata).index}


def _class_data(n=90, seed=20):
    """Three classes with string labels, decided by the first of three features."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.array(["lo", "mid", "hi"])[np.digitize(X[:, 0] + 0.3 * rng.normal(size=n), [-0.5, 0.5])]
    return X, y


def _reg_data(n=70, seed=21):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    return X, 2.0 * (X[:, 0] > 0.5) + 0.3 * rng.normal(size=n) + 1.0


@pytest.fixture(scope="module")
def sb_clf():
    X, y = _class_data()
    return X, y, bt.SafeBayesForestClassifier(K, effective_sample_size=20, max_internal=KMAX, random_state=0).fit(X, y)


@pytest.fixture(scope="module")
def sb_reg():
    X, y = _reg_data()
    return X, y, bt.SafeBayesForestRegressor(K, effective_sample_size=10, max_internal=KMAX, random_state=0).fit(X, y)


def test_contract_classifier(sb_clf):
    """Equally weighted draws by the contract: posterior n_leaves/depth/split_counts/mu only; mu = the drawn
    leaf probabilities = the trees group's leaves; log_likelihood = log of the drawn probability of y;
    the draws are the prior trees resampled by w^beta (systematic: each tree floor or ceil of K w times)."""
    from bayestrees.convert import trees_from_inferencedata
    from bayestrees.tree import predict

    X, y, clf = sb_clf
    idata = clf.idata_
    assert set(idata.groups()) == {"posterior", "log_likelihood", "sample_stats", "observed_data", "constant_data",
                                   "trees"}
    assert set(idata.posterior.data_vars) == {"n_leaves", "depth", "split_counts", "mu"}
    assert _summary_names(idata) == {"n_leaves", "depth", "split_counts", "mu"}
    mu = idata.posterior["mu"]
    assert mu.dims == ("chain", "draw", "obs", "class") and mu.shape == (1, K, len(X), 3)
    assert list(mu["class"].values) == [str(c) for c in clf.classes_]
    np.testing.assert_allclose(mu.values.sum(-1), 1.0, rtol=1e-5)
    trees = trees_from_inferencedata(idata)
    codes = clf.binner_.transform(X)
    np.testing.assert_allclose(np.asarray(predict(trees, codes)), mu.values, rtol=1e-6)
    yc = np.searchsorted(clf.classes_, y)
    ref = np.log(np.take_along_axis(mu.values, yc[None, None, :, None], -1)[..., 0])
    np.testing.assert_allclose(idata.log_likelihood["y"].values, ref, rtol=1e-5)
    np.testing.assert_array_equal(idata.observed_data["y"].values, y)
    assert list(idata.constant_data["feature_names"].values) == ["x0", "x1", "x2"]
    np.testing.assert_array_equal(idata.constant_data["n_bins"].values, clf.binner_.n_bins_)
    attrs = idata.posterior.attrs
    assert attrs["family"] == "safe_bayes" and attrs["task"] == "classification"
    assert "resampled by tempered weight w^beta" in attrs["draws"] and attrs["beta"] == clf.beta_
    # the draws: prior trees resampled by their tempered weights, leaf parameters drawn per draw
    idx = idata.sample_stats["tree_index"].values[0]
    assert np.all(np.diff(idx) >= 0)
    np.testing.assert_allclose(idata.sample_stats["log_weight"].values[0], clf.log_weights_[idx])
    w = clf.tree_weights()
    np.testing.assert_allclose(np.exp(idata.sample_stats["tempered_log_weight"].values[0]), w[idx], rtol=1e-5)
    counts = np.bincount(idx, minlength=K)
    assert np.all(counts >= np.floor(K * w - 1e-4)) and np.all(counts <= np.ceil(K * w + 1e-4))
    for f in ("feature", "threshold", "left", "right", "missing_left"):
        np.testing.assert_array_equal(np.asarray(getattr(trees, f))[0], np.asarray(getattr(clf.trees_, f))[idx])
    assert attrs["distinct_trees"] == np.unique(idx).size
    # two draws of one tree have different leaf probabilities (parameters are drawn, not the predictive)
    dup = np.flatnonzero(np.diff(idx) == 0)
    assert dup.size and not np.allclose(mu.values[0, dup[0]], mu.values[0, dup[0] + 1])
    # the unresampled weights of all K trees stay on the estimator
    assert clf.log_weights_.shape == (K,)


def test_leaf_draws_follow_the_conjugate_posterior():
    """With beta large every draw is the best tree; its drawn leaf parameters have the moments of the
    conjugate posterior on the scale of y: Dirichlet(n + alpha) for classes, NIG for regression
    (mean m_n, E[s2] = b_n / (a_n - 1)), computed here in float64 from the raw rows."""
    from bayestrees.tree import apply

    key = jax.random.key(5)
    n_draws = 4000
    X, y = _class_data()
    clf = bt.SafeBayesForestClassifier(K, effective_sample_size=1e7, leaf_concentration=0.5, max_internal=KMAX,
                                       random_state=1).fit(X, y)
    draws = sb.posterior_draws(key, clf._result, n_draws)
    best = int(np.argmax(clf.log_weights_))
    assert np.all(draws.index == best)
    leaf = np.asarray(apply(jax.tree_util.tree_map(lambda a: a[best], clf.trees_), clf.binner_.transform(X)))
    yc = np.searchsorted(clf.classes_, y)
    v = np.asarray(draws.trees.value)
    for lf in np.unique(leaf):
        a = np.bincount(yc[leaf == lf], minlength=3) + 0.5
        mean, var = a / a.sum(), a * (a.sum() - a) / (a.sum() ** 2 * (a.sum() + 1))
        p = v[:, lf, :]
        assert np.all(np.abs(p.mean(0) - mean) < 5 * np.sqrt(var / n_draws)), (lf, p.mean(0), mean)
        assert np.all(np.abs(p.var(0) / var - 1) < 0.2), (lf, p.var(0), var)

    Xr, yr = _reg_data()
    scale = 1e3
    reg = bt.SafeBayesForestRegressor(K, effective_sample_size=1e7, max_internal=KMAX, random_state=1).fit(
        Xr, yr * scale)
    draws = sb.posterior_draws(key, reg._result, n_draws)
    best = int(np.argmax(reg.log_weights_))
    assert np.all(draws.index == best)
    leaf = np.asarray(apply(jax.tree_util.tree_map(lambda a: a[best], reg.trees_), reg.binner_.transform(Xr)))
    m0, k0, a0, b0 = reg.leaf_prior_
    mu = np.asarray(draws.trees.value, np.float64)[:, :, 0]
    s2 = (np.asarray(draws.leaf_draw.sigma, np.float64) * reg.y_scale_) ** 2
    checked = 0
    for lf in np.unique(leaf):
        yl = yr[leaf == lf] * scale
        n = yl.size
        if n < 5:
            continue
        kn, an = k0 + n, a0 + n / 2
        mn = (k0 * m0 + yl.sum()) / kn
        bn = b0 + 0.5 * np.sum((yl - yl.mean()) ** 2) + k0 * n * (yl.mean() - m0) ** 2 / (2 * kn)
        e_s2 = bn / (an - 1)
        sd_mu = np.sqrt(e_s2 / kn)  # marginal sd of mu (Student-t) is close to this for a_n >> 1
        assert abs(mu[:, lf].mean() - mn) < 5 * sd_mu / np.sqrt(n_draws), (lf, mu[:, lf].mean(), mn)
        assert abs(s2[:, lf].mean() / e_s2 - 1) < 0.1, (lf, s2[:, lf].mean(), e_s2)
        checked += 1
    assert checked >= 2


def test_contract_regressor_in_the_units_of_y():
    """mu and the pointwise log-likelihood are in the response's units: fitting y * 1e30 gives
    mu * 1e30 and log-likelihoods shifted by -log(1e30) (same seed: the same standardised fit and draws);
    the log-likelihood is the Normal density at the drawn leaf mean and sd (scipy)."""
    from scipy import stats

    from bayestrees.keys import make_key

    X, y = _reg_data()
    cfg = sb.SafeBayesConfig(K, effective_sample_size=10, max_internal=KMAX)
    out = {}
    for scale in (1.0, 1e30):
        data = sb.prepare_safebayes_data(X, y * scale, task="regression")
        res = sb.fit_safebayes(make_key(0), data, cfg)
        out[scale] = (res, sb.safebayes_inferencedata(make_key(1), res, data))
    res, idata = out[1.0]
    assert set(idata.posterior.data_vars) == {"n_leaves", "depth", "split_counts", "mu"}
    assert _summary_names(idata) == {"n_leaves", "depth", "split_counts", "mu"}
    mu = idata.posterior["mu"]
    assert mu.dims == ("chain", "draw", "obs") and mu.shape == (1, K, len(X))
    ll = idata.log_likelihood["y"].values
    draws = sb.posterior_draws(make_key(1), res)
    from bayestrees.tree import apply

    leaves = np.asarray(apply(draws.trees, sb.prepare_safebayes_data(X, y).codes))
    sd = np.take_along_axis(np.asarray(draws.leaf_draw.sigma, np.float64), leaves, -1) * res.y_scale
    np.testing.assert_allclose(ll[0], stats.norm.logpdf(y[None, :], mu.values[0], sd), rtol=1e-4, atol=1e-4)
    big_res, big = out[1e30]
    assert np.all(np.isfinite(big.posterior["mu"].values)) and np.all(np.isfinite(big.log_likelihood["y"].values))
    np.testing.assert_allclose(big.posterior["mu"].values / 1e30, mu.values, rtol=1e-5)
    np.testing.assert_allclose(big.log_likelihood["y"].values + np.log(1e30), ll, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(big.observed_data["y"].values, y * 1e30)
    np.testing.assert_allclose(big.sample_stats["log_weight"].values + len(y) * np.log(1e30),
                               idata.sample_stats["log_weight"].values, rtol=1e-6)


def test_loo_for_classifier_and_regressor(sb_clf, sb_reg):
    import warnings

    for est in (sb_clf[2], sb_reg[2]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")                   # Pareto k warnings on few draws
            res = bt.loo(est.idata_)
        n = est.idata_.observed_data["y"].shape[0]
        assert np.isfinite(res["elpd_loo"]) and res["n_data_points"] == n
        ll = est.idata_.log_likelihood["y"].values.reshape(-1, n)
        lppd = float(np.sum(np.log(np.mean(np.exp(ll), 0))))
        assert res["elpd_loo"] <= lppd + 1e-6


def test_compare_with_pcfg_classifier(sb_clf):
    """bt.compare / az.compare of a safe-Bayes and a PCFG classifier fitted to the same rows."""
    import warnings

    import arviz as az

    X, y, clf = sb_clf
    pc = bt.PCFGTreeClassifier(max_bins=4, draws=K, random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmp = bt.compare({"safe_bayes": clf.idata_, "pcfg": pc.idata_})
        cmp_az = az.compare({"safe_bayes": clf.idata_, "pcfg": pc.idata_})
    assert set(cmp.index) == {"safe_bayes", "pcfg"} and np.all(np.isfinite(cmp["elpd_loo"]))
    np.testing.assert_allclose(cmp.loc[["safe_bayes", "pcfg"], "elpd_loo"],
                               cmp_az.loc[["safe_bayes", "pcfg"], "elpd_loo"])
    for name, est in (("safe_bayes", clf), ("pcfg", pc)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert cmp.loc[name, "elpd_loo"] == pytest.approx(bt.loo(est.idata_)["elpd_loo"])


def test_trees_group_netcdf_round_trip(tmp_path, sb_clf):
    import arviz as az

    from bayestrees.convert import trees_from_inferencedata

    idata = sb_clf[2].idata_
    path = tmp_path / "sb.nc"
    idata.to_netcdf(str(path))
    back = az.from_netcdf(str(path))
    a, b = trees_from_inferencedata(idata), trees_from_inferencedata(back)
    for f in a._fields:
        np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), err_msg=f)
    np.testing.assert_array_equal(back.posterior["mu"].values, idata.posterior["mu"].values)
    np.testing.assert_array_equal(back.log_likelihood["y"].values, idata.log_likelihood["y"].values)
    for v in ("log_weight", "tempered_log_weight", "tree_index"):
        np.testing.assert_array_equal(back.sample_stats[v].values, idata.sample_stats[v].values)
    assert back.trees.attrs["family"] == "safe_bayes" and back.posterior.attrs["draws"] == idata.posterior.attrs[
        "draws"]


def test_model_classification_predictions_naming():
    """Classification: ``f`` labels drawn from ``f_proba`` (dims obs, class; the drawn leaf probabilities),
    at the training rows f_proba is mu; on new rows it is the trees group's leaves."""
    from bayestrees.convert import trees_from_inferencedata
    from bayestrees.tree import predict

    X, y = _class_data()
    with bt.Model():
        f = bt.SafeBayesForest("f", bt.Data("X", X), y, effective_sample_size=20, max_internal=KMAX)
        assert f.task == "classification"
        idata = bt.sample(draws=K // 2, chains=2, random_seed=0)
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, random_seed=1)
        bt.set_data({"X": X[:6]})
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True, random_seed=2)
    assert idata.posterior.sizes["chain"] == 2 and idata.posterior.sizes["draw"] == K // 2
    assert set(idata.log_likelihood.data_vars) == {"f"} and set(idata.observed_data.data_vars) == {"f"}
    pp = idata.posterior_predictive
    assert set(pp.data_vars) == {"f", "f_proba"} and pp["f_proba"].dims == ("chain", "draw", "obs", "class")
    np.testing.assert_allclose(pp["f_proba"].values, idata.posterior["mu"].values, rtol=1e-6)
    pred = idata.predictions
    assert set(pred.data_vars) == {"f", "f_proba"} and pred["f"].shape == (2, K // 2, 6)
    assert list(pred["f_proba"]["class"].values) == ["hi", "lo", "mid"]
    assert set(np.unique(pred["f"].values)) <= {"hi", "lo", "mid"}
    trees = trees_from_inferencedata(idata)
    codes = f.fitted_.data.binner.transform(X[:6])
    np.testing.assert_allclose(pred["f_proba"].values, np.asarray(predict(trees, codes)), rtol=1e-6)
    # the labels follow the drawn probabilities: class frequencies within 5 standard errors
    labels = pp["f"].values
    for c, name in enumerate(["hi", "lo", "mid"]):
        p = pp["f_proba"].values[..., c]
        assert abs(np.mean(labels == name) - p.mean()) < 5 * np.sqrt(np.mean(p * (1 - p)) / p.size)


def test_model_regression_predictions_naming():
    """Regression: ``f`` (drawn responses) and ``f_mu`` (drawn leaf means, in y's units); at the
    training rows f_mu is mu.  With beta large every draw is the best tree, and the residuals
    f - f_mu have mean 0 and mean square E[s2 | Y, T] = b_n / (a_n - 1) of each row's leaf."""
    from bayestrees.tree import apply

    X, y = _reg_data()
    scale = 1e6
    with bt.Model():
        f = bt.SafeBayesForest("f", bt.Data("X", X), y * scale, effective_sample_size=1e7, max_internal=KMAX)
        assert f.task == "regression"
        idata = bt.sample(draws=K, chains=2, random_seed=0)
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, random_seed=1)
        bt.set_data({"X": X[:7]})
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True, random_seed=2)
    pp = idata.posterior_predictive
    assert set(pp.data_vars) == {"f", "f_mu"} and pp["f"].shape == (2, K, len(X))
    np.testing.assert_allclose(pp["f_mu"].values, idata.posterior["mu"].values, rtol=1e-6)
    assert set(idata.predictions.data_vars) == {"f", "f_mu"}
    np.testing.assert_allclose(idata.predictions["f_mu"].values, idata.posterior["mu"].values[..., :7], rtol=1e-6)
    res = f.fitted_.result
    best = int(np.argmax(res.log_weights))
    assert np.all(idata.sample_stats["tree_index"].values == best)
    leaf = np.asarray(apply(jax.tree_util.tree_map(lambda a: a[best], res.trees), f.fitted_.data.codes))
    m0, k0, a0, b0 = res.leaf_prior
    e_s2 = np.zeros(len(X))
    for lf in np.unique(leaf):
        yl = y[leaf == lf] * scale
        n = yl.size
        kn, an = k0 + n, a0 + n / 2
        e_s2[leaf == lf] = (b0 + 0.5 * np.sum((yl - yl.mean()) ** 2)
                            + k0 * n * (yl.mean() - m0) ** 2 / (2 * kn)) / (an - 1)
    r = pp["f"].values - pp["f_mu"].values
    z = r / np.sqrt(e_s2)
    assert abs(z.mean()) < 5 / np.sqrt(z.size)
    assert 0.85 < np.mean(z ** 2) < 1.15


def test_model_and_estimator_share_one_fit():
    """Same seed, data and hyperparameters: bt.SafeBayesForest and the classifier weigh the same trees and
    write the same draws."""
    X, y = _class_data()
    clf = bt.SafeBayesForestClassifier(K, max_internal=KMAX, random_state=3).fit(X, y)
    with bt.Model():
        f = bt.SafeBayesForest("f", bt.Data("X", X), y, max_internal=KMAX)
        idata = bt.sample(draws=K, chains=1, random_seed=3)
    res = f.fitted_.result
    np.testing.assert_array_equal(res.log_weights, clf.log_weights_)
    assert res.effective_sample_size == clf.effective_sample_size_      # the same default ("auto", 5-fold CV)
    np.testing.assert_array_equal(idata.posterior["mu"].values, clf.idata_.posterior["mu"].values)
    np.testing.assert_array_equal(idata.log_likelihood["f"].values, clf.idata_.log_likelihood["y"].values)
    np.testing.assert_array_equal(idata.sample_stats["tree_index"].values, clf.idata_.sample_stats["tree_index"].values)


def test_model_task_inference_and_checks():
    """"auto" uses data.infer_task; hyperparameters are checked when the variable is made."""
    rng = np.random.default_rng(22)
    X = rng.normal(size=(30, 2))
    with bt.Model():
        assert bt.SafeBayesForest("a", X, rng.integers(0, 3, 30).astype(float)).task == "classification"
    with bt.Model():
        assert bt.SafeBayesForest("b", X, rng.normal(size=30)).task == "regression"
    with bt.Model():
        assert bt.SafeBayesForest("c", X, np.arange(30)).task == "regression"       # > 20 distinct whole numbers
    with bt.Model():
        assert bt.SafeBayesForest("d", X, np.arange(30), task="classification").task == "classification"
    for bad, match in ((dict(task="ranking"), "task must be"), (dict(split_prob=0.5), "split_prob"),
                       (dict(effective_sample_size=0), "effective_sample_size"), (dict(cv=1), "cv"),
                       (dict(auto_criterion="rmse"), "auto_criterion"), (dict(dtype="float16"), "dtype")):
        with bt.Model():
            with pytest.raises(ValueError, match=match):
                bt.SafeBayesForest("e", X, rng.integers(0, 2, 30), **bad)
    with bt.Model():
        bt.SafeBayesForest("g", X, rng.integers(0, 2, 30), max_internal=KMAX)
        with pytest.raises(ValueError, match="unexpected sample"):
            bt.sample(draws=4, tune=10)


def test_dtype_float64():
    """dtype="float64" is refused without x64 (never switched on behind the user's back); with x64 on,
    the weights agree with the float32 fit and the outputs are float64."""
    X, y = _class_data()
    kw = dict(draws=K, effective_sample_size=20, max_internal=KMAX, random_state=0)
    with pytest.raises(ValueError, match="jax_enable_x64"):
        bt.SafeBayesForestClassifier(dtype="float64", **kw).fit(X, y)
    with bt.Model():
        with pytest.raises(ValueError, match="jax_enable_x64"):
            bt.SafeBayesForest("f", X, y, dtype="float64")
    ref = bt.SafeBayesForestClassifier(**kw).fit(X, y)
    with jax.enable_x64(True):
        c64 = bt.SafeBayesForestClassifier(dtype="float64", **kw).fit(X, y)
        assert c64._result.fit_log_weight.dtype == jnp.float64
        np.testing.assert_allclose(c64.log_weights_, ref.log_weights_, rtol=1e-5)
        np.testing.assert_allclose(c64.predict_proba(X), ref.predict_proba(X), atol=1e-5)
        assert c64.idata_.log_likelihood["y"].dtype == np.float64


def test_model_module_imports_no_estimator():
    """bt.SafeBayesForest is a sibling of the estimators over fit_safebayes: models/safebayes.py imports
    nothing from the estimators."""
    import ast
    from pathlib import Path

    import bayestrees.models.safebayes as mod

    tree = ast.parse(Path(mod.__file__).read_text())
    imported = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
    assert any("inference.safebayes" in m for m in imported)           # the parser sees the real imports
    assert not any("estimators" in m for m in imported), imported


def test_save_load_roundtrip_keeps_the_draws(tmp_path, sb_reg):
    X, y, reg = sb_reg
    reg.save(tmp_path / "r.pkl")
    back = bt.load(tmp_path / "r.pkl")
    np.testing.assert_allclose(back.predict(X), reg.predict(X))
    np.testing.assert_allclose(back.predict_interval(X[:5], kind="predictive"),
                               reg.predict_interval(X[:5], kind="predictive"))
    np.testing.assert_array_equal(back.idata_.posterior["mu"].values, reg.idata_.posterior["mu"].values)


def test_save_load_roundtrip(tmp_path):
    rng = np.random.default_rng(10)
    X = rng.normal(size=(30, 2))
    y = (X[:, 0] > 0).astype(int)
    clf = bt.SafeBayesForestClassifier(K, max_internal=KMAX, random_state=0).fit(X, y)
    clf.save(tmp_path / "m.pkl")
    clf2 = bt.load(tmp_path / "m.pkl")
    np.testing.assert_allclose(clf2.predict_proba(X), clf.predict_proba(X), atol=1e-7)


def test_bad_input():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(20, 2))
    y = (X[:, 0] > 0).astype(int)
    C = bt.SafeBayesForestClassifier
    with pytest.raises(ValueError, match="split_prob"):
        C(10, split_prob=0.5).fit(X, y)
    with pytest.raises(ValueError, match="split_prob"):
        C(10, split_prob=0.7).fit(X, y)
    with pytest.raises(ValueError, match="leaf_concentration"):
        C(10, leaf_concentration=0.0).fit(X, y)
    with pytest.raises(ValueError, match="leaf_concentration"):
        C(10, leaf_concentration=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="effective_sample_size"):
        C(10, effective_sample_size=0).fit(X, y)
    with pytest.raises(ValueError, match="effective_sample_size"):
        C(10, effective_sample_size=np.inf).fit(X, y)
    with pytest.raises(ValueError, match="effective_sample_size"):
        C(10, effective_sample_size=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="cv"):
        C(10, cv=1).fit(X, y)
    with pytest.raises(ValueError, match="validation_fraction"):
        C(10, validation_fraction=1.0).fit(X, y)
    with pytest.raises(ValueError, match="root_splits"):
        C(10, root_splits="yes").fit(X, y)
    with pytest.raises(ValueError, match="max_internal"):
        C(10, max_internal=0).fit(X, y)
    with pytest.raises(ValueError, match="auto_criterion"):
        C(10, auto_criterion="rmse").fit(X, y)
    with pytest.raises(ValueError, match="leaf_prior"):
        bt.SafeBayesForestRegressor(10, leaf_prior=(0.0, 1.0, 1.0, -1.0)).fit(X, X[:, 0])
    with pytest.raises(ValueError, match="effective_sample_size"):
        C(10, effective_sample_size="best").fit(X, y)
    with pytest.raises(ValueError, match="draws"):
        C(0).fit(X, y)
    with pytest.raises(ValueError, match="continuous"):
        C(10).fit(X, X[:, 0])
    with pytest.raises(ValueError, match="split_prob"):
        bt.SafeBayesForestRegressor(10, split_prob=0.5).fit(X, X[:, 0])
    with pytest.raises(ValueError, match="infinite"):
        C(10).fit(np.array([[np.inf, 1.0]] * 20), y)
    with pytest.raises(ValueError, match="rows"):
        C(10).fit(X, y[:-1])
    with pytest.raises(ValueError, match="2-d"):
        C(10).fit(X[:, 0], y)
    with pytest.raises(bt.estimators.NotFittedError):
        C(10).predict(X)
    clf = C(K, max_internal=KMAX, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        clf.predict(X[:, :1])
    with pytest.raises(ValueError, match="method"):
        clf.predict(X, method="mean")


def test_plots_smoke():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bayestrees.plots import plot_extreme_trees, plot_operating_curve

    rng = np.random.default_rng(12)
    X = rng.normal(size=(50, 2))
    y = (X[:, 0] > 0).astype(int)
    clf = bt.SafeBayesForestClassifier(K, max_internal=KMAX, random_state=0).fit(X, y)
    ax = plot_operating_curve(clf.operating_curve_, m_marker=clf.effective_sample_size_)
    assert len(ax) == 2 and ax[0].get_xscale() == "log"
    fig = plot_extreme_trees(clf, n=2)
    assert len(fig.axes) == 4
    top = int(np.argmax(clf.log_weights_))
    assert str(top) in fig.axes[0].get_title()
    plt.close("all")


@settings(max_examples=12, deadline=None)
@given(n=st.integers(2, 60), seed=st.integers(0, 10_000), n_classes=st.integers(2, 3),
       nan_frac=st.sampled_from([0.0, 0.2]))
def test_property_small_data(n, seed, n_classes, nan_frac):
    """Random small data (ties, missing values): finite weights, proper probabilities,
    every row in exactly one leaf (node counts: root = n, leaves sum to n)."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 4, size=(n, 2)).astype(float) + rng.normal(size=(n, 2)) * (rng.uniform() < 0.5)
    X[rng.uniform(size=X.shape) < nan_frac] = np.nan
    y = rng.integers(0, n_classes, n)
    y[:n_classes] = np.arange(n_classes)[: min(n, n_classes)]
    if len(np.unique(y)) < 2:
        return
    clf = bt.SafeBayesForestClassifier(K, max_internal=KMAX, effective_sample_size=min(5, n), random_state=seed)
    clf.fit(X, y)
    assert np.all(np.isfinite(clf.log_weights_)) and np.all(clf.log_weights_ <= 1e-4)
    p = clf.predict_proba(X)
    assert np.all(np.isfinite(p)) and np.allclose(p.sum(1), 1.0, atol=1e-5)
    t = clf.trees_
    count = np.asarray(t.count)
    assert np.all(count[:, 0] == n)
    leaf = np.asarray(t.is_leaf())
    assert np.all((count * leaf).sum(1) == n)


def test_no_recompile_within_a_row_bucket():
    rng = np.random.default_rng(14)
    fns = (imp.weigh_trees, imp.tree_class_probs, pt._sample_forest_jit)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] > 0).astype(int)
    bt.SafeBayesForestClassifier(K, max_internal=KMAX, random_state=0).fit(X[:41], y[:41]).predict(X[:7])
    sizes = [f._cache_size() for f in fns]
    # other row counts in the same bucket (<= 64), another seed, another lam: no new compilation
    bt.SafeBayesForestClassifier(K, split_prob=0.3, max_internal=KMAX, random_state=5).fit(X, y).predict(X[:30])
    assert [f._cache_size() for f in fns] == sizes


@contextlib.contextmanager
def _counting_compiles():
    """A list that gains an entry for every XLA compilation while the block runs."""
    compiles = []

    def listen(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield compiles
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def test_posterior_draws_compile_nothing_new_for_another_leaf_count():
    """The resampled trees' leaf counts change with the key; the gathers and scatters of their leaves
    run on the host, so after a first call, a call whose padded leaf batch has a size already seen
    compiles nothing (eager JAX indexing compiled once per leaf count)."""
    from bayestrees.tree import LEAF

    X, y = _class_data()
    clf = bt.SafeBayesForestClassifier(K, effective_sample_size=9, max_internal=KMAX, random_state=1).fit(X, y)
    seen, new_compiles, leaf_counts = set(), [], set()
    with _counting_compiles() as compiles:
        for seed in range(8):
            before = len(compiles)
            draws = sb.posterior_draws(jax.random.key(seed), clf._result, 50)
            m = int(np.sum(np.asarray(draws.trees.left) == LEAF))
            size = 1 << max(6, (m - 1).bit_length())  # the padded batch posterior_draws draws leaves in
            if size in seen:
                new_compiles.append(len(compiles) - before)
            seen.add(size)
            leaf_counts.add(m)
    assert len(leaf_counts) > 2  # the keys did give other leaf counts
    assert len(new_compiles) >= 4 and new_compiles == [0] * len(new_compiles), new_compiles


@pytest.mark.parametrize("split_prob", [0.3, 0.45])
def test_estimator_split_prob_reaches_its_prior_trees(split_prob):
    """The estimator's ``split_prob`` is the one its prior trees are drawn with: the mean number of internal
    nodes of its 10000 prior trees (max_internal 63, root always split) within 4 standard errors of the
    truncated code-string law for that ``split_prob``; the law for ``split_prob -+ 0.025`` (0.475 -> 0.45:
    the default replaced by a nearby value) lies more than 8 standard errors away, so a fit that ignored
    or replaced the value fails."""
    x = np.linspace(0, 1, 12)[:, None]
    y = np.array([0, 1] * 6)
    clf = bt.SafeBayesForestClassifier(10000, split_prob=split_prob, effective_sample_size=5, max_internal=63,
                                       random_state=3).fit(x, y)
    k = (np.asarray(clf.prior_trees_.n_nodes) - 1) // 2
    assert k.size == 10000 and k.max() <= 63

    def law(lam):
        p = np.exp(bt.priors.CodeStringPrior(lam).n_internal_log_prob_np(63))
        p /= p.sum()
        kv = np.arange(64)
        mean = (kv * p).sum()
        return mean, np.sqrt(((kv - mean) ** 2 * p).sum() / k.size)

    mean, se = law(split_prob)
    assert abs(k.mean() - mean) < 4 * se, (k.mean(), mean, se)
    for other in (split_prob - 0.025, split_prob + 0.025):
        assert abs(law(other)[0] - mean) > 8 * se, other  # the check has the power it claims


def test_bma_beta_one_evidence_matches_exact_model_average():
    """Complements :func:`test_bma_beta_one_matches_exact_model_average`: at beta = 1 the mean of the 20000
    prior trees' likelihoods estimates the evidence ``p(Y)`` of the model average, which the exact recursion
    gives for ``split_prob = 0.4``.  Tolerance: 3 Monte Carlo standard errors of the log of the mean
    (computed from the weights, about 0.003).  The exact log evidence for 0.45 or 0.475 is 0.013 and 0.016
    away (asserted): a fit that does not draw its prior trees with the given ``split_prob`` fails."""
    x = np.array([[1.0], [2.0], [3.0], [4.0], [5.0]])
    y = np.array([0, 0, 1, 1, 0])
    clf = bt.SafeBayesForestClassifier(20000, split_prob=0.4, effective_sample_size=5, leaf_concentration=1.0,
                                       root_splits=True, max_internal=KMAX, random_state=0).fit(x, y)
    assert clf.beta_ == 1.0
    lw = np.asarray(clf.log_weights_, np.float64)
    w = np.exp(lw - lw.max())
    got = lw.max() + np.log(w.mean())
    se = w.std() / w.mean() / np.sqrt(w.size)  # delta method: SE of log(mean) = relative SE of the mean
    base = np.eye(2)[y]
    want = np.log(_exact_bma(base, 0.4, KMAX, 1.0, 2, True))
    for wrong in (0.45, 0.475):
        assert abs(np.log(_exact_bma(base, wrong, KMAX, 1.0, 2, True)) - want) > 3 * se + 0.003, wrong
    assert abs(got - want) < 3 * se, (got, want, se)
