"""The update schemes of Bayesian CART: a choice of kernel, not a branch inside one step.

Each scheme is a one-chain step (a frozen dataclass over the sampler's config, so compiled blocks
are reused across fits with equal settings):

========  ===============================================================  ===========================
scheme    one step                                                         step
========  ===============================================================  ===========================
moves     one grow, prune, change or swap move drawn with ``move_probs``   :class:`~bayestrees.inference.moves.MoveStep`
sweep     a systematic Metropolis-Hastings sweep over the nodes            :class:`~bayestrees.inference.moves.SweepStep`
pgibbs    a particle Gibbs regrowth of the whole tree                      :class:`~bayestrees.inference.pgibbs.PGibbsStep`
mixed     ``local_moves`` local moves, then a particle Gibbs regrowth      :class:`~bayestrees.inference.pgibbs.MixedStep`
========  ===============================================================  ===========================

:func:`kernel_for` builds the kernel of a config, tempered over ``cfg.temperatures`` when it has
several (:func:`bayestrees.inference.tempering.tempered` wraps any of them), except "mixed" on a
ladder: its local moves run tempered and the regrowth is the cold replica's alone
(:class:`~bayestrees.inference.pgibbs.LadderMixedStep`).  A new scheme is a new
step class and one line in :data:`SCHEME_STEPS`.
"""
from __future__ import annotations

import jax.numpy as jnp

from ..loop import Kernel
from ..moves import MCMCConfig, MoveStep, RootInit, SweepStep, make_kernel
from ..proposals import check_move_probs
from ..pgibbs import LadderMixedStep, MixedStep, PGibbsStep
from ..tempering import TemperedInit

__all__ = ["SCHEME_STEPS", "kernel_for"]

#: scheme name -> one-chain step class (constructed with the sampler's config)
SCHEME_STEPS = {"moves": MoveStep, "sweep": SweepStep, "pgibbs": PGibbsStep, "mixed": MixedStep}


def kernel_for(cfg: MCMCConfig, dtype=jnp.float32) -> Kernel:
    """The Bayesian CART kernel of ``cfg``, whatever its scheme (tempered when ``cfg`` asks).

    Parameters
    ----------
    cfg : MCMCConfig
        The sampler's settings; ``cfg.scheme`` picks the step from :data:`SCHEME_STEPS`.
    dtype : float dtype of the state.

    Returns
    -------
    Kernel
    """
    if cfg.scheme not in SCHEME_STEPS:
        raise ValueError(f"scheme must be one of {tuple(SCHEME_STEPS)}, got {cfg.scheme!r}")
    if cfg.scheme == "mixed" and len(cfg.temperatures) > 1:
        check_move_probs(cfg.move_probs)
        return Kernel(TemperedInit(RootInit(cfg, jnp.dtype(dtype)), cfg.temperatures, jnp.dtype(dtype)),
                      LadderMixedStep(cfg))
    return make_kernel(cfg, SCHEME_STEPS[cfg.scheme](cfg), dtype)
