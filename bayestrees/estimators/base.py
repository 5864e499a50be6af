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

from ..convergence import check_convergence, convergence_table, warn_convergence
from ..data import Binner, check_new_rows, check_y_classification, check_y_regression
from ..inference.family import Family, config_defaults, renamed_params
from ..keys import make_key
from ..priors import ChipmanPrior

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

__all__ = ["EstimatorBase", "TreeEstimatorMixin", "FamilyEstimator", "DrawsMixin", "ChipmanPriorMixin", "RegressorBase",
           "ClassifierBase", "NotFittedError", "load", "HAVE_SKLEARN", "RENAMED", "parameters_doc"]

#: scikit-learn's ``BaseEstimator`` where it is installed (``get_params``, ``set_params``, ``clone``),
#: else a small fallback with ``get_params`` and ``set_params``
EstimatorBase = _SkBase

#: the default of a former parameter name: "not given" (the new name is used)
RENAMED = "renamed"


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

    def _rows_may_miss(self) -> bool:
        """Whether the model routes missing values (its family's ``missing_values``)."""
        family = getattr(type(self), "_family", None)
        return self._allow_nan if family is None else bool(family.missing_values)

    def _codes(self, X):
        """Validate new X by the rule of fitting (:func:`bayestrees.data.check_new_rows`: NaN only
        where the family routes missing values, no infinities, the training width) and bin it
        like the training data."""
        self._check_fitted()
        check_new_rows(X, self.n_features_in_, allow_nan=self._rows_may_miss(), owner=type(self).__name__)
        return self.binner_.transform(X if hasattr(X, "columns") else np.asarray(X))

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
        tags.input_tags.allow_nan = self._rows_may_miss()
        tags.input_tags.string = True  # string/object columns are categorical features
        tags.input_tags.categorical = True
        return tags


def load(path):
    """Load an estimator written by its ``save`` method.

    Parameters
    ----------
    path : str or pathlib.Path
        The file that ``est.save(path)`` wrote.

    Returns
    -------
    estimator
        The fitted estimator, of the class that was saved.

    Raises
    ------
    ValueError
        When the file is not a bayestrees model file.

    Examples
    --------
    >>> import os, tempfile
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.BayesianForestRegressor(draws=10, random_state=0).fit(X, y)
    >>> path = os.path.join(tempfile.mkdtemp(), "model.pkl")
    >>> reg.save(path)
    >>> again = bt.load(path)
    >>> type(again).__name__
    'BayesianForestRegressor'
    >>> np.array_equal(again.predict(X[:5]), reg.predict(X[:5]))
    True
    """
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


