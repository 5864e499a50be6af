"""Tree ensembles as random functions inside NumPyro models: the site and its distribution.

``f = bart_function("f", X, m=50)`` inside a NumPyro model declares ``m`` trees over the rows of ``X`` and
returns the sum of trees at those rows, shape ``(n,)`` (``(n, k)`` with ``outputs=k``: one ensemble
per output).  It records two sites:

* ``"f_trees"``, a ``sample`` site of :class:`TreeEnsemble`: the trees, one float32 array
  ``(m, S, 3)`` (``(k, m, S, 3)`` with ``outputs=k``; ``S = 2^(max_depth + 1) - 1`` heap slots; per slot the split variable, ``-1``
  where the slot is not internal, the split threshold as a real value, ``x <= threshold`` goes
  left, and the leaf value, 0 where the slot is not a leaf);
* ``"f"``, a ``deterministic`` site: the function at the rows of ``X``.

The thresholds are real values, so the same trees evaluate at any new ``X``: under
``numpyro.infer.Predictive`` with posterior draws of ``"f_trees"`` the model's ``"f"`` is the
function at the new rows.

The prior (:class:`TreeEnsemble`)
---------------------------------
Every tree independently from a :mod:`bayestrees.priors` depth prior (default ``ChipmanPrior(0.95,
2)``: a node at depth ``d`` splits with probability ``0.95 (1 + d)^-2``) with the interval rule
prior of :mod:`bayestrees.inference.intervals` over the cut points of ``X`` (the split variable
uniform among those with a cut point left in the node's interval, the threshold uniform among
those cut points; the prior of the BART family, BayesTree, the R package BART and bartz),
truncated at ``max_depth`` and to trees whose nodes all hold ``min_leaf_rows`` rows of ``X``;
every leaf value ``N(0, leaf_sd^2)`` (with ``leaf_prior="loggamma"``, the log of a Gamma variable,
of mean 0 and sd ``leaf_sd``: :mod:`~bayestrees.inference.treefn.leaf_priors`).  The cut points
are the midpoints between the sorted distinct values of each column of ``X`` (at most ``max_bins``
bins a column, by quantiles beyond: :class:`bayestrees.data.Binner`), in float32, so that the
codes the sampler works on and the comparisons ``x <= threshold`` of the site agree row by row.

Missing values
--------------
``X`` may hold NaN.  As in the BART family (:mod:`bayestrees.inference.missing`), each rule on a
feature with missing training values also says where a missing value goes (missingness
incorporated in attributes): the function then has two columns per feature, ``j`` (a missing
value goes right) and ``d + j`` (it goes left), and a site value's split variable is one of them.
The cut table has ``2 d`` rows (:func:`missing_cut_table`): column ``j`` has one more cut, above
every value (every value left, the missing ones right), column ``d + j`` one below every value
(the missing values alone left); a feature without missing training values has no cut in column
``d + j``, so it is never chosen and a new row's missing value there goes right.  The rule prior
gives each of a feature's two columns half its weight (:func:`split_log_weights_of`).  Functions
without missing values keep ``d`` columns.

Unordered categorical features
------------------------------
The columns named in ``categorical_features`` hold category codes: integers ``0 .. 22`` (NaN for a
missing value, which is one more category, code :data:`MISSING_CATEGORY`).  They split by subsets
of their categories, as in the BART family (:mod:`bayestrees.inference.intervals`): a rule sends the
categories of its mask left, the rest right, and its prior is uniform among the ``2^|A| - 2``
nonempty proper subsets of the categories ``A`` that reach the node (the root's: those of the
training rows, at most :data:`~bayestrees.inference.proposals.MAX_SUBSET_CATEGORIES`).  A site
value's threshold at such a rule is the mask as a float32 integer (bit ``c`` for code ``c``: exact up
to bit 23); a new row's category outside the mask, or unseen in training, goes right.

``leaf_sd`` defaults to ``3 / (k sqrt(m))`` with ``k = 2``: the sum of the ``m`` trees then has
prior sd ``1.5`` on the scale the function enters the model (a log rate, a logit, a mean), 95%
within ``+-3``, the choice of Chipman, George & McCulloch (2010, section 4) for the probit scale.
Set it to the scale of the function in your model (for a Normal mean, about ``0.5 * (y_max -
y_min) / (k sqrt(m))`` as the BART family does).
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import math
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro.distributions import Distribution, constraints

from ...data import Binner, check_int, check_positive
from ...priors import ChipmanPrior, DepthDecayPrior, traced_params
from .. import heap, intervals, proposals
from . import leaf_priors

__all__ = ["bart_function", "tree_function", "TreeEnsemble", "TreeSpec", "cut_table", "encode", "evaluate", "trees_site_name",
           "stump_initialisation", "TreeValues", "rows_key", "function_values",
           "PACKED_FIELDS", "FeatureTable", "feature_arguments", "missing_cut_table", "split_log_weights_of",
           "MISSING_CATEGORY", "check_categorical", "check_category_codes"]

#: the last axis of a tree site's value: split variable, threshold, leaf value
PACKED_FIELDS = ("feature", "threshold", "value")


#: the code of a categorical feature's missing value, one more category (module docstring, "Unordered
#: categorical features"); the category codes are ``0 .. MISSING_CATEGORY - 1``
MISSING_CATEGORY = 23

#: set while a sampler traces a model to set itself up (:func:`stump_initialisation`)
_STUMPS: contextvars.ContextVar = contextvars.ContextVar("bayestrees_treefn_stumps", default=False)


@contextlib.contextmanager
def stump_initialisation():
    """Within this block :meth:`TreeEnsemble.sample` gives trees of one leaf of value 0 instead of
    prior draws.

    NumPyro traces a model several times to set up sampling (its sites, shapes and a starting
    point), drawing every latent site once each time.  The tree moves start every tree at one
    leaf of value 0 whatever the trace drew (as the BART family's chains do), so those draws are
    thrown away; this block skips them, and with them a compilation of the rejection sampler per
    shape and batching.  :func:`~bayestrees.inference.treefn.fit.sample_model` sets it up around
    NumPyro's set-up; prior draws (``numpyro.infer.Predictive`` without posterior samples,
    :meth:`TreeEnsemble.sample` anywhere else) are unchanged.
    """
    token = _STUMPS.set(True)
    try:
        yield
    finally:
        _STUMPS.reset(token)


class FeatureTable(NamedTuple):
    """What a tree function's sampler needs of its features: the cut table ``(d, K)``, the rows'
    codes ``(n, d)``, each feature's code range ``[code_lo, code_hi]`` ``(d,)``, ``rows``, the
    fingerprint that :class:`TreeValues` carries (a Python string), and ``categories``, the root's
    category mask of every column split by subsets (int32 ``(d,)``, 0 for an ordered one; None
    without categorical features).  Computed from concrete features when the site is built; the
    first four handed in as arrays (traced arguments of a compiled program) by
    :func:`feature_arguments`, ``categories`` as a constant."""

    cuts: Any
    codes: Any
    code_lo: Any
    code_hi: Any
    rows: str
    categories: Any = None


#: set by :func:`feature_arguments`: function name -> its FeatureTable
_FEATURE_TABLES: contextvars.ContextVar = contextvars.ContextVar("bayestrees_treefn_feature_tables", default=None)


@contextlib.contextmanager
def feature_arguments(tables: dict):
    """Within this block the tree function ``name`` takes its cut table and codes from
    ``tables[name]`` (a :class:`FeatureTable`) instead of computing them from its ``X``, which may
    then be a traced value.

    :func:`~bayestrees.inference.treefn.fit.sample_model` (``jit_data=True``) computes every
    function's table once from the concrete features and passes the features and tables as
    arguments of the compiled programs, so that another data set of the same shapes (new rows,
    new features) runs the same programs instead of compiling new ones.
    """
    token = _FEATURE_TABLES.set(dict(tables))
    try:
        yield
    finally:
        _FEATURE_TABLES.reset(token)


#: set by :func:`given_values`: the names of the tree functions whose values at the training rows the
#: caller substitutes (as the deterministic sites of those names)
_GIVEN_VALUES: contextvars.ContextVar = contextvars.ContextVar("bayestrees_treefn_given_values", default=frozenset())


@contextlib.contextmanager
def given_values(names):
    """Within this block the tree functions ``names`` do not route their rows through their trees:
    their values are NaN unless the caller substitutes the deterministic sites of those names
    (``numpyro.handlers.substitute``), as :func:`~bayestrees.inference.treefn.fit.sample_model`
    does to score the observed sites at every kept draw with the function values its chains kept."""
    token = _GIVEN_VALUES.set(frozenset(names))
    try:
        yield
    finally:
        _GIVEN_VALUES.reset(token)


def trees_site_name(name: str) -> str:
    """The ``sample`` site that holds the trees of the function ``name``."""
    return f"{name}_trees"


def _concrete_X(X, name: str) -> np.ndarray:
    try:
        A = np.asarray(X)
    except (TypeError, jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError) as e:
        raise ValueError(f"the tree function {name!r} needs concrete features X (a NumPy or JAX array known "
                         f"when the model runs), not a traced value; pass X as a model argument") from e
    if A.ndim != 2:
        raise ValueError(f"the tree function {name!r} takes X of shape (n, d), got shape {A.shape}")
    if A.shape[0] == 0 or A.shape[1] == 0:
        raise ValueError(f"the tree function {name!r} needs at least one row and one feature, got shape {A.shape}")
    if not np.issubdtype(A.dtype, np.number) or np.issubdtype(A.dtype, np.complexfloating):
        raise ValueError(f"the tree function {name!r} takes real-valued features, got dtype {A.dtype}")
    A = A.astype(np.float32)
    if np.any(np.isinf(A)):
        raise ValueError(f"the tree function {name!r} was given infinite features (inf in X, row "
                         f"{int(np.argwhere(np.isinf(A))[0][0])}); a tree function takes finite values and NaN for a "
                         f"missing value")
    return A


def check_categorical(categorical_features, d: int, who: str = "categorical_features") -> tuple:
    """The sorted column indices of ``categorical_features`` (indices in ``[-d, d)`` or a boolean mask
    of length ``d``; None: none); ``who`` opens the errors' messages."""
    if categorical_features is None:
        return ()
    a = np.asarray(categorical_features)
    if a.dtype == bool:
        if a.shape != (d,):
            raise ValueError(f"{who}: a boolean categorical_features must have one entry per "
                             f"feature ({d}), got shape {a.shape}")
        return tuple(int(j) for j in np.flatnonzero(a))
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{who}: categorical_features must be column indices or a boolean mask, "
                         f"got {categorical_features!r}")
    bad = [int(j) for j in a if not -d <= int(j) < d]
    if bad:
        raise ValueError(f"{who}: categorical_features {bad} out of range for {d} features")
    return tuple(sorted({int(j) % d for j in a}))


