"""BART for several classes (multinomial logit, log-linear BART) against exact answers.

(a) trees held at the root (one tree per class, ``max_depth = 0``) with row weights: the posterior of
    the class probabilities against its closed form (the leaves ``exp(theta_c) ~ Gamma(a, b)`` with
    the offsets give ``lambda_c ~ Gamma(a, b e^-o_c)``; the posterior of ``p = lambda / sum lambda``
    is ``prod p_c^(a + n_c - 1) (sum_c b e^-o_c p_c)^(-k a)`` on the simplex, whose moments are computed
    by importance sampling from ``Dirichlet(a + n)``, 10^6 draws);
(b) one stump per class (``max_depth = 1``, one feature of two levels, so each class's tree is a leaf
    or the one split): the posterior of the 8 structures of 3 classes against their exact posterior
    (the prior times the likelihood integrated over the leaves by Monte Carlo from their Gamma prior,
    2 * 10^6 draws with common random numbers), and the posterior of the class probabilities in each cell;
(c) without likelihood (every row weight 0) the chains reproduce the tree prior;
plus the posterior contract of the estimator (shapes, probabilities, pointwise log likelihood).
Tolerances from the Monte Carlo error of the chains (ArviZ's MCSE) and of the referees.
"""
import itertools
from collections import Counter

import arviz as az
import jax
import numpy as np
import pytest
from scipy.special import gammaln, logsumexp

import bayestrees as bt
from bayestrees.data import prepare_data
from bayestrees.inference.bart.fit import BARTConfig, fit_bart
from bayestrees.leaves import loggamma_params
from bayestrees.priors import ChipmanPrior


def _mcse(x) -> float:
    return float(az.mcse(az.convert_to_dataset({"x": np.asarray(x, float)}))["x"])


def test_root_leaves_match_the_closed_form_posterior():
    rng = np.random.default_rng(11)
    n, k = 10, 3
    X = rng.uniform(size=(n, 2))
    y = rng.choice(k, size=n, p=[0.5, 0.3, 0.2])
    w = rng.uniform(0.3, 2.0, size=n)
    data = prepare_data(X, y, task="classification", allow_nan=False)
    cfg = BARTConfig(m=1, max_depth=0, draws=4000, tune=300, chains=4)
    res = fit_bart(jax.random.key(5), data, cfg, weights=w)
    p = res.mu[:, :, 0, :]                                    # every row the same: (chains, draws, k)
    a, b = loggamma_params(res.sigma_mu)
    counts = np.bincount(y, weights=w, minlength=k)
    rates = b * np.exp(-np.asarray(res.offset))
    draws = np.random.default_rng(0).dirichlet(a + counts, size=1_000_000)
    logw = -k * a * np.log(draws @ rates)
    iw = np.exp(logw - logw.max())
    iw /= iw.sum()
    mean = iw @ draws
    sd = np.sqrt(iw @ (draws - mean) ** 2)
    for c in range(k):
        assert abs(p[..., c].mean() - mean[c]) < 4 * _mcse(p[..., c]) + 2e-3, (c, p[..., c].mean(), mean[c])
        assert p[..., c].std() == pytest.approx(sd[c], rel=0.06)


def _stump_data():
    # one feature of two levels; the classes lean differently in the two cells
    x = np.array([0] * 8 + [1] * 8, float)
    y = np.array([0, 0, 0, 0, 0, 1, 1, 2, 1, 1, 1, 1, 2, 2, 2, 0])
    return x[:, None], y


def _stump_exact(y, cell, offset, a, b, alpha, size=2_000_000, seed=1):
    """Posterior of each class's tree being split (s_c = 1) or a leaf, and the cells' posterior mean
    probabilities given the structure: the prior ``alpha^s (1 - alpha)^(1 - s)`` per class (the root
    splits with probability ``alpha``; one rule), times the likelihood averaged over the leaves' prior."""
    k = len(offset)
    g = np.random.default_rng(seed).gamma(a, 1.0 / b, size=(size, k, 2))
    counts = np.array([[np.sum((cell == x) & (y == c)) for c in range(k)] for x in range(2)])   # (2, k)
    post, cell_p = {}, {}
    for s in itertools.product((0, 1), repeat=k):
        lam = np.stack([g[:, c, :] if s[c] else np.repeat(g[:, c, :1], 2, 1) for c in range(k)], 1)   # (N, k, 2)
        eta = np.log(lam) + np.asarray(offset)[None, :, None]
        log_p = eta - logsumexp(eta, axis=1, keepdims=True)
        ll = np.einsum("xc,ncx->n", counts, log_p)
        lw = ll - ll.max()
        wts = np.exp(lw)
        post[s] = np.log(np.mean(wts)) + ll.max() + sum(np.log(alpha) if si else np.log(1 - alpha) for si in s)
        cell_p[s] = (wts[:, None, None] * np.exp(log_p)).sum(0) / wts.sum()   # (k, 2)
    z = logsumexp(list(post.values()))
    return {s: float(np.exp(v - z)) for s, v in post.items()}, cell_p


