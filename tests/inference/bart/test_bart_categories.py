"""BART with unordered categorical features split by subsets of their categories.

(a) one tree of depth at most 1 with ``sigma`` fixed, on 12 rows with a categorical feature of four
    categories and an ordered one: the posterior of the root's rule (the category mask sent left,
    the threshold, or no split) against exact enumeration of every stump (the rule prior uniform
    over the 14 nonempty proper subsets, the Normal leaves integrated out), with grow/prune and
    with change moves;
(b) without likelihood, trees of depth <= 3 on a categorical feature (with missing values, one
    more category), an ordered one with missing values (two coded columns) and one without: the
    leaves per tree, the columns' shares of the splits and the categories sent left at the root
    against direct draws of the prior (each node's categories those its ancestors' rules leave it);
(c) predictions at new rows equal the exported trees routed by their category masks and
    ``missing_left``, and the values kept at rows named when fitting;
plus the estimators with a pandas ``category`` column, save/load and the errors.
"""
from collections import Counter

import jax
import numpy as np
import pytest

import bayestrees as bt
from bayestrees.data import prepare_data
from bayestrees.inference.bart.fit import BARTConfig, fit_bart
from bayestrees.inference.missing import split_log_weights
from bayestrees.priors import ChipmanPrior


SIGMA = 1.0


def _masks(k):
    return [s for s in range(1, (1 << k) - 1)]


def _stump_exact(codes, y, cat, alpha, sigma2, tau2):
    """Posterior of every stump (and of no split): prior times marginal; ``cat`` marks the features
    split by subsets (every category at the root)."""
    lo, hi = codes.min(0), codes.max(0)

    def log_marg(r):
        n = len(r)
        cov = sigma2 * np.eye(n) + tau2 * np.ones((n, n))
        _, logdet = np.linalg.slogdet(cov)
        return -0.5 * (logdet + r @ np.linalg.solve(cov, r))

    post = {None: np.log(1 - alpha) + log_marg(y)}
    d = codes.shape[1]
    for v in range(d):
        if cat[v]:
            rules = _masks(int(hi[v]) + 1)
            left_of = lambda t: ((t >> codes[:, v]) & 1) == 1  # noqa: E731
        else:
            rules = list(range(lo[v], hi[v]))
            left_of = lambda t: codes[:, v] <= t  # noqa: E731
        for t in rules:
            left = left_of(t)
            prior = alpha / d / len(rules)
            post[(v, int(t))] = np.log(prior) + log_marg(y[left]) + log_marg(y[~left])
    z = np.logaddexp.reduce(list(post.values()))
    return {k: float(np.exp(v - z)) for k, v in post.items()}


@pytest.mark.parametrize("kernel", [{}, {"move_probs": (0.3, 0.3, 0.4, 0.0)},
                                    {"move_probs": (0.35, 0.35, 0.3, 0.0), "slide": 3}, {"particles": 4}],
                         ids=["grow-prune", "change", "slide", "regrowth"])