def check_category_codes(X: np.ndarray, categorical: tuple, who: str = "X") -> None:
    """The categorical columns hold category codes ``0 .. MISSING_CATEGORY - 1`` or NaN, with at most
    ``MAX_SUBSET_CATEGORIES`` categories (a missing value counting as one); ``who`` opens the errors'
    messages."""
    for j in categorical:
        x = X[:, j]
        v = x[~np.isnan(x)]
        if np.any((v < 0) | (v >= MISSING_CATEGORY) | (v != np.floor(v))):
            bad = v[(v < 0) | (v >= MISSING_CATEGORY) | (v != np.floor(v))][0]
            raise ValueError(f"{who}: categorical feature {j} holds {bad!r}; its values must be "
                             f"category codes 0..{MISSING_CATEGORY - 1} and NaN for a missing value (for pandas "
                             f"categories: .cat.codes with -1 replaced by NaN)")
        k = len(np.unique(v)) + int(np.isnan(x).any())
        if k > proposals.MAX_SUBSET_CATEGORIES:
            raise ValueError(f"{who}: categorical feature {j} has {k} categories (a missing value "
                             f"counting as one), more than the {proposals.MAX_SUBSET_CATEGORIES} that split by subsets; "
                             f"group rare categories, or pass it as an ordered feature")


