"""The Dask path (issue 11): trunk from summed histograms, per-branch forests, faults, bad input.

One local cluster (2 worker processes, loopback only) serves the module.  The comparisons with
the single-machine forest run in float64 (``jax_enable_x64`` for this module, restored after):
in float32 the two paths sum the same statistics in different orders, and on deep trees the
rounding alone moves near-tied splits.
"""
import os
import signal
import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed")
pd = pytest.importorskip("pandas")
dd = pytest.importorskip("dask.dataframe")

import jax  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import bayestrees as bt  # noqa: E402
from bayestrees.data import missing_code, prepare_data  # noqa: E402
from bayestrees.distributed.fit import fit_trunk_dask  # noqa: E402
from bayestrees.distributed.trunk import TrunkSpec  # noqa: E402
from bayestrees.distributed.weights import exponential_at, forest_weights  # noqa: E402
from bayestrees.inference.forest.cart import CARTConfig, default_capacity, fit_trees  # noqa: E402
from bayestrees.inference.forest.chunk import draw_weights  # noqa: E402

N_ROWS, N_PARTS = 1200, 3
EBF_KW = dict(draws=3, trunk_min_samples_leaf=150, min_samples_leaf=5, random_state=11, dtype="float64")


@pytest.fixture(scope="module")
def x64():
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


@pytest.fixture(scope="module")
def client(x64):
    from bayestrees.distributed.client import worker_env

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None, env=worker_env())
    c = Client(cluster)
    yield c
    c.close()
    cluster.close()


def _data(n=N_ROWS, seed=0):
    r = np.random.default_rng(seed)
    X = pd.DataFrame({"a": r.normal(size=n), "b": r.uniform(size=n), "c": r.integers(0, 7, n).astype(float),
                      "d": r.normal(size=n)})
    X.loc[r.uniform(size=n) < 0.05, "d"] = np.nan  # missing values take their own code
    y = pd.Series(np.sin(3 * X["a"]) + 2 * (X["b"] > 0.5) + 0.3 * X["c"] + r.normal(scale=0.3, size=n), name="y")
    return X, y


@pytest.fixture(scope="module")
def dask_ebf(client):
    """One undisturbed Dask EBF fit, shared by the tests that compare with it."""
    X, y = _data()
    Xd, yd = dd.from_pandas(X, npartitions=N_PARTS), dd.from_pandas(y, npartitions=N_PARTS)
    est = bt.EmpiricalBayesianForestRegressor(**EBF_KW).fit(Xd, yd, client=client)
    return est, X, y, Xd, yd


def test_exponential_at_equals_the_single_machine_weight_draw():
    key = jax.random.key(3)
    for n in (17, 5000):
        full = np.asarray(draw_weights(key, n, "exponential"))
        idx = np.random.default_rng(n).choice(n, 16, replace=False)
        np.testing.assert_array_equal(np.asarray(exponential_at(key, idx)), full[idx])
    w, seeds = forest_weights(key, np.array([2, 5]), np.array([0, 9, 4]))
    assert w.shape == (2, 3) and seeds.shape == (2,) and np.all(w > 0)


def test_branch_weights_drawn_at_the_padded_length_are_the_rows_weights():
    # fit_branch draws the weights of m rows at its padded length (one compiled programme per size)
    key = jax.random.key(4)
    rows = np.array([3, 11, 12, 40, 41, 97])
    w, seeds = forest_weights(key, np.array([0, 3]), rows)
    wp, seeds_p = forest_weights(key, np.array([0, 3]), np.concatenate([rows, np.zeros(10, rows.dtype)]))
    np.testing.assert_array_equal(wp[:, :len(rows)], w)
    np.testing.assert_array_equal(seeds_p, seeds)


def test_branch_padding_is_shared_when_cheap_and_coarse_otherwise():
    from bayestrees.data import bucket_size
    from bayestrees.distributed.fit import _common_size

    similar = {g: int(m) for g, m in enumerate(np.random.default_rng(0).integers(15_625, 31_250, 500))}
    common = _common_size(similar, sum(similar.values()), len(similar))
    assert common == bucket_size(max(similar.values()))  # one programme for 500 branches
    assert _common_size({0: 1_000, 1: 100_000}, 101_000, 2) is None  # 98% padding of the small one: no


