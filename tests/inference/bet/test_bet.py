"""BET's sampler against exact answers (fixed seeds, stated tolerances).

(a) the objective Normal leaf model: log marginal against 2-D quadrature, draws against the
    inverse-gamma / Normal closed form;
(b) with one tree, all rows in it and uniform xi, BET's tree step is Bayesian CART's sweep
    (the same trees, step by step, under the same key);
(c) the clustering step: v | Z against Beta(1 + n_j, alpha + m_j); iterating the slice update
    of Z with fixed weights and trees gives P(Z_i = j) ∝ w_j p(y_i | T_j) (brute force);
(d) with the likelihood switched off, the whole kernel (xi sampled) reproduces the generative
    BET tree prior (depth decay, xi ~ Dirichlet(1), variable ∝ xi among the valid ones);
(e) collapse and node counts on a hand-made tree.
"""
from collections import Counter
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from bayestrees.inference import heap
from bayestrees.inference.bet import kernel as K
from bayestrees.inference import moves as M
from bayestrees.inference.loop import run_chains
from bayestrees.leaves import NIGPrior, NormalLeaves, ObjectiveNormalLeaves
from bayestrees.priors import DepthDecayPrior, canonical, traced_params
from bayestrees.tree import FREE, LEAF


def _tv(a: Counter, b: Counter) -> float:
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a[k] / na - b[k] / nb) for k in set(a) | set(b))


# ------------------------------------------------------------------------------------------------
# (a) the objective leaf model
# ------------------------------------------------------------------------------------------------
def _normal_integrand(mu, t, y):
    """prod_i N(y_i | mu, exp(t)): the objective prior's integrand in (mu, t = log s2)."""
    s2 = np.exp(t)
    return np.exp(np.sum(-0.5 * (y - mu) ** 2 / s2 - 0.5 * np.log(2 * np.pi * s2)))


def test_objective_marginal_matches_quadrature():
    y = np.array([0.3, -0.5, 1.1, 0.2, 0.9])
    m = ObjectiveNormalLeaves()
    st = jnp.asarray(np.stack([np.ones_like(y), y, y * y], -1).sum(0)[None], jnp.float32)
    got = float(m.log_marginal(st, jnp.array([True])))

    # ∫∫ prod N(y_i | mu, s2) / s2 dmu ds2, with s2 = exp(t): ds2 / s2 = dt
    val, err = integrate.dblquad(_normal_integrand, -12.0, 6.0, y.mean() - 8.0, y.mean() + 8.0, args=(y,),
                                 epsabs=1e-12, epsrel=1e-9)
    assert abs(got - np.log(val)) < 1e-4, (got, np.log(val), err)
    # one row: the objective posterior does not exist; the reference NIG marginal is used
    st1 = jnp.asarray([[1.0, 0.4, 0.16]], jnp.float32)
    from bayestrees.leaves import nig_log_marginal

    ref = m.ref
    want = float(nig_log_marginal(1.0, 0.4, 0.16, NIGPrior(*[jnp.float32(v) for v in ref])))
    assert abs(float(m.log_marginal(st1, jnp.array([True]))) - want) < 1e-5


def test_objective_draws_match_the_closed_form():
    y = np.array([0.3, -0.5, 1.1, 0.2, 0.9, -0.1, 0.6])
    n, ybar, S = len(y), y.mean(), np.sum((y - y.mean()) ** 2)
    m = ObjectiveNormalLeaves()
    st = jnp.asarray(np.stack([np.ones_like(y), y, y * y], -1).sum(0)[None], jnp.float32)
    keys = jax.random.split(jax.random.key(3), 40000)
    d = jax.vmap(lambda k: m.draw(k, st, jnp.array([True])))(keys)
    s2 = np.asarray(d.sigma[:, 0], np.float64) ** 2
    mu = np.asarray(d.value[:, 0, 0], np.float64)
    # s2 ~ IG((n-1)/2, S/2); mu | s2 ~ N(ybar, s2/n): marginally ybar + t_{n-1} * sqrt(S / (n (n-1)))
    ks_s2 = stats.kstest(s2, stats.invgamma((n - 1) / 2, scale=S / 2).cdf)
    ks_mu = stats.kstest(mu, stats.t(n - 1, loc=ybar, scale=np.sqrt(S / (n * (n - 1)))).cdf)
    assert ks_s2.statistic < 0.01 and ks_mu.statistic < 0.01, (ks_s2, ks_mu)
    # predictive mean and Student-t predictive density
    assert abs(float(m.predictive(st)[0, 0]) - ybar) < 1e-6
    lp = float(m.log_predictive(jnp.asarray([0.5], jnp.float32), jnp.asarray([0]), st)[0])
    want = stats.t(n - 1, loc=ybar, scale=np.sqrt(S * (1 + 1 / n) / (n - 1))).logpdf(0.5)
    assert abs(lp - want) < 1e-4


