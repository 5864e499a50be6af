"""Symbols and split tables of the BCART-PCFG grammar.

The grammar of Sullivan et al. has one symbol per *set of rows* that an
axis-aligned box can cut out of the training data (boxes holding the same rows
are one symbol) and, for each symbol, one production per *partition* of its rows
into two non-empty parts by an axis-aligned threshold (thresholds giving the same
partition are one split).  This module enumerates the symbols and their splits
and returns a :class:`PCFGStructure`: flat arrays that the dynamic programmes of
:mod:`bayestrees.inference.pcfg.dp` consume.

Two exact builders produce the same structure (up to symbol numbering):

``build_box_structure``
    Dense: enumerates every box of the binned feature space (a box is one code
    interval ``[lo, hi]`` per feature, ``prod_j B_j (B_j + 1) / 2`` boxes), sums
    sufficient statistics over boxes with prefix sums, shrinks every box to the
    bounding box of its rows ("tight" box) and keeps the tight non-empty boxes
    as symbols.  Cost grows with the number of boxes.
``build_row_structure``
    Sparse: starts from the set of all rows and splits recursively, keeping a
    hash of the row sets seen.  Cost grows with the number of distinct row sets,
    which is what binary or high-dimensional data needs (20 binary features give
    ``3**20`` boxes but far fewer row sets).

Canonical split (used by both builders and by prediction)
    Among all (feature, threshold) pairs giving one partition ``{L, R}`` of a
    symbol's rows, the split kept is the one on the *smallest feature index*
    with threshold ``t = max code of L on that feature`` (``L`` = the rows with
    ``code <= t``).  A query point is routed by that threshold, so a point
    falling in a gap between training codes goes right.

Split slots
    Slot ``k`` is the fixed pair ``(slot_feature[k], slot_threshold[k])``; there
    are ``S = sum_j (B_j - 1)`` slots.  ``left[m, k]`` / ``right[m, k]`` are the
    symbol ids of the children of symbol ``m`` for slot ``k``, or the sentinel
    ``M`` (an always-empty symbol) when the slot is not a canonical split of
    ``m``.  Row ``M + 1`` is a scratch row used by padding.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PCFGStructure", "build_box_structure", "build_row_structure", "estimate_box_memory",
           "n_boxes", "DEFAULT_MEMORY_BUDGET"]

#: default memory budget of the dense builder, in bytes (4 GB)
DEFAULT_MEMORY_BUDGET = 4 * 1024**3


@dataclass
class PCFGStructure:
    """Symbols (row sets) and canonical splits of the grammar for one data set.

    Attributes (``M`` symbols, ``S`` split slots, ``K`` statistics)
    ----------
    stats : float64[M + 2, K]
        Sufficient statistics of each symbol's rows (class counts, or
        ``(n, sum y, sum y^2)``); rows ``M`` (sentinel) and ``M + 1`` (scratch) are 0.
    left, right : int32[M + 2, S]
        Child symbols per split slot, ``M`` where the slot is not a split.
    slot_feature, slot_threshold : int32[S]
        The split "code[slot_feature] <= slot_threshold" of each slot.
    chunks : int32[n_chunks, C]
        Symbol ids in an order where every symbol comes after its children,
        padded with ``M + 1``; a chunk never holds a symbol and its child.
    lower, upper : int32[M, d]
        Bounding box (tight code interval per feature) of each symbol's rows.
    count : int64[M + 2]
        Number of rows of each symbol (0 on the sentinel and scratch rows).
    root : int
        Symbol of all rows.
    method : str
        ``"box"`` or ``"row"``.
    n_boxes : int
        Number of boxes enumerated (dense builder) or 0.
    """

    stats: np.ndarray
    left: np.ndarray
    right: np.ndarray
    slot_feature: np.ndarray
    slot_threshold: np.ndarray
    chunks: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    count: np.ndarray
    root: int
    method: str
    n_boxes: int = 0

    @property
    def n_symbols(self) -> int:
        return int(self.stats.shape[0] - 2)

    @property
    def n_slots(self) -> int:
        return int(self.left.shape[1])

    @property
    def n_splits(self) -> int:
        """Number of (symbol, split) productions."""
        return int(np.sum(self.left[: self.n_symbols] < self.n_symbols))

    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in (self.stats, self.left, self.right, self.chunks,
                                          self.lower, self.upper)))


def n_boxes(n_bins) -> int:
    """Number of boxes ``prod_j B_j (B_j + 1) / 2`` for bin counts ``n_bins``."""
    out = 1
    for b in n_bins:
        out *= int(b) * (int(b) + 1) // 2
    return out


def estimate_box_memory(n_bins, n_stats: int) -> int:
    """Peak bytes the dense builder needs before it knows the number of symbols.

    Per box: ``n_stats + 1`` float64 statistics, their transformed copy during the
    prefix-sum passes, and about five int32 index arrays (tight box, compact ids,
    bounds), i.e. ``16 (n_stats + 1) + 24`` bytes.
    """
    return n_boxes(n_bins) * (16 * (int(n_stats) + 1) + 24)


def _chunk_order(levels: np.ndarray, chunk: int | None = None) -> np.ndarray:
    """Pad symbols grouped by level into chunks that never straddle two levels."""
    m = levels.shape[0]
    order = np.argsort(levels, kind="stable")
    lv = levels[order]
    uniq, starts, counts = np.unique(lv, return_index=True, return_counts=True)
    if chunk is None:
        chunk = int(max(64, min(8192, 2 ** int(np.ceil(np.log2(max(1, m / max(1, len(uniq)))))))))
    rows = []
    for s, c in zip(starts, counts):
        ids = order[s: s + c]
        pad = (-c) % chunk
        ids = np.concatenate([ids, np.full(pad, m + 1, np.int64)])
        rows.append(ids.reshape(-1, chunk))
    return np.concatenate(rows).astype(np.int32)


def _interval_sums(h: np.ndarray, axis: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sums of ``h`` over code intervals ``[lo_p, hi_p]`` along ``axis`` (prefix sums)."""
    pad = [(0, 0)] * h.ndim
    pad[axis] = (1, 0)
    c = np.pad(np.cumsum(h, axis=axis), pad)
    return np.take(c, hi + 1, axis=axis) - np.take(c, lo, axis=axis)