def cut_table(X, max_bins: int = 100) -> np.ndarray:
    """float32 ``(d, K)`` cut points of every column of ``X`` (sorted, distinct, padded with +inf).

    The midpoints between consecutive distinct values (quantile-chosen ones beyond ``max_bins``
    bins: :class:`bayestrees.data.Binner`), rounded to float32 and made distinct again.
    """
    X = np.asarray(X, np.float32)
    b = Binner(max_bins=int(max_bins)).fit(X.astype(np.float64))
    cols = [np.unique(np.asarray(fb.edges, np.float64).astype(np.float32)) for fb in b.features_]
    K = max(1, max(c.shape[0] for c in cols))
    E = np.full((X.shape[1], K), np.inf, np.float32)
    for j, c in enumerate(cols):
        E[j, : c.shape[0]] = c
    return E


#: the cut below every value of a feature's missing-left column, and above every value of its
#: missing-right column (module docstring, "Missing values")
_BELOW, _ABOVE = np.float32(-np.finfo(np.float32).max), np.float32(np.finfo(np.float32).max)


def missing_cut_table(E, missing) -> np.ndarray:
    """The ``(2 d, K + 1)`` cut table of a function whose features ``missing`` ``(d,)`` hold missing
    training values, from the values' table ``E`` ``(d, K)`` (module docstring, "Missing values"): row
    ``j`` the missing-right column of feature ``j`` (its cuts, then one above every value where the
    feature has missing values), row ``d + j`` its missing-left column (one cut below every value,
    then its cuts; no cut where the feature has no missing value)."""
    E = np.asarray(E, np.float32)
    d, K = E.shape
    missing = np.asarray(missing, bool)
    out = np.full((2 * d, K + 1), np.inf, np.float32)
    for j in range(d):
        c = E[j][np.isfinite(E[j])]
        out[j, : c.shape[0]] = c
        if missing[j]:
            out[j, c.shape[0]] = _ABOVE
            out[d + j, 0] = _BELOW
            out[d + j, 1: c.shape[0] + 1] = c
    return out


def split_log_weights_of(code_hi, d: int):
    """The split-variable log probabilities of a missing-value table's ``2 d`` columns (module docstring,
    "Missing values"): ``1 / (2 d)`` for each of a feature's two columns where it has missing values,
    ``1 / d`` for a feature without (its missing-left column has no cut, so it is never chosen).
    ``code_hi`` may be traced."""
    has = jnp.asarray(code_hi)[d:] > 0
    half = jnp.where(has, -math.log(2.0 * d), -math.log(float(d)))
    return jnp.concatenate([half, half]).astype(jnp.float32)


def encode(X, E, categorical=()) -> np.ndarray:
    """Codes ``(n, d)`` of ``X`` under the cut table ``E``: the number of cut points below ``x``
    (code ``<= t`` exactly when ``x <= E[j, t]`` in float32); ``(n, 2 d)`` under a missing-value
    table (:func:`missing_cut_table`), a missing value coded above every cut of column ``j`` and
    below every cut of column ``d + j``.  A column in ``categorical`` keeps its category codes (a
    missing value :data:`MISSING_CATEGORY`)."""
    X = np.asarray(X, np.float32)
    E = np.asarray(E, np.float32)
    d = X.shape[1]
    if E.shape[0] == 2 * d:   # a missing-value table: a missing value above every cut, then below
        X = np.concatenate([X, np.where(np.isnan(X), -np.inf, X)], 1)
    codes = np.stack([np.searchsorted(E[j][np.isfinite(E[j])], X[:, j], side="left") for j in range(X.shape[1])], 1)
    for j in categorical:
        codes[:, j] = np.where(np.isnan(X[:, j]), MISSING_CATEGORY, np.nan_to_num(X[:, j])).astype(np.int64)
    dt = np.uint8 if codes.max(initial=0) < 255 else np.uint16
    return codes.astype(dt)


def rows_key(X) -> str:
    """A fingerprint of a feature matrix (its shape and bytes as float32)."""
    A = np.ascontiguousarray(np.asarray(X, np.float32))
    return f"{A.shape}:{hashlib.blake2b(A.tobytes(), digest_size=16).hexdigest()}"


@partial(jax.tree_util.register_dataclass, data_fields=["trees", "at_rows", "log_density"], meta_fields=["rows"])
@dataclass(frozen=True)
class TreeValues:
    """A tree site's value as the tree moves hand it to the model's other blocks.

    ``trees`` is the site's value ``(m, S, 3)``; ``at_rows`` the function at the rows of the
    training ``X`` (whose :func:`rows_key` is ``rows``), which the tree moves keep up to date as
    they move the trees; ``log_density`` the trees' log prior density
    (:meth:`TreeEnsemble.log_prob`).  Inside NUTS the trees are held fixed, so with this value
    neither the rows are routed through the trees nor the trees scored at every leapfrog step:
    :func:`bart_function` returns ``at_rows`` when it is called on the same ``X`` (any other
    ``X`` is routed through ``trees``).  Every other use sees the plain array ``trees``
    (:func:`~bayestrees.inference.treefn.fit.sample_model` keeps only it).
    """

    trees: Any
    at_rows: Any
    log_density: Any
    rows: str


