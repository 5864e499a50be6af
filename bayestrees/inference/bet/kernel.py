"""BET (Duan, Clancy & Szczesniak): a Dirichlet-process mixture of trees, as one ``init``/``step`` kernel.

The kernel is written for ONE chain over NamedTuple :class:`State`/:class:`Info`
and run by :func:`bayestrees.inference.loop.run_chains` (vmapped chains).  A chain
holds ``J = max_trees`` heap trees (the sampler of :mod:`bayestrees.inference.moves`,
vmapped over the tree axis), their drawn leaf parameters, their split-variable
weights ``xi_j``, the stick-breaking fractions ``v_j`` and the assignment ``Z_i``
of every row.  Everything lives in fixed arrays; the number of occupied trees is
a mask, never a Python branch.

Model
-----
``v_j ~ Beta(1, alpha_DP)``, ``w_j = v_j prod_{k<j} (1 - v_k)``; ``Z_i ~ w``;
``(T_j, theta_j) ~ G0``: the tree prior is :class:`~bayestrees.priors.DepthDecayPrior`
(node ``k`` at depth ``floor(log2(k+1))`` splits with probability
``exp(-depth / delta)``), the split variable ``c ~ xi_j`` restricted to the node's
valid variables (``xi_c / sum_valid xi``), ``xi_j ~ Dirichlet(1_m)``, the threshold
uniform among the node's valid codes, every node of a tree holding at least ``q``
of the tree's rows; leaves: the objective Normal prior
(:class:`~bayestrees.leaves.ObjectiveNormalLeaves`) or Dirichlet(0.5) class
probabilities.

One step (blocked Gibbs)
------------------------
1. **Tree step** on ``A = active_trees`` tree slots at once (vmap): the occupied components,
   or ``A`` of them at random when more are occupied (:class:`_Step`), each on its rows
   (``MCMCData.weight = 1[Z_i = j]``):

   a. splits whose children no longer hold ``q`` rows each after the last clustering
      step are collapsed (:func:`collapse`: the largest sub-tree from the root whose
      internal nodes have two children with at least ``q`` rows each);
   b. one node-by-node Metropolis-Hastings sweep (:func:`bayestrees.inference.moves.sweep`)
      with the leaf parameters integrated out, the rule prior and
      proposal weighted by ``xi_j`` and trees with a node holding fewer than ``q`` rows rejected;
   c. ``xi_j`` by an independence Metropolis-Hastings step (:func:`xi_proposal_log_ratio`);
   d. the leaf parameters drawn from their posterior given the tree.

   A component with no rows is drawn from its conditional, the prior: the root leaf
   (with no rows no rule is valid, so the prior puts the root leaf there with
   probability 1), a fresh ``xi_j ~ Dirichlet(1)`` and leaf parameters from the base
   measure: Dirichlet(0.5) for classes; for the improper objective Normal prior,
   which has no draw, the proper reference prior of
   :class:`~bayestrees.leaves.ObjectiveNormalLeaves` (``ref``).  So the base measure of
   a *new* component's leaf is that reference prior; occupied leaves with at least two
   rows use the objective posterior.
2. **Clustering step** (slice sampler, :func:`slice_step`), the stick-breaking slice sampler:
   ``v_j ~ Beta(1 + #{Z_i = j}, alpha_DP + #{Z_i > j})``, ``u_i ~ U(0, w_{Z_i})``,
   ``P(Z_i = j) ∝ 1[w_j > u_i] p(y_i | T_j, theta_j)`` over ``j < J``.  The
   components beyond ``J`` hold the stick's remainder ``r = prod_{j<J} (1 - v_j)``; a
   row with ``u_i < r`` could have had one of them in its slice: such rows are
   counted in ``Info.overflow`` (the fit warns or raises with the count) and never
   silently dropped from the count.

Notes
-----
*Conditionals of the clustering step.*  With ``n_j = #{Z_i = j}`` and
``m_j = #{Z_i > j}``, ``p(v | Z) ∝ prod_j v_j^{n_j} (1 - v_j)^{m_j} Beta(v_j; 1, alpha)``,
i.e. ``Beta(1 + n_j, alpha + m_j)`` independently.  Given ``v`` and the trees,
the slice variable makes ``(Z_i, u_i)`` have joint density
``1[u_i < w_{Z_i}] p(y_i | theta_{Z_i})``: ``u_i | Z_i ~ U(0, w_{Z_i})`` and
``P(Z_i = j | u_i) ∝ 1[w_j > u_i] p(y_i | theta_j)``; integrating ``u_i`` gives back
``P(Z_i = j) ∝ w_j p(y_i | theta_j)`` (the test checks this by brute force).

*Sweep.*  The acceptance ratios are those of :func:`bayestrees.inference.moves.sweep` with the
rule probability ``xi_c / sum_valid xi * 1 / nthr_c`` in the prior and the proposal
(grow: ``pi(T') / pi(T) * (1/2) / q_rule``; prune: ``pi(T') / pi(T) * q_rule / (1/2)``;
change: ``pi(T') / pi(T) * xi_old nthr_new / (xi_new nthr_old)``).

*Split-variable weights.*  ``p(xi | T) ∝ Dir(xi; 1) prod_k xi_{c_k} / sum_{v in V_k} xi_v``
over the internal nodes ``k`` (``V_k`` the valid variables of node ``k``).  The proposal
``xi' ~ Dirichlet(1 + counts)`` (counts: splits per variable) has density
``∝ prod_k xi'_{c_k}``, so the independence MH ratio is
``prod_k sum_{V_k} xi / sum_{V_k} xi'``.  With every variable valid at every node it is 1
(the Dirichlet-multinomial conjugate draw).

*Approximations, as in the paper.*  The rule prior is defined on a node's own rows,
so ``p(T_j)`` depends on which rows ``Z`` gives the tree; the clustering step, as the
paper's, uses ``p(y_i | T_j, theta_j)`` alone.  Likewise the truncation of the tree
prior to trees whose nodes hold ``q`` rows is treated as not depending on ``xi``,
and step 1a is a deterministic repair, not a Metropolis-Hastings move.  With
``J = 1`` and ``q = 1`` none of these acts, and the tree step is Bayesian CART's sweep.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import betaln

from ...leaves import LeafDraw
from ...tree import Tree
from .. import moves
from .. import heap
from ..heap import HeapTree
from ..loop import Kernel
from ..pgibbs import pgibbs
from ..metropolis import accept

__all__ = ["BETData", "State", "Info", "Draw", "KernelConfig", "build_kernel", "column_weights",
           "xi_proposal_log_ratio", "slice_step", "v_given_z", "z_given_w", "stick_weights", "tree_step", "collect",
           "log_p_z"]


class BETData(NamedTuple):
    """Training data for the kernel.

    codes : int32 (n, d)  feature codes
    y : (n,) responses (float, standardised) or class codes (int32)
    row_stats : float (n, k)  ``leaf_model.row_stats(y)``
    alpha_dp : float ()  DP concentration (an argument, not a setting: fits that differ only in
        ``alpha_dp``, as in a sensitivity analysis, share one compilation)
    prior : the ``DepthDecayPrior`` with a traced ``delta`` (:func:`bayestrees.priors.traced_params`),
        optional: it replaces the config's prior values (default None: the config's own)
    source, share : with missing values, ``codes`` are the coded columns ``(n, d')`` of
        :mod:`bayestrees.inference.missing`: ``source`` int32 ``(d',)`` each column's feature,
        ``share`` float ``(d',)`` its share of the feature's weight (1/2 or 1); ``xi`` stays over the
        ``d`` features (:func:`column_weights`).  None without.
    categories : int32 (d',), optional  the root category mask of each column split by subsets of
        its categories (0 for the others; :class:`bayestrees.inference.moves.MCMCData`); None without
    """

    codes: jax.Array
    y: jax.Array
    row_stats: jax.Array
    alpha_dp: jax.Array
    prior: Any = None
    source: Any = None
    share: Any = None
    categories: Any = None


def column_weights(xi, data: BETData):
    """The split-variable weights of the code columns from the features' ``xi`` ``(..., d)``: ``xi``
    itself, or with missing values (:mod:`bayestrees.inference.missing`) each column's feature's
    weight times its share (1/2 for each of a feature's two columns, 1 otherwise)."""
    return xi if data.source is None else jnp.take(xi, data.source, axis=-1) * data.share


class State(NamedTuple):
    """One chain.

    tree : HeapTree, batch (J,): the components' trees
    value : float (J, S, V)  their drawn leaf parameters
    sigma : float (J, S)  drawn leaf noise sd (0 for classes)
    xi : float (J, d)  split-variable weights per tree
    v : float (J,)  stick-breaking fractions
    z : int32 (n,)  component of every row
    """

    tree: HeapTree
    value: jax.Array
    sigma: jax.Array
    xi: jax.Array
    v: jax.Array
    z: jax.Array


class Info(NamedTuple):
    """What one step did."""

    n_trees: jax.Array       # int32: occupied components after the step
    overflow: jax.Array      # int32: rows whose slice reached past the J_max components
    tail: jax.Array          # the stick's remainder prod_j (1 - v_j) beyond J_max
    n_accepted: jax.Array    # int32: node updates accepted by the sweeps of all trees
    xi_accepted: jax.Array   # float: fraction of occupied trees whose xi proposal was accepted


class Draw(NamedTuple):
    """What is kept per draw (:class:`collect`)."""

    tree: Tree               # (J,) trees with drawn leaf parameters; weight/count: rows per node under Z
    sigma: jax.Array         # (J, S)
    w: jax.Array             # (J,) stick weights
    z: jax.Array             # (n,) int32
    xi: jax.Array            # (J, d)
    xi_bar: jax.Array        # (d,) sum_j w_j xi_j / sum_j w_j
    n_trees: jax.Array       # int32
    occupied: jax.Array      # (J,) bool
    log_lik: jax.Array       # (n,) pointwise log sum_j w_j p(y_i | T_j, theta_j)
    mu: jax.Array            # (n, V) cluster-specific fitted value theta_{Z_i} at row i's leaf
    log_lik_y_given_z: jax.Array  # [Y | Z, T] = sum_j log p(Y_j | T_j), theta integrated out
    log_lik_y_z: jax.Array        # [Y, Z | T] = [Y | Z, T] + log p(Z) (stick-breaking, v integrated out)


@dataclass(frozen=True)
class KernelConfig:
    """Static settings of the kernel (hashable).

    mcmc : M.MCMCConfig (prior = DepthDecayPrior(delta), leaf model, max_depth, min_leaf_rows = q,
        scheme "sweep")
    max_trees : J
    n_features : d, the features (``mcmc.n_features``: the code columns, ``d' > d`` with missing values)
    update_xi : sample xi (False keeps every xi_j uniform: the tests compare with Bayesian CART)
    active_trees : A, the tree slots swept per step (``<= max_trees``; see :class:`_Step`)
    init_trees : rows start spread uniformly at random over this many components (``<= max_trees``)
    regrow_rate : with ``mcmc.n_codes`` (a regrowth asked for), the probability that a step regrows its
        swept trees by particle Gibbs after their sweeps (one draw per step, independent of the state)
    """

    mcmc: Any
    max_trees: int
    n_features: int
    update_xi: bool = True
    active_trees: int = 4
    init_trees: int = 1
    regrow_rate: float = 1.0

    def __post_init__(self):
        if not 0.0 < self.regrow_rate <= 1.0:
            raise ValueError(f"regrow_rate must be in (0, 1], got {self.regrow_rate!r}")
        if not 1 <= self.active_trees:
            raise ValueError(f"active_trees must be >= 1, got {self.active_trees}")
        object.__setattr__(self, "active_trees", min(int(self.active_trees), int(self.max_trees)))
        if not 1 <= self.init_trees:
            raise ValueError(f"init_trees must be >= 1, got {self.init_trees}")
        object.__setattr__(self, "init_trees", min(int(self.init_trees), int(self.max_trees)))


def stick_weights(v):
    """``w_j = v_j prod_{k<j} (1 - v_k)`` (J,), and the remainder ``prod_j (1 - v_j)``."""
    log1m = jnp.log1p(-jnp.clip(v, 0.0, 1.0 - 1e-7))
    before = jnp.cumsum(log1m) - log1m
    return v * jnp.exp(before), jnp.exp(jnp.sum(log1m))


def xi_proposal_log_ratio(tree: HeapTree, ev: moves.Eval, xi, prop):
    """``log`` of the independence MH ratio ``prod_k sum_{V_k} xi / sum_{V_k} xi'`` (module Notes)."""
    internal = tree.is_internal()
    valid = (ev.hi - ev.lo) > 0                                  # (S, d)
    tot_old = jnp.sum(jnp.where(valid, xi, 0.0), -1)
    tot_new = jnp.sum(jnp.where(valid, prop, 0.0), -1)
    return jnp.sum(jnp.where(internal, jnp.log(jnp.maximum(tot_old, 1e-30)) - jnp.log(jnp.maximum(tot_new, 1e-30)),
                             0.0))


def split_counts(tree: HeapTree, d: int, dtype):
    """Splits per variable (d,)."""
    return jax.ops.segment_sum(tree.is_internal().astype(dtype), jnp.maximum(tree.feature, 0), d)


def tree_step(key, tree: HeapTree, xi, j, z, data: BETData, cfg: KernelConfig, regrow=True):
    """Step 1a-b for component ``j``: collapse, then one node-by-node sweep on the component's rows, then
    (with ``cfg.mcmc.n_codes``: ``BETConfig.particles > 0``, and ``regrow``, a bool drawn by the step
    independently of the state) one particle Gibbs regrowth of the tree given the same rows and ``xi``
    (:func:`bayestrees.inference.pgibbs.pgibbs`: it leaves the sweep's target invariant and can change
    the root, which the sweep seldom does under a subtree).

    Returns ``(tree, ev, n_accepted)``, ``ev`` the evaluation of the new tree on the component's rows.
    """
    mc = cfg.mcmc
    dt = data.row_stats.dtype
    w = (z == j).astype(dt)
    if cfg.update_xi:
        var_weight = column_weights(xi, data)
    else:   # uniform over the features (a feature's two columns at half its weight each)
        var_weight = None if data.source is None else data.share
    md = moves.MCMCData(codes=data.codes, y=data.y, row_stats=data.row_stats, weight=w,
                        var_weight=var_weight, prior=data.prior, categories=data.categories)
    leaf = heap.route(tree, data.codes, mc.max_depth, data.categories)
    tree = heap.collapse(tree, heap.node_counts(leaf, w, mc.capacity), mc.min_leaf_rows)
    ev = moves.evaluate(tree, md, mc)
    k_sweep, k_regrow = jax.random.split(key) if mc.n_codes else (key, None)   # the sweep alone: its key as before
    st, n_acc = moves.sweep(k_sweep, moves.State(tree=tree, ev=ev, beta=jnp.ones((), dt)), md, mc)
    if mc.n_codes:
        st = jax.lax.cond(regrow, lambda s: pgibbs(k_regrow, s, md, mc)[0], lambda s: s, st)
    return st.tree, st.ev, n_acc


def _log_p_rows(value, sigma, leaf, y, leaf_model):
    """``log p(y_i | T_j, theta_j)`` for every component and row: (J, n)."""
    ll = jax.vmap(lambda lf, val, sg: leaf_model.log_likelihood(y, lf, LeafDraw(val, sg)))(leaf, value, sigma)
    return jnp.where(jnp.isnan(ll), -jnp.inf, ll)


def v_given_z(key, z, J: int, alpha_dp, dtype):
    """``v_j ~ Beta(1 + #{Z_i = j}, alpha_DP + #{Z_i > j})`` (J,).

    ``v = G_a / (G_a + G_b)`` with independent ``G_a ~ Gamma(a)``, ``G_b ~ Gamma(b)``, drawn in log
    space by one ``loggamma`` call over both shape vectors (one sampler in the compiled step, where
    ``jax.random.beta`` builds two).
    """
    nj = jax.ops.segment_sum(jnp.ones(z.shape[0], dtype), z, J)
    mj = jnp.sum(nj) - jnp.cumsum(nj)                        # #{Z_i > j}
    lg = jax.random.loggamma(key, jnp.concatenate([1.0 + nj, alpha_dp + mj]), dtype=dtype)
    la, lb = lg[:J], lg[J:]
    return jnp.exp(la - jnp.logaddexp(la, lb))


def z_given_w(key, z, w, tail, log_p):
    """``u_i ~ U(0, w_{Z_i})``, then ``P(Z_i = j) ∝ 1[w_j > u_i] p(y_i | T_j, theta_j)``.

    Returns the new ``z`` (n,) and the overflow count (rows with ``u_i < tail``).
    """
    k_u, k_z = jax.random.split(key)
    n = z.shape[0]
    u = jax.random.uniform(k_u, (n,), w.dtype) * w[z]
    allowed = w[:, None] > u[None, :]                         # (J, n)
    logits = jnp.where(allowed, jnp.maximum(log_p, -1e30), -jnp.inf)
    z_new = jax.random.categorical(k_z, logits, axis=0).astype(jnp.int32)
    return z_new, jnp.sum(u < tail).astype(jnp.int32)


def slice_step(key, z, log_p, alpha_dp, dtype):
    """Step 2: ``v | Z``, then ``u | Z, v`` and ``Z | u, v, trees`` (:func:`v_given_z`, :func:`z_given_w`).

    Parameters
    ----------
    key : PRNG key
    z : int32 (n,)  current assignments
    log_p : float (J, n)  ``log p(y_i | T_j, theta_j)``
    alpha_dp : DP concentration

    Returns
    -------
    v (J,), z (n,), overflow (int32: rows with ``u_i < prod_j (1 - v_j)``), tail (the remainder)
    """
    k_v, k_z = jax.random.split(key)
    v = v_given_z(k_v, z, log_p.shape[0], alpha_dp, dtype)
    w, tail = stick_weights(v)
    z_new, overflow = z_given_w(k_z, z, w, tail, log_p)
    return v, z_new, overflow, tail


def log_p_z(z, J: int, alpha_dp, dtype):
    """``log p(Z | alpha_DP)`` with ``v`` integrated out: ``sum_j log B(1 + n_j, alpha + m_j) - log B(1, alpha)``
    (terms with ``n_j = m_j = 0`` vanish)."""
    nj = jax.ops.segment_sum(jnp.ones(z.shape[0], dtype), z, J)
    mj = jnp.sum(nj) - jnp.cumsum(nj)
    return jnp.sum(betaln(1.0 + nj, alpha_dp + mj) - betaln(jnp.ones_like(nj), alpha_dp + 0.0 * nj))


@dataclass(frozen=True)
class _Init:
    cfg: KernelConfig
    dtype: Any

    def __call__(self, key, data: BETData) -> State:
        cfg, dt = self.cfg, self.dtype
        J, d, n = cfg.max_trees, cfg.n_features, data.codes.shape[0]
        root = moves.root_tree(cfg.mcmc)
        tree = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (J,) + a.shape), root)
        z = jax.random.randint(key, (n,), 0, cfg.init_trees, dtype=jnp.int32)
        value = jnp.zeros((J, cfg.mcmc.capacity, cfg.mcmc.leaf_model.n_outputs), dt)
        return State(tree=tree, value=value, sigma=jnp.ones((J, cfg.mcmc.capacity), dt), xi=jnp.full((J, d), 1.0 / d, dt),
                     v=jnp.full((J,), 0.5, dt), z=z)


def _bcast(mask, x):
    return mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))


@dataclass(frozen=True)
class _Step:
    """One blocked-Gibbs step.

    The tree step sweeps ``A = cfg.active_trees`` slots: the occupied components if there are at
    most ``A``, else ``A`` of them chosen uniformly at random (a random-scan Gibbs update: the
    choice depends on ``Z`` only, which the tree step does not change, so every component's update
    leaves the posterior invariant); their ``xi`` and leaf parameters are then drawn given the new
    trees.  Every unoccupied component is drawn from its prior (root leaf, ``xi ~ Dirichlet(1)``,
    leaf parameters from the base measure); occupied components not swept keep their values.
    """

    cfg: KernelConfig

    def __call__(self, key, state: State, data: BETData):
        cfg = self.cfg
        mc = cfg.mcmc
        J, A, d, S = cfg.max_trees, cfg.active_trees, cfg.n_features, mc.capacity
        dt = data.row_stats.dtype
        k_sel, k_tree, k_xi, k_xa, k_leaf, k_slice = jax.random.split(key, 6)
        occ_before = jax.ops.segment_sum(jnp.ones_like(state.z), state.z, J) > 0
        score = jnp.where(occ_before, jax.random.gumbel(k_sel, (J,), dt), -jnp.inf)
        _, idx = jax.lax.top_k(score, A)
        # whether this step regrows its swept trees: one draw, from a key of its own (the other draws as without)
        regrow = (jax.random.uniform(jax.random.fold_in(key, 7), (), dt) < cfg.regrow_rate
                  if mc.n_codes and cfg.regrow_rate < 1.0 else jnp.array(True))
        t_a, ev_a, n_acc = jax.vmap(tree_step, in_axes=(0, 0, 0, 0, None, None, None, None))(
            jax.random.split(k_tree, A), jax.tree_util.tree_map(lambda a: a[idx], state.tree), state.xi[idx], idx,
            state.z, data, cfg, regrow)
        sel = jnp.zeros(J, bool).at[idx].set(True)
        fresh = ~occ_before & ~sel                                  # unoccupied, not swept: from the prior
        redraw = sel | fresh
        root = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (J,) + a.shape), moves.root_tree(mc))
        tree = jax.tree_util.tree_map(lambda r, old: jnp.where(_bcast(fresh, old), r, old), root, state.tree)
        tree = jax.tree_util.tree_map(lambda full, part: full.at[idx].set(part), tree, t_a)
        # xi: one Dirichlet draw for all slots; independence MH for the swept trees, the prior for fresh ones
        c_a = jax.vmap(split_counts, in_axes=(0, None, None))(t_a, mc.n_features, dt)   # per code column
        if data.source is not None:   # per feature
            c_a = jax.vmap(lambda c: jax.ops.segment_sum(c, data.source, d))(c_a)
        counts = jnp.zeros((J, d), dt).at[idx].set(c_a)
        prop = jax.random.dirichlet(k_xi, 1.0 + counts, dtype=dt)
        prop = jnp.maximum(prop, jnp.finfo(dt).tiny)
        log_a = jax.vmap(xi_proposal_log_ratio)(t_a, ev_a, column_weights(state.xi[idx], data),
                                                column_weights(prop[idx], data))
        acc_a = accept(jnp.log(jax.random.uniform(k_xa, (A,), dt)), log_a)
        acc = jnp.zeros(J, bool).at[idx].set(acc_a)
        if cfg.update_xi:
            xi = jnp.where(_bcast(acc | fresh, state.xi), prop, state.xi)
        else:
            xi = state.xi
        # leaf parameters: one draw for all slots (swept: given the new tree; fresh: the base measure)
        k = data.row_stats.shape[-1]
        stats = jnp.zeros((J, S, k), dt).at[idx].set(ev_a.stats)
        draw = jax.vmap(mc.leaf_model.draw)(jax.random.split(k_leaf, J), stats, tree.is_leaf())
        used = tree.is_used()
        value = jnp.where(used[..., None], draw.value, 0.0).astype(dt)
        sigma_new = jnp.where(used, draw.sigma, 0.0).astype(dt)
        value = jnp.where(_bcast(redraw, value), value, state.value)
        sigma = jnp.where(_bcast(redraw, sigma_new), sigma_new, state.sigma)
        leaf = jax.vmap(heap.route, in_axes=(0, None, None, None))(tree, data.codes, mc.max_depth, data.categories)
        log_p = _log_p_rows(value, sigma, leaf, data.y, mc.leaf_model)
        v, z, overflow, tail = slice_step(k_slice, state.z, log_p, data.alpha_dp, dt)
        occ = jax.ops.segment_sum(jnp.ones_like(z), z, J) > 0
        sel_occ = occ_before[idx]
        xi_rate = jnp.sum(acc_a & sel_occ) / jnp.maximum(jnp.sum(sel_occ), 1)
        info = Info(n_trees=jnp.sum(occ).astype(jnp.int32), overflow=overflow, tail=tail,
                    n_accepted=jnp.sum(n_acc).astype(jnp.int32), xi_accepted=xi_rate.astype(dt))
        return State(tree=tree, value=value, sigma=sigma, xi=xi, v=v, z=z), info


