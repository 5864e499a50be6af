"""BART (Chipman, George & McCulloch 2010): a posterior over sums of trees, by Bayesian backfitting MCMC.

:func:`fit_bart` takes a key, validated training data (:class:`~bayestrees.data.TrainingData`),
a :class:`BARTConfig` and optional row weights, runs ``chains`` chains of the kernel of
:mod:`bayestrees.inference.bart.kernel` through the shared chain loop and returns a
:class:`BARTResult`; :func:`bart_inferencedata` writes the posterior contract and
:func:`bart_values` the fitted function at new coded rows.

Defaults and their sources
--------------------------
All from Chipman, George & McCulloch (2010, "BART: Bayesian additive regression trees", Ann. Appl.
Stat. 4, section 2.2), the defaults of their R package BayesTree, unless said otherwise.

* ``m = 200`` trees (section 2.2.4: "m = 200 ... to be a reasonable default").
* Tree prior ``ChipmanPrior(alpha=0.95, beta=2)``: a node at depth ``d`` splits with probability
  ``0.95 (1 + d)^-2`` (section 2.2.2); the rule uniform over the variables with a cut point left
  in the node's interval and, given the variable, uniform over those cut points (the interval
  the node's ancestors leave it, from the smallest to the largest code of the training rows at
  the root: :mod:`bayestrees.inference.intervals`; the prior of BayesTree, the R package BART and
  bartz, which does not look at where the rows go).
* ``max_depth = 5`` (leaves at depth 0..5, 63 heap slots; bartz's default ``max_depth=6`` counts
  levels from 1 and is the same limit).  Not in the paper, whose prior is untruncated: under
  ``alpha = 0.95, beta = 2`` the expected number of nodes at depth 5 is ``prod_{d<5} 2 p_d =
  0.0017`` and each splits with probability ``p_5 = 0.026``, so the truncation changes at most
  ``4.5e-5`` of the prior mass (depth 6: ``1.8e-6``, at twice the memory per kept draw; depth 4:
  ``8.6e-4``).  ``sample_stats.at_max_depth`` counts trees that press against it.
* ``min_leaf_rows = 5``: every node of every tree holds at least 5 training rows (the prior truncated
  to such trees; a move that breaks it is rejected).  Not in the paper; the R package BART's
  birth step refuses a leaf of fewer than 5 observations in the same way (bartz asks 10 rows of a
  node it splits).
* Leaf values ``N(0, sigma_mu^2)`` with ``sigma_mu = 0.5 / (k sqrt(m))``, ``k = 2``, on the
  response scaled to ``[-0.5, 0.5]`` (section 2.2.3: the sum of ``m`` trees then puts 95% prior
  probability on ``[y_min, y_max]``).  Probit: ``sigma_mu = 3 / (k sqrt(m))`` (section 4, so that
  ``offset + f`` has 95% prior probability within ``offset +- 3`` on the probit scale).
* ``sigma^2 ~ nu lambda / chi2_nu`` with ``nu = 3`` and ``lambda`` such that
  ``P(sigma < sigma_hat) = q = 0.9`` (section 2.2.4, the "default" setting), i.e.
  ``lambda = sigma_hat^2 chi2_nu^-1(1 - q) / nu``; ``sigma_hat`` is the residual standard
  deviation of the least-squares linear fit of ``y`` on the features (with an intercept;
  ``sqrt(RSS / (n - p - 1))`` as R's ``lm``), or the standard deviation of ``y`` when
  ``p >= n - 1``.  The linear fit uses each feature bin's representative value (the raw values
  where a feature has at most ``max_bins`` distinct values; a categorical feature its category
  code).
* Moves: grow 0.5, prune 0.5 (the R package BART's birth/death steps, ``pbd = 1``, and bartz's).
  Chipman et al. 1998's change and swap moves are there too (``move_probs=(0.25, 0.25, 0.4, 0.1)``,
  BayesTree's): on Friedman's function (``n = 1,000``, ``benchmarks/bart_mixing.py``) they did not
  make ``sigma`` mix better per step, and a step with them costs twice as much (docs/lab-notes/bart.md).
* Probit offset ``Phi^-1(mean y)`` (the R package BART's ``binaryOffset``).
* Three or more classes: multinomial logit by log-linear BART (Murray 2021, "Log-linear Bayesian
  additive regression trees for multinomial logistic and count regression models", JASA 116),
  rather than multinomial probit, because its augmentation (one Gamma latent per row) makes every
  leaf update conjugate with one sum of trees per class, all updated at once, where the probit needs
  a latent vector per row and a reference class.  Leaves ``exp(theta) ~ Gamma(a, b)`` with ``E theta
  = 0`` and ``sd(theta) = 3.5 / (k sqrt(m))`` (``BARTConfig.log_leaf_sd``: the log odds of two
  classes then have prior sd ``3.5 sqrt(2) / k``, 2.47 at ``k = 2``, the logit-scale image of the
  probit default); offsets ``o_c`` the log weighted class frequencies (each at least ``0.5 / n``).
* ``max_bins = 100`` split codes per feature (BayesTree's ``numcut = 100``).
* Missing values in X: missingness incorporated in attributes (Twala, Jones & Hand 2008; BARTm,
  Kapelner & Bleich 2015): a split of a feature with missing training values sends the missing
  rows left or right, each side with prior probability 1/2 (the feature's weight in the rule prior
  unchanged), or splits the missing rows from the rest; a new row's missing value follows its
  split's side, or goes right at a feature that had no missing training value
  (:mod:`bayestrees.inference.missing`).  ``sigma_hat``'s linear fit replaces a missing entry by
  its column's mean.
* Unordered categorical features (pandas ``category``/``object``/``string`` columns, or the
  indices in ``categorical``) of at most :data:`MAX_SUBSET_CATEGORIES` categories (a missing value
  counting as one) split by subsets of their categories: a rule sends a set of categories left,
  its prior uniform among the ``2^|A| - 2`` nonempty proper subsets of the categories ``A`` that
  reach the node (:mod:`bayestrees.inference.intervals`).  A feature with more categories keeps
  them ordered by their mean response and splits them as ordered values, with a warning.

Regression responses are scaled inside (``(y - mid) / range``); leaf values, ``sigma``, ``mu``
and the pointwise log-likelihood are reported in the response's units.

Memory
------
A kept draw costs ``m * S * (1 + 1 + 4)`` bytes of trees (``S = 2^(max_depth + 1) - 1`` slots:
the int8 split variable, the uint8 split code and the float32 leaf value of every slot; int16 /
uint16 beyond 127 features / 255 bins) plus ``4 n`` bytes for the function at the training rows and
a few dozen bytes of statistics: with the defaults (``m = 200``, ``S = 63``) 75,600 bytes + ``4 n``.
With ``keep_trees=False`` no tree is kept: a draw holds each tree's leaves and depth (int16 and
int8: ``3 m`` bytes), the splits per feature (``4 d``), the function at the training rows (``4 n``)
and at the rows named by ``predict_codes`` (``4 n_new``): 600 bytes + ``4 (d + n + n_new)`` and
the statistics with ``m = 200`` (measured: docs/lab-notes/bart.md, "Keeping no trees").  The sampler is the
same (collecting a draw reads the chain's state and changes nothing), so the draws are those of
``keep_trees=True`` to the bit; only values at rows not named when fitting cannot be computed.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...convert import predictive_group, to_inferencedata
from ...leaves import loggamma_params
from ...data import TrainingData, check_dtype, missing_code, check_int, check_positive, check_probability, \
    sampler_inputs
from ...priors import ChipmanPrior, DepthDecayPrior, canonical, sigma_prior_lambda, traced_params
from ...sharding import check_data_devices
from .. import proposals
from ..proposals import check_move_probs
from ..loop import check_chain_method, resolve_chain_method, run_chains
from ..missing import (MAX_SUBSET_CATEGORIES, column_categories, missing_rules, split_log_weights, subset_attrs,
                       subset_features)
from ..tempering import check_temperatures
from . import kernel as bart_kernel
from . import multinomial

__all__ = ["FAMILY", "BARTConfig", "BARTResult", "fit_bart", "bart_inferencedata", "bart_values", "sigma_hat_of",
           "acceptance_rates", "check_weights", "check_sample_weight", "check_predict_codes", "kept_rows", "kept_values",
           "TREES_NOT_KEPT", "MAX_DEPTH_LIMIT", "MULTICLASS_MESSAGE"]

FAMILY = "bart"

#: the deepest tree the fixed heap arrays allow (2^13 - 1 slots)
MAX_DEPTH_LIMIT = 12

#: the error for a classification response of one class
MULTICLASS_MESSAGE = ("BART for classification needs at least two classes (probit for two, multinomial logit for "
                      "more); y has {C} class")

#: what a multinomial (three or more classes) fit does not take yet
MULTINOMIAL_LIMITS = ("BART for {C} classes (multinomial logit by log-linear BART) does not take {what} yet; fit "
                      "without it (two classes take it)")


@dataclass(frozen=True)
class BARTConfig:
    """Validated settings of a BART fit (defaults and their sources: the module docstring).

    Parameters
    ----------
    m : int >= 1  number of trees in the sum (default 200)
    prior : a bt.priors depth prior (ChipmanPrior, DepthDecayPrior): the prior of each tree's shape
    k : float > 0  leaf prior: ``sigma_mu = 0.5 / (k sqrt(m))`` on the scaled response (probit ``3 / (k sqrt(m))``)
    nu : float > 0  degrees of freedom of the ``nu lambda / chi2_nu`` prior of ``sigma^2``
    q : float in (0, 1)  prior probability that ``sigma < sigma_hat`` (sets ``lambda``)
    sigma_hat : float > 0, optional  the rough noise sd that calibrates ``lambda`` (response units;
        default: the least-squares linear fit's residual sd)
    fixed_sigma : float > 0, optional  keep the noise sd fixed at this value (response units)
        instead of sampling it (regression)
    draws, tune, chains, thin : chain lengths (per chain); a step updates every tree once
    max_depth : deepest leaf level (the prior is truncated there, explicitly)
    min_leaf_rows : int >= 1  every node of every tree holds at least this many training rows (the
        prior is truncated to such trees; a move that breaks it is rejected)
    move_probs : probabilities of grow, prune, change, swap and optionally rotate (a node lifted above
        its parent where both split the same variable, every leaf keeping its rows:
        :func:`bayestrees.inference.proposals.rotate`)
    slide : int >= 0  with ``slide = K > 0`` the change move is a local slide (``KernelConfig.slide``):
        a node whose two children are leaves moves its threshold by ``1 .. K`` codes on the same
        variable, at the cost of a grow (swap and rotate must then be 0; e.g. ``move_probs=(0.35, 0.35, 0.3, 0)``,
        ``slide=3``)
    sparse : the sparse Dirichlet split-variable prior (Linero 2018; the R package BART's
        ``sparse=TRUE``): ``s ~ Dirichlet(alpha / p, ...)``, ``alpha / (alpha + rho) ~ Beta(a, b)``, a
        node's variable ``j`` with probability ``s_j / sum_available s``; the posterior of ``s`` is
        reported as ``split_probs``
    sparse_a, sparse_b : the Beta prior of ``alpha / (alpha + rho)`` (defaults 0.5 and 1, Linero's
        and the R package's)
    sparse_rho : float > 0, optional  (default: the number of features ``p``)
    dtype : "float32" or "float64"
    progressbar : print progress on stderr
    chain_method : "auto", "vectorized" or "parallel": how several chains run
        (:func:`bayestrees.inference.loop.run_chains`)
    keep_trees : bool  keep every draw's trees (True, the default), or only their summaries, sigma,
        the function at the training rows and at the rows named when fitting (False: a draw costs
        hundreds of bytes instead of ``m * S * 6``; values at other rows cannot be computed)
    local_moves : int >= 1  moves of every tree per step (default 1)
    particles : int  0 (the default), or the particles (>= 2) of a particle Gibbs regrowth of every
        tree in each step after its moves (conditional SMC given the other trees: exact, and it can
        change every rule of a tree at once; :mod:`bayestrees.inference.regrow`), under the missing
        values' column weights where X has missing values; not with ``sparse``
    temperatures : tuple of float  inverse temperatures ``(1, b_1, ...)``, decreasing (default ``(1.0,)``:
        no tempering); with several, every chain is a parallel-tempering ensemble of one replica per
        temperature, replica ``r`` targeting ``p(y | f, sigma)^b_r`` times the priors, adjacent
        replicas exchanging states each step; the draws are the first replica's
        (:class:`~bayestrees.inference.bart.kernel.KernelConfig`); regression only
    data_devices : int >= 1  devices the rows of each chain are split over (default 1): each device
        holds a block of the rows, and the sums over rows that a step needs are added across them
        (:func:`jax.shard_map`; bartz's ``num_data_devices``).  At most the devices JAX sees
        (several GPUs; on a CPU ``jax.config.update("jax_num_cpu_devices", k)`` before JAX starts);
        the rows are padded to a multiple with rows of no weight.  The draws follow the same law as
        on one device, not the same numbers (sums in another order).  Not with ``particles``
    """

    m: int = 200
    prior: Any = ChipmanPrior(0.95, 2.0)
    k: float = 2.0
    nu: float = 3.0
    q: float = 0.9
    sigma_hat: Any = None
    fixed_sigma: Any = None
    draws: int = 1000
    tune: int = 1000
    chains: int = 4
    thin: int = 1
    max_depth: int = 5
    min_leaf_rows: int = 5
    move_probs: tuple = (0.5, 0.5, 0.0, 0.0)
    slide: int = 0
    sparse: bool = False
    sparse_a: float = 0.5
    sparse_b: float = 1.0
    sparse_rho: Any = None
    dtype: Any = "float32"
    progressbar: bool = False
    chain_method: str = "auto"
    keep_trees: bool = True
    local_moves: int = 1
    particles: int = 0
    temperatures: tuple = (1.0,)
    data_devices: int = 1

    def __post_init__(self):
        if not isinstance(self.prior, (ChipmanPrior, DepthDecayPrior)):
            raise ValueError(f"prior must be a bt.priors depth prior (ChipmanPrior or DepthDecayPrior; BART's rule "
                             f"prior is the interval prior, which LeafCountPrior's partition trees do not take), "
                             f"got {self.prior!r}")
        check_int("m", self.m, 1)
        check_positive("k", self.k)
        check_positive("nu", self.nu)
        check_probability("q", self.q)
        if self.sigma_hat is not None:
            check_positive("sigma_hat", self.sigma_hat)
        if self.fixed_sigma is not None:
            check_positive("fixed_sigma", self.fixed_sigma)
        check_int("draws", self.draws, 1)
        check_int("tune", self.tune, 0)
        check_int("chains", self.chains, 1)
        check_int("thin", self.thin, 1)
        check_int("max_depth", self.max_depth, 0, MAX_DEPTH_LIMIT)
        check_int("min_leaf_rows", self.min_leaf_rows, 1)
        mp = check_move_probs(self.move_probs)
        check_int("slide", self.slide, 0)
        check_int("local_moves", self.local_moves, 1)
        check_int("particles", self.particles, 0)
        if self.particles == 1:
            raise ValueError("particles must be 0 (no regrowth) or at least 2, got 1")
        if self.particles and self.sparse:
            raise ValueError("the particle Gibbs regrowth (particles > 0) does not take the sparse prior yet")
        if self.slide and (mp[3] > 0 or proposals.rotates(mp)):
            raise ValueError(f"slide moves take the change move's place in grow/prune/change: swap and rotate must be 0, got "
                             f"move_probs={self.move_probs!r}")
        if self.slide and mp[2] == 0:
            raise ValueError(f"slide={self.slide!r} needs a change probability to make slides, e.g. "
                             f"move_probs=(0.35, 0.35, 0.3, 0.0); got move_probs={self.move_probs!r}")
        if not isinstance(self.sparse, (bool, np.bool_)):
            raise ValueError(f"sparse must be True or False, got {self.sparse!r}")
        check_positive("sparse_a", self.sparse_a)
        check_positive("sparse_b", self.sparse_b)
        if self.sparse_rho is not None:
            check_positive("sparse_rho", self.sparse_rho)
        check_dtype(self.dtype)
        check_chain_method(self.chain_method)
        if not isinstance(self.keep_trees, (bool, np.bool_)):
            raise ValueError(f"keep_trees must be True or False, got {self.keep_trees!r}")
        object.__setattr__(self, "temperatures", check_temperatures(self.temperatures))   # hashable floats
        check_int("data_devices", self.data_devices, 1)
        if self.data_devices > 1 and self.particles:
            raise ValueError("the particle Gibbs regrowth (particles > 0) runs on one device: data_devices > 1 takes "
                             "particles=0")

    def sigma_mu(self, probit: bool = False) -> float:
        """The leaf prior sd on the scaled response (probit: on the latent scale)."""
        return (3.0 if probit else 0.5) / (float(self.k) * math.sqrt(int(self.m)))

    def log_leaf_sd(self) -> float:
        """Several classes: the sd of a leaf's log-rate ``theta`` (``exp(theta) ~ Gamma(a, b)``, ``E theta = 0``),
        ``3.5 / (k sqrt(m))``: each class's function has prior sd ``3.5 / k`` and the log odds of two
        classes ``3.5 sqrt(2) / k`` (2.47 at ``k = 2``, about the logit scale's image of the probit
        default, ``1.5 * 1.7``)."""
        return 3.5 / (float(self.k) * math.sqrt(int(self.m)))


@dataclass
class BARTResult:
    """A BART fit.

    feature, threshold, value : (chains, draws, m, S) the kept trees (:class:`~bayestrees.inference.bart.kernel.Draw`;
        ``value`` in scaled / latent units); None with ``config.keep_trees=False``
    sigma : (chains, draws) noise sd in the response's units (None for probit)
    fit : (chains, draws, n) float32 sum of trees at the training rows (scaled / latent units)
    lp : (chains, draws) log joint density (scaled units, up to a constant)
    info : kernel.Info with leading (chains, draws)
    task : "regression" or "classification"
    y_shift, y_scale : the response is ``shift + scale * (scaled response)``
    offset : probit offset ``Phi^-1(mean y)`` (0 for regression); several classes: ``(k,)`` the log class
        frequencies ``o_c``, and then ``fit`` is ``(chains, draws, k, n)``, the trees ``(chains, draws, k, m,
        S)`` with log-rate leaf values (:mod:`bayestrees.inference.bart.multinomial`)
    sigma_mu, sigma_hat, lam : the calibrated prior (scaled units)
    weights : (n,) row weights, or None
    split_prob, sparse_alpha : (chains, draws, d) and (chains, draws) the sparse prior's draws (None without it)
    n_leaves, depth : int16 / int8 (chains, draws, m) leaves and deepest leaf of every tree, and
    split_counts : int32 (chains, draws, d) internal nodes per feature over the trees: kept when the
        trees are not (``keep_trees=False``; None otherwise: :func:`~bayestrees.inference.bart.kernel.tree_summaries` of the trees)
    predict_codes : (n_new, d) the coded rows named when fitting (None: none)
    predict_fit : float32 (chains, draws, n_new) the sum of trees there (scaled / latent units, as ``fit``)
    missing : the coding of the features with missing training values
        (:class:`~bayestrees.inference.missing.MissingRules`; None without): the trees' split variables
        and thresholds are then on its coded columns, and new rows' codes go through ``missing.code``
    categories : int32 (d',) or None  the category mask of each (coded) column split by subsets
        (0 for the others; :class:`~bayestrees.inference.bart.kernel.BARTData`'s), None where no
        feature is: such a rule's ``threshold`` is the mask of the categories it sends left
    """

    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray
    sigma: Any
    fit: np.ndarray
    lp: np.ndarray
    info: Any
    config: BARTConfig
    task: str
    y_shift: float
    y_scale: float
    offset: float
    sigma_mu: float
    sigma_hat: float
    lam: float
    weights: Any
    seconds: float
    split_prob: Any = None
    sparse_alpha: Any = None
    n_leaves: Any = None
    depth: Any = None
    split_counts: Any = None
    predict_codes: Any = None
    predict_fit: Any = None
    missing: Any = None
    categories: Any = None

    @property
    def trees_kept(self) -> bool:
        """Whether the draws' trees are kept (``config.keep_trees``)."""
        return self.feature is not None

    @property
    def mu(self) -> np.ndarray:
        """The drawn function at the training rows: response units ``(chains, draws, n)``, or class
        probabilities ``(chains, draws, n, 2)`` (several classes: ``(chains, draws, n, k)``)."""
        return _link(self.fit, task=self.task, y_shift=self.y_shift, y_scale=self.y_scale, offset=self.offset,
                     columns=False)

    @property
    def multinomial(self) -> bool:
        """Three or more classes (multinomial logit; ``fit`` then has a class axis before the rows)."""
        return np.ndim(self.offset) > 0


def sigma_hat_of(data: TrainingData, y, weights=None) -> float:
    """The residual sd of the least-squares linear fit of ``y`` on the features (the module docstring).

    ``sqrt(sum_i w_i r_i^2 / (n_+ - p - 1))`` over the ``n_+`` rows of positive weight; the weighted
    sd of ``y`` when ``p >= n_+ - 1``; 1 when there is no row of positive weight.
    """
    y = np.asarray(y, np.float64)
    w = np.ones_like(y) if weights is None else np.asarray(weights, np.float64)
    live = w > 0
    n, p = int(live.sum()), data.d
    if n == 0:
        return 1.0
    if p >= n - 1:
        mean = np.sum(w[live] * y[live]) / np.sum(w[live])
        sd = math.sqrt(np.sum(w[live] * (y[live] - mean) ** 2) / max(n - 1, 1))
        return sd if sd > 0 else 1.0
    cols = [_column_values(data, j) for j in range(p)]
    X = np.column_stack([np.ones(len(y))] + cols)[live]
    sw = np.sqrt(w[live])
    beta, *_ = np.linalg.lstsq(X * sw[:, None], y[live] * sw, rcond=None)
    rss = float(np.sum(w[live] * (y[live] - X @ beta) ** 2))
    return math.sqrt(rss / (n - p - 1))


def _column_values(data: TrainingData, j: int) -> np.ndarray:
    """Feature ``j``'s bin values at the training rows, a missing value replaced by the mean of the
    column's other values (for the linear fit of :func:`sigma_hat_of` only)."""
    c = np.asarray(data.codes[:, j], np.int64)
    miss = c == missing_code(np.asarray(data.codes).dtype)
    values = data.binner.bin_values(j)[np.where(miss, 0, c)]
    if miss.any():
        values = np.where(miss, values[~miss].mean() if (~miss).any() else 0.0, values)
    return values


def check_weights(weights, n: int, name: str = "weights", *, all_zero: bool = True):
    """Row weights as float64 ``(n,)``, or None; a ``ValueError`` naming ``name`` for a wrong shape, a
    value that is not a finite number >= 0, or (``all_zero=False``) weights that are all zero.
    :func:`fit_bart` takes all-zero weights: no likelihood, the chains sample the prior."""
    if weights is None:
        return None
    try:
        w = np.asarray(weights, np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers, one per row, got {type(weights).__name__}") from None
    if w.shape != (n,):
        raise ValueError(f"{name} must have one value per row ({n}), got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"{name} must be finite and >= 0 (row i's noise sd is sigma / sqrt(w_i))")
    if not all_zero and not np.any(w > 0):
        raise ValueError(f"{name}: every weight is zero; at least one row needs a positive weight")
    return w


def check_sample_weight(sample_weight, n: int, name: str = "sample_weight"):
    """The row weights a user gives (the estimators' ``fit(X, y, sample_weight=w)``, ``bt.BART(...,
    sample_weight=w)``): :func:`check_weights`, all-zero weights refused too (a ``ValueError``)."""
    return check_weights(sample_weight, n, name, all_zero=False)


def check_predict_codes(codes, d: int):
    """Coded rows as int32 ``(n_new, d)``, or None (``ValueError`` for another shape)."""
    if codes is None:
        return None
    c = np.asarray(codes)
    if c.ndim != 2 or c.shape[1] != d or c.shape[0] < 1 or not np.issubdtype(c.dtype, np.integer):
        raise ValueError(f"predict_codes must be integer codes of shape (n_new >= 1, {d}) (the training data's "
                         f"binner applied to the rows), got {c.dtype} {c.shape}")
    return np.ascontiguousarray(c.astype(np.int32))


def fit_bart(key, data: TrainingData, config: BARTConfig, weights=None, predict_codes=None) -> BARTResult:
    """Run the BART sampler on ``data``.

    Parameters
    ----------
    key : PRNG key
    data : TrainingData, missing values in X allowed (:mod:`bayestrees.inference.missing`; not with
        ``sparse``); a regression response or class labels (two classes:
        probit; three or more: multinomial logit, :mod:`bayestrees.inference.bart.multinomial`)
    config : BARTConfig
    weights : (n,) floats >= 0, optional
        Known row weights that multiply the precision: row ``i``'s noise sd is ``sigma / sqrt(w_i)``
        (probit: the latent's sd is ``1 / sqrt(w_i)``, so ``P(y_i = 1) = Phi(sqrt(w_i) (offset +
        f(x_i)))``); a row of weight 0 carries no likelihood (default: all 1).  Regression: only
        their ratios matter when ``sigma`` is sampled with its default calibration, since
        ``sigma_hat`` (:func:`sigma_hat_of`) is the weighted fit's sd of a row of weight 1 and
        scales by ``sqrt(c)`` with weights ``c w``, and with it ``sigma``'s prior: the posterior
        of the function is the same and ``sigma``'s is scaled by ``sqrt(c)``.  A given
        ``sigma_hat`` or ``fixed_sigma`` is the sd of a row of weight 1.  A row of weight 0 still
        counts in the binning, the response's scaling and ``min_leaf_rows``.
    predict_codes : (n_new, d) integer codes, optional
        Rows (coded by ``data.binner``) at which every kept draw's sum of trees is computed
        during sampling (``BARTResult.predict_fit``): the only rows a fit with
        ``config.keep_trees=False`` can give values at.

    Returns
    -------
    BARTResult

    Raises
    ------
    ValueError for missing values with the sparse prior, bad weights (for classes: rows of positive weight of one class
    only), settings that several classes do not take yet (:data:`MULTINOMIAL_LIMITS`),
    bad ``predict_codes`` or ``fixed_sigma`` with a probit model.
    """
    dtype = jnp.dtype(check_dtype(config.dtype))
    classes = data.task == "classification"
    if classes and data.n_classes < 2:
        raise ValueError(MULTICLASS_MESSAGE.format(C=data.n_classes))
    multi = classes and data.n_classes > 2
    probit = classes and not multi
    if classes and config.fixed_sigma is not None:
        raise ValueError("fixed_sigma is for regression: BART for classes has no noise sd")
    if multi:
        for what, given in (("the sparse prior (sparse=True)", config.sparse),
                            ("rows across devices (data_devices > 1)", config.data_devices > 1)):
            if given:
                raise ValueError(MULTINOMIAL_LIMITS.format(C=data.n_classes, what=what))
    subsets = subset_features(data)
    rules = missing_rules(data.codes, data.n_bins, subsets)   # None without missing values
    if rules is None:
        codes, _, _, _ = sampler_inputs(data, "BART", dtype)
    else:
        if config.sparse:
            raise ValueError("BART with missing values in X does not take the sparse prior (sparse=True) yet; impute "
                             "first, or fit without it")
        codes = rules.code(data.codes)
    categories = column_categories(codes, subsets, rules)
    w = check_weights(weights, data.n)
    w_arr = np.ones(data.n) if w is None else w
    yr = np.asarray(data.y, np.float64)
    if classes and w is not None and np.unique(yr[w_arr > 0]).size == 1:
        raise ValueError("the rows of positive weight hold one class only; BART for classes needs rows of at least "
                         "two classes with positive weight")
    pcodes = check_predict_codes(predict_codes, data.d)
    big = float(np.max(np.abs(yr), initial=0.0))
    if not probit and dtype == jnp.float32 and big > 1e30:
        raise ValueError(f"y reaches {big:.3g}, beyond what the float32 sampler can scale and square; divide y by a "
                         f"power of ten (and multiply the predictions back), or fit with dtype='float64' in JAX's 64-bit mode")
    if data.n < 2 * int(config.min_leaf_rows):
        warnings.warn(f"{data.n} training rows, fewer than 2 * min_leaf_rows = {2 * int(config.min_leaf_rows)}: no tree "
                      f"can split, so every tree stays a single leaf (the fit is a constant); lower min_leaf_rows or "
                      f"give more rows", UserWarning, stacklevel=3)
    if multi:   # the log class frequencies (weighted), each at least 0.5 / n
        shift, scale = 0.0, 1.0
        live = w_arr > 0
        freq = np.bincount(yr[live].astype(np.int64), weights=w_arr[live], minlength=data.n_classes)
        freq = np.maximum(freq / max(float(freq.sum()), 1e-300), 0.5 / max(data.n, 1))
        offset = np.log(freq / freq.sum())
        ys = yr
        sigma_hat, lam, sigma2 = 1.0, 0.0, 1.0
    elif probit:
        shift, scale = 0.0, 1.0
        live = w_arr > 0
        pbar = float(np.sum(w_arr[live] * yr[live]) / np.sum(w_arr[live])) if live.any() else 0.5
        pbar = min(max(pbar, 0.5 / max(data.n, 1)), 1.0 - 0.5 / max(data.n, 1))
        from scipy.special import ndtri

        offset = float(ndtri(pbar))
        ys = yr
        sigma_hat, lam, sigma2 = 1.0, 0.0, 1.0
    else:
        lo, hi = float(np.min(yr)), float(np.max(yr))
        shift, scale = 0.5 * (lo + hi), (hi - lo) if hi > lo else 1.0
        offset = 0.0
        ys = (yr - shift) / scale
        sigma_hat = (float(config.sigma_hat) / scale if config.sigma_hat is not None
                     else max(sigma_hat_of(data, ys, w), 1e-6))
        lam = sigma_prior_lambda(sigma_hat, config.nu, config.q)
        sigma2 = (float(config.fixed_sigma) / scale) ** 2 if config.fixed_sigma is not None else sigma_hat ** 2
    sigma_mu = config.log_leaf_sd() if multi else config.sigma_mu(probit)
    S = 2 ** (config.max_depth + 1) - 1
    vectorized = config.data_devices > 1 or resolve_chain_method(config.chain_method, config.chains) == "vectorized"
    width = config.chains if vectorized else 1
    if classes and len(config.temperatures) > 1:
        raise ValueError("tempering (temperatures) takes a Normal likelihood: BART for classes is not tempered")
    weighted = rules is not None and bool(rules.doubled.any())
    kcfg = bart_kernel.KernelConfig(prior=canonical(config.prior), tau2=sigma_mu ** 2, max_depth=config.max_depth,
                                    m=int(config.m), move_probs=tuple(float(p) for p in config.move_probs),
                                    min_leaf_rows=int(config.min_leaf_rows), probit=probit,
                                    sample_sigma=(not classes) and config.fixed_sigma is None,
                                    sparse=bool(config.sparse), weighted=weighted, batch_width=int(width) * len(config.temperatures),
                                    slide=int(config.slide), temperatures=config.temperatures,
                                    particles=int(config.particles),
                                    n_codes=int(np.max(codes, initial=0)) + 1 if config.particles else 0,
                                    local_moves=int(config.local_moves),
                                    data_devices=check_data_devices(config.data_devices))
    rho = float(config.sparse_rho) if config.sparse_rho is not None else float(data.d)
    if multi:
        mcfg = multinomial.MultinomialConfig(kcfg, int(data.n_classes), *loggamma_params(sigma_mu))
        kernel = multinomial.build_kernel(mcfg, dtype)
    else:
        kernel = bart_kernel.build_kernel(kcfg, dtype)
    code_lo, code_hi = bart_kernel.data_intervals(codes, categories=categories)
    pad = -data.n % int(config.data_devices)   # rows of no weight, so that every device holds as many
    padded = (lambda a: np.concatenate([np.asarray(a), np.zeros((pad,) + np.shape(a)[1:], np.asarray(a).dtype)])) \
        if pad else np.asarray
    bdata = bart_kernel.BARTData(codes=jnp.asarray(np.ascontiguousarray(padded(codes).T)),
                                 y=jnp.asarray(padded(ys), dtype), weight=jnp.asarray(padded(w_arr), dtype),
                                 rows=jnp.asarray(padded(np.ones(data.n)), dtype),
                                 nu=jnp.asarray(config.nu, dtype), nu_lam=jnp.asarray(config.nu * lam, dtype),
                                 sigma2=jnp.asarray(sigma2, dtype), offset=jnp.asarray(offset, dtype),
                                 prior=traced_params(config.prior, dtype), code_lo=jnp.asarray(code_lo),
                                 code_hi=jnp.asarray(code_hi),
                                 sparse_prior=jnp.asarray([config.sparse_a, config.sparse_b, rho], dtype),
                                 predict_codes=None if pcodes is None else jnp.asarray(
                                     pcodes if rules is None else rules.code(pcodes)),
                                 split_log_w=jnp.asarray(split_log_weights(rules), dtype) if weighted else None,
                                 categories=None if categories is None else jnp.asarray(categories, jnp.int32))
    fdt = jnp.int8 if codes.shape[1] <= 127 else jnp.int16
    tdt = jnp.dtype(np.asarray(data.codes).dtype) if categories is None else jnp.dtype(jnp.int32)
    col = (multinomial.collect(mcfg, fdt, tdt, bool(config.keep_trees)) if multi else
           bart_kernel.collect(kcfg, fdt, tdt, bool(config.keep_trees)))
    t0 = time.perf_counter()
    res = run_chains(key, kernel, args=(bdata,), chains=config.chains, draws=config.draws, tune=config.tune,
                     thin=config.thin, collect=col, progressbar=config.progressbar, desc="BART",
                     chain_method=config.chain_method, split_chains=config.data_devices == 1)
    draws = jax.tree_util.tree_map(np.asarray, res.samples)
    if pad:   # the padding rows' fit
        draws = draws._replace(fit=draws.fit[..., :data.n])
    info = jax.tree_util.tree_map(np.asarray, res.info)
    seconds = time.perf_counter() - t0
    assert draws.feature is None or draws.feature.shape[-1] == S
    sigma = None if classes else draws.sigma.astype(np.float64) * scale
    sparse = (draws.split_prob, draws.alpha) if config.sparse else (None, None)
    return BARTResult(feature=draws.feature, threshold=draws.threshold, value=draws.value, sigma=sigma, fit=draws.fit,
                      lp=draws.lp, info=info, config=config, task=data.task, y_shift=shift, y_scale=scale,
                      offset=offset, sigma_mu=sigma_mu, sigma_hat=sigma_hat, lam=lam, weights=w, seconds=seconds,
                      split_prob=sparse[0], sparse_alpha=sparse[1], n_leaves=draws.n_leaves, depth=draws.depth, split_counts=draws.split_counts,
                      predict_codes=pcodes, predict_fit=draws.predict, missing=rules, categories=categories)


def acceptance_rates(info) -> dict:
    """Acceptance rate per move type over every tree move of the kept steps (NaN where a type never ran)."""
    prop, acc = np.asarray(info.proposed), np.asarray(info.accepted)
    out = {}
    for i, name in enumerate(proposals.MOVE_NAMES[:prop.shape[-1]]):
        n = prop[..., i].sum()
        out[name] = float(acc[..., i].sum() / n) if n else float("nan")
    return out


def _log_likelihood(result: BARTResult, data: TrainingData) -> np.ndarray:
    """Pointwise ``log p(y_i | draw)`` (response units; 0 for a row of weight 0)."""
    w = np.ones(data.n) if result.weights is None else np.asarray(result.weights)
    live = w > 0
    wl = np.where(live, w, 1.0)
    if result.task == "regression":
        y = np.asarray(data.y, np.float64)
        mu = result.mu
        sd = result.sigma[..., None] / np.sqrt(wl)
        ll = -0.5 * ((y - mu) / sd) ** 2 - np.log(sd) - 0.5 * math.log(2 * math.pi)
    elif result.multinomial:   # w_i log P(y_i): a row of weight w_i counts as w_i rows
        from scipy.special import logsumexp

        eta = result.fit.astype(np.float64) + np.asarray(result.offset, np.float64)[:, None]   # (..., k, n)
        log_p = eta - logsumexp(eta, axis=-2, keepdims=True)
        y = np.asarray(data.y, np.int64).reshape((1,) * (eta.ndim - 2) + (1, -1))
        ll = wl * np.take_along_axis(log_p, y, -2)[..., 0, :]
    else:
        from scipy.special import log_ndtr

        eta = (result.offset + result.fit.astype(np.float64)) * np.sqrt(wl)
        ll = log_ndtr(np.where(np.asarray(data.y) > 0, eta, -eta))
    return np.where(live, ll, 0.0)


def bart_inferencedata(result: BARTResult, data: TrainingData, *, y_name: str = "y", attrs=None):
    """The posterior contract for a BART fit (:func:`bayestrees.convert.to_inferencedata`).

    ``posterior``: ``n_leaves`` and ``depth`` per tree (dims ``chain, draw, tree``), ``split_counts``
    summed over the trees (dim ``feature``), ``sigma`` (regression) and ``mu``; ``trees``: the heap
    trees with dims ``(chain, draw, tree, node)``, leaf values in the response's units (the sum of
    trees plus ``attrs["bart_offset"]`` is the function, on the probit scale for two classes, whose
    ``output`` coordinate is then ``"latent"``; ``weight``/``count`` are 0: the draws keep no rows
    per node), absent when the trees were not kept (``keep_trees=False``; ``attrs["keep_trees"]``
    is 0 then); ``sample_stats``: ``lp`` (log joint density on the scaled response), moves
    proposed and accepted per step, trees at ``max_depth``.  With the sparse prior the posterior
    also holds ``split_probs`` (dim ``feature``) and ``sparse_alpha``.  Where rows were named when
    fitting (``predict_codes``), ``predictions`` holds the function there: ``<y_name>_mu``
    (regression, response units) or ``<y_name>_proba`` (class probabilities), dims ``(chain, draw,
    obs[, class])``.
    """
    info = result.info
    rates = acceptance_rates(info)
    cfg = result.config
    reg = result.task == "regression"
    multi = result.multinomial
    offset = result.y_shift if reg else result.offset
    if result.trees_kept:
        value = result.value * np.float32(result.y_scale) if reg else result.value
        rules = result.missing
        if rules is None:
            trees = bart_kernel.expand_trees(result.feature, result.threshold, value)
        else:   # the rules of the coded columns as the original features' with their missing side
            feature, threshold, missing_left = rules.to_original(result.feature, result.threshold)
            trees = bart_kernel.expand_trees(feature, threshold, value)._replace(missing_left=missing_left)
        n_leaves, depth, splits = bart_kernel.host_tree_summaries(
            result.feature, data.d if rules is None else rules.d)
        if multi:   # the splits of every class's trees
            splits = splits.sum(-2)
        if rules is not None:
            splits = rules.split_counts(splits)
    else:
        trees = None
        n_leaves, depth, splits = (np.asarray(a, np.int32) for a in (result.n_leaves, result.depth,
                                                                      result.split_counts))
        if result.missing is not None:
            splits = result.missing.split_counts(splits)
    meta = {"inference": "mcmc", "prior": type(cfg.prior).__name__, "prior_params": repr(cfg.prior), "m": cfg.m,
            **subset_attrs(result.categories, result.missing, data.feature_names),
            "max_depth": cfg.max_depth,
            "bart_offset": [float(o) for o in offset] if multi else float(offset),
            "sigma_mu": result.sigma_mu * result.y_scale,
            "sampling_seconds": result.seconds, "keep_trees": int(result.trees_kept),
            **({"sigma_hat": result.sigma_hat * result.y_scale, "lambda": result.lam * result.y_scale ** 2,
                "nu": float(cfg.nu), "q": float(cfg.q)} if reg else {"link": "softmax" if multi else "probit"}),
            **{f"acceptance_{k}": v for k, v in rates.items() if not math.isnan(v)}, **dict(attrs or {})}
    prop, acc = np.asarray(info.proposed), np.asarray(info.accepted)
    ss = {"lp": result.lp, "accepted": acc.sum(-1), "move_possible": prop.sum(-1),
          "at_max_depth": np.asarray(info.at_max_depth)}
    idata = to_inferencedata(
        trees, family=FAMILY, task=data.task, feature_names=data.feature_names, y_name=y_name,
        observed=data.y_observed, mu=result.mu, sigma=result.sigma, log_likelihood=_log_likelihood(result, data),
        class_names=data.classes, n_bins=data.n_bins, tree_dims=("class", "tree") if multi else ("tree",),
        posterior_extra={"n_leaves": n_leaves, "depth": depth, "split_counts": splits,
                         **({"split_probs": result.split_prob, "sparse_alpha": result.sparse_alpha}
                            if result.split_prob is not None else {})},
        extra_dims={"split_counts": ["feature"], "split_probs": ["feature"]}, sample_stats=ss, attrs=meta,
        coords=None if reg else {"output": ["log_rate" if multi else "latent"]})
    if result.predict_fit is not None:
        vals = kept_values(result)
        kw = dict(mu=vals[..., 0]) if reg else dict(proba=vals, class_names=data.classes)
        predictive_group(idata, "predictions", y_name, task=data.task, **kw)
        idata.predictions.attrs.update(idata.posterior.attrs)
    return idata


#: the error for values at rows that a fit without trees did not keep
TREES_NOT_KEPT = ("this BART fit kept no trees (keep_trees=False), only its values at the rows named when fitting "
                  "({named}), and {missing} of the {n} rows asked for are not among them. Predict at those rows, "
                  "or fit again with keep_trees=True to predict anywhere, or name the rows when fitting "
                  "(estimator.fit(X, y, X_predict=rows); bt.BART(..., X_predict=rows); fit_bart(..., "
                  "predict_codes=codes)). The function at the training rows is posterior['mu'] of the "
                  "InferenceData.")


def kept_rows(result: BARTResult, codes) -> np.ndarray:
    """For every coded row of ``codes`` (n, d), its index among the rows named when fitting
    (``result.predict_codes``), found by its codes (the function of a draw depends on a row through
    its codes only); a ``ValueError`` (:data:`TREES_NOT_KEPT`) when a row is not among them."""
    codes = np.asarray(codes).astype(np.int32)
    named = result.predict_codes
    if named is None:
        raise ValueError(TREES_NOT_KEPT.format(named="none were", missing=len(codes), n=len(codes)))
    index = {}
    for i, row in enumerate(np.ascontiguousarray(named)):
        index.setdefault(row.tobytes(), i)
    found = np.array([index.get(row.tobytes(), -1) for row in np.ascontiguousarray(codes)], np.int64)
    missing = int(np.sum(found < 0))
    if missing:
        raise ValueError(TREES_NOT_KEPT.format(named=f"{len(named)} rows", missing=missing, n=len(codes)))
    return found


def kept_values(result: BARTResult, rows=None) -> np.ndarray:
    """The function of every draw at the rows named when fitting (``rows``: indices among them,
    default all), from the sums kept during sampling: as :func:`bart_values`."""
    f = np.asarray(result.predict_fit)
    if rows is not None:
        f = f[..., rows]
    # C order, as the values from the trees: numpy's sums over draws depend on the layout
    return _link(np.ascontiguousarray(f, np.float64), task=result.task, y_shift=result.y_shift, y_scale=result.y_scale,
                 offset=result.offset)


def _link(f, *, task: str, y_shift: float, y_scale: float, offset, columns: bool = True) -> np.ndarray:
    """The response's scale from sums of trees ``f``: regression ``(..., n, 1)`` (``(..., n)`` without
    ``columns``), two classes ``(..., n, 2)``, several classes (``f`` of shape ``(..., k, n)``, ``offset``
    of shape ``(k,)``) ``(..., n, k)``."""
    f = np.asarray(f, np.float64)
    if task == "regression":
        v = y_shift + y_scale * f
        return v[..., None] if columns else v
    if np.ndim(offset):
        return multinomial.softmax_probabilities(f, offset)
    from scipy.special import ndtr

    p = ndtr(offset + f)
    return np.stack([1.0 - p, p], -1)


def bart_values(feature, threshold, value, codes, *, task: str, y_shift: float, y_scale: float,
                offset: float, categories=None) -> np.ndarray:
    """The function of every draw at coded rows: regression ``(..., n, 1)`` in response units, probit
    ``(..., n, 2)`` class probabilities, several classes ``(..., n, k)`` (trees ``(..., k, m, S)``;
    ``categories``: :attr:`BARTResult.categories`)."""
    f = bart_kernel.sum_of_trees(feature, threshold, value, codes, categories=categories).astype(np.float64)
    return _link(f, task=task, y_shift=y_shift, y_scale=y_scale, offset=offset)
