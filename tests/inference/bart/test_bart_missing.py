"""BART with missing values in X: missingness incorporated in attributes (bayestrees.inference.missing).

(a) the coding: every rule on the coded columns sends every row (missing or not) where the exported
    rule of the original feature (threshold, ``missing_left``) sends it through ``bayestrees.tree``'s
    traversal; predictions from the fit equal the exported trees' sum at new rows with missing values;
(b) one tree of depth at most 1 with ``sigma`` fixed, on 10 rows with 3 missing entries: the posterior
    of the root's rule (the coded column, its threshold, or no split) against exact enumeration of
    every stump (the weighted rule prior, the Normal leaves integrated out);
(c) without likelihood the chains reproduce the prior's choice among the coded columns (a feature's
    two columns 1/(2d) each);
plus the estimator with NaN (scikit-learn's ``allow_nan`` tag, save/load) and the errors.
"""
import itertools
from collections import Counter

import jax
import numpy as np
import pytest

import bayestrees as bt
from bayestrees.data import missing_code, prepare_data
from bayestrees.inference.bart.fit import BARTConfig, fit_bart
from bayestrees.inference.missing import missing_rules, split_log_weights
from bayestrees.priors import ChipmanPrior


def test_every_coded_rule_routes_as_its_exported_rule():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 4, size=(40, 3)).astype(float)
    X[rng.random(X.shape) < 0.25] = np.nan
    X[:, 2] = rng.integers(0, 3, size=40)                     # one feature without missing values
    data = prepare_data(X, rng.normal(size=40), task="regression", allow_nan=True)
    codes = np.asarray(data.codes)
    rules = missing_rules(codes, data.n_bins)
    assert rules.d == 5 and list(rules.source) == [0, 0, 1, 1, 2]
    miss = codes == missing_code(codes.dtype)
    for col in range(rules.d):
        coded = rules.code(codes)[:, col]
        for t in range(int(coded.max())):
            f, thr, ml = rules.to_original(np.array([col]), np.array([t]))
            c = codes[:, f[0]].astype(np.int64)
            exported = np.where(miss[:, f[0]], ml[0], c <= thr[0])
            np.testing.assert_array_equal(coded <= t, exported, err_msg=f"column {col} threshold {t}")
    np.testing.assert_allclose(np.exp(split_log_weights(rules)), [0.25 / 1.5] * 4 + [1 / 3])


def test_predictions_equal_the_exported_trees_at_rows_with_missing_values():
    rng = np.random.default_rng(1)
    n = 120
    X = rng.uniform(size=(n, 3))
    y = 3 * (X[:, 0] > 0.5) + X[:, 1] + 0.3 * rng.normal(size=n)
    X[rng.random(X.shape) < 0.3] = np.nan
    reg = bt.BARTRegressor(m=8, draws=30, tune=30, chains=2, max_depth=3, random_state=0).fit(X[:80], y[:80])
    new = X[80:]
    assert np.isnan(new).any()
    tr = reg.idata_.trees
    from bayestrees.tree import Tree, apply

    tree = Tree(feature=tr["split_feature"].values, threshold=tr["threshold"].values, left=tr["left"].values,
                right=tr["right"].values, missing_left=tr["missing_left"].values, value=tr["value"].values,
                weight=tr["weight"].values, count=tr["count"].values, depth=tr["node_depth"].values,
                n_nodes=tr["n_nodes"].values)
    codes = reg._codes(new)
    leaf = np.asarray(apply(tree, codes))                     # (chain, draw, tree, rows)
    value = tr["value"].values[..., 0]
    f = np.take_along_axis(value, leaf, -1).sum(2) + reg.idata_.posterior.attrs["bart_offset"]
    np.testing.assert_allclose(reg.predict_draws(new), f.reshape(-1, f.shape[-1]), rtol=1e-5, atol=1e-4)


def _stump_exact(coded, y, rules, alpha, sigma2, tau2):
    """Posterior of every stump on the coded columns (and of no split): prior times marginal.  The
    columns' prior weights from their definition, not from the library: each feature ``1 / d``, shared
    equally by its coded columns (two for a feature with missing values)."""
    source = np.asarray(rules.source)
    w = 1.0 / np.bincount(source)[source] / (source.max() + 1)
    lo, hi = coded.min(0), coded.max(0)
    avail = hi > lo
    post = {}

    def log_marg(r):
        n = len(r)
        cov = sigma2 * np.eye(n) + tau2 * np.ones((n, n))
        _, logdet = np.linalg.slogdet(cov)
        return -0.5 * (logdet + r @ np.linalg.solve(cov, r))

    post[None] = np.log(1 - alpha) + log_marg(y)
    for v in np.flatnonzero(avail):
        for t in range(lo[v], hi[v]):
            left = coded[:, v] <= t
            prior = alpha * w[v] / w[avail].sum() / (hi[v] - lo[v])
            post[(int(v), int(t))] = np.log(prior) + log_marg(y[left]) + log_marg(y[~left])
    z = np.logaddexp.reduce(list(post.values()))
    return {k: float(np.exp(v - z)) for k, v in post.items()}


