"""``fold_in``, ``split``, float32 ``uniform``, ``normal`` and ``gamma`` for threefry keys, without rolled loops.

JAX lowers its threefry hash on the CPU as a loop of five rolled rounds (to compile faster),
so every ``jax.random`` call inside a compiled step runs a small ``while`` loop of about twenty
operations per iteration.  A sampler step that draws its uniforms and folds in a counter pays
that overhead on every step (every node visit, in the sweep).  The functions here compute the
same hash with its twenty rounds written out (JAX's own GPU lowering), which XLA fuses into one
elementwise operation.  They return **exactly** what ``jax.random.fold_in``, ``jax.random.split``,
``jax.random.uniform(key, shape, float32, minval, maxval)``, ``jax.random.normal(key, shape,
float32)`` and ``jax.random.gamma(key, a, dtype=float32)`` return for the default threefry key with
``jax_threefry_partitionable`` (JAX's default); any other key implementation, dtype or setting is
handed to ``jax.random`` itself.  ``tests/test_random_bits.py`` holds them to that.

:func:`gamma` matters most: JAX's gamma sampler (Marsaglia & Tsang's rejection method) draws a
split, a normal and a uniform per attempt, each a rolled threefry loop inside the rejection loop;
under ``vmap`` over chains those loops are most of the time of a step that draws leaf
parameters (a Bayesian CART draw's noise variance; BET's Dirichlet class probabilities).
"""
from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap

__all__ = ["fold_in", "split", "split_apart", "uniform", "open_uniform", "gumbel", "normal", "gamma", "log_gamma",
           "gamma_tries", "log_gamma_given"]

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


def split_apart(key, num: int = 2):
    """:func:`split` behind an optimization barrier: the same keys, computed once and read by their
    consumers.  The hash is written out as elementwise operations, which XLA otherwise fuses into
    every consumer of every key derived from these, so that a large step compiles several times
    slower (``docs/lab-notes/performance.md``, "Step keys behind a barrier")."""
    return jax.lax.optimization_barrier(split(key, num))


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


@partial(jax.jit, static_argnames=("shape",))
def open_uniform(key, shape):
    """Uniforms on the open interval (0, 1), float32.

    A step draws all its randomness with one call (one threefry instance in the compiled program
    instead of one per decision: the step compiles in about half the time) and the decisions
    read their own entries: a Gumbel variate is ``-log(-log u)`` (a categorical draw is the argmax
    of Gumbel variates plus log-probabilities), a uniform integer below ``m`` is ``floor(u m)``,
    an acceptance test is ``log u < log a``.
    """
    return uniform(key, shape, minval=jnp.finfo(jnp.float32).tiny, maxval=1.0)


def gumbel(u):
    """Standard Gumbel variates from uniforms ``u`` on (0, 1): ``-log(-log u)``."""
    return -jnp.log(-jnp.log(u))


def _normal(key, shape):
    lo = np.nextafter(np.float32(-1.0), np.float32(0.0), dtype=np.float32)
    u = uniform(key, shape, lo, np.float32(1.0))
    return jax.lax.mul(np.float32(np.sqrt(2)), jax.lax.erf_inv(u))


def normal(key, shape=(), dtype=jnp.float32):
    """``jax.random.normal(key, shape, dtype)``: ``sqrt(2) erfinv(u)``, ``u`` uniform on (-1, 1).

    Compiled once per shape (called outside ``jit``, e.g. by a predictive in chunks, it is not
    traced again on every call)."""
    shape = tuple(shape)
    if not _fast(key) or jnp.dtype(dtype) != jnp.float32:
        return jax.random.normal(key, shape, dtype)
    return _normal(key, shape)


def _gamma_one(key, alpha):
    """One ``Gamma(alpha, 1)`` draw by Marsaglia & Tsang's method, step for step as JAX draws it
    (boost below ``alpha = 1``; the same key splits and the same acceptance test)."""
    f32 = jnp.float32
    zero, one, minus_one = f32(0.0), f32(1.0), f32(-1.0)
    third, half, squeeze = f32(1.0 / 3.0), f32(0.5), f32(0.0331)
    boost_mask = alpha >= one
    alpha_orig = alpha
    alpha = jnp.where(boost_mask, alpha, alpha + one)
    d = alpha - third
    c = third / jnp.sqrt(d)

    def cond(kxvu):
        _, X, V, U = kxvu
        return (U >= one - squeeze * (X * X)) & (jnp.log(U) >= X * half + d * (one - V + jnp.log(V)))

    def body(kxvu):
        def next_kxv(kxv):
            k, sub = split(kxv[0])
            x = normal(sub, (), jnp.float32)
            return k, x, one + x * c

        k, x_key, u_key = split(kxvu[0], 3)
        _, x, v = jax.lax.while_loop(lambda kxv: kxv[2] <= zero, next_kxv, (x_key, zero, minus_one))
        return k, x * x, v * v * v, uniform(u_key, ())

    key, sub = split(key)
    _, _, V, _ = jax.lax.while_loop(cond, body, (key, zero, one, f32(2.0)))
    samples = 1 - uniform(sub, ())
    boost = jnp.where(boost_mask, one, jax.lax.pow(samples, one / alpha_orig))
    return d * V * boost