class TreeSpec(NamedTuple):
    """The static description of one tree function (hashable fields are Python values);
    ``outputs`` is 0 for a function of one output (values ``(n,)``), else ``k`` (values ``(n, k)``);
    ``categorical`` the indices of the features split by subsets of their categories."""

    m: int
    max_depth: int
    prior: Any
    leaf_sd: float
    min_leaf_rows: int
    outputs: int = 0
    leaf_prior: str = "normal"
    categorical: tuple = ()


def _check_prior(prior):
    if prior is None:
        return ChipmanPrior(0.95, 2.0)
    if not isinstance(prior, (ChipmanPrior, DepthDecayPrior)):
        raise ValueError(f"prior must be a bt.priors depth prior (ChipmanPrior or DepthDecayPrior), got {prior!r}")
    return prior.check()


def function_values(trees, X, outputs: int = 0, categorical=()):
    """A tree function's values at the rows of ``X`` from its site's value: ``(..., m, S, 3)`` ->
    ``(..., n)``, or with ``outputs = k``, ``(..., k, m, S, 3)`` -> ``(..., n, k)`` (``categorical``:
    the features split by subsets, :func:`evaluate`)."""
    f = evaluate(trees, X, categorical)
    return jnp.swapaxes(f, -1, -2) if outputs else f


def evaluate(trees, X, categorical=()):
    """The sum of trees at the rows of ``X``: ``trees`` ``(..., m, S, 3)`` (a tree site's value),
    ``X`` ``(n, d)`` -> ``(..., n)``; the features in ``categorical`` are routed by their rules'
    category masks (module docstring).  Compiled once per shape (called eagerly by the model's
    traces and predictions, with ``X`` an argument rather than a constant of the program)."""
    return _evaluate(jnp.asarray(trees), jnp.asarray(X, jnp.float32), tuple(int(j) for j in categorical))


@partial(jax.jit, static_argnames=("categorical",))
def _evaluate(trees, X, categorical=()):
    S = trees.shape[-2]
    D = S.bit_length() - 1
    d = X.shape[1]
    is_cat = jnp.zeros(d, bool).at[jnp.asarray(categorical, jnp.int32)].set(True) if categorical else None

    def one(tr):  # (S, 3) -> (n,)
        f = tr[:, 0].astype(jnp.int32)
        t, v = tr[:, 1], tr[:, 2]
        node = jnp.zeros(X.shape[0], jnp.int32)
        for _ in range(D):
            fj = f[node]
            # column d + j: feature j with its missing values sent left (module docstring, "Missing values")
            x = jnp.take_along_axis(X, jnp.where(fj >= d, fj - d, jnp.maximum(fj, 0))[:, None], 1)[:, 0]
            right = jnp.where(jnp.isnan(x), fj < d, x > t[node])
            if is_cat is not None:   # a category in the rule's mask goes left; an unknown code right
                code = jnp.where(jnp.isnan(x), float(MISSING_CATEGORY), x)
                known = (code >= 0) & (code <= MISSING_CATEGORY) & (code == jnp.floor(code))
                bit = (t[node].astype(jnp.int32) >> jnp.where(known, code, 0).astype(jnp.int32)) & 1
                right = jnp.where((fj < d) & is_cat[jnp.clip(fj, 0, d - 1)], ~known | (bit == 0), right)
            node = jnp.where(fj >= 0, 2 * node + 1 + right.astype(jnp.int32), node)
        return v[node]

    lead = trees.shape[:-3]
    flat = trees.reshape((-1,) + trees.shape[-3:])

    def ensemble(tr):  # (m, S, 3)
        return jax.lax.scan(lambda acc, t1: (acc + one(t1), None), jnp.zeros(X.shape[0], trees.dtype), tr)[0]

    out = jax.lax.map(ensemble, flat) if flat.shape[0] > 1 else ensemble(flat[0])[None]
    return out.reshape(lead + (X.shape[0],))


