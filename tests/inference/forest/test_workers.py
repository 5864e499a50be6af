"""Parallel forest fits in worker processes (``n_jobs > 1`` on the CPU backend)."""
import numpy as np
import pytest

import bayestrees as bt
from bayestrees.inference.forest import workers as workers
from bayestrees.inference.forest.bootstrap import resolve_n_jobs
from bayestrees.inference.forest.cart import CapacityError




@pytest.fixture(autouse=True, scope="module")
def _processes():
    """Worker processes are asked for (``BAYESTREES_PARALLEL=processes``; threads are the default)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BAYESTREES_PARALLEL", "processes")
        if not workers.use_processes(2):
            pytest.skip("worker processes need the CPU backend on Linux")
        yield


def test_threads_are_the_default_and_processes_are_asked_for(monkeypatch):
    monkeypatch.delenv("BAYESTREES_PARALLEL")
    assert not workers.use_processes(2)
    monkeypatch.setenv("BAYESTREES_PARALLEL", "procs")
    with pytest.raises(ValueError, match="'threads' or 'processes'"):
        workers.use_processes(2)


@pytest.fixture(scope="module")
def data():
    r = np.random.default_rng(11)
    X = r.normal(size=(400, 4))
    y = X[:, 0] + np.sin(2 * X[:, 1]) + 0.2 * r.normal(size=400)
    X[r.random(X.shape) < 0.03] = np.nan  # missing values travel to the workers too
    return X, y


def _wait(worker, timeout=10.0):
    """Whether the worker's process ends within ``timeout`` seconds."""
    import subprocess

    try:
        worker.proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def _same_trees(a, b):
    return all(np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(a.trees_, b.trees_))


@pytest.mark.parametrize("kind, kw", [
    ("BayesianForestRegressor", {}),
    ("EmpiricalBayesianForestRegressor", {"trunk_min_samples_leaf": 80}),
    ("SubSampleForestRegressor", {"n_blocks": 2}),
])
def test_worker_processes_give_the_same_trees(data, kind, kw):
    """The weights and seeds are drawn in the calling process, so n_jobs does not change the forest."""
    X, y = data
    est = getattr(bt, kind)
    one = est(draws=6, chunk_size=1, random_state=5, **kw).fit(X, y)
    two = est(draws=6, chunk_size=1, random_state=5, n_jobs=2, **kw).fit(X, y)
    running = workers.default_pool().workers
    assert len(running) >= 2 and all(w.proc.poll() is None for w in running)
    assert _same_trees(one, two)
    np.testing.assert_array_equal(one.predict_draws(X), two.predict_draws(X))


def test_worker_processes_classifier(data):
    X, y = data
    labels = np.where(y > 0, "hi", "lo")
    one = bt.BayesianForestClassifier(draws=4, chunk_size=1, criterion="entropy", random_state=2).fit(X, labels)
    two = bt.BayesianForestClassifier(draws=4, chunk_size=1, criterion="entropy", random_state=2,
                                      n_jobs=2).fit(X, labels)
    assert _same_trees(one, two)
    np.testing.assert_array_equal(one.predict_proba(X), two.predict_proba(X))


def test_worker_errors_reach_the_caller(data):
    X, y = data
    with pytest.raises(CapacityError, match="capacity=7"):
        bt.BayesianForestRegressor(draws=4, chunk_size=1, max_nodes=7, n_jobs=2, random_state=0).fit(X, y)
    # the workers survive an error raised inside them
    bt.BayesianForestRegressor(draws=2, chunk_size=1, n_jobs=2, random_state=0).fit(X, y)


def test_a_dead_worker_is_reported_and_replaced(data):
    X, y = data
    pool = workers.get_workers(2)
    pool[0].proc.kill()
    pool[0].proc.wait()
    with pytest.raises(workers.WorkerError, match="stopped"):
        pool[0].call("setup", "x", {"x64": False})
    fresh = workers.get_workers(2)  # the dead one is dropped and a new one started
    assert all(w.proc.poll() is None for w in fresh)
    if len(workers.available_cpus()) >= 2:
        assert len({w.cpu for w in fresh}) == 2  # the new one takes the free core
    bt.BayesianForestRegressor(draws=2, chunk_size=1, n_jobs=2, random_state=0).fit(X, y)


def test_n_jobs_convention():
    n = len(workers.available_cpus())
    assert resolve_n_jobs(None) == 1 and resolve_n_jobs(3) == 3
    assert resolve_n_jobs(-1) == n and resolve_n_jobs(-(n + 5)) == 1
    with pytest.raises(ValueError, match="n_jobs == 0"):
        resolve_n_jobs(0)


