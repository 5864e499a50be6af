"""The ancestor-interval rule prior of heap trees: what BART's R packages and bartz draw rules from.

A node's *interval* of feature ``j`` is the range of codes its ancestors' rules leave it: the root
has ``[code_lo_j, code_hi_j]`` (the smallest and largest code of ``j`` among the training rows), a
rule ``(j, t)`` (codes ``<= t`` go left) gives the left child ``[lo, t]`` and the right child
``[t + 1, hi]`` of feature ``j`` and leaves the other features' intervals as they were.  The
rule prior at a node: the variable uniform among the *available* ones (``hi_j > lo_j``: at least
one cut point left; or with probability ``xi_j / sum_available xi`` given split-variable weights
``xi``), the threshold uniform among its ``hi_j - lo_j`` cut points ``lo_j <= t < hi_j``.  A node
with no available variable (or at ``max_depth``) is a leaf with probability 1.

*Unordered categorical features* (``categories``, int32 (d,): a feature's root mask of categories,
bit ``c`` for code ``c``, 0 for an ordered feature) split by subsets: a rule ``(j, S)`` with ``S`` a category
mask sends the codes in ``S`` left.  A node's interval of such a feature is the mask ``A`` of the
categories its ancestors' rules leave it (``S`` to the left child, ``A & ~S`` to the right); the rule
prior takes ``S`` uniform among the ``2^|A| - 2`` nonempty proper subsets of ``A``, and the feature
is available while ``|A| >= 2``.  In the ``(lo, hi)`` layout such a feature reads ``lo = 0``,
``hi = |A| - 1`` (so ``hi > lo`` means available as for an ordered one); its rule count is
:func:`log_rule_count`.

Unlike the data-dependent rule prior of :func:`bayestrees.inference.moves.evaluate` (ranges of
the codes of the node's own rows), this prior does not depend on where the rows go, so a tree's
prior is a function of its rules alone, computed here without touching the rows.  Trees whose
nodes hold fewer than ``min_leaf_rows`` rows are excluded by the samplers (the prior truncated
there), as in the R package BART.

Costs: :func:`interval_ranges` (every node's interval of every feature) is ``O(S D d)``;
:func:`node_rule_terms` (what the prior needs: the number of available variables at every node
and the cut points of every node's own variable) is ``O(S D^2)`` with ``D = max_depth``,
independent of the number of features, because only the features on a node's path can have lost
their cut points; :func:`node_interval` is one node's interval of every feature, ``O(D d)``.
"""
from __future__ import annotations

from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["path_tables", "interval_ranges", "node_rule_terms", "node_interval", "log_tree_prior",
           "log_tree_prior_weighted", "log_available_weight", "log_rule_count", "popcount", "category_ranges",
           "node_categories", "root_categories", "root_code_range", "categorical_layout"]

_BIG = 1 << 30


@lru_cache(maxsize=None)
def path_tables(max_depth: int):
    """Static (NumPy) tables of the heap's paths, ``D = max(max_depth, 1)`` columns.

    anc : int32 (S, D)  ``anc[s, a]`` the ancestor of slot ``s`` at depth ``a`` (0 where ``a >= depth(s)``)
    right : bool (S, D)  ``s`` lies in the right subtree of that ancestor
    on : bool (S, D)  ``a < depth(s)``: the column is an ancestor of ``s``
    depth : int32 (S,)
    """
    S = 2 ** (int(max_depth) + 1) - 1
    D = max(int(max_depth), 1)
    s = np.arange(S)
    depth = np.floor(np.log2(s + 1)).astype(np.int32)
    anc = np.zeros((S, D), np.int32)
    right = np.zeros((S, D), bool)
    on = np.zeros((S, D), bool)
    for a in range(D):
        ok = depth > a
        shift = np.maximum(depth - a, 0)
        anc[:, a] = np.where(ok, ((s + 1) >> shift) - 1, 0)
        child = np.where(ok, ((s + 1) >> np.maximum(depth - a - 1, 0)) - 1, 0)  # the path's node at depth a + 1
        right[:, a] = ok & (child % 2 == 0)
        on[:, a] = ok
    return anc, right, on, depth