class FamilyEstimator:
    """One ``fit`` and one ``idata_`` for every family (the protocol of :mod:`bayestrees.inference.family`).

    A family's estimator sets ``_family`` (its room's ``FAMILY``) and ``_task``, takes its
    hyperparameters under the names of the family's config fields (the config is the single
    source of their defaults and validation), and may override

    - ``_config_params(params)``: the config's keyword arguments, where an estimator parameter
      is not a config field as it is (by default: every parameter that is a config field);
    - ``_fitted()``: the family's own fitted attributes, read from ``self.result_``.

    ``fit`` validates the input, builds the config (errors before the data is touched),
    prepares the data by the family's rule, calls the family's ``fit`` and keeps its result
    in ``result_`` (the one place); ``idata_`` is the family's ``to_inferencedata`` of it,
    built on first access.  For an MCMC family, ``fit`` also keeps the convergence table in
    ``convergence_`` (:func:`bayestrees.convergence.check_convergence`) and issues one
    :class:`~bayestrees.convergence.ConvergenceWarning` when the chains disagree, are stuck or
    hold too few effective draws.
    """

    _family: Family
    _task = "regression"
    #: former parameter names: ``{old: new}``; the old name is an ``__init__`` parameter that
    #: defaults to :data:`RENAMED` and, when given, is used with a ``FutureWarning`` at ``fit``
    _renamed: dict = {}

    @classmethod
    def _fixed_params(cls) -> dict:
        """Config parameters the class itself fixes (a forest class's ``kind``)."""
        return {}

    def _params(self) -> dict:
        """The estimator's parameters, former names mapped to the new ones (``FutureWarning``)."""
        defaults = {k: p.default for k, p in inspect.signature(type(self).__init__).parameters.items()}
        # a parameter missing from a model saved by an older version has its default
        params = {k: getattr(self, k, defaults.get(k)) for k in self._get_param_names()}
        given = {k: v for k, v in params.items() if k not in self._renamed}
        old = {k: params[k] for k in self._renamed if k in params and not _is_renamed(params[k])}
        for k in old:  # the old name's value replaces the new name's default; both set is an error
            new = self._renamed[k]
            if new in given and not _same(given[new], defaults.get(new)):
                raise TypeError(f"{type(self).__name__}: give {new!r} only ({k!r} is its former name)")
            given.pop(new, None)
        # the warning points at the caller of fit (renamed_params <- _params <- _fit <- fit <- caller)
        return renamed_params({**given, **old}, self._renamed, type(self).__name__, stacklevel=5)

    def _config_params(self, params: dict) -> dict:
        """Keyword arguments of the family's config from the parameters ``params`` (:meth:`_params`):
        by default those that are config fields."""
        fields = config_defaults(self._family.config)
        return {k: v for k, v in params.items() if k in fields}

    def _config(self, params: dict | None = None):
        """The validated config (``ValueError`` for any bad hyperparameter)."""
        return self._family.make_config(**self._config_params(self._params() if params is None else params))

    def _prepare(self, X, y, params: dict):
        """Validate and bin ``(X, y)`` by the family's rule."""
        return self._family.prepare_data(X, y, task=self._task, max_bins=params.get("max_bins", self._family.max_bins),
                                         categorical=params.get("categorical_features"))

    def fit(self, X, y=None):
        """Fit the family's posterior to ``(X, y)``; returns ``self``.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
        y : array-like (n_samples,)
            Real targets (regressors) or labels (classifiers).

        Returns
        -------
        self
        """
        return self._fit(X, y)

    def _fit(self, X, y, fit_args=None):
        """The body of :meth:`fit`.  ``fit_args(data)``, optional, gives the keyword arguments of the
        family's fit beyond ``(key, data, config)`` (BART's row weights and named rows), called once
        the data is validated and binned (``binner_`` set), before the family's fit runs."""
        self._reject_sparse(X)
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        params = self._params()
        config = self._config(params)
        data = self._prepare(X, y, params)
        self._remember_data(data, X)
        extra = {} if fit_args is None else fit_args(data)
        self.result_ = self._family.fit(self._key(), data, config, **extra)
        self._train_data = data
        self._idata = None
        self._fitted()
        if self._family.mcmc:
            # chains that disagree or are stuck are said at once (ConvergenceWarning), and kept; from
            # the result's own draws where the family gives them (the InferenceData waits for its use)
            draws = self._family.convergence_draws
            self.convergence_ = (check_convergence(self.idata_) if draws is None
                                 else convergence_table(draws(self._output_result()), self._family.name))
            warn_convergence(self.convergence_, stacklevel=3)  # the caller of fit
        return self

    def _fitted(self) -> None:
        """The family's own fitted attributes (from ``self.result_``)."""

    def _output_result(self):
        """The result the outputs (``idata_``, draws) are made from."""
        return self.result_

    @property
    def idata_(self):
        """The posterior as ArviZ InferenceData by the posterior contract (built on first access)."""
        self._check_fitted()
        if getattr(self, "_idata", None) is None:
            data = self.__dict__.get("_train_data")
            if data is None:
                raise ValueError(f"this {type(self).__name__} holds no training data (saved by an older version "
                                 "of bayestrees); fit it again to build idata_")
            self._idata = self._family.to_inferencedata(self._output_result(), data, y_name="y")
        return self._idata


def _same(a, b) -> bool:
    try:
        return bool(a is b or a == b)
    except (TypeError, ValueError):  # arrays
        return False


