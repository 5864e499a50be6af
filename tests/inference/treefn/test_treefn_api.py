"""Tree functions in user-written NumPyro models: what a user gets (outputs, prediction on new rows,
save and load, NumPyro's handlers, the model context, errors before sampling), and (d) of the issue:
the composed Gaussian model and ``bt.BARTRegressor`` give the same posterior."""
import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer import Predictive

import bayestrees as bt
from bayestrees.convergence import ConvergenceWarning
from bayestrees.inference.treefn import TreeEnsemble, evaluate

N, D = 60, 3


@pytest.fixture(scope="module")
def counts_data():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(N, D))
    y = rng.poisson(np.exp(0.5 + np.sin(3 * X[:, 0]))).astype(np.float32)
    return X, y


def counts(X, y=None):
    b0 = numpyro.sample("b0", dist.Normal(0.0, 1.0))
    f = bt.bart_function("f", X, m=4, max_depth=3, min_leaf_rows=2)
    numpyro.sample("y", dist.Poisson(jnp.exp(b0 + f)), obs=y)


@pytest.fixture(scope="module")
def counts_fit(counts_data):
    X, y = counts_data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)   # 2 x 60 draws: the check is tested below
        return bt.sample_model(counts, X, y, draws=60, tune=60, chains=2, random_seed=0)


