"""scikit-learn style safe-Bayesian random forests (Quadrianto & Ghahramani 2015).

>>> clf = bt.SafeBayesForestClassifier(n_estimators=1000, random_state=0).fit(X, y)
>>> clf.predict_proba(X_test)              # w_k^beta-weighted, beta = m / N
>>> clf.predict(X_test, method="bma")      # beta = 1
>>> clf.log_weights_, clf.operating_curve_, clf.idata_

Features are binned exactly (one code per distinct training value, up to
65534 per feature), so a prior cut ``c`` on the probability integral
transform ``F(x)`` is a threshold on the codes (see
:mod:`bayestrees.inference.prior_trees`).  Categorical features keep their
sorted category order (never ordered by the response, so the trees stay
independent of the labels).  New rows are coded by the training bins: a new
value between two training values goes to the nearer one (the bin edge is
their midpoint), which is the empirical CDF of the training rows except on
that gap.
"""
from __future__ import annotations

from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np

from ..data import check_X
from ..inference import importance as imp
from ..inference.prior_trees import PriorForest, _check_split_prob, sample_prior_forest, truncated_mass
from ..leaves import NIGPrior, default_nig_prior
from .base import ClassifierBase, RegressorBase

__all__ = ["SafeBayesForestClassifier", "SafeBayesForestRegressor"]

_PRIOR_CACHE: "OrderedDict[tuple, PriorForest]" = OrderedDict()
_PRIOR_CACHE_SIZE = 8


def cached_prior_forest(key, n_trees: int, n_features: int, split_prob: float, max_internal: int) -> PriorForest:
    """:func:`sample_prior_forest`, memoised on the key data and the arguments.

    The prior trees never depend on the data, so repeated fits with the same
    seed (cross-validation, repeated splits) reuse them.
    """
    kd = tuple(np.asarray(jax.random.key_data(key)).ravel().tolist())
    ck = (kd, int(n_trees), int(n_features), float(split_prob), int(max_internal))
    if ck in _PRIOR_CACHE:
        _PRIOR_CACHE.move_to_end(ck)
        return _PRIOR_CACHE[ck]
    pf = sample_prior_forest(key, n_trees, n_features, split_prob, max_internal)
    _PRIOR_CACHE[ck] = pf
    while len(_PRIOR_CACHE) > _PRIOR_CACHE_SIZE:
        _PRIOR_CACHE.popitem(last=False)
    return pf


def _padded(codes, *arrays):
    """Pad rows to :func:`importance.bucket_size`; returns padded arrays and the row weights."""
    n = np.asarray(codes).shape[0]
    size = imp.bucket_size(n)
    w = imp.pad_rows(np.ones(n, np.float32), size, 0.0)
    return (imp.pad_rows(codes, size),) + tuple(imp.pad_rows(a, size) for a in arrays) + (w,)


def _padded_grid(m_grid):
    """The m grid padded (repeating its last value) to a bucket size, as float."""
    m_grid = np.asarray(m_grid, np.float64)
    size = imp.bucket_size(m_grid.shape[0])
    return imp.pad_rows(m_grid, size, m_grid[-1])


def _n_rows(X) -> int:
    cols, _, _ = check_X(X)
    return int(cols[0].shape[0])


