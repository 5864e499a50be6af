"""scikit-learn style Bayesian, empirical Bayesian and sub-sample forests.

The classical baselines are parameter settings of the same estimators:

* random forest: ``BayesianForestRegressor(weights="multinomial")``
* single CART: ``BayesianForestRegressor(n_estimators=1, weights="none")``
* extra trees: ``BayesianForestRegressor(weights="none", splitter="random")``
"""
from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp

from ..data import bucket_size, missing_code, pad_rows
from ..inference.bootstrap import WEIGHT_KINDS, fit_forest, fit_trunk, root_trunk
from ..inference.cart import CARTConfig, default_capacity, prepare_codes
from ..tree import Tree, index_tree, max_depth, n_leaves, pack, predict
from ..convert import trees_to_inferencedata
from .base import ClassifierBase, RegressorBase

__all__ = [
    "BayesianForestRegressor", "BayesianForestClassifier",
    "EmpiricalBayesianForestRegressor", "EmpiricalBayesianForestClassifier",
    "SubSampleForestRegressor", "SubSampleForestClassifier",
]

_DTYPES = {"float32": jnp.float32, "float64": jnp.float64}


def _resolve_max_features(mf, d: int) -> int | None:
    if mf is None:
        return None
    if isinstance(mf, str):
        if mf == "sqrt":
            return max(1, int(np.sqrt(d)))
        if mf == "log2":
            return max(1, int(np.log2(d)))
        raise ValueError(f"max_features must be None, 'sqrt', 'log2', an int or a float in (0, 1], got {mf!r}")
    if isinstance(mf, (float, np.floating)):
        if not 0.0 < mf <= 1.0:
            raise ValueError(f"max_features as a fraction must be in (0, 1], got {mf}")
        return max(1, int(mf * d))
    mf = int(mf)
    if not 1 <= mf:
        raise ValueError(f"max_features must be >= 1, got {mf}")
    return min(mf, d)


