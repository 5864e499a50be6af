"""Data sets shipped with the package (used by ``bayestrees demo``, the tutorials and the tests)."""
from __future__ import annotations

import gzip
from importlib import resources

import numpy as np

__all__ = ["load_mcycle", "load_haberman", "load_california_housing"]


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


#: the columns of :func:`load_california_housing`'s ``X``, in order
CALIFORNIA_FEATURES = ["longitude", "latitude", "housingMedianAge", "totalRooms", "totalBedrooms", "population",
                       "households", "medianIncome"]


def load_california_housing():
    """California housing (Pace & Barry 1997): 20,640 census block groups, 8 numeric features.

    Returns ``(X, y, feature_names)``: ``X`` float64 of shape (20640, 8) with the columns
    ``longitude, latitude, housingMedianAge, totalRooms, totalBedrooms, population, households,
    medianIncome`` (income in tens of thousands of dollars; rooms, bedrooms, people and households
    are totals over the block group), ``y`` the median house value in dollars, capped at 500,001.

    Source: R. K. Pace and R. Barry, "Sparse spatial autoregressions", *Statistics & Probability
    Letters* 33 (1997) 291-297, built from the 1990 U.S. Census and distributed by the StatLib
    archive (``lib.stat.cmu.edu/datasets``, ``houses.zip``), the version with the raw totals
    (not scikit-learn's per-household averages).  Licence: the figures are U.S. Census data, a
    work of the U.S. government in the public domain; StatLib states no licence of its own for
    the compilation.  Shipped as gzipped CSV (about 360 KB), rows in the archive's order.
    """
    with _path("california_housing.csv.gz").open("rb") as raw, gzip.open(raw, "rt") as fh:
        arr = np.loadtxt(fh, delimiter=",", skiprows=1)
    return arr[:, :8], arr[:, 8], list(CALIFORNIA_FEATURES)
