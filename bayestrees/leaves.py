"""Conjugate leaf models: log marginal likelihoods, posterior predictives and leaf draws.

Leaf models (one interface, used by every family)
-------------------------------------------------
:class:`DirichletLeaves` (classes), :class:`NormalLeaves` (per-leaf mean and
variance, Normal-inverse-gamma in every leaf) and
:class:`CommonVarianceNormalLeaves` (per-leaf means, one variance shared by the
tree: the mean-shift model of Chipman, George & McCulloch 1998).  Each gives

* ``row_stats(y) -> float[n, k]``: the per-row sufficient statistics;
  :func:`leaf_stats` sums them (optionally weighted) into the tree's slots;
* ``log_marginal(stats, mask) -> float[...]``: ``log p(Y | T)`` with the leaf
  parameters integrated out (``mask`` selects the leaf slots);
* ``predictive(stats) -> float[..., S, V]``: the posterior predictive mean of
  each leaf (class probabilities or the mean response), the ``Tree.value``;
* ``log_predictive(y, leaf, stats, mask) -> float[n]``: ``log p(y_i | Y, T)``,
  the posterior predictive density of ``y_i`` in its leaf;
* ``draw(key, stats, mask) -> LeafDraw``: one draw of the leaf parameters from
  their posterior given the tree;
* ``log_likelihood(y, leaf, draw) -> float[n]``: ``log p(y_i | theta)`` at a
  drawn ``theta`` (the pointwise log-likelihood that ``az.loo`` needs).

Statistics may be weighted (fractional counts): a power likelihood with power
``beta`` is ``weight = beta``.  All functions are pure ``jax.numpy`` and work
on one tree; ``vmap`` them over a batch.

The trees of a sum (BART, the tree functions) are visited one at a time given the others, on
rows whose statistics change at every visit (the partial residual).  A model that serves them
gives its view on those rows, ``model.on_rows(...)``: :class:`NormalRows`
(:class:`KnownVarianceNormalLeaves`) and :class:`GammaPoissonRows` (:class:`GammaPoissonLeaves`),
whose interface :class:`NormalRows` describes.  The particle Gibbs regrowth of a sum's tree
scores its trees with the per-slot model (``rows.model``), as Bayesian CART does.

All functions are pure ``jax.numpy`` code, vectorised over leading axes, and
work in log space with ``gammaln`` so that leaves holding millions of rows
never overflow.  Sufficient statistics may be weighted (fractional counts),
which is how power likelihoods (``counts * beta``) are expressed.

Classification: Dirichlet-multinomial::

    y_i | p ~ Categorical(p),  p ~ Dirichlet(alpha).
    log p(y_leaf) = log B(n + alpha) - log B(alpha), with B the multivariate
    Beta function and n the class counts of the leaf (the probability of the
    label *sequence*, no multinomial coefficient).  Predictive:
    (n_c + alpha_c) / sum(n + alpha).

Regression: Normal-inverse-gamma::

    y_i | mu, s2 ~ N(mu, s2),  mu | s2 ~ N(m0, s2 / kappa0),  s2 ~ IG(a0, b0).
    With n, mean ybar and centred sum of squares S:
    kappa_n = kappa0 + n,  m_n = (kappa0 m0 + n ybar) / kappa_n,
    a_n = a0 + n / 2,  b_n = b0 + S / 2 + kappa0 n (ybar - m0)^2 / (2 kappa_n),
    log p(y_leaf) = gammaln(a_n) - gammaln(a0) + a0 log b0 - a_n log b_n
                    + (log kappa0 - log kappa_n) / 2 - n log(2 pi) / 2.
    Predictive: Student-t(2 a_n, m_n, b_n (kappa_n + 1) / (a_n kappa_n)).
"""
from __future__ import annotations

import math

import functools
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from . import random_bits
from .batching import cell_sums, scatter_add
from .data import check_alpha

__all__ = [
    "LeafDraw",
    "leaf_stats",
    "make_leaf_model",
    "LEAF_MODEL_KINDS",
    "draws_at_rows",
    "sigma_at_rows",
    "DirichletLeaves",
    "NormalLeaves",
    "CommonVarianceNormalLeaves",
    "ObjectiveNormalLeaves",
    "KnownVarianceNormalLeaves",
    "GammaPoissonLeaves",
    "NormalRows",
    "GammaPoissonRows",
    "known_variance_log_marginal",
    "gamma_poisson_log_marginal",
    "loggamma_params",
    "precision_row_stats",
    "NIGPrior",
    "dirichlet_log_marginal",
    "dirichlet_predictive",
    "nig_stats",
    "nig_log_marginal",
    "nig_posterior",
    "nig_predictive_logpdf",
    "student_t_logpdf",
    "default_nig_prior",
]


def dirichlet_log_marginal(counts, alpha):
    """log B(counts + alpha) - log B(alpha), summed over the last (class) axis.

    Parameters
    ----------
    counts : float[..., K]  class counts (may be fractional / weighted)
    alpha : float or float[K]  Dirichlet concentration (> 0)
    """
    counts = jnp.asarray(counts)
    alpha = jnp.broadcast_to(jnp.asarray(alpha, counts.dtype), counts.shape)
    return (jnp.sum(gammaln(counts + alpha), -1) - gammaln(jnp.sum(counts + alpha, -1))
            - jnp.sum(gammaln(alpha), -1) + gammaln(jnp.sum(alpha, -1)))


def dirichlet_predictive(counts, alpha):
    """Posterior predictive class probabilities (counts + alpha) / sum."""
    counts = jnp.asarray(counts)
    a = counts + jnp.asarray(alpha, counts.dtype)
    return a / jnp.sum(a, -1, keepdims=True)


def _same_model(self, other) -> bool:
    """Leaf models are equal when they are the same model with the same fields: a NamedTuple alone
    compares as the tuple of its fields, so ``NormalLeaves(prior) == CommonVarianceNormalLeaves(prior)``
    and a sampler compiled for one (the model is part of a static config) would serve the other."""
    return type(self) is type(other) and tuple.__eq__(self, other)


def _model_hash(self) -> int:
    return hash((type(self).__qualname__,) + tuple(self))


def _not_same_model(self, other) -> bool:
    return not _same_model(self, other)



class NIGPrior(NamedTuple):
    """Normal-inverse-gamma hyperparameters (m0, kappa0, a0, b0)."""

    m0: float = 0.0
    kappa0: float = 1.0
    a0: float = 1.0
    b0: float = 1.0


def default_nig_prior(y) -> NIGPrior:
    """A weakly informative prior scaled to the data: centred on mean(y),
    prior scale of the noise variance about var(y)."""
    import numpy as np

    y = np.asarray(y, dtype=float)
    v = float(np.var(y)) if y.size > 1 else 1.0
    v = v if v > 0 else 1.0
    return NIGPrior(m0=float(np.mean(y)), kappa0=0.1, a0=2.0, b0=v)


def nig_stats(y, weights=None):
    """Sufficient statistics (n, sum, sum of squares) of ``y`` over the last axis."""
    y = jnp.asarray(y)
    w = jnp.ones_like(y) if weights is None else jnp.asarray(weights, y.dtype)
    return jnp.sum(w, -1), jnp.sum(w * y, -1), jnp.sum(w * y * y, -1)