def _pairs(b: int):
    lo, hi = np.triu_indices(b)
    return lo.astype(np.int64), hi.astype(np.int64)


def _pair_index(lo, hi, b):
    lo = np.asarray(lo, np.int64)
    return lo * b - lo * (lo - 1) // 2 + (np.asarray(hi, np.int64) - lo)


def _split_slots(nb: list) -> tuple[np.ndarray, np.ndarray]:
    """The split slots of bin counts ``nb``: slot ``k`` is "code[slot_feature[k]] <= slot_threshold[k]".

    Parameters
    ----------
    nb : list of int, the bin count of every feature

    Returns
    -------
    slot_feature, slot_threshold : int32[S], ``S = sum_j (nb[j] - 1)``, feature by feature
    """
    slot_feature = np.concatenate([np.full(b - 1, j) for j, b in enumerate(nb)]).astype(np.int32)
    slot_threshold = np.concatenate([np.arange(b - 1) for b in nb]).astype(np.int32)
    return slot_feature, slot_threshold


# -- the dense (box) builder, phase by phase


def _check_box_budget(nb: list, k_stats: int, memory_budget: int | None) -> None:
    """Refuse, before any allocation, a box enumeration whose estimate exceeds the budget.

    Parameters
    ----------
    nb : list of int, bin counts
    k_stats : number of statistics per row
    memory_budget : bytes, or None (no check)

    Raises
    ------
    ValueError
        :func:`estimate_box_memory` exceeds ``memory_budget``.
    """
    if memory_budget is None:
        return
    need = estimate_box_memory(nb, k_stats)
    if need > memory_budget:
        raise ValueError(
            f"the exact box programme needs about {need / 1e9:.2f} GB for {n_boxes(nb):,} boxes "
            f"({len(nb)} features with bin counts {nb}), over the memory budget of {memory_budget / 1e9:.2f} GB; "
            "reduce max_bins or the number of features, raise memory_budget, or use method='row'"
        )