class _SafeBayesBase:
    """Shared fitting logic; subclasses provide the leaf model."""

    _task = ""

    # -- parameter checks -------------------------------------------------------------------------
    def _check_params(self, n: int):
        if not isinstance(self.n_estimators, (int, np.integer)) or int(self.n_estimators) < 1:
            raise ValueError(f"n_estimators must be a positive integer, got {self.n_estimators!r}")
        _check_split_prob(self.split_prob)
        if not isinstance(self.max_internal, (int, np.integer)) or int(self.max_internal) < 0:
            raise ValueError(f"max_internal must be a non-negative integer, got {self.max_internal!r}")
        vf = self.validation_fraction
        if not (isinstance(vf, (int, float, np.floating)) and 0.0 <= float(vf) < 1.0):
            raise ValueError(f"validation_fraction must be in [0, 1), got {vf!r}")
        m = self.effective_sample_size
        if isinstance(m, str):
            if m != "auto":
                raise ValueError(f"effective_sample_size must be a number in (0, N] or 'auto', got {m!r}")
        else:
            try:
                mf = float(m)
            except (TypeError, ValueError):
                raise ValueError(f"effective_sample_size must be a number in (0, N] or 'auto', got {m!r}") from None
            if not np.isfinite(mf) or mf <= 0 or mf > n:
                raise ValueError(
                    f"effective_sample_size must be in (0, N] with N = {n} training rows, got {m!r}; "
                    "m = N is Bayesian model averaging, use 'auto' to choose m on a validation split"
                )
        crit = self.auto_criterion
        if crit not in self._criteria:
            raise ValueError(f"auto_criterion must be one of {self._criteria}, got {crit!r}")

    # -- fitting ----------------------------------------------------------------------------------
    def fit(self, X, y):
        """Draw the prior trees, weigh them on ``(X, y)`` and set ``m``.

        Parameters
        ----------
        X : array-like (n, d) or DataFrame
        y : array-like (n,)

        Returns
        -------
        self
        """
        n = _n_rows(X)
        self._check_params(n)
        yv = self._check_y(y, n)
        self.binner_ = None
        codes = self._fit_binner(X, None, max_bins=int(min(max(n, 2), 65534)))
        self.n_train_ = n
        key = self._key()
        key_prior, key_split = jax.random.split(key)
        prior = cached_prior_forest(key_prior, int(self.n_estimators), codes.shape[1], float(self.split_prob),
                                    int(self.max_internal))
        self.prior_trees_ = prior
        self.truncated_mass_ = truncated_mass(self.split_prob, self.max_internal)
        n_bins = self.binner_.n_bins_
        self._setup_leaves(yv)
        m = self.effective_sample_size
        if m == "auto":
            vf = float(self.validation_fraction)
            n_val = int(round(vf * n))
            if vf > 0 and 1 <= n_val <= n - 1:
                perm = np.asarray(jax.random.permutation(key_split, n))
                val, fit_rows = np.sort(perm[:n_val]), np.sort(perm[n_val:])
                tree_sub, state_sub, lw_sub = self._weigh(prior, codes[fit_rows], yv[fit_rows], n_bins)
                curve = self._curve(tree_sub, state_sub, lw_sub, codes[val], yv[val], len(fit_rows),
                                    imp.default_m_grid(len(fit_rows)))
                curve["on"] = "validation"
            else:
                curve = None
            tree, state, lw = self._weigh(prior, codes, yv, n_bins)
            if curve is None:
                curve = self._curve(tree, state, lw, codes, yv, n, imp.default_m_grid(n))
                curve["on"] = "training"
            m_val = self._choose(curve)
            m_val = float(min(m_val, n))
        else:
            tree, state, lw = self._weigh(prior, codes, yv, n_bins)
            curve = None  # the training-set curve is computed on first access of operating_curve_
            m_val = float(m)
        self.trees_ = tree
        self._leaf_state = state
        self.log_weights_ = np.asarray(lw)
        self.effective_sample_size_ = m_val
        self.beta_ = m_val / n
        self._curve_cache = curve
        self._train = (codes, yv)
        self._idata = None
        return self

    @property
    def operating_curve_(self) -> dict:
        """The operating curve seen at fit time.

        With ``effective_sample_size="auto"``: the curve on the validation split
        (``on="validation"``; on the training rows when ``validation_fraction=0``)
        from which ``m`` was chosen.  With a fixed ``m``: the in-sample curve on the
        training rows (``on="training"``, at most 200 log-spaced values of ``m``),
        computed on first access.
        """
        self._check_fitted()
        if getattr(self, "_curve_cache", None) is None:
            codes, yv = self._train
            curve = self._curve(self.trees_, self._leaf_state, jnp.asarray(self.log_weights_), codes, yv,
                                self.n_train_, imp.default_m_grid(self.n_train_, 200))
            curve["on"] = "training"
            self._curve_cache = curve
        return self._curve_cache

    def _choose(self, curve) -> int:
        crit = self.auto_criterion
        if crit == "log_predictive":
            return imp.choose_m(curve["m"], curve["log_predictive"])
        if crit == "accuracy":
            return imp.choose_m(curve["m"], curve["log_predictive"], curve["accuracy"])
        return imp.choose_m(curve["m"], curve["log_predictive"], curve["rmse"], higher_is_better=False)

    # -- weights ----------------------------------------------------------------------------------
    def _check_method(self, method):
        if method not in ("safe", "bma", "best"):
            raise ValueError(f"method must be 'safe' (beta = m/N), 'bma' (beta = 1) or 'best', got {method!r}")

    def tree_weights(self, method: str = "safe") -> np.ndarray:
        """Normalised weights of the trees, float (K,).

        ``"safe"``: ``w_k^beta / sum w^beta`` with ``beta = m / N``;
        ``"bma"``: ``beta = 1``; ``"best"``: 1 on the tree with the largest weight.
        """
        self._check_fitted()
        self._check_method(method)
        lw = jnp.asarray(self.log_weights_)
        if method == "best":
            w = np.zeros(lw.shape[0])
            w[int(np.argmax(self.log_weights_))] = 1.0
            return w
        beta = self.beta_ if method == "safe" else 1.0
        return np.asarray(jnp.exp(imp.tempered_log_weights(lw, beta)))

    def _log_w(self, method):
        self._check_method(method)
        lw = jnp.asarray(self.log_weights_)
        if method == "best":
            return jnp.where(jnp.arange(lw.shape[0]) == jnp.argmax(lw), 0.0, -jnp.inf)
        beta = self.beta_ if method == "safe" else 1.0
        return imp.tempered_log_weights(lw, beta)

    @property
    def idata_(self):
        """ArviZ InferenceData: the K prior trees as draws (chain=1, draw=K),
        ``sample_stats.log_weight`` = log p(Y | X, T_k) (importance log weight),
        ``sample_stats.tempered_log_weight`` = normalised ``beta log w_k``."""
        self._check_fitted()
        if getattr(self, "_idata", None) is None:
            from ..convert import trees_to_inferencedata

            lw = np.asarray(self.log_weights_)
            self._idata = trees_to_inferencedata(
                self.trees_,
                sample_stats={"log_weight": lw,
                              "tempered_log_weight": np.asarray(self._log_w("safe"))},
                attrs={"family": "safe-bayes", "task": self._task, "split_prob": float(self.split_prob),
                       "effective_sample_size": float(self.effective_sample_size_), "beta": float(self.beta_),
                       "n_train": int(self.n_train_), "truncated_mass": float(self.truncated_mass_)},
                output_names=self._output_names(),
            )
        return self._idata

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


