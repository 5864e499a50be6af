"""scikit-learn style safe-Bayesian random forests (Quadrianto & Ghahramani 2015).

>>> clf = bt.SafeBayesForestClassifier(n_estimators=1000, random_state=0).fit(X, y)
>>> clf.predict_proba(X_test)              # w_k^beta-weighted, beta = m / N (m chosen by cross-validation)
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

The effective sample size ``m`` (``beta = m / N``) is chosen by default
(``effective_sample_size="auto"``) by ``cv``-fold cross-validation on the
training rows over ``m = 1..N`` (``m = N`` is BMA) and beyond ``N`` up to
``1000 N`` (towards the single best tree); see :meth:`_SafeBayesBase.fit`.

The regressor standardises the targets internally, ``z = (y - loc) / scale``
(``loc``, ``scale`` the mean and standard deviation of the training targets),
fits the Normal-inverse-gamma leaves on ``z`` with the leaf prior transformed
accordingly (``m0 -> (m0 - loc) / scale``, ``b0 -> b0 / scale^2``), and maps
predictions, intervals, log densities (``- log scale``, the Jacobian) and log
weights (``- N log scale``) back, so the fit does not depend on the units of
``y`` and targets of any finite magnitude (e.g. ``1e30``) stay finite in
float32.
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


def cached_prior_forest(key, n_trees: int, n_features: int, split_prob: float, max_internal: int,
                        root_splits: bool = True) -> PriorForest:
    """:func:`sample_prior_forest`, memoised on the key data and the arguments.

    The prior trees never depend on the data, so repeated fits with the same
    seed (cross-validation, repeated splits) reuse them.
    """
    kd = tuple(np.asarray(jax.random.key_data(key)).ravel().tolist())
    ck = (kd, int(n_trees), int(n_features), float(split_prob), int(max_internal), bool(root_splits))
    if ck in _PRIOR_CACHE:
        _PRIOR_CACHE.move_to_end(ck)
        return _PRIOR_CACHE[ck]
    pf = sample_prior_forest(key, n_trees, n_features, split_prob, max_internal, bool(root_splits))
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


def _location_scale(y) -> tuple[float, float]:
    """Mean and standard deviation of ``y`` (float64), computed without overflow.

    ``y`` is divided by ``max |y|`` first, so targets near the float64 limit keep a
    finite variance.  A constant ``y`` gets the scale ``max |y|`` (1 when ``y == 0``).
    """
    y = np.asarray(y, np.float64)
    big = float(np.max(np.abs(y))) if y.size else 0.0
    if not big > 0:
        return 0.0, 1.0
    u = y / big
    loc = big * float(np.mean(u))
    sd = big * float(np.std(u))
    if not (np.isfinite(sd) and sd > 0):
        sd = big
    return loc, sd


def _weighted_quantiles(values, weights, qs):
    """Weighted quantiles along axis 0: the smallest value whose cumulative weight reaches ``q``.

    Parameters
    ----------
    values : float (K, n);  weights : float (K,) summing to 1;  qs : sequence of floats in (0, 1)

    Returns
    -------
    float (len(qs), n)
    """
    order = np.argsort(values, axis=0)
    v = np.take_along_axis(values, order, axis=0)
    cw = np.cumsum(np.asarray(weights, np.float64)[order], axis=0)
    cw /= cw[-1:]
    out = []
    for q in qs:
        idx = np.minimum(np.sum(cw < q - 1e-12, axis=0), v.shape[0] - 1)
        out.append(np.take_along_axis(v, idx[None, :], axis=0)[0])
    return np.stack(out)


class _SafeBayesBase:
    """Shared fitting logic; subclasses provide the leaf model."""

    _task = ""

    # -- parameter checks -------------------------------------------------------------------------
    def _check_params(self, n: int):
        if not isinstance(self.n_estimators, (int, np.integer)) or int(self.n_estimators) < 1:
            raise ValueError(f"n_estimators must be a positive integer, got {self.n_estimators!r}")
        _check_split_prob(self.split_prob)
        if not isinstance(self.root_splits, (bool, np.bool_)):
            raise ValueError(f"root_splits must be True or False, got {self.root_splits!r}")
        low = 1 if self.root_splits else 0
        if not isinstance(self.max_internal, (int, np.integer)) or int(self.max_internal) < low:
            raise ValueError(f"max_internal must be an integer >= {low} (root_splits={bool(self.root_splits)}), "
                             f"got {self.max_internal!r}")
        vf = self.validation_fraction
        if vf is not None and not (isinstance(vf, (int, float, np.floating)) and 0.0 <= float(vf) < 1.0):
            raise ValueError(f"validation_fraction must be None or in [0, 1), got {vf!r}")
        if not isinstance(self.cv, (int, np.integer)) or isinstance(self.cv, bool) or int(self.cv) < 2:
            raise ValueError(f"cv must be an integer >= 2 (number of cross-validation folds), got {self.cv!r}")
        m = self.effective_sample_size
        msg = (f"effective_sample_size must be a positive number (m = N is Bayesian model averaging, m > N "
               f"sharpens towards the best tree) or 'auto', got {m!r}")
        if isinstance(m, str):
            if m != "auto":
                raise ValueError(msg)
        else:
            try:
                mf = float(m)
            except (TypeError, ValueError):
                raise ValueError(msg) from None
            if not np.isfinite(mf) or mf <= 0:
                raise ValueError(msg)
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

        Notes
        -----
        ``effective_sample_size="auto"`` chooses ``m`` on an operating curve of
        held-out rows of the training data only:

        - default (``validation_fraction=None``): ``cv``-fold cross-validation
          (stratified by class for the classifier).  For each fold the prior trees
          are weighed on the other folds (``N_f`` rows, ``beta = m / N_f``) and the
          held-out rows are scored; the fold curves are pooled over all ``N``
          rows (:func:`bayestrees.inference.importance.pool_curves`);
        - ``validation_fraction`` in ``(0, 1)``: one random hold-out split of that
          size (noisy on small data: 28 rows on the paper's wine set);
        - ``validation_fraction=0``: the in-sample training curve.

        The candidates are :func:`bayestrees.inference.importance.auto_m_grid`
        (``m = 1..N`` and up to ``1000 N``), and ``m`` maximises
        ``auto_criterion`` (ties: larger mean log predictive, then smaller ``m``).
        The final weights use all rows with the chosen ``m``, an effective number
        of rows: ``beta = m / N`` with the full ``N``.
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
                                    int(self.max_internal), bool(self.root_splits))
        self.prior_trees_ = prior
        self.truncated_mass_ = truncated_mass(self.split_prob, self.max_internal, bool(self.root_splits))
        n_bins = self.binner_.n_bins_
        self._setup_leaves(yv)
        yi = self._internal_y(yv)
        m = self.effective_sample_size
        if m == "auto":
            curve = self._held_out_curve(prior, codes, yi, n_bins, key_split)
            tree, state, lw = self._weigh(prior, codes, yi, n_bins)
            if curve is None:
                curve = self._curve(tree, state, lw, codes, yi, n, imp.auto_m_grid(n))
                curve["on"] = "training"
            m_val = float(self._choose(curve))
        else:
            tree, state, lw = self._weigh(prior, codes, yi, n_bins)
            curve = None  # the training-set curve is computed on first access of operating_curve_
            m_val = float(m)
        self.trees_ = self._user_tree(tree)
        self._fit_tree_std = None if self.trees_ is tree else tree  # regression: node values of the standardised y
        self._leaf_state = state
        self._fit_log_weights = np.asarray(lw)
        self.log_weights_ = self._user_log_weights(np.asarray(lw, np.float64), n)
        self.effective_sample_size_ = m_val
        self.beta_ = m_val / n
        self._curve_cache = curve
        self._train = (codes, yi)
        self._idata = None
        return self

    def _held_out_curve(self, prior, codes, yi, n_bins, key):
        """The operating curve of ``effective_sample_size="auto"`` on held-out training rows (None: in-sample)."""
        n = codes.shape[0]
        vf = self.validation_fraction
        if vf is not None:
            n_val = int(round(float(vf) * n))
            if not (float(vf) > 0 and 1 <= n_val <= n - 1):
                return None
            perm = np.asarray(jax.random.permutation(key, n))
            folds = [(np.sort(perm[n_val:]), np.sort(perm[:n_val]))]
            on = "validation"
        else:
            k = min(int(self.cv), n)
            if k < 2:
                return None
            fold_of = self._fold_ids(yi, k, key)
            folds = [(np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)) for f in range(k)]
            on = "cross-validation"
        grid = imp.auto_m_grid(n)
        curves = []
        for fit_rows, val_rows in folds:
            t, st, lw = self._weigh(prior, codes[fit_rows], yi[fit_rows], n_bins)
            curves.append(self._curve(t, st, lw, codes[val_rows], yi[val_rows], len(fit_rows), grid))
        curve = imp.pool_curves(curves, [len(v) for _, v in folds])
        curve.update(on=on, n_train=int(n) if on == "cross-validation" else len(folds[0][0]), n_folds=len(folds))
        return curve

    def _fold_ids(self, yi, k: int, key) -> np.ndarray:
        """Fold of each row (int (n,)): a random permutation dealt round-robin into ``k`` folds."""
        n = len(yi)
        perm = np.asarray(jax.random.permutation(key, n))
        fold = np.empty(n, np.int64)
        fold[perm] = np.arange(n) % k
        return fold

    def _internal_y(self, yv):
        return yv

    @property
    def _fit_tree(self):
        """The weighed trees as fitted (node values on the internal scale)."""
        t = getattr(self, "_fit_tree_std", None)
        return self.trees_ if t is None else t

    def _user_tree(self, tree):
        return tree

    def _user_log_weights(self, lw, n):
        return lw

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
            codes, yi = self._train
            curve = self._curve(self._fit_tree, self._leaf_state, jnp.asarray(self._fit_log_weights), codes, yi,
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

    def _lw_fit(self):
        """Log weights on the scale they were computed (equal to ``log_weights_`` up to a constant)."""
        return jnp.asarray(getattr(self, "_fit_log_weights", self.log_weights_))

    def tree_weights(self, method: str = "safe") -> np.ndarray:
        """Normalised weights of the trees, float (K,).

        ``"safe"``: ``w_k^beta / sum w^beta`` with ``beta = m / N``;
        ``"bma"``: ``beta = 1``; ``"best"``: 1 on the tree with the largest weight.
        """
        self._check_fitted()
        self._check_method(method)
        lw = self._lw_fit()
        if method == "best":
            w = np.zeros(lw.shape[0])
            w[int(np.argmax(np.asarray(lw)))] = 1.0
            return w
        beta = self.beta_ if method == "safe" else 1.0
        return np.asarray(jnp.exp(imp.tempered_log_weights(lw, beta)))

    def _log_w(self, method):
        self._check_method(method)
        lw = self._lw_fit()
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


_COMMON_PARAMS_DOC = """
    n_estimators : int, default 1000
        Number of prior trees ``K``.
    split_prob : float in (0, 0.5), default 0.475
        Probability ``lam`` that a node of the code string is internal.
    effective_sample_size : float > 0 or "auto", default "auto"
        ``m`` (``beta = m / N``); ``m = N`` is Bayesian model averaging and
        ``m > N`` sharpens the weights towards the single best tree.  ``"auto"``
        chooses ``m`` by ``cv``-fold cross-validation on the training rows (see
        :meth:`fit`).  The paper uses ``m = 5``; on imbalanced two-class data that
        gives majority-class predictions (docs/safebayes.md).
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
    random_state : int, numpy Generator, JAX key or None
