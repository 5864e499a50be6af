"""The fitted BCART-PCFG posterior: one object behind the model context and the estimators.

:func:`fit_posterior` validates hyperparameters, builds the grammar
(:mod:`~bayestrees.inference.pcfg_structure`), runs the inside programmes once
and returns a :class:`PCFGPosterior` with exact sampling, the MAP tree, the
exact predictive and summaries.

Precision: ``fit_posterior(..., dtype="float32")`` (the fast default) or
``dtype="float64"`` (exact comparisons; needs ``jax_enable_x64`` on, see
:func:`~bayestrees.inference.pcfg.resolve_dtype`).  Every array the posterior
holds or returns is in that dtype.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..leaves import NIGPrior, default_nig_prior
from ..tree import Tree
from . import pcfg as P
from .pcfg_structure import (DEFAULT_MEMORY_BUDGET, PCFGStructure, build_box_structure, build_row_structure)

__all__ = ["PCFGPosterior", "fit_posterior", "check_phi", "check_alpha", "row_stats"]


def check_phi(log_phi) -> float:
    """Validate ``log phi`` (a finite number; phi = exp(log_phi) > 0)."""
    try:
        v = float(log_phi)
    except (TypeError, ValueError):
        raise ValueError(f"log_phi must be a finite number, got {log_phi!r}") from None
    if not np.isfinite(v):
        raise ValueError(f"log_phi must be finite (phi = exp(log_phi) > 0), got {log_phi!r}")
    return v


def phi_to_log(phi) -> float:
    """``log(phi)`` for a user-given phi, which must be > 0."""
    v = float(phi)
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"phi must be a finite number > 0 (the prior is proportional to phi^-leaves), got {phi!r}")
    return float(np.log(v))


def check_alpha(alpha, n_classes: int) -> np.ndarray:
    """Validate the Dirichlet concentration: a scalar or one value per class, all > 0."""
    a = np.asarray(alpha, dtype=np.float64)
    if a.ndim == 0:
        a = np.full(n_classes, float(a))
    if a.ndim != 1 or a.shape[0] != n_classes:
        raise ValueError(f"alpha must be a scalar or have one value per class ({n_classes}), got shape {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"alpha must be > 0 (Dirichlet concentration), got {alpha!r}")
    return a


def row_stats(y, kind: str, n_classes: int | None = None) -> np.ndarray:
    """Per-row sufficient statistics: one-hot classes ``(n, K)`` or ``(1, y, y^2)``."""
    if kind == "classification":
        return np.eye(n_classes)[np.asarray(y)]
    y = np.asarray(y, np.float64)
    return np.stack([np.ones_like(y), y, y * y], 1)


@dataclass
class PCFGPosterior:
    """Exact posterior over trees for one training set.

    Attributes
    ----------
    structure : PCFGStructure
    ds : DeviceStructure
    root : int
    kind : ``"classification"`` or ``"regression"``
    log_phi : float
    alpha : float[K] or None
    prior : NIGPrior or None
    log_leaf, log_q, log_qmax : float[M + 2]
    values : float[M + 2, V]
    capacity : int  node slots of every tree (``2 n - 1``)

    All float arrays share one dtype (:attr:`dtype`), the one given to
    :func:`fit_posterior`.
    """

    structure: PCFGStructure
    ds: P.DeviceStructure
    root: int
    kind: str
    log_phi: float
    alpha: np.ndarray | None
    prior: NIGPrior | None
    log_leaf: jax.Array
    log_q: jax.Array
    log_qmax: jax.Array
    values: jax.Array
    capacity: int

    @property
    def dtype(self) -> np.dtype:
        """Float dtype of the programme (``float32`` or ``float64``)."""
        return np.dtype(self.log_q.dtype)

    @property
    def log_evidence(self) -> float:
        """log p(y | X) under the model (prior normaliser included)."""
        return float(P.log_evidence(self.log_leaf, self.log_phi, self.ds, self.root))

    def map_tree(self) -> tuple[Tree, float]:
        """The MAP tree and its log posterior probability."""
        t, w = P.map_tree(self.log_qmax, self.log_leaf, self.log_phi, self.values, self.ds, self.root, self.capacity)
        return t, float(w - self.log_q[self.root])

    def sample(self, key, n: int) -> tuple[Tree, jax.Array]:
        """``n`` exact posterior trees and the log posterior probability of each."""
        trees, syms = P.sample_trees(key, self.log_q, self.log_leaf, self.log_phi, self.values, self.ds,
                                     self.root, self.capacity, int(n))
        return trees, self.tree_log_prob(trees, syms)

    def tree_log_prob(self, trees: Tree, syms) -> jax.Array:
        """log posterior probability of trees given their node symbols (batch)."""
        leaf = trees.is_leaf()
        ll = jnp.sum(jnp.where(leaf, self.log_leaf[jnp.maximum(syms, 0)], 0.0), -1)
        b = jnp.sum(leaf, -1).astype(self.log_q.dtype)
        return ll - (b - 1) * self.log_phi - self.log_q[self.root]

    def predict_exact(self, codes, batch: int = 64) -> np.ndarray:
        """Exact posterior predictive (class probabilities or mean) at each row: ``(m, V)``."""
        codes = np.asarray(codes, np.int32)
        batch = min(int(batch), P._bucket(max(1, codes.shape[0])))
        out = []
        for a in range(0, codes.shape[0], batch):
            xb = codes[a: a + batch]
            pad = batch - xb.shape[0]
            xp = np.concatenate([xb, np.zeros((pad, xb.shape[1]), np.int32)]) if pad else xb
            g = P.exact_predictive(jnp.asarray(xp), self.log_q, self.log_leaf, self.log_phi, self.values, self.ds)
            out.append(np.asarray(g[self.root])[: xb.shape[0]])
        return np.concatenate(out)

    def root_splits(self) -> tuple[float, np.ndarray]:
        """Posterior probability of a root leaf and of each root split slot."""
        p0, ps = P.root_split_posterior(self.log_q, self.log_leaf, self.log_phi, self.ds, self.root)
        return float(p0), np.asarray(ps)

    def n_leaves_distribution(self, max_leaves: int = 16) -> np.ndarray:
        """Exact posterior probabilities of 1..max_leaves leaves: ``(max_leaves,)``."""
        qb = P.n_leaves_posterior(self.log_leaf, self.log_phi, self.ds, int(max_leaves))
        return np.exp(np.asarray(qb[self.root] - self.log_q[self.root]))

    def sample_paths(self, key, x, n: int):
        """Algorithm 1: ``n`` sampled root-to-leaf paths for one query row ``x`` (codes)."""
        return P.sample_paths(key, jnp.asarray(np.asarray(x, np.int32)), self.log_q, self.log_leaf, self.log_phi,
                              self.values, self.ds, self.root, int(n))


def fit_posterior(codes, n_bins, y, *, kind: str, log_phi: float = 2.0, alpha=1.0, n_classes: int | None = None,
                  prior: NIGPrior | None = None, method: str = "box", memory_budget=DEFAULT_MEMORY_BUDGET,
                  dtype="float32") -> PCFGPosterior:
    """Build the grammar and run the inside programmes.

    Parameters
    ----------
    codes : int[n, d]  bin codes (no missing codes)
    n_bins : int[d]
    y : int[n] class codes or float[n] responses
    kind : ``"classification"`` or ``"regression"``
    method : ``"box"`` (dense over boxes) or ``"row"`` (over reachable row sets)
    memory_budget : bytes or None, for ``method="box"``
    dtype : {"float32", "float64"} or a NumPy/JAX float dtype, default "float32"
        Precision of every array of the programme (leaf marginals, inside
        values, evidence, sampling logits, leaf values, predictive).  float32
        is fast; float64 agrees with exact enumeration to about 1e-12 and
        needs ``jax.config.update("jax_enable_x64", True)`` first (otherwise
        ``ValueError``).  None means float32.

    Returns
    -------
    PCFGPosterior
    """
    dtype = P.resolve_dtype(dtype)
    log_phi = check_phi(log_phi)
    codes = np.asarray(codes)
    if kind == "classification":
        a = check_alpha(alpha, n_classes)
        stats = row_stats(y, kind, n_classes)
    else:
        a = None
        prior = prior or default_nig_prior(y)
        stats = row_stats(y, kind)
    if method == "box":
        st = build_box_structure(codes, n_bins, stats, memory_budget=memory_budget)
    elif method == "row":
        st = build_row_structure(codes, n_bins, stats)
    else:
        raise ValueError(f"method must be 'box' or 'row', got {method!r}")
    ds, root = P.device_structure(st, dtype)
    ll = P.log_leaf_marginals(ds.stats, kind, None if a is None else jnp.asarray(a, dtype), prior)
    q = P.log_inside(ll, log_phi, ds, "sum")
    qm = P.log_inside(ll, log_phi, ds, "max")
    vals = P.leaf_values(ds.stats, kind, None if a is None else jnp.asarray(a, dtype), prior)
    return PCFGPosterior(structure=st, ds=ds, root=root, kind=kind, log_phi=log_phi, alpha=a, prior=prior,
                         log_leaf=ll, log_q=q, log_qmax=qm, values=vals, capacity=P._bucket(max(2, 2 * codes.shape[0])) - 1)
