"""Importance weighting of prior trees: the safe-Bayesian random forest.

Quadrianto & Ghahramani (2015).  ``K`` trees ``T_k`` are drawn from a
data-independent prior (:mod:`bayestrees.inference.safebayes.prior_trees`), so the
importance weight of a tree under the posterior is its marginal likelihood

    w_k = p(Y | X, T_k) = prod_leaves p(y_leaf),

with conjugate leaves (Dirichlet-multinomial for classes, Normal-inverse-gamma
for real responses, :mod:`bayestrees.leaves`); a leaf with no rows
contributes 1.  The safe-Bayesian forest tempers the likelihood with a power
``beta = m / N`` (``m`` the *effective sample size*, ``N`` the training rows):

    p(y | x) = sum_k w_k^beta p(y | T_k, x) / sum_k w_k^beta,

``beta = 1`` is Bayesian model averaging (BMA) over the prior trees and
``beta -> infinity`` keeps only the best tree.  The per-tree predictive is the
leaf posterior predictive ((n_c + alpha) / sum(n + alpha) for classes, a
Student-t for real responses), not tempered.

Everything is in log space (``gammaln``; weights normalised with
``logsumexp``), so leaves with millions of rows never overflow.  The
per-leaf statistics are the leaf models' (:class:`bayestrees.leaves.DirichletLeaves`,
:class:`bayestrees.leaves.NormalLeaves`): ``row_stats`` summed into the leaf
slots by :func:`bayestrees.leaves.leaf_stats`, the marginal ``log_marginal``,
the node predictions ``predictive`` and the per-row predictive density
``log_predictive``.  Computations run in the dtype of the arrays passed in
(float32 by default in the family's fit; float64 needs ``jax_enable_x64``).
The log weights of big data sets lose absolute precision in float32 (about
``1e-7 * N log N`` nats); use float64 for exact BMA on large ``N``.

The family's entry point, which builds on these functions, is
:func:`bayestrees.inference.safebayes.fit.fit_safebayes`.

Shapes: ``K`` trees, ``L`` node slots, ``n`` rows, ``C`` classes, ``M`` values
of ``m`` on an operating curve, ``k`` statistics per row (``C`` for classes,
3 for real responses).
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from ...leaves import NIGPrior, leaf_stats, nig_posterior
from ...tree import LEAF, Tree, apply
from .prior_trees import PriorForest, bin_cum_counts, cut_thresholds, prior_to_tree, subtree_sums

__all__ = [
    "weigh_trees",
    "node_rows",
    "tempered_log_weights",
    "tree_class_probs",
    "forest_class_probs",
    "regression_tree_predictive",
    "regression_log_density",
    "operating_curve_classification",
    "operating_curve_regression",
    "default_m_grid",
    "auto_m_grid",
    "pool_curves",
    "choose_m",
    "apply_trees",
    "tree_skeleton",
]


def node_rows(leaf_model, stats):
    """Rows (sum of row weights) behind per-slot statistics: float (...,).

    Parameters
    ----------
    leaf_model : DirichletLeaves or NormalLeaves
    stats : float (..., k)  sums of ``leaf_model.row_stats``

    Returns
    -------
    The class counts summed (classification) or the count column (regression).
    """
    return jnp.sum(stats, -1) if leaf_model.task == "classification" else stats[..., 0]


@jax.jit
def weigh_trees(skeleton: Tree, codes, row_stats, leaf_model, row_weight):
    """Weigh prior trees on data: leaf statistics, node predictions and log marginal likelihoods.

    Parameters
    ----------
    skeleton : Tree (K, L)  from :func:`tree_skeleton`
    codes : uint (n, D)  training codes
    row_stats : float (n, k)  ``leaf_model.row_stats(y, dtype)``
    leaf_model : DirichletLeaves or NormalLeaves
        Passed as a pytree (its numbers are traced): a new ``alpha`` or leaf prior
        does not recompile.
    row_weight : float (n,)  1 for data rows, 0 for padding rows

    Returns
    -------
    tree : Tree (K, L, V)
        Node values ``leaf_model.predictive`` of the node's rows (internal nodes
        from the pooled statistics of their subtree): class probabilities
        ``(n_c + alpha) / sum(n + alpha)``, or the posterior mean of the leaf mean;
        ``weight``/``count`` = training rows in the node.
    stats : float (K, L, k)
        Leaf statistics (:func:`bayestrees.leaves.leaf_stats`; 0 on internal and unused slots).
    log_weight : float (K,)
        ``log p(Y | X, T_k) = leaf_model.log_marginal`` over the leaves (an empty
        leaf contributes 0).
    """
    L = skeleton.feature.shape[-1]
    leaves = apply(skeleton, codes)
    stats = leaf_stats(leaves, row_stats, L, row_weight)
    log_w = leaf_model.log_marginal(stats, skeleton.left == LEAF)
    full = subtree_sums(skeleton.left, skeleton.right, stats)
    n_node = node_rows(leaf_model, full)
    tree = skeleton._replace(value=leaf_model.predictive(full).astype(stats.dtype), weight=n_node,
                             count=jnp.round(n_node).astype(jnp.int32))
    return tree, stats, log_w


def tempered_log_weights(log_weight, beta):
    """Normalised log weights ``beta log w_k - logsumexp(beta log w)``.

    Parameters
    ----------
    log_weight : float (K,)
    beta : float or float (M,)  power; a vector gives one row per value

    Returns
    -------
    float (K,) or (M, K)
    """
    beta = jnp.asarray(beta, log_weight.dtype)
    z = beta[..., None] * log_weight
    # shift by the max first: z - logsumexp(z) would round away log(sum) when |z| is large (float32)
    z = z - jnp.max(z, axis=-1, keepdims=True)
    return z - jnp.log(jnp.sum(jnp.exp(z), axis=-1, keepdims=True))


@jax.jit
def apply_trees(tree: Tree, codes):
    """Jitted :func:`bayestrees.tree.apply`: leaf slot of each row in each tree, int32 (K, n)."""
    return apply(tree, codes)


@jax.jit
def tree_class_probs(tree: Tree, codes):
    """Per-tree predictive class probabilities of each row: float (K, n, C).

    ``tree.value`` must hold the leaf predictives.
    """
    leaves = apply(tree, codes)
    return jnp.take_along_axis(tree.value, leaves[..., None], axis=-2)


def forest_class_probs(tree_probs, log_weight, beta):
    """Safe-Bayes forest class probabilities: float (n, C).

    Parameters
    ----------
    tree_probs : float (K, n, C)  from :func:`tree_class_probs`
    log_weight : float (K,)
    beta : float  power ``m / N`` (1 = BMA)
    """
    w = jnp.exp(tempered_log_weights(log_weight, beta))
    return jnp.einsum("k,knc->nc", w, tree_probs)


def _nig(leaf_model, dtype) -> NIGPrior:
    return NIGPrior(*[jnp.asarray(v, dtype) for v in leaf_model.prior])


@jax.jit
def regression_tree_predictive(leaf_model, stats, leaves):
    """Student-t predictive parameters of every tree at every row (Normal-inverse-gamma leaves).

    Parameters
    ----------
    leaf_model : NormalLeaves
    stats : float (K, L, 3)  leaf statistics from :func:`weigh_trees`
    leaves : int32 (K, n)  leaf slot of each row

    Returns
    -------
    mean, scale2, df : float (K, n)
        Location (``leaf_model.predictive``, the posterior mean of the leaf mean),
        squared scale ``b_n (kappa_n + 1) / (a_n kappa_n)`` and degrees of freedom
        ``2 a_n`` of the leaf's posterior predictive.
    """
    mean = jnp.take_along_axis(leaf_model.predictive(stats)[..., 0], leaves, axis=-1)
    _, kn, an, bn = nig_posterior(stats[..., 0], stats[..., 1], stats[..., 2], _nig(leaf_model, stats.dtype))
    kn, an, bn = (jnp.take_along_axis(a, leaves, axis=-1) for a in (kn, an, bn))
    return mean, bn * (kn + 1.0) / (an * kn), 2.0 * an


@jax.jit
def regression_log_density(leaf_model, stats, leaves, y):
    """Per-tree log predictive density of ``y`` at its rows: ``leaf_model.log_predictive``, float (K, n)."""
    return leaf_model.log_predictive(jnp.asarray(y, stats.dtype), leaves, stats)


def default_m_grid(n_train: int, max_points: int = 1000) -> np.ndarray:
    """Effective sample sizes for an operating curve: every integer 1..N when
    ``N <= max_points``, else ``max_points`` log-spaced integers from 1 to N."""
    n_train = int(n_train)
    if n_train <= max_points:
        return np.arange(1, n_train + 1)
    return np.unique(np.round(np.geomspace(1, n_train, max_points)).astype(np.int64))


@partial(jax.jit, static_argnames=("batch_size",))
def operating_curve_classification(log_weight, tree_probs, y, m_grid, n_train, row_weight=None,
                                   batch_size: int = 32):
    """Accuracy and mean log predictive probability against ``m``.

    Parameters
    ----------
    log_weight : float (K,)
    tree_probs : float (K, n, C)  per-tree predictives on the evaluation rows
    y : int32 (n,)  class codes of the evaluation rows
    m_grid : float (M,)  effective sample sizes
    n_train : float  rows the weights were computed on (``beta = m / n_train``)
    row_weight : float (n,), optional  weights of the evaluation rows (0 for padding)

    Returns
    -------
    accuracy, log_predictive : float (M,)  (weighted) means over the evaluation rows
    """
    betas = jnp.asarray(m_grid, log_weight.dtype) / n_train
    w = jnp.ones(y.shape[0], log_weight.dtype) if row_weight is None else jnp.asarray(row_weight, log_weight.dtype)
    w = w / jnp.sum(w)

    def one(beta):
        p = forest_class_probs(tree_probs, log_weight, beta)
        acc = jnp.sum(w * (jnp.argmax(p, -1) == y))
        lp = jnp.sum(w * jnp.log(jnp.take_along_axis(p, y[:, None], axis=-1)[:, 0]))
        return acc, lp

    return jax.lax.map(one, betas, batch_size=batch_size)


@partial(jax.jit, static_argnames=("batch_size",))
def operating_curve_regression(log_weight, mean, log_density, y, m_grid, n_train, row_weight=None,
                               batch_size: int = 32):
    """Root mean squared error and mean log predictive density against ``m``.

    Parameters
    ----------
    log_weight : float (K,)
    mean : float (K, n)  per-tree predictive means on the evaluation rows
    log_density : float (K, n)  per-tree log predictive densities of ``y``
        (:func:`regression_log_density`)
    y : float (n,)
    m_grid : float (M,)
    n_train : float
    row_weight : float (n,), optional  weights of the evaluation rows (0 for padding)

    Returns
    -------
    rmse, log_predictive : float (M,)
    """
    betas = jnp.asarray(m_grid, log_weight.dtype) / n_train
    w = jnp.ones(y.shape[0], log_weight.dtype) if row_weight is None else jnp.asarray(row_weight, log_weight.dtype)
    w = w / jnp.sum(w)

    def one(beta):
        lw = tempered_log_weights(log_weight, beta)
        pred = jnp.einsum("k,kn->n", jnp.exp(lw), mean)
        rmse = jnp.sqrt(jnp.sum(w * (pred - y) ** 2))
        lp = jnp.sum(w * logsumexp(lw[:, None] + log_density, axis=0))
        return rmse, lp

    return jax.lax.map(one, betas, batch_size=batch_size)


def auto_m_grid(n_train: int, max_points: int = 1000, max_beta: float = 1000.0, n_beyond: int = 31) -> np.ndarray:
    """Candidate effective sample sizes for ``effective_sample_size="auto"``.

    :func:`default_m_grid` (``m = 1..N``, ``m = N`` being BMA) extended past
    ``N`` by ``n_beyond`` log-spaced values up to ``max_beta * N``: ``beta = m / N > 1``
    sharpens the weights beyond BMA towards the single best tree (``beta -> inf``;
    at ``beta = 1000`` two trees whose log weights differ by 0.01 nats already
    differ by a factor ``e^10``).  So the candidates span the whole family from
    the prior average (``m -> 0``) through BMA to the best tree.

    Parameters
    ----------
    n_train : int  ``N``
    max_points : int  size of the grid on ``[1, N]``
    max_beta : float  largest ``m / N``
    n_beyond : int  values on ``(N, max_beta N]``

    Returns
    -------
    int64 (M,) sorted, unique.
    """
    base = default_m_grid(n_train, max_points)
    n_train = int(n_train)
    beyond = np.round(np.geomspace(n_train, max_beta * n_train, int(n_beyond) + 1)[1:]).astype(np.int64)
    return np.unique(np.concatenate([base, beyond]))


def pool_curves(curves, weights) -> dict:
    """Pool operating curves computed on disjoint evaluation sets (cross-validation folds).

    Parameters
    ----------
    curves : list of dict  each with ``m`` (the same grid) and any of ``accuracy``,
        ``log_predictive`` (row means) and ``rmse``
    weights : list of int  evaluation rows behind each curve

    Returns
    -------
    dict: the row-weighted mean of ``accuracy`` and ``log_predictive`` and the root of the
    row-weighted mean of ``rmse ** 2`` (the pooled RMSE), i.e. the curve over all
    evaluation rows together.
    """
    w = np.asarray(weights, np.float64)
    w = w / w.sum()
    out = {"m": np.asarray(curves[0]["m"])}
    for key in ("accuracy", "log_predictive"):
        if key in curves[0]:
            out[key] = np.sum([wi * np.asarray(c[key], np.float64) for wi, c in zip(w, curves)], axis=0)
    if "rmse" in curves[0]:
        r = np.stack([np.asarray(c["rmse"], np.float64) for c in curves])
        big = np.max(r, axis=0)
        big = np.where(big > 0, big, 1.0)  # divide first: squares of huge errors would overflow
        out["rmse"] = big * np.sqrt(np.einsum("f,fm->m", w, (r / big) ** 2))
    return out


def choose_m(m_grid, log_predictive, score=None, *, higher_is_better: bool = True) -> int:
    """The effective sample size with the best ``score`` (ties: best log predictive, then smallest m).

    Parameters
    ----------
    m_grid : int (M,)
    log_predictive : float (M,)
    score : float (M,), optional  primary criterion (default: the log predictive)
    """
    m_grid = np.asarray(m_grid)
    lp = np.asarray(log_predictive, np.float64)
    sc = lp if score is None else np.asarray(score, np.float64)
    if not higher_is_better:
        sc = -sc
    sc = np.where(np.isfinite(sc), sc, -np.inf)
    lp = np.where(np.isfinite(lp), lp, -np.inf)
    # lexsort: last key is primary
    order = np.lexsort((m_grid, -lp, -sc))
    return int(m_grid[order[0]])


def tree_skeleton(prior: PriorForest, codes, n_bins, n_outputs: int, dtype=jnp.float32) -> Tree:
    """The prior trees with cuts mapped to the code thresholds of this data set.

    Parameters
    ----------
    prior : PriorForest (K trees)
    codes : uint (n, D)  training codes (the PIT is the empirical CDF of these rows)
    n_bins : int (D,)  bins per feature
    n_outputs : int  width ``V`` of the (zero) node values
    dtype : float dtype of the node values and weights

    Returns
    -------
    Tree with batch shape (K,), zero values, weights and counts.

    Notes
    -----
    A cut below the PIT of a feature's smallest value (``c < cum_0 / n``; frequent on
    features with many ties at their minimum, e.g. binary ones) sends every present
    value right: :func:`bayestrees.inference.safebayes.prior_trees.cut_thresholds` gives
    ``t = -1``.  Such a node is stored as the equivalent split ``code <= n_bins - 1``
    (every present value goes left) with its two children exchanged and
    ``missing_left`` negated, so every threshold is a valid code ``>= 0``: the packed
    traversal of :mod:`bayestrees.tree` stores thresholds as unsigned 16-bit numbers,
    in which ``-1`` reads as 65535 (everything left).  The rows reach the same leaf
    slots either way (binned codes never exceed ``n_bins - 1``).
    """
    cum, n_present = bin_cum_counts(np.asarray(codes), n_bins)
    feature = np.asarray(prior.feature)
    thr = cut_thresholds(feature, np.asarray(prior.cut), cum, n_present)
    K, L = thr.shape
    flip = (feature >= 0) & (thr < 0)
    if flip.any():
        top = np.maximum(np.asarray(n_bins, np.int64) - 1, 0).astype(np.int32)
        left, right = np.asarray(prior.left), np.asarray(prior.right)
        prior = prior._replace(left=np.where(flip, right, left), right=np.where(flip, left, right),
                               missing_left=np.where(flip, ~np.asarray(prior.missing_left),
                                                     np.asarray(prior.missing_left)))
        thr = np.where(flip, top[np.maximum(feature, 0)], thr).astype(np.int32)
    return prior_to_tree(prior, thr, jnp.zeros((K, L, n_outputs), dtype), jnp.zeros((K, L), dtype),
                         jnp.zeros((K, L), jnp.int32))
