"""Bayesian-bootstrap forests: one weighted CART per weight draw (Taddy et al. 2015).

A Bayesian forest is a sample from the posterior of the CART functional
under a Dirichlet-process (Bayesian bootstrap) model of the data: each draw
puts i.i.d. Exp(1) weights on the observed rows and fits CART to the weighted
data.  The same engine gives the classical baselines by changing the weights:

=================  ==========================================
``exponential``    Bayesian forest: w_i ~ Exp(1) i.i.d.
``multinomial``    random forest (bagging): w ~ Multinomial(n, 1/n)
``none``           unit weights (single CART; extra-trees)
=================  ==========================================

The sub-sample forest cuts the rows into ``k`` random blocks and gives each
block an equal share of the trees (rows outside a tree's block get weight 0);
the empirical Bayesian forest grows every tree from a fixed CART trunk fit to
the unweighted data, which is the same as fitting an independent Bayesian
forest to the rows of each trunk leaf (the weights are independent across
rows), in one compiled call.
"""
from __future__ import annotations

import dataclasses
import math
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from ...progress import Progress
from ...tree import Tree, apply, empty_tree
from . import workers
from .cart import CARTConfig, Prepared, fit_trees, prepare_codes, response_ranks, sort_by_trunk
from .chunk import WEIGHT_KINDS, draw_weights, fit_chunk

__all__ = ["WEIGHT_KINDS", "draw_weights", "fit_forest", "fit_trunk", "choose_chunk", "Progress", "start_workers",
           "worker_count"]

