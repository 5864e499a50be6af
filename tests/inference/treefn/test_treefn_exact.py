"""Tree functions inside NumPyro models against exact answers (fixed seeds; tolerances from seed sweeps).

Both tests enumerate every tree of depth at most 2 over 8 rows with 2 features of 4 levels (3 cut
points each) under the prior of :mod:`bayestrees.inference.treefn.site`: the Chipman depth prior
with the interval rule prior (the variable uniform among those with a cut point left in the node's
interval, the threshold uniform among those cut points), truncated to trees whose leaves hold at
least ``min_leaf_rows`` rows.  The tree's posterior is its prior times the product over its leaves
of the leaf's marginal likelihood (the leaf value integrated out).

(b) of the issue: a Poisson likelihood with a log link, the leaf log-rates ``N(0, leaf_sd^2)``:
    each leaf's marginal by one-dimensional quadrature; the general (non-conjugate) path of
    :class:`~bayestrees.inference.treefn.kernel.TreeMoves` must match it.
(b') the same with log-gamma leaves (``leaf_prior="loggamma"``): the conjugate path (leaf values
    integrated out in closed form) and the general path.
(a) of the issue: a Normal likelihood with sigma fixed, ``m = 1``: the leaf marginal in closed form;
    the general path and the conjugate path (the BART family's kernel) must both match it, and so
    each other.
"""
import warnings
from collections import Counter

import arviz as az

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import stats
from scipy.special import digamma, gammaln, logsumexp

from bayestrees.convergence import ConvergenceWarning
from bayestrees.inference.treefn import TreeEnsemble, bart_function, sample_model, tree_function, tree_summaries_of
from bayestrees.inference.treefn.site import TreeSpec
from bayestrees.priors import ChipmanPrior

#: long chains of small programs: compiled at LLVM level 1 (tests/conftest.py)
pytestmark = pytest.mark.long_chains

ALPHA, BETA, MAX_DEPTH, Q = 0.95, 1.0, 2, 1
#: draws per chain of the one-tree checks: a function of one tree takes 50 moves and a regrowth (conjugate
#: Normal path) or 50 grows or prunes (other paths) a step, so 3,000 of its draws say more than the 15,000
#: single-move steps these checks ran before
ONE_TREE_DRAWS = 3000


def _data(seed=0):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 4, size=(8, 2))
    while any(len(np.unique(codes[:, j])) < 4 for j in range(2)):    # 3 cut points in each feature
        codes = rng.integers(0, 4, size=(8, 2))
    X = codes.astype(np.float32) * 1.5 - 2.0
    return X, codes


def _enumerate(codes, q=Q, alpha=ALPHA, beta=BETA, *, hi0=None, log_w=None):
    """Every tree as ``(log prior, list of row-index arrays of its leaves)``, those whose leaves hold
    ``q`` rows or more.  Given ``hi0`` the root's intervals are ``[0, hi0]`` (a site's cut table),
    given ``log_w`` a node's column ``j`` has probability ``w_j / sum_available w``."""
    lo0, hi0 = (codes.min(0), codes.max(0)) if hi0 is None else (np.zeros_like(hi0), hi0)
    w = None if log_w is None else np.exp(log_w)

    def node(rows, lo, hi, depth):
        valid = np.flatnonzero(hi > lo)
        if depth >= MAX_DEPTH or len(valid) == 0:
            return [(0.0, [rows])]
        p = alpha * (1 + depth) ** -beta
        out = [(np.log1p(-p), [rows])]
        for j in valid:
            for t in range(lo[j], hi[j]):
                hl, lr = hi.copy(), lo.copy()
                hl[j], lr[j] = t, t + 1
                lvar = -np.log(len(valid)) if w is None else np.log(w[j] / w[valid].sum())
                lp = np.log(p) + lvar - np.log(hi[j] - lo[j])
                for a in node(rows[codes[rows, j] <= t], lo, hl, depth + 1):
                    for b in node(rows[codes[rows, j] > t], lr, hi, depth + 1):
                        out.append((lp + a[0] + b[0], a[1] + b[1]))
        return out

    trees = node(np.arange(codes.shape[0]), lo0, hi0, 0)
    return [(lp, leaves) for lp, leaves in trees if all(len(r) >= q for r in leaves)]


def _exact(trees, log_leaf, leaf_mean=None, n=8):
    """The exact posterior of the number of leaves, and (given ``leaf_mean(rows)``, the posterior
    mean of a leaf's value given its rows) the posterior mean of the function at every row."""
    lp = np.array([p + sum(log_leaf(r) for r in leaves) for p, leaves in trees])
    w = np.exp(lp - logsumexp(lp))
    out, f = Counter(), np.zeros(n)
    for (_, leaves), wi in zip(trees, w):
        out[len(leaves)] += wi
        if leaf_mean is not None:
            for r in leaves:
                f[r] += wi * leaf_mean(r)
    return out, f


def _mcse(x) -> float:
    return float(az.mcse(az.convert_to_dataset({"x": np.asarray(x, float)}))["x"])


def _tv(got: Counter, want: Counter) -> float:
    n = sum(got.values())
    return 0.5 * sum(abs(got[k] / n - want[k]) for k in set(got) | set(want))


def _chain_n_leaves(model, X, y, conjugate, draws, seed=0, leaf_refresh=0):
    fit = sample_model(model, X, y, draws=draws, tune=500, chains=4, random_seed=seed, conjugate=conjugate,
                       leaf_refresh=leaf_refresh,
                       log_likelihood=False)
    nl = np.asarray(fit.idata.posterior["f_n_leaves"]).ravel()
    return Counter(nl.tolist()), fit


