"""``fold_in``, ``split`` and float32 ``uniform`` for threefry keys, as one fused program each.

JAX lowers its threefry hash on the CPU as a loop of five rolled rounds (to compile faster),
so every ``jax.random`` call inside a compiled step runs a small ``while`` loop of about twenty
operations per iteration.  A sampler step that draws its uniforms and folds in a counter pays
that overhead on every step (every node visit, in the sweep).  The functions here compute the
same hash with its twenty rounds written out (JAX's own GPU lowering), which XLA fuses into one
elementwise operation.  They return **exactly** what ``jax.random.fold_in``, ``jax.random.split``
and ``jax.random.uniform(key, shape, float32, minval, maxval)`` return for the default
threefry key with ``jax_threefry_partitionable`` (JAX's default); any other key implementation
or setting is handed to ``jax.random`` itself.  ``tests/test_random_bits.py`` holds them to that.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["fold_in", "split", "uniform"]

_ROT = ((13, 15, 26, 6), (17, 29, 16, 24))


def _rotl(x, d: int):
    return (x << np.uint32(d)) | (x >> np.uint32(32 - d))


def threefry2x32(k1, k2, x1, x2):
    """The Threefry-2x32 hash (20 rounds) of counters ``(x1, x2)`` under key ``(k1, k2)``, unrolled."""
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROT[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ _rotl(x2, r)
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def _fast(key) -> bool:
    return (jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and str(jax.random.key_impl(key)) == "threefry2x32"
            and bool(jax.config.jax_threefry_partitionable))


def _words(key):
    d = jax.random.key_data(key)
    return d[..., 0], d[..., 1]


def _wrap(b1, b2):
    return jax.random.wrap_key_data(jnp.stack([b1, b2], -1), impl="threefry2x32")


def fold_in(key, data):
    """``jax.random.fold_in(key, data)`` for a scalar ``data``."""
    if not _fast(key):
        return jax.random.fold_in(key, data)
    k1, k2 = _words(key)
    b1, b2 = threefry2x32(k1, k2, jnp.zeros((), jnp.uint32), jnp.asarray(data).astype(jnp.uint32))
    return _wrap(b1, b2)


def _counters(n: int):
    return jnp.zeros((n,), jnp.uint32), jnp.arange(n, dtype=jnp.uint32)


def split(key, num: int = 2):
    """``jax.random.split(key, num)``."""
    if not _fast(key):
        return jax.random.split(key, num)
    k1, k2 = _words(key)
    b1, b2 = threefry2x32(k1, k2, *_counters(int(num)))
    return _wrap(b1, b2)


def uniform(key, shape=(), minval=0.0, maxval=1.0):
    """``jax.random.uniform(key, shape, jnp.float32, minval, maxval)``."""
    shape = tuple(shape)
    if not _fast(key):
        return jax.random.uniform(key, shape, jnp.float32, minval=minval, maxval=maxval)
    n = math.prod(shape)
    if n >= 2**32:
        raise ValueError(f"at most 2**32 - 1 uniforms per call, got {n}")
    k1, k2 = _words(key)
    b1, b2 = threefry2x32(k1, k2, *_counters(n))
    bits = (b1 ^ b2) >> np.uint32(32 - 23) | np.uint32(0x3F800000)
    f = jax.lax.bitcast_convert_type(bits, jnp.float32) - np.float32(1.0)
    lo, hi = jnp.float32(minval), jnp.float32(maxval)
    return jnp.maximum(lo, (f * (hi - lo) + lo).reshape(shape))
