"""``bt.BayesianCART``: Bayesian CART by MCMC as a model-context random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     bt.BayesianCART("f", X, y_train, prior=bt.priors.ChipmanPrior(0.95, 2.0), max_depth=6)
...     idata = bt.sample(draws=1000, tune=1000, chains=4, random_seed=0)
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The variable calls :func:`bayestrees.inference.bcart.fit.fit_bcart`, as the
estimators do.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from ..convert import trees_from_inferencedata
from ..data import TrainingData, check_max_bins, infer_task
from ..inference.bcart.fit import BCARTConfig, BCARTResult, bcart_inferencedata, bcart_values, fit_bcart
from ..priors import ChipmanPrior
from .base import DataContainer, TreeRV, run_sampler

__all__ = ["BayesianCART"]


@dataclass(frozen=True)
class BCARTFit:
    """What ``bt.sample`` leaves on a :class:`BayesianCART` (its ``fitted_``)."""

    result: BCARTResult
    data: TrainingData


class BayesianCART(TreeRV):
    """Bayesian CART (Chipman, George & McCulloch 1998): a posterior over single trees by MCMC.

    Parameters
    ----------
    name : str
        The variable's name (``observed_data``, ``log_likelihood`` and predictive variables).
    X : bt.Data or array (n_samples, n_features), no missing values
    y : array (n_samples,)
    prior : a bt.priors object, default ``ChipmanPrior(0.95, 2.0)``
    leaf_model : "auto", "common_variance", "normal", "dirichlet" or a bayestrees.leaves model
    task : {"auto", "regression", "classification"}  ("auto": :func:`bayestrees.data.infer_task`)
    max_depth : int, default 6
    max_bins : int, default 32
    alpha_leaves, move_probs, scheme, particles, dtype : as for :class:`bayestrees.BayesianCARTRegressor`

    Notes
    -----
    ``bt.sample(draws, tune=1000, chains=4, thin=1, random_seed=...)`` runs ``chains``
    vmapped chains of ``tune + draws * thin`` steps.  Posterior predictive draws at
    new rows: regression ``name`` = ``mu + sigma * eps`` (a draw of the response),
    ``name_mu`` the drawn function; classification ``name`` a drawn label and
    ``name_proba`` the drawn class probabilities.
    """

    family = "bayesian_cart"

    def __init__(self, name, X, y, *, prior=None, leaf_model="auto", task="auto", max_depth=6, max_bins=32,
                 alpha_leaves=1.0, move_probs=(0.25, 0.25, 0.4, 0.1), scheme="moves", particles=10, dtype="float32",
                 model=None):
        self.task = infer_task(y.get_value() if isinstance(y, DataContainer) else y, task)
        prior = ChipmanPrior() if prior is None else prior
        max_bins = check_max_bins(max_bins)
        self.config = BCARTConfig(prior=prior, leaf_model=leaf_model, alpha_leaves=alpha_leaves,
                                  max_depth=max_depth, move_probs=tuple(move_probs), scheme=scheme,
                                  particles=particles, dtype=dtype)
        if isinstance(leaf_model, str):
            self.config.leaf_model_for(self.task, 2)  # a leaf model that does not fit the task fails here
        super().__init__(name, X, y, model=model, max_bins=max_bins)

    def _fit(self, key, draws, chains, progressbar, tune: int = 1000, thin: int = 1, chain_method: str = "auto"):
        result, data, idata = run_sampler(self, fit_bcart, bcart_inferencedata, key, draws, chains, progressbar, tune,
                                          thin, chain_method)
        self.fitted_ = BCARTFit(result, data)
        return idata

    def _predictive(self, idata, X, key) -> dict:
        fit = self.fitted_
        codes = fit.data.binner.transform(X)
        trees = trees_from_inferencedata(idata)
        vals = bcart_values(trees, codes)                                  # (chains, draws, n, V)
        if self.task == "regression":
            mu = vals[..., 0]
            sigma = _sigma_at(trees, codes, idata, fit)
            y = mu + sigma * np.asarray(jax.random.normal(key, mu.shape))
            return dict(task="regression", draws=y, mu=mu)
        lab = np.asarray(jax.random.categorical(key, np.log(np.maximum(vals, 1e-30)), axis=-1))
        return dict(task="classification", draws=fit.data.classes[lab], proba=vals, class_names=fit.data.classes)


def _sigma_at(trees, codes, idata, fit):
    """Drawn noise sd at each new row: the common sigma, or the leaf's own for per-leaf variances."""
    if "sigma" in idata.posterior:
        return np.asarray(idata.posterior["sigma"])[..., None]
    from ..tree import apply

    leaf = np.asarray(apply(trees, codes))                                 # (chains, draws, n)
    sig = fit.result.sigma                                                 # (chains, draws, S)
    return np.take_along_axis(sig, leaf, -1)
