"""BART's sampler against exact answers (fixed seeds; tolerances from the Monte Carlo error).

(a) with every row weight 0 (no likelihood) the chains reproduce the prior: leaves and depth of
    every tree against direct NumPy draws of the tree prior with the interval rule prior
    (truncated to trees whose nodes hold ``min_leaf_rows = 5`` rows, by rejection), the leaf values' variance
    ``sigma_mu^2``, and the quantiles of ``sigma`` (``sigma^2 ~ nu lambda / chi2_nu``, with
    ``P(sigma < sigma_hat) = q``);
(b) one tree (``m = 1``) with ``sigma`` fixed is Bayesian CART: the chains' posterior of the number
    of leaves and of the root's split variable matches Bayesian CART's random-move kernel on the
    same data with the same target (the interval rule prior, ``MCMCConfig(rules="intervals")``,
    whose trees ``bayestrees.inference.moves.evaluate`` scores in full; BART's kernel scores only
    what a move changes, from cached counts);
(b') two trees of depth at most 1 with ``sigma`` sampled: the posterior of the pair of trees and of
    ``sigma^2`` against exact enumeration (49 pairs) and quadrature;
(c) trees held at the root (``max_depth = 0``): the sum of ``m`` leaves and ``sigma`` against
    quadrature of their exact posterior (regression with row weights and ``sigma`` sampled;
    probit);
(d) the running residual equals ``y`` minus a fresh sum over the trees after 10,000 steps, to
    float32 rounding.
Also the building blocks: the known-variance leaf model's marginal against the multivariate
Normal density, and the truncated normal draws against their distribution function.
"""
import dataclasses
from collections import Counter

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from scipy.special import log_ndtr, ndtr

from bayestrees.batching import cell_sums
from bayestrees.data import prepare_data
from bayestrees.inference import heap as H
from bayestrees.inference import moves as M
from bayestrees.inference.bart import kernel as K
from bayestrees.inference.bart.fit import BARTConfig, fit_bart
from bayestrees.inference.bart.kernel import host_tree_summaries as tree_summaries
from bayestrees.inference.loop import run_chains
from bayestrees.leaves import KnownVarianceNormalLeaves, leaf_stats
from bayestrees.priors import ChipmanPrior, canonical, traced_params


def _tv(a: Counter, b: Counter) -> float:
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a[k] / na - b[k] / nb) for k in set(a) | set(b))


def _mcse(x) -> float:
    """Monte Carlo standard error of the mean of ``x`` (chains, draws) (ArviZ, from the ESS)."""
    return float(az.mcse(az.convert_to_dataset({"x": np.asarray(x, float)}))["x"])


# ------------------------------------------------------------------------------------------------
# the building blocks
# ------------------------------------------------------------------------------------------------
def test_known_variance_marginal_is_the_multivariate_normal_density():
    rng = np.random.default_rng(0)
    n, S = 9, 5
    leaf = rng.choice([0, 2, 3], size=n)
    y = rng.normal(size=n)
    w = rng.uniform(0.3, 2.0, size=n)
    sigma2, tau2, m0 = 0.7, 0.4, 0.2
    model = KnownVarianceNormalLeaves(sigma2, tau2, m0)
    from bayestrees.leaves import precision_row_stats

    st = leaf_stats(leaf, precision_row_stats(y, w / sigma2), S)
    mask = np.isin(np.arange(S), [0, 2, 3])
    got = float(model.log_marginal(st, mask))
    # y ~ N(m0 1, diag(sigma2 / w) + tau2 * [same leaf]) exactly
    cov = np.diag(sigma2 / w) + tau2 * (leaf[:, None] == leaf[None, :])
    want = stats.multivariate_normal(np.full(n, m0), cov).logpdf(y)
    assert got == pytest.approx(want, abs=2e-4)
    # the predictive of a new row is N(m, v + sigma2): the chain rule gives the marginal back
    total = 0.0
    for i in range(n):
        prev = leaf_stats(leaf[:i], model.row_stats(y[:i]), S) if i else jnp.zeros((S, 4))
        total += float(model.log_predictive(y[i:i + 1], leaf[i:i + 1], prev)[0])
    unit = stats.multivariate_normal(np.full(n, m0), np.diag(np.full(n, sigma2)) + tau2 * (leaf[:, None] == leaf)).logpdf(y)
    assert total == pytest.approx(unit, abs=2e-4)


def test_cell_sums_and_stored_tables_keep_the_values():
    """The visit's sums over interleaved copies of the cells equal NumPy's per-cell sums (float32
    rounding), for one chain and under ``vmap``; a table stored through a scatter holds the same
    bits."""
    rng = np.random.default_rng(5)
    for n, n_cells in ((1, 3), (37, 5), (1024, 63), (1000, 65)):
        cell = rng.integers(0, n_cells, size=(3, n)).astype(np.int32)
        cell[0] = np.sort(cell[0])                     # runs of one cell, as in a tree's leaves
        x = rng.normal(size=(3, n)).astype(np.float32)
        want = np.stack([np.bincount(c, weights=v.astype(np.float64), minlength=n_cells) for c, v in zip(cell, x)])
        got = jax.jit(jax.vmap(lambda c, v: cell_sums(c, v, n_cells)))(cell, x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.sqrt(n))
        one = jax.jit(lambda c, v: cell_sums(c, v, n_cells))(cell[1], x[1])
        np.testing.assert_allclose(one, want[1], rtol=1e-5, atol=1e-4 * np.sqrt(n))
        np.testing.assert_array_equal(np.asarray(jax.vmap(K._stored)(x)).view(np.uint32), x.view(np.uint32))


def test_truncated_normal_draws_follow_their_distribution():
    n = 20000
    u = np.asarray(jax.random.uniform(jax.random.key(0), (n,), minval=1e-7, maxval=1.0))
    for mean, positive in [(0.3, True), (-2.0, True), (-9.0, True), (1.5, False), (12.0, False)]:
        z = np.asarray(K.truncated_normal(jnp.asarray(u), jnp.full(n, mean, jnp.float32), jnp.float32(1.0),
                                          jnp.full(n, positive)))
        assert np.all(z > 0) if positive else np.all(z < 0)
        a, b = ((-mean, np.inf) if positive else (-np.inf, -mean))
        ks = stats.kstest(z - mean, stats.truncnorm(a, b).cdf)
        # 20,000 draws: the KS statistic exceeds 1.95 / sqrt(n) with probability 0.001 under the
        # exact distribution (the far tails, |a| > 8, use a + Exp(1) / a: relative error < 1 / a^2)
        assert ks.statistic < 1.95 / np.sqrt(n) + (0.02 if abs(mean) > 8 else 0.0), (mean, positive, ks)