@jax.jit
def nig_posterior(n, s, ss, prior: NIGPrior):
    """Posterior hyperparameters (m_n, kappa_n, a_n, b_n) from statistics."""
    m0, k0, a0, b0 = prior
    kn = k0 + n
    ybar = jnp.where(n > 0, s / jnp.where(n > 0, n, 1.0), 0.0)
    centred = jnp.maximum(ss - n * ybar * ybar, 0.0)
    mn = (k0 * m0 + s) / kn
    an = a0 + n / 2.0
    bn = b0 + centred / 2.0 + k0 * n * (ybar - m0) ** 2 / (2.0 * kn)
    return mn, kn, an, bn


def nig_log_marginal(n, s, ss, prior: NIGPrior):
    """log p(y_leaf) under the Normal-inverse-gamma model (see module docstring)."""
    m0, k0, a0, b0 = prior
    _, kn, an, bn = nig_posterior(n, s, ss, prior)
    return (gammaln(an) - gammaln(a0) + a0 * jnp.log(b0) - an * jnp.log(bn)
            + 0.5 * (jnp.log(k0) - jnp.log(kn)) - 0.5 * n * jnp.log(2.0 * jnp.pi))


def student_t_logpdf(y, mean, scale2, df):
    """log density of a Student-t with location ``mean``, squared scale ``scale2`` and ``df`` degrees of freedom."""
    z2 = (y - mean) ** 2 / scale2
    return (gammaln((df + 1) / 2) - gammaln(df / 2) - 0.5 * jnp.log(df * jnp.pi * scale2)
            - (df + 1) / 2 * jnp.log1p(z2 / df))


def nig_predictive_logpdf(y, n, s, ss, prior: NIGPrior):
    """log density of new ``y`` under the Student-t posterior predictive."""
    mn, kn, an, bn = nig_posterior(n, s, ss, prior)
    return student_t_logpdf(y, mn, bn * (kn + 1.0) / (an * kn), 2.0 * an)


# ---------------------------------------------------------------------------------------------
# one interface for every family
# ---------------------------------------------------------------------------------------------
@partial(jax.jit, static_argnames=("n_slots",))
def leaf_stats(leaf, row_stats, n_slots: int, weight=None):
    """Sum per-row statistics into tree slots.

    Parameters
    ----------
    leaf : int[..., n]  slot of each row (a batch of trees may lead)
    row_stats : float[n, k]  from ``LeafModel.row_stats``
    n_slots : int  tree capacity ``S``
    weight : float[n] or float[..., n], optional  row weights (padding rows 0)

    Returns
    -------
    float[..., S, k]
    """
    leaf = jnp.asarray(leaf)
    row_stats = jnp.asarray(row_stats)
    batch = leaf.shape[:-1]
    n, k = row_stats.shape
    w = jnp.ones(leaf.shape, row_stats.dtype) if weight is None else jnp.broadcast_to(
        jnp.asarray(weight, row_stats.dtype), leaf.shape)
    flat_leaf = leaf.reshape((-1, n))
    B = flat_leaf.shape[0]
    idx = (flat_leaf + jnp.arange(B)[:, None] * n_slots).reshape(-1)
    vals = (row_stats[None] * w.reshape((B, n, 1))).reshape((-1, k))
    out = scatter_add(jnp.zeros((B * n_slots, k), vals.dtype), idx, vals)  # one-dimensional under vmap
    return out.reshape(batch + (n_slots, k))


def _take_rows(a, leaf):
    """``a[..., leaf, :]`` for a per-slot array ``a`` (float[..., S, k]) and leaf (int[..., n])."""
    return jnp.take_along_axis(a, leaf[..., None], axis=-2)


class LeafDraw(NamedTuple):
    """One draw of the leaf parameters of a tree.

    value : float[..., S, V]  class probabilities, or the mean (V = 1)
    sigma : float[..., S]     noise standard deviation (regression; 0 for classes)
    """

    value: jax.Array
    sigma: jax.Array


def draws_at_rows(leaf_model, leaf, draw: LeafDraw, y):
    """Drawn leaf parameters of a batch of fixed trees at the rows, and the pointwise log-likelihood.

    Parameters
    ----------
    leaf_model : a leaf model of this module
    leaf : int[T, n]
        Slot of each row in each tree (:func:`bayestrees.tree.apply`).
    draw : LeafDraw
        The trees' drawn leaf parameters: ``value`` float[T, S, V], ``sigma`` float[T, S].
    y : (n,)
        Class codes or responses, on the scale of the draw.

    Returns
    -------
    mu : float[T, n, V]
        ``draw.value`` at each row's leaf.
    log_likelihood : float[T, n]
        ``leaf_model.log_likelihood(y, leaf, draw)`` of each tree.

    Notes
    -----
    Pure ``jax.numpy``: callers ``jit`` it (or the program around it) as they need.
    """
    ll = jax.vmap(lambda lf, d: leaf_model.log_likelihood(y, lf, d))(leaf, draw)
    mu = _take_rows(draw.value, leaf)
    return mu, ll


def sigma_at_rows(keys, leaf_model, train_leaf, row_stats, mean, leaf, row_weight=None):
    """Noise sd of each fixed tree's leaf at the rows, drawn from ``p(s2 | mu, Y, T)`` given drawn leaf means.

    For draws stored without their noise scale (a tree whose leaf values are drawn means):
    ``(mu, s2)`` is then a joint posterior draw given the tree.

    Parameters
    ----------
    keys : PRNG keys (T,)
        One per tree.
    leaf_model : NormalLeaves (a model with ``sigma_given_mean``)
    train_leaf : int[T, n_train]
        Slot of each training row in each tree.
    row_stats : float[n_train, k]
        ``leaf_model.row_stats`` of the training response.
    mean : float[T, S]
        The drawn leaf means (the trees' ``value[..., 0]``), on the scale of ``row_stats``.
    leaf : int[T, m]
        Slot of each row to report in each tree.
    row_weight : float[n_train], optional
        Training row weights (padding rows 0).

    Returns
    -------
    float[T, m]
        The drawn noise sd of each row's leaf.

    Notes
    -----
    Pure ``jax.numpy``: callers ``jit`` it (or the program around it) as they need.
    """
    stats = leaf_stats(train_leaf, row_stats, mean.shape[-1], row_weight)
    sd = jax.vmap(leaf_model.sigma_given_mean)(keys, stats, mean)
    return jnp.take_along_axis(sd, leaf, axis=-1)


