"""scikit-learn style BCART-PCFG estimators (exact Bayesian decision trees).

>>> clf = bt.PCFGTreeClassifier(log_phi=2.0, alpha=1.0, max_bins=10).fit(X, y)
>>> clf.predict(X_test)                     # MAP tree
>>> clf.set_params(predict_with="posterior").predict_proba(X_test)   # exact average over all trees
>>> clf.map_tree_, clf.log_evidence_, clf.idata_

Missing values are rejected (``ValueError``): the grammar's symbols are boxes of
binned codes, and this family does not give missing codes a place in them;
impute first.  Constant features are rejected too (they cannot split and only
waste memory); drop them.
"""
from __future__ import annotations

import numpy as np

from ..convert import trees_to_inferencedata
from ..data import Binner, check_X
from ..inference.pcfg import resolve_dtype
from ..inference.pcfg_posterior import check_alpha, check_phi, fit_posterior, phi_to_log
from ..inference.pcfg_structure import DEFAULT_MEMORY_BUDGET
from ..tree import index_tree, predict as tree_predict
from .base import ClassifierBase, RegressorBase

__all__ = ["PCFGTreeClassifier", "PCFGTreeRegressor", "bin_for_pcfg", "pcfg_idata"]

_PREDICT_WITH = ("map", "posterior", "samples")


def bin_for_pcfg(X, max_bins: int, y_for_order=None, classification: bool = False):
    """Validate ``X`` for the PCFG family and bin it; returns ``(binner, codes, n_bins)``.

    Raises ``ValueError`` for NaN/missing values and constant features.
    """
    if int(max_bins) < 2:
        raise ValueError(f"max_bins must be >= 2, got {max_bins}")
    check_X(X, allow_nan=False)
    binner = Binner(max_bins=int(max_bins)).fit(X, y_for_order, classification=classification)
    nb = binner.n_bins_
    const = [f.name for f, b in zip(binner.features_, nb) if b < 2]
    if const:
        raise ValueError(f"features {const} are constant (a single value); drop them before fitting")
    return binner, binner.transform(X).astype(np.int32), nb


def pcfg_idata(post, key, draws: int, chains: int = 1, output_names=None, codes=None, y=None):
    """Sample ``chains * draws`` exact trees and convert them to InferenceData.

    With training ``codes`` and class codes ``y`` (classification), the
    ``log_likelihood`` group holds ``log p(y_i | leaf of x_i)`` per tree
    (leaf posterior predictive), shape ``(chain, draw, n)``, so ``az.loo`` works.
    """
    trees, logp = post.sample(key, draws * chains)
    shaped = type(trees)(*[np.asarray(a).reshape((chains, draws) + a.shape[1:]) for a in trees])
    lp = np.asarray(logp).reshape(chains, draws)
    ll = None
    if codes is not None and y is not None and post.kind == "classification":
        probs = np.asarray(tree_predict(shaped, codes))                  # (chain, draw, n, K)
        ll = {"y": np.log(np.take_along_axis(probs, np.asarray(y)[None, None, :, None], -1)[..., 0])}
    return trees_to_inferencedata(
        shaped, posterior_extra={"log_tree_posterior": lp}, sample_stats={"lp": lp}, log_likelihood=ll,
        attrs={"family": "pcfg", "inference": "exact", "log_phi": post.log_phi,
               "log_evidence": post.log_evidence, "method": post.structure.method},
        output_names=output_names,
    )


