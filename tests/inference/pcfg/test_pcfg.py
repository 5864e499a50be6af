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

from bayestrees.inference.pcfg import dp as P
from bayestrees.inference.pcfg.fit import fit_posterior
from bayestrees.inference.pcfg.structure import build_box_structure, build_row_structure
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
    from bayestrees.inference.pcfg.fit import prepare_pcfg_data

    data = prepare_pcfg_data(X[idx], y[idx], task="classification", max_bins=4)
    codes, nb = data.codes.astype(np.int32), data.n_bins
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


# --- leaf parameter draws (the posterior contract's draws) ---------------------------------------------

def _fixed_tree_batch(n_trees, n_outputs, dtype):
    """One tree (root split on feature 0 at code 0, its right child on feature 2 at code 1), repeated."""
    from bayestrees.tree import empty_tree, grow_leaf

    t, ok1 = grow_leaf(empty_tree(7, n_outputs, dtype), 0, 0, 0)
    t, ok2 = grow_leaf(t, 2, 2, 1)
    assert bool(ok1) and bool(ok2)
    return jax.tree_util.tree_map(lambda a: np.broadcast_to(np.asarray(a), (n_trees,) + np.shape(a)), t), t


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_leaf_draws_follow_the_leaf_posterior_given_the_tree(task):
    """Drawn leaf parameters of a fixed tree: mean (and variance) of the conjugate posterior, 5 standard errors.

    Also: ``mu`` is the drawn parameter of each row's leaf and the pointwise log-likelihood is
    the leaf model's density at the draw (categorical, or Normal with the leaf's drawn sigma).
    """
    from scipy.stats import norm

    from bayestrees.inference.pcfg.fit import draw_leaf_parameters, make_leaf_model
    from bayestrees.tree import apply

    rng = np.random.default_rng(21)
    n, N = 40, 4000
    codes = np.stack([rng.integers(0, 3, n), rng.integers(0, 2, n), rng.integers(0, 3, n)], 1)
    if task == "classification":
        y = rng.integers(0, 3, n)
        alpha = np.array([0.5, 1.0, 2.0])
        lm = make_leaf_model(task, y, n_classes=3, alpha=alpha)
    else:
        y = rng.normal(size=n) + 2.0 * (codes[:, 0] > 0)
        prior = NIGPrior(0.3, 0.5, 2.5, 1.2)
        lm = make_leaf_model(task, y, prior=prior)
    trees, one = _fixed_tree_batch(N, lm.n_outputs, jnp.float32)
    drawn, sigma, mu, ll = draw_leaf_parameters(jax.random.key(5), trees, codes, y, lm, "float32")
    leaf = np.asarray(apply(one, codes.astype(np.int32)))
    leaves = np.flatnonzero(np.asarray(one.left) == -1)
    assert len(leaves) == 3 and all((leaf == s).any() for s in leaves)
    # the drawn tree keeps the structure and carries the draws at its leaves
    np.testing.assert_array_equal(drawn.left, trees.left)
    np.testing.assert_array_equal(mu, np.take_along_axis(drawn.value, np.broadcast_to(leaf, (N, n))[..., None], 1))
    for s in leaves:
        rows = leaf == s
        v = drawn.value[:, s, :]
        if task == "classification":
            post = np.bincount(y[rows], minlength=3) + alpha
            mean = post / post.sum()
            var = mean * (1 - mean) / (post.sum() + 1)
            assert np.all(np.abs(v.mean(0) - mean) < 5 * np.sqrt(var / N)), (s, v.mean(0), mean)
            np.testing.assert_allclose(v.sum(1), 1.0, rtol=1e-5)
            np.testing.assert_array_equal(sigma[:, s], 0.0)
        else:
            yl = y[rows]
            m0, k0, a0, b0 = prior
            kn, an = k0 + len(yl), a0 + len(yl) / 2
            mn = (k0 * m0 + yl.sum()) / kn
            bn = b0 + 0.5 * np.sum((yl - yl.mean()) ** 2) + k0 * len(yl) * (yl.mean() - m0) ** 2 / (2 * kn)
            # mu is Student-t: mean m_n, variance b_n / (kappa_n (a_n - 1)); s2 is IG(a_n, b_n)
            assert abs(v[:, 0].mean() - mn) < 5 * np.sqrt(bn / (kn * (an - 1)) / N)
            s2 = sigma[:, s].astype(float) ** 2
            sd_s2 = bn / (an - 1) / np.sqrt(an - 2)
            assert abs(s2.mean() - bn / (an - 1)) < 5 * sd_s2 / np.sqrt(N)
    if task == "classification":
        ref = np.log(np.take_along_axis(mu, y[None, :, None], -1)[..., 0])
    else:
        ref = norm.logpdf(y[None], mu[..., 0], np.take_along_axis(sigma, np.broadcast_to(leaf, (N, n)), 1))
    np.testing.assert_allclose(ll, ref, rtol=1e-4, atol=1e-4)


