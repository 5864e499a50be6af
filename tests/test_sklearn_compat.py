"""scikit-learn's own estimator checks (a peer's test suite) on the forest estimators."""
from sklearn.utils.estimator_checks import parametrize_with_checks

import bayestrees as bt

_ESTIMATORS = [
    bt.BayesianForestRegressor(draws=3, random_state=0),
    bt.BayesianForestClassifier(draws=3, random_state=0),
    bt.EmpiricalBayesianForestRegressor(draws=3, trunk_min_samples_leaf=20, random_state=0),
    bt.EmpiricalBayesianForestClassifier(draws=3, trunk_min_samples_leaf=20, random_state=0),
    bt.SubSampleForestRegressor(draws=4, n_blocks=2, random_state=0),
    bt.SubSampleForestClassifier(draws=4, n_blocks=2, random_state=0),
]


@parametrize_with_checks(_ESTIMATORS)
def test_sklearn_check_estimator(estimator, check):
    check(estimator)  # each scikit-learn check raises (AssertionError, ...) when the estimator fails it