@pytest.mark.parametrize("kernel", [{}, pytest.param({"particles": 4}, marks=pytest.mark.full_only),
                                    pytest.param({"move_probs": (0.25, 0.25, 0.4, 0.1), "local_moves": 2},
                                                 marks=pytest.mark.full_only)],
                         ids=["grow-prune", "regrowth", "change-swap"])
def test_stumps_match_the_exact_posterior_of_every_structure(kernel):
    X, y = _stump_data()
    data = prepare_data(X, y, task="classification", allow_nan=False)
    alpha = 0.5
    cfg = BARTConfig(m=1, max_depth=1, min_leaf_rows=1, prior=ChipmanPrior(alpha, 2.0), draws=6000, tune=500,
                     chains=4, **kernel)
    res = fit_bart(jax.random.key(7), data, cfg)
    a, b = loggamma_params(res.sigma_mu)
    cell = np.asarray(data.codes)[:, 0]
    exact, cell_p = _stump_exact(y, cell, res.offset, a, b, alpha)
    split = res.feature[..., 0, 0] >= 0                       # (chains, draws, k): each class's root splits
    got = Counter(map(tuple, split.reshape(-1, 3).astype(int)))
    total = sum(got.values())
    tv = 0.5 * sum(abs(got[s] / total - p) for s, p in exact.items())
    assert tv < 0.03, (tv, {s: (round(got[s] / total, 3), round(p, 3)) for s, p in exact.items()})
    for c in range(3):                                        # each class's split, within its Monte Carlo error
        e = sum(p for s, p in exact.items() if s[c])
        assert abs(split[..., c].mean() - e) < 4 * _mcse(split[..., c]) + 5e-3, (c, split[..., c].mean(), e)
    # the class probabilities in each cell: posterior mean against the referee's mixture over structures
    p = res.mu                                                # (chains, draws, n, k)
    first = [int(np.flatnonzero(cell == x)[0]) for x in range(2)]
    for x in range(2):
        ref = sum(exact[s] * cell_p[s][:, x] for s in exact)
        for c in range(3):
            d = p[:, :, first[x], c]
            assert abs(d.mean() - ref[c]) < 4 * _mcse(d) + 5e-3, (x, c, d.mean(), ref[c])


def test_without_likelihood_the_chains_reproduce_the_prior():
    rng = np.random.default_rng(3)
    n, k = 60, 4
    X = rng.integers(0, 3, size=(n, 1)).astype(float)
    y = rng.integers(0, k, size=n)
    data = prepare_data(X, y, task="classification", allow_nan=False)
    alpha = 0.7
    cfg = BARTConfig(m=2, max_depth=1, min_leaf_rows=1, prior=ChipmanPrior(alpha, 2.0), draws=3000, tune=200,
                     chains=4)
    res = fit_bart(jax.random.key(2), data, cfg, weights=np.zeros(n))
    split = (res.feature[..., 0] >= 0).astype(float)          # (chains, draws, k, m)
    assert abs(split.mean() - alpha) < 4 * _mcse(split.reshape(4, -1)) + 5e-3
    # the leaves' log-rates: mean 0, sd sigma_mu (the log-gamma prior)
    theta = res.value[..., 0][split == 0]
    assert abs(theta.mean()) < 0.05 and theta.std() == pytest.approx(res.sigma_mu, rel=0.05)


def test_the_classifier_fits_several_classes_with_the_posterior_contract():
    rng = np.random.default_rng(0)
    n = 150
    X = rng.uniform(size=(n, 3))
    y = np.where(X[:, 0] < 0.33, "a", np.where(X[:, 0] < 0.66, "b", "c"))
    clf = bt.BARTClassifier(m=20, draws=150, tune=150, chains=2, random_state=0).fit(X, y)
    assert list(clf.classes_) == ["a", "b", "c"]
    proba = clf.predict_proba(X[:10])
    assert proba.shape == (10, 3)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-9)
    assert np.mean(clf.predict(X) == y) > 0.9
    idata = clf.idata_
    assert idata.posterior["mu"].dims == ("chain", "draw", "obs", "class")
    assert idata.posterior["n_leaves"].dims == ("chain", "draw", "class", "tree")
    assert idata.posterior.attrs["link"] == "softmax"
    # pointwise log likelihood: log of the drawn probability of the observed class
    mu = idata.posterior["mu"].values
    codes = np.searchsorted(clf.classes_, y)
    ll = idata.log_likelihood["y"].values
    np.testing.assert_allclose(ll, np.log(np.take_along_axis(mu, codes[None, None, :, None], -1)[..., 0]),
                               rtol=1e-6, atol=1e-9)
    # predict_draws are the draws' probabilities at new rows: (draws, n, k), their mean predict_proba
    pd = clf.predict_draws(X[:10])
    assert pd.shape == (300, 10, 3)
    np.testing.assert_allclose(pd.mean(0), proba, rtol=1e-9)


