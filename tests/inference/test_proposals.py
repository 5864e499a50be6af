"""The one proposal module (``bayestrees.inference.proposals``) against brute force.

Picks (one uniform by the inverse distribution function, or a vector by Gumbel-max), the nodes each
move applies to, the rule drawn from a node's code ranges, and the rules of the proposed tree, each
checked against a plain-Python statement of what it should be, on random masks, ranges and heap
trees.  Frequencies are compared with their exact probabilities in total variation over 20,000
draws (the standard error of one cell is below 0.004; the thresholds allow about 4 of them).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayestrees import random_bits
from bayestrees.inference import heap, proposals
from bayestrees.tree import FREE, LEAF, Tree, grow_leaf

DRAWS = 20_000


def _tv(counts: np.ndarray, probs: np.ndarray) -> float:
    return 0.5 * float(np.abs(counts / counts.sum() - probs).sum())


def test_pick_finds_the_chosen_set_entry():
    """One uniform: the ``floor(u k)``-th of the ``k`` set entries (0 when none is set), for masks
    short (a cumulative sum) and long (searched as 32-bit words), empty, sparse, dense and full,
    and uniforms near 0 and 1."""
    rng = np.random.default_rng(3)
    pick = jax.jit(jax.vmap(proposals.pick))
    for length in (1, 5, 32, 33, 63, 64, 100, 257):
        masks = np.concatenate([rng.random((50, length)) < dens for dens in (0.0, 0.03, 0.5, 1.0)])
        u = np.concatenate([rng.random(len(masks) - 4), [0.0, 1e-7, 1 - 6e-8, 0.5]]).astype(np.float32)
        idx, k = pick(jnp.asarray(u), jnp.asarray(masks))
        for i in range(len(masks)):
            where = np.flatnonzero(masks[i])
            assert int(k[i]) == len(where)
            t = min(int(np.floor(np.float32(u[i]) * np.float32(len(where)))), max(len(where) - 1, 0))
            assert int(idx[i]) == (where[t] if len(where) else 0), (length, i)


@pytest.mark.parametrize("vector", [False, True], ids=["one uniform", "Gumbel-max"])
def test_picks_are_uniform_or_weighted_over_the_set_entries(vector):
    """Both kinds of pick give each set entry its probability (1/k, or w_j / sum_set w, with log
    weights as small as 1e-30 beside 1) and never an entry that is not set."""
    rng = np.random.default_rng(0)
    L = 40
    mask = rng.random(L) < 0.3
    mask[[3, 17]] = True
    log_w = np.log(rng.uniform(0.1, 2.0, L)).astype(np.float32)
    log_w[17] = np.log(1e-30)
    u = random_bits.open_uniform(jax.random.key(1), (DRAWS, L) if vector else (DRAWS,))
    idx, k = jax.vmap(proposals.pick, (0, None))(u, jnp.asarray(mask))
    assert np.all(np.asarray(k) == mask.sum())
    counts = np.bincount(np.asarray(idx), minlength=L)
    assert counts[~mask].sum() == 0
    assert _tv(counts, mask / mask.sum()) < 0.02
    widx = jax.vmap(proposals.pick_weighted, (0, None, None))(u, jnp.asarray(mask), jnp.asarray(log_w))
    counts = np.bincount(np.asarray(widx), minlength=L)
    w = np.where(mask, np.exp(log_w.astype(np.float64)), 0.0)
    assert counts[~mask].sum() == 0 and counts[17] == 0
    assert _tv(counts, w / w.sum()) < 0.02


@pytest.mark.parametrize("weighted", [False, True])
def test_draw_rule_gives_each_rule_its_prior_probability(weighted):
    """At a node with code ranges ``lo``/``hi``: variable ``j`` among those with ``hi_j > lo_j``
    (uniform, or ``w_j / sum_valid w``), then a threshold uniform in ``lo_j .. hi_j - 1``; the
    number of thresholds of every variable comes back too."""
    lo = np.array([0, 2, 5, 1], np.int32)
    hi = np.array([3, 2, 9, 2], np.int32)          # variable 1 has no threshold
    w = np.array([0.5, 3.0, 1.0, 2.0])
    log_w = jnp.asarray(np.log(w), jnp.float32) if weighted else None
    keys = jax.random.split(jax.random.key(2), DRAWS)

    def one(key):
        u = random_bits.open_uniform(key, (2,))
        return proposals.draw_rule(u[0], u[1], jnp.asarray(lo), jnp.asarray(hi), log_w)

    j, t, nthr = jax.vmap(one)(keys)
    assert np.all(np.asarray(nthr) == np.maximum(hi - lo, 0))
    rules = [(v, c) for v in range(4) for c in range(lo[v], hi[v])]
    p_var = np.where(hi > lo, w if weighted else 1.0, 0.0)
    p_var = p_var / p_var.sum()
    probs = np.array([p_var[v] / (hi[v] - lo[v]) for v, c in rules])
    pairs = list(zip(np.asarray(j).tolist(), np.asarray(t).tolist()))
    assert set(pairs) <= set(rules)
    counts = np.array([pairs.count(r) for r in rules], float)
    assert _tv(counts, probs) < 0.02


def _random_tree(rng, max_depth=3, p_split=0.85) -> Tree:
    S = heap.capacity(max_depth)
    tree = Tree(feature=-jnp.ones(S, jnp.int32), threshold=jnp.zeros(S, jnp.int32),
                left=jnp.full(S, FREE, jnp.int32).at[0].set(LEAF), right=jnp.full(S, FREE, jnp.int32).at[0].set(LEAF),
                missing_left=jnp.zeros(S, bool), value=jnp.zeros((S, 1)), weight=jnp.zeros(S),
                count=jnp.zeros(S, jnp.int32), depth=heap.depth_of(jnp.arange(S)), n_nodes=jnp.ones((), jnp.int32))
    for s in range(S):
        if int(tree.left[s]) == LEAF and int(heap.depth_of(s)) < max_depth and rng.random() < p_split:
            # few distinct rules, so that swaps meet twin siblings and refused cases
            tree, _ = grow_leaf(tree, s, int(rng.integers(2)), int(rng.integers(2)), heap=True)
    return tree


def test_node_masks_and_set_rules_against_their_definitions():
    """On random heap trees: the nodes each move applies to, and the proposed tree's rules for every
    move at every node it applies to (a grow sets the leaf's rule, a prune clears the node's, a
    change replaces it, a swap exchanges a parent's and a child's rules and the child's twin
    sibling's too, refused when the sibling holds the parent's rule or the two rules are equal).
    The trees hold few distinct rules, so that every kind of swap occurs (checked)."""
    edit = jax.jit(proposals.set_rules)
    seen = set()
    for seed in range(12):
        seen |= _check_tree(np.random.default_rng(seed), edit)
    assert seen == {"swap", "twin", "refused"}


def _check_tree(rng, edit) -> set:
    tree = _random_tree(rng)
    f, t = np.asarray(tree.feature), np.asarray(tree.threshold)
    S = f.shape[0]
    internal = f >= 0
    is_leaf = np.asarray(heap.leaf_slots(jnp.asarray(f)))
    assert np.array_equal(is_leaf, np.asarray(tree.left) == LEAF)
    can = rng.random(S) < 0.8
    grow, nog, inner, pair = (np.asarray(m) for m in proposals.node_masks(jnp.asarray(internal), jnp.asarray(is_leaf),
                                                                          jnp.asarray(can)))
    kids = lambda s: [c for c in (2 * s + 1, 2 * s + 2) if c < S]  # noqa: E731
    assert grow.tolist() == [bool(is_leaf[s] and can[s]) for s in range(S)]
    assert nog.tolist() == [bool(internal[s] and all(is_leaf[c] for c in kids(s))) for s in range(S)]
    assert inner.tolist() == internal.tolist()
    assert pair.tolist() == [bool(s > 0 and internal[s] and internal[(s - 1) // 2]) for s in range(S)]
    seen = set()
    for move, mask in enumerate((grow, nog, inner, pair)):
        for s in np.flatnonzero(mask):
            j, c = int(rng.integers(3)), int(rng.integers(5))
            top, fn, tn, bad = (np.asarray(a) for a in edit(jnp.asarray(f), jnp.asarray(t), move, int(s), j, c))
            want_f, want_t, want_top, want_bad = f.copy(), t.copy(), s, False
            if move in (0, 2):
                want_f[s], want_t[s] = j, c
            elif move == 1:
                want_f[s], want_t[s] = -1, 0
            else:
                p, sib = (s - 1) // 2, s + 1 if s % 2 else s - 1
                want_top = p
                want_f[p], want_t[p], want_f[s], want_t[s] = f[s], t[s], f[p], t[p]
                twin = internal[sib] and (f[sib], t[sib]) == (f[s], t[s])
                if twin:
                    want_f[sib], want_t[sib] = f[p], t[p]
                want_bad = bool((internal[sib] and not twin and (f[sib], t[sib]) == (f[p], t[p]))
                                or (f[p], t[p]) == (f[s], t[s]))
                seen.add("refused" if want_bad else "twin" if twin else "swap")
            assert int(top) == want_top and bool(bad) == want_bad, (move, s)
            assert np.array_equal(fn, want_f) and np.array_equal(tn, want_t), (move, s)
    return seen


def test_move_probabilities_are_checked_in_one_place():
    """Every sampler's ``move_probs`` pass one check: 4 or 5 probabilities (rotate the fifth) summing
    to 1, grow = prune (their ratio is not in the acceptance), grow > 0 where asked."""
    assert proposals.check_move_probs([0.25, 0.25, 0.4, 0.1]) == (0.25, 0.25, 0.4, 0.1)
    assert proposals.check_move_probs((0.0, 0.0, 1.0, 0.0)) == (0.0, 0.0, 1.0, 0.0)
    assert proposals.check_move_probs((0.25, 0.25, 0.3, 0.1, 0.1)) == (0.25, 0.25, 0.3, 0.1, 0.1)
    assert proposals.rotates((0.25, 0.25, 0.3, 0.1, 0.1)) and not proposals.rotates((0.25, 0.25, 0.4, 0.1))
    assert not proposals.rotates((0.25, 0.25, 0.4, 0.1, 0.0))
    for bad in [(0.3, 0.2, 0.4, 0.1), (0.5, 0.5), (0.5, 0.5, 0.1, -0.1), (0.4, 0.4, 0.4, 0.0), (0.2, 0.2, 0.2, 0.2, 0.1, 0.1),
                "grow", None]:
        with pytest.raises(ValueError, match="4 or 5 probabilities"):
            proposals.check_move_probs(bad)
    with pytest.raises(ValueError, match="grow = prune > 0"):
        proposals.check_move_probs((0.0, 0.0, 1.0, 0.0), grow=True)


def _random_heap_tree(rng, D, n_cat, n_ord, unordered):
    """A random heap tree of depth <= ``D`` on variable 0 (``unordered``: ``n_cat`` categories, its rules
    the category sets sent left; else ordered, codes ``0 .. n_ord``) and variable 1 (ordered, codes
    ``0 .. n_ord``), every rule valid in its node's interval, split variables drawn so that parent and
    child often share one."""
    S = heap.capacity(D)
    f, t = -np.ones(S, np.int32), np.zeros(S, np.int32)

    def grow(s, cats, lo, hi, d, parent_var):
        if d >= D or rng.random() < 0.25:
            return
        can = [j for j in (0, 1) if (j == 0 and unordered and bin(cats).count("1") > 1)
               or ((j == 1 or not unordered) and hi[j] > lo[j])]
        if not can:
            return
        j = parent_var if parent_var in can and rng.random() < 0.6 else int(rng.choice(can))
        f[s] = j
        if j == 0 and unordered:
            bits = [b for b in range(n_cat) if cats >> b & 1]
            left = 0
            while left in (0, cats):
                left = sum(1 << b for b in bits if rng.random() < 0.5)
            t[s] = left
            grow(2 * s + 1, left, lo, hi, d + 1, j)
            grow(2 * s + 2, cats & ~left, lo, hi, d + 1, j)
        else:
            t[s] = rng.integers(lo[j], hi[j])
            h, l_ = hi.copy(), lo.copy()
            h[j], l_[j] = t[s], t[s] + 1
            grow(2 * s + 1, cats, lo, h, d + 1, j)
            grow(2 * s + 2, cats, l_, hi, d + 1, j)

    grow(0, (1 << n_cat) - 1, np.zeros(2, int), np.full(2, n_ord), 0, -1)
    return f, t


@pytest.mark.parametrize("unordered", [False, True], ids=["ordered", "unordered"])
def test_a_rotation_keeps_every_cell_and_its_reverse_returns(unordered):
    """:func:`proposals.rotate` against its definition on random trees of depth <= 3: every lifted node
    (:func:`proposals.rotation_sites`) gives a tree whose leaves hold the same rows (every code
    combination routed in both), the same number of sites (the proposal is symmetric), and whose
    rotation at the lowered parent returns the tree exactly; a rotation refused for depth is one that
    would put a split at ``max_depth``."""
    D, n_cat, n_ord = 3, 5, 5
    rng = np.random.default_rng(4 + unordered)
    cats = jnp.asarray([(1 << n_cat) - 1 if unordered else 0, 0], jnp.int32)
    codes = np.array([[a, b] for a in range(n_cat if unordered else n_ord + 1) for b in range(n_ord + 1)], np.int32)
    rotate = jax.jit(lambda f, t, c: proposals.rotate(f, t, c, D, cats if unordered else None))
    route = jax.jit(lambda f, t: heap.descend_rules(f, t, jnp.asarray(codes.T), jnp.zeros(len(codes), jnp.int32), D,
                                                     features_first=True, categories=cats if unordered else None))
    sites = jax.jit(proposals.rotation_sites)

    def cells(f, t):
        leaf = np.asarray(route(jnp.asarray(f), jnp.asarray(t)))
        return sorted(tuple(np.flatnonzero(leaf == v)) for v in np.unique(leaf))

    done = refused = 0
    while done < 60:
        f, t = _random_heap_tree(rng, D, n_cat, n_ord, unordered)
        here = np.asarray(sites(jnp.asarray(f)))
        assert np.array_equal(here, [f[i] >= 0 and i > 0 and f[(i - 1) // 2] == f[i] for i in range(len(f))])
        for c in np.flatnonzero(here):
            fn, tn, fits = (np.asarray(x) for x in rotate(jnp.asarray(f), jnp.asarray(t), jnp.int32(c)))
            sib = c - 1 if c % 2 == 0 else c + 1                 # its subtree goes one level down
            too_deep = any(int(heap.depth_of(i)) == D - 1 and bool(heap.in_subtree(i, sib)) for i in np.flatnonzero(f >= 0))
            assert bool(fits) == (not too_deep)
            if not fits:
                refused += 1
                continue
            done += 1
            assert (fn >= 0).sum() == (f >= 0).sum()
            assert cells(fn, tn) == cells(f, t)
            assert np.asarray(sites(jnp.asarray(fn))).sum() == here.sum()
            a = sib                                              # where the parent's rule went
            fb, tb, ok = (np.asarray(x) for x in rotate(jnp.asarray(fn), jnp.asarray(tn), jnp.int32(a)))
            assert ok and np.array_equal(fb, f) and np.array_equal(tb, t)
    assert refused > 0

