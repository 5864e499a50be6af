"""Conjugate leaf models: log marginal likelihoods and posterior predictives.

All functions are pure ``jax.numpy`` code, vectorised over leading axes, and
work in log space with ``gammaln`` so that leaves holding millions of rows
never overflow.  Sufficient statistics may be weighted (fractional counts),
which is how power likelihoods (``counts * beta``) are expressed.

Classification: Dirichlet-multinomial
    y_i | p ~ Categorical(p),  p ~ Dirichlet(alpha).
    log p(y_leaf) = log B(n + alpha) - log B(alpha), with B the multivariate
    Beta function and n the class counts of the leaf (the probability of the
    label *sequence*, no multinomial coefficient).  Predictive:
    (n_c + alpha_c) / sum(n + alpha).

Regression: Normal-inverse-gamma
    y_i | mu, s2 ~ N(mu, s2),  mu | s2 ~ N(m0, s2 / kappa0),  s2 ~ IG(a0, b0).
    With n, mean ybar and centred sum of squares S:
    kappa_n = kappa0 + n,  m_n = (kappa0 m0 + n ybar) / kappa_n,
    a_n = a0 + n / 2,  b_n = b0 + S / 2 + kappa0 n (ybar - m0)^2 / (2 kappa_n),
    log p(y_leaf) = gammaln(a_n) - gammaln(a0) + a0 log b0 - a_n log b_n
                    + (log kappa0 - log kappa_n) / 2 - n log(2 pi) / 2.
    Predictive: Student-t(2 a_n, m_n, b_n (kappa_n + 1) / (a_n kappa_n)).
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax.scipy.special import gammaln

__all__ = [
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