def test_one_stump_on_a_categorical_feature_matches_exact_enumeration(kernel):
    """The two categories of high response make the best rule, as a mask or its complement (the
    same partition, leaves swapped, the same posterior).  With change moves the chains go between
    the two often and are held to the TV over every rule; with grow and prune alone they must pass
    through the root leaf (14 % of the posterior) and do so about 15 times in 5,000 steps, so that
    kernel is held to the TV over partitions (a mask and its complement one), with the same bound;
    so are slides (one category moved to the other side: a mask reaches its complement by |A| moves,
    through rules of lower posterior), whose TV over every rule was 0.030 at key seed 2 and 0.008 with
    five times the draws.  Over key seeds 0-2: change 0.010-0.016, grow-prune 0.011-0.025, slide
    0.005-0.023 (bound 0.03)."""
    g = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 2, 1, 3])
    x = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2])
    y = np.array([1.9, 0.1, 2.2, -0.2, 2.4, 0.3, 1.7, 0.2, 2.0, 2.1, -0.1, 0.4])
    data = prepare_data(np.stack([g, x], 1).astype(float), y, task="regression", categorical=[0])
    alpha = 0.6
    cfg = BARTConfig(m=1, max_depth=1, min_leaf_rows=1, prior=ChipmanPrior(alpha, 2.0), fixed_sigma=SIGMA, draws=20000,
                     tune=300, chains=8, **kernel)
    res = fit_bart(jax.random.key(0), data, cfg)
    assert res.categories is not None and res.categories[0] == 0b1111 and res.categories[1] == 0
    codes = np.asarray(data.codes).astype(np.int64)
    ys = (y - res.y_shift) / res.y_scale
    exact = _stump_exact(codes, ys, [True, False], alpha, (SIGMA / res.y_scale) ** 2, res.sigma_mu ** 2)
    f, t = res.feature[..., 0, 0].ravel(), res.threshold[..., 0, 0].ravel().astype(int)
    rule = [None if fi < 0 else (int(fi), int(ti)) for fi, ti in zip(f, t)]
    if not kernel or "slide" in kernel:   # a mask and its complement as one partition
        part = lambda k: k if k is None or k[0] != 0 else (0, min(k[1], 0b1111 & ~k[1]))  # noqa: E731
        merged = Counter()
        for k, p in exact.items():
            merged[part(k)] += p
        exact, rule = dict(merged), [part(k) for k in rule]
    got = Counter(rule)
    total = sum(got.values())
    tv = 0.5 * sum(abs(got[k] / total - p) for k, p in exact.items()) + 0.5 * sum(
        got[k] / total for k in got if k not in exact)
    top = sorted(((k, round(got[k] / total, 3), round(p, 3)) for k, p in exact.items()), key=lambda r: -r[2])[:6]
    assert tv < 0.03, (tv, top)
    best = max((k for k in exact if k is not None), key=exact.get)
    assert best[0] == 0 and bin(best[1]).count("1") == 2     # two categories against two


def _direct_prior(rng, codes, cat, w, prior, max_depth, size):
    """``size`` draws of (leaves, splits per column, root rule) of one tree from the interval prior:
    a node's column by weight among the available (an ordered column with a cut left, a categorical
    one with two categories left), an ordered threshold uniform among the cuts, a category mask
    uniform among the nonempty proper subsets of the node's categories; truncated to trees whose
    nodes all hold a row."""
    d = codes.shape[1]
    lo0, hi0 = codes.min(0), codes.max(0)
    masks0 = [int(np.bitwise_or.reduce(1 << np.unique(codes[:, j]))) if cat[j] else 0 for j in range(d)]

    def tree(rows, lo, hi, masks, depth, used, root):
        avail = np.array([bin(masks[j]).count("1") >= 2 if cat[j] else hi[j] > lo[j] for j in range(d)])
        valid = np.flatnonzero(avail)
        p = prior.alpha * (1 + depth) ** -prior.beta
        if depth >= max_depth or len(valid) == 0 or rng.random() >= p:
            return 1, len(rows) > 0
        j = rng.choice(valid, p=w[valid] / w[valid].sum())
        used[j] += 1
        hl, lr, ml, mr = hi.copy(), lo.copy(), list(masks), list(masks)
        if cat[j]:
            while True:
                s = int(sum(1 << b for b in range(24) if (masks[j] >> b) & 1 and rng.random() < 0.5))
                if s not in (0, masks[j]):
                    break
            left = ((s >> codes[rows, j]) & 1) == 1
            ml[j], mr[j] = s, masks[j] & ~s
        else:
            s = lo[j] + int(rng.random() * (hi[j] - lo[j]))
            left = codes[rows, j] <= s
            hl[j], lr[j] = s, s + 1
        if depth == 0:
            root.append((int(j), s))
        a = tree(rows[left], lo, hl, ml, depth + 1, used, root)
        b = tree(rows[~left], lr, hi, mr, depth + 1, used, root)
        return a[0] + b[0], a[1] and b[1]

    out = []
    while len(out) < size:
        used, root = np.zeros(d, int), []
        nl, ok = tree(np.arange(codes.shape[0]), lo0, hi0, masks0, 0, used, root)
        if ok:
            out.append((nl, used, root[0] if root else None))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("x_missing,move_probs,slide,particles", [
    (0.3, (0.3, 0.3, 0.4, 0.0), 0, 0), (0.0, (0.5, 0.5, 0.0, 0.0), 0, 0), (0.0, (0.35, 0.35, 0.3, 0.0), 3, 0),
    pytest.param(0.3, (0.5, 0.5, 0.0, 0.0), 0, 4, marks=pytest.mark.full_only)],
    ids=["weighted-change", "unweighted-grow-prune", "unweighted-slide", "weighted-regrowth"])
