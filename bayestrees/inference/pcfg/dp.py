"""BCART-PCFG: exact Bayesian inference over decision trees (Sullivan et al.).

Model
-----
Prior ``Pr[T | X] ∝ phi^(-b(T))`` (``b`` = number of leaves) over trees whose
nodes all hold at least one training row, with splits counted once per
partition of a node's rows (see :mod:`bayestrees.inference.pcfg.structure`).
Leaves are conjugate: Dirichlet(alpha) class probabilities (Dirichlet-multinomial
marginal ``B(n + alpha) / B(alpha)``) or Normal-inverse-gamma means and
variances (regression).

Inside programme
    ``Q(N) = L(N) + phi^-1 sum_s Q(N_s^L) Q(N_s^R)`` over the symbols ``N``
    (row sets), computed in log space symbol chunk by chunk, children before
    parents (:func:`log_inside`).  ``Q_max`` replaces the sum by a max.
    Expanding the recursion, ``Q(root) = sum_T phi^-(b(T)-1) prod_leaves L``,
    so the posterior of a tree is ``phi^-(b-1) prod L / Q(root)`` and the
    evidence is ``Q(root) / Q_1(root)`` with ``Q_1`` the programme with
    ``L ≡ 1`` (the prior normaliser).
Exact sampling
    Top down: at ``N`` stop with probability ``L(N)/Q(N)`` or take split ``s``
    with probability ``Q(N_s^L) Q(N_s^R) / (phi Q(N))``; the generated tree is
    an exact, independent posterior draw.
MAP
    The same walk taking the arg max under ``Q_max`` (the paper's Algorithm 2).

All functions take a :class:`~bayestrees.inference.pcfg.structure.PCFGStructure`
(converted once to device arrays by :func:`device_structure`) and are pure.
Precision
    Every array of a programme (statistics, leaf marginals, inside values,
    evidence, sampling logits, leaf values, predictive) has the dtype chosen
    in :func:`device_structure` (see :func:`resolve_dtype`): float32 by
    default (fast; log evidence good to about 1e-6 relative), or float64 for
    exact comparisons, which needs ``jax_enable_x64`` on.  The library never
    turns x64 on itself.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...leaves import NIGPrior, make_leaf_model
from ...sharding import shard_batch
from ...tree import FREE, Tree
from .structure import PCFGStructure

__all__ = [
    "resolve_dtype", "DeviceStructure", "device_structure", "symbol_log_marginals", "symbol_values",
    "log_leaf_marginals", "leaf_values", "log_inside",
    "log_evidence", "sample_trees", "map_tree", "sample_paths", "exact_predictive",
    "root_split_posterior", "n_leaves_posterior", "fit_hyperparameters",
]


_DTYPES = ("float32", "float64")


def resolve_dtype(dtype="float32") -> np.dtype:
    """The programme's float dtype, checked.

    Parameters
    ----------
    dtype : {"float32", "float64"}, NumPy or JAX float dtype, or None
        None means ``"float32"``.

    Returns
    -------
    numpy.dtype
        ``float32`` or ``float64``.

    Raises
    ------
    ValueError
        For any other dtype, or for float64 while ``jax_enable_x64`` is off
        (JAX would silently compute in float32).

    Notes
    -----
    float32 is the fast default.  float64 makes the programme's answers
    agree with exact enumeration to about 1e-12; turn 64-bit JAX on first with
    ``jax.config.update("jax_enable_x64", True)`` before any array is made
    (or work inside ``with jax.enable_x64(True):``).

    Examples
    --------
    >>> resolve_dtype("float32")
    dtype('float32')
    """
    if dtype is None:
        dtype = "float32"
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {dtype!r}") from None
    if dt.name not in _DTYPES:
        raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {dtype!r}")
    if dt == np.float64 and not jax.config.jax_enable_x64:
        raise ValueError(
            "dtype='float64' needs 64-bit JAX, but jax_enable_x64 is off: call "
            "jax.config.update('jax_enable_x64', True) before any JAX array is made "
            "(or run inside `with jax.enable_x64(True):`), or use dtype='float32'")
    return dt


class DeviceStructure(NamedTuple):
    """Device arrays of a :class:`PCFGStructure` (a pytree; see that class for shapes)."""

    stats: jax.Array
    left: jax.Array
    right: jax.Array
    slot_feature: jax.Array
    slot_threshold: jax.Array
    chunks: jax.Array
    count: jax.Array


def pow2_bucket(x: int) -> int:
    """Round up to a power of two (compile once per bucket, not once per size)."""
    return 1 << max(0, int(x - 1).bit_length())


def device_structure(st: PCFGStructure, dtype="float32", pad: bool = True) -> tuple[DeviceStructure, int]:
    """Move a structure to the device; returns ``(DeviceStructure, root)``.

    Parameters
    ----------
    st : PCFGStructure
    dtype : {"float32", "float64"} or float dtype, default "float32"
        dtype of ``stats`` and hence of every programme run on the structure
        (checked by :func:`resolve_dtype`; float64 needs ``jax_enable_x64``).
    pad : bool, default True
        Pad the symbol rows and the chunk count to powers of two (extra rows
        are empty scratch symbols, extra chunks hold only the scratch id), so
        that data sets of similar size share compiled programmes.
    """
    dtype = resolve_dtype(dtype)
    m = st.n_symbols
    rows = pow2_bucket(m + 2) if pad else m + 2
    nch = pow2_bucket(st.chunks.shape[0]) if pad else st.chunks.shape[0]

    def grow(a, fill, n_rows):
        extra = n_rows - a.shape[0]
        if extra <= 0:
            return a
        return np.concatenate([a, np.full((extra,) + a.shape[1:], fill, a.dtype)])

    return DeviceStructure(
        stats=jnp.asarray(grow(st.stats, 0.0, rows), dtype), left=jnp.asarray(grow(st.left, m, rows)),
        right=jnp.asarray(grow(st.right, m, rows)),
        slot_feature=jnp.asarray(st.slot_feature), slot_threshold=jnp.asarray(st.slot_threshold),
        chunks=jnp.asarray(grow(st.chunks, m + 1, nch)), count=jnp.asarray(grow(st.count, 0, rows), jnp.int32),
    ), int(st.root)


def _symbol_rows(leaf_model, stats):
    """Rows of each symbol from its summed statistics (one-hot counts, or the count column)."""
    return stats[:, 0] if leaf_model.task == "regression" else jnp.sum(stats, -1)


def symbol_log_marginals(leaf_model, stats):
    """log L(N) for every symbol by the leaf model: float[M + 2] (empty rows get -inf).

    Parameters
    ----------
    leaf_model : DirichletLeaves or NormalLeaves (:mod:`bayestrees.leaves`)
    stats : float[M + 2, K]
        Each symbol's sum of ``leaf_model.row_stats`` over its rows.

    Returns
    -------
    float[M + 2] in the dtype of ``stats``: ``leaf_model.log_marginal`` of each
    symbol as a one-leaf tree.
    """
    m = stats.shape[0]
    ll = leaf_model.log_marginal(stats[:, None, :], jnp.ones((m, 1), bool))
    return jnp.where(_symbol_rows(leaf_model, stats) > 0, ll, -jnp.inf)


def symbol_values(leaf_model, stats):
    """Leaf prediction per symbol, ``leaf_model.predictive``: float[M + 2, V] (class probabilities or the mean)."""
    return leaf_model.predictive(stats)


def log_leaf_marginals(stats, kind: str, alpha=1.0, prior: NIGPrior | None = None):
    """log L(N) for every symbol: float[M + 2] (empty sentinel/scratch rows get -inf).

    Parameters
    ----------
    stats : float[M + 2, K]  class counts (``kind="classification"``) or ``(n, sum y, sum y^2)``
    kind : {"classification", "regression"}
    alpha : float or float[K]  Dirichlet concentration (may be traced: differentiable)
    prior : NIGPrior  regression leaf prior

    Returns
    -------
    float[M + 2] with the dtype of ``stats`` (``alpha`` and ``prior`` are cast to it):
    :func:`symbol_log_marginals` of ``DirichletLeaves(K, alpha)`` or ``NormalLeaves(prior)``.
    """
    lm = make_leaf_model(kind, n_classes=int(stats.shape[-1]), alpha=alpha, prior=prior)
    return symbol_log_marginals(lm, stats)


def leaf_values(stats, kind: str, alpha=1.0, prior: NIGPrior | None = None):
    """Leaf prediction per symbol: class probabilities ``float[M+2, K]`` or posterior mean ``float[M+2, 1]``.

    The result has the dtype of ``stats`` (:func:`symbol_values` of the leaf model).
    """
    lm = make_leaf_model(kind, n_classes=int(stats.shape[-1]), alpha=alpha, prior=prior)
    return symbol_values(lm, stats)


def _safe_lse(v, axis):
    """logsumexp that returns -inf (with zero gradient) where every entry is -inf."""
    mx = jnp.max(v, axis=axis, keepdims=True)
    fin = jnp.isfinite(mx)
    mx0 = jax.lax.stop_gradient(jnp.where(fin, mx, 0.0))
    s = jnp.sum(jnp.exp(v - mx0), axis=axis, keepdims=True)
    pos = s > 0
    out = jnp.where(pos, jnp.log(jnp.where(pos, s, 1.0)) + mx0, -jnp.inf)
    return jnp.squeeze(out, axis)


@partial(jax.jit, static_argnames=("mode",))
def log_inside(log_leaf, log_phi, ds: DeviceStructure, mode: str = "sum"):
    """The inside programme: ``log Q`` (``mode="sum"``) or ``log Q_max`` (``"max"``).

    Parameters
    ----------
    log_leaf : float[M + 2]  log L per symbol (-inf on the sentinel rows)
    log_phi : float  log of the prior's leaf penalty phi
    ds : DeviceStructure
    mode : ``"sum"`` or ``"max"``

    Returns
    -------
    float[M + 2]  log Q per symbol (sentinel -inf).

    Notes
    -----
    One ``lax.scan`` over symbol chunks in children-first order; each step
    gathers the children of ``C`` symbols for all ``S`` slots, reduces over the
    slots and scatters ``C`` values into the carried array.
    """
    m2 = log_leaf.shape[0]
    q0 = jnp.full((m2,), -jnp.inf, log_leaf.dtype)

    def body(q, ids):
        v = q[ds.left[ids]] + q[ds.right[ids]]
        if mode == "sum":
            agg = _safe_lse(v, 1)
            new = _safe_lse(jnp.stack([log_leaf[ids], agg - log_phi], 1), 1)
        else:
            new = jnp.maximum(log_leaf[ids], jnp.max(v, 1) - log_phi)
        return q.at[ids].set(new), None

    q, _ = jax.lax.scan(body, q0, ds.chunks)
    return q


def log_evidence(log_leaf, log_phi, ds: DeviceStructure, root: int):
    """log p(y | X) = log Q(root) - log Q_1(root), the prior normaliser from ``L ≡ 1``."""
    q = log_inside(log_leaf, log_phi, ds, "sum")
    ones = jnp.where(jnp.isfinite(log_leaf), 0.0, -jnp.inf).astype(log_leaf.dtype)
    z = log_inside(ones, log_phi, ds, "sum")
    return q[root] - z[root]


def _split_logits(n, q, log_leaf, log_phi, ds):
    """Logits over ``[stop, slot_0, ..., slot_{S-1}]`` at symbol ``n``."""
    sp = q[ds.left[n]] + q[ds.right[n]] - log_phi
    return jnp.concatenate([log_leaf[n][None], sp])


def _grow(key, q, log_leaf, log_phi, ds, root, capacity, greedy):
    """Grow one tree top down (breadth first) into fixed arrays."""
    neg = -jnp.ones(capacity, jnp.int32)
    state = dict(sym=neg.at[0].set(jnp.asarray(root, jnp.int32)), feature=neg, threshold=jnp.zeros(capacity, jnp.int32), left=neg,
                 right=neg, depth=jnp.zeros(capacity, jnp.int32), n_nodes=jnp.int32(1), i=jnp.int32(0))

    def cond(s):
        return s["i"] < s["n_nodes"]

    def body(s):
        i = s["i"]
        n = s["sym"][i]
        logits = _split_logits(n, q, log_leaf, log_phi, ds)
        if greedy:
            k = jnp.argmax(logits)
        else:
            k = jax.random.categorical(jax.random.fold_in(key, i), logits)
        split = (k > 0) & (s["n_nodes"] + 2 <= capacity)
        slot = jnp.maximum(k - 1, 0)
        a, b = s["n_nodes"], s["n_nodes"] + 1
        aa = jnp.where(split, a, capacity)  # out-of-range index: dropped write
        bb = jnp.where(split, b, capacity)
        d1 = s["depth"][i] + 1
        out = dict(s)
        out["sym"] = s["sym"].at[aa].set(ds.left[n, slot], mode="drop").at[bb].set(ds.right[n, slot], mode="drop")
        out["depth"] = s["depth"].at[aa].set(d1, mode="drop").at[bb].set(d1, mode="drop")
        out["feature"] = s["feature"].at[i].set(jnp.where(split, ds.slot_feature[slot], -1))
        out["threshold"] = s["threshold"].at[i].set(jnp.where(split, ds.slot_threshold[slot], 0))
        out["left"] = s["left"].at[i].set(jnp.where(split, a, -1))
        out["right"] = s["right"].at[i].set(jnp.where(split, b, -1))
        out["n_nodes"] = s["n_nodes"] + jnp.where(split, 2, 0)
        out["i"] = i + 1
        return out

    s = jax.lax.while_loop(cond, body, state)
    return s


def _to_tree(s, values, counts, capacity):
    used = jnp.arange(capacity) < s["n_nodes"]
    sym = jnp.where(used, s["sym"], 0)
    val = jnp.where(used[:, None], values[sym], 0.0)
    cnt = jnp.where(used, counts[sym], 0)
    return Tree(feature=jnp.where(used, s["feature"], -1), threshold=s["threshold"],
                left=jnp.where(used, s["left"], FREE), right=jnp.where(used, s["right"], FREE),
                missing_left=jnp.zeros(capacity, bool), value=val.astype(values.dtype),
                weight=cnt.astype(jnp.float32), count=cnt.astype(jnp.int32), depth=jnp.where(used, s["depth"], 0),
                n_nodes=s["n_nodes"])


@partial(jax.jit, static_argnames=("capacity", "n"))
def sample_trees(key, q, log_leaf, log_phi, values, ds: DeviceStructure, root: int, capacity: int, n: int):
    """Exact independent posterior draws of whole trees.

    Parameters
    ----------
    key : PRNG key
    q : float[M + 2]  from :func:`log_inside` (``mode="sum"``)
    log_leaf : float[M + 2], log_phi : float
    values : float[M + 2, V]  leaf predictions (:func:`leaf_values`)
    root : int  root symbol (traced: a new root does not recompile)
    capacity : int  node slots per tree (``2 n_rows - 1`` always suffices)
    n : int  number of trees

    Returns
    -------
    (Tree with batch shape (n,), int32[n, capacity] symbols per node)
    """
    keys = shard_batch(jax.random.split(key, n), n)  # draws across devices, where there are several
    s = jax.vmap(lambda k: _grow(k, q, log_leaf, log_phi, ds, root, capacity, False))(keys)
    trees = jax.vmap(lambda t: _to_tree(t, values, ds.count, capacity))(s)
    return trees, s["sym"]


@partial(jax.jit, static_argnames=("capacity",))
def map_tree(qmax, log_leaf, log_phi, values, ds: DeviceStructure, root: int, capacity: int):
    """The MAP tree (Algorithm 2): follow the arg max of ``Q_max`` top down.

    Returns ``(Tree, log joint weight)`` where the weight is
    ``log[phi^-(b-1) prod L] = log Q_max(root)``.
    """
    s = _grow(jax.random.key(0), qmax, log_leaf, log_phi, ds, root, capacity, True)
    return _to_tree(s, values, ds.count, capacity), qmax[root]


@partial(jax.jit, static_argnames=("n", "max_depth"))
def sample_paths(key, x, q, log_leaf, log_phi, values, ds: DeviceStructure, root: int, n: int,
                 max_depth: int = 64):
    """Path sampling for one query point (Algorithm 1): ``n`` root-to-leaf walks.

    Parameters
    ----------
    key : PRNG key
    x : int[d]  query codes

    Returns
    -------
    values : float[n, V]  leaf prediction reached by each walk
    depth : int32[n]      path length
    """
    def walk(k):
        def cond(c):
            return ~c[2] & (c[1] < max_depth)

        def body(c):
            node, dpt, _ = c
            logits = _split_logits(node, q, log_leaf, log_phi, ds)
            choice = jax.random.categorical(jax.random.fold_in(k, dpt), logits)
            slot = jnp.maximum(choice - 1, 0)
            go_left = x[ds.slot_feature[slot]] <= ds.slot_threshold[slot]
            child = jnp.where(go_left, ds.left[node, slot], ds.right[node, slot])
            stop = choice == 0
            return jnp.where(stop, node, child), dpt + jnp.where(stop, 0, 1), stop

        node, dpt, _ = jax.lax.while_loop(cond, body, (jnp.asarray(root, jnp.int32), jnp.int32(0), jnp.bool_(False)))
        return values[node], dpt

    return jax.vmap(walk)(jax.random.split(key, n))


@jax.jit
def exact_predictive(X, q, log_leaf, log_phi, values, ds: DeviceStructure):
    """Exact posterior predictive ``E[leaf value at x | data]`` for every symbol.

    Parameters
    ----------
    X : int[m, d]  query codes

    Returns
    -------
    float[M + 2, m, V]; row ``root`` is the posterior average over all trees of
    the leaf prediction at each query point.

    Notes
    -----
    ``G(N, x) = [L(N) v(N) + phi^-1 sum_s Q(N_s^L) Q(N_s^R) G(child_s(x), x)] / Q(N)``,
    with ``child_s(x)`` the side of split ``s`` that ``x`` falls on; one pass in
    the order of the inside programme.
    """
    m2, v = values.shape
    mq = X.shape[0]
    g0 = jnp.zeros((m2, mq, v), values.dtype)
    go_left = X[:, ds.slot_feature] <= ds.slot_threshold[None, :]   # (m, S)

    def body(g, ids):
        l, r = ds.left[ids], ds.right[ids]                            # (C, S)
        w = jnp.exp(q[l] + q[r] - log_phi - q[ids][:, None])          # (C, S)
        w_stop = jnp.exp(log_leaf[ids] - q[ids])                      # (C,)
        gl, gr = g[l], g[r]                                           # (C, S, m, V) row gathers
        gc = jnp.where(go_left.T[None, :, :, None], gl, gr)
        new = w_stop[:, None, None] * values[ids][:, None, :] + jnp.einsum("cs,csmv->cmv", w, gc)
        new = jnp.where(jnp.isfinite(q[ids])[:, None, None], new, 0.0)
        return g.at[ids].set(new), None

    g, _ = jax.lax.scan(body, g0, ds.chunks)
    return g


def root_split_posterior(q, log_leaf, log_phi, ds: DeviceStructure, root: int):
    """Posterior probabilities of stopping at the root and of each root split slot.

    Returns
    -------
    p_stop : float, p_split : float[S] (0 where the slot is not a split)
    """
    lg = _split_logits(root, q, log_leaf, log_phi, ds) - q[root]
    p = jnp.exp(lg)
    return p[0], p[1:]


@partial(jax.jit, static_argnames=("max_leaves",))
def n_leaves_posterior(log_leaf, log_phi, ds: DeviceStructure, max_leaves: int = 16):
    """log of ``sum_{T: b(T)=b} phi^-(b-1) prod L`` per symbol and leaf count.

    Returns
    -------
    float[M + 2, max_leaves]; column ``b-1`` holds leaf count ``b``.  Normalise
    the root row by ``log Q(root)`` for the posterior of the number of leaves
    (exact for ``b <= max_leaves``; the rest of the mass is on larger trees).
    """
    m2 = log_leaf.shape[0]
    bmax = max_leaves
    q0 = jnp.full((m2, bmax), -jnp.inf, log_leaf.dtype)
    # column b of the parent takes left column b1 and right column b - 1 - b1 (leaf counts add)
    b1 = jnp.arange(bmax)[:, None]
    b = jnp.arange(bmax)[None, :]
    src = b - 1 - b1                                              # (B1, B)
    ok = src >= 0
    src = jnp.maximum(src, 0)

    def body(qb, ids):
        ql, qr = qb[ds.left[ids]], qb[ds.right[ids]]               # (C, S, B)
        pair = ql[:, :, :, None] + jnp.where(ok, qr[:, :, src], -jnp.inf)   # (C, S, B1, B)
        agg = _safe_lse(pair.reshape(pair.shape[0], -1, bmax), 1) - log_phi
        new = agg.at[:, 0].set(log_leaf[ids])
        return qb.at[ids].set(new), None

    qb, _ = jax.lax.scan(body, q0, ds.chunks)
    return qb


def fit_hyperparameters(ds: DeviceStructure, root: int, *, kind: str = "classification", log_phi0: float = 2.0,
                        alpha0=1.0, prior: NIGPrior | None = None, learn_alpha: bool = True, steps: int = 100,
                        learning_rate: float = 0.05):
    """Maximise the log evidence over ``log phi`` (and ``log alpha``) with ``jax.grad`` and Adam.

    Returns
    -------
    dict with ``log_phi``, ``alpha`` (array), ``log_evidence`` (final) and
    ``trace`` (log evidence per step).
    """
    import optax

    k = ds.stats.shape[1]
    la0 = jnp.log(jnp.broadcast_to(jnp.asarray(alpha0, ds.stats.dtype), (k,)))
    params = {"log_phi": jnp.asarray(log_phi0, ds.stats.dtype), "log_alpha": la0}

    def neg(p):
        a = jnp.exp(p["log_alpha"]) if learn_alpha else jnp.exp(la0)
        ll = log_leaf_marginals(ds.stats, kind, a, prior)
        return -log_evidence(ll, p["log_phi"], ds, root)

    opt = optax.adam(learning_rate)
    state = opt.init(params)

    @jax.jit
    def step(p, s):
        val, g = jax.value_and_grad(neg)(p)
        upd, s = opt.update(g, s, p)
        return optax.apply_updates(p, upd), s, val

    trace = []
    for _ in range(int(steps)):
        params, state, val = step(params, state)
        trace.append(-float(val))
    final = -float(neg(params))
    alpha = np.exp(np.asarray(params["log_alpha"])) if learn_alpha else np.exp(np.asarray(la0))
    return {"log_phi": float(params["log_phi"]), "alpha": alpha, "log_evidence": final, "trace": np.array(trace)}