def _box_numbering(nb: list) -> tuple[list, np.ndarray]:
    """How boxes are numbered: a box is one code interval (pair) per feature, in row-major order.

    Parameters
    ----------
    nb : list of int, bin counts

    Returns
    -------
    pairs : list of (lo, hi) int64 arrays, the intervals ``lo <= hi`` of every feature (:func:`_pairs`)
    strides : int64[d], the box number of pair ``p_j`` of every feature is ``sum_j p_j strides[j]``
    """
    d = len(nb)
    pairs = [_pairs(b) for b in nb]
    psz = [len(p[0]) for p in pairs]
    strides = np.ones(d, np.int64)
    for j in range(d - 2, -1, -1):
        strides[j] = strides[j + 1] * psz[j + 1]
    return pairs, strides


def _box_sums(codes: np.ndarray, nb: list, stats: np.ndarray, pairs: list):
    """The row count and statistics of every box, from cell histograms and prefix sums.

    Parameters
    ----------
    codes : int64[n, d], nb : bin counts, stats : float64[n, K]
    pairs : intervals of every feature (:func:`_box_numbering`)

    Returns
    -------
    count : float64[n_boxes], rows in each box
    box_stats : float64[n_boxes, K], statistics summed over each box's rows
    occ_cells : float64[*nb], rows in each cell (one code per feature)
    """
    n = codes.shape[0]
    k_stats = stats.shape[1]
    nbox = n_boxes(nb)
    flat_cell = np.ravel_multi_index(codes.T, nb)
    ncell = int(np.prod(nb))
    hist = np.zeros((ncell, k_stats + 1))
    np.add.at(hist, flat_cell, np.concatenate([np.ones((n, 1)), stats], axis=1))
    hist = hist.reshape(*nb, k_stats + 1)
    occ_cells = hist[..., 0]
    box = hist
    for j in range(len(nb)):
        box = _interval_sums(box, j, *pairs[j])
    box = box.reshape(nbox, k_stats + 1)
    count = box[:, 0].copy()
    box_stats = box[:, 1:]
    return count, box_stats, occ_cells


def _tight_boxes(occ_cells: np.ndarray, nb: list, pairs: list, strides: np.ndarray) -> np.ndarray:
    """The tight box of every box: per feature, its first and last occupied code inside the interval.

    Parameters
    ----------
    occ_cells : rows in each cell (:func:`_box_sums`)
    nb, pairs, strides : bin counts and box numbering (:func:`_box_numbering`)

    Returns
    -------
    int64[n_boxes], the number of every box's tight box (of an empty box: a box of its own
    numbering that is never a symbol)
    """
    d = len(nb)
    nbox = n_boxes(nb)
    tight_pair = np.zeros(nbox, np.int64)
    for k in range(d):
        occ = occ_cells
        for j in range(d):
            if j != k:
                occ = _interval_sums(occ, j, *pairs[j])
        occ = occ > 0
        shape = [1] * d
        shape[k] = nb[k]
        idx = np.arange(nb[k]).reshape(shape)
        nxt = np.flip(np.minimum.accumulate(np.flip(np.where(occ, idx, nb[k]), k), axis=k), k)
        prv = np.maximum.accumulate(np.where(occ, idx, -1), axis=k)
        tlo = np.take(nxt, pairs[k][0], axis=k)
        thi = np.take(prv, pairs[k][1], axis=k)
        tp = _pair_index(np.minimum(tlo, nb[k] - 1), np.maximum(thi, np.minimum(tlo, nb[k] - 1)), nb[k])
        tight_pair += tp.reshape(nbox) * strides[k]
        del occ, nxt, prv, tlo, thi, tp
    return tight_pair


def _box_symbols(count: np.ndarray, tight_pair: np.ndarray, nb: list, memory_budget: int | None):
    """The symbols (tight non-empty boxes) and every box's symbol.

    Parameters
    ----------
    count : rows in each box (:func:`_box_sums`)
    tight_pair : every box's tight box (:func:`_tight_boxes`)
    nb : bin counts
    memory_budget : bytes, or None (no check)

    Returns
    -------
    sym_nat : int64[M], the box number of every symbol (increasing)
    tcomp : int32[n_boxes], the symbol of every box's rows (``M`` for an empty box)

    Raises
    ------
    ValueError
        The split table of the ``M`` symbols would exceed ``memory_budget``.
    """
    nbox = count.shape[0]
    nonempty = count > 0
    ids = np.arange(nbox, dtype=np.int64)
    is_sym = nonempty & (tight_pair == ids)
    sym_nat = ids[is_sym]
    m = sym_nat.shape[0]
    s_slots = sum(b - 1 for b in nb)
    if memory_budget is not None:
        need = m * s_slots * 8 + nbox * 8
        if need > memory_budget:
            raise ValueError(
                f"the split table of {m:,} symbols x {s_slots} split slots needs {need / 1e9:.2f} GB "
                f"({len(nb)} features with bin counts {nb}), over the memory budget of {memory_budget / 1e9:.2f} GB; "
                "reduce max_bins or the number of features, or raise memory_budget"
            )
    comp = np.full(nbox, m, np.int64)
    comp[sym_nat] = np.arange(m)
    tcomp = np.where(nonempty, comp[tight_pair], m).astype(np.int32)
    return sym_nat, tcomp


