"""``bt.BETMixture``: BET (a Dirichlet-process mixture of trees) as a model-context random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     bt.BETMixture("f", X, y_train, alpha_dp=1.0, delta=2.0, min_leaf_rows=5, max_trees=10)
...     idata = bt.sample(draws=1000, tune=1000, chains=1, random_seed=0)
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The variable calls :func:`bayestrees.inference.bet.fit.fit_bet`, as the estimators do.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from ..convert import trees_from_inferencedata
from ..data import TrainingData, check_max_bins, infer_task
from ..inference.bet.fit import BETConfig, BETResult, bet_inferencedata, bet_values, fit_bet
from ..tree import apply
from .base import DataContainer, TreeRV, run_sampler

__all__ = ["BETMixture"]


@dataclass(frozen=True)
class BETFit:
    """What ``bt.sample`` leaves on a :class:`BETMixture` (its ``fitted_``)."""

    result: BETResult
    data: TrainingData


class BETMixture(TreeRV):
    """BET (Duan, Clancy & Szczesniak): a Dirichlet-process mixture of trees fit by a slice sampler.

    Parameters
    ----------
    name : str
    X : bt.Data or array (n_samples, n_features), no missing values
    y : array (n_samples,)
    alpha_dp, delta, min_leaf_rows, max_trees, active_trees, alpha_leaves, leaf_prior, max_depth, dtype :
        as for :class:`bayestrees.BETRegressor` / :class:`bayestrees.BETClassifier`
    task : {"auto", "regression", "classification"}
    max_bins : int, default 32

    Notes
    -----
    ``bt.sample(draws, tune=1000, chains=1, thin=1, random_seed=...)``.  Predictive draws at new
    rows: a component ``j`` is drawn with probability ``w_j`` among the occupied components
    (renormalised), then regression ``name = theta_mean + sigma * eps`` of that tree's leaf
    (``name_mu`` is the ensemble estimator ``sum_j w~_j E(theta | T_j)``), classification a label
    from the ensemble class probabilities (``name_proba``).
    """

    family = "bet"

    def __init__(self, name, X, y, *, alpha_dp=1.0, delta=2.0, min_leaf_rows=5, max_trees=10, active_trees=4,
                 init_trees=4, alpha_leaves=0.5, leaf_prior="objective", task="auto", max_depth=5, max_bins=32, dtype="float32",
                 model=None):
        self.task = infer_task(y.get_value() if isinstance(y, DataContainer) else y, task)
        max_bins = check_max_bins(max_bins)
        self.config = BETConfig(alpha_dp=alpha_dp, delta=delta, min_leaf_rows=min_leaf_rows, max_trees=max_trees,
                                active_trees=active_trees, init_trees=init_trees, alpha_leaves=alpha_leaves, leaf_prior=leaf_prior,
                                max_depth=max_depth, dtype=dtype)
        super().__init__(name, X, y, model=model, max_bins=max_bins)

    def _fit(self, key, draws, chains, progressbar, tune: int = 1000, thin: int = 1, chain_method: str = "auto"):
        result, data, idata = run_sampler(self, fit_bet, bet_inferencedata, key, draws, chains, progressbar, tune,
                                          thin, chain_method)
        self.fitted_ = BETFit(result, data)
        return idata

    def _predictive(self, idata, X, key) -> dict:
        fit = self.fitted_
        codes = fit.data.binner.transform(X)
        trees = trees_from_inferencedata(idata)                               # (c, d, J)
        w = np.asarray(idata.posterior["w"])                                  # (c, d, J)
        occ = np.asarray(trees.count)[..., 0] > 0                             # the root holds rows: occupied
        vals = bet_values(trees, w, occ, codes)                               # (c, d, n, V)
        k_comp, k_y = jax.random.split(key)
        if self.task == "regression":
            ww = np.where(occ, w, 0.0).astype(np.float64)
            ww = ww / np.maximum(ww.sum(-1, keepdims=True), 1e-300)
            logits = np.log(np.maximum(ww, 1e-300))[:, :, None, :]            # (c, d, 1, J)
            comp = np.asarray(jax.random.categorical(k_comp, logits, shape=vals.shape[:3]))   # (c, d, n)
            leaf = np.asarray(apply(trees, codes))                            # (c, d, J, n)
            leaf_c = np.take_along_axis(leaf, comp[:, :, None, :], 2)[:, :, 0]
            mean = _pick(np.asarray(trees.value)[..., 0], comp, leaf_c)
            sd = _pick(np.asarray(fit.result.draws.sigma), comp, leaf_c)
            y = mean + sd * np.asarray(jax.random.normal(k_y, mean.shape))
            return dict(task="regression", draws=y, mu=vals[..., 0])
        lab = np.asarray(jax.random.categorical(k_y, np.log(np.maximum(vals, 1e-30)), axis=-1))
        return dict(task="classification", draws=fit.data.classes[lab], proba=vals, class_names=fit.data.classes)


def _pick(per_slot, comp, leaf):
    """``per_slot[c, d, comp[c, d, i], leaf[c, d, i]]``: (c, d, n)."""
    c, d, n = comp.shape
    ci, di, _ = np.meshgrid(np.arange(c), np.arange(d), np.arange(n), indexing="ij")
    return per_slot[ci, di, comp, leaf]