class SafeBayesForestClassifier(_SafeBayesBase, ClassifierBase):
    """Safe-Bayesian random forest classifier (Quadrianto & Ghahramani 2015).

    ``n_estimators`` trees are drawn from the data-independent code-string
    prior, weighted by their Dirichlet-multinomial marginal likelihood
    ``w_k = p(Y | X, T_k)`` and combined with the tempered weights
    ``w_k^beta``, ``beta = m / N``.

    Parameters
    ----------
    n_estimators : int, default 1000
        Number of prior trees ``K``.
    split_prob : float in (0, 0.5), default 0.475
        Probability ``lam`` that a node of the code string is internal.
    effective_sample_size : float in (0, N] or "auto", default 5
        ``m``; ``N`` is Bayesian model averaging.  ``"auto"`` picks ``m`` on the
        operating curve of a validation split (``validation_fraction``; the
        training set itself when it is 0) by ``auto_criterion``.
    alpha : float > 0, default 1.0
        Symmetric Dirichlet concentration of the leaves.
    max_internal : int, default 511
        Largest number of internal nodes; trees are drawn exactly from the
        prior conditioned on it (truncated mass ``truncated_mass_``, 0.15% at
        the defaults).
    validation_fraction : float in [0, 1), default 0.2
    auto_criterion : "log_predictive" or "accuracy", default "log_predictive"
    random_state : int, numpy Generator, JAX key or None

    Attributes
    ----------
    classes_ : (C,) labels
    log_weights_ : float (K,)  log p(Y | X, T_k)
    effective_sample_size_, beta_ : the ``m`` used and ``m / N``
    operating_curve_ : dict with ``m``, ``accuracy``, ``log_predictive`` (mean
        per row), ``on`` ("validation" or "training") and ``n_train``
    trees_ : Tree (K, L, C)  node values are the leaf predictives
    prior_trees_ : PriorForest
    truncated_mass_ : float  prior mass of trees larger than ``max_internal``
    idata_ : arviz.InferenceData
    """

    _task = "classification"
    _criteria = ("log_predictive", "accuracy")

    def __init__(self, n_estimators=1000, split_prob=0.475, effective_sample_size=5, alpha=1.0, *,
                 max_internal=511, validation_fraction=0.2, auto_criterion="log_predictive",
                 random_state=None):
        self.n_estimators = n_estimators
        self.split_prob = split_prob
        self.effective_sample_size = effective_sample_size
        self.alpha = alpha
        self.max_internal = max_internal
        self.validation_fraction = validation_fraction
        self.auto_criterion = auto_criterion
        self.random_state = random_state

    def _check_params(self, n):
        a = self.alpha
        try:
            af = float(a)
        except (TypeError, ValueError):
            raise ValueError(f"alpha must be a positive number, got {a!r}") from None
        if not np.isfinite(af) or af <= 0:
            raise ValueError(f"alpha must be a positive number (Dirichlet concentration), got {a!r}")
        super()._check_params(n)

    def _setup_leaves(self, yv):
        self.n_classes_ = int(len(self.classes_))

    def _output_names(self):
        return [str(c) for c in self.classes_]

    def _weigh(self, prior, codes, yv, n_bins):
        skel = imp.tree_skeleton(prior, codes, n_bins, self.n_classes_)
        pc, py, w = _padded(codes, np.asarray(yv, np.int32))
        tree, lw = imp.fit_classification(skel, jnp.asarray(pc), jnp.asarray(py), float(self.alpha),
                                          self.n_classes_, jnp.asarray(w))
        return tree, None, lw

    def _curve(self, tree, state, lw, codes, yv, n_train, m_grid):
        pc, py, w = _padded(codes, np.asarray(yv, np.int32))
        probs = imp.tree_class_probs(tree, jnp.asarray(pc))
        M = len(m_grid)
        acc, lp = imp.operating_curve_classification(lw, probs, jnp.asarray(py), jnp.asarray(_padded_grid(m_grid),
                                                     lw.dtype), float(n_train), jnp.asarray(w))
        return {"m": np.asarray(m_grid), "accuracy": np.asarray(acc)[:M], "log_predictive": np.asarray(lp)[:M],
                "n_train": int(n_train)}

    def _tree_probs(self, X):
        codes = self._codes(X)
        n = codes.shape[0]
        pc, _ = _padded(codes)
        return imp.tree_class_probs(self.trees_, jnp.asarray(pc))[:, :n]

    def predict_proba(self, X, method: str = "safe") -> np.ndarray:
        """Class probabilities ``sum_k w_k^beta p(y | T_k, x) / sum_k w_k^beta``: float (n, C).

        ``method``: ``"safe"`` (beta = m / N), ``"bma"`` (beta = 1) or ``"best"`` (the single best tree).
        """
        self._check_fitted()
        lw = self._log_w(method)
        probs = self._tree_probs(X)
        return np.asarray(jnp.einsum("k,knc->nc", jnp.exp(lw), probs))

    def predict(self, X, method: str = "safe") -> np.ndarray:
        """Most probable class of each row: (n,) labels."""
        return self._labels(self.predict_proba(X, method))

    def predict_log_proba(self, X, method: str = "safe") -> np.ndarray:
        return np.log(self.predict_proba(X, method))

    def log_predictive(self, X, y, method: str = "safe") -> float:
        """Mean log predictive probability of the labels ``y`` of rows ``X``."""
        p = self.predict_proba(X, method)
        codes = self._encode_labels(y, p.shape[0])
        return float(np.mean(np.log(p[np.arange(p.shape[0]), codes])))

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
        out = self._curve(self.trees_, None, jnp.asarray(self.log_weights_), codes, yc, self.n_train_, m_grid)
        out["on"] = "given"
        return out