def _decode_boxes(sym_nat: np.ndarray, pairs: list, strides: np.ndarray):
    """The code intervals of the symbols' boxes.

    Parameters
    ----------
    sym_nat : box numbers (:func:`_box_symbols`)
    pairs, strides : box numbering (:func:`_box_numbering`)

    Returns
    -------
    lower, upper : int64[M, d], each symbol's tight code interval per feature
    pidx : int64[M, d], the interval's pair index per feature
    """
    m, d = sym_nat.shape[0], strides.shape[0]
    rem = sym_nat.copy()
    lower = np.zeros((m, d), np.int64)
    upper = np.zeros((m, d), np.int64)
    pidx = np.zeros((m, d), np.int64)
    for j in range(d):
        p = rem // strides[j]
        rem = rem - p * strides[j]
        pidx[:, j] = p
        lower[:, j] = pairs[j][0][p]
        upper[:, j] = pairs[j][1][p]
    return lower, upper, pidx


def _box_batch_children(sym_nat, lower, upper, pidx, tcomp, m: int, nb: list, strides, slot_feature,
                        slot_threshold):
    """The child symbols of a batch of ``c`` symbols at every split slot.

    Parameters
    ----------
    sym_nat : int64[c], lower, upper, pidx : int64[c, d]
        The batch's box numbers, tight intervals and pair indices (:func:`_decode_boxes`).
    tcomp : every box's symbol (:func:`_box_symbols`)
    m : number of symbols (the sentinel symbol)
    nb, strides : bin counts and box numbering (:func:`_box_numbering`)
    slot_feature, slot_threshold : the split slots (:func:`_split_slots`)

    Returns
    -------
    t : int32[1, S], the slot thresholds
    tl, tr : int32[c, S], the symbols of the rows left and right of each slot's threshold
        (``m`` where the threshold does not cut the symbol's interval)
    valid : bool[c, S], the threshold cuts the interval and both sides hold rows
    """
    lo = lower[:, slot_feature]          # (c, S)
    hi = upper[:, slot_feature]
    t = slot_threshold[None, :]
    inside = (lo <= t) & (t < hi)
    bsz = np.asarray(nb)[slot_feature][None, :]
    pcur = pidx[:, slot_feature]
    st = strides[slot_feature][None, :]
    nat = sym_nat[:, None]
    lnat = nat + (_pair_index(lo, np.maximum(t, lo), bsz) - pcur) * st
    rnat = nat + (_pair_index(np.minimum(t + 1, hi), hi, bsz) - pcur) * st
    lnat = np.where(inside, lnat, 0)
    rnat = np.where(inside, rnat, 0)
    tl = np.where(inside, tcomp[lnat], m)
    tr = np.where(inside, tcomp[rnat], m)
    valid = inside & (tl < m) & (tr < m)
    return t, tl, tr, valid


def _canonical(valid, t, tl, tr, lo_ext, hi_ext, slot_feature):
    """Keep only the canonical splits (see the module notes) among the valid ones.

    Parameters
    ----------
    valid : bool[c, S], t : int32[1, S], tl, tr : int32[c, S]
        From :func:`_box_batch_children`.
    lo_ext, hi_ext : int64[M + 1, d]
        Every symbol's tight interval, and an empty one (lo 0, hi -1) for the sentinel ``M``.
    slot_feature : int32[S]

    Returns
    -------
    bool[c, S]
    """
    d = lo_ext.shape[1]
    # within-feature canonical: t is the largest code of L on the split feature
    valid &= np.take_along_axis(hi_ext[tl], slot_feature[None, :, None].repeat(tl.shape[0], 0),
                                axis=2)[..., 0] == t
    # cross-feature canonical: no smaller feature separates L from R
    llo, lhi, rlo, rhi = lo_ext[tl], hi_ext[tl], lo_ext[tr], hi_ext[tr]   # (c, S, d)
    sep = (lhi < rlo) | (rhi < llo)
    earlier = np.arange(d)[None, None, :] < slot_feature[None, :, None]
    valid &= ~np.any(sep & earlier, axis=2)
    return valid