class _PCFGBase:
    def _check_params(self):
        if self.predict_with not in _PREDICT_WITH:
            raise ValueError(f"predict_with must be one of {_PREDICT_WITH}, got {self.predict_with!r}")
        resolve_dtype(self.dtype)
        if self.phi is not None:
            return phi_to_log(self.phi)
        return check_phi(self.log_phi)

    def _fit_common(self, X, y, kind):
        log_phi = self._check_params()
        n = len(X)
        yy = self._check_y(y, n)
        binner, codes, nb = bin_for_pcfg(X, self.max_bins, yy, classification=kind == "classification")
        self.binner_ = binner
        self.n_features_in_ = binner.n_features_in_
        if hasattr(X, "columns"):
            self.feature_names_in_ = np.asarray([str(c) for c in X.columns], dtype=object)
        kw = {}
        if kind == "classification":
            kw = dict(alpha=check_alpha(self.alpha, len(self.classes_)), n_classes=len(self.classes_))
        post = fit_posterior(codes, nb, yy, kind=kind, log_phi=log_phi, method=self.method,
                             memory_budget=self.memory_budget, dtype=self.dtype, **kw)
        self.posterior_ = post
        self.map_tree_, self.map_log_prob_ = post.map_tree()
        self.log_evidence_ = post.log_evidence
        names = [str(c) for c in self.classes_] if kind == "classification" else None
        self.idata_ = pcfg_idata(post, self._key(), int(self.n_samples), 1, output_names=names, codes=codes,
                                 y=yy if kind == "classification" else None)
        self._sample_trees_ = index_tree(_trees_of(self.idata_), 0)
        return self

    def _values(self, X):
        codes = self._codes_checked(X)
        if self.predict_with == "map":
            return np.asarray(tree_predict(self.map_tree_, codes))
        if self.predict_with == "posterior":
            return self.posterior_.predict_exact(codes)
        return np.asarray(tree_predict(self._sample_trees_, codes)).mean(0)

    def root_split_posterior(self) -> list[tuple[str, float]]:
        """Exact posterior probability of each root split (and of a root leaf), largest first.

        Returns a list of ``(description, probability)``; descriptions read
        ``"feature <= value"`` (or ``"leaf"``).  Probabilities sum to 1.
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
        self._check_fitted()
        check_X(X, allow_nan=False)
        return self._codes(X).astype(np.int32)


def _trees_of(idata):
    from ..convert import trees_from_inferencedata

    return trees_from_inferencedata(idata)


class PCFGTreeClassifier(_PCFGBase, ClassifierBase):
    """Exact Bayesian decision tree classifier (BCART-PCFG, Dirichlet leaves).

    Parameters
    ----------
    log_phi : float, default 2.0
        log of the prior's leaf penalty: ``Pr[T] ∝ phi^-leaves``.
    alpha : float or array of shape (n_classes,), default 1.0
        Dirichlet concentration of the leaves (> 0).
    max_bins : int, default 10
        Bins per feature (exact binning when a feature has at most this many values).
    predict_with : {"map", "posterior", "samples"}, default "map"
        MAP tree, exact posterior average over all trees, or average over the
        ``n_samples`` sampled trees.
    n_samples : int, default 100
        Exact posterior trees stored in ``idata_``.
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

    Attributes
    ----------
    map_tree_ : Tree, log_evidence_ : float, idata_ : arviz.InferenceData,
    posterior_ : PCFGPosterior, classes_ : array
    """

    def __init__(self, log_phi=2.0, alpha=1.0, max_bins=10, predict_with="map", n_samples=100, method="box",
                 memory_budget=DEFAULT_MEMORY_BUDGET, phi=None, dtype="float32", random_state=None):
        self.log_phi = log_phi
        self.alpha = alpha
        self.max_bins = max_bins
        self.predict_with = predict_with
        self.n_samples = n_samples
        self.method = method
        self.memory_budget = memory_budget
        self.phi = phi
        self.dtype = dtype
        self.random_state = random_state

    def fit(self, X, y):
        """Fit the exact posterior; returns ``self``."""
        return self._fit_common(X, y, "classification")

    def predict_proba(self, X):
        """Class probabilities ``(n, n_classes)`` by ``predict_with``."""
        p = self._values(X)
        return p / p.sum(-1, keepdims=True)

    def predict(self, X):
        """Most probable class per row."""
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
    """Exact Bayesian decision tree regressor (BCART-PCFG, Normal-inverse-gamma leaves).

    Parameters as :class:`PCFGTreeClassifier` except ``alpha``; the leaf prior
    is :func:`bayestrees.leaves.default_nig_prior` of the training targets
    (or ``nig_prior``, a :class:`~bayestrees.leaves.NIGPrior`).
    Predictions are posterior means of the response.
    """

    def __init__(self, log_phi=2.0, max_bins=10, predict_with="map", n_samples=100, method="box",
                 memory_budget=DEFAULT_MEMORY_BUDGET, phi=None, dtype="float32", random_state=None):
        self.log_phi = log_phi
        self.max_bins = max_bins
        self.predict_with = predict_with
        self.n_samples = n_samples
        self.method = method
        self.memory_budget = memory_budget
        self.phi = phi
        self.dtype = dtype
        self.random_state = random_state

    def fit(self, X, y):
        """Fit the exact posterior; returns ``self``."""
        return self._fit_common(X, y, "regression")

    def predict(self, X):
        """Posterior mean response per row ``(n,)`` by ``predict_with``."""
        return self._values(X)[:, 0]