def popcount(x):
    """Set bits of an int32 mask, int32."""
    return jax.lax.population_count(x).astype(jnp.int32)


def log_rule_count(n, categorical, dtype=jnp.float32):
    """``log`` of the number of rules of a variable with ``n`` cut points (``hi - lo`` of the
    ``(lo, hi)`` layout; at least 1 counted): ``n`` for an ordered variable, ``2^(n + 1) - 2`` (the
    nonempty proper subsets of ``n + 1`` categories) for an unordered one."""
    n = jnp.maximum(n, 1).astype(dtype)
    return jnp.where(categorical, jnp.log(2.0) + jnp.log(jnp.exp2(n) - 1.0), jnp.log(n)).astype(dtype)


def root_categories(codes, subsets) -> np.ndarray:
    """int32 (d,): the root's category mask of each column of ``codes`` ((n, d) integer codes) where
    ``subsets`` ((d,) bool) says it splits by subsets (bit ``c`` for each code ``c`` among the rows),
    0 for the other columns.  Computed once on the host, when a sampler's data are built."""
    c = np.asarray(codes).astype(np.int64)
    out = np.zeros(c.shape[1], np.int64)
    for j in np.flatnonzero(subsets):
        out[j] = np.bitwise_or.reduce(np.left_shift(1, np.unique(c[:, j])))
    return out.astype(np.int32)


def root_code_range(lo, hi, categories):
    """The root's ``(lo, hi)`` int32 (d,) with each feature split by subsets (``categories`` != 0, the
    masks of :func:`root_categories`) in the ``(0, |A| - 1)`` layout; ``lo``, ``hi`` elsewhere.  On the
    host (NumPy), for building a sampler's data."""
    cats = np.asarray(categories, np.int64)
    count = np.array([bin(int(x)).count("1") for x in cats], np.int64)
    lo = np.where(cats != 0, 0, lo).astype(np.int32)
    hi = np.where(cats != 0, np.maximum(count - 1, 0), hi).astype(np.int32)
    return lo, hi


def _and_masks(hit, right, pt, root, axis: int = -2):
    """The category masks left by the ancestors' rules ``pt`` where ``hit`` (``axis``: the ancestors):
    ``root & AND (right ? ~pt : pt)``."""
    side = jnp.where(right, ~pt, pt)
    return root & jnp.bitwise_and.reduce(jnp.where(hit, side, -1), axis=axis)


def categorical_layout(lo, hi, masks, categories):
    """``(lo, hi)`` with an unordered feature's as ``(0, |A| - 1)``."""
    cat = categories != 0
    return (jnp.where(cat, 0, lo).astype(jnp.int32),
            jnp.where(cat, jnp.maximum(popcount(masks) - 1, 0), hi).astype(jnp.int32))


def _path_rules(feature, threshold, max_depth: int):
    anc, right, on, _ = path_tables(max_depth)
    pf = jnp.where(on, jnp.take(feature, anc), -1)
    pt = jnp.take(threshold, anc)
    return pf, pt, jnp.asarray(right), jnp.asarray(on)


def interval_ranges(feature, threshold, code_lo, code_hi, max_depth: int, categories=None):
    """Every node's interval of every feature: ``lo, hi`` int32 (S, d), cut points ``lo <= t < hi``
    (an unordered feature's ``(0, |A| - 1)`` given ``categories``; :func:`category_ranges` its masks).

    ``feature`` (S,) is the split variable of internal slots and -1 elsewhere; values at slots that
    are not nodes are meaningless.  The layout of :func:`bayestrees.inference.heap.code_ranges`, so
    the moves' rule draws and counts (:func:`bayestrees.inference.heap.rule_counts`) read it as they
    read the data's ranges.
    """
    pf, pt, right, _ = _path_rules(feature, threshold, max_depth)
    d = code_lo.shape[-1]
    hit = pf[..., None] == jnp.arange(d, dtype=pf.dtype)                       # (S, D, d)
    lo = jnp.max(jnp.where(hit & right[..., None], pt[..., None] + 1, -_BIG), 1)
    hi = jnp.min(jnp.where(hit & ~right[..., None], pt[..., None], _BIG), 1)
    lo, hi = jnp.maximum(lo, code_lo).astype(jnp.int32), jnp.minimum(hi, code_hi).astype(jnp.int32)
    if categories is None:
        return lo, hi
    masks = _and_masks(hit, right[..., None], pt[..., None], categories)
    return categorical_layout(lo, hi, masks, categories)


