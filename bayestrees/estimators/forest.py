"""scikit-learn style Bayesian, empirical Bayesian and sub-sample forests.

The classical baselines are parameter settings of the same estimators:

* random forest: ``BayesianForestRegressor(weights="multinomial")``
* single CART: ``BayesianForestRegressor(draws=1, weights="none")``
* extra trees: ``BayesianForestRegressor(weights="none", splitter="random")``
"""
from __future__ import annotations

import numpy as np

from ..inference.forest import FAMILY, ForestResult
from ..tree import Tree, index_tree, max_depth, n_leaves
from .base import RENAMED, ClassifierBase, DrawsMixin, FamilyEstimator, RegressorBase

__all__ = [
    "BayesianForestRegressor", "BayesianForestClassifier",
    "EmpiricalBayesianForestRegressor", "EmpiricalBayesianForestClassifier",
    "SubSampleForestRegressor", "SubSampleForestClassifier",
]


def _dask_input(X) -> bool:
    """A Dask collection or Parquet path(s): the Dask path (:mod:`bayestrees.distributed`)."""
    from ..distributed.inputs import is_dask_input
    return is_dask_input(X)


class _ForestMixin(DrawsMixin, FamilyEstimator):
    """Fitting, prediction and posterior views shared by every forest estimator.

    ``fit`` is the family protocol's (:class:`~bayestrees.estimators.base.FamilyEstimator`) over
    :func:`~bayestrees.inference.forest.fit.fit_bayesian_forest`, with the Dask path beside it.
    """

    _family = FAMILY
    _kind = "bf"  # "bf", "ebf" or "ssf"

    _renamed = {"n_estimators": "draws"}

    @classmethod
    def _fixed_params(cls) -> dict:
        return {"kind": cls._kind}

    def _config_params(self, params: dict) -> dict:
        """The config's parameters, with the class's ``kind``."""
        out = super()._config_params(params)
        out["kind"] = self._kind
        return out

    # -- the Dask path's interface (bayestrees.distributed.estimator) --------
    def dask_fit_inputs(self):
        """What a Dask fit takes from the estimator: ``(kind, config, task, key)``.

        ``kind`` is "bf", "ebf" or "ssf"; ``config`` the validated
        :class:`~bayestrees.inference.forest.fit.ForestConfig` of the parameters, ``task`` the
        estimator's and ``key`` the PRNG key of ``random_state``: what the single-machine ``fit``
        uses, so that both paths fit the same forest.
        """
        return self._kind, self._config(), self._task, self._key()

    def set_dask_fitted(self, res, X, client) -> None:
        """Take the fitted state of a :class:`~bayestrees.distributed.fit.DaskFitResult`.

        Public attributes: ``trees_``, ``trunk_``, ``block_of_row_`` (SSF: None), ``config_``,
        ``n_rows_``, ``dask_timings_``; the data attributes from the bin sample (``binner_``,
        ``n_features_in_``, ``feature_names_in_``, ``classes_``), which is also the data
        ``idata_`` is computed at; no device copy of the trees (a large forest is hundreds of
        MB; in-process predictions convert the trees on each call, as for a loaded model); the
        client predictions run on (not saved).
        """
        self._remember_data(res.sample, X)
        self.trees_ = res.trees
        self.trunk_ = res.trunk
        if self._kind == "ssf":
            self.block_of_row_ = None
        self.config_ = res.cart_config
        self.__dict__.pop("_dev_trees", None)
        self._dev_client = client  # not saved (``save`` drops ``_dev*``)
        self._train_data = res.sample
        self._idata = None
        self.n_rows_ = res.n_rows
        self.dask_timings_ = dict(res.timings)

    def dask_client(self):
        """The client a Dask fit ran on (None after a single-machine fit or a load)."""
        return self.__dict__.get("_dev_client")

    def check_fitted(self) -> None:
        """``NotFittedError`` unless the estimator is fitted."""
        self._check_fitted()

    # -- fitting ------------------------------------------------------------
    def fit(self, X, y=None, *, target=None, client=None):
        """Fit the forest: one weighted CART per posterior draw.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            NaN allowed (missing values get their own code).  Empirical Bayesian and sub-sample
            forests also take a Dask DataFrame or Parquet path(s), fitted on a Dask cluster
            (``docs/lab-notes/distributed.md``).
        y : array-like (n_samples,)
            Real targets (regressors) or labels (classifiers); a Dask Series with a Dask ``X``.
        target : str, optional
            Dask input only: the response column of ``X`` (instead of ``y``).
        client : None, distributed.Client or str, optional
            Dask input only: the cluster (None: a local cluster on this machine's cores).

        Returns
        -------
        self
        """
        self.__dict__.pop("result_", None)
        if _dask_input(X):
            from ..distributed.estimator import fit_estimator
            return fit_estimator(self, X, y, target=target, client=client)
        if target is not None or client is not None:
            raise ValueError("target= and client= are for Dask input (a Dask DataFrame or Parquet path)")
        self._reject_sparse(X)
        if y is not None:
            y_arr = np.asarray(y)
            n_rows = len(X) if hasattr(X, "__len__") else np.asarray(X).shape[0]
            if y_arr.ndim >= 1 and y_arr.shape[0] != n_rows:
                raise ValueError(f"X has {n_rows} rows but y has {y_arr.shape[0]}; they must match")
        return super().fit(X, y)

    def _fitted(self) -> None:
        result = self.result_
        self.trees_ = result.trees
        self.trunk_ = result.trunk
        if self._kind == "ssf":
            self.block_of_row_ = result.block_of_row
        self.config_ = result.cart_config

    def _output_result(self) -> ForestResult:
        """The fit's result; for a forest fitted on Dask input (no ``result_``), one made from the
        fitted attributes (the trees as NumPy arrays, no device copy)."""
        self._check_fitted()
        result = self.__dict__.get("result_")
        if result is not None and result.trees is self.trees_:
            return result
        trunk = getattr(self, "trunk_", None)
        return ForestResult(trees=self.trees_, device_trees=None, packed=None, cart_config=self.config_,
                            config=self._config(), task=self._task, classes=getattr(self, "classes_", None),
                            trunk=trunk, block_of_row=getattr(self, "block_of_row_", None), y_shift=0.0, y_scale=1.0)

    def predict_draws(self, X) -> np.ndarray:
        """Posterior draws of the CART functional at ``X``: one prediction per tree.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)

        Returns
        -------
        np.ndarray
            ``(draws, n_samples)`` for regressors and ``(draws, n_samples, n_classes)`` class
            probabilities for classifiers.
        """
        return super().predict_draws(X)

    # -- outputs ------------------------------------------------------------
    @property
    def idata_(self):
        """The posterior as ArviZ InferenceData (built on first access).

        One draw per tree (``chain=1, draw=draws``).  ``posterior`` holds ``n_leaves``,
        ``depth``, ``split_counts`` and ``mu``, each tree's prediction at the training rows
        (``(chain, draw, obs)`` in the response's units for regressors, ``(chain, draw, obs,
        class)`` class probabilities for classifiers); the tree arrays are in the ``trees``
        group (:func:`bayestrees.convert.trees_from_inferencedata`).  There is no
        ``log_likelihood`` group: the Bayesian bootstrap defines no likelihood, so
        ``bt.loo(est.idata_)`` raises a ``ValueError``.
        """
        return FamilyEstimator.idata_.fget(self)

    @property
    def n_leaves_(self) -> np.ndarray:
        """Leaves of every tree, shape (draws,)."""
        return np.asarray(n_leaves(self.trees_))

    @property
    def depth_(self) -> np.ndarray:
        """Depth of the deepest leaf of every tree, shape (draws,)."""
        return np.asarray(max_depth(self.trees_))

    def tree(self, i: int = 0) -> Tree:
        """The ``i``-th tree (posterior draw)."""
        self._check_fitted()
        return index_tree(self.trees_, i)