@pytest.mark.compile_bound
def test_the_enumeration_is_the_prior():
    """Without truncation the enumerated prior sums to 1; with it, the prior's own draws
    (:meth:`TreeEnsemble.sample`, by rejection) follow the enumerated truncated prior."""
    X, codes = _data(2)
    assert np.exp(logsumexp([lp for lp, _ in _enumerate(codes, q=0)])) == pytest.approx(1.0, abs=1e-12)
    want, _ = _exact(_enumerate(codes), lambda rows: 0.0)
    d = TreeEnsemble(X, TreeSpec(1, MAX_DEPTH, ChipmanPrior(ALPHA, BETA), 1.0, Q))
    got = Counter(tree_summaries_of(np.asarray(d.sample(jax.random.key(0), (20000,))))["n_leaves"].ravel().tolist())
    # 20,000 independent draws over 4 values: the TV's sd is about 0.003
    assert _tv(got, want) < 0.015, (got, want)


@pytest.mark.slow
@pytest.mark.parametrize("leaf_refresh", [0, 1], ids=["moves", "moves+refresh"])
def test_poisson_tree_matches_enumeration_with_quadrature(leaf_refresh, seed=0):
    """(b): one tree, Poisson counts with a log link, Normal prior on the leaf log-rates; also with a
    leaf refresh after every tree's move (``leaf_refresh=1``: over seeds 0-1 it passed both checks)."""
    X, codes = _data(0)
    rng = np.random.default_rng(1)
    rate = np.exp(0.8 + np.where(codes[:, 0] >= 2, 0.5, -0.2))
    y = rng.poisson(rate).astype(np.float32)
    offset, sd = 0.8, 0.8

    grid = np.linspace(-8 * sd, 8 * sd, 8001)
    log_g = stats.norm(0, sd).logpdf(grid) + np.log(grid[1] - grid[0])

    def leaf_terms(rows):
        yy = y[rows][:, None]
        eta = offset + grid[None, :]
        return (yy * eta - np.exp(eta) - gammaln(yy + 1)).sum(0) + log_g

    def log_leaf(rows):
        return logsumexp(leaf_terms(rows))

    def leaf_mean(rows):
        a = leaf_terms(rows)
        return float(np.sum(np.exp(a - logsumexp(a)) * grid))

    want, f_exact = _exact(_enumerate(codes), log_leaf, leaf_mean)

    def model(X, y=None):
        f = tree_function("f", X, leaf_sd=sd, max_depth=MAX_DEPTH, min_leaf_rows=Q, prior=ChipmanPrior(ALPHA, BETA))
        numpyro.sample("y", dist.Poisson(jnp.exp(offset + f)), obs=y)

    got, fit = _chain_n_leaves(model, X, y, False, ONE_TREE_DRAWS, seed, leaf_refresh)
    # 4 chains of one tree (with the former kernel, one grow or prune a step, 15,000 draws a chain: over
    # seeds 0-3 the TV was 0.002-0.006).  (With a stronger
    # signal, rate exp(0.8 +- 0.65), the one-leaf tree has posterior mass 0.001 and grow/prune chains,
    # which change the root only through it, gave 0.014-0.070: the test needs chains that mix.)
    assert _tv(got, want) < 0.03, (_tv(got, want), got, want)
    # the leaf values: the posterior mean of the log-rate at every row against the exact one, within
    # 4.5 Monte Carlo standard errors (8 rows: a false alarm for one of them has probability 5e-5)
    f = np.asarray(fit.idata.posterior["f"])
    for i in range(8):
        assert abs(f[..., i].mean() - f_exact[i]) < 4.5 * _mcse(f[..., i]), (i, f[..., i].mean(), f_exact[i])


@pytest.mark.slow
@pytest.mark.parametrize("conjugate", [pytest.param(False, marks=pytest.mark.full_only), True],
                         ids=["general", "conjugate"])
def test_normal_tree_with_sigma_fixed_matches_enumeration(conjugate, seed=0):
    """(a): Normal likelihood with sigma fixed, m = 1: the general path and the conjugate path both
    give the exact posterior of the number of leaves (so each other's, TV < 0.03 + 0.03)."""
    X, codes = _data(2)
    rng = np.random.default_rng(3)
    sigma, sd = 1.0, 1.0
    y = (np.where(codes[:, 1] >= 2, 0.6, -0.4) + sigma * rng.normal(size=8)).astype(np.float32)

    def log_leaf(rows):
        k = len(rows)
        cov = sigma ** 2 * np.eye(k) + sd ** 2 * np.ones((k, k))
        return stats.multivariate_normal(np.zeros(k), cov).logpdf(y[rows])

    want, _ = _exact(_enumerate(codes), log_leaf)

    def model(X, y=None):
        f = tree_function("f", X, leaf_sd=sd, max_depth=MAX_DEPTH, min_leaf_rows=Q, prior=ChipmanPrior(ALPHA, BETA))
        numpyro.sample("y", dist.Normal(f, sigma), obs=y)

    got, fit = _chain_n_leaves(model, X, y, conjugate, ONE_TREE_DRAWS, seed)
    tv = _tv(got, want)
    # with the former kernel and 15,000 draws, over seeds 0-3 the TV was 0.001-0.008 on both paths
    # (the same trees: with a Normal likelihood
    # the Laplace proposal is the exact conditional, so the general path accepts as the conjugate one)
    assert tv < 0.03, (tv, got, want)


