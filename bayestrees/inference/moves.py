"""Metropolis-Hastings tree moves on heap trees (Chipman, George & McCulloch 1998).

The shared tree-MCMC core: Bayesian CART (:mod:`bayestrees.inference.bcart`) runs it as its
sampler, BET (:mod:`bayestrees.inference.bet`) sweeps its mixture's trees with it, and particle
Gibbs (:mod:`bayestrees.inference.pgibbs`) evaluates its trees with it.  It lives beside the
family rooms, not in one, so that every family that moves trees imports it from the shared layer.

The sampler is a pure ``init``/``step`` pair for ONE chain over NamedTuple
:class:`State` and :class:`Info` (run many chains with
:func:`bayestrees.inference.loop.run_chains`).  Trees use the heap layout of
the shared :class:`~bayestrees.inference.heap.HeapTree` (node ``k`` has children ``2k+1``,
``2k+2``), so a tree's slots are a function of its shape (one labelling per
tree: the chain's target over labelled trees is the target over trees) and
the capacity ``2^(max_depth+1) - 1`` is the explicit depth limit.

Target
------
``log pi(T) = log p(Y | T) + log p(T)`` on trees whose nodes all hold at least
one training row (weighted rows: weight > 0), with the leaf parameters
integrated out by the leaf model (:mod:`bayestrees.leaves`).  Rule
probabilities at a node use the node's rows: a variable is *valid* when its
codes in the node are not all equal; the valid thresholds of variable ``j``
are the codes ``t`` with ``lo_j <= t < hi_j`` (``lo``/``hi`` the smallest and
largest code of the node's rows), every one of which leaves both children
non-empty.

* Priors with ``rule_in_prior`` (Chipman, depth-decay): ``log p(T) =
  sum_internal [log p_split(d) - log nvar - log nthr_j] + sum_leaves log p_stop(d)``,
  with nodes at ``max_depth`` forced to be leaves (the prior truncated there,
  explicitly: ``Info.at_max_depth`` reports a tree with a leaf at the limit
  that could otherwise split).
* An unordered categorical variable (``MCMCData.categories``) splits by subsets of its
  categories: with ``P`` the categories of the node's rows, it is valid when ``|P| >= 2`` and has
  ``2^|P| - 2`` rules (the nonempty proper subsets of ``P`` sent left; Chipman, George & McCulloch
  1998), counted in place of ``nthr_j``; a category the node's rows do not hold goes right, and a
  tree whose rule sends such a category left is outside the support (one rule per partition).
* :class:`~bayestrees.priors.LeafCountPrior` (the BCART-PCFG prior) puts
  ``phi^-leaves`` on each distinct *partition tree* once.  Many (variable,
  threshold) rules give one partition of a node's rows; the chain runs on rule
  trees with target ``pi(T_partition) / prod_internal m(node)``, where ``m`` is
  the number of rules giving the node's partition, so that the chain's marginal
  over partition trees is the PCFG posterior exactly.  With the node's children
  ``l``, ``r`` and per-feature code ranges,
  ``m = sum_j [max(0, lo_r,j - hi_l,j) + max(0, lo_l,j - hi_r,j)]``.

Moves (one per step, types drawn with ``move_probs``)
------------------------------------------------------
Every move builds a proposal ``T'``, evaluates ``log pi(T')`` in full (routing
of the rows, leaf statistics, node ranges) and accepts with probability
``min(1, pi(T') q(T | T') / (pi(T) q(T' | T)))``.  Impossible moves (no
growable leaf, a stump to prune, ...) are masked no-ops with ``Info.ok = False``.

Notes
-----
The proposals and their ratios are those of :mod:`bayestrees.inference.proposals` (its Notes), with
the node's ranges from its rows; a prune's reverse grow sees the same ranges at ``s`` in ``T`` and
``T'`` (its rows do not change), and so does a change.

The systematic sweep (:func:`sweep`) visits the slots in order, updating every
slot that holds a node when it is reached (nodes grown earlier in the same sweep
included), and updates its split flag and rule by the same Metropolis-Hastings
ratios, with the node fixed rather than drawn (a leaf proposes a split; a node
whose children are leaves proposes, with probability 1/2 each, to become a leaf
or to change its rule; any other internal node proposes a new rule).  Each
update leaves ``pi`` invariant, so their composition does.

Randomness: a step draws one vector of uniforms (:func:`bayestrees.random_bits.open_uniform`) and every decision reads its
own entries (Gumbel variates for uniform choices, the inverse distribution function for a
threshold, ``log u < log a`` for acceptance), so the compiled step holds one random-bit generator.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import random_bits
from ..leaves import LeafDraw, leaf_stats
from ..tree import Tree
from . import heap
from .heap import HeapTree
from . import intervals
from . import proposals
from .loop import Kernel
from .metropolis import accept
from .tempering import check_temperatures, tempered

__all__ = ["MCMCConfig", "MCMCData", "State", "Info", "Eval", "Draw", "MOVES", "SCHEMES", "STEP_KINDS", "evaluate",
           "build_kernel", "make_kernel", "MoveStep", "SweepStep", "RootInit", "whole_step_info", "sweep", "growable", "node_masks", "log_var_prob", "collect", "root_tree"]

#: move types, in the order of ``move_probs`` (a 4-tuple leaves rotate out)
MOVES = proposals.MOVE_NAMES
#: what one step does: one random move, a systematic sweep over the nodes, or a particle Gibbs update
SCHEMES = ("moves", "sweep", "pgibbs", "mixed")
#: ``Info.move`` of every kind of step: the first four move types, the sweep, the particle Gibbs update
#: and the mixed step, then the rotation (added last, so that the former kinds keep their codes)
STEP_KINDS = MOVES[:4] + ("sweep", "pgibbs", "mixed") + MOVES[4:]
#: ``Info.move`` of each move type, in the order of ``MOVES``
_MOVE_KIND = tuple(STEP_KINDS.index(name) for name in MOVES)


@dataclass(frozen=True)
class MCMCConfig:
    """Static settings of the sampler (hashable: one compilation per setting and data shape).

    prior : a :mod:`bayestrees.priors` object
    leaf_model : a :mod:`bayestrees.leaves` model
    max_depth : deepest level a leaf may sit at
    move_probs : probabilities of grow, prune, change, swap and optionally rotate (grow and prune must
        be equal; a rotation lifts a node above its parent where both split the same variable, every
        leaf keeping its rows: :func:`bayestrees.inference.proposals.rotate`)
    n_features : d
    scheme : "moves" (a step is one move of a random type) or "sweep" (a step is one systematic
        sweep over the nodes, :func:`sweep`)
    temperatures : inverse temperatures ``(1, b_1, ...)``, decreasing: with more than one, every
        chain is a parallel-tempering ensemble (one replica per temperature, replica 0 the
        posterior) and each step swaps one random adjacent pair by Metropolis-Hastings
    min_leaf_rows : every used node must hold at least this much row weight (default 1: a node
        must hold rows, ``weight > 0``); BET's ``q``
    particles : particles of the conditional SMC update of ``scheme="pgibbs"``
        (:mod:`bayestrees.inference.pgibbs`; at least 2)
    n_codes : number of feature codes (codes are ``0 .. n_codes - 1``), a static bound that
        ``scheme="pgibbs"`` needs for its per-node histograms (0: not given)
    local_moves : with ``scheme="mixed"``, the local moves made before each particle Gibbs
        regrowth in one step (:class:`bayestrees.inference.pgibbs.MixedStep`)
    subset_columns : the columns that ``MCMCData.categories`` splits by subsets, a static hint (default
        ``()``: every column is looked at): with the data-dependent rules the categories of every
        node's rows are gathered for these columns alone
    rules : "data" (default: the rule prior on the codes of the node's own rows, the module
        docstring) or "intervals" (the ancestor-interval rule prior of the BART R packages:
        :mod:`bayestrees.inference.intervals`; needs ``MCMCData.code_lo``/``code_hi`` and a prior
        with the rule in it)
    """

    prior: Any
    leaf_model: Any
    max_depth: int
    n_features: int
    move_probs: tuple = (0.25, 0.25, 0.4, 0.1)
    scheme: str = "moves"
    temperatures: tuple = (1.0,)
    min_leaf_rows: int = 1
    particles: int = 10
    n_codes: int = 0
    local_moves: int = 50
    rules: str = "data"
    subset_columns: tuple = ()

    def __post_init__(self):
        if self.rules not in ("data", "intervals"):
            raise ValueError(f"rules must be 'data' or 'intervals', got {self.rules!r}")
        if self.rules == "intervals" and not self.prior.rule_in_prior:
            raise ValueError("the interval rule prior needs a prior with the rule in it (ChipmanPrior, DepthDecayPrior)")
        check_temperatures(self.temperatures)
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be 'moves' (one random move per step), 'sweep' (every node per step), "
                             f"'pgibbs' (the whole tree regrown by conditional SMC per step) or 'mixed' (local moves, "
                             f"then a particle Gibbs regrowth, per step), got {self.scheme!r}")
        if isinstance(self.local_moves, bool) or not isinstance(self.local_moves, int) or self.local_moves < 0:
            raise ValueError(f"local_moves must be an integer >= 0, got {self.local_moves!r}")
        if isinstance(self.particles, bool) or not isinstance(self.particles, int) or self.particles < 2:
            raise ValueError(f"particles must be an integer >= 2, got {self.particles!r}")

    @property
    def capacity(self) -> int:
        return heap.capacity(self.max_depth)

    @property
    def canonical(self) -> bool:
        """Rules not in the prior: the target counts each partition tree once."""
        return not self.prior.rule_in_prior


class MCMCData(NamedTuple):
    """Training data for the sampler.

    codes : int32 (n, d)  feature codes (no missing values)
    y : (n,) responses (float) or class codes (int32)
    row_stats : float (n, k)  ``leaf_model.row_stats(y)``
    weight : float (n,)  row weights (0 for padding rows or rows outside a cluster)
    var_weight : float (d,), optional  split-variable weights ``xi`` (BET): the rule prior and the
        sweep's proposal pick variable ``j`` with probability ``xi_j / sum_valid xi`` among the
        node's valid variables (default None: uniform, ``1 / nvar``); honoured by
        :func:`evaluate` and :func:`sweep` (not by the random-move scheme)
    prior : the prior with traced parameters (:func:`bayestrees.priors.traced_params`), optional:
        its values replace those of ``MCMCConfig.prior`` (which then only names the kind), so fits
        that differ only in the prior's values share one compilation (default None: the config's)
    code_lo, code_hi : int32 (d,), optional  the root's interval of every feature, for
        ``MCMCConfig.rules == "intervals"``
    categories : int32 (d,), optional  the unordered features' root category masks (0 for an ordered
        one: :mod:`bayestrees.inference.intervals`), split by subsets: a rule's threshold is the mask of
        the categories it sends left (module docstring); not with the leaf-count prior
    """

    codes: jax.Array
    y: jax.Array
    row_stats: jax.Array
    weight: jax.Array
    var_weight: Any = None
    prior: Any = None
    code_lo: Any = None
    code_hi: Any = None
    categories: Any = None


class Eval(NamedTuple):
    """Everything the sampler knows about a tree on the data."""

    leaf: jax.Array        # int32 (n,): slot of each row's leaf
    stats: jax.Array       # float (S, k): leaf statistics
    lo: jax.Array          # int32 (S, d): smallest code of the node's rows (big when empty)
    hi: jax.Array          # int32 (S, d): largest code (-1 when empty)
    count: jax.Array       # float (S,): weight of the node's rows
    log_lik: jax.Array     # log p(Y | T)
    log_prior: jax.Array   # log p(T) (or the canonical target's prior part)
    valid: jax.Array       # every used node holds rows
    cats: Any = None       # int32 (S, d): the categories at each node of the unordered variables
                           # (given MCMCData.categories: those of its rows, or with the interval rule
                           # prior those its ancestors' rules let through); None without them


class State(NamedTuple):
    """The state of one chain: the tree and its evaluation on the data (leaf parameters are integrated out).

    ``beta`` is the chain's inverse temperature: it targets ``p(Y | T)^beta p(T)`` (1 for the
    posterior; below 1 only for the helper replicas of parallel tempering).
    """

    tree: HeapTree
    ev: Eval
    beta: Any = 1.0


class Draw(NamedTuple):
    """What is kept per draw (:func:`collect`): the tree with drawn leaf parameters and what follows from it."""

    tree: Tree             # ``value``: drawn leaf parameters; ``weight``/``count``: rows per node
    sigma: jax.Array       # float (S,): drawn noise sd per slot (0 for classes)
    leaf: jax.Array        # int32 (n,): the slot of each training row's leaf
    log_lik: jax.Array     # float (n,): pointwise log p(y_i | tree, drawn leaf parameters)
    lp: jax.Array          # log pi(T), up to a constant

    @property
    def mu(self) -> np.ndarray:
        """float (..., n, V): the drawn function at the training rows, read off the stored draws.

        Gathered on the host (numpy): inside a compiled program XLA may fuse a copy of the draw's
        arithmetic into the gather and round it differently, so ``mu`` could differ from the
        tree's leaf value by an ulp.  Here it equals that value exactly.
        """
        value = np.asarray(self.tree.value)
        return np.take_along_axis(value, np.asarray(self.leaf)[..., None], -2)


class Info(NamedTuple):
    """What one step did."""

    move: jax.Array         # int32: index into STEP_KINDS (a move type, the sweep or a particle Gibbs update)
    ok: jax.Array           # the move was possible
    accepted: jax.Array
    log_ratio: jax.Array    # log acceptance ratio (before min(0, .))
    lp: jax.Array           # log pi(T) after the step
    at_max_depth: jax.Array  # a leaf at the depth limit could otherwise split
    swap_accepted: Any = False  # parallel tempering: the replica swap of this step was accepted


# ---------------------------------------------------------------------------------------------
# evaluation of a tree
# ---------------------------------------------------------------------------------------------
@partial(jax.jit, static_argnames=("cfg",))
def evaluate(tree: HeapTree, data: MCMCData, cfg: MCMCConfig, leaf=None, node=None, open_depth=None) -> Eval:
    """Route the rows through ``tree`` and compute its log likelihood, log prior and validity.

    With ``leaf`` (the rows' slots in a tree that differs from ``tree`` only below ``node``),
    only the rows of that subtree are routed again (:func:`reroute`).  With ``open_depth`` the
    leaves at that depth are undecided: their stop terms are left out of the log prior (particle
    Gibbs's intermediate targets, :mod:`bayestrees.inference.pgibbs`, where a stop term can be
    ``-inf``).
    """
    S = cfg.capacity
    cats = data.categories
    if cats is not None and cfg.canonical:
        raise ValueError("features split by subsets of their categories do not take the leaf-count (PCFG) prior: "
                         "its canonical trees count the rules of ordered codes; use ChipmanPrior or DepthDecayPrior")
    if leaf is None:
        leaf = heap.route(tree, data.codes, cfg.max_depth, cats)
    else:
        leaf = heap.reroute(tree, data.codes, leaf, node, cfg.max_depth, cats)
    stats = leaf_stats(leaf, data.row_stats, S, data.weight)
    is_leaf, internal = tree.is_leaf(), tree.is_internal()
    node_cats = subset_ok = None
    if cfg.rules == "intervals":
        lo, hi = intervals.interval_ranges(jnp.where(internal, tree.feature, -1), tree.threshold, data.code_lo, data.code_hi,
                                    cfg.max_depth, cats)
        cnt = heap.node_counts(leaf, jnp.where(data.weight > 0, data.weight, 0.0), S)
        if cats is not None:
            node_cats = intervals.category_ranges(jnp.where(internal, tree.feature, -1), tree.threshold, cats,
                                                  cfg.max_depth)
    else:
        lo, hi, cnt = heap.code_ranges(leaf, data.codes, data.weight, S, cfg.max_depth)
        if cats is not None:   # an unordered variable's cut points: the subsets of the categories of the node's rows
            node_cats = _node_categories(leaf, data, cfg, cats)
            lo, hi = intervals.categorical_layout(lo, hi, node_cats, cats)
            # a subset rule sends left only categories its node's rows hold (one rule per partition)
            fj = jnp.maximum(tree.feature, 0)
            stray = jnp.take_along_axis(node_cats, fj[:, None], -1)[:, 0]
            subset_ok = jnp.all(~(internal & (cats[fj] != 0)) | ((tree.threshold & ~stray) == 0))
    prior = cfg.prior if data.prior is None else data.prior
    log_lik = cfg.leaf_model.log_marginal(stats, is_leaf)
    q = cfg.min_leaf_rows
    valid = jnp.all(jnp.where(tree.is_used(), (cnt >= q) if q > 1 else (cnt > 0), True))
    if node_cats is not None and cfg.rules == "data":
        valid = valid & subset_ok
    depth = heap.depth_of(jnp.arange(S))
    if cfg.canonical:
        left = jnp.clip(2 * jnp.arange(S) + 1, 0, S - 1)
        right = jnp.clip(2 * jnp.arange(S) + 2, 0, S - 1)
        m = jnp.sum(jnp.maximum(lo[right] - hi[left], 0) + jnp.maximum(lo[left] - hi[right], 0), -1)
        log_m = jnp.where(internal, jnp.log(jnp.maximum(m, 1).astype(stats.dtype)), 0.0)
        log_prior = prior.log_prior(tree) - jnp.sum(log_m)
    else:
        nvar, nthr = heap.rule_counts(lo, hi)
        f = jnp.maximum(tree.feature, 0)
        nthr_f = jnp.take_along_axis(nthr, f[:, None], -1)[:, 0]
        log_n = (jnp.log(jnp.maximum(nthr_f, 1).astype(stats.dtype)) if cats is None else
                 intervals.log_rule_count(nthr_f, cats[f] != 0, stats.dtype))   # 2^|A| - 2 subsets
        log_rule = -jnp.log(jnp.maximum(nvar, 1).astype(stats.dtype)) - log_n
        if data.var_weight is not None:  # xi-weighted variable choice: log xi_j - log sum_valid xi
            log_rule = log_rule + jnp.log(jnp.maximum(nvar, 1).astype(stats.dtype)) + log_var_prob(
                nthr, f, data.var_weight).astype(stats.dtype)
        # a node that cannot split (at max_depth: the prior truncated there, explicitly; or no valid
        # rule among its rows) is a leaf with probability 1, as in the generative prior
        cannot = (depth >= cfg.max_depth) | (nvar == 0)
        lsplit = prior.log_split(depth).astype(stats.dtype)
        lstop = jnp.where(cannot, 0.0, prior.log_stop(depth).astype(stats.dtype))
        if open_depth is not None:
            lstop = jnp.where(depth == open_depth, 0.0, lstop)
        log_prior = jnp.sum(jnp.where(internal, lsplit + log_rule, 0.0) + jnp.where(is_leaf, lstop, 0.0))
    return Eval(leaf=leaf, stats=stats, lo=lo, hi=hi, count=cnt, log_lik=log_lik.astype(stats.dtype),
                log_prior=jnp.asarray(log_prior, stats.dtype), valid=valid, cats=node_cats)


def _node_categories(leaf, data: MCMCData, cfg: MCMCConfig, cats):
    """The categories of every node's rows, int32 (S, d) (:func:`bayestrees.inference.heap.category_masks`),
    gathered for ``cfg.subset_columns`` alone when given (static slices; 0 in the other columns)."""
    S, d = cfg.capacity, cfg.n_features
    cols = tuple(cfg.subset_columns) or tuple(range(d))
    if len(cols) == d:
        return heap.category_masks(leaf, data.codes, data.weight, S, cfg.max_depth, cats, proposals.CATEGORY_BITS)
    take = lambda a: jnp.concatenate([a[..., j:j + 1] for j in cols], -1)  # noqa: E731
    part = heap.category_masks(leaf, take(data.codes), data.weight, S, cfg.max_depth, take(cats),
                               proposals.CATEGORY_BITS)
    zero = jnp.zeros((S, 1), jnp.int32)
    return jnp.concatenate([part[:, cols.index(j):cols.index(j) + 1] if j in cols else zero for j in range(d)], -1)


# ---------------------------------------------------------------------------------------------
# proposals
# ---------------------------------------------------------------------------------------------
def node_masks(tree: HeapTree, ev: Eval, cfg: MCMCConfig):
    """The nodes each move applies to under the data-dependent ranges (:func:`bayestrees.inference.proposals.node_masks`):
    growable leaves, internal nodes whose children are leaves, internal nodes, internal parent-child pairs."""
    depth = heap.depth_of(jnp.arange(cfg.capacity))
    nvar, _ = heap.rule_counts(ev.lo, ev.hi)
    return proposals.node_masks(tree.is_internal(), tree.is_leaf(), (depth < cfg.max_depth) & (nvar > 0))


def growable(tree: HeapTree, ev: Eval, cfg: MCMCConfig):
    """bool (S,): the leaves a grow may split."""
    return node_masks(tree, ev, cfg)[0]


def log_var_prob(nthr, j, var_weight):
    """``log xi_j - log sum_{valid v} xi_v`` (valid: ``nthr > 0``), broadcast over leading node axes."""
    xi = jnp.asarray(var_weight)
    tot = jnp.sum(jnp.where(nthr > 0, xi, 0.0), -1)
    xj = jnp.take(xi, j)
    return jnp.log(jnp.maximum(xj, 1e-30)) - jnp.log(jnp.maximum(tot, 1e-30))


def _draw_rule(u_var, u_thr, ev: Eval, node, var_weight=None, categories=None):
    """A rule at ``node`` from its ranges (:func:`bayestrees.inference.proposals.draw_rule`; the
    variable with probability ``xi_j / sum_valid xi`` given ``var_weight``; at an unordered variable
    of ``categories`` a fair bit per category of the node, :func:`bayestrees.inference.proposals.subset_rule`):
    ``(j, t, fair)``, ``fair`` False where a subset draw took every category or none (no move)."""
    log_w = None if var_weight is None else jnp.log(jnp.maximum(jnp.asarray(var_weight), 1e-30))
    j, t, nthr = proposals.draw_rule(u_var, u_thr, ev.lo[node], ev.hi[node], log_w)
    if categories is None:
        return j, t, jnp.array(True)
    t, fair = proposals.subset_rule(u_thr, ev.cats[node, j], nthr[j] + 1, categories[j] != 0, t)
    return j, t, fair


def _log_count(ev: Eval, node, j, categories=None):
    """``-log`` of the proposal probability of the rule given its variable ``j`` at ``node``."""
    nthr = jnp.maximum(ev.hi[node] - ev.lo[node], 0)
    if categories is None:
        return jnp.log(jnp.maximum(nthr[j], 1).astype(ev.stats.dtype))
    return proposals.log_proposal_count(nthr[j], categories[j] != 0, ev.stats.dtype)


def _log_rule_q(ev: Eval, node, j, var_weight=None, categories=None):
    nthr = jnp.maximum(ev.hi[node] - ev.lo[node], 0)
    nvar = jnp.sum(nthr > 0)
    dt = ev.stats.dtype
    if var_weight is not None:
        return log_var_prob(nthr, j, var_weight).astype(dt) - _log_count(ev, node, j, categories)
    return -jnp.log(jnp.maximum(nvar, 1).astype(dt)) - _log_count(ev, node, j, categories)


def _propose(u, state: State, move, cfg: MCMCConfig, categories=None):
    """The proposal of move type ``move`` (:mod:`bayestrees.inference.proposals`):
    ``(tree', ok, node, log_q_fwd, j_old)``, ``j_old`` the node's variable before the move.

    ``u``: uniforms, ``S`` to choose the node, then one for the threshold and ``d`` for the variable.
    """
    tree, ev = state.tree, state.ev
    S = cfg.capacity
    dt = ev.stats.dtype
    rot = proposals.rotates(cfg.move_probs)
    masks = list(node_masks(tree, ev, cfg)) + ([proposals.rotation_sites(tree.feature)] if rot else [])
    s, k = proposals.pick(u[:S], jnp.stack(masks)[move])
    j, t, fair = _draw_rule(u[S + 1:], u[S], ev, s, None, categories)
    fair = fair | (move == 1) | (move >= 3)   # only a grow or a change draws a rule
    top, feature, threshold, bad_swap = proposals.set_rules(tree.feature, tree.threshold, move, s, j, t)
    fits = jnp.array(True)
    if rot:   # a rotation lifts s above its parent (the proposal is symmetric)
        _, feature, threshold, fits = proposals.rotated_if(move, s, tree.feature, tree.threshold, top, feature,
                                                           threshold, cfg.max_depth, categories)
    j_old = tree.feature[s]
    log_k = -jnp.log(jnp.maximum(k, 1).astype(dt))
    lq = jnp.stack([
        log_k + _log_rule_q(ev, s, j, None, categories),                  # grow
        log_k,                                                            # prune
        # change: log q(T'|T) - log q(T|T') = -log nthr(j') + log nthr(j) (proposal counts)
        -_log_count(ev, s, j, categories) + _log_count(ev, s, jnp.maximum(j_old, 0), categories),
        jnp.zeros((), dt),                                                # swap
        jnp.zeros((), dt)])[move]                                         # rotate
    ok = (k > 0) & ~bad_swap & fits
    if categories is not None:
        ok = ok & fair
    return HeapTree(feature=feature, threshold=threshold), ok, s, lq, j_old


def _log_q_reverse(move, new_tree: HeapTree, new_ev: Eval, node, j_old, cfg: MCMCConfig, categories=None):
    """``log q(T | T')`` for grow and prune (change and swap fold their ratio into the forward term)."""
    dt = new_ev.stats.dtype
    growable_new, nog_new, _, _ = node_masks(new_tree, new_ev, cfg)
    grow_rev = -jnp.log(jnp.maximum(jnp.sum(nog_new), 1).astype(dt))
    prune_rev = (-jnp.log(jnp.maximum(jnp.sum(growable_new), 1).astype(dt))
                 + _log_rule_q(new_ev, node, j_old, None, categories))
    return jnp.stack([grow_rev, prune_rev, jnp.zeros((), dt), jnp.zeros((), dt), jnp.zeros((), dt)])[move]


def _at_max_depth(tree: HeapTree, ev: Eval, cfg: MCMCConfig):
    depth = heap.depth_of(jnp.arange(cfg.capacity))
    nvar, _ = heap.rule_counts(ev.lo, ev.hi)
    return jnp.any(tree.is_leaf() & (depth >= cfg.max_depth) & (nvar > 0))


def draw_leaves(key, tree: HeapTree, ev: Eval, data: MCMCData, cfg: MCMCConfig) -> Draw:
    """Draw the leaf parameters from their posterior given the tree; the drawn function and log-likelihood."""
    draw: LeafDraw = cfg.leaf_model.draw(key, ev.stats, tree.is_leaf())
    used = tree.is_used()
    value = jnp.where(used[:, None], draw.value, 0.0).astype(draw.value.dtype)
    sigma = jnp.where(used, draw.sigma, 0.0).astype(draw.value.dtype)
    out = heap.to_tree(tree, value, ev.count, jnp.round(ev.count))
    ll = cfg.leaf_model.log_likelihood(data.y, ev.leaf, LeafDraw(value, sigma))
    return Draw(tree=out, sigma=sigma, leaf=ev.leaf, log_lik=ll.astype(value.dtype), lp=ev.log_lik + ev.log_prior)


@dataclass(frozen=True)
class collect:  # noqa: N801 (a function-like callable, hashable by its config)
    """``collect(key, state, data)`` for :func:`~bayestrees.inference.loop.run_chains`: a :class:`Draw`."""

    cfg: MCMCConfig

    def __call__(self, key, state: State, data: MCMCData) -> Draw:
        if len(self.cfg.temperatures) > 1:  # a tempered ensemble: the posterior replica
            state = jax.tree_util.tree_map(lambda a: a[0], state)
        return draw_leaves(key, state.tree, state.ev, data, self.cfg)


def _accept_u(u, state: State, new_tree: HeapTree, new_ev: Eval, ok, log_ratio):
    """Metropolis-Hastings acceptance with the uniform ``u``: ``(tree, ev, accepted, log_a)``."""
    beta = jnp.asarray(state.beta, new_ev.log_lik.dtype)
    lp_new = beta * new_ev.log_lik + new_ev.log_prior
    lp_old = beta * state.ev.log_lik + state.ev.log_prior
    log_a = jnp.where(ok & new_ev.valid, lp_new - lp_old + log_ratio, -jnp.inf)
    acc = accept(jnp.log(u).astype(lp_new.dtype), log_a)
    tree = jax.tree_util.tree_map(lambda a, b: jnp.where(acc, a, b), new_tree, state.tree)
    ev = jax.tree_util.tree_map(lambda a, b: jnp.where(acc, a, b), new_ev, state.ev)
    return tree, ev, acc, log_a


def root_tree(cfg: MCMCConfig) -> HeapTree:
    """The root leaf in a heap tree of capacity ``cfg.capacity``."""
    return heap.root(cfg.capacity)


@dataclass(frozen=True)
class RootInit:
    """``init(key, data)``: every chain starts from the root leaf (``beta = 1``)."""

    cfg: MCMCConfig
    dtype: Any

    def __call__(self, key, data: MCMCData) -> State:
        tree = root_tree(self.cfg)
        return State(tree=tree, ev=evaluate(tree, data, self.cfg), beta=jnp.ones((), self.dtype))


def whole_step_info(kind: str, accepted, new: State, cfg: MCMCConfig) -> Info:
    """The Info of a step that updates the whole tree (a sweep, a particle Gibbs update)."""
    ev = new.ev
    return Info(move=jnp.int32(STEP_KINDS.index(kind)), ok=jnp.array(True), accepted=accepted,
                log_ratio=jnp.zeros((), ev.log_lik.dtype), lp=ev.log_lik + ev.log_prior,
                at_max_depth=_at_max_depth(new.tree, ev, cfg), swap_accepted=jnp.array(False))


@dataclass(frozen=True)
class MoveStep:
    """Scheme "moves": one random move (grow, prune, change, swap or rotate, drawn with ``cfg.move_probs``)."""

    cfg: MCMCConfig

    def __call__(self, key, state: State, data: MCMCData):
        cfg = self.cfg
        nm = len(cfg.move_probs)
        # move type, accept, then the proposal's
        u = random_bits.open_uniform(key, (cfg.capacity + cfg.n_features + 2 + nm,))
        log_p = jnp.log(jnp.asarray(cfg.move_probs, jnp.float32))
        move = jnp.argmax(random_bits.gumbel(u[:nm]) + log_p).astype(jnp.int32)  # never a type of probability 0
        new_tree, ok, node, lq_fwd, j_old = _propose(u[nm + 1:], state, move, cfg, data.categories)
        # a swap or a rotation changes the parent of the chosen node too: re-route from the parent
        top = jnp.where(move >= MOVES.index("swap"), jnp.maximum((node - 1) // 2, 0), node)
        new_ev = evaluate(new_tree, data, cfg, state.ev.leaf, top)
        lq_rev = _log_q_reverse(move, new_tree, new_ev, node, j_old, cfg, data.categories)
        tree, ev, acc, log_a = _accept_u(u[nm], state, new_tree, new_ev, ok, lq_rev - lq_fwd)
        info = Info(move=jnp.asarray(_MOVE_KIND, jnp.int32)[move], ok=ok, accepted=acc, log_ratio=log_a, lp=ev.log_lik + ev.log_prior,
                    at_max_depth=_at_max_depth(tree, ev, cfg), swap_accepted=jnp.array(False))
        return State(tree=tree, ev=ev, beta=state.beta), info


@dataclass(frozen=True)
class SweepStep:
    """Scheme "sweep": one systematic sweep over the nodes (:func:`sweep`)."""

    cfg: MCMCConfig

    def __call__(self, key, state: State, data: MCMCData):
        new, n_acc = sweep(key, state, data, self.cfg)
        return new, whole_step_info("sweep", n_acc > 0, new, self.cfg)


def tempered_log_lik(state: State):
    """The tempered factor of a Bayesian CART state: ``log p(Y | T)`` (the prior is not tempered)."""
    return state.ev.log_lik


def report_cold_chain(info: Info, state: State, swap_accepted) -> Info:
    """A tempered step's Info: the cold replica's, with ``lp`` of its state after the exchange."""
    return info._replace(lp=state.ev.log_lik + state.ev.log_prior, swap_accepted=swap_accepted)


def make_kernel(cfg: MCMCConfig, step, dtype=jnp.float32) -> Kernel:
    """The Bayesian CART kernel with the one-chain update ``step`` (a hashable ``(key, state, data)``
    callable), started from the root leaf and tempered over ``cfg.temperatures`` when it has several
    (:func:`bayestrees.inference.tempering.tempered`)."""
    proposals.check_move_probs(cfg.move_probs)
    base = Kernel(RootInit(cfg, jnp.dtype(dtype)), step)
    if len(cfg.temperatures) > 1:
        return tempered(base, cfg.temperatures, tempered_log_lik, report_cold_chain, dtype)
    return base


def build_kernel(cfg: MCMCConfig, dtype=jnp.float32) -> Kernel:
    """The ``init``/``step`` pair of Bayesian CART for one chain, scheme "moves" or "sweep".

    ``init(key, data)`` starts from the root leaf; ``step(key, state, data)`` makes one move of a
    type drawn with ``cfg.move_probs`` (or one sweep).  Both are hashable by ``cfg``, so every fit
    with the same settings and data shapes reuses one compilation.  Every scheme, particle Gibbs
    included, is built by :func:`bayestrees.inference.bcart.schemes.kernel_for`.
    """
    steps = {"moves": MoveStep, "sweep": SweepStep}
    if cfg.scheme not in steps:
        raise ValueError(f"scheme {cfg.scheme!r} is built by bayestrees.inference.bcart.schemes.kernel_for")
    return make_kernel(cfg, steps[cfg.scheme](cfg), dtype)


def sweep(key, state: State, data: MCMCData, cfg: MCMCConfig):
    """One systematic sweep: a Metropolis-Hastings update of every used node's split flag and rule.

    Slots ``0, 1, ..., S - 1`` are visited in order and a slot is updated when it holds a node at
    the moment it is reached (nodes grown earlier in the sweep are visited too, nodes pruned
    earlier are not): the sweep is the composition of fixed-slot updates, each reversible for
    ``pi``, so it leaves ``pi`` invariant.  (Visiting only the nodes present at the start of the
    sweep makes the set of updates depend on the state: that kernel is not ``pi``-invariant and
    does not reproduce the prior.)

    Returns ``(state, n_accepted)``.
    """
    S = cfg.capacity
    k_sweep = key
    dt = state.ev.stats.dtype

    def update(i, carry, s):
        tree, ev, n_acc = carry
        sc = jnp.minimum(s, S - 1)
        u = random_bits.open_uniform(random_bits.fold_in(k_sweep, i), (cfg.n_features + 3,))  # kind, accept, threshold, variable
        is_leaf = tree.is_leaf()[sc]
        can_grow, nog, _, _ = (m[sc] for m in node_masks(tree, ev, cfg))
        to_leaf = nog & (u[0] < 0.5)
        cats = data.categories
        j, t, fair = _draw_rule(u[3:], u[2], ev, sc, data.var_weight, cats)
        kind = jnp.where(is_leaf, 0, jnp.where(to_leaf, 1, 2))  # grow, prune, change
        _, feature, threshold, _ = proposals.set_rules(tree.feature, tree.threshold, kind, sc, j, t)
        new = HeapTree(feature=feature, threshold=threshold)
        ok = (s < S) & jnp.where(kind == 0, can_grow, jnp.where(kind == 1, nog, tree.is_internal()[sc]))
        ok = ok & (fair | (kind == 1))
        new_ev = evaluate(new, data, cfg, ev.leaf, sc)
        half = jnp.log(jnp.asarray(0.5, dt))
        j_old = tree.feature[sc]
        # grow from a leaf: reverse is "to leaf" (prob 1/2 at a node whose children are leaves)
        lr_grow = half - _log_rule_q(ev, sc, j, data.var_weight, cats)
        lr_prune = _log_rule_q(new_ev, sc, j_old, data.var_weight, cats) - half
        j_old = jnp.maximum(j_old, 0)
        # change: q(T|T') / q(T'|T) = nthr_j / nthr_jold, xi-weighted xi_jold nthr_j / (xi_j nthr_jold)
        # (proposal counts)
        lr_change = _log_count(ev, sc, j, cats) - _log_count(ev, sc, j_old, cats)
        if data.var_weight is not None:
            lr_change = _log_rule_q(ev, sc, j_old, data.var_weight, cats) - _log_rule_q(ev, sc, j, data.var_weight, cats)
        log_ratio = jnp.where(kind == 0, lr_grow, jnp.where(kind == 1, lr_prune, lr_change))
        tree2, ev2, acc, _ = _accept_u(u[1], State(tree=tree, ev=ev, beta=state.beta), new, new_ev, ok, log_ratio)
        return tree2, ev2, n_acc + acc.astype(jnp.int32)

    def visit(c):
        s_cur, i, tree, ev, n_acc = c
        cand = tree.is_used() & (jnp.arange(S) >= s_cur)
        s = jnp.where(jnp.any(cand), jnp.argmax(cand), S).astype(jnp.int32)
        tree, ev, n_acc = update(i, (tree, ev, n_acc), s)
        return s + 1, i + 1, tree, ev, n_acc

    c0 = (jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), state.tree, state.ev, jnp.zeros((), jnp.int32))
    _, _, tree, ev, n_acc = jax.lax.while_loop(lambda c: c[0] < S, visit, c0)
    return State(tree=tree, ev=ev, beta=state.beta), n_acc
