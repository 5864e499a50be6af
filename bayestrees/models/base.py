"""The PyMC-like model context shared by every family.

>>> with bt.Model() as model:
...     X = bt.Data("X", X_train)
...     f = bt.BayesianForest("f", X, y_train)
...     idata = bt.sample(draws=100, random_seed=0)
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

A family's random variable is a :class:`TreeRV` subclass that names its family
(``family = FAMILY``, the protocol of :mod:`bayestrees.inference.family`); fitting,
conversion to InferenceData and predictive draws are written once, here, over that
protocol.  The context, data containers and sampling entry points are written once too.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

import arviz as az

from ..convergence import check_convergence, warn_convergence
from ..data import TrainingData, check_new_rows, infer_task
from ..inference.family import Family, config_defaults, renamed_params
from ..keys import make_key

__all__ = ["Model", "Data", "set_data", "sample", "sample_posterior_predictive", "TreeRV", "DataContainer",
           "FamilyFit", "modelcontext", "make_key", "data_value"]

_local = threading.local()


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class Model:
    """A container for data and tree random variables; use as a context manager.

    Inside ``with bt.Model():`` the data containers (:func:`Data`) and tree random variables
    (``bt.BayesianForest``, ``bt.PCFGTree``, ...) made there are registered in the model, and
    :func:`sample`, :func:`set_data` and :func:`sample_posterior_predictive` act on it.

    Parameters
    ----------
    name : str, default ""
        A label for the model (shown in its ``repr``).

    Attributes
    ----------
    data : dict of str to DataContainer
        The model's data containers, by name.
    rvs : list of TreeRV
        The model's tree random variables, in the order they were made.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> with bt.Model() as model:
    ...     features = bt.Data("X", X)
    ...     f = bt.BayesianForest("f", features, y)
    >>> model
    Model(name='', data=['X'], rvs=['f'])
    """

    def __init__(self, name: str = ""):
        self.name = name
        self.data: dict[str, DataContainer] = {}
        self.rvs: list[TreeRV] = []

    def __enter__(self) -> "Model":
        _stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        _stack().pop()

    def _register_data(self, d: "DataContainer") -> None:
        if d.name in self.data:
            raise ValueError(f"the model already has data named {d.name!r}")
        self.data[d.name] = d

    def _register_rv(self, rv: "TreeRV") -> None:
        if any(r.name == rv.name for r in self.rvs):
            raise ValueError(f"the model already has a variable named {rv.name!r}")
        self.rvs.append(rv)

    def __repr__(self) -> str:
        return f"Model(name={self.name!r}, data={list(self.data)}, rvs={[r.name for r in self.rvs]})"


def modelcontext(model: Model | None = None) -> Model:
    """The given model, or the innermost active ``with Model()`` block."""
    if model is not None:
        return model
    st = _stack()
    if not st:
        raise ValueError("no model on the context stack; use `with bt.Model():` or pass model=")
    return st[-1]


class DataContainer:
    """Named mutable data inside a model (``bt.Data``); change it with :func:`set_data`."""

    def __init__(self, name: str, value: Any):
        self.name = name
        self.value = value

    def get_value(self):
        return self.value

    def __repr__(self) -> str:
        shape = getattr(self.value, "shape", None)
        return f"Data({self.name!r}, shape={shape})"


def Data(name: str, value: Any, *, model: Model | None = None) -> DataContainer:  # noqa: N802 (PyMC spelling)
    """Register named data (features) in the active model.

    A tree random variable given the container as its ``X`` reads the container's current
    value, so :func:`set_data` can later swap in new rows for
    :func:`sample_posterior_predictive`.

    Parameters
    ----------
    name : str
        The container's name in the model (the key of :func:`set_data`).
    value : array-like or DataFrame (n_samples, n_features)
        The data.
    model : Model, optional
        The model to register the container in; default the innermost active ``with bt.Model()``.

    Returns
    -------
    DataContainer
        The registered container (``get_value()`` gives its current value).

    Raises
    ------
    ValueError
        When no model is active (and ``model`` is not given), or the model already has data named
        ``name``.

    Examples
    --------
    >>> X = np.zeros((40, 2))
    >>> with bt.Model():
    ...     features = bt.Data("X", X)
    >>> features
    Data('X', shape=(40, 2))
    >>> features.get_value() is X
    True
    """
    m = modelcontext(model)
    d = DataContainer(name, value)
    m._register_data(d)
    return d


def set_data(new_data: dict, *, model: Model | None = None) -> None:
    """Replace the values of named data containers (e.g. test features).

    Parameters
    ----------
    new_data : dict of str to array-like
        New values by container name (:func:`Data`); new features may have any number of rows
        but the training data's columns.
    model : Model, optional
        The model whose containers change; default the innermost active ``with bt.Model()``.

    Returns
    -------
    None
        The containers are changed in place.

    Raises
    ------
    ValueError
        When no model is active (and ``model`` is not given), or the model has no data of a
        given name.

    Examples
    --------
    >>> with bt.Model():
    ...     features = bt.Data("X", np.zeros((40, 2)))
    ...     bt.set_data({"X": np.ones((5, 2))})
    >>> features
    Data('X', shape=(5, 2))
    """
    m = modelcontext(model)
    for k, v in new_data.items():
        if k not in m.data:
            raise ValueError(f"the model has no data named {k!r}; known: {sorted(m.data)}")
        m.data[k].value = v


def data_value(x):
    """The value of a data container (``bt.Data``), or ``x`` itself."""
    return x.get_value() if isinstance(x, DataContainer) else x


@dataclass(frozen=True)
class FamilyFit:
    """What ``bt.sample`` leaves on a tree variable (its ``fitted_``).

    Attributes
    ----------
    result : the family's fit result
    data : TrainingData
        The training data of the fit.
    chains, draws : int
    """

    result: Any
    data: TrainingData
    chains: int
    draws: int


#: settings of one run, given to ``bt.sample`` (not to the variable)
RUN_SETTINGS = ("draws", "chains", "progressbar", "tune", "thin", "chain_method")

#: parameters of the data layer (the family's ``prepare_data``)
DATA_PARAMS = ("max_bins", "categorical_features")


class TreeRV:
    """Base class of the tree random variables (``bt.BayesianForest``, ...), generic over the family protocol.

    A subclass sets ``family`` (its room's ``FAMILY``) and may override
    ``_config_params`` (parameters that are not config fields as they are), ``_check``
    (checks against the task) and ``_after_fit`` (its own fitted attributes).  The
    hyperparameters are the family config's fields (validated when the variable is made);
    ``max_bins`` and ``categorical_features`` go to the data layer.  The features may be a
    :class:`DataContainer` (so that :func:`set_data` can later swap in new rows) or an array.
    """

    family: Family | None = None
    #: former parameter names ``{old: new}`` (used with a ``FutureWarning``)
    _renamed: dict = {}
    #: parameters that are inputs of the family's fit rather than config fields (BART's
    #: ``X_predict``), read by ``_fit_args``
    _fit_inputs: tuple = ()

    def __init__(self, name: str, X, y, *, task: str = "auto", model: Model | None = None, **params):
        fam = self.family
        params = renamed_params(params, self._renamed, type(self).__name__)
        run = sorted(set(params) & set(RUN_SETTINGS))
        if run:
            raise ValueError(f"{run} are set by bt.sample, not by {type(self).__name__}")
        self.task = infer_task(data_value(y), task)
        if self.task not in fam.tasks:
            raise ValueError(f"{type(self).__name__} fits {fam.tasks}, not {self.task}")
        fields = config_defaults(fam.config)
        unknown = sorted(set(params) - set(fields) - set(DATA_PARAMS) - set(self._fit_inputs))
        if unknown:
            known = sorted((set(fields) - set(RUN_SETTINGS)) | set(DATA_PARAMS) | set(self._fit_inputs))
            raise ValueError(f"unknown parameter(s) {unknown} for {type(self).__name__}; known: {known}")
        self.config = fam.make_config(**self._config_params({k: v for k, v in params.items() if k in fields}))
        self._check()
        self.name = name
        self.X = X
        self.y = y
        self.params = params
        self.fitted_: FamilyFit | None = None
        m = modelcontext(model)
        m._register_rv(self)

    def _config_params(self, params: dict) -> dict:
        """Keyword arguments of the family's config from the variable's config parameters."""
        return params

    def _check(self) -> None:
        """Checks of the config against the task (``ValueError``), when the variable is made."""

    def _after_fit(self, result, data) -> None:
        """The variable's own attributes after ``bt.sample``."""

    def _fit_args(self, data) -> dict:
        """Keyword arguments of the family's fit beyond ``(key, data, config)`` (default: none)."""
        return {}

    @property
    def X_value(self):
        return data_value(self.X)

    @property
    def y_value(self):
        return data_value(self.y)

    def _fit(self, key, draws: int, chains: int, progressbar: bool, **run) -> az.InferenceData:
        """Fit the family with the run's settings; the InferenceData of the fit."""
        fam = self.family
        fields = config_defaults(fam.config)
        unknown = sorted(set(run) - set(fields))
        if unknown:
            raise ValueError(f"unexpected sample() arguments for {type(self).__name__}: {unknown}")
        settings = dict(draws=int(draws), chains=int(chains), progressbar=progressbar, **run)
        config = replace(self.config, **{k: v for k, v in settings.items() if k in fields})
        data = fam.prepare_data(self.X_value, self.y_value, task=self.task,
                                max_bins=self.params.get("max_bins", fam.max_bins),
                                categorical=self.params.get("categorical_features"))
        result = fam.fit(key, data, config, **self._fit_args(data))
        self.fitted_ = FamilyFit(result, data, int(chains), int(draws))
        self._after_fit(result, data)
        idata = fam.to_inferencedata(result, data, y_name=self.name, attrs={"rv": self.name})
        if fam.mcmc:  # the same table and warning as the estimators' (bayestrees.convergence)
            self.convergence_ = check_convergence(idata)
            warn_convergence(self.convergence_, stacklevel=4)
        return idata

    def _codes(self, X):
        """New rows, validated by the rule of fitting (:func:`bayestrees.data.check_new_rows`), binned
        like the training rows."""
        binner = self.fitted_.data.binner
        check_new_rows(X, binner.n_features_in_, allow_nan=self.family.missing_values, owner=type(self).__name__)
        return binner.transform(X)

    def _predictive(self, idata: az.InferenceData, X, key) -> dict:
        """Keyword arguments of :func:`bayestrees.convert.predictive_group` for rows ``X``:
        ``task``, and ``draws``/``mu``/``proba``/``class_names`` as the family defines them.
        The draws are those of ``idata`` (its ``trees`` group), so the predictions match it."""
        fit = self.fitted_
        return self.family.predictive(key, fit.result, fit.data, idata, self._codes(X))


def sample(draws: int = 100, chains: int = 1, random_seed=None, *, model: Model | None = None,
           progressbar: bool = False, **kwargs) -> az.InferenceData:
    """Draw from the posterior of the model's tree variable.

    Parameters
    ----------
    draws : int, default 100
        Draws per chain (for forests: trees per chain).
    chains : int, default 1
        Independent chains (for exact or bootstrap samplers, independent batches).
    random_seed : int, numpy Generator or JAX key, optional
        The seed of the fit; the same seed gives the same draws.
    model : Model, optional
        The model to sample; default the innermost active ``with bt.Model()``.
    progressbar : bool, default False
        Show the progress of the families that report it.
    **kwargs
        The family's run settings: ``tune``, ``thin`` and ``chain_method`` (``"auto"``,
        ``"vectorized"`` or ``"parallel"``) for the MCMC families (Bayesian CART, BET, BART).

    Returns
    -------
    arviz.InferenceData
        The posterior by the posterior contract: groups ``posterior``, ``observed_data``,
        ``constant_data`` and ``trees``, with ``sample_stats`` and ``log_likelihood`` where the
        family defines them.  For an MCMC family the variable keeps the convergence table in
        ``convergence_`` (a :class:`~bayestrees.convergence.ConvergenceWarning` is issued when the
        chains disagree, are stuck or hold too few effective draws).

    Raises
    ------
    ValueError
        When no model is active, the model has no tree variable, ``draws`` or ``chains`` is below
        1, or a keyword argument is not a run setting of the family.
    NotImplementedError
        When the model has more than one tree variable.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> with bt.Model():
    ...     f = bt.BayesianForest("f", X, y)
    ...     idata = bt.sample(draws=10, random_seed=0)     # 10 trees
    >>> idata.posterior["mu"].shape                         # (chain, draw, obs)
    (1, 10, 40)
    """
    m = modelcontext(model)
    if not m.rvs:
        raise ValueError("the model has no tree variable; add one, e.g. bt.BayesianForest('f', X, y)")
    if len(m.rvs) > 1:
        raise NotImplementedError(
            f"the model has {len(m.rvs)} tree variables; sampling several in one model is not supported yet"
        )
    if int(draws) < 1 or int(chains) < 1:
        raise ValueError(f"draws and chains must be >= 1, got draws={draws}, chains={chains}")
    rv = m.rvs[0]
    key = make_key(random_seed)
    return rv._fit(key, int(draws), int(chains), progressbar, **kwargs)


def sample_posterior_predictive(idata: az.InferenceData, *, model: Model | None = None, random_seed=None,
                                extend_inferencedata: bool = False, predictions: bool = False,
                                var_names=None) -> az.InferenceData:
    """Posterior predictive draws for the model's current data.

    Each posterior draw (tree) gives a prediction for every row of the current
    ``X``.  With ``predictions=True`` they go to the ``predictions`` group
    (new data), otherwise to ``posterior_predictive``.

    Parameters
    ----------
    idata : arviz.InferenceData
        The result of :func:`sample` for this model; the predictions use its draws (its ``trees``
        group).
    model : Model, optional
        The model; default the innermost active ``with bt.Model()``.
    random_seed : int, numpy Generator or JAX key, optional
        The seed of the predictive draws (a response drawn from each posterior draw).
    extend_inferencedata : bool, default False
        Add the group to ``idata`` and return it, instead of a new InferenceData.
    predictions : bool, default False
        Write the ``predictions`` group (new rows, set by :func:`set_data`) instead of
        ``posterior_predictive``.
    var_names : list of str, optional
        The variables to write among ``name`` (a drawn response or label), ``name_mu`` (each
        draw's fitted function) and ``name_proba`` (each draw's class probabilities), where
        ``name`` is the tree variable's; default every one the family writes.

    Returns
    -------
    arviz.InferenceData
        ``idata`` extended (``extend_inferencedata=True``) or a new InferenceData holding the
        group; its variables have dims ``(chain, draw, obs)`` (``(chain, draw, obs, class)`` for
        ``name_proba``).

    Raises
    ------
    ValueError
        When no model is active, the model has no tree variable, or it has not been sampled yet;
        or when the current rows do not fit the training data (their number of columns, or
        missing values where the family takes none).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> with bt.Model():
    ...     features = bt.Data("X", X)
    ...     f = bt.BayesianForest("f", features, y)
    ...     idata = bt.sample(draws=10, random_seed=0)
    ...     bt.set_data({"X": X[:5]})                        # five new rows
    ...     pred = bt.sample_posterior_predictive(idata, predictions=True, random_seed=0)
    >>> sorted(pred.predictions.data_vars)
    ['f', 'f_mu']
    >>> pred.predictions["f"].shape                          # (chain, draw, obs)
    (1, 10, 5)
    """
    from ..convert import predictive_group

    m = modelcontext(model)
    if not m.rvs:
        raise ValueError("the model has no tree variable")
    rv = m.rvs[0]
    if rv.fitted_ is None:
        raise ValueError("sample the model (bt.sample) before sampling the posterior predictive")
    key = make_key(random_seed)
    if not isinstance(rv, TreeRV):   # a user-written model (bayestrees.models.numpyro_model.NumPyroModel)
        return rv._posterior_predictive(idata, key, predictions, extend_inferencedata, var_names)
    group = "predictions" if predictions else "posterior_predictive"
    target = idata if extend_inferencedata else az.InferenceData()
    kw = rv._predictive(idata, rv.X_value, key)
    if var_names is not None:
        names = {"draws": rv.name, "mu": f"{rv.name}_mu", "proba": f"{rv.name}_proba"}
        kw = {k: (v if k not in names or names[k] in var_names else None) for k, v in kw.items()}
    return predictive_group(target, group, rv.name, **kw)
