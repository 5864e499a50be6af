"""Bad input to the forest estimators, and property tests on random small data sets."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bayestrees as bt
from bayestrees import tree as T
from bayestrees.estimators.base import NotFittedError

ESTIMATORS = [bt.BayesianForestRegressor, bt.EmpiricalBayesianForestRegressor, bt.SubSampleForestRegressor]


@pytest.fixture(scope="module")
def xy():
    r = np.random.default_rng(0)
    return r.normal(size=(40, 3)), r.normal(size=40)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_bad_inputs_regression(cls, xy):
    X, y = xy
    m = cls(draws=2, min_samples_leaf=2, random_state=0)
    with pytest.raises(ValueError, match="empty"):
        m.fit(np.zeros((0, 3)), np.zeros(0))
    with pytest.raises(ValueError, match="match"):
        m.fit(X, y[:-1])
    with pytest.raises(ValueError, match="NaN or infinite"):
        m.fit(X, np.where(np.arange(40) == 3, np.nan, y))
    with pytest.raises(ValueError, match="NaN or infinite"):
        m.fit(X, np.where(np.arange(40) == 3, np.inf, y))
    with pytest.raises(ValueError, match="infinite"):
        m.fit(np.where(np.arange(120).reshape(40, 3) == 5, np.inf, X), y)
    with pytest.raises(ValueError, match="numeric"):
        m.fit(X, np.array(["a"] * 40))
    with pytest.raises(ValueError, match="min_samples_leaf"):
        cls(draws=2, min_samples_leaf=21).fit(X, y)
    with pytest.raises(NotFittedError):
        cls().predict(X)
    m.fit(X, y)
    with pytest.raises(ValueError, match="3 features"):
        m.predict(X[:, :2])


def test_bad_inputs_classification(xy):
    X, _ = xy
    with pytest.raises(ValueError, match="one class"):
        bt.BayesianForestClassifier(2).fit(X, np.ones(40, int))
    with pytest.raises(ValueError, match="continuous"):
        bt.BayesianForestClassifier(2).fit(X, np.linspace(0, 1, 40))
    with pytest.raises(ValueError, match="criterion"):
        bt.BayesianForestClassifier(2, criterion="squared_error").fit(X, np.arange(40) % 2)


def test_bad_parameters(xy):
    X, y = xy
    for kw, msg in [(dict(weights="poisson"), "weights"), (dict(draws=0), "draws"),
                    (dict(splitter="worst"), "splitter"), (dict(max_features=1.5), "max_features"),
                    (dict(min_weight_fraction_leaf=0.7), "min_weight_fraction_leaf"), (dict(dtype="int8"), "dtype")]:
        with pytest.raises(ValueError, match=msg):
            bt.BayesianForestRegressor(**kw).fit(X, y)
    with pytest.raises(ValueError, match="n_blocks"):
        bt.SubSampleForestRegressor(2, n_blocks=0).fit(X, y)
    with pytest.raises(ValueError, match="trunk_min_samples_leaf"):
        bt.EmpiricalBayesianForestRegressor(2, trunk_min_samples_leaf=0).fit(X, y)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(8, 60), d=st.integers(1, 4), msl=st.integers(1, 4), seed=st.integers(0, 2**16),
       discrete=st.booleans(), weights=st.sampled_from(["exponential", "multinomial", "none"]))
def test_properties_random_small_data(n, d, msl, seed, discrete, weights):
    r = np.random.default_rng(seed)
    X = r.integers(0, 4, size=(n, d)).astype(float) if discrete else r.normal(size=(n, d))
    y = r.normal(size=n) * 10.0 ** r.integers(-3, 4)
    if n < 2 * msl:
        return
    m = bt.BayesianForestRegressor(3, weights=weights, min_samples_leaf=msl, random_state=seed).fit(X, y)
    codes = m.binner_.transform(X)
    leaves = np.asarray(T.apply(m.trees_, codes))
    is_leaf = np.asarray(m.trees_.is_leaf())
    for t in range(3):
        assert np.all(is_leaf[t, leaves[t]])  # every row lands in exactly one leaf
    # leaf weights sum to the total weight of the tree, counts to the rows of positive weight
    w_leaves = np.where(is_leaf, np.asarray(m.trees_.weight), 0).sum(1)
    np.testing.assert_allclose(w_leaves, np.asarray(m.trees_.weight)[:, 0], rtol=1e-4)
    c_leaves = np.where(is_leaf, np.asarray(m.trees_.count), 0).sum(1)
    np.testing.assert_array_equal(c_leaves, np.asarray(m.trees_.count)[:, 0])
    assert np.all(np.where(is_leaf, np.asarray(m.trees_.count), msl) >= msl)
    assert np.all(np.isfinite(m.predict(X)))
