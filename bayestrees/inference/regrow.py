"""Particle Gibbs regrowth of one tree of a sum, for every ensemble with compact heap trees.

BART's trees and the tree functions' are compact heaps (split variable and split code per slot;
:mod:`bayestrees.inference.bart.kernel`).  Given every other tree, tree ``j``'s conditional is a
single-tree posterior: its pseudo-response ``r`` (the partial residual) with known row precisions
``p_i``, Normal leaves ``N(0, tau2)`` integrated out, the depth prior with the ancestor-interval
rule prior, truncated to trees whose nodes hold ``min_leaf_rows`` rows.  That is Bayesian CART's
target with :class:`~bayestrees.leaves.KnownVarianceNormalLeaves` and ``rules="intervals"``, so the
conditional SMC update of :mod:`bayestrees.inference.pgibbs` (Lakshminarayanan, Roy & Teh 2015,
who did it for BART) applies as it is, on the same :class:`~bayestrees.inference.heap.HeapTree`
layout: :func:`regrow_tree` runs :func:`~bayestrees.inference.pgibbs.pgibbs` on the tree itself.  The update leaves the tree's conditional invariant for any number of particles;
the caller draws the leaf values from their conjugate posterior afterwards (a Gibbs step).
Any leaf model whose marginal is a sum over leaves serves: Normal leaves of known variance (BART,
the tree functions' conjugate Normal path; row statistics ``[p_i, p_i r_i, 0, 0]``) and the
Gamma-Poisson leaves of log-gamma trees (:class:`~bayestrees.leaves.GammaPoissonLeaves`, row
statistics ``[y_i, u_i]``): :func:`bayestrees.inference.bart.kernel.regrow_trees` builds them from
its visit leaf model.

The ensembles' row-count constraint counts rows (``rows``: 1 for a data row, 0 for padding),
whatever their weights, as BART's moves do: the rows enter the statistics through ``p_i`` and
the node counts through ``rows``.
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from . import heap
from .moves import MCMCConfig, MCMCData, State, evaluate
from .pgibbs import pgibbs

__all__ = ["Regrown", "regrow_config", "regrow_tree"]


class Regrown(NamedTuple):
    """One tree after a regrowth: compact arrays, its rows' leaves and its per-slot statistics."""

    feature: jnp.ndarray    # int32 (S,): split variable of each internal slot, -1 elsewhere
    threshold: jnp.ndarray  # int32 (S,): split code (0 where not internal)
    leaf: jnp.ndarray       # int32 (n,): each row's leaf slot
    stats: jnp.ndarray      # float (S, k): the row statistics summed per slot (Normal rows: ``sum p_i``, ``sum p_i r_i``, ...)
    count: jnp.ndarray      # float (S,): rows per slot (every used slot, internal ones too)
    changed: jnp.ndarray    # bool: the tree differs from the one given


def regrow_config(prior, leaf_model, max_depth: int, n_features: int, min_leaf_rows: int, particles: int,
                  n_codes: int) -> MCMCConfig:
    """The single-tree sampler settings of one tree of a sum (static: part of the compiled program);
    ``leaf_model``: :class:`~bayestrees.leaves.KnownVarianceNormalLeaves` ``(1, tau2)`` for Normal rows,
    or :class:`~bayestrees.leaves.GammaPoissonLeaves`."""
    return MCMCConfig(prior=prior, leaf_model=leaf_model, max_depth=int(max_depth), n_features=int(n_features),
                      scheme="pgibbs", min_leaf_rows=max(int(min_leaf_rows), 1), particles=int(particles),
                      n_codes=int(n_codes), rules="intervals")


def regrow_tree(key, feature, threshold, stats, rows, codes, code_lo, code_hi, prior,
                cfg: MCMCConfig, var_weight=None, categories=None) -> Regrown:
    """One conditional SMC update of one compact tree given its rows' statistics.

    Parameters
    ----------
    key : the update's randomness
    feature, threshold : int (S,)  the tree (compact heap)
    stats : float (n, k)  the rows' statistics for ``cfg.leaf_model`` (``[p_i, p_i r_i, 0, 0]``, or
        ``[y_i, u_i]`` for :class:`~bayestrees.leaves.GammaPoissonLeaves`)
    rows : float (n,)  1 for a data row, 0 for padding
    codes : int32 (n, d)  the rows' feature codes
    code_lo, code_hi : int32 (d,)  the root's interval of every feature
    prior : the tree prior with traced values
    cfg : :func:`regrow_config`
    var_weight : float (d,), optional  split-variable weights ``xi`` of the rule prior (the variable
        with probability ``xi_j / sum_valid xi``: the sparse prior's, or the missing values' column
        weights); None: uniform among the valid variables
    categories : int32 (d,), optional  the root category masks of the features split by subsets
        (0 for an ordered one); None: every feature ordered

    Returns
    -------
    Regrown
    """
    dt = stats.dtype
    data = MCMCData(codes=codes, y=stats[:, 1], row_stats=stats, weight=rows.astype(dt), prior=prior, code_lo=code_lo,
                    code_hi=code_hi, var_weight=var_weight, categories=categories)
    tree = heap.HeapTree(feature=feature, threshold=threshold)
    new, changed = pgibbs(key, State(tree=tree, ev=evaluate(tree, data, cfg), beta=jnp.ones((), dt)), data, cfg)
    return Regrown(new.tree.feature.astype(jnp.int32), new.tree.threshold.astype(jnp.int32), new.ev.leaf.astype(jnp.int32),
                   new.ev.stats, new.ev.count, changed)
