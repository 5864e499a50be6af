"""``bt.NumPyroModel``: a model the user writes (NumPyro, with tree functions) inside the model context.

>>> def counts(X, y=None):
...     f = bt.bart_function("f", X, m=50)                    # log rate, a sum of 50 trees
...     numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)
>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     bt.NumPyroModel("counts", counts, X, observed={"y": y_train})
...     idata = bt.sample(draws=1000, tune=1000, chains=4, random_seed=0)
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

Why a NumPyro function and not PyMC-style statements in the ``with`` block: the block runs once,
eagerly, so a likelihood written there (``bt.Poisson("y", exp(f), observed=y)``) would need a
symbolic graph of its own to be re-evaluated at every step and on new rows: a second algebra beside
JAX.  A NumPyro model function is already that graph, in the language JAX users write, with every
distribution, link and handler of NumPyro; the context adds what it gives every family: named data
that :func:`~bayestrees.models.base.set_data` swaps, one :func:`~bayestrees.models.base.sample`
and posterior predictive draws on new rows, all as InferenceData (``docs/design.md``).
"""
from __future__ import annotations

from typing import Any, Callable

import arviz as az
import numpy as np

from ..convert import add_group
from .base import Model, data_value, modelcontext

__all__ = ["NumPyroModel"]


class NumPyroModel:
    """A NumPyro model function with tree functions as the model context's random variable.

    Parameters
    ----------
    name : str
        The variable's name in the model.
    fn : callable
        A NumPyro model: it calls :func:`bayestrees.bart_function` or
        :func:`bayestrees.tree_function` at least once and observes its data with
        ``numpyro.sample(..., obs=...)``.
    *args
        Its positional arguments; a :class:`bt.Data <bayestrees.models.base.DataContainer>` is
        read when the model is sampled or predicted, so :func:`bt.set_data` can swap in new rows.
    observed : dict, optional
        Keyword arguments that hold observed data (``{"y": y_train}``): given when sampling, left out
        when predicting on new rows (the model must then draw them: ``obs=None``).
    model : bt.Model, optional
        The model to join (default: the innermost ``with bt.Model()`` block).
    **kwargs
        Its other keyword arguments (``bt.Data`` containers allowed).

    Notes
    -----
    ``bt.sample(draws, chains, random_seed, tune=..., conjugate=..., nuts_kwargs=...,
    chain_method=..., jit_data=..., particles=..., move_probs=..., local_moves=..., slide=...,
    leaf_refresh=..., data_devices=...)`` runs :func:`bayestrees.sample_model` (``jit_data=True``: a
    sample after ``bt.set_data`` with new observed data of the same shapes reuses the compiled
    sampling programs): the tree sites by the library's tree
    moves, every other latent site by NUTS, in the library's chain loop; the InferenceData is
    :func:`bayestrees.sample_model`'s (posterior contract: every site, the tree summaries, the
    tree functions at the training rows, pointwise ``log_likelihood``).  The fit is kept as
    ``fitted_`` (a :class:`~bayestrees.inference.treefn.fit.ModelFit`).

    Examples
    --------
    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2)); y = rng.poisson(np.exp(X[:, 0]))
    >>> def counts(X, y=None):
    ...     f = bt.bart_function("f", X, m=5)
    ...     numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)
    >>> with bt.Model():
    ...     Xd = bt.Data("X", X)
    ...     rv = bt.NumPyroModel("counts", counts, Xd, observed={"y": y})
    ...     idata = bt.sample(draws=20, tune=20, chains=1, random_seed=0)
    ...     bt.set_data({"X": X[:5]})
    ...     pred = bt.sample_posterior_predictive(idata, predictions=True)
    >>> idata.posterior["f"].shape, pred.predictions["y"].shape
    ((1, 20, 40), (1, 20, 5))
    """

    def __init__(self, name: str, fn: Callable, *args, observed: dict | None = None, model: Model | None = None,
                 **kwargs):
        if not callable(fn):
            raise ValueError(f"NumPyroModel takes a NumPyro model function, got {type(fn).__name__}")
        if observed is not None and not isinstance(observed, dict):
            raise ValueError("observed must be a dict of keyword arguments holding observed data, e.g. {'y': y}")
        clash = sorted(set(observed or {}) & set(kwargs))
        if clash:
            raise ValueError(f"{clash} given both in observed= and as keyword arguments")
        self.name = name
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.observed = dict(observed or {})
        self.fitted_: Any = None
        self.convergence_ = None
        modelcontext(model)._register_rv(self)

    def _call_args(self, with_observed: bool):
        args = tuple(data_value(a) for a in self.args)
        kw = {k: data_value(v) for k, v in self.kwargs.items()}
        if with_observed:
            kw.update({k: data_value(v) for k, v in self.observed.items()})
        return args, kw

    def _fit(self, key, draws: int, chains: int, progressbar: bool, **run) -> az.InferenceData:
        from ..inference.treefn import sample_model

        known = {"tune", "conjugate", "nuts_kwargs", "chain_method", "log_likelihood", "jit_data", "particles",
                 "move_probs", "local_moves", "slide", "leaf_refresh", "data_devices"}
        unknown = sorted(set(run) - known)
        if unknown:
            raise ValueError(f"unexpected sample() arguments for NumPyroModel: {unknown}; known: {sorted(known)}")
        args, kw = self._call_args(True)
        self._training_args = (args, kw)
        fit = sample_model(self.fn, *args, draws=draws, chains=chains, random_seed=key, progressbar=progressbar,
                           **run, **kw)
        self.fitted_ = fit
        self.convergence_ = fit.convergence
        fit.idata.posterior.attrs["rv"] = self.name
        return fit.idata

    def _posterior_predictive(self, idata: az.InferenceData, key, predictions: bool, extend: bool,
                              var_names=None) -> az.InferenceData:
        """Predictive draws of every observed and deterministic site at the model's current data."""
        fit = self.fitted_
        args, kw = self._call_args(not predictions)
        if not predictions:   # posterior predictive at the training rows: the observed sites drawn afresh
            kw = {k: v for k, v in kw.items() if k not in self.observed}
        out = fit.predict(*args, random_seed=key, **kw)
        C = next(iter(fit.samples.values())).shape[0]
        # the rows: the observed sites' length at these data (a site of another length, one value per
        # group say, keeps ArviZ's default dimension)
        rows = {np.shape(out[k])[-1] for k in self.observed if k in out and np.ndim(out[k]) == 2}
        data, dims = {}, {}
        for k, v in out.items():
            if var_names is not None and k not in var_names:
                continue
            if k in fit.samples:   # latent sites are the posterior's own
                continue
            v = np.asarray(v)
            data[k] = v.reshape((C, -1) + v.shape[1:])
            if v.ndim == 2 and (not rows or v.shape[-1] in rows):
                dims[k] = ["obs"]
        target = idata if extend else az.InferenceData()
        return add_group(target, "predictions" if predictions else "posterior_predictive", data, dims=dims)

    def __repr__(self) -> str:
        return f"NumPyroModel({self.name!r}, {getattr(self.fn, '__name__', self.fn)!r})"