def test_inferencedata_by_the_posterior_contract(counts_fit, counts_data):
    X, y = counts_data
    idata = counts_fit.idata
    post = idata.posterior
    assert post["b0"].shape == (2, 60)
    assert post["f"].shape == (2, 60, N) and post["f"].dims[-1] == "obs"
    assert post["f_n_leaves"].shape == (2, 60, 4) and post["f_depth"].shape == (2, 60, 4)
    assert post["f_split_counts"].shape == (2, 60, D)
    # the summaries are those of the kept trees, and f is their sum at the training rows
    trees = np.asarray(idata[bt.convert.TREE_GROUP]["f_trees"])
    assert trees.shape[:3] == (2, 60, 4) and trees.shape[-1] == 3
    internal = trees[..., 0] >= 0
    assert np.array_equal(post["f_split_counts"].values.sum(-1), internal.sum((-1, -2)))
    assert np.array_equal(post["f_n_leaves"].values, internal.sum(-1) + 1)
    np.testing.assert_allclose(np.asarray(evaluate(trees[1, -1], X)), post["f"].values[1, -1], atol=1e-5)
    # pointwise log-likelihood of the observed site, the data, the sampler's facts
    ll = idata.log_likelihood["y"]
    assert ll.shape == (2, 60, N)
    b0, f = post["b0"].values[..., None], post["f"].values
    want = y * (b0 + f) - np.exp(b0 + f) - np.asarray(jax.scipy.special.gammaln(y + 1))
    np.testing.assert_allclose(ll.values, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(idata.observed_data["y"].values, y)
    assert idata.sample_stats["f_accepted"].shape == (2, 60)
    assert idata.sample_stats["diverging"].dtype == bool
    assert "b0" in az.summary(idata).index
    assert counts_fit.convergence is not None and "b0" in counts_fit.convergence.table


def test_compare_ranks_user_models(counts_fit, counts_data):
    X, y = counts_data

    def const(X, y=None):   # the same counts with a tree of one leaf only (max_depth 0)
        f = bt.tree_function("f", X, max_depth=0)
        numpyro.sample("y", dist.Poisson(jnp.exp(f + np.log(y.mean()))), obs=y)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other = bt.sample_model(const, X, y, draws=60, tune=0, chains=2, random_seed=1)
        table = bt.compare({"bart": counts_fit.idata, "constant": other.idata})
    assert list(table.index)[0] == "bart"


def test_prediction_on_new_rows_and_after_save_and_load(counts_fit, tmp_path):
    rng = np.random.default_rng(5)
    X_new = rng.uniform(size=(7, D))
    pred = counts_fit.predict(X_new, random_seed=1)
    assert pred["y"].shape == (120, 7) and pred["f"].shape == (120, 7)
    assert np.all(pred["y"] >= 0) and np.all(pred["y"] == np.round(pred["y"]))
    f_new = counts_fit.function("f", X_new)
    assert f_new.shape == (2, 60, 7)
    np.testing.assert_allclose(pred["f"], f_new.reshape(120, 7), atol=1e-5)
    path = tmp_path / "counts.nc"
    counts_fit.save(path)
    back = bt.load_model_fit(path, counts)
    np.testing.assert_array_equal(back.function("f", X_new), f_new)
    again = back.predict(X_new, random_seed=1)
    np.testing.assert_array_equal(again["y"], pred["y"])


def test_tree_sites_work_under_numpyro_handlers(counts_fit, counts_data):
    X, y = counts_data
    tr = handlers.trace(handlers.seed(counts, 3)).get_trace(X, y)
    assert isinstance(tr["f_trees"]["fn"], TreeEnsemble) and tr["f"]["type"] == "deterministic"
    value = tr["f_trees"]["value"]
    assert value.shape == (4, 15, 3)
    assert np.isfinite(float(tr["f_trees"]["fn"].log_prob(value)))
    # substitute and condition fix the trees; the function follows them
    drawn = counts_fit.samples["f_trees"][0, -1]
    tr2 = handlers.trace(handlers.substitute(handlers.seed(counts, 0), {"f_trees": drawn})).get_trace(X, y)
    np.testing.assert_allclose(tr2["f"]["value"], evaluate(drawn, X), atol=1e-6)
    tr3 = handlers.trace(handlers.condition(handlers.seed(counts, 0), {"f_trees": drawn})).get_trace(X, y)
    assert tr3["f_trees"]["is_observed"]
    # a threshold that is not a cut point has prior probability 0
    bad = np.array(drawn)
    internal = bad[..., 0] >= 0
    if internal.any():
        bad[..., 1] = np.where(internal, bad[..., 1] + 1e-3, bad[..., 1])
        assert float(tr["f_trees"]["fn"].log_prob(bad)) == -np.inf
    # numpyro's Predictive with posterior draws on new rows
    X_new = np.random.default_rng(1).uniform(size=(5, D))
    post = {k: np.asarray(v).reshape((-1,) + np.asarray(v).shape[2:]) for k, v in counts_fit.samples.items()}
    out = Predictive(counts, posterior_samples=post)(jax.random.key(0), X_new)
    assert out["y"].shape == (120, 5)


def test_the_prior_draws_trees_that_hold_min_leaf_rows():
    rng = np.random.default_rng(2)
    X = rng.uniform(size=(30, 2))
    d = TreeEnsemble(X, bt.inference.treefn.site.TreeSpec(50, 4, bt.priors.ChipmanPrior(0.95, 1.0), 1.0, 3))
    trees = np.asarray(d.sample(jax.random.key(0)))
    codes = d.codes.astype(int)
    for tr in trees:
        node = np.zeros(30, int)
        f, t = tr[:, 0].astype(int), tr[:, 1]
        for _ in range(4):
            fj = f[node]
            x = X.astype(np.float32)[np.arange(30), np.maximum(fj, 0)]
            node = np.where(fj >= 0, 2 * node + 1 + (x > t[node]), node)
        assert np.all(np.bincount(node)[np.unique(node)] >= 3)
    assert np.all(np.isfinite(np.asarray(d.log_prob(trees))))
    assert codes.shape == (30, 2)


def test_the_model_context_runs_a_user_model(counts_data):
    X, y = counts_data
    X_new = np.random.default_rng(9).uniform(size=(11, D))
    with bt.Model():
        Xd = bt.Data("X", X)
        rv = bt.NumPyroModel("counts", counts, Xd, observed={"y": y})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            idata = bt.sample(draws=30, chains=2, random_seed=0, tune=30)
        assert idata.posterior["f"].shape == (2, 30, N)
        bt.sample_posterior_predictive(idata, extend_inferencedata=True)
        assert idata.posterior_predictive["y"].shape == (2, 30, N)
        bt.set_data({"X": X_new})
        bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)
    assert idata.predictions["y"].shape == (2, 30, 11) and idata.predictions["f"].shape == (2, 30, 11)
    np.testing.assert_allclose(idata.predictions["f"].values, rv.fitted_.function("f", X_new), atol=1e-5)
    with pytest.raises(ValueError, match="unexpected sample"):
        with bt.Model():
            bt.NumPyroModel("counts", counts, X, observed={"y": y})
            bt.sample(draws=5, thin=2)


# ------------------------------------------------------------------------------------------------
# bad models fail before sampling, and say why
# ------------------------------------------------------------------------------------------------
def _bad_x(X, y=None):
    f = bt.bart_function("f", X, m=2)
    numpyro.sample("y", dist.Normal(f, 1.0), obs=y)


def _discrete(X, y=None):
    k = numpyro.sample("k", dist.Poisson(3.0))
    f = bt.bart_function("f", X, m=2)
    numpyro.sample("y", dist.Normal(f + k, 1.0), obs=y)


def _as_index(X, y=None):
    f = bt.bart_function("f", X, m=2)
    table = jnp.arange(10.0)
    numpyro.sample("y", dist.Normal(table[f], 1.0), obs=y)


def _no_trees(X, y=None):
    numpyro.sample("y", dist.Normal(0.0, 1.0), obs=y)


