"""The safe-Bayesian random forest family (Quadrianto & Ghahramani 2015): its room.

:data:`FAMILY` describes the family by the protocol of :mod:`bayestrees.inference.family`;
the functions are those of :mod:`bayestrees.inference.safebayes.fit`.  The family's
result is a :class:`SafeBayesFit`: the :class:`~bayestrees.inference.safebayes.fit.SafeBayesResult`
together with the key its equally weighted posterior draws are made from, so that the
InferenceData (built on demand) does not depend on when it is built.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ...tree import predict
from ..family import Family
from .fit import (FAMILY as NAME, SafeBayesConfig, SafeBayesResult, fit_safebayes, posterior_draws,
                  prepare_safebayes_data, safebayes_inferencedata, safebayes_predictive)

__all__ = ["FAMILY", "NAME", "SafeBayesConfig", "SafeBayesResult", "SafeBayesFit", "fit_keeping_key", "fit_safebayes",
           "prepare_safebayes_data", "to_inferencedata", "safebayes_inferencedata", "safebayes_predictive"]


@dataclass(frozen=True)
class SafeBayesFit:
    """A safe-Bayes fit: the result and the key of its posterior draws.

    Attributes
    ----------
    result : SafeBayesResult
    draws_key : numpy array
        Key data (``jax.random.key_data``) of the key that :func:`to_inferencedata` draws the
        equally weighted posterior draws with: ``jax.random.fold_in(key, 1)`` of the fit's key.

    Every other attribute is the result's (``fit.log_weights`` is ``fit.result.log_weights``),
    so a ``SafeBayesFit`` goes wherever a ``SafeBayesResult`` does.
    """

    result: SafeBayesResult
    draws_key: Any

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("result", "draws_key"):
            raise AttributeError(name)
        return getattr(self.result, name)


def fit_keeping_key(key, data, config: SafeBayesConfig) -> SafeBayesFit:
    """:func:`~bayestrees.inference.safebayes.fit.fit_safebayes`, keeping the key of the posterior draws."""
    result = fit_safebayes(key, data, config)
    return SafeBayesFit(result, np.asarray(jax.random.key_data(jax.random.fold_in(key, 1))))


def prepare(X, y, *, task: str = "auto", max_bins=None, categorical=None):
    """:func:`~bayestrees.inference.safebayes.fit.prepare_safebayes_data`: features binned exactly."""
    return prepare_safebayes_data(X, y, task=task)


def to_inferencedata(result: SafeBayesFit, data, *, y_name: str = "y", attrs=None):
    """:func:`~bayestrees.inference.safebayes.fit.safebayes_inferencedata` with the fit's own key and chains."""
    key = jax.random.wrap_key_data(np.asarray(result.draws_key))
    return safebayes_inferencedata(key, result.result, data, chains=result.result.config.chains, y_name=y_name,
                                   attrs=attrs)


def values(result: SafeBayesFit, codes) -> np.ndarray:
    """The equally weighted posterior draws' leaf parameters at coded rows: ``(K, n, V)``."""
    key = jax.random.wrap_key_data(np.asarray(result.draws_key))
    return np.asarray(predict(posterior_draws(key, result.result).trees, np.asarray(codes)))


def predictive(key, result: SafeBayesFit, data, idata, codes) -> dict:
    """Predictive draws at coded rows from the draws of ``idata``'s ``trees`` group."""
    from ...convert import trees_from_inferencedata

    return safebayes_predictive(key, trees_from_inferencedata(idata), codes, data, result.result)


FAMILY = Family(
    name=NAME,
    title="safe-Bayesian random forest (prior trees, importance weights)",
    config=SafeBayesConfig, fit=fit_keeping_key, prepare_data=prepare, to_inferencedata=to_inferencedata,
    values=values, predictive=predictive,
    draws_are="the draws are prior trees resampled by their importance weights",
    missing_values=True,
    summary_attrs=("effective_sample_size", "beta", "distinct_trees", "weights_ess"),
    presets={"safebayes": ("safe-Bayesian random forest (prior trees, importance weights)", {})},
)
