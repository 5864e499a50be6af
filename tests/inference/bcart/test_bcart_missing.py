"""Bayesian CART with missing values in X: missingness incorporated in attributes
(:mod:`bayestrees.inference.missing`), the coding BART uses.

(a) every tree of depth at most 2 on 10 rows with missing entries, on the coded columns (a feature's
    two columns at half its weight in the rule prior), enumerated with its exact posterior (the
    Normal-inverse-gamma leaves integrated out, in NumPy, float64); the chains of the default scheme
    (particle Gibbs, whose proposal then weights the variables) and of the random moves against it;
(b) predictions equal the exported trees (original features, thresholds and ``missing_left``)
    evaluated by ``bayestrees.tree`` at new rows with missing values;
plus the estimators with NaN (scikit-learn's ``allow_nan`` tag, save and load) and the refusal of the
leaf-count prior.
"""
from collections import Counter

import jax
import numpy as np
import pytest
from scipy.special import gammaln

import bayestrees as bt
from bayestrees.data import prepare_data
from bayestrees.inference.bcart.fit import BCARTConfig, default_leaf_prior, fit_bcart
from bayestrees.inference.missing import missing_rules, split_log_weights
from bayestrees.priors import ChipmanPrior

PRIOR, DEPTH = ChipmanPrior(0.95, 1.0), 2


def _data():
    """10 rows: feature 0 with values 0, 1 and four missing entries, feature 1 with values 0, 1; a
    weak signal, so that the rule prior shapes the posterior."""
    X = np.array([[0, 0], [np.nan, 0], [0, 0], [0, 0], [1, 1], [1, 1], [np.nan, 1], [np.nan, 1], [0, 1], [np.nan, 1]],
                 float)
    y = np.array([0.1, 0.0, -0.1, 0.6, -0.5, 1.0, 1.2, -0.6, -0.1, 0.5])
    return X, y


def _nig_leaf(yl, prior):
    """log p(y_leaf) of one leaf under Normal-inverse-gamma leaves (float64)."""
    m0, k0, a0, b0 = prior
    n, yb = len(yl), yl.mean()
    kn, an = k0 + n, a0 + n / 2
    bn = b0 + 0.5 * ((yl - yb) ** 2).sum() + k0 * n * (yb - m0) ** 2 / (2 * kn)
    return (gammaln(an) - gammaln(a0) + a0 * np.log(b0) - an * np.log(bn) + 0.5 * (np.log(k0) - np.log(kn))
            - 0.5 * n * np.log(2 * np.pi))


def _enumerate(codes, ys, log_w, nig, weighted=True):
    """Every heap tree of depth <= DEPTH on ``codes`` whose nodes hold rows, with its log posterior
    (up to a constant): ``{((slot, column, threshold), ...): log p}``.  The rule prior at a node:
    the column with probability ``w_j / sum_valid w`` (uniform when not ``weighted``), then a
    threshold uniform among the node's ``hi_j - lo_j``."""
    w = np.exp(log_w) if weighted else np.ones(codes.shape[1])

    def grow(s, rows, depth):
        lo, hi = codes[rows].min(0), codes[rows].max(0)
        valid = hi > lo
        p = PRIOR.alpha * (1 + depth) ** -PRIOR.beta
        can = depth < DEPTH and valid.any()
        out = [((), (np.log1p(-p) if can else 0.0) + _nig_leaf(ys[rows], nig))]
        if not can:
            return out
        for j in np.flatnonzero(valid):
            for t in range(lo[j], hi[j]):
                L, R = rows[codes[rows, j] <= t], rows[codes[rows, j] > t]
                head = np.log(p) + np.log(w[j] / w[valid].sum()) - np.log(hi[j] - lo[j])
                for (ka, la) in grow(2 * s + 1, L, depth + 1):
                    for (kb, lb) in grow(2 * s + 2, R, depth + 1):
                        out.append((((s, int(j), int(t)),) + ka + kb, head + la + lb))
        return out

    return dict(grow(0, np.arange(codes.shape[0]), 0))


def _exact(weighted=True):
    X, y = _data()
    data = prepare_data(X, y, task="regression", allow_nan=True)
    rules = missing_rules(np.asarray(data.codes), data.n_bins)
    coded = rules.code(np.asarray(data.codes))
    ys = (y - y.mean()) / y.std()
    logp = _enumerate(coded, ys, split_log_weights(rules), tuple(default_leaf_prior()), weighted)
    z = np.logaddexp.reduce(np.array(list(logp.values())))
    exact = Counter()
    for key, lp in logp.items():   # as the fit exports them: the original feature, threshold and missing side
        f, t, ml = rules.to_original(np.array([k[1] for k in key], int), np.array([k[2] for k in key], int))
        exact[tuple((k[0], int(a), int(b), bool(c)) for k, a, b, c in zip(key, f, t, ml))] += np.exp(lp - z)
    return data, exact


