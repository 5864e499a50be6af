"""One fixed-capacity array representation for decision trees.

Every family produces and consumes :class:`Tree`.  A tree is a pytree of
arrays with a trailing ``node`` axis of fixed length (the *capacity*); a batch
of trees is the same pytree with leading batch axes (``vmap`` over it).

Node 0 is the root; other nodes sit in any slot.  Every slot is marked
explicitly by its ``left`` entry: ``left >= 0`` an internal node (the index of
its left child), ``left == LEAF`` (-1) a leaf, ``left == FREE`` (-2) an unused
slot.  ``n_nodes`` is the number of used slots, not a bound on their indices:
after :func:`prune_node` the used slots need not be a prefix, and
:func:`grow_leaf` reuses free slots.  Summaries, export, traversal and
conversion read the marks, never ``n_nodes``.
Splits act on binned feature codes (see :mod:`bayestrees.data`): a row goes to
the left child when ``code[feature] <= threshold``, or when its code is the
missing code and ``missing_left`` is set.

Shapes (one tree; ``N`` = capacity, ``V`` = outputs per leaf)
-------------------------------------------------------------
feature : int32[N]       split feature, -1 for leaves and unused slots
threshold : int32[N]     split code threshold (go left if code <= threshold)
left, right : int32[N]   child indices, -1 for leaves
missing_left : bool[N]   missing codes go left at this split
value : float[N, V]      node prediction (regression: mean; classes: probabilities)
weight : float[N]        total row weight in the node (training)
count : int32[N]         number of training rows with positive weight in the node
depth : int32[N]         depth of the node (root 0)
n_nodes : int32[]        number of used slots (a count)
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "Tree",
    "LEAF",
    "FREE",
    "mark_unused",
    "grow_leaf",
    "prune_node",
    "parents",
    "check_tree",
    "empty_tree",
    "apply",
    "predict",
    "n_leaves",
    "max_depth",
    "feature_counts",
    "leaf_counts",
    "to_text",
    "to_dot",
    "to_dict",
    "trunk_signature",
    "tree_from_numpy",
    "tree_to_numpy",
    "index_tree",
]


#: ``left`` mark of a leaf
LEAF = -1
#: ``left`` mark of an unused slot
FREE = -2


class Tree(NamedTuple):
    """A decision tree (or a batch of trees) in fixed-capacity arrays."""

    feature: jax.Array
    threshold: jax.Array
    left: jax.Array
    right: jax.Array
    missing_left: jax.Array
    value: jax.Array
    weight: jax.Array
    count: jax.Array
    depth: jax.Array
    n_nodes: jax.Array

    @property
    def capacity(self) -> int:
        return int(self.feature.shape[-1])

    @property
    def n_outputs(self) -> int:
        return int(self.value.shape[-1])

    @property
    def batch_shape(self) -> tuple:
        return tuple(self.feature.shape[:-1])

    def is_leaf(self) -> jax.Array:
        """bool[..., N]: slots that are leaves."""
        return self.left == LEAF

    def is_internal(self) -> jax.Array:
        """bool[..., N]: slots that are internal (split) nodes."""
        return self.left >= 0

    def is_used(self) -> jax.Array:
        """bool[..., N]: slots that hold a node (leaf or internal)."""
        return self.left != FREE


def empty_tree(capacity: int, n_outputs: int = 1, dtype=jnp.float32) -> Tree:
    """A tree with a single root leaf and ``capacity`` slots."""
    if capacity < 1:
        raise ValueError(f"tree capacity must be >= 1, got {capacity}")
    neg = -jnp.ones(capacity, jnp.int32)
    free = jnp.full(capacity, FREE, jnp.int32).at[0].set(LEAF)
    return Tree(
        feature=neg,
        threshold=jnp.zeros(capacity, jnp.int32),
        left=free,
        right=free,
        missing_left=jnp.zeros(capacity, bool),
        value=jnp.zeros((capacity, n_outputs), dtype),
        weight=jnp.zeros(capacity, dtype),
        count=jnp.zeros(capacity, jnp.int32),
        depth=jnp.zeros(capacity, jnp.int32),
        n_nodes=jnp.ones((), jnp.int32),
    )


@jax.jit
def pack(tree: Tree) -> tuple[jax.Array, jax.Array]:
    """The two per-node words the traversal reads, for a tree or a batch of trees.

    ``info = (threshold + 1) << 16 | feature << 1 | missing_left`` (uint32, shape ``S + (capacity,)``;
    thresholds run from -1, "every code goes right", to 65534, so ``threshold + 1`` fits 16 bits) and
    the child pair ``children[2 node + go_right]`` (int32, ``S + (2 capacity,)``), where a leaf's
    children are itself, so a row that has reached its leaf stays there.
    """
    idx = jnp.arange(tree.capacity, dtype=jnp.int32)
    leaf = tree.left < 0
    children = jnp.stack([jnp.where(leaf, idx, tree.left), jnp.where(leaf, idx, tree.right)], -1)
    children = children.reshape(tree.left.shape[:-1] + (2 * tree.capacity,))
    thr = jnp.clip(tree.threshold + 1, 0, 0xFFFF).astype(jnp.uint32)
    info = ((thr << 16) | (jnp.maximum(tree.feature, 0).astype(jnp.uint32) << 1)
            | tree.missing_left.astype(jnp.uint32))
    return info, children


def _traverse_one(info, children, codes: jax.Array, missing: int) -> jax.Array:
    """Leaf index (int32[n]) of every row of ``codes`` (uint[n, d]) in one packed tree."""
    n = codes.shape[0]
    rows = jnp.arange(n)

    def body(state):
        node, _ = state
        w = info[node]
        f = ((w >> 1) & 0x7FFF).astype(jnp.int32)
        c = codes[rows, f].astype(jnp.int32)
        go_right = jnp.where(c == missing, (w & 1) == 0, c >= (w >> 16).astype(jnp.int32))
        nxt = children[2 * node + go_right.astype(jnp.int32)]
        return nxt, jnp.any(nxt != node)

    node, _ = jax.lax.while_loop(lambda s: s[1], body, (jnp.zeros(n, jnp.int32), jnp.array(True)))
    return node


def _sequential(capacity: int) -> bool:
    """Walk a batch of trees one tree at a time (CPU, large trees: one tree's nodes stay in cache,
    and no tree waits for the deepest one) rather than all at once (accelerators, small trees)."""
    return jax.default_backend() == "cpu" and capacity >= 4096


@partial(jax.jit, static_argnames=("missing", "sequential"))
def _traverse(info, children, codes, missing: int, sequential: bool):
    batch = info.shape[:-1]
    info2, ch2 = info.reshape((-1, info.shape[-1])), children.reshape((-1, children.shape[-1]))
    one = lambda i, c: _traverse_one(i, c, codes, missing)  # noqa: E731
    leaves = jax.lax.map(lambda t: one(*t), (info2, ch2)) if sequential else jax.vmap(one)(info2, ch2)
    return leaves.reshape(batch + (codes.shape[0],))


def apply(tree: Tree, codes, missing: int | None = None) -> jax.Array:
    """Leaf index of each row.

    Parameters
    ----------
    tree : Tree, one tree or a batch with batch shape ``S``
    codes : uint array of shape (n, d), from :meth:`bayestrees.data.Binner.transform`
    missing : the missing code (default: the largest value of ``codes.dtype``)

    Returns
    -------
    int32 array of shape ``S + (n,)``.
    """
    return apply_packed(pack(tree), codes, missing)


def apply_packed(packed, codes, missing: int | None = None) -> jax.Array:
    """:func:`apply` on trees already :func:`pack`-ed (callers that predict often pack once)."""
    codes = jnp.asarray(codes)
    _check_codes(codes)
    if missing is None:
        missing = int(np.iinfo(np.dtype(codes.dtype)).max)
    info, children = packed
    return _traverse(info, children, codes, int(missing), _sequential(info.shape[-1]))


def _check_codes(codes) -> None:
    # the traversal packs feature (15 bits) and threshold (16 bits) into one word
    if codes.ndim != 2 or codes.shape[1] >= 1 << 15:
        raise ValueError(f"codes must be (n, d) with d < 32768, got shape {codes.shape}")


def predict(tree: Tree, codes, missing: int | None = None, packed=None) -> jax.Array:
    """Leaf values for each row: float array of shape ``S + (n, V)`` (``packed``: :func:`pack` of ``tree``)."""
    leaves = apply_packed(pack(tree) if packed is None else packed, codes, missing)
    return _gather_values(tree.value, leaves)


@jax.jit
def _gather_values(value, leaves):
    return jnp.take_along_axis(value, leaves[..., None], axis=-2)


@jax.jit
def n_leaves(tree: Tree) -> jax.Array:
    """Number of leaves, shape ``S``."""
    return jnp.sum(tree.is_leaf(), axis=-1).astype(jnp.int32)


@jax.jit
def max_depth(tree: Tree) -> jax.Array:
    """Depth of the deepest leaf, shape ``S`` (a stump has depth 1, a root leaf 0)."""
    return jnp.max(jnp.where(tree.is_leaf(), tree.depth, 0), axis=-1)


@partial(jax.jit, static_argnames=("n_features",))
def feature_counts(tree: Tree, n_features: int) -> jax.Array:
    """How many splits use each feature: int32 ``S + (n_features,)``."""
    internal = tree.is_internal()
    onehot = jax.nn.one_hot(jnp.maximum(tree.feature, 0), n_features, dtype=jnp.int32)
    return jnp.sum(onehot * internal[..., None], axis=-2)


def leaf_counts(tree: Tree, codes, weights=None) -> jax.Array:
    """Sum of ``weights`` (default 1) of the rows of ``codes`` falling in each node slot."""
    leaves = apply(tree, codes)
    n = leaves.shape[-1]
    w = jnp.ones(n) if weights is None else jnp.asarray(weights)
    onehot = jax.nn.one_hot(leaves, tree.capacity, dtype=w.dtype)
    return jnp.einsum("...nk,n->...k", onehot, w)


@jax.jit
def mark_unused(tree: Tree) -> Tree:
    """Mark the slots at index ``>= n_nodes`` as :data:`FREE`.

    For producers that fill slots as a prefix (CART, the PCFG sampler, the
    code-string prior): they call this once on their output.  Works on a batch.
    """
    free = jnp.arange(tree.capacity) >= jnp.asarray(tree.n_nodes)[..., None]
    return tree._replace(
        left=jnp.where(free, FREE, tree.left).astype(jnp.int32),
        right=jnp.where(free, FREE, tree.right).astype(jnp.int32),
        feature=jnp.where(free, -1, tree.feature).astype(jnp.int32),
    )


def parents(tree: Tree) -> jax.Array:
    """Parent slot of every slot of one tree: int32[N], -1 for the root and free slots."""
    n = tree.capacity
    idx = jnp.arange(n, dtype=jnp.int32)
    internal = tree.is_internal()
    tgt_l = jnp.where(internal, tree.left, n)
    tgt_r = jnp.where(internal, tree.right, n)
    par = jnp.full(n, -1, jnp.int32)
    return par.at[tgt_l].set(idx, mode="drop").at[tgt_r].set(idx, mode="drop")


def grow_leaf(tree: Tree, node, feature, threshold, missing_left=False, heap: bool = False) -> tuple[Tree, jax.Array]:
    """Split leaf ``node`` of one tree into two new leaves (jit-friendly, no Python branches).

    The children take the two lowest free slots, or with ``heap=True`` the heap
    slots ``2 node + 1`` and ``2 node + 2`` (samplers use the heap layout: a node's
    slot is a function of its path, so every tree has exactly one labelling); their
    ``value``, ``weight`` and ``count`` are zero (the caller refreshes leaf
    statistics).  When ``node`` is not a leaf, or the slots are not free (or
    beyond the capacity), the tree comes back unchanged.

    Returns
    -------
    (tree, ok) : the new tree and a bool scalar saying whether the split was made.
    """
    n = tree.capacity
    idx = jnp.arange(n, dtype=jnp.int32)
    free = tree.left == FREE
    # the two lowest free slots (n when missing)
    node = jnp.asarray(node, jnp.int32)
    if heap:
        a, b = 2 * node + 1, 2 * node + 2
        ok_slots = (b < n) & free[jnp.clip(a, 0, n - 1)] & free[jnp.clip(b, 0, n - 1)]
    else:
        a = jnp.min(jnp.where(free, idx, n))
        b = jnp.min(jnp.where(free & (idx != a), idx, n))
        ok_slots = b < n
    ok = (tree.left[node] == LEAF) & ok_slots
    a_, b_ = jnp.where(ok, a, n), jnp.where(ok, b, n)  # out-of-range writes are dropped
    node_ = jnp.where(ok, node, n)
    d = tree.depth[node] + 1
    zero_v = jnp.zeros(tree.value.shape[-1], tree.value.dtype)
    new = tree._replace(
        feature=tree.feature.at[node_].set(jnp.asarray(feature, jnp.int32), mode="drop")
        .at[a_].set(-1, mode="drop").at[b_].set(-1, mode="drop"),
        threshold=tree.threshold.at[node_].set(jnp.asarray(threshold, jnp.int32), mode="drop")
        .at[a_].set(0, mode="drop").at[b_].set(0, mode="drop"),
        left=tree.left.at[node_].set(a, mode="drop").at[a_].set(LEAF, mode="drop").at[b_].set(LEAF, mode="drop"),
        right=tree.right.at[node_].set(b, mode="drop").at[a_].set(LEAF, mode="drop").at[b_].set(LEAF, mode="drop"),
        missing_left=tree.missing_left.at[node_].set(jnp.asarray(missing_left, bool), mode="drop")
        .at[a_].set(False, mode="drop").at[b_].set(False, mode="drop"),
        value=tree.value.at[a_].set(zero_v, mode="drop").at[b_].set(zero_v, mode="drop"),
        weight=tree.weight.at[a_].set(0, mode="drop").at[b_].set(0, mode="drop"),
        count=tree.count.at[a_].set(0, mode="drop").at[b_].set(0, mode="drop"),
        depth=tree.depth.at[a_].set(d, mode="drop").at[b_].set(d, mode="drop"),
        n_nodes=tree.n_nodes + jnp.where(ok, 2, 0).astype(tree.n_nodes.dtype),
    )
    return new, ok


def prune_node(tree: Tree, node) -> tuple[Tree, jax.Array]:
    """Collapse internal ``node`` of one tree, whose two children are leaves, into a leaf.

    The children's slots become :data:`FREE`.  When ``node`` is not internal or
    a child is not a leaf, the tree comes back unchanged.

    Returns
    -------
    (tree, ok) : the new tree and a bool scalar saying whether the node was collapsed.
    """
    n = tree.capacity
    node = jnp.asarray(node, jnp.int32)
    lc, rc = tree.left[node], tree.right[node]
    internal = lc >= 0
    ok = internal & (tree.left[jnp.clip(lc, 0, n - 1)] == LEAF) & (tree.left[jnp.clip(rc, 0, n - 1)] == LEAF)
    l_, r_, node_ = jnp.where(ok, lc, n), jnp.where(ok, rc, n), jnp.where(ok, node, n)
    zero_v = jnp.zeros(tree.value.shape[-1], tree.value.dtype)
    new = tree._replace(
        feature=tree.feature.at[node_].set(-1, mode="drop").at[l_].set(-1, mode="drop").at[r_].set(-1, mode="drop"),
        threshold=tree.threshold.at[node_].set(0, mode="drop").at[l_].set(0, mode="drop").at[r_].set(0, mode="drop"),
        left=tree.left.at[node_].set(LEAF, mode="drop").at[l_].set(FREE, mode="drop").at[r_].set(FREE, mode="drop"),
        right=tree.right.at[node_].set(LEAF, mode="drop").at[l_].set(FREE, mode="drop").at[r_].set(FREE, mode="drop"),
        missing_left=tree.missing_left.at[node_].set(False, mode="drop").at[l_].set(False, mode="drop")
        .at[r_].set(False, mode="drop"),
        value=tree.value.at[l_].set(zero_v, mode="drop").at[r_].set(zero_v, mode="drop"),
        weight=tree.weight.at[l_].set(0, mode="drop").at[r_].set(0, mode="drop"),
        count=tree.count.at[l_].set(0, mode="drop").at[r_].set(0, mode="drop"),
        depth=tree.depth.at[l_].set(0, mode="drop").at[r_].set(0, mode="drop"),
        n_nodes=tree.n_nodes - jnp.where(ok, 2, 0).astype(tree.n_nodes.dtype),
    )
    return new, ok


def check_tree(tree: Tree) -> None:
    """Raise ``ValueError`` unless one tree (NumPy or JAX arrays) is well formed.

    Checks: the root is used; every internal node's children are used, distinct
    and one level deeper; every used slot but the root has exactly one parent
    and is reachable from the root; ``n_nodes`` equals the number of used slots.
    """
    t = tree_to_numpy(tree)
    if t.left.ndim != 1:
        raise ValueError("check_tree checks one tree; index the batch first")
    used = t.left != FREE
    if not used[0]:
        raise ValueError("the root slot is free")
    if int(t.n_nodes) != int(used.sum()):
        raise ValueError(f"n_nodes={int(t.n_nodes)} but {int(used.sum())} slots are used")
    seen = np.zeros(len(used), bool)
    stack = [0]
    while stack:
        k = stack.pop()
        if seen[k]:
            raise ValueError(f"slot {k} is reached twice")
        seen[k] = True
        if t.left[k] >= 0:
            for c in (int(t.left[k]), int(t.right[k])):
                if not (0 <= c < len(used)) or not used[c]:
                    raise ValueError(f"node {k} has child {c}, which is not a used slot")
                if t.depth[c] != t.depth[k] + 1:
                    raise ValueError(f"node {c} has depth {t.depth[c]}, its parent {k} depth {t.depth[k]}")
                stack.append(c)
        elif t.left[k] != LEAF or t.right[k] != LEAF:
            raise ValueError(f"slot {k} has left={t.left[k]}, right={t.right[k]}: neither a split nor a leaf")
    if not np.array_equal(seen, used):
        raise ValueError(f"used slots {np.flatnonzero(used & ~seen).tolist()} are not reachable from the root")


def tree_to_numpy(tree: Tree) -> Tree:
    return Tree(*[np.asarray(a) for a in tree])


def tree_from_numpy(tree: Tree) -> Tree:
    return Tree(*[jnp.asarray(a) for a in tree])


def index_tree(tree: Tree, i) -> Tree:
    """The ``i``-th tree of a batch (numpy-style index on the leading axes)."""
    return Tree(*[a[i] for a in tree])


def _names(feature_names, d_max):
    if feature_names is None:
        return [f"x{j}" for j in range(d_max)]
    return list(feature_names)


def _label(binner, feature_names, f, t):
    if binner is not None:
        fb = binner.features_[f]
        return f"{fb.name} {fb.threshold_label(t)}"
    names = _names(feature_names, f + 1)
    return f"{names[f]} <= bin {t}"


def _value_str(v, class_names=None):
    v = np.asarray(v)
    if v.shape[-1] == 1:
        return f"{float(v[0]):.6g}"
    if class_names is not None:
        return "[" + ", ".join(f"{c}: {p:.3g}" for c, p in zip(class_names, v)) + "]"
    return "[" + ", ".join(f"{p:.3g}" for p in v) + "]"


def to_text(tree: Tree, binner=None, feature_names: Sequence[str] | None = None, class_names=None,
            max_depth: int | None = None) -> str:
    """Indented text rendering of one tree (like scikit-learn's ``export_text``)."""
    t = tree_to_numpy(tree)
    if t.feature.ndim != 1:
        raise ValueError("to_text renders one tree; index the batch first (index_tree)")
    lines: list[str] = []

    def rec(node, indent):
        pad = "|   " * indent
        if t.left[node] < 0 or (max_depth is not None and t.depth[node] >= max_depth):
            suffix = "" if t.left[node] < 0 else " (truncated)"
            lines.append(f"{pad}|--- value: {_value_str(t.value[node], class_names)} "
                         f"(n={int(t.count[node])}){suffix}")
            return
        f, th = int(t.feature[node]), int(t.threshold[node])
        lab = _label(binner, feature_names, f, th)
        miss = " [missing left]" if t.missing_left[node] else ""
        lines.append(f"{pad}|--- {lab}{miss}")
        rec(int(t.left[node]), indent + 1)
        lines.append(f"{pad}|--- not ({lab})")
        rec(int(t.right[node]), indent + 1)

    rec(0, 0)
    return "\n".join(lines)


def to_dict(tree: Tree, binner=None, feature_names=None) -> dict:
    """Nested-dict export of one tree (JSON-serialisable)."""
    t = tree_to_numpy(tree)

    def rec(node):
        if t.left[node] < 0:
            return {"leaf": int(node), "value": np.asarray(t.value[node]).tolist(),
                    "count": int(t.count[node]), "weight": float(t.weight[node])}
        f, th = int(t.feature[node]), int(t.threshold[node])
        d = {"node": int(node), "feature": f, "threshold_code": th, "missing_left": bool(t.missing_left[node]),
             "count": int(t.count[node]), "left": rec(int(t.left[node])), "right": rec(int(t.right[node]))}
        if binner is not None:
            d["feature_name"] = binner.features_[f].name
            d["threshold"] = binner.features_[f].threshold_value(th)
        elif feature_names is not None:
            d["feature_name"] = feature_names[f]
        return d

    return rec(0)


def to_dot(tree: Tree, binner=None, feature_names=None, class_names=None) -> str:
    """Graphviz DOT source for one tree."""
    t = tree_to_numpy(tree)
    out = ["digraph Tree {", 'node [shape=box, fontname="helvetica"];']
    for node in np.flatnonzero(t.left != FREE):
        if t.left[node] < 0:
            lab = f"value = {_value_str(t.value[node], class_names)}\\nn = {int(t.count[node])}"
            out.append(f'{node} [label="{lab}", style=rounded];')
        else:
            lab = _label(binner, feature_names, int(t.feature[node]), int(t.threshold[node])).replace('"', "'")
            out.append(f'{node} [label="{lab}\\nn = {int(t.count[node])}"];')
            out.append(f'{node} -> {int(t.left[node])} [label="yes"];')
            out.append(f'{node} -> {int(t.right[node])} [label="no"];')
    out.append("}")
    return "\n".join(out)


def trunk_signature(tree: Tree, levels: int) -> tuple:
    """A hashable description of the top ``levels`` levels of one tree.

    Two trees share a signature when their splits (feature and threshold code)
    agree on every node of depth < ``levels``, in the same left/right layout.
    """
    t = tree_to_numpy(tree)

    def rec(node, d):
        if d >= levels or t.left[node] < 0:
            return None
        return (int(t.feature[node]), int(t.threshold[node]), rec(int(t.left[node]), d + 1),
                rec(int(t.right[node]), d + 1))

    return rec(0, 0)
