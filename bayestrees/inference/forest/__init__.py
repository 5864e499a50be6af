"""The Bayesian-forest family (BF, EBF, SSF and the RF/CART/ET baselines): its room.

:data:`FAMILY` describes the family by the protocol of :mod:`bayestrees.inference.family`;
the functions are those of :mod:`bayestrees.inference.forest.fit`.
"""
from __future__ import annotations

import numpy as np

from ...data import prepare_data
from ..family import Family
from .fit import (FAMILY as NAME, KINDS, ForestConfig, ForestResult, fit_bayesian_forest, forest_draws,
                  forest_inferencedata, forest_predictive, forest_values)

__all__ = ["FAMILY", "NAME", "KINDS", "ForestConfig", "ForestResult", "fit_bayesian_forest", "forest_values",
           "forest_draws", "forest_inferencedata", "forest_predictive"]


def prepare_forest_data(X, y, *, task: str = "auto", max_bins: int = 1024, categorical=None):
    """Validate and bin ``(X, y)`` for a forest (missing values get their own code)."""
    return prepare_data(X, y, task=task, max_bins=int(max_bins), categorical=categorical)


def values(result: ForestResult, codes) -> np.ndarray:
    """Each tree's prediction at coded rows: ``(n_trees, n, V)``."""
    trees, packed = result.device_trees, result.packed
    if trees is None:
        trees, packed = result.trees, None
    return forest_values(trees, codes, result.cart_config.missing, packed=packed)


def predictive(key, result: ForestResult, data, idata, codes) -> dict:
    """Predictive draws at coded rows from the trees of ``idata``'s ``trees`` group."""
    from ...convert import trees_from_inferencedata

    trees = trees_from_inferencedata(idata)
    chains, draws = trees.feature.shape[:2]
    flat = type(trees)(*(np.reshape(a, (chains * draws,) + a.shape[2:]) for a in trees))
    return forest_predictive(key, flat, codes, result.cart_config.missing, data.task, chains=chains,
                             classes=data.classes)


FAMILY = Family(
    name=NAME,
    title="Bayesian forests: CART fitted to Bayesian-bootstrap row weights (Taddy et al. 2015)",
    config=ForestConfig, fit=fit_bayesian_forest, prepare_data=prepare_forest_data,
    to_inferencedata=forest_inferencedata, values=values, predictive=predictive,
    likelihood=False,
    no_likelihood="the Bayesian forest family draws trees by a Bayesian bootstrap of the data, which defines "
                  "no likelihood",
    draws_are="each draw is a tree fitted to independent Bayesian-bootstrap weights",
    missing_values=True, max_bins=1024,
    presets={
        "bf": ("Bayesian forest (Bayesian-bootstrap weighted CART)", {"kind": "bf"}),
        "ebf": ("empirical Bayesian forest (CART trunk + Bayesian forest per trunk leaf)", {"kind": "ebf"}),
        "ssf": ("sub-sample forest (a forest per random block of rows)", {"kind": "ssf"}),
        "rf": ("random forest (multinomial bootstrap weights)", {"kind": "bf", "weights": "multinomial"}),
        "dt": ("single CART tree", {"kind": "bf", "weights": "none", "draws": 1}),
        "et": ("extra trees (random thresholds, no bootstrap)",
               {"kind": "bf", "weights": "none", "splitter": "random"}),
    },
)
