"""Polya-Gamma variates ``PG(b, c)``, exactly, for integer ``b`` (Polson, Scott & Windle 2013).

``omega ~ PG(b, c)`` is the law that makes a logistic likelihood Gaussian in its log-odds: for
``y`` successes of ``b`` trials with log-odds ``eta``,

    sigma(eta)^y (1 - sigma(eta))^(b - y) = 2^-b exp(kappa eta) E[exp(-omega eta^2 / 2)],
    kappa = y - b / 2,  omega ~ PG(b, 0),

and given ``eta``, ``omega ~ PG(b, eta)``; given ``omega``, ``eta`` has the Gaussian likelihood
``exp(kappa eta - omega eta^2 / 2)``, that of a pseudo-response ``kappa / omega`` of precision
``omega``.  The tree functions' logit path (:mod:`bayestrees.inference.treefn.kernel`) draws it.

The sampler
-----------
``PG(1, c)`` by Devroye's method as Polson, Scott & Windle (2013, section 4 and their appendix) give
it: ``PG(1, c) = J*(1, z) / 4`` with ``z = |c| / 2``; ``J*(1, z)`` is drawn from a two-piece proposal
(an exponential on ``(t, inf)`` and a truncated inverse Gaussian on ``(0, t)``, ``t = 0.64``) and
accepted by the alternating series of its density (every proposal is decided: the terms fall
below float32's resolution within :data:`SERIES_TERMS` terms).  Each element loops until it accepts (``jax.lax.while_loop``;
the proposal is accepted with probability at least 0.9992).  ``PG(b, c)`` for integer ``b`` is the sum
of ``b`` independent ``PG(1, c)`` draws (so its cost grows with ``b``: a Binomial of many trials is
``b`` draws a row); ``PG(0, c) = 0``.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr, ndtri

from . import random_bits

__all__ = ["polya_gamma", "pg_mean"]

#: the truncation point of Devroye's two-piece proposal of ``J*(1, z)``
TRUNC = 0.64
#: terms of the alternating series computed per proposal.  The test decides at the first odd ``n`` with
#: ``y <= S_n`` (accept) or even ``n`` with ``y > S_n`` (reject); from the third term on, every term is
#: below float32's resolution of the first (at most ``3.6e-8`` of it), so two equal
#: partial sums decide by the third.  Six leave a margin; a proposal still undecided would be rejected.
SERIES_TERMS = 6


def _series_term(n, x):
    """The ``n``-th term ``a_n(x)`` of ``J*(1, 0)``'s density as an alternating series."""
    k = (n + 0.5) * math.pi
    above = k * jnp.exp(-0.5 * k * k * x)
    xs = jnp.maximum(x, 1e-30)
    below = jnp.exp(-1.5 * (math.log(0.5 * math.pi) + jnp.log(xs)) + jnp.log(k) - 2.0 * (n + 0.5) ** 2 / xs)
    return jnp.where(x > TRUNC, above, jnp.where(x > 0, below, 0.0))


def _series_accepts(x, u):
    """Devroye's alternating-series test of a proposal ``x`` with the uniform ``u``: whether it is accepted
    (an undecided proposal is not)."""
    n = jnp.arange(SERIES_TERMS, dtype=x.dtype)
    terms = _series_term(n, x[..., None])
    signs = jnp.where(n % 2 == 0, 1.0, -1.0)
    partial = jnp.cumsum(signs * terms, axis=-1)        # S_0, S_1, ...
    y = u * terms[..., 0]
    odd = (n % 2 == 1)
    accept_at = odd & (y[..., None] <= partial)
    reject_at = (~odd) & (n > 0) & (y[..., None] > partial)
    decided_at = accept_at | reject_at
    first = jnp.argmax(decided_at, axis=-1)
    return jnp.take_along_axis(accept_at, first[..., None], axis=-1)[..., 0] & jnp.any(decided_at, axis=-1)


def _exponential_mass(z):
    """The probability of the exponential piece of the proposal of ``J*(1, z)``."""
    t = TRUNC
    fz = 0.125 * math.pi ** 2 + 0.5 * z * z
    b = math.sqrt(1.0 / t) * (t * z - 1.0)
    a = -math.sqrt(1.0 / t) * (t * z + 1.0)
    x0 = jnp.log(fz) + fz * t
    q_over_p = 4.0 / math.pi * (jnp.exp(x0 - z + log_ndtr(b)) + jnp.exp(x0 + z + log_ndtr(a)))
    return 1.0 / (1.0 + q_over_p)


