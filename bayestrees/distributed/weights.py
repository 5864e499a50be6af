"""Bayesian-bootstrap weights of rows given by their global row index.

The single-machine forest draws tree ``t``'s weights as one vector over all ``n`` rows
(:func:`bayestrees.inference.forest.chunk.draw_weights`).  Under JAX's partitionable Threefry
(``jax_threefry_partitionable``, the default since JAX 0.5) element ``i`` of that vector depends
only on the key and on ``i``, so a worker that holds some rows, with their global indices, can
compute their weights without drawing the other rows'.  That is what makes a branch fitted on a
Dask worker see the same weights as the same rows in a single-machine fit.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p

__all__ = ["tree_keys", "exponential_at", "forest_weights", "partitionable"]


def partitionable() -> bool:
    """Whether JAX's Threefry draws are partitionable (row ``i``'s draw depends on ``i`` only)."""
    return bool(jax.config.jax_threefry_partitionable)


def tree_keys(key, trees) -> tuple[jax.Array, jax.Array]:
    """The weight key and the 32-bit seed of each tree, as the single-machine forest makes them.

    Parameters
    ----------
    key : PRNG key
        The forest key (``k_forest`` of :func:`~bayestrees.inference.forest.fit.fit_bayesian_forest`).
    trees : int array (T,)
        Tree indices.

    Returns
    -------
    (weight_keys, seeds)
        ``weight_keys`` a batch of keys (T,), ``seeds`` uint32 (T,).
    """
    def one(t):
        kw, ks = jax.random.split(jax.random.fold_in(key, t))
        return kw, jax.random.bits(ks, (), jnp.uint32)

    return jax.vmap(one)(jnp.asarray(trees, jnp.int32))


@partial(jax.jit, static_argnames=("dtype",))
def exponential_at(key, index, dtype=jnp.float32) -> jax.Array:
    """Element ``index`` of ``jax.random.exponential(key, (n,), dtype)`` for any ``n > index``.

    Parameters
    ----------
    key : one PRNG key (Threefry)
    index : int array (m,)
        Global row indices (below 2**53).
    dtype : float32 or float64

    Returns
    -------
    jax.Array (m,)
        The Exp(1) draws, floored at the smallest normal number as in
        :func:`~bayestrees.inference.forest.chunk.draw_weights`.

    Notes
    -----
    Reproduces ``jax.random.exponential`` under partitionable Threefry: the bits of element
    ``i`` are ``threefry2x32(key, (hi(i), lo(i)))`` xor-ed, the top mantissa bits make a
    uniform ``u`` in ``[0, 1)`` and the draw is ``-log1p(-u)``.  ``tests/distributed/test_distributed.py``
    checks it against ``jax.random.exponential``.
    """
    dtype = jnp.dtype(dtype)
    k = jax.random.key_data(key).astype(jnp.uint32)
    if jax.config.jax_enable_x64:
        i64 = jnp.asarray(index).astype(jnp.uint64)
        hi = (i64 >> 32).astype(jnp.uint32)
        lo = (i64 & 0xFFFFFFFF).astype(jnp.uint32)
    else:  # 32-bit mode: indices below 2**32 (the caller passes them as uint32)
        lo = jnp.asarray(index).astype(jnp.uint32)
        hi = jnp.zeros_like(lo)
    b1, b2 = threefry2x32_p.bind(k[0], k[1], hi, lo)
    finfo = jnp.finfo(dtype)
    nbits, nmant = finfo.bits, finfo.nmant
    if nbits == 32:
        bits = b1 ^ b2
        ut = jnp.uint32
    else:
        bits = (b1.astype(jnp.uint64) << 32) | b2.astype(jnp.uint64)
        ut = jnp.uint64
    fbits = jax.lax.shift_right_logical(bits, jnp.asarray(nbits - nmant, ut))
    fbits = fbits | jnp.asarray(np.array(1.0, dtype).view(np.dtype(ut)), ut)
    u = jax.lax.bitcast_convert_type(fbits, dtype) - jnp.asarray(1.0, dtype)
    u = jnp.maximum(u, jnp.asarray(0.0, dtype))
    w = -jnp.log1p(-u)
    return jnp.maximum(w, finfo.tiny)


def forest_weights(key, trees, index, dtype=jnp.float32) -> tuple[np.ndarray, np.ndarray]:
    """Exp(1) weights ``(T, m)`` of rows ``index`` for trees ``trees``, and the trees' seeds.

    Equal to rows ``index`` of the weights the single-machine forest draws for those trees
    (:func:`~bayestrees.inference.forest.chunk.draw_weights` with ``kind="exponential"``).
    """
    kws, seeds = tree_keys(key, trees)
    index = np.asarray(index, np.int64)
    if not jax.config.jax_enable_x64:
        if index.size and index.max() >= 2**32:
            raise ValueError("row indices of 2**32 and above need jax_enable_x64")
        index = index.astype(np.uint32)
    idx = jnp.asarray(index)
    w = jax.vmap(lambda k: exponential_at(k, idx, dtype=jnp.dtype(dtype)))(kws)
    return np.asarray(w), np.asarray(seeds)