def category_ranges(feature, threshold, categories, max_depth: int):
    """Every node's category mask of every feature, int32 (S, d) (meaningless for ordered ones)."""
    pf, pt, right, _ = _path_rules(feature, threshold, max_depth)
    d = categories.shape[-1]
    hit = pf[..., None] == jnp.arange(d, dtype=pf.dtype)
    return _and_masks(hit, right[..., None], pt[..., None], categories)


def node_rule_terms(feature, threshold, code_lo, code_hi, max_depth: int, dtype=jnp.float32, categories=None):
    """What the rule prior needs at every node, in ``O(S D^2)``.

    Returns ``(avail, nthr_own, own_ok)``: ``avail`` float (S,) the number of available variables at
    the node, ``nthr_own`` int32 (S,) the
    cut points of the node's own split variable in its interval (0 at slots that are not internal)
    and ``own_ok`` bool (S,) whether the node's threshold is one of them.
    A feature on the node's path is counted out of the root's available ones when its interval
    there has no cut point left.  Given ``categories`` (unordered features; ``code_lo``/``code_hi`` in
    the ``(0, |A| - 1)`` layout there), their intervals are category masks and ``own_ok`` says the
    node's mask is a nonempty proper subset of its categories.
    """
    pf, pt, right, on = _path_rules(feature, threshold, max_depth)
    code_lo, code_hi = jnp.asarray(code_lo), jnp.asarray(code_hi)
    D = pf.shape[1]
    root_ok = code_hi > code_lo
    w = jnp.ones(code_lo.shape, dtype)
    pfc = jnp.maximum(pf, 0)
    # the interval, at the node, of the feature of each of its ancestors: (S, D) over the (S, D, D) pairs
    same = (pf[:, :, None] == pf[:, None, :]) & on[:, None, :] & on[:, :, None]
    lo = jnp.max(jnp.where(same & right[:, None, :], pt[:, None, :] + 1, -_BIG), 2)
    hi = jnp.min(jnp.where(same & ~right[:, None, :], pt[:, None, :], _BIG), 2)
    n_path = jnp.maximum(jnp.minimum(hi, code_hi[pfc]) - jnp.maximum(lo, code_lo[pfc]), 0)
    if categories is not None:
        side = jnp.where(right[:, None, :], ~pt[:, None, :], pt[:, None, :])
        masks = categories[pfc] & jnp.bitwise_and.reduce(jnp.where(same, side, -1), axis=2)
        n_path = jnp.where(categories[pfc] != 0, jnp.maximum(popcount(masks) - 1, 0), n_path)
    earlier = jnp.tril(jnp.ones((D, D), bool), -1)                              # a' < a
    first = on & ~jnp.any(same & earlier[None], 2)
    lost = first & root_ok[pfc] & (n_path == 0)
    avail = jnp.sum(jnp.where(root_ok, w, 0.0)) - jnp.sum(jnp.where(lost, w[pfc], 0.0), 1)
    # the node's own variable in its interval
    f = jnp.maximum(feature, 0)
    own = (pf == feature[:, None]) & on
    lo_o = jnp.max(jnp.where(own & right, pt + 1, -_BIG), 1)
    hi_o = jnp.min(jnp.where(own & ~right, pt, _BIG), 1)
    lo_o, hi_o = jnp.maximum(lo_o, code_lo[f]), jnp.minimum(hi_o, code_hi[f])
    n_own = jnp.maximum(hi_o - lo_o, 0)
    own_ok = (threshold >= lo_o) & (threshold < hi_o)
    if categories is not None:
        mask_o = _and_masks(own, right, pt, categories[f], axis=-1)
        cat = categories[f] != 0
        n_own = jnp.where(cat, jnp.maximum(popcount(mask_o) - 1, 0), n_own)
        own_ok = jnp.where(cat, _proper_subset(threshold, mask_o), own_ok)
    return avail, jnp.where(feature >= 0, n_own, 0).astype(jnp.int32), own_ok


