"""The weighted CART engine against scikit-learn's CART (exact split choices) and its own invariants."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from bayestrees import tree as T
from bayestrees.data import Binner, missing_code
from bayestrees.inference.forest.cart import CapacityError, CARTConfig, default_capacity, fit_trees


def _data(rng, n=240, d=4, levels=25):
    X = rng.integers(0, levels, size=(n, d)).astype(float)
    y = 0.3 * X[:, 0] + np.sin(X[:, 1]) + rng.normal(size=n)
    return X, y


@pytest.mark.parametrize("msl", [1, 3, 8])
def test_regression_matches_sklearn_with_sample_weight(rng, msl):
    X, y = _data(rng)
    w = rng.exponential(size=len(y))
    codes = Binner().fit_transform(X)
    with jax.enable_x64(True):
        cfg = CARTConfig(min_samples_leaf=msl, capacity=default_capacity(len(y), msl))
        tr = fit_trees(codes, y, jnp.asarray(w[None]), cfg)
        pred = np.asarray(T.predict(tr, codes))[0, :, 0]
    sk = DecisionTreeRegressor(min_samples_leaf=msl, random_state=0).fit(X, y, sample_weight=w)
    assert int(T.n_leaves(tr)[0]) == sk.get_n_leaves()
    assert int(tr.n_nodes[0]) == sk.tree_.node_count
    np.testing.assert_allclose(pred, sk.predict(X), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("criterion", ["gini", "entropy"])
def test_classification_matches_sklearn(rng, criterion):
    # many distinct values per feature (all binned exactly) make tied Gini gains unlikely
    X, y = _data(rng, levels=200)
    yc = np.digitize(y, np.quantile(y, [0.4, 0.75]))
    w = rng.exponential(size=len(y))
    codes = Binner().fit_transform(X)
    with jax.enable_x64(True):
        cfg = CARTConfig(criterion=criterion, n_classes=3, min_samples_leaf=2, capacity=default_capacity(len(y), 2))
        tr = fit_trees(codes, yc, jnp.asarray(w[None]), cfg)
        proba = np.asarray(T.predict(tr, codes))[0]
    sk = DecisionTreeClassifier(criterion=criterion, min_samples_leaf=2, random_state=0).fit(X, yc, sample_weight=w)
    assert int(T.n_leaves(tr)[0]) == sk.get_n_leaves()
    np.testing.assert_allclose(proba, sk.predict_proba(X), atol=1e-10)


@pytest.mark.parametrize("msl, n_classes", [(1, 0), (3, 0), (2, 3)])
def test_positive_weights_shortcut_gives_the_same_trees(rng, msl, n_classes):
    """Row counts read off positions (``positive_weights``) equal summed counts, with weightless
    MISSING-coded padding rows as the estimators add them; and the trees are scikit-learn's."""
    X, y = _data(rng, n=300)
    if n_classes:
        y = np.digitize(y, np.quantile(y, [0.4, 0.75]))
    codes = Binner().fit_transform(X)
    miss = missing_code(codes.dtype)
    pad = 37
    codes_p = np.vstack([codes, np.full((pad, codes.shape[1]), miss, codes.dtype)])
    y_p = np.concatenate([y, np.zeros(pad, y.dtype)])
    W = np.concatenate([rng.exponential(size=(3, len(y))), np.zeros((3, pad))], 1)
    with jax.enable_x64(True):
        base = CARTConfig(criterion="gini" if n_classes else "squared_error", n_classes=n_classes,
                          min_samples_leaf=msl, capacity=default_capacity(len(y_p), msl), missing=miss)
        a = fit_trees(codes_p, y_p, jnp.asarray(W), base)
        b = fit_trees(codes_p, y_p, jnp.asarray(W), dataclasses.replace(base, positive_weights=True))
        pred = np.asarray(T.predict(b, codes))[0, :, 0]
    assert int(a.n_nodes.min()) > 20
    for f in a._fields:
        np.testing.assert_allclose(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), rtol=1e-12, err_msg=f)
    if not n_classes:
        sk = DecisionTreeRegressor(min_samples_leaf=msl, random_state=0).fit(X, y, sample_weight=W[0, :len(y)])
        assert int(b.n_nodes[0]) == sk.tree_.node_count
        np.testing.assert_allclose(pred, sk.predict(X), rtol=1e-10, atol=1e-10)