def test_regression_predictive_draws_given_the_drawn_mean():
    """``pcfg_predictive`` (regression): ``mu`` is the drawn leaf mean, the response's spread is the leaf's.

    Given a drawn mean ``mu``, ``s2`` is drawn from ``IG(a_n + 1/2, b_n + kappa_n (mu - m_n)^2 / 2)``
    and the response from ``N(mu, s2)``: so ``y - mu`` has mean 0 and variance ``E[s2 | mu]``, checked
    on many draws of one tree at fixed ``mu`` (5 standard errors).
    """
    from bayestrees.data import prepare_data
    from bayestrees.inference.pcfg.fit import make_leaf_model, pcfg_predictive

    rng = np.random.default_rng(3)
    n, N = 30, 20000
    codes = np.stack([rng.integers(0, 3, n), rng.integers(0, 2, n), rng.integers(0, 3, n)], 1)
    y = rng.normal(size=n) * np.where(codes[:, 0] > 0, 0.5, 2.0)
    data = prepare_data(codes.astype(float), y, task="regression")
    np.testing.assert_array_equal(data.codes, codes)                 # exact binning: codes = values
    prior = NIGPrior(0.0, 0.5, 2.5, 1.0)
    lm = make_leaf_model("regression", y, prior=prior)
    trees, one = _fixed_tree_batch(N, 1, jnp.float32)
    value = np.zeros((N, 7, 1), np.float32)
    value[:, 1, 0], value[:, 3, 0], value[:, 4, 0] = -0.5, 0.25, 1.0     # the leaves' drawn means
    trees = trees._replace(value=value)
    tc = jax.tree_util.tree_map(lambda a: a.reshape((1, N) + a.shape[1:]), trees)
    query = np.array([[0, 0, 0], [1, 1, 1], [2, 0, 2]])
    kw = pcfg_predictive(jax.random.key(0), tc, query, data, lm)
    assert kw["task"] == "regression" and kw["mu"].shape == kw["draws"].shape == (1, N, 3)
    from bayestrees.tree import apply

    leaf_q = np.asarray(apply(one, query.astype(np.int32)))
    leaf_t = np.asarray(apply(one, codes.astype(np.int32)))
    np.testing.assert_allclose(kw["mu"][0], np.broadcast_to(value[0, leaf_q, 0], (N, 3)))
    m0, k0, a0, b0 = prior
    for q in range(3):
        yl = y[leaf_t == leaf_q[q]]
        kn, an = k0 + len(yl), a0 + len(yl) / 2
        mn = (k0 * m0 + yl.sum()) / kn
        bn = b0 + 0.5 * np.sum((yl - yl.mean()) ** 2) + k0 * len(yl) * (yl.mean() - m0) ** 2 / (2 * kn)
        a, b = an + 0.5, bn + 0.5 * kn * (value[0, leaf_q[q], 0] - mn) ** 2
        e_s2 = b / (a - 1)
        r = kw["draws"][0, :, q].astype(float) - kw["mu"][0, :, q]
        assert abs(r.mean()) < 5 * np.sqrt(e_s2 / N)
        # Var(r^2) = E[r^4] - E[s2]^2 with E[r^4] = 3 E[s2^2] = 3 b^2 / ((a - 1)(a - 2))
        sd_r2 = np.sqrt(3 * b * b / ((a - 1) * (a - 2)) - e_s2 ** 2)
        assert abs((r ** 2).mean() - e_s2) < 5 * sd_r2 / np.sqrt(N)


