"""Data-independent prior trees for the safe-Bayesian random forest.

The code-string prior (Quadrianto & Ghahramani 2015)
----------------------------------------------------
A tree is written as a code string in depth-first (pre-) order: each node is
internal with probability ``lam`` independently, and the string stops when
the number of leaves exceeds the number of internal nodes by one.  Each
internal node draws its feature uniformly from the ``D`` features and its cut
``c ~ U(0, 1)`` on the probability-integral-transformed feature ``F(x)``.

Every string with ``k`` internal nodes has probability
``lam^k (1 - lam)^(k + 1)`` and there are ``Catalan(k)`` of them, so

    P(I = k) = Catalan(k) lam^k (1 - lam)^(k + 1),

a proper distribution (sum 1) for ``lam < 1/2`` with mean
``lam / (1 - 2 lam)`` internal nodes (9.5 at ``lam = 0.475``).  Its tail is
heavy (``~ k^(-3/2) (4 lam (1 - lam))^k``).

The root splits (``root_splits=True``, the default)
-----------------------------------------------------
The paper's Figure 1 generates codes "in depth-first order starting from 1
at the root node": the first symbol is always internal and the rest of the
string follows the rule above, i.e. the two subtrees of the root are
independent trees of the prior above.  With ``I_L, I_R`` i.i.d. as above,
``P(I_L + I_R = j) = (1 - lam)^2 (lam (1 - lam))^j sum_{a+b=j} Catalan(a)
Catalan(b)`` and ``sum_{a+b=j} Catalan(a) Catalan(b) = Catalan(j + 1)``, so
for ``I = 1 + I_L + I_R``

    P(I = k) = Catalan(k) lam^(k - 1) (1 - lam)^(k + 1),   k >= 1,   P(I = 0) = 0,

which is the prior above conditioned on ``I >= 1`` (divided by
``P(I >= 1) = lam``).  Its mean is ``1 / (1 - 2 lam)`` (20 at
``lam = 0.475``), its tail mass ``P(I > k)`` is the one above divided by
``lam``, and, given ``k``, all ``Catalan(k)`` strings are still equally
likely (each has probability ``lam^(k - 1) (1 - lam)^(k + 1)``), so the
sampler below only changes the distribution of ``k``.  ``root_splits=False``
gives the prior above, in which a tree is a single leaf with probability
``1 - lam`` (52.5% at ``lam = 0.475``).

Fixed capacity and exact truncation
-----------------------------------
Trees are stored in the shared :class:`bayestrees.tree.Tree` with capacity
``2 * max_internal + 1``.  Trees are drawn *exactly from the prior
conditioned on* ``I <= max_internal``: first ``k`` from the truncated
closed form above, then, since all strings with ``k`` internal nodes are
equally likely, a uniformly random valid code string of that length, by the
cycle lemma (a uniform random arrangement of ``k`` "+1" and ``k + 1`` "-1"
symbols has exactly one cyclic rotation whose proper prefix sums are all
>= 0; that rotation is a valid pre-order code string, uniformly
distributed).  No tree is cut short, so the only change from the untruncated
prior is the conditioning; its total-variation distance from the prior is
the truncated mass :func:`truncated_mass` (at ``lam = 0.475`` with the root
split: 1.3% for ``max_internal = 255``, 0.32% for 511, 0.040% for 1023,
1.3e-5 for 2047; ``lam`` times that with ``root_splits=False``).

Node layout: node ``i`` is the ``i``-th symbol of the code string, so the
left child of an internal node ``i`` is ``i + 1``; the right child follows the
end of the left subtree.

Cuts to codes
-------------
The PIT of a training value is ``F(x) = #{train <= x} / n``.  With the
features binned (:class:`bayestrees.data.Binner`), every row of a bin has the
same ``F``; with exact binning a cut ``c`` on ``F`` is exactly the code
threshold ``t(c) = #{bins k : cum_k <= floor(c n)} - 1`` (``cum_k`` the number
of training rows with code ``<= k``), and a row goes left iff its code is
``<= t(c)``; ``t = -1`` sends every row right.  :func:`cut_thresholds` does
this per data set, so one set of prior trees serves every data set.  Missing
values take a side drawn from Bernoulli(1/2) per node (data independent).
"""
from __future__ import annotations