class _ForestMixin:
    """Fitting, prediction and posterior views shared by every forest estimator."""

    _kind = "bf"  # "bf", "ebf" or "ssf"

    # -- validation ---------------------------------------------------------
    def _check_params(self, n_rows: int):
        if int(self.n_estimators) < 1:
            raise ValueError(f"n_estimators must be >= 1, got {self.n_estimators}")
        if self.weights not in WEIGHT_KINDS:
            raise ValueError(f"weights must be one of {WEIGHT_KINDS}, got {self.weights!r}")
        if int(self.min_samples_leaf) < 1:
            raise ValueError(f"min_samples_leaf must be >= 1, got {self.min_samples_leaf}")
        if not 0.0 <= float(self.min_weight_fraction_leaf) <= 0.5:
            raise ValueError(f"min_weight_fraction_leaf must be in [0, 0.5], got {self.min_weight_fraction_leaf}")
        if self.max_depth is not None and int(self.max_depth) < 0:
            raise ValueError(f"max_depth must be None or >= 0, got {self.max_depth}")
        if self.splitter not in ("best", "random"):
            raise ValueError(f"splitter must be 'best' or 'random', got {self.splitter!r}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {self.dtype!r}")
        if self.dtype == "float64" and not jax.config.jax_enable_x64:
            raise ValueError("dtype='float64' needs 64-bit JAX: call jax.config.update('jax_enable_x64', True) first")
        if n_rows < 2 * int(self.min_samples_leaf):
            raise ValueError(
                f"X has {n_rows} rows (n_samples={n_rows}), fewer than 2 * min_samples_leaf = {2 * int(self.min_samples_leaf)}; "
                "no split is possible: lower min_samples_leaf or give more rows"
            )

    def _criterion(self) -> str:
        return "squared_error" if self._task == "regression" else self.criterion

    def _config(self, n: int, d: int, n_classes: int, has_missing: bool, missing: int,
                msl: int | None = None) -> CARTConfig:
        msl = int(self.min_samples_leaf if msl is None else msl)
        md = None if self.max_depth is None else int(self.max_depth)
        cap = int(self.max_nodes) if self.max_nodes is not None else default_capacity(n, msl, md)
        crit = self._criterion()
        if crit not in ("squared_error", "gini", "entropy", "log_loss"):
            raise ValueError(f"criterion must be 'gini', 'entropy' or 'log_loss', got {crit!r}")
        return CARTConfig(criterion="entropy" if crit == "log_loss" else crit, n_classes=n_classes,
                          min_samples_leaf=msl, min_weight_fraction_leaf=float(self.min_weight_fraction_leaf),
                          max_depth=md, max_features=_resolve_max_features(self.max_features, d),
                          extra=self.splitter == "random", capacity=cap, has_missing=has_missing, missing=missing)

    # -- fitting ------------------------------------------------------------
    def fit(self, X, y):
        """Fit the forest: one weighted CART per posterior draw.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features); NaN allowed (missing)
        y : (n_samples,) real targets (regressors) or labels (classifiers)
        """
        self._reject_sparse(X)
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        y_arr = np.asarray(y)
        n_rows = len(X) if hasattr(X, "__len__") else np.asarray(X).shape[0]
        if y_arr.ndim >= 1 and y_arr.shape[0] != n_rows:
            raise ValueError(f"X has {n_rows} rows but y has {y_arr.shape[0]}; they must match")
        yy = self._check_y(y, None)
        codes = self._fit_binner(X, yy, classification=self._task == "classification",
                                 max_bins=int(self.max_bins), categorical=self.categorical_features)
        n, d = codes.shape
        self._check_params(n)
        dtype = _DTYPES[self.dtype]
        if self._task == "regression":
            shift, scale = float(np.mean(yy)), float(np.std(yy))
            scale = scale if scale > 0 else 1.0
            ytrain = ((yy - shift) / scale).astype(np.float32 if self.dtype == "float32" else np.float64)
            n_classes = 0
        else:
            shift, scale = 0.0, 1.0
            ytrain = yy
            n_classes = len(self.classes_)
        miss = missing_code(codes.dtype)
        has_missing = bool((codes == miss).any())
        # pad rows to a bucket size (weight 0, missing codes) so that data sizes share compilations
        n_pad = bucket_size(n)
        cfg = self._config(n_pad, d, n_classes, has_missing, miss)
        codes_p = pad_rows(codes, n_pad, miss)
        ytrain = pad_rows(ytrain, n_pad, 0)
        real = np.arange(n_pad) < n
        prep = prepare_codes(codes_p)
        key = self._key()
        k_trunk, k_blocks, k_forest = jax.random.split(key, 3)
        kwargs = dict(dtype=dtype, y_shift=shift, y_scale=scale, chunk_size=self.chunk_size, n_jobs=self.n_jobs,
                      progressbar=bool(self.progressbar), n_valid=n)
        # every kind passes a trunk and row blocks (the root and one block by default), so that
        # BF, EBF and SSF share one compiled program per data shape
        self.trunk_ = None
        kwargs.update(trunk=root_trunk(cfg, dtype), trunk_row_node=jnp.zeros(n_pad, jnp.int32),
                      block_of_row=np.zeros(n_pad, np.int32), n_blocks=1)
        if self._kind == "ebf":
            tmsl = int(self.trunk_min_samples_leaf)
            if tmsl < 1:
                raise ValueError(f"trunk_min_samples_leaf must be >= 1, got {tmsl}")
            trunk, row_node = fit_trunk(prep, ytrain, cfg, tmsl, y_shift=shift, y_scale=scale, dtype=dtype,
                                        weights=real.astype(np.float32))
            self.trunk_ = jax.tree_util.tree_map(np.asarray, trunk)
            kwargs.update(trunk=trunk, trunk_row_node=row_node)
        if self._kind == "ssf":
            k = int(self.n_blocks)
            if not 1 <= k <= n // (2 * int(self.min_samples_leaf)):
                raise ValueError(f"n_blocks must be between 1 and n / (2 min_samples_leaf) = "
                                 f"{n // (2 * int(self.min_samples_leaf))}, got {self.n_blocks}")
            perm = np.asarray(jax.random.permutation(k_blocks, n))
            block = np.full(n_pad, -1, np.int32)
            block[perm] = np.arange(n) % k
            self.block_of_row_ = block[:n]
            kwargs.update(block_of_row=block, n_blocks=k)
        trees = fit_forest(k_forest, prep, ytrain, cfg, int(self.n_estimators), self.weights, **kwargs)
        self.trees_ = jax.tree_util.tree_map(np.asarray, trees)
        self._dev_trees = (self.trees_, trees, pack(trees))
        self.config_ = cfg
        self._idata = None
        return self

    # -- prediction ---------------------------------------------------------
    def _leaf_values(self, X) -> np.ndarray:
        codes = self._codes(X)
        n = codes.shape[0]
        miss = self.config_.missing
        out = []
        step = max(64, 2_000_000 // max(1, int(self.trees_.feature.shape[0])))
        trees, packed = self._device_trees()
        for s in range(0, n, step):
            c = codes[s:s + step]
            m = c.shape[0]
            c = jnp.asarray(pad_rows(c, bucket_size(m), miss))  # bucketed: no recompile per row count
            out.append(np.asarray(predict(trees, c, miss, packed=packed))[:, :m])
        return np.concatenate(out, axis=1)  # (T, n, V)

    def _device_trees(self) -> Tree:
        """The trees as device arrays and :func:`~bayestrees.tree.pack`-ed: made once by ``fit`` (not
        saved with the model; a loaded model converts on each call, since prediction must not change
        the estimator's state)."""
        dev = self.__dict__.get("_dev_trees")
        if dev is None or dev[0] is not self.trees_:
            trees = jax.tree_util.tree_map(jnp.asarray, self.trees_)
            return trees, pack(trees)
        return dev[1], dev[2]

    def predict_draws(self, X) -> np.ndarray:
        """Posterior draws of the CART functional at ``X``: one prediction per tree.

        Returns ``(n_estimators, n_samples)`` for regressors and
        ``(n_estimators, n_samples, n_classes)`` class probabilities for classifiers.
        """
        v = self._leaf_values(X)
        return v[..., 0] if self._task == "regression" else v

    def predict_interval(self, X, prob: float = 0.9) -> np.ndarray:
        """Equal-tailed posterior credible interval of the forest functional, shape (n, 2) (or (n, K, 2))."""
        if not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1), got {prob}")
        draws = self.predict_draws(X)
        q = np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
        return np.moveaxis(q, 0, -1)

    # -- outputs ------------------------------------------------------------
    @property
    def idata_(self):
        """Posterior draws of trees as ArviZ InferenceData (built on first access)."""
        self._check_fitted()
        if getattr(self, "_idata", None) is None:
            names = None if self._task == "regression" else [str(c) for c in self.classes_]
            self._idata = trees_to_inferencedata(
                self.trees_, attrs={"family": self._family_name(), "weights": self.weights,
                                    "min_samples_leaf": int(self.min_samples_leaf)},
                output_names=names if names is not None else ["mean"])
        return self._idata

    def _family_name(self) -> str:
        return {"bf": "bayesian_forest", "ebf": "empirical_bayesian_forest", "ssf": "sub_sample_forest"}[self._kind]

    @property
    def n_leaves_(self) -> np.ndarray:
        return np.asarray(n_leaves(self.trees_))

    @property
    def depth_(self) -> np.ndarray:
        return np.asarray(max_depth(self.trees_))

    def tree(self, i: int = 0) -> Tree:
        """The ``i``-th tree (posterior draw)."""
        self._check_fitted()
        return index_tree(self.trees_, i)


