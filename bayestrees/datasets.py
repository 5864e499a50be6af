"""Small data sets shipped with the package (used by ``bayestrees demo`` and the tests)."""
from __future__ import annotations

from importlib import resources

import numpy as np

__all__ = ["load_mcycle", "load_haberman"]


def _path(name: str):
    return resources.files("bayestrees") / "data_files" / name


def load_mcycle():
    """Motorcycle crash-helmet acceleration (133 rows).

    Returns ``(X, y)``: ``X`` of shape (133, 1) holding ``times`` (ms after
    impact) and ``y`` the head acceleration ``accel`` (g).
    """
    with _path("mcycle.csv").open() as fh:
        arr = np.loadtxt(fh, delimiter=",", skiprows=1)
    return arr[:, :1], arr[:, 1]


def load_haberman():
    """Haberman's breast-cancer survival data (306 rows, 3 features).

    Returns ``(X, y, feature_names)``; ``y`` is 1 = survived 5 years, 2 = died.
    """
    with _path("haberman.csv").open() as fh:
        arr = np.loadtxt(fh, delimiter=",")
    return arr[:, :3], arr[:, 3].astype(int), ["age", "operation_year", "positive_nodes"]
