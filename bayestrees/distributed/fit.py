"""Fitting empirical Bayesian and sub-sample forests on a Dask cluster.

The plan of :func:`fit_forest_dask` (no step brings the whole data set into one process):

1. **describe** every partition (rows, response sum or labels): the row offsets give every row
   its global index, which fixes its Bayesian-bootstrap weights
   (:mod:`~bayestrees.distributed.weights`);
2. **sample** at most ``sample_rows`` rows (all rows, in order, when the data set is smaller)
   and fit the :class:`~bayestrees.data.Binner` on the sample, once;
3. **code** every partition on its worker (kept in the workers' memory, compact codes);
4. **trunk** (EBF): level by level from summed histograms (:mod:`~bayestrees.distributed.trunk`);
5. **regroup** the rows by trunk leaf (EBF) or random block (SSF): every partition is cut by
   group and every group's task pulls its pieces from the workers holding them (the all-to-all
   exchange of Dask's task shuffle);
6. **fit** one forest per group as one task (:func:`~bayestrees.distributed.branch_fit.fit_branch`,
   the single-machine JAX engine); only the fitted trees come back;
7. **graft** the branch trees onto the trunk (:func:`~bayestrees.distributed.graft.graft`).

A worker that dies during step 6 loses its tasks and the pieces it held; Dask recomputes them
from their lineage (steps 3 and 5 on the surviving workers) and reruns the fits.  A fit's trees
depend only on its rows' global indices and the forest key, never on the worker, so the result
is the same as an undisturbed run.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import NamedTuple

import jax
import numpy as np

from ..data import Binner, TrainingData, bucket_size, missing_code, observed_response
from ..inference.forest.cart import CARTConfig, default_capacity
from ..inference.forest.fit import ForestConfig, cart_config
from ..inference.forest.workers import release_freed_memory
from ..tree import Tree
from . import partitions
from .branch_fit import BranchSpec, branch_bytes, fit_branch
from .client import worker_memory_limits
from .graft import graft
from .trunk import TrunkBuilder, TrunkSpec, add_histograms, choose_splits, parts_histogram

__all__ = ["DaskFitResult", "fit_forest_dask", "fit_trunk_dask", "BIN_SAMPLE_SEED"]


@dataclass
class DaskFitResult:
    """What :func:`fit_forest_dask` returns.

    Attributes
    ----------
    trees : Tree (NumPy), batch ``(n_trees,)``: whole trees (trunk and branches grafted)
    trunk : Tree or None (EBF)
    cart_config : the branch trees' CARTConfig (its ``missing`` is the missing code)
    sample : TrainingData of the bin sample (``idata_`` is computed at its rows)
    classes : class labels or None
    n_rows : rows in the data set
    group_rows : dict group -> rows (trunk leaf or block)
    timings : dict of seconds per step
    """

    trees: Tree
    trunk: Tree | None
    cart_config: object
    sample: TrainingData
    classes: np.ndarray | None
    n_rows: int
    group_rows: dict
    timings: dict


def _tree_sum(client, futures, fn):
    """Reduce futures pairwise on the cluster; returns the final future."""
    futs = list(futures)
    while len(futs) > 1:
        nxt = [client.submit(fn, futs[i], futs[i + 1], pure=False) for i in range(0, len(futs) - 1, 2)]
        if len(futs) % 2:
            nxt.append(futs[-1])
        futs = nxt
    return futs[0]


#: seed of the random rows the bins are computed from (step 2), combined with the partition
#: number (``np.random.default_rng([BIN_SAMPLE_SEED, p])``).  It is fixed, not derived from the
#: forest key: the bins of a data set then do not depend on ``random_state`` (as a
#: single-machine fit's bins do not), and fits recorded with this value keep their bins and trees.
BIN_SAMPLE_SEED = 5807


class _Description(NamedTuple):
    """What step 1 (describe) finds out about the partitions."""

    lens: np.ndarray  # int64 (n_parts,): rows per partition
    offsets: np.ndarray  # global index of each partition's first row
    n: int  # rows in the data set
    mean: float  # the response's mean (regression; 0 for classification)
    classes: np.ndarray | None  # sorted class labels (classification)


def _describe(client, xs: list, ys: list, task: str, min_samples_leaf: int) -> _Description:
    """Step 1: rows of every partition, their global offsets, and the response's mean or classes.

    Parameters
    ----------
    client : distributed.Client
    xs, ys : the partitions (Dask delayed objects) of X and y
    task : "regression" or "classification"
    min_samples_leaf : the branch trees' ``min_samples_leaf``

    Returns
    -------
    _Description

    Raises
    ------
    ValueError
        Bad partitions (found on the workers), fewer than ``2 * min_samples_leaf`` rows, one class.
    """
    import dask

    n_parts = len(xs)
    desc = dask.compute(*[dask.delayed(partitions.describe)(xs[p], ys[p], p, task) for p in range(n_parts)],
                        scheduler=client)
    lens = np.array([d["n"] for d in desc], np.int64)
    n = int(lens.sum())
    msl = min_samples_leaf
    if n < 2 * msl:
        raise ValueError(f"X has {n} rows (n_samples={n}), fewer than 2 * min_samples_leaf = {2 * msl}")
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
    if task == "regression":
        mean = float(np.sum([d["sum"] for d in desc])) / n
        classes = None
    else:
        mean = 0.0
        classes = np.unique(np.concatenate([np.asarray(d["labels"]) for d in desc]))
        if classes.shape[0] < 2:
            raise ValueError(f"y has only one class ({classes[0]!r}); a classifier needs at least two classes")
    return _Description(lens, offsets, n, mean, classes)


def _sample_and_bin(client, xs: list, ys: list, desc: _Description, task: str, sample_rows: int, max_bins: int,
                    categorical):
    """Step 2: a sample of at most about ``sample_rows`` rows (all rows when fewer), the bins fitted
    to it, and the response's scale.

    Parameters
    ----------
    client : distributed.Client
    xs, ys : the partitions of X and y
    desc : _Description (step 1)
    task : "regression" or "classification"
    sample_rows, max_bins, categorical : as in :func:`fit_forest_dask`

    Returns
    -------
    binner : the fitted :class:`~bayestrees.data.Binner`
    sample : TrainingData of the sampled rows
    scale : float, the response's standard deviation over all rows (1 when 0, and for classification)
    """
    import dask
    import pandas as pd

    lens, n, mean, classes = desc.lens, desc.n, desc.mean, desc.classes
    share = np.minimum(lens, np.ceil(lens * min(1.0, sample_rows / n)).astype(np.int64))
    samples = dask.compute(*[dask.delayed(partitions.sample)(xs[p], ys[p], p, int(share[p]), BIN_SAMPLE_SEED, task, mean)
                             for p in range(len(xs))], scheduler=client)
    Xs = pd.concat([s[0] for s in samples])
    ys_raw = np.concatenate([s[1] for s in samples])
    if task == "regression":
        ys_codes = ys_raw.astype(np.float64)
        scale = float(np.sqrt(np.sum([s[2] for s in samples]) / n))
        scale = scale if scale > 0 else 1.0
    else:
        ys_codes = np.searchsorted(classes, ys_raw).astype(np.int32)
        scale = 1.0
    binner = Binner(max_bins=max_bins, categorical=categorical)
    binner.fit(Xs, ys_codes, classification=task == "classification")
    sample = TrainingData(binner.transform(Xs), ys_codes, task, binner, classes,
                          observed_response(ys_codes, task, classes))
    return binner, sample, scale


def _code_partitions(client, xs: list, ys: list, desc: _Description, binner, task: str):
    """Step 3: every partition coded on the cluster (kept in the workers' memory).

    Parameters
    ----------
    client : distributed.Client
    xs, ys : the partitions of X and y
    desc : _Description (step 1: the row offsets, the classes)
    binner : the fitted Binner (step 2)
    task : "regression" or "classification"

    Returns
    -------
    coded : list of futures of the coded partitions (:func:`~bayestrees.distributed.partitions.code`)
    has_missing : bool, some code is the missing code
    """
    import dask

    b_d = dask.delayed(binner, pure=True)
    cl_d = dask.delayed(desc.classes, pure=True)
    coded = client.compute([dask.delayed(partitions.code)(xs[p], ys[p], p, int(desc.offsets[p]), b_d, task, cl_d)
                            for p in range(len(xs))])
    summ = client.gather(client.map(partitions.summary, coded))
    has_missing = any(s["missing"] for s in summ)
    return coded, has_missing


def _dask_trunk(client, coded: list, config: ForestConfig, cart: CARTConfig, binner, n: int, n_classes: int,
                say) -> Tree:
    """Step 4 (EBF): the CART trunk of the coded partitions (unit weights, leaves of at least
    ``config.trunk_min_samples_leaf`` rows).

    Parameters
    ----------
    client : distributed.Client
    coded : futures of the coded partitions (step 3)
    config : ForestConfig
    cart : the branch trees' CARTConfig (its criterion and missing code)
    binner : the fitted Binner
    n : rows in the data set
    n_classes : classes (0 for regression)
    say : callable(str), the progress line

    Returns
    -------
    Tree (NumPy, one tree)
    """
    tm = config.trunk_min_samples_leaf
    spec = TrunkSpec(n_features=binner.n_features_in_, n_codes=int(binner.n_bins_.max()) + 1, missing=cart.missing,
                     n_classes=n_classes, criterion=cart.criterion, min_samples_leaf=tm, max_depth=None,
                     capacity=default_capacity(n, tm))
    trunk = fit_trunk_dask(client, coded, spec)
    client.run(release_freed_memory)  # the level histograms (over 100 MB each) are gone
    say(f"trunk: {int(trunk.n_nodes)} nodes, {int(np.sum(trunk.left[:int(trunk.n_nodes)] == -1))} leaves")
    return trunk


def _groups(config: ForestConfig, trunk: Tree | None, n: int, missing: int, k_blocks):
    """Step 5, the plan: the groups whose rows are fitted together, trunk leaves (EBF) or blocks (SSF).

    Parameters
    ----------
    config : ForestConfig
    trunk : the trunk (EBF) or None
    n : rows in the data set
    missing : the missing code
    k_blocks : the blocks' JAX key (SSF: the blocks are a hash of each row's global index and a
        seed drawn from it)

    Returns
    -------
    groups : list of int, the group ids
    group_rows : dict group -> rows (EBF), None (SSF: about ``n / n_blocks`` each)
    split_kw : keyword arguments of :func:`~bayestrees.distributed.partitions.split_groups`

    Raises
    ------
    ValueError
        ``n_blocks`` outside ``[1, n / (2 min_samples_leaf)]``.
    """
    msl = config.min_samples_leaf
    if config.kind == "ebf":
        groups = [int(g) for g in np.nonzero(trunk.left == -1)[0]]
        group_rows = {g: int(trunk.count[g]) for g in groups}
        split_kw = dict(kind="ebf", trunk=trunk, missing=missing)
    else:
        k = config.n_blocks
        if not 1 <= k <= n // (2 * msl):
            raise ValueError(f"n_blocks must be between 1 and n / (2 min_samples_leaf) = {n // (2 * msl)}, "
                             f"got {config.n_blocks}")
        groups = list(range(k))
        seed = int(np.asarray(jax.random.bits(k_blocks, (), np.uint32)))
        split_kw = dict(kind="ssf", n_blocks=k, seed=seed)
        group_rows = None
    return groups, group_rows, split_kw


def _regroup(client, coded: list, groups: list, split_kw: dict, d: int, code_dtype) -> dict:
    """Step 5, the exchange: every coded partition cut by group, and each group's pieces.

    Parameters
    ----------
    client : distributed.Client
    coded : futures of the coded partitions
    groups, split_kw : from :func:`_groups`
    d : features
    code_dtype : dtype of the codes

    Returns
    -------
    dict group -> list of futures of its pieces (one per partition)
    """
    splits = [client.submit(partitions.split_groups, c, pure=False, **split_kw) for c in coded]
    return {g: [client.submit(partitions.piece, s, g, d, code_dtype, pure=False) for s in splits] for g in groups}


def _submit_fits(client, pieces: dict, groups: list, bspec: BranchSpec, config: ForestConfig) -> dict:
    """Step 6, submitted: one forest per group, fitted where its pieces meet.

    Parameters
    ----------
    client : distributed.Client
    pieces : dict group -> futures of its pieces (:func:`_regroup`)
    groups : the group ids
    bspec : BranchSpec of every fit
    config : ForestConfig (EBF: every tree in every branch; SSF: tree ``t`` in block ``t mod n_blocks``)

    Returns
    -------
    dict group -> future of ``(Tree, rows)`` (SSF blocks with no tree have none)
    """
    if config.kind == "ebf":
        return {g: client.submit(_fit_group, pieces[g], bspec, None,
                                 key=f"bayestrees-branch-{g}-{_token(bspec.key_data)}")
                for g in groups}
    k = config.n_blocks
    fits = {}
    for g in groups:
        trees_g = np.arange(g, config.n_trees, k)
        if trees_g.size == 0:
            continue
        fits[g] = client.submit(_fit_group, pieces[g], bspec, trees_g,
                                key=f"bayestrees-block-{g}-{_token(bspec.key_data)}")
    return fits


def _gather_fits(client, fits: dict, coded: list, say) -> dict:
    """Step 6, collected: each group's trees as its fit finishes.

    Empties ``fits`` and ``coded`` (the client's last references to the futures): the scheduler
    keeps every fit's inputs (its pieces, their splits, the coded partitions) until the fit is
    done and recomputes lost ones from their lineage, but frees each as soon as nothing pending
    needs it; each fit's trees are freed on the worker once they are here.

    Parameters
    ----------
    client : distributed.Client
    fits : dict group -> future (:func:`_submit_fits`)
    coded : futures of the coded partitions
    say : callable(str), the progress line

    Returns
    -------
    dict group -> ``(Tree, rows)``
    """
    from distributed import as_completed

    results = {}
    group_of = {f.key: g for g, f in fits.items()}
    n_fits = len(fits)
    done = as_completed(list(fits.values()), with_results=True)
    fits.clear()
    coded.clear()
    for fut, res in done:
        g = group_of[fut.key]
        results[g] = res
        fut.release()
        say(f"group {g} fitted ({len(results)}/{n_fits})")
    client.run(release_freed_memory)
    return results


def _assemble(config: ForestConfig, trunk: Tree | None, results: dict):
    """Step 7: the whole trees, from the groups' fits.

    Parameters
    ----------
    config : ForestConfig
    trunk : the trunk (EBF) or None
    results : dict group -> ``(Tree, rows)`` (:func:`_gather_fits`)

    Returns
    -------
    trees : Tree (NumPy), batch ``(n_trees,)``: EBF branches grafted onto the trunk; SSF trees
        back in their order (tree ``t`` from block ``t mod n_blocks``)
    group_rows : dict group -> rows
    """
    if config.kind == "ebf":
        trees = graft(trunk, {g: r[0] for g, r in results.items()})
        group_rows = {g: r[1] for g, r in results.items()}
    else:
        k = config.n_blocks
        order = np.concatenate([np.arange(g, config.n_trees, k) for g in sorted(results)])
        allt = _concat_trees([results[g][0] for g in sorted(results)])
        inv = np.argsort(order)
        trees = jax.tree_util.tree_map(lambda a: a[inv], allt)
        group_rows = {g: r[1] for g, r in results.items()}
    return trees, group_rows


def fit_forest_dask(client, data, config: ForestConfig, task: str, key, *, max_bins: int = 1024,
                    categorical=None, sample_rows: int = 200_000, progress=None) -> DaskFitResult:
    """Fit an empirical Bayesian (``config.kind == "ebf"``) or sub-sample (``"ssf"``) forest on Dask.

    The steps are those of the module's plan, one function each.

    Parameters
    ----------
    client : distributed.Client
    data : :class:`~bayestrees.distributed.inputs.DaskXY` (:func:`~bayestrees.distributed.inputs.as_dask`)
    config : ForestConfig
    task : "regression" or "classification"
    key : JAX PRNG key (split as in :func:`~bayestrees.inference.forest.fit.fit_bayesian_forest`)
    max_bins, categorical : binning (as the estimators')
    sample_rows : rows the bins are computed from
    progress : callable(str), optional
        Called with a line per step.

    Returns
    -------
    DaskFitResult

    Raises
    ------
    ValueError
        Bad input (found on the workers: mismatched partition lengths, NaN responses), too few
        rows, a branch larger than any worker's memory limit.
    """
    say = progress or (lambda s: None)
    timings = {}
    t0 = time.perf_counter()
    xs, ys = [p[0] for p in data.parts], [p[1] for p in data.parts]
    # 1. describe
    desc = _describe(client, xs, ys, task, config.min_samples_leaf)
    n = desc.n
    timings["describe"] = time.perf_counter() - t0
    say(f"{n:,} rows in {len(xs)} partitions")
    # 2. sample and bins
    t1 = time.perf_counter()
    binner, sample, scale = _sample_and_bin(client, xs, ys, desc, task, sample_rows, max_bins, categorical)
    timings["bins"] = time.perf_counter() - t1
    # 3. code the partitions (kept on the workers)
    t1 = time.perf_counter()
    coded, has_missing = _code_partitions(client, xs, ys, desc, binner, task)
    timings["code"] = time.perf_counter() - t1
    d = binner.n_features_in_
    miss = missing_code(binner.dtype_)
    n_classes = 0 if desc.classes is None else int(desc.classes.shape[0])
    shift = desc.mean if task == "regression" else 0.0
    _k_trunk, k_blocks, k_forest = jax.random.split(key, 3)
    cart = cart_config(config, task, n, d, n_classes, has_missing, miss)
    # 4. trunk
    t1 = time.perf_counter()
    trunk = _dask_trunk(client, coded, config, cart, binner, n, n_classes, say) if config.kind == "ebf" else None
    timings["trunk"] = time.perf_counter() - t1
    # 5. regroup
    t1 = time.perf_counter()
    groups, group_rows, split_kw = _groups(config, trunk, n, miss, k_blocks)
    _check_memory(client, group_rows, d, cart.n_stats, binner.dtype_, config, n)
    pieces = _regroup(client, coded, groups, split_kw, d, binner.dtype_)
    # 6. fit every group's forest where its pieces meet
    key_data = tuple(int(v) for v in np.asarray(jax.random.key_data(k_forest)).ravel())
    bspec = BranchSpec(cart=dataclasses.replace(cart, positive_weights=False), n_trees=config.n_trees,
                       weights=config.weights, key_data=key_data, y_shift=shift, y_scale=scale, dtype=config.dtype,
                       task=task, pad_to=_common_size(group_rows, n, len(groups)))
    fits = _submit_fits(client, pieces, groups, bspec, config)
    del pieces  # hold only the fits (see _gather_fits)
    results = _gather_fits(client, fits, coded, say)
    timings["branches"] = time.perf_counter() - t1
    # 7. assemble
    trees, group_rows = _assemble(config, trunk, results)
    timings["total"] = time.perf_counter() - t0
    return DaskFitResult(trees=trees, trunk=trunk, cart_config=cart, sample=sample, classes=desc.classes, n_rows=n,
                         group_rows=group_rows, timings=timings)


def _common_size(group_rows, n: int, k: int) -> int | None:
    """One padded size for every group (one compiled program per worker) when that costs at most
    25% more rows than padding each group to its own coarse bucket (a few programs per worker,
    :func:`~bayestrees.data.bucket_size` with ``coarse=True``); None otherwise."""
    sizes = list(group_rows.values()) if group_rows else [-(-n // max(1, k))] * k
    common = bucket_size(max(sizes))
    coarse = sum(bucket_size(m, coarse=True) for m in sizes)
    return common if common * len(sizes) <= 1.25 * coarse else None


def _token(key_data) -> str:
    return "-".join(str(v) for v in key_data) + f"-{time.time_ns()}"


def _concat_trees(trees: list) -> Tree:
    """Concatenate batches of trees of different capacities (free slots padded as :data:`FREE`)."""
    from ..tree import FREE

    cap = max(int(np.asarray(t.feature).shape[1]) for t in trees)
    fills = dict(feature=-1, left=FREE, right=FREE)
    out = {}
    for name in Tree._fields:
        arrs = []
        for t in trees:
            a = np.asarray(getattr(t, name))
            if name != "n_nodes":
                pad = [(0, 0), (0, cap - a.shape[1])] + [(0, 0)] * (a.ndim - 2)
                a = np.pad(a, pad, constant_values=fills.get(name, 0))
            arrs.append(a)
        out[name] = np.concatenate(arrs)
    return Tree(**out)


def fit_trunk_dask(client, coded: list, spec: TrunkSpec) -> Tree:
    """The CART trunk of coded partitions held on the cluster, one pass over them per level.

    Parameters
    ----------
    client : distributed.Client
    coded : list of futures of coded partitions (dicts with ``codes`` and ``y``)
    spec : TrunkSpec

    Returns
    -------
    Tree (NumPy, one tree, capacity ``spec.capacity``)
    """
    builder = TrunkBuilder(spec, _root_stats(client, coded, spec))
    while True:
        tr = builder.tree()
        hists = [client.submit(parts_histogram, parts, tr, builder.open, spec, workers=[w] if w else None,
                               allow_other_workers=True, pure=False) for w, parts in _by_worker(client, coded)]
        total = _tree_sum(client, hists, add_histograms)
        # the split search runs where the summed histogram is: only the splits come back (the
        # histogram of a wide level is over 100 MB; the client never holds one)
        splits = client.submit(_choose, total, builder.open_depths(), spec, pure=False).result()
        del total, hists
        if not builder.apply(splits):
            return builder.tree()


def _choose(total, depths, spec: TrunkSpec) -> dict:
    hist, ymin, ymax = total
    return choose_splits(hist, ymin, ymax, depths, spec)


def _by_worker(client, futures: list) -> list:
    """``[(worker address or None, [futures held there]), ...]``: one task per worker can then
    reduce its own partitions (a histogram per level is (open nodes, features, codes, stats) of
    float64, 126 MB at 512 open nodes, 10 features and 1,025 codes; one per partition alive at
    once would hold GBs)."""
    where = client.who_has(futures)
    groups: dict = {}
    for f in futures:
        ws = where.get(f.key) or (None,)
        groups.setdefault(sorted(ws)[0], []).append(f)
    return list(groups.items())


def _root_stats(client, coded, spec: TrunkSpec) -> np.ndarray:
    """Statistics of all rows (count, sum y, sum y^2 or class counts) summed over partitions."""
    def stats(part):
        y = np.asarray(part["y"])
        if spec.n_classes:
            return np.concatenate([[y.shape[0]], np.bincount(y, minlength=spec.n_classes)]).astype(np.float64)
        yf = y.astype(np.float64)
        return np.array([yf.shape[0], yf.sum(), (yf * yf).sum()])

    return _tree_sum(client, [client.submit(stats, c, pure=False) for c in coded], np.add).result()


def _fit_group(pieces: list, spec: BranchSpec, trees=None):
    """One group's forest from its pieces (runs on a worker): (Tree, rows)."""
    part = partitions.concat_pieces(pieces)
    if trees is not None:
        spec = dataclasses.replace(spec, n_trees=len(trees))
    t = fit_branch(part["codes"], part["y"], part["row"], spec, trees=trees)
    rows = int(part["codes"].shape[0])
    del part
    release_freed_memory()
    return t, rows


#: memory of a worker process with JAX loaded while XLA compiles the CART engine, beyond the
#: engine's arrays: measured on CPU with JAX 0.10 (peaks of 1.4 to 1.7 GiB above the arrays in
#: ``benchmarks/dask_ebf.py``, an idle worker with JAX loaded being 0.37 GiB of them)
ENGINE_OVERHEAD_BYTES = 1536 * 2**20


def _check_memory(client, group_rows, d: int, n_stats: int, code_dtype, config: ForestConfig, n: int) -> None:
    """Refuse a fit whose largest group cannot fit in the largest worker's memory limit."""
    limits = [v for v in worker_memory_limits(client).values() if v > 0]
    if not limits:
        return
    limit = max(limits)
    if group_rows is None:  # blocks: about n / n_blocks rows each
        k = max(1, config.n_blocks)
        group_rows = {b: -(-n // k) for b in range(k)}
    g, m = max(group_rows.items(), key=lambda kv: kv[1])
    arrays = branch_bytes(m, d, n_stats) + m * (d * np.dtype(code_dtype).itemsize + 24)
    need = arrays + ENGINE_OVERHEAD_BYTES
    if need > limit:
        what = "branch (trunk leaf)" if config.kind == "ebf" else "block"
        raise ValueError(
            f"{what} {g} holds {m:,} rows and needs about {need / 2**20:,.0f} MiB to fit ({arrays / 2**20:,.0f} "
            f"MiB of rows and engine arrays, plus about {ENGINE_OVERHEAD_BYTES / 2**20:,.0f} MiB for a worker "
            f"with JAX compiling the engine), more than the largest worker memory limit ({limit / 2**20:,.0f} "
            "MiB); lower trunk_min_samples_leaf (smaller branches) / raise n_blocks, or give the workers more "
            "memory")
