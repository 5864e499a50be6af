"""Dask inputs: a Dask DataFrame ``X`` with a Dask Series ``y``, or Parquet files with a target column.

Nothing here computes anything: the functions check what can be checked without reading the
data (the target column exists, ``X`` and ``y`` have the same number of partitions and,
where known, the same divisions) and return lazy Dask collections.  Row counts per partition
are compared when the partitions are first read (:func:`~bayestrees.distributed.partitions`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["is_dask_input", "as_dask", "DaskXY"]


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


@dataclass
class DaskXY:
    """Dask input split into per-partition pieces.

    Attributes
    ----------
    columns : list of the feature column names
    parts : list of ``(X_p, y_p)`` Dask delayed objects, one pair per partition
    X : the features as a Dask DataFrame (for prediction-like uses)
    """

    columns: list
    parts: list
    X: object

    @property
    def npartitions(self) -> int:
        return len(self.parts)


def _drop(df, col):
    return df.drop(columns=[col])


def _column(df, col):
    return df[col]


def as_dask(X, y=None, target=None) -> DaskXY:
    """``(X, y)`` as per-partition pairs of delayed pandas objects, checked.

    Parameters
    ----------
    X : Dask DataFrame, or a path, glob or list of paths of Parquet files
    y : Dask Series, optional
        The response; or None with ``target``.
    target : str, optional
        Name of the response column in ``X`` (required for Parquet paths).

    Returns
    -------
    DaskXY

    Raises
    ------
    ValueError
        No response given, a missing target column, ``y`` not a Dask Series, mismatched
        partitions.

    Notes
    -----
    With ``target=`` every partition is read once and cut into features and response on the
    worker.  A separate ``y`` must have the same partitions as ``X``; rows per partition are
    compared when the partitions are read.
    """
    import dask
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
        if len(X.columns) < 2:
            raise ValueError("X has no feature columns besides the target")
        frames = X.to_delayed(optimize_graph=False)
        parts = [(dask.delayed(_drop)(f, target), dask.delayed(_column)(f, target)) for f in frames]
        feats = X.drop(columns=[target])
        return DaskXY([c for c in feats.columns], parts, feats)
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
    xs, ys = X.to_delayed(optimize_graph=False), y.to_delayed(optimize_graph=False)
    if len(xs) != len(ys):
        raise ValueError(f"X has {len(xs)} partitions but y has {len(ys)}; they must be partitioned alike")
    return DaskXY([c for c in X.columns], list(zip(xs, ys)), X)