class DirichletLeaves(NamedTuple):
    """Categorical responses with Dirichlet(alpha) leaf probabilities.

    ``y_i | p ~ Categorical(p_leaf)``, ``p_leaf ~ Dirichlet(alpha)``;
    ``log p(Y | T) = sum_leaves log B(n + alpha) - log B(alpha)``.
    """

    __eq__ = _same_model
    __ne__ = _not_same_model
    __hash__ = _model_hash

    n_classes: int
    alpha: float = 1.0

    task = "classification"
    common_sigma = False
    per_leaf_marginal = True   # the log marginal is a sum of per-leaf terms
    one_hot_stats = True       # a row's statistics are one class's indicator (times its weight)

    @property
    def n_outputs(self) -> int:
        return int(self.n_classes)

    def row_stats(self, y, dtype=jnp.float32):
        return jax.nn.one_hot(jnp.asarray(y), self.n_classes, dtype=dtype)

    def _alpha(self, stats):
        return jnp.broadcast_to(jnp.asarray(self.alpha, stats.dtype), stats.shape[-1:])

    def log_marginal(self, stats, mask):
        lm = dirichlet_log_marginal(stats, self._alpha(stats))
        return jnp.sum(jnp.where(mask, lm, 0.0), -1)

    def count_score(self, n_max: int, dtype):
        """The log marginal of one leaf as a function of its class counts, for scoring many candidate
        leaves at once (the proposal of :mod:`bayestrees.inference.pgibbs`): ``counts (..., K) -> (...)``.

        The class terms ``gammaln(n_c + alpha)`` are read from a table of the integer counts
        ``0 .. n_max``: one ``gammaln`` per leaf instead of ``K + 1``.  At integer counts up to
        ``n_max`` (unit row weights) it equals :meth:`log_marginal` of that leaf up to float
        rounding; other counts are rounded and clipped to the table, which only a proposal may do
        (its probability is computed by the same function, so the update stays exact).
        """
        k = int(self.n_classes)
        alpha = jnp.broadcast_to(jnp.asarray(self.alpha, dtype), (k,))
        table = gammaln(jnp.arange(n_max + 1, dtype=dtype)[None, :] + alpha[:, None]).reshape(-1)   # (K (n_max+1),)
        offset = jnp.arange(k, dtype=jnp.int32) * (n_max + 1)

        def score(counts):   # the terms in dirichlet_log_marginal's order
            c = jnp.clip(jnp.round(counts), 0, n_max)
            terms = jnp.take(table, c.astype(jnp.int32) + offset, mode="clip")
            return (jnp.sum(terms, -1) - gammaln(jnp.sum(c + alpha, -1))
                    - jnp.sum(gammaln(alpha), -1) + gammaln(jnp.sum(alpha, -1)))

        return score

    def predictive(self, stats):
        return dirichlet_predictive(stats, self._alpha(stats))

    def log_predictive(self, y, leaf, stats, mask=None):
        p = _take_rows(self.predictive(stats), leaf)
        return jnp.log(jnp.take_along_axis(p, jnp.asarray(y)[..., None], -1)[..., 0])

    def draw(self, key, stats, mask=None):
        conc = stats + self._alpha(stats)
        g = random_bits.gamma(key, conc, dtype=stats.dtype)
        # tiny concentrations can underflow every gamma draw of a leaf to 0: fall back to the mean
        tot = jnp.sum(g, -1, keepdims=True)
        p = jnp.where(tot > 0, g / jnp.where(tot > 0, tot, 1.0), conc / jnp.sum(conc, -1, keepdims=True))
        return LeafDraw(p, jnp.zeros(stats.shape[:-1], stats.dtype))

    def log_likelihood(self, y, leaf, draw: LeafDraw):
        p = _take_rows(draw.value, leaf)
        return jnp.log(jnp.take_along_axis(p, jnp.asarray(y)[..., None], -1)[..., 0])


@partial(jax.jit, static_argnames=("dtype",))
def _normal_row_stats(y, dtype):
    y = jnp.asarray(y, dtype)
    return jnp.stack([jnp.ones_like(y), y, y * y], -1)


def _normal_logpdf(y, mean, sigma):
    z = (y - mean) / sigma
    return -0.5 * z * z - jnp.log(sigma) - 0.5 * jnp.log(2.0 * jnp.pi)


def _inv_gamma(key, a, b, dtype):
    """A draw of IG(a, b) (shape ``a``), i.e. ``b / Gamma(a, 1)``."""
    return b / random_bits.gamma(key, a, dtype=dtype)


class NormalLeaves(NamedTuple):
    """Real responses with a mean and a variance per leaf (heteroskedastic leaves).

    ``y_i ~ N(mu_leaf, s2_leaf)``, ``mu | s2 ~ N(m0, s2 / kappa0)``,
    ``s2 ~ IG(a0, b0)`` independently in every leaf; the log marginal is the
    sum of :func:`nig_log_marginal` over the leaves.  Standardise ``y`` first:
    the sums of squares lose precision for targets far from 0.
    """

    __eq__ = _same_model
    __ne__ = _not_same_model
    __hash__ = _model_hash

    prior: NIGPrior = NIGPrior()

    task = "regression"
    common_sigma = False
    per_leaf_marginal = True   # the log marginal is a sum of per-leaf terms
    n_outputs = 1

    def row_stats(self, y, dtype=jnp.float32):
        return _normal_row_stats(y, dtype)

    def _prior(self, dtype):
        return NIGPrior(*[jnp.asarray(v, dtype) for v in self.prior])

    def log_marginal(self, stats, mask):
        p = self._prior(stats.dtype)
        lm = nig_log_marginal(stats[..., 0], stats[..., 1], stats[..., 2], p)
        return jnp.sum(jnp.where(mask, lm, 0.0), -1)

    def predictive(self, stats):
        mn, _, _, _ = nig_posterior(stats[..., 0], stats[..., 1], stats[..., 2], self._prior(stats.dtype))
        return mn[..., None]

    def log_predictive(self, y, leaf, stats, mask=None):
        st = _take_rows(stats, leaf)
        return nig_predictive_logpdf(jnp.asarray(y, stats.dtype), st[..., 0], st[..., 1], st[..., 2],
                                     self._prior(stats.dtype))

    def draw(self, key, stats, mask=None):
        k_s, k_m = random_bits.split(key)
        mn, kn, an, bn = nig_posterior(stats[..., 0], stats[..., 1], stats[..., 2], self._prior(stats.dtype))
        s2 = _inv_gamma(k_s, an, bn, stats.dtype)
        mu = mn + jnp.sqrt(s2 / kn) * random_bits.normal(k_m, mn.shape, stats.dtype)
        return LeafDraw(mu[..., None], jnp.sqrt(s2))

    def log_likelihood(self, y, leaf, draw: LeafDraw):
        mu = _take_rows(draw.value, leaf)[..., 0]
        sd = jnp.take_along_axis(draw.sigma, leaf, -1)
        return _normal_logpdf(jnp.asarray(y, mu.dtype), mu, sd)

    def sigma_given_mean(self, key, stats, mean):
        """A draw of each leaf's noise sd from ``p(s2 | mu, Y, T)`` for a drawn leaf mean ``mu``.

        ``p(s2 | mu, Y) ∝ IG(s2; a_n, b_n) N(mu; m_n, s2 / kappa_n)``, i.e.
        ``IG(a_n + 1/2, b_n + kappa_n (mu - m_n)^2 / 2)`` (for draws stored without their sigma).
        """
        mn, kn, an, bn = nig_posterior(stats[..., 0], stats[..., 1], stats[..., 2], self._prior(stats.dtype))
        b = bn + 0.5 * kn * (mean - mn) ** 2
        return jnp.sqrt(b / random_bits.gamma(key, an + 0.5, dtype=stats.dtype))


