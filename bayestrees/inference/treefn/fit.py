"""Sampling a user-written NumPyro model with tree functions: one call to InferenceData.

:func:`sample_model` runs NumPyro's ``Gibbs([(TreeMoves(model), tree sites), (NUTS(model), the
rest)])`` (:mod:`bayestrees.inference.treefn.kernel`) in the library's chain loop
(:mod:`bayestrees.inference.treefn.chains`) and returns a :class:`ModelFit`: the
draws, the InferenceData by the posterior contract, and prediction on new rows through
``numpyro.infer.Predictive``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import jax
import numpy as np
from numpyro import handlers
from numpyro.distributions import constraints
from numpyro.infer import NUTS, Predictive
from numpyro.infer.gibbs import Gibbs, prototype_trace
from numpyro.infer.util import log_likelihood as numpyro_log_likelihood

from ...convergence import check_convergence, warn_convergence
from ...convert import TREE_GROUP, model_inferencedata
from ...keys import make_key
from ...sharding import check_data_devices
from ..bart.kernel import host_tree_summaries
from ...data import check_int
from ..loop import CHAIN_METHODS as LOOP_CHAIN_METHODS, Kernel, run_chains
from . import programs
from .chains import GibbsChain
from .kernel import TreeMoves, tree_sites
from .site import FeatureTable, TreeEnsemble, feature_arguments, given_values, stump_initialisation

__all__ = ["sample_model", "ModelFit", "tree_summaries_of", "load_model_fit", "CHAIN_METHODS"]

#: the values of ``sample_model(chain_method=...)``: those of every MCMC family, and "sequential"
CHAIN_METHODS = LOOP_CHAIN_METHODS + ("auto", "sequential")


def tree_summaries_of(trees: np.ndarray, n_features: int | None = None) -> dict:
    """``n_leaves`` and ``depth`` per tree ``(..., m)`` and ``split_counts`` per feature ``(..., F)``
    of packed tree draws ``(..., m, S, 3)`` (the BART family's :func:`~bayestrees.inference.bart.kernel.tree_summaries`;
    ``F`` is ``n_features``, by default the largest feature index + 1).  With ``n_features`` a split on
    column ``F + j`` (feature ``j``, its missing values sent left: :mod:`~bayestrees.inference.treefn.site`)
    counts for feature ``j``."""
    feature = np.asarray(trees)[..., 0].astype(np.int64)
    if n_features is not None:
        feature = np.where(feature >= int(n_features), feature - int(n_features), feature)
    F = int(feature.max(initial=-1)) + 1 if n_features is None else int(n_features)
    n_leaves, depth, counts = host_tree_summaries(feature, max(F, 1))
    return dict(n_leaves=n_leaves, depth=depth, split_counts=counts[..., :F])


#: supports that do not depend on a distribution's parameters: an observed value outside one is an
#: error in the data, whatever the latent values (Poisson counts below 0, a label of 2 for Bernoulli)
_FIXED_SUPPORTS = (constraints.real, constraints.positive, constraints.nonnegative, constraints.nonnegative_integer,
                   constraints.positive_integer, constraints.boolean, constraints.unit_interval)


def _check_observed_values(name: str, fn, v: np.ndarray) -> None:
    """NaN or infinite observed values, and values outside a support that depends on no parameter (or
    on data only: an integer interval such as Binomial's), fail before sampling, naming a row."""
    if v.dtype.kind in "fc" and not np.all(np.isfinite(v)):
        i = np.argwhere(~np.isfinite(v))[0]
        raise ValueError(f"observed site {name!r} holds NaN or infinite values (first at index {tuple(int(k) for k in i)}:"
                         f" {v[tuple(i)]}); drop those rows before sampling")
    base = fn
    while hasattr(base, "base_dist"):   # Independent, Masked, Expanded: the elementwise support
        base = base.base_dist
    support = base.support
    fixed = any(support is c for c in _FIXED_SUPPORTS) or (
        isinstance(support, constraints.integer_interval) and not isinstance(support.upper_bound, jax.core.Tracer))
    if not fixed:
        return
    ok = np.asarray(support.check(v))
    if not np.all(ok):
        i = np.argwhere(~np.broadcast_to(ok, v.shape))[0]
        raise ValueError(f"observed site {name!r}: value {v[tuple(i)]} at index {tuple(int(k) for k in i)} is outside the "
                         f"support of {type(base).__name__} ({support}); the chains would not move. Check the data "
                         f"(counts must be non-negative integers, labels 0 or 1, ...)")


def _check_model_data(tr):
    """Errors before sampling: a bad model fails early and says why."""
    for name, site in tr.items():
        if site["type"] != "sample":
            continue
        fn = site["fn"]
        if site["is_observed"]:
            v = np.asarray(site["value"])
            try:
                shape = jax.eval_shape(lambda: fn.log_prob(site["value"])).shape
            except Exception as e:  # noqa: BLE001 - re-raised with the site's name
                raise ValueError(f"observed site {name!r}: its data (shape {v.shape}) does not fit its "
                                 f"distribution {type(fn).__name__} (batch shape {fn.batch_shape}): {e}") from e
            if tuple(shape) != tuple(np.broadcast_shapes(fn.batch_shape, v.shape[:v.ndim - len(fn.event_shape)])):
                raise ValueError(f"observed site {name!r}: data of shape {v.shape} against a distribution of batch "
                                 f"shape {fn.batch_shape}")
            if v.shape and fn.batch_shape and v.shape[:len(fn.batch_shape)] != tuple(fn.batch_shape):
                raise ValueError(f"observed site {name!r}: data of shape {v.shape} does not match the distribution's "
                                 f"batch shape {tuple(fn.batch_shape)} (is the tree function's X the rows of the data?)")
            full = tuple(fn.batch_shape) + tuple(fn.event_shape)
            if tuple(np.broadcast_shapes(full, v.shape)) != v.shape:
                raise ValueError(f"observed site {name!r}: data of shape {v.shape} against a distribution of shape "
                                 f"{full} broadcast to {tuple(np.broadcast_shapes(full, v.shape))}, so every value "
                                 f"would be scored against every row; give the data the distribution's shape "
                                 f"(for example y.reshape({full}))")
            _check_observed_values(name, fn, v)
        elif isinstance(fn, TreeEnsemble):
            continue
        elif fn.support.is_discrete and site["infer"].get("enumerate") != "parallel":
            raise ValueError(f"latent site {name!r} is discrete ({type(fn).__name__}); NUTS cannot update it and the "
                             f"tree moves do not: marginalise it (infer={{'enumerate': 'parallel'}}) or make it "
                             f"continuous")


@dataclass
class ModelFit:
    """A sampled model with tree functions.

    Attributes
    ----------
    model : the NumPyro model
    samples : dict of ``(chain, draw, ...)`` arrays of every latent site (tree sites packed
        ``(m, S, 3)``: :mod:`bayestrees.inference.treefn.site`)
    idata : arviz.InferenceData by the posterior contract
    functions : names of the tree functions
    seconds : float
        Wall time of the chains' set-up and run until the draws are on the host (compilation
        included).
    convergence : ConvergenceReport or None
        R-hat and bulk ESS of the scalar posterior variables and of each tree function's mean over
        the training rows and total leaves (:mod:`bayestrees.convergence`; with two chains or
        more), checked when sampled.
    """

    model: Callable
    samples: dict
    idata: Any
    functions: tuple
    seconds: float = 0.0
    convergence: Any = None

    def _flat(self) -> dict:
        return {k: np.asarray(v).reshape((-1,) + np.asarray(v).shape[2:]) for k, v in self.samples.items()}

    def predict(self, *args, random_seed=0, return_sites=None, **kwargs) -> dict:
        """Posterior predictive draws of the model on new arguments (new rows of ``X``):
        ``numpyro.infer.Predictive`` with the kept draws; ``(chain * draw, ...)`` arrays per site
        (the observed sites, the tree functions and every deterministic site)."""
        pred = Predictive(self.model, posterior_samples=self._flat(), return_sites=return_sites, batch_ndims=1)
        out = pred(make_key(random_seed), *args, **kwargs)
        return {k: np.asarray(v) for k, v in out.items()}

    def function(self, name: str, X) -> np.ndarray:
        """The tree function ``name`` at new rows ``X``: ``(chain, draw, n)``, or ``(chain, draw, n,
        k)`` for a function of ``k`` outputs."""
        from .site import function_values, trees_site_name

        if name not in self.functions:
            raise ValueError(f"no tree function {name!r} in this fit; its functions: {list(self.functions)}")
        X = np.asarray(X, dtype=np.float64)
        counts = None if self.idata is None else self.idata.posterior.get(f"{name}_split_counts")
        d = None if counts is None else counts.shape[-1]
        if X.ndim != 2 or (d is not None and X.shape[1] != d):
            raise ValueError(f"X must be rows of the {d} features the function {name!r} was fitted on, shape (n, {d}); "
                             f"got shape {X.shape}")
        if np.any(np.isinf(X)):
            raise ValueError(f"X holds infinite values (row {int(np.argwhere(np.isinf(X))[0][0])}); a tree function "
                             "routes finite features and NaN for a missing value")
        t = np.asarray(self.samples[trees_site_name(name)])
        outputs = t.shape[2] if t.ndim == 6 else 0     # (chain, draw, [k,] m, S, 3)
        attrs = {} if self.idata is None else self.idata.posterior.attrs
        categorical = tuple(int(j) for j in str(attrs.get(f"{name}_subset_split_features", "")).split(",") if j)
        return np.stack([np.asarray(function_values(t[c], X, outputs, categorical)) for c in range(t.shape[0])])

    def save(self, path) -> None:
        """Write the InferenceData (NetCDF); :func:`load_model_fit` with the same model reads it back."""
        self.idata.to_netcdf(str(path))


def load_model_fit(path, model) -> ModelFit:
    """A :class:`ModelFit` from a file written by :meth:`ModelFit.save`, for the same ``model``.

    Parameters
    ----------
    path : str or pathlib.Path
        The NetCDF file that ``fit.save(path)`` wrote.
    model : callable
        The NumPyro model that was sampled (functions are not stored in the file).

    Returns
    -------
    ModelFit
        The draws and InferenceData; ``predict`` and ``function`` work on new rows as before.

    Examples
    --------
    >>> import numpyro, numpyro.distributions as dist
    >>> X = np.random.default_rng(0).uniform(size=(30, 2)); y = X[:, 0]
    >>> def model(X, y=None):
    ...     numpyro.sample("y", dist.Normal(bt.bart_function("f", X, m=3), 0.3), obs=y)
    >>> fit = bt.sample_model(model, X, y=y, draws=10, tune=10, chains=1)
    >>> fit.save("fit.nc")
    >>> bt.load_model_fit("fit.nc", model).function("f", X[:4]).shape
    (1, 10, 4)
    """
    import arviz as az

    idata = az.from_netcdf(str(path))
    latent = [str(v) for v in idata.posterior.attrs.get("latent_sites", "").split(",") if v]
    samples = {k: np.asarray(idata.posterior[k].values) for k in latent}
    funcs = tuple(v for v in idata.posterior.attrs.get("tree_functions", "").split(",") if v)
    for k in idata[TREE_GROUP].data_vars:
        samples[k] = np.asarray(idata[TREE_GROUP][k].values)
    return ModelFit(model, samples, idata, funcs)


def sample_model(model, *args, draws: int = 1000, tune: int = 1000, chains: int = 4, random_seed=0,
                 conjugate="auto", leaf_refresh: int = 0, particles="auto", move_probs=None, local_moves=None,
                 slide="auto", data_devices: int = 1, nuts_kwargs=None,
                 progressbar: bool = False,
                 chain_method="auto",
                 log_likelihood: bool = True, jit_data: bool = False, **kwargs) -> ModelFit:
    """Sample a NumPyro model that holds tree functions; every other latent site by NUTS.

    The tree sites are updated by the library's tree moves
    (:class:`~bayestrees.inference.treefn.kernel.TreeMoves`: exact Metropolis-Hastings; the BART
    family's conjugate step where the likelihood is Normal in the function), every other latent
    site by NUTS, in NumPyro's ``Gibbs`` kernel run by the library's chain loop.

    Parameters
    ----------
    model : callable
        A NumPyro model with at least one :func:`~bayestrees.inference.treefn.site.bart_function`
        or :func:`~bayestrees.inference.treefn.site.tree_function` call.
    *args
        The model's positional arguments (the training data).
    draws : int, default 1000
        Kept draws per chain.
    tune : int, default 1000
        Warm-up steps per chain (NUTS adapts its step size and mass matrix; the trees move too).
    chains : int, default 4
        Number of chains.
    random_seed : int, numpy Generator or JAX key, default 0
    conjugate : {"auto", True, False}, default "auto"
        The conjugate paths of the tree moves: the BART family's step for a likelihood Normal in
        the function (Normal leaves), its Gamma-Poisson analogue for ``Poisson(B exp(f))`` with
        ``leaf_prior="loggamma"``, and for ``Bernoulli(logits=g + f)``, ``Binomial(n, logits=g + f)``
        or ``StudentT(nu, g + f, s)`` with Normal leaves the same step after latent draws (Polya-Gamma;
        the Student-t's Gamma scale mixture) (``"auto"``: each checked
        numerically at the start; ``True`` asserts the leaf prior's path, Normal or Gamma-Poisson,
        unchecked; ``False``: the general path; :mod:`bayestrees.inference.treefn.kernel`).
    leaf_refresh : int >= 0, default 0
        On the general (non-conjugate) path, after each tree's grow or prune, this many further
        sweeps over the trees that keep every tree and propose new leaf values (the same exact
        Metropolis-Hastings move with ``T' = T``; each sweep costs about what the structure sweep
        costs).
    particles : "auto" or int, default "auto"
        Particles of a particle Gibbs regrowth of every tree after its move in each step (a
        conditional SMC update of the whole tree given the others, which can change every rule at
        once; :mod:`bayestrees.inference.regrow`); 0: none.  "auto": 10 for a function of one tree
        (``m = 1``) that can split, 0 for sums of trees.  On the conjugate paths (Normal leaves with a
        likelihood quadratic in the function or a logistic one, log-gamma leaves with a Poisson-type
        one) and on the general path with Normal leaves (proposed under a Gaussian expansion of the likelihood and
        corrected by Metropolis-Hastings: :mod:`bayestrees.inference.treefn.kernel`); the general path
        with log-gamma leaves has none, and asking for particles there raises ``ValueError``.
    move_probs : tuple of 4 or 5 floats, optional
        The tree moves' probabilities of grow, prune, change, swap and (optionally) rotate (grow =
        prune), for every tree function: default grow and prune alone for sums of trees (as BART;
        with slides, ``slide``) and ``(0.25, 0.25, 0.3, 0.1, 0.1)`` for a function of one tree.  A
        rotation lifts a node above its parent where both split the same variable, keeping every
        leaf's rows (:func:`bayestrees.inference.proposals.rotate`).  Every move runs on every path.
    local_moves : int >= 1, optional
        Moves of every tree per step: default 1 for sums of trees, 50 for a function of one tree.
    slide : "auto" or int >= 0, default "auto"
        The change move as a local slide of a threshold by ``1 .. slide`` codes at a node whose
        children are leaves (BART's ``slide``), with ``move_probs`` default ``(0.35, 0.35, 0.3, 0)``;
        on the paths that take the BART family's step only (a likelihood Normal in the function, or
        logistic or Student-t with the latent draws, Normal leaves), else ``ValueError``.  "auto":
        3 for sums of trees on those paths when neither ``move_probs`` nor ``data_devices > 1`` is
        given (the measured default: ``docs/lab-notes/models.md``), else 0.  Slides take no swap or rotation.
    data_devices : int, default 1
        Devices the rows of every tree function's step are split over (BART's ``data_devices``: each
        device holds a block of the rows, the sums over rows are added across them), on the
        conjugate Normal path (a likelihood quadratic in the function) only; the rows must be a
        multiple of it, and ``particles="auto"`` then means no regrowth.  The other sites' updates
        are left to JAX's partitioner.  Chains run with ``chain_method="vectorized"``.
    nuts_kwargs : dict, optional
        Arguments of ``numpyro.infer.NUTS`` (e.g. ``target_accept_prob``).
    progressbar : bool, default False
        A progress bar on stderr (the run is then split in blocks).
    chain_method : {"auto", "vectorized", "parallel", "sequential"}, default "auto"
        How the chains run (:func:`bayestrees.inference.loop.run_chains`, as in every MCMC family):
        ``jax.vmap`` over the chains in one program ("vectorized": the choice for a GPU), each
        chain's own program in threads, one per CPU core or JAX device ("parallel": faster on a
        CPU with several cores), one chain after another ("sequential"), or "auto" ("parallel"
        for several chains on a CPU with several cores, else "vectorized"; with ``data_devices > 1``,
        "vectorized").  The draws are the
        same either way up to floating-point rounding.
    log_likelihood : bool, default True
        Write the observed sites' pointwise log density (``bt.compare``, ``az.loo``).
    jit_data : bool, default False
        Compile the sampling with the model's data as arguments of the programs instead of their
        constants: every array among ``*args`` and ``**kwargs`` of a numeric dtype and one
        dimension or more, and every 0-d array of a real dtype (Python values and 0-d integer
        arrays stay constants), the tree functions' features among them, and each tree function's
        cut table and codes (computed from its concrete features first).  Another call with new
        data of the same shapes and dtypes (a new ``y``, new features with as many cut points:
        simulation-based calibration, ``bt.set_data``, a re-fit) is then the same programs,
        loaded from JAX's persistent compilation cache (:mod:`bayestrees.compile_cache`, on by
        default) instead of compiled again (the sampling loop: 20-30 s at XLA's defaults for a
        model of 1,000 rows).  The draws are not
        bit-identical to ``jit_data=False``: there XLA evaluates what depends on the data alone
        when it compiles (a Normal likelihood's Hessian in ``f``, the support checks of the
        observed values), here when the program runs, and the two differ in float32 rounding
        (about 1e-7 in the leaf values after the first step: ``docs/lab-notes/models.md``).  They are the
        same whether the program was compiled or loaded.  The model must run with those arrays
        traced, and no data value needed in Python (``float(y.max())``, a boolean mask); a model
        whose tree features are computed inside it with NumPy keeps them (and their tables)
        constants, one whose other data cannot be traced either keeps all but its 1-d arrays
        constants, and else a ``ValueError`` says why.  Either way, a later fit whose programs
        are the same (the same model program, settings and shapes, and with ``jit_data=False`` the
        same data: another seed) runs the programs of an earlier fit of this process at once, not
        traced or compiled again; the last few fits' programs are kept
        (:mod:`bayestrees.inference.treefn.programs`, which says what "the same" compares, and
        ``clear_programs()`` to free them).
    **kwargs
        The model's keyword arguments (the observed data, e.g. ``y=y``).

    Returns
    -------
    ModelFit
        With ``idata``: ``posterior`` holds every latent site other than the trees, every
        deterministic site (the tree functions at the training rows among them) and per function
        ``<name>_n_leaves``, ``<name>_depth`` (dims ``chain, draw, <name>_tree``) and
        ``<name>_split_counts`` (dim ``<name>_feature``); ``trees`` holds the tree sites
        (dims ``chain, draw, <name>_tree, <name>_node, field``); ``log_likelihood`` and ``observed_data`` the
        observed sites; ``sample_stats`` ``<name>_accepted`` (tree moves accepted per step) and
        NUTS's ``diverging`` where NUTS runs.  ``convergence`` is the R-hat / ESS table (a
        ``ConvergenceWarning`` when the chains disagree).

    Raises
    ------
    ValueError
        Before sampling, for a model without tree functions, a discrete latent site that nothing
        updates, observed data of the wrong shape, non-finite or mis-shaped tree features, or a
        tree function used where an integer is needed.

    Examples
    --------
    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2)); y = rng.poisson(np.exp(X[:, 0])).astype(float)
    >>> def counts(X, y=None):
    ...     b0 = numpyro.sample("b0", dist.Normal(0.0, 1.0))
    ...     f = bt.bart_function("f", X, m=5)
    ...     numpyro.sample("y", dist.Poisson(jnp.exp(b0 + f)), obs=y)
    >>> fit = bt.sample_model(counts, X, y=y, draws=20, tune=20, chains=1)
    >>> fit.idata.posterior["f"].shape, fit.idata.log_likelihood["y"].shape
    ((1, 20, 40), (1, 20, 40))
    >>> fit.predict(rng.uniform(size=(3, 2)))["y"].shape
    (20, 3)
    """
    draws = check_int("draws", draws, 1)
    data_devices = check_data_devices(data_devices)
    if chain_method not in CHAIN_METHODS:
        raise ValueError(f"chain_method must be one of {CHAIN_METHODS}, got {chain_method!r}")
    if data_devices > 1 and chain_method in ("parallel", "sequential"):   # "auto" is "vectorized" there
        raise ValueError(f"data_devices > 1 puts every chain's rows on the devices: chain_method={chain_method!r} (a "
                         "chain at a time per device) cannot run beside it; use 'vectorized'")
    tune = check_int("tune", tune, 0)
    chains = check_int("chains", chains, 1)
    key = make_key(random_seed)
    try:
        with stump_initialisation():
            tr = prototype_trace(model, key, args, kwargs)
    except (TypeError, IndexError) as e:
        # a tree function's values are floats: JAX refuses them as an index, a shape or a count
        raise ValueError(f"the model failed when run once before sampling ({type(e).__name__}: {e}). A tree "
                         "function's values are real numbers: use them where a real number is needed (a "
                         "location, a log rate, a logit), not as an index, a size or an integer count") from e
    trees = tree_sites(tr)
    if not trees:
        raise ValueError("the model has no tree function: call bt.bart_function(name, X) or bt.tree_function(name, X) in it")
    _check_model_data(tr)
    others = [k for k, s in tr.items() if s["type"] == "sample" and not s["is_observed"] and k not in trees
              and s["infer"].get("enumerate") != "parallel"]
    if jit_data:   # the data (tree features and their tables included) as arguments of the compiled programs
        run_model, run_args, run_kwargs = _data_as_arguments(model, args, kwargs, tr, trees)
    else:
        run_model, run_args, run_kwargs = model, tuple(args), dict(kwargs)
    traced = run_model is not model
    moves = TreeMoves(run_model, conjugate, check_int("leaf_refresh", leaf_refresh, 0), traceable_args=traced,
                      particles=particles, move_probs=move_probs, local_moves=local_moves, slide=slide,
                      data_devices=data_devices).prepare(run_args, run_kwargs)
    nk = dict(nuts_kwargs or {})
    nk.setdefault("find_heuristic_step_size", False)
    data = (tuple(run_args), dict(run_kwargs)) if traced else ()   # the data as arguments of the compiled programs
    t0 = time.perf_counter()
    # the chains and programs of an earlier fit whose programs are these (treefn.programs), or new ones
    fp, held = programs.fingerprint(run_model, run_args, run_kwargs, traced, moves, (tune, bool(others), nk))
    kept = programs.lookup(fp, run_args, run_kwargs, traced)
    if kept is None:
        gibbs = Gibbs([(moves, trees)] + ([(NUTS(run_model, **nk), None)] if others else []))
        chain = GibbsChain(gibbs, tune) if traced else GibbsChain(gibbs, tune, tuple(run_args), dict(run_kwargs))
        kept = (chain, {})
        programs.remember(fp, *kept, held, run_model)
    chain, store = kept
    with stump_initialisation():   # the set-up traces the model; the run itself never draws a tree site
        run = run_chains(key, Kernel(chain.init, chain.step), args=data, chains=chains, draws=draws, tune=tune,
                         collect=chain.collect, progressbar=progressbar, desc="sampling the model",
                         chain_method=chain_method, split_chains=data_devices == 1,
                         init_keys=chain.keys(key, chains), keep_programs=False, programs=store)
    seconds = time.perf_counter() - t0
    samples = {k: np.asarray(v) for k, v in run.samples.items()}
    stats = {"accepted": np.asarray(run.info.accepted)}
    if others:
        stats["diverging"] = np.asarray(run.info.diverging)
    latent = {k: samples[k] for k in trees + tuple(others)}
    fit = ModelFit(model, latent, None, tuple(tr[t]["infer"].get("function", t) for t in trees), seconds)
    fit.idata = _inferencedata(fit, tr, samples, stats, args, kwargs, log_likelihood)
    if chains > 1:   # the table and warning of every MCMC family (bayestrees.convergence)
        fit.convergence = _convergence(fit)
        warn_convergence(fit.convergence, stacklevel=2)
    return fit


class _DataModel:
    """The user's model as a function of its data arrays alone: ``model(*data)`` rebuilds the
    arguments ``(args, kwargs)`` with ``data`` at their places and every other value (Python values,
    ...) as it was given, and calls the user's model.  With ``tables`` (function name -> its
    :class:`~bayestrees.inference.treefn.site.FeatureTable`), the arrays of each table follow the
    data in ``data``, and the tree functions read their cut tables and codes from there
    (:func:`~bayestrees.inference.treefn.site.feature_arguments`)."""

    def __init__(self, model, treedef, leaves: list, places: tuple, tables: dict | None = None):
        self.model, self.treedef, self.places = model, treedef, places
        self.leaves = [None if i in places else v for i, v in enumerate(leaves)]
        self.rows = {name: t.rows for name, t in (tables or {}).items()}
        self.categories = {name: t.categories for name, t in (tables or {}).items()}
        self.__name__ = getattr(model, "__name__", "model")

    @staticmethod
    def table_arrays(tables: dict) -> tuple:
        """The arrays of ``tables`` in the order :meth:`__call__` reads them."""
        return tuple(a for name in tables for a in tables[name][:4])

    def __call__(self, *data, **extra):
        leaves = list(self.leaves)
        for i, v in zip(self.places, data):
            leaves[i] = v
        args, kwargs = jax.tree.unflatten(self.treedef, leaves)
        if not self.rows:
            return self.model(*args, **kwargs, **extra)
        rest = data[len(self.places):]
        tables = {name: FeatureTable(*rest[4 * j: 4 * j + 4], rows, self.categories[name])
                  for j, (name, rows) in enumerate(self.rows.items())}
        with feature_arguments(tables):
            return self.model(*args, **kwargs, **extra)


def _data_as_arguments(model, args, kwargs, tr, trees):
    """``(run_model, run_args, run_kwargs)`` for ``sample_model(..., jit_data=True)``.

    NumPyro compiles the sampling loop with the model's arguments as constants of the program
    (``jit_model_args=False``), so every new ``y`` is a new program.  Here the arrays among the
    arguments (the leaves of ``(args, kwargs)`` of a numeric dtype, one dimension or more, or 0-d of
    a real dtype) become the positional arguments of a :class:`_DataModel` that closes over
    everything else, followed by
    every tree function's feature table (cut points, codes, code ranges: computed here from the
    concrete features, as the site computes them), which the tree functions then read instead of
    computing them from their features (those need concrete values).  Run with
    ``jit_model_args=True`` (and the set-up and the conjugacy probe taking them as arguments too),
    another data set of the same shapes and dtypes (a new ``y``, new features with as many cut
    points) is the same programs.  When the model does not run with them traced (checked by tracing
    it once, abstractly), the tree features are left constants (their tables too), then the 1-d
    arrays alone are tried, then a ``ValueError`` says why.
    """
    flat, treedef = jax.tree_util.tree_flatten_with_path((tuple(args), dict(kwargs)))
    leaves = [v for _, v in flat]
    features = [tr[t]["fn"].X for t in trees]
    tables = {tr[t]["infer"].get("function", t): tr[t]["fn"].table(rows=f"features of {t}") for t in trees}

    def name(path):
        head = f"argument {path[1].idx}" if path[0].idx == 0 else str(path[1].key)
        return head + jax.tree_util.keystr(tuple(path[2:]))

    def is_feature(v):
        a = np.asarray(v)
        return a.ndim == 2 and any(a.shape == X.shape and np.array_equal(a.astype(np.float32), X) for X in features)

    def is_data(v):   # numeric arrays of one dimension or more, and real 0-d arrays (Python numbers stay)
        return (isinstance(v, (np.ndarray, jax.Array)) and not isinstance(v, jax.core.Tracer)
                and np.issubdtype(v.dtype, np.floating if v.ndim == 0 else np.number)
                and not np.issubdtype(v.dtype, np.complexfloating))

    candidates = [i for i, v in enumerate(leaves) if is_data(v)]
    not_features = tuple(i for i in candidates if not is_feature(leaves[i]))
    if not not_features:   # nothing but the features: the model as it is
        return model, tuple(args), dict(kwargs)
    tries = [(tuple(candidates), tables), (not_features, None),
             (tuple(i for i in not_features if np.ndim(leaves[i]) == 1), None)]
    errors = []
    seen = set()
    for places, with_tables in tries:
        if not places or (places, with_tables is None) in seen:
            continue
        seen.add((places, with_tables is None))
        run_model = _DataModel(model, treedef, leaves, places, with_tables)
        run_args = tuple(leaves[i] for i in places) + (_DataModel.table_arrays(with_tables) if with_tables else ())
        error = _trace_error(run_model, run_args)
        if error is None:
            return run_model, run_args, {}
        errors.append(f"with {', '.join(name(flat[i][0]) for i in places)} traced: {error}")
    raise ValueError("jit_data=True: the model does not run with its data arrays as traced arguments ("
                     + "; ".join(errors) + "). A tree function's features must be a model argument itself, not "
                     "computed inside the model from one, and the model must not need the data's values in Python "
                     "(float(y.max()), a boolean mask, ...); sample with jit_data=False (the default)")


def _trace_error(run_model, run_args):
    """None when the model runs with its data arrays traced (abstractly: nothing is computed or
    compiled), else the error, ``"TypeName: message"``."""
    def run(*data):
        with stump_initialisation():
            tr = handlers.trace(handlers.seed(run_model, jax.random.key(0))).get_trace(*data)
        return [s["value"] for s in tr.values() if s["type"] in ("sample", "deterministic")]

    try:
        jax.eval_shape(run, *run_args)
    except Exception as e:  # noqa: BLE001 - reported by the caller
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def _convergence(fit: ModelFit):
    """R-hat and ESS of every scalar site and, per tree function, of two scalar summaries that move
    with its trees: ``<name>_mean`` (its mean over the training rows) and ``<name>_leaves`` (the
    leaves of all its trees), so a model whose only latent sites are trees is checked too."""
    import arviz as az

    post = fit.idata.posterior
    arrays = {v: np.asarray(post[v].values) for v in post.data_vars if post[v].ndim == 2}
    for name in fit.functions:
        if name in post and post[name].ndim == 3:
            arrays[f"{name}_mean"] = np.asarray(post[name].values, np.float64).mean(-1)
        elif name in post and post[name].ndim == 4:   # several outputs: each its own
            mean = np.asarray(post[name].values, np.float64).mean(2)
            arrays.update({f"{name}_mean_{j}": mean[..., j] for j in range(mean.shape[-1])})
        if f"{name}_n_leaves" in post:
            leaves = np.asarray(post[f"{name}_n_leaves"].values).sum(-1)
            if leaves.ndim == 3:
                arrays.update({f"{name}_leaves_{j}": leaves[..., j] for j in range(leaves.shape[-1])})
            else:
                arrays[f"{name}_leaves"] = leaves
    probe = az.from_dict(posterior=arrays)
    probe.posterior.attrs.update(post.attrs)
    return check_convergence(probe)


def _inferencedata(fit: ModelFit, tr, samples, stats, args, kwargs, want_ll: bool):
    trees = [k for k in tr if k in fit.samples and isinstance(tr[k]["fn"], TreeEnsemble)]
    posterior, dims = {}, {}
    for k, v in samples.items():
        if k in trees:
            continue
        posterior[k] = v
        if tr.get(k, {}).get("type") == "deterministic" and k in fit.functions:
            dims[k] = ["obs"] if v.ndim == 3 else (["obs", f"{k}_output"] if v.ndim == 4 else None)
    for t in trees:
        name = tr[t]["infer"].get("function", t)
        s = tree_summaries_of(samples[t], tr[t]["fn"].X.shape[1])
        posterior[f"{name}_n_leaves"] = s["n_leaves"]
        posterior[f"{name}_depth"] = s["depth"]
        posterior[f"{name}_split_counts"] = s["split_counts"]
        out = [f"{name}_output"] if tr[t]["fn"].spec.outputs else []
        dims[f"{name}_n_leaves"] = out + [f"{name}_tree"]
        dims[f"{name}_depth"] = out + [f"{name}_tree"]
        dims[f"{name}_split_counts"] = out + [f"{name}_feature"]
    observed = {k: np.asarray(s["value"]) for k, s in tr.items() if s["type"] == "sample" and s["is_observed"]}
    ll = {}
    if want_ll and observed:
        # the functions' values at the rows as the chains kept them, instead of the rows routed through
        # every kept draw of the trees again (which cost more than the rest of this step); the two agree
        # to float32 rounding
        flat = fit._flat()
        given = tuple(name for name in fit.functions if name in samples)
        flat.update({name: samples[name].reshape((-1,) + samples[name].shape[2:]) for name in given})
        with given_values(given):
            lls = numpyro_log_likelihood(fit.model, flat, *args, batch_ndims=1, **kwargs)
        C = next(iter(fit.samples.values())).shape[0]
        ll = {k: np.asarray(v).reshape((C, -1) + np.asarray(v).shape[1:]) for k, v in lls.items()}
    for k, v in observed.items():
        if v.ndim == 1:
            dims.setdefault(k, ["obs"])
    dims = {k: v for k, v in dims.items() if v}
    ss = {}
    acc = stats.get("accepted")
    if acc is not None:
        for i, t in enumerate(trees):
            ss[f"{tr[t]['infer'].get('function', t)}_accepted"] = np.asarray(acc)[..., i]
    if "diverging" in stats:
        ss["diverging"] = np.asarray(stats["diverging"])
    attrs = {"family": "model", "inference": "mcmc", "sampler": "tree moves within Gibbs, NUTS for the other sites",
             "tree_functions": ",".join(fit.functions), "latent_sites": ",".join(k for k in fit.samples if k not in trees),
             "sampling_seconds": fit.seconds,
             **{f"{tr[t]['infer'].get('function', t)}_subset_split_features": ",".join(map(str, tr[t]["fn"].spec.categorical))
                for t in trees if tr[t]["fn"].spec.categorical}}
    return model_inferencedata(posterior, trees={t: samples[t] for t in trees}, log_likelihood=ll, observed=observed,
                               sample_stats=ss, dims=dims, attrs=attrs)