@pytest.mark.slow
def test_two_output_function_matches_enumeration_per_output(seed=0):
    """A function of two outputs (``outputs=2``: one tree each, independent under the prior) with a
    Normal likelihood on output 0 (sigma fixed) and a Poisson one on output 1: the posterior factors
    over the outputs, so each output's ``n_leaves`` must match its own enumeration.  ``"auto"`` gives
    output 0 the conjugate path and output 1 the general path, each updated with the other held."""
    from bayestrees.inference.treefn import TreeMoves

    X, codes = _data(0)
    rng = np.random.default_rng(5)
    sigma, sd, offset = 1.0, 0.8, 0.8
    y0 = (np.where(codes[:, 1] >= 2, 0.6, -0.4) + sigma * rng.normal(size=8)).astype(np.float32)
    y1 = rng.poisson(np.exp(offset + np.where(codes[:, 0] >= 2, 0.5, -0.2))).astype(np.float32)

    def log_leaf_normal(rows):
        k = len(rows)
        return stats.multivariate_normal(np.zeros(k), sigma ** 2 * np.eye(k) + sd ** 2 * np.ones((k, k))).logpdf(y0[rows])

    grid = np.linspace(-8 * sd, 8 * sd, 8001)
    log_g = stats.norm(0, sd).logpdf(grid) + np.log(grid[1] - grid[0])

    def log_leaf_poisson(rows):
        yy = y1[rows][:, None]
        eta = offset + grid[None, :]
        return logsumexp((yy * eta - np.exp(eta) - gammaln(yy + 1)).sum(0) + log_g)

    trees = _enumerate(codes)
    want = [_exact(trees, log_leaf_normal)[0], _exact(trees, log_leaf_poisson)[0]]

    def model(X, y=None):
        f = tree_function("f", X, outputs=2, leaf_sd=sd, max_depth=MAX_DEPTH, min_leaf_rows=Q,
                          prior=ChipmanPrior(ALPHA, BETA))
        numpyro.sample("y0", dist.Normal(f[:, 0], sigma), obs=None if y is None else y[:, 0])
        numpyro.sample("y1", dist.Poisson(jnp.exp(offset + f[:, 1])), obs=None if y is None else y[:, 1])

    y = np.stack([y0, y1], 1)
    kernel = TreeMoves(model)
    kernel.init(jax.random.key(0), 0, None, (X, y), {})
    assert kernel.conjugate_paths == (True, False)
    fit = sample_model(model, X, y, draws=ONE_TREE_DRAWS // 3, tune=500, chains=4, random_seed=seed,
                       log_likelihood=False)
    nl = np.asarray(fit.idata.posterior["f_n_leaves"])            # (chain, draw, output, tree)
    assert nl.shape[2:] == (2, 1) and fit.idata.posterior["f"].shape[2:] == (8, 2)
    for j in range(2):
        got = Counter(nl[:, :, j, 0].ravel().tolist())
        # with the former kernel and 20,000 draws an output, over seeds 0-3 the TV was 0.003-0.011
        # (output 0) and 0.006-0.010 (output 1)
        assert _tv(got, want[j]) < 0.03, (j, _tv(got, want[j]), got, want[j])


def _loggamma_c_d(sd):
    """The log-gamma leaf prior's ``(c, d)`` solved here independently: ``trigamma(c) = sd^2`` by
    bracketing, ``d = exp(digamma(c))``."""
    from scipy.optimize import brentq
    from scipy.special import polygamma, psi

    c = brentq(lambda x: polygamma(1, x) - sd ** 2, 1e-3, 1e6, xtol=1e-14, rtol=1e-14)
    return c, float(np.exp(psi(c)))


@pytest.mark.slow
@pytest.mark.parametrize("conjugate", ["auto", False], ids=["conjugate", "general"])
def test_poisson_tree_with_loggamma_leaves_matches_enumeration(conjugate, seed=0):
    """Log-gamma leaves (``leaf_prior="loggamma"``, log-linear BART) with a Poisson likelihood: the
    conjugate path (chosen by ``"auto"``: leaf values integrated out in closed form, drawn from their
    Gamma conditional) and the general path (Laplace proposal with the log-gamma prior's expansion)
    both match the enumeration with quadrature per leaf over the log-gamma density of the leaf
    log-rate (8,001 points), and the posterior mean of the log-rate at every row."""
    from bayestrees.inference.treefn import TreeMoves

    X, codes = _data(0)
    rng = np.random.default_rng(1)
    offset, sd = 0.8, 0.8
    y = rng.poisson(np.exp(offset + np.where(codes[:, 0] >= 2, 0.5, -0.2))).astype(np.float32)
    c, d = _loggamma_c_d(sd)
    grid = np.linspace(-12 * sd, 6 * sd, 8001)
    log_g = c * grid - d * np.exp(grid) + c * np.log(d) - gammaln(c) + np.log(grid[1] - grid[0])
    assert np.exp(logsumexp(log_g)) == pytest.approx(1.0, abs=1e-6)   # the grid holds the prior

    def leaf_terms(rows):
        yy = y[rows][:, None]
        eta = offset + grid[None, :]
        return (yy * eta - np.exp(eta) - gammaln(yy + 1)).sum(0) + log_g

    want, f_exact = _exact(_enumerate(codes), lambda r: logsumexp(leaf_terms(r)),
                           lambda r: float(np.sum(np.exp(leaf_terms(r) - logsumexp(leaf_terms(r))) * grid)))

    def model(X, y=None):
        f = tree_function("f", X, leaf_sd=sd, leaf_prior="loggamma", max_depth=MAX_DEPTH, min_leaf_rows=Q,
                          prior=ChipmanPrior(ALPHA, BETA))
        numpyro.sample("y", dist.Poisson(jnp.exp(offset + f)), obs=y)

    kernel = TreeMoves(model, conjugate=conjugate)
    kernel.init(jax.random.key(0), 0, None, (X, y), {})
    assert kernel.conjugate_kinds == (("poisson",) if conjugate == "auto" else ("",))
    got, fit = _chain_n_leaves(model, X, y, conjugate, ONE_TREE_DRAWS, seed)
    # with the former kernel and 60,000 draws, over seeds 0-3 the TV was 0.002-0.008 (conjugate) and
    # 0.003-0.006 (general)
    assert _tv(got, want) < 0.03, (_tv(got, want), got, want)
    f = np.asarray(fit.idata.posterior["f"])
    for i in range(8):
        assert abs(f[..., i].mean() - f_exact[i]) < 4.5 * _mcse(f[..., i]), (i, f[..., i].mean(), f_exact[i])


