"""BART (Chipman, George & McCulloch 2010): a sum of trees by Bayesian backfitting MCMC, its room.

:data:`FAMILY` describes the family by the protocol of :mod:`bayestrees.inference.family`;
the functions are those of :mod:`bayestrees.inference.bart.fit` (the sampler is
:mod:`bayestrees.inference.bart.kernel`).
"""
from __future__ import annotations

import jax
import numpy as np

from ..family import Family, prepare_data_keeping_missing
from .fit import (FAMILY as NAME, MULTICLASS_MESSAGE, TREES_NOT_KEPT, BARTConfig, BARTResult, acceptance_rates,
                  bart_inferencedata, bart_values, check_sample_weight, check_weights, fit_bart, kept_rows, kept_values,
                  sigma_hat_of)
from .multinomial import softmax_probabilities

__all__ = ["FAMILY", "NAME", "BARTConfig", "BARTResult", "fit_bart", "bart_inferencedata", "bart_values",
           "acceptance_rates", "sigma_hat_of", "values", "predictive", "MULTICLASS_MESSAGE", "TREES_NOT_KEPT",
           "check_weights", "check_sample_weight", "kept_rows", "kept_values"]


def values(result: BARTResult, codes) -> np.ndarray:
    """Each draw's function at coded rows: ``(chains * draws, n, V)`` (regression ``V = 1`` in the
    response's units; probit ``V = 2`` class probabilities).  A fit that kept no trees
    (``keep_trees=False``) gives them at the rows named when fitting only, from the sums kept
    during sampling (the same numbers as from the trees), and a ``ValueError`` elsewhere."""
    if result.trees_kept:
        if result.missing is not None:   # the trees split the coded columns (bayestrees.inference.missing)
            codes = result.missing.code(codes)
        v = bart_values(result.feature, result.threshold, result.value, codes, task=result.task,
                        y_shift=result.y_shift, y_scale=result.y_scale, offset=result.offset,
                        categories=result.categories)
    else:
        v = kept_values(result, kept_rows(result, codes))
    return v.reshape((-1,) + v.shape[2:])


def predictive(key, result: BARTResult, data, idata, codes, weights=None) -> dict:
    """Predictive draws at coded rows from the trees of ``idata``: regression ``mu + sigma / sqrt(w)
    * eps``, classification a label drawn with the probit probability ``Phi(sqrt(w) (offset +
    f))``, for rows of precision weights ``weights`` (``(n_new,)`` floats, > 0 for regression;
    default: a new row of weight 1, as the estimators').  ``mu`` is the function whatever the
    weights; ``proba`` the probabilities the labels are drawn with.  Without a ``trees`` group
    (``keep_trees=False``) the function comes from the values kept at the rows named when fitting
    (a ``ValueError`` for other rows)."""
    reg = data.task == "regression"
    kept = "trees" not in idata.groups()
    if result.multinomial:
        return _predictive_classes(key, result, data, idata, codes, kept_rows(result, codes) if kept else None, weights)
    if kept:
        rows = kept_rows(result, codes)
    elif result.missing is not None or result.categories is not None:
        # the trees on the coded columns (idata's hold the original features), or with subset rules
        feature, threshold = result.feature, result.threshold
        value = result.value * np.float32(result.y_scale) if reg else result.value
        offset = float(idata.posterior.attrs["bart_offset"])
        if result.missing is not None:
            codes = result.missing.code(codes)
    else:
        trees = idata["trees"]
        feature = np.asarray(trees["split_feature"].values)
        threshold = np.asarray(trees["threshold"].values)
        value = np.asarray(trees["value"].values)[..., 0]                 # response units (regression)
        offset = float(idata.posterior.attrs["bart_offset"])
    if reg:
        if kept:
            mu = kept_values(result, rows)[..., 0]
        else:
            mu = bart_values(feature, threshold, value, codes, task="regression", y_shift=offset, y_scale=1.0,
                             offset=0.0, categories=result.categories)[..., 0]
        sigma = np.asarray(idata.posterior["sigma"])[..., None]
        if weights is not None:
            sigma = sigma / np.sqrt(np.asarray(weights, np.float64))
        y = mu + sigma * np.asarray(jax.random.normal(key, mu.shape))
        return dict(task="regression", draws=y, mu=mu)
    if weights is None:
        vals = (kept_values(result, rows) if kept else
                bart_values(feature, threshold, value, codes, task="classification", y_shift=0.0, y_scale=1.0,
                            offset=offset, categories=result.categories))
    else:   # the latent (offset + f) scaled by sqrt(w) before the link
        from scipy.special import ndtr

        if kept:
            eta = result.offset + np.ascontiguousarray(np.asarray(result.predict_fit)[..., rows], np.float64)
        else:
            eta = offset + bart_values(feature, threshold, value, codes, task="regression", y_shift=0.0,
                                       y_scale=1.0, offset=0.0, categories=result.categories)[..., 0]
        p = ndtr(np.sqrt(np.asarray(weights, np.float64)) * eta)
        vals = np.stack([1.0 - p, p], -1)
    u = np.asarray(jax.random.uniform(key, vals.shape[:-1]))
    lab = (u < vals[..., 1]).astype(np.int64)
    return dict(task="classification", draws=data.classes[lab], proba=vals, class_names=data.classes)


