"""The heap-tree layer (``bayestrees.inference.heap``) against brute force on random heap trees.

A heap tree's node ``k`` has children ``2k + 1`` and ``2k + 2``; every function here is checked
against a plain-Python walk of the same tree (routing, per-node code ranges and counts, the
edits), on random trees of depth up to 3 and random codes.
"""
import jax.numpy as jnp
import numpy as np
import pytest

from bayestrees.inference import heap
from bayestrees.tree import FREE, LEAF, Tree, apply, grow_leaf, prune_node

D, N, d, LEVELS = 3, 40, 3, 6


def _root(S: int) -> Tree:
    return Tree(feature=-jnp.ones(S, jnp.int32), threshold=jnp.zeros(S, jnp.int32),
                left=jnp.full(S, FREE, jnp.int32).at[0].set(LEAF), right=jnp.full(S, FREE, jnp.int32).at[0].set(LEAF),
                missing_left=jnp.zeros(S, bool), value=jnp.zeros((S, 1)), weight=jnp.zeros(S), count=jnp.zeros(S, jnp.int32),
                depth=heap.depth_of(jnp.arange(S)), n_nodes=jnp.ones((), jnp.int32))


def _random_tree(rng, max_depth=D, p_split=0.6) -> Tree:
    """A heap tree grown leaf by leaf from the root with random rules (codes 0 .. LEVELS - 1)."""
    S = heap.capacity(max_depth)
    tree = _root(S)
    for s in range(S):
        if int(tree.left[s]) == LEAF and int(heap.depth_of(s)) < max_depth and rng.random() < p_split:
            tree, ok = grow_leaf(tree, s, int(rng.integers(d)), int(rng.integers(LEVELS - 1)), heap=True)
            assert bool(ok)
    return tree


def _walk(tree: Tree, row) -> int:
    """The leaf slot of one row by a plain walk."""
    s = 0
    while int(tree.left[s]) >= 0:
        s = 2 * s + 1 + int(row[int(tree.feature[s])] > int(tree.threshold[s]))
    return s


def _below(s: int, k: int) -> bool:
    """Whether slot ``k`` lies in the subtree of slot ``s`` (``s`` itself included)."""
    while k > s:
        k = (k - 1) // 2
    return k == s


@pytest.fixture(params=range(4))
def case(request):
    rng = np.random.default_rng(request.param)
    return rng, _random_tree(rng), rng.integers(0, LEVELS, size=(N, d)).astype(np.int32)


def test_slot_arithmetic():
    assert [heap.capacity(k) for k in range(4)] == [1, 3, 7, 15]
    assert np.asarray(heap.depth_of(jnp.arange(15))).tolist() == [0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3]


def test_route_is_the_walk_and_the_generic_routing(case):
    _, tree, codes = case
    want = [_walk(tree, r) for r in codes]
    assert np.asarray(heap.route(tree, jnp.asarray(codes), D)).tolist() == want
    assert np.asarray(apply(tree, jnp.asarray(codes.astype(np.uint8)))).tolist() == want


def test_reroute_after_each_edit_equals_routing_afresh(case):
    rng, tree, codes = case
    leaf = heap.route(tree, jnp.asarray(codes), D)
    internal = np.flatnonzero(np.asarray(tree.left) >= 0)
    leaves = np.flatnonzero(np.asarray(tree.left) == LEAF)
    edits = []
    grow_at = [int(s) for s in leaves if int(heap.depth_of(s)) < D]
    if grow_at:
        s = grow_at[0]
        edits.append((grow_leaf(tree, s, 1, 2, heap=True)[0], s))
    prunable = [int(s) for s in internal if int(tree.left[2 * s + 1]) == LEAF and int(tree.left[2 * s + 2]) == LEAF]
    if prunable:
        s = prunable[0]
        edits.append((prune_node(tree, s)[0], s))
    if len(internal):   # a change of the root's rule: every row descends again from it
        edits.append((tree._replace(feature=tree.feature.at[0].set((int(tree.feature[0]) + 1) % d)), 0))
    assert edits
    for new, node in edits:
        got = heap.reroute(new, jnp.asarray(codes), leaf, node, D)
        assert np.asarray(got).tolist() == [_walk(new, r) for r in codes]