class SafeBayesForestRegressor(_SafeBayesBase, RegressorBase):
    """Safe-Bayesian random forest regressor: prior trees with Normal-inverse-gamma leaves.

    As :class:`SafeBayesForestClassifier` with the Dirichlet-multinomial leaf
    replaced by the conjugate Normal-inverse-gamma model (``leaf_prior``;
    default :func:`bayestrees.leaves.default_nig_prior` of the training
    targets).  Predictions are the tempered-weight mixture of per-tree
    Student-t predictives; :meth:`predict` returns its mean.

    Parameters
    ----------
    n_estimators, split_prob, effective_sample_size, max_internal, validation_fraction, random_state
        As for the classifier.
    leaf_prior : NIGPrior or None
    auto_criterion : "log_predictive" or "rmse", default "log_predictive"

    Attributes
    ----------
    log_weights_, effective_sample_size_, beta_, trees_, prior_trees_, truncated_mass_, idata_
        As for the classifier.
    operating_curve_ : dict with ``m``, ``rmse``, ``log_predictive`` (mean log density), ``on``, ``n_train``
    leaf_prior_ : NIGPrior used
    """

    _task = "regression"
    _criteria = ("log_predictive", "rmse")

    def __init__(self, n_estimators=1000, split_prob=0.475, effective_sample_size=5, *, leaf_prior=None,
                 max_internal=511, validation_fraction=0.2, auto_criterion="log_predictive", random_state=None):
        self.n_estimators = n_estimators
        self.split_prob = split_prob
        self.effective_sample_size = effective_sample_size
        self.leaf_prior = leaf_prior
        self.max_internal = max_internal
        self.validation_fraction = validation_fraction
        self.auto_criterion = auto_criterion
        self.random_state = random_state

    def _setup_leaves(self, yv):
        prior = default_nig_prior(yv) if self.leaf_prior is None else NIGPrior(*self.leaf_prior)
        if prior.kappa0 <= 0 or prior.a0 <= 0 or prior.b0 <= 0:
            raise ValueError(f"leaf_prior needs kappa0, a0, b0 > 0, got {prior}")
        self.leaf_prior_ = prior

    def _output_names(self):
        return None

    def _weigh(self, prior, codes, yv, n_bins):
        skel = imp.tree_skeleton(prior, codes, n_bins, 1)
        dtype = jnp.zeros(()).dtype
        p = NIGPrior(*[jnp.asarray(v, dtype) for v in self.leaf_prior_])
        pc, py, w = _padded(codes, np.asarray(yv, np.float64))
        tree, stats, lw = imp.fit_regression(skel, jnp.asarray(pc), jnp.asarray(py, dtype), p, jnp.asarray(w, dtype))
        return tree, stats, lw

    def _t_params(self, state, codes):
        dtype = jnp.zeros(()).dtype
        p = NIGPrior(*[jnp.asarray(v, dtype) for v in self.leaf_prior_])
        n = codes.shape[0]
        pc, _ = _padded(codes)
        leaves = imp.apply_trees(self.trees_ if state is None else state[0], jnp.asarray(pc))
        stats = self._leaf_state if state is None else state[1]
        mean, scale2, df = imp.tree_regression_predictive(stats, p, leaves)
        return mean[:, :n], scale2[:, :n], df[:, :n]

    def _curve(self, tree, state, lw, codes, yv, n_train, m_grid):
        n = codes.shape[0]
        size = imp.bucket_size(n)
        mean, scale2, df = self._t_params((tree, state), codes)
        pad = lambda a, v: jnp.asarray(imp.pad_rows(np.asarray(a).T, size, v).T)  # noqa: E731
        dtype = lw.dtype
        w = imp.pad_rows(np.ones(n), size, 0.0)
        M = len(m_grid)
        y_pad = jnp.asarray(imp.pad_rows(np.asarray(yv, float), size), dtype)
        rmse, lp = imp.operating_curve_regression(
            lw, pad(mean, 0.0), pad(scale2, 1.0), pad(df, 1.0), y_pad,
            jnp.asarray(_padded_grid(m_grid), dtype), float(n_train), jnp.asarray(w, dtype))
        return {"m": np.asarray(m_grid), "rmse": np.asarray(rmse)[:M], "log_predictive": np.asarray(lp)[:M],
                "n_train": int(n_train)}

    def predict(self, X, method: str = "safe") -> np.ndarray:
        """Predictive mean ``sum_k w_k^beta E[y | T_k, x] / sum_k w_k^beta``: float (n,)."""
        self._check_fitted()
        lw = self._log_w(method)
        mean, _, _ = self._t_params(None, self._codes(X))
        return np.asarray(jnp.einsum("k,kn->n", jnp.exp(lw), mean))

    def log_predictive(self, X, y, method: str = "safe") -> float:
        """Mean log predictive density of ``y`` at rows ``X`` under the Student-t mixture."""
        self._check_fitted()
        lw = self._log_w(method)
        mean, scale2, df = self._t_params(None, self._codes(X))
        yv = jnp.asarray(np.asarray(y, float), mean.dtype)
        if yv.shape != (mean.shape[1],):
            raise ValueError(f"y must have shape ({mean.shape[1]},), got {tuple(yv.shape)}")
        lpdf = imp.student_t_logpdf(yv[None, :], mean, scale2, df)
        return float(jnp.mean(jax.scipy.special.logsumexp(lw[:, None] + lpdf, axis=0)))

    def operating_curve(self, X, y, m_grid=None) -> dict:
        """RMSE and mean log predictive density on ``(X, y)`` against ``m``."""
        self._check_fitted()
        m_grid = imp.default_m_grid(self.n_train_) if m_grid is None else np.asarray(m_grid)
        codes = self._codes(X)
        yv = np.asarray(y, float)
        if yv.shape != (codes.shape[0],):
            raise ValueError(f"y must have shape ({codes.shape[0]},), got {yv.shape}")
        out = self._curve(self.trees_, self._leaf_state, jnp.asarray(self.log_weights_), codes, yv,
                          self.n_train_, m_grid)
        out["on"] = "given"
        return out