def _proper_subset(t, mask):
    """``t`` is a nonempty proper subset of ``mask`` (category masks)."""
    return ((t & ~mask) == 0) & (t != 0) & (t != mask)


def node_interval(feature, threshold, code_lo, code_hi, node, max_depth: int, categories=None):
    """One node's interval of every feature: ``lo, hi`` int32 (d,), in ``O(D d)`` (given ``categories``, an
    unordered feature's in the ``(0, |A| - 1)`` layout; :func:`node_categories` its mask)."""
    anc, right, on, _ = path_tables(max_depth)
    a, r, o = jnp.asarray(anc)[node], jnp.asarray(right)[node], jnp.asarray(on)[node]
    pf = jnp.where(o, jnp.take(feature, a), -1)
    pt = jnp.take(threshold, a)
    d = code_lo.shape[-1]
    hit = pf[:, None] == jnp.arange(d, dtype=pf.dtype)                         # (D, d)
    lo = jnp.max(jnp.where(hit & r[:, None], pt[:, None] + 1, -_BIG), 0)
    hi = jnp.min(jnp.where(hit & ~r[:, None], pt[:, None], _BIG), 0)
    lo, hi = jnp.maximum(lo, code_lo).astype(jnp.int32), jnp.minimum(hi, code_hi).astype(jnp.int32)
    if categories is None:
        return lo, hi
    return categorical_layout(lo, hi, _and_masks(hit, r[:, None], pt[:, None], categories), categories)


def node_categories(feature, threshold, categories, node, max_depth: int):
    """One node's category mask of every feature, int32 (d,) (meaningless for ordered ones)."""
    anc, right, on, _ = path_tables(max_depth)
    a, r, o = jnp.asarray(anc)[node], jnp.asarray(right)[node], jnp.asarray(on)[node]
    pf = jnp.where(o, jnp.take(feature, a), -1)
    pt = jnp.take(threshold, a)
    hit = pf[:, None] == jnp.arange(categories.shape[-1], dtype=pf.dtype)
    return _and_masks(hit, r[:, None], pt[:, None], categories)


def log_tree_prior(feature, threshold, code_lo, code_hi, prior, max_depth: int, dtype=jnp.float32, categories=None):
    """``log p(T)`` of a heap tree under a depth prior with the interval rule prior, and its parts.

    ``log p(T) = sum_internal [log p_split(d) + log p_rule] + sum_leaves log p_stop(d)``, with
    ``log p_rule = -log(avail) - log(nthr_own)`` and ``p_stop = 1`` at a leaf that cannot split
    (``max_depth`` or no available variable).  :func:`log_tree_prior_weighted` is the same with
    split-variable probabilities.
    ``prior`` has ``log_split(depth)`` and ``log_stop(depth)`` (a :mod:`bayestrees.priors` depth
    prior, values possibly traced).

    Returns ``(log_prior, avail, internal, leaf, rules_ok)``: ``avail`` (S,) as
    :func:`node_rule_terms`, ``internal`` and ``leaf`` bool (S,) the tree's internal nodes and
    leaves, ``rules_ok`` whether every internal node's threshold is one of its interval's cut
    points (a tree where it is not has prior probability 0; such a tree also sends no row to one
    side of that node).
    """
    depth, internal, leaf = _shape(feature, max_depth)
    avail, n_own, own_ok = node_rule_terms(feature, threshold, code_lo, code_hi, max_depth, dtype, categories)
    log_n = (jnp.log(jnp.maximum(n_own, 1).astype(dtype)) if categories is None else
             log_rule_count(n_own, categories[jnp.maximum(feature, 0)] != 0, dtype))
    log_rule = -jnp.where(avail > 0, jnp.log(jnp.where(avail > 0, avail, 1)), 0.0) - log_n
    lp = _total(prior, depth, internal, leaf, avail, log_rule, max_depth, dtype)
    return lp, avail, internal, leaf, jnp.all(own_ok | ~internal)