class TreeEnsemble(Distribution):
    """The prior of ``m`` trees (module docstring) over the rows of a feature matrix.

    Parameters
    ----------
    X : (n, d) the training features (their cut points define the split rules; the rows count
        towards ``min_leaf_rows``)
    spec : TreeSpec
    cuts : float32 (d, K), optional  the cut table (default :func:`cut_table` of ``X``)

    The value is float32 ``(m, S, 3)`` (module docstring), or ``(k, m, S, 3)`` for a function of
    ``k = spec.outputs`` outputs (``k`` independent ensembles, one per output).  ``log_prob`` is the log density of
    the trees (tree prior times Normal leaf values; ``-inf`` for a threshold that is not a cut
    point).  It does not route the rows, so it does not check ``min_leaf_rows``; the samplers of
    this package never leave that truncation and ``sample`` draws from it (by rejection per tree).
    """

    arg_constraints: dict = {}
    support = constraints.real
    pytree_data_fields = ()
    pytree_aux_fields = ("spec", "X", "cuts", "codes", "code_lo", "code_hi", "rows", "categories")

    def __init__(self, X, spec: TreeSpec, cuts=None, *, table: FeatureTable | None = None, validate_args=None):
        self.spec = spec
        if table is not None:   # the features and their table as given (traced arguments: feature_arguments)
            self.X = jnp.asarray(X, jnp.float32)
            self.cuts, self.codes, self.code_lo, self.code_hi, self.rows, self.categories = table
        else:
            self.X = np.asarray(X, np.float32)
            d = self.X.shape[1]
            cat = np.zeros(d, bool)
            cat[list(spec.categorical)] = True
            self.cuts = cut_table(self.X) if cuts is None else np.array(cuts, np.float32)
            missing = np.isnan(self.X).any(0) & ~cat   # a categorical feature's missing value is a category
            if missing.any() and self.cuts.shape[0] == d:   # two columns a feature
                self.cuts = missing_cut_table(self.cuts, missing)
            self.cuts[np.flatnonzero(cat)] = np.inf          # (a categorical feature's rules are masks)
            self.codes = encode(self.X, self.cuts, spec.categorical)
            n_cuts = np.sum(np.isfinite(self.cuts), 1)
            self.code_lo = np.zeros(self.cuts.shape[0], np.int32)
            self.code_hi = n_cuts.astype(np.int32)          # codes 0..n_cuts: cut points 0..n_cuts-1
            self.categories = None
            if cat.any():   # the root's categories; in the (lo, hi) layout (0, |A| - 1)
                subsets = np.zeros(self.cuts.shape[0], bool)
                subsets[:d] = cat
                self.categories = intervals.root_categories(self.codes, subsets)
                self.code_lo, self.code_hi = intervals.root_code_range(self.code_lo, self.code_hi, self.categories)
            self.rows = rows_key(self.X)
        S = 2 ** (spec.max_depth + 1) - 1
        super().__init__(batch_shape=(), event_shape=self._lead + (spec.m, S, 3), validate_args=validate_args)

    @property
    def missing(self) -> bool:
        """Whether the features hold missing values: two columns a feature (module docstring,
        "Missing values")."""
        return jnp.shape(self.cuts)[0] == 2 * jnp.shape(self.X)[1]

    @property
    def split_log_w(self):
        """The split-variable log probabilities of the columns (:func:`split_log_weights_of`), or None
        without missing values (uniform among the available columns)."""
        return split_log_weights_of(self.code_hi, jnp.shape(self.X)[1]) if self.missing else None

    @property
    def _lead(self) -> tuple:
        return (self.spec.outputs,) if self.spec.outputs else ()

    @property
    def capacity(self) -> int:
        return 2 ** (self.spec.max_depth + 1) - 1

    # -- codes <-> reals -------------------------------------------------------------------------
    def _categorical_at(self, feature):
        """Whether each split variable is split by subsets (False everywhere without categorical features)."""
        if self.categories is None:
            return jnp.zeros(jnp.shape(feature), bool)
        return (feature >= 0) & (jnp.asarray(self.categories)[jnp.maximum(feature, 0)] != 0)

    def thresholds(self, feature, code):
        """Real thresholds of integer split codes (0 where not internal; a category mask as it is)."""
        E = jnp.asarray(self.cuts)
        real = E[jnp.maximum(feature, 0), jnp.clip(code, 0, E.shape[1] - 1)]
        real = jnp.where(self._categorical_at(feature), code.astype(E.dtype), real)
        return jnp.where(feature >= 0, real, 0.0)

    def codes_of(self, feature, threshold):
        """Integer split codes of real thresholds, and whether each is a cut point (or a category mask)."""
        E = jnp.asarray(self.cuts)
        row = E[jnp.maximum(feature, 0)]                                           # (..., K)
        code = jnp.sum(row < threshold[..., None], -1).astype(jnp.int32)
        hit = jnp.take_along_axis(row, jnp.minimum(code, E.shape[1] - 1)[..., None], -1)[..., 0] == threshold
        cat = self._categorical_at(feature)
        mask = jnp.clip(threshold, 0, 2.0 ** (MISSING_CATEGORY + 1)).astype(jnp.int32)
        code = jnp.where(cat, mask, code)
        hit = jnp.where(cat, mask.astype(threshold.dtype) == threshold, hit)
        return jnp.where(feature >= 0, code, 0), hit | (feature < 0)

    def table(self, rows: str | None = None) -> FeatureTable:
        """The features' :class:`FeatureTable` (with ``rows`` in place of its fingerprint if given)."""
        return FeatureTable(self.cuts, self.codes, self.code_lo, self.code_hi, self.rows if rows is None else rows,
                            self.categories)

    def pack(self, feature, code, value):
        """A site value ``(..., m, S, 3)`` from integer split variables and codes and leaf values."""
        return jnp.stack([feature.astype(jnp.float32), self.thresholds(feature, code).astype(jnp.float32),
                          value.astype(jnp.float32)], -1)

    # -- the distribution ------------------------------------------------------------------------
    def log_prob(self, value):
        if isinstance(value, TreeValues):   # scored by the tree moves when they moved the trees
            return value.log_density
        value = jnp.asarray(value)
        feature = value[..., 0].astype(jnp.int32)
        code, hit = self.codes_of(feature, value[..., 1])
        spec = self.spec
        prior = traced_params(spec.prior, jnp.float32)
        lo, hi = jnp.asarray(self.code_lo), jnp.asarray(self.code_hi)

        log_w = self.split_log_w

        cats = None if self.categories is None else jnp.asarray(self.categories, jnp.int32)

        def one(f, t):
            if log_w is None:
                lp, _, _, leaf, ok = intervals.log_tree_prior(f, t, lo, hi, prior, spec.max_depth, categories=cats)
            else:
                lp, _, _, leaf, ok, _ = intervals.log_tree_prior_weighted(f, t, lo, hi, prior, spec.max_depth, log_w,
                                                                          categories=cats)
            return lp, leaf, ok

        lead = feature.shape[:-1]
        f2, t2 = feature.reshape((-1, feature.shape[-1])), code.reshape((-1, code.shape[-1]))
        lp, leaf, ok = jax.vmap(one)(f2, t2)
        lp, leaf, ok = lp.reshape(lead), leaf.reshape(lead + (feature.shape[-1],)), ok.reshape(lead)
        v = value[..., 2]
        lv = jnp.sum(jnp.where(leaf, leaf_priors.log_density(spec.leaf_prior, v, spec.leaf_sd), 0.0), -1)
        good = ok & jnp.all(hit, -1)
        axes = (-2, -1) if self.spec.outputs else -1
        return jnp.sum(jnp.where(good, lp + lv, -jnp.inf), axes)

    def sample(self, key, sample_shape=()):
        S = self.capacity
        if _STUMPS.get():   # set-up traces (stump_initialisation): the samplers' starting point
            zeros = jnp.zeros(tuple(sample_shape) + self._lead + (self.spec.m, S), jnp.int32)
            return self.pack(zeros - 1, zeros, zeros.astype(jnp.float32))
        n_draws = int(np.prod(sample_shape)) if sample_shape else 1
        keys = jax.random.split(key, n_draws * max(self.spec.outputs, 1) * self.spec.m)
        spec = self.spec
        f, t, v = _draw_trees(keys, jnp.asarray(self.codes).astype(jnp.int32), jnp.asarray(self.code_lo),
                              jnp.asarray(self.code_hi), traced_params(spec.prior, jnp.float32),
                              max_depth=int(spec.max_depth), min_rows=int(spec.min_leaf_rows), leaf_sd=float(spec.leaf_sd),
                              leaf_prior=spec.leaf_prior, log_w=self.split_log_w,
                              categories=None if self.categories is None else jnp.asarray(self.categories, jnp.int32))
        return self.pack(f, t, v).reshape(tuple(sample_shape) + self._lead + (self.spec.m, S, 3))


