"""The tree moves of a NumPyro model's tree functions as one block of NumPyro's ``Gibbs`` kernel.

:class:`TreeMoves` is a ``numpyro.infer.mcmc.MCMCKernel`` that owns the tree sites of a model
(:func:`bayestrees.inference.treefn.site.bart_function`) and updates them given every other site's value;
composed with NUTS for the rest by ``numpyro.infer.Gibbs([(TreeMoves(model), tree_sites), (NUTS(model),
None)])`` (HMC-within-Gibbs; :func:`bayestrees.inference.treefn.fit.sample_model` builds it).

A step visits the tree functions in turn (a function of ``k`` outputs as ``k`` functions, one per
output, its ensembles being independent under the prior); for each, ``L(f)`` is the model's log
density as a function of that function's (or output's) values ``f`` at the training rows, every
other site held at its current value (the tree sites' own prior left out: the moves account for
it exactly).

Conjugate path (a Normal likelihood in which ``f`` enters the mean additively)
------------------------------------------------------------------------------
When ``L`` is quadratic in ``f`` with a diagonal Hessian, ``L(f) = const - sum_i b_i (c_i - f_i)^2 / 2``,
and one forward-over-reverse pass at the current ``f`` gives ``b = -H 1`` and ``c = f + grad L / b``.
The step is then the BART family's step (:mod:`bayestrees.inference.bart.kernel`: every tree's
move with its leaf values integrated out, then its leaf values from their conditional) on the
pseudo-response ``c`` with known row weights ``b`` and ``sigma = 1``: for a Normal observation
``y ~ N(g + f, s^2 / w)`` that is exactly ``c = y - g``, ``b = w / s^2``, so the composed model costs
what the BART family costs.  ``conjugate="auto"`` checks the quadratic form numerically at
:meth:`TreeMoves.init` (the Hessian-vector products at two random points and two random values
of the other sites agree with the diagonal ``-b`` to 1e-4 relative); ``True`` asserts it,
``False`` takes the general path.

Conjugate path of log-gamma leaves (a Poisson likelihood with a log link)
--------------------------------------------------------------------------
With ``leaf_prior="loggamma"`` (:mod:`~bayestrees.inference.treefn.leaf_priors`: ``exp(theta) ~
Gamma(c, d)``) and ``L(f) = const + sum_i y_i f_i - B_i exp(f_i)`` (a Poisson observation of rate ``B_i
exp(f_i)``, ``B_i`` from the other sites; ``y_i, B_i >= 0``), one pass at the current ``f`` gives
``a = grad L = y - B e^f`` and ``h = H 1 = -B e^f``, so ``y = a - h`` and ``B = -h e^-f``.  Tree ``j``'s
leaf ``l`` then has the Gamma-Poisson marginal ``c log d - lgamma(c) + lgamma(c + Y_l) - (c + Y_l)
log(d + U_l)`` (``Y_l = sum y_i``, ``U_l = sum B_i exp(f_-j,i)`` over its rows; the factors that do not
depend on the tree cancel), and its ``exp(theta_l)`` the posterior ``Gamma(c + Y_l, d + U_l)``
(log-linear BART, Murray 2021).  The step is the BART family's, visit by visit: every tree's grow or
prune with its leaf values integrated out (the same proposals and prior ratio), then its leaf
values from their conditional; ``conjugate="auto"`` checks the form numerically at :meth:`TreeMoves.init`
(the Hessian diagonal, ``a - h`` the same and ``h`` scaled by ``exp(f2 - f1)`` at two random points
and two random values of the other sites, to 1e-4 relative).

Augmented paths (latent draws that make the likelihood Gaussian in the function)
-------------------------------------------------------------------------------
For some observation families, latent variables drawn per row given the function make the
likelihood Gaussian in ``f``: ``exp(a_i (f'_i - f_i) - b_i (f'_i - f_i)^2 / 2)``, the pseudo-response
``f_i + a_i / b_i`` of precision ``b_i``.  A step draws the latents afresh, then takes the conjugate
Normal path's step with those weights (the BART family's step, and a function of one tree's
regrowth in it).  The latents are not kept: each step given them leaves the trees' conditional
given them invariant, so the step, averaged over their conditional, leaves the trees' posterior
invariant.  With Normal leaves, ``eta = g + f`` (``g`` from the other sites) and :data:`AUGMENTED`:

* **logit** (an observed ``dist.Bernoulli(logits=eta)`` or ``dist.Binomial(n, logits=eta)``, ``L = sum_i
  y_i eta_i - n_i log(1 + exp(eta_i))``): ``omega_i ~ PG(n_i, eta_i)`` (Polson, Scott & Windle 2013:
  :mod:`bayestrees.polya_gamma`), ``b_i = omega_i`` and ``a_i = kappa_i - omega_i eta_i`` with ``kappa_i =
  y_i - n_i / 2``.  The draws cost ``n_i`` Polya-Gamma variates a row;
* **student_t** (an observed ``dist.StudentT(nu, eta, s)``, ``nu`` and ``s`` from the other sites or
  fixed): the scale mixture ``y_i ~ N(eta_i, s_i^2 / lambda_i)``, ``lambda_i ~ Gamma(nu_i / 2, nu_i / 2)``
  (Geweke 1993), whose conditional is ``lambda_i ~ Gamma((nu_i + 1) / 2, (nu_i + ((y_i - eta_i) / s_i)^2) /
  2)``: ``b_i = lambda_i / s_i^2`` and ``a_i = b_i (y_i - eta_i)``;
* **probit** (an observed ``bt.distributions.BernoulliProbit(eta)``, ``P(y_i = 1) = Phi(eta_i)``): the
  latent ``z_i ~ N(eta_i, 1)`` truncated to ``z_i > 0`` where ``y_i = 1`` and to ``z_i < 0`` elsewhere
  (Albert & Chib 1993, as the BART family's probit), ``b_i = 1`` and ``a_i = z_i - eta_i``.

The function may enter the predictor with a factor of each row's own that does not depend on it,
``eta_i = g_i + s_i f_i`` (a treatment ``z_i`` times an effect function, a coding ``b_{z_i}``, a
scale from another site): the latents' Gaussian likelihood in ``eta`` is then one in ``f`` with
``a_i s_i`` and ``b_i s_i^2`` (rows with ``s_i = 0`` carry nothing on ``f``); ``s`` is the
predictor's derivative in ``f_i``, one forward pass a step (exactly 1 where ``eta = g + f``).

``conjugate="auto"`` checks the form at :meth:`TreeMoves.init` (traces of the model at two random
values of the other sites and two random points ``f``: one observed site of such a family, not
scaled by a handler, whose linear predictor (of shape ``(n,)``) moves with ``f`` linearly, with the
same slope in each row at both points, while its other parameters stay, and no other term of ``L``
that changes with ``f``).

General path (any likelihood): one joint move per tree
------------------------------------------------------
Tree ``j`` with structure ``T`` and leaf values ``M``, the others' sum ``f_-j``, the function
``f = f_-j + g`` (``g_i = M[leaf_T(i)]``).  With ``a = grad L(f)`` and ``b = max(-H(f) 1, 0)``
(one forward-over-reverse pass), the quadratic expansion ``L(f + delta) ~ L(f) + a delta - b
delta^2 / 2`` gives, for the leaves of any tree ``T*`` over the same rows, the Gaussian proposal

    q(M* | T*, f) = prod_l N(M*_l; A_l / P_l, 1 / P_l),   A_l = sum_{i in l} (a_i + b_i g_i),
                                                          P_l = sum_{i in l} b_i + 1 / leaf_sd^2

(one Newton step from the current values under the leaf prior: per leaf a Laplace approximation
of the leaf value's conditional; for log-gamma leaves the prior's own expansion at the leaf's mean
current value ``g_l`` replaces ``1 / leaf_sd^2`` and the prior mean 0: ``P_l = sum b_i + d exp(g_l)``, the
step ``(sum (a_i + b_i (g_i - g_l)) + c - d exp(g_l)) / P_l`` from ``g_l``).  The move draws ``T'`` by one grow or prune (the proposals and
prior of the BART family: :func:`bayestrees.inference.proposals.propose`; when that move is
impossible or breaks ``min_leaf_rows``, ``T' = T``, so the move is a refresh of the leaf values),
then ``M' ~ q(. | T', f)``, ``f' = f - g + g'``, and accepts with probability ``min(1, r)``,

    log r = L(f') - L(f) + log p(T') - log p(T) + log p(M' | T') - log p(M | T)
            + log q_T(T | T') - log q_T(T' | T) + log q(M | T, f') - log q(M' | T', f),

the reversible-jump ratio of a proposal that draws the new tree's leaf values from a density
(every leaf's, so the reverse move draws every leaf of ``T`` from ``q(. | T, f')``).  ``L`` is
evaluated exactly, so the chain targets the model's posterior whatever the quality of the
Laplace proposal, which only sets the acceptance rate.  A visit costs two passes of ``L`` (at
``f'``; the pass at ``f`` is carried from the previous visit).  The visit is the sums' move phase
(:func:`bayestrees.inference.bart.kernel.move_trees`) with the leaf model
:class:`~bayestrees.leaves.LaplaceRows`, which gives the proposal, the leaf prior and ``L``.

Regrowth on the general path (Normal leaves)
--------------------------------------------
The local moves change a tree one node at a time; where the posterior holds trees with different
roots apart (a tight leaf prior against strong data), they stay near the trees they found.  The
regrowth proposes a whole new tree ``T'`` and its leaf values, tree by tree given the others, and
corrects exactly:

1. the expansion point ``u``: from ``f_-j`` (the other trees' sum), :data:`~bayestrees.leaves.LAPLACE_NEWTON` damped
   Newton steps of every row on its own towards the mode of ``L`` with a leaf value ``N(0, leaf_sd^2)``
   added at that row.  It depends on the other trees and the data alone, not on tree ``j``;
2. the Gaussian expansion ``Q(f) = a (f - u) - b (f - u)^2 / 2`` (``a``, ``b = max(-H 1, 0)`` at ``u``;
   rows with ``b = 0`` left out) makes tree ``j``'s conditional the conjugate one of Normal rows of
   precision ``b`` and pseudo-response ``u - f_-j + a / b``
   (:class:`~bayestrees.leaves.NormalRows`): ``T'`` is drawn by the conditional SMC update of that
   approximate target ``pi~`` (:mod:`bayestrees.inference.pgibbs`, the current tree held), and
   ``M'`` from its conjugate conditional ``q(M' | T')``;
3. the conditional SMC kernel is reversible with respect to its target (a two-stage data
   augmentation: the other particles given the held one, then one particle given all; Chopin &
   Singh 2015), so as a proposal for ``pi`` its acceptance ratio is the ratio of importance
   weights ``[pi(T', M') / (pi~(T') q(M' | T'))] / [pi(T, M) / (pi~(T) q(M | T))]``.  The priors of
   the trees and leaves cancel in it, leaving ``log r = R(f') - R(f)`` with ``R = L - Q``, the
   expansion's error.  For a likelihood quadratic in ``f`` it is 0 and every regrowth is kept.

A regrowth costs :data:`~bayestrees.leaves.LAPLACE_NEWTON` + 2 passes of ``L`` and the conditional SMC update per
tree; it is the sums' regrowth phase (:func:`bayestrees.inference.bart.kernel.regrow_trees`) with the
same leaf model.  Where the expansion point is far from where the leaves settle (rows of one leaf whose
own modes differ), the correction rejects more regrowths; they are exact nonetheless.
"""
from __future__ import annotations

