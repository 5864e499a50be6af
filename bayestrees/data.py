"""Data layer: validation and binning of features to small unsigned codes.

Everything downstream of this module works on integer *codes*, never on raw
feature values.  A :class:`Binner` is fit once on training data and stores the
bin edges (and category maps) so that new ``X`` is coded identically at
predict time.

Rules
-----
Numeric features
    If a feature has at most ``max_bins`` distinct (non-missing) values it is
    binned *exactly*: one bin per distinct value, with the edge between two
    neighbouring values at their midpoint (the threshold scikit-learn's CART
    reports).  On such data a split on codes is the same partition of the rows
    as an exact CART split.  Otherwise ``max_bins`` quantile bins are used: the
    edges are the data quantiles, snapped to midpoints between neighbouring
    distinct values and de-duplicated.  Code ``k`` holds the values ``x`` with
    ``edges[k-1] < x <= edges[k]``; a split "code <= t" is the split
    "x <= edges[t]".
Categorical features (pandas ``category``/``object``/``string``/``bool`` columns, or
    indices given in ``categorical``)
    Each category gets one code.  Categories are ordered once, at fit time, by
    the mean training response of their rows (regression) or by the frequency
    of the first class (classification) -- Breiman's ordering, which is exact
    for squared error and two classes -- and a split "code <= t" sends a set of
    whole categories to the left.  A category unseen at fit time raises
    ``ValueError`` at predict time.
Missing values (NaN / None)
    Missing values get their own code, ``MISSING`` (the largest value of the
    code dtype).  Each split learns, from the training rows, whether the
    missing rows of its feature go left or right (the side with the larger
    gain); at predict time missing values follow that side, and where no
    training row of the node was missing they go right.
Infinite values
    Rejected with ``ValueError``.

Codes are ``uint8`` when every feature has at most 255 bins (code 255 is
reserved for ``MISSING``) and ``uint16`` otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

__all__ = [
    "Binner",
    "check_X",
    "check_y_regression",
    "check_y_classification",
    "infer_task",
    "check_dtype",
    "TrainingData",
    "prepare_data",
    "MAX_INFERRED_CLASSES",
    "missing_code",
    "mask_codes",
    "ecdf_transform",
    "bucket_size",
    "pad_rows",
    "standardize_response",
    "check_int",
    "check_finite",
    "check_positive",
    "check_probability",
    "check_alpha",
    "check_max_bins",
    "observed_response",
]


def missing_code(dtype) -> int:
    """The reserved code for missing values in a code array of ``dtype``."""
    return int(np.iinfo(np.dtype(dtype)).max)


def _is_dataframe(X) -> bool:
    return hasattr(X, "columns") and hasattr(X, "dtypes") and hasattr(X, "iloc")


def _column_kind(col) -> str:
    """'numeric' or 'categorical' for a pandas Series."""
    import pandas as pd  # only reached when a DataFrame was given

    dt = col.dtype
    if isinstance(dt, pd.CategoricalDtype) or dt == object or pd.api.types.is_string_dtype(dt):
        return "categorical"
    if pd.api.types.is_bool_dtype(dt):
        return "numeric"
    if pd.api.types.is_numeric_dtype(dt):
        return "numeric"
    raise ValueError(f"column {col.name!r} has unsupported dtype {dt}; use numbers, bool or categories")


def check_X(X, *, name: str = "X", allow_nan: bool = True) -> tuple[list[np.ndarray], list[str], list[str]]:
    """Validate a feature matrix and split it into columns.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features) or pandas DataFrame
    allow_nan : bool
        If False, NaN/None values raise ``ValueError``.

    Returns
    -------
    columns : list of 1-d arrays (float64 for numeric, object for categorical)
    kinds : list of ``"numeric"`` / ``"categorical"``
    names : list of column names
    """
    if X is None:
        raise ValueError(f"{name} is None; pass an array of shape (n_samples, n_features)")
    if hasattr(X, "tocsr") or hasattr(X, "todense"):
        raise TypeError(f"sparse input is not supported: {name} is a sparse matrix/array; "
                        "pass a dense array (X.toarray())")
    if _is_dataframe(X):
        if X.shape[0] == 0:
            raise ValueError(f"{name} is empty (0 rows); pass at least one row")
        if X.shape[1] == 0:
            raise ValueError(f"{name} has 0 columns; pass at least one feature")
        cols, kinds, names = [], [], []
        for c in X.columns:
            s = X[c]
            kind = _column_kind(s)
            if kind == "numeric":
                arr = s.to_numpy(dtype=np.float64, na_value=np.nan)
            else:
                arr = s.astype(object).to_numpy()
                arr = np.array([np.nan if _is_missing(v) else v for v in arr], dtype=object)
            cols.append(arr)
            kinds.append(kind)
            names.append(str(c))
    else:
        arr = np.asarray(X)
        if arr.ndim == 1:
            raise ValueError(
                f"{name} must be 2-d of shape (n_samples, n_features), got 1-d of length {arr.shape[0]}. "
                "Reshape your data: X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a single row"
            )
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 2-d of shape (n_samples, n_features), got shape {arr.shape}")
        if arr.shape[0] == 0:
            raise ValueError(f"{name} is empty: found 0 sample(s) (shape={arr.shape}) while a minimum of 1 is "
                             "required; pass at least one row")
        if arr.shape[1] == 0:
            raise ValueError(f"{name} has 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required.")
        if arr.dtype.kind == "c":
            raise ValueError(f"Complex data not supported: {name} has dtype {arr.dtype}")
        if arr.dtype.kind in "biuf":
            arr = arr.astype(np.float64)
            cols = [arr[:, j] for j in range(arr.shape[1])]
            kinds = ["numeric"] * arr.shape[1]
        elif arr.dtype.kind in "OUS":
            cols, kinds = [], []
            for j in range(arr.shape[1]):
                col = arr[:, j]
                try:
                    num = np.array([np.nan if _is_missing(v) else float(v) for v in col], dtype=np.float64)
                    cols.append(num)
                    kinds.append("numeric")
                except (TypeError, ValueError):
                    bad = [v for v in col if not isinstance(v, (str, bytes, int, float, bool, np.generic))
                           and not _is_missing(v)]
                    if bad:
                        raise ValueError(f"{name} column {j}: argument must be a string or a number, "
                                         f"got {type(bad[0]).__name__}") from None
                    cols.append(np.array([np.nan if _is_missing(v) else v for v in col], dtype=object))
                    kinds.append("categorical")
        else:
            raise ValueError(f"{name} has unsupported dtype {arr.dtype}; use numbers, bool or strings")
        names = [f"x{j}" for j in range(arr.shape[1])]
    for j, (col, kind) in enumerate(zip(cols, kinds)):
        if kind == "numeric":
            if np.isinf(col).any():
                raise ValueError(
                    f"{name} column {names[j]!r} contains infinite values; replace them (e.g. by NaN, "
                    "which is treated as missing) before fitting"
                )
            if not allow_nan and np.isnan(col).any():
                raise ValueError(f"{name} column {names[j]!r} contains NaN, which this model does not support")
        elif not allow_nan and any(_is_missing(v) for v in col):
            raise ValueError(f"{name} column {names[j]!r} contains missing values, which this model does not support")
    return cols, kinds, names


def _is_missing(v) -> bool:
    if v is None:
        return True
    try:
        return bool(np.isnan(v))
    except (TypeError, ValueError):
        return False


def _column_or_1d(y, name: str) -> np.ndarray:
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        import warnings

        try:
            from sklearn.exceptions import DataConversionWarning as _W
        except ImportError:  # pragma: no cover
            _W = UserWarning
        warnings.warn(f"A column-vector {name} was passed when a 1d array was expected; it was raveled",
                      _W, stacklevel=3)
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-d, got shape {arr.shape}")
    return arr


def check_y_regression(y, n: int | None = None, *, name: str = "y") -> np.ndarray:
    """Validate a real response: 1-d, numeric, finite, matching ``n`` rows."""
    if y is None:
        raise ValueError(f"{name} is None; pass a 1-d array of targets")
    arr = _column_or_1d(y, name)
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty; pass at least one target")
    if arr.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {arr.dtype}")
    if arr.dtype.kind not in "biuf":
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(
                f"{name} must be numeric for regression, got dtype {arr.dtype}; use a classifier for labels"
            ) from None
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values; remove those rows before fitting")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"X has {n} rows but {name} has {arr.shape[0]}; they must match")
    return arr


#: a numeric target with whole values and at most this many distinct values is read as class labels
MAX_INFERRED_CLASSES = 20

TASKS = ("regression", "classification")


def infer_task(y, task: str = "auto") -> str:
    """The one task-inference rule, used by the model context, the estimators' helpers and the CLI.

    Parameters
    ----------
    y : array-like (n,)
    task : {"auto", "regression", "classification"}
        Anything but ``"auto"`` is checked and returned.

    Returns
    -------
    str
        ``"classification"`` for labels: strings, booleans, categories, objects,
        and numeric targets whose values are all whole numbers with at most
        :data:`MAX_INFERRED_CLASSES` distinct values; ``"regression"`` for every
        other numeric target (any non-integer value, or many distinct values).
        Pass ``task=`` explicitly to override (integer labels with more than
        20 classes, or a 0/1 target to be treated as a real response).
    """
    if task != "auto":
        if task not in TASKS:
            raise ValueError(f"task must be 'auto', 'regression' or 'classification', got {task!r}")
        return task
    if y is None:
        raise ValueError("y is None; pass a 1-d array of targets")
    dtype = getattr(y, "dtype", None)
    if dtype is not None and str(dtype) == "category":
        return "classification"
    arr = np.asarray(y)
    if arr.dtype.kind == "b":
        return "classification"
    if arr.dtype.kind not in "iuf":
        return "classification"
    vals = arr[np.isfinite(arr)] if arr.dtype.kind == "f" else arr
    if vals.size and np.all(vals == np.round(vals)) and np.unique(vals).size <= MAX_INFERRED_CLASSES:
        return "classification"
    return "regression"


def check_int(name: str, v, lo: int, hi: int | None = None, hint: str = "", *, whole_floats: bool = False) -> int:
    """``v`` as an int in ``[lo, hi]``, else ``ValueError`` naming ``name``.

    Parameters
    ----------
    name : str
        The setting's name, for the message.
    v : object
        The value; ``bool`` is refused.
    lo : int
        Smallest value allowed.
    hi : int, optional
        Largest value allowed (no upper bound by default).
    hint : str, default ""
        Appended to the message (e.g. why the bound is there).
    whole_floats : bool, default False
        Also accept floats with an integer value (``10.0``).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        "``name`` must be an integer >= lo" (or "in [lo, hi]"), with the value given.
    """
    ok = isinstance(v, (int, np.integer)) or (
        whole_floats and isinstance(v, (float, np.floating)) and math.isfinite(float(v)) and float(v).is_integer())
    if isinstance(v, bool) or not ok or int(v) < lo or (hi is not None and int(v) > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be an integer {rng}, got {v!r}{hint}")
    return int(v)


def check_finite(name: str, v) -> float:
    """``v`` as a finite float, else ``ValueError`` ("must be a number" / "must be finite") naming ``name``.

    Parameters
    ----------
    name : str
        The setting's name, for the message.
    v : object
        Anything ``float()`` takes; ``bool`` is refused.

    Returns
    -------
    float
    """
    try:
        if isinstance(v, bool):
            raise TypeError
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {v!r}") from None
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite, got {v!r}")
    return f


def check_positive(name: str, v) -> float:
    """``v`` as a float, for a finite number ``> 0`` (int or float, not ``bool``), else ``ValueError``.

    Parameters
    ----------
    name : str
        The setting's name, for the message.
    v : object
        The value.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        "``name`` must be a finite number" or "``name`` must be > 0", with the value given.
    """
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(float(v)):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    if float(v) <= 0:
        raise ValueError(f"{name} must be > 0, got {v!r}")
    return float(v)


def check_probability(name: str, v, lo: float = 0.0, hi: float = 1.0, hint: str = "") -> float:
    """``v`` as a float strictly between ``lo`` and ``hi`` (default: a probability in (0, 1)), else ``ValueError``.

    Parameters
    ----------
    name : str
        The setting's name, for the message.
    v : object
        Anything ``float()`` takes; ``bool`` is refused.
    lo, hi : float
        The open interval allowed.
    hint : str, default ""
        Appended to the message.

    Returns
    -------
    float
    """
    f = check_finite(name, v)
    if not lo < f < hi:
        raise ValueError(f"{name} must be in ({lo:g}, {hi:g}), got {v!r}{hint}")
    return f


def check_alpha(alpha, n_classes: int | None = None) -> np.ndarray:
    """Validate a Dirichlet concentration: one number > 0, or one per class.

    Parameters
    ----------
    alpha : float or array of shape (n_classes,)
        Every value finite and > 0.
    n_classes : int, optional
        With it, a scalar is repeated to ``(n_classes,)`` and a vector must have that length;
        without it, the validated values are returned as given (0-d or 1-d).

    Returns
    -------
    float64 array: ``(n_classes,)``, or the shape of ``alpha`` without ``n_classes``

    Raises
    ------
    ValueError
        For values <= 0 or not finite, more than one dimension, or a vector whose length is not
        ``n_classes``.
    """
    try:
        a = np.asarray(alpha, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be a number > 0 or one number > 0 per class, got {alpha!r}") from None
    if a.ndim > 1:
        raise ValueError(f"alpha must be a scalar or have one value per class, got shape {a.shape}")
    if a.size == 0 or not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"alpha must be > 0 (Dirichlet concentration), got {alpha!r}")
    if n_classes is None:
        return a
    if a.ndim == 0:
        return np.full(int(n_classes), float(a))
    if a.shape[0] != n_classes:
        raise ValueError(f"alpha must be a scalar or have one value per class ({n_classes}), got shape {a.shape}")
    return a


def check_max_bins(max_bins) -> int:
    """``max_bins`` as an int, or ValueError if it is not an integer of at least 2."""
    return check_int("max_bins", max_bins, 2)


def sampler_inputs(data: "TrainingData", family: str, dtype, rules=None):
    """Feature codes and response as the MCMC samplers (Bayesian CART, BET) take them.

    Parameters
    ----------
    data : TrainingData, without missing values unless ``rules`` codes them
    family : the family's name, for the error message
    dtype : floating dtype of a regression response
    rules : :class:`~bayestrees.inference.missing.MissingRules`, optional
        The coding of the features with missing values: the codes returned are its coded columns.

    Returns
    -------
    codes : int32 array (n, d), or (n, rules.d) with ``rules``
    y : (n,) regression response in ``dtype``, standardised (in float64) to mean 0 and standard
        deviation 1 (1 when it is constant), or int32 (n,) class codes
    shift, scale : the response is ``y * scale + shift`` (0 and 1 for classes)

    Raises
    ------
    ValueError if a code is missing (NaN in X) or the response is too large to standardise.
    """
    codes = np.asarray(data.codes)
    if rules is not None:
        codes = rules.code(codes)
    elif np.any(codes == missing_code(codes.dtype)):
        raise ValueError(f"{family} does not take missing values: impute or drop the rows with NaN first")
    if data.task != "regression":
        return codes.astype(np.int32), np.asarray(data.y, np.int32), 0.0, 1.0
    z, shift, scale = standardize_response(data.y, dtype)
    return codes.astype(np.int32), z, shift, scale


def standardize_response(y, dtype=np.float64, *, overflow_safe: bool = False) -> tuple[np.ndarray, float, float]:
    """Standardise a regression response: ``z = (y - loc) / scale``, the one way every family does it.

    The moments are taken in float64 and ``z`` is computed in float64, then cast to ``dtype``.

    Parameters
    ----------
    y : array-like (n,)
        The response (converted to float64).
    dtype : numpy dtype, default float64
        dtype of the returned ``z``.
    overflow_safe : bool, default False
        False: ``loc`` and ``scale`` are ``mean(y)`` and ``std(y)``; a constant (or
        non-finite) standard deviation gives ``scale = 1``.  True: ``y`` is divided by
        ``max |y|`` before the moments are taken, so responses near the float64 limit keep
        a finite variance, and a constant ``y`` gets ``scale = max |y|`` (1 when ``y == 0``).

    Returns
    -------
    z : ndarray (n,) of ``dtype``
        The standardised response.
    loc, scale : float
        ``y = z * scale + loc``; ``scale > 0``.

    Raises
    ------
    ValueError
        If ``overflow_safe`` is False and the mean of ``y`` is not finite in float64.
    """
    y = np.asarray(y, np.float64)
    if overflow_safe:
        big = float(np.max(np.abs(y))) if y.size else 0.0
        if not big > 0:
            loc, scale = 0.0, 1.0
        else:
            u = y / big
            loc = big * float(np.mean(u))
            scale = big * float(np.std(u))
            if not (np.isfinite(scale) and scale > 0):
                scale = big
    else:
        loc, scale = float(y.mean()), float(y.std())
        scale = scale if scale > 0 and np.isfinite(scale) else 1.0
        if not np.isfinite(loc):
            raise ValueError("y is too large to standardise in float64")
    return ((y - loc) / scale).astype(dtype), loc, scale


def check_new_rows(X, n_features: int, *, allow_nan: bool, owner: str = "the model") -> None:
    """The one rule for rows given after fitting (``predict`` and its siblings, in every family).

    The same validation as fitting (:func:`check_X`: not sparse, not empty, no infinities, NaN
    only where the model supports missing values) and the training width.

    Parameters
    ----------
    X : array-like or DataFrame (n, d)
    n_features : int
        The number of features the model was fitted on.
    allow_nan : bool
        Whether the model routes missing values (the family's ``missing_values``).
    owner : str
        Named in the error messages.

    Raises
    ------
    ValueError
        For NaN where the model does not support it, infinities, or a wrong width, saying what
        to do.
    """
    shape = getattr(X, "shape", None)
    if shape is None:
        shape = np.shape(np.asarray(X, dtype=object))
    if len(shape) == 2 and shape[1] != n_features:
        raise ValueError(f"X has {shape[1]} features, but {owner} is expecting {n_features} features as input.")
    try:
        check_X(X, allow_nan=allow_nan)
    except ValueError as err:
        if not allow_nan and "NaN" in str(err):
            raise ValueError(f"{err} ({owner} was fitted without missing values and cannot route them; "
                             "impute or drop those rows, or use a Bayesian forest, which routes them)") from None
        raise


def check_dtype(dtype) -> np.dtype:
    """Validate a floating-point ``dtype`` argument ("float32" or "float64").

    ``float64`` needs JAX's 64-bit mode; it is never switched on behind the
    user's back, so this raises a ``ValueError`` saying how to turn it on.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}") from None
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    if dt == np.float64:
        import jax

        if not jax.config.jax_enable_x64:
            raise ValueError(
                "dtype='float64' needs JAX's 64-bit mode: run jax.config.update('jax_enable_x64', True) "
                "at the start of the program, before any JAX array is made"
            )
    return dt


def check_y_classification(y, n: int | None = None, *, name: str = "y") -> tuple[np.ndarray, np.ndarray]:
    """Validate class labels; returns ``(codes int32, classes)``.

    Raises ``ValueError`` for missing labels, continuous float labels, a
    single class, or a length mismatch.
    """
    if y is None:
        raise ValueError(f"{name} is None; pass a 1-d array of class labels")
    arr = _column_or_1d(y, name)
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty; pass at least one label")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"X has {n} rows but {name} has {arr.shape[0]}; they must match")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} contains NaN or infinite labels")
        if not np.all(arr == np.round(arr)):
            raise ValueError(
                f"Unknown label type: {name} looks continuous (non-integer floats); "
                "use a regressor for real-valued targets"
            )
    if arr.dtype == object and any(_is_missing(v) for v in arr):
        raise ValueError(f"{name} contains missing labels")
    classes, codes = np.unique(arr, return_inverse=True)
    if classes.shape[0] < 2:
        raise ValueError(
            f"{name} has only one class ({classes[0]!r}); a classifier needs at least two classes"
        )
    return codes.astype(np.int32), classes


