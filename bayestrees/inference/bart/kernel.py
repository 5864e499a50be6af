"""BART (Chipman, George & McCulloch 2010): a sum of trees as one ``init``/``step`` kernel.

The kernel is written for ONE chain over NamedTuple :class:`State`/:class:`Info` and run by
:func:`bayestrees.inference.loop.run_chains` (vmapped chains or threads).  A chain holds ``m``
heap trees as compact arrays (split variable, split code and leaf value per slot: the layout of
:class:`Draw`), each tree's routing of the training rows, the running residual and the noise
variance.

Model (on the response scaled to ``[-0.5, 0.5]``, or the probit latent scale)
-------------------------------------------------------------------------------
``y_i = sum_j g(x_i; T_j, M_j) + e_i``, ``e_i ~ N(0, sigma^2 / w_i)`` (``w_i`` known row weights,
1 by default); every tree ``T_j`` from the tree prior (a :mod:`bayestrees.priors` depth prior; the
split rule from the ancestor-interval rule prior of :mod:`bayestrees.inference.intervals`, the
prior of the BART R packages and bartz: variable uniform among those with a cut point left in
the node's interval, threshold uniform among those cut points), truncated to trees whose nodes
all hold ``min_leaf_rows`` rows; every leaf value ``mu ~ N(0, sigma_mu^2)`` independently
(:class:`~bayestrees.leaves.KnownVarianceNormalLeaves` with ``tau2 = sigma_mu^2``);
``sigma^2 ~ nu lambda / chi2_nu``.  Binary outcomes (probit, Albert & Chib 1993):
``P(y_i = 1) = Phi(offset + f(x_i))`` through the latent ``z_i ~ N(offset + f(x_i), 1 / w_i)``,
``y_i = 1[z_i > 0]``, ``sigma = 1`` fixed.

One step (Bayesian backfitting, CGM 2010 section 3)
---------------------------------------------------
1. For every tree at once (``vmap``; nothing here reads the residual): a Metropolis-Hastings
   proposal ``T_j'`` of one move (grow, prune, change or swap, types drawn with ``move_probs``:
   the moves and proposal ratios of :mod:`bayestrees.inference.proposals`, the node chosen
   uniformly among those the move applies to, the rule from the interval rule prior), with the
   part of its log acceptance ratio that does not involve the data: ``log p(T') - log p(T) +
   log q(T | T') - log q(T' | T)``.  Tree ``j``'s proposal depends only on ``T_j``, which no
   earlier visit of the step changes, so drawing them all first is the same kernel as drawing
   each when its tree is visited.
2. For ``j = 1 .. m`` in turn (a ``lax.scan`` over the trees), with the running residual
   ``R = y - sum_j g_j`` (``z - offset - sum_j g_j`` for probit):

   a. ``r = R + g_j`` (the partial residual: every tree but ``j``);
   b. the rows' leaves in ``T_j'`` (a grow or prune moves the rows of one node; a change or swap
      routes the rows of the changed subtree again), one scatter of ``[1, p_i, p_i r_i]``
      (``p_i = w_i / sigma^2``) into the leaves of ``T_j`` and of ``T_j'``, the marginal
      likelihoods with ``M_j`` integrated out and the row-count constraint; accept or reject;
   c. ``M_j`` drawn from its conjugate posterior given the kept tree and ``r``;
   d. ``R = r - g_j`` with the new tree.

   The residual is carried, never recomputed over all trees: a visit costs ``O(n)`` (``O(n D)``
   for a change or swap), independent of the number of features.
3. Regression: ``sigma^2 ~ IG((nu + n_+) / 2, (nu lambda + sum_i w_i R_i^2) / 2)`` (``n_+``:
   rows with ``w_i > 0``), or fixed.  Probit: ``z_i`` from its truncated normal
   (:func:`truncated_normal`) and ``R`` moved by the change of ``z``.

The sum of squares and the normalising term of the Normal likelihood are the same for every tree
and cancel in every acceptance ratio (:class:`~bayestrees.leaves.KnownVarianceNormalLeaves`, Notes):
per leaf the marginal is ``-log(1 + tau2 P) / 2 + Q^2 / (2 (P + 1 / tau2))`` with ``P = sum p_i``,
``Q = sum p_i r_i`` over its rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, ndtr, ndtri
from jax.sharding import PartitionSpec

from ... import random_bits
from ...batching import cell_sums, scatter_add, take
from ...leaves import KnownVarianceNormalLeaves, NormalRows
from ...sharding import ROWS, rows_mesh
from ...tree import FREE, LEAF, Tree
from .. import heap
from .. import intervals
from .. import proposals
from .. import regrow
from ..loop import Kernel
from ..metropolis import accept
from ..tempering import check_temperatures, tempered

__all__ = ["BARTData", "KernelConfig", "State", "Info", "Draw", "build_kernel", "collect", "truncated_normal",
           "expand_trees", "sum_of_trees", "tree_summaries", "host_tree_summaries", "leaf_dtype", "tree_log_priors",
           "data_intervals", "grow_or_prune", "move_trees", "change_or_swap"]


class BARTData(NamedTuple):
    """Training data of the kernel (every value traced: fits that differ only in them share a compilation).

    codes : (d, n)  feature codes, one row per feature (uint8 up to 255 codes; no missing values)
    y : float (n,)  the scaled response (regression) or the 0/1 labels (probit)
    weight : float (n,)  known row weights ``w_i`` (noise sd ``sigma / sqrt(w_i)``; 0: no likelihood)
    rows : float (n,)  1 for a data row, 0 for padding (nodes must hold ``min_leaf_rows`` of them)
    nu, nu_lam : float ()  the inverse-chi2 prior of ``sigma^2``: ``nu`` and ``nu * lambda``
    sigma2 : float ()  the starting (or, when not sampled, the fixed) noise variance
    offset : float ()  probit offset ``Phi^-1(mean y)`` (0 for regression)
    prior : the tree prior with traced values (:func:`bayestrees.priors.traced_params`)
    code_lo, code_hi : int32 (d,)  the root's interval of every feature (smallest and largest code
        among the rows; :mod:`bayestrees.inference.intervals`)
    sparse_prior : float (3,), optional  ``(a, b, rho)`` of the sparse prior (``KernelConfig.sparse``)
    predict_codes : int32 (n_new, d), optional  coded rows at which :class:`collect` keeps every
        draw's sum of trees (``Draw.predict``; None: none)
    split_log_w : float (d,), optional  fixed split-variable log probabilities (``KernelConfig.weighted``)
    categories : int32 (d,), optional  the unordered features' category masks (bit ``c``: code ``c``
        at the root; 0 for an ordered feature): their rules are category masks, the codes in the
        mask going left (:mod:`bayestrees.inference.intervals`); ``code_lo``/``code_hi`` are then
        ``0`` and ``|categories| - 1`` there.  None: every feature ordered
    """

    codes: jax.Array
    y: jax.Array
    weight: jax.Array
    rows: jax.Array
    nu: jax.Array
    nu_lam: jax.Array
    sigma2: jax.Array
    offset: jax.Array
    prior: Any = None
    code_lo: Any = None
    code_hi: Any = None
    sparse_prior: Any = None
    predict_codes: Any = None
    split_log_w: Any = None
    categories: Any = None


@dataclass(frozen=True)
class KernelConfig:
    """Static settings of the kernel (hashable: one compilation per setting and data shape).

    prior : the tree prior, a :mod:`bayestrees.priors` depth prior with the rule in it (its kind: the
        traced values come with ``BARTData.prior``)
    tau2 : the leaf values' prior variance ``sigma_mu^2``
    max_depth : the deepest level a leaf may sit at
    m : number of trees
    move_probs : probabilities of grow, prune, change (or slide), swap and optionally rotate (grow and
        prune equal; :data:`bayestrees.inference.proposals.MOVE_NAMES`)
    min_leaf_rows : every node of a tree holds at least this many rows (``BARTData.rows``)
    probit : binary outcomes through the probit latent variables
    sample_sigma : draw ``sigma^2`` (regression); False keeps ``BARTData.sigma2``
    sparse : the sparse Dirichlet split-variable prior (Linero 2018; :func:`_sparse_update`)
    weighted : fixed split-variable probabilities, ``BARTData.split_log_w`` (their logarithms): a
        node's variable ``j`` with probability ``s_j / sum_available s`` (the missing values' coded
        columns, :mod:`bayestrees.inference.missing`); not with ``sparse``
    batch_width : chains run together under ``jax.vmap`` (1: one chain at a time); with the tree-rows
        ``m n`` it decides whether a grow's left child is summed for all trees before the visits
        (:data:`_BATCH_ROWS`; with many vmapped chains that pass costs more than it saves:
        ``docs/lab-notes/bart.md``)
    slide : int >= 0  the change move (``move_probs[2]``) as a local *slide* (0: Chipman et al.'s
        change, any internal node, the rule drawn from the rule prior): a node whose two children
        are leaves keeps its split variable and moves its threshold by ``1 .. slide`` codes either
        way (uniformly; a threshold outside the node's interval is rejected).  The proposal is
        symmetric, and the rows move only between the two children, so it costs what a grow costs
        (:func:`bayestrees.inference.proposals.propose`, :func:`_slide_sums`)
    particles : int  0, or the particles (at least 2) of a particle Gibbs regrowth of every tree
        after its move in each step (:mod:`bayestrees.inference.regrow`: a conditional SMC update of
        the tree given the others, then its leaf values from their conditional)
    n_codes : int  a static bound on the feature codes (codes ``0 .. n_codes - 1``), which the
        regrowth's per-node histograms need (0 without regrowth)
    local_moves : int >= 1  moves of every tree per step (the move phase repeated; Bayesian CART's
        "mixed" scheme makes ``local_moves`` moves before each regrowth)
    temperatures : inverse temperatures ``(1, b_1, ...)``, decreasing (regression only): with more than
        one, every chain is a parallel-tempering ensemble (:mod:`bayestrees.inference.tempering`),
        replica ``r`` targeting ``p(y | f, sigma)^b_r`` times the priors: its tree moves, leaf draws
        and regrowths see the precisions ``b_r w_i / sigma^2``, its ``sigma^2`` the tempered
        conditional (:func:`step_sigma`); replica 0 is the posterior
    """

    prior: Any
    tau2: float
    max_depth: int
    m: int
    move_probs: tuple = (0.5, 0.5, 0.0, 0.0)
    min_leaf_rows: int = 1
    probit: bool = False
    sample_sigma: bool = True
    sparse: bool = False
    weighted: bool = False
    batch_width: int = 1
    slide: int = 0
    particles: int = 0
    n_codes: int = 0
    local_moves: int = 1
    temperatures: tuple = (1.0,)
    data_devices: int = 1

    def __post_init__(self):
        if len(check_temperatures(self.temperatures)) > 1 and self.probit:
            raise ValueError("tempering takes a Normal likelihood (regression): the probit latents are not tempered")
        if not self.prior.rule_in_prior:
            raise ValueError("BART's trees take a depth prior with the rule in it (ChipmanPrior, DepthDecayPrior)")
        if self.probit and self.sample_sigma:
            raise ValueError("probit BART has sigma = 1 fixed (sample_sigma=False)")
        if self.slide and (self.move_probs[3] > 0 or proposals.rotates(self.move_probs)):
            raise ValueError("slide moves replace the change move of grow/prune/change kernels: swap and rotate "
                             "must be 0")
        if isinstance(self.particles, bool) or not isinstance(self.particles, int) or self.particles in (1,) \
                or self.particles < 0:
            raise ValueError(f"particles must be 0 (no regrowth) or an integer >= 2, got {self.particles!r}")
        if isinstance(self.local_moves, bool) or not isinstance(self.local_moves, int) or self.local_moves < 1:
            raise ValueError(f"local_moves must be an integer >= 1, got {self.local_moves!r}")
        if self.particles and self.sparse:
            raise ValueError("the particle Gibbs regrowth does not take the sparse prior's split-variable "
                             "probabilities yet")
        if self.sparse and self.weighted:
            raise ValueError("the sparse prior draws its own split-variable probabilities: weighted takes sparse=False")
        if isinstance(self.data_devices, bool) or not isinstance(self.data_devices, int) or self.data_devices < 1:
            raise ValueError(f"data_devices must be an integer >= 1, got {self.data_devices!r}")
        if self.data_devices > 1 and self.particles:
            raise ValueError("the particle Gibbs regrowth runs on one device: data_devices > 1 takes particles=0")
        if self.particles and self.n_codes < 1:
            raise ValueError("the particle Gibbs regrowth needs n_codes, a static bound on the feature codes")

    @property
    def capacity(self) -> int:
        """Slots of a heap tree of depth ``max_depth``."""
        return heap.capacity(self.max_depth)

    @property
    def row_axis(self):
        """The name of the mesh axis the rows are split over (None: one device holds them all)."""
        return ROWS if self.data_devices > 1 else None

    @property
    def tempered(self) -> bool:
        """A ladder of several temperatures (the State then holds ``beta`` and ``log_lik``)."""
        return len(self.temperatures) > 1


def rows_total(x, axis):
    """``x``, a sum over this device's rows, summed over the devices of mesh axis ``axis`` (None: as it is)."""
    return x if axis is None else jax.lax.psum(x, axis)


def rows_key(key, axis):
    """``key`` for draws of one value per row: each device's rows their own (None: as it is)."""
    return key if axis is None else random_bits.fold_in(key, jax.lax.axis_index(axis))


def leaf_dtype(capacity: int):
    """The smallest signed integer type that holds a slot number below ``capacity``."""
    return jnp.int8 if capacity <= 128 else jnp.int16 if capacity <= 32768 else jnp.int32


def data_intervals(codes, rows=None, categories=None):
    """``(code_lo, code_hi)`` int32 (d,): each feature's smallest and largest code among the rows ((n, d)
    codes); given ``categories`` (:class:`BARTData`'s), ``0`` and ``|categories_j| - 1`` at a feature
    split by subsets."""
    c = np.asarray(codes).astype(np.int64)
    if rows is not None:
        c = c[np.asarray(rows) > 0]
    if c.shape[0] == 0:
        z = np.zeros(c.shape[1], np.int32)
        return z, z
    lo, hi = c.min(0).astype(np.int32), c.max(0).astype(np.int32)
    if categories is not None:
        lo, hi = intervals.root_code_range(lo, hi, categories)
    return lo, hi


class State(NamedTuple):
    """One chain.

    feature : int32 (m, S)  split variable of each internal slot, -1 elsewhere
    threshold : int32 (m, S)  split code (codes ``<= t`` go left; 0 where not internal)
    value : float (m, S)  leaf values (0 where not a leaf)
    leaf : int8/int16 (m, n)  each training row's leaf slot in each tree
    count : float (m, S)  rows (``BARTData.rows``) per leaf slot (0 elsewhere)
    wsum : float (m, S)  row weight ``sum w_i`` per leaf slot (0 elsewhere)
    log_prior : float (m,)  each tree's log prior (:func:`bayestrees.inference.intervals.log_tree_prior`)
    avail : float (m, S)  variables with a cut point left at each slot (the same function's ``avail``;
        with the sparse prior the sum of their probabilities ``s_j``)
    log_s : float (d,)  the split-variable probabilities' logarithms (sparse prior; ``-log d`` otherwise)
    alpha : float ()  the sparse prior's concentration ``alpha`` (0 without it)
    resid : float (n,)  the running residual ``y - sum_j g_j`` (probit: ``z - offset - sum_j g_j``)
    sigma2 : float ()  noise variance
    z : float (n,)  probit latent minus the offset (regression: the scaled response, unchanged)
    beta : float ()  the inverse temperature of a tempered replica (None untempered: 1)
    log_lik : float ()  a tempered replica's ``log p(y | f, sigma)`` up to a constant that all replicas
        share, for the replica exchanges (None untempered)
    """

    feature: jax.Array
    threshold: jax.Array
    value: jax.Array
    leaf: jax.Array
    count: jax.Array
    wsum: jax.Array
    log_prior: jax.Array
    avail: jax.Array
    resid: jax.Array
    sigma2: jax.Array
    z: jax.Array
    log_s: Any = None
    alpha: Any = None
    beta: Any = None
    log_lik: Any = None


class Info(NamedTuple):
    """What one step did, summed over the ``m`` tree moves."""

    proposed: jax.Array      # int32 (4,): possible moves per type (grow, prune, change, swap)
    accepted: jax.Array      # int32 (4,): accepted moves per type
    at_max_depth: jax.Array  # int32: trees with a leaf at max_depth that could otherwise split


class Draw(NamedTuple):
    """What is kept per draw: the trees compactly (or only their summaries) and the function at
    the training rows (and at the rows of ``BARTData.predict_codes``).

    feature : int8/int16 (m, S)  split variable of each internal slot, -1 elsewhere (None when
        the trees are not kept: ``collect(keep_trees=False)``)
    threshold : codes' dtype (m, S)  split code (0 where not internal; None when not kept)
    value : float32 (m, S)  leaf values (0 elsewhere), scaled response / latent units (None when not kept)
    sigma : ()  noise sd (scaled units; 1 for probit)
    fit : float32 (n,)  ``sum_j g_j(x_i)`` at the training rows (from the running residual)
    lp : ()  log joint density ``log p(y, T, M, sigma)`` (scaled units, up to a constant)
    split_prob : float32 (d,)  the sparse prior's split-variable probabilities (shape (0,) without it)
    alpha : float32 ()  its concentration (0 without it)
    n_leaves : int16 (m,)  leaves of every tree (only when the trees are not kept; else None)
    depth : int8 (m,)  every tree's deepest leaf (only when the trees are not kept)
    split_counts : int32 (d,)  internal nodes per split variable over the trees (only when not kept)
    predict : float32 (n_new,)  ``sum_j g_j(x)`` at ``BARTData.predict_codes`` (None without them),
        computed as :func:`sum_of_trees` computes it from the kept trees (the same float32 sums)
    """

    feature: Any
    threshold: Any
    value: Any
    sigma: jax.Array
    fit: jax.Array
    lp: jax.Array
    split_prob: Any = None
    alpha: Any = None
    n_leaves: Any = None
    depth: Any = None
    split_counts: Any = None
    predict: Any = None


def truncated_normal(u, mean, sd, positive):
    """``N(mean, sd^2)`` truncated to ``(0, inf)`` where ``positive``, to ``(-inf, 0)`` elsewhere, from uniforms ``u``.

    With ``s = +1`` (positive) or ``-1`` and ``a = -s mean / sd``, ``T ~ N(0, 1) | T > a`` is
    ``-Phi^-1(u Phi(-a))`` (inverse distribution function in the lower tail, exact in float32 for
    ``a <= 8``); beyond, the tail ``a + E / a``, ``E ~ Exp(1)`` (relative error below ``1 / a^2``).
    The draw is ``mean + s sd T``.  The product ``u Phi(-a)`` is kept at least the smallest normal
    float: at the smallest uniform :func:`~bayestrees.random_bits.open_uniform` gives (``tiny``, one
    draw in ``2^23``) it would flush to 0 on the CPU, whose ``Phi^-1`` is ``-inf``, and the latent
    would be infinite (the chain then NaN).
    """
    s = jnp.where(positive, 1.0, -1.0).astype(mean.dtype)
    a = -s * mean / sd
    inner = -ndtri(jnp.maximum(u * ndtr(-jnp.minimum(a, 8.0)), jnp.finfo(mean.dtype).tiny))
    tail = a - jnp.log(u) / jnp.maximum(a, 1.0)
    t = jnp.maximum(jnp.where(a > 8.0, tail, inner), a)
    return mean + s * sd * t


def _probit_z(u, eta, y, weight):
    """The latent ``z`` given ``eta = offset + f``: truncated normal where ``w > 0``, ``eta`` elsewhere."""
    sd = 1.0 / jnp.sqrt(jnp.where(weight > 0, weight, 1.0))
    return jnp.where(weight > 0, truncated_normal(u, eta, sd, y > 0.5), eta)


@dataclass(frozen=True)
class _Init:
    cfg: KernelConfig
    dtype: Any

    def __call__(self, key, data: BARTData) -> State:
        dt = self.dtype
        m, S = self.cfg.m, self.cfg.capacity
        n = data.y.shape[0]
        y = jnp.asarray(data.y, dt)
        if self.cfg.probit:  # z from its conditional given f = 0
            u = random_bits.open_uniform(rows_key(key, self.cfg.row_axis), y.shape).astype(dt)
            eta = jnp.broadcast_to(jnp.asarray(data.offset, dt), y.shape)
            z = _probit_z(u, eta, data.y, data.weight) - data.offset
        else:
            z = y
        root = jnp.zeros((m, S), dt).at[:, 0]
        feature, threshold = jnp.full((m, S), -1, jnp.int32), jnp.zeros((m, S), jnp.int32)
        d = data.codes.shape[0]
        log_s = (jnp.asarray(data.split_log_w, dt) if self.cfg.weighted else
                 jnp.full((d,), -jnp.log(jnp.asarray(d, dt)), dt))
        alpha = jnp.asarray(1.0 if self.cfg.sparse else 0.0, dt)
        lp, avail, _, _, _ = tree_log_priors(feature, threshold, data, self.cfg, dt, split_weights(self.cfg, log_s))
        sigma2 = jnp.asarray(data.sigma2, dt)
        ax = self.cfg.row_axis
        tempered = dict(beta=jnp.ones((), dt), log_lik=_tempered_factor(z, sigma2, data, ax)) if self.cfg.tempered else {}
        return State(feature=feature, threshold=threshold, value=jnp.zeros((m, S), dt),
                     leaf=jnp.zeros((m, n), leaf_dtype(S)), count=root.set(rows_total(jnp.sum(data.rows), ax).astype(dt)),
                     wsum=root.set(rows_total(jnp.sum(jnp.where(data.rows > 0, data.weight, 0.0)), ax).astype(dt)),
                     log_prior=lp,
                     avail=avail.astype(dt), resid=z, sigma2=sigma2, z=z, log_s=log_s, alpha=alpha, **tempered)


def _tempered_factor(R, sigma2, data: BARTData, axis=None):
    """``log p(y | f, sigma)`` of a residual ``R``, less the terms that every replica shares
    (``sum_i log(w_i / 2 pi) / 2``): ``-n_+ log(sigma^2) / 2 - sum_i w_i R_i^2 / (2 sigma^2)``."""
    live = (data.weight > 0) & (data.rows > 0)
    return (-0.5 * rows_total(jnp.sum(live), axis) * jnp.log(sigma2)
            - 0.5 * rows_total(jnp.sum(jnp.where(live, data.weight * R * R, 0.0)), axis) / sigma2).astype(R.dtype)


def tempered_log_lik(state: State):
    """The tempered factor of a BART replica (:func:`bayestrees.inference.tempering.tempered`)."""
    return state.log_lik


def _precision(state: State):
    """``1 / sigma^2``, times the replica's inverse temperature when tempered."""
    return 1.0 / state.sigma2 if state.beta is None else state.beta / state.sigma2


def _normal_rows(cfg: KernelConfig, w, inv_s2) -> NormalRows:
    """BART's leaf model on the visit's rows: rows of weight ``w`` and precision ``inv_s2``, leaves ``N(0, tau2)``."""
    return KnownVarianceNormalLeaves(1.0, float(cfg.tau2)).on_rows(w, inv_s2)


def split_weights(cfg: KernelConfig, log_s):
    """The split-variable log probabilities of the interval prior: ``log s_j`` with the sparse prior or
    fixed weights (``cfg.weighted``), None (uniform among the available variables) otherwise."""
    return log_s if cfg.sparse or cfg.weighted else None


#: up to this many tree-rows (``m n``), a grow's left child's rows and weight are summed for all
#: trees at once before the sequential visits (fewer operations per visit); beyond, in each visit
#: (the batched pass would stream ``m n`` values through memory)
_BATCH_ROWS = 2 ** 20


def _stored(table):
    """``table`` (1-d) as the output of a scatter of it into zeros: the same values (``0 + x``; a
    ``-0.0`` becomes ``+0.0``), but
    XLA fuses no producer into a scatter's consumers, so a gather of it for every row reads the
    stored values instead of computing the table again for every row.  A visit's residual update
    (``r - value[kept]``) did that with the leaf draw's operations, which made the step slower
    (``docs/lab-notes/bart.md``, "Against bartz")."""
    return scatter_add(jnp.zeros_like(table), jnp.arange(table.shape[0], dtype=jnp.int32), table)


def _reroute(leaf, node, feature, threshold, codes, max_depth: int, categories=None):
    """The rows' leaves after a change of the tree below ``node``: its rows descend again from it."""
    return heap.descend_rules(feature, threshold, codes, jnp.where(heap.in_subtree(leaf, node), node, leaf),
                              max_depth - heap.depth_of(node), features_first=True, categories=categories)


class _Moved(NamedTuple):
    """What a proposal does to the rows of one tree (step 2b of the module docstring)."""

    leaf: jax.Array      # int32 (n,): the rows' leaves in T'
    count: jax.Array     # (S,): rows per leaf of T'
    wsum: jax.Array      # (S,): row weight per leaf of T'
    rsum_old: jax.Array     # (S,): sum w_i r_i per leaf of T
    rsum_new: jax.Array     # (S,): per leaf of T'
    valid: jax.Array     # every leaf of T' holds min_leaf_rows rows


def _grow_prune_sums(rsum, s, real_grow, grow):
    """``(rsum_old, rsum_new)``: per leaf of ``T`` and of ``T'`` the sums ``rsum`` scattered into the finer
    tree's leaves (``T'`` after a grow that can happen, else ``T``): the coarser tree's leaf at the
    node ``s`` holds its two children's."""
    lc, rc = 2 * s + 1, 2 * s + 2
    idx = jnp.arange(rsum.shape[0])   # one elementwise pass (not three updates in place): the same values
    merged = jnp.where(idx == s, rsum[lc] + rsum[rc], jnp.where((idx == lc) | (idx == rc), 0.0, rsum))
    return jnp.where(real_grow, merged, rsum), jnp.where(grow, rsum, merged)


def _left_rows(left, data: BARTData, dt, axis=None):
    """Rows (``BARTData.rows``) and row weight among the rows ``left`` (over the devices of ``axis``)."""
    c_l = jnp.sum(jnp.where(left, data.rows, 0.0))
    w_l = jnp.sum(jnp.where(left & (data.rows > 0), data.weight, 0.0))
    if axis is not None:
        c_l, w_l = rows_total(jnp.stack([c_l, w_l]), axis)
    return c_l.astype(dt), w_l.astype(dt)


def _split_join(a, x_l, s, grow):
    """Per-leaf totals ``a`` (rows or weights, shape (S,)) of ``T`` made ``T'``'s: a grow at ``s`` gives
    its left child ``x_l`` and its right child the rest; a prune joins the children into ``s``."""
    idx = jnp.arange(a.shape[0])
    lc, rc = 2 * s + 1, 2 * s + 2
    split = jnp.where(idx == lc, x_l, jnp.where(idx == rc, a[s] - x_l, jnp.where(idx == s, 0.0, a)))
    join = jnp.where(idx == s, a[lc] + a[rc], jnp.where((idx == lc) | (idx == rc), 0.0, a))
    return jnp.where(grow, split, join).astype(a.dtype)


def _moved_totals(a, x_l, s, kind):
    """:func:`_split_join` with slides: per-leaf totals ``a`` of ``T`` made ``T'``'s after a grow
    (``kind`` 0), a prune (1) or a slide (2) at ``s``, whose children's joint total is split anew into
    ``x_l`` on the left and the rest on the right."""
    idx = jnp.arange(a.shape[0])
    lc, rc = 2 * s + 1, 2 * s + 2
    slid = jnp.where(idx == lc, x_l, jnp.where(idx == rc, a[lc] + a[rc] - x_l, a))
    return jnp.where(kind == 2, slid, _split_join(a, x_l, s, kind == 0)).astype(a.dtype)


def _slide_sums(rsum, s, S: int):
    """``(rsum_old, rsum_new)`` of a slide at ``s`` from sums scattered into ``S + 2`` cells: the rows that
    stay in their child in the child's slot, those that move from the left child to the right in
    cell ``S``, from the right to the left in cell ``S + 1``."""
    lc, rc = 2 * s + 1, 2 * s + 2
    idx = jnp.arange(S)
    base = rsum[:S]
    rsum_old = base + jnp.where(idx == lc, rsum[S], 0.0) + jnp.where(idx == rc, rsum[S + 1], 0.0)
    rsum_new = base + jnp.where(idx == lc, rsum[S + 1], 0.0) + jnp.where(idx == rc, rsum[S], 0.0)
    return rsum_old, rsum_new


def grow_or_prune(pr, leaf, wr, count, wsum, data: BARTData, min_rows, S: int, axis=None) -> _Moved:
    """A grow or a prune at ``pr.node``: one scatter of ``w r`` into the finer tree's leaves.

    The finer tree (T' after a grow, T after a prune) gives both trees' sums: the coarser tree's
    leaf at the node holds its two children's.  A grow's children's rows and weights are one
    masked pass over the node's rows; the rest comes from the cached counts.
    """
    s, grow = pr.node, pr.kind == 0
    lc = 2 * s + 1
    col = jax.lax.dynamic_index_in_dim(data.codes, pr.var, 0, keepdims=False)
    at = leaf == s
    grown = jnp.where(at, lc + heap.goes_right(col, pr.var, pr.thr, data.categories).astype(jnp.int32), leaf)
    real_grow = grow & pr.ok   # a grow that cannot happen (rejected) moves no row: the scatter holds T's sums
    rsum = rows_total(cell_sums(jnp.where(real_grow, grown, leaf), wr, S), axis)
    rsum_old, rsum_new = _grow_prune_sums(rsum, s, real_grow, grow)
    c_l, w_l = _left_rows(at & ~heap.goes_right(col, pr.var, pr.thr, data.categories), data, count.dtype, axis)
    valid = jnp.where(grow, (c_l >= min_rows) & (count[s] - c_l >= min_rows), True)
    leaf_new = jnp.where(grow, grown, jnp.where(heap.in_subtree(leaf, s), s, leaf))
    return _Moved(leaf=leaf_new, count=_split_join(count, c_l, s, grow),
                  wsum=_split_join(wsum, w_l.astype(wsum.dtype), s, grow), rsum_old=rsum_old, rsum_new=rsum_new, valid=valid)


def grow_prune_or_slide(pr, leaf, wr, count, wsum, data: BARTData, min_rows, S: int, axis=None) -> _Moved:
    """:func:`grow_or_prune`, or a slide at ``pr.node`` (``pr.kind`` 2): its two leaves' rows split anew
    at ``pr.thr``, in the same one scatter of ``w r`` (the rows that change child go to two extra
    cells, :func:`_slide_sums`) and one masked pass for the left child's rows and weight
    (:func:`_visit_local`'s slide for any leaf model)."""
    s, kind = pr.node, pr.kind
    grow, slide = kind == 0, kind == 2
    lc, rc = 2 * s + 1, 2 * s + 2
    col = jax.lax.dynamic_index_in_dim(data.codes, pr.var, 0, keepdims=False)
    at = jnp.where(slide, (leaf == lc) | (leaf == rc), leaf == s)
    side = lc + heap.goes_right(col, pr.var, pr.thr, data.categories).astype(jnp.int32)
    real_grow = grow & pr.ok
    finer = jnp.where(real_grow & at, side, leaf)
    cell = jnp.where(pr.ok & slide & at & (side != leaf), jnp.where(leaf == lc, S, S + 1), finer)
    rsum = rows_total(cell_sums(cell, wr, S + 2), axis)
    rsum_old, rsum_new = _grow_prune_sums(rsum[:S], s, real_grow, grow)
    qs_old, qs_new = _slide_sums(rsum, s, S)
    c_l, w_l = _left_rows(at & ~heap.goes_right(col, pr.var, pr.thr, data.categories), data, count.dtype, axis)
    kept_rows = jnp.where(slide, count[lc] + count[rc], count[s])
    valid = jnp.where(grow | slide, (c_l >= min_rows) & (kept_rows - c_l >= min_rows), True)
    leaf_new = jnp.where(grow | slide, jnp.where(at, side, leaf), jnp.where(heap.in_subtree(leaf, s), s, leaf))
    return _Moved(leaf=leaf_new, count=_moved_totals(count, c_l, s, kind),
                  wsum=_moved_totals(wsum, w_l.astype(wsum.dtype), s, kind),
                  rsum_old=jnp.where(slide, qs_old, rsum_old), rsum_new=jnp.where(slide, qs_new, rsum_new), valid=valid)


def change_or_swap(pr, leaf, wr, count, wsum, data: BARTData, min_rows, S: int, max_depth: int,
                   axis=None) -> _Moved:
    """A change or a swap below ``pr.node``: the node's rows routed again, their sums scattered anew."""
    new = _reroute(leaf, pr.node, pr.feature, pr.threshold, data.codes, max_depth, data.categories)
    rows = data.rows.astype(wr.dtype)
    st = scatter_add(jnp.zeros((S, 3), wr.dtype), new, jnp.stack([rows, jnp.where(rows > 0, data.weight, 0.0), wr], -1))
    rsum_old = cell_sums(leaf, wr, S)
    if axis is not None:
        st, rsum_old = rows_total((st, rsum_old), axis)
    valid = jnp.all(jnp.where(pr.leaf_new, st[:, 0] >= min_rows, True))
    return _Moved(leaf=new, count=st[:, 0].astype(count.dtype), wsum=st[:, 1].astype(wsum.dtype), rsum_old=rsum_old,
                  rsum_new=st[:, 2], valid=valid)


@dataclass(frozen=True)
class _Step:
    """One step in named phases: every tree's move and leaf draw (:func:`move_trees`, ``local_moves`` times),
    every tree's particle Gibbs regrowth (:func:`regrow_trees`, with ``particles``), then ``sigma^2``
    or the probit latents and the sparse prior (:func:`step_sigma`)."""

    cfg: KernelConfig

    def __call__(self, key, state: State, data: BARTData):
        cfg = self.cfg
        k_prop, k_acc, k_val, k_last, k_sparse = random_bits.split_apart(key, 5)
        state, proposed, accepted = move_trees((k_prop, k_acc, k_val), state, data, cfg)
        if cfg.local_moves > 1:   # further moves of every tree
            def again(i, carry):
                st, pr, ac = carry
                keys_i = random_bits.split_apart(random_bits.fold_in(key, 1 + i), 3)
                st, p_i, a_i = move_trees(keys_i, st, data, cfg)
                return st, pr + p_i, ac + a_i

            state, proposed, accepted = jax.lax.fori_loop(1, cfg.local_moves, again, (state, proposed, accepted))
        if cfg.particles:
            state = regrow_trees(random_bits.fold_in(key, 1), state, data, cfg)
        state = step_sigma((k_last, k_sparse), state, data, cfg)
        return state, Info(proposed=proposed, accepted=accepted, at_max_depth=at_max_depth(state, cfg))


def _routes_again(cfg) -> bool:
    """Whether the kernel's moves include one that routes a subtree's rows again (a change, a swap or
    a rotation; a slide moves rows between two children only)."""
    return cfg.slide == 0 and sum(cfg.move_probs[2:]) > 0


class _Visit(NamedTuple):
    """What the visits of one move phase share (:func:`move_trees`): the data, the kernel's settings,
    the visit's leaf model, and the values every visit reads."""

    data: Any
    cfg: Any
    leaves: Any          # the leaf model on the visit's rows (leaves.NormalRows or another)
    inv_s2: Any          # 1 / sigma^2 (times the replica's beta when tempered)
    tau2: Any
    min_rows: Any
    w: Any               # (n,) row weights, 0 for padding rows
    dt: Any              # the residual's dtype
    ldt: Any             # dtype of the rows' leaf slots
    normal: bool         # the Normal leaf model (its stored leaf table, _stored)
    changes: bool        # change or swap among the moves: subtrees routed again
    batch_left: bool     # the grown children's rows summed for all trees before the visits


def _terms(vs: _Visit, wsum, zv, s):
    """What does not involve the residual: at the node ``s`` and its children the marginal's
    ``-log(1 + tau2 P) / 2`` and ``P + 1 / tau2`` (:func:`~bayestrees.leaves.known_variance_log_marginal`, ``P = sum p_i``;
    the other leaves are the same in T and T'), and per leaf slot the leaf's posterior
    variance and its noise (the operations of the leaf draw, in its order)."""
    P = wsum[jnp.stack([s, 2 * s + 1, 2 * s + 2])] * vs.inv_s2
    var = vs.leaves.variance(wsum)
    return -0.5 * jnp.log1p(vs.tau2 * P), P + 1.0 / vs.tau2, var, jnp.sqrt(var) * zv


def _node_rows(vs: _Visit, pr, leaf):
    """The rows a move re-splits: the node's (a grow), or its two children's (a slide)."""
    at = leaf == pr.node
    if vs.cfg.slide:
        at = jnp.where(pr.kind == 2, (leaf == 2 * pr.node + 1) | (leaf == 2 * pr.node + 2), at)
    return at


def _totals(vs: _Visit, a, x_l, pr):
    """Per-leaf totals of T made T''s (:func:`_split_join`; with slides :func:`_moved_totals`)."""
    if vs.cfg.slide:
        return _moved_totals(a, x_l, pr.node, pr.kind)
    return _split_join(a, x_l, pr.node, pr.kind == 0)


def _left_rows_and_terms(vs: _Visit, pr, leaf8, wsum, zv):
    """A tree's grown left child's rows and weight and T''s :func:`_terms` (the batched pass)."""
    col = jax.lax.dynamic_index_in_dim(vs.data.codes, pr.var, 0, keepdims=False)
    at = _node_rows(vs, pr, leaf8.astype(jnp.int32))
    c_l, w_l = _left_rows(at & ~heap.goes_right(col, pr.var, pr.thr, vs.data.categories), vs.data, vs.dt, vs.cfg.row_axis)
    return jnp.stack([c_l, w_l]), _terms(vs, _totals(vs, wsum, w_l, pr), zv, pr.node)


def _visit_local(vs: _Visit, R, xs):
    """One tree's grow, prune (or slide) and leaf draw, Normal leaves: a grow or prune at s: one
    scatter of w r into the finer tree's leaves (T' after a grow that can happen, else T) gives both
    trees' sums; the grown children's rows and weights by one masked pass (or from the batched
    pass), the rest from the cached counts."""
    data, cfg, inv_s2, min_rows, w, ax = vs.data, vs.cfg, vs.inv_s2, vs.min_rows, vs.w, vs.cfg.row_axis
    S, dt = cfg.capacity, vs.dt
    pr, v, leaf8, count, wsum, lu, zv, to, cw_j, tn = xs
    s, ok, grow = pr.node, pr.ok, pr.kind == 0
    lc, rc = 2 * s + 1, 2 * s + 2
    leaf = leaf8.astype(jnp.int32)
    r = R + take(v, leaf)
    real_grow = grow & ok   # a grow that cannot happen moves no row
    col = jax.lax.dynamic_index_in_dim(data.codes, pr.var, 0, keepdims=False)
    at = _node_rows(vs, pr, leaf)
    side = lc + heap.goes_right(col, pr.var, pr.thr, data.categories).astype(jnp.int32)
    finer = jnp.where(real_grow & at, side, leaf)
    if cfg.slide:   # a slide's rows that change child go to two extra cells (_slide_sums)
        slide = pr.kind == 2
        cell = jnp.where(ok & slide & at & (side != leaf), jnp.where(leaf == lc, S, S + 1), finer)
        rsum = rows_total(cell_sums(cell, w * r, S + 2), ax)
        rsum_old, rsum_new = _grow_prune_sums(rsum[:S], s, real_grow, grow)
        qs_old, qs_new = _slide_sums(rsum, s, S)
        rsum_old, rsum_new = jnp.where(slide, qs_old, rsum_old), jnp.where(slide, qs_new, rsum_new)
        finer = jnp.where(slide & at, side, finer)   # the rows' leaves in T' after a slide
    elif ax is not None and not vs.batch_left:   # one sum across the devices: the leaves' and the left child's
        c_l, w_l = _left_rows(at & ~heap.goes_right(col, pr.var, pr.thr, data.categories), data, dt)
        both = rows_total(jnp.concatenate([cell_sums(finer, w * r, S), jnp.stack([c_l, w_l])]), ax)
        rsum, c_l, w_l = both[:S], both[S], both[S + 1]
        rsum_old, rsum_new = _grow_prune_sums(rsum, s, real_grow, grow)
    else:
        rsum = rows_total(cell_sums(finer, w * r, S), ax)   # leaf slots: every cell < S
        rsum_old, rsum_new = _grow_prune_sums(rsum, s, real_grow, grow)
    if vs.batch_left:
        c_l, w_l = cw_j[0], cw_j[1]
    else:
        if ax is None or cfg.slide:
            c_l, w_l = _left_rows(at & ~heap.goes_right(col, pr.var, pr.thr, data.categories), data, dt, ax)
        tn = _terms(vs, _totals(vs, wsum, w_l, pr), zv, s)
    valid = jnp.where(grow, (c_l >= min_rows) & (count[s] - c_l >= min_rows), True)
    if cfg.slide:
        valid = jnp.where(pr.kind == 2, (c_l >= min_rows) & (count[lc] + count[rc] - c_l >= min_rows), valid)
    (a_old, d_old, var_old, z_old), (a_new, d_new, var_new, z_new) = to, tn
    three = jnp.stack([s, lc, rc])
    Qo, Qn = rsum_old[three] * inv_s2, rsum_new[three] * inv_s2
    lm_old = a_old + 0.5 * Qo * Qo / d_old   # known_variance_log_marginal at s and its children, T's and T''s
    lm_new = a_new + 0.5 * Qn * Qn / d_new
    # the log marginal likelihood ratio: the leaves other than s and its children are the same
    ll = jnp.where(grow, lm_new[1] + lm_new[2] - lm_old[0], lm_new[0] - lm_old[1] - lm_old[2])
    if cfg.slide:
        ll = jnp.where(pr.kind == 2, lm_new[1] + lm_new[2] - lm_old[1] - lm_old[2], ll)
    acc = accept(lu, ll + pr.log_ratio, ok & valid)
    # the leaf draw (draw's operations, with the terms computed before)
    var = jnp.where(acc, var_new, var_old)
    value = jnp.where(jnp.where(acc, pr.leaf_new, pr.leaf_old),
                      var * jnp.where(acc, rsum_new, rsum_old) * inv_s2 + jnp.where(acc, z_new, z_old), 0.0).astype(dt)
    pruned = jnp.where((leaf == lc) | (leaf == rc), s, leaf)   # s's children are leaves
    kept = jnp.where(acc, jnp.where(grow | (pr.kind == 2), finer, pruned), leaf)
    R = r - take(_stored(value), kept)
    # the kept counts follow after the scan from the left child's (c_l, w_l)
    return R, (value, kept.astype(vs.ldt), jnp.stack([acc.astype(dt), c_l, w_l]))


def _row_move(vs: _Visit, pr, leaf, wr, count, wsum) -> _Moved:
    """The rows a proposed move moves, of the kinds the kernel makes: a grow, prune or slide
    (:func:`grow_prune_or_slide`), or a grow or prune and a change or swap (:func:`grow_or_prune`,
    :func:`change_or_swap`)."""
    data, cfg, min_rows, ax, S = vs.data, vs.cfg, vs.min_rows, vs.cfg.row_axis, vs.cfg.capacity
    if cfg.slide:
        return grow_prune_or_slide(pr, leaf, wr, count, wsum, data, min_rows, S, ax)
    if vs.changes:
        return jax.lax.cond(pr.kind == 2,
                            lambda _: change_or_swap(pr, leaf, wr, count, wsum, data, min_rows, S, cfg.max_depth, ax),
                            lambda _: grow_or_prune(pr, leaf, wr, count, wsum, data, min_rows, S, ax), None)
    return grow_or_prune(pr, leaf, wr, count, wsum, data, min_rows, S, ax)


def _visit(vs: _Visit, R, xs):
    """One tree's move of any kind and leaf draw, any leaf model on the rows: the rows it moves
    (:func:`grow_or_prune`, :func:`change_or_swap`), the leaves' log marginals, the acceptance."""
    leaves = vs.leaves
    pr, v, leaf8, count, wsum, lu, zv = xs
    leaf = leaf8.astype(jnp.int32)
    r = R + take(v, leaf)
    mv = _row_move(vs, pr, leaf, leaves.row_values(r), count, wsum)
    lm_old = leaves.log_marginal(wsum, mv.rsum_old)
    lm_new = leaves.log_marginal(mv.wsum, mv.rsum_new)
    ll = jnp.sum(jnp.where(pr.leaf_new, lm_new, 0.0)) - jnp.sum(jnp.where(pr.leaf_old, lm_old, 0.0))
    acc = accept(lu, ll + pr.log_ratio, pr.ok & mv.valid)
    wsum = jnp.where(acc, mv.wsum, wsum)
    value = leaves.draw(jnp.where(acc, pr.leaf_new, pr.leaf_old), wsum, jnp.where(acc, mv.rsum_new, mv.rsum_old),
                        zv).astype(vs.dt)
    leaf = jnp.where(acc, mv.leaf, leaf)
    # Normal leaves: the stored table (:func:`_stored`); other leaf models read the draw as computed
    # (the stored table would move the Gamma-Poisson path's float rounding under -O0, not its draws' law)
    R = r - take(_stored(value) if vs.normal else value, leaf)
    return R, (value, leaf.astype(vs.ldt), acc, jnp.where(acc, mv.count, count), wsum)


def _mean_over(value, count, s, grow):
    """Per leaf of the tree that a grow (``grow``) or a prune at ``s`` makes of a tree with leaf
    values ``value`` and rows per leaf ``count``: the mean of ``value`` over the leaf's rows (a grow's
    two children hold ``value[s]``; a prune's node the children's values weighted by their rows),
    with no pass over the rows."""
    idx = jnp.arange(value.shape[0])
    lc, rc = 2 * s + 1, 2 * s + 2
    kids = (idx == lc) | (idx == rc)
    cl, cr = count[lc].astype(value.dtype), count[rc].astype(value.dtype)
    joined = (value[lc] * cl + value[rc] * cr) / jnp.maximum(cl + cr, 1.0)
    return jnp.where(grow, jnp.where(kids, value[s], value), jnp.where(idx == s, joined, value))


def _proposal_centre(vs: _Visit, ok, kind, node, value, count, leaf_to, count_to, rows_value, grow):
    """The joint visit's leaf proposal's start per leaf of the tree moved to: the mean over its rows
    of the tree's values before the move (:func:`_mean_over` for a grow or prune; a change, swap or
    slide averages ``rows_value`` over the new leaves' rows)."""
    local = _mean_over(value, count, node, grow)
    if sum(vs.cfg.move_probs[2:]) > 0:   # rows routed again (a change, swap, rotation or slide)
        mean = cell_sums(leaf_to, rows_value, vs.cfg.capacity) / jnp.maximum(count_to, 1.0)
        local = jnp.where(kind == 2, mean, local)
    return jnp.where(ok, local, value)


def _visit_joint(vs: _Visit, carry, xs):
    """One tree's joint move of its rules and leaf values, a leaf model with no closed marginal
    (:class:`~bayestrees.leaves.LaplaceRows`): the rows it moves (as :func:`_visit`), the moved-to
    tree's leaf values from the model's proposal about the function, the reverse proposal about the
    proposed function, and the reversible-jump ratio with ``L`` evaluated exactly.  The carry is the
    function ``f`` and ``L``, its gradient and ``H 1`` there (not a residual).  A move that cannot
    happen keeps the tree and proposes its leaf values afresh (a refresh), so ``acc`` (the leaf values
    taken) can hold where the tree did not move; the visit returns both."""
    leaves, S = vs.leaves, vs.cfg.capacity
    f, Lf, a, h = carry
    pr, v, leaf8, count, wsum, lu, zv = xs
    leaf = leaf8.astype(jnp.int32)
    g = take(v, leaf)
    mv = _row_move(vs, pr, leaf, vs.w, count, wsum)   # vs.w: zero row values (no sums of them are read)
    ok = pr.ok & mv.valid
    grow = pr.kind == 0
    leaf_p = jnp.where(ok, mv.leaf, leaf)
    is_leaf_old = pr.leaf_old
    is_leaf_p = jnp.where(ok, pr.leaf_new, is_leaf_old)
    b = jnp.maximum(-h, 0.0)
    mean, P = leaves.proposal(leaf_p, is_leaf_p, a, b, g,
                              _proposal_centre(vs, ok, pr.kind, pr.node, v, count, leaf_p, mv.count, g, grow), S)
    mu = jnp.where(is_leaf_p, mean + zv / jnp.sqrt(P), 0.0)
    lq_fwd = jnp.sum(jnp.where(is_leaf_p, leaves.log_normal(mu, mean, P), 0.0))
    g_new = take(mu, leaf_p)
    f1 = f - g + g_new
    L1, a1, h1 = leaves.vgh(f1)
    b1 = jnp.maximum(-h1, 0.0)
    mean1, P1 = leaves.proposal(leaf, is_leaf_old, a1, b1, g_new,
                                _proposal_centre(vs, ok, pr.kind, pr.node, mu, mv.count, leaf, count, g_new, ~grow), S)
    lq_rev = jnp.sum(jnp.where(is_leaf_old, leaves.log_normal(v, mean1, P1), 0.0))
    lp_leaves = (jnp.sum(jnp.where(is_leaf_p, leaves.log_prior(mu), 0.0))
                 - jnp.sum(jnp.where(is_leaf_old, leaves.log_prior(v), 0.0)))
    log_a = L1 - Lf + lp_leaves + jnp.where(ok, pr.log_ratio, 0.0) + lq_rev - lq_fwd
    acc = accept(lu, log_a, jnp.isfinite(log_a))
    moved = acc & ok
    out = (jnp.where(acc, mu, v).astype(v.dtype), jnp.where(moved, mv.leaf, leaf).astype(leaf8.dtype), moved,
           jnp.where(moved, mv.count, count), jnp.where(moved, mv.wsum, wsum), acc)
    carry = (jnp.where(acc, f1, f), jnp.where(acc, L1, Lf), jnp.where(acc, a1, a), jnp.where(acc, h1, h))
    return carry, out


def move_trees(keys, state: State, data: BARTData, cfg: KernelConfig, leaves=None):
    """The move phase: a proposal for every tree, then for every tree in turn its move (accepted or
    not) and its leaf values from their conditional, the residual carried (the module docstring's
    steps 1-2): :func:`_visit_local` (grow and prune of Normal leaves, their terms computed for all
    trees first) or :func:`_visit` (every move, any leaf model on the rows).  ``keys``: the proposals',
    the acceptances' and the leaf draws' randomness; ``leaves``: the leaf model on the visit's rows
    (:class:`~bayestrees.leaves.NormalRows`, the default, or another with its methods, such as
    :class:`~bayestrees.leaves.GammaPoissonRows`; ``state.wsum`` then holds its per-leaf sums; or one with no
    closed marginal, :class:`~bayestrees.leaves.LaplaceRows`, whose trees move with their leaf values:
    :func:`_move_jointly`).  Returns ``(state, proposed, accepted)``, the last two int32 (4,) per move type."""
    k_prop, k_acc, k_val = keys
    S, m = cfg.capacity, cfg.m
    dt = state.resid.dtype
    tau2 = jnp.asarray(cfg.tau2, dt)
    min_rows = jnp.asarray(cfg.min_leaf_rows, dt)
    u = random_bits.open_uniform(k_prop, (m, proposals.N_UNIFORMS))
    w_var = split_weights(cfg, state.log_s)
    prop = jax.vmap(lambda *a: proposals.propose(*a, data, cfg, dt, w_var))(u, state.feature, state.threshold,
                                                                    state.log_prior, state.avail)
    log_u = jnp.log(random_bits.open_uniform(k_acc, (m,))).astype(dt)
    normal = leaves is None
    zval = (NormalRows if normal else leaves).noise(k_val, m, S, dt)
    if getattr(leaves, "joint", False):
        return _move_jointly(state, data, cfg, leaves, prop, log_u, zval, min_rows)
    w = jnp.where(data.rows > 0, data.weight, 0.0).astype(dt)   # padding rows carry nothing
    inv_s2 = _precision(state)
    leaves = _normal_rows(cfg, w, inv_s2) if normal else leaves
    changes = _routes_again(cfg)   # subtrees to route again
    local = normal and not changes   # the grow/prune visit of Normal leaves, its terms computed first
    # small data: a grow's left child's rows and weight for all trees at once (one batched pass);
    # large data: in the visit, where the node's rows are in cache
    batch_left = local and cfg.batch_width * m * state.leaf.shape[1] <= _BATCH_ROWS
    vs = _Visit(data=data, cfg=cfg, leaves=leaves, inv_s2=inv_s2, tau2=tau2, min_rows=min_rows, w=w,
                dt=dt, ldt=state.leaf.dtype, normal=normal, changes=changes, batch_left=batch_left)
    cw = t_new = None
    t_old = jax.vmap(partial(_terms, vs))(state.wsum, zval, prop.node) if local else None   # T's terms, all trees
    if batch_left:   # and T''s
        cw, t_new = jax.vmap(partial(_left_rows_and_terms, vs))(prop, state.leaf, state.wsum, zval)
    xs = (prop, state.value, state.leaf, state.count, state.wsum, log_u, zval)
    if local:
        R, (value, leaf, acw) = jax.lax.scan(partial(_visit_local, vs), state.resid, xs + (t_old, cw, t_new))
        acc = acw[:, 0] > 0
        a2 = acc[:, None]
        moved = jax.vmap(partial(_totals, vs))   # the visits' rule for the kept counts, for all trees at once
        count = jnp.where(a2, moved(state.count, acw[:, 1].astype(state.count.dtype), prop), state.count)
        wsum = jnp.where(a2, moved(state.wsum, acw[:, 2].astype(state.wsum.dtype), prop), state.wsum)
    else:
        R, (value, leaf, acc, count, wsum) = jax.lax.scan(partial(_visit, vs), state.resid, xs)
        a2 = acc[:, None]
    feature = jnp.where(a2, prop.feature, state.feature)
    threshold = jnp.where(a2, prop.threshold, state.threshold)
    lprior = jnp.where(acc, prop.log_prior, state.log_prior)
    avail = jnp.where(acc[:, None], prop.avail, state.avail)
    kind = jax.nn.one_hot(prop.move, len(cfg.move_probs), dtype=jnp.int32)
    new = state._replace(feature=feature, threshold=threshold, value=value, leaf=leaf, count=count, wsum=wsum,
                         log_prior=lprior, avail=avail, resid=R)
    return new, jnp.sum(kind * prop.ok[:, None], 0), jnp.sum(kind * acc[:, None], 0)


def _move_jointly(state: State, data: BARTData, cfg: KernelConfig, leaves, prop, log_u, zval, min_rows):
    """:func:`move_trees` for a leaf model with no closed marginal (:class:`~bayestrees.leaves.LaplaceRows`):
    every tree's :func:`_visit_joint` in turn, the function carried, then ``leaves.refresh_keys``'s
    leaf refreshes (the same visits with every tree kept).  The state's function is ``z - resid``;
    the new state holds it in ``z`` (``resid`` 0).  ``accepted`` counts the visits whose leaf values
    were taken, refreshes where the tree could not move among them."""
    S, m = cfg.capacity, cfg.m
    dt = state.resid.dtype
    changes = _routes_again(cfg)   # subtrees to route again
    f0 = state.z - state.resid
    vs = _Visit(data=data, cfg=cfg, leaves=leaves, inv_s2=None, tau2=None, min_rows=min_rows, w=jnp.zeros_like(f0),
                dt=dt, ldt=state.leaf.dtype, normal=False, changes=changes, batch_left=False)
    xs = (prop, state.value, state.leaf, state.count, state.wsum, log_u, zval)
    carry, (value, leaf, moved, count, wsum, acc) = jax.lax.scan(partial(_visit_joint, vs), (f0, *leaves.vgh(f0)), xs)
    a2 = moved[:, None]
    feature = jnp.where(a2, prop.feature, state.feature)
    for k_acc, k_val in leaves.refresh_keys:   # leaf refreshes: the same visits with the trees kept (T' = T)
        is_leaf = heap.leaf_slots(feature)
        keep = prop._replace(ok=jnp.zeros_like(prop.ok), leaf_old=is_leaf, leaf_new=is_leaf)
        xs = (keep, value, leaf, count, wsum, jnp.log(random_bits.open_uniform(k_acc, (m,))).astype(dt),
              leaves.noise(k_val, m, S, dt))
        carry, (value, leaf, _, count, wsum, _) = jax.lax.scan(partial(_visit_joint, vs), carry, xs)
    f = carry[0]
    kind = jax.nn.one_hot(prop.move, len(cfg.move_probs), dtype=jnp.int32)
    new = state._replace(feature=feature, threshold=jnp.where(a2, prop.threshold, state.threshold), value=value,
                         leaf=leaf, count=count, wsum=wsum, log_prior=jnp.where(moved, prop.log_prior, state.log_prior),
                         avail=jnp.where(a2, prop.avail, state.avail), resid=jnp.zeros_like(f), z=f)
    return new, jnp.sum(kind * prop.ok[:, None], 0), jnp.sum(kind * acc[:, None], 0)


def step_sigma(keys, state: State, data: BARTData, cfg: KernelConfig) -> State:
    """The last phase: ``sigma^2`` from its conditional (regression), or the probit latents ``z`` (and
    the residual moved by their change); then the sparse prior's split probabilities.  ``keys``: the
    latents' or ``sigma^2``'s randomness, the sparse prior's."""
    k_last, k_sparse = keys
    dt = state.resid.dtype
    R, sigma2, z = state.resid, state.sigma2, state.z
    if cfg.probit:
        f = state.z - R
        uz = random_bits.open_uniform(rows_key(k_last, cfg.row_axis), R.shape).astype(dt)
        z = _probit_z(uz, f + data.offset, data.y, data.weight) - data.offset
        R = z - f
    elif cfg.sample_sigma:
        live = (data.weight > 0) & (data.rows > 0)
        n_live, rss = rows_total((jnp.sum(live), jnp.sum(jnp.where(live, data.weight * R * R, 0.0))), cfg.row_axis)
        if cfg.tempered:   # p(sigma^2) p(y | f, sigma^2)^beta: IG((nu + beta n_+) / 2, (nu lambda + beta rss) / 2)
            n_live, rss = state.beta * n_live, state.beta * rss
        a = 0.5 * (data.nu + n_live)
        b = 0.5 * (data.nu_lam + rss)
        sigma2 = (b / random_bits.gamma(k_last, a.astype(jnp.float32), dtype=dt)).astype(dt)
    log_s, alpha, lprior, avail = state.log_s, state.alpha, state.log_prior, state.avail
    if cfg.sparse:
        log_s, alpha, lprior, avail = _sparse_update(k_sparse, state.feature, state.threshold, lprior, avail, log_s,
                                                     alpha, data, cfg, dt)
    log_lik = _tempered_factor(R, sigma2, data, cfg.row_axis) if cfg.tempered else None
    return state._replace(resid=R, sigma2=sigma2, z=z, log_s=log_s, alpha=alpha, log_prior=lprior, avail=avail,
                          log_lik=log_lik)


def regrow_trees(key, state: State, data: BARTData, cfg: KernelConfig, leaves=None) -> State:
    """The regrowth phase: every tree in turn regrown by conditional SMC given the others
    (:func:`bayestrees.inference.regrow.regrow_tree`), its leaf values drawn from their conditional,
    the residual carried.  ``leaves``: the leaf model on the visit's rows (:class:`~bayestrees.leaves.NormalRows`
    by default; it gives the rows' statistics, ``regrow_rows``, for its per-slot ``model``, which scores
    the regrown trees, and reads the regrown sums, ``regrown_sums``)."""
    if getattr(leaves, "joint", False):
        return _regrow_jointly(key, state, data, cfg, leaves)
    dt = state.resid.dtype
    S, m = cfg.capacity, cfg.m
    normal = leaves is None
    if normal:
        leaves = _normal_rows(cfg, jnp.where(data.rows > 0, data.weight, 0.0).astype(dt), _precision(state))
    rcfg = regrow.regrow_config(cfg.prior, leaves.model, cfg.max_depth, data.codes.shape[0], cfg.min_leaf_rows,
                                cfg.particles, cfg.n_codes)
    codes = data.codes.T.astype(jnp.int32)
    prior = cfg.prior if data.prior is None else data.prior
    k_tree, k_val = random_bits.split_apart(key)
    keys = random_bits.split_apart(k_tree, m)
    noise = leaves.noise(k_val, m, S, dt)
    log_w = split_weights(cfg, state.log_s)
    # fixed split-variable weights (the missing values' columns) as the regrowth's xi; the sparse
    # prior's, whose probabilities can be far below float range, are refused by the config
    xi = None if log_w is None else jnp.exp(log_w - jnp.max(log_w))

    def visit(R, xs):
        f, t, v, leaf8, k, zv = xs
        r = R + take(v, leaf8.astype(jnp.int32))
        new = regrow.regrow_tree(k, f, t, leaves.regrow_rows(r), data.rows, codes, data.code_lo, data.code_hi, prior,
                                 rcfg, xi, data.categories)
        is_leaf = heap.leaf_slots(new.feature)
        wsum, rsum = leaves.regrown_sums(new.stats)
        value = leaves.draw(is_leaf, wsum, rsum, zv).astype(dt)
        R = r - take(_stored(value) if normal else value, new.leaf)
        count = jnp.where(is_leaf, new.count, 0.0).astype(dt)
        return R, (new.feature, new.threshold, value, new.leaf.astype(leaf8.dtype), count,
                   jnp.where(is_leaf, wsum, 0.0).astype(dt))

    R, (feature, threshold, value, leaf, count, wsum) = jax.lax.scan(
        visit, state.resid, (state.feature, state.threshold, state.value, state.leaf, keys, noise))
    lprior, avail = tree_log_priors(feature, threshold, data, cfg, dt, log_w)[:2]
    return state._replace(feature=feature, threshold=threshold, value=value, leaf=leaf, count=count, wsum=wsum,
                          log_prior=lprior, avail=avail.astype(dt), resid=R)


def _regrow_jointly(key, state: State, data: BARTData, cfg: KernelConfig, leaves) -> State:
    """:func:`regrow_trees` for a leaf model with no closed marginal (:class:`~bayestrees.leaves.LaplaceRows`):
    every tree in turn, given the others, regrown by conditional SMC under the Gaussian expansion of
    ``L`` about ``leaves.expansion_point`` (a point the tree does not set), its leaf values from that
    expansion's conjugate conditional, and the whole proposal corrected by Metropolis-Hastings with
    the expansion's error ``R = L - Q`` (:mod:`bayestrees.inference.treefn.kernel`, "Regrowth on the
    general path").  The state's function is ``z - resid``; the new state holds it in ``z``."""
    S, m = cfg.capacity, cfg.m
    dt = state.resid.dtype
    model = leaves.model
    rcfg = regrow.regrow_config(cfg.prior, model, cfg.max_depth, data.codes.shape[0], cfg.min_leaf_rows,
                                cfg.particles, cfg.n_codes)
    codes = data.codes.T.astype(jnp.int32)
    prior = cfg.prior if data.prior is None else data.prior
    log_w = split_weights(cfg, state.log_s)   # the missing values' columns, or None
    xi = None if log_w is None else jnp.exp(log_w - jnp.max(log_w))
    live = data.rows > 0
    w_data = jnp.where(live, data.weight, 0.0).astype(dt)
    k_tree, k_val, k_acc = random_bits.split_apart(key, 3)
    f0 = state.z - state.resid
    log_u = jnp.log(random_bits.open_uniform(k_acc, (m,))).astype(dt)
    noise = leaves.noise(k_val, m, S, dt)

    def visit(carry, xs):
        f, Lf = carry
        ft, tt, v, leaf8, count, wsum, k, zv, lu = xs
        leaf = leaf8.astype(jnp.int32)
        f_rest = f - take(v, leaf)
        u = leaves.expansion_point(f_rest)
        _, alpha, h = leaves.vgh(u)
        beta = jnp.where(live, jnp.maximum(-h, 0.0), 0.0)   # rows of no curvature: out of the approximation
        curved = beta > 0
        view = model.on_rows(beta, jnp.ones((), dt))
        r = jnp.where(curved, u - f_rest + alpha / jnp.where(curved, beta, 1.0), 0.0)   # the tree's pseudo-response
        new = regrow.regrow_tree(k, ft, tt, view.regrow_rows(r), data.rows, codes, data.code_lo, data.code_hi,
                                 prior, rcfg, xi, data.categories)
        is_leaf = heap.leaf_slots(new.feature)
        value = view.draw(is_leaf, *view.regrown_sums(new.stats), zv).astype(dt)
        f1 = f_rest + take(value, new.leaf)
        L1 = leaves.L(f1)

        def remainder(fx, Lx):   # L less its expansion at u: the approximation's error
            d = fx - u
            return Lx - jnp.sum(jnp.where(curved, alpha * d - 0.5 * beta * d * d, 0.0))

        log_a = remainder(f1, L1) - remainder(f, Lf)
        acc = accept(lu, log_a, jnp.isfinite(log_a))
        keep = lambda a, b: jnp.where(acc, a, b)   # noqa: E731
        out = (keep(new.feature, ft), keep(new.threshold, tt), keep(value, v),
               keep(new.leaf.astype(leaf8.dtype), leaf8),
               keep(jnp.where(is_leaf, new.count, 0.0).astype(count.dtype), count),
               keep(jnp.where(is_leaf, cell_sums(new.leaf, w_data, S), 0.0).astype(wsum.dtype), wsum))
        return (keep(f1, f), keep(L1, Lf)), out

    xs = (state.feature, state.threshold, state.value, state.leaf, state.count, state.wsum,
          random_bits.split_apart(k_tree, m), noise, log_u)
    (f, _), (feature, threshold, value, leaf, count, wsum) = jax.lax.scan(visit, (f0, leaves.L(f0)), xs)
    lprior, avail = tree_log_priors(feature, threshold, data, cfg, dt, log_w)[:2]
    return state._replace(feature=feature, threshold=threshold, value=value, leaf=leaf, count=count, wsum=wsum,
                          log_prior=lprior, avail=avail.astype(dt), resid=jnp.zeros_like(f), z=f)


def tree_log_priors(feature, threshold, data: BARTData, cfg: KernelConfig, dtype=jnp.float32, log_w=None):
    """Every tree's ``(log p(T), avail, internal, leaf, log_avail_w)`` (vmapped
    :func:`intervals.log_tree_prior`, or :func:`intervals.log_tree_prior_weighted` with the sparse
    prior's split-variable log probabilities ``log_w``; ``log_avail_w`` is then the log of the
    available variables' total probability per slot, else None)."""
    mc = cfg
    prior = mc.prior if data.prior is None else data.prior

    def one(f, t):
        if log_w is None:
            lp, avail, internal, leaf, _ = intervals.log_tree_prior(f, t, data.code_lo, data.code_hi, prior, mc.max_depth,
                                                             dtype=dtype, categories=data.categories)
            return lp, avail, internal, leaf
        return intervals.log_tree_prior_weighted(f, t, data.code_lo, data.code_hi, prior, mc.max_depth, log_w, dtype=dtype,
                                                 categories=data.categories)

    out = jax.vmap(one)(feature, threshold)
    if log_w is None:
        return out + (None,)
    lp, avail, internal, leaf, _, log_aw = out
    return lp, avail, internal, leaf, log_aw


def _log_alpha_density(alpha, log_s, a, b, rho):
    """``log p(alpha) + log Dir(s; alpha / d)`` up to a constant, in ``log alpha`` coordinates
    (``alpha / (alpha + rho) ~ Beta(a, b)``)."""
    from jax.scipy.special import gammaln

    d = log_s.shape[0]
    x = alpha / (alpha + rho)
    log_prior = (a - 1.0) * jnp.log(x) + (b - 1.0) * jnp.log1p(-x) + jnp.log(rho) - 2.0 * jnp.log(alpha + rho)
    log_dir = gammaln(alpha) - d * gammaln(alpha / d) + (alpha / d) * jnp.sum(log_s)
    return log_prior + log_dir + jnp.log(alpha)


def _sparse_update(key, feature, threshold, lprior, avail, log_s, alpha, data: BARTData, cfg: KernelConfig, dtype):
    """The sparse Dirichlet prior's step (Linero 2018, "Bayesian regression trees for high-dimensional
    prediction and variable selection", JASA 113): ``s ~ Dirichlet(alpha / d, ...)``, ``alpha / (alpha +
    rho) ~ Beta(a, b)``, and a node's split variable is ``j`` with probability ``s_j / sum_available s``.

    ``s``: an independence Metropolis-Hastings step whose proposal is Linero's Gibbs draw
    ``Dirichlet(alpha / d + c)`` (``c_j``: internal nodes splitting on ``j`` over all trees).  The
    target is ``Dir(s; alpha / d) prod_nodes s_j / W_node(s)`` (``W_node``: the sum of ``s`` over the
    node's available variables), so the ratio is ``prod_nodes W_node(s) / W_node(s')``; it is 1 when
    every variable is available at every node, where Linero's Gibbs draw is exact.  ``alpha``: a
    random-walk step on ``log alpha`` (sd 0.5).  Returns ``(log_s, alpha, log_prior, avail)`` with
    every tree's log prior under the kept ``s`` (the available variables do not depend on ``s``).
    The probabilities are kept as logarithms throughout: a draw with small ``alpha / d`` holds
    ``s_j`` far below the float range.
    """
    d = log_s.shape[0]
    a, b, rho = (data.sparse_prior[i].astype(dtype) for i in range(3))
    k_s, k_acc, k_a, k_aacc = random_bits.split(key, 4)
    internal = feature >= 0
    c = jnp.sum(jax.nn.one_hot(jnp.where(internal, feature, -1), d, dtype=dtype), (0, 1))
    log_g = random_bits.log_gamma(k_s, (alpha / d + c).astype(dtype), dtype)
    log_s_new = log_g - jax.scipy.special.logsumexp(log_g)
    _, _, _, _, log_w_old = tree_log_priors(feature, threshold, data, cfg, dtype, log_s)
    lp_new, _, _, _, log_w_new = tree_log_priors(feature, threshold, data, cfg, dtype, log_s_new)
    log_ratio = jnp.sum(jnp.where(internal, log_w_old - log_w_new, 0.0))
    acc = accept(jnp.log(random_bits.open_uniform(k_acc, ())), log_ratio)
    log_s = jnp.where(acc, log_s_new, log_s)
    lprior = jnp.where(acc, lp_new, lprior)
    z = random_bits.normal(k_a, (), dtype)
    alpha_new = alpha * jnp.exp(0.5 * z)
    log_a = _log_alpha_density(alpha_new, log_s, a, b, rho) - _log_alpha_density(alpha, log_s, a, b, rho)
    alpha = jnp.where(accept(jnp.log(random_bits.open_uniform(k_aacc, ())), log_a), alpha_new, alpha)
    return log_s, alpha, lprior, avail


def at_max_depth(state: State, cfg: KernelConfig):
    """Trees with a leaf at ``max_depth`` that could otherwise split."""
    S, D = cfg.capacity, cfg.max_depth
    deep = np.arange(S) >= 2 ** D - 1                                  # the slots at max_depth
    par = np.maximum((np.arange(S) - 1) // 2, 0)
    leaf = (state.feature < 0) & (state.feature[:, par] >= 0)         # used, not internal (depth >= 1)
    if D == 0:
        leaf = state.feature < 0
    return jnp.sum(jnp.any(leaf & deep & (state.avail > 0), -1)).astype(jnp.int32)


def _log_joint(state: State, data: BARTData, cfg: KernelConfig):
    """``log p(y | f, sigma) + sum_j [log p(T_j) + log p(M_j)] + log p(sigma^2)``, up to a constant."""
    dt = state.resid.dtype
    tau2 = jnp.asarray(cfg.tau2, dt)
    lp_trees = state.log_prior
    is_leaf = heap.leaf_slots(state.feature)
    mu = state.value
    lp_leaves = jnp.sum(jnp.where(is_leaf, -0.5 * mu * mu / tau2 - 0.5 * jnp.log(2 * jnp.pi * tau2), 0.0))
    live = (data.weight > 0) & (data.rows > 0)
    if cfg.probit:
        eta = state.z - state.resid + data.offset
        ll = jnp.sum(jnp.where(live, log_ndtr(jnp.where(data.y > 0.5, eta, -eta) * jnp.sqrt(data.weight)), 0.0))
        lp_sigma = 0.0
    else:
        s2 = state.sigma2
        w = jnp.where(live, data.weight, 1.0)
        ll = jnp.sum(jnp.where(live, 0.5 * jnp.log(w / (2 * jnp.pi * s2)) - 0.5 * w * state.resid ** 2 / s2, 0.0))
        # sigma^2 ~ IG(nu / 2, nu lambda / 2): log density up to a constant in sigma^2
        lp_sigma = (-(0.5 * data.nu + 1.0) * jnp.log(s2) - 0.5 * data.nu_lam / s2) if cfg.sample_sigma else 0.0
    lp_sparse = 0.0
    if cfg.sparse:  # log p(s | alpha) + log p(alpha) (the latter without the log-alpha Jacobian)
        a, b, rho = (data.sparse_prior[i].astype(dt) for i in range(3))
        lp_sparse = (_log_alpha_density(state.alpha, state.log_s, a, b, rho) - jnp.log(state.alpha)
                     - jnp.sum(state.log_s))
    return (ll + jnp.sum(lp_trees) + lp_leaves + lp_sigma + lp_sparse).astype(dt)


@dataclass(frozen=True)
class collect:  # noqa: N801 (a function-like callable, hashable by its config)
    """``collect(key, state, data)`` for :func:`~bayestrees.inference.loop.run_chains`: a :class:`Draw`.

    ``threshold_dtype`` is the codes' dtype (uint8 up to 255 bins per feature).  With
    ``keep_trees=False`` the draw holds no tree arrays, only each tree's leaves and depth and the
    splits per feature (:func:`tree_summaries`); where ``data.predict_codes`` is given, the sum of
    trees there (``Draw.predict``).  Collecting reads the state and changes nothing, so the chain
    is the same whatever is kept.
    """

    cfg: KernelConfig
    feature_dtype: Any = jnp.int8
    threshold_dtype: Any = jnp.uint8
    keep_trees: bool = True

    def __call__(self, key, state: State, data: BARTData) -> Draw:
        if self.cfg.tempered:   # a tempered ensemble: the posterior replica
            state = jax.tree_util.tree_map(lambda a: a[0], state)
        value = state.value.astype(jnp.float32)
        fit = (state.z - state.resid).astype(jnp.float32)
        split_prob = jnp.exp(state.log_s).astype(jnp.float32) if self.cfg.sparse else jnp.zeros((0,), jnp.float32)
        predict = None
        if data.predict_codes is not None:
            predict = sum_draw(state.feature, state.threshold, value, data.predict_codes, self.cfg.max_depth,
                               data.categories)
        if self.keep_trees:
            trees, summaries = (state.feature.astype(self.feature_dtype), state.threshold.astype(self.threshold_dtype),
                                value), (None, None, None)
        else:
            n_leaves, depth, splits = tree_summaries(state.feature, data.codes.shape[0])
            trees, summaries = (None, None, None), (n_leaves.astype(jnp.int16), depth.astype(jnp.int8), splits)
        return Draw(feature=trees[0], threshold=trees[1], value=trees[2], sigma=jnp.sqrt(state.sigma2), fit=fit,
                    lp=_log_joint(state, data, self.cfg), split_prob=split_prob, alpha=state.alpha.astype(jnp.float32),
                    n_leaves=summaries[0], depth=summaries[1], split_counts=summaries[2], predict=predict)


def tree_summaries(feature, n_features: int):
    """Leaves and depth of every tree ``(..., m)`` and internal nodes per split variable summed over
    the trees ``(..., n_features)``, int32, from heap trees' split variables ``feature`` ``(..., m, S)``
    (-1 where a slot is not internal; any leading axes).  The one tree summary of the sums of trees:
    in the sampler's ``collect`` (trees not kept) and on the kept draws (:func:`host_tree_summaries`)."""
    S = feature.shape[-1]
    idx = np.arange(S)
    internal = feature >= 0
    used = (idx == 0) | internal[..., np.maximum((idx - 1) // 2, 0)]
    leaf = used & ~internal
    depth_of = np.floor(np.log2(idx + 1)).astype(np.int32)
    n_leaves = jnp.sum(leaf, -1).astype(jnp.int32)
    depth = jnp.max(jnp.where(leaf, depth_of, 0), -1).astype(jnp.int32)
    lead = feature.shape[:-2]
    B = int(np.prod(lead)) if lead else 1
    # one cell per (draw, feature) and one more per draw for the slots that do not split
    which = jnp.where(internal, feature.astype(jnp.int32), n_features).reshape(B, -1)
    which = which + jnp.arange(B, dtype=jnp.int32)[:, None] * (n_features + 1)
    splits = scatter_add(jnp.zeros(B * (n_features + 1), jnp.int32), which.reshape(-1), jnp.ones(which.size, jnp.int32))
    return n_leaves, depth, splits.reshape(lead + (n_features + 1,))[..., :n_features]


_host_summaries = jax.jit(tree_summaries, static_argnums=1)


def host_tree_summaries(feature, n_features: int):
    """:func:`tree_summaries` of kept draws, as numpy arrays (one compiled program per shape)."""
    return tuple(np.asarray(a) for a in _host_summaries(np.asarray(feature), int(n_features)))


def _specs(x, rows: dict):
    """Partition specs of the NamedTuple ``x`` for :func:`jax.shard_map`: the fields named in ``rows``
    split over their last axis (``rows[name]`` dimensions in all), every other array whole."""
    whole = jax.tree_util.tree_map(lambda _: PartitionSpec(), x)
    return whole._replace(**{k: PartitionSpec(*([None] * (nd - 1)), ROWS) for k, nd in rows.items()})


_DATA_ROWS = dict(codes=2, y=1, weight=1, rows=1)
_STATE_ROWS = dict(leaf=2, resid=1, z=1)


@dataclass(frozen=True)
class _OverRows:
    """``init(key, data)`` or ``step(key, state, data)`` with the rows split over ``cfg.data_devices``
    devices (:func:`jax.shard_map` on :func:`bayestrees.sharding.rows_mesh`): each device holds a block
    of the rows (their codes, response, weights, leaves, residual), the trees, leaf values and
    ``sigma^2`` are the same on every device, and every sum over rows (the leaves' statistics, the
    grown child's rows, ``sum w R^2``) is added across the devices (:func:`rows_total`).  The number
    of rows must be a multiple of the devices (:func:`bayestrees.inference.bart.fit.fit_bart` pads
    with rows of ``BARTData.rows = 0``)."""

    fn: Any
    cfg: KernelConfig

    def __call__(self, key, *args):
        mesh = rows_mesh(self.cfg.data_devices)
        if len(args) == 1:   # init(key, data) -> State
            (data,) = args
            whole = PartitionSpec()
            fields = {f: whole for f in State._fields if self.cfg.tempered or f not in ("beta", "log_lik")}
            in_specs = (whole, _specs(data, _DATA_ROWS))
            out_specs = _specs(State(**fields), _STATE_ROWS)
        else:                # step(key, state, data) -> (State, Info)
            state, data = args
            in_specs = (PartitionSpec(), _specs(state, _STATE_ROWS), _specs(data, _DATA_ROWS))
            out_specs = (_specs(state, _STATE_ROWS), PartitionSpec())
        return jax.shard_map(self.fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs)(key, *args)


def build_kernel(cfg: KernelConfig, dtype=jnp.float32) -> Kernel:
    """The BART ``init``/``step`` pair for one chain (hashable by ``cfg``).

    ``init(key, data)`` starts every tree at the root leaf with value 0 (so ``R = y``; probit: ``z``
    drawn given ``f = 0``) and ``sigma^2 = data.sigma2``; ``step(key, state, data)`` is the step of
    the module docstring.
    """
    proposals.check_move_probs(cfg.move_probs)
    base = Kernel(_Init(cfg, jnp.dtype(dtype)), _Step(cfg))
    if cfg.data_devices > 1:
        base = Kernel(_OverRows(base.init, cfg), _OverRows(base.step, cfg))
    if cfg.tempered:
        return tempered(base, cfg.temperatures, tempered_log_lik, None, dtype)
    return base


# ---------------------------------------------------------------------------------------------
# the kept draws as trees, and the sum of trees at new rows
# ---------------------------------------------------------------------------------------------
def expand_trees(feature, threshold, value):
    """Heap :class:`~bayestrees.tree.Tree` numpy arrays from the compact draws (any leading axes).

    ``left``/``right`` are the heap children of an internal slot, ``LEAF`` for a used slot that
    is not internal, ``FREE`` for the rest; ``depth`` the heap depth; ``missing_left``,
    ``weight`` and ``count`` are zeros (BART's draws do not keep rows per node), broadcast views
    with numpy (no memory).  ``left``/``right`` are int8 up to 127 slots (``max_depth <= 5``), int16 beyond.
    Every array is made in its own small dtype, with no wide temporary (int64 temporaries made it
    several times slower: ``docs/lab-notes/performance.md``).
    """
    feature = np.asarray(feature)
    S = feature.shape[-1]
    idx = np.arange(S)
    internal = feature >= 0
    parent = np.maximum((idx - 1) // 2, 0)
    used = internal[..., parent]
    used[..., 0] = True                                       # the root, and every split node's child
    ldt = np.dtype(np.int8 if S <= 127 else np.int16 if S <= 32767 else np.int32)
    left = np.where(used, ldt.type(LEAF), ldt.type(FREE))
    left = np.where(internal, (2 * idx + 1).astype(ldt), left)
    right = np.where(internal, (2 * idx + 2).astype(ldt), left)
    depth = np.asarray(heap.depth_of(np.arange(S))).astype(np.int8)
    shape = feature.shape
    z = lambda dt: np.broadcast_to(np.zeros((), dt), shape)  # noqa: E731
    return Tree(feature=feature, threshold=np.asarray(threshold), left=left, right=right, missing_left=z(bool),
                value=np.asarray(value)[..., None], weight=z(np.float32), count=z(np.int8),
                depth=np.broadcast_to(depth, shape), n_nodes=np.sum(used, -1, dtype=np.int16))


def sum_draw(f, t, v, codes, max_depth: int, categories=None):
    """``sum_j v_j[leaf_j(x)]`` of one draw's trees ``(m, S)`` at codes ``(n, d)``: float32 ``(n,)``,
    added tree by tree in order (the sampler's kept predictions and :func:`sum_of_trees` both use it,
    so they agree to the bit); ``categories``: :class:`BARTData`'s."""

    def add(acc, tree):
        fj, tj, vj = tree
        leaf = heap.descend_rules(fj.astype(jnp.int32), tj.astype(jnp.int32), codes, jnp.zeros(codes.shape[0], jnp.int32),
                                  max_depth, categories=categories)
        return acc + take(vj, leaf), None

    acc, _ = jax.lax.scan(add, jnp.zeros(codes.shape[0], jnp.float32), (f, t, v))
    return acc


@jax.jit
def _sum_block(feature, threshold, value, codes, categories=None):
    """``sum_j value_j[leaf_j(x)]`` for a block of draws: (B, m, S) arrays, codes (n, d) -> (B, n)."""
    max_depth = feature.shape[-1].bit_length() - 1
    return jax.lax.map(lambda args: sum_draw(*args, codes, max_depth, categories), (feature, threshold, value))


def sum_of_trees(feature, threshold, value, codes, *, block_rows: int = 65536, block_draws: int | None = None,
                 categories=None):
    """The sum of each draw's trees at coded rows: ``(..., n)`` float32 for draws ``(..., m, S)``
    (``categories``: the unordered features' masks, :class:`BARTData`'s).

    Rows and draws go through in blocks (a few hundred draws, ``block_rows`` rows), so neither
    the number of rows nor of draws bounds memory beyond the output itself.
    """
    feature, threshold, value = np.asarray(feature), np.asarray(threshold), np.asarray(value)
    lead, (m, S) = feature.shape[:-2], feature.shape[-2:]
    codes = np.asarray(codes).astype(np.int32)
    n = codes.shape[0]
    f2, t2, v2 = (a.reshape((-1, m, S)) for a in (feature, threshold, value))
    B = f2.shape[0]
    bd = block_draws or max(1, min(B, 256))
    out = np.empty((B, n), np.float32)
    for r0 in range(0, max(n, 1), block_rows):
        c = jnp.asarray(codes[r0:r0 + block_rows])
        if c.shape[0] == 0:
            break
        for d0 in range(0, B, bd):
            sl = slice(d0, min(B, d0 + bd))
            fb, tb, vb = f2[sl], t2[sl], v2[sl]
            if fb.shape[0] < bd:  # one compiled shape per block size: pad the last block
                pad = bd - fb.shape[0]
                fb, tb, vb = (np.concatenate([a, np.repeat(a[-1:], pad, 0)]) for a in (fb, tb, vb))
            cats = None if categories is None else jnp.asarray(categories, jnp.int32)
            out[sl, r0:r0 + c.shape[0]] = np.asarray(_sum_block(fb, tb, vb, c, cats))[: sl.stop - sl.start]
    return out.reshape(lead + (n,))