import copy
import dataclasses
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.infer.gibbs import GIBBS_SITES_KWARG, prototype_trace
from numpyro.infer.mcmc import MCMCKernel

from ... import random_bits
from ...batching import scatter_add, take
from ...distributions import BernoulliProbit
from ...leaves import GammaPoissonLeaves, LaplaceRows, value_grad_curvature
from ...polya_gamma import polya_gamma
from . import leaf_priors
from ...priors import canonical, traced_params
from ...sharding import check_data_devices
from .. import heap
from .. import proposals
from ..bart import kernel as bart_kernel
from .site import TreeEnsemble, TreeValues, stump_initialisation

__all__ = ["TreeMoves", "TreeMovesState", "tree_sites", "function_log_density", "REGROW_PARTICLES"]

#: particles of the particle Gibbs regrowth that ``particles="auto"`` gives a function of one tree
REGROW_PARTICLES = 10
#: the move probabilities (grow, prune, change, swap, rotate) of a function of one tree
ONE_TREE_MOVES = (0.25, 0.25, 0.3, 0.1, 0.1)
#: and the moves of the tree per step (as Bayesian CART's "mixed" scheme: local moves, then a regrowth on the
#: conjugate Normal path)
ONE_TREE_MOVE_COUNT = 50
#: the moves' probabilities (grow, prune, slide, swap) with slides (``slide > 0``), as the BART family's
#: slide kernel (``docs/lab-notes/bart.md``)
SLIDE_MOVES = (0.35, 0.35, 0.3, 0.0)
#: the slides' reach (codes either way) of ``slide="auto"`` for sums of trees on the BART step's paths
AUTO_SLIDE = 3
#: rows whose precision is below this fraction of the largest take the function from the trees' sum
#: after a step of the BART family's Gaussian step (:meth:`TreeMoves._gaussian_step`)
FAINT_PRECISION = 1e-2


class TreeMovesState(NamedTuple):
    """``z``: the tree sites' values (what NumPyro collects); ``trees``: one BART kernel State per
    tree function, or per output of a function of several (its trees as codes, the rows' leaves,
    the function ``z - resid``); ``accepted``: accepted tree moves per tree site in the last step
    (all its outputs); ``rng_key``."""

    z: dict
    trees: tuple
    accepted: Any
    rng_key: jax.Array


def _traced(model_args, model_kwargs) -> bool:
    """Whether any of the model's arguments is a JAX tracer (the set-up is being compiled)."""
    kw = {k: v for k, v in (model_kwargs or {}).items() if k != GIBBS_SITES_KWARG}
    return any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves((tuple(model_args), kw)))


def tree_sites(model_trace) -> tuple:
    """The tree sites of a model trace (sample sites of :class:`TreeEnsemble`)."""
    return tuple(name for name, site in model_trace.items()
                 if site["type"] == "sample" and isinstance(site["fn"], TreeEnsemble) and not site["is_observed"])


def _trace_at(model, model_args, model_kwargs, values: dict):
    """The model's trace with ``values`` substituted (tree sites, tree function values, ...)."""
    return handlers.trace(handlers.substitute(handlers.seed(model, 0), data=values)).get_trace(*model_args,
                                                                                                 **model_kwargs)