def test_without_likelihood_trees_with_categories_keep_the_prior(x_missing, move_probs, slide, particles):
    """With change moves (a change re-scores the tree: every descendant's mask must stay a proper
    subset of its categories) and grow/prune, with the ordered feature's missing values (two coded
    columns: the weighted rule prior, every proposal re-scored in full) or without (the grown
    children's available variables updated in place).  Over key seeds 0-2: TV of the leaves per tree
    0.004-0.006 (weighted, change) and 0.005-0.007 (unweighted, grow/prune), the columns' shares
    within 0.004, TV of the number of categories sent left at the root 0.011-0.021 with change moves
    (bounds 0.03, 0.02, 0.03; grow and prune change the root's rule rarely, that TV reached 0.036
    with them, so it is checked with change moves).  Planted errors: the grown children's
    available variables counted as for an ordered variable, TV of the leaves 0.070; the prior's
    rule count ``2^(|A| - 1)`` for ``2^|A| - 2``, both stump tests and both prior tests fail; a
    right child's categories left as the parent's, TV 0.050-0.053.  With slides (grow, prune and
    slides, unweighted: the children re-scored in place), key seeds 0-2: TV of the leaves
    0.004-0.008, of the root's mask size 0.014-0.020; planted, a slide's children scored with the
    rule before the category moved: mask-size TV 0.033-0.052."""
    rng = np.random.default_rng(7)
    n = 60
    g = rng.integers(0, 5, n).astype(float)
    g[rng.random(n) < 0.15] = np.nan
    x = rng.integers(0, 4, n).astype(float)
    x[rng.random(n) < x_missing] = np.nan
    z = rng.integers(0, 3, n).astype(float)
    data = prepare_data(np.stack([g, x, z], 1), rng.normal(size=n), task="regression", allow_nan=True,
                        categorical=[0])
    prior = ChipmanPrior(0.95, 1.0)
    cfg = BARTConfig(m=4, max_depth=3, min_leaf_rows=1, prior=prior, draws=4000, tune=100, thin=2, chains=8,
                     move_probs=move_probs, slide=slide, particles=particles)
    res = fit_bart(jax.random.key(0), data, cfg, weights=np.zeros(n))
    rules = res.missing
    assert list(rules.source) == ([0, 1, 1, 2] if x_missing else [0, 1, 2])
    coded = rules.code(np.asarray(data.codes)).astype(np.int64)
    assert coded[:, 0].max() == 5                               # the missing category
    cat = np.asarray(res.categories) != 0
    assert list(cat) == [True] + [False] * (rules.d - 1)
    w = np.exp(split_log_weights(rules))
    direct = _direct_prior(rng, coded, cat, w, prior, 3, 50000)
    f = res.feature.reshape(-1, res.feature.shape[-1])
    t = res.threshold.reshape(-1, res.threshold.shape[-1])
    leaves = (f >= 0).sum(-1) + 1
    want = Counter(nl for nl, _, _ in direct)
    got = Counter(leaves.tolist())
    tv = 0.5 * sum(abs(got[k] / len(leaves) - want[k] / len(direct)) for k in set(got) | set(want))
    assert tv < 0.03, (tv, sorted(got.items()), sorted(want.items()))
    share = np.bincount(f[f >= 0], minlength=rules.d) / (f >= 0).sum()
    used = np.sum([u for _, u, _ in direct], 0)
    np.testing.assert_allclose(share, used / used.sum(), atol=0.02)
    if move_probs[2] == 0 and not particles:   # grow and prune change the root's rule rarely (the mask-size TV reached 0.036)
        return
    # the categories sent left at the root, by their number
    root_cat = f[:, 0] == 0
    got_k = Counter(bin(int(s)).count("1") for s in t[root_cat, 0])
    want_k = Counter(bin(r[1]).count("1") for _, _, r in direct if r is not None and r[0] == 0)
    ng, nw = sum(got_k.values()), sum(want_k.values())
    tv_k = 0.5 * sum(abs(got_k[k] / ng - want_k[k] / nw) for k in set(got_k) | set(want_k))
    assert tv_k < 0.03, (tv_k, sorted(got_k.items()), sorted(want_k.items()))


