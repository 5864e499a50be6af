"""scikit-learn style safe-Bayesian random forests (Quadrianto & Ghahramani 2015).

>>> clf = bt.SafeBayesForestClassifier(draws=1000, random_state=0).fit(X, y)
>>> clf.predict_proba(X_test)              # w_k^beta-weighted, beta = m / N (m chosen by cross-validation)
>>> clf.predict(X_test, method="bma")      # beta = 1
>>> clf.log_weights_, clf.operating_curve_, clf.idata_

Both estimators call :func:`bayestrees.inference.safebayes.fit.fit_safebayes` (as
``bt.SafeBayesForest`` does) and predict with the functions of
:mod:`bayestrees.inference.safebayes.fit`.

Features are binned exactly (one code per distinct training value, up to
65534 per feature), so a prior cut ``c`` on the probability integral
transform ``F(x)`` is a threshold on the codes (see
:mod:`bayestrees.inference.safebayes.prior_trees`).  Categorical features keep their
sorted category order (never ordered by the response, so the trees stay
independent of the labels).  New rows are coded by the training bins: a new
value between two training values goes to the nearer one (the bin edge is
their midpoint), which is the empirical CDF of the training rows except on
that gap.

The effective sample size ``m`` (``beta = m / N``) is chosen by default
(``effective_sample_size="auto"``) by ``cv``-fold cross-validation on the
training rows over ``m = 1..N`` (``m = N`` is BMA) and beyond ``N`` up to
``1000 N`` (towards the single best tree); see
:func:`~bayestrees.inference.safebayes.fit.fit_safebayes`.

The regressor standardises the targets internally, ``z = (y - loc) / scale``
(``loc``, ``scale`` the mean and standard deviation of the training targets),
fits the Normal-inverse-gamma leaves on ``z`` with the leaf prior transformed
accordingly (``m0 -> (m0 - loc) / scale``, ``b0 -> b0 / scale^2``), and maps
predictions, intervals, log densities (``- log scale``, the Jacobian) and log
weights (``- N log scale``) back, so the fit does not depend on the units of
``y`` and targets of any finite magnitude (e.g. ``1e30``) stay finite in
float32.

``idata_`` holds equally weighted posterior draws: the ``K`` prior trees
resampled by their tempered weights ``w^beta`` (what the forest predicts with),
each with its leaf parameters drawn from their posterior given the tree
(:func:`~bayestrees.inference.safebayes.fit.safebayes_inferencedata`); the
unresampled weights are ``log_weights_``.
"""
from __future__ import annotations

import numpy as np

from ..inference.safebayes import FAMILY
from ..inference.safebayes import importance as imp
from ..inference.safebayes import fit as safebayes_fit
from .base import RENAMED, ClassifierBase, FamilyEstimator, RegressorBase

__all__ = ["SafeBayesForestClassifier", "SafeBayesForestRegressor"]


