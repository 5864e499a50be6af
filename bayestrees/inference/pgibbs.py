"""Particle Gibbs for Bayesian CART: a conditional SMC update that regrows the whole tree.

Lakshminarayanan, Roy & Teh (2015), "Particle Gibbs for Bayesian Additive Regression Trees"
(AISTATS), after Andrieu, Doucet & Holenstein (2010).  One update replaces the chain's tree by a
draw from a conditional sequential Monte Carlo sampler whose particles grow trees level by level
from the root, one particle being held to the current tree.  It is a Gibbs-type kernel: it leaves
the target ``pi`` (of :mod:`bayestrees.inference.moves`) invariant for any number of particles,
and it can change every rule of the tree at once, which the local moves (grow, prune, change,
swap) cannot.

Notes
-----
Heap trees (node ``k`` has children ``2k+1``, ``2k+2``) are built in ``D = max_depth`` stages;
``T_t`` is a tree of depth at most ``t`` and ``T_t`` extends ``T_{t-1}`` by deciding, for every
leaf at depth ``t - 1`` (the *frontier*), whether it splits and with which rule.  Every tree has
exactly one such path (its truncations at depths ``0, 1, ..., D``), so a distribution over paths
is one over trees.

*Proposal* ``q(T_t | T_{t-1})``, data-informed (:func:`_proposal`): a frontier leaf ``s`` that
can split (depth below ``max_depth``, a valid rule among its rows) scores each valid rule
``(j, c)`` by ``r = log rho_s(j, c) + beta Delta_s(j, c)``, with ``rho`` the rule prior of the local
moves and ``Delta`` the gain of the split in a per-leaf log marginal likelihood; with
``Z_s = sum e^r`` it splits with probability ``p Z_s / (p Z_s + 1 - p)``, ``p = e^{ls(d)} /
(e^{ls(d)} + e^{lst(d)})`` from the prior's ``log_split`` and ``log_stop`` (Chipman's and the
depth-decay prior: their own split probability; the leaf-count prior: ``1 / (1 + phi)``), and
draws its rule with probability ``e^r / Z_s``.  Without a likelihood this is the prior.  (With
the prior as proposal, as in Lakshminarayanan et al., random splits seldom beat a single tree
fitted to strong data: on 300 California rows, 2,000 such updates left 16 chains at mean log
posteriors from -453 to -366, where the local moves sit at -355 to -342.)

*Intermediate targets* ``gamma_t(T_t) = beta log p(Y | T_t) + log p(T_t) - sum_F lst(d)``, the
sum over the frontier leaves of ``T_t`` that can split: the tempered target with the frontier's
stopping terms left out (they are not decided yet).  At ``t = D`` no frontier leaf can split and
``gamma_D = beta log p(Y | T) + log p(T)``, the chain's target.  With the Chipman or depth-decay
prior the prior's terms cancel against the proposal and the incremental weight
``gamma_t(T_t) - gamma_{t-1}(T_{t-1}) - log q(T_t | T_{t-1})`` is, per decided node,
``log(p Z_s + 1 - p)`` plus, for a split, the tempered marginal-likelihood gain less its
proposal score; with the leaf-count prior it also carries the prior's and the rule-count terms.
Trees with a node below ``min_leaf_rows`` get weight 0 (with the data-dependent rules, the proposal does
not offer the rules that would make one).  A prior that forces a split (a stop term of ``-inf``:
``prior.forces_splits``, the root of BET's depth-decay prior) has the frontier's terms left out of
the log prior (``moves.evaluate(open_depth=t)``) rather than subtracted, which would be
``-inf - (-inf)``.

*Conditional SMC* with ``N`` particles: particle 0 follows the current tree's path; at each stage
particles ``1..N-1`` draw their ancestors from the normalised weights (multinomial), particle 0
keeps ancestor 0; all are extended and weighted; at the end one particle is drawn from the final
weights.  The update is invariant for ``pi`` (Andrieu, Doucet & Holenstein 2010, Theorem 5).

Randomness: stage ``t`` reads the uniforms of one call of :func:`bayestrees.random_bits.uniform` on
``fold_in(key, t)``, every stage's drawn before the stages' loops.  Cost: a stage builds, per particle, the statistics of the frontier's rows
by (feature, code) (``2^(max_depth-1) * d * n_codes`` cells) and evaluates the particle's tree;
an update is ``max_depth`` stages of ``particles`` particles, tens of local moves' worth.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp

from .. import random_bits
from ..batching import scatter_add
from . import heap, intervals, proposals
from .heap import HeapTree
from .moves import (MCMCConfig, MCMCData, MoveStep, State, evaluate, growable, log_var_prob, report_cold_chain,
                    tempered_log_lik, whole_step_info)
from .tempering import TemperedStep

__all__ = ["PGibbsStep", "MixedStep", "pgibbs"]


def _split_probs(prior, depth, dt):
    """log p(split) and log p(stop) of the prior at ``depth``, normalised."""
    ls, lst = prior.log_split(depth).astype(dt), prior.log_stop(depth).astype(dt)
    norm = jnp.logaddexp(ls, lst)
    return ls - norm, lst - norm


def _gamma(tree: HeapTree, ev, beta, t, prior, cfg: MCMCConfig):
    """The intermediate target ``gamma_t`` (``-inf`` for a tree with an empty or too small node).

    With a prior that forces splits (``cfg.prior.forces_splits``: a stop term of ``-inf``), ``ev`` is
    evaluated with the frontier open (:func:`_evaluate`) and its log prior already leaves the
    frontier's stop terms out; otherwise they are subtracted here."""
    dt = ev.log_lik.dtype
    g = jnp.asarray(beta, dt) * ev.log_lik + ev.log_prior
    if not cfg.prior.forces_splits:
        depth = heap.depth_of(jnp.arange(cfg.capacity))
        front = growable(tree, ev, cfg) & (depth == t)
        g = g - jnp.sum(jnp.where(front, prior.log_stop(depth).astype(dt), 0.0))
    return jnp.where(ev.valid, g, -jnp.inf)