# ------------------------------------------------------------------------------------------------
# (b) one tree: BET's tree step is Bayesian CART's sweep
# ------------------------------------------------------------------------------------------------
def _reg_data(n=36, d=2, seed=0):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 6, size=(n, d))
    y = np.where(codes[:, 0] >= 3, 1.0, -1.0) + 0.5 * rng.normal(size=n)
    return codes, y.astype(np.float32)


@pytest.mark.parametrize("leaf_model", [NormalLeaves(NIGPrior(0.0, 0.5, 2.0, 1.0)), ObjectiveNormalLeaves()])
def test_one_tree_step_is_the_bcart_sweep(leaf_model):
    codes, y = _reg_data()
    d = codes.shape[1]
    mc = M.MCMCConfig(DepthDecayPrior(1.5), leaf_model, 3, d, scheme="sweep", min_leaf_rows=1)
    rs = leaf_model.row_stats(jnp.asarray(y))
    mdata = M.MCMCData(jnp.asarray(codes, jnp.int32), jnp.asarray(y), rs, jnp.ones(len(y), jnp.float32))
    bdata = K.BETData(mdata.codes, mdata.y, rs, jnp.float32(1e-3))
    z = jnp.zeros(len(y), jnp.int32)
    xi = jnp.full((d,), 1.0 / d, jnp.float32)
    fixed = K.KernelConfig(mc, 1, d, update_xi=False)
    weighted = K.KernelConfig(mc, 1, d, update_xi=True)       # uniform xi passed as var_weight
    bet_fixed = jax.jit(lambda k, t: K.tree_step(k, t, xi, 0, z, bdata, fixed)[:2])
    bet_xi = jax.jit(lambda k, t: K.tree_step(k, t, xi, 0, z, bdata, weighted)[:2])
    bcart = jax.jit(lambda k, st: M.sweep(k, st, mdata, mc)[0])
    root = M.root_tree(mc)
    st = M.State(root, M.evaluate(root, mdata, mc), jnp.ones((), jnp.float32))
    ta = tb = root
    grown = 0
    for t in range(25):
        k = jax.random.key(100 + t)
        st = bcart(k, st)
        ta, ev_a = bet_fixed(k, ta)
        tb, _ = bet_xi(k, tb)
        for field in ("feature", "threshold"):
            np.testing.assert_array_equal(np.asarray(getattr(ta, field)), np.asarray(getattr(st.tree, field)))
            np.testing.assert_array_equal(np.asarray(getattr(tb, field)), np.asarray(getattr(st.tree, field)))
        np.testing.assert_allclose(float(ev_a.log_lik + ev_a.log_prior), float(st.ev.log_lik + st.ev.log_prior),
                                   rtol=1e-5)
        grown = max(grown, int(np.sum(np.asarray(st.tree.is_internal()))))
    assert grown >= 2  # the chain moved through non-trivial trees


# ------------------------------------------------------------------------------------------------
# (c) the clustering step
# ------------------------------------------------------------------------------------------------
def test_v_given_z_is_the_conjugate_beta():
    z = jnp.asarray([0] * 5 + [2] * 3 + [3] * 2, jnp.int32)
    alpha = 1.5
    v = np.asarray(jax.vmap(lambda k: K.v_given_z(k, z, 4, alpha, jnp.float32))(
        jax.random.split(jax.random.key(7), 20000)), np.float64)
    n = np.array([5, 0, 3, 2])
    m = np.array([5, 5, 2, 0])
    for j in range(4):
        ks = stats.kstest(v[:, j], stats.beta(1 + n[j], alpha + m[j]).cdf)
        assert ks.statistic < 0.012, (j, ks)


def _z_step(w, tail, log_p, z, k):
    z, _ = K.z_given_w(k, z, w, tail, log_p)
    return z, z


