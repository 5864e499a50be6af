"""``bt.BCFRegressor``: the posterior contract, the effect at new rows, errors before sampling, persistence."""
import warnings

import numpy as np
import pytest

import bayestrees as bt
from bayestrees.convergence import ConvergenceWarning
from bayestrees.estimators.base import NotFittedError

SMALL = dict(m_mu=20, m_tau=10, draws=200, tune=200, chains=2, random_state=0)


def _data(n=200, seed=0, effect=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    pi = 1 / (1 + np.exp(-X[:, 0]))
    z = rng.binomial(1, pi)
    tau = np.full(n, 2.0) if effect is None else effect(X)
    y = 1.0 + X[:, 0] + tau * z + 0.5 * rng.normal(size=n)
    return X, y, z, tau, pi


@pytest.fixture(scope="module")
def fitted():
    X, y, z, tau, pi = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return bt.BCFRegressor(**SMALL).fit(X, y, z, pihat=pi), (X, y, z, tau, pi)


def test_the_posterior_contract(fitted):
    m, (X, y, z, tau, pi) = fitted
    post = m.idata_.posterior
    n = len(y)
    for v in ("tau", "mu"):
        assert post[v].shape == (2, 200, n)
    for v in ("ate", "catt", "sigma", "b0", "b1", "mu_scale"):
        assert post[v].shape == (2, 200)
    assert post["mu_tilde_split_counts"].shape[-1] == X.shape[1] + 1       # the covariates and pihat
    assert post["tau_tilde_split_counts"].shape[-1] == X.shape[1]
    assert m.idata_.log_likelihood["y"].shape == (2, 200, n)
    np.testing.assert_allclose(np.asarray(post["ate"]), np.asarray(post["tau"]).mean(-1), rtol=1e-5, atol=1e-5)
    treated = z > 0
    np.testing.assert_allclose(np.asarray(post["catt"]), np.asarray(post["tau"])[..., treated].mean(-1), rtol=1e-5, atol=1e-5)
    assert set(m.convergence_.table) == {"ate", "catt", "sigma", "mu_mean", "mu_tilde_leaves", "tau_tilde_leaves"}
    assert m.cate_.shape == (n,) and np.isclose(m.ate_, m.cate_.mean(), atol=1e-5)


def test_the_effect_at_new_rows_is_the_fit_at_the_training_rows(fitted):
    m, (X, y, z, tau, pi) = fitted
    d = m.effect_draws(X[:7])
    assert d.shape == (400, 7)
    np.testing.assert_allclose(d, np.asarray(m.idata_.posterior["tau"]).reshape(400, -1)[:, :7], rtol=1e-4, atol=1e-4)
    iv = m.effect_interval(X[:7], prob=0.8)
    assert iv.shape == (7, 2) and np.all(iv[:, 0] <= m.effect(X[:7])) and np.all(m.effect(X[:7]) <= iv[:, 1])
    # E[y | x, z] at the training rows: the control mean plus the effect where treated
    mu = np.asarray(m.idata_.posterior["mu"]).reshape(400, -1)[:, :7]
    pred = m.predict_draws(X[:7], z[:7], pihat=pi[:7])
    np.testing.assert_allclose(pred, mu + z[:7] * d, rtol=1e-4, atol=1e-4)
    lo, hi = m.ate_interval(0.95)
    assert lo < m.ate_ < hi


def test_a_second_fit_of_the_same_shapes_compiles_nothing(every_program_cached):
    """The data, the cut tables and the standardisation are arguments of the compiled programs: a fit
    on another data set of the same shapes loads every program the first fit compiled."""
    from bayestrees.compile_cache import compile_log

    X1, y1, z1, _, pi1 = _data()
    X2, y2, z2, _, pi2 = _data(seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        first = bt.BCFRegressor(**SMALL).fit(X1, y1, z1, pihat=pi1)
        with compile_log() as log:
            second = bt.BCFRegressor(**SMALL).fit(X2, y2 + 10.0, z2, pihat=pi2)
    assert [e.name for e in log if not e.loaded] == []
    assert abs(second.idata_.posterior["mu"].values.mean() - first.idata_.posterior["mu"].values.mean()) > 5


def test_a_homogeneous_effect_is_recovered():
    """A constant effect of 2 under confounded assignment, 300 rows: the 95% interval of the ATE covers it
    and the CATE is within 0.35 of it everywhere on average (seed 1; the naive difference of means is 2.9)."""
    X, y, z, tau, pi = _data(n=300, seed=1)
    assert y[z > 0].mean() - y[z == 0].mean() - 2.0 > 0.5           # the confounding the model must undo
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = bt.BCFRegressor(m_mu=50, m_tau=20, draws=300, tune=300, chains=2, random_state=1).fit(X, y, z, pihat=pi)
    lo, hi = m.ate_interval(0.95)
    assert lo < 2.0 < hi, (lo, hi)
    assert np.sqrt(np.mean((m.cate_ - 2.0) ** 2)) < 0.35


def test_errors_before_sampling():
    X, y, z, tau, pi = _data(n=40)
    m = bt.BCFRegressor(**SMALL)
    with pytest.raises(ValueError, match="binary treatment"):
        m.fit(X, y, z + 1, pihat=pi)
    with pytest.raises(ValueError, match="one arm"):
        m.fit(X, y, np.ones_like(z), pihat=pi)
    with pytest.raises(ValueError, match="one treatment per row"):
        m.fit(X, y, z[:-1], pihat=pi)
    bad = X.copy()
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="infinite"):
        m.fit(bad, y, z, pihat=pi)
    with pytest.raises(ValueError, match="probabilities"):
        m.fit(X, y, z, pihat=pi + 1)
    with pytest.raises(ValueError, match="include_pi"):
        bt.BCFRegressor(**SMALL, include_pi="tau").fit(X, y, z, pihat=pi)
    with pytest.raises(NotFittedError):
        m.effect(X)


def test_new_rows_are_checked_and_persistence(fitted, tmp_path):
    m, (X, y, z, tau, pi) = fitted
    with pytest.raises(ValueError, match="3"):
        m.effect(X[:, :2])
    with pytest.raises(ValueError, match="give pihat"):
        m.predict(X[:3], z[:3])
    with pytest.raises(ValueError, match="fitted without groups"):
        m.effect(X[:3], groups=[0, 1, 0])
    path = tmp_path / "bcf.pkl"
    m.save(path)
    again = bt.load(path)
    np.testing.assert_array_equal(again.effect(X[:5]), m.effect(X[:5]))
    from sklearn.base import clone

    assert clone(m).get_params() == m.get_params()


def test_the_model_context_variable_predicts_at_new_rows():
    """``bt.BCF`` in ``bt.Model()``: the posterior contract, and predictive draws at swapped-in rows equal
    to the posterior's at the same training rows (the training cut tables split the new rows)."""
    X, y, z, tau, pi = _data(n=60)
    with bt.Model():
        Xd, zd, pd_ = bt.Data("X", X), bt.Data("z", z), bt.Data("p", pi)
        bt.BCF("y", Xd, y, zd, pihat=pd_, m_mu=5, m_tau=3)
        idata = bt.sample(draws=20, tune=20, chains=1, random_seed=0)
        bt.set_data({"X": X[:7], "z": z[:7], "p": pi[:7]})
        pred = bt.sample_posterior_predictive(idata, predictions=True)
        assert {"tau", "mu", "ate", "catt", "sigma"} <= set(idata.posterior.data_vars)
        np.testing.assert_allclose(pred.predictions["tau"].values, idata.posterior["tau"].values[..., :7], atol=1e-4)
        np.testing.assert_allclose(pred.predictions["mu"].values, idata.posterior["mu"].values[..., :7], atol=1e-3)
        bt.set_data({"X": X[:7], "z": z[:6], "p": pi[:7]})
        with pytest.raises(ValueError, match="same rows"):
            bt.sample_posterior_predictive(idata, predictions=True)
    with bt.Model():
        with pytest.raises(ValueError, match="both arms"):
            bt.BCF("y", X, y, np.zeros_like(z), pihat=pi)


def test_both_functions_take_the_conjugate_paths():
    """The prognostic and the effect trees (times the coding ``b_z``) take the BART family's step: the
    Normal path for a continuous outcome, the probit path (truncated-normal latents) for a binary one."""
    from bayestrees.causal import bcf_model, bcf_settings
    from bayestrees.inference.treefn.kernel import TreeMoves

    X, y, z, tau, pi = _data(n=60)
    X_mu = np.column_stack([X, pi])
    for outcome, yy, kind in (("normal", y, "normal"), ("probit", (y > np.median(y)).astype(float), "probit")):
        ys, settings = bcf_settings(X_mu, X, yy, z, m_mu=5, m_tau=3, outcome=outcome)
        kernel = TreeMoves(bcf_model).prepare((X_mu, X, z), dict(y=ys, **settings))
        assert kernel.conjugate_kinds == (kind, kind), (outcome, kernel.conjugate_kinds)


def test_the_classifier_reports_the_effect_on_the_probability():
    """``BCFClassifier``: a binary outcome in three groups; the effect at new rows (a difference of
    probabilities, which needs ``pihat`` there, and the rows' groups) equals the posterior's ``tau`` at
    the same training rows, within [-1, 1]; ``group_ate`` is its mean over each group's rows.  (The
    classifier without groups runs in its docstring's example, ``test_doc_examples.py``.)"""
    rng = np.random.default_rng(3)
    X, _, z, _, pi = _data(n=150, seed=3)
    g = rng.integers(0, 3, 150)
    y = (X[:, 0] + np.array([-0.5, 0.0, 0.5])[g] + 0.8 * z + rng.normal(size=150) > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = bt.BCFClassifier(**SMALL).fit(X, y, z, pihat=pi, groups=g)
    post_tau = np.asarray(clf.idata_.posterior["tau"]).reshape(400, -1)
    d = clf.effect_draws(X[:6], pihat=pi[:6], groups=g[:6])
    np.testing.assert_allclose(d, post_tau[:, :6], atol=2e-4)
    assert np.all(np.abs(d) <= 1)
    group_ate = np.asarray(clf.idata_.posterior["group_ate"]).reshape(400, -1)
    np.testing.assert_allclose(group_ate, np.stack([post_tau[:, g == j].mean(1) for j in range(3)], 1), atol=1e-5)
    p = clf.predict_proba(X[:6], z[:6], pihat=pi[:6], groups=g[:6])
    assert p.shape == (6, 2) and np.allclose(p.sum(1), 1)
    assert np.all(np.abs(clf.effect(X[:6], pihat=pi[:6])) <= 1)   # rows of a new group
    assert "sigma" not in clf.idata_.posterior and set(clf.convergence_.table) >= {"ate", "catt"}
    with pytest.raises(ValueError, match="binary outcome"):
        bt.BCFClassifier(**SMALL).fit(X, y + 1, z, pihat=pi)


def _grouped_data(n=240, seed=0):
    """Four sites with their own intercepts and effect shifts (labels are strings)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    g = rng.integers(0, 4, n)
    z = rng.binomial(1, 0.5, n)
    alpha, gamma = np.array([1.0, -1.0, 0.0, 0.5]), np.array([-1.0, 0.0, 0.5, 1.5])
    y = X[:, 0] + alpha[g] + (1.0 + gamma[g]) * z + 0.3 * rng.normal(size=n)
    return X, y, z, np.array(["a", "b", "c", "d"])[g], 1.0 + gamma


@pytest.fixture(scope="module")
def grouped():
    X, y, z, labels, group_effect = _grouped_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = bt.BCFRegressor(**SMALL).fit(X, y, z, pihat=np.full(len(y), 0.5), groups=labels)
    return m, (X, y, z, labels, group_effect)


def _least_squares_group_effects(X, y, z, labels):
    """Each group's effect and its standard error by least squares in the true model's form (``y`` on
    ``X``, the groups' indicators and the groups' indicators times ``z``): what these data say."""
    G = (labels[:, None] == np.unique(labels)[None, :]).astype(float)
    A = np.column_stack([X, G, G * z[:, None]])
    beta = np.linalg.lstsq(A, y, rcond=None)[0]
    r = y - A @ beta
    cov = r @ r / (len(y) - A.shape[1]) * np.linalg.inv(A.T @ A)
    return beta[-G.shape[1]:], np.sqrt(np.diag(cov))[-G.shape[1]:]


def test_groups_add_intercepts_and_effect_shifts(grouped):
    """Multilevel BCF (``fit(..., groups=)``): the group sites in the posterior, ``group_ate`` the mean of
    ``tau`` over each group's rows, and each site's average effect (truth 0, 1, 1.5, 2.5, 60 rows a
    site) where least squares in the true model's form puts it (mean within 0.1, about 1.4 of its
    standard errors; sd within a factor 1.6 of them), from 2 chains of 200 draws."""
    m, (X, y, z, labels, group_effect) = grouped
    post = m.idata_.posterior
    assert list(m.groups_) == ["a", "b", "c", "d"]
    for v in ("alpha", "gamma", "group_ate"):
        assert post[v].shape == (2, 200, 4)
    tau = np.asarray(post["tau"])
    for j, label in enumerate(m.groups_):
        np.testing.assert_allclose(np.asarray(post["group_ate"])[..., j], tau[..., labels == label].mean(-1),
                                   rtol=1e-5, atol=1e-5)
    assert {f"group_ate[{g}]" for g in "abcd"} <= set(m.convergence_.table)
    est, se = _least_squares_group_effects(X, y, z, labels)
    assert np.all(np.abs(est - group_effect) < 4 * se)              # the referee sees the truth
    assert np.all(np.abs(m.group_ate_ - est) < 0.1), (m.group_ate_, est, se)
    sd = np.asarray(post["group_ate"]).reshape(-1, 4).std(0)
    assert np.all((sd > se / 1.6) & (sd < 1.6 * se)), (sd, se)


def test_the_effect_by_group_at_new_rows(grouped):
    """At the training rows with their groups, ``effect_draws`` is the posterior's ``tau``; rows of a new
    group (``groups=None``) carry the spread between groups; unknown labels and groups on a fit
    without them are errors."""
    m, (X, y, z, labels, group_effect) = grouped
    d = m.effect_draws(X[:9], groups=labels[:9])
    np.testing.assert_allclose(d, np.asarray(m.idata_.posterior["tau"]).reshape(400, -1)[:, :9], rtol=1e-4, atol=1e-4)
    new = m.effect_draws(X[:9])
    assert np.all(new.std(0) > 2 * d.std(0))
    mu = np.asarray(m.idata_.posterior["mu"]).reshape(400, -1)[:, :9]
    pred = m.predict_draws(X[:9], z[:9], pihat=np.full(9, 0.5), groups=labels[:9])
    np.testing.assert_allclose(pred, mu + z[:9] * d, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="not seen in fit: e"):
        m.effect(X[:2], groups=["a", "e"])
    with pytest.raises(ValueError, match="one label per row"):
        m.effect(X[:2], groups=["a"])
    with pytest.raises(ValueError, match="at least two groups"):
        bt.BCFRegressor(**SMALL).fit(X, y, z, pihat=np.full(len(y), 0.5), groups=np.zeros(len(y)))
    with pytest.raises(ValueError, match="missing labels"):
        bt.BCFRegressor(**SMALL).fit(X, y, z, pihat=np.full(len(y), 0.5), groups=[None] + list(labels[1:]))


def test_the_model_context_variable_takes_groups():
    """``bt.BCF(..., groups=)``: the group sites in the posterior, and predictive draws at swapped-in rows
    (with their groups) equal to the posterior's at the same training rows."""
    X, y, z, labels, _ = _grouped_data(n=80)
    g = np.searchsorted(np.array(list("abcd")), labels)
    with bt.Model():
        Xd, zd, pd_, gd = bt.Data("X", X), bt.Data("z", z), bt.Data("p", np.full(80, 0.5)), bt.Data("g", g)
        bt.BCF("y", Xd, y, zd, pihat=pd_, groups=gd, m_mu=5, m_tau=3)
        idata = bt.sample(draws=20, tune=20, chains=1, random_seed=0)
        assert idata.posterior["gamma"].shape == (1, 20, 4) and idata.posterior["group_ate"].shape == (1, 20, 4)
        bt.set_data({"X": X[:7], "z": z[:7], "p": np.full(7, 0.5), "g": g[:7]})
        pred = bt.sample_posterior_predictive(idata, predictions=True)
        np.testing.assert_allclose(pred.predictions["tau"].values, idata.posterior["tau"].values[..., :7], atol=1e-4)
    with bt.Model():
        with pytest.raises(ValueError, match="integer codes"):
            bt.BCF("y", X, y, z, pihat=np.full(80, 0.5), groups=labels)


def test_a_categorical_covariate_splits_by_subsets():
    """A site code (six sites) whose effect is 2 in sites 1, 3 and 4 and 0 elsewhere: both functions and
    the propensity model split it by subsets; the effect at new rows of a site no rule names is finite,
    and codes that are not categories are refused before sampling (the estimator and ``bt.BCF``)."""
    rng = np.random.default_rng(4)
    n = 240
    site = rng.integers(0, 6, n)
    x = rng.normal(size=n)
    X = np.column_stack([site, x]).astype(float)
    pi = 1 / (1 + np.exp(-0.5 * x))
    z = rng.binomial(1, pi)
    tau = np.where(np.isin(site, [1, 3, 4]), 2.0, 0.0)
    y = x + tau * z + 0.5 * rng.normal(size=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = bt.BCFRegressor(**SMALL, categorical_features=[0]).fit(X, y, z, pihat=pi)
    post = m.idata_.posterior
    assert post.attrs["tau_tilde_subset_split_features"] == "0" and post.attrs["mu_tilde_subset_split_features"] == "0"
    assert m.cate_[tau > 0].mean() - m.cate_[tau == 0].mean() > 1.2, (m.cate_[tau > 0].mean(), m.cate_[tau == 0].mean())
    assert float(post["tau_tilde_split_counts"][..., 0].mean()) > float(post["tau_tilde_split_counts"][..., 1].mean())
    effect = m.effect(np.array([[1.0, 0.0], [5.0, 0.0], [9.0, 0.0]]))
    assert np.all(np.isfinite(effect)) and effect[0] - effect[1] > 1.0, effect
    bad = X.copy()
    bad[0, 0] = 1.5
    with pytest.raises(ValueError, match="category codes"):
        bt.BCFRegressor(**SMALL, categorical_features=[0]).fit(bad, y, z, pihat=pi)
    with bt.Model():
        with pytest.raises(ValueError, match="out of range"):
            bt.BCF("y", X, y, z, pihat=pi, categorical_features=[2])
        v = bt.BCF("y", X, y, z, pihat=pi, categorical_features=[0])
        assert v.settings["categorical_features"] == (0,)


def _missing_data(n=240, seed=5):
    """The effect is 2 where ``x0 > 0`` and 0 elsewhere; ``x0`` is missing for 60% of the rows below
    -0.5 (missing depending on the value: a missing ``x0`` means no effect, so a rule on ``x0`` must send
    it left, with the low values) and ``x2`` for 20% of all rows (at random)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    pi = 1 / (1 + np.exp(-0.5 * X[:, 1]))
    z = rng.binomial(1, pi)
    tau = np.where(X[:, 0] > 0, 2.0, 0.0)
    y = X[:, 1] + tau * z + 0.5 * rng.normal(size=n)
    gone = (X[:, 0] < -0.5) & (rng.uniform(size=n) < 0.6)
    Xm = X.copy()
    Xm[gone, 0] = np.nan
    Xm[rng.uniform(size=n) < 0.2, 2] = np.nan
    return Xm, y, z, tau, pi, gone


def test_missing_covariates_are_routed_by_the_rules():
    """NaN in ``X``: both functions route a missing value by their rules (the rows whose ``x0`` is
    missing, all of them without effect, are sent with the low values), the effect at new rows with NaN is the
    fit's at the same training rows, the model-context variable samples and predicts at new rows
    without NaN where the training rows had some, and infinite values are refused."""
    Xm, y, z, tau, pi, gone = _missing_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = bt.BCFRegressor(**SMALL).fit(Xm, y, z, pihat=pi)
    high = ~gone & (np.nan_to_num(Xm[:, 0], nan=-1.0) > 0)
    assert m.cate_[gone].mean() < 0.6 and m.cate_[high].mean() > 1.4, (m.cate_[gone].mean(), m.cate_[high].mean())
    assert float(m.idata_.posterior["tau_tilde_split_counts"][..., 0].mean()) > 0.5
    np.testing.assert_allclose(m.effect_draws(Xm[:20]), np.asarray(m.idata_.posterior["tau"]).reshape(400, -1)[:, :20],
                               rtol=1e-4, atol=1e-4)
    assert np.isnan(Xm[:20]).any()
    with bt.Model():
        Xd, zd, pd_ = bt.Data("X", Xm[:80]), bt.Data("z", z[:80]), bt.Data("p", pi[:80])
        bt.BCF("y", Xd, y[:80], zd, pihat=pd_, m_mu=5, m_tau=3)
        idata = bt.sample(draws=20, tune=20, chains=1, random_seed=0)
        rows = np.flatnonzero(~np.isnan(Xm[:80]).any(1))[:7]      # new rows without a missing value
        bt.set_data({"X": Xm[rows], "z": z[rows], "p": pi[rows]})
        pred = bt.sample_posterior_predictive(idata, predictions=True)
        np.testing.assert_allclose(pred.predictions["tau"].values, idata.posterior["tau"].values[..., rows], atol=1e-4)
        bad = Xm[:80].copy()
        bad[0, 1] = -np.inf
        with pytest.raises(ValueError, match="infinite"):
            bt.BCF("y", bad, y[:80], z[:80], pihat=pi[:80])