def _evaluate(trees: HeapTree, data: MCMCData, cfg: MCMCConfig, t):
    """:func:`~bayestrees.inference.moves.evaluate` of every particle's tree at stage ``t``: with a prior
    that forces splits, the leaves at depth ``t`` open (their stop terms, possibly ``-inf``, left out;
    at ``t = max_depth`` no leaf can split and the evaluation is the chain's own)."""
    open_depth = t if cfg.prior.forces_splits else None
    return jax.vmap(lambda tr: evaluate(tr, data, cfg, open_depth=open_depth))(trees)


class _Proposal(NamedTuple):
    """The proposal at the frontier of one particle, slots ``start + f`` for ``f < F``: ``log q`` of
    stopping, of splitting, and of each rule given a split (``(F, d, B)``, ``-inf`` where not valid).
    With features split by subsets, ``log_rule[f, j, 0]`` is variable ``j``'s whole share and
    ``log_subset`` ``(F, d)`` the log probability of one subset given it (``-|A| log 2``: fair bits);
    a draw of every category or none stops the node, and ``log_stop`` counts it."""

    start: jax.Array
    log_stop: jax.Array
    log_split: jax.Array
    log_rule: jax.Array
    log_subset: Any = None
    cats: Any = None          # int32 (F, d): the categories at each frontier node (with subsets)