@partial(jax.jit, static_argnames=("max_depth", "min_rows", "leaf_sd", "leaf_prior"))
def _draw_trees(keys, codes, lo0, hi0, prior, *, max_depth: int, min_rows: int, leaf_sd: float, leaf_prior: str = "normal",
                log_w=None, categories=None):
    """Trees from the prior, one per key, each truncated to ``min_rows`` rows per node by rejection
    (codes ``(n, d)`` of the rows; ``log_w`` the columns' split-variable log probabilities, None:
    uniform; ``categories`` the root's category masks of the columns split by subsets, None: none;
    compiled once per shape and setting)."""
    return jax.vmap(lambda k: _draw_tree(k, codes, lo0, hi0, prior, max_depth, min_rows, leaf_sd, leaf_prior,
                                         log_w, categories))(keys)


def _leaf_values(key, S: int, leaf_sd: float, leaf_prior: str):
    """``S`` leaf values from the leaf prior (:mod:`~bayestrees.inference.treefn.leaf_priors`)."""
    if leaf_prior == "normal":
        return leaf_sd * jax.random.normal(key, (S,))
    c, d = leaf_priors.loggamma_params(leaf_sd)
    return jax.random.loggamma(key, c, (S,)) - math.log(d)   # (log of gamma(c) underflows for small c)


def _draw_tree(key, codes, lo0, hi0, prior, D: int, min_rows: int, leaf_sd: float, leaf_prior: str = "normal",
               log_w=None, categories=None):
    """One tree from the prior (module docstring), by rejection until every leaf holds ``min_rows`` rows."""
    S = 2 ** (D + 1) - 1
    d = lo0.shape[0]

    def draw(k):
        f = jnp.full(S, -1, jnp.int32)
        t = jnp.zeros(S, jnp.int32)
        lo = jnp.zeros((S, d), jnp.int32).at[0].set(lo0)
        hi = jnp.zeros((S, d), jnp.int32).at[0].set(hi0)
        if categories is not None:   # every node's categories of every feature (meaningless for ordered ones)
            masks = jnp.zeros((S, d), jnp.int32).at[0].set(categories)
        used = jnp.zeros(S, bool).at[0].set(True)
        ks = jax.random.split(k, 4 * max(D, 1) + 1)
        for depth in range(D):
            a, b = 2 ** depth - 1, 2 ** (depth + 1) - 1
            sl = slice(a, b)
            nthr = jnp.maximum(hi[sl] - lo[sl], 0)                              # (w, d)
            if categories is not None:   # |A| - 1: available while two categories are left
                nthr = jnp.where(categories != 0, jnp.maximum(intervals.popcount(masks[sl]) - 1, 0), nthr)
            avail = jnp.sum(nthr > 0, -1)
            u = jax.random.uniform(ks[4 * depth], (b - a,))
            split = used[sl] & (avail > 0) & (jnp.log(u) < prior.log_split(depth))
            g = jax.random.gumbel(ks[4 * depth + 1], (b - a, d))
            if log_w is not None:   # the variable with probability w_j / sum_available w
                g = g + log_w
            var = jnp.argmax(jnp.where(nthr > 0, g, -jnp.inf), -1).astype(jnp.int32)
            cnt = jnp.maximum(jnp.take_along_axis(nthr, var[:, None], 1)[:, 0], 1)
            uu = jax.random.uniform(ks[4 * depth + 2], (b - a,))
            thr = (jnp.take_along_axis(lo[sl], var[:, None], 1)[:, 0]
                   + jnp.minimum(jnp.floor(uu * cnt).astype(jnp.int32), cnt - 1))
            kids_l = 2 * jnp.arange(a, b) + 1
            onehot = jax.nn.one_hot(var, d, dtype=bool)
            if categories is not None:   # a subset of the node's categories, uniform among the nonempty proper ones
                A = jnp.take_along_axis(masks[sl], var[:, None], 1)[:, 0]
                r = jax.random.randint(ks[4 * depth + 3], (b - a,), 1, jnp.maximum((1 << intervals.popcount(A)) - 1, 2))
                subset = jax.vmap(proposals.deposit_bits)(r, A)
                by_subset = categories[var] != 0
                thr = jnp.where(by_subset, subset, thr)
                on = onehot & by_subset[:, None]
                masks = (masks.at[kids_l].set(jnp.where(on, subset[:, None], masks[sl]))
                         .at[kids_l + 1].set(jnp.where(on, (A & ~subset)[:, None], masks[sl])))
            f = f.at[sl].set(jnp.where(split, var, -1))
            t = t.at[sl].set(jnp.where(split, thr, 0))
            lo_l, hi_l = lo[sl], jnp.where(onehot, thr[:, None], hi[sl])
            lo_r, hi_r = jnp.where(onehot, thr[:, None] + 1, lo[sl]), hi[sl]
            lo = lo.at[kids_l].set(lo_l).at[kids_l + 1].set(lo_r)
            hi = hi.at[kids_l].set(hi_l).at[kids_l + 1].set(hi_r)
            used = used.at[kids_l].set(split).at[kids_l + 1].set(split)
        leaf = used & (f < 0)
        v = jnp.where(leaf, _leaf_values(ks[-1], S, leaf_sd, leaf_prior), 0.0)
        return f, t, v, leaf

    def rows_ok(f, t, leaf):
        node = jnp.zeros(codes.shape[0], jnp.int32)
        for _ in range(D):
            fj = f[node]
            c = jnp.take_along_axis(codes, jnp.maximum(fj, 0)[:, None], 1)[:, 0]
            right = heap.goes_right(c, jnp.maximum(fj, 0), t[node], categories)
            node = jnp.where(fj >= 0, 2 * node + 1 + right.astype(jnp.int32), node)
        counts = jnp.zeros(S, jnp.int32).at[node].add(1)
        return jnp.all(jnp.where(leaf, counts >= min_rows, True))

    f0, t0, v0, leaf0 = draw(key)
    if min_rows <= 0:
        return f0, t0, v0

    def body(c):
        _, k, _, _, _ = c
        k, sub = jax.random.split(k)
        f, t, v, leaf = draw(sub)
        return rows_ok(f, t, leaf), k, f, t, v

    _, _, f, t, v = jax.lax.while_loop(lambda c: ~c[0], body, (rows_ok(f0, t0, leaf0), key, f0, t0, v0))
    return f, t, v