def _site_log_density(site):
    """A sample site's log density, summed (times its ``scale`` where a handler set one)."""
    lp = site["fn"].log_prob(site["value"])
    if site.get("scale") is not None:
        lp = site["scale"] * lp
    return jnp.sum(lp)


def function_log_density(model, model_args, model_kwargs, values: dict, skip=()):
    """The model's log density with ``values`` substituted (tree sites, tree function values, ...),
    summed over every sample site except those in ``skip``."""
    tr = _trace_at(model, model_args, model_kwargs, values)
    total = jnp.zeros((), jnp.float32)
    for name, site in tr.items():
        if site["type"] != "sample" or name in skip:
            continue
        total = total + _site_log_density(site)
    return total


class Augmentation(NamedTuple):
    """An observation family that latent draws make Gaussian in the function (module docstring,
    "Augmented paths"): its distributions, the parameter that holds ``g + f`` (``linear``), the others
    that must not move with ``f`` (``fixed``), and ``draw(key, linear, y, *fixed, dtype) -> (a, b)``,
    the Gaussian likelihood ``a (f' - f) - b (f' - f)^2 / 2`` of the function given fresh latents."""

    classes: tuple
    linear: str
    fixed: tuple
    draw: Any


def _polya_gamma_terms(key, logits, y, trials, dtype):
    """The logit path's latents ``omega ~ PG(n, eta)``: precision ``omega``, ``a = kappa - omega eta``."""
    omega = polya_gamma(key, trials, logits, dtype)
    kappa = y.astype(dtype) - 0.5 * trials.astype(dtype)
    return kappa - omega * logits, omega


def _student_t_terms(key, loc, y, df, scale, dtype):
    """The Student-t path's latents ``lambda ~ Gamma((nu + 1) / 2, (nu + ((y - eta) / s)^2) / 2)``:
    precision ``b = lambda / s^2``, ``a = b (y - eta)``."""
    r = (y.astype(dtype) - loc) / scale
    lam = random_bits.gamma(key, 0.5 * (df + 1.0), dtype) / (0.5 * (df + r * r))
    b = lam / (scale * scale)
    return b * (y.astype(dtype) - loc), b


def _probit_terms(key, eta, y, dtype):
    """The probit path's latents ``z ~ N(eta, 1)`` truncated to the side of ``y`` (Albert & Chib 1993):
    precision 1, ``a = z - eta``."""
    u = random_bits.open_uniform(key, eta.shape).astype(dtype)
    z = bart_kernel.truncated_normal(u, eta.astype(dtype), jnp.ones((), dtype), y > 0.5)
    return z - eta, jnp.ones_like(z)


#: the augmented paths: kind -> its observation family (``dist.Bernoulli(logits=...)``,
#: ``dist.Binomial(n, logits=...)``; ``dist.StudentT(df, loc, scale)``; ``bt.distributions.BernoulliProbit(eta)``)
AUGMENTED = {
    "logit": Augmentation(classes=(dist.BernoulliLogits, dist.BinomialLogits), linear="logits",
                          fixed=("total_count",), draw=_polya_gamma_terms),
    "student_t": Augmentation(classes=(dist.StudentT,), linear="loc", fixed=("df", "scale"), draw=_student_t_terms),
    "probit": Augmentation(classes=(BernoulliProbit,), linear="eta", fixed=(), draw=_probit_terms),
}
#: the conjugate kinds whose step is the BART family's Gaussian step (the augmented ones given their latents)
_GAUSSIAN_KINDS = ("normal",) + tuple(AUGMENTED)


def _augmented_base(fn):
    """``(kind, distribution)`` of an augmented family under ``Independent`` wrappers of an observed
    site, or ``(None, None)``."""
    while isinstance(fn, dist.Independent):
        fn = fn.base_dist
    for kind, aug in AUGMENTED.items():
        if isinstance(fn, aug.classes):
            return kind, fn
    return None, None


def _fixed_values(kind: str, base):
    """The parameters of an augmented family's distribution that are not its linear predictor (a
    Bernoulli's number of trials is 1)."""
    return tuple(getattr(base, name, 1) for name in AUGMENTED[kind].fixed)


def augmented_terms(model, model_args, model_kwargs, values_at, f, site: str, kind: str):
    """``(linear, slope, y, *fixed)`` of the augmented observed ``site`` (:data:`AUGMENTED`, of kind
    ``kind``) with the function at ``f`` (``values_at(f)``: every site's value): its linear predictor,
    that predictor's derivative in each row's ``f_i`` (one forward pass: 1 where the function enters
    unscaled, ``s_i`` where the predictor is ``g + s_i f_i``), the observed value and the fixed
    parameters, each of shape ``(n,)``."""
    n = f.shape[0]
    aug = AUGMENTED[kind]

    def linear_at(f):
        tr = _trace_at(model, model_args, model_kwargs, values_at(f))
        _, base = _augmented_base(tr[site]["fn"])
        rest = (tr[site]["value"],) + _fixed_values(kind, base)
        return jnp.broadcast_to(jnp.asarray(getattr(base, aug.linear)), (n,)), rest

    linear, slope, rest = jax.jvp(linear_at, (f,), (jnp.ones_like(f),), has_aux=True)
    return (linear, slope) + tuple(jnp.broadcast_to(jnp.asarray(x), (n,)) for x in rest)


class _Fn(NamedTuple):
    """Static description of one tree function, or of one output of a function of several
    (``column >= 0``: its own ensemble of ``m`` trees, updated as a function of its own)."""

    site: str
    name: str
    dist: Any
    cfg: Any      # bart KernelConfig
    data: Any     # bart BARTData (codes and prior; y, weight set per step)
    rows: str     # rows_key of the training X
    column: int = -1   # the output, for a function of several outputs (-1: a function of one)

    def with_values(self, values: dict, f) -> dict:
        """``values`` with this function's (or output's) values at the rows set to ``f``."""
        if self.column < 0:
            return {**values, self.name: f}
        return {**values, self.name: values[self.name].at[:, self.column].set(f)}