@pytest.mark.parametrize("model,X,y,msg", [
    (_bad_x, np.array([[0.0, np.inf]] * 10), np.zeros(10), "infinite features"),
    (_bad_x, np.zeros(10), np.zeros(10), "shape"),
    (_bad_x, np.zeros((0, 2)), np.zeros(0), "at least one row"),
    (_bad_x, np.random.default_rng(0).normal(size=(10, 2)), np.zeros(7), "observed site 'y'"),
    (_discrete, np.random.default_rng(0).normal(size=(10, 2)), np.zeros(10), "discrete"),
    (_as_index, np.random.default_rng(0).normal(size=(10, 2)), np.zeros(10), "real numbers"),
    (_no_trees, np.zeros((10, 2)), np.zeros(10), "no tree function"),
], ids=["inf-features", "1d-features", "no-rows", "observed-shape", "discrete-latent", "used-as-index", "no-trees"])
def test_bad_models_fail_before_sampling(model, X, y, msg):
    with pytest.raises(ValueError, match=msg):
        bt.sample_model(model, X, y, draws=2, tune=0, chains=1)


def test_bad_arguments_of_the_tree_function():
    X = np.zeros((5, 2))
    for kw, msg in [({"m": 0}, "m must"), ({"leaf_sd": -1.0}, "leaf_sd"), ({"prior": "chipman"}, "prior must"),
                    ({"max_depth": 20}, "max_depth")]:
        with pytest.raises(ValueError, match=msg):
            handlers.seed(lambda: bt.bart_function("f", X, **kw), 0)()


# ------------------------------------------------------------------------------------------------
# (d) the composed Gaussian model and bt.BARTRegressor: the same posterior
# ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_composed_gaussian_model_matches_the_bart_regressor():
    """``bt.BARTRegressor`` (sigma by its Gibbs draw) and the same model written in NumPyro (the
    response scaled as the regressor scales it, the same leaf sd, sigma^2 ~ nu lambda / chi2_nu by
    NUTS, the trees by the conjugate path, which is the BART family's step): the posterior means
    of sigma and of f at the training rows agree within their Monte Carlo error, and so do the
    5% and 95% quantiles of sigma."""
    rng = np.random.default_rng(4)
    n, m = 80, 10
    X = rng.uniform(size=(n, 2))
    y = 2.0 * np.sin(3 * X[:, 0]) + X[:, 1] + 0.5 * rng.normal(size=n)
    reg = bt.BARTRegressor(m=m, draws=1500, tune=300, chains=2, random_state=0).fit(X, y)
    r = reg.result_
    cfg = r.config
    ys = ((y - r.y_shift) / r.y_scale).astype(np.float32)
    nu, lam = float(cfg.nu), float(r.lam)

    def gauss(X, y=None):
        f = bt.bart_function("f", X, m=m, leaf_sd=float(r.sigma_mu), max_depth=cfg.max_depth,
                             min_leaf_rows=cfg.min_leaf_rows, prior=cfg.prior)
        s2 = numpyro.sample("s2", dist.InverseGamma(nu / 2, nu * lam / 2))
        numpyro.sample("y", dist.Normal(f, jnp.sqrt(s2)), obs=y)

    fit = bt.sample_model(gauss, X, ys, draws=1500, tune=300, chains=2, random_seed=1, conjugate="auto",
                          log_likelihood=False)
    s_model = np.sqrt(fit.idata.posterior["s2"].values) * r.y_scale
    s_bart = np.asarray(r.sigma)

    def se(a):
        return float(az.mcse(az.convert_to_dataset({"x": np.asarray(a, float)}))["x"])

    def se_q(a, p):
        return float(az.mcse(az.convert_to_dataset({"x": np.asarray(a, float)}), method="quantile", prob=p)["x"])

    tol = 4.0   # standard errors of the difference; 1 + 2 + 10 comparisons below
    assert abs(s_model.mean() - s_bart.mean()) < tol * np.hypot(se(s_model), se(s_bart)), (s_model.mean(), s_bart.mean())
    for p in (0.05, 0.95):
        a, b = np.quantile(s_model, p), np.quantile(s_bart, p)
        assert abs(a - b) < tol * np.hypot(se_q(s_model, p), se_q(s_bart, p)), (p, a, b)
    f_model = r.y_shift + r.y_scale * fit.idata.posterior["f"].values
    f_bart = r.y_shift + r.y_scale * np.asarray(r.fit, np.float64)
    for i in range(0, n, 8):
        d = abs(f_model[..., i].mean() - f_bart[..., i].mean())
        assert d < tol * np.hypot(se(f_model[..., i]), se(f_bart[..., i])), (i, d)


