"""Tree priors (bt.priors): closed forms on small trees and parameter checks."""
import math

import numpy as np
import pytest

import bayestrees as bt
from bayestrees.tree import empty_tree, grow_leaf


def _tree_with_depths():
    t = empty_tree(9)
    t, _ = grow_leaf(t, 0, 0, 1)      # root splits: leaves at depth 1 (slots 1, 2)
    t, _ = grow_leaf(t, 2, 1, 0)      # slot 2 splits: leaves at depth 2 (slots 3, 4)
    return t                          # internal depths 0, 1; leaf depths 1, 2, 2


def test_chipman_log_prior_closed_form():
    a, b = 0.9, 1.5
    p = lambda d: a * (1 + d) ** -b  # noqa: E731
    want = math.log(p(0)) + math.log(p(1)) + math.log(1 - p(1)) + 2 * math.log(1 - p(2))
    assert float(bt.priors.ChipmanPrior(a, b).log_prior(_tree_with_depths())) == pytest.approx(want, rel=1e-5)


def test_rule_probabilities_enter_only_priors_that_hold_them():
    t = _tree_with_depths()
    rule = np.full(t.capacity, -math.log(6.0), np.float32)
    c = bt.priors.ChipmanPrior()
    assert float(c.log_prior(t, rule) - c.log_prior(t)) == pytest.approx(-2 * math.log(6.0), rel=1e-5)
    lc = bt.priors.LeafCountPrior(1.3)
    assert float(lc.log_prior(t, rule)) == pytest.approx(-3 * 1.3, rel=1e-6)


def test_leaf_count_prior_node_weights_agree_with_its_log_prior():
    t = _tree_with_depths()
    lc = bt.priors.LeafCountPrior(0.7)
    from bayestrees.priors import _Base

    # structure sum (internal: -log_phi, leaf: 0) equals -log_phi (leaves - 1)
    assert float(_Base.log_prior(lc, t)) == pytest.approx(float(lc.log_prior(t)) + 0.7, rel=1e-6)


def test_depth_decay_and_code_string():
    t = _tree_with_depths()
    dd = bt.priors.DepthDecayPrior(2.0)
    want = 0.0 + (-0.5) + math.log(1 - math.exp(-0.5)) + 2 * math.log(1 - math.exp(-1.0))
    assert float(dd.log_prior(t)) == pytest.approx(want, rel=1e-5)
    cs = bt.priors.CodeStringPrior(0.4)
    assert float(cs.log_prior(t)) == pytest.approx(math.log(0.4) + 3 * math.log(0.6), rel=1e-5)
    cs0 = bt.priors.CodeStringPrior(0.4, root_splits=False)
    assert float(cs0.log_prior(t)) == pytest.approx(2 * math.log(0.4) + 3 * math.log(0.6), rel=1e-5)
    assert float(cs.log_prior(empty_tree(3))) == -math.inf  # the root must split


@pytest.mark.parametrize("make", [
    lambda: bt.priors.ChipmanPrior(alpha=1.0), lambda: bt.priors.ChipmanPrior(alpha=0.0),
    lambda: bt.priors.ChipmanPrior(beta=-1.0), lambda: bt.priors.LeafCountPrior(float("nan")),
    lambda: bt.priors.LeafCountPrior(float("inf")), lambda: bt.priors.DepthDecayPrior(0.0),
    lambda: bt.priors.CodeStringPrior(0.5), lambda: bt.priors.ChipmanPrior(alpha="x")])
def test_bad_parameters(make):
    with pytest.raises(ValueError):
        make()
