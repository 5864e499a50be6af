"""The PyMC-like model context shared by every family.

>>> with bt.Model() as model:
...     X = bt.Data("X", X_train)
...     f = bt.BayesianForest("f", X, y_train)
...     idata = bt.sample(draws=100, random_seed=0)
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

A family adds a random variable by subclassing :class:`TreeRV` and
implementing two methods: ``_fit(key, draws, chains, progressbar) ->
InferenceData`` and ``_predictive(idata, X, key) -> dict`` (the arguments of
:func:`bayestrees.convert.predictive_group`).  The context, data containers and sampling
entry points are written once, here.
"""
from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import arviz as az

from ..data import prepare_data
from ..keys import make_key

__all__ = ["Model", "Data", "set_data", "sample", "sample_posterior_predictive", "TreeRV", "DataContainer",
           "modelcontext", "make_key"]

_local = threading.local()


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class Model:
    """A container for data and tree random variables; use as a context manager."""

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
    """Register named data (features) in the active model."""
    m = modelcontext(model)
    d = DataContainer(name, value)
    m._register_data(d)
    return d


def set_data(new_data: dict, *, model: Model | None = None) -> None:
    """Replace the values of named data containers (e.g. test features)."""
    m = modelcontext(model)
    for k, v in new_data.items():
        if k not in m.data:
            raise ValueError(f"the model has no data named {k!r}; known: {sorted(m.data)}")
        m.data[k].value = v


def _value(x):
    return x.get_value() if isinstance(x, DataContainer) else x


class TreeRV:
    """Base class of the tree random variables (``bt.BayesianForest``, ...).

    Subclasses set ``family`` and implement ``_fit`` and ``_predictive``.
    The features may be a :class:`DataContainer` (so that :func:`set_data`
    can later swap in new rows) or an array.
    """

    family = "tree"

    def __init__(self, name: str, X, y, *, model: Model | None = None, **params):
        self.name = name
        self.X = X
        self.y = y
        self.params = params
        self.fitted_: Any = None
        m = modelcontext(model)
        m._register_rv(self)

    @property
    def X_value(self):
        return _value(self.X)

    @property
    def y_value(self):
        return _value(self.y)

    def _fit(self, key, draws: int, chains: int, progressbar: bool) -> az.InferenceData:
        raise NotImplementedError

    def _predictive(self, idata: az.InferenceData, X, key) -> dict:
        """Keyword arguments of :func:`bayestrees.convert.predictive_group` for rows ``X``:
        ``task``, and ``draws``/``mu``/``proba``/``class_names`` as the family defines them."""
        raise NotImplementedError


def run_sampler(rv: TreeRV, fit_function, to_inferencedata, key, draws, chains, progressbar, tune, thin,
                chain_method="auto"):
    """Fit an MCMC family's random variable: its data, its config with the run's lengths and chain method,
    its sampler.

    Returns ``(result, data, idata)``; ``fit_function(key, data, config)`` is the family's
    ``fit_<family>`` and ``to_inferencedata(result, data, y_name=, extra_attrs=)`` its converter.
    """
    data = prepare_data(rv.X_value, rv.y_value, task=rv.task, max_bins=rv.params["max_bins"], allow_nan=False)
    cfg = replace(rv.config, draws=int(draws), chains=int(chains), tune=int(tune), thin=int(thin),
                  progressbar=progressbar, chain_method=chain_method)
    result = fit_function(key, data, cfg)
    return result, data, to_inferencedata(result, data, y_name=rv.name, extra_attrs={"rv": rv.name})


def sample(draws: int = 100, chains: int = 1, random_seed=None, *, model: Model | None = None,
           progressbar: bool = False, **kwargs) -> az.InferenceData:
    """Draw from the posterior of the model's tree variable.

    Parameters
    ----------
    draws : int
        Draws per chain (for forests: trees per chain).
    chains : int
        Independent chains (for exact or bootstrap samplers, independent batches).
    random_seed : int, numpy Generator or JAX key, optional
    **kwargs
        The family's run settings: ``tune``, ``thin`` and ``chain_method`` (``"auto"``,
        ``"vectorized"`` or ``"parallel"``) for the MCMC families (Bayesian CART, BET).

    Returns
    -------
    arviz.InferenceData
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
    """
    from ..convert import predictive_group

    m = modelcontext(model)
    if not m.rvs:
        raise ValueError("the model has no tree variable")
    rv = m.rvs[0]
    if rv.fitted_ is None:
        raise ValueError("sample the model (bt.sample) before sampling the posterior predictive")
    key = make_key(random_seed)
    group = "predictions" if predictions else "posterior_predictive"
    target = idata if extend_inferencedata else az.InferenceData()
    kw = rv._predictive(idata, rv.X_value, key)
    if var_names is not None:
        names = {"draws": rv.name, "mu": f"{rv.name}_mu", "proba": f"{rv.name}_proba"}
        kw = {k: (v if k not in names or names[k] in var_names else None) for k, v in kw.items()}
    return predictive_group(target, group, rv.name, **kw)
