"""One rule for rows given after fitting, in every family: what ``fit`` refuses, ``predict`` refuses.

NaN is accepted at prediction exactly where the family's fit accepts it (the forests, safe-Bayes,
Bayesian CART, BET and BART route missing values; PCFG does not), infinities and a wrong
width never are, and the error says what to do; the model context applies the same rule.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import bayestrees as bt

ESTIMATORS = [
    (lambda: bt.BayesianForestRegressor(draws=4, random_state=0), True),
    (lambda: bt.SafeBayesForestRegressor(draws=100, effective_sample_size=20, random_state=0), True),
    (lambda: bt.PCFGTreeRegressor(max_bins=5), False),
    (lambda: bt.BayesianCARTRegressor(draws=10, tune=10, chains=1, random_state=0), True),
    (lambda: bt.BETRegressor(draws=10, tune=10, max_trees=3, active_trees=2, init_trees=2, random_state=0), True),
    (lambda: bt.BARTRegressor(m=5, draws=10, tune=10, chains=1, max_depth=3, random_state=0), True),
]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(60, 3))
    return X, X[:, 0] + 0.1 * rng.normal(size=60)


@pytest.mark.parametrize("make, routes_missing", ESTIMATORS,
                         ids=["forest", "safebayes", "pcfg", "bcart", "bet", "bart"])
def test_predict_refuses_what_fit_refuses(make, routes_missing, data):
    X, y = data
    Xn = X.copy()
    Xn[3, 1] = np.nan
    est = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short MCMC runs warn about convergence
        if routes_missing:
            est.fit(Xn, y)
        else:
            with pytest.raises(ValueError, match="NaN"):
                est.fit(Xn, y)
            est.fit(X, y)
    if routes_missing:
        assert np.all(np.isfinite(est.predict(Xn[:5])))
    else:
        with pytest.raises(ValueError, match="cannot route them; impute or drop"):
            est.predict(Xn[:5])
    with pytest.raises(ValueError, match="infinite"):
        est.predict(np.where(X[:5] > 0.5, np.inf, X[:5]))
    with pytest.raises(ValueError, match="expecting 3 features"):
        est.predict(X[:5, :2])
    with pytest.raises(ValueError, match="could not convert|numeric|categor"):
        est.predict([[0.1, "b", 0.3]])  # a string in a numeric column


def test_the_model_context_applies_the_same_rule(data):
    X, y = data
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with bt.Model():   # a family that routes missing values
        xd = bt.Data("X", X)
        bt.BayesianCART("f", xd, y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = bt.sample(draws=10, tune=10, chains=1, random_seed=0)
        bt.set_data({"X": Xn[:4]})
        pred = bt.sample_posterior_predictive(idata, random_seed=1)
        assert np.all(np.isfinite(pred.posterior_predictive["f"].values))
    with bt.Model():   # one that does not
        xd = bt.Data("X", X)
        bt.PCFGTree("f", xd, y, max_bins=5)
        idata = bt.sample(draws=10, random_seed=0)
        bt.set_data({"X": Xn[:4]})
        with pytest.raises(ValueError, match="cannot route them"):
            bt.sample_posterior_predictive(idata, random_seed=1)
        bt.set_data({"X": X[:4, :2]})
        with pytest.raises(ValueError, match="expecting 3 features"):
            bt.sample_posterior_predictive(idata, random_seed=1)
