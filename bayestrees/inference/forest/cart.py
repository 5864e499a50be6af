"""Weighted CART in JAX: many trees, one per weight vector, in one compiled call.

The engine grows trees level by level on binned feature codes.  For each
feature it keeps the rows in an order sorted by (node, code); every node owns
the same contiguous range of positions in every feature's order (its
*segment*).  One level is then a handful of passes over a ``(d, n)`` array,
whatever the number of nodes:

1. gather the row statistics in each feature's order and take prefix sums;
2. at every position compute the left/right statistics of the split "code <=
   code at this position" for the node owning it, mask invalid splits (same
   code as the next row, end of segment, ``min_samples_leaf``,
   ``min_weight_fraction_leaf``, features not drawn by ``max_features``,
   thresholds not drawn by extra-trees) and score it;
3. take, per node, the best (feature, position) by segment max (ties go to the
   lowest feature index, then the lowest threshold);
4. route rows to the new children and stably partition every feature's order
   so that each child's rows are again contiguous and sorted by code.

The cost of a level is O(n d) and does not grow with the number of nodes, so
deep trees (CART with ``min_samples_leaf=2`` on 18k rows: depth ~30, ~8k
leaves) cost about (depth x n x d).  Trees are vmapped over weight vectors.

Split criterion (maximised proxy; the impurity decrease differs by a constant
of the node)
    squared error: S_L^2 / W_L + S_R^2 / W_R (S = sum w y, W = sum w);
    gini: sum_k W_{L,k}^2 / W_L + sum_k W_{R,k}^2 / W_R;
    entropy: sum_k W_{L,k} log W_{L,k} - W_L log W_L + (same for R).

A node is split only if it holds at least ``2 * min_samples_leaf`` rows of
positive weight, its response is not constant, its depth is below
``max_depth``, and a valid split exists -- as in scikit-learn, a split with
zero impurity decrease is still taken.  Rows with zero weight travel with
their node but are not counted by ``min_samples_leaf`` (as scikit-learn's
splitter skips them).

Missing values (code ``MISSING``) sort after every other code.  When the data
has missing values, each candidate split is also scored with the node's
missing rows sent left; the better direction is stored in ``missing_left``.

Capacity: a tree that needs more node slots than ``capacity`` is an error
(``CapacityError``), never a silent truncation.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...data import bucket_size
from ...tree import FREE, LEAF, Tree, mark_unused

__all__ = ["CARTConfig", "CapacityError", "fit_trees", "default_capacity", "prepare_codes", "GrowState",
           "init_state", "grow", "sort_by_trunk"]

_NEG = -jnp.inf
#: block length of the float prefix sums (``prefix_sum``): the fastest of 8, 16 and 32 measured
_FLOAT_BLOCK = 16


class CapacityError(ValueError):
    """A tree needed more node slots than the fixed capacity."""


@dataclass(frozen=True)
class CARTConfig:
    """Static settings of the CART engine (hashable: part of the compiled signature).

    Attributes
    ----------
    criterion : "squared_error" | "gini" | "entropy"
    n_classes : number of classes (classification) or 0 (regression)
    min_samples_leaf : rows of positive weight required in each child
    min_weight_fraction_leaf : fraction of the tree's total weight required in each child
    max_depth : maximum depth (None: limited only by capacity)
    max_features : features drawn per node (None: all)
    extra : extremely randomised thresholds (one random threshold per feature per node)
    capacity : node slots per tree
    has_missing : the codes contain ``MISSING``
    missing : value of the missing code
    positive_weights : every row whose code is not ``MISSING`` has a positive weight (and
        ``has_missing`` is False, so ``MISSING`` rows are weightless padding). Row counts are
        then read off positions instead of being summed: one statistic fewer to gather and
        prefix-sum per level. Set by the forests for Exp(1) and unit weights.
    """

    criterion: str = "squared_error"
    n_classes: int = 0
    min_samples_leaf: int = 1
    min_weight_fraction_leaf: float = 0.0
    max_depth: int | None = None
    max_features: int | None = None
    extra: bool = False
    capacity: int = 1023
    has_missing: bool = False
    missing: int = 255
    positive_weights: bool = False

    @property
    def n_stats(self) -> int:
        return 2 + (self.n_classes if self.n_classes else 1)  # [positive rows, weight, w*y | w*onehot]

    @property
    def n_outputs(self) -> int:
        return self.n_classes if self.n_classes else 1


def default_capacity(n_positive: int, min_samples_leaf: int, max_depth: int | None = None) -> int:
    """Node slots that can never overflow: 2 * L - 1 for L >= floor(n / min_samples_leaf) leaves (and at
    most 2^(depth+1) - 1).

    L is rounded up to a bucket size (:func:`~bayestrees.data.bucket_size`: at least 64, then steps of
    sqrt 2 up to 8,192, then of at most 3.2%), because the capacity is part of the compiled signature:
    fits that differ only in ``min_samples_leaf`` or in a few rows share one compilation.
    """
    leaves = bucket_size(max(1, n_positive // max(1, min_samples_leaf)))
    cap = 2 * leaves - 1
    if max_depth is not None and max_depth < 40:
        cap = min(cap, 2 ** (max_depth + 1) - 1)
    return int(max(cap, 1))


class Prepared(NamedTuple):
    """Data shared by all trees: codes (d, n) and the per-feature sort order (d, n)."""

    codes_t: jax.Array  # int32 (d, n)
    order0: jax.Array  # int32 (d, n)


def prepare_codes(codes: np.ndarray) -> Prepared:
    """Transpose the codes and sort each feature once (stable)."""
    codes = np.asarray(codes)
    codes_t = np.ascontiguousarray(codes.T).astype(np.int32)
    order0 = np.argsort(codes_t, axis=1, kind="stable").astype(np.int32)
    return Prepared(jnp.asarray(codes_t), jnp.asarray(order0))


class GrowState(NamedTuple):
    """Carried state of the level-wise growth of one tree."""

    tree: Tree
    order: jax.Array  # int32 (d, n)
    row_node: jax.Array  # int32 (n,)
    seg_start: jax.Array  # int32 (capacity,)
    seg_len: jax.Array  # int32 (capacity,)
    open: jax.Array  # bool (capacity,)
    overflow: jax.Array  # bool ()
    level: jax.Array  # int32 ()


def _mix(x):
    """A 32-bit integer finaliser (murmur3 fmix32), elementwise on uint32."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def _uniform_hash(seed, a, b):
    """Deterministic U[0, 1) from (seed, a, b): counter-based randomness per (node, feature)."""
    h = _mix(seed ^ _mix(a.astype(jnp.uint32) * jnp.uint32(0x9E3779B1) + b.astype(jnp.uint32)))
    return (h >> 8).astype(jnp.float32) * (1.0 / (1 << 24))


