"""Particle Gibbs regrowth of one tree of a sum, for every ensemble with compact heap trees.

BART's trees and the tree functions' are compact heaps (split variable and split code per slot;
:mod:`bayestrees.inference.bart.kernel`).  Given every other tree, tree ``j``'s conditional is a
single-tree posterior: its pseudo-response ``r`` (the partial residual) with known row precisions
``p_i``, Normal leaves ``N(0, tau2)`` integrated out, the depth prior with the ancestor-interval
rule prior, truncated to trees whose nodes hold ``min_leaf_rows`` rows.  That is Bayesian CART's
target with :class:`~bayestrees.leaves.KnownVarianceNormalLeaves` and ``rules="intervals"``, so the
conditional SMC update of :mod:`bayestrees.inference.pgibbs` (Lakshminarayanan, Roy & Teh 2015,
who did it for BART) applies as it is: :func:`regrow_tree` converts the compact tree to a
:class:`~bayestrees.tree.Tree` at the edge, runs :func:`~bayestrees.inference.pgibbs.pgibbs` and
converts back.  The update leaves the tree's conditional invariant for any number of particles;
the caller draws the leaf values from their conjugate posterior afterwards (a Gibbs step).

The ensembles' row-count constraint counts rows (``rows``: 1 for a data row, 0 for padding),
whatever their weights, as BART's moves do: the rows enter the statistics through ``p_i`` and
the node counts through ``rows``.
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from ..leaves import KnownVarianceNormalLeaves
from ..tree import FREE, LEAF, Tree
from . import heap
from .moves import MCMCConfig, MCMCData, State, evaluate
from .pgibbs import pgibbs

__all__ = ["Regrown", "regrow_config", "regrow_tree", "compact_to_tree"]


class Regrown(NamedTuple):
    """One tree after a regrowth: compact arrays, its rows' leaves and its per-slot statistics."""

    feature: jnp.ndarray    # int32 (S,): split variable of each internal slot, -1 elsewhere
    threshold: jnp.ndarray  # int32 (S,): split code (0 where not internal)
    leaf: jnp.ndarray       # int32 (n,): each row's leaf slot
    precision: jnp.ndarray  # float (S,): sum of the row precisions ``p_i`` per slot
    weighted: jnp.ndarray   # float (S,): sum of ``p_i r_i`` per slot
    count: jnp.ndarray      # float (S,): rows per slot (every used slot, internal ones too)
    changed: jnp.ndarray    # bool: the tree differs from the one given


def regrow_config(prior, tau2: float, max_depth: int, n_features: int, min_leaf_rows: int, particles: int,
                  n_codes: int) -> MCMCConfig:
    """The single-tree sampler settings of one tree of a sum (static: part of the compiled program)."""
    return MCMCConfig(prior, KnownVarianceNormalLeaves(1.0, float(tau2)), int(max_depth), int(n_features),
                      scheme="pgibbs", min_leaf_rows=max(int(min_leaf_rows), 1), particles=int(particles),
                      n_codes=int(n_codes), rules="intervals")


def compact_to_tree(feature, threshold, dtype=jnp.float32) -> Tree:
    """The :class:`~bayestrees.tree.Tree` of one compact heap tree (split variables ``-1`` off the internal slots)."""
    S = feature.shape[-1]
    idx = jnp.arange(S)
    internal = feature >= 0
    used = (idx == 0) | internal[jnp.maximum((idx - 1) // 2, 0)]
    child = lambda k: jnp.where(internal, k, jnp.where(used, LEAF, FREE)).astype(jnp.int32)  # noqa: E731
    return Tree(feature=jnp.where(internal, feature, -1).astype(jnp.int32),
                threshold=jnp.where(internal, threshold, 0).astype(jnp.int32),
                left=child(2 * idx + 1), right=child(2 * idx + 2), missing_left=jnp.zeros(S, bool),
                value=jnp.zeros((S, 1), dtype), weight=jnp.zeros(S, dtype), count=jnp.zeros(S, jnp.int32),
                depth=heap.depth_of(idx), n_nodes=jnp.sum(used).astype(jnp.int32))


def regrow_tree(key, feature, threshold, r, precision, rows, codes, code_lo, code_hi, prior,
                cfg: MCMCConfig) -> Regrown:
    """One conditional SMC update of one compact tree given its pseudo-response.

    Parameters
    ----------
    key : the update's randomness
    feature, threshold : int (S,)  the tree (compact heap)
    r : float (n,)  pseudo-response (the partial residual)
    precision : float (n,)  ``p_i = w_i / sigma^2`` (0: the row carries no likelihood)
    rows : float (n,)  1 for a data row, 0 for padding
    codes : int32 (n, d)  the rows' feature codes
    code_lo, code_hi : int32 (d,)  the root's interval of every feature
    prior : the tree prior with traced values
    cfg : :func:`regrow_config`

    Returns
    -------
    Regrown
    """
    dt = r.dtype
    p = jnp.where(rows > 0, precision, 0.0).astype(dt)
    zero = jnp.zeros_like(r)
    # the sum of squares and the normalising terms are the same for every tree: left out
    data = MCMCData(codes, r, jnp.stack([p, p * r, zero, zero], -1), rows.astype(dt), prior=prior,
                    code_lo=code_lo, code_hi=code_hi)
    tree = compact_to_tree(feature, threshold, dt)
    new, changed = pgibbs(key, State(tree, evaluate(tree, data, cfg), jnp.ones((), dt)), data, cfg)
    internal = new.tree.is_internal()
    return Regrown(jnp.where(internal, new.tree.feature, -1).astype(jnp.int32),
                   jnp.where(internal, new.tree.threshold, 0).astype(jnp.int32), new.ev.leaf.astype(jnp.int32),
                   new.ev.stats[:, 0], new.ev.stats[:, 1], new.ev.count, changed)