def test_truncated_normal_is_finite_at_the_smallest_open_uniform():
    """``open_uniform``'s smallest value (``tiny``: one draw in 2^23) once made ``u Phi(-a)`` flush to 0
    on the CPU, an infinite latent, and a probit chain NaN from that step on (seen in about one fit in
    twenty of 250 rows x 1,000 steps); every mean, both sides, must give a finite draw on its side."""
    tiny = np.finfo(np.float32).tiny    # open_uniform's smallest value (its minval)
    means = np.array([-20.0, -9.0, -3.0, -0.5, 0.0, 0.5, 3.0, 9.0, 20.0], np.float32)
    for positive in (True, False):
        z = np.asarray(jax.jit(K.truncated_normal)(jnp.full(means.shape, tiny, jnp.float32), jnp.asarray(means),
                                                   jnp.float32(1.0), jnp.full(means.shape, positive)))
        assert np.all(np.isfinite(z)), (positive, z)
        assert np.all(z > 0) if positive else np.all(z < 0), (positive, z)


# ------------------------------------------------------------------------------------------------
# (a) no likelihood: the prior
# ------------------------------------------------------------------------------------------------
def _direct_prior_draw(rng, codes, rows, lo, hi, depth, prior, max_depth, q):
    """(n_leaves, depth, every node holds q rows) of one tree from the generative tree prior with the
    interval rule prior: ``lo``/``hi`` the node's interval of every feature (cut points ``lo <= t < hi``)."""
    valid = np.flatnonzero(hi > lo)
    p = prior.alpha * (1 + depth) ** -prior.beta
    if depth >= max_depth or len(valid) == 0 or rng.random() >= p:
        return 1, depth, len(rows) >= q
    j = valid[int(rng.random() * len(valid))]
    t = lo[j] + int(rng.random() * (hi[j] - lo[j]))
    hl, lr = hi.copy(), lo.copy()
    hl[j], lr[j] = t, t + 1
    a = _direct_prior_draw(rng, codes, rows[codes[rows, j] <= t], lo, hl, depth + 1, prior, max_depth, q)
    b = _direct_prior_draw(rng, codes, rows[codes[rows, j] > t], lr, hi, depth + 1, prior, max_depth, q)
    return a[0] + b[0], max(a[1], b[1]), a[2] and b[2]


def _direct_prior(rng, codes, prior, max_depth, q, size):
    """``size`` draws of (n_leaves, depth) from the tree prior truncated to trees whose nodes all hold
    ``q`` rows: draws of the generative prior, rejected when a node holds fewer."""
    out = []
    lo, hi = codes.min(0), codes.max(0)
    while len(out) < size:
        n_leaves, depth, ok = _direct_prior_draw(rng, codes, np.arange(codes.shape[0]), lo, hi, 0, prior, max_depth, q)
        if ok:
            out.append((n_leaves, depth))
    return out


