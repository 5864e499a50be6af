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

Two ways to run many chains (``chain_method``):

* ``"vectorized"``: one compiled program steps every chain at once (``vmap``).  On a GPU this
  is what makes many chains nearly free.  On a CPU a batch of chains costs close to the sum of
  its chains, and more: under ``vmap`` every branch of a ``lax.switch`` runs for every chain,
  and a loop runs as many times as its longest chain needs (the samplers' row gathers and
  scatters go through :mod:`bayestrees.batching`, which keeps them one-dimensional).
* ``"parallel"``: every chain runs the unbatched program, in threads (one per CPU core, or one
  per device where JAX sees several); XLA releases the interpreter lock, so the chains run on
  all cores at once.  Chain ``c`` draws the keys it would draw in the vectorized run, so the
  draws are those of ``"vectorized"`` (up to floating-point rounding of the batched program).
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from .. import random_bits
from ..progress import Progress
from ..sharding import shard_batch

__all__ = ["Kernel", "ChainResult", "run_chains", "CHAIN_METHODS", "check_chain_method", "resolve_chain_method"]

#: the ways :func:`run_chains` runs several chains
CHAIN_METHODS = ("vectorized", "parallel")


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


def _step_keys(key, t, chains, width=None, first=0):
    """Keys of step ``t`` for chains ``first .. first + width - 1`` of ``chains`` (default: all).

    They pass an optimization barrier: the hash that makes them (:mod:`bayestrees.random_bits`, written
    out as elementwise operations) is computed once, not fused by XLA into every consumer of every key
    the kernel derives from them, which made BART's compiled block several times slower to compile
    (``docs/lab-notes/performance.md``, "Step keys behind a barrier").  The keys are the same."""
    keys = random_bits.split(random_bits.fold_in(key, t), chains)
    if width is not None and width != chains:
        keys = jax.lax.dynamic_slice_in_dim(keys, first, width)
    return jax.lax.optimization_barrier(keys)


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


def _trace_once(fn, *example):
    """``fn`` traced once at the abstract values of ``example``: a function that replays that trace
    (the same operations, bound again where it is called), and the shape of ``fn``'s output."""
    closed, shape = jax.make_jaxpr(fn, return_shape=True)(*example)
    out_tree = jax.tree_util.tree_structure(shape)

    def replay(*a):
        out = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *jax.tree_util.tree_leaves(a))
        return jax.tree_util.tree_unflatten(out_tree, out)

    return replay, shape


@partial(jax.jit, static_argnames=("step", "collect", "size", "chains", "width", "split"), donate_argnums=(1,))
def _block(key, state, args, t0, n_tune, n_keep, thin, first=0, *, step, collect, size: int, chains: int,
           width: int | None = None, split: bool = True):
    """``n_tune`` steps from step index ``t0``, then ``n_keep`` (<= ``size``) kept states ``thin`` steps apart.

    ``state`` holds chains ``first .. first + width - 1`` of a run of ``chains`` (default: all of
    them); each uses its own keys of that run.  Returns the state, the collected outputs and the
    Info of the kept steps, in buffers of ``size`` (entries past ``n_keep`` are zeros).  Tuning,
    block and thinning lengths and ``first`` are traced: one compilation serves the whole run.
    """
    width = chains if width is None else width
    place = shard_batch if split else _whole
    vstep, vcollect = _batched(step, width, len(args)), _batched(collect, width, len(args))
    k_collect = jax.random.fold_in(key, 2**31 - 1)  # step indices stay below this
    keys = partial(_step_keys, chains=chains, width=width, first=first)

    # the step and the collection are traced once each: their output shapes come from that trace, and
    # the program replays it (tracing them again for the shapes alone, with jax.eval_shape, was about a
    # second of every first fit of an MCMC family; the program is the same)
    vstep, (_, info_shape) = _trace_once(lambda k, st: vstep(k, st, *args), place(keys(key, t0), width), state)

    def one(t, carry):
        st, _ = carry
        return place(vstep(place(keys(key, t), width), st), width)

    zero_info = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), info_shape)
    t1 = t0 + n_tune
    vcollect, out_shape = _trace_once(lambda k, st: vcollect(k, st, *args), keys(k_collect, t1), state)
    zero_out = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), out_shape)

    def kept(st, i):
        # slot i runs steps [start, end): slot 0 also runs the tuning steps; slots past n_keep run none.
        # The step and the collection each appear once in the program (compile time).
        keep = i < n_keep
        start = jnp.where(i == 0, t0, t1 + i * thin)
        end = jnp.where(keep, t1 + (i + 1) * thin, jnp.where(i == 0, t1, start))
        st, info = jax.lax.fori_loop(start, end, one, (st, zero_info))
        out = jax.lax.cond(keep, lambda s: vcollect(keys(k_collect, t1 + (i + 1) * thin), s),
                           lambda s: zero_out, st)
        info = jax.tree_util.tree_map(lambda a, z: jnp.where(keep, a, z), info, zero_info)
        return st, (out, info)

    state, (bs, bi) = jax.lax.scan(kept, state, jnp.arange(size))
    # (size, chains, ...) -> (chains, size, ...)
    swap = partial(jax.tree_util.tree_map, lambda a: jnp.swapaxes(a, 0, 1))
    return state, swap(bs), swap(bi)


