"""BCART-PCFG against brute-force enumeration of every tree on tiny data.

The reference enumerates trees recursively over row sets with the paper's
semantics (every node holds >= 1 row, a partition of a node's rows counts once,
canonical split = smallest feature, threshold = largest code of the left rows),
written independently of the dynamic programme.  Exact comparisons run in
float64 inside ``jax.enable_x64``.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import gammaln, logsumexp
from scipy.stats import chisquare

import jax
import jax.numpy as jnp

from bayestrees.inference import pcfg as P
from bayestrees.inference.pcfg_posterior import fit_posterior
from bayestrees.inference.pcfg_structure import build_box_structure, build_row_structure
from bayestrees.leaves import NIGPrior

RTOL = 1e-9


def _log_dirichlet(counts, alpha):
    a = np.asarray(alpha, float)
    return gammaln(counts + a).sum() - gammaln((counts + a).sum()) - gammaln(a).sum() + gammaln(a.sum())


def _log_nig(yv, prior):
    m0, k0, a0, b0 = prior
    n = len(yv)
    ybar = np.mean(yv) if n else 0.0
    S = np.sum((yv - ybar) ** 2)
    kn, an = k0 + n, a0 + n / 2
    bn = b0 + S / 2 + k0 * n * (ybar - m0) ** 2 / (2 * kn)
    return (gammaln(an) - gammaln(a0) + a0 * np.log(b0) - an * np.log(bn) + 0.5 * (np.log(k0) - np.log(kn))
            - 0.5 * n * np.log(2 * np.pi))


def brute_trees(codes, leaf_fn):
    """All trees as (sum log L, n_leaves, nested structure); structure leaf = ('leaf', rows)."""
    n, d = codes.shape
    memo = {}

    def rec(rows):
        if rows in memo:
            return memo[rows]
        out = [(leaf_fn(rows), 1, ("leaf", rows))]
        seen = set()
        for j in range(d):
            vals = sorted({int(codes[r, j]) for r in rows})
            for t in vals[:-1]:
                L = frozenset(r for r in rows if codes[r, j] <= t)
                R = rows - L
                key = frozenset([L, R])
                if key in seen:
                    continue
                seen.add(key)
                for wl, bl, tl in rec(L):
                    for wr, br, tr in rec(R):
                        out.append((wl + wr, bl + br, ("split", j, t, tl, tr)))
        memo[rows] = out
        return out

    return rec(frozenset(range(n)))


def tree_key(tree, node=0):
    """Nested (feature, threshold) structure of one Tree, leaves as 'L'."""
    t = jax.tree_util.tree_map(np.asarray, tree)
    if t.left[node] < 0:
        return "L"
    return (int(t.feature[node]), int(t.threshold[node]), tree_key(tree, int(t.left[node])),
            tree_key(tree, int(t.right[node])))


def brute_key(s):
    if s[0] == "leaf":
        return "L"
    return (s[1], s[2], brute_key(s[3]), brute_key(s[4]))


def route(s, x):
    while s[0] != "leaf":
        s = s[3] if x[s[1]] <= s[2] else s[4]
    return s[1]


def _data(seed, n=7, nb=(3, 2, 3), k=2):
    rng = np.random.default_rng(seed)
    codes = np.stack([rng.integers(0, b, n) for b in nb], 1)
    y = rng.integers(0, k, n)
    return codes, np.asarray(nb), y


@pytest.mark.parametrize("builder", [build_box_structure, build_row_structure])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_inside_matches_brute_force_classification(builder, seed):
    codes, nb, y = _data(seed, n=8 if seed == 0 else 7, k=3 if seed == 2 else 2)
    k = int(y.max()) + 1
    alpha = np.linspace(0.5, 2.0, k)
    log_phi = 1.3
    trees = brute_trees(codes, lambda rows: _log_dirichlet(np.bincount(y[list(rows)], minlength=k), alpha))
    w = np.array([t[0] - (t[1] - 1) * log_phi for t in trees])
    with jax.enable_x64(True):
        st = builder(codes, nb, np.eye(k)[y])
        ds, root = P.device_structure(st, jnp.float64)
        ll = P.log_leaf_marginals(ds.stats, "classification", jnp.asarray(alpha))
        q = P.log_inside(ll, log_phi, ds, "sum")
        qm = P.log_inside(ll, log_phi, ds, "max")
        np.testing.assert_allclose(float(q[root]), logsumexp(w), rtol=RTOL)
        np.testing.assert_allclose(float(qm[root]), w.max(), rtol=RTOL)
        vals = P.leaf_values(ds.stats, "classification", jnp.asarray(alpha))
        mt, _ = P.map_tree(qm, ll, log_phi, vals, ds, root, 2 * len(y) - 1)
    assert tree_key(mt) == brute_key(trees[int(np.argmax(w))][2])
    # evidence: prior normaliser from L == 1
    wz = np.array([-(t[1] - 1) * log_phi for t in trees])
    with jax.enable_x64(True):
        ev = float(P.log_evidence(ll, log_phi, ds, root))
    np.testing.assert_allclose(ev, logsumexp(w) - logsumexp(wz), rtol=RTOL)


def test_inside_matches_brute_force_regression():
    rng = np.random.default_rng(5)
    codes, nb, _ = _data(3, n=7)
    y = rng.normal(size=7)
    prior = NIGPrior(0.2, 0.5, 2.0, 1.5)
    trees = brute_trees(codes, lambda rows: _log_nig(y[sorted(rows)], prior))
    log_phi = 2.0
    w = np.array([t[0] - (t[1] - 1) * log_phi for t in trees])
    with jax.enable_x64(True):
        post = fit_posterior(codes, nb, y, kind="regression", prior=prior, log_phi=log_phi, dtype=jnp.float64)
        np.testing.assert_allclose(float(post.log_q[post.root]), logsumexp(w), rtol=RTOL)
        np.testing.assert_allclose(float(post.log_qmax[post.root]), w.max(), rtol=RTOL)
        mt, _ = post.map_tree()
    assert tree_key(mt) == brute_key(trees[int(np.argmax(w))][2])


def _posterior_small(seed=11, n=5, nb=(3, 2), log_phi=0.7):
    codes, nb, y = _data(seed, n=n, nb=nb)
    trees = brute_trees(codes, lambda rows: _log_dirichlet(np.bincount(y[list(rows)], minlength=2), [1.0, 1.0]))
    w = np.array([t[0] - (t[1] - 1) * log_phi for t in trees])
    return codes, nb, y, trees, np.exp(w - logsumexp(w)), log_phi


def test_exact_sampling_chi_square():
    codes, nb, y, trees, prob, log_phi = _posterior_small()
    assert 5 <= len(trees) <= 200
    with jax.enable_x64(True):
        post = fit_posterior(codes, nb, y, kind="classification", n_classes=2, log_phi=log_phi, dtype=jnp.float64)
        tb, logp = post.sample(jax.random.key(0), 20000)
    index = {brute_key(t[2]): i for i, t in enumerate(trees)}
    tb = jax.tree_util.tree_map(np.asarray, tb)
    idx = np.array([index[tree_key(jax.tree_util.tree_map(lambda a: a[i], tb))] for i in range(20000)])
    counts = np.bincount(idx, minlength=len(trees))
    expected = prob * 20000
    big = expected >= 5   # pool the rare trees into one cell
    obs, exp = counts[big], expected[big]
    if (~big).any():
        obs, exp = np.append(obs, counts[~big].sum()), np.append(exp, expected[~big].sum())
    assert len(obs) >= 5
    stat, p = chisquare(obs, exp)
    assert p > 1e-3, (stat, p)
    # the reported log posterior probability of each sampled tree is exact
    np.testing.assert_allclose(np.exp(np.asarray(logp)), prob[idx], rtol=1e-9)


def test_exact_predictive_leaf_counts_root_splits():
    codes, nb, y, trees, prob, log_phi = _posterior_small(seed=4, n=6)
    alpha = np.array([1.0, 1.0])
    queries = np.array([[a, b] for a in range(nb[0]) for b in range(nb[1])])
    with jax.enable_x64(True):
        post = fit_posterior(codes, nb, y, kind="classification", n_classes=2, log_phi=log_phi, dtype=jnp.float64)
        pred = post.predict_exact(queries)
        dist = post.n_leaves_distribution(max_leaves=6)
        p0, ps = post.root_splits()
        vals, _ = post.sample_paths(jax.random.key(3), queries[0], 20000)
    ref = np.zeros((len(queries), 2))
    for pr, (_, _, s) in zip(prob, trees):
        for qi, x in enumerate(queries):
            rows = sorted(route(s, x))
            c = np.bincount(y[rows], minlength=2) + alpha
            ref[qi] += pr * c / c.sum()
    np.testing.assert_allclose(pred, ref, rtol=1e-9)
    nleaf = np.array([t[1] for t in trees])
    ref_dist = np.array([prob[nleaf == b].sum() for b in range(1, 7)])
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-9, atol=1e-15)
    assert p0 == pytest.approx(sum(pr for pr, t in zip(prob, trees) if t[2][0] == "leaf"), rel=1e-9)
    for k, (f, th) in enumerate(zip(post.structure.slot_feature, post.structure.slot_threshold)):
        ref_k = sum(pr for pr, t in zip(prob, trees) if t[2][0] == "split" and t[2][1] == f and t[2][2] == th)
        assert ps[k] == pytest.approx(ref_k, rel=1e-9, abs=1e-15)
    # Algorithm 1 (path sampling): Monte Carlo mean of the reached leaf values, 5 standard errors
    v = np.asarray(vals)[:, 0]
    assert abs(v.mean() - ref[0, 0]) < 5 * v.std() / np.sqrt(len(v)) + 1e-12


def test_box_and_row_builders_agree_on_iris_subset():
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.choice(150, 40, replace=False)
    from bayestrees.estimators.pcfg import bin_for_pcfg

    _, codes, nb = bin_for_pcfg(X[idx], 4)
    with jax.enable_x64(True):
        a = fit_posterior(codes, nb, y[idx], kind="classification", n_classes=3, method="box", dtype=jnp.float64)
        b = fit_posterior(codes, nb, y[idx], kind="classification", n_classes=3, method="row", dtype=jnp.float64)
        assert a.structure.n_symbols == b.structure.n_symbols
        assert a.structure.n_splits == b.structure.n_splits
        np.testing.assert_allclose(float(a.log_q[a.root]), float(b.log_q[b.root]), rtol=1e-12)
        np.testing.assert_allclose(a.log_evidence, b.log_evidence, rtol=1e-12)
        assert tree_key(a.map_tree()[0]) == tree_key(b.map_tree()[0])


def test_hyperparameter_gradient_and_ascent():
    codes, nb, y = _data(7, n=8)
    with jax.enable_x64(True):
        post = fit_posterior(codes, nb, y, kind="classification", n_classes=2, dtype=jnp.float64)
        ds, root = post.ds, post.root

        def ev(lp, la):
            ll = P.log_leaf_marginals(ds.stats, "classification", jnp.exp(la))
            return P.log_evidence(ll, lp, ds, root)

        g = jax.grad(ev, argnums=(0, 1))(2.0, jnp.zeros(2))
        h = 1e-6
        fd = (float(ev(2.0 + h, jnp.zeros(2))) - float(ev(2.0 - h, jnp.zeros(2)))) / (2 * h)
        np.testing.assert_allclose(float(g[0]), fd, rtol=1e-5)
        fit = P.fit_hyperparameters(ds, root, log_phi0=2.0, alpha0=1.0, steps=60, learning_rate=0.1)
        ev0 = post.log_evidence
    assert fit["log_evidence"] >= ev0 - 1e-9
    assert fit["trace"][-1] >= fit["trace"][0]
    assert np.all(fit["alpha"] > 0)