class TreeMoves(MCMCKernel):
    """Metropolis-Hastings moves of a model's tree functions, a block kernel of ``numpyro.infer.Gibbs``.

    Parameters
    ----------
    model : a NumPyro model with tree functions (:func:`bayestrees.inference.treefn.site.bart_function`)
    conjugate : "auto", True or False
        A conjugate path (module docstring) when the likelihood is quadratic in the tree function
        (Normal leaves), of the form ``y f - B exp(f)`` (log-gamma leaves) or, after latent draws,
        a logistic or Student-t one (Normal leaves); "auto" decides at ``init`` by a numerical check
        (the only way to the augmented paths), True asserts the leaf prior's path (Normal or Gamma-Poisson).
    leaf_refresh : int >= 0
        Leaf-value refresh sweeps after each structure sweep on the general path.
    move_probs : tuple of 4 or 5 floats, optional
        The probabilities of grow, prune, change, swap and (optionally) rotate in every move (grow =
        prune); default
        :data:`ONE_TREE_MOVES` for a function of one tree; for sums of trees :data:`SLIDE_MOVES` with
        slides (``slide``), else grow and prune alone.
    local_moves : int >= 1, optional
        Moves of every tree per step; default :data:`ONE_TREE_MOVE_COUNT` for a function of one
        tree, 1 for sums of trees.
    slide : "auto" or int >= 0, default "auto"
        The change move as a local *slide* of a threshold by ``1 .. slide`` codes at a node whose
        children are leaves (the BART family's, :class:`~bayestrees.inference.bart.kernel.KernelConfig`),
        on every path; ``move_probs`` then defaults to :data:`SLIDE_MOVES` and must have no swap or rotation.
        "auto": :data:`AUTO_SLIDE` for a sum of trees when neither ``move_probs`` nor
        ``data_devices > 1`` is given, else 0 (a function of one tree keeps the one-tree moves).
    particles : "auto" or int
        Particles of a particle Gibbs regrowth of every tree after its move in each step
        (:mod:`bayestrees.inference.regrow`; 0: none).  On the conjugate paths (Normal, and Gamma-Poisson
        for log-gamma leaves) and on the general path with Normal leaves (corrected by
        Metropolis-Hastings: the module docstring); not on the general path with log-gamma leaves.
        "auto": 10 for a function of one tree (``m = 1``) that can split, whose grow and prune alone
        change the root only through the single leaf, 0 for sums of trees (and with ``data_devices > 1``).
    data_devices : int >= 1
        Devices the rows of each function's step are split over (the conjugate Normal path only:
        :class:`bayestrees.inference.bart.kernel.KernelConfig`'s ``data_devices``).
    traceable_args : bool, default False
        The model's arguments are arrays that may be traced (its tree features are not among them:
        :func:`~bayestrees.inference.treefn.fit.sample_model` closes them over): the conjugacy
        probe then takes them as arguments of its compiled program, which another data set of the
        same shapes reuses.

    The trees start as single leaves of value 0 (as the BART family's chains do), whatever
    ``init_params`` says.
    """

    sample_field = "z"

    def __init__(self, model, conjugate="auto", leaf_refresh: int = 0, traceable_args: bool = False,
                 particles="auto", move_probs=None, local_moves=None, data_devices: int = 1, slide="auto"):
        if conjugate not in ("auto", True, False):
            raise ValueError(f"conjugate must be 'auto', True or False, got {conjugate!r}")
        if move_probs is not None:
            move_probs = proposals.check_move_probs(move_probs, grow=True)
        if local_moves is not None and (isinstance(local_moves, bool) or not isinstance(local_moves, (int, np.integer))
                                        or local_moves < 1):
            raise ValueError(f"local_moves must be None (the default of each function) or an integer >= 1, got "
                             f"{local_moves!r}")
        if slide != "auto" and (isinstance(slide, bool) or not isinstance(slide, (int, np.integer)) or slide < 0):
            raise ValueError(f"slide must be 'auto' or an integer >= 0 (0: no slides), got {slide!r}")
        if slide != "auto" and slide and move_probs is not None and (move_probs[3] > 0 or proposals.rotates(move_probs)):
            raise ValueError(f"slide={slide}: slides replace the change move, and swap and rotate must be 0; got move_probs="
                             f"{move_probs}")
        self.slide = slide if slide == "auto" else int(slide)
        self.move_probs = move_probs
        self.local_moves = None if local_moves is None else int(local_moves)
        if particles != "auto" and (isinstance(particles, bool) or not isinstance(particles, (int, np.integer))
                                    or particles == 1 or particles < 0):
            raise ValueError(f"particles must be 'auto', 0 (no regrowth) or an integer >= 2, got {particles!r}")
        self.particles = particles
        self.data_devices = check_data_devices(data_devices)
        self._model = model
        self.conjugate = conjugate
        self.leaf_refresh = int(leaf_refresh)
        self.traceable_args = bool(traceable_args)
        self._fns: tuple = ()
        self._conj: tuple = ()
        self._augmented: dict = {}

    @property
    def model(self):
        return self._model

    def wrap_model(self, wrapper):
        kernel = copy.copy(self)
        kernel._model = wrapper(self._model)
        return kernel

    def refresh(self, state, model_args, model_kwargs):
        return state   # nothing cached depends on the other sites

    def get_constrain_fn(self, model_args, model_kwargs):
        return lambda z: z

    def postprocess_fn(self, model_args, model_kwargs):
        return lambda z: z

    @property
    def default_fields(self):
        return ("z",)

    # -- set-up ------------------------------------------------------------------------------------
    def _describe(self, model_args, model_kwargs):
        kw = {k: v for k, v in (model_kwargs or {}).items() if k != GIBBS_SITES_KWARG}
        with stump_initialisation():   # the sites' distributions only: no tree drawn from the prior
            tr = prototype_trace(self._model, jax.random.key(0), model_args, kw)
        names = tree_sites(tr)
        if not names:
            raise ValueError("the model has no tree function (bt.bart_function(...) or bt.tree_function(...))")
        fns = []
        for site in names:
            d: TreeEnsemble = tr[site]["fn"]
            spec = d.spec
            fname = tr[site]["infer"].get("function", site)
            cfg = bart_kernel.KernelConfig(prior=canonical(spec.prior), tau2=spec.leaf_sd ** 2, max_depth=spec.max_depth,
                                           m=spec.m, move_probs=(0.5, 0.5, 0.0, 0.0),
                                           min_leaf_rows=max(int(spec.min_leaf_rows), 0), probit=False,
                                           sample_sigma=False, sparse=False, weighted=bool(d.missing))
            data = self._data_of(d)
            for column in (range(spec.outputs) if spec.outputs else (-1,)):   # one block per output
                fns.append(_Fn(site=site, name=fname, dist=d, cfg=cfg, data=data, rows=d.rows, column=column))
        return tuple(fns), tr

    @staticmethod
    def _data_of(d: TreeEnsemble):
        """The BART kernel's data of a tree site: its rows' codes, code ranges and tree prior (the
        response and weights are set per step)."""
        n = d.X.shape[0]
        codes = (jnp.asarray(np.ascontiguousarray(d.codes.T)) if isinstance(d.codes, np.ndarray)
                 else jnp.asarray(d.codes).T)
        return bart_kernel.BARTData(codes=codes, y=jnp.zeros(n), weight=jnp.ones(n), rows=jnp.ones(n),
                                    nu=jnp.asarray(1.0), nu_lam=jnp.asarray(1.0), sigma2=jnp.asarray(1.0),
                                    offset=jnp.asarray(0.0), prior=traced_params(d.spec.prior, jnp.float32),
                                    code_lo=jnp.asarray(d.code_lo), code_hi=jnp.asarray(d.code_hi),
                                    sparse_prior=jnp.zeros(3), split_log_w=d.split_log_w,
                                    categories=None if d.categories is None else jnp.asarray(d.categories, jnp.int32))

    def _fns_at(self, model_args, model_kwargs) -> tuple:
        """The functions as :meth:`prepare` described them, with their features' tables (codes, cut
        points, code ranges) read from the model run at ``model_args``: with ``traceable_args`` the
        model's features and tables may be arguments of the compiled program
        (:func:`~bayestrees.inference.treefn.site.feature_arguments`), and then they are read
        from there instead of being the program's constants."""
        if not self.traceable_args:
            return self._fns
        kw = {k: v for k, v in (model_kwargs or {}).items() if k != GIBBS_SITES_KWARG}
        with stump_initialisation():
            tr = prototype_trace(self._model, jax.random.key(0), model_args, kw)
        return tuple(fn._replace(dist=tr[fn.site]["fn"], data=self._data_of(tr[fn.site]["fn"])) for fn in self._fns)

    def _assemble(self, states, fns) -> tuple[dict, dict]:
        """Every tree site's packed value and every function's values at the training rows, from the
        blocks' states (a function of several outputs: its blocks stacked, in output order)."""
        packed, values = {}, {}
        for fn, st in zip(fns, states):
            p, v = self._pack(fn, st), st.z - st.resid
            if fn.column < 0:
                packed[fn.site], values[fn.name] = p, v
            else:
                packed.setdefault(fn.site, []).append(p)
                values.setdefault(fn.name, []).append(v)
        packed = {k: jnp.stack(v) if isinstance(v, list) else v for k, v in packed.items()}
        values = {k: jnp.stack(v, -1) if isinstance(v, list) else v for k, v in values.items()}
        return packed, values

    def _model_values(self, states, fns) -> dict:
        """The tree sites' packed values and the functions' values at the rows, one dict (what the
        model's log density is evaluated at)."""
        packed, values = self._assemble(states, fns)
        return {**packed, **values}

    def _site_values(self, states, fns) -> dict:
        """The tree sites' values for the other blocks (:class:`TreeValues`), with their log prior
        density from the states' cached per-tree log priors (the moves keep them; scoring the
        packed trees afresh, ``TreeEnsemble.log_prob``, cost a quarter of a step) and the leaves'
        log densities."""
        packed, values = self._assemble(states, fns)
        lp = {}
        for fn, st in zip(fns, states):
            spec = fn.dist.spec
            lv = jnp.where(heap.leaf_slots(st.feature), leaf_priors.log_density(spec.leaf_prior, st.value, spec.leaf_sd), 0.0)
            lp[fn.site] = lp.get(fn.site, 0.0) + jnp.sum(st.log_prior) + jnp.sum(lv)
        return {site: TreeValues(packed[site], values[fn.name], lp[site], fn.rows)
                for site, fn in {fn.site: fn for fn in fns}.items()}

    @property
    def sites(self) -> tuple:
        """The tree sites (after ``init``), in the model's order."""
        return tuple(dict.fromkeys(fn.site for fn in self._fns))

    @staticmethod
    def _conjugate_kind(fn: _Fn) -> str:
        """The conjugate path a function's leaf prior allows: ``"normal"`` (Normal leaves, a
        likelihood quadratic in ``f``) or ``"poisson"`` (log-gamma leaves, ``y f - B exp(f)``)."""
        return "poisson" if fn.dist.spec.leaf_prior == "loggamma" else "normal"

    def _check_conjugate(self, fns, model_args, model_kwargs):
        """Per function: its conjugate path (:meth:`_conjugate_kind`) if ``L`` has that path's form
        (module docstring), else ``""`` (the general path)."""
        self._augmented = {}   # function name -> its augmented observed site (the augmented paths)
        self._uneven = {}      # function name -> whether its rows' precisions may differ (TreeMoves._gaussian_step)
        if self.conjugate is True or self.conjugate is False:   # (no check: the data may be traced here)
            self._uneven = {fn.name: True for fn in fns}
            return tuple(self._conjugate_kind(fn) if self.conjugate else "" for fn in fns)
        kw = {k: v for k, v in (model_kwargs or {}).items() if k != GIBBS_SITES_KWARG}
        out = []
        for fn in fns:
            n = fn.dist.X.shape[0]
            kind = self._conjugate_kind(fn)

            def probe_fn(base, f1, f2, v, args, kwargs, fn=fn):
                def L(f):
                    return function_log_density(self._model, args, kwargs, fn.with_values(base, f), skip=(fn.site,))

                g = jax.grad(L)
                ones = jnp.ones_like(f1)
                (a1, h1), (a2, h2) = jax.jvp(g, (f1,), (ones,)), jax.jvp(g, (f2,), (ones,))
                return a1, a2, h1, h2, jax.jvp(g, (f1,), (v,))[1], jax.jvp(g, (f2,), (v,))[1]

            if self.traceable_args:   # the data as arguments: one program for every data set of these shapes
                probe = partial(jax.jit(probe_fn), args=tuple(model_args), kwargs=kw)
            else:                     # the arguments as constants of the program (any Python values)
                probe = jax.jit(partial(probe_fn, args=model_args, kwargs=kw))

            ok = True
            for seed in (1, 2):   # two random values of the other sites, two random points f, a random v
                base, rng = self._random_base(seed, fn, fns, model_args, kw)
                f1, f2, v = (jnp.asarray(rng.normal(size=n), jnp.float32) for _ in range(3))
                a1, a2, h1, h2, hv1, hv2 = (np.asarray(x, np.float64) for x in probe(base, f1, f2, v))
                v = np.asarray(v, np.float64)
                tol = 1e-4 * (float(np.max(np.abs(h1 * v))) + 1e-30)
                ok &= bool(np.max(np.abs(hv1 - h1 * v)) <= tol) and bool(np.all(h1 <= 0))   # a diagonal Hessian
                if kind == "normal":   # ... constant in f
                    ok &= bool(np.max(np.abs(hv2 - hv1)) <= tol)
                    uneven = bool(np.ptp(h1) > 1e-6 * (float(np.max(np.abs(h1))) + 1e-30))
                    self._uneven[fn.name] = self._uneven.get(fn.name, False) or uneven
                else:                  # ... proportional to exp(f), and y = a - h the same at f1 and f2, >= 0
                    pred = h1 * np.exp(np.asarray(f2, np.float64) - np.asarray(f1, np.float64))
                    ok &= bool(np.max(np.abs(h2 - pred)) <= 1e-4 * (float(np.max(np.abs(pred))) + 1e-30))
                    y1, y2 = a1 - h1, a2 - h2
                    scale = 1e-4 * (float(np.max(np.abs(y1))) + float(np.max(np.abs(h1))) + 1e-30)
                    ok &= bool(np.max(np.abs(y2 - y1)) <= scale) and bool(np.all(y1 >= -scale))
            if not ok and kind == "normal":
                site, aug = self._augmented_site(fn, fns, model_args, kw)
                if site is not None:
                    kind, ok = aug, True
                    self._augmented[fn.name] = site
                    self._uneven[fn.name] = True   # the latents' precisions differ from row to row
            out.append(kind if ok else "")
        return tuple(out)

    def _random_base(self, seed: int, fn: _Fn, fns, model_args, kw):
        """``(values, rng)``: every latent site at a random value (the prior's, trees as stumps), every
        other function and output at standard Normal values; ``rng`` seeded with ``seed``."""
        with stump_initialisation():   # (drawing trees from the prior compiles a sampler: seconds)
            tr = prototype_trace(self._model, jax.random.key(seed), model_args, kw)
        base = {k: site["value"] for k, site in tr.items() if site["type"] == "sample" and not site["is_observed"]}
        rng = np.random.default_rng(seed)
        for other in fns:   # every other function (and output) at random values
            if other.name != fn.name and other.name not in base:
                rows = other.dist.X.shape[0]
                size = (rows, other.dist.spec.outputs) if other.column >= 0 else (rows,)
                base[other.name] = jnp.asarray(rng.normal(size=size), jnp.float32)
        if fn.column >= 0:   # the other outputs at random values
            base[fn.name] = jnp.asarray(rng.normal(size=(fn.dist.X.shape[0], fn.dist.spec.outputs)), jnp.float32)
        return base, rng

    def _augmented_site(self, fn: _Fn, fns, model_args, kw):
        """``(site, kind)``: the observed site of an augmented path (module docstring) and its kind if
        ``L`` has that path's form, else ``(None, None)``: one observed site of a family of
        :data:`AUGMENTED`, not scaled by a handler, whose linear predictor (of shape ``(n,)``) moves with
        ``f`` linearly (the same slope in each row at both points, not 0 everywhere) while its other
        parameters stay, and no other term of ``L`` that depends on ``f`` (checked at two random values
        of the other sites and two random points ``f``, to 1e-4 relative)."""
        if fn.column >= 0 or _traced(model_args, kw):   # (its checks read values)
            return None, None
        n = fn.dist.X.shape[0]
        found = None
        for seed in (1, 2):
            base, rng = self._random_base(seed, fn, fns, model_args, kw)
            f1, f2 = (jnp.asarray(rng.normal(size=n), jnp.float32) for _ in range(2))
            traces = [_trace_at(self._model, model_args, kw, fn.with_values(base, f)) for f in (f1, f2)]
            lps = {name: tuple(float(_site_log_density(t[name])) for t in traces) for name, site in traces[0].items()
                   if site["type"] == "sample" and site["is_observed"] and name in traces[1]}
            moving = [name for name, (lp1, lp2) in lps.items() if lp1 != lp2]
            if len(moving) != 1:
                return None, None
            name = moving[0]
            site = traces[0][name]
            (kind, b1), (kind2, b2) = (_augmented_base(t[name]["fn"]) for t in traces)
            if kind is None or kind2 != kind or site.get("scale") is not None or jnp.shape(site["value"]) != (n,) \
                    or found not in (None, (name, kind)):
                return None, None
            lin1, lin2 = (getattr(x, AUGMENTED[kind].linear) for x in (b1, b2))
            if jnp.shape(lin1) != (n,):
                return None, None
            # the predictor moves with f linearly: its slope in each row the same at f1 and f2, and the
            # change from f2 to f1 that slope times the change of f
            values_at = partial(fn.with_values, base)
            s1, s2 = (np.asarray(augmented_terms(self._model, model_args, kw, values_at, f, name, kind)[1], np.float64)
                      for f in (f1, f2))
            moved = np.asarray(lin1, np.float64) - np.asarray(lin2, np.float64)
            d = np.asarray(f1, np.float64) - np.asarray(f2, np.float64)
            tol = 1e-4 * (np.max(np.abs(s1)) + 1e-30)
            if not np.any(s1 != 0) or np.max(np.abs(s1 - s2)) > tol \
                    or np.max(np.abs(moved - s1 * d)) > 1e-4 * (np.max(np.abs(s1 * d)) + 1.0):
                return None, None
            for p1, p2 in zip(_fixed_values(kind, b1), _fixed_values(kind, b2)):   # the rest does not move
                p1, p2 = np.asarray(p1, np.float64), np.asarray(p2, np.float64)
                if p1.shape != p2.shape or np.max(np.abs(p1 - p2), initial=0.0) > 1e-6 * (np.max(np.abs(p1)) + 1.0):
                    return None, None
            L1, L2 = (float(function_log_density(self._model, model_args, kw, fn.with_values(base, f), skip=(fn.site,)))
                      for f in (f1, f2))
            lp1, lp2 = lps[name]
            if abs((L1 - L2) - (lp1 - lp2)) > 1e-4 * (abs(L1) + abs(L2) + 1.0):
                return None, None
            found = (name, kind)
        return found

    def prepare(self, model_args, model_kwargs) -> "TreeMoves":
        """Describe the model's tree functions and choose each one's path, with concrete arguments.

        :meth:`init` does it itself when it was not done for the same arguments; done first, it
        leaves :meth:`init` pure array code, which can then be traced under ``jax.jit`` (one
        compiled program for the chains' set-up instead of one per operation:
        :func:`~bayestrees.inference.treefn.fit.sample_model`).
        """
        fns, _ = self._describe(model_args, model_kwargs)
        self._conj = self._check_conjugate(fns, model_args, model_kwargs)
        self._fns = tuple(self._with_kernel(fn, conj) for fn, conj in zip(fns, self._conj))
        self._prepared_for = self._args_key(model_args, model_kwargs)
        return self

    def _with_kernel(self, fn: _Fn, conj: str) -> _Fn:
        """``fn`` with the tree kernel its path takes: for a function of one tree, the one-tree moves
        (:data:`ONE_TREE_MOVES`, :data:`ONE_TREE_MOVE_COUNT` moves a step; elsewhere one grow or
        prune of every tree a step), or the ``move_probs`` and ``local_moves`` asked for, and the
        particle Gibbs regrowth of ``particles`` (not on the general path of log-gamma leaves)."""
        m = fn.dist.spec.m
        k = self.data_devices
        one_tree = m == 1 and k == 1 and fn.cfg.max_depth >= 1   # (a tree that cannot split has nothing to regrow)
        particles = (REGROW_PARTICLES if one_tree else 0) if self.particles == "auto" else int(self.particles)
        cfg = fn.cfg
        if k > 1:
            if conj != "normal":
                raise ValueError(f"data_devices={k}: the rows are split across devices on the conjugate Normal path "
                                 f"only (a likelihood quadratic in the function, Normal leaves), and {fn.site!r} takes "
                                 f"the {dict(poisson='Gamma-Poisson', logit='logit', student_t='Student-t').get(conj, 'general')} path")
            n = fn.dist.X.shape[0]
            if n % k:
                raise ValueError(f"data_devices={k}: {fn.site!r} has {n} rows, not a multiple of {k}; pad the rows "
                                 f"(e.g. with rows of zero weight in the likelihood) or choose another count")
            cfg = dataclasses.replace(cfg, data_devices=k)
        if m == 1:
            cfg = dataclasses.replace(cfg, move_probs=ONE_TREE_MOVES, local_moves=ONE_TREE_MOVE_COUNT)
        slide = self.slide
        if slide == "auto":   # a sum of trees, its moves not chosen
            slide = AUTO_SLIDE if m > 1 and self.move_probs is None and k == 1 else 0
        if slide:
            cfg = dataclasses.replace(cfg, move_probs=SLIDE_MOVES, slide=slide)
        if self.move_probs is not None:
            cfg = dataclasses.replace(cfg, move_probs=self.move_probs)
        if self.local_moves is not None:
            cfg = dataclasses.replace(cfg, local_moves=self.local_moves)
        if not conj and fn.dist.spec.leaf_prior != "normal":
            if self.particles not in ("auto", 0):
                raise ValueError(f"particles={self.particles!r}: on the general path the particle Gibbs regrowth takes "
                                 f"Normal leaves, and {fn.site!r} has leaf_prior={fn.dist.spec.leaf_prior!r}")
            return fn._replace(cfg=cfg)
        if particles:
            cfg = dataclasses.replace(cfg, particles=particles, n_codes=int(np.max(fn.dist.code_hi, initial=0)) + 1)
        return fn._replace(cfg=cfg)

    def settings_key(self) -> tuple:
        """The settings and the choices :meth:`prepare` made from the data (each function's path, its
        kernel's configuration, its rows), as a hashable value: two prepared kernels with equal keys
        and models of the same program trace the same step (:mod:`~bayestrees.inference.treefn.programs`)."""
        return (self.conjugate, self.leaf_refresh, self.traceable_args, self.particles, self.move_probs,
                self.local_moves, self.slide, self.data_devices, tuple(self._conj),
                tuple(sorted(self._augmented.items())), tuple(sorted(getattr(self, "_uneven", {}).items())),
                tuple((fn.site, fn.name, fn.cfg, fn.rows, fn.column) for fn in self._fns))

    @staticmethod
    def _args_key(model_args, model_kwargs) -> tuple:
        kw = {k: v for k, v in (model_kwargs or {}).items() if k != GIBBS_SITES_KWARG}
        return tuple(id(a) for a in model_args) + tuple((k, id(v)) for k, v in sorted(kw.items()))

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        if getattr(self, "_prepared_for", None) != self._args_key(model_args, model_kwargs):
            if self._fns and _traced(model_args, model_kwargs):
                pass   # traced data (sample_model compiles the set-up): the description of prepare() holds
            else:
                self.prepare(model_args, model_kwargs)
        fns = self._fns_at(model_args, model_kwargs)
        states = [bart_kernel.build_kernel(fn.cfg).init(jax.random.fold_in(rng_key, i), fn.data) for i, fn in enumerate(fns)]
        kw = dict(model_kwargs or {})
        for i, fn in enumerate(fns):
            states[i] = self._constant_start(i, states, model_args, kw, fns)
        return TreeMovesState(z=self._site_values(states, fns), trees=tuple(states),
                              accepted=jnp.zeros(len(self.sites), jnp.int32), rng_key=rng_key)

    def _constant_start(self, i: int, states: list, model_args, model_kwargs, fns, iterations: int = 30):
        """Function ``i``'s starting point: every tree one leaf of value ``c / m``, with ``c`` the
        mode of ``L(c 1) - c^2 / (2 m leaf_sd^2)`` (the sum of ``m`` one-leaf trees is ``c``; the
        other sites at their starting values) by Newton's method, each step at most 1 in size and
        halved (down to 1/8, or none) where the full step would lower the objective.

        The chains' first state only.  From ``f = 0`` far from the data (a Poisson log rate whose
        counts average 20), the first moves must climb ``L`` from a region where the Laplace
        proposal's Gaussian tails are lighter than the target's, and reverse proposals of the
        starting values there are too improbable to accept: the chains did not move.
        """
        fn = fns[i]
        st = states[i]
        m = fn.cfg.m
        tree_names = self.sites
        values = self._model_values(states, fns)
        f0 = st.z - st.resid
        ones = jnp.ones_like(f0)
        prec = 1.0 / (m * fn.cfg.tau2)

        def L(c):
            return function_log_density(self._model, model_args, model_kwargs, fn.with_values(values, f0 + c * ones),
                                        skip=tree_names)

        def J(c):
            v = L(c) - 0.5 * prec * c * c
            return jnp.where(jnp.isfinite(v), v, -jnp.inf)

        def newton(_, c):
            g = jax.grad(L)(c)
            h = jax.jvp(jax.grad(L), (c,), (jnp.ones_like(c),))[1]
            step = (g - prec * c) / jnp.maximum(-h + prec, prec)
            step = jnp.where(jnp.isfinite(step), jnp.clip(step, -1.0, 1.0), 0.0)
            # safeguarded: the best of the full step, its halves down to 1/8, and no step (a clipped
            # step can overshoot and bounce between two points)
            cand = c + step * jnp.asarray([1.0, 0.5, 0.25, 0.125, 0.0], c.dtype)
            return cand[jnp.argmax(jax.vmap(J)(cand))]

        # from 1e-3, not 0: at a logit of exactly 0 NumPyro's Bernoulli log density has a wrong
        # gradient (1 and 0 for y = 1 and 0, not 0.5 and -0.5; numpyro 0.22), which both this search
        # and the tree moves' Laplace proposals would follow
        c = jax.lax.fori_loop(0, iterations, newton, jnp.full((), 1e-3, f0.dtype))
        internal = st.feature >= 0
        root_only = ~jnp.any(internal, -1)                                   # (m,): stumps
        value = st.value.at[:, 0].add(jnp.where(root_only, c / m, 0.0).astype(st.value.dtype))
        return st._replace(value=value, resid=st.resid - c * jnp.sum(root_only) / m)

    @staticmethod
    def _pack(fn: _Fn, st) -> jax.Array:
        return fn.dist.pack(st.feature, st.threshold, st.value)

    @property
    def conjugate_paths(self) -> tuple:
        """Per tree function (after ``init``): whether a conjugate path runs (:attr:`conjugate_kinds`)."""
        return tuple(bool(k) for k in self._conj)

    @property
    def conjugate_kinds(self) -> tuple:
        """Per tree function (after ``init``): ``"normal"``, ``"poisson"``, ``"logit"``, ``"student_t"`` (the conjugate
        paths of the module docstring) or ``""`` (the general path)."""
        return self._conj

    # -- a step ------------------------------------------------------------------------------------
    def sample(self, state: TreeMovesState, model_args, model_kwargs):
        model_kwargs = dict(model_kwargs or {})
        fns = self._fns_at(model_args, model_kwargs)
        rng_key, *keys = jax.random.split(state.rng_key, len(fns) + 1)
        states = list(state.trees)
        sites = self.sites
        accepted = [jnp.zeros((), jnp.int32) for _ in sites]
        for i, fn in enumerate(fns):
            values = self._model_values(states, fns)   # every function's trees and values as they are now

            def L(f, values=values, fn=fn):
                return function_log_density(self._model, model_args, model_kwargs, fn.with_values(values, f),
                                            skip=sites)

            step = {"normal": self._conjugate_step, "poisson": self._poisson_step}.get(self._conj[i], self._general_step)
            if self._conj[i] in AUGMENTED:
                def terms(f, values=values, fn=fn, kind=self._conj[i]):
                    return augmented_terms(self._model, model_args, model_kwargs, partial(fn.with_values, values), f,
                                           self._augmented[fn.name], kind)

                step = partial(self._augmented_step, terms=terms, kind=self._conj[i])
            gaussian = self._conj[i] in _GAUSSIAN_KINDS
            if not gaussian and fn.cfg.local_moves > 1:   # the BART step repeats its own moves
                step = partial(self._repeated, step)
            key = keys[i]
            regrow_after = not gaussian and fn.cfg.particles   # the moves, then a regrowth of every tree
            if regrow_after:
                key, k_regrow = random_bits.split(key)
            states[i], acc = step(key, states[i], fn, L)
            if regrow_after:
                regrow_step = self._poisson_regrow if self._conj[i] == "poisson" else self._general_regrow
                states[i] = regrow_step(k_regrow, states[i], fn, L)
            accepted[sites.index(fn.site)] += acc.astype(jnp.int32)
        return TreeMovesState(z=self._site_values(states, fns), trees=tuple(states), accepted=jnp.stack(accepted),
                              rng_key=rng_key)

    @staticmethod
    def _repeated(step, key, st, fn: _Fn, L):
        """``step`` (a visit of every tree: a grow or prune each) ``fn.cfg.local_moves`` times."""
        def body(i, carry):
            st, n = carry
            st, acc = step(random_bits.fold_in(key, i), st, fn, L)
            return st, n + acc.astype(jnp.int32)

        return jax.lax.fori_loop(0, fn.cfg.local_moves, body, (st, jnp.zeros((), jnp.int32)))

    def _conjugate_step(self, key, st, fn: _Fn, L):
        f = st.z - st.resid
        _, a, h = value_grad_curvature(L, f)
        return self._gaussian_step(key, st, fn, f, a, jnp.maximum(-h, 0.0))

    def _augmented_step(self, key, st, fn: _Fn, L, terms, kind: str):
        """An augmented path (module docstring): the latents given the function, then the BART family's
        step on the Gaussian likelihood they make (in the linear predictor ``eta``: ``a (eta' - eta) - b
        (eta' - eta)^2 / 2``; with ``eta = g + s f``, in the function ``s a (f' - f) - s^2 b (f' - f)^2 / 2``)."""
        f = st.z - st.resid
        linear, slope, y, *fixed = terms(f)
        a, b = AUGMENTED[kind].draw(random_bits.fold_in(key, 1), linear, y, *fixed, f.dtype)
        return self._gaussian_step(key, st, fn, f, slope * a, slope * slope * b)

    def _gaussian_step(self, key, st, fn: _Fn, f, a, b):
        """The BART family's step for the likelihood ``sum_i a_i (f'_i - f_i) - b_i (f'_i - f_i)^2 / 2``
        of the function ``f'`` (the pseudo-response ``f + a / b`` of precision ``b``, ``b >= 0``)."""
        live = b > 0
        c = jnp.where(live, f + a / jnp.where(live, b, 1.0), f)
        S = fn.cfg.capacity
        wsum = jax.vmap(lambda leaf: scatter_add(jnp.zeros(S, b.dtype), leaf.astype(jnp.int32), b))(st.leaf)
        st = st._replace(resid=c - f, z=c, sigma2=jnp.ones((), c.dtype), wsum=jnp.where(heap.leaf_slots(st.feature), wsum, 0.0))
        data = fn.data._replace(y=c, weight=b)
        new, info = bart_kernel.build_kernel(fn.cfg).step(key, st, data)
        # The function after the step is the pseudo-response minus the running residual, exact to the
        # rounding of c; a row of faint precision (a factor s_i near 0: b_i = s_i^2 b'_i) has c_i = f_i +
        # a_i / b_i far from f_i, and that rounding (|c_i| times float32's epsilon) would stay in the
        # function from step to step.  Those rows take the trees' sum instead.
        # (Only where the precisions may differ between rows, as the check at init found: an even
        # precision has no faint row, and its program stays as it was.)
        if self._uneven.get(fn.name, True):
            faint = live & (b < FAINT_PRECISION * jnp.max(b))
            trees_sum = jax.lax.scan(lambda acc, vl: (acc + take(vl[0], vl[1]), None), jnp.zeros_like(c),
                                     (new.value, new.leaf.astype(jnp.int32)))[0]
            new = new._replace(z=jnp.where(faint, trees_sum, new.z), resid=jnp.where(faint, 0.0, new.resid))
        return new, jnp.sum(info.accepted)

    def _poisson_step(self, key, st, fn: _Fn, L):
        """The conjugate step of log-gamma leaves (module docstring): BART's visit of every tree
        (:func:`bayestrees.inference.bart.kernel.move_trees`, its moves with the leaf values
        integrated out, then the leaf values from their conditional) with the leaf model
        :class:`~bayestrees.leaves.GammaPoissonRows`.  The visit carries ``-f`` as its residual, so that its partial
        residual is ``-f_-j``."""
        f0, leaves = self._poisson_rows(st, fn, L)
        y, S = leaves.y, fn.cfg.capacity
        ysum = jax.vmap(lambda leaf: scatter_add(jnp.zeros(S, y.dtype), leaf.astype(jnp.int32), y))(st.leaf)
        st = st._replace(wsum=ysum, resid=-f0)   # the visit's per-leaf "weights" are the sums of y
        new, _, accepted = bart_kernel.move_trees(random_bits.split_apart(key, 3), st, fn.data._replace(weight=y),
                                                  fn.cfg, leaves)
        return new._replace(resid=jnp.zeros_like(f0), z=-new.resid), jnp.sum(accepted)

    def _poisson_rows(self, st, fn: _Fn, L):
        """``(f, leaves)``: the function at the rows and the Gamma-Poisson leaf model of the visits
        there (``y = a - h``, ``B = -h e^-f`` from one pass of ``L``: module docstring)."""
        c, d = leaf_priors.loggamma_params(float(fn.dist.spec.leaf_sd))
        f0 = st.z - st.resid
        _, a, h = value_grad_curvature(L, f0)
        mu = jnp.maximum(-h, 0.0)                 # B exp(f)
        y = jnp.maximum(a + mu, 0.0)              # a - h
        return f0, GammaPoissonLeaves(c, d).on_rows(mu * jnp.exp(-f0), y)

    def _poisson_regrow(self, key, st, fn: _Fn, L):
        """The regrowth of log-gamma leaves: BART's regrowth phase
        (:func:`bayestrees.inference.bart.kernel.regrow_trees`, every tree in turn by conditional SMC
        given the others, then its leaf values from their Gamma conditional) with the leaf models
        :class:`~bayestrees.leaves.GammaPoissonRows` and :class:`~bayestrees.leaves.GammaPoissonLeaves`, carrying ``-f``."""
        f0, leaves = self._poisson_rows(st, fn, L)
        new = bart_kernel.regrow_trees(key, st._replace(resid=-f0), fn.data, fn.cfg, leaves)
        return new._replace(resid=jnp.zeros_like(f0), z=-new.resid)

    def _general_regrow(self, key, st, fn: _Fn, L):
        """The general path's regrowth: every tree in turn, given the others, regrown by conditional SMC
        under a Gaussian approximation of ``L`` about a point that does not depend on the tree, and
        corrected by Metropolis-Hastings (module docstring, "Regrowth on the general path"): the
        sums' regrowth phase (:func:`bayestrees.inference.bart.kernel.regrow_trees`) with the leaf
        model :class:`~bayestrees.leaves.LaplaceRows`."""
        return bart_kernel.regrow_trees(key, st, fn.data, fn.cfg, self._laplace_rows(fn, L))

    def _laplace_rows(self, fn: _Fn, L, refresh_keys=()):
        spec = fn.dist.spec
        return LaplaceRows(L, fn.cfg.tau2, spec.leaf_prior, float(spec.leaf_sd), refresh_keys)

    def _general_step(self, key, st, fn: _Fn, L):
        """The general path's step (module docstring, "General path"): the sums' move phase
        (:func:`bayestrees.inference.bart.kernel.move_trees`, every tree's joint move of its rules and
        leaf values) with the leaf model :class:`~bayestrees.leaves.LaplaceRows`, then
        ``leaf_refresh`` refreshes of every tree's leaf values."""
        refresh = tuple(tuple(random_bits.split(jax.random.fold_in(key, r + 1), 2)) for r in range(self.leaf_refresh))
        new, _, accepted = bart_kernel.move_trees(random_bits.split_apart(key, 3), st, fn.data, fn.cfg,
                                                  self._laplace_rows(fn, L, refresh))
        return new, jnp.sum(accepted)
