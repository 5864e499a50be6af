"""Tree functions with missing values in X (:mod:`bayestrees.inference.treefn.site`, "Missing values").

(a) the coding: for trees drawn from the prior, the site's evaluation at real features with NaN
    (``x <= threshold``, a missing value sent by its column's side) equals the routing of the coded
    columns by their integer codes, at training rows and at new rows (a missing value where the
    training rows had none goes right);
(b) a function of one tree at its default kernel and lengths, in a Normal model with sigma known and
    in a Poisson model (the general path), on 9 rows with missing entries in one feature: the
    posterior of the number of leaves and of the function at every row against the enumeration of
    every tree of depth at most 2 on the coded columns (the interval rule prior, a feature's two
    columns at half its weight), leaf values integrated out (closed form, or quadrature);
plus the prior's draws against that enumeration, and ``ModelFit.function`` at new rows with NaN.
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
from scipy.special import gammaln, logsumexp

from bayestrees.convergence import ConvergenceWarning
from bayestrees.inference.treefn import TreeEnsemble, sample_model, tree_function, tree_summaries_of
from bayestrees.inference.treefn.site import TreeSpec, encode, evaluate
from bayestrees.priors import ChipmanPrior
from tests.inference.treefn.test_treefn_exact import _enumerate

pytestmark = pytest.mark.long_chains

MAX_DEPTH, Q = 2, 1


def _data():
    """9 rows, feature 0 with levels 0-3 and three missing entries, feature 1 with levels 0-3."""
    codes = np.array([[0, 1], [1, 3], [2, 0], [3, 2], [-1, 1], [2, 3], [-1, 0], [0, 2], [-1, 3]])
    X = np.where(codes < 0, np.nan, codes * 1.5 - 2.0).astype(np.float32)
    y = (np.where(codes[:, 0] >= 2, 1.0, -1.0) + 0.5 * np.where(codes[:, 1] >= 2, 1.0, -1.0)).astype(np.float32)
    y[codes[:, 0] < 0] = 1.4
    y = y + np.float32(0.5) * np.random.default_rng(0).normal(size=9).astype(np.float32)
    return X, y


def _route(codes, feature, threshold):
    """Leaf slot of every row of a heap tree by the integer codes."""
    node = np.zeros(codes.shape[0], int)
    for _ in range(MAX_DEPTH + 3):
        f = feature[node]
        go = f >= 0
        c = codes[np.arange(len(node)), np.maximum(f, 0)]
        node = np.where(go, 2 * node + 1 + (c > threshold[node]), node)
    return node


@pytest.mark.compile_bound
def test_the_site_routes_every_row_as_its_coded_columns():
    X, _ = _data()
    d = TreeEnsemble(X, TreeSpec(1, 3, ChipmanPrior(0.95, 0.5), 1.0, 0))
    assert d.missing and d.cuts.shape[0] == 4 and int(d.code_hi[3]) == 0   # feature 1 has no missing-left column
    np.testing.assert_allclose(np.exp(np.asarray(d.split_log_w))[:3], [0.25, 0.5, 0.25])
    trees = np.asarray(d.sample(jax.random.key(0), (400,)))[:, 0]             # (400, S, 3)
    new = X.copy()
    new[:3, 1] = np.nan                                                        # missing where training had none
    for rows in (X, new):
        codes = np.asarray(encode(rows, d.cuts)).astype(int)
        got = np.asarray(evaluate(trees[:, None], rows))[:, :]
        for i, tr in enumerate(trees):
            f = tr[:, 0].astype(int)
            code, _ = d.codes_of(jnp.asarray(f), jnp.asarray(tr[:, 1]))
            leaf = _route(codes, f, np.asarray(code))
            np.testing.assert_array_equal(got[i], tr[leaf, 2])
    assert (trees[..., 0] == 2).any() and (trees[..., 0] == 0).any()           # both sides drawn


def _coded():
    X, y = _data()
    d = TreeEnsemble(X, TreeSpec(1, MAX_DEPTH, ChipmanPrior(0.95, 2.0), 1.5, Q))
    return X, y, np.asarray(encode(X, d.cuts)).astype(int), np.asarray(d.code_hi).astype(int), \
        np.asarray(d.split_log_w, np.float64)


def _exact(trees, log_leaf, leaf_mean, n):
    lp = np.array([p + sum(log_leaf(r) for r in leaves) for p, leaves in trees])
    w = np.exp(lp - logsumexp(lp))
    out, f = Counter(), np.zeros(n)
    for (_, leaves), wi in zip(trees, w):
        out[len(leaves)] += wi
        for r in leaves:
            f[r] += wi * leaf_mean(r)
    return out, f


def _tv(got: Counter, want: Counter) -> float:
    n = sum(got.values())
    return 0.5 * sum(abs(got[k] / n - want[k]) for k in set(got) | set(want))


@pytest.mark.compile_bound
def test_the_prior_draws_follow_the_enumerated_weighted_prior():
    X, _, codes, hi0, log_w = _coded()
    want, _ = _exact(_enumerate(codes, Q, 0.95, 2.0, hi0=hi0, log_w=log_w), lambda r: 0.0, lambda r: 0.0, len(X))
    d = TreeEnsemble(X, TreeSpec(1, MAX_DEPTH, ChipmanPrior(0.95, 2.0), 1.0, Q))
    got = Counter(tree_summaries_of(np.asarray(d.sample(jax.random.key(1), (20000,))))["n_leaves"].ravel().tolist())
    assert _tv(got, want) < 0.015, (got, want)   # 20,000 independent draws: the TV's sd is about 0.003


def _mcse(x) -> float:
    return float(az.mcse(az.convert_to_dataset({"x": np.asarray(x, float)}))["x"])


def _agreement(model, X, y, want, f_exact):
    """Fits at sampler seeds 0 and 1 against the exact posterior: per seed ``(TV of n_leaves, the largest
    error of the function's posterior mean at a row in Monte Carlo standard errors)``, and the last fit."""
    out = []
    for seed in (0, 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = sample_model(model, X, y, random_seed=seed, log_likelihood=False)
        got = Counter(np.asarray(fit.idata.posterior["f_n_leaves"]).ravel().tolist())
        f = np.asarray(fit.idata.posterior["f"])
        z = max(abs(f[..., i].mean() - f_exact[i]) / _mcse(f[..., i]) for i in range(len(f_exact)))
        out.append((_tv(got, want), z))
    return out, fit


@pytest.mark.slow
def test_one_tree_normal_function_with_missing_values_matches_enumeration():
    """Sigma known, the conjugate path (local moves and the weighted particle Gibbs regrowth) at the
    defaults, sampler seeds 0 and 1: TV of ``n_leaves`` < 0.03, the function's posterior mean at every
    row within 4.5 Monte Carlo standard errors."""
    X, y, codes, hi0, log_w = _coded()
    sigma = 0.7
    want, f_exact = _exact(_enumerate(codes, Q, 0.95, 2.0, hi0=hi0, log_w=log_w), *normal_leaves(y, sigma, 1.5), len(y))

    def model(X, y=None):
        f = tree_function("f", X, max_depth=MAX_DEPTH, min_leaf_rows=Q)
        numpyro.sample("y", dist.Normal(f, sigma), obs=y)

    errors, fit = _agreement(model, X, y, want, f_exact)
    for tv, z in errors:
        assert tv < 0.03 and z < 4.5, errors
    new = X[:4].copy()
    new[0, 1] = np.nan
    got = fit.function("f", new)
    assert got.shape[-1] == 4 and np.all(np.isfinite(got))
    assert fit.idata.posterior["f_split_counts"].shape[-1] == 2


def normal_leaves(y, sigma, sd):
    """``(log_leaf, leaf_mean)`` of a leaf's rows under ``y ~ N(v, sigma^2)``, ``v ~ N(0, sd^2)``: the log
    marginal likelihood and the posterior mean of ``v``, in closed form."""
    def log_leaf(rows):
        k = len(rows)
        return stats.multivariate_normal(np.zeros(k), sigma ** 2 * np.eye(k) + sd ** 2 * np.ones((k, k))).logpdf(y[rows])

    def leaf_mean(rows):
        return sd ** 2 * y[rows].sum() / (sigma ** 2 + len(rows) * sd ** 2)

    return log_leaf, leaf_mean


def poisson_leaves(y, offset, sd, points: int = 8001):
    """``(log_leaf, leaf_mean)`` of a leaf's rows under ``y ~ Poisson(exp(offset + v))``, ``v ~ N(0, sd^2)``:
    the log marginal likelihood and the posterior mean of ``v``, by quadrature on ``+-8 sd``."""
    grid = np.linspace(-8 * sd, 8 * sd, points)
    log_g = stats.norm(0, sd).logpdf(grid) + np.log(grid[1] - grid[0])

    def post(rows):
        yy = y[rows][:, None]
        return (yy * (offset + grid) - np.exp(offset + grid) - gammaln(yy + 1)).sum(0) + log_g

    def leaf_mean(rows):
        lp = post(rows)
        return float(np.sum(np.exp(lp - logsumexp(lp)) * grid))

    return (lambda rows: logsumexp(post(rows))), leaf_mean


@pytest.mark.slow
def test_one_tree_poisson_function_with_missing_values_matches_enumeration():
    """The general path (Poisson, log link, Normal leaves): each leaf's marginal and mean by quadrature."""
    X, _, codes, hi0, log_w = _coded()
    rng = np.random.default_rng(7)
    offset = 0.8
    y = rng.poisson(np.exp(offset + np.where(np.nan_to_num(X[:, 0], nan=1.0) >= 0, 0.6, -0.4))).astype(np.float32)
    trees = _enumerate(codes, Q, 0.95, 2.0, hi0=hi0, log_w=log_w)
    want, f_exact = _exact(trees, *poisson_leaves(y, offset, 1.5), len(y))

    def model(X, y=None):
        f = tree_function("f", X, max_depth=MAX_DEPTH, min_leaf_rows=Q)
        numpyro.sample("y", dist.Poisson(jnp.exp(offset + f)), obs=y)

    errors, _ = _agreement(model, X, y, want, f_exact)
    for tv, z in errors:
        assert tv < 0.03 and z < 4.5, errors
