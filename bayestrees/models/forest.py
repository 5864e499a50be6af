"""``bt.BayesianForest``: the Bayesian-forest family as a model-context random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     f = bt.BayesianForest("f", X, y_train, min_samples_leaf=3)
...     idata = bt.sample(draws=100, chains=1, random_seed=0)      # 100 trees
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The variable calls :func:`bayestrees.inference.forest.fit.fit_bayesian_forest`, as the
scikit-learn style estimators do; it never builds an estimator.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..convert import trees_from_inferencedata
from ..data import TrainingData, infer_task, prepare_data
from ..inference.forest.fit import (KINDS, ForestConfig, ForestResult, fit_bayesian_forest, forest_inferencedata,
                                forest_predictive)
from .base import DataContainer, TreeRV

__all__ = ["BayesianForest"]

#: parameters of the data layer (:func:`~bayestrees.data.prepare_data`), not of the fit
_DATA_PARAMS = ("max_bins", "categorical_features")


@dataclass(frozen=True)
class ForestFit:
    """What ``bt.sample`` leaves on a :class:`BayesianForest` (its ``fitted_``).

    Attributes
    ----------
    result : ForestResult
    data : TrainingData
    chains, draws : int
    """

    result: ForestResult
    data: TrainingData
    chains: int
    draws: int


class BayesianForest(TreeRV):
    """A forest posterior over trees (draw = tree), Taddy et al. (2015).

    Parameters
    ----------
    name : str
        The variable's name: ``observed_data[name]``, and ``name`` / ``name_mu`` /
        ``name_proba`` in the predictive groups.
    X : bt.Data or array (n_samples, n_features)
    y : array (n_samples,)
    kind : {"bf", "ebf", "ssf"}
        Bayesian forest, empirical Bayesian forest (``trunk_min_samples_leaf``, default 1000)
        or sub-sample forest (``n_blocks``, default 5).
    task : {"auto", "regression", "classification"}
        "auto": :func:`bayestrees.data.infer_task` (labels, or whole numbers with at most 20
        distinct values, are classification; other numbers regression).
    dtype : {"float32", "float64"}, default "float32"
        Precision of the fit; "float64" needs ``jax.config.update("jax_enable_x64", True)``
        first (``ValueError`` otherwise).
    **params
        The estimators' parameters (``weights``, ``min_samples_leaf``, ``max_depth``,
        ``max_features``, ``min_weight_fraction_leaf``, ``splitter``, ``criterion``
        (classification), ``max_bins``, ``categorical_features``, ``max_nodes``, ``chunk_size``,
        ``n_jobs``, ``trunk_min_samples_leaf``, ``n_blocks``), as for
        :class:`bayestrees.BayesianForestRegressor`; ``n_estimators`` is ``draws * chains``.

    Notes
    -----
    ``bt.sample(draws, chains)`` fits ``draws * chains`` trees; tree ``c * draws + j`` is draw
    ``j`` of chain ``c`` (the chains are independent batches of trees).  ``posterior["mu"]`` is
    each tree's prediction at the training rows.  There is no ``log_likelihood`` group: the
    Bayesian bootstrap defines no likelihood, so ``bt.loo`` raises a ``ValueError``.

    ``bt.sample_posterior_predictive`` writes, for regression, ``name`` and ``name_mu``, both
    each tree's prediction: the Bayesian bootstrap has no noise model, so a draw of the
    response from a tree is its prediction.  For classification it writes ``name``, a label
    drawn from each tree's class probabilities, and ``name_proba`` (dims ``obs, class``).
    """

    family = "bayesian_forest"

    def __init__(self, name, X, y, *, kind: str = "bf", task: str = "auto", dtype: str = "float32", model=None,
                 **params):
        if kind not in KINDS:
            raise ValueError(f"kind must be 'bf', 'ebf' or 'ssf', got {kind!r}")
        if "n_estimators" in params:
            raise ValueError("n_estimators is set by bt.sample: the forest has draws * chains trees")
        self.kind = kind
        self.task = infer_task(y.get_value() if isinstance(y, DataContainer) else y, task)
        fit_params = {k: v for k, v in params.items() if k not in _DATA_PARAMS}
        try:  # validate the hyperparameters now, not at bt.sample
            ForestConfig(kind=kind, n_trees=1, dtype=dtype, **fit_params)
        except TypeError as e:
            known = sorted(set(ForestConfig.__dataclass_fields__) - {"kind", "n_trees", "progressbar"}
                           | set(_DATA_PARAMS))
            raise ValueError(f"unknown parameter for BayesianForest: {e}; known: {known}") from None
        super().__init__(name, X, y, model=model, dtype=dtype, **params)

    def _config(self, n_trees: int, progressbar: bool) -> ForestConfig:
        fit_params = {k: v for k, v in self.params.items() if k not in _DATA_PARAMS}
        return ForestConfig(kind=self.kind, n_trees=n_trees, progressbar=progressbar, **fit_params)

    def _fit(self, key, draws, chains, progressbar):
        data = prepare_data(self.X_value, self.y_value, task=self.task,
                            max_bins=int(self.params.get("max_bins", 1024)),
                            categorical=self.params.get("categorical_features"))
        result = fit_bayesian_forest(key, data, self._config(draws * chains, progressbar))
        self.fitted_ = ForestFit(result, data, chains, draws)
        return forest_inferencedata(result.device_trees, data, chains=chains, y_name=self.name,
                                    packed=result.packed,
                                    attrs={"kind": self.kind, "forest": result.config.kind_name,
                                           "weights": result.config.weights, "rv": self.name})

    def _predictive(self, idata, X, key) -> dict:
        """Keyword arguments of :func:`bayestrees.convert.predictive_group` for rows ``X``.

        The trees are those of ``idata``'s ``trees`` group, so the draws match ``idata``.
        """
        fit = self.fitted_
        codes = fit.data.binner.transform(X)
        trees = trees_from_inferencedata(idata)
        chains, draws = trees.feature.shape[:2]
        flat = type(trees)(*(np.reshape(a, (chains * draws,) + a.shape[2:]) for a in trees))
        return forest_predictive(key, flat, codes, fit.result.cart_config.missing, self.task, chains=chains,
                                 classes=fit.data.classes)
