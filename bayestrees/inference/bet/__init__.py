"""BET (Duan, Clancy & Szczesniak), a Dirichlet-process mixture of trees: its room.

:data:`FAMILY` describes the family by the protocol of :mod:`bayestrees.inference.family`;
the functions are those of :mod:`bayestrees.inference.bet.fit`.
"""
from __future__ import annotations

import jax
import numpy as np

from ...tree import apply
from ..family import Family, prepare_data_keeping_missing
from .fit import (FAMILY as NAME, BETConfig, BETResult, best_ensemble, bet_inferencedata, bet_values, component_rows,
                  fit_bet, leaf_slots)

__all__ = ["FAMILY", "NAME", "BETConfig", "BETResult", "fit_bet", "bet_inferencedata", "bet_values",
           "best_ensemble", "component_rows"]


def values(result: BETResult, codes) -> np.ndarray:
    """The ensemble estimator of every draw at coded rows: ``(chains * draws, n, V)``."""
    d = result.draws
    leaf = None if result.categories is None else leaf_slots(result, codes)
    v = bet_values(d.tree, d.w, d.occupied, codes, leaf)
    return v.reshape((-1,) + v.shape[2:])


def _pick(per_slot, comp, leaf):
    """``per_slot[c, d, comp[c, d, i], leaf[c, d, i]]``: (c, d, n)."""
    c, d, n = comp.shape
    ci, di, _ = np.meshgrid(np.arange(c), np.arange(d), np.arange(n), indexing="ij")
    return per_slot[ci, di, comp, leaf]


def predictive(key, result: BETResult, data, idata, codes) -> dict:
    """Predictive draws at coded rows from the draws of ``idata``.

    A component ``j`` is drawn with probability ``w_j`` among the occupied components
    (renormalised), then regression ``theta_mean + sigma * eps`` of that tree's leaf (``mu``
    is the ensemble estimator), classification a label from the ensemble class probabilities.
    """
    from ...convert import trees_from_inferencedata

    trees = trees_from_inferencedata(idata)                               # (c, d, J)
    w = np.asarray(idata.posterior["w"])                                  # (c, d, J)
    occ = np.asarray(trees.count)[..., 0] > 0                             # the root holds rows: occupied
    # subset rules: routed by the fit's rules on the coded columns (the same draws)
    leaf = None if result.categories is None else leaf_slots(result, codes)   # (c, d, J, n)
    vals = bet_values(trees, w, occ, codes, leaf)                         # (c, d, n, V)
    k_comp, k_y = jax.random.split(key)
    if data.task == "regression":
        ww = np.where(occ, w, 0.0).astype(np.float64)
        ww = ww / np.maximum(ww.sum(-1, keepdims=True), 1e-300)
        logits = np.log(np.maximum(ww, 1e-300))[:, :, None, :]            # (c, d, 1, J)
        comp = np.asarray(jax.random.categorical(k_comp, logits, shape=vals.shape[:3]))   # (c, d, n)
        if leaf is None:
            leaf = np.asarray(apply(trees, codes))                        # (c, d, J, n)
        leaf_c = np.take_along_axis(leaf, comp[:, :, None, :], 2)[:, :, 0]
        mean = _pick(np.asarray(trees.value)[..., 0], comp, leaf_c)
        sd = _pick(np.asarray(result.draws.sigma), comp, leaf_c)
        y = mean + sd * np.asarray(jax.random.normal(k_y, mean.shape))
        return dict(task="regression", draws=y, mu=vals[..., 0])
    lab = np.asarray(jax.random.categorical(k_y, np.log(np.maximum(vals, 1e-30)), axis=-1))
    return dict(task="classification", draws=data.classes[lab], proba=vals, class_names=data.classes)


FAMILY = Family(
    name=NAME,
    title="BET: Dirichlet-process mixture of trees (slice sampler)",
    config=BETConfig, fit=fit_bet, prepare_data=prepare_data_keeping_missing, missing_values=True,
    to_inferencedata=bet_inferencedata,
    values=values, predictive=predictive, mcmc=True, max_bins=32,
    presets={"bet": ("BET: Dirichlet-process mixture of trees (slice sampler)", {})},
)
