"""The CART trunk from summed per-partition histograms (the PLANET / Spark MLlib scheme).

Every level of the trunk is one pass over the data: each partition routes its rows through the
trunk grown so far and, for the rows in open nodes, sums the statistics per (node, feature,
code): row count, sum of y and sum of y^2 (regression) or per-class counts (classification).
The partitions' histograms are summed on the cluster (a tree reduction) and only the total, whose
size does not depend on the number of rows, comes to the client, which chooses every open node's
split exactly as the single-machine engine (:mod:`bayestrees.inference.forest.cart`) does on the same
codes:

* a node splits only if it holds at least ``2 * min_samples_leaf`` rows and its response is not
  constant;
* candidate thresholds are the codes present in the node that have rows after them in code
  order (missing values, which sort last, count as rows after);
* each candidate is scored with the missing rows on the right and, where the node has missing
  rows, on the left (the better is kept, left only if strictly better);
* the score is the criterion proxy (between-children sum of squares, Gini or entropy); ties go
  to the candidate with the fewest rows on the left, then to the lowest feature: the engine's
  "lowest position, then lowest feature" rule;
* children are numbered as the engine numbers them (``n_nodes + 2 * rank`` among the nodes that
  split at that level).

The trunk uses unit weights, so counts are exact integers and the regression score, computed in
float64 about each node's mean, equals the engine's up to the engine's rounding: on data without
near-ties the two trunks are the same tree (``tests/distributed/test_distributed.py`` checks it).
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..data import bucket_size, pad_rows
from ..tree import FREE, LEAF, Tree, apply

__all__ = ["TrunkSpec", "route", "partition_histogram", "parts_histogram", "choose_splits", "TrunkBuilder"]


@dataclass(frozen=True)
class TrunkSpec:
    """Settings of a trunk fit.

    Attributes
    ----------
    n_features : d
    n_codes : codes per feature including the missing code's slot (the last one)
    missing : the missing code of the codes' dtype
    n_classes : classes (0: regression)
    criterion : "squared_error", "gini" or "entropy"
    min_samples_leaf : rows per trunk leaf
    max_depth : int or None
    capacity : node slots of the trunk
    """

    n_features: int
    n_codes: int
    missing: int
    n_classes: int
    criterion: str
    min_samples_leaf: int
    max_depth: int | None
    capacity: int

    @property
    def n_stats(self) -> int:
        return 1 + (self.n_classes if self.n_classes else 2)  # count, then sum y, sum y^2 | class counts


def route(tree: Tree, codes: np.ndarray, missing: int) -> np.ndarray:
    """Leaf slot of every row of one partition: :func:`bayestrees.tree.apply`, the one routing of
    the package, on the rows padded to a coarse bucket (one compilation per bucket size, not per
    partition size; the padding rows are dropped).

    Parameters
    ----------
    tree : Tree (one tree, NumPy arrays)
    codes : uint (m, d)
    missing : the missing code

    Returns
    -------
    int32 (m,) the leaf slot of every row
    """
    codes = np.asarray(codes)
    m = codes.shape[0]
    if m == 0:
        return np.zeros(0, np.int32)
    padded = pad_rows(codes, bucket_size(m, coarse=True), missing)
    return np.asarray(apply(jax.tree_util.tree_map(jnp.asarray, tree), padded, missing))[:m].astype(np.int32)


def partition_histogram(part: dict, tree: Tree, open_nodes: np.ndarray, spec: TrunkSpec):
    """Sufficient statistics of one partition's rows in the open nodes.

    Parameters
    ----------
    part : dict with ``codes`` uint (m, d) and ``y`` (m,) (float responses or int class codes)
    tree : the trunk so far (NumPy)
    open_nodes : int (k,) slots of the open nodes
    spec : TrunkSpec

    Returns
    -------
    (hist, ymin, ymax)
        ``hist`` float64 (k, d, n_codes, n_stats); ``ymin``/``ymax`` float64 (k,) the response's
        range per node (class codes for classification; +inf/-inf for an empty node).
    """
    codes, y = np.asarray(part["codes"]), np.asarray(part["y"])
    k, d, B, s = len(open_nodes), spec.n_features, spec.n_codes, spec.n_stats
    hist = np.zeros((k, d, B, s))
    ymin, ymax = np.full(k, np.inf), np.full(k, -np.inf)
    if codes.shape[0] == 0 or k == 0:
        return hist, ymin, ymax
    node = route(tree, codes, spec.missing)
    slot_of = np.full(spec.capacity, -1, np.int64)
    slot_of[np.asarray(open_nodes)] = np.arange(k)
    slot = slot_of[node]
    keep = slot >= 0
    if not keep.any():
        return hist, ymin, ymax
    c = codes[keep].astype(np.int64)
    c = np.where(c == spec.missing, B - 1, c)
    sl = slot[keep]
    yy = y[keep].astype(np.float64)
    flat = ((sl[:, None] * d + np.arange(d)[None, :]) * B + c).ravel()  # (m_k * d,)
    size = k * d * B
    hist[..., 0] = np.bincount(flat, minlength=size).reshape(k, d, B)
    if spec.n_classes:
        for j in range(spec.n_classes):
            w = np.repeat((yy == j).astype(np.float64), d)
            hist[..., 1 + j] = np.bincount(flat, weights=w, minlength=size).reshape(k, d, B)
    else:
        hist[..., 1] = np.bincount(flat, weights=np.repeat(yy, d), minlength=size).reshape(k, d, B)
        hist[..., 2] = np.bincount(flat, weights=np.repeat(yy * yy, d), minlength=size).reshape(k, d, B)
    np.minimum.at(ymin, sl, yy)
    np.maximum.at(ymax, sl, yy)
    return hist, ymin, ymax


def add_histograms(a, b):
    """Sum two partitions' :func:`partition_histogram` results."""
    return a[0] + b[0], np.minimum(a[1], b[1]), np.maximum(a[2], b[2])