def _trunk_setup(n, max_bins, min_leaf, capacity):
    """Coded regression rows, their responses, a TrunkSpec and a TrunkBuilder at the root."""
    from bayestrees.distributed.trunk import TrunkBuilder

    X, y = _data(n)
    data = prepare_data(X, y, task="regression", max_bins=max_bins, allow_nan=True)
    codes, yy = np.asarray(data.codes), np.asarray(y, np.float64)
    spec = TrunkSpec(n_features=codes.shape[1], n_codes=int(codes.max()) + 2, missing=missing_code(codes.dtype),
                     n_classes=0, criterion="squared_error", min_samples_leaf=min_leaf, max_depth=None,
                     capacity=capacity)
    return codes, yy, spec, TrunkBuilder(spec, np.array([len(yy), yy.sum(), (yy * yy).sum()]))


def test_per_worker_histograms_are_the_sum_of_the_partitions():
    from bayestrees.distributed.trunk import add_histograms, partition_histogram, parts_histogram

    codes, yy, spec, builder = _trunk_setup(600, 16, 50, 63)
    parts = [{"codes": codes[a:a + 200], "y": yy[a:a + 200]} for a in (0, 200, 400)]
    tree, open_nodes = builder.tree(), builder.open
    got = parts_histogram(parts, tree, open_nodes, spec)
    want = add_histograms(add_histograms(*[partition_histogram(p, tree, open_nodes, spec) for p in parts[:2]]),
                          partition_histogram(parts[2], tree, open_nodes, spec))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert got[0][..., 0].sum() == 600 * spec.n_features
    empty = parts_histogram([], tree, open_nodes, spec)
    assert empty[0].shape == got[0].shape and not empty[0].any()


def test_split_search_in_chunks_equals_one_pass():
    from bayestrees.distributed.trunk import choose_splits, parts_histogram

    codes, yy, spec, builder = _trunk_setup(2000, 32, 20, 511)
    for _ in range(3):  # three levels: up to 8 open nodes
        h = parts_histogram([{"codes": codes, "y": yy}], builder.tree(), builder.open, spec)
        assert builder.grow(*h)
    h = parts_histogram([{"codes": codes, "y": yy}], builder.tree(), builder.open, spec)
    k = h[0].shape[0]
    assert k >= 6
    one = choose_splits(*h, builder.open_depths(), spec)
    node_bytes = h[0][0].nbytes
    for chunk in (1, 2 * node_bytes, 3 * node_bytes + 1):  # 1 node, 2 nodes, 3 nodes at a time
        got = choose_splits(*h, builder.open_depths(), spec, chunk_bytes=chunk)
        assert set(got) == set(one)
        for name in one:
            np.testing.assert_array_equal(got[name], one[name])
    assert one["split"].any()


def test_trunk_from_summed_histograms_is_the_single_machine_trunk(client):
    # Gini on integer features: the engine's float32 class counts are exact, so the comparison
    # does not depend on rounding (the regression trunk is compared in the EBF test below)
    r = np.random.default_rng(2)
    n = 3000
    X = np.column_stack([r.integers(0, 40, n), r.integers(0, 9, n), r.integers(0, 200, n)]).astype(float)
    X[r.uniform(size=n) < 0.04, 1] = np.nan
    y = ((X[:, 0] > 25) ^ (X[:, 2] > 90) ^ (r.uniform(size=n) < 0.1)).astype(int) + (X[:, 1] > 6)
    data = prepare_data(X, y, task="classification", max_bins=1024)
    miss = missing_code(data.codes.dtype)
    tm = 150
    cfg = CARTConfig(criterion="gini", n_classes=3, min_samples_leaf=tm, capacity=default_capacity(n, tm),
                     has_missing=True, missing=miss)
    ref = fit_trees(data.codes, data.y, np.ones((1, n), np.float32), cfg)  # the single-machine CART
    parts = client.scatter([{"codes": data.codes[i::4], "y": data.y[i::4]} for i in range(4)])
    spec = TrunkSpec(n_features=3, n_codes=int(data.n_bins.max()) + 1, missing=miss, n_classes=3,
                     criterion="gini", min_samples_leaf=tm, max_depth=None, capacity=cfg.capacity)
    got = fit_trunk_dask(client, parts, spec)
    k = int(ref.n_nodes[0])
    assert k > 7 and int(got.n_nodes) == k
    assert np.asarray(ref.missing_left)[0, :k].any()  # a split sent the missing values left
    for name in ("feature", "threshold", "left", "right", "missing_left", "count", "depth"):
        np.testing.assert_array_equal(np.asarray(getattr(ref, name))[0, :k], getattr(got, name)[:k], err_msg=name)