def _leaf_score(tree: HeapTree, ev, cfg: MCMCConfig, n_max: int):
    """The per-leaf log marginal likelihood that scores a split in the proposal: ``stats (..., k) -> (...)``.

    Leaf models whose marginal is a product over leaves (``per_leaf_marginal``: Dirichlet, per-leaf
    Normal, Normal with a known variance) use their own, or their ``count_score(n_max, dtype)`` where
    they have one (the Dirichlet's: its class terms from a table of the counts up to ``n_max``, the
    rows; the proposal scores ``F d B`` candidate children a stage, and its ``K + 1`` ``gammaln`` per
    child were most of a regrowth's time).
    The common-variance model's is not; it uses the Normal likelihood with the leaf mean integrated
    out and the variance fixed at ``B / A``, the posterior scale of the variance given the
    particle's own tree (to first order the common-variance gain of a split).  Either way the
    proposal depends on the particle only.
    """
    lm_model = cfg.leaf_model
    if lm_model.per_leaf_marginal and hasattr(lm_model, "count_score"):
        return lm_model.count_score(n_max, ev.stats.dtype)
    if lm_model.per_leaf_marginal:
        return lambda a: lm_model.log_marginal(a[..., None, :], jnp.ones(a.shape[:-1] + (1,), bool))
    m0, k0, *_, A, B = lm_model._parts(ev.stats, tree.is_leaf())
    s2 = B / A

    def score(a):
        n, s_, ss = a[..., 0], a[..., 1], a[..., 2]
        kn = k0 + n
        ybar = s_ / jnp.maximum(n, 1e-12)
        q = jnp.maximum(ss - n * ybar * ybar, 0.0) + k0 * n * (ybar - m0) ** 2 / kn
        return 0.5 * (jnp.log(k0) - jnp.log(kn)) - q / (2.0 * s2)

    return score


def _front_width(cfg: MCMCConfig) -> int:
    """The widest frontier: the slots at depth ``max_depth - 1``."""
    return 2 ** max(cfg.max_depth - 1, 0)


def _stage_groups(max_depth: int):
    """The stages ``1 .. max_depth`` in loops of one frontier width each: ``[(first, last, width)]``.

    Stage ``t``'s frontier is the ``2^(t-1)`` slots at depth ``t - 1``, and the proposal's cost is
    proportional to the width it is computed over.  One loop at the widest frontier would cost
    ``max_depth * 2^(max_depth-1)`` slots per particle (192 at depth 6); the last two stages get
    their own width and the others share ``2^(max_depth-3)`` (80 slots at depth 6), for three
    compiled stage bodies instead of one.
    """
    D = max_depth
    if D <= 2:
        return [(t, t, 2 ** (t - 1)) for t in range(1, D + 1)]
    return [(1, D - 2, 2 ** (D - 3)), (D - 1, D - 1, 2 ** (D - 2)), (D, D, 2 ** (D - 1))]