def test_slice_update_of_z_targets_w_times_likelihood():
    rng = np.random.default_rng(1)
    J, n = 4, 3
    v = jnp.asarray([0.5, 0.4, 0.6, 0.7], jnp.float32)
    w, tail = K.stick_weights(v)
    log_p = jnp.asarray(rng.normal(size=(J, n)), jnp.float32)

    body = partial(_z_step, w, tail, log_p)
    _, zs = jax.lax.scan(body, jnp.zeros(n, jnp.int32), jax.random.split(jax.random.key(11), 30000))
    zs = np.asarray(zs)
    target = np.asarray(w)[:, None] * np.exp(np.asarray(log_p, np.float64))
    target /= target.sum(0, keepdims=True)
    for i in range(n):
        freq = np.bincount(zs[:, i], minlength=J) / len(zs)
        assert 0.5 * np.abs(freq - target[:, i]).sum() < 0.02, (i, freq, target[:, i])


def test_slice_counts_overflow_past_the_last_component():
    v = jnp.asarray([0.1, 0.1], jnp.float32)                      # remainder 0.81: most slices reach past J
    w, tail = K.stick_weights(v)
    assert abs(float(tail) - 0.81) < 1e-6 and abs(float(w.sum() + tail) - 1.0) < 1e-6
    z, over = K.z_given_w(jax.random.key(0), jnp.zeros(50, jnp.int32), w, tail, jnp.zeros((2, 50)))
    assert int(over) > 0
    # no overflow when the remainder is below every slice level
    w2, tail2 = K.stick_weights(jnp.asarray([0.999999, 0.5], jnp.float32))
    _, over2 = K.z_given_w(jax.random.key(0), jnp.zeros(50, jnp.int32), w2, tail2, jnp.zeros((2, 50)))
    assert int(over2) == 0


def test_log_p_z_is_the_stick_breaking_marginal():
    from scipy.special import betaln

    z = jnp.asarray([0, 0, 2, 1, 0, 2], jnp.int32)
    alpha = 0.7
    n = np.array([3, 1, 2, 0])
    m = np.array([3, 2, 0, 0])
    want = sum(betaln(1 + n[j], alpha + m[j]) - betaln(1, alpha) for j in range(4))
    assert abs(float(K.log_p_z(z, 4, alpha, jnp.float32)) - want) < 1e-5


# ------------------------------------------------------------------------------------------------
# (d) no likelihood: the BET tree prior
# ------------------------------------------------------------------------------------------------
class NoLikelihood(NamedTuple):
    """A leaf model whose marginal likelihood is 1: the tree step then targets the prior."""

    base: NormalLeaves = NormalLeaves(NIGPrior(0.0, 0.5, 2.0, 1.0))

    n_outputs = 1

    def row_stats(self, y, dtype=jnp.float32):
        return self.base.row_stats(y, dtype)

    def log_marginal(self, stats, mask):
        return jnp.zeros(stats.shape[:-2], stats.dtype)

    def draw(self, key, stats, mask):
        return self.base.draw(key, stats, mask)

    def log_likelihood(self, y, leaf, draw):
        return self.base.log_likelihood(y, leaf, draw)


def _direct_bet_prior(rng, codes, rows, depth, delta, max_depth, xi):
    """(n_leaves, depth, features used) of one tree from the generative BET prior on the rows."""
    lo, hi = codes[rows].min(0), codes[rows].max(0)
    valid = np.flatnonzero(hi > lo)
    if depth >= max_depth or len(valid) == 0 or rng.random() >= np.exp(-depth / delta):
        return 1, depth, frozenset()
    p = xi[valid] / xi[valid].sum()
    j = rng.choice(valid, p=p)
    t = rng.integers(lo[j], hi[j])
    a = _direct_bet_prior(rng, codes, rows[codes[rows, j] <= t], depth + 1, delta, max_depth, xi)
    b = _direct_bet_prior(rng, codes, rows[codes[rows, j] > t], depth + 1, delta, max_depth, xi)
    return a[0] + b[0], max(a[1], b[1]), a[2] | b[2] | {int(j)}