# --- precision: dtype="float32" (default) and dtype="float64" ------------------------------------------

_X64_SCRIPT = r'''
import json, sys
import jax
jax.config.update("jax_enable_x64", True)        # before any array is made
import jax.numpy as jnp
import numpy as np
import bayestrees as bt
from bayestrees.inference.pcfg import dp as P
from bayestrees.inference.pcfg.fit import fit_posterior
from bayestrees.leaves import NIGPrior

inp = json.loads(sys.argv[1])
codes, nb, queries = np.array(inp["codes"]), np.array(inp["nb"]), np.array(inp["queries"])
log_phi = inp["log_phi"]


def run(post):
    trees, logp = post.sample(jax.random.key(0), 8)
    p0, ps = P.root_split_posterior(post.log_q, post.log_leaf, post.log_phi, post.ds, post.root)
    paths, _ = post.sample_paths(jax.random.key(1), queries[0], 8)
    pred = post.predict_exact(queries)
    arrays = {"stats": post.ds.stats, "log_leaf": post.log_leaf, "log_q": post.log_q, "log_qmax": post.log_qmax,
              "values": post.values, "evidence": P.log_evidence(post.log_leaf, post.log_phi, post.ds, post.root),
              "sample_log_prob": logp, "tree_value": trees.value, "map_value": post.map_tree()[0].value,
              "root_splits": ps, "path_values": paths, "predictive": pred,
              "n_leaves": P.n_leaves_posterior(post.log_leaf, post.log_phi, post.ds, 4)}
    return {"log_evidence": post.log_evidence, "pred": np.asarray(pred).tolist(),
            "dtypes": {k: str(v.dtype) for k, v in arrays.items()}}


out = {}
for dt in ("float64", "float32"):
    out["clf_" + dt] = run(fit_posterior(codes, nb, np.array(inp["y_clf"]), kind="classification", n_classes=2,
                                         alpha=inp["alpha"], log_phi=log_phi, dtype=dt))
    out["reg_" + dt] = run(fit_posterior(codes, nb, np.array(inp["y_reg"]), kind="regression",
                                         prior=NIGPrior(*inp["prior"]), log_phi=log_phi, dtype=dt))
out["jnp_float64"] = fit_posterior(codes, nb, np.array(inp["y_clf"]), kind="classification", n_classes=2,
                                   alpha=inp["alpha"], log_phi=log_phi, dtype=jnp.float64).log_evidence

# the public API: estimators and the model-context variable (X = the codes as numbers: exact binning)
X, Xq = codes.astype(float), queries.astype(float)
clf = bt.PCFGTreeClassifier(log_phi=log_phi, leaf_concentration=inp["alpha"], predict_with="posterior", draws=5,
                            dtype="float64", random_state=0).fit(X, np.array(inp["y_clf"]))
reg = bt.PCFGTreeRegressor(log_phi=log_phi, predict_with="posterior", draws=5, dtype="float64",
                           random_state=0).fit(X, np.array(inp["y_reg"]))
with bt.Model():
    t = bt.PCFGTree("t", bt.Data("X", X), np.array(inp["y_reg"]), log_phi=log_phi, kind="regression",
                    dtype="float64")
    idata_rv = bt.sample(draws=5, random_seed=0)
idatas = {"est_clf": (clf.idata_, "y"), "est_reg": (reg.idata_, "y"), "rv_reg": (idata_rv, "t")}
for name, est, pred in (("est_clf", clf, clf.predict_proba(Xq)), ("est_reg", reg, reg.predict(Xq)),
                        ("rv_reg", t, t.posterior_.predict_exact(t.binner_.transform(Xq))[:, 0])):
    out[name] = {"log_evidence": est.posterior_.log_evidence, "pred": np.asarray(pred).tolist(),
                 "pred_dtype": str(np.asarray(pred).dtype), "dtype": str(est.posterior_.dtype),
                 "codes": est.binner_.transform(X).tolist(), "query_codes": est.binner_.transform(Xq).tolist()}
    idata, yname = idatas[name]
    out[name]["idata_dtypes"] = [str(idata.posterior["mu"].dtype), str(idata.log_likelihood[yname].dtype),
                                 str(idata.trees["value"].dtype), str(idata.sample_stats["lp"].dtype)]
print(json.dumps(out))
'''


