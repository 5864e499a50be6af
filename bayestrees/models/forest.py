"""``bt.BayesianForest``: the Bayesian-forest family as a model-context random variable."""
from __future__ import annotations

import numpy as np
import jax

from ..convert import trees_to_inferencedata
from .base import TreeRV

__all__ = ["BayesianForest"]


def _infer_task(y) -> str:
    y = np.asarray(y)
    if y.dtype.kind in "fc":
        return "regression"
    return "classification"


class BayesianForest(TreeRV):
    """A forest posterior over trees (draw = tree).

    Parameters
    ----------
    name : str
    X : bt.Data or array (n_samples, n_features)
    y : array (n_samples,)
    kind : {"bf", "ebf", "ssf"}
        Bayesian forest, empirical Bayesian forest (needs ``trunk_min_samples_leaf``)
        or sub-sample forest (``n_blocks``).
    task : {"auto", "regression", "classification"}
        "auto": float targets are regression, anything else classification.
    **params : estimator parameters (``min_samples_leaf``, ``weights``, ``max_features``, ...)
        as for :class:`bayestrees.BayesianForestRegressor`.

    ``bt.sample(draws, chains)`` fits ``draws * chains`` trees.  Posterior
    predictive draws are each tree's prediction (the CART functional); for
    classification they are class probabilities with a ``class`` dimension.
    """

    family = "bayesian_forest"

    def __init__(self, name, X, y, *, kind: str = "bf", task: str = "auto", model=None, **params):
        if kind not in ("bf", "ebf", "ssf"):
            raise ValueError(f"kind must be 'bf', 'ebf' or 'ssf', got {kind!r}")
        if task not in ("auto", "regression", "classification"):
            raise ValueError(f"task must be 'auto', 'regression' or 'classification', got {task!r}")
        super().__init__(name, X, y, model=model, **params)
        self.kind = kind
        self.task = _infer_task(self.y_value) if task == "auto" else task

    def _estimator(self, n_trees, seed):
        from ..estimators import forest as F

        cls = {("bf", "regression"): F.BayesianForestRegressor, ("bf", "classification"): F.BayesianForestClassifier,
               ("ebf", "regression"): F.EmpiricalBayesianForestRegressor,
               ("ebf", "classification"): F.EmpiricalBayesianForestClassifier,
               ("ssf", "regression"): F.SubSampleForestRegressor,
               ("ssf", "classification"): F.SubSampleForestClassifier}[(self.kind, self.task)]
        return cls(n_estimators=n_trees, random_state=seed, **self.params)

    def _fit(self, key, draws, chains, progressbar):
        seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
        est = self._estimator(draws * chains, seed)
        est.progressbar = progressbar
        est.fit(self.X_value, self.y_value)
        self.fitted_ = est
        trees = jax.tree_util.tree_map(lambda a: np.asarray(a).reshape((chains, draws) + a.shape[1:]), est.trees_)
        names = ["mean"] if self.task == "regression" else [str(c) for c in est.classes_]
        return trees_to_inferencedata(
            trees, output_names=names,
            observed_data={self.name + "_observed": np.asarray(self.y_value)},
            attrs={"family": self.family, "kind": self.kind, "task": self.task, "rv": self.name})

    def _predict_draws(self, idata, X, key):
        est = self.fitted_
        draws = est.predict_draws(X)
        chains, nd = idata.posterior.sizes["chain"], idata.posterior.sizes["draw"]
        draws = draws.reshape((chains, nd) + draws.shape[1:])
        dims = {self.name: ["obs"] if self.task == "regression" else ["obs", "class"]}
        return {self.name: draws}, dims