def ecdf_transform(x: np.ndarray, train_sorted: np.ndarray) -> np.ndarray:
    """Probability integral transform by the empirical CDF of ``train_sorted``.

    Returns ``F(x) = #{train <= x} / n`` in ``[0, 1]``; NaN stays NaN.
    """
    out = np.searchsorted(train_sorted, x, side="right") / max(len(train_sorted), 1)
    return np.where(np.isnan(x), np.nan, out)


@dataclass
class FeatureBins:
    """Binning of one feature.

    ``edges`` (numeric): thresholds, code = #edges < x.  ``categories``
    (categorical): the categories in code order.  ``values``: a
    representative value per code (bin midpoint or the distinct value).
    """

    name: str
    kind: str
    edges: np.ndarray | None = None
    categories: list | None = None
    exact: bool = True
    n_bins: int = 0
    has_missing: bool = False

    def threshold_label(self, t: int) -> str:
        """Human-readable right-hand side of the split ``code <= t``."""
        if self.kind == "numeric":
            if t >= len(self.edges):
                return "<= +inf"
            return f"<= {self.edges[t]:.6g}"
        left = self.categories[: t + 1]
        return "in {" + ", ".join(map(str, left)) + "}"

    def subset_label(self, mask: int) -> str:
        """Human-readable right-hand side of a subset split (the category codes in ``mask`` go left)."""
        names = [str(self.categories[c]) if self.categories and c < len(self.categories) else f"code {c}"
                 for c in mask_codes(mask)]
        return "in {" + ", ".join(names) + "}"

    def threshold_value(self, t: int) -> float:
        if self.kind == "numeric":
            return float(self.edges[t]) if t < len(self.edges) else float("inf")
        return float(t) + 0.5