@pytest.mark.parametrize("kernel, sigma", [({"move_probs": (0.3, 0.3, 0.4, 0.0)}, 0.5),
                                           ({"move_probs": (0.5, 0.5, 0.0, 0.0), "particles": 4}, 0.5),
                                           ({"move_probs": (0.3, 0.3, 0.4, 0.0)}, 1.0)],
                         ids=["change", "regrowth", "change-weak-signal"])
def test_one_stump_with_missing_values_matches_exact_enumeration(kernel, sigma):
    """One stump (``max_depth=1``) on a feature with missing values and one without: the posterior of
    every rule (each coded column's rule is a rule of the feature with its missing side) against exact
    enumeration under the columns' prior weights, with change moves or with the particle Gibbs regrowth
    (its rule prior and proposal weighted by the same column weights).  At ``sigma = 1`` the data leave
    the prior a say: the columns' weights at full rather than half weight for a feature's two columns
    move the exact posterior by TV 0.11 there (0.0006 at ``sigma = 0.5``)."""
    X = np.array([[0, 0], [1, 1], [2, 2], [np.nan, 0], [1, 2], [2, 1], [np.nan, 1], [0, 2], [np.nan, 0], [2, 0]],
                 float)
    y = np.array([0.1, 0.4, 1.6, 2.1, 0.5, 1.4, 1.9, -0.2, 2.3, 1.2])
    data = prepare_data(X, y, task="regression", allow_nan=True)
    alpha = 0.6
    # with change moves or a regrowth: the root leaf holds little mass, so grow and prune alone rarely leave a split
    cfg = BARTConfig(m=1, max_depth=1, min_leaf_rows=1, prior=ChipmanPrior(alpha, 2.0), fixed_sigma=sigma, draws=5000,
                     tune=300, chains=4, **kernel)
    res = fit_bart(jax.random.key(3), data, cfg)
    rules = res.missing
    coded = rules.code(np.asarray(data.codes))
    ys = (y - res.y_shift) / res.y_scale
    exact = _stump_exact(coded, ys, rules, alpha, (sigma / res.y_scale) ** 2, res.sigma_mu ** 2)
    f, t = res.feature[..., 0, 0].ravel(), res.threshold[..., 0, 0].ravel().astype(int)
    got = Counter(None if fi < 0 else (int(fi), int(ti)) for fi, ti in zip(f, t))
    total = sum(got.values())
    tv = 0.5 * sum(abs(got[k] / total - p) for k, p in exact.items()) + 0.5 * sum(
        got[k] / total for k in got if k not in exact)
    assert tv < 0.03, (tv, sorted(((k, round(got[k] / total, 3), round(p, 3)) for k, p in exact.items()),
                               key=lambda r: -r[2])[:8])
    # the missing rows' side is learned: the rules that put the three high-y missing rows with the high values
    p_missing_right_of_low = sum(p for k, p in exact.items() if k is not None and k[0] == 0)
    assert abs(np.mean([k is not None and k[0] == 0 for k in
                        (None if fi < 0 else (int(fi), int(ti)) for fi, ti in zip(f, t))])
               - p_missing_right_of_low) < 0.03


@pytest.mark.parametrize("kernel", [{}, {"particles": 4}], ids=["grow-prune", "regrowth"])
def test_without_likelihood_the_columns_are_chosen_by_their_prior_weights(kernel):
    rng = np.random.default_rng(5)
    n = 60
    X = rng.integers(0, 3, size=(n, 2)).astype(float)
    X[rng.random(n) < 0.3, 0] = np.nan
    data = prepare_data(X, rng.normal(size=n), task="regression", allow_nan=True)
    cfg = BARTConfig(m=3, max_depth=1, min_leaf_rows=1, prior=ChipmanPrior(0.9, 2.0), draws=3000, tune=200,
                     chains=4, **kernel)
    res = fit_bart(jax.random.key(1), data, cfg, weights=np.zeros(n))
    f = res.feature[..., 0].ravel()
    split = f[f >= 0]
    assert abs(len(split) / len(f) - 0.9) < 0.02
    share = np.bincount(split, minlength=3) / len(split)
    # columns 0 and 1 (feature 0, missing left / right) 1/4 each, column 2 (feature 1) 1/2
    np.testing.assert_allclose(share, [0.25, 0.25, 0.5], atol=0.025)