def _predictive_classes(key, result: BARTResult, data, idata, codes, rows, weights) -> dict:
    """:func:`predictive` for three or more classes: a label drawn with the probabilities
    ``softmax(w (o + f))`` of each draw (``w = 1``: the model's), from the values kept at the rows
    named when fitting (``rows``) or from the kept trees."""
    if rows is not None:
        f = np.ascontiguousarray(np.asarray(result.predict_fit)[..., rows], np.float64)
    else:   # the kept trees (log-rate leaves, as idata's), on the coded columns where values are missing
        if result.missing is not None:
            codes = result.missing.code(codes)
        f = bart_values(result.feature, result.threshold, result.value, codes, task="regression", y_shift=0.0,
                        y_scale=1.0, offset=0.0, categories=result.categories)[..., 0]                  # (chain, draw, k, n)
    eta = np.asarray(result.offset, np.float64)[:, None] + f
    if weights is not None:
        eta = eta * np.asarray(weights, np.float64)
    vals = softmax_probabilities(eta, np.zeros(eta.shape[-2]))
    u = np.asarray(jax.random.uniform(key, vals.shape[:-1]))
    lab = np.sum(u[..., None] > np.cumsum(vals, -1)[..., :-1], -1)
    return dict(task="classification", draws=data.classes[lab], proba=vals, class_names=data.classes)


def convergence_draws(result) -> dict:
    """The scalar draws of BART's convergence table, from the result (as its InferenceData holds
    them: ``sigma`` for regression, ``sparse_alpha`` with the sparse prior, then ``lp``)."""
    out = {} if result.sigma is None else {"sigma": result.sigma}
    if result.sparse_alpha is not None:
        out["sparse_alpha"] = result.sparse_alpha
    out["lp"] = result.lp
    return out


def prepare_data(X, y, *, task: str = "auto", max_bins: int = 100, categorical=None):
    """Validate and bin ``(X, y)``; missing values (NaN) in ``X`` are kept (their rules:
    :mod:`bayestrees.inference.missing`)."""
    return prepare_data_keeping_missing(X, y, task=task, max_bins=max_bins, categorical=categorical)


FAMILY = Family(
    name=NAME,
    title="BART: Bayesian additive regression trees (sum of m trees, Bayesian backfitting MCMC; probit for two classes, "
          "multinomial logit for more)",
    config=BARTConfig, fit=fit_bart, prepare_data=prepare_data, to_inferencedata=bart_inferencedata,
    values=values, predictive=predictive, mcmc=True, max_bins=100, convergence_draws=convergence_draws,
    missing_values=True,
    presets={"bart": ("BART: Bayesian additive regression trees (sum of trees; probit for two classes, multinomial "
                      "logit for more)", {})},
)