class _SafeBayesBase(FamilyEstimator):
    """Shared fitting logic over :func:`~bayestrees.inference.safebayes.fit.fit_safebayes`.

    ``fit`` (:meth:`bayestrees.estimators.base.FamilyEstimator.fit`) draws the prior trees, weighs
    them on ``(X, y)`` and sets ``m``.  ``effective_sample_size="auto"`` chooses ``m`` on an
    operating curve of held-out rows of the training data only (``cv``-fold cross-validation
    by default, stratified by class for the classifier; one hold-out split with
    ``validation_fraction``; the training curve with ``validation_fraction=0``); see
    :func:`bayestrees.inference.safebayes.fit.fit_safebayes`.
    """

    _family = FAMILY
    _task = ""

    def _config(self, params=None):
        config = super()._config(params)
        config.criterion(self._task)
        return config

    @property
    def _result(self):
        """The :class:`~bayestrees.inference.safebayes.fit.SafeBayesResult` of the fit."""
        return self.result_.result

    def _fitted(self) -> None:
        result = self._result
        if self._task == "classification":
            self.n_classes_ = int(self._train_data.n_classes)
        self.n_train_ = result.n_train
        self.prior_trees_ = result.prior
        self.truncated_mass_ = result.truncated_mass
        self.trees_ = result.trees
        self.log_weights_ = result.log_weights
        self.effective_sample_size_ = result.effective_sample_size
        self.beta_ = result.beta
        self._curve_cache = result.curve
        self._fitted_result()

    def _fitted_result(self):
        """Task-specific fitted attributes (the regressor's standardisation and leaf prior)."""

    @property
    def operating_curve_(self) -> dict:
        """The operating curve seen at fit time.

        With ``effective_sample_size="auto"``: the curve from which ``m`` was chosen,
        on the cross-validation folds (``on="cross-validation"``, pooled over all
        training rows), on the validation split (``on="validation"``, when
        ``validation_fraction`` is in (0, 1)) or on the training rows
        (``on="training"``, ``validation_fraction=0``).  With a fixed ``m``: the
        in-sample curve on the training rows (``on="training"``, at most 200
        log-spaced values of ``m``), computed on first access.
        """
        self._check_fitted()
        if getattr(self, "_curve_cache", None) is None:
            self._curve_cache = safebayes_fit.training_curve(self._result, self._train_data)
        return self._curve_cache

    # -- weights ----------------------------------------------------------------------------------
    def tree_weights(self, method: str = "safe") -> np.ndarray:
        """Normalised weights of the trees, float (K,).

        ``"safe"``: ``w_k^beta / sum w^beta`` with ``beta = m / N``;
        ``"bma"``: ``beta = 1``; ``"best"``: 1 on the tree with the largest weight.
        """
        self._check_fitted()
        return np.exp(np.asarray(safebayes_fit.method_log_weights(self._result, method)))

    @property
    def idata_(self):
        """The posterior as ArviZ InferenceData by the posterior contract (built on first access).

        Equally weighted draws (``chain=1, draw=draws``): the prior trees
        resampled by their tempered weights ``w^beta`` (``beta = m / N``, what the
        forest predicts with; ``attrs["draws"]`` says so), each with its leaf
        parameters drawn from their posterior given the tree.  ``posterior``:
        ``n_leaves``, ``depth``, ``split_counts`` and ``mu``, the drawn leaf parameters
        at the training rows; ``trees``: the resampled trees; ``log_likelihood["y"]``
        (so ``bt.loo`` works); ``sample_stats``: ``log_weight``, ``tempered_log_weight``
        and ``tree_index`` of each draw's tree.  The weights of all ``K`` trees are
        ``log_weights_``.
        """
        return FamilyEstimator.idata_.fget(self)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


_COMMON_PARAMS_DOC = """
    draws : int, default 1000
        Number of prior trees ``K``, resampled into as many posterior draws (formerly ``n_estimators``).
    split_prob : float in (0, 0.5), default 0.475
        Probability ``lam`` that a node of the code string is internal.
    effective_sample_size : float > 0 or "auto", default "auto"
        ``m`` (``beta = m / N``); ``m = N`` is Bayesian model averaging and
        ``m > N`` sharpens the weights towards the single best tree.  ``"auto"``
        chooses ``m`` by ``cv``-fold cross-validation on the training rows (see
        :meth:`fit`).  The paper uses ``m = 5``; on imbalanced two-class data that
        gives majority-class predictions (docs/lab-notes/safebayes.md).
    root_splits : bool, default True
        The root of every prior tree is internal (the code string starts with
        1, the paper's Figure 1); ``False`` lets it be a leaf with probability
        ``1 - split_prob``.
    max_internal : int, default 511
        Largest number of internal nodes; trees are drawn exactly from the
        prior conditioned on it (truncated mass ``truncated_mass_``, 0.32% at
        the defaults).
    cv : int >= 2, default 5
        Cross-validation folds of ``effective_sample_size="auto"``.
    validation_fraction : float in [0, 1) or None, default None
        When given, ``"auto"`` uses one hold-out split of this fraction instead of
        cross-validation (0: the in-sample training curve).
    dtype : {"float32", "float64"}, default "float32"
        Precision of the weights and leaf statistics; "float64" needs
        ``jax.config.update("jax_enable_x64", True)`` first (``ValueError`` otherwise).
    random_state : int, numpy Generator, JAX key or None
    n_estimators : int
        The former name of ``draws`` (``FutureWarning``; removed in the next release).
"""