@custom_vmap
def _gamma_flat(keys, a):
    """``Gamma(a_i, 1)`` with key ``keys_i`` for flat ``keys``, ``a``.  Under ``vmap`` the batch is
    folded into the flat axis, so a batched call runs the same one-dimensional program as an
    unbatched one (as JAX's own gamma primitive does): the draws agree to the bit."""
    return jax.vmap(_gamma_one)(keys, a)


@_gamma_flat.def_vmap
def _gamma_flat_vmap(axis_size, in_batched, keys, a):
    keys_b, a_b = in_batched
    keys = keys if keys_b else jnp.broadcast_to(keys, (axis_size,) + keys.shape)
    a = a if a_b else jnp.broadcast_to(a, (axis_size,) + a.shape)
    return _gamma_flat(keys.reshape(-1), a.reshape(-1)).reshape(a.shape), True


@jax.jit
def _gamma(key, a):
    keys = split(key, math.prod(a.shape))
    return _gamma_flat(keys, a.reshape(-1)).reshape(a.shape)


def gamma(key, a, dtype=jnp.float32):
    """``jax.random.gamma(key, a, dtype=dtype)`` (shape ``a.shape``).

    Compiled once per shape: called outside ``jit`` (a predictive drawing in chunks), its
    rejection loop is not traced and compiled again on every call."""
    if not _fast(key) or jnp.dtype(dtype) != jnp.float32:
        return jax.random.gamma(key, a, dtype=dtype)
    return _gamma(key, jnp.asarray(a).astype(jnp.float32))


def log_gamma(key, a, dtype=jnp.float32):
    """``log G`` for ``G ~ Gamma(a)`` (shape ``a.shape``), accurate for small shapes: ``log G(a + 1) +
    log(U) / a``, where ``G`` itself would underflow."""
    k1, k2 = split(key)
    g = gamma(k1, (a + 1.0).astype(jnp.float32), dtype=dtype)
    u = open_uniform(k2, a.shape).astype(dtype)
    return jnp.log(g) + jnp.log(u) / a


#: Pre-drawn Marsaglia-Tsang candidates per variate in :func:`gamma_tries` (the shapes here are at
#: least 1, where a candidate is accepted with probability 0.95 or more: every candidate of a variate
#: is rejected with probability 1e-4 or less, and then the loop of :func:`log_gamma_given` runs).
GAMMA_TRIES = 3


def gamma_tries(key, shape, tries: int = GAMMA_TRIES):
    """The randomness of :func:`log_gamma_given` for variates of ``shape``, drawn ahead in one call:
    ``tries`` standard normals and ``tries + 1`` uniforms on (0, 1) per variate (a sampler's step
    draws them for all its visits at once, outside the loop over the visits)."""
    kz, ku = split(key)
    shape = tuple(shape)
    return normal(kz, shape + (int(tries),)), open_uniform(ku, shape + (int(tries) + 1,))


def _mt_accept(alpha, z, u):
    """Marsaglia & Tsang's candidates for ``Gamma(alpha)``, ``alpha >= 1`` (broadcast over the last
    axis of ``z``, ``u``): whether each is accepted, and ``log G`` for it."""
    d = (alpha - 1.0 / 3.0)[..., None]
    c = 1.0 / jnp.sqrt(9.0 * d)
    t = 1.0 + c * z
    ok = t > 0.0
    log_v = 3.0 * jnp.log(jnp.where(ok, t, 1.0))
    v = jnp.exp(log_v)
    accept = ok & (jnp.log(u) < 0.5 * z * z + d - d * v + d * log_v)
    return accept, jnp.log(d) + log_v


def _first(accept, x):
    """Per variate, ``x`` at the first accepted candidate (last axis), and whether there is one."""
    k = jnp.argmax(accept, axis=-1)
    return jnp.take_along_axis(x, k[..., None], -1)[..., 0], jnp.any(accept, axis=-1)


def log_gamma_given(key, a, z, u):
    """``log G``, ``G ~ Gamma(a)`` (any ``a > 0``; float32), from the candidates of :func:`gamma_tries`.

    ``G = G1 U^(1/a)`` with ``G1 ~ Gamma(a + 1)`` (the boost that keeps small shapes accurate, as
    :func:`log_gamma`) and ``U`` uniform (``u[..., -1]``).  ``G1`` is Marsaglia & Tsang's rejection
    sampler run on the pre-drawn candidates ``(z[..., k], u[..., k])``: its draw is the first
    accepted one.  A variate whose candidates were all rejected draws further candidates from
    ``key`` (``fold_in(key, i)`` in round ``i``) in a ``while`` loop that runs only then, so the
    result is an exact ``Gamma(a)`` draw whatever the number of pre-drawn candidates: the first
    accepted candidate of an i.i.d. sequence has the rejection sampler's law.  The loop runs no
    round in almost every call (under ``vmap``, as long as any chain needs one)."""
    a = jnp.asarray(a, jnp.float32)
    alpha = a + 1.0
    acc, lg = _mt_accept(alpha, z, u[..., :-1])
    lg1, done = _first(acc, lg)

    def more(c):
        i, lg1, done = c
        zz, uu = gamma_tries(fold_in(key, i), a.shape, 1)
        acc, lg = _mt_accept(alpha, zz, uu[..., :1])
        new = acc[..., 0] & ~done
        return i + 1, jnp.where(new, lg[..., 0], lg1), done | new

    _, lg1, _ = jax.lax.while_loop(lambda c: ~jnp.all(c[2]), more, (jnp.zeros((), jnp.uint32), lg1, done))
    return lg1 + jnp.log(u[..., -1]) / a
