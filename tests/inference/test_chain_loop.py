"""The shared chain loop (bayestrees.inference.loop) on kernels with known stationary laws."""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayestrees.inference.loop import Kernel, run_chains


class RWState(NamedTuple):
    x: jax.Array
    logp: jax.Array


class RWInfo(NamedTuple):
    accepted: jax.Array


MU, SD = 2.0, 0.5


def _logp(x):
    return -0.5 * ((x - MU) / SD) ** 2


def _init(key):
    x = jax.random.normal(key) * 3.0
    return RWState(x, _logp(x))


def _step(key, state):
    k_prop, k_acc = jax.random.split(key)
    prop = state.x + 0.8 * jax.random.normal(k_prop)
    lp = _logp(prop)
    acc = jnp.log(jax.random.uniform(k_acc)) < lp - state.logp
    return RWState(jnp.where(acc, prop, state.x), jnp.where(acc, lp, state.logp)), RWInfo(acc)


RW = Kernel(_init, _step)


def test_random_walk_metropolis_reaches_target_moments():
    res = run_chains(jax.random.key(0), RW, chains=8, draws=4000, tune=500, thin=2)
    x = np.asarray(res.samples.x)
    assert x.shape == (8, 4000)
    assert res.info.accepted.shape == (8, 4000)
    # 32,000 correlated draws: the Monte Carlo error of the mean is about 0.01; tolerance 0.04
    assert abs(x.mean() - MU) < 0.04
    assert abs(x.std() - SD) < 0.03
    assert 0.2 < float(res.info.accepted.mean()) < 0.9


def test_blocks_and_progress_do_not_change_the_draws(capsys):
    kw = dict(chains=3, draws=50, tune=7, thin=3, chain_method="vectorized")
    a = run_chains(jax.random.key(3), RW, **kw)
    b = run_chains(jax.random.key(3), RW, blocks=4, progressbar=True, **kw)
    np.testing.assert_array_equal(np.asarray(a.samples.x), np.asarray(b.samples.x))
    np.testing.assert_array_equal(np.asarray(a.last_state.x), np.asarray(b.last_state.x))
    err = capsys.readouterr().err
    assert "sampling" in err and f"{7 + 50 * 3}/{7 + 50 * 3}" in err  # the bar reached the total number of steps


def _x(key, state):
    return state.x


def test_step_keys_are_the_hash_of_the_step_behind_an_optimization_barrier():
    # the keys of step t for every chain, or a slice of them, computed once: XLA may not fuse their
    # written-out hash into the kernel's every use of them (compile time of BART's block)
    from bayestrees import random_bits
    from bayestrees.inference import loop

    key, t = jax.random.key(3), jnp.int32(7)
    want = jax.random.split(jax.random.fold_in(key, t), 4)
    got = jax.jit(lambda k, t: loop._step_keys(k, t, 4))(key, t)
    assert np.array_equal(jax.random.key_data(got), jax.random.key_data(want))
    part = jax.jit(lambda k, t: loop._step_keys(k, t, 4, width=2, first=1))(key, t)
    assert np.array_equal(jax.random.key_data(part), jax.random.key_data(want[1:3]))
    assert np.array_equal(jax.random.key_data(random_bits.split(random_bits.fold_in(key, t), 4)),
                          jax.random.key_data(want))
    assert "optimization_barrier" in str(jax.make_jaxpr(lambda k: loop._step_keys(k, t, 4))(key))


def test_collect_picks_what_is_stored_and_chains_differ():
    res = run_chains(jax.random.key(1), RW, chains=2, draws=5, tune=0, collect=_x)
    assert res.samples.shape == (2, 5)
    assert not np.array_equal(np.asarray(res.samples[0]), np.asarray(res.samples[1]))


@pytest.mark.parametrize("bad", [dict(chains=0), dict(draws=0), dict(tune=-1), dict(thin=0), dict(draws=2.5)])
def test_bad_arguments(bad):
    with pytest.raises(ValueError):
        run_chains(jax.random.key(0), RW, **bad)


def _shift_init(key, shift):
    return RWState(shift + jax.random.normal(key), jnp.zeros(()))


def _shift_step(key, state, shift):
    return RWState(shift + jax.random.normal(key), state.logp), RWInfo(jnp.array(True))


