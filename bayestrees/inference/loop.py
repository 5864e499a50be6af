"""One chain loop for every sampler written as an ``init``/``step`` pair.

A sampler (blackjax / bartz style) is a :class:`Kernel`: two pure functions
for ONE chain,

* ``init(key, *args) -> State``
* ``step(key, state, *args) -> (State, Info)``

with ``State`` and ``Info`` NamedTuples (pytrees) of fixed-shape arrays; the
key is never stored in the state.  ``args`` (the data) are passed to every
call as traced arguments, shared by the chains, so a kernel whose functions
are hashable by value (module-level functions, or frozen dataclasses with a
``__call__``) compiles once per data shape and setting, not once per fit.

:func:`run_chains` vmaps the kernel over chains and runs ``tune`` steps, then
``draws`` kept states every ``thin`` steps, in blocks of one compiled
function (tuning, thinning and block lengths are traced values: one
compilation per run shape).  ``collect`` picks what is stored
per draw (e.g. the tree and a draw of the leaf parameters, not per-row
caches); it gets its own key (``collect(key, state, *args)``), so leaf
parameters can be drawn there.  The keys of step ``t`` are ``fold_in(key, t)`` split over chains, so
the draws do not depend on the block size or on the progress bar.  Where JAX sees several
devices and ``chains`` is a multiple of their number, the chain axis is split across them
(:mod:`bayestrees.sharding`); the draws are the same.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ..progress import Progress
from ..sharding import shard_batch

__all__ = ["Kernel", "ChainResult", "run_chains"]


class Kernel(NamedTuple):
    """A sampler for one chain: ``init(key, *args) -> State`` and ``step(key, state, *args) -> (State, Info)``."""

    init: Callable[..., Any]
    step: Callable[..., tuple[Any, Any]]


class ChainResult(NamedTuple):
    """Output of :func:`run_chains`.

    samples : ``collect(state)`` with leading dims ``(chains, draws)``
    info : the Info of the kept steps, leading dims ``(chains, draws)``
    last_state : the State after the last step, leading dim ``(chains,)``
    """

    samples: Any
    info: Any
    last_state: Any


def _identity(key, state, *args):
    return state


def _step_keys(key, t, chains):
    return jax.random.split(jax.random.fold_in(key, t), chains)


def _batched(fn, chains: int, n_args: int):
    """``fn(key, state, *args)`` over a leading chain axis of ``key`` and ``state``.

    Many chains are vmapped.  One chain is run unbatched (the axis taken off and put back), so a
    kernel's ``lax.cond``/``lax.switch`` stays a branch that runs one side rather than becoming a
    select that runs every side (what ``vmap`` does with a batched predicate); the values are the same.
    """
    if chains > 1:
        return jax.vmap(fn, in_axes=(0, 0) + (None,) * n_args)

    def one(keys, state, *args):
        out = fn(keys[0], jax.tree_util.tree_map(lambda a: a[0], state), *args)
        return jax.tree_util.tree_map(lambda a: jnp.expand_dims(a, 0), out)

    return one


@partial(jax.jit, static_argnames=("step", "collect", "size", "chains"), donate_argnums=(1,))
def _block(key, state, args, t0, n_tune, n_keep, thin, *, step, collect, size: int, chains: int):
    """``n_tune`` steps from step index ``t0``, then ``n_keep`` (<= ``size``) kept states ``thin`` steps apart.

    Returns the state, the collected outputs and the Info of the kept steps, in
    buffers of ``size`` (entries past ``n_keep`` are zeros).  Tuning, block and
    thinning lengths are traced: one compilation serves the whole run.
    """
    vstep, vcollect = _batched(step, chains, len(args)), _batched(collect, chains, len(args))
    k_collect = jax.random.fold_in(key, 2**31 - 1)  # step indices stay below this

    def one(t, carry):
        st, _ = carry
        return shard_batch(vstep(shard_batch(_step_keys(key, t, chains), chains), st, *args), chains)

    info_shape = jax.eval_shape(lambda st: vstep(_step_keys(key, t0, chains), st, *args)[1], state)
    zero_info = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), info_shape)
    t1 = t0 + n_tune
    out_shape = jax.eval_shape(lambda st: vcollect(_step_keys(k_collect, t1, chains), st, *args), state)
    zero_out = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), out_shape)

    def kept(st, i):
        # slot i runs steps [start, end): slot 0 also runs the tuning steps; slots past n_keep run none.
        # The step and the collection each appear once in the program (compile time).
        keep = i < n_keep
        start = jnp.where(i == 0, t0, t1 + i * thin)
        end = jnp.where(keep, t1 + (i + 1) * thin, jnp.where(i == 0, t1, start))
        st, info = jax.lax.fori_loop(start, end, one, (st, zero_info))
        out = jax.lax.cond(keep, lambda s: vcollect(_step_keys(k_collect, t1 + (i + 1) * thin, chains), s, *args),
                           lambda s: zero_out, st)
        info = jax.tree_util.tree_map(lambda a, z: jnp.where(keep, a, z), info, zero_info)
        return st, (out, info)

    state, (bs, bi) = jax.lax.scan(kept, state, jnp.arange(size))
    # (size, chains, ...) -> (chains, size, ...)
    swap = partial(jax.tree_util.tree_map, lambda a: jnp.swapaxes(a, 0, 1))
    return state, swap(bs), swap(bi)


def _concat(parts):
    if len(parts) == 1:
        return parts[0]
    return jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=1), *parts)


@partial(jax.jit, static_argnames=("init", "chains"))
def _init(key, args, *, init, chains: int):
    keys = shard_batch(jax.random.split(key, chains), chains)
    return shard_batch(jax.vmap(init, in_axes=(0,) + (None,) * len(args))(keys, *args), chains)


def run_chains(key, kernel: Kernel, *, args: tuple = (), chains: int = 4, draws: int = 1000, tune: int = 1000,
               thin: int = 1, collect: Callable | None = None, progressbar: bool = False, blocks: int | None = None,
               desc: str = "sampling") -> ChainResult:
    """Run ``chains`` chains of ``kernel`` (vmapped) for ``tune`` discarded steps and ``draws`` kept ones.

    Parameters
    ----------
    key : PRNG key
    kernel : Kernel (``init``/``step`` for one chain)
    args : tuple of arrays (pytrees) passed to ``init``, ``step`` and ``collect``, shared by the chains
    chains : int >= 1
    draws : int >= 1  kept draws per chain
    tune : int >= 0  steps discarded first (burn-in)
    thin : int >= 1  keep every ``thin``-th step after tuning
    collect : ``(key, state, *args) -> pytree``, optional  what to store per draw (default: the whole state)
    progressbar : bool  print a progress bar on stderr (the run is split in blocks)
    blocks : int, optional  number of compiled calls per phase (default 1, or 20 with a progress bar)

    Returns
    -------
    ChainResult with leading dims ``(chains, draws)``
    """
    for name, v, lo in (("chains", chains, 1), ("draws", draws, 1), ("tune", tune, 0), ("thin", thin, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    collect = collect if collect is not None else _identity
    args = tuple(args)
    k_init, k_run = jax.random.split(key)
    state = _init(k_init, args, init=kernel.init, chains=chains)
    nb = blocks if blocks is not None else (20 if progressbar else 1)
    prog = Progress(tune + draws * thin, desc, progressbar)
    size = -(-draws // max(1, min(nb, draws)))
    run = partial(_block, step=kernel.step, collect=collect, size=size, chains=chains)
    t = 0
    i32 = jnp.int32
    if tune:
        chunk = -(-tune // max(1, min(nb, tune)))
        while t < tune:
            m = min(chunk, tune - t)
            state, _, _ = run(k_run, state, args, i32(t), i32(m), i32(0), i32(thin))
            t += m
            prog.update(m)
    done, samples, infos = 0, [], []
    while done < draws:
        m = min(size, draws - done)
        state, s, i = run(k_run, state, args, i32(t), i32(0), i32(m), i32(thin))
        cut = partial(jax.tree_util.tree_map, lambda a: a[:, :m])
        samples.append(cut(s))
        infos.append(cut(i))
        t += m * thin
        done += m
        prog.update(m * thin)
    return ChainResult(_concat(samples), _concat(infos), state)