class _InterruptedOnce:
    """``pickle.load`` that raises KeyboardInterrupt on its first call (Ctrl-C while waiting for a reply)."""

    def __init__(self, load):
        self.load, self.calls = load, 0

    def __call__(self, f):
        self.calls += 1
        if self.calls == 1:
            raise KeyboardInterrupt
        return self.load(f)


def test_an_interrupted_call_does_not_desync_the_workers(data, monkeypatch):
    """A reply left unread (Ctrl-C while waiting) must not be taken for the answer to a later message."""
    X, y = data
    pool = workers.get_workers(2)
    # the program is known to both workers, so no compiling process comes first (its reply would be the unread one)
    bt.BayesianForestRegressor(draws=4, chunk_size=1, n_jobs=2, random_state=0).fit(X, y)
    flaky = _InterruptedOnce(workers.pickle.load)
    monkeypatch.setattr(workers.pickle, "load", flaky)
    with pytest.raises(KeyboardInterrupt):
        bt.BayesianForestRegressor(draws=4, chunk_size=1, n_jobs=2, random_state=0).fit(X, y)
    monkeypatch.undo()
    assert flaky.calls >= 1
    # the worker whose reply went unread (the first one, at the set-up message) was stopped; the other is kept
    assert _wait(pool[0]) and pool[1].proc.poll() is None
    one = bt.BayesianForestRegressor(draws=4, chunk_size=1, random_state=0).fit(X, y)
    two = bt.BayesianForestRegressor(draws=4, chunk_size=1, n_jobs=2, random_state=0).fit(X, y)
    assert _same_trees(one, two)


def _no_cache_in_this_process(monkeypatch):
    """As in a process without a compilation cache (``bt.set_compilation_cache(False)``), for the
    worker pool only: the test process keeps the suite's cache."""
    import bayestrees.compile_cache

    monkeypatch.setattr(bayestrees.compile_cache, "worker_settings", lambda: None)


def test_workers_share_a_compilation_cache_that_shutdown_removes(data, monkeypatch):
    import os

    X, y = data
    _no_cache_in_this_process(monkeypatch)  # new workers make and share a folder of the pool's own
    started = []
    monkeypatch.setattr(workers, "start_compiler", lambda pool, f=workers.start_compiler: started.append(1) or f(pool))
    workers.shutdown()
    one = bt.BayesianForestRegressor(draws=4, chunk_size=1, n_jobs=2, random_state=0).fit(X, y)
    folder = workers.default_pool().cache_dir
    # the programs, written by the compiling process (gone now: only the two workers run)
    assert os.path.isdir(folder) and any(f.endswith("-cache") for f in os.listdir(folder))
    assert len(workers.default_pool().workers) == 2 and len(started) == 1
    # new workers find the program in the cache: they load it, all at once, and nothing compiles it again
    for w in workers.default_pool().workers:
        w.proc.kill()
        w.proc.wait()
    again = bt.BayesianForestRegressor(draws=4, chunk_size=1, n_jobs=2, random_state=0).fit(X, y)
    assert len(started) == 1 and _same_trees(one, again)
    workers.shutdown()
    assert not os.path.exists(folder) and not workers.default_pool().workers
    assert workers.default_pool().cache_dir is None
    one = bt.BayesianForestRegressor(draws=4, chunk_size=1, random_state=0).fit(X, y)
    two = bt.BayesianForestRegressor(draws=4, chunk_size=1, n_jobs=2, random_state=0).fit(X, y)
    assert _same_trees(one, two)


def test_a_pool_closes_its_workers_and_cache_and_closing_twice_is_harmless(monkeypatch):
    import os

    _no_cache_in_this_process(monkeypatch)  # the pool makes its own cache folder
    pool = workers.WorkerPool()
    assert pool is not workers.default_pool()
    started = pool.get(1)
    folder = pool.cache_dir
    assert len(started) == 1 and started[0].proc.poll() is None and os.path.isdir(folder)
    with pytest.raises(KeyError):  # a live worker answers (here: the error of a forest it was never sent)
        started[0].call("fit", "no such forest", 0)
    pool.close()
    assert _wait(started[0]) and not pool.workers and pool.cache_dir is None and not os.path.exists(folder)
    pool.close()  # idempotent
    with workers.WorkerPool() as again:  # a context manager too; a closed pool may be used again
        assert again.get(1)[0].proc.poll() is None
    assert not again.workers
    workers.shutdown()
    workers.shutdown()  # the default pool's close, idempotent as well
    assert not workers.default_pool().workers
