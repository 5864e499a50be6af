"""The Bayesian causal forest's tree updates against exact enumeration (fixed seeds; tolerances from seed sweeps).

A BCF in small: ``y_i ~ N(s mu(x_i) + b_{z_i} tau(x_i), sigma^2)`` with one tree in each function
(``tree_function``, depth <= 2, 9 rows, 2 features of 4 levels) and ``s``, ``b0``, ``b1``, ``sigma``
fixed, so that the only unknowns are the two trees and their leaves.  The exact posterior of the pair
of trees is their priors times the Gaussian marginal of ``y`` with both functions' leaves integrated
out, ``N(0, sigma^2 I + sd^2 (s^2 A A' + D B B' D))`` (``A``, ``B`` the rows-by-leaves indicators of
the two trees, ``D = diag(b_z)``), summed over every pair of trees.  The chains, sampled at the one-tree
defaults, must give its joint law of the two trees' sizes and the posterior mean of ``tau`` at every
row.  Both codings: the paper's (``b0 = -0.3``, ``b1 = 1.2``: control rows inform ``tau~`` through
``b0``) and the plain one (``b0 = 0``: control rows carry nothing on ``tau``).
"""
import warnings
from collections import Counter

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy.special import logsumexp

from bayestrees.convergence import ConvergenceWarning
from bayestrees.inference.treefn import sample_model, tree_function
from tests.inference.treefn.test_treefn_exact import MAX_DEPTH, Q, _enumerate, _mcse, _one_tree_data, _tv
from tests.inference.treefn.test_treefn_missing import _coded

pytestmark = pytest.mark.long_chains

SIGMA, SD, S_MU = 0.6, 1.5, 0.8    # SD: tree_function's default leaf_sd


def _indicator(leaves, n):
    A = np.zeros((n, len(leaves)))
    for j, rows in enumerate(leaves):
        A[rows, j] = 1.0
    return A


def _exact_pairs(codes, y, b, trees=None):
    """The exact joint posterior of ``(n_leaves of mu, n_leaves of tau)`` and the posterior mean of
    ``tau`` at every row (module docstring), over ``trees`` (default: every tree on ``codes`` under
    tree_function's prior)."""
    n = len(y)
    if trees is None:
        trees = _enumerate(codes, alpha=0.95, beta=2.0)
    ind = [_indicator(lv, n) for _, lv in trees]
    K = [SD ** 2 * S_MU ** 2 * A @ A.T for A in ind]
    L = [SD ** 2 * (b[:, None] * B) @ (b[:, None] * B).T for B in ind]
    lp, sizes, tau_mean = [], [], []
    for i, (p1, lv1) in enumerate(trees):
        for j, (p2, lv2) in enumerate(trees):
            C = SIGMA ** 2 * np.eye(n) + K[i] + L[j]
            chol = np.linalg.cholesky(C)
            alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
            ll = -0.5 * y @ alpha - np.log(np.diag(chol)).sum() - 0.5 * n * np.log(2 * np.pi)
            lp.append(p1 + p2 + ll)
            sizes.append((len(lv1), len(lv2)))
            tau_mean.append(SD ** 2 * ind[j] @ (ind[j].T @ (b * alpha)))   # E[tau~ | y] = sd^2 B B' D C^-1 y
    lp = np.array(lp)
    w = np.exp(lp - logsumexp(lp))
    joint = Counter()
    for s, wi in zip(sizes, w):
        joint[s] += wi
    return joint, w @ np.array(tau_mean)


def _bcf_data(seed):
    X, codes, _ = _one_tree_data(seed)
    rng = np.random.default_rng(100 + seed)
    z = (rng.uniform(size=len(X)) < 0.5).astype(np.int32)
    while min(z.sum(), len(z) - z.sum()) < 3:    # both arms, 3 rows or more each
        z = (rng.uniform(size=len(X)) < 0.5).astype(np.int32)
    mu = np.where(codes[:, 0] >= 2, 1.0, -1.0)
    tau = np.where(codes[:, 1] >= 2, 1.5, 0.0)
    y = (mu + tau * z + SIGMA * rng.normal(size=len(X))).astype(np.float32)
    return X, codes, z, y


@pytest.mark.parametrize("b0, b1", [pytest.param(-0.3, 1.2, id="adaptive_coding"),
                                    pytest.param(0.0, 1.0, id="plain_coding", marks=pytest.mark.full_only)])
def test_effect_tree_matches_enumeration(b0, b1, data_seed=0):
    """Both trees at the one-tree defaults: the posterior of each tree's size within TV 0.03 of the exact
    one, and ``tau~`` at every row within 4.5 Monte Carlo standard errors, sampler seeds 0 and 1.

    (The joint law of the two sizes has more cells, so its TV at 4,000 draws is noisier: 0.008-0.036
    over sampler seeds 0-3, and 0.017 for seed 1 at 20,000 draws, against 0.036 at 4,000; the
    marginals gave 0.002-0.020 and the rows' means 0.8-1.7 standard errors.)"""
    X, codes, z, y = _bcf_data(data_seed)
    _check_both_trees(X, z, y, b0, b1, *_exact_pairs(codes, y.astype(np.float64), np.where(z > 0, b1, b0)))


def test_effect_tree_with_missing_covariates_matches_enumeration():
    """The same with missing entries in one covariate (3 of 9 rows): each function's rules also say
    where a missing value goes, the enumeration runs on the coded columns (a feature's two columns at
    half its weight: ``tests/inference/treefn/test_treefn_missing.py``); the paper's coding."""
    X, _, codes, hi0, log_w = _coded()
    rng = np.random.default_rng(7)
    z = np.array([0, 1, 1, 0, 1, 0, 0, 1, 1], np.int32)
    mu = np.where(codes[:, 0] >= 2, 1.0, -1.0)                       # a missing value reads above every level
    tau = np.where(codes[:, 1] >= 2, 1.5, 0.0)
    y = (mu + tau * z + SIGMA * rng.normal(size=len(X))).astype(np.float32)
    b0, b1 = -0.3, 1.2
    trees = _enumerate(codes, Q, 0.95, 2.0, hi0=hi0, log_w=log_w)
    _check_both_trees(X, z, y, b0, b1, *_exact_pairs(codes, y.astype(np.float64), np.where(z > 0, b1, b0), trees))


def _check_both_trees(X, z, y, b0, b1, want, tau_exact):
    """Fits at sampler seeds 0 and 1 against the exact posterior (the tolerances of
    :func:`test_effect_tree_matches_enumeration`)."""

    def model(X, z, y=None):
        mu = tree_function("mu", X, max_depth=MAX_DEPTH, min_leaf_rows=Q)
        tau = tree_function("tau", X, max_depth=MAX_DEPTH, min_leaf_rows=Q)
        numpyro.sample("y", dist.Normal(S_MU * mu + np.where(z > 0, b1, b0) * tau, SIGMA), obs=y)

    for seed in (0, 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = sample_model(model, X, z, y, random_seed=seed, log_likelihood=False)
        post = fit.idata.posterior
        for k, name in enumerate(("mu", "tau")):
            got = Counter(np.asarray(post[f"{name}_n_leaves"]).ravel().tolist())
            marginal = Counter()
            for sizes, p in want.items():
                marginal[sizes[k]] += p
            assert _tv(got, marginal) < 0.03, (seed, name, _tv(got, marginal), got, marginal)
        tau = np.asarray(post["tau"])
        for i in range(len(y)):
            assert abs(tau[..., i].mean() - tau_exact[i]) < 4.5 * _mcse(tau[..., i]), (seed, i, tau[..., i].mean(), tau_exact[i])
