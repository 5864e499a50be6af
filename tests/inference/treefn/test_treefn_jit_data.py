"""Issue 30: ``sample_model(..., jit_data=True)``: the model's data are arguments of the compiled
programs, so a second fit with a new ``y`` of the same shapes compiles nothing (its programs are
loaded from the persistent compilation cache), in a script and in the model context."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import bayestrees as bt
from bayestrees.compile_cache import compile_log
from bayestrees.convergence import ConvergenceWarning
from bayestrees.inference.treefn.fit import _data_as_arguments
from bayestrees.inference.treefn.kernel import tree_sites
from bayestrees.inference.treefn.site import stump_initialisation
from numpyro.infer.gibbs import prototype_trace

N = 30
RUN = dict(draws=5, tune=5, chains=2, random_seed=0)


def linear(X, y=None):
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    f = bt.bart_function("f", X, m=3, max_depth=2, min_leaf_rows=2, leaf_sd=0.3)
    numpyro.sample("y", dist.Normal(b * X[:, 0] + f, 0.3), obs=y)


def data(seed):
    X = np.random.default_rng(0).uniform(size=(N, 2))
    y = (np.sin(3 * X[:, 0]) + 0.3 * np.random.default_rng(seed).normal(size=N)).astype(np.float32)
    return X, y


def compiled(log) -> list:
    """The programs XLA compiled (names), not those loaded from the persistent cache."""
    return [e.name for e in log if not e.loaded]


def test_a_second_fit_with_a_new_y_compiles_nothing(every_program_cached):
    X, y1 = data(1)
    _, y2 = data(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        first = bt.sample_model(linear, X, y=y1, jit_data=True, **RUN)
        with compile_log() as log:
            second = bt.sample_model(linear, X, y=y2, jit_data=True, **RUN)
        again = bt.sample_model(linear, X, y=y2, jit_data=True, **RUN)
    assert "jit(_fori_collect_loop)" not in compiled(log)
    assert compiled(log) == []   # the set-up, the conjugacy probe, the sums of trees: none either
    assert not np.array_equal(first.samples["b"], second.samples["b"])   # the new y was sampled
    for k in second.samples:   # a loaded program draws what a compiled one draws
        assert np.array_equal(second.samples[k], again.samples[k]), k
    assert second.predict(X[:4])["y"].shape == (10, 4)
    assert second.function("f", X[:4]).shape == (2, 5, 4)


def test_a_second_fit_on_new_features_compiles_nothing(every_program_cached):
    """New features of the same shape (so as many cut points): the features and their cut table and
    codes are arguments of the programs, so nothing compiles, and the trees drawn are trees over the
    new features' cut points (the function at the rows is the trees evaluated at the new X)."""
    X1, y = data(1)
    X2 = np.random.default_rng(7).uniform(size=X1.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        bt.sample_model(linear, X1, y=y, jit_data=True, **RUN)
        with compile_log() as log:
            second = bt.sample_model(linear, X2, y=y, jit_data=True, **RUN)
        again = bt.sample_model(linear, X2, y=y, jit_data=True, **RUN)
    assert compiled(log) == []
    for k in second.samples:   # a loaded program draws what a compiled one draws
        assert np.array_equal(second.samples[k], again.samples[k]), k
    f = second.idata.posterior["f"].values
    np.testing.assert_allclose(second.function("f", X2), f, rtol=1e-5, atol=1e-6)
    trees = second.samples["f_trees"]
    cuts = tree_site(linear, X2, y=y).cuts
    internal = trees[..., 0] >= 0
    assert internal.any()
    thresholds, features = trees[..., 1][internal], trees[..., 0][internal].astype(int)
    assert np.all((cuts[features] == thresholds[:, None]).any(1))   # every threshold a cut point of X2's feature


def test_the_model_context_after_set_data(every_program_cached):
    X, y1 = data(1)
    _, y2 = data(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with bt.Model():
            Xd, yd = bt.Data("X", X), bt.Data("y", y1)
            bt.NumPyroModel("linear", linear, Xd, observed={"y": yd})
            bt.sample(draws=5, tune=5, chains=2, random_seed=0, jit_data=True)
            bt.set_data({"y": y2})
            with compile_log() as log:
                idata = bt.sample(draws=5, tune=5, chains=2, random_seed=0, jit_data=True)
            bt.set_data({"X": X[:7]})
            pred = bt.sample_posterior_predictive(idata, predictions=True)
    assert "jit(_fori_collect_loop)" not in compiled(log)
    np.testing.assert_array_equal(idata.observed_data["y"].values, y2)
    assert pred.predictions["y"].shape == (2, 5, 7)


def _places(model, *args, **kwargs):
    with stump_initialisation():
        tr = prototype_trace(model, jax.random.key(0), args, kwargs)
    run_model, run_args, _ = _data_as_arguments(model, args, kwargs, tr, tree_sites(tr))
    return run_model, run_args


def tree_site(model, *args, **kwargs):
    """The tree site's distribution of ``model`` run on concrete arguments."""
    with stump_initialisation():
        return prototype_trace(model, jax.random.key(0), args, kwargs)["f_trees"]["fn"]


def test_which_arguments_are_traced():
    X, y = data(1)
    w = np.ones(N)

    def weighted(X, y=None, w=None, scale=0.3):
        f = bt.bart_function("f", X, m=2)
        numpyro.sample("y", dist.Normal(f, scale / jnp.sqrt(w)), obs=y)

    run_model, run_args = _places(weighted, X, y=y, w=w, scale=0.3)
    assert sorted(map(id, run_args[:3])) == sorted((id(X), id(y), id(w)))   # a Python float stays a constant
    cuts, codes, code_lo, code_hi = run_args[3:]   # then the feature table of "f", read from the arguments
    want = tree_site(weighted, X, y=y, w=w)
    for got, expected in zip((cuts, codes, code_lo, code_hi), (want.cuts, want.codes, want.code_lo, want.code_hi)):
        np.testing.assert_array_equal(got, expected)
    with stump_initialisation():
        tr = prototype_trace(run_model, jax.random.key(0), run_args, {})
    assert tr["f_trees"]["fn"].codes is codes

    def derived(X, y=None):   # the features computed from an argument in NumPy: then the other data are traced
        f = bt.bart_function("f", np.log1p(X), m=2)
        numpyro.sample("y", dist.Normal(f, 0.3), obs=y)

    run_model, run_args = _places(derived, X, y=y)
    assert len(run_args) == 1 and run_args[0] is y

    def no_data(X):
        bt.bart_function("f", X, m=2)

    run_model, run_args = _places(no_data, X)
    assert run_model is no_data and len(run_args) == 1   # nothing to trace: the model as it is


def test_a_model_that_needs_its_data_concrete_says_why():
    X, y = data(1)

    def scaled(X, y=None):
        f = bt.bart_function("f", X, m=2, leaf_sd=0.5 * float(np.ptp(np.asarray(y))) / 2)
        numpyro.sample("y", dist.Normal(f, 0.3), obs=y)

    with pytest.raises(ValueError, match=r"jit_data=True: .*argument|jit_data=True: .*y traced"):
        bt.sample_model(scaled, X, y=y, jit_data=True, **RUN)
    # as before without it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert bt.sample_model(scaled, X, y=y, draws=3, tune=3, chains=1).samples["f_trees"].shape[:2] == (1, 3)


def test_data_as_arguments_draw_what_constants_draw():
    """``jit_data=True`` changes where the data live in the compiled programs, not the chain: the
    same draws as the default (the one-tree acceptance cases of ``test_treefn_exact.py`` run every
    data seed with it)."""
    X, y = data(1)

    def one_tree_counts(X, y=None):   # a function of one tree: the one-tree moves and the regrowth
        f = bt.tree_function("f", X, max_depth=2, min_leaf_rows=2)
        numpyro.sample("y", dist.Poisson(jnp.exp(0.5 + f)), obs=y)

    counts = np.random.default_rng(3).poisson(np.exp(0.5 + (X[:, 0] > 0.5))).astype(np.float32)
    for model, yy in ((linear, y), (one_tree_counts, counts)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            # the chains vectorized, as when the tolerance was set: run unbatched ("auto" on a CPU), NUTS
            # carries the two programs' float32 rounding further (2.8e-5 relative in `b` after 5 draws)
            const = bt.sample_model(model, X, y=yy, chain_method="vectorized", **RUN)
            args = bt.sample_model(model, X, y=yy, jit_data=True, chain_method="vectorized", **RUN)
        for k in const.samples:
            np.testing.assert_allclose(args.samples[k], const.samples[k], rtol=1e-5, atol=1e-6, err_msg=k)
