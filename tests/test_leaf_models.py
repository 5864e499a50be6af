"""The leaf models' one interface against closed forms and direct computation."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from bayestrees.leaves import (CommonVarianceNormalLeaves, DirichletLeaves, NIGPrior, NormalLeaves, leaf_stats,
                               nig_predictive_logpdf)

PRIOR = NIGPrior(m0=0.3, kappa0=0.5, a0=2.0, b0=1.5)


def _data(seed=0, n=12, slots=5):
    rng = np.random.default_rng(seed)
    leaf = rng.choice([0, 2, 3], size=n)        # slots 1 and 4 hold no leaf
    y = rng.normal(size=n)
    yc = rng.integers(0, 3, size=n)
    mask = np.isin(np.arange(slots), [0, 2, 3])
    return leaf, y, yc, mask, slots


def test_leaf_stats_weights_and_batch():
    leaf, y, _, _, S = _data()
    m = NormalLeaves(PRIOR)
    w = np.linspace(0.5, 2.0, len(y))
    st = np.asarray(leaf_stats(leaf, m.row_stats(y, jnp.float32), S, w))
    for s in range(S):
        sel = leaf == s
        np.testing.assert_allclose(st[s], [w[sel].sum(), (w * y)[sel].sum(), (w * y * y)[sel].sum()], rtol=1e-5,
                                   atol=1e-6)
    batch = np.stack([leaf, np.zeros_like(leaf)])
    stb = np.asarray(leaf_stats(batch, m.row_stats(y), S))
    np.testing.assert_allclose(stb[1, 0], [len(y), y.sum(), (y * y).sum()], rtol=1e-5)


def _chain_rule(logpred_fn, n):
    """log p(y_1..y_n) as the sum of sequential predictives log p(y_i | y_<i)."""
    return sum(logpred_fn(i) for i in range(n))


def _sequential_log_predictive(m, leaf, y, S, n_stats):
    """log p(y_i | y_<i) of row i under leaf model ``m``, as a function of i."""
    def lp(i):
        prev = leaf_stats(leaf[:i], m.row_stats(y[:i]), S) if i else jnp.zeros((S, n_stats))
        return float(m.log_predictive(y[i:i + 1], leaf[i:i + 1], prev)[0])
    return lp


def test_dirichlet_marginal_is_product_of_sequential_predictives():
    leaf, _, yc, mask, S = _data(1)
    m = DirichletLeaves(3, alpha=0.7)
    lm = float(m.log_marginal(leaf_stats(leaf, m.row_stats(yc), S), mask))
    assert lm == pytest.approx(_chain_rule(_sequential_log_predictive(m, leaf, yc, S, 3), len(yc)), abs=1e-4)


@pytest.mark.parametrize("alpha", [1.0, 0.3, 2.5])
def test_dirichlet_count_score_is_the_leaf_log_marginal_at_integer_counts(alpha):
    # the proposal's table of the class terms (particle Gibbs) against the log marginal of one leaf,
    # compiled as the samplers compile them: equal up to float32 rounding at integer counts up to n_max
    m = DirichletLeaves(4, alpha=alpha)
    counts = jnp.asarray(np.random.default_rng(0).integers(0, 60, (2000, 4)), jnp.float32)
    counts = counts.at[0].set(0.0).at[1].set(60.0)
    table = jax.jit(lambda c: m.count_score(60, jnp.float32)(c))(counts)
    direct = jax.jit(lambda c: m.log_marginal(c[:, None, :], jnp.ones((c.shape[0], 1), bool)))(counts)
    np.testing.assert_allclose(np.asarray(table), np.asarray(direct), rtol=1e-6, atol=2e-5)
    # other counts are rounded and clipped to the table (a proposal may be any function of the counts)
    odd = jnp.asarray([[0.4, 2.6, 70.0, 1.0]], jnp.float32)
    want = m.log_marginal(jnp.asarray([[[0.0, 3.0, 60.0, 1.0]]], jnp.float32), jnp.ones((1, 1), bool))
    np.testing.assert_allclose(np.asarray(m.count_score(60, jnp.float32)(odd)), np.asarray(want), rtol=1e-6)


def test_normal_marginal_is_product_of_sequential_predictives():
    leaf, y, _, mask, S = _data(2)
    m = NormalLeaves(PRIOR)
    lm = float(m.log_marginal(leaf_stats(leaf, m.row_stats(y), S), mask))
    assert lm == pytest.approx(_chain_rule(_sequential_log_predictive(m, leaf, y, S, 3), len(y)), abs=1e-4)


def _common_variance_density(s2, y, leaf, mask):
    """Product over leaves of the Normal-Normal marginal given s2, times the IG(a0, b0) density."""
    m0, k0, a0, b0 = PRIOR
    total = stats.invgamma.logpdf(s2, a0, scale=b0)
    for s in np.flatnonzero(mask):
        yl = y[leaf == s]
        if len(yl) == 0:
            continue
        cov = s2 * (np.eye(len(yl)) + np.ones((len(yl), len(yl))) / k0)
        total += stats.multivariate_normal.logpdf(yl, np.full(len(yl), m0), cov)
    return np.exp(total)


def test_common_variance_marginal_against_quadrature():
    leaf, y, _, mask, S = _data(3, n=9)
    m = CommonVarianceNormalLeaves(PRIOR)
    lm = float(m.log_marginal(leaf_stats(leaf, m.row_stats(y, jnp.float32), S), mask))
    val, _ = integrate.quad(_common_variance_density, 0, np.inf, args=(y, leaf, mask), limit=200)
    assert lm == pytest.approx(np.log(val), abs=1e-4)


def test_common_variance_predictive_is_marginal_ratio():
    leaf, y, _, mask, S = _data(4)
    m = CommonVarianceNormalLeaves(PRIOR)
    st = leaf_stats(leaf[:-1], m.row_stats(y[:-1]), S)
    st_all = leaf_stats(leaf, m.row_stats(y), S)
    ratio = float(m.log_marginal(st_all, mask) - m.log_marginal(st, mask))
    lp = float(m.log_predictive(y[-1:], leaf[-1:], st, mask)[0])
    assert lp == pytest.approx(ratio, abs=1e-4)


@pytest.mark.parametrize("model", [NormalLeaves(PRIOR), CommonVarianceNormalLeaves(PRIOR)])
def test_normal_draws_match_posterior_moments(model):
    leaf, y, _, mask, S = _data(5, n=40)
    st = leaf_stats(leaf, model.row_stats(y, jnp.float32), S)
    draws = jax.vmap(lambda k: model.draw(k, st, mask))(jax.random.split(jax.random.key(0), 20000))
    mean = np.asarray(draws.value[:, :, 0].mean(0))
    np.testing.assert_allclose(mean[mask], np.asarray(model.predictive(st))[mask, 0], atol=0.03)
    # the posterior predictive mean of y equals E[mu]; its variance is E[s2] + Var[mu]: check against the
    # Student-t predictive through Monte Carlo draws of y
    ys = draws.value[:, 0, 0] + draws.sigma[:, 0] * jax.random.normal(jax.random.key(1), (20000,))
    grid = np.linspace(-2, 2, 5)
    dens_mc = np.array([np.mean(np.abs(np.asarray(ys) - g) < 0.1) / 0.2 for g in grid])
    dens = np.exp(np.asarray(model.log_predictive(jnp.asarray(grid), jnp.zeros(5, jnp.int32), st, mask)))
    np.testing.assert_allclose(dens_mc, dens, atol=0.03)


def test_dirichlet_draws_match_posterior_mean_and_loglik():
    leaf, _, yc, mask, S = _data(6, n=30)
    m = DirichletLeaves(3, alpha=1.0)
    st = leaf_stats(leaf, m.row_stats(yc), S)
    draws = jax.vmap(lambda k: m.draw(k, st))(jax.random.split(jax.random.key(0), 20000))
    np.testing.assert_allclose(np.asarray(draws.value.mean(0))[mask], np.asarray(m.predictive(st))[mask], atol=0.01)
    d0 = jax.tree_util.tree_map(lambda a: a[0], draws)
    ll = np.asarray(m.log_likelihood(yc, leaf, d0))
    np.testing.assert_allclose(ll, np.log(np.asarray(d0.value)[leaf, yc]), rtol=1e-6)


def test_normal_predictive_matches_existing_closed_form():
    leaf, y, _, mask, S = _data(7)
    m = NormalLeaves(PRIOR)
    st = leaf_stats(leaf, m.row_stats(y), S)
    got = np.asarray(m.log_predictive(y, leaf, st))
    sel = np.asarray(st)[leaf]
    want = np.asarray(nig_predictive_logpdf(y, sel[:, 0], sel[:, 1], sel[:, 2], PRIOR))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_gamma_poisson_marginal_against_quadrature():
    """``GammaPoissonLeaves``: per leaf, the integral over ``lambda ~ Gamma(c, d)`` of ``lambda^Y exp(-lambda U)``
    (the Poisson likelihood of the leaf's rows up to the factors that do not depend on the tree), by
    quadrature; an empty leaf contributes 0 and a masked one nothing."""
    from bayestrees.leaves import GammaPoissonLeaves

    c, d = 2.3, 1.7
    model = GammaPoissonLeaves(c, d)
    stats_ = np.array([[0.0, 0.0], [3.0, 1.5], [11.0, 4.2], [1.0, 0.1]])
    prior = stats.gamma(c, scale=1.0 / d)
    got = [float(model.log_marginal(jnp.asarray(stats_[i:i + 1], jnp.float32), jnp.ones(1, bool))) for i in range(4)]
    for (Y, U), g in zip(stats_, got):
        val, _ = integrate.quad(lambda lam: lam ** Y * np.exp(-lam * U) * prior.pdf(lam), 0, np.inf)
        assert abs(g - np.log(val)) < 1e-4, (Y, U, g, np.log(val))   # float32
    assert abs(got[0]) < 1e-5   # an empty leaf: 0 up to float32 rounding
    mask = jnp.asarray([True, False, True, True])
    total = float(model.log_marginal(jnp.asarray(stats_, jnp.float32), mask))
    assert abs(total - (got[0] + got[2] + got[3])) < 1e-4
    assert model != GammaPoissonLeaves(c, 1.0) and hash(model) == hash(GammaPoissonLeaves(c, d))


def test_normal_rows_are_the_known_variance_model_on_a_visits_rows():
    """``KnownVarianceNormalLeaves.on_rows``: per leaf, the rows view's log marginal from ``(wsum, rsum)``
    is the per-slot model's on the rows' precision statistics, less the terms that are the same for every
    tree (``L - S2 / 2``, summed over the rows); its regrowth statistics sum back to ``(wsum, rsum)``; its
    draw is the conjugate posterior (mean at zero noise, variance from two noise values).  float32:
    tolerances of its rounding."""
    from bayestrees.leaves import KnownVarianceNormalLeaves, NormalRows, precision_row_stats

    rng = np.random.default_rng(3)
    n, S, tau2, s2 = 15, 4, 0.7, 0.4
    leaf = rng.choice([1, 2, 3], size=n)
    w = rng.uniform(0.5, 2.0, n).astype(np.float32)
    r = rng.normal(size=n).astype(np.float32)
    rows = KnownVarianceNormalLeaves(sigma2=9.0, tau2=tau2).on_rows(jnp.asarray(w), jnp.asarray(1.0 / s2, jnp.float32))
    assert isinstance(rows, NormalRows) and rows.model == KnownVarianceNormalLeaves(1.0, tau2)
    wsum = jnp.asarray(np.bincount(leaf, w, S), jnp.float32)
    rsum = jnp.asarray(np.bincount(leaf, np.asarray(rows.row_values(jnp.asarray(r))), S), jnp.float32)
    mask = jnp.asarray(np.isin(np.arange(S), [1, 2, 3]))
    per_slot = leaf_stats(leaf, precision_row_stats(r, w / s2), S)
    full = float(rows.model.log_marginal(per_slot, mask))
    view = float(jnp.sum(jnp.where(mask, rows.log_marginal(wsum, rsum), 0.0)))
    p = w.astype(np.float64) / s2
    same_for_every_tree = float(np.sum(0.5 * np.log(p / (2 * np.pi)) - 0.5 * p * r.astype(np.float64) ** 2))
    assert abs(full - (view + same_for_every_tree)) < 1e-4
    back = rows.regrown_sums(leaf_stats(leaf, rows.regrow_rows(jnp.asarray(r)), S))
    np.testing.assert_allclose(np.asarray(back[0]), np.asarray(wsum), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(back[1]), np.asarray(rsum), rtol=1e-5, atol=1e-6)
    m0 = np.asarray(rows.draw(mask, wsum, rsum, jnp.zeros(S)))
    m1 = np.asarray(rows.draw(mask, wsum, rsum, jnp.ones(S)))
    want_mean = np.asarray(rows.model.predictive(per_slot))[:, 0]
    want_var = 1.0 / (np.asarray(wsum, np.float64) / s2 + 1.0 / tau2)
    np.testing.assert_allclose(m0[1:], want_mean[1:], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose((m1 - m0)[1:] ** 2, want_var[1:], rtol=1e-4)
    assert m0[0] == 0.0 and m1[0] == 0.0   # not a leaf


def test_gamma_poisson_rows_are_the_gamma_poisson_model_on_a_visits_rows():
    """``GammaPoissonLeaves.on_rows``: the rows view's log marginal from ``(sum y, sum B e^-r)`` is the
    per-slot model's on its regrowth statistics, which sum back to those sums; its leaf draws
    ``log lambda`` have the Gamma posterior's mean and variance of ``lambda`` (20,000 draws: within
    4.5 standard errors)."""
    from bayestrees.leaves import GammaPoissonLeaves, GammaPoissonRows

    rng = np.random.default_rng(4)
    n, S, c, d = 12, 3, 2.0, 1.5
    leaf = rng.choice([1, 2], size=n)
    y = rng.poisson(2.0, n).astype(np.float32)
    B = rng.uniform(0.5, 1.5, n).astype(np.float32)
    r = rng.normal(scale=0.3, size=n).astype(np.float32)
    rows = GammaPoissonLeaves(c, d).on_rows(jnp.asarray(B), jnp.asarray(y))
    assert isinstance(rows, GammaPoissonRows) and rows.model == GammaPoissonLeaves(c, d)
    mask = jnp.asarray([False, True, True])
    st = leaf_stats(leaf, rows.regrow_rows(jnp.asarray(r)), S)
    wsum, rsum = rows.regrown_sums(st)
    np.testing.assert_allclose(np.asarray(wsum), np.bincount(leaf, y, S), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(rsum), np.bincount(leaf, B * np.exp(-r), S), rtol=1e-5)
    view = float(jnp.sum(jnp.where(mask, rows.log_marginal(wsum, rsum), 0.0)))
    assert abs(view - float(rows.model.log_marginal(st, mask))) < 1e-4
    draws = 20_000
    lam = np.exp(np.asarray(jax.vmap(lambda k, z, u: rows.draw(mask, wsum, rsum, (k, z, u)))(
        *GammaPoissonRows.noise(jax.random.key(0), draws, S, jnp.float32))))
    for s in (1, 2):
        a, b = c + float(wsum[s]), d + float(rsum[s])
        mean, var = a / b, a / b ** 2
        assert abs(lam[:, s].mean() - mean) < 4.5 * np.sqrt(var / draws), (s, lam[:, s].mean(), mean)
        # the sample variance's relative sd: sqrt((2 + excess kurtosis) / draws), Gamma's excess kurtosis 6 / a
        assert abs(lam[:, s].var() / var - 1) < 4.5 * np.sqrt((2 + 6 / a) / draws), (s, lam[:, s].var(), var)
    assert np.all(lam[:, 0] == 1.0)   # not a leaf: log lambda = 0
