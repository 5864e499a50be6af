"""Tree surgery (grow_leaf / prune_node) keeps a valid tree under random move sequences."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayestrees.tree as T
from bayestrees.leaves import leaf_stats


def _random_moves(key, capacity=15, steps=200, n_features=3, n_bins=6):
    """A jitted scan of random grow / prune attempts on random nodes; returns every intermediate tree."""

    def step(tree, k):
        k_kind, k_node, k_f, k_t = jax.random.split(k, 4)
        node = jax.random.randint(k_node, (), 0, capacity)
        f = jax.random.randint(k_f, (), 0, n_features)
        t = jax.random.randint(k_t, (), 0, n_bins - 1)
        grown, ok_g = T.grow_leaf(tree, node, f, t)
        pruned, ok_p = T.prune_node(tree, node)
        grow = jax.random.bernoulli(k_kind, 0.55)
        new = jax.tree_util.tree_map(lambda a, b: jnp.where(grow, a, b), grown, pruned)
        return new, (new, jnp.where(grow, ok_g, ok_p))

    _, (trees, oks) = jax.jit(lambda k: jax.lax.scan(step, T.empty_tree(capacity), jax.random.split(k, steps)))(key)
    return trees, oks


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_grow_prune_sequences_keep_valid_trees(seed):
    trees, oks = _random_moves(jax.random.key(seed))
    oks = np.asarray(oks)
    assert 20 < oks.sum() < len(oks)  # both successful and refused moves happened
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 6, size=(300, 3)).astype(np.uint8)
    sizes = set()
    for i in range(len(oks)):
        t = T.index_tree(trees, i)
        T.check_tree(t)
        n_used = int(np.sum(np.asarray(t.is_used())))
        sizes.add(n_used)
        assert int(T.n_leaves(t)) == (n_used + 1) // 2
        leaf = np.asarray(T.apply(t, codes))
        assert np.all(np.asarray(t.is_leaf())[leaf])              # every row lands in a leaf
        counts = np.asarray(leaf_stats(leaf, np.ones((300, 1), np.float32), t.capacity))[:, 0]
        assert counts.sum() == 300 and np.all(counts[~np.asarray(t.is_leaf())] == 0)
    assert max(sizes) >= 9 and min(sizes) == 1  # the walk grew trees and pruned back to the root


def test_grow_and_prune_refuse_impossible_moves():
    t = T.empty_tree(3)
    t, ok = T.grow_leaf(t, 0, 0, 1)
    assert bool(ok)
    t2, ok = T.grow_leaf(t, 1, 0, 1)            # no free slots left
    assert not bool(ok) and np.array_equal(np.asarray(t2.left), np.asarray(t.left))
    t3, ok = T.prune_node(t, 1)                 # a leaf cannot be pruned
    assert not bool(ok) and int(t3.n_nodes) == 3
    t4, ok = T.grow_leaf(t, 0, 0, 1)            # an internal node cannot be grown
    assert not bool(ok)


def test_pruned_tree_summaries_ignore_free_slots():
    t = T.empty_tree(7)
    t, _ = T.grow_leaf(t, 0, 0, 2)
    t, _ = T.grow_leaf(t, 1, 1, 3)
    t, _ = T.prune_node(t, 1)                   # slots 3 and 4 become free, below n_nodes' old value
    T.check_tree(t)
    assert int(T.n_leaves(t)) == 2 and int(T.max_depth(t)) == 1
    assert np.asarray(T.feature_counts(t, 2)).tolist() == [1, 0]
    t, _ = T.grow_leaf(t, 2, 1, 1)              # reuses the freed slots
    assert sorted(np.flatnonzero(np.asarray(t.is_used())).tolist()) == [0, 1, 2, 3, 4]
    dot = T.to_dot(t)
    assert dot.count("->") == 4
    assert T.to_text(t).count("value:") == 3
    assert np.asarray(T.parents(t)).tolist()[:5] == [-1, 0, 0, 2, 2]


def test_threshold_minus_one_sends_every_code_right():
    t = T.empty_tree(3)
    t, _ = T.grow_leaf(t, 0, 0, -1)
    codes = np.array([[0], [1], [5], [254]], np.uint8)
    leaf = np.asarray(T.apply(t, codes))
    assert np.all(leaf == int(t.right[0]))
    t2, _ = T.grow_leaf(T.empty_tree(3), 0, 0, 254)  # the largest non-missing uint8 code: every row goes left
    assert np.all(np.asarray(T.apply(t2, codes)) == int(t2.left[0]))
