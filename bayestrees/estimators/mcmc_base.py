"""What the MCMC families' estimators (Bayesian CART, BET) share: fitting, the InferenceData and draws.

A family's mixin subclasses :class:`MCMCEstimatorMixin` and sets

- ``_fit_function(key, data, config)``: the family's ``fit_<family>``, returning a result with
  ``.trees``;
- ``_inferencedata_function(result, data)``: the family's converter to InferenceData;
- ``_config()``: the family's config from the estimator's parameters;
- ``_values(X)``: the values of every draw at ``X``, ``(chains * draws, n, V)``.
"""
from __future__ import annotations

import numpy as np

from ..data import check_max_bins, prepare_data


class MCMCEstimatorMixin:
    _task = "regression"

    def fit(self, X, y):
        """Run the chains on ``(X, y)``; returns ``self``.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features), no missing values
        y : array-like (n_samples,)
        """
        self._reject_sparse(X)
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        config = self._config()
        data = prepare_data(X, y, task=self._task, max_bins=check_max_bins(self.max_bins), allow_nan=False)
        self._remember_data(data, X)
        self.result_ = type(self)._fit_function(self._key(), data, config)
        self.trees_ = self.result_.trees
        self._train_data = data
        self._idata = None
        return self

    @property
    def idata_(self):
        """The posterior as ArviZ InferenceData (the posterior contract, with ``log_likelihood``)."""
        self._check_fitted()
        if getattr(self, "_idata", None) is None:
            self._idata = type(self)._inferencedata_function(self.result_, self._train_data)
        return self._idata

    def predict_draws(self, X) -> np.ndarray:
        """Posterior draws of the predictive function at ``X``: ``(chains * draws, n)``, or
        ``(chains * draws, n, C)`` class probabilities for classifiers."""
        v = self._values(X)
        return v[..., 0] if self._task == "regression" else v

    def predict_interval(self, X, prob: float = 0.9) -> np.ndarray:
        """Equal-tailed ``prob`` credible interval of the predictive function at ``X``: ``(n, 2)``
        (classifiers: ``(n, C, 2)`` for the class probabilities)."""
        if not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1), got {prob}")
        d = self.predict_draws(X)
        lo, hi = np.quantile(d, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
        return np.stack([lo, hi], -1)