def _proposal(tree: HeapTree, ev, t, beta, data: MCMCData, prior, cfg: MCMCConfig, F: int) -> _Proposal:
    """The data-informed proposal for the frontier (the slots at depth ``t - 1``) of one particle.

    A rule ``(j, c)`` at node ``s`` scores ``r = log rho_s(j, c) + beta * Delta_s(j, c)``: ``rho`` the
    rule prior of the local moves (``1 / (nvar nthr_j)``, or ``xi``-weighted), ``Delta`` the gain of
    the split in a per-leaf log marginal likelihood (the leaf model's log marginal of each node alone:
    exact for the Dirichlet and per-leaf Normal models, a per-leaf stand-in for the common-variance
    one).  With ``Z_s = sum_rules e^r`` the node splits with probability
    ``p Z_s / (p Z_s + 1 - p)`` (``p`` the prior's split probability) and draws its rule with
    probability ``e^r / Z_s``: the locally optimal proposal when the marginal likelihood is a
    product over leaves.  It depends on the data and on the particle, never on the chain's current
    tree, as conditional SMC requires.  Without a likelihood it is the prior.

    A feature split by subsets of its categories (``data.categories``) is proposed from its prior: its
    share ``rho_s(j)`` (no gain), then ``|A|`` fair bits, one per category of the node, as BART's moves
    draw them (:mod:`bayestrees.inference.proposals`); a draw of every category or none stops the
    node.  The weights carry the exact ``log q`` (:func:`_log_q`), so the update stays exact.
    """
    d, B = cfg.n_features, cfg.n_codes
    n = data.codes.shape[0]
    dt = ev.log_lik.dtype
    start = (2 ** (t - 1) - 1).astype(jnp.int32)
    pos = jnp.arange(F, dtype=jnp.int32)
    slots = start + pos
    depth = heap.depth_of(slots)
    live = data.weight > 0
    stats = data.row_stats * jnp.where(live, data.weight, 0.0)[:, None].astype(data.row_stats.dtype)
    k = stats.shape[-1]
    # statistics of every frontier node's rows by (feature, code): one scatter of the n * d pairs
    f_row = ev.leaf - start
    in_front = live & (f_row >= 0) & (f_row < F)
    cell = (jnp.where(in_front, f_row, F)[:, None] * d + jnp.arange(d)[None, :]) * B + jnp.clip(data.codes, 0, B - 1)
    if getattr(cfg.leaf_model, "one_hot_stats", False):
        # a row's statistics are one class's weight: scatter that scalar into its (cell, class); the
        # sums are those of the k-vectors' scatter (the other classes' adds are of zeros)
        cls = jnp.argmax(stats, -1).astype(jnp.int32)
        val = jnp.take_along_axis(stats, cls[:, None], -1)[:, 0]
        hist = scatter_add(jnp.zeros((F + 1) * d * B * k, stats.dtype), (cell * k + cls[:, None]).reshape(-1),
                           jnp.broadcast_to(val[:, None], (n, d)).reshape(-1)).reshape(-1, k)
    else:
        hist = scatter_add(jnp.zeros(((F + 1) * d * B, k), stats.dtype), cell.reshape(-1),
                           jnp.broadcast_to(stats[:, None, :], (n, d, k)).reshape(-1, k))
    left = jnp.cumsum(hist[:F * d * B].reshape(F, d, B, k), 2)
    total = jax.lax.dynamic_slice_in_dim(ev.stats, start, F).astype(stats.dtype)[:, None, None, :]
    lm = _leaf_score(tree, ev, cfg, n)
    gain = lm(left) + lm(total - left) - lm(total)
    lo = jax.lax.dynamic_slice_in_dim(ev.lo, start, F)
    hi = jax.lax.dynamic_slice_in_dim(ev.hi, start, F)
    nvar, nthr = heap.rule_counts(lo, hi)
    codes = jnp.arange(B)
    valid = (codes >= lo[:, :, None]) & (codes < hi[:, :, None])
    if cfg.min_leaf_rows > 1 and cfg.rules == "data":
        # rules that leave a child below min_leaf_rows make a tree of target 0: not proposed (the
        # regrowth of a sum's trees, rules="intervals", still proposes them and weighs them out)
        w_row = jnp.where(live, data.weight, 0.0).astype(stats.dtype)
        w_hist = scatter_add(jnp.zeros((F + 1) * d * B, stats.dtype), cell.reshape(-1),
                             jnp.broadcast_to(w_row[:, None], (n, d)).reshape(-1))
        n_left = jnp.cumsum(w_hist[:F * d * B].reshape(F, d, B), 2)
        n_node = n_left[:, :, -1:]
        valid = valid & (n_left >= cfg.min_leaf_rows) & (n_node - n_left >= cfg.min_leaf_rows)
    if data.var_weight is None:
        log_var = -jnp.log(jnp.maximum(nvar, 1).astype(dt))[:, None]
    else:
        log_var = log_var_prob(nthr[:, None, :], jnp.arange(d)[None, :], data.var_weight).astype(dt)   # (F, d)
    log_rho = log_var - jnp.log(jnp.maximum(nthr, 1).astype(dt))
    r = jnp.where(valid, log_rho[:, :, None] + jnp.asarray(beta, dt) * gain.astype(dt), -jnp.inf)
    cats = data.categories
    if cats is not None:   # a subset feature: its whole prior share in cell 0, the subset by fair bits
        cat = cats != 0
        share = jnp.where(nthr > 0, log_var, -jnp.inf)                                # (F, d)
        r = jnp.where(cat[None, :, None], jnp.where(codes[None, None, :] == 0, share[:, :, None], -jnp.inf), r)
    log_z = jax.nn.logsumexp(r.reshape(F, -1), -1)
    lps, lpst = _split_probs(prior, depth, dt)
    leaf = jax.lax.dynamic_slice_in_dim(tree.is_leaf(), start, F)
    can = (pos < 2 ** (t - 1)) & leaf & (depth < cfg.max_depth) & (nvar > 0)
    norm = jnp.logaddexp(lps + log_z, lpst)
    log_split = jnp.where(can, lps + log_z - norm, -jnp.inf)
    log_stop = jnp.where(can, lpst - norm, 0.0)
    log_rule = r - jnp.where(can, log_z, 0.0)[:, None, None]
    if cats is None:
        return _Proposal(start, log_stop, log_split, log_rule)
    n_cat = (nthr + 1).astype(dt)                                                      # |A| at the node
    log_subset = jnp.where(cat[None, :], -n_cat * jnp.log(2.0).astype(dt), 0.0)
    # every category or none: 2 of the 2^|A| draws, which stop the node.  A node that cannot split
    # (log_split = -inf: with min_leaf_rows > 1 no rule may be proposed, log_z = -inf) has no such
    # draw; its log_rule is -inf - (-inf), kept out
    share_q = jnp.where(jnp.isfinite(log_split)[:, None], log_rule[:, :, 0], -jnp.inf)
    extra = jax.nn.logsumexp(jnp.where(cat[None, :], share_q + jnp.log(2.0).astype(dt) + log_subset, -jnp.inf), -1)
    log_stop = jnp.where(can, jnp.logaddexp(log_stop, log_split + extra), log_stop)
    return _Proposal(start, log_stop, log_split, log_rule, log_subset,
                     jax.lax.dynamic_slice_in_dim(ev.cats, start, F))


