"""A fit's chains and compiled programs kept for the next fit of the same program
(:mod:`bayestrees.inference.treefn.programs`): a second fit of the same model runs them without
tracing or compiling, its draws those of a fit that compiles afresh, and a fit whose program differs
(another constant in the model, other data where the data are constants, other category sets, other
kernel settings) never runs another fit's programs."""
import logging

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from bayestrees.inference.treefn import bart_function, programs, sample_model

SIGMA = 0.5   # read by _global_model at each fit

#: chains this short do not converge, and say so
pytestmark = pytest.mark.filterwarnings("ignore::bayestrees.convergence.ConvergenceWarning")


def _data(seed, n=30):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2)).astype(np.float32)
    y = ((X[:, 0] > 0.5) + 0.3 * rng.normal(size=n)).astype(np.float32)
    return X, y


def _normal_model(sigma):
    def model(X, y=None):
        f = bart_function("f", X, m=2, max_depth=2)
        numpyro.sample("y", dist.Normal(f, sigma), obs=y)
    return model


def _global_model(X, y=None):
    f = bart_function("f", X, m=2, max_depth=2)
    numpyro.sample("y", dist.Normal(f, SIGMA), obs=y)


def _fit(model, X, y, seed=0, **kw):
    kw = dict(dict(draws=20, tune=20, chains=2, log_likelihood=False), **kw)
    return sample_model(model, X, y, random_seed=seed, **kw)


def _draws(fit):
    return np.asarray(fit.idata.posterior["f"])


def _fresh(model, X, y, seed=0, **kw):
    """The fit with no programs kept from earlier fits."""
    programs.clear_programs()
    return _draws(_fit(model, X, y, seed, **kw))


@pytest.fixture(autouse=True)
def _no_kept_programs():
    programs.clear_programs()
    yield
    programs.clear_programs()


class _Traces(logging.Handler):
    """The names of the functions JAX traces for compilation while it is installed."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.names = []

    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("Finished tracing"):
            self.names.append(msg.split()[2])


def _traced_while(fn):
    handler = _Traces()
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    saved = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)   # (globally: the chains trace in threads of their own)
    try:
        out = fn()
    finally:
        jax.config.update("jax_log_compiles", saved)
        logger.removeHandler(handler)
    return out, handler.names


def test_a_second_fit_on_new_data_of_the_same_shapes_traces_no_sampler_and_draws_as_a_fresh_fit():
    model = _normal_model(0.5)
    X0, y0 = _data(0)
    X1, y1 = _data(1)
    _, first = _traced_while(lambda: _fit(model, X0, y0, jit_data=True))
    assert {"_block", "_init_from"} <= set(first), first      # (what a fit that compiles traces)
    fit, traced = _traced_while(lambda: _fit(model, X1, y1, seed=1, jit_data=True))
    assert not {"_block", "_init", "_init_from"} & set(traced), traced
    # the same draws as a process that compiles them afresh; and the data are the new ones
    np.testing.assert_array_equal(_draws(fit), _fresh(model, X1, y1, seed=1, jit_data=True))
    assert not np.array_equal(_draws(fit), _fresh(model, X0, y0, seed=1, jit_data=True))


def test_a_new_closure_of_the_same_program_shares_and_another_constant_does_not():
    X, y = _data(0)
    _fit(_normal_model(0.5), X, y, jit_data=True)
    same, traced = _traced_while(lambda: _fit(_normal_model(0.5), X, y, seed=1, jit_data=True))
    assert "_block" not in traced, traced
    other = _draws(_fit(_normal_model(0.9), X, y, seed=1, jit_data=True))
    np.testing.assert_array_equal(other, _fresh(_normal_model(0.9), X, y, seed=1, jit_data=True))
    assert not np.array_equal(other, _draws(same))


def test_a_global_read_by_the_model_and_changed_between_fits_is_seen(monkeypatch):
    X, y = _data(0)
    _fit(_global_model, X, y, jit_data=True)
    monkeypatch.setattr(__import__(__name__), "SIGMA", 0.9)
    got = _draws(_fit(_global_model, X, y, jit_data=True))
    np.testing.assert_array_equal(got, _fresh(_normal_model(0.9), X, y, jit_data=True))


def test_with_the_data_as_constants_only_the_same_data_share():
    model = _normal_model(0.5)
    X, y = _data(0)
    _fit(model, X, y)
    again, traced = _traced_while(lambda: _fit(model, X, y, seed=1))
    assert "_block" not in traced, traced
    np.testing.assert_array_equal(_draws(again), _fresh(model, X, y, seed=1))
    y2 = y + 1.0                                           # the same shapes, other constants
    _fit(model, X, y)
    other = _draws(_fit(model, X, y2, seed=1))
    np.testing.assert_array_equal(other, _fresh(model, X, y2, seed=1))


def test_other_category_sets_of_the_same_shapes_do_not_share():
    """A subset-split feature's root category mask is a constant of the programs even with
    ``jit_data=True``: two data sets of the same shapes whose column holds other categories (the
    subsets drawn from 3 categories or from 4)."""
    def model(X, y=None):
        f = bart_function("f", X, m=2, max_depth=2, categorical_features=[1])
        numpyro.sample("y", dist.Normal(f, 0.5), obs=y)

    X, y = _data(0)
    a, b = X.copy(), X.copy()
    a[:, 1] = np.arange(30) % 3                            # categories 0, 1, 2
    b[:, 1] = np.arange(30) % 4                            # categories 0, 1, 2, 3
    _fit(model, a, y, jit_data=True)
    got = _draws(_fit(model, b, y, jit_data=True))
    np.testing.assert_array_equal(got, _fresh(model, b, y, jit_data=True))


def test_other_kernel_settings_do_not_share():
    model = _normal_model(0.5)
    X, y = _data(0)
    _fit(model, X, y, jit_data=True)
    got = _draws(_fit(model, X, y, jit_data=True, slide=0))
    np.testing.assert_array_equal(got, _fresh(model, X, y, jit_data=True, slide=0))
    assert len(programs._KEPT) == 1


def test_the_kept_fits_are_bounded():
    """The least recently kept fits are dropped past ``CAPACITY`` (the store itself: every fit above
    goes through it)."""
    for k in range(programs.CAPACITY + 2):
        programs.remember(("fit", k), object(), {}, [], None)
    assert len(programs._KEPT) == programs.CAPACITY
    assert ("fit", 0) not in programs._KEPT and ("fit", 1) not in programs._KEPT
    assert ("fit", programs.CAPACITY + 1) in programs._KEPT


def test_a_kept_fit_whose_model_changed_since_is_not_used():
    """A kept chain traces its programs again (after ``jax.clear_caches()``) from the model of the fit
    that made it: once that model traces to another program (here a value it closes over changed),
    the kept fit is not used."""
    def model_of(scale: list):
        def model(X, y=None):
            f = bart_function("f", X, m=2, max_depth=2)
            numpyro.sample("y", dist.Normal(f, scale[0]), obs=y)
        return model

    X, y = _data(0)
    first = [0.5]
    _fit(model_of(first), X, y, jit_data=True)
    first[0] = 0.9                                      # the first fit's model is another program now
    jax.clear_caches()
    got = _draws(_fit(model_of([0.5]), X, y, seed=1, jit_data=True))   # the kept chain's fingerprint
    np.testing.assert_array_equal(got, _fresh(model_of([0.5]), X, y, seed=1, jit_data=True))