_COMMON_DOC = """
    Parameters
    ----------
    draws : int, default 100
        Trees, i.e. posterior draws (formerly ``n_estimators``).
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
    dtype : {"float32", "float64"}, default "float32"
        Precision of the split statistics and leaf values. "float64" needs JAX's 64-bit mode
        (``jax.config.update("jax_enable_x64", True)`` before any JAX array is made); otherwise
        ``fit`` raises ``ValueError`` (64-bit mode is never switched on behind your back).
    chunk_size : int, optional
        Trees per compiled call (default chosen by memory).
    n_jobs : int, optional
        Trees fitted at the same time (None: 1; -1: one per available CPU), in threads of this
        process. On the CPU backend the environment variable ``BAYESTREES_PARALLEL=processes``
        fits them in worker processes pinned to one core each instead, started on first use and
        kept warm for later fits (see :mod:`bayestrees.inference.forest.workers`); each holds its
        own JAX runtime and compiled program (about 300 MB on an 18,000-row data set), for the
        same fit time on the 2-core development machine (``docs/lab-notes/performance.md``, "Forest memory").
    random_state : int, numpy Generator or None
    progressbar : bool
    n_estimators : int
        The former name of ``draws`` (``FutureWarning``; removed in the next release).
"""


def _init_common(self, draws, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                 splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                 progressbar, n_estimators):
    self.draws = draws
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
    self.n_estimators = n_estimators