def bart_function(name: str, X, m: int = 50, *, outputs=None, prior=None, k: float = 2.0, leaf_sd=None,
                  leaf_prior: str = "normal", max_depth: int = 5, min_leaf_rows: int = 5, max_bins: int = 100,
                  cuts=None, categorical_features=None):
    """A sum of ``m`` trees as a random function inside a NumPyro model; its value at the rows of ``X``.

    Call it inside a NumPyro model function; sample the model with :func:`bayestrees.sample_model`
    (or :class:`bayestrees.NumPyroModel` in the model context).  The prior is described in
    :mod:`bayestrees.inference.treefn.site`.

    Parameters
    ----------
    name : str
        The function's name: the deterministic site of its values; the trees are the sample site
        ``name + "_trees"``.
    X : array of shape (n, d)
        Real features, NaN for a missing value (each rule then also says where a missing value
        goes: the module docstring, "Missing values"), concrete when the model runs (a model
        argument, not a value computed from other sites).  Their cut points define the split rules.
    m : int >= 1, default 50
        Number of trees (``m = 1`` is one Bayesian CART tree: :func:`tree_function`).
    outputs : int >= 1, optional
        A function of ``outputs`` values per row, shape ``(n, outputs)``: one ensemble of ``m``
        trees per output, independent under the prior (each with this prior and ``leaf_sd``), the
        trees site of shape ``(outputs, m, S, 3)``.  The default ``None`` gives values ``(n,)``.
        (For example the linear predictors of a multinomial logit, or a mean and a log scale.)
    prior : bt.priors.ChipmanPrior or bt.priors.DepthDecayPrior, optional
        The tree prior (default ``ChipmanPrior(0.95, 2)``).
    k : float > 0, default 2
        Sets ``leaf_sd = 3 / (k sqrt(m))`` when ``leaf_sd`` is not given: the function's prior sd
        is then ``1.5`` on the scale it enters the model (a log rate, a logit, a mean).
    leaf_sd : float > 0, optional
        Prior sd of every leaf value.  For a Normal mean, about ``0.5 * (y_max - y_min) / (k
        sqrt(m))`` as the BART family sets it.
    leaf_prior : {"normal", "loggamma"}, default "normal"
        The leaf values' prior, of mean 0 and sd ``leaf_sd``: Normal, or the log of a Gamma
        variable (:mod:`~bayestrees.inference.treefn.leaf_priors`; log-linear BART, Murray 2021),
        which is conjugate to a Poisson likelihood with a log link (``Poisson(B exp(g + f))``): the
        tree moves then integrate the leaf values out, as for a Normal likelihood (at n = 1,000,
        about 3x the effective draws per CPU second of the general path: ``docs/lab-notes/models.md``).
    max_depth : int, default 5
        Deepest leaf level (the prior is truncated there).
    min_leaf_rows : int >= 0, default 5
        Every node holds at least this many rows of ``X`` (the prior is truncated to such trees).
    max_bins : int, default 100
        Cut points per feature at most (BayesTree's ``numcut``).
    cuts : array of shape (d, K), optional
        A cut table (:func:`~bayestrees.inference.treefn.site.cut_table`) to use instead of the
        one of ``X``.
    categorical_features : sequence of int or bool array of shape (d,), optional
        Unordered categorical columns of ``X``, holding category codes ``0 .. 22`` (NaN for a missing
        value): they split by subsets of their categories (the module docstring, "Unordered
        categorical features"; at most 23 categories a feature, a missing value counting as one).

    Returns
    -------
    jax.Array of shape (n,) or (n, outputs)
        The sum of trees at the rows of ``X`` (a column per output).

    Raises
    ------
    ValueError
        For features that are not a real ``(n, d)`` array (NaN allowed, not inf), or bad settings.

    Notes
    -----
    With ``m = 1`` or few trees and a strong signal, the grow and prune moves change a tree's root
    only by pruning it back first, which the posterior may make rare: run several chains and read
    the convergence table (``fit.convergence``).

    Examples
    --------
    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> X = np.random.default_rng(0).uniform(size=(30, 2))
    >>> def model(X, y=None):
    ...     f = bt.bart_function("f", X, m=10)
    ...     numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)
    >>> tr = numpyro.handlers.trace(numpyro.handlers.seed(model, 0)).get_trace(X)
    >>> tr["f"]["value"].shape, tr["f_trees"]["value"].shape
    ((30,), (10, 63, 3))
    """
    m = check_int("m", m, 1)
    n_out = 0 if outputs is None else check_int("outputs", outputs, 1)
    max_depth = check_int("max_depth", max_depth, 0, 12)
    min_leaf_rows = check_int("min_leaf_rows", min_leaf_rows, 0)
    check_positive("k", k)
    sd = 3.0 / (float(k) * math.sqrt(m)) if leaf_sd is None else check_positive("leaf_sd", leaf_sd)
    categorical = check_categorical(categorical_features, int(np.shape(X)[1]) if np.ndim(X) == 2 else 0,
                                    f"the tree function {name!r}")
    spec = TreeSpec(m, max_depth, _check_prior(prior), float(sd), min_leaf_rows, n_out, leaf_priors.check_leaf_prior(leaf_prior),
                    categorical)
    table = (_FEATURE_TABLES.get() or {}).get(name)
    if table is not None:   # the table handed in (feature_arguments): X may be traced
        Xc = jnp.asarray(X, jnp.float32)
        if Xc.shape != jnp.shape(table.codes):
            raise ValueError(f"the tree function {name!r} was given X of shape {Xc.shape}, its feature table is of "
                             f"{jnp.shape(table.codes)}")
        dist_ = TreeEnsemble(Xc, spec, table=table)
    else:
        Xc = _concrete_X(X, name)
        check_category_codes(Xc, categorical, f"the tree function {name!r}")
        if cuts is None:
            cuts = cut_table(Xc, check_int("max_bins", max_bins, 2))
        elif np.asarray(cuts).shape[0] != Xc.shape[1]:
            raise ValueError(f"cuts has {np.asarray(cuts).shape[0]} rows, X has {Xc.shape[1]} features")
        dist_ = TreeEnsemble(Xc, spec, cuts)
    key = dist_.rows
    trees = numpyro.sample(trees_site_name(name), dist_, infer={"bayestrees": "trees", "function": name, "rows": key})
    if name in _GIVEN_VALUES.get():   # the caller substitutes the values at the rows (NaN where it does not)
        return numpyro.deterministic(name, jnp.full((Xc.shape[0], n_out) if n_out else (Xc.shape[0],), jnp.nan))
    if isinstance(trees, TreeValues):
        f = trees.at_rows if trees.rows == key else function_values(trees.trees, Xc, n_out, categorical)
    else:
        f = function_values(trees, Xc, n_out, categorical)
    return numpyro.deterministic(name, f)


