"""Turning weighted draws into equally weighted ones (for ``az.loo`` and summaries)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["systematic_resample"]


def systematic_resample(key, log_weights, n: int) -> jax.Array:
    """Indices of ``n`` equally weighted draws from draws with (unnormalised) ``log_weights``.

    Systematic resampling: one uniform ``u ~ U(0, 1/n)``, then the points
    ``u + k/n`` are located in the cumulative normalised weights.  Draw ``j`` is
    chosen ``floor(n w_j)`` or ``ceil(n w_j)`` times, the lowest-variance unbiased
    scheme.

    Parameters
    ----------
    key : PRNG key
    log_weights : float (K,)  -inf for draws that must never be chosen
    n : int  number of draws to return

    Returns
    -------
    int32 (n,), sorted
    """
    lw = jnp.asarray(log_weights)
    w = jnp.exp(lw - jnp.max(lw))
    c = jnp.cumsum(w / jnp.sum(w))
    u = (jax.random.uniform(key, (), c.dtype) + jnp.arange(n, dtype=c.dtype)) / n
    return jnp.clip(jnp.searchsorted(c, u, side="right"), 0, lw.shape[0] - 1).astype(jnp.int32)
