"""Model comparison across families: ``az.loo`` and ``az.compare`` with clear errors.

ArviZ needs a ``log_likelihood`` group.  Families whose model defines a
likelihood write one (``Family.likelihood`` in :data:`bayestrees.families.REGISTRY`);
the others (the Bayesian-bootstrap forests, whose draws are of the CART
functional under a Bayesian bootstrap of the data, not of a likelihood's
parameters) are refused with the family's own reason, never a bare ArviZ
``TypeError``.
"""
from __future__ import annotations

from typing import Mapping

import arviz as az

from .families import REGISTRY

__all__ = ["check_log_likelihood", "loo", "compare"]

def check_log_likelihood(idata: az.InferenceData, name: str = "model") -> None:
    """Raise ``ValueError`` unless ``idata`` has a pointwise ``log_likelihood`` group."""
    if not isinstance(idata, az.InferenceData):
        raise TypeError(f"{name}: expected arviz.InferenceData, got {type(idata).__name__}")
    if "log_likelihood" in idata.groups():
        return
    family = idata.posterior.attrs.get("family", "") if "posterior" in idata.groups() else ""
    fam = REGISTRY.get(family)
    why = fam.no_likelihood if fam is not None and fam.no_likelihood else \
        f"this InferenceData (family {family or 'unknown'!r}) has no log_likelihood group"
    with_likelihood = ", ".join(f.name for f in REGISTRY.values() if f.likelihood)
    raise ValueError(
        f"{name}: {why}, so LOO and model comparison are not defined for it. Compare such models on held-out "
        f"data instead (e.g. RMSE or log loss), or fit a family with a likelihood ({with_likelihood})."
    )


def loo(idata: az.InferenceData, **kwargs):
    """Pareto-smoothed importance-sampling LOO of one fit: ``az.loo`` after :func:`check_log_likelihood`.

    Parameters
    ----------
    idata : arviz.InferenceData
        A fit of a family with a likelihood (its ``log_likelihood`` group); the Bayesian-bootstrap
        forests have none and raise a ``ValueError`` that says so.
    **kwargs
        Passed to ``az.loo`` (e.g. ``pointwise=True``).

    Returns
    -------
    arviz.ELPDData
        ``elpd_loo``, its standard error, ``p_loo`` and the Pareto k diagnostics.

    Raises
    ------
    ValueError
        When ``idata`` has no ``log_likelihood`` group (the message says why and what to do).
    TypeError
        When ``idata`` is not an InferenceData.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.PCFGTreeRegressor(max_bins=4, draws=10, random_state=0).fit(X, y)
    >>> result = bt.loo(reg.idata_, pointwise=True)
    >>> result.loo_i.shape                             # the pointwise elpd, one per row
    (40,)
    >>> forest = bt.BayesianForestRegressor(draws=10, random_state=0).fit(X, y)
    >>> bt.loo(forest.idata_)                          # the Bayesian bootstrap has no likelihood
    Traceback (most recent call last):
    ...
    ValueError: model: ... so LOO and model comparison are not defined for it. ...
    """
    check_log_likelihood(idata)
    return az.loo(idata, **kwargs)


def compare(models: Mapping[str, az.InferenceData], **kwargs):
    """Rank fits by LOO: ``az.compare`` after checking every model has a ``log_likelihood`` group.

    Parameters
    ----------
    models : mapping of str to arviz.InferenceData
        The fits by name, each of a family with a likelihood, on the same rows.
    **kwargs
        Passed to ``az.compare`` (e.g. ``ic="loo"``, ``method="stacking"``).

    Returns
    -------
    pandas.DataFrame
        One row per model, best first: ``elpd_loo``, differences, weights and warnings.

    Raises
    ------
    ValueError
        When a model has no ``log_likelihood`` group (named in the message).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> pcfg = bt.PCFGTreeRegressor(max_bins=4, draws=10, random_state=0).fit(X, y)
    >>> bcart = bt.BayesianCARTRegressor(draws=20, tune=10, chains=1, max_depth=3, scheme="moves",
    ...                                  random_state=0).fit(X, y)
    >>> table = bt.compare({"pcfg": pcfg.idata_, "bcart": bcart.idata_})
    >>> sorted(table.index)
    ['bcart', 'pcfg']
    >>> table[["elpd_loo", "weight"]].shape
    (2, 2)
    """
    for k, v in models.items():
        check_log_likelihood(v, name=k)
    return az.compare(dict(models), **kwargs)
