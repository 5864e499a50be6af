"""Joining a trunk and the forests of its branches into one batch of whole trees.

The empirical Bayesian forest fitted on a cluster comes back as one trunk (a single tree) and,
for every trunk leaf, a batch of ``T`` branch trees.  Tree ``t`` of the forest is the trunk with
branch tree ``t`` of every leaf grafted in its place, which is what the single-machine forest
grows in one piece; the estimators then predict, save and convert it as any other forest.
"""
from __future__ import annotations

import numpy as np

from ..tree import FREE, LEAF, Tree

__all__ = ["graft"]


def graft(trunk: Tree, branches: dict[int, Tree]) -> Tree:
    """Graft every trunk leaf's branch trees onto the trunk.

    Parameters
    ----------
    trunk : Tree
        One tree (NumPy arrays).
    branches : dict
        Trunk leaf slot -> Tree with batch shape ``(T,)`` (NumPy arrays), the same ``T`` and
        number of outputs for every leaf.  A trunk leaf without an entry stays a leaf.

    Returns
    -------
    Tree
        Batch shape ``(T,)``, capacity the largest tree's node count.  Node numbers differ from a
        single-machine fit (the trunk comes first, then each branch's nodes in leaf order), the
        splits and leaf values do not.
    """
    trunk = Tree(*[np.asarray(a) for a in trunk])
    if not branches:
        raise ValueError("graft needs at least one branch")
    first = next(iter(branches.values()))
    T = int(np.asarray(first.feature).shape[0])
    V = int(np.asarray(first.value).shape[-1])
    n_trunk = int(trunk.n_nodes)
    used = {leaf: np.asarray(b.n_nodes, np.int64).reshape(T) for leaf, b in branches.items()}
    for leaf, b in branches.items():
        if np.asarray(b.feature).shape[0] != T:
            raise ValueError(f"branch at trunk leaf {leaf} has {np.asarray(b.feature).shape[0]} trees, "
                             f"the others {T}")
        if not bool(trunk.left[leaf] == LEAF):
            raise ValueError(f"trunk slot {leaf} is not a leaf")
    sizes = n_trunk + sum(u - 1 for u in used.values())
    cap = int(sizes.max())
    vdtype = np.result_type(trunk.value.dtype, *[np.asarray(b.value).dtype for b in branches.values()])
    out = dict(
        feature=np.full((T, cap + 1), -1, np.int32), threshold=np.zeros((T, cap + 1), np.int32),
        left=np.full((T, cap + 1), FREE, np.int32), right=np.full((T, cap + 1), FREE, np.int32),
        missing_left=np.zeros((T, cap + 1), bool), value=np.zeros((T, cap + 1, V), vdtype),
        weight=np.zeros((T, cap + 1), vdtype), count=np.zeros((T, cap + 1), np.int32),
        depth=np.zeros((T, cap + 1), np.int32))
    for name in out:
        src = np.asarray(getattr(trunk, name))[:n_trunk]
        out[name][:, :n_trunk] = src[None]
    offset = np.full(T, n_trunk, np.int64)
    rows = np.arange(T)[:, None]
    for leaf in sorted(branches):
        b = Tree(*[np.asarray(a) for a in branches[leaf]])
        nb = used[leaf]
        cb = b.feature.shape[1]
        j = np.arange(cb)[None, :]
        # slot of branch node j in the whole tree: the trunk leaf for the root, then a block
        slot = np.where(j == 0, leaf, offset[:, None] + j - 1)
        slot = np.where(j < nb[:, None], slot, cap)  # unused branch slots land in the dropped column
        remap = lambda c: np.where(c >= 0, np.take_along_axis(slot, np.maximum(c, 0), 1), LEAF)  # noqa: E731
        out["feature"][rows, slot] = b.feature
        out["threshold"][rows, slot] = b.threshold
        out["missing_left"][rows, slot] = b.missing_left
        out["value"][rows, slot] = b.value
        out["weight"][rows, slot] = b.weight
        out["count"][rows, slot] = b.count
        out["depth"][rows, slot] = b.depth + trunk.depth[leaf]
        out["left"][rows, slot] = remap(b.left)
        out["right"][rows, slot] = remap(b.right)
        offset = offset + nb - 1
    arrays = {k: v[:, :cap] for k, v in out.items()}
    return Tree(n_nodes=sizes.astype(np.int32), **arrays)