class CommonVarianceNormalLeaves(NamedTuple):
    """Real responses with a mean per leaf and one variance per tree (Chipman et al. 1998).

    ``y_i ~ N(mu_leaf, s2)``, ``mu_leaf | s2 ~ N(m0, s2 / kappa0)`` independently,
    ``s2 ~ IG(a0, b0)``.

    Notes
    -----
    Integrating each ``mu_leaf`` gives, per leaf with ``n_l`` rows, mean ``ybar_l``
    and centred sum of squares ``S_l``,
    ``(2 pi s2)^(-n_l/2) (kappa0 / kappa_l)^(1/2) exp(-Q_l / (2 s2))`` with
    ``kappa_l = kappa0 + n_l`` and ``Q_l = S_l + kappa0 n_l (ybar_l - m0)^2 / kappa_l``.
    Integrating ``s2 ~ IG(a0, b0)`` then gives, with ``N = sum n_l``,
    ``A = a0 + N / 2`` and ``B = b0 + sum Q_l / 2``::

        log p(Y | T) = -N/2 log(2 pi) + 1/2 sum_l log(kappa0 / kappa_l)
                       + a0 log b0 - log Gamma(a0) + log Gamma(A) - A log B.

    Given the tree, ``s2 | Y ~ IG(A, B)`` and ``mu_l | s2, Y ~ N(m_l, s2 / kappa_l)``;
    the predictive of a new row in leaf ``l`` is Student-t with ``2 A`` degrees
    of freedom, location ``m_l`` and squared scale ``B (kappa_l + 1) / (A kappa_l)``.
    """

    __eq__ = _same_model
    __ne__ = _not_same_model
    __hash__ = _model_hash

    prior: NIGPrior = NIGPrior()

    task = "regression"
    common_sigma = True
    per_leaf_marginal = False   # the log marginal is not a sum of per-leaf terms (the shared variance)
    n_outputs = 1

    def row_stats(self, y, dtype=jnp.float32):
        return _normal_row_stats(y, dtype)

    def _parts(self, stats, mask):
        m0, k0, a0, b0 = NIGPrior(*[jnp.asarray(v, stats.dtype) for v in self.prior])
        n, s, ss = stats[..., 0], stats[..., 1], stats[..., 2]
        mn, kn, _, bn = nig_posterior(n, s, ss, NIGPrior(m0, k0, a0, jnp.zeros_like(b0)))
        q = 2.0 * bn  # Q_l
        N = jnp.sum(jnp.where(mask, n, 0.0), -1)
        A = a0 + N / 2.0
        B = b0 + 0.5 * jnp.sum(jnp.where(mask, q, 0.0), -1)
        return m0, k0, a0, b0, n, mn, kn, N, A, B

    def log_marginal(self, stats, mask):
        m0, k0, a0, b0, n, mn, kn, N, A, B = self._parts(stats, mask)
        return (-0.5 * N * jnp.log(2.0 * jnp.pi) + 0.5 * jnp.sum(jnp.where(mask, jnp.log(k0) - jnp.log(kn), 0.0), -1)
                + a0 * jnp.log(b0) - gammaln(a0) + gammaln(A) - A * jnp.log(B))

    def predictive(self, stats):
        m0, k0 = self.prior.m0, self.prior.kappa0
        n, s = stats[..., 0], stats[..., 1]
        return ((k0 * m0 + s) / (k0 + n))[..., None]

    def log_predictive(self, y, leaf, stats, mask):
        m0, k0, a0, b0, n, mn, kn, N, A, B = self._parts(stats, mask)
        loc = jnp.take_along_axis(mn, leaf, -1)
        kl = jnp.take_along_axis(kn, leaf, -1)
        scale2 = B[..., None] * (kl + 1.0) / (A[..., None] * kl)
        return student_t_logpdf(jnp.asarray(y, stats.dtype), loc, scale2, 2.0 * A[..., None])

    def draw(self, key, stats, mask):
        k_s, k_m = random_bits.split(key)
        m0, k0, a0, b0, n, mn, kn, N, A, B = self._parts(stats, mask)
        s2 = _inv_gamma(k_s, A, B, stats.dtype)[..., None]
        mu = mn + jnp.sqrt(s2 / kn) * random_bits.normal(k_m, mn.shape, stats.dtype)
        return LeafDraw(mu[..., None], jnp.broadcast_to(jnp.sqrt(s2), mn.shape))

    def log_likelihood(self, y, leaf, draw: LeafDraw):
        mu = _take_rows(draw.value, leaf)[..., 0]
        sd = jnp.take_along_axis(draw.sigma, leaf, -1)
        return _normal_logpdf(jnp.asarray(y, mu.dtype), mu, sd)



