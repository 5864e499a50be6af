"""The chains of a model with tree functions, run by the library's chain loop.

A model's sampler is NumPyro's ``Gibbs`` kernel over blocks (the tree moves of
:mod:`bayestrees.inference.treefn.kernel`, NUTS for the other latent sites). :class:`GibbsChain`
makes it one chain's ``init``/``step`` pair, so that :func:`bayestrees.inference.loop.run_chains`
runs it as it runs every other MCMC family: the chains vectorized, in threads or one after
another, in blocks with a progress bar, the step traced once and replayed in the compiled loop,
and what is kept per draw chosen by ``collect`` (the sites' constrained values and the
deterministic sites; of a tree site its trees alone, not the per-row caches of its state).

NumPyro's kernel carries its own key in its state (``state.rng_key``), set when the chain starts
(:meth:`GibbsChain.keys`: as NumPyro's ``MCMC`` sets it); the loop's step keys are not used.  The
draws therefore do not depend on how the chains are run or on the block size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer.gibbs import Gibbs

from .site import TreeValues

__all__ = ["GibbsChain", "StepInfo"]


class StepInfo(NamedTuple):
    """What a step reports: ``accepted``, the tree moves accepted per tree site; ``diverging``,
    NUTS's divergence flag (``False`` where no site moves by NUTS)."""

    accepted: Any
    diverging: Any


@dataclass(frozen=True, eq=False)
class GibbsChain:
    """One chain of ``gibbs`` for :func:`~bayestrees.inference.loop.run_chains`.

    ``tune`` is the number of warm-up steps, during which NUTS adapts (NumPyro's kernels count
    their steps in their state).  ``model_args``/``model_kwargs``: the model's arguments when they
    are constants of the compiled programs; ``None`` when they are the loop's ``args``
    (``(model_args, model_kwargs)``: ``sample_model(..., jit_data=True)``).  Compared and hashed
    by identity: its programs are those of the fits that run this chain (a fit, and the later fits
    of the same program: :mod:`~bayestrees.inference.treefn.programs`).
    """

    gibbs: Gibbs
    tune: int
    model_args: tuple | None = None
    model_kwargs: dict | None = None

    def _model(self, data):
        if self.model_args is not None:
            return self.model_args, self.model_kwargs
        args, kwargs = data
        return tuple(args), dict(kwargs)

    @staticmethod
    def keys(key, chains: int):
        """The chains' starting keys, as NumPyro's ``MCMC`` draws them from ``key`` (the key itself
        for one chain), so that a fit's draws are those of the NumPyro driver this loop replaced."""
        return jax.random.split(key, chains) if chains > 1 else key[None]

    def init(self, key, *data):
        args, kwargs = self._model(data)
        return self.gibbs.init(key, self.tune, None, args, kwargs)

    def step(self, key, state, *data):
        args, kwargs = self._model(data)
        state = self.gibbs.sample(state, args, kwargs)
        blocks = state.block_states   # the tree moves', then NUTS's where other sites are latent
        diverging = blocks[1].diverging if len(blocks) > 1 else jnp.zeros((), bool)
        return state, StepInfo(accepted=blocks[0].accepted, diverging=diverging)

    def collect(self, key, state, *data):
        args, kwargs = self._model(data)
        values = self.gibbs.postprocess_fn(args, kwargs)(state.z)
        return {k: v.trees if isinstance(v, TreeValues) else v for k, v in values.items()}
