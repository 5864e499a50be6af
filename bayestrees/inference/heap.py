"""Heap trees: the one layout of the tree samplers, its slot arithmetic, routing and subtree edits.

A heap tree's node ``k`` has children ``2k+1`` and ``2k+2``, and its capacity ``S = 2^(D+1) - 1``
(:func:`capacity`) is its depth limit ``D``.  Every tree sampler moves trees in this layout, held
by their rules alone (:class:`HeapTree`: the split variable and split code of every slot, -1 and 0
off the internal slots): Bayesian CART (:mod:`bayestrees.inference.bcart`), its particle Gibbs,
BET (:mod:`bayestrees.inference.bet`), BART and the tree functions (their ``(m, S)`` arrays of
``feature`` and ``threshold`` are the same layout, a tree per row).  A slot's depth and its parent
are arithmetic (:func:`depth_of`, :func:`slot_tables`), its being a leaf follows from the rules
(:func:`leaf_slots`), rows are routed by ``D`` steps of descent with no pointer chasing
(:func:`descend_rules`, :func:`route`, :func:`reroute`), and a statistic per node is a scatter
into the leaves folded up level by level (:func:`code_ranges`, :func:`node_counts`).  The subtree
edits beyond single moves live here too (:func:`truncate`, :func:`collapse`, :func:`grow_leaves`);
single moves are :func:`bayestrees.inference.proposals.set_rules`.  The full
:class:`~bayestrees.tree.Tree` (children pointers, depths, leaf values, counts) is made at the
edges, for the draws and export (:func:`to_tree`; :func:`rules_of` the other way).

The forests and the PCFG sampler build trees in creation order (CART trees are far deeper than a
heap could hold); they route with :func:`bayestrees.tree.apply`, which works for any layout.  The
functions here are the fast special case for heap trees and give the same leaves.

In the spirit of bartz's ``grove`` module.  Every function is written for one tree and vmapped for
batches.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..batching import scatter_add, scatter_max, take
from ..tree import FREE, LEAF, Tree

__all__ = ["HeapTree", "root", "to_tree", "rules_of", "capacity", "slot_tables", "leaf_slots", "depth_of", "descend", "route", "route_batch", "reroute", "code_ranges", "category_masks", "rule_counts", "fold_up", "node_counts",
           "grow_leaves", "truncate", "collapse"]


class HeapTree(NamedTuple):
    """A heap tree by its rules alone: the layout every tree sampler moves.

    ``feature`` int32 (..., S): the split variable of each internal slot, -1 at leaves and unused
    slots; ``threshold`` int32 (..., S): the split code (rows with ``code <= threshold`` go left), 0
    off the internal slots.  Leaves and unused slots follow from ``feature`` (a leaf is a slot that
    does not split and is the root or a split node's child), so a tree is a function of its rules
    and has one labelling.  The methods are those of :class:`~bayestrees.tree.Tree` that the samplers
    and the priors read; :func:`to_tree` makes the full ``Tree`` at the edges (draws, export).
    """

    feature: jax.Array
    threshold: jax.Array

    @property
    def capacity(self) -> int:
        return int(self.feature.shape[-1])

    @property
    def depth(self) -> jax.Array:
        """int32 (S,): every slot's heap depth."""
        return depth_of(jnp.arange(self.capacity))

    def is_internal(self) -> jax.Array:
        return self.feature >= 0

    def is_leaf(self) -> jax.Array:
        return leaf_slots(self.feature)

    def is_used(self) -> jax.Array:
        return self.is_internal() | self.is_leaf()


def root(S: int) -> HeapTree:
    """The root leaf in a heap of ``S`` slots."""
    return HeapTree(feature=-jnp.ones(S, jnp.int32), threshold=jnp.zeros(S, jnp.int32))


def rules_of(tree: Tree) -> HeapTree:
    """The :class:`HeapTree` of a heap-laid :class:`~bayestrees.tree.Tree` (its rules at internal slots)."""
    internal = tree.left >= 0
    return HeapTree(feature=jnp.where(internal, tree.feature, -1).astype(jnp.int32),
                    threshold=jnp.where(internal, tree.threshold, 0).astype(jnp.int32))


def to_tree(tree: HeapTree, value=None, weight=None, count=None, dtype=jnp.float32) -> Tree:
    """The :class:`~bayestrees.tree.Tree` of one heap tree: children ``2k + 1``, ``2k + 2`` of the
    internal slots, every slot's heap depth, ``value`` (S, V), ``weight`` and ``count`` (S,) where
    given (zero off the used slots; zeros when not given)."""
    S = tree.capacity
    idx = jnp.arange(S)
    internal, used = tree.is_internal(), tree.is_used()
    child = lambda k: jnp.where(internal, k, jnp.where(used, LEAF, FREE)).astype(jnp.int32)  # noqa: E731
    value = jnp.zeros((S, 1), dtype) if value is None else jnp.where(used[:, None], value, 0).astype(value.dtype)
    weight = jnp.zeros(S, value.dtype) if weight is None else jnp.where(used, weight, 0).astype(value.dtype)
    count = jnp.zeros(S, jnp.int32) if count is None else jnp.where(used, count, 0).astype(jnp.int32)
    return Tree(feature=tree.feature.astype(jnp.int32), threshold=tree.threshold.astype(jnp.int32),
                left=child(2 * idx + 1), right=child(2 * idx + 2), missing_left=jnp.zeros(S, bool), value=value,
                weight=weight, count=count, depth=depth_of(idx), n_nodes=jnp.sum(used).astype(jnp.int32))


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


def descend(tree, codes, start, levels, categories=None):
    """Rows' slots after ``levels`` steps of descent from the slots ``start`` (a leaf stays put):
    :func:`descend_rules` with the rules of ``tree`` (a :class:`HeapTree` or a heap-laid ``Tree``)."""
    return descend_rules(jnp.where(tree.is_internal(), tree.feature, -1), tree.threshold, codes, start, levels,
                         categories=categories)


def goes_right(code, var, threshold, categories=None):
    """Whether the rule ``(var, threshold)`` sends a row of code ``code`` (of variable ``var``) right:
    ``code > threshold``, or at an unordered variable (``categories[var] != 0``:
    :mod:`bayestrees.inference.intervals`) its bit clear in the rule's category mask."""
    if categories is None:
        return code > threshold
    code = code.astype(jnp.int32)
    return jnp.where(categories[var] != 0, ((threshold >> code) & 1) == 0, code > threshold)


def descend_rules(feature, threshold, codes, start, levels, *, features_first: bool = False, categories=None):
    """The one descent of heap trees: rows' slots after ``levels`` steps from the slots ``start``.

    ``feature`` (S,) is a slot's split variable, -1 where the slot does not split (a leaf stays
    put); a row goes to ``2k + 1`` when its code is at most ``threshold[k]``, else to ``2k + 2``.
    ``codes`` is ``(n, d)``, or ``(d, n)`` with ``features_first`` (BART's layout: a variable's
    codes contiguous).  Per step: one gather of the node's (feature, threshold) and one of the row's
    code; both are one-dimensional gathers under ``vmap`` (:mod:`bayestrees.batching`).  Given
    ``categories``, unordered variables' rules are category masks (:func:`goes_right`).
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
        v = jnp.maximum(r[:, 0], 0)
        c = code_at(v)
        return jnp.where(r[:, 0] >= 0, 2 * node + 1 + goes_right(c, v, r[:, 1], categories).astype(jnp.int32), node)

    return jax.lax.fori_loop(0, levels, body, start)


def route(tree: Tree, codes, max_depth: int, categories=None):
    """Leaf slot of every row (heap tree: the children of ``k`` are ``2k+1``, ``2k+2``), by
    ``max_depth`` steps of descent from the root (``categories``: :func:`goes_right`)."""
    return descend(tree, codes, jnp.zeros(codes.shape[0], jnp.int32), max_depth, categories)


def route_batch(feature, threshold, codes, max_depth: int, categories=None) -> np.ndarray:
    """Leaf slot of every row under every tree of a batch, on the host: ``feature``, ``threshold``
    ``(..., S)`` heap rules (``-1`` where a slot does not split), ``codes`` ``(n, d)``; int32
    ``(..., n)``.  The export's edge for rules that :class:`~bayestrees.tree.Tree` routing does not
    read, category masks (``categories``: :func:`goes_right`)."""
    feature, threshold = np.asarray(feature), np.asarray(threshold)
    lead, S = feature.shape[:-1], feature.shape[-1]
    c = jnp.asarray(np.asarray(codes), jnp.int32)
    cats = None if categories is None else jnp.asarray(categories, jnp.int32)
    out = _route_many(jnp.asarray(feature.reshape(-1, S), jnp.int32), jnp.asarray(threshold.reshape(-1, S), jnp.int32),
                      c, cats, int(max_depth))
    return np.asarray(out).reshape(lead + (c.shape[0],))


@partial(jax.jit, static_argnums=4)
def _route_many(feature, threshold, codes, categories, max_depth: int):
    """:func:`descend_rules` from the root for a batch of trees ``(B, S)``: one compilation per shape."""
    start = jnp.zeros(codes.shape[0], jnp.int32)
    return jax.vmap(lambda f, t: descend_rules(f, t, codes, start, max_depth, categories=categories))(feature, threshold)


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


def category_masks(leaf, codes, weight, S: int, max_depth: int, categories, bits: int = 24):
    """Per node, the categories its rows hold of every unordered variable: int32 (S, d), bit ``c`` set
    where a row of the node (weight > 0) has code ``c`` (``categories``: the root masks, 0 for an
    ordered variable, whose entries are 0).  One scatter of the rows' category indicators into their
    leaves (``n d bits`` cells), folded up the heap as :func:`code_ranges` folds its ranges."""
    n, d = codes.shape
    live = weight > 0
    idx = jnp.where(live, leaf, S)
    c = jnp.clip(jnp.asarray(codes).astype(jnp.int32), 0, bits - 1)
    hot = (c[:, :, None] == jnp.arange(bits, dtype=jnp.int32)).astype(jnp.int32).reshape(n, d * bits)
    pres = scatter_max(jnp.zeros((S + 1, d * bits), jnp.int32), idx, hot)[:S]
    pres = fold_up(pres, max_depth, _max_children).reshape(S, d, bits)
    masks = jnp.sum(jnp.left_shift(pres, jnp.arange(bits, dtype=jnp.int32)), -1).astype(jnp.int32)
    return masks & categories


def rule_counts(lo, hi):
    """Valid variables per node (int32 (S,)) and valid thresholds per node and variable (int32 (S, d))."""
    nthr = jnp.maximum(hi - lo, 0)
    return jnp.sum(nthr > 0, -1).astype(jnp.int32), nthr


def in_subtree(slot, node):
    """Whether heap slots ``slot`` lie in the subtree of the slot ``node`` (``node`` itself included)."""
    dn, ds = depth_of(node), depth_of(slot)
    return (ds >= dn) & (jnp.right_shift(slot + 1, jnp.maximum(ds - dn, 0)) == node + 1)


def reroute(tree: Tree, codes, leaf, node, max_depth: int, categories=None):
    """Leaf slots after a change of ``tree`` below ``node``, from the slots ``leaf`` before it.

    Only rows whose old leaf lies in the subtree of ``node`` move: they restart at ``node`` and
    descend as many levels as the new subtree is deep (1 after a grow at a leaf, 0 after a prune),
    so a move costs a pass per level of the changed subtree rather than of the whole tree.
    The result equals :func:`route` of the new tree.
    """
    S = tree.feature.shape[0]
    dn = depth_of(node)
    slots = jnp.arange(S, dtype=jnp.int32)
    below = tree.is_used() & in_subtree(slots, node)
    levels = jnp.max(jnp.where(below, depth_of(slots), dn)) - dn
    start = jnp.where(in_subtree(leaf, node), node, leaf).astype(jnp.int32)
    return descend(tree, codes, start, jnp.minimum(levels, max_depth), categories)


def collapse(tree: HeapTree, count, min_rows) -> HeapTree:
    """The largest sub-tree from the root in which every internal node's children hold ``>= min_rows`` rows.

    ``count`` float (S,): row weight per node.  A node stays internal when it is internal, both its
    children hold ``>= min_rows`` rows and its parent stays internal (the root has no parent); a node
    whose parent stays internal but which does not is a leaf; everything below is freed.
    """
    S = tree.feature.shape[-1]
    idx = jnp.arange(S)
    lc, rc = jnp.clip(2 * idx + 1, 0, S - 1), jnp.clip(2 * idx + 2, 0, S - 1)
    kept = tree.is_internal() & (count[lc] >= min_rows) & (count[rc] >= min_rows)
    depth = S.bit_length() - 1  # S = 2^(D+1) - 1
    for level in range(1, depth + 1):
        a, b = 2 ** level - 1, 2 ** (level + 1) - 1
        kept = kept.at[a:b].set(kept[a:b] & kept[(idx[a:b] - 1) // 2])
    return HeapTree(feature=jnp.where(kept, tree.feature, -1).astype(jnp.int32),
                    threshold=jnp.where(kept, tree.threshold, 0).astype(jnp.int32))


def node_counts(leaf, w, S: int):
    """Row weight per heap node (S,) from each row's leaf slot: a scatter into the leaves, then folded up."""
    cnt = jax.ops.segment_sum(w, leaf, S)
    return fold_up(cnt, S.bit_length() - 1, _sum_children)


def truncate(tree: HeapTree, t) -> HeapTree:
    """``tree`` cut at depth ``t``: nodes deeper than ``t`` removed, nodes at depth ``t`` made leaves."""
    inner = tree.is_internal() & (depth_of(jnp.arange(tree.feature.shape[-1])) < t)
    return HeapTree(feature=jnp.where(inner, tree.feature, -1).astype(tree.feature.dtype),
                    threshold=jnp.where(inner, tree.threshold, 0).astype(tree.threshold.dtype))


def grow_leaves(tree: HeapTree, split, feature, threshold) -> HeapTree:
    """Split every leaf marked in ``split`` (bool (S,); the caller marks only leaves whose children
    fit) with the rules ``feature``, ``threshold`` (read where ``split``), all at once: the many-leaf
    grow with which particle Gibbs extends every particle's frontier in one step."""
    return HeapTree(feature=jnp.where(split, feature, tree.feature).astype(tree.feature.dtype),
                    threshold=jnp.where(split, threshold, tree.threshold).astype(tree.threshold.dtype))
