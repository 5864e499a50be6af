"""The Metropolis-Hastings acceptance test that every tree kernel, the tempering exchange and the
samplers' other Metropolis steps share."""
from __future__ import annotations

import jax.numpy as jnp

__all__ = ["accept"]


def accept(log_u, log_ratio, ok=True):
    """Whether a proposal is accepted: ``log u < log r`` for a uniform ``u`` (``log_u``) and the log
    acceptance ratio ``log r`` (``log_ratio``, before ``min(0, .)``).  Where ``ok`` is false (an
    impossible move, a proposed tree without prior mass, a ratio that is not finite) the proposal
    is rejected whatever the ratio.  Broadcasts; under ``jit`` and ``vmap`` a mask, not a branch."""
    if ok is True:
        return log_u < log_ratio
    return log_u < jnp.where(ok, log_ratio, -jnp.inf)
