"""The fused threefry helpers and the flattened gathers/scatters give exactly what JAX gives."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayestrees import random_bits as R
from bayestrees.batching import scatter_add, scatter_max, take

TINY = float(jnp.finfo(jnp.float32).tiny)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (79,), (3, 5)])
def test_uniform_is_jax_uniform_bit_for_bit(shape):
    draw = jax.jit(lambda k: R.uniform(k, shape, TINY, 1.0))
    for seed in range(20):
        k = jax.random.key(seed)
        want = np.asarray(jax.random.uniform(k, shape, jnp.float32, minval=TINY, maxval=1.0))
        got = np.asarray(draw(k))
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_fold_in_and_split_are_jax_bit_for_bit():
    fold = jax.jit(R.fold_in)
    for seed in range(20):
        k = jax.random.key(seed)
        for d in (0, 1, 5, 12345, 2**31 - 1):
            np.testing.assert_array_equal(jax.random.key_data(fold(k, d)),
                                          jax.random.key_data(jax.random.fold_in(k, d)))
        for n in (1, 2, 3, 16, 64):
            np.testing.assert_array_equal(jax.random.key_data(R.split(k, n)),
                                          jax.random.key_data(jax.random.split(k, n)))


def test_split_apart_is_split_behind_an_optimization_barrier():
    k = jax.random.key(7)
    for n in (2, 3, 5):
        np.testing.assert_array_equal(jax.random.key_data(jax.jit(R.split_apart, static_argnums=1)(k, n)),
                                      jax.random.key_data(jax.random.split(k, n)))
    keys = jax.random.split(jax.random.key(8), 4)   # under vmap, as in the chains' steps
    np.testing.assert_array_equal(jax.random.key_data(jax.vmap(lambda q: R.split_apart(q, 3))(keys)),
                                  jax.random.key_data(jax.vmap(lambda q: jax.random.split(q, 3))(keys)))
    text = jax.jit(R.split_apart, static_argnums=1).lower(k, 5).as_text()
    assert "optimization_barrier" in text


def test_under_vmap_and_other_key_kinds():
    keys = jax.random.split(jax.random.key(3), 8)
    want = jax.vmap(lambda k: jax.random.uniform(k, (9,), minval=TINY))(keys)
    np.testing.assert_array_equal(jax.jit(jax.vmap(lambda k: R.uniform(k, (9,), TINY)))(keys), want)
    rbg = jax.random.key(0, impl="rbg")  # not threefry: handed to jax.random
    np.testing.assert_array_equal(R.uniform(rbg, (5,)), jax.random.uniform(rbg, (5,)))
    raw = jax.random.PRNGKey(0)  # raw uint32[2] keys too
    np.testing.assert_array_equal(R.uniform(raw, (5,)), jax.random.uniform(raw, (5,)))


@pytest.mark.parametrize("shape", [(), (1,), (5,), (3, 4)])
def test_normal_is_jax_normal_bit_for_bit(shape):
    draw = jax.jit(lambda k: R.normal(k, shape))
    for seed in range(20):
        k = jax.random.key(seed)
        np.testing.assert_array_equal(draw(k), jax.random.normal(k, shape, jnp.float32))


def test_gamma_is_jax_gamma_bit_for_bit():
    """Shapes below 1 (the boost), near 1 (the most rejections) and large; one call, under jit,
    under vmap and nested vmap (the batch folded into one flat call, as JAX's primitive does)."""
    rng = np.random.default_rng(2)
    a = jnp.asarray(np.concatenate([rng.uniform(1e-3, 1, 6), rng.uniform(0.9, 1.2, 6), rng.uniform(1, 600, 6)])
                    .reshape(3, 6), jnp.float32)
    keys = jax.random.split(jax.random.key(5), 24)
    want = jax.vmap(lambda k: jax.random.gamma(k, a, dtype=jnp.float32))(keys)
    assert np.all(np.asarray(want) >= 0)
    np.testing.assert_array_equal(R.gamma(keys[0], a), want[0])
    np.testing.assert_array_equal(jax.jit(R.gamma)(keys[1], a), want[1])
    np.testing.assert_array_equal(jax.jit(jax.vmap(R.gamma, in_axes=(0, None)))(keys, a), want)
    nested = jax.jit(jax.vmap(jax.vmap(R.gamma, in_axes=(0, None)), in_axes=(0, None)))(keys.reshape(4, 6), a)
    np.testing.assert_array_equal(nested.reshape(want.shape), want)
    # a batched shape too (one per chain), and float64 or other keys handed to jax.random
    per = jnp.broadcast_to(a, (24,) + a.shape) * jnp.linspace(0.5, 2, 24, dtype=jnp.float32)[:, None, None]
    np.testing.assert_array_equal(jax.jit(jax.vmap(R.gamma))(keys, per),
                                  jax.vmap(lambda k, b: jax.random.gamma(k, b, dtype=jnp.float32))(keys, per))
    raw = jax.random.PRNGKey(0)
    np.testing.assert_array_equal(R.gamma(raw, a), jax.random.gamma(raw, a, dtype=jnp.float32))


def test_take_under_nested_vmap_equals_plain_gather():
    rng = np.random.default_rng(0)
    table = jnp.asarray(rng.normal(size=(3, 4, 7, 2)))
    idx = jnp.asarray(rng.integers(-2, 9, (3, 4, 11)))  # out of range: clipped, as mode="clip"
    plain = jax.vmap(jax.vmap(lambda t, i: jnp.take(t, i, axis=0, mode="clip")))(table, idx)
    np.testing.assert_array_equal(jax.jit(jax.vmap(jax.vmap(take)))(table, idx), plain)
    # one table, batched indices
    one = jax.vmap(lambda i: take(table[0, 0], i))(idx[0])
    np.testing.assert_array_equal(one, jnp.take(table[0, 0], idx[0], axis=0, mode="clip"))


@pytest.mark.parametrize("op,name", [(scatter_add, "add"), (scatter_max, "max")])
def test_scatters_under_vmap_equal_plain_scatters(op, name):
    rng = np.random.default_rng(1)
    idx = jnp.asarray(rng.integers(-2, 9, (3, 4, 11)))  # negative: from the end; >= 7: dropped
    vals = jnp.asarray(rng.integers(-50, 50, (3, 4, 11, 2)).astype(np.float32))  # integers: sums exact
    init = jnp.asarray(rng.integers(-5, 5, (3, 4, 7, 2)).astype(np.float32))

    def plain(a, i, v):
        return a.at[i].add(v, mode="drop") if name == "add" else a.at[i].max(v, mode="drop")

    assert bool(jnp.any(idx < 0)) and bool(jnp.any(idx >= 7))  # both index rules are exercised

    np.testing.assert_array_equal(jax.jit(jax.vmap(jax.vmap(op)))(init, idx, vals),
                                  jax.vmap(jax.vmap(plain))(init, idx, vals))
    # unbatched table and values, batched indices
    got = jax.vmap(lambda i: op(init[0, 0], i, vals[0, 0]))(idx[0])
    np.testing.assert_array_equal(got, jax.vmap(lambda i: plain(init[0, 0], i, vals[0, 0]))(idx[0]))
    np.testing.assert_array_equal(op(init[0, 0], idx[0, 0], vals[0, 0]), plain(init[0, 0], idx[0, 0], vals[0, 0]))


@pytest.mark.parametrize("reject_all", [False, True], ids=["pre-drawn", "loop"])
def test_log_gamma_given_draws_exact_gamma_variates(reject_all):
    """``log_gamma_given`` on ``gamma_tries``' candidates: ``exp`` of its draws are Gamma(a) (KS test
    at 1e-3, 5,000 draws per shape, shapes below and above 1); with every pre-drawn candidate
    rejected (normals of -1e4: ``1 + c z <= 0``) the loop alone draws them, from the same law, and
    under ``vmap`` too."""
    from scipy import stats

    shapes = np.array([0.3, 1.0, 4.0, 60.0], np.float32)
    a = jnp.asarray(np.repeat(shapes[:, None], 5000, 1))

    def draw(key):
        k1, k2 = jax.random.split(key)
        z, u = R.gamma_tries(k1, a.shape)
        if reject_all:
            z = jnp.full_like(z, -1e4)
        return R.log_gamma_given(k2, a, z, u)

    g = np.exp(np.asarray(jax.jit(draw)(jax.random.key(0)), np.float64))
    for i, s in enumerate(shapes):
        assert stats.kstest(g[i], stats.gamma(s).cdf).pvalue > 1e-3, s
    gv = np.exp(np.asarray(jax.jit(jax.vmap(draw))(jax.random.split(jax.random.key(1), 2)), np.float64))
    for i, s in enumerate(shapes):
        assert stats.kstest(gv[:, i].ravel(), stats.gamma(s).cdf).pvalue > 1e-3, s