class _RegressorForest(_ForestMixin, RegressorBase):
    _task = "regression"

    def predict(self, X) -> np.ndarray:
        """Posterior mean prediction: the average over the trees.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns, or a Dask collection.

        Returns
        -------
        np.ndarray
            Shape ``(n_samples,)``; a lazy Dask Series, computed on the cluster, for a Dask ``X``.
        """
        if _dask_input(X):
            from ..distributed.estimator import predict_dask
            return predict_dask(self, X, "mean")
        return self.predict_draws(X).mean(axis=0)


class _ClassifierForest(_ForestMixin, ClassifierBase):
    _task = "classification"

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities averaged over the trees.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns, or a Dask collection.

        Returns
        -------
        np.ndarray
            Shape ``(n_samples, n_classes)``, columns in the order of ``classes_``; a lazy Dask
            DataFrame for a Dask ``X``.
        """
        if _dask_input(X):
            from ..distributed.estimator import predict_dask
            return predict_dask(self, X, "proba")
        p = self.predict_draws(X).astype(np.float64).mean(axis=0)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, X) -> np.ndarray:
        """The most probable class under the averaged class probabilities (:meth:`predict_proba`).

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns, or a Dask collection.

        Returns
        -------
        np.ndarray
            Labels (of ``classes_``), shape ``(n_samples,)``; a lazy Dask Series for a Dask ``X``.
        """
        if _dask_input(X):
            from ..distributed.estimator import predict_dask
            return predict_dask(self, X, "label")
        return self._labels(self.predict_proba(X))


class BayesianForestRegressor(_RegressorForest):
    __doc__ = ("Bayesian forest regressor (Taddy et al. 2015): CART fit to Bayesian-bootstrap weights.\n" + _COMMON_DOC
               + """
    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.BayesianForestRegressor(draws=10, random_state=0).fit(X, y)
    >>> reg.predict(X[:5]).shape                   # posterior mean: the average of the trees
    (5,)
    >>> reg.predict_draws(X[:5]).shape             # every tree (posterior draw)
    (10, 5)
    >>> reg.predict_interval(X[:5], prob=0.9).shape
    (5, 2)
""")

    _kind = "bf"

    def __init__(self, draws=100, *, weights="exponential", min_samples_leaf=1, max_depth=None,
                 max_features=None, min_weight_fraction_leaf=0.0, splitter="best", max_bins=1024,
                 categorical_features=None, max_nodes=None, dtype="float32", chunk_size=None, n_jobs=None,
                 random_state=None, progressbar=False, n_estimators=RENAMED):
        _init_common(self, draws, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar, n_estimators)


class BayesianForestClassifier(_ClassifierForest):
    __doc__ = ("Bayesian forest classifier (Taddy et al. 2015).\n" + _COMMON_DOC
               + "    criterion : {'gini', 'entropy', 'log_loss'}\n" + """
    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> labels = np.where(X[:, 0] > 0.5, "high", "low")
    >>> clf = bt.BayesianForestClassifier(draws=10, random_state=0).fit(X, labels)
    >>> clf.classes_
    array(['high', 'low'], dtype='<U4')
    >>> clf.predict_proba(X[:5]).shape             # class probabilities averaged over the trees
    (5, 2)
    >>> clf.predict(X[:5]).shape
    (5,)
""")

    _kind = "bf"

    def __init__(self, draws=100, *, criterion="gini", weights="exponential", min_samples_leaf=1,
                 max_depth=None, max_features=None, min_weight_fraction_leaf=0.0, splitter="best", max_bins=1024,
                 categorical_features=None, max_nodes=None, dtype="float32", chunk_size=None, n_jobs=None,
                 random_state=None, progressbar=False, n_estimators=RENAMED):
        self.criterion = criterion
        _init_common(self, draws, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar, n_estimators)


class EmpiricalBayesianForestRegressor(_RegressorForest):
    __doc__ = ("Empirical Bayesian forest regressor: a fixed CART trunk (unit weights, leaves of at least\n"
               "    ``trunk_min_samples_leaf`` rows), then a Bayesian forest in every trunk leaf.\n" + _COMMON_DOC
               + "    trunk_min_samples_leaf : int, default 1000\n" + """
    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.EmpiricalBayesianForestRegressor(draws=10, trunk_min_samples_leaf=10, random_state=0).fit(X, y)
    >>> reg.predict(X[:5]).shape                   # posterior mean: the average of the trees
    (5,)
    >>> reg.predict_draws(X[:5]).shape             # every tree (posterior draw)
    (10, 5)
    >>> reg.predict_interval(X[:5], prob=0.9).shape
    (5, 2)