class ObjectiveNormalLeaves(NamedTuple):
    """Real responses with a mean and a variance per leaf under the objective prior ``p(mu, s2) ∝ 1 / s2`` (BET).

    ``y_i ~ N(mu_leaf, s2_leaf)`` independently in every leaf, with the improper
    prior ``p(mu, s2) ∝ 1 / s2`` (unit constant).  :class:`NormalLeaves` cannot
    express it: it is the limit ``kappa0 -> 0, a0 -> -1/2, b0 -> 0`` of the
    Normal-inverse-gamma prior, where ``nig_log_marginal`` has ``log kappa0 = -inf``
    and ``a0 log b0 = +inf``.

    Parameters
    ----------
    ref : NIGPrior
        A proper reference prior used only where the objective posterior does not
        exist: leaves holding fewer than two rows (weight), e.g. an unoccupied
        mixture component, whose parameters are then drawn from ``ref`` (its
        posterior given the leaf's rows).
    s_floor : float
        The centred sum of squares of a leaf is floored at ``s_floor * (n - 1)``
        (leaves whose responses are all equal would otherwise have an infinite
        marginal); standardise ``y`` first, so that the floor is relative to unit variance.

    Notes
    -----
    A leaf with ``n >= 2`` rows, mean ``ybar`` and centred sum of squares ``S``:
    the likelihood is ``(2 pi s2)^(-n/2) exp(-(S + n (ybar - mu)^2) / (2 s2))``.
    Integrating ``mu`` over the real line gives ``(2 pi s2 / n)^(1/2)``, so::

      ∫∫ p(y | mu, s2) / s2 dmu ds2
        = (2 pi)^(-(n-1)/2) n^(-1/2) ∫ s2^(-(n-1)/2 - 1) exp(-S / (2 s2)) ds2
        = (2 pi)^(-(n-1)/2) n^(-1/2) Gamma((n-1)/2) (S/2)^(-(n-1)/2),

    i.e. ``log p(y_leaf) = -(n-1)/2 log(2 pi) - log(n)/2 + gammaln((n-1)/2) - (n-1)/2 log(S/2)``
    (the prior's constant is 1 per leaf: with an improper prior the marginal, and so
    the comparison of trees with different numbers of leaves, depends on that choice).
    The posterior is ``s2 | y ~ IG((n-1)/2, S/2)``, ``mu | s2, y ~ N(ybar, s2 / n)``;
    the predictive of a new row is Student-t with ``n - 1`` degrees of freedom,
    location ``ybar`` and squared scale ``S (1 + 1/n) / (n - 1)``.  Leaves with no
    rows contribute 0 to the log marginal (the reference branch with ``n = 0``).
    """

    __eq__ = _same_model
    __ne__ = _not_same_model
    __hash__ = _model_hash

    ref: NIGPrior = NIGPrior(0.0, 0.1, 1.5, 0.2922)
    s_floor: float = 1e-6

    task = "regression"
    common_sigma = False
    per_leaf_marginal = True   # the log marginal is a sum of per-leaf terms
    n_outputs = 1

    def row_stats(self, y, dtype=jnp.float32):
        return _normal_row_stats(y, dtype)

    def _ref(self, dtype):
        return NIGPrior(*[jnp.asarray(v, dtype) for v in self.ref])

    def _parts(self, stats):
        """``proper`` (n >= 2), and n, ybar, S made safe where not proper."""
        n, s, ss = stats[..., 0], stats[..., 1], stats[..., 2]
        proper = n >= 2.0
        ns = jnp.where(proper, n, 2.0)
        ybar = jnp.where(proper, s / ns, 0.0)
        S = jnp.where(proper, jnp.maximum(ss - ns * ybar * ybar, self.s_floor * (ns - 1.0)), 1.0)
        return proper, ns, ybar, S

    def log_marginal(self, stats, mask):
        proper, n, ybar, S = self._parts(stats)
        h = 0.5 * (n - 1.0)
        obj = -h * jnp.log(2.0 * jnp.pi) - 0.5 * jnp.log(n) + gammaln(h) - h * jnp.log(0.5 * S)
        ref = nig_log_marginal(stats[..., 0], stats[..., 1], stats[..., 2], self._ref(stats.dtype))
        return jnp.sum(jnp.where(mask, jnp.where(proper, obj, ref), 0.0), -1)

    def predictive(self, stats):
        proper, n, ybar, S = self._parts(stats)
        mn, _, _, _ = nig_posterior(stats[..., 0], stats[..., 1], stats[..., 2], self._ref(stats.dtype))
        return jnp.where(proper, ybar, mn)[..., None]

    def log_predictive(self, y, leaf, stats, mask=None):
        st = _take_rows(stats, leaf)
        proper, n, ybar, S = self._parts(st)
        y = jnp.asarray(y, stats.dtype)
        obj = student_t_logpdf(y, ybar, S * (1.0 + 1.0 / n) / (n - 1.0), n - 1.0)
        ref = nig_predictive_logpdf(y, st[..., 0], st[..., 1], st[..., 2], self._ref(stats.dtype))
        return jnp.where(proper, obj, ref)

    def draw(self, key, stats, mask=None):
        k_s, k_m = random_bits.split(key)
        proper, n, ybar, S = self._parts(stats)
        mn, kn, an, bn = nig_posterior(stats[..., 0], stats[..., 1], stats[..., 2], self._ref(stats.dtype))
        # one inverse-gamma and one normal draw: IG((n-1)/2, S/2), N(ybar, s2/n) where proper, else the reference
        s2 = _inv_gamma(k_s, jnp.where(proper, 0.5 * (n - 1.0), an), jnp.where(proper, 0.5 * S, bn), stats.dtype)
        loc, k = jnp.where(proper, ybar, mn), jnp.where(proper, n, kn)
        mu = loc + jnp.sqrt(s2 / k) * random_bits.normal(k_m, loc.shape, stats.dtype)
        return LeafDraw(mu[..., None], jnp.sqrt(s2))

    def log_likelihood(self, y, leaf, draw: LeafDraw):
        mu = _take_rows(draw.value, leaf)[..., 0]
        sd = jnp.take_along_axis(draw.sigma, leaf, -1)
        return _normal_logpdf(jnp.asarray(y, mu.dtype), mu, sd)


@partial(jax.jit, static_argnames=("dtype",))
def precision_row_stats(y, precision, dtype=jnp.float32):
    """Per-row statistics of :class:`KnownVarianceNormalLeaves`: ``[p, p y, p y^2, log(p / 2 pi) / 2]``.

    Parameters
    ----------
    y : float (n,)
    precision : float () or (n,)
        ``p_i = w_i / sigma^2``: the inverse noise variance of each row (0: the row carries no
        likelihood; its normalising term is then 0 too).
    dtype : floating dtype of the result

    Returns
    -------
    float (n, 4)
    """
    y = jnp.asarray(y, dtype)
    p = jnp.broadcast_to(jnp.asarray(precision, dtype), y.shape)
    half_log = jnp.where(p > 0, 0.5 * jnp.log(jnp.where(p > 0, p, 1.0) / (2.0 * jnp.pi)), 0.0)
    return jnp.stack([p, p * y, p * y * y, half_log], -1)


class KnownVarianceNormalLeaves(NamedTuple):
    """Real responses with a mean per leaf and a KNOWN noise variance (the leaves of BART's trees).

    ``y_i ~ N(mu_leaf, sigma2 / w_i)``, ``mu_leaf ~ N(m0, tau2)`` independently; ``sigma2`` is known
    (Chipman, George & McCulloch 2010, where each tree's leaves are updated given the others and
    ``sigma``).  The statistics are precision-weighted (:func:`precision_row_stats`): per leaf
    ``P = sum p_i``, ``S1 = sum p_i y_i``, ``S2 = sum p_i y_i^2`` and ``L = sum log(p_i / 2 pi) / 2``
    with ``p_i = w_i / sigma2``, so a caller whose noise variance changes (BART's Gibbs step)
    passes its own row statistics and one model serves every value of it; :meth:`row_stats`
    uses ``p_i = 1 / sigma2``.  ``MCMCData.weight`` multiplies all four (a power likelihood).

    Parameters
    ----------
    sigma2 : float
        Noise variance (used by :meth:`row_stats`, :meth:`log_predictive` and the draws' ``sigma``).
    tau2 : float
        Prior variance of a leaf mean.
    m0 : float
        Prior mean of a leaf mean.

    Notes
    -----
    With ``v = 1 / (P + 1 / tau2)`` and ``m = v (S1 + m0 / tau2)``, integrating ``mu`` gives per leaf::

        log p(y_leaf) = L - S2 / 2 - m0^2 / (2 tau2) - log(1 + tau2 P) / 2 + (S1 + m0 / tau2)^2 v / 2,

    the posterior is ``mu | y ~ N(m, v)`` and the predictive of a new row of weight 1 is
    ``N(m, v + sigma2)``.  A leaf with no rows contributes 0.  ``S2`` and ``L`` enter the marginal
    as a sum over the rows, the same for every tree: a caller that needs only ratios between
    trees may set those columns to 0 (BART does; the sum of ``n`` squares in float32 is then
    kept out of its acceptance ratios).
    """

    __eq__ = _same_model
    __ne__ = _not_same_model
    __hash__ = _model_hash

    sigma2: float = 1.0
    tau2: float = 1.0
    m0: float = 0.0

    task = "regression"
    common_sigma = True
    per_leaf_marginal = True   # the log marginal is a sum of per-leaf terms
    n_outputs = 1

    def row_stats(self, y, dtype=jnp.float32):
        return precision_row_stats(y, 1.0 / jnp.asarray(self.sigma2, dtype), dtype)

    def _post(self, stats):
        dt = stats.dtype
        tau2, m0 = jnp.asarray(self.tau2, dt), jnp.asarray(self.m0, dt)
        P, S1 = stats[..., 0], stats[..., 1]
        v = 1.0 / (P + 1.0 / tau2)
        b = S1 + m0 / tau2
        return tau2, m0, P, S1, v, b

    def log_marginal(self, stats, mask):
        tau2, m0, P, S1, v, b = self._post(stats)
        lm = (stats[..., 3] - 0.5 * stats[..., 2] - 0.5 * m0 * m0 / tau2 - 0.5 * jnp.log1p(tau2 * P)
              + 0.5 * b * b * v)
        return jnp.sum(jnp.where(mask, lm, 0.0), -1)

    def predictive(self, stats):
        _, _, _, _, v, b = self._post(stats)
        return (v * b)[..., None]

    def log_predictive(self, y, leaf, stats, mask=None):
        _, _, _, _, v, b = self._post(stats)
        m = jnp.take_along_axis(v * b, leaf, -1)
        var = jnp.take_along_axis(v, leaf, -1) + jnp.asarray(self.sigma2, stats.dtype)
        return _normal_logpdf(jnp.asarray(y, stats.dtype), m, jnp.sqrt(var))

    def draw(self, key, stats, mask=None):
        _, _, _, _, v, b = self._post(stats)
        mu = v * b + jnp.sqrt(v) * random_bits.normal(key, v.shape, stats.dtype)
        return LeafDraw(mu[..., None], jnp.full(v.shape, jnp.sqrt(jnp.asarray(self.sigma2, stats.dtype))))

    def log_likelihood(self, y, leaf, draw: LeafDraw):
        mu = _take_rows(draw.value, leaf)[..., 0]
        sd = jnp.take_along_axis(draw.sigma, leaf, -1)
        return _normal_logpdf(jnp.asarray(y, mu.dtype), mu, sd)

    def on_rows(self, w, inv_s2) -> "NormalRows":
        """This model on the rows of a visit of a sum's trees (:class:`NormalRows`): rows of weight ``w``
        and noise precision ``inv_s2`` (``sigma2`` is then the rows' business, not the model's)."""
        return NormalRows(w, inv_s2, self._replace(sigma2=1.0))