@dataclass(frozen=True)
class collect:  # noqa: N801 (a function-like callable, hashable by its config)
    """``collect(key, state, data)`` for :func:`~bayestrees.inference.loop.run_chains`: a :class:`Draw`."""

    cfg: KernelConfig

    def __call__(self, key, state: State, data: BETData) -> Draw:
        cfg = self.cfg
        J, mc = cfg.max_trees, cfg.mcmc
        S = mc.capacity
        dt = data.row_stats.dtype
        w, _ = stick_weights(state.v)
        leaf = jax.vmap(heap.route, in_axes=(0, None, None, None))(state.tree, data.codes, mc.max_depth,
                                                                   data.categories)   # (J, n)
        wz = (state.z[None, :] == jnp.arange(J)[:, None]).astype(dt)                                # (J, n)
        from ...leaves import leaf_stats

        stats = jax.vmap(lambda lf, ww: leaf_stats(lf, data.row_stats, S, ww))(leaf, wz)
        cnt = jax.vmap(lambda lf, ww: heap.node_counts(lf, ww, S))(leaf, wz)
        marg = jax.vmap(mc.leaf_model.log_marginal)(stats, state.tree.is_leaf())                  # (J,)
        nj = jnp.sum(wz, -1)
        occupied = nj > 0
        tree = jax.vmap(heap.to_tree)(state.tree, state.value, cnt.astype(dt), jnp.round(cnt))
        log_p = _log_p_rows(state.value, state.sigma, leaf, data.y, mc.leaf_model)               # (J, n)
        log_lik = jax.scipy.special.logsumexp(jnp.log(jnp.maximum(w, 1e-38))[:, None] + log_p, axis=0)
        rows = jnp.arange(state.z.shape[0])
        mu = state.value[state.z, leaf[state.z, rows]]                                         # (n, V)
        y_given_z = jnp.sum(jnp.where(occupied, marg, 0.0))
        y_z = y_given_z + log_p_z(state.z, J, data.alpha_dp, dt)
        xi_bar = jnp.sum(w[:, None] * state.xi, 0) / jnp.maximum(jnp.sum(w), 1e-30)
        return Draw(tree=tree, sigma=state.sigma, w=w, z=state.z, xi=state.xi, xi_bar=xi_bar,
                    n_trees=jnp.sum(occupied).astype(jnp.int32), occupied=occupied, log_lik=log_lik, mu=mu,
                    log_lik_y_given_z=y_given_z, log_lik_y_z=y_z)


def build_kernel(cfg: KernelConfig, dtype=jnp.float32) -> Kernel:
    """The BET ``init``/``step`` pair for one chain (hashable by ``cfg``: one compilation per setting and shape).

    ``init(key, data)`` spreads the rows uniformly at random over the first ``cfg.init_trees``
    components (default 1: every row in component 0) with every tree a root leaf;
    ``step(key, state, data)`` is one tree step and one clustering step (module docstring).
    """
    if cfg.mcmc.scheme != "sweep":
        raise ValueError("BET's tree step is the node-by-node sweep: MCMCConfig.scheme must be 'sweep'")
    return Kernel(_Init(cfg, jnp.dtype(dtype)), _Step(cfg))
