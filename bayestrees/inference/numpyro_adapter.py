"""Run any ``init``/``step`` kernel of this library under ``numpyro.infer.MCMC``.

>>> from numpyro.infer import MCMC
>>> kernel = NumPyroKernel(bt.inference.moves.build_kernel(cfg), args=(data,), summary=n_leaves_and_lp)
>>> mcmc = MCMC(kernel, num_warmup=500, num_samples=500, num_chains=4, chain_method="vectorized")
>>> mcmc.run(jax.random.key(0))
>>> mcmc.get_samples(group_by_chain=True)      # the summaries, (chains, draws, ...)

NumPyro gives its progress bar and chain methods ("vectorized" vmaps the
kernel over chains, as :func:`bayestrees.inference.loop.run_chains` does).
The library's own driver remains the way the families sample; this adapter
lets NumPyro users drive a tree sampler with the tools they know.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
from numpyro.infer.mcmc import MCMCKernel

from .loop import Kernel

__all__ = ["NumPyroKernel", "AdapterState"]


class AdapterState(NamedTuple):
    """NumPyro's state: ``z`` (what ``get_samples`` collects), the kernel's State, the key."""

    z: Any
    inner: Any
    rng_key: jax.Array


def _batched(key) -> bool:
    return key.ndim > (0 if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else 1)


class NumPyroKernel(MCMCKernel):
    """A ``numpyro.infer.mcmc.MCMCKernel`` over a :class:`~bayestrees.inference.loop.Kernel`.

    Parameters
    ----------
    kernel : Kernel (``init(key, *args)``, ``step(key, state, *args)``)
    args : the kernel's data arguments
    summary : ``state -> pytree`` collected as the sample field ``z`` (default: the whole state)
    """

    sample_field = "z"

    def __init__(self, kernel: Kernel, args: tuple = (), summary: Callable | None = None):
        self.kernel = kernel
        self.args = tuple(args)
        self.summary = summary if summary is not None else (lambda s: s)

    def _init_one(self, key):
        k_init, k_next = jax.random.split(key)
        st = self.kernel.init(k_init, *self.args)
        return AdapterState(self.summary(st), st, k_next)

    def _sample_one(self, state: AdapterState):
        k_step, k_next = jax.random.split(state.rng_key)
        st, _ = self.kernel.step(k_step, state.inner, *self.args)
        return AdapterState(self.summary(st), st, k_next)

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        return jax.vmap(self._init_one)(rng_key) if _batched(rng_key) else self._init_one(rng_key)

    def sample(self, state, model_args, model_kwargs):
        return jax.vmap(self._sample_one)(state) if _batched(state.rng_key) else self._sample_one(state)

    def postprocess_fn(self, model_args, model_kwargs):
        return lambda z: z