def test_dask_ebf_equals_single_machine_ebf(dask_ebf):
    est, X, y, Xd, _ = dask_ebf
    ref = bt.EmpiricalBayesianForestRegressor(**EBF_KW).fit(X, y)
    assert est.n_rows_ == N_ROWS
    # the trunk from summed histograms is the single-machine trunk (float64: no rounding ties)
    k = int(ref.trunk_.n_nodes)
    assert k >= 7 and int(est.trunk_.n_nodes) == k
    for name in ("feature", "threshold", "left", "right", "missing_left", "count"):
        np.testing.assert_array_equal(getattr(est.trunk_, name)[:k], np.asarray(getattr(ref.trunk_, name))[:k])
    np.testing.assert_allclose(est.predict_draws(X), ref.predict_draws(X), rtol=1e-9)
    # prediction on the cluster for Dask input: the same numbers, as a lazy Dask Series
    lazy = est.predict(Xd)
    assert isinstance(lazy, dd.Series)
    np.testing.assert_allclose(lazy.compute().to_numpy(), ref.predict(X), rtol=1e-9)
    # the fitted estimator behaves as today: idata_ (at the bin sample, here every row)
    assert est.idata_.posterior["mu"].shape == (1, 3, N_ROWS)


def test_dask_fitted_estimator_saves_and_loads(dask_ebf, tmp_path):
    est, X, *_ = dask_ebf
    est.save(tmp_path / "m.pkl")
    back = bt.load(tmp_path / "m.pkl")
    np.testing.assert_array_equal(back.predict(X), est.predict(X))


def _fit_into(out, err, Xd, yd, client):
    """Fit the Dask EBF into ``out["est"]`` (run in a thread); an exception goes to ``err``."""
    try:
        out["est"] = bt.EmpiricalBayesianForestRegressor(**EBF_KW).fit(Xd, yd, client=client)
    except BaseException as e:  # pragma: no cover - reported by the test
        err.append(e)


def test_a_worker_killed_mid_fit_gives_the_undisturbed_result(dask_ebf, client):
    est, X, y, Xd, yd = dask_ebf
    out, err = {}, []

    # the workers forget their compiled programs, so every branch fit takes a while (loading the
    # engine from the shared compilation cache) and one is surely caught running
    client.run(lambda: __import__("jax").clear_caches())
    th = threading.Thread(target=_fit_into, args=(out, err, Xd, yd, client))
    th.start()
    victim, deadline = None, time.time() + 60
    while victim is None and time.time() < deadline and th.is_alive():
        for addr, keys in client.processing().items():
            if any("bayestrees-branch" in str(k) for k in keys):
                victim = addr
                break
        time.sleep(0.02)
    assert victim is not None, "no branch fit was seen running"
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)
    th.join(180)
    assert not err, err
    assert pid not in client.run(os.getpid).values()  # the worker was really replaced
    np.testing.assert_array_equal(out["est"].predict_draws(X), est.predict_draws(X))


def test_sub_sample_forest_on_the_cluster_from_parquet(client, tmp_path):
    # sized so that its blocks share the compiled program of the EBF fixture's branches
    X, y = _data(660, seed=4)
    dd.from_pandas(X.assign(y=y), npartitions=3).to_parquet(tmp_path / "pq")
    ssf = bt.SubSampleForestRegressor(draws=6, n_blocks=2, min_samples_leaf=5, random_state=0, dtype="float64")
    ssf.fit(str(tmp_path / "pq"), target="y", client=client)
    roots = np.asarray(ssf.trees_.count)[:, 0]
    # tree t fits block t % 2 only: the two blocks' roots hold every row once
    assert roots[0] + roots[1] == 660 and np.all(roots[::2] == roots[0]) and np.all(roots[1::2] == roots[1])
    assert 250 < roots[0] < 410
    pred = ssf.predict(X)
    assert np.sqrt(np.mean((pred - y) ** 2)) < 0.6 * np.std(y)
    lazy = ssf.predict(dd.from_pandas(X, npartitions=2))
    np.testing.assert_allclose(lazy.compute().to_numpy(), pred, rtol=1e-9)


