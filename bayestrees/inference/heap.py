"""Heap-indexed trees: the slot arithmetic, routing and subtree edits shared by the tree samplers.

A heap tree is a :class:`~bayestrees.tree.Tree` whose node ``k`` has children ``2k+1`` and ``2k+2``
and whose capacity ``S = 2^(D+1) - 1`` (:func:`capacity`) is its depth limit ``D``.  Bayesian CART
(:mod:`bayestrees.inference.bcart`), particle Gibbs and BET (:mod:`bayestrees.inference.bet`) keep
their trees in this layout: a slot's depth and its parent are arithmetic (:func:`depth_of`), rows are
routed by ``D`` steps of descent with no pointer chasing (:func:`route`, :func:`reroute`), and a
statistic per node is a scatter into the leaves folded up level by level (:func:`code_ranges`,
:func:`node_counts`).  The subtree edits that are not single grow/prune moves live here too
(:func:`truncate`, :func:`collapse`); single moves are :func:`bayestrees.tree.grow_leaf` and
:func:`bayestrees.tree.prune_node`.

The forests and the PCFG sampler build trees in creation order (CART trees are far deeper than a
heap could hold); they route with :func:`bayestrees.tree.apply`, which works for any layout.  The
functions here are the fast special case for heap trees and give the same leaves.

In the spirit of bartz's ``grove`` module.  Every function is written for one tree and vmapped for
batches.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..batching import scatter_add, scatter_max, take
from ..tree import FREE, LEAF, Tree

__all__ = ["capacity", "slot_tables", "leaf_slots", "depth_of", "descend", "route", "reroute", "code_ranges", "rule_counts", "fold_up", "node_counts",
           "grow_leaves", "with_heap_depths", "truncate", "collapse"]


def capacity(max_depth: int) -> int:
    """Slots of a heap tree of depth ``max_depth``: ``2^(max_depth + 1) - 1``."""
    return 2 ** (int(max_depth) + 1) - 1


def slot_tables(S: int):
    """Static (NumPy) tables of a heap of ``S`` slots: each slot's left child, right child (both
    clamped to ``S - 1`` on the last level), parent (0 for the root) and depth."""
    idx = np.arange(S)
    return (np.minimum(2 * idx + 1, S - 1), np.minimum(2 * idx + 2, S - 1), np.maximum((idx - 1) // 2, 0),
            np.floor(np.log2(idx + 1)).astype(np.int32))


def leaf_slots(feature):
    """Which heap slots of compact trees ``feature`` (``(..., S)``; ``-1`` at a leaf and at an unused
    slot) are leaves: not split, and the root or a split node's child."""
    S = feature.shape[-1]
    internal = feature >= 0
    par = np.maximum((np.arange(S) - 1) // 2, 0)
    return ~internal & ((np.arange(S) == 0) | internal[..., par])


def depth_of(slot):
    """Depth of heap slot ``slot``: floor(log2(slot + 1))."""
    s = jnp.asarray(slot, jnp.int32) + 1
    return (31 - jax.lax.clz(s)).astype(jnp.int32)


def descend(tree: Tree, codes, start, levels):
    """Rows' slots after ``levels`` steps of descent from the slots ``start`` (a leaf stays put):
    :func:`descend_rules` with the tree's rules (-1 as the feature of a slot that is not internal)."""
    return descend_rules(jnp.where(tree.left >= 0, tree.feature, -1), tree.threshold, codes, start, levels)


def descend_rules(feature, threshold, codes, start, levels, *, features_first: bool = False):
    """The one descent of heap trees: rows' slots after ``levels`` steps from the slots ``start``.

    ``feature`` (S,) is a slot's split variable, -1 where the slot does not split (a leaf stays
    put); a row goes to ``2k + 1`` when its code is at most ``threshold[k]``, else to ``2k + 2``.
    ``codes`` is ``(n, d)``, or ``(d, n)`` with ``features_first`` (BART's layout: a variable's
    codes contiguous).  Per step: one gather of the node's (feature, threshold) and one of the row's
    code; both are one-dimensional gathers under ``vmap`` (:mod:`bayestrees.batching`).
    """
    rule = jnp.stack([feature, threshold], -1)  # (S, 2)
    flat = codes.reshape(-1)
    if features_first:
        n = codes.shape[1]
        cols = jnp.arange(n, dtype=jnp.int32)
        code_at = lambda j: take(flat, j * n + cols).astype(jnp.int32)  # noqa: E731
    else:
        n, d = codes.shape
        rows_d = jnp.arange(n, dtype=jnp.int32) * d
        code_at = lambda j: take(flat, rows_d + j)  # noqa: E731

    def body(_, node):
        r = take(rule, node)
        c = code_at(jnp.maximum(r[:, 0], 0))
        return jnp.where(r[:, 0] >= 0, 2 * node + 1 + (c > r[:, 1]).astype(jnp.int32), node)

    return jax.lax.fori_loop(0, levels, body, start)


def route(tree: Tree, codes, max_depth: int):
    """Leaf slot of every row (heap tree: the children of ``k`` are ``2k+1``, ``2k+2``), by
    ``max_depth`` steps of descent from the root."""
    return descend(tree, codes, jnp.zeros(codes.shape[0], jnp.int32), max_depth)


def fold_up(x, max_depth: int, combine):
    """Fold a per-node array up the heap: each node's value combined with its two children's folded values.

    Parameters
    ----------
    x : array (S, ...)  one value per slot (``S = capacity(max_depth)``)
    max_depth : int  the heap's depth limit
    combine : callable ``(own (m, ...), children (m, 2, ...)) -> (m, ...)`` for the ``m`` slots of a level

    Returns
    -------
    array (S, ...): the deepest level unchanged, every level above combined with the level below.

    Levels are static slices put together by concatenation (no scatters), from the deepest up.
    """
    a, b = 2 ** max_depth - 1, x.shape[0]
    levels = [x[a:b]]
    for level in range(max_depth - 1, -1, -1):
        a, b = 2 ** level - 1, 2 ** (level + 1) - 1
        levels.append(combine(x[a:b], levels[-1].reshape((b - a, 2) + x.shape[1:])))
    return jnp.concatenate(levels[::-1])


def _sum_children(own, children):
    return own + children.sum(1)


def _max_children(own, children):
    return jnp.maximum(own, children.max(1))


def code_ranges(leaf, codes, weight, S: int, max_depth: int):
    """Per node: smallest and largest code per feature and the total weight of its rows.

    One scatter of the rows into their leaves, then the heap is folded upwards level by level
    (a node's range is the union of its children's): ``O(n d + S d)`` rather than a scatter per
    level.  The smallest and largest codes travel together as one ``(S, 2d)`` maximum of
    ``[-code, code]``: one scatter with one combiner (on the CPU a third of the time of a
    minimum and a maximum scattered apart) and one fold.
    """
    n, d = codes.shape
    big = 1 << 30  # no overflow in differences of ranges
    live = weight > 0
    idx = jnp.where(live, leaf, S)
    empty = jnp.concatenate([jnp.full((d,), -big, jnp.int32), jnp.full((d,), -1, jnp.int32)])  # -lo, hi
    c = jnp.asarray(codes).astype(jnp.int32)  # signed before negating (unsigned codes would wrap)
    signed = jnp.concatenate([-c, c], 1)
    m = scatter_max(jnp.broadcast_to(empty, (S + 1, 2 * d)), idx, signed)[:S]
    cnt = scatter_add(jnp.zeros(S + 1, weight.dtype), idx, jnp.where(live, weight, 0))[:S]
    m = fold_up(m, max_depth, _max_children)
    return -m[:, :d], m[:, d:], fold_up(cnt, max_depth, _sum_children)


def rule_counts(lo, hi):
    """Valid variables per node (int32 (S,)) and valid thresholds per node and variable (int32 (S, d))."""
    nthr = jnp.maximum(hi - lo, 0)
    return jnp.sum(nthr > 0, -1).astype(jnp.int32), nthr


def in_subtree(slot, node):
    """Whether heap slots ``slot`` lie in the subtree of the slot ``node`` (``node`` itself included)."""
    dn, ds = depth_of(node), depth_of(slot)
    return (ds >= dn) & (jnp.right_shift(slot + 1, jnp.maximum(ds - dn, 0)) == node + 1)


def reroute(tree: Tree, codes, leaf, node, max_depth: int):
    """Leaf slots after a change of ``tree`` below ``node``, from the slots ``leaf`` before it.

    Only rows whose old leaf lies in the subtree of ``node`` move: they restart at ``node`` and
    descend as many levels as the new subtree is deep (1 after a grow at a leaf, 0 after a prune),
    so a move costs a pass per level of the changed subtree rather than of the whole tree.
    The result equals :func:`route` of the new tree.
    """
    S = tree.left.shape[0]
    dn = depth_of(node)
    slots = jnp.arange(S, dtype=jnp.int32)
    below = tree.is_used() & in_subtree(slots, node)
    levels = jnp.max(jnp.where(below, depth_of(slots), dn)) - dn
    start = jnp.where(in_subtree(leaf, node), node, leaf).astype(jnp.int32)
    return descend(tree, codes, start, jnp.minimum(levels, max_depth))


def collapse(tree: Tree, count, min_rows) -> Tree:
    """The largest sub-tree from the root in which every internal node's children hold ``>= min_rows`` rows.

    Parameters
    ----------
    tree : Tree, one heap tree (capacity S)
    count : float (S,)  row weight per node
    min_rows : minimum rows per child

    Returns
    -------
    Tree: a node stays internal when it is internal, both its children hold ``>= min_rows`` rows and
    its parent stays internal (the root has no parent); a node whose parent stays internal but
    which does not is a leaf; everything below is freed.
    """
    S = tree.feature.shape[-1]
    idx = jnp.arange(S)
    lc, rc = jnp.clip(2 * idx + 1, 0, S - 1), jnp.clip(2 * idx + 2, 0, S - 1)
    kept = tree.is_internal() & (count[lc] >= min_rows) & (count[rc] >= min_rows)
    depth = S.bit_length() - 1  # S = 2^(D+1) - 1
    for level in range(1, depth + 1):
        a, b = 2 ** level - 1, 2 ** (level + 1) - 1
        kept = kept.at[a:b].set(kept[a:b] & kept[(idx[a:b] - 1) // 2])
    par = jnp.maximum((idx - 1) // 2, 0)
    alive = (idx == 0) | kept[par]
    left = jnp.where(alive & kept, tree.left, jnp.where(alive, LEAF, FREE)).astype(jnp.int32)
    right = jnp.where(alive & kept, tree.right, jnp.where(alive, LEAF, FREE)).astype(jnp.int32)
    return tree._replace(left=left, right=right, feature=jnp.where(kept, tree.feature, -1).astype(jnp.int32),
                         threshold=jnp.where(kept, tree.threshold, 0).astype(jnp.int32),
                         n_nodes=jnp.sum(alive).astype(jnp.int32))


def node_counts(leaf, w, S: int):
    """Row weight per heap node (S,) from each row's leaf slot: a scatter into the leaves, then folded up."""
    cnt = jax.ops.segment_sum(w, leaf, S)
    return fold_up(cnt, S.bit_length() - 1, _sum_children)


def truncate(tree: Tree, t) -> Tree:
    """``tree`` cut at depth ``t``: nodes deeper than ``t`` removed, nodes at depth ``t`` made leaves."""
    S = tree.left.shape[-1]
    depth = depth_of(jnp.arange(S))
    keep = tree.is_used() & (depth <= t)
    inner = keep & (depth < t) & tree.is_internal()
    return tree._replace(
        left=jnp.where(keep, jnp.where(inner, tree.left, LEAF), FREE).astype(tree.left.dtype),
        right=jnp.where(keep, jnp.where(inner, tree.right, LEAF), FREE).astype(tree.right.dtype),
        feature=jnp.where(inner, tree.feature, -1).astype(tree.feature.dtype),
        threshold=jnp.where(inner, tree.threshold, 0).astype(tree.threshold.dtype),
        missing_left=jnp.where(inner, tree.missing_left, False),
        n_nodes=jnp.sum(keep).astype(tree.n_nodes.dtype))


def with_heap_depths(tree: Tree) -> Tree:
    """``tree`` with every slot's ``depth`` its heap depth (used, leaf or free alike)."""
    S = tree.left.shape[-1]
    return tree._replace(depth=depth_of(jnp.arange(S)).astype(tree.depth.dtype))


def grow_leaves(tree: Tree, split, feature, threshold, n_split=None) -> Tree:
    """Split every leaf marked in ``split`` into its heap children, all at once.

    Parameters
    ----------
    tree : Tree, one heap tree (capacity S)
    split : bool (S,)  the leaves to split (the caller marks only leaves whose children fit)
    feature, threshold : int (S,)  the rule of each split node (read where ``split``)
    n_split : int, optional  ``sum(split)`` when the caller has it (from a shorter mask)

    Returns
    -------
    Tree: each marked slot ``k`` internal with children ``2k+1``, ``2k+2`` made leaves; ``n_nodes``
    counts the new slots.  The ``depth`` field is left as it is: every slot must already hold its
    heap depth (:func:`with_heap_depths`; a tree from the root leaf of the samplers does, while
    :func:`bayestrees.tree.prune_node` sets a freed slot's depth to 0).  The many-leaf form of :func:`bayestrees.tree.grow_leaf` with
    ``heap=True`` (particle Gibbs extends every particle's frontier in one step).
    """
    S = split.shape[0]
    idx = jnp.arange(S, dtype=jnp.int32)
    born = (idx > 0) & split[jnp.maximum((idx - 1) // 2, 0)]
    return tree._replace(
        left=jnp.where(split, 2 * idx + 1, jnp.where(born, LEAF, tree.left)).astype(tree.left.dtype),
        right=jnp.where(split, 2 * idx + 2, jnp.where(born, LEAF, tree.right)).astype(tree.right.dtype),
        feature=jnp.where(split, feature, tree.feature).astype(tree.feature.dtype),
        threshold=jnp.where(split, threshold, tree.threshold).astype(tree.threshold.dtype),
        n_nodes=(tree.n_nodes + 2 * (jnp.sum(split) if n_split is None else n_split)).astype(tree.n_nodes.dtype))