def _shape(feature, max_depth: int):
    """``(depth, internal, leaf)`` of a heap tree's slots (``feature`` -1 where not internal)."""
    _, _, _, depth = path_tables(max_depth)
    S = feature.shape[-1]
    internal = feature >= 0
    parent = jnp.asarray(np.maximum((np.arange(S) - 1) // 2, 0))
    used = (jnp.arange(S) == 0) | internal[parent]
    return jnp.asarray(depth), internal, used & ~internal


def _total(prior, depth, internal, leaf, avail, log_rule, max_depth: int, dtype):
    """``sum_internal [log p_split + log_rule] + sum_leaves log p_stop`` (``p_stop = 1`` where a leaf cannot split)."""
    cannot = (depth >= max_depth) | (avail <= 0)
    lsplit = prior.log_split(depth).astype(dtype)
    lstop = jnp.where(cannot, 0.0, prior.log_stop(depth).astype(dtype))
    return jnp.sum(jnp.where(internal, lsplit + log_rule, 0.0) + jnp.where(leaf, lstop, 0.0)).astype(dtype)


def log_available_weight(lo, hi, log_w):
    """``log sum_{available j} w_j`` over the last axis (``lo``/``hi`` intervals, ``-inf`` when none is
    available), from log weights: a log-sum-exp, so that weights far below the float range (a sparse
    Dirichlet draw) neither underflow nor cancel."""
    ok = hi > lo
    x = jnp.where(ok, log_w, -jnp.inf)
    mx = jnp.max(x, -1, keepdims=True)
    mx = jnp.where(jnp.isfinite(mx), mx, 0.0)
    return (mx[..., 0] + jnp.log(jnp.sum(jnp.where(ok, jnp.exp(x - mx), 0.0), -1))).astype(log_w.dtype)


def log_tree_prior_weighted(feature, threshold, code_lo, code_hi, prior, max_depth: int, log_w, dtype=jnp.float32,
                            categories=None):
    """:func:`log_tree_prior` with split-variable probabilities ``w`` (given as ``log_w``, (d,)): a node
    picks its variable ``j`` with probability ``w_j / sum_available w``, in ``O(S D d)``.

    Returns ``(log_prior, avail, internal, leaf, rules_ok, log_avail_w)``: ``avail`` the number of
    available variables per slot (whether a node can split does not depend on ``w``) and
    ``log_avail_w`` (S,) the log of their total weight.
    """
    depth, internal, leaf = _shape(feature, max_depth)
    lo, hi = interval_ranges(feature, threshold, code_lo, code_hi, max_depth, categories)
    avail = jnp.sum(hi > lo, -1).astype(dtype)
    log_aw = log_available_weight(lo, hi, jnp.asarray(log_w, dtype))
    f = jnp.maximum(feature, 0)
    lo_f = jnp.take_along_axis(lo, f[:, None], -1)[:, 0]
    hi_f = jnp.take_along_axis(hi, f[:, None], -1)[:, 0]
    n_own = jnp.maximum(hi_f - lo_f, 0)
    own_ok = (threshold >= lo_f) & (threshold < hi_f)
    if categories is None:
        log_n = jnp.log(jnp.maximum(n_own, 1).astype(dtype))
    else:
        cat = categories[f] != 0
        mask_f = jnp.take_along_axis(category_ranges(feature, threshold, categories, max_depth), f[:, None], -1)[:, 0]
        own_ok = jnp.where(cat, _proper_subset(threshold, mask_f), own_ok)
        log_n = log_rule_count(n_own, cat, dtype)
    log_rule = jnp.take(jnp.asarray(log_w, dtype), f) - jnp.where(avail > 0, log_aw, 0.0) - log_n
    lp = _total(prior, depth, internal, leaf, avail, log_rule, max_depth, dtype)
    return lp, avail, internal, leaf, jnp.all(own_ok | ~internal), log_aw
