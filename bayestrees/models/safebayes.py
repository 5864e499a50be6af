"""``bt.SafeBayesForest``: the safe-Bayesian random forest as a model random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     f = bt.SafeBayesForest("f", X, y_train)
...     idata = bt.sample(draws=1000, random_seed=0)   # 1000 prior trees, resampled to equal weights
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The variable calls :func:`bayestrees.inference.safebayes.fit.fit_safebayes`, as the
scikit-learn style estimators do; it never builds an estimator.  ``bt.sample``
draws ``chains * draws`` prior trees, weighs them, and writes that many equally
weighted posterior draws (:func:`~bayestrees.inference.safebayes.fit.safebayes_inferencedata`):
the trees resampled by their tempered weights ``w^beta`` (``beta = m / N``), each
with its leaf parameters drawn from their posterior given the tree.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import jax

from ..convert import trees_from_inferencedata
from ..data import TrainingData, infer_task
from ..inference.safebayes.fit import (FAMILY, SafeBayesConfig, SafeBayesResult, fit_safebayes, prepare_safebayes_data,
                                   safebayes_inferencedata, safebayes_predictive)
from .base import DataContainer, TreeRV

__all__ = ["SafeBayesForest"]


@dataclass(frozen=True)
class SafeBayesFit:
    """What ``bt.sample`` leaves on a :class:`SafeBayesForest` (its ``fitted_``).

    Attributes
    ----------
    result : SafeBayesResult
        The fit: unresampled ``log_weights`` of all ``chains * draws`` trees,
        ``effective_sample_size``, ``beta``, ``curve``, ...
    data : TrainingData
    chains, draws : int
    """

    result: SafeBayesResult
    data: TrainingData
    chains: int
    draws: int


class SafeBayesForest(TreeRV):
    """Safe-Bayesian random forest random variable (Quadrianto & Ghahramani 2015).

    Parameters
    ----------
    name : str
        The variable's name: ``observed_data[name]``, ``log_likelihood[name]``, and
        ``name`` / ``name_mu`` / ``name_proba`` in the predictive groups.
    X : bt.Data or array (n, d)
    y : array (n,)  labels (classification) or real targets (regression)
    task : {"auto", "classification", "regression"}, default "auto"
        "auto": :func:`bayestrees.data.infer_task` (labels, or whole numbers with at
        most 20 distinct values, are classes; other numbers regression).
    split_prob, effective_sample_size, alpha, leaf_prior, root_splits, max_internal, cv, validation_fraction
        As for :class:`bayestrees.SafeBayesForestClassifier` / ``Regressor``, with
        the same defaults (``effective_sample_size="auto"``: ``m`` by 5-fold
        cross-validation); ``alpha`` is used for classes only, ``leaf_prior`` for
        regression only.
    auto_criterion : str or None, default None
        The task's default (``"accuracy"`` for classes, ``"log_predictive"`` for
        regression), or one of the estimators' choices.
    dtype : {"float32", "float64"}, default "float32"
        Precision of the fit; "float64" needs ``jax.config.update("jax_enable_x64", True)``
        first (``ValueError`` otherwise).

    Notes
    -----
    ``bt.sample(draws, chains)`` weighs ``draws * chains`` prior trees and writes as
    many equally weighted draws, draw ``j`` of chain ``c`` being draw
    ``c * draws + j``.  ``sample_stats`` holds each draw's ``log_weight``,
    ``tempered_log_weight`` and ``tree_index``; the unresampled weights are
    ``fitted_.result.log_weights``.  ``bt.sample_posterior_predictive`` writes, for
    classification, ``name_proba`` (each draw's class probabilities at the rows, dims
    ``obs, class``) and ``name`` (a label drawn from them); for regression
    ``name_mu`` (each draw's leaf mean) and ``name`` (a response drawn from
    ``N(mu, s2)``, ``s2`` drawn from its posterior given the draw's mean).
    """

    family = FAMILY

    def __init__(self, name, X, y, *, task: str = "auto", split_prob=0.475, effective_sample_size="auto",
                 alpha=1.0, leaf_prior=None, root_splits=True, max_internal=511, cv=5, validation_fraction=None,
                 auto_criterion=None, dtype: str = "float32", model=None):
        self.task = infer_task(y.get_value() if isinstance(y, DataContainer) else y, task)
        self.config = SafeBayesConfig(n_trees=1, split_prob=split_prob, effective_sample_size=effective_sample_size,
                                      alpha=alpha, leaf_prior=leaf_prior, root_splits=root_splits,
                                      max_internal=max_internal, cv=cv, validation_fraction=validation_fraction,
                                      auto_criterion=auto_criterion, dtype=dtype)
        self.config.criterion(self.task)
        super().__init__(name, X, y, model=model, task=self.task, split_prob=split_prob,
                         effective_sample_size=effective_sample_size, alpha=alpha, leaf_prior=leaf_prior,
                         root_splits=root_splits, max_internal=max_internal, cv=cv,
                         validation_fraction=validation_fraction, auto_criterion=auto_criterion, dtype=dtype)

    @property
    def regression(self) -> bool:
        """Whether the variable is a real response (``task == "regression"``)."""
        return self.task == "regression"

    def _fit(self, key, draws: int, chains: int, progressbar: bool, **kwargs):
        if kwargs:
            raise ValueError(f"unexpected sample() arguments for SafeBayesForest: {sorted(kwargs)}")
        data = prepare_safebayes_data(self.X_value, self.y_value, task=self.task)
        result = fit_safebayes(key, data, replace(self.config, n_trees=draws * chains))
        self.fitted_ = SafeBayesFit(result, data, chains, draws)
        return safebayes_inferencedata(jax.random.fold_in(key, 1), result, data, chains=chains, y_name=self.name,
                                       attrs={"rv": self.name})

    def _predictive(self, idata, X, key) -> dict:
        """Keyword arguments of :func:`bayestrees.convert.predictive_group` for rows ``X``.

        The draws are those of ``idata``'s ``trees`` group (resampled trees with their
        drawn leaf parameters), so the predictions match ``idata``.
        """
        fit = self.fitted_
        codes = fit.data.binner.transform(X)
        return safebayes_predictive(key, trees_from_inferencedata(idata), codes, fit.data, fit.result)
