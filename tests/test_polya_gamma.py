"""Polya-Gamma draws (:mod:`bayestrees.polya_gamma`) against the law's series representation
``PG(b, c) = 1 / (2 pi^2) sum_k g_k / ((k - 1/2)^2 + c^2 / (4 pi^2))``, ``g_k ~ Gamma(b, 1)``: its exact
mean and variance, and its distribution by a two-sample Kolmogorov-Smirnov test against draws of
the series (500 terms and the tail's mean; fixed seeds)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from bayestrees.polya_gamma import pg_mean, polya_gamma

draw = jax.jit(polya_gamma, static_argnames="dtype")


def _series_moments(b, c, terms=200_000):
    d = (np.arange(1, terms + 1) - 0.5) ** 2 + c * c / (4 * np.pi ** 2)
    return b / (2 * np.pi ** 2) * np.sum(1 / d), b / (4 * np.pi ** 4) * np.sum(1 / d ** 2)


@pytest.mark.parametrize("b,c", [(1, 0.0), (1, -2.5), (1, 12.0), (3, 1.5)])
def test_mean_and_variance_are_the_laws(b, c):
    n = 50_000
    x = np.asarray(draw(jax.random.key(3), jnp.full(n, b), jnp.full(n, c)), np.float64)
    mean, var = _series_moments(b, c)
    assert abs(x.mean() - mean) < 4.5 * np.sqrt(var / n), (x.mean(), mean)
    # the sample variance's sd is about var sqrt((kurtosis - 1) / n); PG's excess kurtosis is below 6
    assert abs(x.var() - var) < 4.5 * var * np.sqrt(8.0 / n), (x.var(), var)
    assert float(pg_mean(b, c)) == pytest.approx(mean, rel=1e-5)


@pytest.mark.parametrize("c", [0.0, 1.0, 3.0])
def test_distribution_matches_the_series(c):
    n = 20_000
    x = np.asarray(draw(jax.random.key(11), jnp.ones(n, int), jnp.full(n, c)), np.float64)
    rng = np.random.default_rng(0)
    terms = 500
    d = (np.arange(1, terms + 1) - 0.5) ** 2 + c * c / (4 * np.pi ** 2)
    tail = np.sum(1 / ((np.arange(terms + 1, 2_000_000) - 0.5) ** 2 + c * c / (4 * np.pi ** 2)))
    y = np.concatenate([rng.exponential(size=(5000, terms)) @ (1 / d) for _ in range(n // 5000)])
    y = (y + tail) / (2 * np.pi ** 2)
    assert stats.ks_2samp(x, y).pvalue > 1e-3


def test_shapes_zero_trials_and_mixed_counts():
    key = jax.random.key(0)
    b = jnp.asarray([[0, 1, 4], [2, 0, 1]])
    x = draw(key, b, jnp.asarray([0.5, -1.0, 2.0]))
    assert x.shape == (2, 3) and x.dtype == jnp.float32
    assert float(x[0, 0]) == 0.0 and float(x[1, 1]) == 0.0 and bool(jnp.all(x[b > 0] > 0))
    # the counts of one array: each element's own number of draws (mean b tanh(c/2) / (2c))
    n = 40_000
    counts = jnp.tile(jnp.asarray([1, 5]), n // 2)
    x = np.asarray(draw(jax.random.key(5), counts, jnp.full(n, 0.8)), np.float64)
    for k in (1, 5):
        got = x[np.asarray(counts) == k]
        mean, var = _series_moments(k, 0.8)
        assert abs(got.mean() - mean) < 4.5 * np.sqrt(var / got.size)