def _box_split_table(sym_nat, tcomp, lower, upper, pidx, nb: list, strides, slot_feature, slot_threshold):
    """The split table of the symbols, in batches of about two million (symbol, slot, feature) entries.

    Parameters
    ----------
    sym_nat, tcomp : symbols (:func:`_box_symbols`)
    lower, upper, pidx : their intervals (:func:`_decode_boxes`)
    nb, strides : bin counts and box numbering
    slot_feature, slot_threshold : the split slots

    Returns
    -------
    left, right : int32[M + 2, S], the children per slot (``M`` where the slot is not a split)
    """
    m, d = lower.shape
    s_slots = slot_feature.shape[0]
    left = np.full((m + 2, s_slots), m, np.int32)
    right = np.full((m + 2, s_slots), m, np.int32)
    step = max(1, 2_000_000 // max(1, s_slots * d))
    lo_ext = np.concatenate([lower, np.zeros((1, d), np.int64)])
    hi_ext = np.concatenate([upper, np.full((1, d), -1, np.int64)])
    for a in range(0, m, step):
        b = min(m, a + step)
        t, tl, tr, valid = _box_batch_children(sym_nat[a:b], lower[a:b], upper[a:b], pidx[a:b], tcomp, m, nb,
                                               strides, slot_feature, slot_threshold)
        valid = _canonical(valid, t, tl, tr, lo_ext, hi_ext, slot_feature)
        left[a:b] = np.where(valid, tl, m)
        right[a:b] = np.where(valid, tr, m)
    return left, right


def build_box_structure(codes: np.ndarray, n_bins, stats: np.ndarray, *,
                        memory_budget: int | None = DEFAULT_MEMORY_BUDGET,
                        chunk: int | None = None) -> PCFGStructure:
    """Dense builder over every box of the binned feature space.

    Parameters
    ----------
    codes : int[n, d]
        Bin codes, ``0 <= codes[:, j] < n_bins[j]``.
    n_bins : int[d]
    stats : float[n, K]
        Per-row sufficient statistics (one-hot classes or ``(1, y, y^2)``).
    memory_budget : int or None
        Bytes; a :class:`ValueError` is raised *before any allocation* when the
        estimate (:func:`estimate_box_memory`), or after the symbol count is
        known the split table, exceeds it.  ``None`` disables the check.

    Returns
    -------
    PCFGStructure
    """
    codes = np.asarray(codes, np.int64)
    nb = [int(b) for b in n_bins]
    stats = np.asarray(stats, np.float64)
    _check_box_budget(nb, stats.shape[1], memory_budget)
    pairs, strides = _box_numbering(nb)
    count, box_stats, occ_cells = _box_sums(codes, nb, stats, pairs)
    sym_nat, tcomp = _box_symbols(count, _tight_boxes(occ_cells, nb, pairs, strides), nb, memory_budget)
    lower, upper, pidx = _decode_boxes(sym_nat, pairs, strides)
    slot_feature, slot_threshold = _split_slots(nb)
    left, right = _box_split_table(sym_nat, tcomp, lower, upper, pidx, nb, strides, slot_feature, slot_threshold)
    m = sym_nat.shape[0]
    sym_stats = np.zeros((m + 2, stats.shape[1]))
    sym_stats[:m] = box_stats[sym_nat]
    levels = np.sum(upper - lower, axis=1)
    root = int(tcomp[int(sum((b - 1) * strides[j] for j, b in enumerate(nb)))])  # the full box
    return PCFGStructure(stats=sym_stats, left=left, right=right, slot_feature=slot_feature,
                         slot_threshold=slot_threshold, chunks=_chunk_order(levels, chunk),
                         lower=lower.astype(np.int32), upper=upper.astype(np.int32),
                         count=np.concatenate([count[sym_nat], [0, 0]]).astype(np.int64), root=root,
                         method="box", n_boxes=n_boxes(nb))


# -- the sparse (row-set) builder, phase by phase


def _combine_hash(h1, h2):
    """Mix the two float64 hash sums of a row set into one uint64 hash."""
    with np.errstate(over="ignore"):
        return h1.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + h2.astype(np.uint64)


class _RowSets:
    """The row sets (symbols) found so far: their hashes (sorted) with their ids, and their row
    masks packed in id order.

    Parameters
    ----------
    h_root : uint64[1], the hash of the set of all rows (symbol 0)
    full : bool[1, n], the mask of all rows
    max_symbols : int or None, the most symbols allowed
    d : number of features (for the error message)
    """

    def __init__(self, h_root, full, max_symbols: int | None, d: int):
        self.known_h = h_root.copy()          # sorted hashes
        self.known_id = np.zeros(1, np.int64)
        self.packed = [np.packbits(full, axis=1)]
        self.n_sym = 1
        self.max_symbols = max_symbols
        self.n, self.d = full.shape[1], d

    def unseen(self, uh, first):
        """The hashes of ``uh`` (sorted, unique) not known yet, and their entries of ``first``."""
        pos = np.searchsorted(self.known_h, uh)
        found = (pos < self.known_h.shape[0]) & (self.known_h[np.minimum(pos, self.known_h.shape[0] - 1)] == uh)
        return uh[~found], first[~found]

    def add(self, new_h, new_masks):
        """Register new row sets (hashes ``new_h``, bool masks ``new_masks``); returns their ids.

        Raises
        ------
        ValueError
            More than ``max_symbols`` symbols.
        """
        new_id = self.n_sym + np.arange(new_h.shape[0])
        self.n_sym += new_h.shape[0]
        if self.max_symbols is not None and self.n_sym > self.max_symbols:
            raise ValueError(
                f"the row programme found more than {self.max_symbols:,} symbols (row sets) for n={self.n} rows "
                f"and {self.d} features; reduce the rows, features or bins, or raise max_symbols"
            )
        self.packed.append(np.packbits(new_masks, axis=1))
        self.known_h = np.concatenate([self.known_h, new_h])
        self.known_id = np.concatenate([self.known_id, new_id])
        o = np.argsort(self.known_h, kind="stable")
        self.known_h, self.known_id = self.known_h[o], self.known_id[o]
        return new_id

    def ids(self, h):
        """The ids of known hashes ``h``."""
        return self.known_id[np.searchsorted(self.known_h, h)]


def _row_partitions(fm, gl_f, at_f, rv):
    """The canonical partitions of a batch of row sets at every slot, with the hashes of their parts.

    Parameters
    ----------
    fm : bool[b, n], the batch's row masks
    gl_f, at_f : float64[n, S], each row goes left at each slot / has the slot's threshold code
    rv : float64[n, 2], the random 26-bit row keys of the two hash components

    Returns
    -------
    valid : bool[b, S], the slot splits the row set, canonically (first slot of its partition)
    hl, hr : uint64[b, S], hashes of the left and right parts
    """
    ff = fm.astype(np.float64)
    n_left = ff @ gl_f                                               # (b, S)
    n_all = ff.sum(1)[:, None]
    canon = (ff @ at_f) > 0                                          # t is a code of N's rows
    valid = (n_left > 0) & (n_left < n_all) & canon
    h1 = (ff * rv[:, 0]) @ gl_f
    h2 = (ff * rv[:, 1]) @ gl_f
    f1 = ff @ rv[:, 0]
    f2 = ff @ rv[:, 1]
    hl = _combine_hash(h1, h2)
    hr = _combine_hash(f1[:, None] - h1, f2[:, None] - h2)
    key = np.where(valid, np.minimum(hl, hr), np.uint64(0))
    # first occurrence of each partition in slot order (smallest feature)
    order = np.argsort(key, axis=1, kind="stable")
    ks = np.take_along_axis(key, order, 1)
    dup_sorted = np.zeros_like(ks, bool)
    dup_sorted[:, 1:] = ks[:, 1:] == ks[:, :-1]
    dup = np.zeros_like(dup_sorted)
    np.put_along_axis(dup, order, dup_sorted, 1)
    valid &= ~dup
    return valid, hl, hr


def _row_children(sets: _RowSets, fm, valid, hl, hr, go_left):
    """Look up (and register, when new) the children of a batch of row sets.

    Parameters
    ----------
    sets : _RowSets, updated in place
    fm : bool[b, n], the batch's row masks
    valid, hl, hr : from :func:`_row_partitions`
    go_left : bool[S, n], each row goes left at each slot

    Returns
    -------
    lt, rt : int64[b, S], the children's ids (-1 where the slot is not a split)
    new_masks, new_id : the masks and ids of the new row sets (None when there are none)
    """
    b, s_slots = valid.shape
    bi, si = np.nonzero(valid)
    ch = np.concatenate([hl[bi, si], hr[bi, si]])
    side = np.concatenate([np.ones(len(bi), bool), np.zeros(len(bi), bool)])
    cb = np.concatenate([bi, bi])
    cs = np.concatenate([si, si])
    uh, first = np.unique(ch, return_index=True)
    new_h, nf = sets.unseen(uh, first)
    new_masks = new_id = None
    if new_h.shape[0]:
        new_masks = fm[cb[nf]] & np.where(side[nf][:, None], go_left[cs[nf]], ~go_left[cs[nf]])
        new_id = sets.add(new_h, new_masks)
    ids = sets.ids(ch)
    lt = np.full((b, s_slots), -1, np.int64)
    rt = np.full((b, s_slots), -1, np.int64)
    k = len(bi)
    lt[bi, si] = ids[:k]
    rt[bi, si] = ids[k:]
    return lt, rt, new_masks, new_id


def _row_symbols(codes, slot_feature, slot_threshold, max_symbols: int | None, batch_elems: int, seed: int):
    """Every row set reachable by splitting, frontier by frontier, and its children per slot.

    Parameters
    ----------
    codes : int64[n, d]
    slot_feature, slot_threshold : the split slots (:func:`_split_slots`)
    max_symbols, batch_elems, seed : as in :func:`build_row_structure`

    Returns
    -------
    sets : _RowSets, every symbol (``sets.n_sym`` of them, ``sets.packed`` their masks)
    sym_ids, lefts, rights : lists of the symbols of each batch and their children per slot
        (int64[b, S], -1 where the slot is not a split)
    """
    n, d = codes.shape
    s_slots = len(slot_feature)
    go_left = codes[:, slot_feature].T <= slot_threshold[:, None]          # (S, n)
    at_t = codes[:, slot_feature].T == slot_threshold[:, None]             # (S, n)
    # two exact float64 hash components (random 26-bit row keys; sums stay below 2^53)
    rv = np.random.default_rng(seed).integers(0, 1 << 26, size=(n, 2)).astype(np.float64)
    gl_f = go_left.T.astype(np.float64)                                     # (n, S)
    at_f = at_t.T.astype(np.float64)
    full = np.ones((1, n), bool)
    sets = _RowSets(_combine_hash(*rv.sum(0)[:, None]), full, max_symbols, d)
    frontier, frontier_id = full, np.zeros(1, np.int64)
    sym_ids, lefts, rights = [], [], []
    step = max(1, batch_elems // max(1, s_slots * n))
    while frontier.shape[0]:
        nxt_masks, nxt_id = [], []
        for a in range(0, frontier.shape[0], step):
            fm = frontier[a: a + step]                                      # (b, n)
            valid, hl, hr = _row_partitions(fm, gl_f, at_f, rv)
            lt, rt, new_masks, new_id = _row_children(sets, fm, valid, hl, hr, go_left)
            if new_masks is not None:
                nxt_masks.append(new_masks)
                nxt_id.append(new_id)
            sym_ids.append(frontier_id[a: a + step])
            lefts.append(lt)
            rights.append(rt)
        if nxt_masks:
            frontier = np.concatenate(nxt_masks)
            frontier_id = np.concatenate(nxt_id)
        else:
            frontier = np.zeros((0, n), bool)
    return sets, sym_ids, lefts, rights


def _row_split_table(m: int, s_slots: int, sym_ids, lefts, rights):
    """The split table from the children found per batch (:func:`_row_symbols`).

    Returns
    -------
    left, right : int32[m + 2, S], ``m`` where the slot is not a split
    """
    left = np.full((m + 2, s_slots), m, np.int32)
    right = np.full((m + 2, s_slots), m, np.int32)
    for ids, lt, rt in zip(sym_ids, lefts, rights):
        left[ids] = np.where(lt >= 0, lt, m)
        right[ids] = np.where(rt >= 0, rt, m)
    return left, right


def _row_summaries(pk, codes, nb: list, stats, batch_elems: int):
    """Statistics, sizes and bounding boxes of the symbols, from their packed row masks.

    Parameters
    ----------
    pk : uint8[m, ceil(n / 8)], the symbols' packed row masks (in id order)
    codes : int64[n, d], nb : bin counts, stats : float64[n, K]
    batch_elems : symbols x columns per matrix product (memory knob)

    Returns
    -------
    sym_stats : float64[m + 2, K] (rows ``m`` and ``m + 1`` zero)
    sizes : int64[m]
    lower, upper : int64[m, d]
    """
    n, d = codes.shape
    m = pk.shape[0]
    sym_stats = np.zeros((m + 2, stats.shape[1]))
    sizes = np.zeros(m, np.int64)
    lower = np.zeros((m, d), np.int64)
    upper = np.zeros((m, d), np.int64)
    # which codes of each feature occur in each symbol: one matrix product over all (feature, code) pairs
    onehot = np.concatenate([(codes[:, j][:, None] == np.arange(b)[None, :]) for j, b in enumerate(nb)], 1)
    onehot = np.concatenate([onehot.astype(np.float64), stats, np.ones((n, 1))], 1)
    offs = np.concatenate([[0], np.cumsum(nb)])
    bs = max(1, batch_elems // max(1, n + onehot.shape[1]))
    for a in range(0, m, bs):
        mat = np.unpackbits(pk[a: a + bs], axis=1, count=n).astype(np.float64)
        prod = mat @ onehot
        e = a + mat.shape[0]
        sym_stats[a:e] = prod[:, offs[-1]: offs[-1] + stats.shape[1]]
        sizes[a:e] = np.rint(prod[:, -1]).astype(np.int64)
        for j, b in enumerate(nb):
            occ = prod[:, offs[j]: offs[j + 1]] > 0.5
            lower[a:e, j] = np.argmax(occ, 1)
            upper[a:e, j] = b - 1 - np.argmax(occ[:, ::-1], 1)
    return sym_stats, sizes, lower, upper


def build_row_structure(codes: np.ndarray, n_bins, stats: np.ndarray, *, max_symbols: int | None = 20_000_000,
                        chunk: int | None = None, batch_elems: int = 1 << 24, seed: int = 0) -> PCFGStructure:
    """Sparse builder over the row sets actually reachable by splitting.

    Starts from all rows; every frontier of new symbols is split at every
    (feature, threshold) slot at once (vectorised over symbols x slots x rows),
    the canonical split of each partition is kept, and the children are looked
    up by a 64-bit hash of their row set (two sums of random 26-bit row keys,
    computed exactly with float64 matrix products and mixed into 64 bits).  Symbols are ordered by row count,
    so children come first.

    Exactness: the hash identifies a row set up to a collision probability of
    about ``M^2 / 2^64`` (below 1e-7 for ``M = 10^6`` symbols).

    Parameters
    ----------
    codes : int[n, d], n_bins : int[d], stats : float[n, K]
        As in :func:`build_box_structure`.
    max_symbols : int or None
        Raise ``ValueError`` once more symbols than this are found.
    batch_elems : int
        Symbols x slots x rows handled per vectorised step (memory knob).
    """
    codes = np.asarray(codes, np.int64)
    nb = [int(b) for b in n_bins]
    stats = np.asarray(stats, np.float64)
    slot_feature, slot_threshold = _split_slots(nb)
    sets, sym_ids, lefts, rights = _row_symbols(codes, slot_feature, slot_threshold, max_symbols, batch_elems, seed)
    left, right = _row_split_table(sets.n_sym, len(slot_feature), sym_ids, lefts, rights)
    sym_stats, sizes, lower, upper = _row_summaries(np.concatenate(sets.packed), codes, nb, stats, batch_elems)
    return PCFGStructure(stats=sym_stats, left=left, right=right, slot_feature=slot_feature,
                         slot_threshold=slot_threshold, chunks=_chunk_order(sizes, chunk),
                         lower=lower.astype(np.int32), upper=upper.astype(np.int32),
                         count=np.concatenate([sizes, [0, 0]]).astype(np.int64), root=0,
                         method="row", n_boxes=0)