def tree_function(name: str, X, *, outputs=None, prior=None, leaf_sd: float = 1.5, leaf_prior: str = "normal",
                  max_depth: int = 5, min_leaf_rows: int = 5, max_bins: int = 100, cuts=None, categorical_features=None):
    """One Bayesian CART tree as a random function in a NumPyro model (:func:`bart_function` with ``m = 1``).

    Parameters
    ----------
    name : str
        The function's name (its trees are the site ``name + "_trees"``).
    X : array of shape (n, d)
        Real features (NaN for a missing value), concrete when the model runs.
    outputs : int >= 1, optional
        One tree per output, values ``(n, outputs)`` (as :func:`bart_function`).
    prior : bt.priors.ChipmanPrior or bt.priors.DepthDecayPrior, optional
        The tree prior (default ``ChipmanPrior(0.95, 2)``).
    leaf_sd : float > 0, default 1.5
        Prior sd of the leaf values (the sum-of-trees default at ``m = 1``).
    leaf_prior : {"normal", "loggamma"}, default "normal"
        The leaf values' prior (as :func:`bart_function`).
    max_depth, min_leaf_rows, max_bins, cuts, categorical_features
        As :func:`bart_function`.

    Returns
    -------
    jax.Array of shape (n,) or (n, outputs)
        The tree's value at the rows of ``X``.

    Examples
    --------
    >>> import numpyro, numpyro.distributions as dist
    >>> X = np.random.default_rng(0).uniform(size=(20, 2))
    >>> def model(X, y=None):
    ...     f = bt.tree_function("f", X, max_depth=3)
    ...     numpyro.sample("y", dist.Normal(f, 1.0), obs=y)
    >>> tr = numpyro.handlers.trace(numpyro.handlers.seed(model, 0)).get_trace(X)
    >>> tr["f_trees"]["value"].shape
    (1, 15, 3)
    """
    return bart_function(name, X, 1, outputs=outputs, prior=prior, leaf_sd=leaf_sd, leaf_prior=leaf_prior,
                         max_depth=max_depth, min_leaf_rows=min_leaf_rows, max_bins=max_bins, cuts=cuts,
                         categorical_features=categorical_features)