def choose_chunk(n: int, d: int, n_stats: int, n_trees: int, memory_budget: float = 1.5e9) -> int:
    """Trees per compiled call: a power of two.

    On CPU, vmapping the level-wise growth over trees is slower than running
    trees one by one once a tree has enough work (the batched while-loop runs
    until the deepest tree is done, and batched gathers/scatters are slow), so
    data sets with ``n * d >= 2e5`` get one tree per call (use ``n_jobs`` for
    parallelism); small data sets batch up to 16 trees to amortise per-call
    overhead, within ``memory_budget``.
    """
    per_tree = 4.0 * n * d * (4 * n_stats + 10) + 64.0 * n
    c = max(1, int(memory_budget // per_tree))
    # not capped by n_trees: the chunk depends on the data shape only, so forests of any size
    # (and the trunk of an empirical Bayesian forest) share one compilation
    c = min(c, 16, max(1, int(2e5 // max(1, n * d))))
    return 1 << int(math.floor(math.log2(c)))


def fit_forest(key, codes_or_prep, y, cfg: CARTConfig, n_trees: int, weights: str = "exponential", *,
               dtype=jnp.float32, y_shift=0.0, y_scale=1.0, trunk: Tree | None = None, trunk_row_node=None,
               block_of_row=None, n_blocks: int = 1, chunk_size: int | None = None, n_jobs: int | None = None,
               progressbar: bool = False, return_weights: bool = False, n_valid: int | None = None):
    """Fit ``n_trees`` trees, each to its own weight draw.

    Parameters
    ----------
    key : PRNG key
    codes_or_prep : uint (n, d) codes or a prepared :class:`~bayestrees.inference.forest.cart.Prepared`
    y : (n,) standardised responses or class codes
    cfg : CARTConfig
    weights : one of ``WEIGHT_KINDS``
    trunk, trunk_row_node : grow every tree from this trunk (empirical Bayesian forest)
    block_of_row, n_blocks : sub-sample forest: tree ``t`` sees only rows of block ``t % n_blocks``
    chunk_size : trees per compiled call (default: by memory); the last chunk is padded,
        so every call has the same shape and compiles once
    n_jobs : chunks fitted at the same time (default 1; -1: one per available CPU), in threads of
        this process; on the CPU backend ``BAYESTREES_PARALLEL=processes`` runs them in worker
        processes pinned to one core each (:mod:`~bayestrees.inference.forest.workers`)
    n_valid : only the first ``n_valid`` rows are data; the rest are padding (weight 0, code
        ``MISSING`` in every feature: required) so that data sizes share compiled shapes

    Returns
    -------
    Tree with batch shape (n_trees,) (and the (n_trees, n) weights if ``return_weights``)
    """
    prep = codes_or_prep if isinstance(codes_or_prep, Prepared) else prepare_codes(codes_or_prep)
    d, n = prep.codes_t.shape
    if weights not in WEIGHT_KINDS:
        raise ValueError(f"weights must be one of {WEIGHT_KINDS}, got {weights!r}")
    if weights != "multinomial" and (block_of_row is None or int(n_blocks) == 1):
        cfg = positive_config(cfg)  # every real row has a positive weight
    chunk = chunk_size or choose_chunk(n, d, cfg.n_stats, n_trees)
    n_chunks = -(-n_trees // chunk)
    jobs = worker_count(n, d, cfg, n_trees, chunk_size, n_jobs)
    blocks = None if block_of_row is None else jnp.asarray(block_of_row, jnp.int32)
    nb = max(1, int(n_blocks))
    y = jnp.asarray(y)
    presorted = False
    if trunk_row_node is not None:
        prep = sort_by_trunk(prep, trunk_row_node)  # once per forest, not once per tree
        presorted = True
    prog = Progress(n_trees, "fitting trees", progressbar)
    job = dict(prep=prep, y=y, y_rank=response_ranks(y, cfg), cfg=cfg, trunk=trunk, trunk_row_node=trunk_row_node,
               y_shift=y_shift, y_scale=y_scale, presorted=presorted, key=key, n=n, weights=weights,
               dtype=jnp.dtype(dtype), chunk=chunk, blocks=blocks, n_blocks=nb, n_valid=n_valid,
               return_weights=return_weights)

    forest = _Join(n_trees, chunk)

    def run(c):
        forest.put(c, jax.block_until_ready(fit_chunk(job, c)))
        prog.update(min(chunk, n_trees - c * chunk))

    pool = workers.default_pool().get(jobs, quiet=True) if jobs > 1 else None
    jobs = jobs or min(resolve_n_jobs(n_jobs), n_chunks)  # in threads when there are no worker processes
    with prog:  # closed on an error too (it closes itself once every tree is fitted)
        if jobs == 1:
            for c in range(n_chunks):
                run(c)
        elif pool is not None:
            _run_in_workers(pool, n_chunks, chunk, n_trees, prog, job, forest)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as ex:
                list(ex.map(run, range(n_chunks)))
    return forest.result()


def _aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
    """An uninitialised array whose data starts on an ``align``-byte boundary: JAX's CPU client then
    takes it without a copy (``jax.device_put``; a NumPy array that is not 64-byte aligned is copied)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class _Join:
    """The forest's trees (and weights), joined chunk by chunk as the chunks are fitted.

    Each chunk is copied into one preallocated array per field and dropped, so the forest is held
    once, not as its chunks plus their concatenation plus the device copy; the arrays are 64-byte
    aligned, so on the CPU the device arrays that :meth:`result` returns share their memory (no
    copy).  A joined forest cannot depend on the order the chunks arrive in.
    """

    def __init__(self, n_trees: int, chunk: int):
        self.n_trees, self.chunk = n_trees, chunk
        self.parts = None  # (Tree of arrays, weights array or None), allocated with the first chunk
        self.lock = threading.Lock()

    def put(self, c: int, result) -> None:
        """Copy chunk ``c``'s ``(trees, weights or None)`` (NumPy or JAX arrays) into place."""
        with self.lock:
            if self.parts is None:
                self.parts = jax.tree_util.tree_map(
                    lambda a: _aligned_empty((self.n_trees,) + tuple(a.shape[1:]), a.dtype), result)
        lo = c * self.chunk
        hi = min(lo + self.chunk, self.n_trees)

        def copy(dst, src):
            dst[lo:hi] = np.asarray(src)[:hi - lo]

        jax.tree_util.tree_map(copy, self.parts, result)

    def result(self):
        """The joined trees as JAX arrays (and the weights, if the chunks carried them)."""
        trees, weights = jax.tree_util.tree_map(jax.device_put, self.parts)
        self.parts = None  # the device arrays hold the memory now (no copy on the CPU)
        return trees if weights is None else (trees, weights)


def positive_config(cfg: CARTConfig, prep: Prepared | None = None, weights=None) -> CARTConfig:
    """``cfg`` with ``positive_weights`` on when it holds: no missing values, and every row of zero
    weight (padding) has the ``MISSING`` code in every feature (checked when ``weights`` is given)."""
    if cfg.has_missing:
        return cfg
    if weights is not None:
        zero = np.asarray(weights) <= 0
        if zero.any() and not np.all(np.asarray(prep.codes_t)[:, zero] == cfg.missing):
            return cfg
    return dataclasses.replace(cfg, positive_weights=True)


def worker_count(n: int, d: int, cfg: CARTConfig, n_trees: int, chunk_size: int | None, n_jobs) -> int:
    """How many worker processes :func:`fit_forest` uses for this forest (0: none, it runs in this
    process, in threads when ``n_jobs > 1``).  ``n`` is the padded row count, ``d`` the features."""
    chunk = chunk_size or choose_chunk(n, d, cfg.n_stats, n_trees)
    jobs = min(resolve_n_jobs(n_jobs), -(-n_trees // chunk))
    return jobs if jobs > 1 and workers.use_processes(jobs) else 0


def start_workers(n: int, d: int, cfg: CARTConfig, n_trees: int, chunk_size: int | None, n_jobs) -> None:
    """Start the worker processes a forest fit will use (see :func:`worker_count`), without waiting for
    them: they import JAX while the calling process prepares the data (or fits an empirical Bayesian
    forest's trunk)."""
    jobs = worker_count(n, d, cfg, n_trees, chunk_size, n_jobs)
    if jobs:
        workers.default_pool().get(jobs, quiet=True)


def resolve_n_jobs(n_jobs) -> int:
    """scikit-learn's convention: None -> 1, -1 -> all available CPUs, -2 -> all but one, ..."""
    if n_jobs is None:
        return 1
    n_jobs = int(n_jobs)
    if n_jobs == 0:
        raise ValueError("n_jobs == 0 has no meaning; use None or 1 for one job, -1 for all CPUs")
    if n_jobs < 0:
        return max(1, len(workers.available_cpus()) + 1 + n_jobs)
    return n_jobs


def _run_in_workers(pool, n_chunks, chunk, n_trees, prog, job, forest: _Join):
    """Fit the chunks in ``jobs`` worker processes, one core each, into ``forest``.

    The workers draw the weights and seeds themselves, with the same key and function as
    in-process, so the trees are the same; this process only waits.
    """
    # a program no worker has run yet is compiled once and the workers load it from their compilation
    # cache instead of compiling it too (time and memory).  It is compiled by an extra process that
    # is not pinned to one core, so the compiler uses every core (a pinned worker's would use one),
    # and that process then exits with the compiler's memory; a program an earlier process left in a
    # persistent cache is loaded by every worker at once.
    sig = (job["cfg"], job["n"], job["chunk"], str(job["dtype"]), job["weights"], job["trunk"] is None,
           job["blocks"] is None, tuple(job["prep"].codes_t.shape), bool(jax.config.jax_enable_x64))
    first = 0
    compiler = None
    if not any(sig in w.seen for w in pool) and not workers.program_cached(pool, sig):
        try:
            compiler = workers.start_compiler(pool)
        except workers.WorkerError:  # then the first worker compiles while the others wait
            compiler = pool[0]
    try:
        remote = workers.RemoteFit(pool if compiler is None or compiler in pool else [compiler, *pool], job)
        if compiler is not None:
            forest.put(0, remote.fit(compiler, 0))
            prog.update(min(chunk, n_trees))
            first = 1
    finally:
        if compiler is not None and compiler not in pool:
            compiler.close()
    for w in pool:
        w.seen.add(sig)
    next_chunk = iter(range(first, n_chunks))
    take = threading.Lock()

    stop = threading.Event()

    def serve(worker):
        while not stop.is_set():
            with take:
                c = next(next_chunk, None)
            if c is None:
                return
            try:
                forest.put(c, remote.fit(worker, c))
            except BaseException:
                stop.set()  # the other workers finish their chunk and stop
                raise
            prog.update(min(chunk, n_trees - c * chunk))

    with ThreadPoolExecutor(max_workers=len(pool)) as ex:
        futures = [ex.submit(serve, w) for w in pool]
        try:
            for f in futures:
                f.result()
        except BaseException:  # an error in a worker, or KeyboardInterrupt here: stop handing out chunks
            stop.set()
            raise
    workers.remember_program(pool, sig)


def root_trunk(cfg: CARTConfig, dtype=jnp.float32) -> Tree:
    """A trunk that is just the root: growing from it is growing from scratch.

    Passing it (instead of no trunk) lets plain, sub-sample and empirical Bayesian forests share
    one compiled program.
    """
    return empty_tree(cfg.capacity, cfg.n_outputs, dtype)


def fit_trunk(codes_or_prep, y, cfg: CARTConfig, trunk_min_samples_leaf: int, *, y_shift=0.0, y_scale=1.0,
              dtype=jnp.float32, weights=None):
    """The CART trunk of an empirical Bayesian forest (unit weights, large minimum leaf).

    Returns ``(trunk, row_node)``: a single tree with the capacity of ``cfg`` and
    the trunk leaf of every training row.
    """
    prep = codes_or_prep if isinstance(codes_or_prep, Prepared) else prepare_codes(codes_or_prep)
    d, n = prep.codes_t.shape
    tcfg = dataclasses.replace(cfg, min_samples_leaf=int(trunk_min_samples_leaf), max_depth=None, max_features=None,
                               extra=False, min_weight_fraction_leaf=0.0)
    w = jnp.ones(n, dtype) if weights is None else jnp.asarray(weights, dtype)
    tcfg = positive_config(tcfg, prep, w)  # as the forest grown from it, so the compilation is shared
    B = choose_chunk(n, d, cfg.n_stats, 1)  # the forest's chunk size, so the compilation is shared
    t = fit_trees(prep, y, jnp.tile(w[None], (B, 1)), tcfg, y_shift=y_shift, y_scale=y_scale,
                  trunk=root_trunk(cfg, dtype), trunk_row_node=jnp.zeros(n, jnp.int32))
    trunk = jax.tree_util.tree_map(lambda a: a[0], t)
    codes = prep.codes_t.T
    row_node = apply(trunk, codes, cfg.missing)
    return trunk, row_node