_COMMON_DOC = """
    Parameters
    ----------
    n_estimators : int, default 100
        Trees, i.e. posterior draws.
    weights : {"exponential", "multinomial", "none"}, default "exponential"
        Row weights per draw: Bayesian bootstrap, classical bootstrap, or none.
    min_samples_leaf : int, default 1
        Rows of positive weight required in each leaf.
    max_depth : int or None
    max_features : None, int, float, "sqrt" or "log2"
        Features drawn at random per node (None: all).
    min_weight_fraction_leaf : float, default 0
        Fraction of a draw's total weight required in each leaf.
    splitter : {"best", "random"}
        "random" draws one threshold per feature per node (extra trees).
    max_bins : int, default 1024
        Bins per feature; features with at most this many distinct values are binned exactly
        (one bin per value, so splits are exact CART splits), others by quantiles. The fit's
        cost does not depend on the number of bins (the engine works on sorted rows, not
        histograms); codes are uint8 up to 255 bins and uint16 above.
    categorical_features : list of int, optional
        Columns to treat as categorical (DataFrame category/object columns are automatic).
    max_nodes : int, optional
        Node slots per tree (default: the bound 2 n / min_samples_leaf - 1, which cannot overflow).
    dtype : {"float32", "float64"}
        Precision of the split statistics (float64 needs ``jax_enable_x64``).
    chunk_size : int, optional
        Trees per compiled call (default chosen by memory).
    n_jobs : int, optional
        Trees fitted at the same time (None: 1; -1: one per available CPU). On the CPU backend
        they run in worker processes pinned to one core each, started on first use and kept
        warm for later fits (see :mod:`bayestrees.inference.workers`).
    random_state : int, numpy Generator or None
    progressbar : bool
"""