import atexit
import threading
from collections import OrderedDict
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...priors import CodeStringPrior
from ...tree import Tree, mark_unused

__all__ = [
    "PriorForest",
    "n_internal_log_prob",
    "mean_n_internal",
    "truncated_mass",
    "sample_n_internal",
    "uniform_code_string",
    "sample_prior_tree",
    "sample_prior_forest",
    "cached_prior_forest",
    "PriorForestCache",
    "default_prior_cache",
    "clear_prior_cache",
    "cut_thresholds",
    "bin_cum_counts",
    "prior_to_tree",
    "subtree_sums",
]


class PriorForest(NamedTuple):
    """Trees drawn from the code-string prior, before any data is seen.

    Shapes (``K`` trees, capacity ``L = 2 * max_internal + 1``; one tree drops
    the leading axis)

    internal : bool[K, L]      symbol of the code string (True = internal); False on unused slots
    feature : int32[K, L]      split feature, -1 on leaves and unused slots
    cut : float32[K, L]        cut on the PIT scale in [0, 1); 0 on leaves
    missing_left : bool[K, L]  side taken by missing values
    left, right : int32[K, L]  children, -1 on leaves and unused slots
    depth : int32[K, L]        node depth (root 0), 0 on unused slots
    n_nodes : int32[K]         length of the code string (2 I + 1)
    """

    internal: jax.Array
    feature: jax.Array
    cut: jax.Array
    missing_left: jax.Array
    left: jax.Array
    right: jax.Array
    depth: jax.Array
    n_nodes: jax.Array

    @property
    def capacity(self) -> int:
        return int(self.internal.shape[-1])


def n_internal_log_prob(k, split_prob, root_splits: bool = True):
    """log P(I = k), the number of internal nodes under the code-string prior.

    :meth:`bayestrees.priors.CodeStringPrior.n_internal_log_prob` of ``CodeStringPrior(split_prob, root_splits)``.

    Parameters
    ----------
    k : int array of any shape
    split_prob : float in (0, 0.5)
        Probability ``lam`` that a symbol of the code string is internal.
    root_splits : bool, default True
        ``True``: the root is always internal (the paper's Figure 1),
        ``log P(I = k) = log Catalan(k) + (k - 1) log(lam) + (k + 1) log(1 - lam)``
        for ``k >= 1`` and ``-inf`` at ``k = 0``.  ``False``:
        ``log Catalan(k) + k log(lam) + (k + 1) log(1 - lam)``.

    Returns
    -------
    float array of the shape of ``k``.
    """
    return CodeStringPrior(split_prob, root_splits).n_internal_log_prob(k)


def _n_internal_log_prob_np(lam: float, max_internal: int, root_splits: bool = True) -> np.ndarray:
    """float64 ``log P(I = k)`` for ``k = 0..max_internal`` (:meth:`CodeStringPrior.n_internal_log_prob_np`)."""
    return CodeStringPrior(lam, root_splits).n_internal_log_prob_np(max_internal)


def mean_n_internal(split_prob: float, root_splits: bool = True) -> float:
    """Mean number of internal nodes of the untruncated prior.

    ``lam / (1 - 2 lam)`` with ``root_splits=False``; ``1 / (1 - 2 lam)`` with
    ``root_splits=True`` (``E[I | I >= 1] = E[I] / P(I >= 1)``, ``P(I >= 1) = lam``;
    equivalently ``1 + 2 E[I]`` for the root and two independent subtrees).
    """
    return CodeStringPrior(split_prob, root_splits).mean_n_internal()


def truncated_mass(split_prob: float, max_internal: int, root_splits: bool = True) -> float:
    """P(I > max_internal) under the code-string prior, in float64 (numpy).

    Computed as ``1 - sum_{k <= max_internal} P(I = k)`` with the terms in log
    space; the untruncated sum is exactly 1 for ``lam < 1/2``.  With
    ``root_splits=True`` it is the ``root_splits=False`` value divided by ``lam``.
    """
    return CodeStringPrior(split_prob, root_splits).truncated_mass(max_internal)