class SafeBayesForestClassifier(_SafeBayesBase, ClassifierBase):
    __doc__ = """Safe-Bayesian random forest classifier (Quadrianto & Ghahramani 2015).

    ``draws`` trees are drawn from the data-independent code-string
    prior, weighted by their Dirichlet-multinomial marginal likelihood
    ``w_k = p(Y | X, T_k)`` and combined with the tempered weights
    ``w_k^beta``, ``beta = m / N``.

    Parameters
    ----------""" + _COMMON_PARAMS_DOC + """    leaf_concentration : float > 0, default 1.0
        Symmetric Dirichlet concentration of the leaves (formerly ``alpha``).
    auto_criterion : "accuracy" or "log_predictive", default "accuracy"
        What ``"auto"`` maximises on the held-out curve: accuracy (what
        :meth:`predict` is scored by; ties broken by the mean log predictive,
        then the smallest ``m``) or the mean log predictive probability.
    alpha : float
        The former name of ``leaf_concentration`` (``FutureWarning``; removed in the next release).

    Attributes
    ----------
    classes_ : (C,) labels
    log_weights_ : float (K,)  log p(Y | X, T_k)
    effective_sample_size_, beta_ : the ``m`` used and ``m / N``
    operating_curve_ : dict with ``m``, ``accuracy``, ``log_predictive`` (mean
        per row), ``on`` ("cross-validation", "validation" or "training") and ``n_train``
    trees_ : Tree (K, L, C)  node values are the leaf predictives
    prior_trees_ : PriorForest
    truncated_mass_ : float  prior mass of trees larger than ``max_internal``
    idata_ : arviz.InferenceData  equally weighted posterior draws (see :attr:`idata_`)

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> labels = np.where(X[:, 0] > 0.5, "high", "low")
    >>> clf = bt.SafeBayesForestClassifier(draws=50, random_state=0).fit(X, labels)
    >>> clf.log_weights_.shape                     # log p(Y | X, T_k) of the 50 prior trees
    (50,)
    >>> clf.operating_curve_["on"]                 # m was chosen by cross-validation
    'cross-validation'
    >>> clf.predict_proba(X[:5]).shape             # weights w^beta, beta = m / N
    (5, 2)
    >>> clf.predict(X[:5], method="bma").shape     # beta = 1
    (5,)
    """

    _task = "classification"

    _renamed = {"n_estimators": "draws", "alpha": "leaf_concentration"}

    def __init__(self, draws=1000, split_prob=0.475, effective_sample_size="auto", leaf_concentration=1.0, *,
                 root_splits=True, max_internal=511, cv=5, validation_fraction=None, auto_criterion="accuracy",
                 dtype="float32", random_state=None, n_estimators=RENAMED, alpha=RENAMED):
        self.draws = draws
        self.split_prob = split_prob
        self.effective_sample_size = effective_sample_size
        self.leaf_concentration = leaf_concentration
        self.n_estimators = n_estimators
        self.alpha = alpha
        self.root_splits = root_splits
        self.max_internal = max_internal
        self.cv = cv
        self.validation_fraction = validation_fraction
        self.auto_criterion = auto_criterion
        self.dtype = dtype
        self.random_state = random_state

    def predict_proba(self, X, method: str = "safe") -> np.ndarray:
        """Class probabilities ``sum_k w_k^beta p(y | T_k, x) / sum_k w_k^beta``.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns.
        method : {"safe", "bma", "best"}, default "safe"
            Tree weights ``w_k^beta`` with ``beta = m / N``, ``beta = 1`` (Bayesian model averaging), or
            all weight on the tree with the largest ``w_k``.

        Returns
        -------
        np.ndarray
            float, shape ``(n_samples, n_classes)``, columns in the order of ``classes_``.
        """
        self._check_fitted()
        return safebayes_fit.forest_proba(self._result, self._codes(X), method)

    def predict(self, X, method: str = "safe") -> np.ndarray:
        """Most probable class of each row under :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns.
        method : {"safe", "bma", "best"}, default "safe"
            Tree weights ``w_k^beta`` with ``beta = m / N``, ``beta = 1`` (Bayesian model averaging), or
            all weight on the tree with the largest ``w_k``.

        Returns
        -------
        np.ndarray
            Labels (of ``classes_``), shape ``(n_samples,)``.
        """
        return self._labels(self.predict_proba(X, method))

    def predict_log_proba(self, X, method: str = "safe") -> np.ndarray:
        """Natural log of :meth:`predict_proba`: float (n, C)."""
        return np.log(self.predict_proba(X, method))

    def log_predictive(self, X, y, method: str = "safe") -> float:
        """Mean log predictive probability of the labels ``y`` of rows ``X``."""
        self._check_fitted()
        codes = self._codes(X)
        return safebayes_fit.forest_log_predictive(self._result, codes, self._encode_labels(y, codes.shape[0]), method)

    def _encode_labels(self, y, n):
        y = np.asarray(y)
        if y.shape != (n,):
            raise ValueError(f"y must have shape ({n},), got {y.shape}")
        idx = np.searchsorted(self.classes_, y)
        idx = np.clip(idx, 0, len(self.classes_) - 1)
        if not np.all(self.classes_[idx] == y):
            unknown = sorted(set(np.asarray(y).tolist()) - set(self.classes_.tolist()))[:5]
            raise ValueError(f"y holds labels unseen at fit time: {unknown}")
        return idx

    def operating_curve(self, X, y, m_grid=None) -> dict:
        """Accuracy and mean log predictive on ``(X, y)`` against ``m`` (weights from the training fit)."""
        self._check_fitted()
        codes = self._codes(X)
        yc = self._encode_labels(y, codes.shape[0])
        m_grid = imp.default_m_grid(self.n_train_) if m_grid is None else np.asarray(m_grid)
        out = safebayes_fit.operating_curve(self._result, codes, yc, m_grid)
        out["on"] = "given"
        return out