def test_max_depth_and_min_weight_fraction_match_sklearn(rng):
    X, y = _data(rng)
    w = rng.exponential(size=len(y))
    codes = Binner().fit_transform(X)
    with jax.enable_x64(True):
        cfg = CARTConfig(max_depth=4, min_weight_fraction_leaf=0.02, capacity=default_capacity(len(y), 1, 4))
        tr = fit_trees(codes, y, jnp.asarray(w[None]), cfg)
        pred = np.asarray(T.predict(tr, codes))[0, :, 0]
    sk = DecisionTreeRegressor(max_depth=4, min_weight_fraction_leaf=0.02, random_state=0).fit(X, y, sample_weight=w)
    assert int(T.max_depth(tr)[0]) == sk.get_depth() == 4
    np.testing.assert_allclose(pred, sk.predict(X), rtol=1e-10, atol=1e-10)


def test_zero_weight_rows_do_not_count_for_min_samples_leaf(rng):
    X, y = _data(rng, n=200)
    w = rng.multinomial(200, np.ones(200) / 200).astype(float)  # bootstrap counts, many zeros
    codes = Binner().fit_transform(X)
    with jax.enable_x64(True):
        cfg = CARTConfig(min_samples_leaf=3, capacity=default_capacity(200, 3))
        tr = fit_trees(codes, y, jnp.asarray(w[None]), cfg)
        pred = np.asarray(T.predict(tr, codes))[0, :, 0]
    sk = DecisionTreeRegressor(min_samples_leaf=3, random_state=0).fit(X, y, sample_weight=w)
    assert int(T.n_leaves(tr)[0]) == sk.get_n_leaves()
    pos = w > 0  # on rows seen by the tree the fitted values agree
    np.testing.assert_allclose(pred[pos], sk.predict(X)[pos], rtol=1e-9, atol=1e-9)


def test_batch_of_weight_vectors_equals_separate_fits(rng):
    X, y = _data(rng, n=150)
    W = rng.exponential(size=(3, 150)).astype(np.float32)
    codes = Binner().fit_transform(X)
    cfg = CARTConfig(min_samples_leaf=2, capacity=default_capacity(150, 2))
    batch = fit_trees(codes, y.astype(np.float32), jnp.asarray(W), cfg)
    for b in range(3):
        one = fit_trees(codes, y.astype(np.float32), jnp.asarray(W[b:b + 1]), cfg)
        for a, c in zip(T.index_tree(batch, b), T.index_tree(one, 0)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(c))


def test_capacity_overflow_is_an_error_naming_the_limit(rng):
    X, y = _data(rng, n=100)
    codes = Binner().fit_transform(X)
    with pytest.raises(CapacityError, match="capacity=7"):
        fit_trees(codes, y.astype(np.float32), jnp.ones((1, 100)), CARTConfig(capacity=7))


def test_missing_values_follow_the_learned_side(rng):
    # the response depends on x0; rows with missing x0 behave like large x0
    n = 400
    x0 = rng.uniform(0, 10, n)
    y = np.where(x0 > 5, 3.0, 0.0) + 0.1 * rng.normal(size=n)
    X = x0.copy()
    miss = rng.random(n) < 0.2
    X[miss & (x0 > 5)] = np.nan
    X = X[:, None]
    b = Binner().fit(X)
    codes = b.transform(X)
    cfg = CARTConfig(max_depth=1, capacity=3, has_missing=True, missing=missing_code(codes.dtype))
    tr = fit_trees(codes, y.astype(np.float32), jnp.ones((1, n)), cfg)
    t0 = T.index_tree(tr, 0)
    # the single split separates low from high x0 and sends missing rows right (with the high ones) ...
    assert not bool(t0.missing_left[0])
    pred = np.asarray(T.predict(t0, b.transform(np.array([[np.nan], [1.0], [9.0]]))))[:, 0]
    assert pred[0] == pytest.approx(pred[2]) and pred[0] > 2.5 > pred[1]
    # ... and the learned direction flips when missing rows resemble the low ones
    X2 = x0.copy()
    X2[miss & (x0 <= 5)] = np.nan
    c2 = b.fit_transform(X2[:, None])
    t2 = T.index_tree(fit_trees(c2, y.astype(np.float32), jnp.ones((1, n)), cfg), 0)
    assert bool(t2.missing_left[0])
    p2 = np.asarray(T.predict(t2, b.transform(np.array([[np.nan], [1.0], [9.0]]))))[:, 0]
    assert p2[0] == pytest.approx(p2[1]) and p2[0] < 0.5


