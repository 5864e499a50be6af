"""Tasks that run on the workers, one partition at a time.

Each function takes one pandas partition (or a coded partition, a dict of NumPy arrays) and
returns something small, or the partition coded: ``codes`` (m, d) uint, ``y`` (m,) float64
responses or int32 class codes, ``row`` (m,) int64 global row indices.
"""
from __future__ import annotations

import numpy as np

from ..data import check_X, missing_code

__all__ = ["describe", "sample", "code", "split_groups", "piece", "concat_pieces"]


def _check_lengths(X, y, p: int) -> None:
    if len(X) != len(y):
        raise ValueError(f"partition {p}: X has {len(X)} rows but y has {len(y)}; X and y must be "
                         "partitioned alike (e.g. take both from one DataFrame, or pass target=)")


def describe(X, y, p: int, task: str) -> dict:
    """Rows, the response's sum (regression) or labels (classification) of partition ``p``."""
    _check_lengths(X, y, p)
    yv = np.asarray(y)
    out = {"n": len(X)}
    if task == "regression":
        yf = yv.astype(np.float64)
        if not np.all(np.isfinite(yf)):
            raise ValueError(f"partition {p}: y contains NaN or infinite values")
        out["sum"] = float(np.sum(yf))
    else:
        if yv.dtype == object and any(v is None or v != v for v in yv.tolist()):
            raise ValueError(f"partition {p}: y contains missing labels")
        out["labels"] = np.unique(yv)
    return out


def sample(X, y, p: int, n_take: int, seed: int, task: str, mean: float):
    """``n_take`` random rows of partition ``p`` (all of them, in order, when ``n_take >= len``), and
    the sum of squared deviations of its responses from ``mean`` (regression)."""
    m = len(X)
    if n_take >= m:
        idx = np.arange(m)
    else:
        idx = np.sort(np.random.default_rng([seed, p]).choice(m, n_take, replace=False))
    ss = float(np.sum((np.asarray(y, np.float64) - mean) ** 2)) if task == "regression" else 0.0
    return X.iloc[idx], np.asarray(y)[idx], ss


def code(X, y, p: int, offset: int, binner, task: str, classes) -> dict:
    """Partition ``p`` coded by ``binner``, with responses (or class codes) and global row indices."""
    _check_lengths(X, y, p)
    codes = binner.transform(X)
    yv = np.asarray(y)
    if task == "regression":
        yc = yv.astype(np.float64)
    else:
        yc = np.searchsorted(classes, yv).astype(np.int32)
    return {"codes": codes, "y": yc, "row": offset + np.arange(len(X), dtype=np.int64)}


def summary(part: dict) -> dict:
    """Rows and whether any value is missing, of a coded partition."""
    codes = part["codes"]
    return {"n": int(codes.shape[0]), "missing": bool((codes == missing_code(codes.dtype)).any())}


def split_groups(part: dict, kind: str, trunk=None, missing: int = 0, n_blocks: int = 1, seed: int = 0) -> dict:
    """A coded partition cut by group: trunk leaf (``kind="ebf"``) or random block (``"ssf"``).

    Returns
    -------
    dict
        group -> coded rows of the partition in that group.
    """
    if kind == "ebf":
        from .trunk import route

        g = route(trunk, part["codes"], missing)
    else:
        g = np.asarray(_block_of(part["row"], n_blocks, seed))
    out = {}
    for grp in np.unique(g):
        sel = g == grp
        out[int(grp)] = {k: v[sel] for k, v in part.items()}
    return out


def _block_of(row: np.ndarray, n_blocks: int, seed: int) -> np.ndarray:
    """A random block for each global row index (a hash, so it does not depend on partitions)."""
    x = np.asarray(row, np.uint64) + np.uint64((int(seed) * 0x9E3779B97F4A7C15) % 2**64)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return (x % np.uint64(n_blocks)).astype(np.int64)


def piece(groups: dict, grp: int, d: int, dtype) -> dict:
    """The rows of group ``grp`` in one partition's :func:`split_groups` (empty arrays if none)."""
    got = groups.get(int(grp))
    if got is not None:
        return got
    return {"codes": np.zeros((0, d), dtype), "y": np.zeros(0), "row": np.zeros(0, np.int64)}


def concat_pieces(pieces: list) -> dict:
    """One group's rows from its pieces."""
    pieces = [q for q in pieces if q["codes"].shape[0]]
    return {k: np.concatenate([q[k] for q in pieces]) for k in ("codes", "y", "row")}


def check_X_columns(X) -> None:
    """Validate the feature columns of a sample as the single-machine path does."""
    check_X(X)
