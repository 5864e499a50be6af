"""One chain loop for every sampler written as an ``init``/``step`` pair.

A sampler (blackjax / bartz style) is a :class:`Kernel`: two pure functions
for ONE chain,

* ``init(key) -> State``
* ``step(key, state) -> (State, Info)``

with ``State`` and ``Info`` NamedTuples (pytrees) of fixed-shape arrays; the
key is never stored in the state.  :func:`run_chains` vmaps them over chains
and runs ``tune + draws * thin`` steps in ``lax.scan`` blocks, keeping every
``thin``-th state after tuning.  ``collect(state)`` picks what is stored per
draw (e.g. the tree and sigma, not per-row caches).  The keys of step ``t``
are ``fold_in(key, t)`` split over chains, so the draws do not depend on the
block size or on the progress bar.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ..progress import Progress

__all__ = ["Kernel", "ChainResult", "run_chains"]


class Kernel(NamedTuple):
    """A sampler for one chain: ``init(key) -> State`` and ``step(key, state) -> (State, Info)``."""

    init: Callable[[jax.Array], Any]
    step: Callable[[jax.Array, Any], tuple[Any, Any]]


class ChainResult(NamedTuple):
    """Output of :func:`run_chains`.

    samples : ``collect(state)`` with leading dims ``(chains, draws)``
    info : the Info of the kept steps, leading dims ``(chains, draws)``
    last_state : the State after the last step, leading dim ``(chains,)``
    """

    samples: Any
    info: Any
    last_state: Any


def _identity(state):
    return state


def _step_keys(key, t, chains):
    return jax.random.split(jax.random.fold_in(key, t), chains)


@partial(jax.jit, static_argnames=("step", "collect", "n_keep", "thin", "chains"), donate_argnums=(1,))
def _block(key, state, t0, *, step, collect, n_keep: int, thin: int, chains: int):
    """``n_keep * thin`` steps from step index ``t0``; returns the state and every ``thin``-th collected output."""
    vstep = jax.vmap(step)

    def one(carry, t):
        st = carry
        st, info = vstep(_step_keys(key, t, chains), st)
        return st, info

    def kept(st, i):
        ts = t0 + i * thin + jnp.arange(thin)
        st, infos = jax.lax.scan(one, st, ts)
        info = jax.tree_util.tree_map(lambda a: a[-1], infos)
        return st, (jax.vmap(collect)(st), info)

    state, (samples, info) = jax.lax.scan(kept, state, jnp.arange(n_keep))
    # (n_keep, chains, ...) -> (chains, n_keep, ...)
    swap = partial(jax.tree_util.tree_map, lambda a: jnp.swapaxes(a, 0, 1))
    return state, swap(samples), swap(info)


@partial(jax.jit, static_argnames=("step", "n_steps", "chains"), donate_argnums=(1,))
def _tune_block(key, state, t0, *, step, n_steps: int, chains: int):
    vstep = jax.vmap(step)

    def one(st, t):
        st, _ = vstep(_step_keys(key, t, chains), st)
        return st, None

    state, _ = jax.lax.scan(one, state, t0 + jnp.arange(n_steps))
    return state


def _concat(parts):
    if len(parts) == 1:
        return parts[0]
    return jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=1), *parts)


def run_chains(key, kernel: Kernel, *, chains: int = 4, draws: int = 1000, tune: int = 1000, thin: int = 1,
               collect: Callable | None = None, progressbar: bool = False, blocks: int | None = None,
               desc: str = "sampling") -> ChainResult:
    """Run ``chains`` chains of ``kernel`` (vmapped) for ``tune`` discarded steps and ``draws`` kept ones.

    Parameters
    ----------
    key : PRNG key
    kernel : Kernel (``init``/``step`` for one chain)
    chains : int >= 1
    draws : int >= 1  kept draws per chain
    tune : int >= 0  steps discarded first (burn-in)
    thin : int >= 1  keep every ``thin``-th step after tuning
    collect : ``state -> pytree``, optional  what to store per draw (default: the whole state)
    progressbar : bool  print a progress bar on stderr (the run is split in blocks)
    blocks : int, optional  number of compiled blocks per phase (default 1, or 20 with a progress bar)

    Returns
    -------
    ChainResult with leading dims ``(chains, draws)``
    """
    for name, v, lo in (("chains", chains, 1), ("draws", draws, 1), ("tune", tune, 0), ("thin", thin, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    collect = collect if collect is not None else _identity
    k_init, k_run = jax.random.split(key)
    state = jax.vmap(kernel.init)(jax.random.split(k_init, chains))
    nb = blocks if blocks is not None else (20 if progressbar else 1)
    prog = Progress(tune + draws * thin, desc, progressbar)
    t = 0
    if tune:
        size = -(-tune // max(1, min(nb, tune)))
        while t < tune:
            m = min(size, tune - t)
            state = _tune_block(k_run, state, jnp.int32(t), step=kernel.step, n_steps=m, chains=chains)
            t += m
            prog.update(m)
    size = -(-draws // max(1, min(nb, draws)))
    done, samples, infos = 0, [], []
    while done < draws:
        m = min(size, draws - done)
        state, s, i = _block(k_run, state, jnp.int32(t), step=kernel.step, collect=collect, n_keep=m, thin=thin,
                             chains=chains)
        samples.append(s)
        infos.append(i)
        t += m * thin
        done += m
        prog.update(m * thin)
    return ChainResult(_concat(samples), _concat(infos), state)