@pytest.mark.slow
def test_without_likelihood_the_chains_reproduce_the_prior():
    rng = np.random.default_rng(0)
    n, m, max_depth = 40, 10, 4
    X = rng.integers(0, 5, size=(n, 2)).astype(float)
    y = rng.normal(size=n)
    data = prepare_data(X, y, task="regression", allow_nan=False)
    prior = ChipmanPrior(0.95, 1.0)
    cfg = BARTConfig(m=m, prior=prior, max_depth=max_depth, sigma_hat=0.1, draws=4000, tune=100, thin=2,
                     chains=2)
    res = fit_bart(jax.random.key(0), data, cfg, weights=np.zeros(n))
    leaves, depth, _ = tree_summaries(res.feature, 2)
    codes = np.asarray(data.codes, np.int64)
    direct = _direct_prior(rng, codes, prior, max_depth, cfg.min_leaf_rows, 60000)
    tv_leaves = _tv(Counter(leaves.ravel().tolist()), Counter(d[0] for d in direct))
    tv_depth = _tv(Counter(depth.ravel().tolist()), Counter(d[1] for d in direct))
    # 80,000 tree draws (10 trees x 8,000 draws two steps apart; the trees are independent, the draws of
    # one tree correlated) against 60,000 direct ones: over seeds 0-5 of both the TV was 0.003-0.009
    # (leaves) and 0.002-0.009 (depth); 0.03 is three times the largest
    assert tv_leaves < 0.03, tv_leaves
    assert tv_depth < 0.03, tv_depth
    # leaf values: N(0, sigma_mu^2) in scaled units, sigma_mu = 0.5 / (k sqrt(m))
    sigma_mu = 0.5 / (2.0 * np.sqrt(m))
    assert res.sigma_mu == pytest.approx(sigma_mu)
    internal = res.feature >= 0
    S = res.feature.shape[-1]
    used = np.concatenate([np.ones(internal.shape[:-1] + (1,), bool),
                           internal[..., (np.arange(1, S) - 1) // 2]], -1)
    vals = res.value[used & ~internal].astype(np.float64)
    # every step draws every leaf afresh from the prior: about 200,000 independent values; the sd of
    # the sample variance is sigma_mu^2 sqrt(2 / N) = 0.3% of it, the tolerance 2%
    assert np.mean(vals) == pytest.approx(0.0, abs=4 * sigma_mu / np.sqrt(vals.size))
    assert np.var(vals) / sigma_mu ** 2 == pytest.approx(1.0, abs=0.02)
    # sigma: nu lambda / chi2_nu with P(sigma < sigma_hat) = q, independent draws every step
    s = res.sigma.ravel()                                   # response units
    nu, q, sigma_hat = 3.0, 0.9, 0.1
    assert np.mean(s < sigma_hat) == pytest.approx(q, abs=4 * np.sqrt(q * (1 - q) / s.size))
    lam = sigma_hat ** 2 * stats.chi2.ppf(1 - q, nu) / nu
    exact = lambda x: stats.chi2.sf(nu * lam / x ** 2, nu)  # noqa: E731  P(sigma <= x)
    ks = stats.kstest(s, exact)
    assert ks.statistic < 1.95 / np.sqrt(s.size), ks     # p = 0.001 for independent draws


def _direct_sparse_prior(rng, codes, prior, max_depth, q, m, a, b, rho, size):
    """``size`` joint draws of (alpha, max_j s_j, leaves of each of ``m`` trees) from the sparse prior
    (``alpha / (alpha + rho) ~ Beta(a, b)``, ``s ~ Dirichlet(alpha / d)``, each node's variable with
    probability ``s_j / sum_available s``), truncated to trees whose nodes all hold ``q`` rows: the
    whole draw (``s`` and the ``m`` trees) is rejected when a tree breaks it, as the chain's target
    ``Dir(s) prod_j p(T_j | s) 1[T_j valid]`` asks."""
    d = codes.shape[1]

    def tree(rows, lo, hi, depth, s):
        valid = np.flatnonzero(hi > lo)
        p = prior.alpha * (1 + depth) ** -prior.beta
        if depth >= max_depth or len(valid) == 0 or rng.random() >= p:
            return 1, len(rows) >= q
        w = s[valid] / s[valid].sum()
        j = valid[min(np.searchsorted(np.cumsum(w), rng.random() * w.sum(), side="right"), len(valid) - 1)]
        t = lo[j] + int(rng.random() * (hi[j] - lo[j]))
        hl, lr = hi.copy(), lo.copy()
        hl[j], lr[j] = t, t + 1
        x = tree(rows[codes[rows, j] <= t], lo, hl, depth + 1, s)
        y = tree(rows[codes[rows, j] > t], lr, hi, depth + 1, s)
        return x[0] + y[0], x[1] and y[1]

    out = []
    lo, hi = codes.min(0), codes.max(0)
    while len(out) < size:
        x = rng.beta(a, b)
        alpha = rho * x / (1 - x)
        s = rng.dirichlet(np.full(d, alpha / d) + 1e-300)
        s = np.maximum(s, 1e-300)
        trees = [tree(np.arange(codes.shape[0]), lo, hi, 0, s) for _ in range(m)]
        if all(ok for _, ok in trees):
            out.append((alpha, s.max(), [nl for nl, _ in trees]))
    return out


@pytest.mark.slow
def test_sparse_prior_without_likelihood_reproduces_the_prior():
    """The sparse Dirichlet prior (Linero 2018) with every row weight 0: the chains' ``alpha``,
    largest split probability and leaves per tree against direct draws of the truncated joint prior.
    ``alpha`` and ``s`` mix slowly (a bulk ESS of 15-40 per 6,000 draws), so the Monte Carlo error of
    their means is taken from the spread of 8 independent chains' means."""
    rng = np.random.default_rng(1)
    n, m, max_depth, d, chains = 40, 4, 3, 3, 8
    X = rng.integers(0, 5, size=(n, d)).astype(float)
    data = prepare_data(X, rng.normal(size=n), task="regression", allow_nan=False)
    prior = ChipmanPrior(0.95, 1.0)
    a, b, rho = 0.5, 1.0, 3.0
    cfg = BARTConfig(m=m, prior=prior, max_depth=max_depth, sigma_hat=0.1, draws=1500, tune=100, thin=2,
                     chains=chains, min_leaf_rows=1, sparse=True, sparse_a=a, sparse_b=b, sparse_rho=rho)
    res = fit_bart(jax.random.key(0), data, cfg, weights=np.zeros(n))
    codes = np.asarray(data.codes, np.int64)
    direct = _direct_sparse_prior(rng, codes, prior, max_depth, 1, m, a, b, rho, 10000)
    leaves, _, _ = tree_summaries(res.feature, d)
    tv = _tv(Counter(leaves.ravel().tolist()), Counter(nl for *_, nls in direct for nl in nls))
    # 48,000 tree draws (correlated through s) against 40,000 direct ones: over seeds 0-3 the TV
    # was 0.006-0.008; 0.03 is over three times the largest
    assert tv < 0.03, tv
    log_alpha = np.log(res.sparse_alpha.astype(np.float64))
    s_max = res.split_prob.max(-1).astype(np.float64)
    for draws, want in ((log_alpha, np.array([np.log(x[0]) for x in direct])),
                        (s_max, np.array([x[1] for x in direct]))):
        means = draws.mean(1)
        se = np.hypot(means.std(ddof=1) / np.sqrt(chains), want.std() / np.sqrt(len(want)))
        # over seeds 0-3 |z| was 0.2-1.4; 4.5 allows for the 7 degrees of freedom of the spread
        assert abs(means.mean() - want.mean()) < 4.5 * se, (means.mean(), want.mean(), se)
    np.testing.assert_allclose(res.split_prob.sum(-1), 1.0, rtol=1e-4)


# ------------------------------------------------------------------------------------------------
# (b) one tree with sigma fixed is Bayesian CART
# ------------------------------------------------------------------------------------------------
def _root_feature(feature):
    return np.where(feature[..., 0] >= 0, feature[..., 0], -1)


@pytest.mark.slow
@pytest.mark.parametrize("moves", [{}, {"move_probs": (0.35, 0.35, 0.3, 0.0), "slide": 2},
                                   {"move_probs": (0.25, 0.25, 0.1, 0.1, 0.3)}], ids=["grow-prune", "slide", "rotate"])
def test_one_tree_with_sigma_fixed_is_bayesian_cart(moves):
    """One tree, sigma fixed: BART's chains (grow and prune, or with slides of the threshold, or with
    change, swap and rotations) against Bayesian CART's random moves on the same model."""
    rng = np.random.default_rng(3)
    n = 20
    X = rng.integers(0, 4, size=(n, 2)).astype(float)
    y = 0.8 * np.where(X[:, 0] >= 2, 1.0, -1.0) + rng.normal(size=n)
    data = prepare_data(X, y, task="regression", allow_nan=False)
    prior, max_depth, sigma, k = ChipmanPrior(0.95, 2.0), 3, 1.0, 1.0
    # 40,000 steps per chain, every fourth kept
    draws = dict(draws=10000, tune=500, thin=4, chains=4)
    bart = fit_bart(jax.random.key(1), data, BARTConfig(m=1, prior=prior, max_depth=max_depth, fixed_sigma=sigma,
                                                      k=k, min_leaf_rows=1, **draws, **moves))
    if moves:   # the slides (or the rotations) ran and some were accepted
        assert np.asarray(bart.info.accepted)[..., 2 if "slide" in moves else 4].sum() > 1000
    # the same model for Bayesian CART's random moves, on BART's scaled response: y_s ~ N(mu_leaf, s^2),
    # mu_leaf ~ N(0, sigma_mu^2), the interval rule prior, nodes of one row or more
    ys = (np.asarray(data.y, np.float64) - bart.y_shift) / bart.y_scale
    leaves = KnownVarianceNormalLeaves(sigma2=(sigma / bart.y_scale) ** 2, tau2=bart.sigma_mu ** 2)
    codes = np.asarray(data.codes).astype(np.int32)
    mc = M.MCMCConfig(prior, leaves, max_depth, 2, rules="intervals")
    md = M.MCMCData(jnp.asarray(codes), jnp.asarray(ys, jnp.float32), leaves.row_stats(jnp.asarray(ys, jnp.float32)),
                    jnp.ones(n), prior=traced_params(prior, jnp.float32), code_lo=jnp.asarray(codes.min(0)),
                    code_hi=jnp.asarray(codes.max(0)))

    def shape(key, st, data):
        return jnp.sum(st.tree.is_leaf()), st.tree.feature[0], \
            M.draw_leaves(key, st.tree, st.ev, data, mc).tree.value[st.ev.leaf, 0]

    cart = run_chains(jax.random.key(2), M.build_kernel(mc), args=(md,), collect=shape, **draws)
    nl_cart, root_cart, mu_cart = (np.asarray(a) for a in cart.samples)
    assert np.all(bart.sigma == pytest.approx(sigma))
    nl_bart, _, _ = tree_summaries(bart.feature, 2)
    tv_leaves = _tv(Counter(nl_bart.ravel().tolist()), Counter(nl_cart.ravel().tolist()))
    tv_root = _tv(Counter(_root_feature(bart.feature[..., 0, :]).ravel().tolist()), Counter(root_cart.ravel().tolist()))
    # 40,000 draws of each, four moves apart.  Over the seed pairs (1, 2) and (31, 131) .. (33, 133) the TV
    # of the two samples was 0.003-0.009 (leaves) and 0.001-0.013 (root variable); 0.03 is over twice the largest
    assert tv_leaves < 0.03, (tv_leaves, Counter(nl_bart.ravel().tolist()), Counter(nl_cart.ravel().tolist()))
    assert tv_root < 0.03, tv_root
    # and the function: posterior means of mu agree within their Monte Carlo error
    mb, mc_ = bart.mu.mean((0, 1)), bart.y_shift + bart.y_scale * mu_cart.astype(np.float64).mean((0, 1))
    se = np.array([np.hypot(_mcse(bart.mu[..., i]), bart.y_scale * _mcse(mu_cart[..., i])) for i in range(n)])
    assert np.all(np.abs(mb - mc_) < 5 * se + 1e-3), np.max(np.abs(mb - mc_) / se)


# ------------------------------------------------------------------------------------------------
# (b') two trees, sigma sampled: exact enumeration
# ------------------------------------------------------------------------------------------------
#: the two-stump case: 8 rows, 2 features of 4 codes, sigma^2 ~ IG(nu / 2, nu lambda / 2)
_STUMPS = dict(n=8, d=2, m=2, tau2=0.25 ** 2, alpha=0.95, nu=3.0, lam=0.02)


def _two_stumps_data():
    rng = np.random.default_rng(0)
    n, d = _STUMPS["n"], _STUMPS["d"]
    codes = rng.integers(0, 4, size=(n, d))
    y = (np.where(codes[:, 0] >= 2, 0.3, -0.2) + 0.15 * codes[:, 1] + 0.15 * rng.normal(size=n)).astype(np.float32)
    return codes, y


def _two_stumps_exact(codes, y, beta=1.0, pair_log_prior=None):
    """The exact target of the pair of stumps and ``E[sigma^2]`` under ``p(y | f, sigma)^beta`` times the
    priors: given the pair and ``sigma^2``, the tempered likelihood with the leaf values integrated out is
    ``N(y; 0, sigma^2 / beta I + tau^2 (A_1 + A_2)) (2 pi sigma^2 / beta)^(n/2) (2 pi sigma^2)^(-n beta/2)``
    (``A_j``: rows sharing a leaf of tree ``j``), and ``sigma^2`` is integrated by quadrature.
    ``pair_log_prior(pair)``: the pair's log prior, if not the product of the two stumps' uniform-rule priors."""
    import itertools

    n, d, tau2, alpha, nu, lam = (_STUMPS[k] for k in ("n", "d", "tau2", "alpha", "nu", "lam"))
    lo, hi = codes.min(0), codes.max(0)
    states = [None] + [(j, t) for j in range(d) for t in range(lo[j], hi[j])]
    nvar = int(np.sum(hi > lo))

    def log_prior(s):
        return np.log1p(-alpha) if s is None else np.log(alpha) - np.log(nvar) - np.log(hi[s[0]] - lo[s[0]])

    def same_leaf(s):
        g = np.zeros(n, bool) if s is None else codes[:, s[0]] <= s[1]
        return (g[:, None] == g[None, :]).astype(float)

    V = np.exp(np.linspace(np.log(1e-4), np.log(2.0), 4000))               # sigma^2 grid
    log_w = (np.log(np.gradient(V)) + stats.invgamma(nu / 2, scale=nu * lam / 2).logpdf(V)
             + 0.5 * n * np.log(2 * np.pi * V / beta) - 0.5 * n * beta * np.log(2 * np.pi * V))
    log_post, e_s2 = {}, {}
    for pair in itertools.product(states, states):
        ev, U = np.linalg.eigh(tau2 * (same_leaf(pair[0]) + same_leaf(pair[1])))
        z2 = (U.T @ y) ** 2
        var = V[:, None] / beta + ev
        a = log_w - 0.5 * (np.log(2 * np.pi * var) + z2 / var).sum(1)
        mx = a.max()
        lp = log_prior(pair[0]) + log_prior(pair[1]) if pair_log_prior is None else pair_log_prior(pair)
        log_post[pair] = lp + mx + np.log(np.exp(a - mx).sum())
        e_s2[pair] = float((np.exp(a - mx) * V).sum() / np.exp(a - mx).sum())
    mx = max(log_post.values())
    z = sum(np.exp(v - mx) for v in log_post.values())
    exact = {k: np.exp(v - mx) / z for k, v in log_post.items()}
    return exact, sum(exact[k] * e_s2[k] for k in exact)


def _two_stumps_run(codes, y, chains, draws, sparse_prior=None, seed=0, **kernel):
    """The pairs of stumps ``(feature, threshold)`` of the roots (-1: a leaf) and ``sigma^2`` of BART's chains
    (all four moves), every replica's where the kernel is tempered (axis after ``draw``); ``sparse_prior``:
    ``(a, b, rho)`` of the sparse split-variable prior, which the kernel then samples."""
    n, m, tau2, alpha, nu, lam = (_STUMPS[k] for k in ("n", "m", "tau2", "alpha", "nu", "lam"))
    prior = ChipmanPrior(alpha, 2.0)
    kcfg = K.KernelConfig(prior=canonical(prior), tau2=tau2, max_depth=1, m=m, move_probs=(0.25, 0.25, 0.4, 0.1),
                          **kernel)
    data = K.BARTData(jnp.asarray(codes.T, jnp.int32), jnp.asarray(y), jnp.ones(n), jnp.ones(n), jnp.float32(nu),
                      jnp.float32(nu * lam), jnp.float32(0.05), jnp.float32(0.0), traced_params(prior, jnp.float32),
                      *(jnp.asarray(a) for a in K.data_intervals(codes)))
    if sparse_prior is not None:
        kcfg = dataclasses.replace(kcfg, sparse=True)
        data = data._replace(sparse_prior=jnp.asarray(sparse_prior, jnp.float32))

    def pair_of(key, st, data):
        return st.feature[..., 0], st.threshold[..., 0], st.sigma2

    res = run_chains(jax.random.key(seed), K.build_kernel(kcfg), args=(data,), chains=chains, draws=draws,
                     tune=200, collect=pair_of, split_chains=kcfg.data_devices == 1)
    return tuple(np.asarray(a) for a in res.samples)


def _unordered_pairs(f, t):
    """The unordered pair of stumps of every draw (the two trees are exchangeable and swap roles
    slowly): ``f``, ``t`` of shape ``(..., 2)``."""
    flat_f, flat_t = f.reshape(-1, 2), t.reshape(-1, 2)
    state = lambda i, k: None if flat_f[i, k] < 0 else (int(flat_f[i, k]), int(flat_t[i, k]))  # noqa: E731
    return Counter(tuple(sorted((state(i, 0), state(i, 1)), key=str)) for i in range(len(flat_f)))


def _pairs_tv(got: Counter, exact: dict) -> float:
    want = Counter()
    for k, p in exact.items():
        want[tuple(sorted(k, key=str))] += p
    total = sum(got.values())
    return 0.5 * sum(abs(got[k] / total - want[k]) for k in want)


@pytest.mark.slow
def test_two_stumps_and_sigma_match_exact_enumeration():
    """m = 2 trees of depth at most 1 on 8 rows: 7 states per tree (a leaf or one of 6 rules), 49 pairs.
    Given the pair, ``y ~ N(0, sigma^2 I + tau^2 (A_1 + A_2))`` (``A_j``: rows sharing a leaf of tree
    ``j``) with the leaf values integrated out, and ``sigma^2 ~ IG(nu / 2, nu lambda / 2)`` integrated by
    quadrature: the exact posterior of the pair and of ``sigma^2``, against the backfitting chains."""
    codes, y = _two_stumps_data()
    exact, exact_s2 = _two_stumps_exact(codes, y)
    f, t, s2 = _two_stumps_run(codes, y, chains=4, draws=25000)
    tv = _pairs_tv(_unordered_pairs(f, t), exact)
    # 100,000 draws over 28 unordered pairs (ESS a few thousand): over four seeds the TV was 0.008-0.014
    assert tv < 0.03, tv
    assert abs(s2.mean() - exact_s2) < 4 * _mcse(s2), (s2.mean(), exact_s2, _mcse(s2))


def _sparse_pair_log_prior(codes, a, b, rho):
    """The log prior of a pair of stumps under the sparse split-variable prior (Linero 2018), ``s`` and
    ``alpha`` integrated out: each stump splits with probability ``alpha_T`` (the tree prior's), on
    variable ``j`` with probability ``s_j`` (every variable is available at a root) and at a threshold
    uniform among ``j``'s; with ``c_j`` splits on ``j``, ``E[prod_j s_j^c_j | alpha] = Gamma(alpha) /
    Gamma(alpha + C) prod_j Gamma(alpha / d + c_j) / Gamma(alpha / d)``, and ``alpha / (alpha + rho) ~
    Beta(a, b)`` is integrated by quadrature."""
    d = codes.shape[1]
    lo, hi = codes.min(0), codes.max(0)
    assert np.all(hi > lo)   # every variable available at the root: P(split on j | s) = s_j
    split = _STUMPS["alpha"]
    to_alpha = lambda x: rho * x / (1.0 - x)  # noqa: E731
    same = stats.beta(a, b).expect(lambda x: (to_alpha(x) / d + 1.0) / (d * (to_alpha(x) + 1.0)))
    apart = stats.beta(a, b).expect(lambda x: to_alpha(x) / (d * d * (to_alpha(x) + 1.0)))

    def log_prior(pair):
        js = [s[0] for s in pair if s is not None]
        out = (2 - len(js)) * np.log1p(-split) + len(js) * np.log(split) - sum(np.log(hi[j] - lo[j]) for j in js)
        if len(js) == 1:
            return out - np.log(d)
        if len(js) == 2:
            return out + np.log(same if js[0] == js[1] else apart)
        return out

    return log_prior


def test_two_stumps_under_the_sparse_prior_match_exact_enumeration():
    """The two-stump case with the sparse split-variable prior (Linero 2018; ``a = 0.5, b = 1, rho = 2``):
    the exact posterior of the pair with ``s`` and ``alpha`` integrated out (:func:`_sparse_pair_log_prior`)
    against BART's chains, which sample ``s`` by an independence step with Linero's Gibbs draw as proposal
    and ``log alpha`` by a random walk.  The prior favours two splits on one variable (a factor
    ``(alpha / d + 1) / alpha`` over two variables); the data favour one on each (the exact posterior:
    0.50 on two splits of one variable, 0.44 on one of each), so the pair's posterior depends on the
    prior's law of ``alpha``: the uniform-rule prior's exact posterior is TV 0.22 away (asserted), and the
    limit ``alpha -> 0``, where a random walk on ``log alpha`` without its Jacobian drifts (``p(alpha) /
    alpha`` is not integrable at 0 for ``a = 0.5``), 0.44 away.  The independence step's ratio is 1 at a
    stump's root (every variable available), so this case does not see it."""
    codes, y = _two_stumps_data()
    a, b, rho = 0.5, 1.0, 2.0
    exact, exact_s2 = _two_stumps_exact(codes, y, pair_log_prior=_sparse_pair_log_prior(codes, a, b, rho))
    uniform, _ = _two_stumps_exact(codes, y)
    assert _pairs_tv(Counter({tuple(sorted(k, key=str)): p for k, p in uniform.items()}), exact) > 0.15
    f, t, s2 = _two_stumps_run(codes, y, chains=8, draws=25000, sparse_prior=(a, b, rho))
    tv = _pairs_tv(_unordered_pairs(f, t), exact)
    # 200,000 draws (alpha and s mix slowly): over sampler seeds 0-3 the TV was 0.005-0.017 (4 chains of
    # 25,000: 0.009-0.028), E[sigma^2] within 1.3 MCSE
    assert tv < 0.03, tv
    assert abs(s2.mean() - exact_s2) < 4 * _mcse(s2), (s2.mean(), exact_s2, _mcse(s2))


@pytest.mark.slow
def test_tempered_replicas_match_their_tempered_targets():
    """Parallel tempering of BART (``temperatures``): every replica of the two-stump case against the
    exact enumeration of its own tempered target, ``p(y | f, sigma)^beta`` times the priors (the pair and
    ``E[sigma^2]``).  The helper replicas check the tempered tree moves, leaf draws and ``sigma^2``
    conditional directly; the cold replica checks the exchanges (a wrong tempered factor biases it)."""
    codes, y = _two_stumps_data()
    betas = (1.0, 0.5, 0.2)
    f, t, s2 = _two_stumps_run(codes, y, chains=2, draws=15000, temperatures=betas)
    assert f.shape[2] == len(betas)   # (chain, draw, replica, tree)
    for r, beta in enumerate(betas):
        exact, exact_s2 = _two_stumps_exact(codes, y, beta)
        tv = _pairs_tv(_unordered_pairs(f[:, :, r], t[:, :, r]), exact)
        assert tv < 0.03, (beta, tv)
        x = s2[:, :, r]
        assert abs(x.mean() - exact_s2) < 4 * _mcse(x), (beta, x.mean(), exact_s2, _mcse(x))


def _steps_of_independent_chains(seed, trees, resid, y, s2, data, kcfg, steps):
    """``steps`` BART steps of ``N`` independent chains (``sigma^2 = s2`` fixed) from the states made of
    ``trees = (feature, threshold, value, leaf, count)`` (leading axis ``N``) and their residuals."""
    feat, thr, value, leaf, count = trees
    N, n = resid.shape
    lprior, avail = jax.vmap(lambda f, t: K.tree_log_priors(f, t, data, kcfg)[:2])(jnp.asarray(feat), jnp.asarray(thr))
    state = K.State(*(jnp.asarray(a) for a in (feat, thr, value, leaf, count, count)), lprior, avail, jnp.asarray(resid),
                    jnp.full(N, s2, jnp.float32), jnp.asarray(np.broadcast_to(y, (N, n))))
    step = jax.jit(jax.vmap(K.build_kernel(kcfg).step, in_axes=(0, 0, None)))
    keys = jax.random.split(jax.random.key(seed), N)
    for k in range(steps):
        state, _ = step(jax.vmap(lambda key: jax.random.fold_in(key, k))(keys), state, data)
    return state


# ------------------------------------------------------------------------------------------------
# (b'') the step leaves the exact posterior where it is
# ------------------------------------------------------------------------------------------------
# The invariance tests with the particle Gibbs regrowth (not BART's default: ``particles=0``) take
# 25-35 s each on 2 cores; they run with ``BAYESTREES_FULL_TESTS=1``.  The suite checks the same
# regrowth (:mod:`bayestrees.inference.regrow` inside this kernel) against enumeration where it is a
# default: a function of one tree on the conjugate path
# (``tests/inference/treefn/test_treefn_exact.py::test_one_tree_function_at_its_defaults_matches_enumeration``).
@pytest.mark.slow
@pytest.mark.parametrize("kernel", [{}, pytest.param({"particles": 4, "local_moves": 2, "n_codes": 4}, marks=pytest.mark.full_only)],
                         ids=["moves", "moves+regrowth"])
def test_steps_from_the_exact_posterior_stay_at_it(kernel):
    """60,000 independent states (two stumps and their leaf values) drawn from the exact posterior
    (``sigma`` fixed; the pair by enumeration, the four leaf values from their joint Normal given the
    pair), each moved by six steps of its own chain: if the step leaves the posterior invariant the
    pairs are still 60,000 independent draws from it (a chi-squared test), and the leaf values given
    the pair still have their exact conditional mean.  This catches what a long chain's averages
    can hide (a wrong leaf draw after a rejected move biased the other tree's residual).  All four
    move types are on (grow and prune take the path of the default kernel; change and swap theirs);
    then again with two move phases and a particle Gibbs regrowth of both trees per step."""
    import itertools

    rng = np.random.default_rng(0)
    n, d, m, N, steps = 8, 2, 2, 60000, 6
    s2, tau2, alpha = 0.03, 0.25 ** 2, 0.95
    codes = rng.integers(0, 4, size=(n, d))
    y = (np.where(codes[:, 0] >= 2, 0.3, -0.2) + 0.15 * codes[:, 1] + 0.15 * rng.normal(size=n)).astype(np.float32)
    prior = ChipmanPrior(alpha, 2.0)
    lo, hi = codes.min(0), codes.max(0)
    rules = [None] + [(j, t) for j in range(d) for t in range(lo[j], hi[j])]

    def leaves_of(r):
        return np.zeros(n, int) if r is None else np.where(codes[:, r[0]] <= r[1], 1, 2)

    def design(pair):                                   # rows x (3 slots of tree 0, 3 of tree 1), used columns
        Z = np.concatenate([(leaves_of(r)[:, None] == np.arange(3)).astype(float) for r in pair], 1)
        return Z, Z.sum(0) > 0

    def log_prior(r):
        return np.log1p(-alpha) if r is None else np.log(alpha) - np.log(np.sum(hi > lo)) - np.log(hi[r[0]] - lo[r[0]])

    pairs = list(itertools.product(rules, rules))
    lp = np.array([log_prior(a) + log_prior(b) + stats.multivariate_normal(
        np.zeros(n), s2 * np.eye(n) + tau2 * (lambda Z: Z @ Z.T)(design((a, b))[0])).logpdf(y) for a, b in pairs])
    post = np.exp(lp - lp.max())
    post /= post.sum()

    def conditional(pair):                              # the leaf values' Normal given the pair
        Z, used = design(pair)
        cov = np.linalg.inv(Z[:, used].T @ Z[:, used] / s2 + np.eye(used.sum()) / tau2)
        return cov @ Z[:, used].T @ y / s2, cov, used

    which = rng.choice(len(pairs), size=N, p=post)
    feat, thr = np.full((N, m, 3), -1, np.int32), np.zeros((N, m, 3), np.int32)
    value, leaf, count = np.zeros((N, m, 3), np.float32), np.zeros((N, m, n), np.int8), np.zeros((N, m, 3), np.float32)
    for i, pair in enumerate(pairs):
        sel = np.flatnonzero(which == i)
        mean, cov, used = conditional(pair)
        full = np.zeros((len(sel), 3 * m))
        full[:, used] = rng.multivariate_normal(mean, cov, size=len(sel))
        for j, r in enumerate(pair):
            if r is not None:
                feat[sel, j, 0], thr[sel, j, 0] = r
            value[sel, j], leaf[sel, j] = full[:, 3 * j:3 * j + 3], leaves_of(r)
            count[sel, j] = np.bincount(leaves_of(r), minlength=3)
    resid = y - np.take_along_axis(value, leaf.astype(int), 2).sum(1)
    kcfg = K.KernelConfig(prior=prior, tau2=tau2, max_depth=1, m=m, move_probs=(0.25, 0.25, 0.4, 0.1),
                          sample_sigma=False, **kernel)
    data = K.BARTData(jnp.asarray(codes.T, jnp.int32), jnp.asarray(y), jnp.ones(n), jnp.ones(n), jnp.float32(3.0),
                      jnp.float32(0.1), jnp.float32(s2), jnp.float32(0.0), traced_params(prior, jnp.float32),
                      *(jnp.asarray(a) for a in K.data_intervals(codes)))
    state = _steps_of_independent_chains(1, (feat, thr, value, leaf, count), resid, y, s2, data, kcfg, steps)
    f, t = np.asarray(state.feature[:, :, 0]), np.asarray(state.threshold[:, :, 0])
    index = {pair: i for i, pair in enumerate(pairs)}
    now = np.array([index[tuple(None if f[c, j] < 0 else (int(f[c, j]), int(t[c, j])) for j in range(m))]
                    for c in range(N)])
    observed, expected = np.bincount(now, minlength=len(pairs)), N * post
    big = expected >= 5                                  # the rest pooled into one cell
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    p_value = stats.chisquare(obs, exp).pvalue
    # exact under invariance; with the bug above p was below 1e-30 after six steps
    assert p_value > 1e-3, (p_value, sorted(zip(observed / N, post, pairs), key=lambda x: -abs(x[0] - x[1]))[:4])
    vals = np.asarray(state.value)
    for i in np.argsort(-post)[:3]:                     # the three likeliest pairs: conditional means
        mean, cov, used = conditional(pairs[i])
        got = vals[now == i].reshape(-1, 3 * m)[:, used]
        z = (got.mean(0) - mean) / np.sqrt(np.diag(cov) / len(got))
        assert np.all(np.abs(z) < 4.5), (pairs[i], z)


def _heap_trees(codes, lo, hi, max_depth, alpha, beta, q, log_leaf):
    """Every heap tree of depth <= ``max_depth`` under the interval rule prior whose leaves hold ``q`` rows
    or more, as ``(log prior + sum of log_leaf over the leaves, {slot: (feature, threshold)})``."""
    def node(slot, rows, lo, hi, depth):
        valid = np.flatnonzero(hi > lo)
        if depth >= max_depth or len(valid) == 0:
            return [(log_leaf(rows), {})] if len(rows) >= q else []
        p = alpha * (1 + depth) ** -beta
        out = [(np.log1p(-p) + log_leaf(rows), {})] if len(rows) >= q else []
        for j in valid:
            for t in range(lo[j], hi[j]):
                hl, lr = hi.copy(), lo.copy()
                hl[j], lr[j] = t, t + 1
                lp = np.log(p) - np.log(len(valid)) - np.log(hi[j] - lo[j])
                for a in node(2 * slot + 1, rows[codes[rows, j] <= t], lo, hl, depth + 1):
                    for b in node(2 * slot + 2, rows[codes[rows, j] > t], lr, hi, depth + 1):
                        out.append((lp + a[0] + b[0], {slot: (j, t), **a[1], **b[1]}))
        return out

    return node(0, np.arange(codes.shape[0]), lo.copy(), hi.copy(), 0)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [{}, {"move_probs": (0.5, 0.5, 0.0, 0.0)},
                                    {"move_probs": (0.3, 0.3, 0.4, 0.0), "slide": 2},
                                    pytest.param({"particles": 4, "local_moves": 2}, marks=pytest.mark.full_only)],
                         ids=["moves", "grow-prune", "slides", "moves+regrowth"])
def test_one_deeper_tree_from_the_exact_posterior_stays_at_it(kernel):
    """One tree of depth <= 2 (``sigma`` fixed): 30,000 states drawn from the exact posterior (the tree
    by enumeration of every heap tree, its leaf values from their Normal conditional), each moved
    by four steps of its own chain with all four move types (then with grow/prune alone and with
    grow/prune/slide, BART's default kernels, whose Normal visit draws the leaves by its own
    operations, :func:`bayestrees.inference.bart.kernel._terms`; and with two move phases and a
    particle Gibbs regrowth a step); the trees must still be draws from the posterior (a
    chi-squared test) and the leaf values given the tree must keep their conditional mean.  At
    depth 2 a grow's proposal ratio holds the number of prunable nodes of the new tree (1 or 2),
    which the two-stump test above cannot see."""
    rng = np.random.default_rng(7)
    n, d, D, N, steps = 9, 2, 2, 30000, 4
    s2, tau2, alpha, beta = 0.25, 1.0, 0.95, 1.0
    codes = rng.integers(0, 4, size=(n, d))
    y = (np.where(codes[:, 0] >= 2, 1.0, -1.0) + 0.5 * np.where(codes[:, 1] >= 1, 1.0, -1.0)
         + 0.5 * rng.normal(size=n)).astype(np.float32)
    lo, hi = codes.min(0), codes.max(0)

    def log_leaf(rows):
        k = len(rows)
        return stats.multivariate_normal(np.zeros(k), s2 * np.eye(k) + tau2 * np.ones((k, k))).logpdf(y[rows])

    trees = _heap_trees(codes, lo, hi, D, alpha, beta, 1, log_leaf)
    S = 2 ** (D + 1) - 1
    F = np.full((len(trees), S), -1, np.int32)
    T = np.zeros((len(trees), S), np.int32)
    for i, (_, rules) in enumerate(trees):
        for slot, (j, t) in rules.items():
            F[i, slot], T[i, slot] = j, t
    lp = np.array([t[0] for t in trees])
    post = np.exp(lp - lp.max())
    post /= post.sum()
    prior = ChipmanPrior(alpha, beta)
    kcfg = K.KernelConfig(prior=canonical(prior), tau2=tau2, max_depth=D, m=1,
                          sample_sigma=False, n_codes=4 if kernel.get("particles") else 0,
                          **{"move_probs": (0.25, 0.25, 0.4, 0.1), **kernel})
    data = K.BARTData(jnp.asarray(codes.T, jnp.int32), jnp.asarray(y), jnp.ones(n), jnp.ones(n), jnp.float32(3.0),
                      jnp.float32(0.1), jnp.float32(s2), jnp.float32(0.0), traced_params(prior, jnp.float32),
                      jnp.asarray(lo, jnp.int32), jnp.asarray(hi, jnp.int32))
    route = jax.jit(jax.vmap(lambda f, t: H.route(H.HeapTree(f, t), jnp.asarray(codes, jnp.int32), D)))
    leaf_of = np.asarray(route(jnp.asarray(F), jnp.asarray(T)))                     # (trees, n)

    def conditional(i):                                  # the leaf values' Normal given tree i, per slot
        prec = np.bincount(leaf_of[i], minlength=S) / s2 + 1.0 / tau2
        return np.bincount(leaf_of[i], weights=y, minlength=S) / s2 / prec, 1.0 / prec

    which = rng.choice(len(trees), size=N, p=post)
    value = np.zeros((N, 1, S), np.float32)
    for i in np.unique(which):
        sel = np.flatnonzero(which == i)
        mean, var = conditional(i)
        used = np.isin(np.arange(S), leaf_of[i])
        value[sel, 0] = np.where(used, mean + np.sqrt(var) * rng.normal(size=(len(sel), S)), 0.0)
    feat, thr, leaf = F[which][:, None], T[which][:, None], leaf_of[which][:, None].astype(np.int8)
    count = np.stack([np.bincount(r, minlength=S) for r in leaf_of])[which][:, None].astype(np.float32)
    resid = y - np.take_along_axis(value[:, 0], leaf[:, 0].astype(int), 1)
    state = _steps_of_independent_chains(2, (feat, thr, value, leaf, count), resid, y, s2, data, kcfg, steps)
    index = {(tuple(a), tuple(np.where(a >= 0, b, 0))): i for i, (a, b) in enumerate(zip(F, T))}
    f_now, t_now = np.asarray(state.feature[:, 0]), np.asarray(state.threshold[:, 0])
    now = np.array([index[(tuple(a), tuple(np.where(a >= 0, b, 0)))] for a, b in zip(f_now, t_now)])
    observed, expected = np.bincount(now, minlength=len(trees)), N * post
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    p_value = stats.chisquare(obs, exp).pvalue
    assert p_value > 1e-3, (p_value, sorted(zip(observed / N, post), key=lambda x: -abs(x[0] - x[1]))[:4])
    vals = np.asarray(state.value[:, 0])
    for i in np.argsort(-post)[:3]:                      # the three likeliest trees: conditional means
        mean, var = conditional(i)
        got = vals[now == i]
        used = np.isin(np.arange(S), leaf_of[i])
        z = (got.mean(0)[used] - mean[used]) / np.sqrt(var[used] / len(got))
        assert np.all(np.abs(z) < 4.5), (i, z)


# ------------------------------------------------------------------------------------------------
# (c) root-only trees: quadrature
# ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_root_leaves_regression_with_weights_matches_quadrature():
    rng = np.random.default_rng(4)
    n, m = 30, 3
    X = rng.uniform(size=(n, 2))
    w = rng.uniform(0.2, 3.0, size=n)
    y = 0.7 + rng.normal(size=n) / np.sqrt(w)
    data = prepare_data(X, y, task="regression", allow_nan=False)
    cfg = BARTConfig(m=m, max_depth=0, draws=4000, tune=200, chains=4, sigma_hat=1.0)
    res = fit_bart(jax.random.key(3), data, cfg, weights=w)
    f = res.mu[..., 0]                                        # every row the same: the sum of m leaves
    s2 = res.sigma ** 2
    # exact: F = sum of m leaves ~ N(mid, (range sigma_mu)^2 m), sigma^2 ~ nu lambda / chi2_nu (response
    # units: lambda scaled by range^2), y_i ~ N(F, sigma^2 / w_i); quadrature on a grid
    tau2 = m * (res.sigma_mu * res.y_scale) ** 2
    nu, nl = 3.0, 3.0 * res.lam * res.y_scale ** 2
    F = np.linspace(-1.5, 3.0, 900)[:, None]
    V = np.linspace(0.05, 6.0, 900)[None, :]
    logp = (-0.5 * (F - res.y_shift) ** 2 / tau2 - (nu / 2 + 1) * np.log(V) - nl / (2 * V)
            - 0.5 * n * np.log(V) - 0.5 * (w * y ** 2).sum() / V + F * (w * y).sum() / V - 0.5 * F ** 2 * w.sum() / V)
    p = np.exp(logp - logp.max())
    p /= p.sum()
    assert p[[0, -1], :].sum() + p[:, [0, -1]].sum() < 1e-8   # the grid holds the posterior
    ef, es2 = float((p * F).sum()), float((p * V).sum())
    for draws, exact in ((f, ef), (s2, es2)):
        assert abs(draws.mean() - exact) < 4 * _mcse(draws), (draws.mean(), exact, _mcse(draws))


@pytest.mark.slow
def test_root_leaves_probit_matches_quadrature():
    rng = np.random.default_rng(5)
    n, m = 40, 2
    X = rng.uniform(size=(n, 2))
    w = rng.uniform(0.5, 2.0, size=n)
    y = (rng.random(n) < 0.7).astype(int)
    data = prepare_data(X, y, task="classification", allow_nan=False)
    res = fit_bart(jax.random.key(4), data, BARTConfig(m=m, max_depth=0, draws=4000, tune=200, chains=4),
                   weights=w)
    f = res.fit[..., 0].astype(np.float64)                    # the latent sum of m leaves
    tau2 = m * res.sigma_mu ** 2
    F = np.linspace(-6, 6, 20001)
    eta = (res.offset + F[:, None]) * np.sqrt(w)
    logp = -0.5 * F ** 2 / tau2 + log_ndtr(np.where(y == 1, eta, -eta)).sum(1)
    p = np.exp(logp - logp.max())
    p /= p.sum()
    ef = float((p * F).sum())
    sf = float(np.sqrt((p * (F - ef) ** 2).sum()))
    assert abs(f.mean() - ef) < 4 * _mcse(f), (f.mean(), ef, _mcse(f))
    assert f.std() == pytest.approx(sf, rel=0.05)
    # mu holds Phi(offset + f) as class probabilities
    np.testing.assert_allclose(res.mu[..., 0, 1], ndtr(res.offset + f), rtol=1e-6)


# ------------------------------------------------------------------------------------------------
# (d) the running residual
# ------------------------------------------------------------------------------------------------
def test_running_residual_equals_a_fresh_sum_after_10000_steps():
    rng = np.random.default_rng(6)
    n, m, d, max_depth = 50, 5, 3, 3
    codes = rng.integers(0, 8, size=(n, d))
    y = (np.sin(codes[:, 0]) + 0.3 * codes[:, 1] + 0.2 * rng.normal(size=n)).astype(np.float32)
    y = (y - 0.5 * (y.max() + y.min())) / (y.max() - y.min())
    prior = ChipmanPrior(0.95, 1.0)
    kcfg = K.KernelConfig(prior=canonical(prior), tau2=0.3 ** 2, max_depth=max_depth, m=m,
                          move_probs=(0.25, 0.25, 0.4, 0.1))
    data = K.BARTData(jnp.asarray(codes.T, jnp.int32), jnp.asarray(y), jnp.ones(n), jnp.ones(n), jnp.float32(3.0),
                      jnp.float32(0.05), jnp.float32(0.05), jnp.float32(0.0), traced_params(prior, jnp.float32),
                      *(jnp.asarray(a) for a in K.data_intervals(codes)))
    steps = 10_000
    res = run_chains(jax.random.key(5), K.build_kernel(kcfg), args=(data,), chains=1, draws=1, tune=steps - 1)
    st = jax.tree_util.tree_map(lambda a: np.asarray(a[0, 0]), res.samples)
    proposed, accepted = np.asarray(res.info.proposed).sum(), np.asarray(res.info.accepted).sum()
    assert 0 < proposed <= m and accepted <= proposed             # one move per tree (impossible ones not counted)
    trees = K.expand_trees(st.feature, st.threshold, st.value)
    leaf = np.asarray(jax.vmap(H.route, in_axes=(0, None, None))(jax.tree_util.tree_map(jnp.asarray, trees),
                                                                jnp.asarray(codes, jnp.int32), max_depth))
    np.testing.assert_array_equal(leaf, st.leaf)                  # the stored routing is the tree's
    # the cached rows per leaf are the routing's
    np.testing.assert_array_equal(st.count, np.stack([np.bincount(lf, minlength=st.count.shape[1]) for lf in leaf]))
    fresh = y.astype(np.float64) - np.take_along_axis(st.value.astype(np.float64), leaf, 1).sum(0)
    # 10,000 steps x 5 trees x 2 float32 roundings of |R| < 1 (ulp 1.2e-7, half an ulp each): a random walk
    # of 100,000 roundings has sd about 0.3 ulp x sqrt(1e5) = 1.1e-5; the tolerance is 5 times that
    err = np.abs(st.resid - fresh)
    assert err.max() < 6e-5, err.max()
    assert np.abs(st.value).max() > 0.01 and (st.feature >= 0).any()  # trees did grow