def sample_n_internal(key, split_prob, max_internal: int, logits=None, root_splits: bool = True):
    """Number of internal nodes drawn from P(I = k | I <= max_internal); int32[].

    ``logits`` (float (max_internal + 1,)), when given, are the log
    probabilities ``log P(I = k)`` (and ``split_prob``, ``root_splits`` are
    ignored); otherwise they are computed in float64 with numpy from the
    concrete ``split_prob`` and ``root_splits``.
    """
    if logits is None:
        logits = jnp.asarray(CodeStringPrior(float(split_prob), root_splits).n_internal_log_prob_np(max_internal),
                             jnp.float32)
    return jax.random.categorical(key, logits).astype(jnp.int32)


def uniform_code_string(key, k, capacity: int):
    """A uniformly random valid pre-order code string with ``k`` internal nodes.

    Parameters
    ----------
    key : PRNG key
    k : int32[]  number of internal nodes (``2 k + 1 <= capacity``)
    capacity : int  length of the output

    Returns
    -------
    bool[capacity]: True at internal positions; positions ``>= 2 k + 1`` are False.

    Notes
    -----
    Cycle lemma: write internal = +1, leaf = -1; a string of ``k`` (+1) and
    ``k + 1`` (-1) sums to -1 and exactly one of its ``2k + 1`` rotations has all
    proper prefix sums >= 0 (a valid code string): the rotation starting just
    after the first minimum of the prefix sums.  A uniform arrangement thus
    maps ``2k + 1`` to one onto the uniform valid string.
    """
    n = 2 * k + 1
    pos = jnp.arange(capacity)
    valid = pos < n
    # uniform random arrangement of k ones among the first n positions
    u = jax.random.uniform(key, (capacity,))
    u = jnp.where(valid, u, 2.0)
    rank = jnp.argsort(jnp.argsort(u))  # rank of each slot among valid ones
    arr = rank < k  # exactly k True among the first n
    s = jnp.where(arr, 1, -1)
    s = jnp.where(valid, s, 0)
    prefix = jnp.cumsum(s)  # prefix[j] = sum of s[0..j] = P_{j+1}
    masked = jnp.where(valid, prefix, jnp.iinfo(jnp.int32).max)
    r = (jnp.argmin(masked) + 1) % n  # start just after the first minimum
    src = (pos + r) % n
    return valid & arr[src]


def _structure(internal, n_nodes):
    """left, right, depth (int32[L]) of a pre-order code string, without a sequential scan.

    With ``s = +1`` (internal) / ``-1`` (leaf) and prefix sums ``P[j] = sum_{q<j} s_q``,
    the subtree rooted at ``j`` ends at the first ``q >= j`` with
    ``P[q + 1] = P[j] - 1``; it is found by a binary search in the sorted keys
    ``(P[t], t)``.  The right child of an internal node ``i`` follows the end of
    its left subtree (rooted at ``i + 1``).  Depths come from the parent
    pointers by pointer doubling (``ceil(log2 L)`` rounds).
    """
    L = internal.shape[0]
    pos = jnp.arange(L, dtype=jnp.int32)
    s = jnp.where(pos < n_nodes, jnp.where(internal, 1, -1), 0).astype(jnp.int32)
    P = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(s).astype(jnp.int32)])  # (L + 1,)
    W = L + 2
    t = jnp.arange(1, L + 1, dtype=jnp.int32)
    keys = jnp.sort((P[1:] + L + 1) * W + t)
    query = (P[:L] - 1 + L + 1) * W + pos + 1
    idx = jnp.clip(jnp.searchsorted(keys, query, side="left"), 0, L - 1)
    end = keys[idx] % W - 1  # last position of the subtree rooted at j
    nxt = jnp.minimum(pos + 1, L - 1)
    left = jnp.where(internal, pos + 1, -1).astype(jnp.int32)
    right = jnp.where(internal, end[nxt] + 1, -1).astype(jnp.int32)
    parent = -jnp.ones(L, jnp.int32)
    parent = parent.at[jnp.where(internal, pos + 1, L)].set(pos, mode="drop")
    parent = parent.at[jnp.where(internal, right, L)].set(pos, mode="drop")
    depth = (parent >= 0).astype(jnp.int32)
    anc = parent
    for _ in range(max(1, int(np.ceil(np.log2(L + 1))))):
        has = anc >= 0
        a = jnp.maximum(anc, 0)
        depth = depth + jnp.where(has, depth[a], 0)
        anc = jnp.where(has, anc[a], -1)
    depth = jnp.where(pos < n_nodes, depth, 0)
    return left, right, depth


