"""Data sets shipped with the package (used by ``bayestrees demo``, the tutorials and the tests)."""
from __future__ import annotations

import gzip
from importlib import resources

import numpy as np

__all__ = ["load_mcycle", "load_haberman", "load_california_housing", "load_nhefs", "load_german_credit"]


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


#: the columns of :func:`load_german_credit`'s ``X``, in order
GERMAN_CREDIT_FEATURES = ["checking_status", "duration", "credit_history", "purpose", "credit_amount", "savings",
                          "employment", "installment_rate", "personal_status_sex", "other_debtors", "residence_since",
                          "property", "age", "other_installment_plans", "housing", "existing_credits", "job",
                          "num_dependents", "telephone", "foreign_worker"]


def load_german_credit(as_frame: bool = False):
    """Statlog German credit (Hofmann 1994): 1,000 loan applicants, 20 features, 13 of them unordered
    categories, and whether the applicant was a good or a bad credit risk.

    A table with many categorical columns (2 to 10 categories each), for the subset splits of
    ``categorical_features=``.  The categorical columns hold the data set's own codes (``A11`` ..
    ``A14`` for ``checking_status``, and so on; their meanings are in the data set's documentation
    at the UCI repository); the numeric ones are ``duration`` (months), ``credit_amount`` (Deutsche
    Mark), ``installment_rate`` (percent of disposable income, 1-4), ``residence_since`` (years,
    1-4), ``age`` (years), ``existing_credits`` (at this bank) and ``num_dependents``.

    Parameters
    ----------
    as_frame : bool, default False
        Return the features as a pandas DataFrame whose categorical columns have the ``category``
        dtype (the estimators split them by subsets without ``categorical_features=``); needs pandas.

    Returns
    -------
    ``(X, y, feature_names, categorical_features)``: ``X`` float64 of shape (1000, 20), each
    categorical column holding the index of its code among the column's codes in the order of
    their numbers (``checking_status``: ``A11 -> 0`` .. ``A14 -> 3``); ``y`` int, 1 for a bad credit
    risk (300 applicants) and 0 for a good one (700); ``feature_names`` the columns' names; and
    ``categorical_features`` the indices of the 13 categorical columns.  With ``as_frame=True``:
    ``(frame, y)``, the frame's categories the codes themselves.

    Source: H. Hofmann, "Statlog (German Credit Data)", UCI Machine Learning Repository (1994),
    doi:10.24432/C5NC77, the 20-attribute version (``german.data``).  Licence: Creative Commons
    Attribution 4.0 (CC BY 4.0), the repository's licence for the data set.  Shipped as gzipped CSV
    (about 13 KB) with a header of the names above and ``credit_risk`` (1 good, 2 bad), rows in
    the original order.
    """
    import csv

    with _path("german_credit.csv.gz").open("rb") as raw, gzip.open(raw, "rt") as fh:
        rows = list(csv.reader(fh))
    names, rows = rows[0][:-1], rows[1:]
    y = np.array([int(r[-1]) == 2 for r in rows], dtype=int)
    columns = [[r[j] for r in rows] for j in range(len(names))]
    categorical = [j for j, col in enumerate(columns) if not col[0].lstrip("-").isdigit()]
    # each categorical column's codes in the order of their numbers (A40 .. A49, A410)
    levels = {j: sorted(set(columns[j]), key=lambda c: int(c[1:])) for j in categorical}
    if as_frame:
        import pandas as pd

        frame = pd.DataFrame({
            name: (pd.Categorical(col, categories=levels[j]) if j in levels else np.asarray(col, float))
            for j, (name, col) in enumerate(zip(names, columns))})
        return frame, y
    X = np.empty((len(rows), len(names)))
    for j, col in enumerate(columns):
        if j in levels:
            index = {c: i for i, c in enumerate(levels[j])}
            X[:, j] = [index[c] for c in col]
        else:
            X[:, j] = np.asarray(col, float)
    return X, y, names, categorical