class SafeBayesForestRegressor(_SafeBayesBase, RegressorBase):
    __doc__ = """Safe-Bayesian random forest regressor: prior trees with Normal-inverse-gamma leaves.

    As :class:`SafeBayesForestClassifier` with the Dirichlet-multinomial leaf
    replaced by the conjugate Normal-inverse-gamma model.  The targets are
    standardised internally (``z = (y - y_loc_) / y_scale_``, the training mean
    and standard deviation) and every output is mapped back, so the fit is the
    same in any units (``y`` of order ``1e30`` included).  Predictions are the
    tempered-weight mixture of per-tree Student-t predictives; :meth:`predict`
    returns its mean.

    Parameters
    ----------""" + _COMMON_PARAMS_DOC + """    leaf_prior : NIGPrior or None
        Normal-inverse-gamma prior ``(m0, kappa0, a0, b0)`` of a leaf on the scale
        of ``y``; default :func:`bayestrees.leaves.default_nig_prior` of the
        training targets.  It is applied to the standardised targets as
        ``((m0 - loc) / scale, kappa0, a0, b0 / scale^2)``, which is the same model.
    auto_criterion : "log_predictive" or "rmse", default "log_predictive"

    Attributes
    ----------
    log_weights_, effective_sample_size_, beta_, trees_, prior_trees_, truncated_mass_, idata_
        As for the classifier; ``log_weights_`` is ``log p(Y | X, T_k)`` on the scale
        of ``y`` and ``trees_`` node values are on the scale of ``y``.
    operating_curve_ : dict with ``m``, ``rmse``, ``log_predictive`` (mean log density), ``on``, ``n_train``
    leaf_prior_ : NIGPrior used, on the scale of ``y``
    y_loc_, y_scale_ : float  the standardisation of the targets

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.SafeBayesForestRegressor(draws=50, random_state=0).fit(X, y)
    >>> reg.predict(X[:5]).shape                   # the mean of the tempered mixture
    (5,)
    >>> reg.predict_interval(X[:5]).shape
    (5, 2)
    >>> reg.tree_weights().shape                   # normalised weights of the 50 prior trees
    (50,)
    """

    _task = "regression"

    _renamed = {"n_estimators": "draws"}

    def __init__(self, draws=1000, split_prob=0.475, effective_sample_size="auto", *, leaf_prior=None,
                 root_splits=True, max_internal=511, cv=5, validation_fraction=None,
                 auto_criterion="log_predictive", dtype="float32", random_state=None, n_estimators=RENAMED):
        self.draws = draws
        self.n_estimators = n_estimators
        self.split_prob = split_prob
        self.effective_sample_size = effective_sample_size
        self.leaf_prior = leaf_prior
        self.root_splits = root_splits
        self.max_internal = max_internal
        self.cv = cv
        self.validation_fraction = validation_fraction
        self.auto_criterion = auto_criterion
        self.dtype = dtype
        self.random_state = random_state

    def _fitted_result(self):
        r = self._result
        self.y_loc_, self.y_scale_ = r.y_loc, r.y_scale
        self.leaf_prior_ = r.leaf_prior

    def _y_values(self, y, n) -> np.ndarray:
        y = np.asarray(y, np.float64)
        if y.shape != (n,):
            raise ValueError(f"y must have shape ({n},), got {y.shape}")
        return y

    def predict(self, X, method: str = "safe") -> np.ndarray:
        """Predictive mean ``sum_k w_k^beta E[y | T_k, x] / sum_k w_k^beta``.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns.
        method : {"safe", "bma", "best"}, default "safe"
            Tree weights ``w_k^beta`` with ``beta = m / N``, ``beta = 1`` (Bayesian model averaging), or
            all weight on the tree with the largest ``w_k``.

        Returns
        -------
        np.ndarray
            float64, shape ``(n_samples,)``, in the units of ``y``.
        """
        self._check_fitted()
        return safebayes_fit.forest_mean(self._result, self._codes(X), method)

    def log_predictive(self, X, y, method: str = "safe") -> float:
        """Mean log predictive density of ``y`` at rows ``X`` under the Student-t mixture.

        Computed on the standardised scale and mapped back with the Jacobian:
        ``log p(y) = log p(z) - log y_scale_``.
        """
        self._check_fitted()
        codes = self._codes(X)
        return safebayes_fit.forest_log_predictive(self._result, codes, self._y_values(y, codes.shape[0]), method)

    def predict_interval(self, X, prob: float = 0.9, method: str = "safe", kind: str = "mean") -> np.ndarray:
        """Equal-tailed interval of probability ``prob`` at each row: float64 (n, 2).

        Parameters
        ----------
        X : array-like (n, d)
        prob : float in (0, 1)
        method : "safe", "bma" or "best"  tree weights (as for :meth:`predict`)
        kind : "mean" or "predictive"
            ``"mean"``: weighted quantiles of the trees' posterior means ``E[y | T_k, x]``
            with the tree weights (a credible interval of the regression function, like
            the forests' ``predict_interval``; a point for ``method="best"``).
            ``"predictive"``: quantiles of the Student-t mixture predictive of a new
            ``y`` (found by bisection on the mixture CDF, to about ``1e-9`` standard
            deviations).

        Returns
        -------
        np.ndarray
            float64, shape ``(n_samples, 2)``: the lower and upper ends, in the units of ``y``.

        Notes
        -----
        Both are computed for the standardised target and mapped back by
        ``y = y_loc_ + y_scale_ z`` (quantiles commute with increasing affine maps).
        """
        self._check_fitted()
        return safebayes_fit.forest_interval(self._result, self._codes(X), prob, method, kind)

    def operating_curve(self, X, y, m_grid=None) -> dict:
        """RMSE and mean log predictive density on ``(X, y)`` against ``m`` (on the scale of ``y``)."""
        self._check_fitted()
        m_grid = imp.default_m_grid(self.n_train_) if m_grid is None else np.asarray(m_grid)
        codes = self._codes(X)
        out = safebayes_fit.operating_curve(self._result, codes, self._y_values(y, codes.shape[0]), m_grid)
        out["on"] = "given"
        return out