@pytest.mark.compile_bound
def test_loggamma_leaf_prior_draws_and_density():
    """The log-gamma leaf prior: its draws (``TreeEnsemble.sample``) have mean 0 and sd ``leaf_sd``,
    and the site's log density of a one-leaf tree is the prior's density of its value."""
    sd = 0.5
    c, d = _loggamma_c_d(sd)
    X, _ = _data(0)
    dist_ = TreeEnsemble(X, TreeSpec(1, 0, ChipmanPrior(ALPHA, BETA), sd, 0, 0, "loggamma"))
    draws = np.asarray(dist_.sample(jax.random.key(1), (40000,)))[:, 0, 0, 2]       # root leaf values
    assert abs(draws.mean()) < 4 * sd / np.sqrt(40000) and abs(draws.std() / sd - 1) < 0.02
    assert stats.kstest(np.exp(draws), stats.gamma(c, scale=1 / d).cdf).pvalue > 1e-3
    v = np.asarray(dist_.sample(jax.random.key(2)))
    want = c * v[0, 0, 2] - d * np.exp(v[0, 0, 2]) + c * np.log(d) - gammaln(c)
    assert float(dist_.log_prob(v)) == pytest.approx(want, rel=1e-5)


@pytest.mark.compile_bound
@pytest.mark.parametrize("leaf_prior,conjugate", [("normal", "auto"), ("normal", False), ("loggamma", "auto")],
                         ids=["normal-conjugate", "normal-general", "loggamma-conjugate"])
def test_tree_sites_cached_log_density_is_the_prior_of_the_trees(leaf_prior, conjugate):
    """The tree sites' log density that the moves hand the other blocks (from the states' cached
    per-tree log priors and the leaf values) is ``TreeEnsemble.log_prob`` of the packed trees, after
    150 steps that grew and pruned trees on each path (float32: relative 1e-5)."""
    from bayestrees.inference.treefn import TreeMoves

    X, codes = _data(0)
    rng = np.random.default_rng(3)
    y = (rng.poisson(np.exp(0.5 * (codes[:, 0] >= 2))) if leaf_prior == "loggamma"
         else codes[:, 0] - 1.5 + 0.3 * rng.normal(size=8)).astype(np.float32)

    def model(X, y=None):
        f = tree_function("f", X, leaf_sd=0.8, leaf_prior=leaf_prior, max_depth=MAX_DEPTH, min_leaf_rows=Q,
                          prior=ChipmanPrior(ALPHA, BETA))
        if leaf_prior == "loggamma":
            numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)
        else:
            numpyro.sample("y", dist.Normal(f, 0.3), obs=y)

    kernel = TreeMoves(model, conjugate=conjugate)
    state = kernel.init(jax.random.key(0), 0, None, (X, y), {})
    name = kernel.sites[0]
    run = jax.jit(lambda s: jax.lax.scan(lambda s, _: (kernel.sample(s, (X, y), {}), s.z[name].trees), s,
                                         None, 150))
    state, trees = run(state)
    assert len({np.asarray(t).tobytes() for t in trees}) > 3     # the trees moved
    site = state.z[name]
    want = float(kernel._fns[0].dist.log_prob(site.trees))
    assert float(site.log_density) == pytest.approx(want, rel=1e-5, abs=1e-5)