def _direct_weighted_prior(rng, codes, w, prior, max_depth, size):
    """``size`` draws of (leaves, splits per column) of one tree from the interval prior on the coded
    columns ``codes``, a node's column with probability ``w_j / sum_available w``, truncated to trees
    whose nodes all hold a row (a draw that breaks it is rejected)."""
    d = codes.shape[1]

    def tree(rows, lo, hi, depth, used):
        valid = np.flatnonzero(hi > lo)
        p = prior.alpha * (1 + depth) ** -prior.beta
        if depth >= max_depth or len(valid) == 0 or rng.random() >= p:
            return 1, len(rows) > 0
        j = rng.choice(valid, p=w[valid] / w[valid].sum())
        t = lo[j] + int(rng.random() * (hi[j] - lo[j]))
        used[j] += 1
        hl, lr = hi.copy(), lo.copy()
        hl[j], lr[j] = t, t + 1
        a = tree(rows[codes[rows, j] <= t], lo, hl, depth + 1, used)
        b = tree(rows[codes[rows, j] > t], lr, hi, depth + 1, used)
        return a[0] + b[0], a[1] and b[1]

    out = []
    while len(out) < size:
        used = np.zeros(d, int)
        nl, ok = tree(np.arange(codes.shape[0]), codes.min(0), codes.max(0), 0, used)
        if ok:
            out.append((nl, used))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [{}, {"particles": 3}], ids=["grow-prune", "regrowth"])
def test_without_likelihood_deeper_trees_keep_the_weighted_prior(kernel):
    """Trees of depth <= 3 on a feature with missing values and one without, every row weight 0: the
    leaves per tree and the coded columns' shares of the splits against direct draws of the prior
    (the interval rule prior, a feature's two columns at half its weight), with grow and prune or
    with the particle Gibbs regrowth after them, whose frontier stages of several slots weight the
    variables too.  Over key seeds 0-2 the TV of the leaves was (grow-prune) 0.005-0.009 and
    (regrowth) 0.003-0.007, the shares' largest error 0.008; bounds 0.03 and 0.02."""
    rng = np.random.default_rng(4)
    n = 50
    X = rng.integers(0, 4, size=(n, 2)).astype(float)
    X[rng.random(n) < 0.3, 0] = np.nan
    data = prepare_data(X, rng.normal(size=n), task="regression", allow_nan=True)
    prior = ChipmanPrior(0.95, 1.0)
    cfg = BARTConfig(m=4, max_depth=3, min_leaf_rows=1, prior=prior, draws=1500, tune=100, thin=2, chains=8,
                     **kernel)
    res = fit_bart(jax.random.key(0), data, cfg, weights=np.zeros(n))
    rules = res.missing
    coded = rules.code(np.asarray(data.codes)).astype(np.int64)
    direct = _direct_weighted_prior(rng, coded, np.exp(split_log_weights(rules)), prior, 3, 30000)
    f = res.feature.reshape(-1, res.feature.shape[-1])
    leaves = (f >= 0).sum(-1) + 1
    want = Counter(nl for nl, _ in direct)
    got = Counter(leaves.tolist())
    tv = 0.5 * sum(abs(got[k] / len(leaves) - want[k] / len(direct)) for k in set(got) | set(want))
    assert tv < 0.03, (tv, sorted(got.items()), sorted(want.items()))
    share = np.bincount(f[f >= 0], minlength=rules.d) / (f >= 0).sum()
    used = np.sum([u for _, u in direct], 0)
    np.testing.assert_allclose(share, used / used.sum(), atol=0.02)


def test_the_estimators_take_missing_values_and_say_what_they_do_not_take(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.uniform(size=(60, 2))
    X[rng.random(X.shape) < 0.2] = np.nan
    y = (np.nan_to_num(X[:, 0], nan=0.7) > 0.5).astype(int)
    clf = bt.BARTClassifier(m=5, draws=20, tune=20, chains=1, random_state=0).fit(X, y)
    assert clf.__sklearn_tags__().input_tags.allow_nan
    proba = clf.predict_proba(X[:5])
    path = tmp_path / "m.pkl"
    clf.save(path)
    np.testing.assert_array_equal(bt.load(path).predict_proba(X[:5]), proba)
    with pytest.raises(ValueError, match="missing values.*sparse"):
        bt.BARTRegressor(m=5, draws=5, tune=5, chains=1, sparse=True).fit(X, rng.normal(size=60))


def test_several_classes_with_missing_values_keep_the_same_values_with_or_without_trees():
    """The kept sums at rows named when fitting (``keep_trees=False``) and the kept trees give the same
    probabilities, for three classes with missing values (both through the coded columns)."""
    rng = np.random.default_rng(6)
    X = rng.uniform(size=(90, 3))
    y = np.minimum((X[:, 0] * 3).astype(int), 2)
    X[rng.random(X.shape) < 0.2] = np.nan
    kw = dict(m=5, draws=20, tune=20, chains=1, max_depth=3, random_state=0)
    lean = bt.BARTClassifier(keep_trees=False, **kw).fit(X, y, X_predict=X[:10])
    full = bt.BARTClassifier(**kw).fit(X, y)
    np.testing.assert_array_equal(lean.predict_proba(X[:10]), full.predict_proba(X[:10]))
    assert lean.idata_.posterior["split_counts"].shape[-1] == 3
    np.testing.assert_array_equal(lean.idata_.posterior["split_counts"].values,
                                  full.idata_.posterior["split_counts"].values)