def _shape_of(key, state, data):
    t = jax.tree_util.tree_map(lambda a: a[0], state.tree)
    used = jnp.zeros(3, bool).at[jnp.maximum(t.feature, 0)].max(t.is_internal())
    return jnp.sum(t.is_leaf()), jnp.max(jnp.where(t.is_leaf(), t.depth, 0)), jnp.sum(used)


@pytest.mark.slow
def test_without_likelihood_the_kernel_reproduces_the_bet_prior():
    rng = np.random.default_rng(0)
    n, d, delta, max_depth = 40, 3, 1.5, 3
    codes = rng.integers(0, 5, size=(n, d))
    direct = []
    for _ in range(40000):
        xi = rng.dirichlet(np.ones(d))
        direct.append(_direct_bet_prior(rng, codes, np.arange(n), 0, delta, max_depth, xi))
    model = NoLikelihood()
    # as fit_bet runs it: the config names the prior's kind (delta = 1), the value (1.5) is traced
    mc = M.MCMCConfig(canonical(DepthDecayPrior(delta)), model, max_depth, d, scheme="sweep", min_leaf_rows=1)
    kcfg = K.KernelConfig(mc, 1, d, update_xi=True, active_trees=1)
    y = jnp.zeros(n, jnp.float32)
    data = K.BETData(jnp.asarray(codes, jnp.int32), y, model.row_stats(y), jnp.float32(1.0),
                     prior=traced_params(DepthDecayPrior(delta), jnp.float32))
    res = run_chains(jax.random.key(0), K.build_kernel(kcfg), args=(data,), chains=8, draws=2000, tune=100, thin=2,
                     collect=_shape_of)
    leaves, depth, nvar = (np.asarray(a).ravel() for a in res.samples)
    tv = {"leaves": _tv(Counter(leaves.tolist()), Counter(r[0] for r in direct)),
          "depth": _tv(Counter(depth.tolist()), Counter(r[1] for r in direct)),
          # the number of distinct split variables depends on xi ~ Dirichlet(1) (a Polya urn), not only on
          # the depth decay: a kernel with uniform xi would miss it
          "n_vars": _tv(Counter(nvar.tolist()), Counter(len(r[2]) for r in direct))}
    # 16,000 correlated chain draws against 40,000 direct draws: the sampling noise of each TV is about 0.01
    assert max(tv.values()) < 0.03, tv


# ------------------------------------------------------------------------------------------------
# (e) collapse and node counts
# ------------------------------------------------------------------------------------------------
def test_collapse_prunes_splits_whose_children_hold_too_few_rows():
    from bayestrees.tree import grow_leaf

    mc = M.MCMCConfig(DepthDecayPrior(1.0), NormalLeaves(), 2, 1, scheme="sweep")
    t = heap.to_tree(M.root_tree(mc))
    t, _ = grow_leaf(t, 0, 0, 4, heap=True)       # root: code <= 4
    t, _ = grow_leaf(t, 1, 0, 1, heap=True)       # node 1: code <= 1
    t, _ = grow_leaf(t, 2, 0, 7, heap=True)       # node 2: code <= 7
    codes = jnp.asarray(np.arange(10)[:, None], jnp.int32)
    w = jnp.asarray([1, 1, 1, 1, 1, 1, 1, 0, 1, 1], jnp.float32)   # node 5 (codes 5..7) holds 2 rows, node 6 holds 2
    leaf = heap.route(t, codes, 2)
    cnt = np.asarray(heap.node_counts(leaf, w, 7))
    np.testing.assert_array_equal(cnt, [9, 5, 4, 2, 3, 2, 2])
    collapse = lambda count, q: heap.to_tree(heap.collapse(heap.rules_of(t), count, q))  # noqa: E731
    c = collapse(jnp.asarray(cnt), 3)        # node 1 keeps (2 < 3? no: children 2 and 3) -> leaf; node 2 -> leaf
    np.testing.assert_array_equal(np.asarray(c.left), [1, LEAF, LEAF, FREE, FREE, FREE, FREE])
    assert int(c.n_nodes) == 3
    c2 = collapse(jnp.asarray(cnt), 2)       # every child holds >= 2 rows: unchanged
    np.testing.assert_array_equal(np.asarray(c2.left), np.asarray(t.left))
    c3 = collapse(jnp.zeros(7), 1)           # no rows: the root leaf
    np.testing.assert_array_equal(np.asarray(c3.left), [LEAF] + [FREE] * 6)