def parts_histogram(parts: list, tree: Tree, open_nodes: np.ndarray, spec: TrunkSpec):
    """:func:`partition_histogram` summed over several partitions (those one worker holds), one
    partition at a time: the worker holds two histograms at most, not one per partition."""
    acc = None
    for part in parts:
        h = partition_histogram(part, tree, open_nodes, spec)
        if acc is None:
            acc = h
        else:
            np.add(acc[0], h[0], out=acc[0])
            np.minimum(acc[1], h[1], out=acc[1])
            np.maximum(acc[2], h[2], out=acc[2])
        del h
    if acc is None:
        return partition_histogram({"codes": np.zeros((0, spec.n_features)), "y": np.zeros(0)}, tree, open_nodes, spec)
    return acc


def _proxy(cnt, stats, spec: TrunkSpec, mean=None):
    """The criterion proxy of children with ``cnt`` rows and statistics ``stats`` (last axis)."""
    safe = np.where(cnt > 0, cnt, 1.0)
    if not spec.n_classes:
        # S^2 / W about the node mean (shift-invariant in the argmax; float64 keeps it exact enough)
        sc = stats[..., 0] - cnt * mean
        return sc * sc / safe
    if spec.criterion == "gini":
        return np.sum(stats * stats, -1) / safe
    xlogx = lambda v: np.where(v > 0, v * np.log(np.where(v > 0, v, 1.0)), 0.0)  # noqa: E731
    return np.sum(xlogx(stats), -1) - xlogx(cnt)


#: bytes of histogram the split search handles at once (its temporaries are a few times this)
CHUNK_BYTES = 16 * 2**20