"""


class SafeBayesForestClassifier(_SafeBayesBase, ClassifierBase):
    __doc__ = """Safe-Bayesian random forest classifier (Quadrianto & Ghahramani 2015).

    ``n_estimators`` trees are drawn from the data-independent code-string
    prior, weighted by their Dirichlet-multinomial marginal likelihood
    ``w_k = p(Y | X, T_k)`` and combined with the tempered weights
    ``w_k^beta``, ``beta = m / N``.

    Parameters
    ----------""" + _COMMON_PARAMS_DOC + """    alpha : float > 0, default 1.0
        Symmetric Dirichlet concentration of the leaves.
    auto_criterion : "accuracy" or "log_predictive", default "accuracy"
        What ``"auto"`` maximises on the held-out curve: accuracy (what
        :meth:`predict` is scored by; ties broken by the mean log predictive,
        then the smallest ``m``) or the mean log predictive probability.

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
    idata_ : arviz.InferenceData
    """

    _task = "classification"
    _criteria = ("accuracy", "log_predictive")

    def __init__(self, n_estimators=1000, split_prob=0.475, effective_sample_size="auto", alpha=1.0, *,
                 root_splits=True, max_internal=511, cv=5, validation_fraction=None, auto_criterion="accuracy",
                 random_state=None):
        self.n_estimators = n_estimators
        self.split_prob = split_prob
        self.effective_sample_size = effective_sample_size
        self.alpha = alpha
        self.root_splits = root_splits
        self.max_internal = max_internal
        self.cv = cv
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

    def _fold_ids(self, yi, k: int, key) -> np.ndarray:
        """Stratified folds: rows in random order, sorted by class (stably), dealt round-robin."""
        n = len(yi)
        perm = np.asarray(jax.random.permutation(key, n))
        order = perm[np.argsort(np.asarray(yi)[perm], kind="stable")]
        fold = np.empty(n, np.int64)
        fold[order] = np.arange(n) % k
        return fold

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
        """Natural log of :meth:`predict_proba`: float (n, C)."""
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
        out = self._curve(self.trees_, None, self._lw_fit(), codes, yc, self.n_train_, m_grid)
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
    """

    _task = "regression"
    _criteria = ("log_predictive", "rmse")

    def __init__(self, n_estimators=1000, split_prob=0.475, effective_sample_size="auto", *, leaf_prior=None,
                 root_splits=True, max_internal=511, cv=5, validation_fraction=None,
                 auto_criterion="log_predictive", random_state=None):
        self.n_estimators = n_estimators
        self.split_prob = split_prob
        self.effective_sample_size = effective_sample_size
        self.leaf_prior = leaf_prior
        self.root_splits = root_splits
        self.max_internal = max_internal
        self.cv = cv
        self.validation_fraction = validation_fraction
        self.auto_criterion = auto_criterion
        self.random_state = random_state

    # -- standardisation --------------------------------------------------------------------------
    def _setup_leaves(self, yv):
        loc, scale = _location_scale(yv)
        self.y_loc_, self.y_scale_ = loc, scale
        if self.leaf_prior is None:
            pz = default_nig_prior((np.asarray(yv, np.float64) - loc) / scale)
            user = NIGPrior(loc + scale * pz.m0, pz.kappa0, pz.a0, pz.b0 * scale * scale)
        else:
            user = NIGPrior(*[float(v) for v in self.leaf_prior])
            if not all(np.isfinite(v) for v in user) or user.kappa0 <= 0 or user.a0 <= 0 or user.b0 <= 0:
                raise ValueError(f"leaf_prior needs a finite m0 and kappa0, a0, b0 > 0, got {user}")
            pz = NIGPrior((user.m0 - loc) / scale, user.kappa0, user.a0, user.b0 / (scale * scale))
            if not (np.isfinite(pz.m0) and np.isfinite(pz.b0) and pz.b0 > 0):
                raise ValueError(f"leaf_prior {user} is not representable on the standardised scale "
                                 f"(targets: mean {loc:.3g}, sd {scale:.3g})")
        self.leaf_prior_ = user
        self._leaf_prior_std = pz

    def _internal_y(self, yv):
        return (np.asarray(yv, np.float64) - self.y_loc_) / self.y_scale_

    def _to_internal(self, y, n):
        y = np.asarray(y, np.float64)
        if y.shape != (n,):
            raise ValueError(f"y must have shape ({n},), got {y.shape}")
        return (y - self.y_loc_) / self.y_scale_

    def _user_tree(self, tree):
        return tree._replace(value=tree.value * self.y_scale_ + self.y_loc_)

    def _user_log_weights(self, lw, n):
        return lw - n * np.log(self.y_scale_)

    def _user_curve(self, curve):
        out = dict(curve)
        out["rmse"] = np.asarray(curve["rmse"], np.float64) * self.y_scale_
        out["log_predictive"] = np.asarray(curve["log_predictive"], np.float64) - np.log(self.y_scale_)
        return out

    def _output_names(self):
        return None

    def _nig(self):
        dtype = jnp.zeros(()).dtype
        return NIGPrior(*[jnp.asarray(v, dtype) for v in self._leaf_prior_std])

    def _weigh(self, prior, codes, yv, n_bins):
        skel = imp.tree_skeleton(prior, codes, n_bins, 1)
        dtype = jnp.zeros(()).dtype
        pc, py, w = _padded(codes, np.asarray(yv, np.float64))
        tree, stats, lw = imp.fit_regression(skel, jnp.asarray(pc), jnp.asarray(py, dtype), self._nig(),
                                             jnp.asarray(w, dtype))
        return tree, stats, lw

    def _t_params_std(self, state, codes):
        """Per-tree Student-t predictives of the standardised target; each float (K, n)."""
        n = codes.shape[0]
        pc, _ = _padded(codes)
        leaves = imp.apply_trees(self._fit_tree if state is None else state[0], jnp.asarray(pc))
        stats = self._leaf_state if state is None else state[1]
        mean, scale2, df = imp.tree_regression_predictive(stats, self._nig(), leaves)
        return mean[:, :n], scale2[:, :n], df[:, :n]

    def _t_params(self, state, codes):
        """Per-tree Student-t predictives on the scale of ``y``: location, squared scale, df; float64 (K, n)."""
        mean, scale2, df = self._t_params_std(state, codes)
        s = self.y_scale_
        return (self.y_loc_ + s * np.asarray(mean, np.float64), np.asarray(scale2, np.float64) * s * s,
                np.asarray(df, np.float64))

    def _curve(self, tree, state, lw, codes, yv, n_train, m_grid):
        """Operating curve on rows ``codes`` with standardised targets ``yv``, reported on the scale of ``y``."""
        n = codes.shape[0]
        size = imp.bucket_size(n)
        mean, scale2, df = self._t_params_std((tree, state), codes)
        pad = lambda a, v: jnp.asarray(imp.pad_rows(np.asarray(a).T, size, v).T)  # noqa: E731
        dtype = lw.dtype
        w = imp.pad_rows(np.ones(n), size, 0.0)
        M = len(m_grid)
        y_pad = jnp.asarray(imp.pad_rows(np.asarray(yv, float), size), dtype)
        rmse, lp = imp.operating_curve_regression(
            lw, pad(mean, 0.0), pad(scale2, 1.0), pad(df, 1.0), y_pad,
            jnp.asarray(_padded_grid(m_grid), dtype), float(n_train), jnp.asarray(w, dtype))
        return self._user_curve({"m": np.asarray(m_grid), "rmse": np.asarray(rmse)[:M],
                                 "log_predictive": np.asarray(lp)[:M], "n_train": int(n_train)})

    # -- predictions ------------------------------------------------------------------------------
    def predict(self, X, method: str = "safe") -> np.ndarray:
        """Predictive mean ``sum_k w_k^beta E[y | T_k, x] / sum_k w_k^beta``: float64 (n,)."""
        self._check_fitted()
        lw = self._log_w(method)
        mean, _, _ = self._t_params_std(None, self._codes(X))
        z = np.asarray(jnp.einsum("k,kn->n", jnp.exp(lw), mean), np.float64)
        return self.y_loc_ + self.y_scale_ * z

    def log_predictive(self, X, y, method: str = "safe") -> float:
        """Mean log predictive density of ``y`` at rows ``X`` under the Student-t mixture.

        Computed on the standardised scale and mapped back with the Jacobian:
        ``log p(y) = log p(z) - log y_scale_``.
        """
        self._check_fitted()
        lw = self._log_w(method)
        mean, scale2, df = self._t_params_std(None, self._codes(X))
        z = jnp.asarray(self._to_internal(y, mean.shape[1]), mean.dtype)
        lpdf = imp.student_t_logpdf(z[None, :], mean, scale2, df)
        lp = float(jnp.mean(jax.scipy.special.logsumexp(lw[:, None] + lpdf, axis=0)))
        return lp - float(np.log(self.y_scale_))

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

        Notes
        -----
        Both are computed for the standardised target and mapped back by
        ``y = y_loc_ + y_scale_ z`` (quantiles commute with increasing affine maps).
        """
        self._check_fitted()
        if not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1), got {prob}")
        if kind not in ("mean", "predictive"):
            raise ValueError(f"kind must be 'mean' or 'predictive', got {kind!r}")
        w = np.exp(np.asarray(self._log_w(method), np.float64))
        w = w / w.sum()
        mean, scale2, df = (np.asarray(a, np.float64) for a in self._t_params_std(None, self._codes(X)))
        qs = ((1 - prob) / 2, (1 + prob) / 2)
        if kind == "mean":
            qz = _weighted_quantiles(mean, w, qs)
        else:
            qz = np.stack([_mixture_t_quantile(mean, np.sqrt(scale2), df, w, q) for q in qs])
        return (self.y_loc_ + self.y_scale_ * qz).T

    def operating_curve(self, X, y, m_grid=None) -> dict:
        """RMSE and mean log predictive density on ``(X, y)`` against ``m`` (on the scale of ``y``)."""
        self._check_fitted()
        m_grid = imp.default_m_grid(self.n_train_) if m_grid is None else np.asarray(m_grid)
        codes = self._codes(X)
        z = self._to_internal(y, codes.shape[0])
        out = self._curve(self._fit_tree, self._leaf_state, self._lw_fit(), codes, z, self.n_train_, m_grid)
        out["on"] = "given"
        return out


def _mixture_t_quantile(loc, scale, df, w, q, tol: float = 1e-9):
    """The ``q``-quantile of ``sum_k w_k t_{df_k}(loc_k, scale_k)`` per column, by bisection.

    Parameters
    ----------
    loc, scale, df : float (K, n);  w : float (K,) summing to 1;  q : float in (0, 1)

    Returns
    -------
    float (n,)

    Notes
    -----
    The mixture CDF ``F = sum_k w_k F_k`` is increasing, and at the smallest
    (largest) component quantile ``min_k Q_k(q)`` (``max_k``) every ``F_k`` is
    ``<= q`` (``>= q``), so the root lies between them.  Trees with weight below
    ``1e-12`` are dropped (CDF error below ``K 1e-12``).
    """
    from scipy.special import stdtr, stdtrit

    keep = w > 1e-12
    loc, scale, df, w = loc[keep], scale[keep], df[keep], w[keep] / w[keep].sum()
    comp = loc + scale * stdtrit(df, q)
    lo, hi = comp.min(0), comp.max(0)
    width = np.maximum(hi - lo, 1e-300)
    for _ in range(int(np.ceil(np.log2(np.max(width) / (tol * np.min(scale)) + 2))) + 1):
        mid = 0.5 * (lo + hi)
        cdf = np.einsum("k,kn->n", w, stdtr(df, (mid[None, :] - loc) / scale))
        below = cdf < q
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return 0.5 * (lo + hi)