def known_variance_log_marginal(P, Q, tau2):
    """Per leaf of Normal rows about a leaf value ``N(0, tau2)``, the terms of the log marginal that differ
    between trees: ``-log(1 + tau2 P) / 2 + Q^2 / (2 (P + 1 / tau2))`` (``P = sum p_i``, ``Q = sum p_i r_i``;
    :class:`KnownVarianceNormalLeaves` with ``m0 = 0``, its ``S2`` and ``L`` left out)."""
    return -0.5 * jnp.log1p(tau2 * P) + 0.5 * Q * Q / (P + 1.0 / tau2)


class NormalRows(NamedTuple):
    """:class:`KnownVarianceNormalLeaves` on the rows of a visit of a sum's trees
    (:func:`bayestrees.inference.bart.kernel.move_trees`): row ``i`` of precision ``p_i = w_i / sigma^2``
    about the tree's leaf value, leaf values ``N(0, tau2)`` (``model.tau2``).  Made by
    :meth:`KnownVarianceNormalLeaves.on_rows`.

    A leaf model on a visit's rows (this class and :class:`GammaPoissonRows`) gives:

    * :meth:`row_values` of the partial residual ``r`` (every tree but the visited one), which the
      visit sums per leaf (``rsum``); beside it the visit keeps per leaf ``wsum``, the sum of a
      per-row quantity that no visit changes (here ``w_i``);
    * :meth:`log_marginal` ``(wsum, rsum)``: per leaf, the log marginal likelihood up to terms that
      are the same for every tree;
    * :meth:`noise` for the leaf draws of all ``m`` visits at once, and :meth:`draw`, one visit's
      leaf values from their conditional;
    * for the particle Gibbs regrowth (:func:`bayestrees.inference.bart.kernel.regrow_trees`):
      ``model``, the per-slot leaf model that scores the regrown trees, :meth:`regrow_rows`, the
      rows' statistics for it, and :meth:`regrown_sums`, ``(wsum, rsum)`` from its summed statistics.

    A new leaf model of a sum's trees is one such class here, beside its per-slot model; the grow,
    prune, change and swap visits and the regrowth come with it.
    """

    w: jax.Array        # (n,) row weights (0 for padding)
    inv_s2: jax.Array   # 1 / sigma^2
    model: "KnownVarianceNormalLeaves"   # (sigma2 = 1, tau2): the rows carry their precision

    def _tau2(self, dtype):
        return jnp.asarray(self.model.tau2, dtype)

    def row_values(self, r):
        return self.w * r

    def log_marginal(self, wsum, rsum):
        return known_variance_log_marginal(wsum * self.inv_s2, rsum * self.inv_s2, self._tau2(wsum.dtype))

    @staticmethod
    def noise(key, m: int, S: int, dtype):
        return random_bits.normal(key, (m, S), dtype)

    def variance(self, wsum):
        """Each leaf value's conditional variance ``1 / (P + 1 / tau2)`` (``P = wsum / sigma^2``): of
        :meth:`draw`, and of the Normal visit's stored leaf terms (``bart.kernel._terms``)."""
        return 1.0 / (wsum * self.inv_s2 + 1.0 / self._tau2(wsum.dtype))

    def draw(self, is_leaf, wsum, rsum, noise):
        var = self.variance(wsum)
        return jnp.where(is_leaf, var * rsum * self.inv_s2 + jnp.sqrt(var) * noise, 0.0)

    def regrow_rows(self, r):
        """``[p_i, p_i r_i, 0, 0]`` with ``p_i = w_i / sigma^2`` (the sum of squares and the normalising
        terms are the same for every tree: left out)."""
        p = self.w * self.inv_s2
        zero = jnp.zeros_like(r)
        return jnp.stack([p, p * r, zero, zero], -1)

    def regrown_sums(self, stats):
        return stats[:, 0] / self.inv_s2, stats[:, 1] / self.inv_s2


class GammaPoissonLeaves(NamedTuple):
    """Counts with a rate per leaf, the leaf model of the particle Gibbs regrowth of log-gamma leaves.

    ``y_i ~ Poisson(u_i lambda_leaf)``, ``lambda_leaf ~ Gamma(c, d)`` independently (shape ``c``, rate
    ``d``; the log-gamma leaves of log-linear BART, Murray 2021:
    :mod:`bayestrees.inference.treefn.leaf_priors`).  The row statistics ``[y_i, u_i]`` come from the
    caller, whose exposures ``u_i`` change from step to step (a tree of a sum passes ``B_i exp(f_-j,i)``,
    the rate of the other trees), so the model has no ``row_stats`` of its own: it scores trees
    (the regrowth's marginal), and :meth:`on_rows` gives the visits' view (:class:`GammaPoissonRows`),
    which draws the leaves.

    Notes
    -----
    Per leaf, with ``Y = sum y_i`` and ``U = sum u_i`` over its rows, integrating ``lambda`` gives
    ``c log d - lgamma(c) + lgamma(c + Y) - (c + Y) log(d + U)`` plus ``sum (y_i log u_i - lgamma(y_i + 1))``,
    which is the same for every tree and left out; a leaf with no rows contributes 0.  The posterior
    is ``Gamma(c + Y, d + U)``.
    """

    __eq__ = _same_model
    __ne__ = _not_same_model
    __hash__ = _model_hash

    c: float = 1.0
    d: float = 1.0

    task = "regression"
    common_sigma = False
    per_leaf_marginal = True   # the log marginal is a sum of per-leaf terms
    n_outputs = 1

    def log_marginal(self, stats, mask):
        lm = gamma_poisson_log_marginal(stats[..., 0], stats[..., 1], float(self.c), float(self.d))
        return jnp.sum(jnp.where(mask, lm, 0.0), -1)

    def on_rows(self, B, y) -> "GammaPoissonRows":
        """This model on the rows of a visit of a sum's trees (:class:`GammaPoissonRows`): counts ``y``
        with the exposures ``B`` of the rows' rates ``B_i exp(f_i)``."""
        return GammaPoissonRows(B, y, self)