def _brute_posterior(codes, leaf_fn, leaf_value_fn, log_phi, queries):
    """Brute-force log evidence and exact predictive at ``queries`` (``(m, V)``)."""
    trees = brute_trees(codes, leaf_fn)
    w = np.array([t[0] - (t[1] - 1) * log_phi for t in trees])
    wz = np.array([-(t[1] - 1) * log_phi for t in trees])
    prob = np.exp(w - logsumexp(w))
    pred = sum(pr * np.array([leaf_value_fn(sorted(route(s, x))) for x in queries])
               for pr, (_, _, s) in zip(prob, trees))
    return logsumexp(w) - logsumexp(wz), pred


def test_float64_matches_brute_force_in_subprocess():
    """dtype="float64" (x64 on in a separate process): evidence and predictive equal brute force to 1e-9.

    Covers ``fit_posterior`` (Dirichlet with a vector alpha, and NIG leaves),
    ``PCFGTreeClassifier``/``PCFGTreeRegressor(dtype="float64")`` and
    ``bt.PCFGTree(..., dtype="float64")``, and checks that every array of the
    programme has the chosen dtype (also float32 chosen while x64 is on).
    The subprocess keeps x64 out of this process and the other tests.
    """
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from bayestrees.leaves import default_nig_prior

    codes, nb, y = _data(4, n=8)
    assert all(len(np.unique(codes[:, j])) == nb[j] for j in range(3)) and len(np.unique(y)) == 2
    y_reg = np.random.default_rng(8).normal(size=8) + 3.0 * (codes[:, 0] > 0)
    alpha, prior, log_phi = [0.7, 1.6], (0.2, 0.5, 2.0, 1.5), 1.1
    queries = np.array([[a, b, c] for a in range(nb[0]) for b in range(nb[1]) for c in range(nb[2])])
    inp = dict(codes=codes.tolist(), nb=nb.tolist(), y_clf=y.tolist(), y_reg=y_reg.tolist(), alpha=alpha,
               prior=list(prior), log_phi=log_phi, queries=queries.tolist())
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    res = subprocess.run([sys.executable, "-c", _X64_SCRIPT, json.dumps(inp)], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[3], env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])

    def clf_value(rows):
        c = np.bincount(y[rows], minlength=2) + np.asarray(alpha)
        return c / c.sum()

    def reg_fns(pr):
        m0, k0, _, _ = pr
        return (lambda rows: _log_nig(y_reg[sorted(rows)], pr),
                lambda rows: np.array([(k0 * m0 + y_reg[rows].sum()) / (k0 + len(rows))]))

    ev_c, pred_c = _brute_posterior(codes, lambda rows: _log_dirichlet(np.bincount(y[list(rows)], minlength=2), alpha),
                                    clf_value, log_phi, queries)
    ev_r, pred_r = _brute_posterior(codes, *reg_fns(prior), log_phi, queries)
    ev_rd, pred_rd = _brute_posterior(codes, *reg_fns(tuple(default_nig_prior(y_reg))), log_phi, queries)

    for name, ev, pred in (("clf", ev_c, pred_c), ("reg", ev_r, pred_r)):
        r64, r32 = out[name + "_float64"], out[name + "_float32"]
        assert set(r64["dtypes"].values()) == {"float64"}, r64["dtypes"]
        assert set(r32["dtypes"].values()) == {"float32"}, r32["dtypes"]
        assert abs(r64["log_evidence"] - ev) <= 1e-9, (name, r64["log_evidence"], ev)
        np.testing.assert_allclose(np.array(r64["pred"]), pred, rtol=0, atol=1e-9)
        # float32 is the fast default: good to float32 rounding, not to 1e-9
        assert abs(r32["log_evidence"] - ev) <= 1e-5 * abs(ev)
        np.testing.assert_allclose(np.array(r32["pred"]), pred, rtol=0, atol=1e-5)
    assert abs(out["jnp_float64"] - ev_c) <= 1e-9

    # public API: the binning is exact (codes = values), so the same brute force applies
    for name, ev, pred in (("est_clf", ev_c, pred_c), ("est_reg", ev_rd, pred_rd[:, 0]), ("rv_reg", ev_rd, pred_rd[:, 0])):
        r = out[name]
        np.testing.assert_array_equal(np.array(r["codes"]), codes)
        np.testing.assert_array_equal(np.array(r["query_codes"]), queries)
        assert r["dtype"] == "float64" and r["pred_dtype"] == "float64", r
        assert r["idata_dtypes"] == ["float64"] * 4, r["idata_dtypes"]     # leaf draws, mu, log-likelihood too
        assert abs(r["log_evidence"] - ev) <= 1e-9, (name, r["log_evidence"], ev)
        np.testing.assert_allclose(np.array(r["pred"]), pred, rtol=0, atol=1e-9)