def _host(a):
    """A kept output as a NumPy array (cutting and joining it on the host compiles nothing: as jax
    operations, every new shape was a small compiled program, about 20 of them a fit); key arrays stay
    jax arrays."""
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        return a
    return np.asarray(a)


def _join(a, axis):
    return np.concatenate(a, axis=axis) if all(isinstance(x, np.ndarray) for x in a) else jnp.concatenate(a, axis=axis)


def _concat(parts):
    if len(parts) == 1:
        return parts[0]
    return jax.tree_util.tree_map(lambda *a: _join(a, 1), *parts)


def _whole(tree, size=None):
    """The chains on the devices the kernel puts them on (a kernel that splits each chain's rows)."""
    return tree


def _start(keys, args, init, chains: int, split: bool):
    """Every chain's ``init`` from its key, the chains placed on the devices."""
    place = shard_batch if split else _whole
    return place(jax.vmap(init, in_axes=(0,) + (None,) * len(args))(place(keys, chains), *args), chains)


@partial(jax.jit, static_argnames=("init", "chains", "split"))
def _init(key, args, *, init, chains: int, split: bool = True):
    return _start(jax.random.split(key, chains), args, init, chains, split)


@partial(jax.jit, static_argnames=("init", "chains", "split"))
def _init_from(keys, args, *, init, chains: int, split: bool = True):
    """:func:`_init` with the chains' keys given."""
    return _start(keys, args, init, chains, split)


def _own(compiled, donate=(), made: dict | None = None):
    """``compiled`` (a compiled function of this module; ``donate`` its donated arguments) made again
    for one run: called with the same arguments, it compiles its programs in functions of its own
    (one per set of static arguments, shared by the run's threads), so that they and the static
    arguments they hold (a kernel and its data) are freed with it, not kept in the module's caches.
    ``made``: the dict that holds those functions (by default the call's own)."""
    made = {} if made is None else made
    lock = threading.Lock()

    def call(*args, **static):
        key = tuple(sorted(static.items(), key=lambda kv: kv[0]))
        with lock:
            if key not in made:
                made[key] = jax.jit(partial(compiled.__wrapped__, **static), donate_argnums=donate)
        return made[key](*args)

    return call


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_chain_method(chain_method) -> str:
    """``chain_method`` if it is ``"auto"`` or one of :data:`CHAIN_METHODS`; a ``ValueError`` otherwise."""
    if chain_method != "auto" and chain_method not in CHAIN_METHODS:
        raise ValueError(f"chain_method must be 'auto' or one of {CHAIN_METHODS}, got {chain_method!r}")
    return chain_method