class GammaPoissonRows(NamedTuple):
    """:class:`GammaPoissonLeaves` on the rows of a visit of a sum's trees (what it gives:
    :class:`NormalRows`), for Poisson rows of rate ``B_i exp(f_i)`` and log-gamma leaves ``exp(theta) ~
    Gamma(c, d)``.  The visit's residual is ``-f``, so its partial residual is ``r = -f_-j``: per leaf
    ``wsum = sum y_i`` and ``rsum = sum B_i exp(-r_i)``, the Gamma-Poisson marginal, and ``exp(theta)``
    drawn from ``Gamma(c + wsum, d + rsum)`` (exact Gamma draws from Marsaglia-Tsang candidates drawn for
    all visits before the scan: :func:`bayestrees.random_bits.log_gamma_given`; a rejection loop in every
    visit cost more than half of the step).  Made by :meth:`GammaPoissonLeaves.on_rows`."""

    B: jax.Array   # (n,)
    y: jax.Array   # (n,) the counts (the regrowth's rows: ``[y_i, B_i exp(-r_i)]``)
    model: "GammaPoissonLeaves"

    def row_values(self, r):
        return self.B * jnp.exp(-r)

    def log_marginal(self, wsum, rsum):
        return gamma_poisson_log_marginal(wsum, rsum, self.model.c, self.model.d)

    @staticmethod
    def noise(key, m: int, S: int, dtype):
        k_val, k_more = random_bits.split(key)
        gz, gu = random_bits.gamma_tries(k_val, (m, S))
        return random_bits.split(k_more, m), gz, gu

    def regrow_rows(self, r):
        return jnp.stack([self.y, self.B * jnp.exp(-r)], -1)

    @staticmethod
    def regrown_sums(stats):
        return stats[:, 0], stats[:, 1]

    def draw(self, is_leaf, wsum, rsum, noise):
        k, z, ug = noise
        shape = jnp.where(is_leaf, self.model.c + wsum, 1.0).astype(wsum.dtype)
        return jnp.where(is_leaf, random_bits.log_gamma_given(k, shape, z, ug) - jnp.log(self.model.d + rsum), 0.0)


def value_grad_curvature(L, f):
    """``L(f)``, its gradient and ``H(f) 1`` in one forward-over-reverse pass (``H 1`` is the
    Hessian's diagonal where ``L`` is a sum of per-row terms)."""
    (val, grad), (_, h1) = jax.jvp(jax.value_and_grad(L), (f,), (jnp.ones_like(f),))
    return val, grad, h1


#: damped Newton steps of :meth:`LaplaceRows.expansion_point` (the general path's regrowth)
LAPLACE_NEWTON = 6


class LaplaceRows(NamedTuple):
    """Any likelihood on the rows of a visit of a sum's trees, where the leaf values have no closed
    marginal (the tree functions' general path): the model's log density ``L(f)`` in the function's
    values ``f`` at the rows (every other site held), leaf values ``N(0, tau2)`` (``leaf_prior="normal"``)
    or log-gamma of sd ``leaf_sd``.

    Where :class:`NormalRows` gives a log marginal and a conjugate draw, this gives a proposal and the
    exact density: a visit (:func:`bayestrees.inference.bart.kernel.move_trees`) moves the tree and
    its leaf values jointly, the new leaves' values from :meth:`proposal` (one Newton step of ``L``
    from the current values under the leaf prior) and the move corrected by Metropolis-Hastings with
    ``L`` evaluated exactly; the regrowth (:func:`~bayestrees.inference.bart.kernel.regrow_trees`)
    proposes from the Normal rows of a Gaussian expansion of ``L`` about :meth:`expansion_point` and
    corrects the same way.  The derivations: :mod:`bayestrees.inference.treefn.kernel`, "General path"
    and "Regrowth on the general path".
    """

    L: Any                     # f (n,) -> the model's log density at the function's values f
    tau2: float                # leaf_sd^2 (the kernel's setting)
    leaf_prior: str            # "normal" or "loggamma"
    leaf_sd: float
    refresh_keys: tuple = ()   # (acceptance key, draw key) of each leaf refresh after the moves (T' = T)

    joint = True               # a visit moves the tree and its leaf values together

    def vgh(self, f):
        return value_grad_curvature(self.L, f)

    @property
    def model(self) -> "KnownVarianceNormalLeaves":
        """The per-slot model of the regrowth's Gaussian rows (their precision carried by the rows)."""
        return KnownVarianceNormalLeaves(1.0, float(self.tau2))

    @staticmethod
    def noise(key, m: int, S: int, dtype):
        return random_bits.normal(key, (m, S), dtype)

    @staticmethod
    def log_normal(x, mean, P):
        """``log N(x; mean, 1 / P)``."""
        return -0.5 * P * (x - mean) ** 2 + 0.5 * jnp.log(P / (2 * jnp.pi))

    def log_prior(self, x):
        """The leaf prior's log density at ``x`` (elementwise)."""
        if self.leaf_prior == "normal":
            tau2 = jnp.asarray(self.tau2, x.dtype)
            return -0.5 * x * x / tau2 - 0.5 * jnp.log(2 * jnp.pi * tau2)
        return loggamma_log_density(x, self.leaf_sd)

    def proposal(self, leaf, is_leaf, a, b, g, g_bar, S: int):
        """Per leaf slot of the tree whose rows' leaves are ``leaf``, the mean and precision of the
        Gaussian proposal of its value: the Newton step from the leaf's mean current value ``g_bar``
        (``a``, ``b``: ``L``'s gradient and curvature ``max(-H 1, 0)`` at the rows, ``g``: the rows' current
        leaf values), at most 2 ``leaf_sd`` (a deterministic function of the same inputs in both
        directions, so the ratio stays exact: a full step from far above the mode of a log-scale
        function overshoots to where ``L`` is -inf).  The sums by one-column scatters (XLA's CPU
        scatter of a row of three is slower than three), each over interleaved copies of the cells
        (:func:`bayestrees.batching.cell_sums`)."""
        tau2 = jnp.asarray(self.tau2, a.dtype)
        s0, s1 = (cell_sums(leaf, x, S) for x in (a + b * g, b))
        if self.leaf_prior == "normal":
            P = s1 + 1.0 / tau2
            step = s0 / P - g_bar
        else:   # the log-gamma prior's expansion at g_bar: gradient c - d e^g_bar, curvature d e^g_bar
            c, d = loggamma_params(float(self.leaf_sd))
            e = d * jnp.exp(jnp.minimum(g_bar, 30.0))
            P = s1 + e
            step = (s0 - s1 * g_bar + c - e) / P
        step_max = 2.0 * jnp.sqrt(tau2)
        mean = g_bar + jnp.clip(step, -step_max, step_max)
        return jnp.where(is_leaf, mean, 0.0), P

    def expansion_point(self, f_rest):
        """:data:`LAPLACE_NEWTON` damped Newton steps, every row on its own, towards the mode of ``L``
        with a leaf value ``N(0, tau2)`` added to ``f_rest`` (the other trees' sum) at each row: a
        function of the other trees alone."""
        tau2 = jnp.asarray(self.tau2, f_rest.dtype)
        step_max = 2.0 * jnp.sqrt(tau2)
        u = f_rest
        for _ in range(LAPLACE_NEWTON):
            _, a, h = self.vgh(u)
            step = (a - (u - f_rest) / tau2) / (jnp.maximum(-h, 0.0) + 1.0 / tau2)
            u = u + jnp.clip(step, -step_max, step_max)
        return u