def _tree_keys(trees):
    f, t, ml, left = (np.asarray(a).reshape(-1, np.shape(a)[-1]) for a in
                      (trees.feature, trees.threshold, trees.missing_left, trees.left))
    return [tuple((int(s), int(fi[s]), int(ti[s]), bool(mi[s])) for s in np.flatnonzero(li >= 0))
            for fi, ti, mi, li in zip(f, t, ml, left)]


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["pgibbs", "moves"])
def test_chains_match_the_enumerated_posterior_with_missing_values(scheme):
    """The chains' posterior over every tree (depth <= 2) against the enumeration.

    Tolerance: TV over the trees < 0.04 (sampling noise about 0.015 at these draws: 8 chains of 4,000
    particle Gibbs steps, or of 6,000 random moves thinned by 2).  Power: the posterior with the
    variables chosen uniformly among the coded columns (the weights ignored) is 0.13 away."""
    data, exact = _exact()
    _, uniform = _exact(weighted=False)
    assert 0.5 * sum(abs(exact[k] - uniform[k]) for k in set(exact) | set(uniform)) > 0.1
    cfg = BCARTConfig(prior=PRIOR, leaf_model="normal", max_depth=DEPTH, scheme=scheme, chains=8,
                      draws=4000 if scheme == "pgibbs" else 6000, tune=200, thin=1 if scheme == "pgibbs" else 2,
                      particles=4)
    res = fit_bcart(jax.random.key(0), data, cfg)
    got = Counter(_tree_keys(res.trees))
    total = sum(got.values())
    assert set(got) <= set(exact), set(got) - set(exact)
    tv = 0.5 * sum(abs(got[k] / total - p) for k, p in exact.items())
    assert tv < 0.04, (tv, sorted(((k, round(got[k] / total, 3), round(p, 3)) for k, p in exact.items()),
                               key=lambda r: -r[2])[:6])


def test_predictions_equal_the_exported_trees_at_rows_with_missing_values():
    """The fit's function at new rows with missing values (a feature missing in training, and one that
    was not) equals the exported trees (original features, thresholds, ``missing_left``) evaluated
    by ``bayestrees.tree``; the rules learn to send the missing rows of feature 0 with its high
    values."""
    from bayestrees.tree import Tree, apply

    rng = np.random.default_rng(1)
    n = 160
    X = rng.uniform(size=(n, 3))
    y = 3 * (X[:, 0] > 0.5) + X[:, 1] + 0.3 * rng.normal(size=n)
    X[rng.random(n) < 0.3, 0] = np.nan
    y[np.isnan(X[:, 0])] = 3 + 0.3 * rng.normal(size=int(np.isnan(X[:, 0]).sum()))
    reg = bt.BayesianCARTRegressor(draws=60, tune=60, chains=2, max_depth=4, random_state=0).fit(X[:120], y[:120])
    new = X[120:].copy()
    new[:5, 2] = np.nan                                       # feature 2 had no missing training value
    tr = reg.idata_.trees
    tree = Tree(feature=tr["split_feature"].values, threshold=tr["threshold"].values, left=tr["left"].values,
                right=tr["right"].values, missing_left=tr["missing_left"].values, value=tr["value"].values,
                weight=tr["weight"].values, count=tr["count"].values, depth=tr["node_depth"].values,
                n_nodes=tr["n_nodes"].values)
    leaf = np.asarray(apply(tree, reg._codes(new)))           # (chain, draw, rows)
    f = np.take_along_axis(tr["value"].values[..., 0], leaf, -1)
    np.testing.assert_allclose(reg.predict_draws(new), f.reshape(-1, f.shape[-1]), rtol=1e-6)
    miss = np.isnan(new[:, 0])
    assert miss.any() and np.all(reg.predict(new)[miss] > 2.3), reg.predict(new)[miss]
    assert reg.idata_.posterior["split_counts"].shape[-1] == 3


def test_the_estimators_take_missing_values_and_refuse_the_leaf_count_prior(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.uniform(size=(60, 2))
    X[rng.random(X.shape) < 0.2] = np.nan
    y = (np.nan_to_num(X[:, 0], nan=0.7) > 0.5).astype(int)
    clf = bt.BayesianCARTClassifier(draws=20, tune=10, chains=1, max_depth=3, random_state=0).fit(X, y)
    assert clf.__sklearn_tags__().input_tags.allow_nan
    proba = clf.predict_proba(X[:5])
    assert proba.shape == (5, 2) and np.all(np.isfinite(proba))
    path = tmp_path / "m.pkl"
    clf.save(path)
    np.testing.assert_array_equal(bt.load(path).predict_proba(X[:5]), proba)
    with pytest.raises(ValueError, match="missing values.*leaf-count"):
        bt.BayesianCARTRegressor(prior=bt.priors.LeafCountPrior(0.0), draws=5, tune=5, chains=1).fit(
            X, rng.normal(size=60))
