"""BART (Chipman, George & McCulloch 2010): a sum of trees as one ``init``/``step`` kernel.

The kernel is written for ONE chain over NamedTuple :class:`State`/:class:`Info` and run by
:func:`bayestrees.inference.loop.run_chains` (vmapped chains or threads).  A chain holds ``m``
heap trees (the layout of :mod:`bayestrees.inference.moves`), each tree's routing of the
training rows and node ranges, the running residual and the noise variance.

Model (on the response scaled to ``[-0.5, 0.5]``, or the probit latent scale)
-------------------------------------------------------------------------------
``y_i = sum_j g(x_i; T_j, M_j) + e_i``, ``e_i ~ N(0, sigma^2 / w_i)`` (``w_i`` known row weights,
1 by default); every tree ``T_j`` from the tree prior (a :mod:`bayestrees.priors` object; the
split rule drawn uniformly among the node's valid variables and thresholds, as in
:mod:`bayestrees.inference.moves`), every leaf value ``mu ~ N(0, sigma_mu^2)`` independently
(:class:`~bayestrees.leaves.KnownVarianceNormalLeaves` with ``tau2 = sigma_mu^2``),
``sigma^2 ~ nu lambda / chi2_nu``.  Binary outcomes (probit, Albert & Chib 1993):
``P(y_i = 1) = Phi(offset + f(x_i))`` through the latent ``z_i ~ N(offset + f(x_i), 1 / w_i)``,
``y_i = 1[z_i > 0]``, ``sigma = 1`` fixed.

One step (Bayesian backfitting, CGM 2010 section 3)
---------------------------------------------------
1. For ``j = 1 .. m`` in turn (a ``lax.scan`` over the trees), with the running residual
   ``R = y - sum_j g_j`` (``z - offset - sum_j g_j`` for probit):

   a. ``r = R + g_j`` (the partial residual: every tree but ``j``);
   b. one Metropolis-Hastings move of ``T_j`` (grow, prune, change or swap:
      :class:`bayestrees.inference.moves.MoveStep`) with ``y = r`` and ``M_j`` integrated out
      under the known-variance Normal leaf model;
   c. ``M_j`` drawn from its conjugate posterior given ``T_j`` and ``r``;
   d. ``R = r - g_j`` with the new tree.

   The residual is carried, never recomputed over all trees (each visit costs the routing of
   the rows through one changed subtree, a scatter of the rows into that tree's leaves and
   one of their codes into its node ranges: :func:`bayestrees.inference.moves.evaluate`).
2. Regression: ``sigma^2 ~ IG((nu + n_+) / 2, (nu lambda + sum_i w_i R_i^2) / 2)`` (``n_+``:
   rows with ``w_i > 0``), or fixed.  Probit: ``z_i`` from its truncated normal
   (:func:`truncated_normal`) and ``R`` moved by the change of ``z``.

Each tree's stored state is what does not depend on the residual (its rows' leaves, as int8
or int16 slot numbers; its node ranges and log prior), so step 1a-b recomputes only the leaf
statistics of the tree visited.  The kernel passes the move kernel row statistics
``[p_i, p_i r_i, 0, 0]`` (``p_i = w_i / sigma^2``): the sum of squares and the normalising term of
the Normal likelihood are the same for every tree and cancel in every acceptance ratio
(:class:`~bayestrees.leaves.KnownVarianceNormalLeaves`, Notes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, ndtr, ndtri

from ... import random_bits
from ...batching import take
from ...leaves import leaf_stats
from ...tree import FREE, LEAF, Tree
from .. import heap as H
from .. import moves as M
from ..loop import Kernel

__all__ = ["BARTData", "KernelConfig", "State", "Info", "Draw", "build_kernel", "collect", "truncated_normal",
           "expand_trees", "sum_of_trees", "leaf_dtype"]


class BARTData(NamedTuple):
    """Training data of the kernel (every value traced: fits that differ only in them share a compilation).

    codes : int32 (n, d)  feature codes (no missing values)
    y : float (n,)  the scaled response (regression) or the 0/1 labels (probit)
    weight : float (n,)  known row weights ``w_i`` (noise sd ``sigma / sqrt(w_i)``; 0: no likelihood)
    rows : float (n,)  1 for a data row, 0 for padding (the moves' ``MCMCData.weight``: nodes must hold rows)
    nu, nu_lam : float ()  the inverse-chi2 prior of ``sigma^2``: ``nu`` and ``nu * lambda``
    sigma2 : float ()  the starting (or, when not sampled, the fixed) noise variance
    offset : float ()  probit offset ``Phi^-1(mean y)`` (0 for regression)
    prior : the tree prior with traced values (:func:`bayestrees.priors.traced_params`)
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


@dataclass(frozen=True)
class KernelConfig:
    """Static settings of the kernel (hashable: one compilation per setting and data shape).

    mcmc : M.MCMCConfig (the prior's kind, ``KnownVarianceNormalLeaves(1, sigma_mu^2)``, max_depth,
        move probabilities; scheme "moves")
    m : number of trees
    probit : binary outcomes through the probit latent variables
    sample_sigma : draw ``sigma^2`` (regression); False keeps ``BARTData.sigma2``
    """

    mcmc: Any
    m: int
    probit: bool = False
    sample_sigma: bool = True

    def __post_init__(self):
        if self.mcmc.scheme != "moves":
            raise ValueError("BART's tree step is one move per tree (MCMCConfig.scheme 'moves')")
        if self.probit and self.sample_sigma:
            raise ValueError("probit BART has sigma = 1 fixed (sample_sigma=False)")


def leaf_dtype(capacity: int):
    """The smallest signed integer type that holds a slot number below ``capacity``."""
    return jnp.int8 if capacity <= 128 else jnp.int16 if capacity <= 32768 else jnp.int32


class State(NamedTuple):
    """One chain.

    tree : Tree, batch (m,): heap trees; ``value`` the current leaf values
    leaf : int8/int16 (m, n)  each training row's leaf slot in each tree
    lo, hi : int32 (m, S, d)  node code ranges (:func:`bayestrees.inference.heap.code_ranges`)
    count : float (m, S)  rows per node
    log_prior : float (m,)  each tree's log prior (with its rules)
    resid : float (n,)  the running residual ``y - sum_j g_j`` (probit: ``z - offset - sum_j g_j``)
    sigma2 : float ()  noise variance
    z : float (n,)  probit latent minus the offset (regression: the scaled response, unchanged)
    """

    tree: Tree
    leaf: jax.Array
    lo: jax.Array
    hi: jax.Array
    count: jax.Array
    log_prior: jax.Array
    resid: jax.Array
    sigma2: jax.Array
    z: jax.Array


class Info(NamedTuple):
    """What one step did, summed over the ``m`` tree moves."""

    proposed: jax.Array      # int32 (4,): possible moves per type (grow, prune, change, swap)
    accepted: jax.Array      # int32 (4,): accepted moves per type
    at_max_depth: jax.Array  # int32: trees with a leaf at max_depth that could otherwise split


class Draw(NamedTuple):
    """What is kept per draw: the trees compactly and the function at the training rows.

    feature : int8/int16 (m, S)  split variable of each internal slot, -1 elsewhere
    threshold : codes' dtype (m, S)  split code (0 where not internal)
    value : float32 (m, S)  leaf values (0 elsewhere), scaled response / latent units
    sigma : ()  noise sd (scaled units; 1 for probit)
    fit : float32 (n,)  ``sum_j g_j(x_i)`` at the training rows (from the running residual)
    lp : ()  log joint density ``log p(y, T, M, sigma)`` (scaled units, up to a constant)
    """

    feature: jax.Array
    threshold: jax.Array
    value: jax.Array
    sigma: jax.Array
    fit: jax.Array
    lp: jax.Array


def truncated_normal(u, mean, sd, positive):
    """``N(mean, sd^2)`` truncated to ``(0, inf)`` where ``positive``, to ``(-inf, 0)`` elsewhere, from uniforms ``u``.

    With ``s = +1`` (positive) or ``-1`` and ``a = -s mean / sd``, ``T ~ N(0, 1) | T > a`` is
    ``-Phi^-1(u Phi(-a))`` (inverse distribution function in the lower tail, exact in float32 for
    ``a <= 8``); beyond, the tail ``a + E / a``, ``E ~ Exp(1)`` (relative error below ``1 / a^2``).
    The draw is ``mean + s sd T``.
    """
    s = jnp.where(positive, 1.0, -1.0).astype(mean.dtype)
    a = -s * mean / sd
    inner = -ndtri(u * ndtr(-jnp.minimum(a, 8.0)))
    tail = a - jnp.log(u) / jnp.maximum(a, 1.0)
    t = jnp.maximum(jnp.where(a > 8.0, tail, inner), a)
    return mean + s * sd * t


def _root_state(cfg: KernelConfig, data: BARTData, dtype):
    """The root leaf, its evaluation on the data and the stacked state of ``m`` such trees."""
    mc = cfg.mcmc
    root = M.root_tree(mc, dtype)
    rs = jnp.zeros((data.codes.shape[0], 4), dtype)
    ev = M.evaluate(root, M.MCMCData(data.codes, data.y, rs, data.rows, prior=data.prior), mc)
    stack = lambda a: jnp.broadcast_to(a, (cfg.m,) + a.shape)  # noqa: E731
    return (jax.tree_util.tree_map(stack, root), stack(ev.leaf.astype(leaf_dtype(mc.capacity))), stack(ev.lo),
            stack(ev.hi), stack(ev.count), stack(ev.log_prior))


@dataclass(frozen=True)
class _Init:
    cfg: KernelConfig
    dtype: Any

    def __call__(self, key, data: BARTData) -> State:
        dt = self.dtype
        tree, leaf, lo, hi, count, lprior = _root_state(self.cfg, data, dt)
        y = jnp.asarray(data.y, dt)
        if self.cfg.probit:  # z from its conditional given f = 0
            u = random_bits.open_uniform(key, y.shape).astype(dt)
            sd = 1.0 / jnp.sqrt(jnp.where(data.weight > 0, data.weight, 1.0))
            eta = jnp.broadcast_to(jnp.asarray(data.offset, dt), y.shape)
            z = jnp.where(data.weight > 0, truncated_normal(u, eta, sd, y > 0.5), eta) - data.offset
        else:
            z = y
        return State(tree, leaf, lo, hi, count, lprior, z, jnp.asarray(data.sigma2, dt), z)


@dataclass(frozen=True)
class _Step:
    """One step: a move and a leaf draw for every tree in turn, then ``sigma^2`` (or the probit ``z``)."""

    cfg: KernelConfig

    def __call__(self, key, state: State, data: BARTData):
        cfg = self.cfg
        mc = cfg.mcmc
        S = mc.capacity
        dt = state.resid.dtype
        ldt = state.leaf.dtype
        k_trees, k_last = random_bits.split(key)
        prec = (data.weight / state.sigma2).astype(dt)
        zero = jnp.zeros_like(prec)
        one = jnp.ones((), dt)
        move = M.MoveStep(mc)

        def visit(R, xs):
            k, tree, leaf, lo, hi, count, lprior = xs
            k_move, k_leaf = random_bits.split(k)
            leaf = leaf.astype(jnp.int32)
            r = R + take(tree.value[:, 0], leaf)
            rs = jnp.stack([prec, prec * r, zero, zero], -1)
            stats = leaf_stats(leaf, rs, S, data.rows)
            ev = M.Eval(leaf, stats, lo, hi, count, mc.leaf_model.log_marginal(stats, tree.is_leaf()), lprior,
                        jnp.array(True))
            md = M.MCMCData(data.codes, r, rs, data.rows, prior=data.prior)
            st, info = move(k_move, M.State(tree, ev, one), md)
            is_leaf = st.tree.is_leaf()
            draw = mc.leaf_model.draw(k_leaf, st.ev.stats, is_leaf)
            value = jnp.where(is_leaf[:, None], draw.value, 0.0).astype(tree.value.dtype)
            R = r - take(value[:, 0], st.ev.leaf)
            new = (st.tree._replace(value=value), st.ev.leaf.astype(ldt), st.ev.lo, st.ev.hi, st.ev.count,
                   st.ev.log_prior)
            kind = jax.nn.one_hot(info.move, 4, dtype=jnp.int32)
            return R, (new, kind * info.ok, kind * info.accepted, info.at_max_depth)

        xs = (random_bits.split(k_trees, cfg.m), state.tree, state.leaf, state.lo, state.hi, state.count,
              state.log_prior)
        R, (new, proposed, accepted, at_max) = jax.lax.scan(visit, state.resid, xs)
        tree, leaf, lo, hi, count, lprior = new
        sigma2, z = state.sigma2, state.z
        if cfg.probit:
            f = state.z - R
            u = random_bits.open_uniform(k_last, R.shape).astype(dt)
            sd = 1.0 / jnp.sqrt(jnp.where(data.weight > 0, data.weight, 1.0))
            eta = f + data.offset
            z = jnp.where(data.weight > 0, truncated_normal(u, eta, sd, data.y > 0.5), eta) - data.offset
            R = z - f
        elif cfg.sample_sigma:
            live = (data.weight > 0) & (data.rows > 0)
            a = 0.5 * (data.nu + jnp.sum(live))
            b = 0.5 * (data.nu_lam + jnp.sum(jnp.where(live, data.weight * R * R, 0.0)))
            sigma2 = (b / random_bits.gamma(k_last, a.astype(jnp.float32), dtype=dt)).astype(dt)
        info = Info(jnp.sum(proposed, 0), jnp.sum(accepted, 0), jnp.sum(at_max).astype(jnp.int32))
        return State(tree, leaf, lo, hi, count, lprior, R, sigma2, z), info


def _log_joint(state: State, data: BARTData, cfg: KernelConfig):
    """``log p(y | f, sigma) + sum_j [log p(T_j) + log p(M_j)] + log p(sigma^2)``, up to a constant."""
    dt = state.resid.dtype
    tau2 = jnp.asarray(cfg.mcmc.leaf_model.tau2, dt)
    is_leaf = state.tree.is_leaf()
    mu = state.tree.value[..., 0]
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
    return (ll + jnp.sum(state.log_prior) + lp_leaves + lp_sigma).astype(dt)


@dataclass(frozen=True)
class collect:  # noqa: N801 (a function-like callable, hashable by its config)
    """``collect(key, state, data)`` for :func:`~bayestrees.inference.loop.run_chains`: a :class:`Draw`.

    ``threshold_dtype`` is the codes' dtype (uint8 up to 255 bins per feature).
    """

    cfg: KernelConfig
    feature_dtype: Any = jnp.int8
    threshold_dtype: Any = jnp.uint8

    def __call__(self, key, state: State, data: BARTData) -> Draw:
        t = state.tree
        internal = t.is_internal()
        feature = jnp.where(internal, t.feature, -1).astype(self.feature_dtype)
        threshold = jnp.where(internal, t.threshold, 0).astype(self.threshold_dtype)
        value = jnp.where(t.is_leaf(), t.value[..., 0], 0.0).astype(jnp.float32)
        fit = (state.z - state.resid).astype(jnp.float32)
        return Draw(feature, threshold, value, jnp.sqrt(state.sigma2), fit, _log_joint(state, data, self.cfg))


def build_kernel(cfg: KernelConfig, dtype=jnp.float32) -> Kernel:
    """The BART ``init``/``step`` pair for one chain (hashable by ``cfg``).

    ``init(key, data)`` starts every tree at the root leaf with value 0 (so ``R = y``; probit: ``z``
    drawn given ``f = 0``) and ``sigma^2 = data.sigma2``; ``step(key, state, data)`` is the step of
    the module docstring.
    """
    M.check_move_probs(cfg.mcmc)
    return Kernel(_Init(cfg, jnp.dtype(dtype)), _Step(cfg))


# ---------------------------------------------------------------------------------------------
# the kept draws as trees, and the sum of trees at new rows
# ---------------------------------------------------------------------------------------------
def expand_trees(feature, threshold, value, xp=np):
    """Heap :class:`~bayestrees.tree.Tree` arrays from the compact draws (any leading axes).

    ``left``/``right`` are the heap children of an internal slot, ``LEAF`` for a used slot that
    is not internal, ``FREE`` for the rest; ``depth`` the heap depth; ``missing_left``,
    ``weight`` and ``count`` are zeros (BART's draws do not keep rows per node), broadcast views
    with numpy (no memory).  ``left``/``right`` are int8 up to 127 slots (``max_depth <= 5``), int16 beyond.
    """
    feature = xp.asarray(feature)
    S = feature.shape[-1]
    idx = xp.arange(S)
    internal = feature >= 0
    parent = xp.maximum((idx - 1) // 2, 0)
    used = (idx == 0) | internal[..., parent]
    ldt = np.dtype(np.int8 if S <= 127 else np.int16 if S <= 32767 else np.int32)
    left = xp.where(internal, (2 * idx + 1).astype(ldt), xp.where(used, LEAF, FREE).astype(ldt)).astype(ldt)
    right = xp.where(internal, (2 * idx + 2).astype(ldt), xp.where(used, LEAF, FREE).astype(ldt)).astype(ldt)
    depth = np.asarray(H.depth_of(np.arange(S))).astype(np.int8)
    shape = feature.shape
    z = lambda dt: np.broadcast_to(np.zeros((), dt), shape)  # noqa: E731
    return Tree(feature=feature, threshold=xp.asarray(threshold), left=left, right=right, missing_left=z(bool),
                value=xp.asarray(value)[..., None], weight=z(np.float32), count=z(np.int8),
                depth=np.broadcast_to(depth, shape), n_nodes=xp.sum(used, -1).astype(np.int16))


def _route_compact(feature, threshold, codes, max_depth: int):
    tree = Tree(feature=feature.astype(jnp.int32), threshold=threshold.astype(jnp.int32),
                left=jnp.where(feature >= 0, 0, LEAF), right=None, missing_left=None, value=None, weight=None,
                count=None, depth=None, n_nodes=None)
    return H.route(tree, codes, max_depth)


@jax.jit
def _sum_block(feature, threshold, value, codes):
    """``sum_j value_j[leaf_j(x)]`` for a block of draws: (B, m, S) arrays, codes (n, d) -> (B, n)."""
    max_depth = feature.shape[-1].bit_length() - 1

    def one_draw(args):
        f, t, v = args

        def add(acc, tree):
            fj, tj, vj = tree
            return acc + take(vj, _route_compact(fj, tj, codes, max_depth)), None

        acc, _ = jax.lax.scan(add, jnp.zeros(codes.shape[0], jnp.float32), (f, t, v))
        return acc

    return jax.lax.map(one_draw, (feature, threshold, value))


def sum_of_trees(feature, threshold, value, codes, *, block_rows: int = 65536, block_draws: int | None = None):
    """The sum of each draw's trees at coded rows: ``(..., n)`` float32 for draws ``(..., m, S)``.

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
            out[sl, r0:r0 + c.shape[0]] = np.asarray(_sum_block(fb, tb, vb, c))[: sl.stop - sl.start]
    return out.reshape(lead + (n,))
