"""scikit-learn style BCART-PCFG estimators (exact Bayesian decision trees).

>>> clf = bt.PCFGTreeClassifier(log_phi=2.0, leaf_concentration=1.0, max_bins=10).fit(X, y)
>>> clf.predict(X_test)                     # MAP tree
>>> clf.set_params(predict_with="posterior").predict_proba(X_test)   # exact average over all trees
>>> clf.map_tree_, clf.log_evidence_, clf.idata_

Both estimators call :func:`bayestrees.inference.pcfg.fit.fit_pcfg` (as
``bt.PCFGTree`` does) and write ``idata_`` by the posterior contract
(:func:`~bayestrees.inference.pcfg.fit.pcfg_inferencedata`): ``draws``
exact trees, each with its leaf parameters drawn from their posterior given the
tree; ``posterior["mu"]`` is those parameters at the training rows,
``log_likelihood["y"]`` the pointwise log-likelihood (so ``bt.loo`` works),
``sample_stats["lp"]`` the log posterior probability of each tree.

Missing values are rejected (``ValueError``): the grammar's symbols are boxes of
binned codes, and this family does not give missing codes a place in them;
impute first.  Constant features are rejected too (they cannot split and only
waste memory); drop them.
"""
from __future__ import annotations

import numpy as np

from ..inference.pcfg import FAMILY
from ..inference.pcfg.fit import phi_to_log
from ..inference.pcfg.structure import DEFAULT_MEMORY_BUDGET
from ..tree import index_tree, predict as tree_predict
from .base import RENAMED, ClassifierBase, FamilyEstimator, RegressorBase, parameters_doc

__all__ = ["PCFGTreeClassifier", "PCFGTreeRegressor"]

_PREDICT_WITH = ("map", "posterior", "samples")


class _PCFGBase(FamilyEstimator):
    _family = FAMILY

    _renamed = {"n_samples": "draws", "alpha": "leaf_concentration"}

    def _config_params(self, params: dict) -> dict:
        """The config's parameters: ``phi`` (when given) sets ``log_phi``."""
        if self.predict_with not in _PREDICT_WITH:
            raise ValueError(f"predict_with must be one of {_PREDICT_WITH}, got {self.predict_with!r}")
        out = super()._config_params(params)
        if params.get("phi") is not None:
            out["log_phi"] = phi_to_log(params["phi"])
        return out

    def _fitted(self) -> None:
        result = self.result_
        self.posterior_ = result.posterior
        self.map_tree_, self.map_log_prob_ = result.map_tree, result.map_log_prob
        self.log_evidence_ = result.log_evidence
        # "samples" predicts with the sampled trees' leaf posterior predictives (leaf parameters integrated out)
        self._sample_trees_ = index_tree(result.trees, 0)

    def _values(self, X):
        codes = self._codes_checked(X)
        if self.predict_with == "map":
            return np.asarray(tree_predict(self.map_tree_, codes))
        if self.predict_with == "posterior":
            return self.posterior_.predict_exact(codes)
        return np.asarray(tree_predict(self._sample_trees_, codes)).mean(0)

    def root_split_posterior(self) -> list[tuple[str, float]]:
        """Exact posterior probability of each root split (and of a root leaf), largest first.

        Returns
        -------
        list of (str, float)
            ``(description, probability)``; descriptions read ``"feature <= value"``
            (or ``"leaf"``).  Probabilities sum to 1.
        """
        self._check_fitted()
        p0, ps = self.posterior_.root_splits()
        st = self.posterior_.structure
        out = [("leaf", p0)]
        for k in np.flatnonzero(ps > 0):
            fb = self.binner_.features_[int(st.slot_feature[k])]
            out.append((f"{fb.name} {fb.threshold_label(int(st.slot_threshold[k]))}", float(ps[k])))
        return sorted(out, key=lambda t: -t[1])

    def n_leaves_posterior(self, max_leaves: int = 32) -> np.ndarray:
        """Exact posterior probabilities of 1..max_leaves leaves, shape ``(max_leaves,)``.

        The remaining mass (``1 - sum``) is on trees with more leaves.
        """
        self._check_fitted()
        return self.posterior_.n_leaves_distribution(max_leaves)

    def _codes_checked(self, X):
        return self._codes(X).astype(np.int32)