def _truncated_inverse_gaussian(key, z, need):
    """``IG(1 / z, 1)`` truncated to ``(0, t)``, one draw per element of ``z >= 0`` where ``need`` (0 elsewhere:
    the loop runs until the elements that need a draw have one).  For ``1 / z > t``:
    the Levy law truncated to ``(0, t)`` (``1 / N^2`` with ``N`` drawn beyond ``1 / sqrt(t)`` by its
    inverse distribution function; the inverse Gaussian's density is the Levy's times ``exp(-z^2 x /
    2)``), accepted with that probability (at least 0.46); otherwise an inverse Gaussian draw by the
    transformation method of Michael, Schucany & Haas, kept when below ``t``."""
    t = TRUNC
    small = z < 1.0 / t
    mu = 1.0 / jnp.maximum(z, 1e-30)
    tail = 0.5 * math.erfc(1.0 / math.sqrt(2.0 * t))   # P(N < -1 / sqrt(t))

    def cond(c):
        return ~jnp.all(c[1])

    def body(c):
        x, done, i = c
        u = random_bits.open_uniform(random_bits.fold_in(key, i), z.shape + (3,)).astype(z.dtype)
        levy = 1.0 / jnp.square(ndtri(u[..., 0] * tail))
        ok_a = u[..., 1] <= jnp.exp(-0.5 * z * z * levy)
        mu_y = mu * jnp.square(ndtri(u[..., 2]))
        x_b = mu + 0.5 * mu * mu_y - 0.5 * mu * jnp.sqrt(4.0 * mu_y + mu_y * mu_y)
        x_b = jnp.where(u[..., 1] > mu / (mu + x_b), mu * mu / x_b, x_b)   # (u[1]: one use per element)
        ok = jnp.where(small, ok_a, x_b < t)
        return jnp.where(ok & ~done, jnp.where(small, levy, x_b), x), done | ok, i + 1

    x, _, _ = jax.lax.while_loop(cond, body, (jnp.zeros_like(z), ~need, jnp.zeros((), jnp.int32)))
    return x


def _pg_one(key, c):
    """One ``PG(1, c)`` draw per element of ``c``."""
    z = 0.5 * jnp.abs(c)
    fz = 0.125 * math.pi ** 2 + 0.5 * z * z
    p_exp = _exponential_mass(z)

    def cond(s):
        return ~jnp.all(s[1])

    def body(s):
        x, done, i = s
        k1, k2 = random_bits.split(random_bits.fold_in(key, i), 2)
        u = random_bits.open_uniform(k1, z.shape + (3,)).astype(z.dtype)
        x_exp = TRUNC - jnp.log(u[..., 0]) / fz
        exp_piece = u[..., 1] < p_exp
        proposal = jnp.where(exp_piece, x_exp, _truncated_inverse_gaussian(k2, z, ~exp_piece & ~done))
        accepted = _series_accepts(proposal, u[..., 2])
        return jnp.where(accepted & ~done, proposal, x), done | accepted, i + 1

    x, _, _ = jax.lax.while_loop(cond, body, (jnp.zeros_like(z), jnp.zeros(z.shape, bool), jnp.zeros((), jnp.int32)))
    return 0.25 * x


def polya_gamma(key, b, c, dtype=jnp.float32):
    """Draws of ``PG(b, c)``, elementwise over ``b`` and ``c`` broadcast together.

    Parameters
    ----------
    key : a JAX PRNG key
    b : integers >= 0 (array-like; the counts of trials)
    c : real (array-like; the log-odds)
    dtype : float dtype of the draws

    Returns
    -------
    jax.Array of ``dtype`` and the broadcast shape: the sum of ``b`` independent ``PG(1, c)`` draws
    (0 where ``b = 0``).
    """
    c = jnp.asarray(c, dtype)
    b = jnp.asarray(b)
    shape = jnp.broadcast_shapes(b.shape, c.shape)
    c = jnp.broadcast_to(c, shape)
    b = jnp.broadcast_to(b, shape).astype(jnp.int32)

    def body(i, total):
        draw = _pg_one(random_bits.fold_in(key, i), c)
        return total + jnp.where(i < b, draw, 0.0)

    return jax.lax.fori_loop(0, jnp.max(b, initial=0), body, jnp.zeros(shape, dtype))


def pg_mean(b, c):
    """``E[PG(b, c)] = b tanh(c / 2) / (2 c)`` (``b / 4`` at ``c = 0``)."""
    c = jnp.asarray(c)
    small = jnp.abs(c) < 1e-4
    safe = jnp.where(small, 1.0, c)
    return b * jnp.where(small, 0.25 - c * c / 48.0, jnp.tanh(0.5 * safe) / (2.0 * safe))