def test_chains_move_from_the_start_when_the_data_are_far_from_zero():
    """Counts averaging exp(3) = 20 under a log link with no offset: the chains start at the mode of
    a constant function (``TreeMoves._constant_start``); from f = 0 every move was rejected."""
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(200, 2))
    log_rate = 3.0 + 0.5 * (X[:, 0] > 0.5)
    y = rng.poisson(np.exp(log_rate)).astype(np.float32)

    def model(X, y=None):
        f = bt.bart_function("f", X, m=5, max_depth=3)
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

    fit = bt.sample_model(model, X, y=y, draws=40, tune=40, chains=1, random_seed=0, log_likelihood=False)
    assert fit.idata.sample_stats["f_accepted"].values.mean() > 0.5
    f = fit.idata.posterior["f"].values.mean((0, 1))
    assert np.sqrt(np.mean((f - log_rate) ** 2)) < 0.15


def test_two_functions_of_different_sizes_and_a_logit_without_offset():
    """Two tree functions with different m and depth in one model (their own tree and node dims);
    a logit link from f = 0 moves (the start's Newton steps are safeguarded); a model whose only
    latent sites are trees gets a convergence table."""
    rng = np.random.default_rng(1)
    n = 120
    X = rng.uniform(size=(n, 3))
    eta = 2 * np.sin(2 * np.pi * X[:, 0]) + 3 * (X[:, 1] - 0.5)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(np.float32)

    def model(X, y=None):
        f = bt.bart_function("f", X, m=6, max_depth=3)
        h = bt.bart_function("h", X, m=2, max_depth=2, leaf_sd=0.3)
        numpyro.sample("y", dist.Bernoulli(logits=f + h), obs=y)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = bt.sample_model(model, X, y=y, draws=40, tune=40, chains=2, random_seed=0)
    trees = fit.idata[bt.convert.TREE_GROUP]
    assert trees["f_trees"].dims[2:4] == ("f_tree", "f_node") and trees["h_trees"].shape[2:4] == (2, 7)
    assert fit.idata.sample_stats["f_accepted"].values.mean() > 0.2
    assert {"f_mean", "f_leaves", "h_mean", "h_leaves"} <= set(fit.convergence.table)


