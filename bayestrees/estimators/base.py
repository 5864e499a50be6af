"""Plumbing shared by every scikit-learn style estimator.

Estimators follow scikit-learn's conventions: hyperparameters are stored
unchanged by ``__init__``, ``fit`` returns ``self``, fitted attributes end in
``_``.  scikit-learn is an optional dependency: when it is installed the
estimators subclass its ``BaseEstimator`` and mixins (so ``clone``,
``GridSearchCV`` and ``check_estimator`` work); otherwise a small fallback
provides ``get_params``/``set_params``.
"""
from __future__ import annotations

import inspect
import pickle
from pathlib import Path

import numpy as np

from ..data import Binner, check_y_classification, check_y_regression
from ..keys import make_key

try:  # optional dependency
    from sklearn.base import BaseEstimator as _SkBase
    from sklearn.base import ClassifierMixin as _SkClf
    from sklearn.base import RegressorMixin as _SkReg
    from sklearn.exceptions import NotFittedError
    HAVE_SKLEARN = True
except ImportError:  # pragma: no cover - exercised only without scikit-learn
    HAVE_SKLEARN = False

    class NotFittedError(ValueError, AttributeError):
        """Raised when a method needs a fitted estimator."""

    class _SkBase:
        @classmethod
        def _get_param_names(cls):
            sig = inspect.signature(cls.__init__)
            return sorted(p.name for p in sig.parameters.values() if p.name != "self" and p.kind != p.VAR_KEYWORD)

        def get_params(self, deep=True):
            return {k: getattr(self, k) for k in self._get_param_names()}

        def set_params(self, **params):
            for k, v in params.items():
                if k not in self._get_param_names():
                    raise ValueError(f"invalid parameter {k!r} for {type(self).__name__}")
                setattr(self, k, v)
            return self

    class _SkReg:
        _estimator_type = "regressor"

        def score(self, X, y, sample_weight=None):
            y = np.asarray(y, float)
            p = self.predict(X)
            return 1 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2)

    class _SkClf:
        _estimator_type = "classifier"

        def score(self, X, y, sample_weight=None):
            return float(np.mean(self.predict(X) == np.asarray(y)))

__all__ = ["TreeEstimatorMixin", "RegressorBase", "ClassifierBase", "NotFittedError", "load", "HAVE_SKLEARN"]


class TreeEstimatorMixin:
    """Binning, validation, fitted checks and persistence for tree estimators."""

    _allow_nan = True

    @staticmethod
    def _reject_sparse(X):
        if hasattr(X, "tocsr") or hasattr(X, "todense"):
            raise TypeError("sparse input is not supported: pass a dense array (X.toarray())")

    def _fit_binner(self, X, y_for_order=None, *, classification=False, max_bins=255, categorical=None):
        if y_for_order is not None and hasattr(X, "shape") and hasattr(X, "__len__") \
                and len(X) != len(y_for_order):
            raise ValueError(f"X has {len(X)} rows but y has {len(y_for_order)}; they must match")
        binner = Binner(max_bins=max_bins, categorical=categorical)
        binner.fit(X, y_for_order, classification=classification)
        codes = binner.transform(X)
        self.binner_ = binner
        self.n_features_in_ = binner.n_features_in_
        if hasattr(X, "columns"):
            self.feature_names_in_ = np.asarray([str(c) for c in X.columns], dtype=object)
        return codes

    def _remember_data(self, data, X) -> None:
        """Set the fitted data attributes from a :class:`~bayestrees.data.TrainingData`:
        ``binner_``, ``n_features_in_``, ``feature_names_in_`` (DataFrames) and ``classes_`` (classifiers)."""
        self.binner_ = data.binner
        self.n_features_in_ = data.binner.n_features_in_
        if hasattr(X, "columns"):
            self.feature_names_in_ = np.asarray([str(c) for c in X.columns], dtype=object)
        if data.task == "classification":
            self.classes_ = data.classes

    def _check_fitted(self):
        if getattr(self, "binner_", None) is None:
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with appropriate "
                "arguments before using this estimator."
            )

    def _codes(self, X):
        """Validate new X (feature count, categories) and bin it like the training data."""
        self._check_fitted()
        arr = X
        if not hasattr(X, "columns"):
            arr = np.asarray(X)
            if arr.ndim == 2 and arr.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"X has {arr.shape[1]} features, but {type(self).__name__} is expecting "
                    f"{self.n_features_in_} features as input."
                )
        elif X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )
        return self.binner_.transform(arr)

    def _key(self):
        rs = self.random_state
        if rs is None or isinstance(rs, (int, np.integer)):
            return make_key(None if rs is None else int(rs))
        return make_key(rs)

    def save(self, path) -> None:
        """Save the fitted estimator (a pickle of numpy arrays and parameters)."""
        import jax

        public = {k: v for k, v in self.__dict__.items() if not k.startswith("_dev")}  # caches are rebuilt
        state = jax.tree_util.tree_map(lambda a: np.asarray(a) if isinstance(a, jax.Array) else a, public)
        with open(Path(path), "wb") as fh:
            pickle.dump({"class": type(self), "state": state, "format": 1}, fh)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = self._allow_nan
        tags.input_tags.string = True  # string/object columns are categorical features
        tags.input_tags.categorical = True
        return tags


def load(path):
    """Load an estimator written by ``save``."""
    with open(Path(path), "rb") as fh:
        obj = pickle.load(fh)
    if not isinstance(obj, dict) or obj.get("format") != 1:
        raise ValueError(f"{path} is not a bayestrees model file")
    est = obj["class"].__new__(obj["class"])
    est.__dict__.update(obj["state"])
    return est


class RegressorBase(TreeEstimatorMixin, _SkReg, _SkBase):
    """Base for regressors: checks y as real numbers."""

    def _check_y(self, y, n):
        return check_y_regression(y, n)


class ClassifierBase(TreeEstimatorMixin, _SkClf, _SkBase):
    """Base for classifiers: encodes labels; ``classes_`` holds them."""

    def _check_y(self, y, n):
        codes, classes = check_y_classification(y, n)
        self.classes_ = classes
        return codes

    def _labels(self, proba):
        return self.classes_[np.argmax(np.asarray(proba), axis=-1)]