def test_predictive_draws_and_saved_fits_of_several_classes(tmp_path):
    rng = np.random.default_rng(1)
    n = 90
    X = rng.uniform(size=(n, 2))
    y = np.array(["x", "y", "z"])[np.minimum((X[:, 1] * 3).astype(int), 2)]
    with bt.Model():
        bt.BART("f", X, y, m=10)
        idata = bt.sample(draws=100, tune=100, chains=2, random_seed=1)
        pp = bt.sample_posterior_predictive(idata, random_seed=0)
    proba = pp.posterior_predictive["f_proba"].values                 # (chain, draw, obs, class)
    labels = pp.posterior_predictive["f"].values
    assert proba.shape == (2, 100, n, 3) and set(np.unique(labels)) <= {"x", "y", "z"}
    # the labels follow the drawn probabilities: their frequencies per row against the mean probabilities
    freq = np.stack([(labels == c).mean((0, 1)) for c in ("x", "y", "z")], -1)
    assert np.max(np.abs(freq - proba.mean((0, 1)))) < 0.2
    assert np.mean(np.abs(freq - proba.mean((0, 1)))) < 0.04
    clf = bt.BARTClassifier(m=10, draws=50, tune=50, chains=1, random_state=1).fit(X, y)
    path = tmp_path / "clf.pkl"
    clf.save(path)
    again = bt.load(path)
    np.testing.assert_array_equal(again.predict_proba(X[:7]), clf.predict_proba(X[:7]))


def _thresholds_exact(y, cell, offset, a, b, alpha, size=600_000, seed=1):
    """As :func:`_stump_exact` for a feature of ``L`` levels: each class's tree a leaf (``None``) or a
    split at one of the ``L - 1`` thresholds (prior ``alpha / (L - 1)`` each); the posterior of every
    tuple of the classes' structures."""
    k, L = len(offset), int(cell.max()) + 1
    g = np.random.default_rng(seed).gamma(a, 1.0 / b, size=(size, k, 2))
    counts = np.array([[np.sum((cell == x) & (y == c)) for c in range(k)] for x in range(L)])   # (L, k)
    options = [None] + list(range(L - 1))
    post = {}
    for s in itertools.product(options, repeat=k):
        side = np.stack([np.zeros(L, int) if t is None else (np.arange(L) > t).astype(int) for t in s])   # (k, L)
        lam = np.stack([g[:, c, side[c]] for c in range(k)], 1)                                        # (N, k, L)
        eta = np.log(lam) + np.asarray(offset)[None, :, None]
        ll = np.einsum("xc,ncx->n", counts, eta - logsumexp(eta, axis=1, keepdims=True))
        prior = sum(np.log(1 - alpha) if t is None else np.log(alpha / (L - 1)) for t in s)
        post[s] = np.log(np.mean(np.exp(ll - ll.max()))) + ll.max() + prior
    z = logsumexp(list(post.values()))
    return {s: float(np.exp(v - z)) for s, v in post.items()}


@pytest.mark.slow
def test_slides_match_the_exact_posterior_of_every_threshold():
    """Slides (``slide=2``: the change move as a threshold moved by 1-2 codes, the BART family's, on the
    visit of Gamma-Poisson leaves) with one stump per class on a feature of three levels: the 27
    tuples of the classes' structures (a leaf, or a split at either threshold) against their exact
    posterior."""
    x = np.repeat(np.arange(3), 6).astype(float)
    y = np.array([0, 0, 0, 0, 1, 2, 0, 1, 1, 1, 2, 1, 2, 2, 2, 2, 0, 1])
    data = prepare_data(x[:, None], y, task="classification", allow_nan=False)
    alpha = 0.6
    cfg = BARTConfig(m=1, max_depth=1, min_leaf_rows=1, prior=ChipmanPrior(alpha, 2.0), draws=5000, tune=500,
                     chains=4, slide=2, move_probs=(0.35, 0.35, 0.3, 0.0))
    res = fit_bart(jax.random.key(3), data, cfg)
    a, b = loggamma_params(res.sigma_mu)
    exact = _thresholds_exact(y, np.asarray(data.codes)[:, 0], res.offset, a, b, alpha)
    f, t = res.feature[..., 0, 0], res.threshold[..., 0, 0]            # (chains, draws, k)
    s = np.where(f >= 0, t.astype(int), -1).reshape(-1, 3)
    got = Counter(tuple(None if v < 0 else int(v) for v in row) for row in s)
    total = sum(got.values())
    tv = 0.5 * sum(abs(got[k] / total - exact.get(k, 0.0)) for k in set(got) | set(exact))
    # 20,000 draws over the 27 tuples, key seeds 0-3: TV 0.021-0.027 with slides, 0.018-0.029 with change and
    # swap instead (the referee's Monte Carlo and the chains' error)
    assert tv < 0.04, (tv, sorted(((k, round(got[k] / total, 3), round(p, 3)) for k, p in exact.items()),
                                  key=lambda r: -r[2])[:6])