def test_dtype_default_float32_and_float64_needs_x64():
    """float32 by default; float64 without x64 is refused with a ValueError that says how to turn it on."""
    import bayestrees as bt

    codes, nb, y = _data(4, n=8)
    X = codes.astype(float)
    with jax.enable_x64(False):
        post = fit_posterior(codes, nb, y, kind="classification", n_classes=2)
        assert post.dtype == np.float32
        assert {post.log_leaf.dtype, post.log_q.dtype, post.log_qmax.dtype, post.values.dtype} == {np.dtype("float32")}
        assert post.predict_exact(codes).dtype == np.float32
        for dt in ("float64", np.float64, jnp.float64):
            with pytest.raises(ValueError, match=r"jax\.config\.update\('jax_enable_x64', True\)"):
                fit_posterior(codes, nb, y, kind="classification", n_classes=2, dtype=dt)
        with pytest.raises(ValueError, match="jax_enable_x64 is off"):
            bt.PCFGTreeClassifier(dtype="float64").fit(X, y)
        with pytest.raises(ValueError, match="jax_enable_x64 is off"):
            bt.PCFGTreeRegressor(dtype="float64").fit(X, y + 0.5 * codes[:, 0])
        with bt.Model():
            with pytest.raises(ValueError, match="jax_enable_x64 is off"):
                bt.PCFGTree("t", bt.Data("X", X), y, dtype="float64")
        for bad in ("float16", "int32", "double-ish", int):
            with pytest.raises(ValueError, match="dtype must be one of"):
                fit_posterior(codes, nb, y, kind="classification", n_classes=2, dtype=bad)
        with pytest.raises(ValueError, match="dtype must be one of"):
            bt.PCFGTreeClassifier(dtype="float16").fit(X, y)
        clf = bt.PCFGTreeClassifier(draws=3, random_state=0).fit(X, y)
        assert clf.get_params()["dtype"] == "float32" and clf.posterior_.dtype == np.float32