def _check_defaults_against(model, X, y, want, f_exact=None, **kw):
    """``model`` sampled at the defaults (or with ``kw`` for ``sample_model``) with sampler seeds 0 and 1:
    the posterior of ``n_leaves`` within TV 0.03 of ``want`` each time (and, given ``f_exact``, the
    posterior mean of the function at every row within 4.5 Monte Carlo standard errors of it)."""
    for seed in (0, 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = sample_model(model, X, y, random_seed=seed, log_likelihood=False, **kw)
        got = Counter(np.asarray(fit.idata.posterior["f_n_leaves"]).ravel().tolist())
        assert _tv(got, want) < 0.03, (seed, _tv(got, want), got, want)
        f = np.asarray(fit.idata.posterior["f"])
        for i in range(0 if f_exact is None else len(f_exact)):
            assert abs(f[..., i].mean() - f_exact[i]) < 4.5 * _mcse(f[..., i]), (seed, i, f[..., i].mean(), f_exact[i])


def _one_tree_data(seed, n=9):
    """``n`` rows with 2 features of 4 levels (every level present) and a Normal response with a signal in both."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 4, size=(n, 2))
    while any(len(np.unique(codes[:, j])) < 4 for j in range(2)):
        codes = rng.integers(0, 4, size=(n, 2))
    y = (np.where(codes[:, 0] >= 2, 1.0, -1.0) + 0.5 * np.where(codes[:, 1] >= 1, 1.0, -1.0)
         + 0.7 * rng.normal(size=n)).astype(np.float32)
    return codes.astype(np.float32) * 1.5 - 2.0, codes, y


def _data_seeds(n):
    """Data seeds ``0 .. n-1`` of a one-tree case at the default lengths, ``1 ..`` marked ``full_only``.

    Each case takes about half a minute on 2 cores (2 sampler seeds of 4 chains of 2,000 steps).  The
    Normal and Poisson cases run all 5 data seeds in the suite (the one-tree kernel's acceptance
    cases); the other likelihoods' paths run data seed 0, and ``BAYESTREES_FULL_TESTS=1`` their
    further seeds."""
    return [0] + [pytest.param(s, marks=pytest.mark.full_only) for s in range(1, n)]


def _programs(data_seed, every_seed: bool = False) -> dict:
    """``sample_model``'s data handling for a data seed: data seed 0 as the default (the features
    constants of the compiled programs), the others with ``jit_data=True`` (features, their cut
    tables and the response arguments of the programs), so that they run one compiled program per
    case instead of one each.  The kernel and the lengths are the defaults either way.

    ``every_seed``: data seed 0 with ``jit_data=True`` too (the Normal and Poisson cases, which run
    all five data seeds in the suite: one program for the five; the default data handling keeps
    data seed 0 of the logit, Student-t and Gamma-Poisson cases, and ``test_treefn_jit_data.py``
    checks that the two give the same draws)."""
    return {"jit_data": True} if data_seed or every_seed else {}


@pytest.mark.slow
@pytest.mark.parametrize("data_seed", range(5))
def test_one_tree_function_at_its_defaults_matches_enumeration(data_seed):
    """A function of one tree (``tree_function``) in a Normal model with sigma known, 9 rows, 2 features
    of 4 levels, depth <= 2, at the default kernel and the default lengths (4 chains of 1,000 + 1,000):
    the posterior of ``n_leaves`` is the exact one of every tree, for two sampler seeds.

    With the former default (one grow or prune a step) such chains stayed in three- and four-leaf trees
    whose root the two-leaf trees do not share (TV 0.12-0.31 on data seeds 0-1): grow and prune change
    the root only through the single leaf.  The one-tree kernel (50 local moves, change and swap among
    them, and a particle Gibbs regrowth a step) gave TV 0.003-0.023 over data seeds 0-4 and sampler
    seeds 0-5, but on data seed 3 about one fit in six above 0.03 over more sampler seeds: a root
    ``x0 <= 0`` with ``x0 <= 1`` below it, the cells of the tree rooted at ``x0 <= 1``, which no move
    joined.  A rotation among the local moves joins them (``docs/lab-notes/models.md``, "A rotation
    move")."""
    X, codes, y = _one_tree_data(data_seed)
    sigma, sd = 0.7, 1.5                                         # sd: tree_function's default leaf_sd

    def log_leaf(rows):
        k = len(rows)
        cov = sigma ** 2 * np.eye(k) + sd ** 2 * np.ones((k, k))
        return stats.multivariate_normal(np.zeros(k), cov).logpdf(y[rows])

    want, _ = _exact(_enumerate(codes, alpha=0.95, beta=2.0), log_leaf, n=len(y))   # tree_function's prior

    def model(X, y=None):
        f = tree_function("f", X, max_depth=MAX_DEPTH, min_leaf_rows=Q)
        numpyro.sample("y", dist.Normal(f, sigma), obs=y)

    _check_defaults_against(model, X, y, want, **_programs(data_seed, every_seed=True))


def _by_quadrature(codes, y, row_log_lik, sd=1.5):
    """``(want, f_exact)``: the exact posterior of ``n_leaves`` and of the function at every row, each
    leaf's value integrated on a grid under its ``N(0, sd^2)`` prior (``sd``: tree_function's default
    leaf_sd); ``row_log_lik(y_rows[:, None], mu[None, :])`` is the rows' log likelihood at leaf value ``mu``."""
    grid = np.linspace(-8 * sd, 8 * sd, 8001)
    log_g = stats.norm(0, sd).logpdf(grid) + np.log(grid[1] - grid[0])

    def leaf_log_post(rows):   # log p(y_rows | mu) p(mu) on the grid
        return row_log_lik(y[rows][:, None], grid[None, :]).sum(0) + log_g

    def log_leaf(rows):
        return logsumexp(leaf_log_post(rows))

    def leaf_mean(rows):
        lp = leaf_log_post(rows)
        return float(np.sum(np.exp(lp - logsumexp(lp)) * grid))

    return _exact(_enumerate(codes, alpha=0.95, beta=2.0), log_leaf, leaf_mean, n=len(y))


def _one_tree_poisson(data_seed):
    """The Poisson one-tree case: ``(X, y, want, model)``, counts with a log link and an offset, the
    default Normal leaves (the general path), and the exact posterior of ``n_leaves`` by quadrature per leaf."""
    X, codes, _ = _one_tree_data(data_seed)
    rng = np.random.default_rng(100 + data_seed)
    offset = 0.8
    y = rng.poisson(np.exp(offset + np.where(codes[:, 0] >= 2, 0.6, -0.4))).astype(np.float32)
    want, _ = _by_quadrature(codes, y, lambda yy, mu: yy * (offset + mu) - np.exp(offset + mu) - gammaln(yy + 1))

    def model(X, y=None):
        f = tree_function("f", X, max_depth=MAX_DEPTH, min_leaf_rows=Q)
        numpyro.sample("y", dist.Poisson(jnp.exp(offset + f)), obs=y)

    return X, y, want, model


@pytest.mark.slow
@pytest.mark.parametrize("data_seed", range(5))
def test_one_tree_poisson_function_at_its_defaults_matches_enumeration(data_seed):
    """The same for a Poisson likelihood with a log link (the general path, the default Normal leaves):
    the exact posterior of every tree by quadrature per leaf.  With one grow or prune a step (the
    former default) the TV over these data seeds was 0.010-0.087; the one-tree moves' records are in
    ``docs/lab-notes/models.md``."""
    X, y, want, model = _one_tree_poisson(data_seed)
    _check_defaults_against(model, X, y, want, **_programs(data_seed, every_seed=True))


@pytest.mark.slow
def test_slides_on_the_general_path_match_enumeration():
    """``slide=2`` on the general path (a slide re-splits the node's two leaves' rows; every leaf value
    drawn from the Laplace proposal, as for a change), without the regrowth: the Poisson one-tree case's
    exact posterior of the trees."""
    X, y, want, model = _one_tree_poisson(1)
    _check_defaults_against(model, X, y, want, slide=2, particles=0)


def _one_tree_logit(data_seed):
    """The logistic one-tree case: ``(X, y, want, f_exact, model)``, successes of 6 trials with a logit
    link and an offset, the default Normal leaves (the logit path), the exact posterior of ``n_leaves``
    and of the function at every row by quadrature per leaf."""
    X, codes, _ = _one_tree_data(data_seed)
    rng = np.random.default_rng(200 + data_seed)
    trials, offset = 6, -0.3
    eta_true = offset + np.where(codes[:, 0] >= 2, 1.2, -0.8) + np.where(codes[:, 1] >= 2, 0.5, 0.0)
    y = rng.binomial(trials, 1.0 / (1.0 + np.exp(-eta_true))).astype(np.float32)
    want, f_exact = _by_quadrature(codes, y, lambda yy, mu: yy * (offset + mu) - trials * np.logaddexp(0.0, offset + mu))

    def model(X, y=None):
        f = tree_function("f", X, max_depth=MAX_DEPTH, min_leaf_rows=Q)
        numpyro.sample("y", dist.Binomial(trials, logits=offset + f), obs=y)

    return X, y, want, f_exact, model


@pytest.mark.slow
@pytest.mark.parametrize("data_seed", _data_seeds(3))
def test_one_tree_logit_function_at_its_defaults_matches_enumeration(data_seed):
    """The same for a Binomial likelihood with a logit link: the logit path (Polya-Gamma draws, then the
    BART family's step on the Gaussian likelihood they make) at the defaults, against the exact posterior
    of every tree and of the function at every row."""
    X, y, want, f_exact, model = _one_tree_logit(data_seed)
    _check_defaults_against(model, X, y, want, f_exact, **_programs(data_seed))


@pytest.mark.full_only   # the factor's code is the probit test's (factor_per_row), which the suite runs
def test_a_logit_function_with_a_factor_per_row_matches_enumeration(data_seed=0):
    """The logit path with the function entering the predictor times a factor of each row's own,
    ``logits = offset + s_i f_i`` (a treatment times an effect function, as in a causal forest; some
    ``s_i`` negative, some 0): the latents' Gaussian likelihood is then ``s a`` and ``s^2 b`` in ``f``.
    Against the exact posterior of every tree and of the function at every row (quadrature per leaf
    with each row's factor), at the defaults."""
    X, codes, _ = _one_tree_data(data_seed)
    rng = np.random.default_rng(400 + data_seed)
    trials, offset = 6, -0.3
    s = np.array([1.3, -0.6, 0.0, 1.0, 0.8, -1.1, 0.0, 1.5, 0.5], np.float32)[: len(X)]
    eta_true = offset + s * (np.where(codes[:, 0] >= 2, 1.2, -0.8) + np.where(codes[:, 1] >= 2, 0.5, 0.0))
    y = rng.binomial(trials, 1.0 / (1.0 + np.exp(-eta_true))).astype(np.float32)
    rows = np.arange(len(y))     # the quadrature's "y": row indices, so each row's factor is at hand
    want, f_exact = _by_quadrature(codes, rows, lambda i, mu: y[i] * (offset + s[i] * mu)
                                   - trials * np.logaddexp(0.0, offset + s[i] * mu))

    def model(X, y=None):
        f = tree_function("f", X, max_depth=MAX_DEPTH, min_leaf_rows=Q)
        numpyro.sample("y", dist.Binomial(trials, logits=offset + s * f), obs=y)

    _check_defaults_against(model, X, y, want, f_exact)


@pytest.mark.slow
@pytest.mark.parametrize("factor", [pytest.param(False, marks=pytest.mark.full_only), True],
                         ids=["plain", "factor_per_row"])
def test_a_probit_function_matches_enumeration(factor, data_seed=0):
    """The probit path (``bt.distributions.BernoulliProbit``: truncated-normal latents, then the BART
    family's step), with the function entering plainly or times a factor of each row's own, against
    the exact posterior of every tree and of the function at every row (quadrature per leaf), at the
    defaults."""
    from bayestrees.distributions import BernoulliProbit

    X, codes, _ = _one_tree_data(data_seed, n=10)
    rng = np.random.default_rng(500 + data_seed)
    offset = 0.2
    s = (np.array([1.3, -0.6, 0.0, 1.0, 0.8, -1.1, 0.0, 1.5, 0.5, 1.0], np.float32) if factor
         else np.ones(len(X), np.float32))
    eta_true = offset + s * (np.where(codes[:, 0] >= 2, 1.2, -0.8) + np.where(codes[:, 1] >= 2, 0.5, 0.0))
    y = (rng.normal(size=len(X)) < eta_true).astype(np.float32)
    rows = np.arange(len(y))
    want, f_exact = _by_quadrature(codes, rows, lambda i, mu: np.where(y[i] > 0.5, stats.norm.logcdf(offset + s[i] * mu),
                                                                       stats.norm.logcdf(-(offset + s[i] * mu))))

    def model(X, y=None):
        f = tree_function("f", X, max_depth=MAX_DEPTH, min_leaf_rows=Q)
        numpyro.sample("y", BernoulliProbit(offset + s * f), obs=y)

    from bayestrees.inference.treefn.kernel import TreeMoves

    assert TreeMoves(model).prepare((X, y), {}).conjugate_kinds == ("probit",)
    _check_defaults_against(model, X, y, want, f_exact)


def _one_tree_student_t(data_seed):
    """The Student-t one-tree case: ``(X, y, want, f_exact, model)``, the one-tree data with two rows
    moved far out, a Student-t likelihood of known degrees of freedom and scale and an offset, the default Normal
    leaves (the Student-t path), the exact posterior of ``n_leaves`` and of the function at every row
    by quadrature per leaf."""
    X, codes, y = _one_tree_data(data_seed)
    rng = np.random.default_rng(300 + data_seed)
    y = y.copy()
    y[rng.choice(len(y), 2, replace=False)] += np.asarray([4.0, -3.0], np.float32)   # outliers
    nu, scale, offset = 3.0, 0.5, 0.4
    want, f_exact = _by_quadrature(codes, y, lambda yy, mu: stats.t(nu, loc=offset + mu, scale=scale).logpdf(yy))

    def model(X, y=None):
        f = tree_function("f", X, max_depth=MAX_DEPTH, min_leaf_rows=Q)
        numpyro.sample("y", dist.StudentT(nu, offset + f, scale), obs=y)

    return X, y, want, f_exact, model


@pytest.mark.slow
@pytest.mark.parametrize("data_seed", _data_seeds(3))
def test_one_tree_student_t_function_at_its_defaults_matches_enumeration(data_seed):
    """The same for a Student-t likelihood: the Student-t path (the scale mixture's Gamma latents, then
    the BART family's step on the Gaussian likelihood they make) at the defaults, against the exact
    posterior of every tree and of the function at every row."""
    X, y, want, f_exact, model = _one_tree_student_t(data_seed)
    _check_defaults_against(model, X, y, want, f_exact, **_programs(data_seed))


@pytest.mark.slow
def test_slides_on_a_student_t_function_match_enumeration():
    """``slide=2`` (the change move as a slide of a threshold at a node whose children are leaves, the
    BART family's) on the Student-t one-tree case: the same exact posterior of the trees and of the
    function at every row."""
    X, y, want, f_exact, model = _one_tree_student_t(1)
    _check_defaults_against(model, X, y, want, f_exact, slide=2)


def _one_tree_gamma_poisson(data_seed):
    """The Poisson case with log-gamma leaves: ``(X, y, want, f_exact, model)``, the exact posterior of
    ``n_leaves`` by the closed Gamma-Poisson marginal of every leaf, and of the function at every row
    (a leaf's ``E[log lambda]`` is closed too)."""
    from bayestrees.inference.treefn.leaf_priors import loggamma_params

    X, codes, _ = _one_tree_data(data_seed)
    rng = np.random.default_rng(100 + data_seed)
    offset = 0.8
    y = rng.poisson(np.exp(offset + np.where(codes[:, 0] >= 2, 0.6, -0.4))).astype(np.float32)
    c, d = loggamma_params(1.5)                                  # tree_function's default leaf_sd

    def log_leaf(rows):
        Y, U = float(y[rows].sum()), len(rows) * np.exp(offset)
        return (c * np.log(d) - gammaln(c) + gammaln(c + Y) - (c + Y) * np.log(d + U)
                + float(np.sum(y[rows] * offset - gammaln(y[rows] + 1))))

    def leaf_mean(rows):   # E[log lambda] under Gamma(c + Y, d + U)
        return float(digamma(c + y[rows].sum()) - np.log(d + len(rows) * np.exp(offset)))

    want, f_exact = _exact(_enumerate(codes, alpha=0.95, beta=2.0), log_leaf, leaf_mean, n=len(y))

    def model(X, y=None):
        f = tree_function("f", X, max_depth=MAX_DEPTH, min_leaf_rows=Q, leaf_prior="loggamma")
        numpyro.sample("y", dist.Poisson(jnp.exp(offset + f)), obs=y)

    return X, y, want, f_exact, model


@pytest.mark.slow
@pytest.mark.parametrize("data_seed", _data_seeds(3))
def test_one_tree_gamma_poisson_function_at_its_defaults_matches_enumeration(data_seed):
    """The Poisson case with log-gamma leaves (the Gamma-Poisson path: BART's visit with the leaf values
    integrated out, grow, prune, change and swap): the posterior of ``n_leaves`` against the enumeration
    with the closed Gamma-Poisson marginal of every leaf, and the posterior mean of the function at every
    row."""
    X, y, want, f_exact, model = _one_tree_gamma_poisson(data_seed)
    _check_defaults_against(model, X, y, want, f_exact, **_programs(data_seed))


@pytest.mark.slow
def test_slides_on_a_gamma_poisson_function_match_enumeration():
    """``slide=2`` on the Gamma-Poisson path (BART's visit of any leaf model: a slide re-splits the
    node's two leaves' rows and scores them by the Gamma-Poisson marginal), without the regrowth (the
    moves alone make the chain): the exact posterior of the trees and of the function at every row."""
    X, y, want, f_exact, model = _one_tree_gamma_poisson(1)
    _check_defaults_against(model, X, y, want, f_exact, slide=2, particles=0)


@pytest.mark.slow
def test_general_path_regrowth_matches_enumeration():
    """The general path's particle Gibbs regrowth (a conditional SMC proposal under a Gaussian expansion
    of the likelihood about a point the tree does not set, corrected by Metropolis-Hastings) as the main
    move of a one-tree Poisson function: one local move and one regrowth a step, 4 chains of 300 + 3,000.
    Strong counts under a tight leaf prior (``leaf_sd=0.7``, rates ``exp(2 [x0 >= 2] + [x1 >= 2])``), where
    the expansion is far from exact: the posterior of ``n_leaves`` within TV 0.03 of the enumeration and
    the function's mean at every row within 4.5 Monte Carlo standard errors of the quadrature's, for two
    sampler seeds.  Over data seeds 0-2 and sampler seeds 0-1 the correct kernel gave TV 0.002-0.024 and
    z at most 2.2; each of four planted errors (no correction, the expansion point set from the current
    function, the correction without the expansion, half its curvature) failed here (``docs/lab-notes/models.md``)."""
    sd, data_seed = 0.7, 0
    X, codes, _ = _one_tree_data(data_seed)
    rng = np.random.default_rng(200 + data_seed)
    y = rng.poisson(np.exp(np.where(codes[:, 0] >= 2, 2.0, 0.0) + np.where(codes[:, 1] >= 2, 1.0, 0.0))).astype(np.float32)
    grid = np.linspace(-10 * sd, 10 * sd, 8001)
    log_g = stats.norm(0, sd).logpdf(grid) + np.log(grid[1] - grid[0])

    def leaf_log_post(rows):
        yy = y[rows][:, None]
        return (yy * grid[None, :] - np.exp(grid)[None, :] - gammaln(yy + 1)).sum(0) + log_g

    def leaf_mean(rows):
        lw = leaf_log_post(rows)
        w = np.exp(lw - lw.max())
        return float((w * grid).sum() / w.sum())

    want, f_exact = _exact(_enumerate(codes, alpha=0.95, beta=2.0), lambda rows: logsumexp(leaf_log_post(rows)),
                           leaf_mean, n=len(y))

    def model(X, y=None):
        f = tree_function("f", X, max_depth=MAX_DEPTH, min_leaf_rows=Q, leaf_sd=sd)
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

    for seed in (0, 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = sample_model(model, X, y, random_seed=seed, tune=300, draws=3000, local_moves=1, particles=10,
                               log_likelihood=False)
        got = Counter(np.asarray(fit.idata.posterior["f_n_leaves"]).ravel().tolist())
        assert _tv(got, want) < 0.03, (seed, _tv(got, want), got, want)
        f = np.asarray(fit.idata.posterior["f"])
        for i in range(len(y)):
            assert abs(f[..., i].mean() - f_exact[i]) < 4.5 * _mcse(f[..., i]), (seed, i, f[..., i].mean(), f_exact[i])


@pytest.mark.slow
def test_general_path_leaf_value_matches_quadrature():
    """A function of one tree that cannot split (``max_depth=0``) in a Poisson model with a log link: every
    visit of the general path is a Laplace proposal of the leaf value with its exact correction (the
    reverse proposal built at the proposed function).  On skewed counts the posterior mean and sd of the
    value are the quadrature's, within 4 Monte Carlo standard errors and 5 %.  The one-tree tests above
    do not see the leaf values' law: a reverse proposal built at the current function instead passed them."""
    y = np.array([0, 0, 0, 1, 6], np.float32)
    X = np.arange(len(y), dtype=np.float32)[:, None]
    sd = 1.5                                                     # tree_function's default leaf_sd
    grid = np.linspace(-8 * sd, 8 * sd, 16001)
    log_post = stats.norm(0, sd).logpdf(grid) + (y.sum() * grid - len(y) * np.exp(grid))
    w = np.exp(log_post - logsumexp(log_post))
    mean = float(np.sum(w * grid))
    sd_post = float(np.sqrt(np.sum(w * (grid - mean) ** 2)))

    def model(X, y=None):
        f = tree_function("f", X, max_depth=0)
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = sample_model(model, X, y, random_seed=0, log_likelihood=False)
    theta = np.asarray(fit.idata.posterior["f"])[..., 0]
    mcse = float(az.mcse(az.convert_to_dataset({"t": theta}))["t"])
    assert abs(theta.mean() - mean) < 4 * mcse, (theta.mean(), mean, mcse)
    assert abs(theta.std() / sd_post - 1) < 0.05, (theta.std(), sd_post)


def _two_stumps_function_tv(conjugate, **sample_kw):
    """``(tv, got, want)`` of the two-stump function case below, sampled with ``sample_kw`` too."""
    import itertools

    rng = np.random.default_rng(0)
    n, sigma, tau = 8, 0.15, 0.25
    codes = rng.integers(0, 4, size=(n, 2))
    y = (np.where(codes[:, 0] >= 2, 0.3, -0.2) + 0.15 * codes[:, 1] + sigma * rng.normal(size=n)).astype(np.float32)
    X = codes.astype(np.float32)
    lo, hi = codes.min(0), codes.max(0)
    rules = [None] + [(j, t) for j in range(2) for t in range(lo[j], hi[j])]
    nvar = int(np.sum(hi > lo))

    def key(rule):   # a stump as its variable and the rows it sends left (None: a leaf)
        return None if rule is None else (rule[0], tuple(np.flatnonzero(codes[:, rule[0]] <= rule[1])))

    def log_prior(rule):
        return np.log1p(-ALPHA) if rule is None else np.log(ALPHA) - np.log(nvar) - np.log(hi[rule[0]] - lo[rule[0]])

    def same_leaf(rule):
        g = np.zeros(n, bool) if rule is None else codes[:, rule[0]] <= rule[1]
        return (g[:, None] == g[None, :]).astype(float)

    want = Counter()
    logs = {}
    for a, b in itertools.product(rules, rules):
        cov = sigma ** 2 * np.eye(n) + tau ** 2 * (same_leaf(a) + same_leaf(b))
        logs[(a, b)] = log_prior(a) + log_prior(b) + stats.multivariate_normal(np.zeros(n), cov).logpdf(y)
    mx = max(logs.values())
    z = sum(np.exp(v - mx) for v in logs.values())
    for (a, b), v in logs.items():
        want[tuple(sorted((key(a), key(b)), key=str))] += np.exp(v - mx) / z

    def model(X, y=None):
        f = bart_function("f", X, m=2, max_depth=1, min_leaf_rows=1, leaf_sd=tau, prior=ChipmanPrior(ALPHA, BETA))
        numpyro.sample("y", dist.Normal(f, sigma), obs=y)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = sample_model(model, X, y, draws=10000, tune=300, chains=4, random_seed=0, conjugate=conjugate,
                           move_probs=(0.25, 0.25, 0.4, 0.1), local_moves=2, log_likelihood=False, **sample_kw)
    trees = np.asarray(fit.idata.trees["f_trees"])          # (chain, draw, tree, node, field)
    feat, thr = trees[..., 0, 0].reshape(-1, 2).astype(int), trees[..., 0, 1].reshape(-1, 2)
    got = Counter()
    for fs, ts in zip(feat, thr):
        got[tuple(sorted(((None if f < 0 else (int(f), tuple(np.flatnonzero(X[:, f] <= t)))) for f, t in zip(fs, ts)),
                         key=str))] += 1
    return _tv(got, want), got, want


@pytest.mark.slow
@pytest.mark.parametrize("conjugate,particles", [(True, 0), (False, 0), (False, 4)],
                         ids=["conjugate", "general", "general+regrowth"])
def test_a_sum_of_two_stumps_with_change_and_swap_matches_enumeration(conjugate, particles):
    """A sum of two trees (``bart_function(m=2, max_depth=1)``) in a Normal model with sigma fixed, with
    the kernel asked for (``move_probs`` with change and swap, two moves of every tree a step) on the
    conjugate path and on the general one: the unordered pair of stumps against the exact posterior
    (given the pair, ``y ~ N(0, sigma^2 I + tau^2 (A_1 + A_2))``, ``A_j`` the rows sharing a leaf of
    tree ``j``; the stumps' prior the interval rule prior under the depth prior, truncated at depth 1).
    With ``particles`` the general path's regrowth follows the moves: every tree regrown in turn given
    the other (the likelihood is quadratic in the function, so its expansion is exact and every
    regrowth is kept)."""
    tv, got, want = _two_stumps_function_tv(conjugate, particles=particles)
    # 40,000 draws over the unordered pairs: seeds 0-3 gave TV 0.007-0.012 (conjugate) and 0.007-0.016
    # (general); at 16,000 draws 0.011-0.022 and 0.009-0.027
    assert tv < 0.03, (tv, got.most_common(4), sorted(want.items(), key=lambda kv: -kv[1])[:4])