def _extend(tree: HeapTree, prop: _Proposal, u, cfg: MCMCConfig, categories=None, u_cat=None):
    """Decide every frontier leaf of ``tree`` by ``prop``: ``u`` holds 2 uniforms per frontier slot
    (and ``u_cat`` one more, the fair bits of a subset, given ``categories``)."""
    S, d, B = cfg.capacity, cfg.n_features, cfg.n_codes
    F = prop.log_split.shape[0]
    split = jnp.log(u[:, 0]).astype(prop.log_split.dtype) < prop.log_split
    # the rule by the inverse distribution function over the (feature, code) pairs
    w = jnp.exp(jnp.where(jnp.isfinite(prop.log_split)[:, None], prop.log_rule.reshape(F, d * B), -jnp.inf))
    cdf = jnp.cumsum(w, -1)
    pick = jnp.minimum(jnp.sum(cdf < u[:, 1:2].astype(cdf.dtype) * cdf[:, -1:], -1), d * B - 1).astype(jnp.int32)
    split = split & (jnp.take_along_axis(w, pick[:, None], -1)[:, 0] > 0)
    var, thr = pick // B, pick % B
    if categories is not None:   # a subset feature: fair bits over the node's categories, all or none stops
        A = jnp.take_along_axis(prop.cats, var[:, None], -1)[:, 0]
        n_a = intervals.popcount(A)
        bits = jnp.minimum(jnp.floor(u_cat * jnp.exp2(n_a.astype(jnp.float32))).astype(jnp.int32), (1 << n_a) - 1)
        by_subset = categories[var] != 0
        split = split & (~by_subset | ((bits != 0) & (bits != (1 << n_a) - 1)))
        thr = jnp.where(by_subset, jax.vmap(proposals.deposit_bits)(bits, A), thr)
    put = lambda full, part: jax.lax.dynamic_update_slice_in_dim(full, part.astype(full.dtype), prop.start, 0)
    split_s = put(jnp.zeros(S, bool), split)
    return heap.grow_leaves(tree, split_s, put(tree.feature, var), put(tree.threshold, thr))


def _log_q(prop: _Proposal, new: HeapTree, cfg: MCMCConfig):
    """``log q(new | tree)``: the proposal's probability of the frontier decisions that made ``new``."""
    B, F = cfg.n_codes, prop.log_split.shape[0]
    cut = lambda a: jax.lax.dynamic_slice_in_dim(a, prop.start, F)
    split = (cut(new.feature) >= 0) & jnp.isfinite(prop.log_split)
    j = jnp.maximum(cut(new.feature), 0)
    code = jnp.clip(cut(new.threshold), 0, B - 1)
    if prop.log_subset is not None:   # a subset rule: its variable's cell 0, then the subset's fair bits
        by_subset = prop.log_subset[jnp.arange(F), j] < 0
        code = jnp.where(by_subset, 0, code)
        rule = prop.log_rule[jnp.arange(F), j, code] + prop.log_subset[jnp.arange(F), j]
    else:
        rule = prop.log_rule[jnp.arange(F), j, code]
    return jnp.sum(jnp.where(split, prop.log_split + rule, prop.log_stop))