def resolve_chain_method(chain_method: str, chains: int) -> str:
    """``"auto"``: ``"parallel"`` for several chains on a CPU with several cores, else ``"vectorized"``."""
    if check_chain_method(chain_method) == "auto":
        cpu = jax.default_backend() == "cpu"
        return "parallel" if chains > 1 and cpu and (_cores() > 1 or jax.device_count() > 1) else "vectorized"
    return chain_method


def _phases(tune: int, draws: int, thin: int, nb: int):
    """The compiled calls of a run: ``(t, n_tune, n_keep)`` per call, and the draw buffer size."""
    size = -(-draws // max(1, min(nb, draws)))
    calls, t = [], 0
    if tune:
        chunk = -(-tune // max(1, min(nb, tune)))
        while t < tune:
            m = min(chunk, tune - t)
            calls.append((t, m, 0))
            t += m
    done = 0
    while done < draws:
        m = min(size, draws - done)
        calls.append((t, 0, m))
        t += m * thin
        done += m
    return calls, size


def _run_calls(run, k_run, state, args, calls, thin, prog, first=None):
    """Run the compiled calls of one phase list on ``state``; returns the kept draws and the state."""
    i32 = jnp.int32
    extra = () if first is None else (i32(first),)
    kept = []
    for t, n_tune, n_keep in calls:
        state, s, i = run(k_run, state, args, i32(t), i32(n_tune), i32(n_keep), i32(thin), *extra)
        if n_keep:
            kept.append((s, i, n_keep))
        prog.update(n_tune + n_keep * thin)
    # to the host once every block is dispatched (a copy per block would make the device wait)
    cut = lambda tree, n: jax.tree_util.tree_map(lambda a: _host(a)[:, :n], tree)  # noqa: E731
    return _concat([cut(s, n) for s, _, n in kept]), _concat([cut(i, n) for _, i, n in kept]), state


def _run_parallel(run, k_run, state, args, calls, thin, chains, prog, workers=None):
    """Each chain on its own (unbatched program), in threads; outputs stacked on the chain axis.

    Chain ``c`` runs on device ``c mod k`` of the ``k`` devices JAX sees; there are as many threads
    as CPU cores (on a CPU) or devices, at most one per chain, or ``workers``."""
    devices = jax.devices()
    if workers is None:
        workers = min(chains, max(len(devices), _cores() if jax.default_backend() == "cpu" else 1))
    if len(devices) > 1:  # the whole state lives on one device before it is cut into chains
        state = jax.device_put(state, devices[0])
    placed = {dev: jax.device_put(args, dev) for dev in devices[:min(chains, len(devices))]}

    def chain(c):
        dev = devices[c % len(devices)]
        st = jax.device_put(jax.tree_util.tree_map(lambda a: _host(a)[c:c + 1], state), dev)
        return _run_calls(run, k_run, st, placed[dev], calls, thin, prog, first=c)  # Progress is thread-safe

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bayestrees-chain") as pool:
        outs = list(pool.map(chain, range(chains)))
    def cat(*a):   # the chains' last states, joined on the host (key arrays on the device) onto device 0
        if jax.dtypes.issubdtype(a[0].dtype, jax.dtypes.prng_key):
            return jnp.concatenate([jax.device_put(x, devices[0]) for x in a], axis=0)
        return jax.device_put(np.concatenate([np.asarray(x) for x in a], axis=0), devices[0])

    host_cat = lambda *a: _join(a, 0)  # noqa: E731   the kept outputs, already on the host
    return (jax.tree_util.tree_map(host_cat, *[o[0] for o in outs]),
            jax.tree_util.tree_map(host_cat, *[o[1] for o in outs]),
            jax.tree_util.tree_map(cat, *[o[2] for o in outs]))


def run_chains(key, kernel: Kernel, *, args: tuple = (), chains: int = 4, draws: int = 1000, tune: int = 1000,
               thin: int = 1, collect: Callable | None = None, progressbar: bool = False, blocks: int | None = None,
               desc: str = "sampling", chain_method: str = "auto", split_chains: bool = True,
               init_keys=None, keep_programs: bool = True, programs: dict | None = None) -> ChainResult:
    """Run ``chains`` chains of ``kernel`` for ``tune`` discarded steps and ``draws`` kept ones.

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
    chain_method : {"vectorized", "parallel", "auto", "sequential"}
        ``"vectorized"`` steps all chains in one ``vmap``-ed program (the choice for a GPU);
        ``"parallel"`` runs each chain's unbatched program in threads, one per CPU core (or one
        per device where JAX sees several), which is faster on a multi-core CPU; ``"auto"``
        picks ``"parallel"`` for several chains on a CPU with several cores; ``"sequential"``
        runs the unbatched program for one chain after another (the least memory).  The draws
        are the same either way (up to floating-point rounding).
    split_chains : bool  split the chains across the devices JAX sees (:mod:`bayestrees.sharding`;
        default True); False for a kernel that places its work on the devices itself (BART's rows
        across devices, ``data_devices``), whose chains then run vectorized
    init_keys : PRNG keys ``(chains,)``, optional  the keys of the chains' ``init`` (default: drawn
        from ``key``); for a kernel whose state carries its own key and that reproduces another
        driver's draws (the tree functions' NumPyro kernel)
    keep_programs : bool  keep the compiled programs in the module's caches, for the next run of an
        equal kernel (default); False for a kernel made for one run (it closes over that run's data),
        whose programs, and the kernel with them, are then freed when the run ends
    programs : dict, optional  with ``keep_programs=False``, where the run's compiled programs are
        kept: a later run given the same dict and the same kernel (its ``init``/``step`` the same
        objects) runs them without tracing or compiling them again; the caller owns the dict and
        frees the programs with it (:mod:`bayestrees.inference.treefn.programs`)

    Returns
    -------
    ChainResult with leading dims ``(chains, draws)``
    """
    for name, v, lo in (("chains", chains, 1), ("draws", draws, 1), ("tune", tune, 0), ("thin", thin, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    sequential = chain_method == "sequential"
    method = ("parallel" if sequential else resolve_chain_method(chain_method, chains)) if split_chains else "vectorized"
    collect = collect if collect is not None else _identity
    args = tuple(args)
    k_init, k_run = jax.random.split(key)
    if keep_programs:
        block, init, init_from = _block, _init, _init_from
    else:
        store = {} if programs is None else programs
        block, init, init_from = (_own(f, donate, store.setdefault(name, {}))
                                  for name, f, donate in (("block", _block, (1,)), ("init", _init, ()),
                                                          ("init_from", _init_from, ())))
    if init_keys is None:
        state = init(k_init, args, init=kernel.init, chains=chains, split=bool(split_chains))
    else:
        state = init_from(init_keys, args, init=kernel.init, chains=chains, split=bool(split_chains))
    nb = blocks if blocks is not None else (20 if progressbar else 1)
    calls, size = _phases(tune, draws, thin, nb)
    if method == "parallel" and chains > 1:
        prog = Progress(chains * (tune + draws * thin), f"{desc} ({chains} chains, chain-steps)", progressbar)
        run = partial(block, step=kernel.step, collect=collect, size=size, chains=chains, width=1)
        samples, infos, state = _run_parallel(run, k_run, state, args, calls, thin, chains, prog,
                                              workers=1 if sequential else None)
    else:
        prog = Progress(tune + draws * thin, desc, progressbar)
        run = partial(block, step=kernel.step, collect=collect, size=size, chains=chains, split=bool(split_chains))
        samples, infos, state = _run_calls(run, k_run, state, args, calls, thin, prog)
    return ChainResult(samples, infos, state)
