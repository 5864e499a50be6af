"""Dask inputs: a Dask DataFrame ``X`` with a Dask Series ``y``, or Parquet files with a target column.

Nothing here computes anything: the functions check what can be checked without reading the
data (the target column exists, ``X`` and ``y`` have the same number of partitions and,
where known, the same divisions) and return lazy Dask collections.  Row counts per partition
are compared when the partitions are first read (:func:`~bayestrees.distributed.partitions`).
"""
from __future__ import annotations

import os

__all__ = ["is_dask_input", "as_dask"]


def _is_dask_collection(obj) -> bool:
    try:
        from dask import is_dask_collection
    except ImportError:
        return False
    return is_dask_collection(obj)


def _is_parquet_path(obj) -> bool:
    if isinstance(obj, os.PathLike):
        obj = os.fspath(obj)
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(o, (str, os.PathLike)) for o in obj):
        return all(_is_parquet_path(o) for o in obj)
    if not isinstance(obj, str):
        return False
    return obj.endswith((".parquet", ".pq")) or any(ch in obj for ch in "*?[") or os.path.isdir(obj) \
        or "://" in obj


def is_dask_input(X) -> bool:
    """Whether ``X`` is a Dask collection or a path/glob of Parquet files."""
    return _is_dask_collection(X) or _is_parquet_path(X)


def as_dask(X, y=None, target=None):
    """``(X, y)`` as a Dask DataFrame and a Dask Series with matching partitions.

    Parameters
    ----------
    X : Dask DataFrame, or a path, glob or list of paths of Parquet files
    y : Dask Series, optional
        The response; or None with ``target``.
    target : str, optional
        Name of the response column in ``X`` (required for Parquet paths).

    Returns
    -------
    (dask DataFrame, dask Series)

    Raises
    ------
    ValueError
        No response given, a missing target column, ``y`` not a Dask Series, mismatched
        partitions.
    """
    import dask.dataframe as dd

    if not _is_dask_collection(X):
        if target is None:
            raise ValueError("a Parquet path needs target=<name of the response column>")
        X = dd.read_parquet(X if not isinstance(X, os.PathLike) else os.fspath(X))
    if not isinstance(X, dd.DataFrame):
        raise ValueError(f"X must be a Dask DataFrame or Parquet path(s), got {type(X).__name__}")
    if target is not None:
        if y is not None:
            raise ValueError("give either y or target=, not both")
        if target not in X.columns:
            cols = [str(c) for c in X.columns]
            raise ValueError(f"target column {target!r} is not in the data; its columns are {cols[:20]}")
        y = X[target]
        X = X.drop(columns=[target])
    if y is None:
        raise ValueError("a Dask X needs y (a Dask Series) or target=<column name>")
    if isinstance(y, dd.DataFrame):
        if len(y.columns) != 1:
            raise ValueError(f"y must be a Dask Series, got a Dask DataFrame with {len(y.columns)} columns")
        y = y[y.columns[0]]
    if not isinstance(y, dd.Series):
        raise ValueError(f"with a Dask X, y must be a Dask Series (same partitions as X), got {type(y).__name__}")
    if X.npartitions != y.npartitions:
        raise ValueError(f"X has {X.npartitions} partitions but y has {y.npartitions}; they must be "
                         "partitioned alike (e.g. take both from one DataFrame, or pass target=)")
    if X.known_divisions and y.known_divisions and tuple(X.divisions) != tuple(y.divisions):
        raise ValueError("X and y have different divisions (index ranges per partition); they must be "
                         "partitioned alike (e.g. take both from one DataFrame, or pass target=)")
    if len(X.columns) == 0:
        raise ValueError("X has no feature columns")
    return X, y
