"""The Bayesian CART family (Chipman, George & McCulloch 1998) by MCMC: its room.

:data:`FAMILY` describes the family by the protocol of :mod:`bayestrees.inference.family`;
the functions are those of :mod:`bayestrees.inference.bcart.fit`.
"""
from __future__ import annotations

import jax
import numpy as np

from ...tree import apply
from ..family import Family, prepare_data_keeping_missing
from .fit import (FAMILY as NAME, BCARTConfig, BCARTResult, acceptance_rates, bcart_inferencedata, bcart_values,
                  fit_bcart, leaf_slots, leaf_values)

__all__ = ["FAMILY", "NAME", "BCARTConfig", "BCARTResult", "fit_bcart", "bcart_inferencedata", "bcart_values",
           "acceptance_rates"]


def values(result: BCARTResult, codes) -> np.ndarray:
    """Each draw's leaf values at coded rows: ``(chains * draws, n, V)``."""
    v = leaf_values(result, codes)
    return v.reshape((-1,) + v.shape[2:])


def predictive(key, result: BCARTResult, data, idata, codes) -> dict:
    """Predictive draws at coded rows from the draws of ``idata``: regression ``mu + sigma * eps``
    (the common ``sigma``, or the leaf's own), classification a label from the drawn probabilities."""
    from ...convert import trees_from_inferencedata

    if result.categories is None:
        trees = trees_from_inferencedata(idata)
        vals = bcart_values(trees, codes)                                  # (chains, draws, n, V)
    else:   # subset rules: routed by the fit's rules on the coded columns (the same draws)
        vals = leaf_values(result, codes)
    if data.task == "regression":
        mu = vals[..., 0]
        if "sigma" in idata.posterior:
            sigma = np.asarray(idata.posterior["sigma"])[..., None]
        else:
            leaf = (np.asarray(apply(trees, codes)) if result.categories is None
                    else leaf_slots(result, codes))                        # (chains, draws, n)
            sigma = np.take_along_axis(result.sigma, leaf, -1)
        y = mu + sigma * np.asarray(jax.random.normal(key, mu.shape))
        return dict(task="regression", draws=y, mu=mu)
    lab = np.asarray(jax.random.categorical(key, np.log(np.maximum(vals, 1e-30)), axis=-1))
    return dict(task="classification", draws=data.classes[lab], proba=vals, class_names=data.classes)


FAMILY = Family(
    name=NAME,
    title="Bayesian CART by MCMC (grow/prune/change/swap moves, vmapped chains)",
    config=BCARTConfig, fit=fit_bcart, prepare_data=prepare_data_keeping_missing,
    to_inferencedata=bcart_inferencedata, values=values, predictive=predictive, mcmc=True, max_bins=32,
    missing_values=True,
    presets={"bcart": ("Bayesian CART by MCMC (grow/prune/change/swap moves, vmapped chains)", {})},
)