def row_stats(y, w, cfg: CARTConfig, dtype):
    """Per-row statistics (n, s): [positive, w, w*y] or [positive, w, w*onehot...]."""
    pos = (w > 0).astype(dtype)
    if cfg.n_classes:
        oh = jax.nn.one_hot(y, cfg.n_classes, dtype=dtype)
        return jnp.concatenate([pos[:, None], w[:, None], w[:, None] * oh], axis=1)
    return jnp.stack([pos, w, w * y], axis=1)


def prefix_sum(x, block: int = 32):
    """Inclusive cumulative sum along the last axis.

    XLA's CPU cumsum is several times slower than this: the last axis is cut
    into blocks, the running sums within blocks are computed blockwise, and
    block offsets come from a cumulative sum of the (block times fewer) block
    totals.

    Integers go through one matrix product with an upper-triangular matrix of
    ones in float32 (``block`` = 32; exact for blocks of small counts, so the
    order the matrix library sums in cannot show).  Floats take an
    associative scan of additions within blocks of 16: a matrix product's
    summation order is the library kernel's, which differs between processors
    (vector width), and a float's rounding, hence a near-tied split choice,
    would follow it.  Additions in a fixed order round the same on every
    processor.
    """
    m0 = x.shape[-1]
    is_int = jnp.issubdtype(x.dtype, jnp.integer)
    block = block if is_int else _FLOAT_BLOCK
    if m0 <= block:
        return jnp.cumsum(x, axis=-1)
    pad = (-m0) % block
    xp = x if not pad else jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)])
    xb = xp.reshape(x.shape[:-1] + ((m0 + pad) // block, block))
    if is_int:
        tri = jnp.triu(jnp.ones((block, block), jnp.float32))
        within = jnp.einsum("...kb,bc->...kc", xb.astype(jnp.float32), tri,
                            precision=jax.lax.Precision.HIGHEST).astype(x.dtype)
    else:
        within = jax.lax.associative_scan(jnp.add, xb, axis=xb.ndim - 1)
    tot = within[..., -1]
    off = jnp.cumsum(tot, axis=-1) - tot
    out = (within + off[..., None]).reshape(x.shape[:-1] + (m0 + pad,))
    return out if not pad else out[..., :m0]


def _proxy(st, cfg: CARTConfig):
    """The criterion proxy of a child from its statistics, stats axis first: (s, ...)."""
    return _proxy_parts(st[1], st[2:], cfg)


def _proxy_parts(W, Wk, cfg: CARTConfig):
    """The criterion proxy from a child's weight ``W`` and its other statistics ``Wk`` (w*y or w*onehot)."""
    Wsafe = jnp.where(W > 0, W, 1.0)
    if not cfg.n_classes:
        return Wk[0] ** 2 / Wsafe
    if cfg.criterion == "gini":
        return jnp.sum(Wk * Wk, 0) / Wsafe
    xlogx = lambda v: jnp.where(v > 0, v * jnp.log(jnp.where(v > 0, v, 1.0)), 0.0)  # noqa: E731
    return jnp.sum(xlogx(Wk), 0) - xlogx(W)


def _node_value(tot, cfg: CARTConfig, y_shift, y_scale):
    W = tot[..., 1]
    Wsafe = jnp.where(W > 0, W, 1.0)
    if cfg.n_classes:
        return tot[..., 2:] / Wsafe[..., None]
    return (tot[..., 2:3] / Wsafe[..., None]) * y_scale + y_shift


@jax.jit
def _sort_by_trunk(order0, row_node):
    node_of_pos = row_node[order0]  # (d, n)
    return jnp.take_along_axis(order0, jnp.argsort(node_of_pos, axis=1, stable=True), axis=1)


def sort_by_trunk(prep: Prepared, trunk_row_node) -> Prepared:
    """Re-sort every feature's order by (trunk leaf, code): the layout that growth from a trunk needs.

    The order is the same for every tree grown from one trunk, so it is computed once per forest.
    """
    return Prepared(prep.codes_t, _sort_by_trunk(prep.order0, jnp.asarray(trunk_row_node, jnp.int32)))


def init_state(prep: Prepared, stats, cfg: CARTConfig, dtype, y_shift, y_scale, trunk: Tree | None = None,
               trunk_row_node=None) -> GrowState:
    """The growth state of a root-only tree, or of a given trunk whose leaves are open."""
    d, n = prep.codes_t.shape
    cap = cfg.capacity
    if trunk is None:
        tot = jnp.sum(stats, 0)
        tree = Tree(
            feature=-jnp.ones(cap, jnp.int32), threshold=jnp.zeros(cap, jnp.int32),
            left=-jnp.ones(cap, jnp.int32), right=-jnp.ones(cap, jnp.int32),
            missing_left=jnp.zeros(cap, bool),
            value=jnp.zeros((cap, cfg.n_outputs), dtype).at[0].set(_node_value(tot, cfg, y_shift, y_scale)),
            weight=jnp.zeros(cap, dtype).at[0].set(tot[1]),
            count=jnp.zeros(cap, jnp.int32).at[0].set(tot[0].astype(jnp.int32)),
            depth=jnp.zeros(cap, jnp.int32), n_nodes=jnp.ones((), jnp.int32),
        )
        return GrowState(tree, prep.order0, jnp.zeros(n, jnp.int32), jnp.zeros(cap, jnp.int32),
                         jnp.zeros(cap, jnp.int32).at[0].set(n), jnp.zeros(cap, bool).at[0].set(True),
                         jnp.zeros((), bool), jnp.zeros((), jnp.int32))
    # trunk: rows sorted by (trunk leaf, code) in each feature (see ``sort_by_trunk``); trunk leaves open
    row_node = jnp.asarray(trunk_row_node, jnp.int32)
    order = prep.order0
    seg_len = jnp.zeros(cap, jnp.int32).at[row_node].add(1)
    seg_start = jnp.cumsum(seg_len) - seg_len
    tot = jax.ops.segment_sum(stats, row_node, cap)
    # inside the engine the used slots are a prefix and free slots read as leaves (-1);
    # ``fit_trees`` marks the free slots on the way out (``mark_unused``)
    is_leaf = trunk.is_leaf()
    trunk = trunk._replace(left=jnp.where(trunk.left == FREE, LEAF, trunk.left),
                           right=jnp.where(trunk.right == FREE, LEAF, trunk.right))
    tree = trunk._replace(
        value=jnp.where(is_leaf[:, None], _node_value(tot, cfg, y_shift, y_scale), trunk.value).astype(dtype),
        weight=jnp.where(is_leaf, tot[:, 1], trunk.weight).astype(dtype),
        count=jnp.where(is_leaf, tot[:, 0].astype(jnp.int32), trunk.count),
    )
    return GrowState(tree, order, row_node, seg_start.astype(jnp.int32), seg_len, is_leaf,
                     jnp.zeros((), bool), jnp.zeros((), jnp.int32))


class _Rows(NamedTuple):
    """Row data of one stage of the growth (rows renumbered within the stage)."""

    codes_t: jax.Array  # int32 (d, m)
    stats: jax.Array  # (m, s)
    y_rank: jax.Array  # int32 (m,)


def _at(C, idx):
    """``C[..., idx]`` with ``idx < 0`` reading as 0 (the empty prefix)."""
    return jnp.where(idx >= 0, jnp.take(C, jnp.maximum(idx, 0), axis=-1), 0)


class _Layout(NamedTuple):
    """Where the positions of one level sit: the node and segment owning each position, and the
    codes in every feature's sorted order."""

    pos_node: jax.Array  # int32 (n,): node owning each position (the same in every feature)
    seg_end: jax.Array  # int32 (cap,): one past each node's last position
    start_p: jax.Array  # int32 (n,): first position of the segment owning each position
    end_p: jax.Array  # int32 (n,): one past the last position of that segment
    codes_sorted: jax.Array  # (d, n): the codes in every feature's order
    p_idx: jax.Array  # int32 (n,): the positions 0..n-1


class _Sums(NamedTuple):
    """Sorted statistics, their prefix sums and the left/right statistics of every candidate split
    (stats axis first; channel 0, the positive-weight row count, is left out of ``G``, ``C``,
    ``L`` and ``R`` when ``cfg.positive_weights``)."""

    G: jax.Array  # (s - k0, d, n): row statistics gathered in every feature's order
    C: jax.Array  # (s - k0, d, n): their inclusive prefix sums
    L: jax.Array  # (s - k0, d, n): statistics left of (and at) each position, within its segment
    R: jax.Array  # (s - k0, d, n): statistics right of each position, within its segment
    tot: jax.Array  # (cap, s): node totals, all channels
    L_cnt: jax.Array  # (d, n) or (1, n): positive-weight rows on the left
    R_cnt: jax.Array  # (d, n) or (1, n): positive-weight rows on the right
    L_w: jax.Array  # (d, n): weight on the left
    R_w: jax.Array  # (d, n): weight on the right
    L_k: jax.Array  # (s - 2, d, n): w*y or w*onehot on the left
    R_k: jax.Array  # (s - 2, d, n): w*y or w*onehot on the right


def _level_layout(state: GrowState, codes_t) -> _Layout:
    """Phase 1 of a level: the segment layout of the positions.

    Parameters
    ----------
    state : GrowState at the start of the level
    codes_t : int32 (d, n) codes of the stage's rows

    Returns
    -------
    _Layout
    """
    order, row_node, seg_start, seg_len = state.order, state.row_node, state.seg_start, state.seg_len
    n = order.shape[1]
    pos_node = row_node[order[0]]  # (n,) node of each position (same in every feature)
    seg_end = seg_start + seg_len
    start_p = seg_start[pos_node]  # (n,)
    end_p = seg_end[pos_node]
    codes_sorted = jnp.take_along_axis(codes_t, order, axis=1)  # (d, n)
    p_idx = jnp.arange(n)
    return _Layout(pos_node, seg_end, start_p, end_p, codes_sorted, p_idx)


def _level_sums(state: GrowState, stats, lay: _Layout, cfg: CARTConfig) -> _Sums:
    """Phase 2: sorted statistics, prefix sums, node totals and left/right statistics per position.

    Parameters
    ----------
    state : GrowState at the start of the level
    stats : (n, s) row statistics of the stage (:func:`row_stats`)
    lay : _Layout of the level
    cfg : CARTConfig

    Returns
    -------
    _Sums (layout ``(s, d, n)``; node totals ``(cap, s)``)
    """
    tree, order, seg_start = state.tree, state.order, state.seg_start
    dtype = stats.dtype
    # with positive weights, channel 0 (rows of positive weight) is not summed: a valid split
    # position p has only weighted rows before it in its segment, so its left count is p - start + 1
    # (weightless MISSING padding sorts last), and a node's count is already in the tree
    k0 = 1 if cfg.positive_weights else 0
    G = stats.T[k0:, order]  # (s - k0, d, n)
    C = prefix_sum(G)
    L = C - _at(C, lay.start_p - 1)

    # node totals (from feature 0's prefix sums)
    C0 = C[:, 0]
    tot = (_at(C0, lay.seg_end - 1) - _at(C0, seg_start - 1)).T  # (cap, s - k0)
    if k0:
        tot = jnp.concatenate([tree.count.astype(dtype)[:, None], tot], 1)  # (cap, s): small
    R = tot.T[k0:, lay.pos_node][:, None, :] - L  # (s - k0, d, n)
    # left/right row counts (d, n) or (1, n), weights (d, n), and the remaining statistics
    if k0:
        L_cnt = (lay.p_idx - lay.start_p + 1).astype(dtype)[None, :]
        R_cnt = tot[:, 0][lay.pos_node][None, :] - L_cnt
    else:
        L_cnt, R_cnt = L[0], R[0]
    L_w, R_w = L[1 - k0], R[1 - k0]
    L_k, R_k = L[2 - k0:], R[2 - k0:]
    return _Sums(G, C, L, R, tot, L_cnt, R_cnt, L_w, R_w, L_k, R_k)


def _level_splittable(state: GrowState, rows: _Rows, tot, limits, cfg: CARTConfig):
    """Phase 3: which open nodes may split (enough rows and weight, response not constant, depth
    below ``max_depth``).

    Parameters
    ----------
    state : GrowState at the start of the level
    rows : _Rows of the stage
    tot : (cap, s) node totals (:class:`_Sums`)
    limits : (minimum child weight, min_samples_leaf, max_depth), traced
    cfg : CARTConfig

    Returns
    -------
    bool (cap,)
    """
    cap = cfg.capacity
    min_weight, msl, max_depth = limits
    pos_w = rows.stats[:, 0] > 0
    ymax = jax.ops.segment_max(jnp.where(pos_w, rows.y_rank, -1), state.row_node, cap)
    ymin = jax.ops.segment_min(jnp.where(pos_w, rows.y_rank, jnp.iinfo(jnp.int32).max), state.row_node, cap)
    can = state.open & (tot[:, 0] >= 2 * msl) & (ymax > ymin) & (tot[:, 1] >= 2 * min_weight)
    return can & (state.tree.depth < max_depth)


def _level_valid(lay: _Layout, can, cfg: CARTConfig):
    """Phase 4: the positions where a split "code <= code here" is possible (not the segment's last
    position, a change of code follows, not a missing code, the node can split).

    Parameters
    ----------
    lay : _Layout of the level
    can : bool (cap,) from :func:`_level_splittable`
    cfg : CARTConfig

    Returns
    -------
    nxt_code : (d, n) the code at the next position (-1 after the last)
    valid : bool (d, n)
    """
    codes_sorted = lay.codes_sorted
    d = codes_sorted.shape[0]
    nxt_code = jnp.concatenate([codes_sorted[:, 1:], jnp.full((d, 1), -1, codes_sorted.dtype)], axis=1)
    in_seg = (lay.p_idx + 1 < lay.end_p)[None, :]
    valid = in_seg & (codes_sorted != nxt_code) & (codes_sorted != cfg.missing) & can[lay.pos_node][None, :]
    return nxt_code, valid


def _level_random(valid, nxt_code, lay: _Layout, seg_start, seed, cfg: CARTConfig):
    """Phase 5: the random restrictions, drawn per (node, feature) from ``seed``: features outside
    the node's ``max_features`` draw and, for extra trees, every threshold but the drawn one.

    Parameters
    ----------
    valid : bool (d, n) from :func:`_level_valid`
    nxt_code : (d, n) from :func:`_level_valid`
    lay : _Layout of the level
    seg_start : int32 (cap,) first position of each node
    seed : uint32 the tree's seed
    cfg : CARTConfig

    Returns
    -------
    valid : bool (d, n), unchanged when neither restriction applies
    """
    codes_sorted, pos_node = lay.codes_sorted, lay.pos_node
    d, n = codes_sorted.shape
    cap = cfg.capacity
    miss = cfg.missing
    if cfg.max_features is not None and cfg.max_features < d or cfg.extra:
        nodes = jnp.arange(cap)
        feats = jnp.arange(d)
        lo = jnp.take(codes_sorted, jnp.clip(seg_start, 0, n - 1), axis=1).T  # (cap, d)
        # the largest code present (MISSING, which sorts last, excluded: missing values and
        # weightless padding rows must not widen the range thresholds are drawn from)
        present = jnp.where(codes_sorted != miss, codes_sorted, -1)
        hi = jax.vmap(lambda r: jax.ops.segment_max(r, pos_node, cap))(present).T  # (cap, d)
        nonconst = hi > lo
    if cfg.max_features is not None and cfg.max_features < d:
        prio = _uniform_hash(seed, nodes[:, None], feats[None, :] + 7919)  # (cap, d)
        rank = jnp.sum(prio[:, None, :] < prio[:, :, None], axis=-1)  # rank of f among features
        first_nc = jnp.argmin(jnp.where(nonconst, prio, 2.0), axis=1)
        allowed = (rank < cfg.max_features) | (feats[None, :] == first_nc[:, None])
        valid = valid & allowed[pos_node].T
    if cfg.extra:
        u = _uniform_hash(seed, nodes[:, None], feats[None, :] + 104729)
        thr = lo + jnp.floor(u * jnp.maximum(hi - lo, 0).astype(jnp.float32)).astype(jnp.int32)
        thr_p = thr[pos_node].T  # (d, n)
        valid = valid & (codes_sorted <= thr_p) & (nxt_code > thr_p)
    return valid


def _level_gains(valid, sums: _Sums, lay: _Layout, limits, cfg: CARTConfig):
    """Phase 6: the score of every candidate split (missing rows right, and, when the data has
    missing values, also left).

    Parameters
    ----------
    valid : bool (d, n) from :func:`_level_random`
    sums : _Sums of the level
    lay : _Layout of the level
    limits : (minimum child weight, min_samples_leaf, max_depth), traced
    cfg : CARTConfig

    Returns
    -------
    gain : (d, n) the better score per position, ``-inf`` where no split is allowed
    mleft : bool (d, n) the missing rows go left, or None without missing values
    Cm : (s - k0, d, n) prefix sums of the missing rows' statistics, or None
    """
    min_weight, msl, _max_depth = limits
    min_w = min_weight
    ok_r = valid & (sums.L_cnt >= msl) & (sums.R_cnt >= msl) & (sums.L_w >= min_w) & (sums.R_w >= min_w)
    gain = jnp.where(ok_r, _proxy_parts(sums.L_w, sums.L_k, cfg) + _proxy_parts(sums.R_w, sums.R_k, cfg),
                     _NEG)  # (d, n)
    mleft = None
    Cm = None
    if cfg.has_missing:
        is_m = (lay.codes_sorted == cfg.missing)
        Cm = prefix_sum(sums.G * is_m[None])
        Mtot = _at(Cm, lay.end_p - 1) - _at(Cm, lay.start_p - 1)
        Lm, Rm = sums.L + Mtot, sums.R - Mtot
        ok_m = valid & (Mtot[0] > 0) & (Lm[0] >= msl) & (Rm[0] >= msl) & (Lm[1] >= min_w) & (Rm[1] >= min_w)
        gain_m = jnp.where(ok_m, _proxy(Lm, cfg) + _proxy(Rm, cfg), _NEG)
        mleft = gain_m > gain
        gain = jnp.maximum(gain, gain_m)
    return gain, mleft, Cm


def _level_best(gain, can, lay: _Layout, cfg: CARTConfig):
    """Phase 7: the best split of every node: best feature per position (ties: lowest feature),
    then best position per node (ties: lowest position).

    Parameters
    ----------
    gain : (d, n) from :func:`_level_gains`
    can : bool (cap,) from :func:`_level_splittable`
    lay : _Layout of the level
    cfg : CARTConfig

    Returns
    -------
    split : bool (cap,) the node splits (before the capacity check)
    bp : int32 (cap,) the split's position (clipped into range)
    bf : int32 (cap,) its feature
    bthr : int32 (cap,) its code threshold
    """
    n = lay.p_idx.shape[0]
    cap = cfg.capacity
    pf = jnp.argmax(gain, axis=0).astype(jnp.int32)  # ties: lowest feature
    pg = jnp.max(gain, axis=0)  # (n,)
    best = jax.ops.segment_max(pg, lay.pos_node, cap)
    cand = (pg == best[lay.pos_node]) & (pg > _NEG)
    best_p = jax.ops.segment_min(jnp.where(cand, lay.p_idx, n), lay.pos_node, cap)  # ties: lowest position
    split = can & (best > _NEG) & (best_p < n)
    bp = jnp.minimum(best_p, n - 1)
    bf = pf[bp]
    bthr = lay.codes_sorted[bf, bp].astype(jnp.int32)
    return split, bp, bf, bthr


def _level_child_stats(sums: _Sums, Cm, mleft, bf, bp, state: GrowState, lay: _Layout, cfg: CARTConfig):
    """Phase 8: the statistics of every node's two children, read off the prefix sums of the
    chosen feature (missing rows moved left where that scored better).

    Parameters
    ----------
    sums : _Sums of the level
    Cm, mleft : from :func:`_level_gains`
    bf, bp : the chosen feature and position per node (:func:`_level_best`)
    state : GrowState at the start of the level
    lay : _Layout of the level
    cfg : CARTConfig

    Returns
    -------
    Lc, Rc : (s, cap) statistics of the left and right children
    bml : bool (cap,) the missing rows go left
    """
    C = sums.C
    d, n = lay.codes_sorted.shape
    cap = cfg.capacity
    seg_start, seg_end = state.seg_start, lay.seg_end
    dtype = C.dtype
    flat = C.reshape(C.shape[0], d * n)
    base = bf * n
    Cb = flat[:, base + bp]
    Cs = jnp.where(seg_start > 0, flat[:, base + jnp.maximum(seg_start - 1, 0)], 0)
    Ce = jnp.where(seg_end > 0, flat[:, base + jnp.clip(seg_end - 1, 0, n - 1)], 0)
    Lc, Rc = Cb - Cs, Ce - Cb  # (s - k0, cap)
    if cfg.positive_weights:
        n_l = (bp - seg_start + 1).astype(dtype)
        Lc = jnp.concatenate([n_l[None], Lc], 0)
        Rc = jnp.concatenate([(state.tree.count.astype(dtype) - n_l)[None], Rc], 0)
    if cfg.has_missing:
        bml = mleft[bf, bp]
        fm = Cm.reshape(C.shape[0], d * n)
        Mc = jnp.where(seg_end > 0, fm[:, base + jnp.clip(seg_end - 1, 0, n - 1)], 0) - jnp.where(
            seg_start > 0, fm[:, base + jnp.maximum(seg_start - 1, 0)], 0)
        Lc = jnp.where(bml[None], Lc + Mc, Lc)
        Rc = jnp.where(bml[None], Rc - Mc, Rc)
    else:
        bml = jnp.zeros(cap, bool)
    return Lc, Rc, bml


def _level_allocate(split, n_nodes, cfg: CARTConfig):
    """Phase 9: node slots for the children (capacity checked, never silently truncated).

    Parameters
    ----------
    split : bool (cap,) from :func:`_level_best`
    n_nodes : int32 () slots in use
    cfg : CARTConfig

    Returns
    -------
    split : bool (cap,) no node splits when the level overflows
    new_over : bool () the level needed more slots than the capacity
    lchild, rchild : int32 (cap,) the children's slots, -1 where the node does not split
    """
    cap = cfg.capacity
    n_split = jnp.sum(split)
    new_over = n_nodes + 2 * n_split > cap
    split = split & ~new_over
    rank = jnp.cumsum(split) - split
    lchild = jnp.where(split, n_nodes + 2 * rank, -1).astype(jnp.int32)
    rchild = jnp.where(split, lchild + 1, -1).astype(jnp.int32)
    return split, new_over, lchild, rchild


def _level_route(codes_t, row_node, split, bf, bthr, bml, lchild, rchild, cfg: CARTConfig):
    """Phase 10: send the rows of split nodes to their children.

    Parameters
    ----------
    codes_t : (d, n) codes of the stage's rows
    row_node : int32 (n,) node of each row
    split, bf, bthr, bml, lchild, rchild : the level's splits (per node)
    cfg : CARTConfig

    Returns
    -------
    goes_left : bool (n,) the row goes left at its node's split
    new_row_node : int32 (n,) node of each row after the level
    """
    n = row_node.shape[0]
    miss = cfg.missing
    rsplit = split[row_node]
    rf = bf[row_node]
    rc = codes_t[rf, jnp.arange(n)]
    goes_left = (rc <= bthr[row_node]) & (rc != miss) | ((rc == miss) & bml[row_node])
    new_row_node = jnp.where(rsplit, jnp.where(goes_left, lchild[row_node], rchild[row_node]), row_node)
    return goes_left, new_row_node


def _level_partition(order, goes_left, split, seg_start, lay: _Layout):
    """Phase 11: stably partition every feature's order within the split segments, so that each
    child's rows are contiguous and still sorted by code.

    Parameters
    ----------
    order : int32 (d, n) every feature's order
    goes_left : bool (n,) from :func:`_level_route`
    split : bool (cap,) from :func:`_level_allocate`
    seg_start : int32 (cap,) first position of each node
    lay : _Layout of the level

    Returns
    -------
    order : int32 (d, n) the partitioned orders
    n_left : int32 (cap,) rows going left per split node (0 elsewhere)
    """
    d, n = order.shape
    start_p, p_idx, seg_end = lay.start_p, lay.p_idx, lay.seg_end
    gl_pos = goes_left[order]  # (d, n)
    sp_pos = split[lay.pos_node]
    gl_int = gl_pos.astype(jnp.int32)
    E = prefix_sum(gl_int) - gl_int  # exclusive
    E_start = jnp.take(E, start_p, axis=1)
    rank_l = E - E_start
    E0 = E[0]
    n_left = jnp.take(E0, jnp.clip(seg_end - 1, 0, n - 1)) + jnp.take(gl_int[0], jnp.clip(seg_end - 1, 0, n - 1)) \
        - jnp.take(E0, jnp.clip(seg_start, 0, n - 1))
    n_left = jnp.where(split, n_left, 0)
    nl_p = n_left[lay.pos_node][None, :]
    off = p_idx[None, :] - start_p[None, :]
    newpos = jnp.where(sp_pos[None, :],
                       start_p[None, :] + jnp.where(gl_pos, rank_l, nl_p + off - rank_l), p_idx[None, :])
    flat_pos = (newpos + (jnp.arange(d, dtype=newpos.dtype) * n)[:, None]).reshape(d * n)
    order = jnp.zeros(d * n, order.dtype).at[flat_pos].set(order.reshape(d * n), unique_indices=True,
                                                            indices_are_sorted=False).reshape(d, n)
    return order, n_left


def _level_write(state: GrowState, split, bf, bthr, bml, lchild, rchild, Lc, Rc, n_left, cfg: CARTConfig,
                 y_shift, y_scale):
    """Phase 12: write the splits into the tree and the children's values and segments.

    Parameters
    ----------
    state : GrowState at the start of the level
    split, bf, bthr, bml, lchild, rchild : the level's splits (per node)
    Lc, Rc : (s, cap) the children's statistics (:func:`_level_child_stats`)
    n_left : int32 (cap,) rows going left per split node (:func:`_level_partition`)
    cfg : CARTConfig
    y_shift, y_scale : leaf values are ``mean(y) * y_scale + y_shift``

    Returns
    -------
    tree : Tree after the level
    new_start, new_len : int32 (cap,) every node's segment after the level
    is_new : bool (cap,) the new children (the nodes open at the next level)
    """
    tree, seg_start, seg_len = state.tree, state.seg_start, state.seg_len
    cap = cfg.capacity
    dtype = tree.weight.dtype
    idx_l = jnp.where(split, lchild, cap)  # out-of-range writes are dropped
    idx_r = jnp.where(split, rchild, cap)
    tot_new = jnp.zeros((cap, Lc.shape[0]), dtype).at[idx_l].set(Lc.T, mode="drop").at[idx_r].set(Rc.T, mode="drop")
    val_new = _node_value(tot_new, cfg, y_shift, y_scale).astype(dtype)
    child_depth = tree.depth + 1
    feature = jnp.where(split, bf, tree.feature)
    threshold = jnp.where(split, bthr, tree.threshold)
    missing_left = jnp.where(split, bml, tree.missing_left)
    depth = tree.depth.at[idx_l].set(child_depth, mode="drop").at[idx_r].set(child_depth, mode="drop")
    is_new = jnp.zeros(cap, bool).at[idx_l].set(True, mode="drop").at[idx_r].set(True, mode="drop")
    value = jnp.where(is_new[:, None], val_new, tree.value)
    weight = jnp.where(is_new, tot_new[:, 1].astype(dtype), tree.weight)
    count = jnp.where(is_new, jnp.round(tot_new[:, 0]).astype(jnp.int32), tree.count)
    new_start = seg_start.at[idx_l].set(seg_start, mode="drop").at[idx_r].set(seg_start + n_left, mode="drop")
    new_len = seg_len.at[idx_l].set(n_left, mode="drop").at[idx_r].set(seg_len - n_left, mode="drop")
    tree = Tree(feature, threshold, _merge(tree.left, split, lchild), _merge(tree.right, split, rchild),
                missing_left, value, weight, count, depth, tree.n_nodes + 2 * jnp.sum(split).astype(jnp.int32))
    return tree, new_start, new_len, is_new


def _level(state: GrowState, rows: _Rows, seed, limits, cfg: CARTConfig, y_shift, y_scale) -> GrowState:
    """One level of growth: every open node that can split is split at its best (feature, threshold).

    Parameters
    ----------
    state : GrowState at the start of the level
    rows : _Rows of the stage
    seed : uint32 the tree's seed (``max_features`` and extra-trees draws)
    limits : (minimum child weight, min_samples_leaf, max_depth), traced: changing them does
        not recompile
    cfg : CARTConfig
    y_shift, y_scale : leaf values are ``mean(y) * y_scale + y_shift``

    Returns
    -------
    GrowState after the level (the new children are the open nodes)
    """
    lay = _level_layout(state, rows.codes_t)
    sums = _level_sums(state, rows.stats, lay, cfg)
    can = _level_splittable(state, rows, sums.tot, limits, cfg)
    nxt_code, valid = _level_valid(lay, can, cfg)
    valid = _level_random(valid, nxt_code, lay, state.seg_start, seed, cfg)
    gain, mleft, Cm = _level_gains(valid, sums, lay, limits, cfg)
    split, bp, bf, bthr = _level_best(gain, can, lay, cfg)
    Lc, Rc, bml = _level_child_stats(sums, Cm, mleft, bf, bp, state, lay, cfg)
    split, new_over, lchild, rchild = _level_allocate(split, state.tree.n_nodes, cfg)
    goes_left, new_row_node = _level_route(rows.codes_t, state.row_node, split, bf, bthr, bml, lchild, rchild, cfg)
    order, n_left = _level_partition(state.order, goes_left, split, state.seg_start, lay)
    tree, new_start, new_len, is_new = _level_write(state, split, bf, bthr, bml, lchild, rchild, Lc, Rc, n_left,
                                                    cfg, y_shift, y_scale)
    return GrowState(tree, order, new_row_node, new_start, new_len, is_new, state.overflow | new_over,
                     state.level + 1)


def _merge(old, split, child):
    return jnp.where(split, child, old)


def _active(s: GrowState):
    """Positions (rows) in open nodes."""
    return jnp.sum(jnp.where(s.open, s.seg_len, 0))


def stage_sizes(n: int, block: int = 32, min_size: int = 1024, max_stages: int = 8) -> list[int]:
    """Working sizes of the successive growth stages: n rounded up to ``block``, then halving while
    the half is at least ``min_size``."""
    up = lambda v: -(-v // block) * block  # noqa: E731
    sizes = [up(n)]
    while len(sizes) < max_stages and sizes[-1] // 2 >= min_size:
        sizes.append(up(sizes[-1] // 2))
    return sizes


def _pad(state: GrowState, rows: _Rows, m: int, cfg: CARTConfig):
    """Append inert rows (code MISSING, zero statistics) up to ``m``; they join node 0."""
    d, n = state.order.shape
    k = m - n
    if k == 0:
        return state, rows
    extra = jnp.arange(n, m, dtype=jnp.int32)
    order = jnp.concatenate([state.order, jnp.broadcast_to(extra, (d, k))], axis=1)
    row_node = jnp.concatenate([state.row_node, jnp.zeros(k, jnp.int32)])
    # node 0's segment grows over the padding if it ends at n (root-only start), else the padding is
    # a closed segment of its own (node 0 is then an internal trunk node, never split again)
    ends = state.seg_start[0] + state.seg_len[0] == n
    seg_start = state.seg_start.at[0].set(jnp.where(ends, state.seg_start[0], n))
    seg_len = state.seg_len.at[0].set(jnp.where(ends, state.seg_len[0] + k, k))
    rows = _Rows(jnp.concatenate([rows.codes_t, jnp.full((d, k), cfg.missing, rows.codes_t.dtype)], axis=1),
                 jnp.concatenate([rows.stats, jnp.zeros((k, rows.stats.shape[1]), rows.stats.dtype)]),
                 jnp.concatenate([rows.y_rank, jnp.zeros(k, rows.y_rank.dtype)]))
    return state._replace(order=order, row_node=row_node, seg_start=seg_start, seg_len=seg_len), rows


def _compact(state: GrowState, rows: _Rows, h: int, cfg: CARTConfig):
    """Keep only the rows of open nodes (at most ``h``), renumbered; rows of finished leaves never move again.

    Active positions keep their relative order (so every open node's segment stays contiguous and
    sorted); the remaining ``h - active`` slots are inert padding rows in node 0's segment (node 0 is
    closed: compaction happens only after the root has split).
    """
    d, m = state.order.shape
    pos_node = state.row_node[state.order[0]]
    act_p = state.open[pos_node]
    q = prefix_sum(act_p.astype(jnp.int32)) - act_p  # new position of active positions
    act_r = state.open[state.row_node]
    cr = prefix_sum(act_r.astype(jnp.int32)) - act_r  # new row id of active rows
    a = jnp.sum(act_r.astype(jnp.int32)).astype(jnp.int32)
    src = jnp.full(h, m, jnp.int32).at[jnp.where(act_r, cr, h)].set(jnp.arange(m, dtype=jnp.int32), mode="drop")
    real = src < m
    srcc = jnp.minimum(src, m - 1)
    codes_t = jnp.where(real[None], rows.codes_t[:, srcc], cfg.missing)
    stats = jnp.where(real[:, None], rows.stats[srcc], 0)
    y_rank = jnp.where(real, rows.y_rank[srcc], 0)
    row_node = jnp.where(real, state.row_node[srcc], 0)
    dest = jnp.where(act_p, q, h)
    new_rows = cr[state.order]  # (d, m)
    base = jnp.broadcast_to(jnp.arange(h, dtype=jnp.int32), (d, h))
    order = jax.vmap(lambda b, v: b.at[dest].set(v, mode="drop"))(base, new_rows)
    qs = jnp.take(q, jnp.clip(state.seg_start, 0, m - 1))
    seg_start = jnp.where(state.open, qs, 0).at[0].set(a)
    seg_len = jnp.where(state.open, state.seg_len, 0).at[0].set(h - a)
    st = state._replace(order=order, row_node=row_node, seg_start=seg_start.astype(jnp.int32),
                        seg_len=seg_len.astype(jnp.int32))
    return st, _Rows(codes_t, stats, y_rank)


def stage_floor(min_samples_leaf: int) -> int:
    """Smallest working size worth a growth stage of its own: ``1024 * min_samples_leaf``.

    Every stage is a loop compiled for its shapes, so each costs compilation time and compiler
    memory; with large leaves few rows stay in open nodes for long, and the late stages save
    less than they cost.  Measured on one branch of 23,000 rows padded to 31,744, 8 trees,
    ``min_samples_leaf=20`` (``docs/lab-notes/distributed.md``, third round): five stages took 10.95 s to compile and run
    and 1,063 MiB of peak memory, one stage 3.95 s and 605 MiB, and later fits ran in 1.46 s
    against 1.3 s.  With ``min_samples_leaf=1`` the stages stay as they were (floor 1024).
    """
    return 1024 * max(1, int(min_samples_leaf))


def grow(state: GrowState, prep: Prepared, stats, y_rank, seed, limits, cfg: CARTConfig, y_shift, y_scale,
         max_levels: int = 10_000, n_stages: int = 8) -> GrowState:
    """Split open nodes level by level until none can split (or capacity is reached).

    Growth runs in stages of halving working size: once the rows of open nodes fit in half the
    current size, they are compacted (rows of finished leaves never change again) and growth goes on
    in a loop compiled for the smaller shapes, at most ``n_stages`` of them (:func:`stage_floor`).
    The returned state's ``tree``, ``open``, ``overflow`` and ``level`` are final; its row arrays
    refer to the last stage's renumbered rows.
    """
    d, n = state.order.shape
    sizes = stage_sizes(n)[:n_stages]
    rows = _Rows(prep.codes_t, stats, y_rank)
    state, rows = _pad(state, rows, sizes[0], cfg)
    for k, m in enumerate(sizes):
        if k > 0:
            state, rows = _compact(state, rows, m, cfg)
        nxt = sizes[k + 1] if k + 1 < len(sizes) else -1

        def cond(s, nxt=nxt):
            return jnp.any(s.open) & ~s.overflow & (s.level < max_levels) & (_active(s) > nxt)

        body = partial(_level, rows=rows, seed=seed, limits=limits, cfg=cfg, y_shift=y_shift,
                       y_scale=y_scale)
        state = jax.lax.while_loop(cond, body, state)
    return state


@partial(jax.jit, static_argnames=("cfg", "n_stages"))
def _fit_batch(prep: Prepared, y, y_rank, weights, seeds, y_shift, y_scale, limits, cfg: CARTConfig, trunk=None,
               trunk_row_node=None, n_stages: int = 8):
    dtype = weights.dtype
    min_weight_fraction, msl, max_depth = limits

    def one(w, seed):
        stats = row_stats(y, w, cfg, dtype)
        lim = (min_weight_fraction * jnp.sum(w), msl, max_depth)
        st = init_state(prep, stats, cfg, dtype, y_shift, y_scale, trunk, trunk_row_node)
        st = grow(st, prep, stats, y_rank, seed, lim, cfg, y_shift, y_scale, n_stages=n_stages)
        return st.tree, st.overflow

    if weights.shape[0] == 1:  # one tree per call (the usual case on CPU): no batching to trace or run
        return jax.tree_util.tree_map(lambda a: a[None], one(weights[0], seeds[0]))
    return jax.vmap(one)(weights, seeds)


def response_ranks(y, cfg: CARTConfig) -> jax.Array:
    """int32 rank of each response among the distinct values (class codes as they are): a node whose
    positive-weight rows all share one rank is pure and is not split."""
    if cfg.n_classes:
        return jnp.asarray(y).astype(jnp.int32)
    return jnp.asarray(np.unique(np.asarray(y), return_inverse=True)[1].reshape(-1).astype(np.int32))


def fit_trees(codes_or_prep, y, weights, cfg: CARTConfig, *, seeds=None, trunk: Tree | None = None,
              trunk_row_node=None, y_shift=0.0, y_scale=1.0, presorted: bool = False, y_rank=None) -> Tree:
    """Fit one CART tree per row of ``weights`` in one compiled call.

    Parameters
    ----------
    codes_or_prep : uint array (n, d) of feature codes, or a :class:`Prepared`
    y : float (n,) responses (regression, ideally standardised; see ``y_shift``/``y_scale``)
        or int (n,) class codes in ``[0, n_classes)``
    weights : float (B, n) row weights, one row per tree (the dtype sets the precision)
    cfg : CARTConfig
    seeds : uint32 (B,) randomness for ``max_features``/``extra`` (default 0..B-1)
    trunk, trunk_row_node : grow from a given trunk tree (its leaves open) with each
        row starting in its trunk leaf (empirical Bayesian forests)
    y_shift, y_scale : leaf values are ``mean(y) * y_scale + y_shift``
    presorted : the prepared order is already sorted by trunk leaf (:func:`sort_by_trunk`)
    y_rank : :func:`response_ranks` of ``y`` when already computed (forests compute it once)

    Returns
    -------
    Tree with batch shape (B,)

    Raises
    ------
    CapacityError if a tree needed more than ``cfg.capacity`` nodes.
    """
    prep = codes_or_prep if isinstance(codes_or_prep, Prepared) else prepare_codes(codes_or_prep)
    if trunk_row_node is not None and not presorted:
        prep = sort_by_trunk(prep, trunk_row_node)
    weights = jnp.asarray(weights)
    B = weights.shape[0]
    y = jnp.asarray(y)
    if y_rank is None:
        y_rank = response_ranks(y, cfg)
    if not cfg.n_classes:
        y = y.astype(weights.dtype)
    if seeds is None:
        seeds = jnp.arange(B, dtype=jnp.uint32)
    # leaf-size and depth limits are traced values: one compilation serves every setting of them
    static_cfg = dataclasses.replace(cfg, min_samples_leaf=1, max_depth=None, min_weight_fraction_leaf=0.0)
    limits = (jnp.asarray(cfg.min_weight_fraction_leaf, weights.dtype), jnp.asarray(cfg.min_samples_leaf, weights.dtype),
              jnp.asarray(2**30 if cfg.max_depth is None else cfg.max_depth, jnp.int32))
    trees, over = _fit_batch(prep, y, y_rank, weights, jnp.asarray(seeds, jnp.uint32),
                             jnp.asarray(y_shift, weights.dtype), jnp.asarray(y_scale, weights.dtype), limits,
                             static_cfg, trunk, trunk_row_node,
                             n_stages=len(stage_sizes(prep.codes_t.shape[1], min_size=stage_floor(cfg.min_samples_leaf))))
    if bool(jnp.any(over)):
        raise CapacityError(
            f"a tree needed more than capacity={cfg.capacity} node slots; raise the capacity "
            f"(max_nodes=...), or limit the tree with max_depth / a larger min_samples_leaf"
        )
    return mark_unused(trees)