def test_args_are_traced_and_shared_by_chains():
    from bayestrees.inference import loop

    k = Kernel(_shift_init, _shift_step)
    a = run_chains(jax.random.key(0), k, args=(jnp.float32(5.0),), chains=3, draws=400, tune=1)
    n = loop._block._cache_size()
    b = run_chains(jax.random.key(0), k, args=(jnp.float32(-5.0),), chains=3, draws=400, tune=1)
    assert loop._block._cache_size() == n   # new data, same shapes: no recompilation
    assert abs(float(a.samples.x.mean()) - 5.0) < 0.2 and abs(float(b.samples.x.mean()) + 5.0) < 0.2


def test_no_recompilation_for_a_second_run():
    from bayestrees.inference import loop

    run_chains(jax.random.key(0), RW, chains=2, draws=10, tune=4)
    n_block = loop._block._cache_size()
    run_chains(jax.random.key(1), RW, chains=2, draws=10, tune=4)
    assert loop._block._cache_size() == n_block


def test_one_chain_runs_unbatched_with_the_values_of_the_vmapped_step():
    """A single chain skips ``vmap`` (so ``lax.switch`` runs one branch); its steps must give what the
    vmapped step gives for the same keys (Bayesian CART: four move types behind one switch)."""
    from bayestrees.inference import loop
    from bayestrees.inference import moves as M
    from bayestrees.leaves import NIGPrior, NormalLeaves
    from bayestrees.priors import ChipmanPrior

    rng = np.random.default_rng(2)
    codes = rng.integers(0, 8, size=(50, 3)).astype(np.int32)
    y = (codes[:, 0] > 3).astype(np.float32) + rng.normal(0, 0.2, 50).astype(np.float32)
    model = NormalLeaves(NIGPrior(0.0, 0.5, 2.0, 1.0))
    cfg = M.MCMCConfig(ChipmanPrior(0.95, 1.0), model, 3, 3)
    data = M.MCMCData(jnp.asarray(codes), jnp.asarray(y), model.row_stats(jnp.asarray(y)), jnp.ones(50))
    kernel = M.build_kernel(cfg)
    one = jax.jit(loop._batched(kernel.step, 1, 1))
    vmapped = jax.jit(jax.vmap(kernel.step, in_axes=(0, 0, None)))
    a = b = jax.tree_util.tree_map(lambda v: v[None], kernel.init(jax.random.key(0), data))
    moves = set()
    for t in range(60):
        keys = jax.random.split(jax.random.key(t), 1)
        a, info_a = one(keys, a, data)
        b, info_b = vmapped(keys, b, data)
        for x, z in zip(jax.tree_util.tree_leaves(a.tree), jax.tree_util.tree_leaves(b.tree)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(z))
        np.testing.assert_array_equal(np.asarray(info_a.accepted), np.asarray(info_b.accepted))
        np.testing.assert_allclose(np.asarray(info_a.lp), np.asarray(info_b.lp), rtol=1e-6)
        moves.add(int(info_a.move[0]))
    assert moves == {0, 1, 2, 3}  # every branch of the switch was taken


@pytest.mark.parametrize("thin,blocks", [(1, None), (3, 4)])
def test_parallel_chains_draw_what_the_vectorized_chains_draw(thin, blocks, capsys):
    """``chain_method="parallel"`` runs chain ``c`` alone (its own keys of the whole run), in threads;
    the draws, the Info and the last state must be the vectorized run's."""
    kw = dict(chains=3, draws=40, tune=7, thin=thin, blocks=blocks)
    a = run_chains(jax.random.key(5), RW, chain_method="vectorized", **kw)
    b = run_chains(jax.random.key(5), RW, chain_method="parallel", progressbar=True, **kw)
    assert b.samples.x.shape == (3, 40) and b.last_state.x.shape == (3,)
    np.testing.assert_allclose(np.asarray(b.samples.x), np.asarray(a.samples.x), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(b.info.accepted), np.asarray(a.info.accepted))
    np.testing.assert_allclose(np.asarray(b.last_state.x), np.asarray(a.last_state.x), rtol=1e-6)
    total = 3 * (7 + 40 * thin)
    assert f"{total}/{total}" in capsys.readouterr().err  # the bar counts the chain-steps of all chains


