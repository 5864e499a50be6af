"""One branch's Bayesian forest: the single-machine JAX engine on the rows of one trunk leaf.

This runs as one task on a Dask worker (or in-process).  Given the branch's coded rows, their
responses and their global row indices, it fits ``T`` weighted CART trees whose weights are the
rows' weights in the single-machine forest (:mod:`~bayestrees.distributed.weights`), so that a
branch fitted here grows the same subtree as the same trunk leaf in
:func:`~bayestrees.inference.forest.fit.fit_bayesian_forest`.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..data import bucket_size, missing_code, pad_rows
from ..inference.forest.bootstrap import choose_chunk, positive_config
from ..inference.forest.cart import CARTConfig, default_capacity, fit_trees, prepare_codes, response_ranks
from ..tree import Tree
from .weights import forest_weights

__all__ = ["BranchSpec", "fit_branch", "branch_bytes"]


@dataclass(frozen=True)
class BranchSpec:
    """What every branch fit shares (small; sent with each task).

    Attributes
    ----------
    cart : CARTConfig for the branch trees (its capacity is replaced per branch)
    n_trees : trees per branch (the forest's trees)
    weights : "exponential", "multinomial" or "none"
    key_data : uint32 key data of the forest key (``k_forest``)
    y_shift, y_scale : the response's standardisation (regression; 0 and 1 otherwise)
    dtype : "float32" or "float64"
    task : "regression" or "classification"
    pad_to : int or None
        Rows every branch is padded to (weightless rows), so that branches share one compiled
        program; None pads each branch to its own coarse bucket (:func:`~bayestrees.data.bucket_size`
        with ``coarse=True``: two sizes per doubling, so a worker compiles a few programs, not one
        per branch)
    """

    cart: CARTConfig
    n_trees: int
    weights: str
    key_data: tuple
    y_shift: float
    y_scale: float
    dtype: str
    task: str
    pad_to: int | None = None


def branch_bytes(m: int, d: int, n_stats: int) -> int:
    """A rough bound on the memory one branch fit of ``m`` rows needs (bytes): the engine's
    working arrays for one compiled call of one tree (:func:`~bayestrees.inference.forest.bootstrap.choose_chunk`)."""
    mp = bucket_size(max(1, m), coarse=True)
    return int(4.0 * mp * d * (4 * n_stats + 10) + 64.0 * mp)


def fit_branch(codes: np.ndarray, y: np.ndarray, row_index: np.ndarray, spec: BranchSpec, trees=None) -> Tree:
    """Fit the branch forest of one trunk leaf.

    Parameters
    ----------
    codes : uint (m, d)
        The branch's coded rows (any order).
    y : (m,)
        Raw responses (regression) or class codes.
    row_index : int64 (m,)
        Each row's index in the whole data set (the order a single-machine fit would see).
    spec : BranchSpec
    trees : int array, optional
        The forest's indices of the trees to fit (default ``0 .. n_trees - 1``): tree ``t``'s
        weights and seed are those of tree ``t`` of the single-machine forest.

    Returns
    -------
    Tree
        NumPy arrays, batch shape ``(n_trees,)``, one root per tree standing for the trunk leaf;
        the capacity is the largest tree's node count (the slots in use).

    Notes
    -----
    Rows are put in global index order, so that ties in the engine's stable sorts fall as in
    the single-machine fit.  With ``weights="exponential"`` each row's weight in tree ``t`` is
    its weight in the single-machine forest; other weight kinds and ``max_features`` /
    ``splitter="random"`` give valid forests but not the single-machine trees (their draws
    depend on the whole data set's size or on node numbers).

    A float64 ``spec`` is fitted inside ``jax.enable_x64(True)`` (scoped to this call and
    thread); the process-wide ``jax_enable_x64`` is never changed.
    """
    if spec.dtype == "float64":
        # a float64 forest needs 64-bit JAX for this call only (a scoped, thread-local switch: the
        # process's setting, and so every float32 fit in it, is left as it is)
        with jax.enable_x64(True):
            return _fit_branch(codes, y, row_index, spec, trees)
    return _fit_branch(codes, y, row_index, spec, trees)


def _fit_branch(codes, y, row_index, spec: BranchSpec, trees) -> Tree:
    """:func:`fit_branch` under the 64-bit setting its caller chose."""
    order = np.argsort(row_index, kind="stable")
    codes, y, row_index = np.asarray(codes)[order], np.asarray(y)[order], np.asarray(row_index)[order]
    m, d = codes.shape
    dtype = jnp.dtype(spec.dtype)
    miss = missing_code(codes.dtype)
    if spec.task == "regression":
        ytrain = ((np.asarray(y, np.float64) - spec.y_shift) / spec.y_scale).astype(np.dtype(spec.dtype))
    else:
        ytrain = np.asarray(y).astype(np.int32)
    m_pad = bucket_size(m, coarse=True) if spec.pad_to is None or spec.pad_to < m else int(spec.pad_to)
    cap = default_capacity(m_pad, spec.cart.min_samples_leaf, spec.cart.max_depth)
    cfg = CARTConfig(**{**spec.cart.__dict__, "capacity": cap})
    codes_p = pad_rows(codes, m_pad, miss)
    y_p = pad_rows(ytrain, m_pad, 0)
    prep = prepare_codes(codes_p)
    key = jax.random.wrap_key_data(jnp.asarray(np.asarray(spec.key_data, np.uint32)))
    tree_ids = np.arange(spec.n_trees) if trees is None else np.asarray(trees)
    T = int(tree_ids.shape[0])
    if spec.weights == "exponential":
        # drawn at the padded length (padding rows reuse index 0, their weights are dropped), so
        # that every branch of one padded size shares one compiled weight programme
        W, seeds = forest_weights(key, tree_ids, pad_rows(row_index, m_pad, 0), dtype)
        W = W[:, :m]
    elif spec.weights == "none":
        W = np.ones((T, m), np.dtype(spec.dtype))
        seeds = np.arange(T, dtype=np.uint32)
    else:  # multinomial: bootstrap counts of the branch's rows
        rng = np.random.default_rng(list(spec.key_data) + [int(row_index[0]), int(tree_ids[0])])
        W = np.stack([np.bincount(rng.integers(0, m, m), minlength=m) for _ in range(T)]).astype(spec.dtype)
        seeds = np.arange(T, dtype=np.uint32)
    W = np.concatenate([W, np.zeros((T, m_pad - m), W.dtype)], axis=1)
    if spec.weights != "multinomial":
        cfg = positive_config(cfg)
    # trees per compiled call: the engine's choice, but no more than the branch needs (the
    # single-machine forest pads its last chunk; a branch's few trees need not pay for 16)
    chunk = min(choose_chunk(m_pad, d, cfg.n_stats, T), 1 << max(0, int(T - 1).bit_length()))
    y_j = jnp.asarray(y_p)
    y_rank = response_ranks(y_j, cfg)
    parts = []
    for s in range(0, T, chunk):
        w = W[s:s + chunk]
        sd = seeds[s:s + chunk]
        k = w.shape[0]
        if k < chunk:  # pad the last chunk: one compiled shape
            w = np.concatenate([w, np.repeat(w[:1], chunk - k, 0)])
            sd = np.concatenate([sd, np.repeat(sd[:1], chunk - k)])
        t = fit_trees(prep, y_j, jnp.asarray(w, dtype), cfg, seeds=jnp.asarray(sd, jnp.uint32),
                      y_shift=spec.y_shift, y_scale=spec.y_scale, y_rank=y_rank)
        parts.append(jax.tree_util.tree_map(lambda a, k=k: np.asarray(a)[:k], t))
    out = jax.tree_util.tree_map(lambda *a: np.concatenate(a), *parts)
    # only the used slots travel back (the capacity is a bound for the worst case; a branch's
    # trees use about a third of it): the client holds every branch until it grafts them
    used = max(1, int(np.max(out.n_nodes)))
    return Tree(**{name: (a if name == "n_nodes" else np.ascontiguousarray(a[:, :used]))
                   for name, a in out._asdict().items()})