def sample_prior_tree(key, n_features, split_prob: float = 0.475, max_internal: int = 511,
                      logits=None, root_splits: bool = True) -> PriorForest:
    """One tree from the code-string prior conditioned on ``I <= max_internal``.

    Parameters
    ----------
    key : PRNG key
    n_features : int (may be traced)  number of features ``D``
    split_prob : float in (0, 0.5)  probability ``lam`` that a node is internal
    max_internal : int  largest number of internal nodes (capacity ``2 max_internal + 1``)
    logits : float (max_internal + 1,), optional  ``log P(I = k)`` (replaces ``split_prob``
        and ``root_splits``)
    root_splits : bool, default True  the root is always internal (see the module docstring)

    Returns
    -------
    PriorForest without the leading tree axis.
    """
    key_size, key_shape, key_feat, key_cut, key_miss = jax.random.split(key, 5)
    L = 2 * max_internal + 1
    k = sample_n_internal(key_size, split_prob, max_internal, logits, root_splits)
    internal = uniform_code_string(key_shape, k, L)
    n_nodes = 2 * k + 1
    feature = jnp.where(internal, jax.random.randint(key_feat, (L,), 0, n_features, dtype=jnp.int32), -1).astype(jnp.int32)
    cut = jnp.where(internal, jax.random.uniform(key_cut, (L,)), 0.0)
    miss = internal & jax.random.bernoulli(key_miss, 0.5, (L,))
    left, right, depth = _structure(internal, n_nodes)
    return PriorForest(internal, feature, cut, miss, left, right, depth, n_nodes)


def sample_prior_forest(key, n_trees: int, n_features: int, split_prob: float = 0.475,
                        max_internal: int = 511, root_splits: bool = True) -> PriorForest:
    """``n_trees`` independent prior trees (vmapped :func:`sample_prior_tree`).

    The trees depend only on ``key``, ``n_features``, ``split_prob``,
    ``max_internal`` and ``root_splits``, never on data: the same key gives
    the same trees for every data set with ``n_features`` features.  One
    compilation serves every ``n_features``, ``split_prob`` and ``root_splits``
    for a given ``(n_trees, max_internal)``.

    Parameters
    ----------
    key : PRNG key
    n_trees : int >= 1
    n_features : int >= 1
    split_prob : float in (0, 0.5), default 0.475
    max_internal : int, default 511  (>= 1 when ``root_splits``)
    root_splits : bool, default True
        The root is always internal (the code string starts with 1, as in the
        paper's Figure 1); ``False`` lets the root be a leaf with probability
        ``1 - split_prob``.

    Returns
    -------
    PriorForest with leading axis ``n_trees``.
    """
    prior = CodeStringPrior(float(split_prob), bool(root_splits))
    if int(n_trees) < 1:
        raise ValueError(f"n_trees must be >= 1, got {n_trees}")
    if int(n_features) < 1:
        raise ValueError(f"n_features must be >= 1, got {n_features}")
    if int(max_internal) < (1 if root_splits else 0):
        raise ValueError(f"max_internal must be >= {1 if root_splits else 0} (root_splits={bool(root_splits)}), "
                         f"got {max_internal}")
    logits = jnp.asarray(prior.n_internal_log_prob_np(int(max_internal)), jnp.float32)
    return _sample_forest_jit(key, logits, jnp.int32(n_features), int(n_trees), int(max_internal))