class PCFGTreeClassifier(_PCFGBase, ClassifierBase):
    """Exact Bayesian decision tree classifier (BCART-PCFG, Dirichlet leaves).

    Parameters
    ----------
    log_phi : float, default 2.0
        log of the prior's leaf penalty: ``Pr[T] ∝ phi^-leaves``.
    leaf_concentration : float or array of shape (n_classes,), default 1.0
        Dirichlet concentration of the leaves (> 0).
    max_bins : int, default 10
        Bins per feature (exact binning when a feature has at most this many values).
    predict_with : {"map", "posterior", "samples"}, default "map"
        MAP tree, exact posterior average over all trees, or average over the
        ``draws`` sampled trees (each tree's leaves predict their posterior
        predictive, the leaf parameters integrated out).
    draws : int, default 100
        Exact posterior trees stored in ``idata_`` (with drawn leaf parameters).
    method : {"box", "row"}, default "box"
        Dense programme over boxes, or over reachable row sets (binary or
        high-dimensional data).
    memory_budget : int or None, default 4 GB
        Bytes the dense programme may use; refused with ``ValueError`` beforehand.
    phi : float, optional
        Give phi itself (> 0) instead of ``log_phi``.
    dtype : {"float32", "float64"}, default "float32"
        Precision of the exact programme (evidence, sampling, MAP, exact
        predictive). float32 is fast; float64 is for exact comparisons and
        needs ``jax.config.update("jax_enable_x64", True)`` before any array
        is made (``ValueError`` at ``fit`` otherwise).
    random_state : int, optional
    alpha, n_samples
        The former names of ``leaf_concentration`` and ``draws`` (``FutureWarning``; removed
        in the next release).

    Attributes
    ----------
    map_tree_ : Tree
        The MAP tree (leaf values: posterior predictive class probabilities).
    map_log_prob_ : float
        Its log posterior probability.
    log_evidence_ : float
        ``log p(y | X)``.
    idata_ : arviz.InferenceData
        The posterior contract (module docstring); ``posterior["mu"]`` has dims
        ``(chain, draw, obs, class)``.
    posterior_ : PCFGPosterior
    classes_ : array

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> labels = np.where(X[:, 0] > 0.5, "high", "low")
    >>> clf = bt.PCFGTreeClassifier(log_phi=2.0, max_bins=4, draws=10, random_state=0).fit(X, labels)
    >>> clf.predict(X[:5]).shape                           # by the MAP tree
    (5,)
    >>> clf.set_params(predict_with="posterior").predict_proba(X[:5]).shape   # exact average over all trees
    (5, 2)
    >>> type(clf.log_evidence_)                            # log p(y | X)
    <class 'float'>
    >>> clf.n_leaves_posterior(8).shape                    # Pr[1 leaf], ..., Pr[8 leaves]
    (8,)
    >>> clf.idata_.posterior["mu"].shape                   # (chain, draw, obs, class)
    (1, 10, 40, 2)
    """

    _task = "classification"

    def __init__(self, log_phi=2.0, leaf_concentration=1.0, max_bins=10, predict_with="map", draws=100, method="box",
                 memory_budget=DEFAULT_MEMORY_BUDGET, phi=None, dtype="float32", random_state=None, *,
                 alpha=RENAMED, n_samples=RENAMED):
        self.log_phi = log_phi
        self.leaf_concentration = leaf_concentration
        self.max_bins = max_bins
        self.predict_with = predict_with
        self.draws = draws
        self.alpha = alpha
        self.n_samples = n_samples
        self.method = method
        self.memory_budget = memory_budget
        self.phi = phi
        self.dtype = dtype
        self.random_state = random_state

    def predict_proba(self, X):
        """Class probabilities by ``predict_with`` (MAP tree, exact posterior average, or the sampled trees).

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns.

        Returns
        -------
        np.ndarray
            Shape ``(n_samples, n_classes)``, columns in the order of ``classes_``.
        """
        p = self._values(X)
        return p / p.sum(-1, keepdims=True)

    def predict(self, X):
        """Most probable class per row, by ``predict_with``.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns.

        Returns
        -------
        np.ndarray
            Labels (of ``classes_``), shape ``(n_samples,)``.
        """
        return self._labels(self.predict_proba(X))

    def log_predictive(self, X, y):
        """Exact pointwise log posterior predictive ``log p(y_i | x_i, data)``: ``(n,)``.

        Raises ``ValueError`` for labels not seen at fit time.
        """
        self._check_fitted()
        y = np.asarray(y)
        unseen = sorted(set(np.unique(y).tolist()) - set(self.classes_.tolist()))
        if unseen:
            raise ValueError(f"y has labels unseen at fit time: {unseen[:5]}; known classes: {self.classes_.tolist()}")
        idx = np.searchsorted(self.classes_, y)
        p = self.posterior_.predict_exact(self._codes_checked(X))
        return np.log(p[np.arange(len(idx)), idx])


class PCFGTreeRegressor(_PCFGBase, RegressorBase):
    __doc__ = parameters_doc(
        "Exact Bayesian decision tree regressor (BCART-PCFG, Normal-inverse-gamma leaves).",
        PCFGTreeClassifier, drop=("leaf_concentration", "alpha"),
        notes="""
        The parameters are :class:`PCFGTreeClassifier`'s except ``leaf_concentration``; the leaf
        prior (a mean and a variance per leaf, :class:`~bayestrees.leaves.NormalLeaves`) is
        :func:`bayestrees.leaves.default_nig_prior` of the training targets.  Predictions are
        posterior means of the response.

        ``idata_`` holds ``posterior["mu"]`` ``(chain, draw, obs)``, the drawn leaf means at the
        training rows, and no ``sigma``: every leaf has its own variance, so no single noise scale
        summarises a draw.
        """,
        examples="""
        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(size=(40, 2))
        >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
        >>> reg = bt.PCFGTreeRegressor(log_phi=2.0, max_bins=4, draws=10, random_state=0).fit(X, y)
        >>> reg.predict(X[:5]).shape                           # by the MAP tree
        (5,)
        >>> reg.set_params(predict_with="posterior").predict(X[:5]).shape   # exact posterior mean
        (5,)
        >>> reg.idata_.log_likelihood["y"].shape               # so bt.loo works
        (1, 10, 40)
        """)

    _task = "regression"

    _renamed = {"n_samples": "draws"}

    def __init__(self, log_phi=2.0, max_bins=10, predict_with="map", draws=100, method="box",
                 memory_budget=DEFAULT_MEMORY_BUDGET, phi=None, dtype="float32", random_state=None, *,
                 n_samples=RENAMED):
        self.log_phi = log_phi
        self.max_bins = max_bins
        self.predict_with = predict_with
        self.draws = draws
        self.n_samples = n_samples
        self.method = method
        self.memory_budget = memory_budget
        self.phi = phi
        self.dtype = dtype
        self.random_state = random_state

    def predict(self, X):
        """Posterior mean response per row, by ``predict_with``.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns.

        Returns
        -------
        np.ndarray
            Shape ``(n_samples,)``, in the units of ``y``.
        """
        return self._values(X)[:, 0]