def _route(feature, threshold, missing_left, codes, cat_feature, miss_code):
    """Leaf slot of each row in exported heap trees, a subset rule's threshold its category mask."""
    node = np.zeros(codes.shape[0], np.int64)
    for _ in range(int(np.log2(feature.shape[-1] + 1))):
        f = feature[node]
        split = f >= 0
        fc = np.where(split, f, 0)
        c = codes[np.arange(len(node)), fc].astype(np.int64)
        t = threshold[node].astype(np.int64)
        miss = c == miss_code
        right = np.where(cat_feature[fc], ((t >> np.where(miss, 0, c)) & 1) == 0, c > t)
        right = np.where(miss, ~missing_left[node].astype(bool), right)
        node = np.where(split, 2 * node + 1 + right, node)
    return node


def test_predictions_equal_the_exported_trees_and_the_kept_values():
    import pandas as pd

    rng = np.random.default_rng(3)
    n = 160
    g = rng.integers(0, 6, n)
    x = rng.uniform(size=n)
    y = 2.0 * np.isin(g, [1, 4]) + x + 0.2 * rng.normal(size=n)
    X = pd.DataFrame({"g": pd.Categorical(np.array(list("abcdef"))[g]), "x": x})
    X.loc[rng.random(n) < 0.1, "g"] = np.nan
    kw = dict(m=6, draws=25, tune=25, chains=2, max_depth=3, random_state=0)
    reg = bt.BARTRegressor(**kw).fit(X[:120], y[:120])
    new = X[120:]
    assert reg.idata_.posterior.attrs["subset_split_features"] == "g"
    tr = reg.idata_.trees
    codes = np.asarray(reg._codes(new))
    feat, thr, ml = tr["split_feature"].values, tr["threshold"].values, tr["missing_left"].values
    value = tr["value"].values[..., 0]
    cat_feature = np.array([True, False])
    leaf = np.zeros(feat.shape[:-1] + (codes.shape[0],), np.int64)
    for idx in np.ndindex(feat.shape[:-1]):
        leaf[idx] = _route(feat[idx], thr[idx], ml[idx], codes, cat_feature, np.iinfo(codes.dtype).max)
    f = np.take_along_axis(value, leaf, -1).sum(2) + reg.idata_.posterior.attrs["bart_offset"]
    np.testing.assert_allclose(reg.predict_draws(new), f.reshape(-1, f.shape[-1]), rtol=1e-5, atol=1e-4)
    lean = bt.BARTRegressor(keep_trees=False, **kw).fit(X[:120], y[:120], X_predict=new)
    np.testing.assert_array_equal(lean.predict(new), reg.predict(new))


def test_the_estimators_take_categories_and_say_what_they_do_not_take(tmp_path):
    import pandas as pd

    rng = np.random.default_rng(2)
    n = 80
    X = pd.DataFrame({"g": pd.Categorical(rng.choice(list("pqrs"), n)), "x": rng.uniform(size=n)})
    y = np.isin(X["g"], ["p", "s"]).astype(int)
    clf = bt.BARTClassifier(m=5, draws=20, tune=20, chains=1, random_state=0).fit(X, y)
    proba = clf.predict_proba(X[:5])
    path = tmp_path / "m.pkl"
    clf.save(path)
    np.testing.assert_array_equal(bt.load(path).predict_proba(X[:5]), proba)
    codes = rng.integers(0, 5, n)
    numeric = np.stack([codes, rng.uniform(size=n)], 1)
    by_index = bt.BARTRegressor(m=5, draws=5, tune=5, chains=1, categorical_features=[0]).fit(numeric, codes % 2)
    assert by_index.result_.categories[0] == 0b11111 and by_index.result_.categories[1] == 0
    assert bt.BARTRegressor(m=5, draws=5, tune=5, chains=1).fit(numeric, codes % 2).result_.categories is None
    three = bt.BARTClassifier(m=5, draws=20, tune=20, chains=1, random_state=0).fit(X, rng.integers(0, 3, n))
    assert three.predict_proba(X[:5]).shape == (5, 3)
    regrown = bt.BARTRegressor(m=5, draws=5, tune=5, chains=1, particles=3).fit(X, rng.normal(size=n))
    assert regrown.result_.categories is not None and np.all(np.isfinite(regrown.predict(X[:5])))
    wide = pd.DataFrame({"g": pd.Categorical(rng.integers(0, 30, n)), "x": rng.uniform(size=n)})
    with pytest.warns(UserWarning, match="more than 23 categories"):
        bt.BARTRegressor(m=5, draws=5, tune=5, chains=1).fit(wide, rng.normal(size=n))