class PriorForestCache:
    """Memo of :func:`sample_prior_forest`, keyed on the key data and the arguments.

    The prior trees never depend on the data, so repeated fits with the same seed
    (cross-validation folds, repeated splits, the estimators and the model variable) reuse
    them.  The ``maxsize`` forests used last are kept.  :meth:`close` (or :meth:`clear`)
    empties it; both may be called any number of times, and the cache may be used again after.

    Parameters
    ----------
    maxsize : int
        Forests kept (least recently used first out).
    """

    def __init__(self, maxsize: int = 8):
        if int(maxsize) < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.maxsize = int(maxsize)
        self._forests: "OrderedDict[tuple, PriorForest]" = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._forests)

    def get(self, key, n_trees: int, n_features: int, split_prob: float = 0.475, max_internal: int = 511,
            root_splits: bool = True) -> PriorForest:
        """:func:`sample_prior_forest`, drawn once per key and arguments.

        Parameters
        ----------
        key : PRNG key
        n_trees, n_features, split_prob, max_internal, root_splits
            As for :func:`sample_prior_forest`.

        Returns
        -------
        PriorForest with leading axis ``n_trees``.
        """
        kd = tuple(np.asarray(jax.random.key_data(key)).ravel().tolist())
        ck = (kd, int(n_trees), int(n_features), float(split_prob), int(max_internal), bool(root_splits))
        with self._lock:
            if ck in self._forests:
                self._forests.move_to_end(ck)
                return self._forests[ck]
        pf = sample_prior_forest(key, n_trees, n_features, split_prob, max_internal, bool(root_splits))
        with self._lock:
            self._forests[ck] = pf
            while len(self._forests) > self.maxsize:
                self._forests.popitem(last=False)
        return pf

    def clear(self) -> None:
        """Drop every kept forest."""
        with self._lock:
            self._forests.clear()

    def close(self) -> None:
        """Drop every kept forest (the same as :meth:`clear`; idempotent)."""
        self.clear()


_DEFAULT_PRIOR_CACHE = PriorForestCache(8)
atexit.register(_DEFAULT_PRIOR_CACHE.close)


def default_prior_cache() -> PriorForestCache:
    """The cache :func:`cached_prior_forest` (and so every safe-Bayes fit) uses; cleared at
    interpreter exit, or by :func:`clear_prior_cache`."""
    return _DEFAULT_PRIOR_CACHE


def clear_prior_cache() -> None:
    """Empty the default prior-forest cache (:func:`default_prior_cache`)."""
    _DEFAULT_PRIOR_CACHE.close()


def cached_prior_forest(key, n_trees: int, n_features: int, split_prob: float = 0.475, max_internal: int = 511,
                        root_splits: bool = True) -> PriorForest:
    """:func:`sample_prior_forest`, memoised in the default cache (:func:`default_prior_cache`).

    The prior trees never depend on the data, so repeated fits with the same
    seed (cross-validation folds, repeated splits, the estimators and the model
    variable) reuse them.  The last 8 forests are kept.

    Parameters
    ----------
    key : PRNG key
    n_trees, n_features, split_prob, max_internal, root_splits
        As for :func:`sample_prior_forest`.

    Returns
    -------
    PriorForest with leading axis ``n_trees``.
    """
    return _DEFAULT_PRIOR_CACHE.get(key, n_trees, n_features, split_prob, max_internal, root_splits)


@partial(jax.jit, static_argnums=(3, 4))
def _sample_forest_jit(key, logits, n_features, n_trees, max_internal):
    keys = jax.random.split(key, n_trees)
    return jax.vmap(lambda kk: sample_prior_tree(kk, n_features, None, max_internal, logits))(keys)


