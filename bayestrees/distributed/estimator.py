"""The estimators' Dask path: what ``fit``/``predict`` of the forest estimators call for Dask input."""
from __future__ import annotations

import jax
import numpy as np

from .client import get_client
from .fit import fit_forest_dask
from .inputs import as_dask

__all__ = ["fit_estimator", "estimator_client"]


def fit_estimator(est, X, y=None, *, target=None, client=None, sample_rows: int = 200_000):
    """Fit a forest estimator (EBF or SSF) on Dask input; sets the same fitted attributes as ``fit``.

    Parameters
    ----------
    est : an EmpiricalBayesianForest* or SubSampleForest* estimator
    X : Dask DataFrame, or Parquet path(s) (then ``target`` names the response column)
    y : Dask Series, optional
    target : str, optional
    client : None, distributed.Client or scheduler address (:func:`~bayestrees.distributed.client.get_client`)
    sample_rows : rows the bins (and ``idata_``) are computed from

    Returns
    -------
    est

    Notes
    -----
    Besides the attributes of a single-machine fit, sets ``n_rows_`` (rows of the data set) and
    ``dask_timings_`` (seconds per step).  ``idata_`` is computed at the rows of the bin sample
    (the whole data set when it has at most ``sample_rows`` rows), since the training rows are
    never collected in one process.  A sub-sample forest's ``block_of_row_`` is None (the blocks
    are a hash of each row's global index).
    """
    _, config, task, key = _fit_inputs(est)  # refuses a plain Bayesian forest
    data = as_dask(X, y, target)
    cl = get_client(client)
    res = fit_forest_dask(cl, data, config, task, key, max_bins=int(est.max_bins),
                          categorical=est.categorical_features, sample_rows=sample_rows)
    est.set_dask_fitted(res, data.X, cl)
    return est


# -- the estimator's side: its public Dask interface (dask_fit_inputs, set_dask_fitted, dask_client)


def _fit_inputs(est):
    """``(kind, config, task, key)`` of a forest estimator (its public ``dask_fit_inputs``).

    Raises
    ------
    ValueError
        The estimator is not an EBF or SSF.
    """
    kind, config, task, key = est.dask_fit_inputs()
    if kind not in ("ebf", "ssf"):
        raise ValueError(f"{type(est).__name__} needs all rows in one process; Dask input is for "
                         "EmpiricalBayesianForest* and SubSampleForest* (their trees are fitted per branch/block)")
    return kind, config, task, key


def estimator_client(est, client=None):
    """The client to predict on: ``client``, else the fit's if it is still running, else the local one."""
    if client is not None:
        return get_client(client)
    c = est.dask_client()
    if c is not None and getattr(c, "status", None) == "running":
        return c
    return get_client(None)


class _Boxed:
    """One object for ``client.scatter`` (which would scatter a tuple's fields one by one)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _predict_part(X, payload, what: str, *trees):
    import pandas as pd

    from ..inference.forest.fit import forest_values

    binner, missing, classes = payload
    if X.shape[1] != binner.n_features_in_:
        raise ValueError(f"X has {X.shape[1]} features, but the forest was fitted with {binner.n_features_in_}")
    codes = binner.transform(X)
    # one tree on the device at a time (one compiled traversal serves them all): the grafted
    # trees of a large fit are hundreds of MB, and a device copy of the whole batch doubles that
    # a float64 forest is evaluated in 64-bit JAX scoped to this task, as fit_branch fits it (the
    # worker's process-wide jax_enable_x64 is never switched on)
    if any(np.dtype(t.value.value.dtype) == np.float64 for t in trees):
        with jax.enable_x64(True):
            v = np.concatenate([forest_values(t.value, codes, missing) for t in trees])  # (T, m, V)
    else:
        v = np.concatenate([forest_values(t.value, codes, missing) for t in trees])
    if what == "mean":
        return pd.Series(v[..., 0].mean(0).astype(np.float64), index=X.index)
    p = v.astype(np.float64).mean(0)
    p = p / p.sum(1, keepdims=True)
    if what == "proba":
        return pd.DataFrame(p, index=X.index, columns=[str(c) for c in classes])
    return pd.Series(np.asarray(classes)[np.argmax(p, 1)], index=X.index)


def predict_dask(est, X, what: str, client=None):
    """Lazy predictions of a fitted forest for a Dask DataFrame (or Parquet path), computed on the cluster.

    Parameters
    ----------
    est : a fitted forest estimator
    X : Dask DataFrame or Parquet path(s) (the feature columns only)
    what : "mean" (regression), "proba" or "label" (classification)
    client : optional client (default: the fit's, else the local cluster)

    Returns
    -------
    Dask Series (``"mean"``, ``"label"``) or Dask DataFrame (``"proba"``, one column per class),
    partitioned as ``X``: every partition is coded and walked through the trunk into its
    branch's trees on the worker holding it.
    """
    import dask
    import dask.dataframe as dd
    import pandas as pd

    est.check_fitted()
    if not dask.is_dask_collection(X):
        X = dd.read_parquet(X)
    cl = estimator_client(est, client)
    classes = getattr(est, "classes_", None)
    trees = jax.tree_util.tree_map(np.asarray, est.trees_)
    payload = cl.scatter((est.binner_, int(est.config_.missing), classes), broadcast=True, hash=False)
    # the trees go out one at a time (each scatter returns once its tree is on the workers), so the
    # client serialises one tree at once, not the whole forest
    tree_futs = [cl.scatter(_Boxed(jax.tree_util.tree_map(lambda a, t=t: a[t:t + 1], trees)), broadcast=True,
                            hash=False) for t in range(int(trees.feature.shape[0]))]
    parts = [dask.delayed(_predict_part)(p, payload, what, *tree_futs) for p in X.to_delayed()]
    if what == "mean":
        meta = pd.Series([], dtype=np.float64)
    elif what == "proba":
        meta = pd.DataFrame({str(c): pd.Series([], dtype=np.float64) for c in classes})
    else:
        meta = pd.Series(np.asarray(classes)[:0])
    return dd.from_delayed(parts, meta=meta, verify_meta=False)