""")

    _kind = "ebf"

    def __init__(self, draws=100, *, trunk_min_samples_leaf=1000, weights="exponential", min_samples_leaf=1,
                 max_depth=None, max_features=None, min_weight_fraction_leaf=0.0, splitter="best", max_bins=1024,
                 categorical_features=None, max_nodes=None, dtype="float32", chunk_size=None, n_jobs=None,
                 random_state=None, progressbar=False, n_estimators=RENAMED):
        self.trunk_min_samples_leaf = trunk_min_samples_leaf
        _init_common(self, draws, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar, n_estimators)


class EmpiricalBayesianForestClassifier(_ClassifierForest):
    __doc__ = ("Empirical Bayesian forest classifier (CART trunk + Bayesian forest per trunk leaf).\n" + _COMMON_DOC
               + "    trunk_min_samples_leaf : int, default 1000\n    criterion : {'gini', 'entropy', 'log_loss'}\n"
               + """
    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> labels = np.where(X[:, 0] > 0.5, "high", "low")
    >>> clf = bt.EmpiricalBayesianForestClassifier(draws=10, trunk_min_samples_leaf=10, random_state=0).fit(X, labels)
    >>> clf.classes_
    array(['high', 'low'], dtype='<U4')
    >>> clf.predict_proba(X[:5]).shape             # class probabilities averaged over the trees
    (5, 2)
    >>> clf.predict(X[:5]).shape
    (5,)
""")

    _kind = "ebf"

    def __init__(self, draws=100, *, trunk_min_samples_leaf=1000, criterion="gini", weights="exponential",
                 min_samples_leaf=1, max_depth=None, max_features=None, min_weight_fraction_leaf=0.0,
                 splitter="best", max_bins=1024, categorical_features=None, max_nodes=None, dtype="float32",
                 chunk_size=None, n_jobs=None, random_state=None, progressbar=False, n_estimators=RENAMED):
        self.trunk_min_samples_leaf = trunk_min_samples_leaf
        self.criterion = criterion
        _init_common(self, draws, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar, n_estimators)


class SubSampleForestRegressor(_RegressorForest):
    __doc__ = ("Sub-sample forest regressor: rows cut into ``n_blocks`` random blocks, an equal share of the\n"
               "    trees fit to each block, predictions averaged.\n" + _COMMON_DOC + "    n_blocks : int, default 5\n"
               + """
    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.SubSampleForestRegressor(draws=10, n_blocks=2, random_state=0).fit(X, y)
    >>> reg.predict(X[:5]).shape                   # posterior mean: the average of the trees
    (5,)
    >>> reg.predict_draws(X[:5]).shape             # every tree (posterior draw)
    (10, 5)
    >>> reg.predict_interval(X[:5], prob=0.9).shape
    (5, 2)
""")

    _kind = "ssf"

    def __init__(self, draws=100, *, n_blocks=5, weights="exponential", min_samples_leaf=1, max_depth=None,
                 max_features=None, min_weight_fraction_leaf=0.0, splitter="best", max_bins=1024,
                 categorical_features=None, max_nodes=None, dtype="float32", chunk_size=None, n_jobs=None,
                 random_state=None, progressbar=False, n_estimators=RENAMED):
        self.n_blocks = n_blocks
        _init_common(self, draws, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar, n_estimators)


class SubSampleForestClassifier(_ClassifierForest):
    __doc__ = ("Sub-sample forest classifier (random blocks, a forest share per block).\n" + _COMMON_DOC
               + "    n_blocks : int, default 5\n    criterion : {'gini', 'entropy', 'log_loss'}\n" + """
    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> labels = np.where(X[:, 0] > 0.5, "high", "low")
    >>> clf = bt.SubSampleForestClassifier(draws=10, n_blocks=2, random_state=0).fit(X, labels)
    >>> clf.classes_
    array(['high', 'low'], dtype='<U4')
    >>> clf.predict_proba(X[:5]).shape             # class probabilities averaged over the trees
    (5, 2)
    >>> clf.predict(X[:5]).shape
    (5,)
""")

    _kind = "ssf"

    def __init__(self, draws=100, *, n_blocks=5, criterion="gini", weights="exponential", min_samples_leaf=1,
                 max_depth=None, max_features=None, min_weight_fraction_leaf=0.0, splitter="best", max_bins=1024,
                 categorical_features=None, max_nodes=None, dtype="float32", chunk_size=None, n_jobs=None,
                 random_state=None, progressbar=False, n_estimators=RENAMED):
        self.n_blocks = n_blocks
        self.criterion = criterion
        _init_common(self, draws, weights, min_samples_leaf, max_depth, max_features, min_weight_fraction_leaf,
                     splitter, max_bins, categorical_features, max_nodes, dtype, chunk_size, n_jobs, random_state,
                     progressbar, n_estimators)