def bin_cum_counts(codes: np.ndarray, n_bins) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative bin counts of training codes, the step function of the PIT.

    Parameters
    ----------
    codes : uint array (n, D) of training codes
    n_bins : int array (D,) of bins per feature

    Returns
    -------
    cum : int64 (D, B)  rows with code <= k, padded with the feature's total
    n_present : int64 (D,)  non-missing rows per feature
    """
    codes = np.asarray(codes)
    n_bins = np.asarray(n_bins, dtype=np.int64)
    D = codes.shape[1]
    B = int(max(1, n_bins.max()))
    miss = np.iinfo(codes.dtype).max
    cum = np.zeros((D, B), np.int64)
    n_present = np.zeros(D, np.int64)
    for j in range(D):
        c = codes[:, j].astype(np.int64)
        c = c[c != miss]
        cnt = np.bincount(c, minlength=B)[:B]
        cum[j] = np.cumsum(cnt)
        n_present[j] = c.shape[0]
    return cum, n_present


def cut_thresholds(feature, cut, cum: np.ndarray, n_present: np.ndarray) -> np.ndarray:
    """Map PIT cuts to code thresholds for one data set.

    Parameters
    ----------
    feature : int (..., L)  split features (-1 on leaves)
    cut : float (..., L)  cuts in [0, 1)
    cum, n_present : from :func:`bin_cum_counts`

    Returns
    -------
    int32 (..., L): ``t = #{k : cum[f, k] <= floor(c * n_f)} - 1`` (0 on leaves),
    so that a row with code ``<= t`` has ``F(x) <= c``.
    """
    feature = np.asarray(feature).astype(np.int64)
    cut = np.asarray(cut, dtype=np.float64)
    cum = np.asarray(cum, np.int64)
    n_present = np.asarray(n_present, np.int64)
    D, B = cum.shape
    stride = int(n_present.max()) + 2  # blocks of feature j lie in [j * stride, (j + 1) * stride)
    flat = (cum + stride * np.arange(D)[:, None]).ravel()  # sorted
    f = np.clip(feature, 0, D - 1)
    q = np.floor(cut * n_present[f]).astype(np.int64) + stride * f
    t = np.searchsorted(flat, q, side="right") - B * f - 1
    return np.where(feature >= 0, t, 0).astype(np.int32)


def subtree_sums(left, right, leaf_values):
    """Sum leaf values up the tree: internal node = left child + right child.

    Parameters
    ----------
    left, right : int32 (K, L)
    leaf_values : float (K, L, V)  values on leaves (zero elsewhere)

    Returns
    -------
    float (K, L, V)

    Notes
    -----
    Children have larger indices than their parent (pre-order), so one
    reverse scan over the slots suffices.
    """
    L = left.shape[-1]

    def one(lft, rgt, vals):
        def body(acc, i):
            internal = lft[i] >= 0
            s = acc[jnp.maximum(lft[i], 0)] + acc[jnp.maximum(rgt[i], 0)]
            acc = acc.at[i].set(jnp.where(internal, s, acc[i]))
            return acc, None

        acc, _ = jax.lax.scan(body, vals, jnp.arange(L - 1, -1, -1))
        return acc

    return jax.vmap(one)(left, right, leaf_values)


def prior_to_tree(prior: PriorForest, threshold, value, weight, count) -> Tree:
    """Assemble the shared :class:`Tree` from prior trees and per-data-set arrays.

    Parameters
    ----------
    prior : PriorForest (K trees, capacity L)
    threshold : int32 (K, L)  code thresholds from :func:`cut_thresholds`
    value : float (K, L, V)  node predictions
    weight : float (K, L)  training rows per node
    count : int32 (K, L)  training rows per node
    """
    return mark_unused(Tree(
        feature=jnp.asarray(prior.feature, jnp.int32),
        threshold=jnp.asarray(threshold, jnp.int32),
        left=jnp.asarray(prior.left, jnp.int32),
        right=jnp.asarray(prior.right, jnp.int32),
        missing_left=jnp.asarray(prior.missing_left, bool),
        value=jnp.asarray(value),
        weight=jnp.asarray(weight),
        count=jnp.asarray(count, jnp.int32),
        depth=jnp.asarray(prior.depth, jnp.int32),
        n_nodes=jnp.asarray(prior.n_nodes, jnp.int32),
    ))