# -- bad input ------------------------------------------------------------------------------------

def test_missing_target_column_is_refused(tmp_path):
    X, y = _data(50)
    dd.from_pandas(X.assign(y=y), npartitions=2).to_parquet(tmp_path / "pq")
    with pytest.raises(ValueError, match="target column 'price' is not in the data"):
        bt.EmpiricalBayesianForestRegressor().fit(str(tmp_path / "pq"), target="price")
    with pytest.raises(ValueError, match="needs target="):
        bt.EmpiricalBayesianForestRegressor().fit(str(tmp_path / "pq"))


def test_mismatched_partitions_are_refused(client):
    X, y = _data(300)
    with pytest.raises(ValueError, match="X has 3 partitions but y has 2"):
        bt.EmpiricalBayesianForestRegressor().fit(dd.from_pandas(X, npartitions=3), dd.from_pandas(y, npartitions=2),
                                                  client=client)
    # same number of partitions, different rows per partition: found when the partitions are read
    Xd = dd.from_pandas(X, npartitions=3)
    yd = dd.from_pandas(y.iloc[:290], npartitions=3).clear_divisions()
    with pytest.raises(ValueError, match="partition .*: X has .* rows but y has"):
        bt.EmpiricalBayesianForestRegressor().fit(Xd.clear_divisions(), yd, client=client)


def test_loaded_model_predicts_on_the_running_client(client, tmp_path):
    # a loaded model has no client of its own: prediction must use the running (default) client,
    # not start a local cluster whose scattered trees the caller's compute would never see
    import dask.dataframe as dd

    from bayestrees.distributed import get_client

    assert get_client(None) is client
    X, y = _data(400)
    est = bt.EmpiricalBayesianForestRegressor(4, trunk_min_samples_leaf=100, random_state=1, dtype="float64")
    est.fit(dd.from_pandas(X, npartitions=2), dd.from_pandas(y, npartitions=2), client=client)
    est.save(tmp_path / "ebf.model")
    back = bt.load(tmp_path / "ebf.model")
    lazy = back.predict(dd.from_pandas(X, npartitions=2))
    np.testing.assert_allclose(lazy.compute().to_numpy(), est.predict(X), rtol=1e-12)


def test_unreachable_scheduler_fails_fast_with_a_clear_error():
    from bayestrees.distributed import get_client

    t0 = time.time()
    with pytest.raises(ValueError, match="could not reach a Dask scheduler at 'tcp://127.0.0.1:9'"):
        get_client("tcp://127.0.0.1:9", timeout=2)
    assert time.time() - t0 < 15


def test_a_branch_larger_than_worker_memory_is_refused_by_size():
    import dask

    X, y = _data(600)
    off = {"distributed.worker.memory." + k: False for k in ("target", "spill", "pause", "terminate")}
    with dask.config.set(off):
        with LocalCluster(n_workers=1, processes=False, memory_limit="50kB", dashboard_address=None) as cl, \
                Client(cl) as c:
            est = bt.EmpiricalBayesianForestRegressor(4, trunk_min_samples_leaf=200, min_samples_leaf=5)
            with pytest.raises(ValueError, match=r"branch \(trunk leaf\) \d+ holds [\d,]+ rows and needs about"):
                est.fit(dd.from_pandas(X, npartitions=2), dd.from_pandas(y, npartitions=2), client=c)


def test_plain_bayesian_forest_refuses_dask_input(client):
    X, y = _data(100)
    with pytest.raises(ValueError, match="needs all rows in one process"):
        bt.BayesianForestRegressor().fit(dd.from_pandas(X, npartitions=2), dd.from_pandas(y, npartitions=2),
                                         client=client)