def pgibbs(key, state: State, data: MCMCData, cfg: MCMCConfig):
    """One conditional SMC update of the chain's tree with ``cfg.particles`` particles.

    Returns ``(state, changed)``: the new state and whether its tree differs from the old one.
    """
    N, D, F_max = cfg.particles, cfg.max_depth, _front_width(cfg)
    if cfg.n_codes < 1:
        raise ValueError("particle Gibbs needs MCMCConfig.n_codes (the number of feature codes, a static bound)")
    prior = cfg.prior if data.prior is None else data.prior
    beta = state.beta
    ref = state.tree

    root = heap.truncate(ref, 0)
    trees = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (N,) + a.shape), root)
    evs = _evaluate(trees, data, cfg, 0)
    gam = jax.vmap(_gamma, in_axes=(0, 0, None, None, None, None))(trees, evs, beta, 0, prior, cfg)
    logw = jnp.zeros(N, gam.dtype)
    # every stage's uniforms (stage t's from fold_in(key, t)), drawn once before the stages' loops and
    # read by them: the hash is compiled once, not into each loop's consumers of it
    stages = jnp.arange(1, D + 1, dtype=jnp.int32)
    U = jax.lax.optimization_barrier(jax.vmap(
        lambda t: random_bits.open_uniform(random_bits.fold_in(key, t), ((N - 1) * N + N * F_max * 2,)))(stages))
    if data.categories is not None:
        UC = jax.lax.optimization_barrier(jax.vmap(
            lambda t: random_bits.uniform(random_bits.fold_in(key, D + 2 + t), (N, F_max)))(stages))

    def stage(t, carry, F):
        trees, evs, gam, logw = carry
        # the same uniforms whatever the stage's width: slot f of the frontier reads entries f
        u = U[t - 1]
        g = random_bits.gumbel(u[:(N - 1) * N].reshape(N - 1, N)) + logw
        anc = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.argmax(g, -1).astype(jnp.int32)])
        take = lambda a: a[anc]
        trees, evs, gam = jax.tree_util.tree_map(take, trees), jax.tree_util.tree_map(take, evs), gam[anc]
        props = jax.vmap(_proposal, in_axes=(0, 0, None, None, None, None, None, None))(
            trees, evs, t, beta, data, prior, cfg, F)
        ux = u[(N - 1) * N:].reshape(N, F_max, 2)[:, :F]
        if data.categories is None:
            new = jax.vmap(_extend, in_axes=(0, 0, 0, None))(trees, props, ux, cfg)
        else:   # the subsets' fair bits from uniforms of their own (the other draws as without subsets)
            uc = UC[t - 1][:, :F]
            new = jax.vmap(_extend, in_axes=(0, 0, 0, None, None, 0))(trees, props, ux, cfg, data.categories, uc)
        new = jax.tree_util.tree_map(lambda a, r: a.at[0].set(r), new, heap.truncate(ref, t))
        lq = jax.vmap(_log_q, in_axes=(0, 0, None))(props, new, cfg)
        new_evs = _evaluate(new, data, cfg, t)
        new_gam = jax.vmap(_gamma, in_axes=(0, 0, None, None, None, None))(new, new_evs, beta, t, prior, cfg)
        logw = jnp.where(jnp.isfinite(new_gam), new_gam - gam - lq, -jnp.inf)
        return new, new_evs, new_gam, logw

    carry = (trees, evs, gam, logw)
    for first, last, F in _stage_groups(D):
        carry = jax.lax.fori_loop(first, last + 1, partial(stage, F=F), carry)
    trees, evs, gam, logw = carry
    u = random_bits.open_uniform(random_bits.fold_in(key, D + 1), (N,))
    k = jnp.argmax(random_bits.gumbel(u) + logw)
    tree = jax.tree_util.tree_map(lambda a: a[k], trees)
    ev = jax.tree_util.tree_map(lambda a: a[k], evs)
    changed = jnp.any(tree.feature != ref.feature) | jnp.any(tree.threshold != ref.threshold)
    return State(tree=tree, ev=ev, beta=state.beta), changed


