"""The one Metropolis-Hastings acceptance test (``bayestrees.inference.metropolis.accept``)."""
import jax
import jax.numpy as jnp
import numpy as np

from bayestrees.inference.metropolis import accept


def test_accepts_with_probability_min_one_ratio():
    """Over many uniforms the acceptance rate is ``min(1, r)``: ratios below, at and above one."""
    u = jax.random.uniform(jax.random.key(0), (200_000,), minval=1e-12)
    for log_r in (-2.0, -0.3, 0.0, 1.5):
        rate = float(jnp.mean(accept(jnp.log(u), jnp.float32(log_r))))
        want = min(1.0, np.exp(log_r))
        assert abs(rate - want) < 4 * np.sqrt(want * (1 - want) / u.size) + 1e-6, (log_r, rate, want)


def test_a_move_that_is_not_ok_or_a_nan_ratio_is_rejected():
    log_u = jnp.log(jnp.array([0.5, 0.5, 0.5, 0.5]))
    log_r = jnp.array([10.0, 10.0, jnp.nan, -jnp.inf])
    ok = jnp.array([True, False, True, True])
    np.testing.assert_array_equal(np.asarray(accept(log_u, log_r, ok)), [True, False, False, False])
    np.testing.assert_array_equal(np.asarray(accept(log_u, log_r)), [True, True, False, False])
    # a mask under vmap, not a branch
    got = jax.vmap(accept)(log_u, log_r, ok)
    np.testing.assert_array_equal(np.asarray(got), [True, False, False, False])