@functools.lru_cache(maxsize=256)
def loggamma_params(leaf_sd: float) -> tuple[float, float]:
    """``(c, d)`` of the log-gamma leaf prior ``exp(theta) ~ Gamma(c, d)`` of sd ``leaf_sd`` and ``E theta = 0``: ``trigamma(c) = leaf_sd^2`` (by
    Newton's method from ``1 / leaf_sd^2 + 1/2``, in float64) and ``d = exp(digamma(c))``."""
    from scipy.special import polygamma, psi

    s2 = float(leaf_sd) ** 2
    c = 1.0 / s2 + 0.5
    for _ in range(100):
        step = (float(polygamma(1, c)) - s2) / float(polygamma(2, c))
        c_new = c - step
        c = c_new if c_new > 0 else c / 2.0
        if abs(step) <= 1e-13 * c:
            break
    return c, math.exp(float(psi(c)))


def loggamma_log_density(theta, leaf_sd: float):
    """The log-gamma leaf prior's log density at ``theta`` (``exp(theta) ~ Gamma(c, d)``,
    :func:`loggamma_params`): ``c theta - d exp(theta) + c log d - lgamma(c)``."""
    c, d = loggamma_params(float(leaf_sd))
    return c * theta - d * jnp.exp(theta) + (c * math.log(d) - math.lgamma(c))


def gamma_poisson_log_marginal(Y, U, c: float, d: float):
    """Per leaf, ``log`` of the integral over the leaf's ``lambda`` of ``lambda^Y exp(-lambda U)`` under
    ``Gamma(c, d)``: ``c log d - lgamma(c) + lgamma(c + Y) - (c + Y) log(d + U)`` (0 for an empty leaf)."""
    return (c * math.log(d) - math.lgamma(c)) + gammaln(c + Y) - (c + Y) * jnp.log(d + U)


# ---------------------------------------------------------------------------------------------
# the one factory
# ---------------------------------------------------------------------------------------------
#: leaf models by name (:func:`make_leaf_model`)
LEAF_MODEL_KINDS = ("dirichlet", "normal", "common_variance", "objective")


def _plain(v):
    """A Python float (hashable, usable as a static argument), or ``v`` itself when it is a JAX array (traced)."""
    return v if isinstance(v, jax.Array) else float(v)


def make_leaf_model(task: str, y=None, *, kind="auto", n_classes: int | None = None, alpha=1.0,
                    prior: NIGPrior | None = None):
    """The leaf model of a task: the one factory the families build their leaf models with.

    Parameters
    ----------
    task : {"classification", "regression"}
    y : array (n,), optional
        Class codes or responses: gives the default ``n_classes`` (``max(y) + 1``) and the default
        Normal-inverse-gamma prior (:func:`default_nig_prior` of ``y``).
    kind : str or leaf model, default "auto"
        One of :data:`LEAF_MODEL_KINDS`: ``"dirichlet"`` (:class:`DirichletLeaves`),
        ``"normal"`` (:class:`NormalLeaves`), ``"common_variance"``
        (:class:`CommonVarianceNormalLeaves`) or ``"objective"`` (:class:`ObjectiveNormalLeaves`);
        ``"auto"`` is ``"dirichlet"`` for classes and ``"normal"`` for a real response.  A leaf
        model object is checked against ``task`` (and ``n_classes``) and returned as it is.
    n_classes : int, optional
        Classes of a Dirichlet model (default ``max(y) + 1``).
    alpha : float or (n_classes,) floats, default 1.0
        Dirichlet concentration (:func:`bayestrees.data.check_alpha`); kept as one float when
        every class has the same value, else a tuple.  A JAX array (e.g. traced, to
        differentiate) is used as it is, unchecked.
    prior : NIGPrior, optional
        Prior of a Normal model (default :func:`default_nig_prior` of ``y``, or ``NIGPrior()``
        without ``y``).

    Returns
    -------
    DirichletLeaves, NormalLeaves, CommonVarianceNormalLeaves or ObjectiveNormalLeaves
        With plain Python numbers inside (hashable: usable as a static argument), unless
        JAX arrays were given.

    Raises
    ------
    ValueError
        For an unknown task or kind, a kind that does not fit the task, or a bad ``alpha``.
    """
    if task not in ("classification", "regression"):
        raise ValueError(f"task must be 'classification' or 'regression', got {task!r}")
    if not isinstance(kind, str):
        if getattr(kind, "task", None) != task:
            raise ValueError(f"leaf model {type(kind).__name__} is for {getattr(kind, 'task', '?')}, not {task}")
        if task == "classification" and n_classes is not None and kind.n_outputs != n_classes:
            raise ValueError(f"leaf model has {kind.n_outputs} classes, the data {n_classes}")
        return kind
    if kind == "auto":
        kind = "dirichlet" if task == "classification" else "normal"
    if kind not in LEAF_MODEL_KINDS:
        raise ValueError(f"leaf_model must be one of {('auto',) + LEAF_MODEL_KINDS} or a bayestrees.leaves model, "
                         f"got {kind!r}")
    if kind == "dirichlet":
        if task != "classification":
            raise ValueError("leaf_model='dirichlet' is for classification; use 'normal', 'common_variance' or "
                             "'objective' for a real response")
        k = int(np.max(np.asarray(y))) + 1 if n_classes is None else int(n_classes)
        if isinstance(alpha, jax.Array):
            return DirichletLeaves(k, alpha)
        a = check_alpha(alpha, k)
        return DirichletLeaves(k, float(a[0]) if np.all(a == a[0]) else tuple(float(v) for v in a))
    if task == "classification":
        raise ValueError(f"leaf_model={kind!r} is for regression; use 'dirichlet' for class labels")
    if kind == "objective":
        return ObjectiveNormalLeaves()
    if prior is None:
        prior = default_nig_prior(y) if y is not None else NIGPrior()
    prior = NIGPrior(*(_plain(v) for v in prior))
    return (NormalLeaves if kind == "normal" else CommonVarianceNormalLeaves)(prior)