@dataclass
class Binner:
    """Bins features to unsigned integer codes.

    Parameters
    ----------
    max_bins : int, default 255
        Largest number of bins per feature.  Features with at most this many
        distinct values are binned exactly.
    categorical : sequence of int, optional
        Column indices to treat as categorical (DataFrame columns of category,
        object or string dtype are categorical automatically).

    Attributes
    ----------
    features_ : list of FeatureBins
        One :class:`FeatureBins` per feature (set by :meth:`fit`, as are the others).
    dtype_ : numpy dtype
        The dtype of the codes (uint8 or uint16).
    n_features_in_ : int
        Number of features seen by :meth:`fit`.
    feature_names_in_ : list of str
        Their names.
    """

    max_bins: int = 255
    categorical: Sequence[int] | None = None
    features_: list = field(default_factory=list, repr=False)
    dtype_: Any = None
    n_features_in_: int = 0
    feature_names_in_: list = field(default_factory=list, repr=False)

    def fit(self, X, y=None, *, classification: bool = False) -> "Binner":
        """Learn bin edges (and category orders) from training ``X``.

        ``y`` (codes for classification, floats for regression) orders the
        categories of categorical features; without it they keep sorted order.
        """
        if not (2 <= int(self.max_bins) <= 65534):
            raise ValueError(f"max_bins must be between 2 and 65534, got {self.max_bins}")
        cols, kinds, names = check_X(X)
        cat = set(self.categorical or [])
        bad = [j for j in cat if not 0 <= j < len(cols)]
        if bad:
            raise ValueError(f"categorical indices {bad} out of range for {len(cols)} features")
        self.features_ = []
        for j, (col, kind, nm) in enumerate(zip(cols, kinds, names)):
            if j in cat:
                kind = "categorical"
            if kind == "numeric":
                self.features_.append(self._fit_numeric(col, nm))
            else:
                self.features_.append(self._fit_categorical(col, nm, y, classification))
        nb = max(f.n_bins for f in self.features_)
        self.dtype_ = np.dtype(np.uint8) if nb <= 255 else np.dtype(np.uint16)
        self.n_features_in_ = len(cols)
        self.feature_names_in_ = names
        return self

    def _fit_numeric(self, col: np.ndarray, name: str) -> FeatureBins:
        finite = col[~np.isnan(col)]
        has_missing = finite.shape[0] < col.shape[0]
        u = np.unique(finite)
        if u.shape[0] == 0:
            return FeatureBins(name, "numeric", edges=np.zeros(0), n_bins=1, has_missing=has_missing)
        if u.shape[0] <= self.max_bins:
            edges = (u[:-1] + u[1:]) / 2.0
            # midpoints that round onto the upper value (adjacent floats) keep the lower one
            edges = np.where(edges == u[1:], u[:-1], edges)
            return FeatureBins(name, "numeric", edges=edges, exact=True, n_bins=u.shape[0], has_missing=has_missing)
        qs = np.quantile(finite, np.linspace(0, 1, self.max_bins + 1)[1:-1], method="linear")
        idx = np.clip(np.searchsorted(u, qs, side="left"), 0, u.shape[0] - 2)
        idx = np.unique(idx)
        edges = (u[idx] + u[idx + 1]) / 2.0
        edges = np.unique(np.where(edges == u[idx + 1], u[idx], edges))
        return FeatureBins(name, "numeric", edges=edges, exact=False, n_bins=edges.shape[0] + 1, has_missing=has_missing)

    def _fit_categorical(self, col: np.ndarray, name: str, y, classification: bool) -> FeatureBins:
        present = np.array([not _is_missing(v) for v in col], dtype=bool)
        vals = col[present]
        cats = sorted(set(vals.tolist()), key=lambda v: (str(type(v)), v))
        if len(cats) > 65534:
            raise ValueError(f"categorical column {name!r} has {len(cats)} categories; at most 65534 are supported")
        if y is not None and len(cats) > 1:
            yy = np.asarray(y)[present]
            target = (yy == 0).astype(float) if classification else yy.astype(float)
            index = {c: i for i, c in enumerate(cats)}
            ci = np.array([index[v] for v in vals.tolist()])
            means = np.bincount(ci, weights=target, minlength=len(cats)) / np.maximum(
                np.bincount(ci, minlength=len(cats)), 1
            )
            order = np.argsort(means, kind="stable")
            cats = [cats[i] for i in order]
        return FeatureBins(
            name, "categorical", categories=cats, exact=True, n_bins=max(len(cats), 1),
            has_missing=bool((~present).any()),
        )

    def transform(self, X) -> np.ndarray:
        """Code ``X`` with the fitted bins; returns an ``(n, d)`` array of ``dtype_``."""
        if not self.features_:
            raise ValueError("this Binner is not fitted yet; call fit(X) first")
        cols, kinds, _ = check_X(X)
        if len(cols) != self.n_features_in_:
            raise ValueError(
                f"X has {len(cols)} features, but the model was fitted with {self.n_features_in_} features"
            )
        miss = missing_code(self.dtype_)
        out = np.empty((cols[0].shape[0], len(cols)), dtype=self.dtype_)
        for j, (col, fb) in enumerate(zip(cols, self.features_)):
            if fb.kind == "numeric":
                if col.dtype == object:
                    raise ValueError(f"column {fb.name!r} was numeric at fit time but holds non-numbers now")
                codes = np.searchsorted(fb.edges, col, side="left")
                codes = np.where(np.isnan(col), miss, codes)
            else:
                index = {c: i for i, c in enumerate(fb.categories)}
                codes = np.empty(col.shape[0], dtype=np.int64)
                unseen = set()
                for i, v in enumerate(col.tolist()):
                    if _is_missing(v):
                        codes[i] = miss
                    else:
                        k = index.get(v)
                        if k is None:
                            k = index.get(_coerce_like(v, fb.categories))
                        if k is None:
                            unseen.add(v)
                            codes[i] = miss
                        else:
                            codes[i] = k
                if unseen:
                    shown = sorted(map(str, unseen))[:5]
                    raise ValueError(
                        f"column {fb.name!r} has categories unseen at fit time: {shown}; "
                        "refit with them or map them to a known category"
                    )
            out[:, j] = codes
        return out

    def fit_transform(self, X, y=None, *, classification: bool = False) -> np.ndarray:
        return self.fit(X, y, classification=classification).transform(X)

    @property
    def n_bins_(self) -> np.ndarray:
        return np.array([f.n_bins for f in self.features_], dtype=np.int32)

    @property
    def has_missing_(self) -> bool:
        return any(f.has_missing for f in self.features_)

    def bin_values(self, j: int) -> np.ndarray:
        """A representative value for each code of numeric feature ``j``."""
        fb = self.features_[j]
        if fb.kind != "numeric":
            return np.arange(fb.n_bins, dtype=float)
        e = fb.edges
        if e.shape[0] == 0:
            return np.zeros(1)
        inner = (e[:-1] + e[1:]) / 2.0
        return np.concatenate([[e[0]], inner, [e[-1]]])


