"""Data sets shipped with the package (used by ``bayestrees demo``, the tutorials and the tests)."""
from __future__ import annotations

import gzip
from importlib import resources

import numpy as np

__all__ = ["load_mcycle", "load_haberman", "load_california_housing", "load_nhefs"]


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


#: the covariates of :func:`load_nhefs`'s ``X``, in order
NHEFS_FEATURES = ["sex", "race", "age", "education", "smokeintensity", "smokeyrs", "exercise", "active", "wt71"]


def load_nhefs():
    """Smoking cessation and weight gain (NHEFS): 1,566 smokers, an observational treatment.

    Returns ``(X, y, z, feature_names)``: ``z`` is 1 for those who quit smoking between the 1971
    baseline and the 1982 follow-up (``qsmk``, 403 of them), ``y`` the weight change over those years
    in kg (``wt82_71``), and ``X`` (float64, 1,566 x 9) the baseline covariates ``sex`` (0 male, 1
    female), ``race`` (0 white, 1 other), ``age``, ``education`` (1-5: up to 8th grade, high school
    dropout, high school, college dropout, college), ``smokeintensity`` (cigarettes a day),
    ``smokeyrs`` (years of smoking), ``exercise`` (0 much, 1 moderate, 2 little or none), ``active``
    (0 very, 1 moderately, 2 inactive) and ``wt71`` (kg in 1971): the
    confounders of Hernan & Robins's analyses of this data (*Causal Inference: What If*, 2020,
    chapters 12-15, where the average effect of quitting is estimated at about 3.5 kg).

    Source: the National Health and Nutrition Examination Survey I Epidemiologic Follow-up Study
    (NHEFS) of the U.S. National Center for Health Statistics (``wwwn.cdc.gov/nchs/nhanes/nhefs``),
    the complete cases as prepared by Hernan & Robins for their book and distributed in the
    ``causaldata`` package (``nhefs_complete``, MIT licence); the survey data are a work of the U.S.
    government in the public domain.  Shipped as gzipped CSV (about 19 KB) of these 11 columns.
    """
    with _path("nhefs.csv.gz").open("rb") as raw, gzip.open(raw, "rt") as fh:
        arr = np.loadtxt(fh, delimiter=",", skiprows=1)
    return arr[:, 2:], arr[:, 1], arr[:, 0].astype(int), list(NHEFS_FEATURES)
