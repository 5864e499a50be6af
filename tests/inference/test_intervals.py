"""The ancestor-interval rule prior (bayestrees.inference.intervals) against direct computation.

Random heap trees (rules drawn anywhere, so that some nodes lose every cut point of a feature and
some rules fall outside their interval): every node's interval from walking its path in Python;
the O(S D^2) counts (available variables, the own variable's cut points) against the full
(S, d) intervals; one node's interval against the table; the tree's log prior against the
generative formula in Python and against ``moves.evaluate`` with ``rules="intervals"``.
"""
import jax.numpy as jnp
import numpy as np
import pytest

from bayestrees.inference import intervals as IV
from bayestrees.inference import moves as M
from bayestrees.leaves import KnownVarianceNormalLeaves
from bayestrees.priors import ChipmanPrior
from bayestrees.tree import FREE, LEAF, Tree


def _random_tree(rng, max_depth, d, code_hi):
    S = 2 ** (max_depth + 1) - 1
    feature = np.full(S, -1, np.int32)
    threshold = np.zeros(S, np.int32)

    def grow(s, depth):
        if depth >= max_depth or rng.random() > 0.7:
            return
        feature[s] = rng.integers(d)
        threshold[s] = rng.integers(0, code_hi[feature[s]] + 1)
        grow(2 * s + 1, depth + 1)
        grow(2 * s + 2, depth + 1)

    grow(0, 0)
    return feature, threshold


def _walk(feature, threshold, code_lo, code_hi, s):
    """The interval of node ``s`` by walking from the root."""
    lo, hi = code_lo.copy(), code_hi.copy()
    path = []
    x = s
    while x > 0:
        path.append(x)
        x = (x - 1) // 2
    node = 0
    for child in reversed(path):
        j, t = feature[node], threshold[node]
        if child == 2 * node + 1:
            hi[j] = min(hi[j], t)
        else:
            lo[j] = max(lo[j], t + 1)
        node = child
    return lo, hi


def _used(feature):
    S = len(feature)
    return np.array([s == 0 or feature[(s - 1) // 2] >= 0 for s in range(S)])


@pytest.mark.parametrize("seed", range(2))
def test_intervals_counts_and_log_prior_against_direct_computation(seed):
    rng = np.random.default_rng(seed)
    max_depth, d = 4, 3
    code_lo = rng.integers(0, 2, d).astype(np.int32)
    code_hi = (code_lo + rng.integers(0, 4, d)).astype(np.int32)      # a feature may have no cut point
    prior = ChipmanPrior(0.9, 1.0)
    checked = 0
    for _ in range(15):
        feature, threshold = _random_tree(rng, max_depth, d, code_hi)
        S = len(feature)
        lo, hi = (np.asarray(a) for a in IV.interval_ranges(jnp.asarray(feature), jnp.asarray(threshold),
                                                           jnp.asarray(code_lo), jnp.asarray(code_hi), max_depth))
        avail, n_own, own_ok = (np.asarray(a) for a in IV.node_rule_terms(
            jnp.asarray(feature), jnp.asarray(threshold), jnp.asarray(code_lo), jnp.asarray(code_hi), max_depth))
        used = _used(feature)
        lp_direct = 0.0
        for s in np.flatnonzero(used):
            wlo, whi = _walk(feature, threshold, code_lo, code_hi, s)
            np.testing.assert_array_equal(lo[s], wlo)
            np.testing.assert_array_equal(np.minimum(hi[s], code_hi), whi)
            nthr = np.maximum(whi - wlo, 0)
            assert avail[s] == np.sum(nthr > 0)
            nlo, nhi = IV.node_interval(jnp.asarray(feature), jnp.asarray(threshold), jnp.asarray(code_lo),
                                        jnp.asarray(code_hi), s, max_depth)
            np.testing.assert_array_equal(np.asarray(nlo), wlo)
            np.testing.assert_array_equal(np.asarray(nhi), whi)
            depth = int(np.floor(np.log2(s + 1)))
            p = 0.9 * (1 + depth) ** -1.0
            if feature[s] >= 0:
                j = feature[s]
                assert n_own[s] == nthr[j]
                assert own_ok[s] == (wlo[j] <= threshold[s] < whi[j])
                lp_direct += np.log(p) - np.log(max(np.sum(nthr > 0), 1)) - np.log(max(nthr[j], 1))
            elif depth < max_depth and np.sum(nthr > 0) > 0:
                lp_direct += np.log1p(-p)
            checked += 1
        lp, _, internal, leaf, rules_ok = IV.log_tree_prior(jnp.asarray(feature), jnp.asarray(threshold),
                                                            jnp.asarray(code_lo), jnp.asarray(code_hi), prior,
                                                            max_depth)
        assert float(lp) == pytest.approx(lp_direct, abs=1e-4)
        np.testing.assert_array_equal(np.asarray(internal), feature >= 0)
        np.testing.assert_array_equal(np.asarray(leaf), used & (feature < 0))
        assert bool(rules_ok) == all(own_ok[feature >= 0])
        # moves.evaluate with the interval rules gives the same prior (on a tree whose nodes all hold rows)
        if bool(rules_ok):
            S = len(feature)
            internal_ = feature >= 0
            tree = Tree(feature=jnp.asarray(feature), threshold=jnp.asarray(threshold),
                        left=jnp.asarray(np.where(internal_, 2 * np.arange(S) + 1, np.where(used, LEAF, FREE))),
                        right=jnp.asarray(np.where(internal_, 2 * np.arange(S) + 2, np.where(used, LEAF, FREE))),
                        missing_left=jnp.zeros(S, bool), value=jnp.zeros((S, 1)), weight=jnp.zeros(S),
                        count=jnp.zeros(S, jnp.int32), depth=jnp.asarray(np.floor(np.log2(np.arange(S) + 1)), jnp.int32),
                        n_nodes=jnp.asarray(used.sum()))
            codes = rng.integers(code_lo, code_hi + 1, size=(50, d)).astype(np.int32)
            leaves = KnownVarianceNormalLeaves(1.0, 1.0)
            mc = M.MCMCConfig(prior, leaves, max_depth, d, rules="intervals")
            data = M.MCMCData(jnp.asarray(codes), jnp.zeros(50), leaves.row_stats(jnp.zeros(50)), jnp.ones(50),
                              code_lo=jnp.asarray(code_lo), code_hi=jnp.asarray(code_hi))
            ev = M.evaluate(tree, data, mc)
            assert float(ev.log_prior) == pytest.approx(float(lp), abs=1e-4)
    assert checked > 40


def test_interval_rules_need_a_prior_with_the_rule_in_it():
    from bayestrees.priors import LeafCountPrior

    with pytest.raises(ValueError, match="rule in it"):
        M.MCMCConfig(LeafCountPrior(1.0), KnownVarianceNormalLeaves(), 3, 2, rules="intervals")
    with pytest.raises(ValueError, match="'data' or 'intervals'"):
        M.MCMCConfig(ChipmanPrior(), KnownVarianceNormalLeaves(), 3, 2, rules="rows")