def mask_codes(mask: int) -> list:
    """The codes whose bits are set in a category mask (bit ``c`` for code ``c``), in order."""
    mask = int(mask)
    return [c for c in range(mask.bit_length()) if (mask >> c) & 1]


def _coerce_like(v, categories):
    """Match e.g. numpy scalars or numeric strings to fitted categories."""
    if not categories:
        return v
    proto = categories[0]
    try:
        return type(proto)(v)
    except (TypeError, ValueError):
        return v


def bucket_size(n: int, coarse: bool = False) -> int:
    """Padded length for ``n`` rows, so that one compilation serves many data sizes.

    Up to 8,192 rows (at every size with ``coarse=True``): the next of 64, 91, 129, 183, 259, ...
    (64 times powers of sqrt 2, at most 41% padding, two sizes per doubling), where compilation
    dominates the cost.  Above: the next multiple of 1/32 of the power of two below ``n`` (at most
    3.2% padding, 32 sizes per doubling), because a padded row costs as much to carry through a
    tree fit as a real one.  ``coarse`` is for many fits of different sizes in one process (the
    branches of a distributed forest), where 32 compilations per doubling cost more than the
    padding.
    """
    n = int(n)
    b = 64
    while b < n and (coarse or b < 8192):
        b = int(np.ceil(b * np.sqrt(2.0)))
    if b >= n:
        return b
    step = 1 << (int(n - 1).bit_length() - 1 - 5)
    return -(-n // step) * step


def pad_rows(a, size: int, value=0) -> np.ndarray:
    """Pad the leading axis of ``a`` to ``size`` rows of ``value`` (numpy)."""
    a = np.asarray(a)
    if a.shape[0] >= size:
        return a
    pad = np.full((size - a.shape[0],) + a.shape[1:], value, dtype=a.dtype)
    return np.concatenate([a, pad], axis=0)


@dataclass(frozen=True)
class TrainingData:
    """Validated, binned training data: what every ``fit_<family>`` function takes.

    Attributes
    ----------
    codes : uint (n, d)  feature codes (:class:`Binner`)
    y : float64 (n,) responses (regression) or int32 (n,) class codes in ``[0, C)``
    task : "regression" or "classification"
    binner : the fitted :class:`Binner` (codes new rows the same way)
    classes : (C,) labels (classification) or None
    y_observed : (n,) the response for ``observed_data`` (:func:`observed_response`: float64 values,
        or the class labels with object labels as strings)
    """

    codes: np.ndarray
    y: np.ndarray
    task: str
    binner: "Binner"
    classes: np.ndarray | None
    y_observed: np.ndarray

    @property
    def n(self) -> int:
        return int(self.codes.shape[0])

    @property
    def d(self) -> int:
        return int(self.codes.shape[1])

    @property
    def n_classes(self) -> int:
        return 0 if self.classes is None else int(len(self.classes))

    @property
    def feature_names(self) -> list:
        return [str(f) for f in self.binner.feature_names_in_]

    @property
    def n_bins(self) -> np.ndarray:
        return self.binner.n_bins_


def prepare_data(X, y, *, task: str = "auto", max_bins: int = 255, categorical=None,
                 order_categories_by_response: bool = True, allow_nan: bool = True) -> TrainingData:
    """Validate ``(X, y)``, infer the task (:func:`infer_task`) and bin ``X``.

    Parameters
    ----------
    X : array-like (n, d) or DataFrame
    y : array-like (n,)
    task : "auto", "regression" or "classification"
    max_bins : bins per feature (exact binning when a feature has at most this many values)
    categorical : indices of categorical columns of an array ``X``
    order_categories_by_response : order categories by the response (Breiman); False keeps
        their sorted order (a prior that must not look at the response)
    allow_nan : accept missing values (their own code) or raise ``ValueError``

    Returns
    -------
    TrainingData
    """
    cols, _, _ = check_X(X, allow_nan=allow_nan)
    n = int(cols[0].shape[0])
    task = infer_task(y, task)
    if task == "regression":
        yy, classes = check_y_regression(y, n), None
    else:
        yy, classes = check_y_classification(y, n)
    binner = Binner(max_bins=max_bins, categorical=categorical)
    binner.fit(X, yy if order_categories_by_response else None, classification=task == "classification")
    return TrainingData(binner.transform(X), yy, task, binner, classes, observed_response(yy, task, classes))


def observed_response(y, task: str, classes=None) -> np.ndarray:
    """The response as every family's ``observed_data`` stores it (:attr:`TrainingData.y_observed`).

    Parameters
    ----------
    y : (n,)
        The checked response: values (regression) or int class codes (classification).
    task : {"regression", "classification"}
    classes : (C,) labels, for classification

    Returns
    -------
    ndarray (n,)
        float64 values, or the class labels (object labels as strings, so that the
        InferenceData can be written to netCDF).
    """
    if task == "regression":
        return np.asarray(y, np.float64)
    labels = np.asarray(classes)[np.asarray(y)]
    return labels.astype(str) if labels.dtype == object else labels