def test_a_plotted_subset_rule_names_its_categories():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    rng = np.random.default_rng(4)
    n = 120
    g = rng.choice(list("pqrs"), n)
    y = 2.0 * np.isin(g, ["p", "s"]) + 0.1 * rng.normal(size=n)
    reg = bt.BARTRegressor(m=4, draws=10, tune=30, chains=1, max_depth=2, random_state=0).fit(
        pd.DataFrame({"g": pd.Categorical(g), "x": rng.uniform(size=n)}), y)
    idata = reg.idata_
    feat, thr = idata.trees["split_feature"].values[0], idata.trees["threshold"].values[0]
    draw, tree = (int(i) for i in np.argwhere(feat[:, :, 0] == 0)[0])
    cats = reg.binner_.features_[0].categories
    want = "in {" + ", ".join(str(cats[c]) for c in range(4) if (int(thr[draw, tree, 0]) >> c) & 1) + "}"
    ax = bt.plots.plot_tree(idata, binner=reg.binner_, draw=draw, index=tree)
    assert f"g\n{want}" in [t.get_text() for t in ax.texts]
    ax = bt.plots.plot_tree(idata, draw=draw, index=tree)
    assert any(t.get_text().startswith("g\nin codes {") for t in ax.texts)


@pytest.mark.parametrize("n_cat", [2, 4])
def test_the_regrowth_alone_keeps_the_stump_posterior_with_subset_rules(n_cat):
    """The particle Gibbs regrowth by itself (no local move between its updates), 4 particles, on one tree
    of depth at most 1 with a categorical feature of ``n_cat`` categories and an ordered one: the
    posterior of the root's rule against exact enumeration.  Its subset rules are drawn from the prior
    by fair bits, every category or none stopping the node (half the draws with two categories), so
    this checks the stop's probability in the weights as well as the subsets' (the noise is large
    enough that no split, ordered rules and subsets all hold mass).  Key seeds 0-2 at 8 x 10,000
    updates: TV 0.003-0.006 (two and four categories).  Planted: the stop's probability without the
    stopped draws, TV 0.076-0.077 with two categories (0.021-0.024 with four); one bit too few in a
    subset's probability, 0.124-0.132."""
    from bayestrees.inference import regrow
    from bayestrees.leaves import KnownVarianceNormalLeaves
    from bayestrees.priors import traced_params

    g = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 2, 1, 3]) % n_cat
    x = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2])
    y = np.array([1.9, 0.1, 2.2, -0.2, 2.4, 0.3, 1.7, 0.2, 2.0, 2.1, -0.1, 0.4])
    codes = np.stack([g, x], 1)
    alpha, sigma2, tau2 = 0.6, 3.0, 1.0
    exact = _stump_exact(codes, y, [True, False], alpha, sigma2, tau2)
    prior = ChipmanPrior(alpha, 2.0)
    cfg = regrow.regrow_config(prior, KnownVarianceNormalLeaves(1.0, tau2), 1, 2, 1, 4, 4)
    stats = jax.numpy.asarray(np.stack([np.full(12, 1 / sigma2), y / sigma2, np.zeros(12), np.zeros(12)], 1), "float32")
    cats = jax.numpy.asarray([(1 << n_cat) - 1, 0], "int32")
    lo, hi = jax.numpy.asarray([0, 0], "int32"), jax.numpy.asarray([n_cat - 1, 2], "int32")
    c32 = jax.numpy.asarray(codes, "int32")
    rows = jax.numpy.ones(12, "float32")
    tp = traced_params(prior, "float32")

    def chain(key):
        def step(carry, k):
            f, t = carry
            new = regrow.regrow_tree(k, f, t, stats, rows, c32, lo, hi, tp, cfg, None, cats)
            return (new.feature, new.threshold), (new.feature[0], new.threshold[0])
        start = (jax.numpy.full(3, -1, "int32"), jax.numpy.zeros(3, "int32"))
        return jax.lax.scan(step, start, jax.random.split(key, 10000))[1]

    f, t = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.key(0), 8))
    got = Counter(None if fi < 0 else (int(fi), int(ti)) for fi, ti in zip(np.ravel(f), np.ravel(t)))
    total = sum(got.values())
    tv = 0.5 * sum(abs(got[k] / total - p) for k, p in exact.items()) + 0.5 * sum(
        got[k] / total for k in got if k not in exact)
    assert tv < 0.03, (tv, sorted(((k, round(got[k] / total, 3), round(p, 3)) for k, p in exact.items()),
                                  key=lambda r: -r[2])[:5])
