"""BART for several classes: multinomial logit by log-linear BART (Murray 2021), on BART's visit.

Model (``k >= 3`` classes, row weights ``w_i``)::

    P(y_i = c | x_i) = lambda_c(x_i) / sum_l lambda_l(x_i),   lambda_c(x) = exp(o_c + f_c(x)),
    f_c = sum of m trees,  exp(theta) ~ Gamma(a, b) independently at every leaf of every tree,

each class with its own sum of trees (all ``k`` free: the softmax does not change when every
``f_c`` moves by the same amount, and the proper leaf prior settles that direction), ``o_c`` the log
of the class's weighted frequency, and a row of weight ``w_i`` contributing ``w_i log P(y_i | x_i)``.

Sampler (Murray 2021, section 3: the augmentation that makes every leaf update conjugate).  With a
latent ``phi_i >= 0`` per row,

    p(y_i, phi_i | f) = prod_c lambda_c(x_i)^(w_i [y_i = c]) phi_i^(w_i - 1) / Gamma(w_i)
                        exp(-phi_i sum_c lambda_c(x_i)),

whose integral over ``phi_i`` is ``P(y_i | x_i)^w_i``.  Given ``phi``, the classes' sums of trees
are independent, and class ``c``'s likelihood is that of Poisson counts ``w_i [y_i = c]`` with
exposures ``phi_i exp(o_c)``: the Gamma-Poisson leaves of :class:`~bayestrees.leaves.GammaPoissonRows`
on BART's visit (:func:`bayestrees.inference.bart.kernel.move_trees`: each tree's move with its
leaf values integrated out, then its leaf values from their Gamma conditional; the optional particle
Gibbs regrowth, :func:`~bayestrees.inference.bart.kernel.regrow_trees`).  One step:

1. ``phi_i ~ Gamma(w_i, sum_c lambda_c(x_i))`` (0 for a row of weight 0);
2. for every class at once (``jax.vmap`` over the classes), BART's move phase of its ``m`` trees,
   ``local_moves`` times, then the regrowth when ``particles > 0``.

Every update is an exact Gibbs or Metropolis-Hastings update of the joint of trees, leaves and
``phi``, so the chain targets the posterior (tested against the closed-form Dirichlet posterior and
against the posterior of every tree structure on tiny data, ``tests/inference/bart/test_bart_multiclass.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import random_bits
from ...leaves import GammaPoissonLeaves
from .. import heap
from ..loop import Kernel
from . import kernel as bart_kernel

__all__ = ["MultinomialConfig", "MultinomialState", "class_counts", "build_kernel", "collect", "softmax_probabilities"]


@dataclass(frozen=True)
class MultinomialConfig:
    """Static settings (hashable): BART's kernel settings for every class's trees (``base``; not probit,
    ``sigma`` not sampled, no sparse prior, no tempering, one device), the number of classes and the
    leaf prior ``exp(theta) ~ Gamma(shape, rate)``."""

    base: bart_kernel.KernelConfig
    n_classes: int
    shape: float
    rate: float

    def __post_init__(self):
        b = self.base
        if b.probit or b.sample_sigma or b.sparse or b.tempered or b.data_devices > 1:
            raise ValueError("multinomial BART takes BART's kernel settings without probit, sigma, the sparse prior, "
                             "tempering or rows across devices")
        if self.n_classes < 2:
            raise ValueError(f"n_classes must be at least 2, got {self.n_classes}")


class MultinomialState(NamedTuple):
    """One chain: ``trees`` BART's :class:`~bayestrees.inference.bart.kernel.State` of every class,
    stacked (leading axis ``k``; ``resid`` holds ``-f_c`` at the rows, ``wsum`` the per-leaf sums of
    the class's counts ``w_i [y_i = c]``), and ``phi`` (n,) the rows' latents."""

    trees: bart_kernel.State
    phi: jax.Array


def class_counts(data: bart_kernel.BARTData, n_classes: int):
    """``(k, n)``: row ``i``'s count for class ``c``, ``w_i [y_i = c]`` (0 for padding rows and rows of
    weight 0); ``data.y`` holds the class codes."""
    live = jnp.where(data.rows > 0, data.weight, 0.0)
    return jnp.where(data.y[None, :] == jnp.arange(n_classes, dtype=data.y.dtype)[:, None], live[None, :], 0.0)


def _leaves(cfg: MultinomialConfig, phi, offset_c, counts_c):
    return GammaPoissonLeaves(cfg.shape, cfg.rate).on_rows(phi * jnp.exp(offset_c), counts_c)


def _draw_phi(key, trees: bart_kernel.State, data: bart_kernel.BARTData):
    """``phi_i ~ Gamma(w_i, sum_c exp(o_c + f_c(x_i)))``, 0 where the row carries no likelihood."""
    live = (data.rows > 0) & (data.weight > 0)
    eta = data.offset[:, None] - trees.resid                     # o_c + f_c, (k, n)
    lse = jax.scipy.special.logsumexp(eta, axis=0)
    g = random_bits.gamma(key, jnp.where(live, data.weight, 1.0).astype(jnp.float32), dtype=eta.dtype)
    return jnp.where(live, g * jnp.exp(-lse), 0.0).astype(eta.dtype)


@dataclass(frozen=True)
class _Init:
    cfg: MultinomialConfig
    dtype: object

    def __call__(self, key, data: bart_kernel.BARTData) -> MultinomialState:
        base = bart_kernel.build_kernel(self.cfg.base, self.dtype)
        counts = class_counts(data, self.cfg.n_classes).astype(self.dtype)

        def one(c_counts):
            st = base.init(key, data._replace(weight=c_counts))
            zero = jnp.zeros_like(st.resid)
            return st._replace(resid=zero, z=zero)   # every tree a root leaf of value 0: f_c = 0

        trees = jax.vmap(one)(counts)
        return MultinomialState(trees=trees, phi=_draw_phi(key, trees, data))


@dataclass(frozen=True)
class _Step:
    """One step in named phases: the latents (:func:`_draw_phi`), then every class's trees
    (:func:`move_classes`)."""

    cfg: MultinomialConfig

    def __call__(self, key, state: MultinomialState, data: bart_kernel.BARTData):
        k_phi, k_trees = random_bits.split(key)
        phi = _draw_phi(k_phi, state.trees, data)
        trees, proposed, accepted = move_classes(k_trees, state.trees, phi, data, self.cfg)
        info = bart_kernel.Info(proposed=proposed, accepted=accepted,
                                at_max_depth=jnp.sum(jax.vmap(lambda st: bart_kernel.at_max_depth(st, self.cfg.base))(trees)))
        return MultinomialState(trees=trees, phi=phi), info


def move_classes(key, trees: bart_kernel.State, phi, data: bart_kernel.BARTData, cfg: MultinomialConfig):
    """Every class's trees given ``phi``: BART's move phase (``local_moves`` times) and, with ``particles``,
    its regrowth, on the Gamma-Poisson rows of the class (counts ``w_i [y_i = c]``, exposures ``phi_i
    exp(o_c)``).  Returns ``(trees, proposed, accepted)``, the last two int32 (4,) summed over the classes."""
    base = cfg.base
    counts = class_counts(data, cfg.n_classes).astype(phi.dtype)
    keys = random_bits.split(key, cfg.n_classes)

    def one(k_c, st, counts_c, offset_c):
        leaves = _leaves(cfg, phi, offset_c, counts_c)
        d_c = data._replace(weight=counts_c)
        st, proposed, accepted = bart_kernel.move_trees(random_bits.split(k_c, 3), st, d_c, base, leaves)
        if base.local_moves > 1:   # further moves of every tree, as BART's step makes them
            def again(i, carry):
                st, pr, ac = carry
                st, p_i, a_i = bart_kernel.move_trees(random_bits.split(random_bits.fold_in(k_c, 1 + i), 3), st, d_c,
                                                      base, leaves)
                return st, pr + p_i, ac + a_i

            st, proposed, accepted = jax.lax.fori_loop(1, base.local_moves, again, (st, proposed, accepted))
        if base.particles:
            st = bart_kernel.regrow_trees(random_bits.fold_in(k_c, 0), st, d_c, base, leaves)
        return st, proposed, accepted

    trees, proposed, accepted = jax.vmap(one)(keys, trees, counts, data.offset)
    return trees, jnp.sum(proposed, 0), jnp.sum(accepted, 0)


def build_kernel(cfg: MultinomialConfig, dtype=jnp.float32) -> Kernel:
    """The multinomial ``init``/``step`` pair for one chain (hashable by ``cfg``).  ``data`` is BART's
    :class:`~bayestrees.inference.bart.kernel.BARTData` with ``y`` the class codes, ``weight`` the row
    weights and ``offset`` the ``(k,)`` class offsets ``o_c``."""
    return Kernel(_Init(cfg, jnp.dtype(dtype)), _Step(cfg))


def log_joint(state: MultinomialState, data: bart_kernel.BARTData, cfg: MultinomialConfig):
    """``sum_i w_i log P(y_i | f) + sum_{c,j} [log p(T_cj) + log p(M_cj)]``, up to a constant (``phi``
    integrated out)."""
    trees = state.trees
    dt = trees.resid.dtype
    eta = data.offset[:, None] - trees.resid
    log_p = eta - jax.scipy.special.logsumexp(eta, axis=0)
    ll = jnp.sum(class_counts(data, cfg.n_classes).astype(dt) * log_p)
    a, b = cfg.shape, cfg.rate
    theta = trees.value
    leaf = heap.leaf_slots(trees.feature)
    lp_leaves = jnp.sum(jnp.where(leaf, a * theta - b * jnp.exp(theta) + (a * math.log(b) - math.lgamma(a)), 0.0))
    return (ll + jnp.sum(trees.log_prior) + lp_leaves).astype(dt)


@dataclass(frozen=True)
class collect:  # noqa: N801 (a function-like callable, hashable by its config)
    """``collect(key, state, data)`` for :func:`~bayestrees.inference.loop.run_chains`: BART's
    :class:`~bayestrees.inference.bart.kernel.Draw` with a class axis: trees ``(k, m, S)``, ``fit``
    ``f_c`` at the training rows ``(k, n)``, ``predict`` ``(k, n_new)``, ``n_leaves``/``depth``
    ``(k, m)``; ``split_counts`` summed over the classes; ``sigma`` 1."""

    cfg: MultinomialConfig
    feature_dtype: object = jnp.int8
    threshold_dtype: object = jnp.uint8
    keep_trees: bool = True

    def __call__(self, key, state: MultinomialState, data: bart_kernel.BARTData) -> bart_kernel.Draw:
        trees = state.trees
        value = trees.value.astype(jnp.float32)
        fit = (-trees.resid).astype(jnp.float32)
        predict = None
        if data.predict_codes is not None:
            predict = jax.vmap(lambda f, t, v: bart_kernel.sum_draw(f, t, v, data.predict_codes, self.cfg.base.max_depth,
                                                               data.categories)
                               )(trees.feature, trees.threshold, value)
        if self.keep_trees:
            tr, summaries = (trees.feature.astype(self.feature_dtype), trees.threshold.astype(self.threshold_dtype),
                             value), (None, None, None)
        else:
            n_leaves, depth, splits = bart_kernel.tree_summaries(trees.feature, data.codes.shape[0])
            tr, summaries = (None, None, None), (n_leaves.astype(jnp.int16), depth.astype(jnp.int8),
                                                 jnp.sum(splits, 0))
        one = jnp.ones((), jnp.float32)
        return bart_kernel.Draw(feature=tr[0], threshold=tr[1], value=tr[2], sigma=one, fit=fit,
                                lp=log_joint(state, data, self.cfg), split_prob=jnp.zeros((0,), jnp.float32),
                                alpha=jnp.zeros((), jnp.float32), n_leaves=summaries[0], depth=summaries[1],
                                split_counts=summaries[2], predict=predict)


def softmax_probabilities(f, offset) -> np.ndarray:
    """Class probabilities ``(..., n, k)`` from class functions ``f`` ``(..., k, n)`` and offsets ``(k,)``
    (float64, on the host)."""
    eta = np.asarray(f, np.float64) + np.asarray(offset, np.float64)[:, None]
    eta = eta - eta.max(-2, keepdims=True)
    p = np.exp(eta)
    p /= p.sum(-2, keepdims=True)
    return np.moveaxis(p, -2, -1)