def _init_common(self, n_estimators, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                 splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                 progressbar):
    self.n_estimators = n_estimators
    self.weights = weights
    self.min_samples_leaf = min_samples_leaf
    self.max_depth = max_depth
    self.max_features = max_features
    self.min_weight_fraction_leaf = min_weight_fraction_leaf
    self.splitter = splitter
    self.max_bins = max_bins
    self.categorical_features = categorical_features
    self.max_nodes = max_nodes
    self.dtype = dtype
    self.chunk_size = chunk_size
    self.n_jobs = n_jobs
    self.random_state = random_state
    self.progressbar = progressbar


class _RegressorForest(_ForestMixin, RegressorBase):
    _task = "regression"

    def predict(self, X) -> np.ndarray:
        """Posterior mean prediction (average over trees), shape (n_samples,)."""
        return self.predict_draws(X).mean(axis=0)


class _ClassifierForest(_ForestMixin, ClassifierBase):
    _task = "classification"

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities averaged over trees, shape (n_samples, n_classes)."""
        p = self.predict_draws(X).astype(np.float64).mean(axis=0)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, X) -> np.ndarray:
        return self._labels(self.predict_proba(X))


class BayesianForestRegressor(_RegressorForest):
    __doc__ = "Bayesian forest regressor (Taddy et al. 2015): CART fit to Bayesian-bootstrap weights.\n" + _COMMON_DOC

    _kind = "bf"

    def __init__(self, n_estimators=100, *, weights="exponential", min_samples_leaf=1, max_depth=None,
                 max_features=None, min_weight_fraction_leaf=0.0, splitter="best", max_bins=1024,
                 categorical_features=None, max_nodes=None, dtype="float32", chunk_size=None, n_jobs=None,
                 random_state=None, progressbar=False):
        _init_common(self, n_estimators, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar)


class BayesianForestClassifier(_ClassifierForest):
    __doc__ = ("Bayesian forest classifier (Taddy et al. 2015).\n" + _COMMON_DOC
               + "    criterion : {'gini', 'entropy', 'log_loss'}\n")

    _kind = "bf"

    def __init__(self, n_estimators=100, *, criterion="gini", weights="exponential", min_samples_leaf=1,
                 max_depth=None, max_features=None, min_weight_fraction_leaf=0.0, splitter="best", max_bins=1024,
                 categorical_features=None, max_nodes=None, dtype="float32", chunk_size=None, n_jobs=None,
                 random_state=None, progressbar=False):
        self.criterion = criterion
        _init_common(self, n_estimators, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar)


class EmpiricalBayesianForestRegressor(_RegressorForest):
    __doc__ = ("Empirical Bayesian forest regressor: a fixed CART trunk (unit weights, leaves of at least\n"
               "``trunk_min_samples_leaf`` rows), then a Bayesian forest in every trunk leaf.\n" + _COMMON_DOC
               + "    trunk_min_samples_leaf : int, default 1000\n")

    _kind = "ebf"

    def __init__(self, n_estimators=100, *, trunk_min_samples_leaf=1000, weights="exponential", min_samples_leaf=1,
                 max_depth=None, max_features=None, min_weight_fraction_leaf=0.0, splitter="best", max_bins=1024,
                 categorical_features=None, max_nodes=None, dtype="float32", chunk_size=None, n_jobs=None,
                 random_state=None, progressbar=False):
        self.trunk_min_samples_leaf = trunk_min_samples_leaf
        _init_common(self, n_estimators, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar)


class EmpiricalBayesianForestClassifier(_ClassifierForest):
    __doc__ = ("Empirical Bayesian forest classifier (CART trunk + Bayesian forest per trunk leaf).\n" + _COMMON_DOC
               + "    trunk_min_samples_leaf : int, default 1000\n    criterion : {'gini', 'entropy', 'log_loss'}\n")

    _kind = "ebf"

    def __init__(self, n_estimators=100, *, trunk_min_samples_leaf=1000, criterion="gini", weights="exponential",
                 min_samples_leaf=1, max_depth=None, max_features=None, min_weight_fraction_leaf=0.0,
                 splitter="best", max_bins=1024, categorical_features=None, max_nodes=None, dtype="float32",
                 chunk_size=None, n_jobs=None, random_state=None, progressbar=False):
        self.trunk_min_samples_leaf = trunk_min_samples_leaf
        self.criterion = criterion
        _init_common(self, n_estimators, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar)


class SubSampleForestRegressor(_RegressorForest):
    __doc__ = ("Sub-sample forest regressor: rows cut into ``n_blocks`` random blocks, an equal share of the\n"
               "trees fit to each block, predictions averaged.\n" + _COMMON_DOC + "    n_blocks : int, default 5\n")

    _kind = "ssf"

    def __init__(self, n_estimators=100, *, n_blocks=5, weights="exponential", min_samples_leaf=1, max_depth=None,
                 max_features=None, min_weight_fraction_leaf=0.0, splitter="best", max_bins=1024,
                 categorical_features=None, max_nodes=None, dtype="float32", chunk_size=None, n_jobs=None,
                 random_state=None, progressbar=False):
        self.n_blocks = n_blocks
        _init_common(self, n_estimators, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar)


class SubSampleForestClassifier(_ClassifierForest):
    __doc__ = ("Sub-sample forest classifier (random blocks, a forest share per block).\n" + _COMMON_DOC
               + "    n_blocks : int, default 5\n    criterion : {'gini', 'entropy', 'log_loss'}\n")

    _kind = "ssf"

    def __init__(self, n_estimators=100, *, n_blocks=5, criterion="gini", weights="exponential", min_samples_leaf=1,
                 max_depth=None, max_features=None, min_weight_fraction_leaf=0.0, splitter="best", max_bins=1024,
                 categorical_features=None, max_nodes=None, dtype="float32", chunk_size=None, n_jobs=None,
                 random_state=None, progressbar=False):
        self.n_blocks = n_blocks
        self.criterion = criterion
        _init_common(self, n_estimators, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar)
