"""BET (Duan, Clancy & Szczesniak): a Dirichlet-process mixture of trees, fit by a slice sampler.

:func:`fit_bet` takes a key, validated training data
(:class:`~bayestrees.data.TrainingData`) and a :class:`BETConfig`, runs ``chains``
chains of the kernel of :mod:`bayestrees.inference.bet.kernel` through the
shared chain loop and returns a :class:`BETResult`; the estimators
(:mod:`bayestrees.estimators.bet`) and ``bt.BETMixture``
(:mod:`bayestrees.models.bet`) are thin layers over it, :func:`bet_inferencedata`
and :func:`bet_values`.

Regression responses are standardised inside (the objective prior is then applied to
the standardised response); leaf means, ``sigma``, ``mu`` and the pointwise
log-likelihood are reported in the response's units.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...convert import to_inferencedata
from ...data import TrainingData, check_dtype, check_int, check_positive, check_probability, sampler_inputs
from ...leaves import NIGPrior, make_leaf_model
from ...priors import DepthDecayPrior, canonical, traced_params
from ...tree import Tree, apply, predict
from . import kernel as bet_kernel
from .. import moves
from ..missing import column_categories, missing_rules, route_coded, subset_attrs, subset_features
from ..loop import check_chain_method, run_chains

__all__ = ["FAMILY", "BETConfig", "BETResult", "fit_bet", "bet_inferencedata", "bet_values", "leaf_slots", "best_ensemble",
           "component_rows", "MAX_ROWS", "MAX_TREES"]

FAMILY = "bet"

#: rows the fixed arrays take (every draw stores Z, one int per row, and every tree step routes every row
#: through J trees)
MAX_ROWS = 200_000

#: the largest J_max accepted
MAX_TREES = 256


@dataclass(frozen=True)
class BETConfig:
    """Validated settings of a BET fit.

    Parameters
    ----------
    alpha_dp : float > 0  Dirichlet-process concentration (stick-breaking ``Beta(1, alpha_dp)``)
    delta : float > 0  depth decay: a node at depth ``d`` splits with probability ``exp(-d / delta)``
    min_leaf_rows : int >= 2  ``q``: every node of a tree holds at least ``q`` of its rows
    max_trees : int >= 1  ``J_max``, the fixed number of tree slots (components)
    init_trees : int >= 1  the chain starts with the rows spread at random over this many trees
    active_trees : int >= 1  occupied trees swept per step (all of them when at most this many are
        occupied, else this many chosen at random; unoccupied ones are drawn from the prior)
    leaf_concentration : float  Dirichlet concentration of class leaves (the paper: 0.5)
    leaf_prior : "objective" (``p(mu, s2) ∝ 1/s2``, the paper) or a ``NIGPrior`` (proper, on the
        standardised response) for regression
    particles : int, 0 or >= 2  a particle Gibbs regrowth of each swept tree after its sweep, with this
        many particles (:mod:`bayestrees.inference.pgibbs`; it changes the root, which the sweep
        seldom does once a subtree hangs below it); 0: the sweep alone (the paper's sampler)
    regrow_rate : float in (0, 1]  with ``particles``, the probability that a step regrows its swept
        trees (default 0.1: about twice the sweep's cost; every step costs about 13 times it at
        ``max_depth=5``)
    draws, tune, chains, thin : chain lengths (per chain)
    max_depth : deepest leaf level (the prior is truncated there, explicitly)
    on_overflow : "warn" or "raise" when the slice reached past ``max_trees`` components
    dtype : "float32" or "float64"
    progressbar : print progress on stderr
    chain_method : "auto", "vectorized" or "parallel": how several chains run
        (:func:`bayestrees.inference.loop.run_chains`; "auto": in threads on a multi-core CPU,
        vmapped otherwise)
    """

    alpha_dp: float = 1.0
    delta: float = 2.0
    min_leaf_rows: int = 5
    max_trees: int = 10
    active_trees: int = 4
    init_trees: int = 4
    leaf_concentration: float = 0.5
    leaf_prior: Any = "objective"
    particles: int = 10
    regrow_rate: float = 0.1
    draws: int = 1000
    tune: int = 1000
    chains: int = 1
    thin: int = 1
    max_depth: int = 5
    on_overflow: str = "warn"
    dtype: Any = "float32"
    progressbar: bool = False
    chain_method: str = "auto"

    def __post_init__(self):
        check_positive("alpha_dp", self.alpha_dp)
        check_positive("delta", self.delta)
        check_int("min_leaf_rows", self.min_leaf_rows, 2, hint=" (q: every leaf must hold at least 2 rows, so "
                                                              "that the objective leaf posterior is proper)")
        check_int("max_trees", self.max_trees, 1, MAX_TREES)
        check_int("particles", self.particles, 0)
        if self.regrow_rate != 1.0:   # a probability in (0, 1], 1 every step
            check_probability("regrow_rate", self.regrow_rate)
        if self.particles == 1:
            raise ValueError("particles must be 0 (no regrowth) or at least 2, got 1")
        check_int("active_trees", self.active_trees, 1)
        check_int("init_trees", self.init_trees, 1)
        check_positive("leaf_concentration", self.leaf_concentration)
        check_int("draws", self.draws, 1)
        check_int("tune", self.tune, 0)
        check_int("chains", self.chains, 1)
        check_int("thin", self.thin, 1)
        check_int("max_depth", self.max_depth, 0, 12)
        if not (self.leaf_prior == "objective" if isinstance(self.leaf_prior, str) else
                isinstance(self.leaf_prior, NIGPrior)):
            raise ValueError(f"leaf_prior must be 'objective' or a bayestrees.leaves.NIGPrior, got {self.leaf_prior!r}")
        if self.on_overflow not in ("warn", "raise"):
            raise ValueError(f"on_overflow must be 'warn' or 'raise', got {self.on_overflow!r}")
        check_dtype(self.dtype)
        check_chain_method(self.chain_method)

    def leaf_model_for(self, task: str, n_classes: int):
        """The leaf model for the task: :func:`bayestrees.leaves.make_leaf_model`."""
        kind = "dirichlet" if task == "classification" else (
            "normal" if isinstance(self.leaf_prior, NIGPrior) else "objective")
        return make_leaf_model(task, kind=kind, n_classes=n_classes, alpha=self.leaf_concentration,
                               prior=self.leaf_prior if kind == "normal" else None)

    def kernel_config(self, task: str, n_classes: int, d: int, columns: int | None = None,
                      n_codes: int = 0, subset_columns: tuple = ()) -> bet_kernel.KernelConfig:
        """The kernel's settings for ``d`` features (``columns`` code columns, ``d`` by default; more
        with missing values: :mod:`bayestrees.inference.missing`) of ``n_codes`` codes (the bound the
        regrowth needs; 0 or ``particles=0``: the sweep alone); ``subset_columns`` the code columns
        split by subsets of their categories."""
        regrow = self.particles > 0 and n_codes > 0
        mc = moves.MCMCConfig(prior=DepthDecayPrior(float(self.delta)), leaf_model=self.leaf_model_for(task, n_classes),
                              max_depth=self.max_depth, n_features=d if columns is None else int(columns), scheme="sweep",
                              min_leaf_rows=int(self.min_leaf_rows), particles=max(int(self.particles), 2),
                              n_codes=int(n_codes) if regrow else 0, subset_columns=tuple(subset_columns))
        return bet_kernel.KernelConfig(mcmc=mc, max_trees=int(self.max_trees), n_features=d,
                                       active_trees=int(self.active_trees), init_trees=int(self.init_trees),
                                       regrow_rate=float(self.regrow_rate))


@dataclass
class BETResult:
    """A BET fit: ``draws`` is a :class:`~bayestrees.inference.bet.kernel.Draw` with leading dims
    ``(chains, draws)`` (numpy), leaf values, ``sigma``, ``mu`` and ``log_lik`` in response units;
    ``info`` the kernel's Info of the kept steps; ``overflow_total`` the slice overflows over every step
    kept (``info.overflow`` summed).  With features split by subsets of their categories,
    ``categories`` (int32 (d',): each coded column's root category mask, 0 for the others), ``missing``
    (the coding of :mod:`bayestrees.inference.missing`, or None) and ``coded_rules`` (the trees'
    ``(feature, threshold)`` on the coded columns, by which rows are routed: :func:`leaf_slots`)."""

    draws: Any
    info: Any
    leaf_model: Any
    config: BETConfig
    y_shift: float
    y_scale: float
    seconds: float
    overflow_total: int
    categories: Any = None
    missing: Any = None
    coded_rules: Any = None

    @property
    def trees(self) -> Tree:
        return self.draws.tree


def check_rows(n: int) -> None:
    if n > MAX_ROWS:
        raise ValueError(f"BET keeps every row's component in fixed arrays: at most {MAX_ROWS} rows, got {n}; "
                         "fit on a sub-sample of the rows")


def fit_bet(key, data: TrainingData, config: BETConfig) -> BETResult:
    """Run the BET sampler on ``data``.

    Parameters
    ----------
    key : PRNG key
    data : TrainingData; missing values in X are routed by rules that also say where a missing
        value goes (:mod:`bayestrees.inference.missing`; the split-variable weights ``xi`` stay over
        the features, a feature's two columns sharing its weight)
    config : BETConfig

    Returns
    -------
    BETResult
    """
    dtype = jnp.dtype(check_dtype(config.dtype))
    subsets = subset_features(data)
    rules = missing_rules(data.codes, data.n_bins, subsets)   # None without missing values
    codes, y, shift, scale = sampler_inputs(data, "BET", dtype, rules)
    categories = column_categories(codes, subsets, rules)   # None without subset features
    check_rows(data.n)
    if data.n < 2 * config.min_leaf_rows:
        raise ValueError(f"BET needs at least 2 * min_leaf_rows = {2 * config.min_leaf_rows} rows to split a tree, "
                         f"got {data.n}; lower min_leaf_rows or add rows")
    task = data.task
    yt = jnp.asarray(y)
    kcfg = config.kernel_config(task, data.n_classes, data.d, codes.shape[1],
                                n_codes=int(np.max(data.n_bins)) + (rules is not None),   # a coded column: one code more
                                subset_columns=() if categories is None else tuple(int(j) for j in np.flatnonzero(categories)))
    lm = kcfg.mcmc.leaf_model
    # delta and alpha_dp are traced arguments: fits that differ only in them share one compilation.  With
    # missing values the rules are on the coded columns, xi stays over the features
    # (bet_kernel.column_weights)
    bdata = bet_kernel.BETData(jnp.asarray(codes), yt, lm.row_stats(yt, dtype), jnp.asarray(config.alpha_dp, dtype),
                               prior=traced_params(kcfg.mcmc.prior, dtype),
                               source=None if rules is None else jnp.asarray(rules.source, jnp.int32),
                               share=None if rules is None else jnp.asarray(np.where(rules.doubled, 0.5, 1.0), dtype),
                               categories=None if categories is None else jnp.asarray(categories, jnp.int32))
    kcfg = replace(kcfg, mcmc=replace(kcfg.mcmc, prior=canonical(kcfg.mcmc.prior)))
    kernel = bet_kernel.build_kernel(kcfg, dtype)
    t0 = time.perf_counter()
    res = run_chains(key, kernel, args=(bdata,), chains=config.chains, draws=config.draws, tune=config.tune,
                     thin=config.thin, collect=bet_kernel.collect(kcfg), progressbar=config.progressbar, desc="BET",
                     chain_method=config.chain_method)
    draws = jax.tree_util.tree_map(np.asarray, res.samples)
    info = jax.tree_util.tree_map(np.asarray, res.info)
    seconds = time.perf_counter() - t0
    coded = (draws.tree.feature, draws.tree.threshold) if categories is not None else None
    if rules is not None:   # the rules of the coded columns as the original features' with their missing side
        feature, threshold, missing_left = rules.to_original(draws.tree.feature, draws.tree.threshold)
        draws = draws._replace(tree=draws.tree._replace(feature=feature, threshold=threshold.astype(
            draws.tree.threshold.dtype), missing_left=missing_left))
    if task == "regression":
        draws = draws._replace(tree=draws.tree._replace(value=draws.tree.value * scale + shift),
                               sigma=draws.sigma * scale, mu=draws.mu * scale + shift,
                               log_lik=draws.log_lik - math.log(scale),
                               log_lik_y_given_z=draws.log_lik_y_given_z - data.n * math.log(scale),
                               log_lik_y_z=draws.log_lik_y_z - data.n * math.log(scale))
    over = int(np.sum(info.overflow))
    if over:
        msg = (f"BET: in {int(np.sum(info.overflow > 0))} of {info.overflow.size} kept steps the slice needed more "
               f"than max_trees={config.max_trees} trees ({over} row-steps in all); the components beyond it were "
               "left out of those rows' choices: raise max_trees")
        if config.on_overflow == "raise":
            raise RuntimeError(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
    return BETResult(draws, info, lm, config, shift, scale, seconds, over, categories=categories, missing=rules,
                     coded_rules=coded)


def bet_inferencedata(result: BETResult, data: TrainingData, *, y_name: str = "y", attrs=None):
    """The posterior contract for a BET fit (:func:`bayestrees.convert.to_inferencedata`).

    ``posterior``: ``n_leaves``, ``depth``, ``split_counts`` (dims ``component``[, ``feature``]),
    ``mu`` (the cluster-specific fitted value at the training rows), ``n_trees`` (the model's trees:
    components holding at least ``q = min_leaf_rows`` rows), ``n_components`` (every occupied
    component), ``w`` (dim ``component``), ``Z`` (dim ``obs``), ``xi`` (dims ``component, feature``),
    ``xi_bar`` (dim ``feature``); ``trees`` with a ``component`` dim; ``sample_stats``: ``log_lik_y_given_z``
    ([Y | Z, T]), ``log_lik_y_z`` ([Y, Z | T]), ``lp`` (= ``log_lik_y_z``), ``overflow``, ``tail``,
    ``n_accepted``, ``xi_accepted``; ``log_likelihood``: the mixture density
    ``log sum_j w_j p(y_i | T_j, theta_j)``.
    """
    dr, info = result.draws, result.info
    cfg = result.config
    J = cfg.max_trees
    meta = {"inference": "mcmc (blocked Gibbs, slice sampler)", "alpha_dp": cfg.alpha_dp, "delta": cfg.delta,
            **subset_attrs(result.categories, result.missing, data.feature_names),
            "min_leaf_rows": cfg.min_leaf_rows, "max_trees": J, "max_depth": cfg.max_depth,
            "leaf_model": type(result.leaf_model).__name__, "sampling_seconds": result.seconds,
            "slice_overflow": result.overflow_total,
            "mu": "cluster-specific fitted value E(theta | T_{Z_i}) at the training rows",
            **dict(attrs or {})}
    ss = {"log_lik_y_given_z": dr.log_lik_y_given_z, "log_lik_y_z": dr.log_lik_y_z, "lp": dr.log_lik_y_z,
          "overflow": info.overflow, "tail": info.tail, "n_accepted": info.n_accepted,
          "xi_accepted": info.xi_accepted}
    mu = dr.mu[..., 0] if data.task == "regression" else dr.mu
    n_trees = (component_rows(dr.z, J) >= cfg.min_leaf_rows).sum(-1).astype(np.asarray(dr.n_trees).dtype)
    extra = {"n_trees": n_trees, "n_components": dr.n_trees, "w": dr.w, "Z": dr.z, "xi": dr.xi, "xi_bar": dr.xi_bar}
    dims = {"n_trees": [], "n_components": [], "w": ["component"], "Z": ["obs"], "xi": ["component", "feature"],
            "xi_bar": ["feature"]}
    return to_inferencedata(
        dr.tree, family=FAMILY, task=data.task, feature_names=data.feature_names, y_name=y_name,
        observed=data.y_observed, mu=mu, log_likelihood=dr.log_lik, class_names=data.classes, n_bins=data.n_bins,
        tree_dims=("component",), posterior_extra=extra, sample_stats=ss, extra_dims=dims,
        coords={"component": list(range(J))}, attrs=meta)


def component_rows(z, n_components: int) -> np.ndarray:
    """Rows in each component of every draw.

    Parameters
    ----------
    z : int array ``(..., n)``
        The component of every row (``Z``).
    n_components : int
        ``J``, the number of component slots.

    Returns
    -------
    np.ndarray ``(..., J)``
        Row counts; the model's trees are the components with at least ``min_leaf_rows``.
    """
    z = np.asarray(z)
    batch, n = z.shape[:-1], z.shape[-1]
    m = int(np.prod(batch))
    flat = (np.arange(m)[:, None] * n_components + z.reshape(m, n)).ravel()
    return np.bincount(flat, minlength=m * n_components).reshape(batch + (n_components,))


def _weights(w, occupied):
    """Ensemble weights over the occupied components: ``w_j 1[n_j > 0] / sum``."""
    ww = np.where(occupied, w, 0.0)
    return ww / np.maximum(ww.sum(-1, keepdims=True), 1e-300)


def leaf_slots(result: BETResult, codes) -> np.ndarray:
    """Every component tree's leaf slot of every coded row, int32 ``(chains, draws, J, n)``: by the
    trees' rules, or with features split by subsets by the rules on the coded columns."""
    if result.categories is None:
        return np.asarray(apply(result.draws.tree, np.asarray(codes)))
    return route_coded(*result.coded_rules, codes, result.config.max_depth, result.categories, result.missing)


def bet_values(trees: Tree, w, occupied, codes, leaf=None) -> np.ndarray:
    """The ensemble estimator of every draw at coded rows: ``sum_j w~_j theta_j(x)``, ``(chains, draws, n, V)``.

    ``w~`` are the stick weights of the occupied components, normalised to sum to 1.  ``leaf``: each
    tree's leaf slot of every row (:func:`leaf_slots`), where the trees' own routing does not apply.
    """
    if leaf is None:
        vals = np.asarray(predict(trees, np.asarray(codes)))                 # (c, d, J, n, V)
    else:
        vals = np.take_along_axis(np.asarray(trees.value), np.asarray(leaf)[..., None], -2)
    ww = _weights(np.asarray(w), np.asarray(occupied))                       # (c, d, J)
    return np.einsum("cdj,cdjnv->cdnv", ww, vals)


def best_ensemble(result: BETResult) -> dict:
    """The draw with the highest ``[Y, Z | T]``: its trees (J,), weights, occupied mask and where it was."""
    dr = result.draws
    c, d = np.unravel_index(int(np.argmax(dr.log_lik_y_z)), dr.log_lik_y_z.shape)
    trees = jax.tree_util.tree_map(lambda a: np.asarray(a)[c, d], dr.tree)
    return {"trees": trees, "w": np.asarray(dr.w[c, d]), "occupied": np.asarray(dr.occupied[c, d]),
            "xi": np.asarray(dr.xi[c, d]), "chain": int(c), "draw": int(d),
            "log_lik_y_z": float(dr.log_lik_y_z[c, d]), "n_trees": int(dr.n_trees[c, d])}