@dataclass(frozen=True)
class PGibbsStep:
    """Scheme "pgibbs": every step one particle Gibbs update of the whole tree (:func:`pgibbs`)."""

    cfg: MCMCConfig

    def __call__(self, key, state: State, data: MCMCData):
        new, changed = pgibbs(key, state, data, self.cfg)
        return new, whole_step_info("pgibbs", changed, new, self.cfg)


@dataclass(frozen=True)
class MixedStep:
    """Scheme "mixed": ``cfg.local_moves`` local moves, then one particle Gibbs regrowth of the tree.

    Each local move (:class:`bayestrees.inference.moves.MoveStep`) and the particle Gibbs update
    (:func:`pgibbs`) leaves the target invariant, and the number and order of the updates do not
    depend on the state, so their composition leaves it invariant: the step is an exact MCMC
    kernel.  The local moves are cheap and refine a tree; the regrowth proposes whole new trees
    and so leaves the modes that local moves cannot (an overgrown tree that only a chain of
    unlikely prunes would undo).

    Info: ``move`` is "mixed", ``accepted`` whether the tree changed in the step.
    """

    cfg: MCMCConfig

    def __call__(self, key, state: State, data: MCMCData):
        cfg = self.cfg
        k_moves, k_pg = jax.random.split(key)
        move = MoveStep(cfg)

        def body(i, carry):
            st, acc = carry
            st, info = move(random_bits.fold_in(k_moves, i), st, data)
            return st, acc | info.accepted

        st, moved = jax.lax.fori_loop(0, cfg.local_moves, body, (state, jnp.array(False)))
        new, changed = pgibbs(k_pg, st, data, cfg)
        return new, whole_step_info("mixed", moved | changed, new, cfg)


@dataclass(frozen=True)
class LadderMixedStep:
    """Scheme "mixed" over a ladder of temperatures: ``cfg.local_moves`` steps of the tempered ensemble
    of local moves (every replica one move, then one exchange of an adjacent pair:
    :class:`bayestrees.inference.tempering.TemperedStep`), then one particle Gibbs regrowth of the
    cold replica.

    Each part leaves the product of the replicas' tempered targets invariant (the regrowth is a
    Gibbs-type update of the cold replica's tree given its target, the others unchanged), and the
    order does not depend on the state, so the step is an exact kernel for the product and the cold
    replica's draws are the posterior's.  The hot replicas cross between modes by cheap local moves
    and hand them down by exchanges; the regrowth refreshes the cold tree as a whole.  State: the
    tempered ensemble's (a leading replica axis).  Info: the cold replica's, ``move`` "mixed".
    """

    cfg: MCMCConfig

    def __call__(self, key, state: State, data: MCMCData):
        cfg = self.cfg
        ladder = TemperedStep(MoveStep(cfg), len(cfg.temperatures), tempered_log_lik, report_cold_chain)
        k_moves, k_pg = jax.random.split(key)

        def body(i, carry):
            st, moved, swapped = carry
            st, info = ladder(random_bits.fold_in(k_moves, i), st, data)
            return st, moved | info.accepted, swapped | info.swap_accepted

        st, moved, swapped = jax.lax.fori_loop(0, cfg.local_moves, body, (state, jnp.array(False), jnp.array(False)))
        cold = jax.tree_util.tree_map(lambda a: a[0], st)
        new, changed = pgibbs(k_pg, cold, data, cfg)
        st = jax.tree_util.tree_map(lambda a, b: a.at[0].set(b), st, new)
        return st, whole_step_info("mixed", moved | changed, new, cfg)._replace(swap_accepted=swapped)
