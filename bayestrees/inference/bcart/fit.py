"""The Bayesian CART family (Chipman, George & McCulloch 1998) by MCMC over trees.

:func:`fit_bcart` takes a key, validated training data
(:class:`~bayestrees.data.TrainingData`) and a :class:`BCARTConfig`, runs
``chains`` chains of the sampler of :mod:`bayestrees.inference.moves` through
the shared chain loop, and returns a :class:`BCARTResult`; the estimators
(:mod:`bayestrees.estimators.bcart`) and ``bt.BayesianCART``
(:mod:`bayestrees.models.bcart`) are thin layers over it and over
:func:`bcart_inferencedata` and :func:`bcart_values`.

Regression responses are standardised inside (``(y - mean) / sd``) so that
one default leaf prior suits every scale; draws of the leaf means and of
``sigma``, the fitted function ``mu`` and the pointwise log-likelihood are
reported in the response's units.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...convert import to_inferencedata
from ...data import TrainingData, check_dtype, check_int, check_positive, sampler_inputs
from ...leaves import NIGPrior, make_leaf_model
from ...priors import ChipmanPrior, DepthDecayPrior, LeafCountPrior, canonical, traced_params
from ...tree import Tree, apply, predict
from .. import moves
from ..missing import column_categories, missing_rules, route_coded, split_log_weights, subset_attrs, subset_features
from .schemes import kernel_for
from ..loop import check_chain_method, run_chains

__all__ = ["FAMILY", "LEAF_MODELS", "BCARTConfig", "BCARTResult", "fit_bcart", "bcart_inferencedata",
           "bcart_values", "leaf_slots", "leaf_values", "default_leaf_prior", "MAX_DEPTH_LIMIT", "DEFAULT_LADDER"]

FAMILY = "bayesian_cart"

#: leaf models by name: "auto" is "common_variance" for regression and "dirichlet" for classes
LEAF_MODELS = ("auto", "common_variance", "normal", "dirichlet")

#: the deepest tree the fixed heap arrays allow (2^13 - 1 = 8191 slots)
MAX_DEPTH_LIMIT = 12

#: the inverse temperatures of the default scheme ("mixed" with ``temperatures=None``): 8 rungs from 1
#: down to 0.1, evenly spaced in log
DEFAULT_LADDER = tuple(float(b) for b in np.geomspace(1.0, 0.1, 8))


def default_leaf_prior() -> NIGPrior:
    """The Normal-inverse-gamma leaf prior on the standardised response.

    The noise variance follows Chipman et al.'s calibration: ``s2 ~ nu lam /
    chi2_nu`` with ``nu = 3`` and ``lam`` set so that ``P(s2 < 1) = 0.9`` (1 is
    the response's variance after standardising), i.e. ``IG(nu / 2, nu lam / 2)``
    with ``lam = chi2_3^-1(0.1) / 3 = 0.1948``.  Leaf means are
    ``N(0, s2 / 0.1)`` given ``s2``.
    """
    nu, lam = 3.0, 0.58438 / 3.0  # chi2(3).ppf(0.1) = 0.58438
    return NIGPrior(m0=0.0, kappa0=0.1, a0=nu / 2.0, b0=nu * lam / 2.0)


@dataclass(frozen=True)
class BCARTConfig:
    """Validated settings of a Bayesian CART fit.

    Parameters
    ----------
    prior : a :mod:`bayestrees.priors` object (ChipmanPrior, LeafCountPrior, DepthDecayPrior)
    leaf_model : "auto", "common_variance", "normal" (mean and variance per leaf) or "dirichlet";
        or a :mod:`bayestrees.leaves` model object (its prior on the standardised response)
    leaf_concentration : Dirichlet concentration of the class leaves
    draws, tune, chains, thin : chain lengths (per chain)
    max_depth : deepest leaf level (the prior is truncated there, explicitly)
    move_probs : probabilities of grow, prune, change, swap and optionally rotate (a node lifted above its
        parent where both split the same variable, every leaf keeping its rows)
    scheme : "mixed" (the default: ``local_moves`` local moves, then a particle Gibbs regrowth of the
        tree, per step; on a ladder of temperatures, the local moves run tempered and the regrowth
        is the cold replica's: :class:`bayestrees.inference.pgibbs.LadderMixedStep`), "pgibbs" (the
        whole tree regrown per step by conditional SMC, :mod:`bayestrees.inference.pgibbs`), "moves"
        (one random move per step) or "sweep" (every node per step)
    particles : particles of the "pgibbs" and "mixed" regrowth (at least 2)
    local_moves : local moves (on a ladder: rounds of one move per replica and one exchange) before
        each regrowth of scheme "mixed"
    temperatures : inverse temperatures ``(1, b_1, ...)`` of a parallel-tempering ensemble per chain;
        draws come from the ``b = 1`` replica.  Default ``None``: :data:`DEFAULT_LADDER` for scheme
        "mixed", ``(1,)`` (no tempering) for the others
    dtype : "float32" or "float64"
    progressbar : print progress on stderr
    chain_method : "auto", "vectorized" or "parallel": how several chains run
        (:func:`bayestrees.inference.loop.run_chains`; "auto": in threads on a multi-core CPU,
        vmapped otherwise)
    """

    prior: Any = ChipmanPrior()
    leaf_model: Any = "auto"
    leaf_concentration: float = 1.0
    draws: int = 700
    tune: int = 300
    chains: int = 4
    thin: int = 1
    max_depth: int = 6
    move_probs: tuple = (0.25, 0.25, 0.4, 0.1)
    scheme: str = "mixed"
    particles: int = 10
    local_moves: int = 25
    temperatures: tuple | None = None
    dtype: Any = "float32"
    progressbar: bool = False
    chain_method: str = "auto"

    def __post_init__(self):
        if not isinstance(self.prior, (ChipmanPrior, LeafCountPrior, DepthDecayPrior)):
            raise ValueError(f"prior must be a bt.priors object (ChipmanPrior, LeafCountPrior or DepthDecayPrior), "
                             f"got {self.prior!r}")
        if isinstance(self.leaf_model, str) and self.leaf_model not in LEAF_MODELS:
            raise ValueError(f"leaf_model must be one of {LEAF_MODELS} or a bayestrees.leaves model, "
                             f"got {self.leaf_model!r}")
        check_int("draws", self.draws, 1)
        check_int("tune", self.tune, 0)
        check_int("chains", self.chains, 1)
        check_int("thin", self.thin, 1)
        check_int("max_depth", self.max_depth, 0, MAX_DEPTH_LIMIT)
        if self.scheme not in moves.SCHEMES:
            raise ValueError(f"scheme must be one of {moves.SCHEMES}, got {self.scheme!r}")
        if self.temperatures is None:   # the scheme's own default (a frozen dataclass: set once, here)
            object.__setattr__(self, "temperatures", DEFAULT_LADDER if self.scheme == "mixed" else (1.0,))
        check_int("particles", self.particles, 2)
        check_int("local_moves", self.local_moves, 0)
        check_positive("leaf_concentration", self.leaf_concentration)
        check_dtype(self.dtype)
        check_chain_method(self.chain_method)

    def leaf_model_for(self, task: str, n_classes: int):
        """The leaf model object for the task (checked against it): :func:`bayestrees.leaves.make_leaf_model`."""
        kind = self.leaf_model
        if kind == "auto":
            kind = "dirichlet" if task == "classification" else "common_variance"
        return make_leaf_model(task, kind=kind, n_classes=n_classes, alpha=self.leaf_concentration,
                               prior=default_leaf_prior())


@dataclass
class BCARTResult:
    """A Bayesian CART fit.

    trees : Tree, batch (chains, draws): drawn leaf parameters in ``value`` (response units)
    sigma : (chains, draws, S) drawn noise sd per slot (response units; 0 for classes)
    mu : (chains, draws, n[, C]) the drawn function at the training rows
    log_lik : (chains, draws, n) pointwise log p(y_i | draw) (response units)
    info : mcmc.Info with leading (chains, draws)
    lp : (chains, draws) log target
    leaf_model, y_shift, y_scale, seconds
    categories : int32 (d',) or None  the root category mask of each (coded) column split by subsets
        of its categories (0 for the others); None when no feature is.  Such a rule's ``threshold``
        is the mask of the categories it sends left (a category its node's rows do not hold goes
        right)
    missing : the coding of the features with missing values (:mod:`bayestrees.inference.missing`), or None
    coded_rules : (feature, threshold) int32 (chains, draws, S) on the coded columns, kept with
        ``categories`` (rows are routed by them: :func:`leaf_slots`)
    """

    trees: Tree
    sigma: np.ndarray
    mu: np.ndarray
    log_lik: np.ndarray
    info: Any
    lp: np.ndarray
    leaf_model: Any
    config: BCARTConfig
    y_shift: float
    y_scale: float
    seconds: float
    categories: Any = None
    missing: Any = None
    coded_rules: Any = None


def fit_bcart(key, data: TrainingData, config: BCARTConfig) -> BCARTResult:
    """Run the Bayesian CART sampler on ``data``.

    Parameters
    ----------
    key : PRNG key
    data : TrainingData; missing values in X are routed by rules that also say where a missing
        value goes (:mod:`bayestrees.inference.missing`; not with the leaf-count prior)
    config : BCARTConfig

    Returns
    -------
    BCARTResult
    """
    dtype = jnp.dtype(check_dtype(config.dtype))
    subsets = subset_features(data)
    rules = missing_rules(data.codes, data.n_bins, subsets)   # None without missing values
    if rules is not None and isinstance(config.prior, LeafCountPrior):
        raise ValueError("Bayesian CART with missing values in X does not take the leaf-count (PCFG) prior: its "
                         "canonical trees are defined on the features, not on a rule's missing side; impute "
                         "first, or use ChipmanPrior or DepthDecayPrior")
    if subsets.any() and isinstance(config.prior, LeafCountPrior):
        raise ValueError("Bayesian CART with categorical features split by subsets does not take the leaf-count "
                         "(PCFG) prior: its canonical trees count the rules of ordered codes; use ChipmanPrior or "
                         "DepthDecayPrior, or give the categories as ordered codes")
    codes, y, shift, scale = sampler_inputs(data, "Bayesian CART", dtype, rules)
    categories = column_categories(codes, subsets, rules)   # None without subset features
    task = data.task
    lm = config.leaf_model_for(task, data.n_classes)
    yt = jnp.asarray(y)
    # the prior's values are traced arguments (the config names its kind): fits that differ only in
    # them share one compilation.  With missing values the rules are on the coded columns, a
    # feature's two columns at half its weight each (bayestrees.inference.missing)
    mdata = moves.MCMCData(codes=jnp.asarray(codes), y=yt, row_stats=lm.row_stats(yt, dtype), weight=jnp.ones(data.n, dtype),
                           prior=traced_params(config.prior, dtype),
                           var_weight=None if rules is None else jnp.asarray(np.exp(split_log_weights(rules)), dtype),
                           categories=None if categories is None else jnp.asarray(categories, jnp.int32))
    n_codes = int(np.max(data.n_bins)) + (rules is not None)   # a coded column has one code more
    cfg = moves.MCMCConfig(prior=canonical(config.prior), leaf_model=lm, max_depth=config.max_depth,
                           n_features=codes.shape[1], move_probs=tuple(float(p) for p in config.move_probs),
                           scheme=config.scheme, temperatures=tuple(float(b) for b in config.temperatures),
                           particles=config.particles, local_moves=config.local_moves,
                           n_codes=n_codes if config.scheme in ("pgibbs", "mixed") else 0,
                           subset_columns=() if categories is None else tuple(int(j) for j in np.flatnonzero(categories)))
    kernel = kernel_for(cfg, dtype)
    t0 = time.perf_counter()
    res = run_chains(key, kernel, args=(mdata,), chains=config.chains, draws=config.draws, tune=config.tune,
                     thin=config.thin, collect=moves.collect(cfg), progressbar=config.progressbar,
                     desc="Bayesian CART", chain_method=config.chain_method)
    draws = jax.tree_util.tree_map(np.asarray, res.samples)
    info = jax.tree_util.tree_map(np.asarray, res.info)
    seconds = time.perf_counter() - t0
    tree = draws.tree
    coded = (tree.feature, tree.threshold) if categories is not None else None
    if rules is not None:   # the rules of the coded columns as the original features' with their missing side
        feature, threshold, missing_left = rules.to_original(tree.feature, tree.threshold)
        tree = tree._replace(feature=feature, threshold=threshold.astype(tree.threshold.dtype),
                             missing_left=missing_left)
    if task == "regression":
        tree = tree._replace(value=tree.value * scale + shift)
        mu = draws.mu[..., 0] * scale + shift
        sigma = draws.sigma * scale
        log_lik = draws.log_lik - math.log(scale)
    else:
        mu, sigma, log_lik = draws.mu, draws.sigma, draws.log_lik
    return BCARTResult(tree, sigma, mu, log_lik, info, draws.lp, lm, config, shift, scale, seconds,
                       categories=categories, missing=rules, coded_rules=coded)


def acceptance_rates(info) -> dict:
    """Acceptance rate per move type among the kept steps (NaN where a type never ran)."""
    move, acc = np.asarray(info.move), np.asarray(info.accepted)
    out = {}
    for i, name in enumerate(moves.STEP_KINDS):
        sel = move == i
        out[name] = float(acc[sel].mean()) if sel.any() else float("nan")
    return out


def bcart_inferencedata(result: BCARTResult, data: TrainingData, *, y_name: str = "y", attrs=None):
    """The posterior contract for a Bayesian CART fit (:func:`bayestrees.convert.to_inferencedata`)."""
    info = result.info
    common = getattr(result.leaf_model, "common_sigma", False)
    sigma = result.sigma[..., 0] if (data.task == "regression" and common) else None
    rates = acceptance_rates(info)
    prior = result.config.prior
    meta = {"inference": "mcmc", "prior": type(prior).__name__, "prior_params": repr(prior),
            **subset_attrs(result.categories, result.missing, data.feature_names),
            "leaf_model": type(result.leaf_model).__name__, "max_depth": result.config.max_depth,
            "scheme": result.config.scheme, "sampling_seconds": result.seconds,
            **{f"acceptance_{k}": v for k, v in rates.items() if not math.isnan(v)}, **dict(attrs or {})}
    ss = {"lp": result.lp, "move": np.asarray(info.move), "accepted": np.asarray(info.accepted),
          "move_possible": np.asarray(info.ok), "at_max_depth": np.asarray(info.at_max_depth)}
    if len(result.config.temperatures) > 1:
        ss["swap_accepted"] = np.asarray(info.swap_accepted)
        meta["temperatures"] = repr(tuple(result.config.temperatures))
    return to_inferencedata(
        result.trees, family=FAMILY, task=data.task, feature_names=data.feature_names, y_name=y_name,
        observed=data.y_observed, mu=result.mu, sigma=sigma, log_likelihood=result.log_lik,
        class_names=data.classes, n_bins=data.n_bins, sample_stats=ss, attrs=meta)


def bcart_values(trees: Tree, codes) -> np.ndarray:
    """Each draw's leaf values at coded rows: ``(chains, draws, n, V)``."""
    return np.asarray(predict(trees, np.asarray(codes)))


def leaf_slots(result: BCARTResult, codes) -> np.ndarray:
    """Each draw's leaf slot of every coded row, int32 ``(chains, draws, n)``: by the trees' rules, or
    with features split by subsets by the rules on the coded columns (a category mask sends the
    categories it holds left)."""
    if result.categories is None:
        return np.asarray(apply(result.trees, np.asarray(codes)))
    return route_coded(*result.coded_rules, codes, result.config.max_depth, result.categories, result.missing)


def leaf_values(result: BCARTResult, codes) -> np.ndarray:
    """Each draw's leaf values at coded rows, ``(chains, draws, n, V)`` (:func:`leaf_slots`)."""
    if result.categories is None:
        return bcart_values(result.trees, codes)
    leaf = leaf_slots(result, codes)
    return np.take_along_axis(np.asarray(result.trees.value), leaf[..., None], -2)