def test_max_features_and_extra_trees_still_partition_rows(rng):
    X, y = _data(rng, n=300, d=6)
    codes = Binner().fit_transform(X)
    for cfg in [CARTConfig(max_features=2, min_samples_leaf=3, capacity=default_capacity(300, 3)),
                CARTConfig(extra=True, min_samples_leaf=3, capacity=default_capacity(300, 3))]:
        tr = fit_trees(codes, y.astype(np.float32), jnp.ones((4, 300)), cfg, seeds=jnp.arange(4, dtype=jnp.uint32))
        counts = np.asarray(T.leaf_counts(tr, codes))
        leaf = np.asarray(tr.is_leaf())
        assert np.all(counts.sum(-1) == 300)
        assert np.all(counts[leaf] >= 3) and np.all(counts[~leaf] == 0)
        # different seeds give different trees (randomised splits)
        assert len({int(k) for k in np.asarray(tr.n_nodes)}) > 1 or not np.array_equal(
            np.asarray(tr.feature[0]), np.asarray(tr.feature[1]))


def test_max_features_all_features_equals_default(rng):
    X, y = _data(rng, n=120)
    codes = Binner().fit_transform(X)
    a = fit_trees(codes, y.astype(np.float32), jnp.ones((1, 120)), CARTConfig(capacity=239))
    b = fit_trees(codes, y.astype(np.float32), jnp.ones((1, 120)), CARTConfig(capacity=239, max_features=4))
    np.testing.assert_array_equal(np.asarray(a.feature), np.asarray(b.feature))


def test_fewer_growth_stages_give_the_same_trees(rng, monkeypatch):
    # large leaves stage less (cart.stage_floor).  The compaction between stages renumbers rows,
    # so the engine's prefix sums add in another order: in float64 one stage and three stages grow
    # the same partitions up to rounding (a near-tie between features may go either way, with the
    # same rows on each side), so the predictions agree to rounding
    from bayestrees.inference.forest import cart as cart

    n, msl = 6000, 3
    X, y = _data(rng, n=n, levels=60)
    W = rng.exponential(size=(2, n))
    codes = Binner().fit_transform(X)
    assert len(cart.stage_sizes(n, min_size=cart.stage_floor(msl))) == 1
    assert len(cart.stage_sizes(n)) == 3
    with jax.enable_x64(True):
        cfg = CARTConfig(min_samples_leaf=msl, capacity=default_capacity(n, msl))
        few = fit_trees(codes, y, jnp.asarray(W), cfg)
        monkeypatch.setattr(cart, "stage_floor", lambda m: 1024)
        many = fit_trees(codes, y, jnp.asarray(W), cfg)
        assert int(np.asarray(few.n_nodes).min()) > 1000
        np.testing.assert_array_equal(T.n_leaves(few), T.n_leaves(many))
        np.testing.assert_allclose(np.asarray(T.predict(few, codes)), np.asarray(T.predict(many, codes)),
                                   rtol=1e-9, atol=1e-9)


def test_prefix_sums_are_exact_for_counts_and_in_a_fixed_order_for_floats():
    """``prefix_sum``: integer counts exactly, floats as NumPy's running sum to float32 rounding, and
    the float sums' bits do not depend on XLA's matrix kernels (a matrix product's summation order is
    the kernel's, which differs between processors; the forests' split choice followed it)."""
    import os
    import subprocess
    import sys

    from bayestrees.inference.forest.cart import prefix_sum

    rng = np.random.default_rng(0)
    counts = rng.integers(0, 3, size=(3, 1000)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(prefix_sum(jnp.asarray(counts))), np.cumsum(counts, -1))
    x = rng.exponential(size=(3, 1001)).astype(np.float32)
    got = np.asarray(prefix_sum(jnp.asarray(x)))
    np.testing.assert_allclose(got, np.cumsum(x.astype(np.float64), -1), rtol=2e-6)
    # the same bits with XLA's matrix-kernel library turned off, in a fresh process
    flag = "--xla_cpu_experimental_ynn_fusion_type="
    code = ("import sys, numpy as np, jax.numpy as jnp; from bayestrees.inference.forest.cart import prefix_sum; "
            "x = np.random.default_rng(0); x.integers(0, 3, size=(3, 1000)); "
            "x = x.exponential(size=(3, 1001)).astype(np.float32); "
            "sys.stdout.write(np.asarray(prefix_sum(jnp.asarray(x))).tobytes().hex())")
    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flag}")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if run.returncode != 0 and "Unknown flag" in run.stderr + run.stdout:
        pytest.skip(f"this jaxlib's XLA has no {flag}")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout == got.tobytes().hex()