def _is_renamed(v) -> bool:
    return isinstance(v, str) and v == RENAMED


class ChipmanPriorMixin:
    """Config parameters of the tree-MCMC estimators (Bayesian CART, BART): ``prior=None`` is
    ``ChipmanPrior(alpha, beta)`` from the estimator's ``alpha`` and ``beta``, and the parameters named
    in ``_tuple_params`` (lists allowed in ``__init__``) become tuples, as the hashable configs need."""

    _tuple_params = ("move_probs",)

    def _config_params(self, params: dict) -> dict:
        out = super()._config_params(params)
        if out.get("prior") is None:
            out["prior"] = ChipmanPrior(params["alpha"], params["beta"])
        for name in self._tuple_params:
            if out[name] is not None:   # None: the config's default
                out[name] = tuple(out[name])
        return out


class DrawsMixin:
    """``predict_draws`` and ``predict_interval`` from the family's ``values`` of every draw."""

    def _values(self, X) -> np.ndarray:
        """The fitted function of every draw at ``X``: ``(chains * draws, n, V)``."""
        codes = self._codes(X)  # checks the estimator is fitted
        return self._family.values(self._output_result(), codes)

    def predict_draws(self, X) -> np.ndarray:
        """Posterior draws of the predictive function at ``X``.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)

        Returns
        -------
        np.ndarray
            ``(chains * draws, n_samples)`` for regressors, ``(chains * draws, n_samples,
            n_classes)`` class probabilities for classifiers.
        """
        v = self._values(X)
        return v[..., 0] if self._task == "regression" else v

    def predict_interval(self, X, prob: float = 0.9) -> np.ndarray:
        """Equal-tailed ``prob`` credible interval of the predictive function at ``X``.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
        prob : float in (0, 1)

        Returns
        -------
        np.ndarray
            ``(n_samples, 2)`` (regressors) or ``(n_samples, n_classes, 2)`` (classifiers).
        """
        if not 0 < prob < 1:
            raise ValueError(f"prob must be in (0, 1), got {prob}")
        d = self.predict_draws(X)
        q = np.quantile(d, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
        return np.moveaxis(q, 0, -1)


def parameters_doc(summary: str, source: type, *, drop=(), extra: str = "", notes: str = "",
                   examples: str = "") -> str:
    """A docstring whose Parameters section is ``source``'s, for an estimator that shares them.

    Parameters
    ----------
    summary : str
        The summary line (and any paragraphs before the Parameters section).
    source : type
        The class whose docstring's Parameters section is copied (a classifier takes its
        regressor's).
    drop : sequence of str
        Parameters of ``source`` that the new class does not take; an entry is left out when all
        the names it documents are dropped.
    extra : str
        Entries of the new class's own parameters, in the numpydoc layout without indentation.
    notes : str
        A Notes section's text, without indentation (none when empty).
    examples : str
        An Examples section's text (doctest lines), without indentation (none when empty).

    Returns
    -------
    str
        The docstring, without indentation.
    """
    doc = inspect.cleandoc(source.__doc__ or "")
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Parameters") + 2
    end = next((i for i in range(start, len(lines) - 1)
                if lines[i].strip() and not lines[i].startswith(" ") and set(lines[i + 1].strip()) == {"-"}),
               len(lines))
    entries, current = [], []
    for line in lines[start:end]:
        if line and not line.startswith(" ") and current:
            entries.append(current)
            current = []
        current.append(line)
    if current:
        entries.append(current)
    dropped = set(drop)
    kept = [e for e in entries
            if not {n.strip() for n in e[0].split(":")[0].split(",")} <= dropped]
    body = "\n".join("\n".join(e).rstrip("\n") for e in kept)
    out = inspect.cleandoc(summary) + "\n\nParameters\n----------\n" + body
    if extra:
        out += "\n" + inspect.cleandoc(extra)
    if notes:
        out += "\n\nNotes\n-----\n" + inspect.cleandoc(notes)
    if examples:
        out += "\n\nExamples\n--------\n" + inspect.cleandoc(examples)
    return out + "\n"