def test_sequential_chains_given_keys_and_programs_of_one_run():
    """``chain_method="sequential"`` runs the parallel way's chains one after another (the same draws);
    ``init_keys`` starts the chains from the given keys; ``keep_programs=False`` compiles the run's
    programs apart from the module's caches, which then hold neither them nor the kernel."""
    import gc
    import weakref

    from bayestrees.inference import loop

    kw = dict(chains=3, draws=30, tune=5)
    a = run_chains(jax.random.key(5), RW, chain_method="parallel", **kw)
    b = run_chains(jax.random.key(5), RW, chain_method="sequential", **kw)
    np.testing.assert_array_equal(np.asarray(b.samples.x), np.asarray(a.samples.x))

    keys = jax.random.split(jax.random.key(9), 3)
    still = Kernel(_init, lambda key, state: (state, RWInfo(jnp.zeros((), bool))))   # the kept state is the start
    c = run_chains(jax.random.key(5), still, init_keys=keys, chain_method="vectorized", draws=1, tune=0, chains=3)
    np.testing.assert_allclose(np.asarray(c.samples.x[:, 0]), np.asarray(jax.vmap(_init)(keys).x), rtol=1e-6)

    class Step:   # a kernel made for one run (hashed by identity)
        def __call__(self, key, state):
            return _step(key, state)

    step = Step()
    ref = weakref.ref(step)
    n_block = loop._block._cache_size()
    d = run_chains(jax.random.key(5), Kernel(_init, step), keep_programs=False, chain_method="vectorized", **kw)
    np.testing.assert_allclose(np.asarray(d.samples.x), np.asarray(a.samples.x), rtol=1e-6)
    assert loop._block._cache_size() == n_block
    del step, d
    gc.collect()
    assert ref() is None


def test_chain_method_auto_and_bad_values(monkeypatch):
    from bayestrees.inference import loop
    from bayestrees.inference.bcart.fit import BCARTConfig
    from bayestrees.inference.bet.fit import BETConfig

    assert loop.resolve_chain_method("auto", 1) == "vectorized"
    monkeypatch.setattr(loop, "_cores", lambda: 2)
    assert loop.resolve_chain_method("auto", 4) == ("parallel" if jax.default_backend() == "cpu" else "vectorized")
    if jax.device_count() == 1:
        monkeypatch.setattr(loop, "_cores", lambda: 1)
        assert loop.resolve_chain_method("auto", 4) == "vectorized"  # one core, one device: nothing to run beside
    assert loop.resolve_chain_method("parallel", 4) == "parallel"
    with pytest.raises(ValueError, match="chain_method"):
        run_chains(jax.random.key(0), RW, chains=2, draws=2, chain_method="threads")
    for config in (BCARTConfig, BETConfig):
        with pytest.raises(ValueError, match="chain_method"):
            config(chain_method="pmap")


def test_tempering_wraps_any_kernel_with_a_beta_and_keeps_the_cold_target():
    """The tempering wrapper knows nothing of trees: a Gaussian random-walk kernel on
    ``p(x) = N(0, 1)`` (prior) times ``N(x; 3, 0.5^2)`` (likelihood), tempered over (1, 0.3, 0.1),
    keeps the cold replica's target, N(2.4, 0.2) (conjugate closed form), and exchanges replicas."""
    from typing import NamedTuple

    from bayestrees.inference.tempering import tempered

    class St(NamedTuple):
        x: jax.Array
        beta: jax.Array

    def loglik(x):
        return -0.5 * ((x - 3.0) / 0.5) ** 2

    def init(key):
        return St(jnp.zeros(()), jnp.ones(()))

    def step(key, st):
        k1, k2 = jax.random.split(key)
        prop = st.x + 0.8 * jax.random.normal(k1)
        log_a = -0.5 * prop ** 2 + st.beta * loglik(prop) + 0.5 * st.x ** 2 - st.beta * loglik(st.x)
        acc = jnp.log(jax.random.uniform(k2)) < log_a
        return St(jnp.where(acc, prop, st.x), st.beta), acc

    def report(info, cold, swap):
        return (info, swap)

    kernel = tempered(Kernel(init, step), (1.0, 0.3, 0.1), lambda s: loglik(s.x), report)
    res = run_chains(jax.random.key(0), kernel, chains=4, draws=4000, tune=500,
                     collect=lambda key, s: s.x[0])
    x = np.asarray(res.samples).ravel()
    # posterior of x: precision 1 + 4 = 5, mean 4 * 3 / 5 = 2.4; 16,000 correlated draws
    assert abs(x.mean() - 2.4) < 0.03, x.mean()
    assert abs(x.var() - 0.2) < 0.02, x.var()
    swaps = np.asarray(res.info[1])
    assert 0.05 < swaps.mean() < 0.95
    with pytest.raises(ValueError, match="start at 1"):
        tempered(Kernel(init, step), (0.5, 1.0), lambda s: loglik(s.x))