def test_a_function_of_several_outputs(tmp_path):
    """``outputs=k``: values ``(n, k)``, one ensemble per output (here the three linear predictors
    of a multinomial logit); the trees site, the summaries, the InferenceData dims, the convergence
    table, prediction on new rows and save/load all carry the output axis."""
    rng = np.random.default_rng(2)
    n, k, m = 90, 3, 3
    X = rng.uniform(size=(n, 2))
    y = np.where(X[:, 0] < 0.33, 0, np.where(X[:, 0] < 0.66, 1, 2)).astype(np.int32)

    def model(X, y=None):
        f = bt.bart_function("f", X, m=m, outputs=k, max_depth=3)
        numpyro.sample("y", dist.Categorical(logits=f), obs=y)

    tr = handlers.trace(handlers.seed(model, 0)).get_trace(X)
    assert tr["f_trees"]["value"].shape == (k, m, 15, 3) and tr["f"]["value"].shape == (n, k)
    np.testing.assert_allclose(tr["f"]["value"][:, 1], evaluate(tr["f_trees"]["value"][1], X), atol=1e-6)
    assert np.isfinite(float(tr["f_trees"]["fn"].log_prob(tr["f_trees"]["value"])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = bt.sample_model(model, X, y, draws=30, tune=30, chains=2, random_seed=0)
    post = fit.idata.posterior
    assert post["f"].dims[2:] == ("obs", "f_output") and post["f"].shape == (2, 30, n, k)
    assert post["f_n_leaves"].dims[2:] == ("f_output", "f_tree") and post["f_n_leaves"].shape == (2, 30, k, m)
    assert post["f_split_counts"].shape == (2, 30, k, 2)
    trees = fit.idata[bt.convert.TREE_GROUP]["f_trees"]
    assert trees.dims[2:] == ("f_output", "f_tree", "f_node", "field") and trees.shape[2:] == (k, m, 15, 3)
    assert np.array_equal(post["f_n_leaves"].values, (trees.values[..., 0] >= 0).sum(-1) + 1)
    np.testing.assert_allclose(np.asarray(evaluate(trees.values[1, -1, 2], X)), post["f"].values[1, -1, :, 2], atol=1e-5)
    assert {f"f_mean_{j}" for j in range(k)} | {f"f_leaves_{j}" for j in range(k)} <= set(fit.convergence.table)
    # the trees moved on every output, and the fit separates the classes
    assert np.all((trees.values[:, -1, :, :, 0] >= 0).sum((-1, -2)) > 0)
    probs = jax.nn.softmax(post["f"].values.mean((0, 1)), -1)
    assert float(np.mean(np.argmax(probs, -1) == y)) > 0.8
    # the pointwise log likelihood at the kept values of every output (the rows not routed again)
    want = np.take_along_axis(np.asarray(jax.nn.log_softmax(post["f"].values, -1)), y[None, None, :, None], -1)[..., 0]
    np.testing.assert_allclose(fit.idata.log_likelihood["y"].values, want, rtol=1e-5, atol=1e-5)
    X_new = rng.uniform(size=(5, 2))
    pred = fit.predict(X_new, random_seed=1)
    assert pred["f"].shape == (60, 5, k) and pred["y"].shape == (60, 5)
    f_new = fit.function("f", X_new)
    assert f_new.shape == (2, 30, 5, k)
    np.testing.assert_allclose(pred["f"], f_new.reshape(60, 5, k), atol=1e-5)
    fit.save(tmp_path / "multi.nc")
    np.testing.assert_array_equal(bt.load_model_fit(tmp_path / "multi.nc", model).function("f", X_new), f_new)


def test_particles_run_on_every_path_but_the_general_path_of_log_gamma_leaves():
    """``particles``: the regrowth runs on the conjugate Normal and Gamma-Poisson paths and on the general
    path with Normal leaves (a Poisson likelihood: its own regrowth, corrected by Metropolis-Hastings); a
    function of one tree has it by default.  On the general path with log-gamma leaves asking for it
    raises before sampling, naming the leaf prior."""
    from bayestrees.inference.treefn.kernel import ONE_TREE_MOVES, TreeMoves

    rng = np.random.default_rng(0)
    X = rng.uniform(size=(30, 2)).astype(np.float32)
    y = rng.poisson(2.0, size=30).astype(np.float32)

    def model(X, y=None, leaf_prior="normal"):
        f = bt.tree_function("f", X, max_depth=2, leaf_prior=leaf_prior)
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

    general = TreeMoves(model, particles=4).prepare((X, y), {})
    assert general.conjugate_kinds == ("",) and general._fns[0].cfg.particles == 4
    assert TreeMoves(model).prepare((X, y), {})._fns[0].cfg.particles == 10
    with pytest.raises(ValueError, match="leaf_prior='loggamma'"):
        TreeMoves(model, conjugate=False, particles=4).prepare((X, y), {"leaf_prior": "loggamma"})
    assert TreeMoves(model, conjugate=False).prepare((X, y), {"leaf_prior": "loggamma"})._fns[0].cfg.particles == 0
    moves = TreeMoves(model, particles=4).prepare((X, y), {"leaf_prior": "loggamma"})
    assert moves.conjugate_kinds == ("poisson",) and moves._fns[0].cfg.particles == 4
    auto = TreeMoves(model).prepare((X, y), {"leaf_prior": "loggamma"})
    assert auto._fns[0].cfg.particles == 10 and auto._fns[0].cfg.move_probs == ONE_TREE_MOVES


def test_the_logit_path_is_chosen_where_the_likelihood_is_logistic_in_the_function():
    """``conjugate="auto"`` takes the logit path (Polya-Gamma draws) for a Bernoulli or Binomial observation
    whose logits are another site's value plus the function, and the general path where the function
    enters otherwise: through ``probs``, not linearly, observed twice, or in a scaled site.  A factor of
    the function that does not depend on it (2, or a treatment times a coefficient) keeps the path."""
    from bayestrees.inference.treefn.kernel import TreeMoves

    rng = np.random.default_rng(0)
    X = rng.uniform(size=(30, 2)).astype(np.float32)
    y = (rng.uniform(size=30) < 0.5).astype(np.float32)

    def bernoulli(X, y=None):
        b0 = numpyro.sample("b0", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Bernoulli(logits=b0 + bt.bart_function("f", X, m=3)), obs=y)

    def binomial(X, y=None):
        numpyro.sample("y", dist.Binomial(4, logits=bt.tree_function("f", X, max_depth=2)), obs=y)

    def probs(X, y=None):
        numpyro.sample("y", dist.Bernoulli(probs=jax.nn.sigmoid(bt.bart_function("f", X, m=3))), obs=y)

    def twice(X, y=None):
        numpyro.sample("y", dist.Bernoulli(logits=2.0 * bt.bart_function("f", X, m=3)), obs=y)

    z = (rng.uniform(size=30) < 0.5).astype(np.float32)

    def treated(X, y=None):   # a causal forest's effect: zero where z = 0, a sampled coefficient
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Bernoulli(logits=0.3 + b * z * bt.bart_function("f", X, m=3)), obs=y)

    def squared(X, y=None):
        f = bt.bart_function("f", X, m=3)
        numpyro.sample("y", dist.Bernoulli(logits=f + 0.1 * f * f), obs=y)

    def two_sites(X, y=None):
        f = bt.bart_function("f", X, m=3)
        numpyro.sample("y", dist.Bernoulli(logits=f), obs=y)
        numpyro.sample("y2", dist.Bernoulli(logits=f), obs=y)

    def scaled(X, y=None):
        with numpyro.handlers.scale(scale=2.0):
            numpyro.sample("y", dist.Bernoulli(logits=bt.bart_function("f", X, m=3)), obs=y)

    for model, kind in ((bernoulli, "logit"), (binomial, "logit"), (probs, ""), (twice, "logit"), (treated, "logit"),
                        (squared, ""), (two_sites, ""), (scaled, "")):
        kernel = TreeMoves(model).prepare((X, y), {})
        assert kernel.conjugate_kinds == (kind,), model.__name__
    assert TreeMoves(binomial).prepare((X, y), {})._fns[0].cfg.particles == 10   # one tree: the regrowth too
    assert TreeMoves(bernoulli, conjugate=False).prepare((X, y), {}).conjugate_kinds == ("",)


def test_the_student_t_path_is_chosen_where_the_function_is_the_location_of_a_student_t():
    """``conjugate="auto"`` takes the Student-t path (the scale mixture's latents) for a Student-t
    observation whose location is other sites plus the function and whose degrees of freedom and scale
    do not depend on it (sites of their own, or constants), also with a factor that does not depend
    on it, and the general path where the function also sets the scale or the site is scaled."""
    from bayestrees.inference.treefn.kernel import TreeMoves

    rng = np.random.default_rng(0)
    X = rng.uniform(size=(30, 2)).astype(np.float32)
    y = rng.standard_t(3.0, size=30).astype(np.float32)

    def sites(X, y=None):
        b0 = numpyro.sample("b0", dist.Normal(0.0, 1.0))
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
        nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
        numpyro.sample("y", dist.StudentT(nu, b0 + bt.bart_function("f", X, m=3), sigma), obs=y)

    def constants(X, y=None):
        numpyro.sample("y", dist.StudentT(4.0, bt.tree_function("f", X, max_depth=2), 0.5), obs=y)

    def scale_moves(X, y=None):
        f = bt.bart_function("f", X, m=3)
        numpyro.sample("y", dist.StudentT(4.0, f, jnp.exp(0.1 * f)), obs=y)

    def twice(X, y=None):
        numpyro.sample("y", dist.StudentT(4.0, 2.0 * bt.bart_function("f", X, m=3), 1.0), obs=y)

    def scaled(X, y=None):
        with numpyro.handlers.scale(scale=2.0):
            numpyro.sample("y", dist.StudentT(4.0, bt.bart_function("f", X, m=3), 1.0), obs=y)

    for model, kind in ((sites, "student_t"), (constants, "student_t"), (scale_moves, ""), (twice, "student_t"),
                        (scaled, "")):
        assert TreeMoves(model).prepare((X, y), {}).conjugate_kinds == (kind,), model.__name__
    assert TreeMoves(constants).prepare((X, y), {})._fns[0].cfg.particles == 10   # one tree: the regrowth too


def test_slides_are_a_choice_on_the_paths_of_the_bart_step_and_fail_elsewhere():
    """``slide=k`` sets the change move to a slide on the conjugate Normal and augmented paths (moves
    ``SLIDE_MOVES`` unless given; ``"auto"``, the default, for sums of trees there when no moves are
    chosen); it raises before sampling with a swap among the moves, a bad value, or on a path that
    does not take the BART family's step."""
    from bayestrees.inference.treefn.kernel import AUTO_SLIDE, SLIDE_MOVES, TreeMoves

    rng = np.random.default_rng(0)
    X = rng.uniform(size=(30, 2)).astype(np.float32)
    y = rng.poisson(2.0, size=30).astype(np.float32)

    def normal(X, y=None):
        numpyro.sample("y", dist.Normal(bt.bart_function("f", X, m=3), 1.0), obs=y)

    def poisson(X, y=None):
        numpyro.sample("y", dist.Poisson(jnp.exp(bt.bart_function("f", X, m=3))), obs=y)

    cfg = TreeMoves(normal, slide=3).prepare((X, y), {})._fns[0].cfg
    assert (cfg.slide, cfg.move_probs) == (3, SLIDE_MOVES)
    for model in (normal, poisson):                                 # "auto": slides for sums on every path
        cfg = TreeMoves(model).prepare((X, y), {})._fns[0].cfg
        assert (cfg.slide, cfg.move_probs) == (AUTO_SLIDE, SLIDE_MOVES)
    for kernel in (TreeMoves(normal, move_probs=(0.5, 0.5, 0.0, 0.0)), TreeMoves(poisson, slide=0)):
        cfg = kernel.prepare((X, y), {})._fns[0].cfg                  # moves chosen: none
        assert (cfg.slide, cfg.move_probs) == (0, (0.5, 0.5, 0.0, 0.0))

    def one_tree(X, y=None):
        numpyro.sample("y", dist.Normal(bt.tree_function("f", X, max_depth=2), 1.0), obs=y)

    assert TreeMoves(one_tree).prepare((X, y), {})._fns[0].cfg.slide == 0   # one tree: the one-tree moves
    cfg = TreeMoves(normal, slide=1, move_probs=(0.4, 0.4, 0.2, 0.0)).prepare((X, y), {})._fns[0].cfg
    assert (cfg.slide, cfg.move_probs) == (1, (0.4, 0.4, 0.2, 0.0))

    def poisson_loggamma(X, y=None):
        f = bt.bart_function("f", X, m=3, leaf_prior="loggamma")
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

    for model in (poisson, poisson_loggamma):   # slides asked for on the general and the Gamma-Poisson paths
        cfg = TreeMoves(model, slide=2).prepare((X, y), {})._fns[0].cfg
        assert (cfg.slide, cfg.move_probs) == (2, SLIDE_MOVES)
    with pytest.raises(ValueError, match="swap and rotate must be 0"):
        TreeMoves(normal, slide=2, move_probs=(0.3, 0.3, 0.2, 0.2))
    with pytest.raises(ValueError, match="swap and rotate must be 0"):
        TreeMoves(normal, slide=2, move_probs=(0.3, 0.3, 0.2, 0.0, 0.2))
    with pytest.raises(ValueError, match="slide must be"):
        TreeMoves(normal, slide=-1)
    fit = bt.sample_model(normal, X, y=y, draws=20, tune=10, chains=1, slide=2, log_likelihood=False)
    assert np.isfinite(np.asarray(fit.idata.posterior["f"])).all()


def test_the_moves_are_a_choice_and_bad_ones_fail_before_sampling():
    """``move_probs`` and ``local_moves`` set every tree function's kernel (default: grow, prune and slide,
    one move a step, for sums on the conjugate Normal path; the one-tree moves for one tree); bad values
    raise before anything runs."""
    from bayestrees.inference.treefn.kernel import ONE_TREE_MOVE_COUNT, ONE_TREE_MOVES, SLIDE_MOVES, TreeMoves

    rng = np.random.default_rng(0)
    X = rng.uniform(size=(30, 2)).astype(np.float32)
    y = rng.normal(size=30).astype(np.float32)

    def model(X, y=None):
        f = bt.bart_function("f", X, m=3, max_depth=2)
        g = bt.tree_function("g", X, max_depth=2)
        numpyro.sample("y", dist.Normal(f + g, 1.0), obs=y)

    default = TreeMoves(model).prepare((X, y), {})
    assert [(fn.cfg.move_probs, fn.cfg.local_moves) for fn in default._fns] == [
        (SLIDE_MOVES, 1), (ONE_TREE_MOVES, ONE_TREE_MOVE_COUNT)]
    asked = TreeMoves(model, move_probs=(0.3, 0.3, 0.3, 0.1), local_moves=3).prepare((X, y), {})
    assert all(fn.cfg.move_probs == (0.3, 0.3, 0.3, 0.1) and fn.cfg.local_moves == 3 for fn in asked._fns)
    rotating = TreeMoves(model, move_probs=(0.3, 0.3, 0.2, 0.1, 0.1)).prepare((X, y), {})   # a rotation among them
    assert all(fn.cfg.move_probs == (0.3, 0.3, 0.2, 0.1, 0.1) and fn.cfg.slide == 0 for fn in rotating._fns)
    for kw, msg in [(dict(move_probs=(0.4, 0.2, 0.3, 0.1)), "grow = prune"), (dict(move_probs=(0.5, 0.5)), "4 or 5 prob"),
                    (dict(move_probs=(0.0, 0.0, 1.0, 0.0)), "grow = prune > 0"), (dict(local_moves=0), "local_moves")]:
        with pytest.raises(ValueError, match=msg):
            bt.sample_model(model, X, y, draws=5, tune=5, chains=1, **kw)


def test_bad_data_is_named_before_sampling():
    """Data that would give a wrong or frozen posterior fail before sampling, each with its own message:
    an observed y of shape (n, 1) against a function of shape (n,) (it would broadcast to (n, n)),
    negative Poisson counts, NaN in an observed site; and a fit's function at rows of the wrong width
    or with infinite values (NaN is a missing value: tests/inference/treefn/test_treefn_missing.py)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(30, 2))
    y = rng.poisson(2.0, size=30).astype(np.float32)

    def counts(X, y=None):
        f = bt.bart_function("f", X, m=2, max_depth=2)
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

    def gauss(X, y=None):
        f = bt.bart_function("f", X, m=2, max_depth=2)
        numpyro.sample("y", dist.Normal(f, 1.0), obs=y)

    run = dict(draws=5, tune=5, chains=1)
    for model, yy, msg in [(gauss, y[:, None], r"shape \(30, 1\).*broadcast to \(30, 30\)"),
                           (counts, y - 5, "outside the support of Poisson"),
                           (gauss, np.where(np.arange(30) == 3, np.nan, y), "NaN or infinite.*index \\(3,\\)")]:
        with pytest.raises(ValueError, match=msg):
            bt.sample_model(model, X, y=yy, **run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = bt.sample_model(gauss, X, y=y, **run)
    with pytest.raises(ValueError, match=r"2 features.*\(4, 3\)"):
        fit.function("f", rng.uniform(size=(4, 3)))
    with pytest.raises(ValueError, match="infinite"):
        fit.function("f", np.array([[np.inf, 0.5]]))
    with pytest.raises(ValueError, match="no tree function 'g'"):
        fit.function("g", X)


def test_rows_of_faint_precision_keep_the_trees_values():
    """A function that enters the mean times a factor near 0 in some rows (``s_i = 1e-3``: a causal forest's
    effect where the coding ``b0`` is small) has there a pseudo-response ``f + a / b`` about 1,000 times
    the residual; the function, read back as pseudo-response minus running residual, lost ``|c| eps`` a
    step (about 1e-4 after a few hundred steps).  Such rows take the trees' sum: the kept function
    equals the kept trees evaluated at the rows, at every draw."""
    rng = np.random.default_rng(0)
    n = 80
    X = rng.uniform(size=(n, 2)).astype(np.float32)
    s = np.where(np.arange(n) % 4 == 0, 1e-3, 1.0).astype(np.float32)
    y = (np.sin(4 * X[:, 0]) * s + 0.3 * rng.normal(size=n)).astype(np.float32)

    def model(X, y=None):
        f = bt.bart_function("f", X, m=5, leaf_sd=0.5)
        numpyro.sample("y", dist.Normal(s * f, 0.3), obs=y)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = bt.sample_model(model, X, y=y, draws=150, tune=150, chains=1, random_seed=0, log_likelihood=False)
    trees = np.asarray(fit.idata[bt.convert.TREE_GROUP]["f_trees"])[0]
    f = fit.idata.posterior["f"].values[0]
    got = np.stack([np.asarray(evaluate(trees[d], X)) for d in range(0, 150, 10)])
    np.testing.assert_allclose(got, f[::10], atol=2e-5)


def _live_bytes() -> int:
    return sum(a.nbytes for a in jax.live_arrays())


def test_a_finished_fit_leaves_no_draws_on_the_device(counts_data):
    """Once ``sample_model`` returns and its fit is dropped, the process holds none of its draws: NumPyro's
    ``MCMC`` stays reachable from NumPyro's and JAX's caches of its collection loop, so the fit empties
    it (a causal forest at its defaults kept about 800 MB a fit in a process fitting replications)."""
    import gc

    X, y = counts_data
    gc.collect()
    before = _live_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = bt.sample_model(counts, X, y, draws=60, tune=60, chains=2, random_seed=1)
    drawn = sum(np.asarray(v).nbytes for g in ("posterior", bt.convert.TREE_GROUP) for v in fit.idata[g].data_vars.values())
    del fit
    gc.collect()
    assert _live_bytes() - before < 0.05 * drawn, (_live_bytes() - before, drawn)


def _one_tree(X, y=None):
    f = bt.tree_function("f", X, max_depth=2)
    numpyro.sample("y", dist.Normal(f, 0.5), obs=y)


def test_the_chains_run_in_the_library_loop_the_same_whichever_way(counts_data, capsys):
    """``sample_model`` runs its chains in the library's chain loop: vectorized, in threads or one
    after another, each chain is the same chain (its key as NumPyro's ``MCMC`` drew it), and
    a progress bar reports the run; an unknown way fails before sampling."""
    import gc

    from bayestrees.inference.treefn import programs
    from bayestrees.inference.treefn.chains import GibbsChain

    X, _ = counts_data
    y = (np.where(X[:, 0] > 0.5, 1.0, -1.0) + 0.5 * np.random.default_rng(1).normal(size=N)).astype(np.float32)
    fits = {}
    for method in ("vectorized", "parallel", "sequential"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fits[method] = bt.sample_model(_one_tree, X, y, draws=30, tune=30, chains=3, random_seed=4,
                                           chain_method=method, progressbar=method == "sequential")
    assert "sampling the model" in capsys.readouterr().err
    want = fits["vectorized"].idata.posterior
    assert len(np.unique(want["f_n_leaves"].values)) > 1                                  # the trees moved
    for method in ("parallel", "sequential"):
        got = fits[method].idata.posterior
        np.testing.assert_array_equal(got["f_n_leaves"].values, want["f_n_leaves"].values)
        np.testing.assert_allclose(got["f"].values, want["f"].values, atol=1e-5)
    # the kept draws hold the trees, not the per-row caches of the sampler's state
    assert fits["parallel"].samples["f_trees"].shape[:2] == (3, 30)
    del fits
    programs.clear_programs()   # the chains kept for later fits of the same program, with their data
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, GibbsChain)]   # the fits' kernels and data are freed
    with pytest.raises(ValueError, match="chain_method"):
        bt.sample_model(_one_tree, X, y, chain_method="pmap")