def test_code_ranges_and_counts_per_node(case):
    rng, tree, codes = case
    S = heap.capacity(D)
    w = rng.uniform(0.5, 2.0, size=N) * (rng.random(N) < 0.8)          # some rows of weight 0
    leaf = [_walk(tree, r) for r in codes]
    lo, hi, cnt = heap.code_ranges(jnp.asarray(leaf), jnp.asarray(codes), jnp.asarray(w), S, D)
    counts = heap.node_counts(jnp.asarray(leaf), jnp.asarray(w), S)
    for s in range(S):
        rows = [i for i in range(N) if _below(s, leaf[i]) and w[i] > 0]
        assert float(cnt[s]) == pytest.approx(sum(w[i] for i in rows), abs=1e-5)
        assert float(counts[s]) == pytest.approx(sum(w[i] for i in [i for i in range(N) if _below(s, leaf[i])]),
                                                 abs=1e-5)
        if rows:
            assert np.asarray(lo[s]).tolist() == codes[rows].min(0).tolist()
            assert np.asarray(hi[s]).tolist() == codes[rows].max(0).tolist()
        else:   # empty: no valid rule (hi < lo)
            assert np.all(np.asarray(hi[s]) < np.asarray(lo[s]))
    nvar, nthr = heap.rule_counts(lo, hi)
    assert np.array_equal(np.asarray(nthr), np.maximum(np.asarray(hi) - np.asarray(lo), 0))
    assert np.array_equal(np.asarray(nvar), (np.asarray(nthr) > 0).sum(1))


def test_fold_up_combines_each_node_with_its_subtree():
    x = jnp.arange(15, dtype=jnp.float32)
    got = np.asarray(heap.fold_up(x, 3, lambda own, ch: own + ch.sum(1)))
    assert got.tolist() == [float(sum(k for k in range(15) if _below(s, k))) for s in range(15)]


def test_truncate_keeps_the_top_and_routes_to_the_ancestors(case):
    _, tree, codes = case
    for t in range(D + 1):
        cut = heap.to_tree(heap.truncate(heap.rules_of(tree), t))
        for r in codes:
            s = _walk(tree, r)
            while int(heap.depth_of(s)) > t:
                s = (s - 1) // 2
            assert _walk(cut, r) == s
        assert int(cut.n_nodes) == int(np.sum(np.asarray(cut.left) != FREE))


def test_collapse_keeps_the_splits_whose_children_hold_q_rows(case):
    rng, tree, codes = case
    S = heap.capacity(D)
    leaf = [_walk(tree, r) for r in codes]
    count = np.array([sum(_below(s, k) for k in leaf) for s in range(S)], np.float32)
    for q in (1, 3, 6):
        got = heap.to_tree(heap.collapse(heap.rules_of(tree), jnp.asarray(count), q))

        def keeps(s):   # internal, both children hold q rows, and every ancestor keeps too
            ok = int(tree.left[s]) >= 0 and count[2 * s + 1] >= q and count[2 * s + 2] >= q
            return ok and (s == 0 or keeps((s - 1) // 2))

        for s in range(S):
            alive = s == 0 or keeps((s - 1) // 2)
            want = (2 * s + 1) if (alive and keeps(s)) else (LEAF if alive else FREE)
            assert int(got.left[s]) == want, (q, s)


def test_grow_leaves_at_once_is_growing_them_one_by_one(case):
    rng, tree, _ = case
    S = heap.capacity(D)
    split = np.array([int(tree.left[s]) == LEAF and int(heap.depth_of(s)) < D for s in range(S)])
    feature, threshold = rng.integers(d, size=S), rng.integers(LEVELS - 1, size=S)
    got = heap.to_tree(heap.grow_leaves(heap.rules_of(tree), jnp.asarray(split), jnp.asarray(feature),
                                        jnp.asarray(threshold)))
    want = tree
    for s in np.flatnonzero(split):
        want, ok = grow_leaf(want, int(s), int(feature[s]), int(threshold[s]), heap=True)
    for field in ("left", "right", "feature", "threshold", "n_nodes"):
        assert np.array_equal(np.asarray(getattr(got, field)), np.asarray(getattr(want, field))), field


def test_heap_trees_and_their_full_trees(case):
    """A :class:`HeapTree` says what its ``Tree`` says (leaves, internal and used slots, depths, the
    rows' leaves), and the two conversions are each other's inverse on heap-laid trees."""
    _, tree, codes = case
    h = heap.rules_of(tree)
    for name in ("is_leaf", "is_internal", "is_used"):
        assert np.array_equal(np.asarray(getattr(h, name)()), np.asarray(getattr(tree, name)())), name
    assert np.asarray(heap.route(h, jnp.asarray(codes), D)).tolist() == [_walk(tree, r) for r in codes]
    back = heap.to_tree(h, tree.value, tree.weight, tree.count)
    for field in ("feature", "threshold", "left", "right", "n_nodes"):
        assert np.array_equal(np.asarray(getattr(back, field)), np.asarray(getattr(tree, field))), field
    assert np.asarray(back.depth).tolist() == np.asarray(heap.depth_of(jnp.arange(tree.capacity))).tolist()
    assert all(np.array_equal(a, b) for a, b in zip(heap.rules_of(back), h))
    root = heap.to_tree(heap.root(heap.capacity(D)))
    assert np.asarray(root.left).tolist() == [LEAF] + [FREE] * (heap.capacity(D) - 1)