def choose_splits(hist, ymin, ymax, depth, spec: TrunkSpec, chunk_bytes: int = CHUNK_BYTES):
    """Best split of every open node from its summed histogram.

    The nodes are searched a chunk at a time (``chunk_bytes`` of histogram each): the search's
    cumulative sums and gains are several arrays of the histogram's size, and at 512 open nodes,
    10 features and 1,025 codes a histogram is 126 MB.  Every node's split depends on its own
    histogram only, so the chunks give the splits of one pass.

    Parameters
    ----------
    hist : float64 (k, d, n_codes, n_stats)
    ymin, ymax : float64 (k,)
    depth : int (k,) the nodes' depths
    spec : TrunkSpec
    chunk_bytes : int  histogram bytes searched at once

    Returns
    -------
    dict of arrays (k,)
        ``split`` bool, ``feature``, ``threshold`` (a code), ``missing_left`` bool, and the
        children's statistics ``left``/``right`` (k, n_stats).
    """
    k, d, B, s = hist.shape
    step = max(1, int(chunk_bytes) // max(1, d * B * s * hist.itemsize))
    if k <= step:
        return _choose_chunk(hist, ymin, ymax, depth, spec)
    parts = [_choose_chunk(hist[a:a + step], ymin[a:a + step], ymax[a:a + step], depth[a:a + step], spec)
             for a in range(0, k, step)]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def _choose_chunk(hist, ymin, ymax, depth, spec: TrunkSpec):
    """:func:`choose_splits` of a chunk of nodes, in one pass."""
    k, d, B, s = hist.shape
    msl = spec.min_samples_leaf
    tot = hist[:, 0].sum(1)  # (k, s): every feature holds all of a node's rows
    n_node = tot[:, 0]
    can = (n_node >= 2 * msl) & (ymax > ymin)
    if spec.max_depth is not None:
        can &= depth < spec.max_depth
    body = hist[:, :, :B - 1]  # non-missing codes
    M = hist[:, :, B - 1]  # (k, d, s) missing rows
    L = np.cumsum(body, axis=2)  # (k, d, B-1, s): rows with code <= c
    R = tot[:, None, None, :] - L  # includes the missing rows
    present = body[..., 0] > 0
    valid = present & (R[..., 0] > 0) & can[:, None, None]
    mean = None
    if not spec.n_classes:
        mean = (tot[:, 1] / np.where(n_node > 0, n_node, 1.0))[:, None, None]
    stat = slice(1, 2) if not spec.n_classes else slice(1, None)
    ok_r = valid & (L[..., 0] >= msl) & (R[..., 0] >= msl)
    gain = np.where(ok_r, _proxy(L[..., 0], L[..., stat], spec, mean) + _proxy(R[..., 0], R[..., stat], spec, mean),
                    -np.inf)
    Lm, Rm = L + M[:, :, None, :], R - M[:, :, None, :]
    ok_m = valid & (M[:, :, None, 0] > 0) & (Lm[..., 0] >= msl) & (Rm[..., 0] >= msl)
    gain_m = np.where(ok_m, _proxy(Lm[..., 0], Lm[..., stat], spec, mean)
                      + _proxy(Rm[..., 0], Rm[..., stat], spec, mean), -np.inf)
    mleft = gain_m > gain
    g = np.maximum(gain, gain_m)
    out = dict(split=np.zeros(k, bool), feature=np.full(k, -1, np.int32), threshold=np.zeros(k, np.int32),
               missing_left=np.zeros(k, bool), left=np.zeros((k, s)), right=np.zeros((k, s)))
    for i in range(k):
        gi = g[i]
        best = gi.max()
        if not np.isfinite(best):
            continue
        f_idx, c_idx = np.nonzero(gi == best)
        # the engine's tie rule: the lowest sorted position (fewest rows on the left), then the lowest feature
        pos = L[i, f_idx, c_idx, 0]
        j = np.lexsort((f_idx, pos))[0]
        f, c = int(f_idx[j]), int(c_idx[j])
        ml = bool(mleft[i, f, c])
        out["split"][i] = True
        out["feature"][i], out["threshold"][i], out["missing_left"][i] = f, c, ml
        out["left"][i] = Lm[i, f, c] if ml else L[i, f, c]
        out["right"][i] = Rm[i, f, c] if ml else R[i, f, c]
    return out


class TrunkBuilder:
    """The trunk under construction, one level at a time (client side, small arrays).

    Parameters
    ----------
    spec : TrunkSpec
    root : float64 (n_stats,) statistics of all rows
    y_shift : float
        Added back to regression node means (0 for standardised responses or classification).
    """

    def __init__(self, spec: TrunkSpec, root: np.ndarray, dtype=np.float64):
        self.spec = spec
        cap, V = spec.capacity, (spec.n_classes or 1)
        self.feature = np.full(cap, -1, np.int32)
        self.threshold = np.zeros(cap, np.int32)
        self.left = np.full(cap, FREE, np.int32)
        self.right = np.full(cap, FREE, np.int32)
        self.missing_left = np.zeros(cap, bool)
        self.value = np.zeros((cap, V), dtype)
        self.weight = np.zeros(cap, dtype)
        self.count = np.zeros(cap, np.int32)
        self.depth = np.zeros(cap, np.int32)
        self.n_nodes = 1
        self.left[0] = self.right[0] = LEAF
        self._set_stats(0, root)
        self.open = np.array([0])

    def _set_stats(self, node, st):
        n = st[0]
        self.count[node] = int(round(n))
        self.weight[node] = n
        if self.spec.n_classes:
            self.value[node] = st[1:] / max(n, 1.0)
        else:
            self.value[node, 0] = st[1] / max(n, 1.0)

    def tree(self) -> Tree:
        """The trunk as a :class:`~bayestrees.tree.Tree` (NumPy, one tree)."""
        return Tree(self.feature.copy(), self.threshold.copy(), self.left.copy(), self.right.copy(),
                    self.missing_left.copy(), self.value.copy(), self.weight.copy(), self.count.copy(),
                    self.depth.copy(), np.asarray(self.n_nodes, np.int32))

    def grow(self, hist, ymin, ymax) -> bool:
        """Split the open nodes by the summed histogram; returns whether any node is still open."""
        return self.apply(choose_splits(hist, ymin, ymax, self.depth[self.open], self.spec))

    def open_depths(self) -> np.ndarray:
        """Depths of the open nodes, in the order of ``open`` (what :func:`choose_splits` takes)."""
        return self.depth[self.open].copy()

    def apply(self, ch: dict) -> bool:
        """Split the open nodes by :func:`choose_splits`'s result; returns whether any node is still open."""
        nodes = self.open[ch["split"]]
        n_split = len(nodes)
        if self.n_nodes + 2 * n_split > self.spec.capacity:
            raise ValueError(f"the trunk needed more than {self.spec.capacity} node slots; raise "
                             "trunk_min_samples_leaf")
        new_open = []
        for r, (i, node) in enumerate(zip(np.nonzero(ch["split"])[0], nodes)):
            lc, rc = self.n_nodes + 2 * r, self.n_nodes + 2 * r + 1
            self.feature[node], self.threshold[node] = ch["feature"][i], ch["threshold"][i]
            self.missing_left[node] = ch["missing_left"][i]
            self.left[node], self.right[node] = lc, rc
            for c, st in ((lc, ch["left"][i]), (rc, ch["right"][i])):
                self.left[c] = self.right[c] = LEAF
                self.depth[c] = self.depth[node] + 1
                self._set_stats(c, st)
                new_open.append(c)
        self.n_nodes += 2 * n_split
        self.open = np.array(sorted(new_open), dtype=np.int64)
        return len(self.open) > 0
