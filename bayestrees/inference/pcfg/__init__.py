"""The BCART-PCFG family (exact posterior over decision trees): its room.

:data:`FAMILY` describes the family by the protocol of :mod:`bayestrees.inference.family`;
the functions are those of :mod:`bayestrees.inference.pcfg.fit`.
"""
from __future__ import annotations

import numpy as np

from ...tree import predict
from ..family import Family
from .fit import (FAMILY as NAME, PCFGConfig, PCFGResult, fit_pcfg, pcfg_inferencedata, pcfg_predictive,
                  prepare_pcfg_data)

__all__ = ["FAMILY", "NAME", "PCFGConfig", "PCFGResult", "fit_pcfg", "prepare_pcfg_data", "pcfg_inferencedata",
           "pcfg_predictive"]


def prepare(X, y, *, task: str = "auto", max_bins: int = 10, categorical=None):
    """:func:`~bayestrees.inference.pcfg.fit.prepare_pcfg_data` (categorical columns are found by type)."""
    return prepare_pcfg_data(X, y, task=task, max_bins=max_bins)


def values(result: PCFGResult, codes) -> np.ndarray:
    """Each draw's leaf parameters at coded rows: ``(chains * draws, n, V)``."""
    v = np.asarray(predict(result.drawn_trees, np.asarray(codes, np.int32)))
    return v.reshape((-1,) + v.shape[2:])


def predictive(key, result: PCFGResult, data, idata, codes) -> dict:
    """Predictive draws at coded rows from the draws of ``idata``'s ``trees`` group."""
    from ...convert import trees_from_inferencedata

    return pcfg_predictive(key, trees_from_inferencedata(idata), codes, data, result.leaf_model)


FAMILY = Family(
    name=NAME,
    title="BCART-PCFG: exact posterior over trees (small feature counts)",
    config=PCFGConfig, fit=fit_pcfg, prepare_data=prepare, to_inferencedata=pcfg_inferencedata,
    values=values, predictive=predictive,
    draws_are="the draws are exact independent samples of the posterior",
    max_bins=10,
    presets={"pcfg": ("BCART-PCFG: exact posterior over trees (small feature counts)", {})},
)
