"""Parallel tempering over a ladder of inverse temperatures, as a wrapper of any chain-loop kernel.

:func:`tempered` turns a :class:`~bayestrees.inference.loop.Kernel` for one chain into a kernel
whose State holds ``R`` replicas (leading axis ``R``), replica ``r`` at inverse temperature
``beta_r`` (``beta_0 = 1``: the cold chain, the one whose draws are the posterior's).  A step

1. moves every replica with the wrapped kernel's own step (vmapped, keys split per replica);
2. draws one adjacent pair ``(i, i + 1)`` uniformly and proposes to exchange their states
   (everything but the temperature), accepted with probability
   ``min(1, exp((beta_i - beta_{i+1}) (l_{i+1} - l_i)))``, ``l`` the tempered log factor of each
   replica's state (the log likelihood; the untempered factors, the prior, cancel).

Each replica's step leaves its tempered target ``p(T) p(Y | T)^beta`` invariant and the exchange
is a Metropolis-Hastings move on the product of the replicas' targets, so the composition leaves
the product invariant and the cold replica's marginal is the posterior.

What the wrapped kernel must provide: its State is a NamedTuple with a field ``beta`` (the inverse
temperature its step honours), and ``log_lik(state)`` gives the tempered log factor.  ``report``
turns the cold replica's Info (after the exchange) into the Info the chain loop keeps; by default
the cold replica's Info unchanged.  Any kernel that meets this contract can be tempered: Bayesian
CART's schemes (:func:`bayestrees.inference.bcart.schemes.kernel_for`) are, and so can BART's and
user-model kernels be.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp

from .loop import Kernel
from .metropolis import accept

__all__ = ["tempered", "TemperedInit", "TemperedStep", "check_temperatures"]


def check_temperatures(temperatures) -> tuple:
    """``temperatures`` as a tuple of floats ``1 = b_0 > b_1 > ... > 0`` (one entry: no tempering); a
    ``ValueError`` otherwise.  The samplers' configs take their ladder through it."""
    try:
        t = tuple(float(b) for b in (temperatures if hasattr(temperatures, "__iter__") else (temperatures,)))
    except (TypeError, ValueError):
        t = ()
    if not t or t[0] != 1.0 or any(not (0.0 < b <= 1.0) for b in t) or any(a <= b for a, b in zip(t, t[1:])):
        raise ValueError(f"temperatures must be inverse temperatures 1 = b_0 > b_1 > ... > 0, got {temperatures!r}")
    return t


def _cold_info(info, state, swap_accepted):
    return info


@dataclass(frozen=True)
class TemperedInit:
    """``init(key, *args)``: one wrapped ``init`` per replica (keys split ``R`` ways), then each
    replica's ``beta`` set from the ladder."""

    init: Callable[..., Any]
    temperatures: tuple
    dtype: Any

    def __call__(self, key, *args):
        betas = jnp.asarray(self.temperatures, self.dtype)
        in_axes = (0,) + (None,) * len(args)
        st = jax.vmap(self.init, in_axes=in_axes)(jax.random.split(key, betas.shape[0]), *args)
        return st._replace(beta=betas)


@dataclass(frozen=True)
class TemperedStep:
    """``step(key, state, *args)``: every replica steps, then one adjacent pair proposes to exchange
    (module docstring)."""

    step: Callable[..., Any]
    n_replicas: int
    log_lik: Callable[[Any], Any]
    report: Callable[..., Any] = _cold_info

    def __call__(self, key, state, *args):
        k_rep, k_pair, k_acc = jax.random.split(key, 3)
        R = self.n_replicas
        in_axes = (0, 0) + (None,) * len(args)
        st, infos = jax.vmap(self.step, in_axes=in_axes)(jax.random.split(k_rep, R), state, *args)
        i = jax.random.randint(k_pair, (), 0, R - 1, dtype=jnp.int32)
        ll = jax.vmap(self.log_lik)(st)
        log_a = (st.beta[i] - st.beta[i + 1]) * (ll[i + 1] - ll[i])
        acc = accept(jnp.log(jax.random.uniform(k_acc, dtype=ll.dtype)), log_a)
        perm = jnp.arange(R)
        perm = jnp.where(acc, perm.at[i].set(i + 1).at[i + 1].set(i), perm)
        swapped = st._replace(**{f: jax.tree_util.tree_map(lambda a: a[perm], getattr(st, f))
                                 for f in st._fields if f != "beta"})
        cold = jax.tree_util.tree_map(lambda a: a[0], swapped)
        info0 = jax.tree_util.tree_map(lambda a: a[0], infos)
        return swapped, self.report(info0, cold, acc)


def tempered(kernel: Kernel, temperatures, log_lik: Callable[[Any], Any], report: Callable[..., Any] | None = None,
             dtype=jnp.float32) -> Kernel:
    """Parallel tempering of ``kernel`` over the ladder ``temperatures``.

    Parameters
    ----------
    kernel : Kernel
        The one-chain kernel to temper.  Its State is a NamedTuple with a field ``beta`` that its
        step honours (target ``p(T) p(Y | T)^beta``).
    temperatures : sequence of float
        Inverse temperatures, the first 1 (the cold chain), at least two.
    log_lik : callable ``state -> scalar``
        The tempered log factor of one replica's state.  A module-level function (or a hashable
        callable), so that the compiled blocks of the chain loop are reused across fits.
    report : callable ``(info, cold_state, swap_accepted) -> Info``, optional
        The Info kept for the step, from the cold replica's Info and state after the exchange and
        whether the exchange was accepted; default the cold replica's Info.
    dtype : dtype of the temperatures in the State.

    Returns
    -------
    Kernel
        ``init(key, *args)`` and ``step(key, state, *args)`` over States with a leading replica axis.
    """
    temperatures = tuple(float(b) for b in temperatures)
    if len(temperatures) < 2:
        raise ValueError(f"tempering needs at least two temperatures, got {temperatures}")
    if temperatures[0] != 1.0 or any(not 0.0 <= b <= 1.0 for b in temperatures):
        raise ValueError(f"inverse temperatures must lie in [0, 1] and start at 1 (the cold chain), got {temperatures}")
    return Kernel(TemperedInit(kernel.init, temperatures, jnp.dtype(dtype)),
                  TemperedStep(kernel.step, len(temperatures), log_lik, report or _cold_info))
