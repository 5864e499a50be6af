"""Particle Gibbs for Bayesian CART: a conditional SMC update that regrows the whole tree.

Lakshminarayanan, Roy & Teh (2015), "Particle Gibbs for Bayesian Additive Regression Trees"
(AISTATS), after Andrieu, Doucet & Holenstein (2010).  One update replaces the chain's tree by a
draw from a conditional sequential Monte Carlo sampler whose particles grow trees level by level
from the root, one particle being held to the current tree.  It is a Gibbs-type kernel: it leaves
the target ``pi`` (of :mod:`bayestrees.inference.mcmc`) invariant for any number of particles,
and it can change every rule of the tree at once, which the local moves (grow, prune, change,
swap) cannot.

Notes
-----
Heap trees (node ``k`` has children ``2k+1``, ``2k+2``) are built in ``D = max_depth`` stages;
``T_t`` is a tree of depth at most ``t`` and ``T_t`` extends ``T_{t-1}`` by deciding, for every
leaf at depth ``t - 1`` (the *frontier*), whether it splits and with which rule.  Every tree has
exactly one such path (its truncations at depths ``0, 1, ..., D``), so a distribution over paths
is one over trees.

*Proposal* ``q(T_t | T_{t-1})``: every frontier leaf that can split (depth below ``max_depth``,
a valid rule among its rows) splits with probability ``p(d) = e^{ls(d)} / (e^{ls(d)} +
e^{lst(d)})``, with ``ls``, ``lst`` the prior's ``log_split`` and ``log_stop`` (Chipman's and the
depth-decay prior: the prior's own split probability; the leaf-count prior: ``1 / (1 + phi)``),
and draws its rule as the local moves do (variable uniform among the valid ones, or with
probability ``xi_j / sum_valid xi`` given ``var_weight``; threshold uniform among its valid codes).

*Intermediate targets* ``gamma_t(T_t) = beta log p(Y | T_t) + log p(T_t) - sum_F lst(d)``, the
sum over the frontier leaves of ``T_t`` that can split: the tempered target with the frontier's
stopping terms left out (they are not decided yet).  At ``t = D`` no frontier leaf can split and
``gamma_D = beta log p(Y | T) + log p(T)``, the chain's target.  With the Chipman or depth-decay
prior the prior's terms cancel against the proposal and the incremental weight
``gamma_t(T_t) - gamma_{t-1}(T_{t-1}) - log q(T_t | T_{t-1})`` is the tempered change of the
marginal likelihood, as in Lakshminarayanan et al.; with the leaf-count prior it also carries
the prior's and the rule-count terms.  Trees with a node below ``min_leaf_rows`` get weight 0.

*Conditional SMC* with ``N`` particles: particle 0 follows the current tree's path; at each stage
particles ``1..N-1`` draw their ancestors from the normalised weights (multinomial), particle 0
keeps ancestor 0; all are extended and weighted; at the end one particle is drawn from the final
weights.  The update is invariant for ``pi`` (Andrieu, Doucet & Holenstein 2010, Theorem 5).

Randomness: a stage draws its uniforms with one call of :func:`bayestrees.random_bits.uniform`
on ``fold_in(key, t)``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import random_bits
from ..tree import FREE, LEAF, Tree
from .mcmc import (
    MCMCConfig,
    MCMCData,
    State,
    _depth_of,
    _draw_rule_u,
    _gumbel,
    _log_rule_q,
    _rule_counts,
    _uniform,
    evaluate,
)

__all__ = ["pgibbs", "truncate"]


def truncate(tree: Tree, t) -> Tree:
    """``tree`` cut at depth ``t``: nodes deeper than ``t`` removed, nodes at depth ``t`` made leaves."""
    S = tree.left.shape[-1]
    depth = _depth_of(jnp.arange(S))
    keep = tree.is_used() & (depth <= t)
    inner = keep & (depth < t) & tree.is_internal()
    return tree._replace(
        left=jnp.where(keep, jnp.where(inner, tree.left, LEAF), FREE).astype(tree.left.dtype),
        right=jnp.where(keep, jnp.where(inner, tree.right, LEAF), FREE).astype(tree.right.dtype),
        feature=jnp.where(inner, tree.feature, -1).astype(tree.feature.dtype),
        threshold=jnp.where(inner, tree.threshold, 0).astype(tree.threshold.dtype),
        missing_left=jnp.where(inner, tree.missing_left, False),
        n_nodes=jnp.sum(keep).astype(tree.n_nodes.dtype))


def _split_probs(prior, depth, dt):
    """log p(split) and log p(stop) of the proposal at ``depth`` (the prior's, normalised)."""
    ls, lst = prior.log_split(depth).astype(dt), prior.log_stop(depth).astype(dt)
    norm = jnp.logaddexp(ls, lst)
    return ls - norm, lst - norm


def _can_split(tree: Tree, ev, cfg: MCMCConfig, depth):
    nvar, _ = _rule_counts(ev.lo, ev.hi)
    return tree.is_leaf() & (depth < cfg.max_depth) & (nvar > 0)


def _gamma(tree: Tree, ev, beta, t, prior, cfg: MCMCConfig):
    """The intermediate target ``gamma_t`` (``-inf`` for a tree with an empty or too small node)."""
    S = cfg.capacity
    depth = _depth_of(jnp.arange(S))
    dt = ev.log_lik.dtype
    front = _can_split(tree, ev, cfg, depth) & (depth == t)
    open_stop = jnp.sum(jnp.where(front, prior.log_stop(depth).astype(dt), 0.0))
    g = jnp.asarray(beta, dt) * ev.log_lik + ev.log_prior - open_stop
    return jnp.where(ev.valid, g, -jnp.inf)


def _extend(tree: Tree, ev, t, u, prior, cfg: MCMCConfig, var_weight):
    """Decide every frontier leaf (depth ``t - 1``) of ``tree``: ``u`` holds ``d + 2`` uniforms per slot."""
    S = cfg.capacity
    idx = jnp.arange(S, dtype=jnp.int32)
    depth = _depth_of(idx)
    lps, _ = _split_probs(prior, depth, ev.log_lik.dtype)
    can = _can_split(tree, ev, cfg, depth) & (depth == t - 1)
    split = can & (jnp.log(u[:, 0]).astype(lps.dtype) < lps)
    j, thr = jax.vmap(lambda uv, ut, s: _draw_rule_u(uv, ut, ev, s, var_weight))(u[:, 2:], u[:, 1], idx)
    par = jnp.maximum((idx - 1) // 2, 0)
    born = (idx > 0) & split[par]
    return tree._replace(
        left=jnp.where(split, 2 * idx + 1, jnp.where(born, LEAF, tree.left)).astype(tree.left.dtype),
        right=jnp.where(split, 2 * idx + 2, jnp.where(born, LEAF, tree.right)).astype(tree.right.dtype),
        feature=jnp.where(split, j, tree.feature).astype(tree.feature.dtype),
        threshold=jnp.where(split, thr, tree.threshold).astype(tree.threshold.dtype),
        n_nodes=(tree.n_nodes + 2 * jnp.sum(split)).astype(tree.n_nodes.dtype))


def _log_q(tree: Tree, ev, new: Tree, t, prior, cfg: MCMCConfig, var_weight):
    """``log q(new | tree)``: the proposal's probability of the frontier decisions that made ``new``."""
    S = cfg.capacity
    idx = jnp.arange(S, dtype=jnp.int32)
    depth = _depth_of(idx)
    lps, lpst = _split_probs(prior, depth, ev.log_lik.dtype)
    can = _can_split(tree, ev, cfg, depth) & (depth == t - 1)
    split = new.is_internal()
    lrule = jax.vmap(lambda s, j: _log_rule_q(ev, s, j, var_weight))(idx, jnp.maximum(new.feature, 0))
    return jnp.sum(jnp.where(can, jnp.where(split, lps + lrule, lpst), 0.0))


def pgibbs(key, state: State, data: MCMCData, cfg: MCMCConfig):
    """One conditional SMC update of the chain's tree with ``cfg.particles`` particles.

    Returns ``(state, changed)``: the new state and whether its tree differs from the old one.
    """
    N, S, D, d = cfg.particles, cfg.capacity, cfg.max_depth, cfg.n_features
    prior = cfg.prior if data.prior is None else data.prior
    beta = state.beta
    ref = state.tree
    ev_all = jax.vmap(evaluate, in_axes=(0, None, None))

    root = truncate(ref, 0)
    trees = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (N,) + a.shape), root)
    evs = ev_all(trees, data, cfg)
    gam = jax.vmap(_gamma, in_axes=(0, 0, None, None, None, None))(trees, evs, beta, 0, prior, cfg)
    logw = jnp.zeros(N, gam.dtype)

    def stage(t, carry):
        trees, evs, gam, logw = carry
        u = _uniform(random_bits.fold_in(key, t), ((N - 1) * N + N * S * (d + 2),))
        g = _gumbel(u[:(N - 1) * N].reshape(N - 1, N)) + logw
        anc = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.argmax(g, -1).astype(jnp.int32)])
        take = lambda a: a[anc]
        trees, evs, gam = jax.tree_util.tree_map(take, trees), jax.tree_util.tree_map(take, evs), gam[anc]
        ux = u[(N - 1) * N:].reshape(N, S, d + 2)
        new = jax.vmap(_extend, in_axes=(0, 0, None, 0, None, None, None))(trees, evs, t, ux, prior, cfg,
                                                                          data.var_weight)
        ref_t = truncate(ref, t)
        new = jax.tree_util.tree_map(lambda a, r: a.at[0].set(r), new, ref_t)
        lq = jax.vmap(_log_q, in_axes=(0, 0, 0, None, None, None, None))(trees, evs, new, t, prior, cfg,
                                                                         data.var_weight)
        new_evs = ev_all(new, data, cfg)
        new_gam = jax.vmap(_gamma, in_axes=(0, 0, None, None, None, None))(new, new_evs, beta, t, prior, cfg)
        logw = jnp.where(jnp.isfinite(new_gam), new_gam - gam - lq, -jnp.inf)
        return new, new_evs, new_gam, logw

    trees, evs, gam, logw = jax.lax.fori_loop(1, D + 1, stage, (trees, evs, gam, logw))
    u = _uniform(random_bits.fold_in(key, D + 1), (N,))
    k = jnp.argmax(_gumbel(u) + logw)
    tree = jax.tree_util.tree_map(lambda a: a[k], trees)
    ev = jax.tree_util.tree_map(lambda a: a[k], evs)
    internal = ref.is_internal()
    changed = jnp.any(tree.left != ref.left) | jnp.any(internal & ((tree.feature != ref.feature)
                                                                   | (tree.threshold != ref.threshold)))
    return State(tree, ev, state.beta), changed
