"""Empirical Bayesian forest on a Dask cluster: a synthetic regression set in Parquet (issue 11).

Generates (once per size, under the git-ignored ``benchmarks/data/``) a Friedman-style regression
set of ``--rows`` rows x 10 features written as Parquet files of 250,000 rows, plus a held-out set
of 100,000 rows, and on a 2-worker local cluster (loopback, one thread per worker):

1. measures an idle worker with JAX loaded (resident memory after importing bayestrees and
   running one JAX operation);
2. fits an EBF (``EmpiricalBayesianForestRegressor`` with the Parquet path and ``target="y"``)
   and a sub-sample forest with as many blocks as the EBF has branches and the same minimum leaf
   size: ``--trees`` trees in all (each tree fits one block, as in the paper), or with
   ``--ssf-per-block`` ``--trees`` trees per block (the same work as the EBF's branch forests);
3. predicts the held-out set on the cluster (lazy Dask predictions) and reports both RMSEs;
4. reports each worker's and the client's peak resident memory (``VmHWM``/``ru_maxrss``) against
   the data set's in-memory size (pandas, float64) plus the idle worker's footprint.

Writes one JSON line per run to ``benchmarks/results/dask_ebf.jsonl``.

    python benchmarks/dask_ebf.py --rows 1000000 [--trees 8] [--trunk-leaf 125000] [--min-leaf 20]

The worker peaks are read after the EBF fit, after its prediction and again after the SSF fit
(peaks only grow, so each reading covers what came before); the client's after the EBF fit and
at the end.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_common import REPO, RESULTS, append_jsonl, machine  # noqa: E402

DATA = REPO / "benchmarks" / "data"
PART_ROWS = 250_000
D = 10


def friedman(rng, n):
    """x ~ U[0, 1]^10; y = 10 sin(pi x0 x1) + 20 (x2 - 0.5)^2 + 10 x3 + 5 x4 + N(0, 1) (x5..x9 noise)."""
    import numpy as np
    import pandas as pd

    X = rng.uniform(size=(n, D)).astype(np.float64)
    y = (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
         + rng.normal(size=n))
    df = pd.DataFrame(X, columns=[f"x{j}" for j in range(D)])
    df["y"] = y
    return df


def generate(rows: int, seed: int = 0) -> tuple[Path, Path]:
    """Write the training files (one per 250k rows, each from its own seed) and the held-out file."""
    import numpy as np

    train = DATA / f"friedman_{rows}"
    test = DATA / "friedman_test_100000.parquet"
    if not (train / "_done").exists():
        train.mkdir(parents=True, exist_ok=True)
        for p, s in enumerate(range(0, rows, PART_ROWS)):
            friedman(np.random.default_rng([seed, p]), min(PART_ROWS, rows - s)).to_parquet(
                train / f"part-{p:04d}.parquet", index=False)
        (train / "_done").write_text("ok\n")
    if not test.exists():
        friedman(np.random.default_rng([seed, 10**6]), 100_000).to_parquet(test, index=False)
    return train, test


def _rss_peak() -> int:
    """Peak resident memory of this process (bytes), from /proc/self/status VmHWM."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _rss_now() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _idle_jax() -> int:
    import jax.numpy as jnp

    import bayestrees  # noqa: F401

    jnp.zeros(1).block_until_ready()
    return _rss_now()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--trees", type=int, default=8)
    p.add_argument("--trunk-leaf", type=int, default=None, help="trunk_min_samples_leaf (default rows / 8)")
    p.add_argument("--min-leaf", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-ssf", action="store_true")
    p.add_argument("--ssf-per-block", action="store_true",
                   help="give the sub-sample forest --trees trees per block (the EBF's work: --trees trees "
                        "per branch) instead of --trees trees in all (the paper's definition: each tree fits "
                        "one block, so with more blocks than trees most blocks get none)")
    p.add_argument("--out", default=str(RESULTS / "dask_ebf.jsonl"))
    a = p.parse_args(argv)
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd
    from distributed import Client, LocalCluster

    import bayestrees as bt
    from bayestrees.distributed.client import worker_env

    t0 = time.perf_counter()
    train, test = generate(a.rows, a.seed)
    t_gen = time.perf_counter() - t0
    tl = a.trunk_leaf or a.rows // 8
    rec = {"benchmark": "dask_ebf", "rows": a.rows, "features": D, "trees": a.trees, "trunk_min_samples_leaf": tl,
           "min_samples_leaf": a.min_leaf, "workers": a.workers, "generate_s": round(t_gen, 1), **machine()}
    with LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, env=worker_env()) as cluster, Client(cluster) as client:
        idle = client.run(_idle_jax)
        rec["idle_worker_rss_mb"] = round(max(idle.values()) / 2**20, 1)
        ddf = dd.read_parquet(str(train))
        rec["partitions"] = int(ddf.npartitions)
        rec["data_in_memory_mb"] = round(float(ddf.memory_usage(deep=True).sum().compute()) / 2**20, 1)
        print(f"{a.rows:,} rows in {ddf.npartitions} files; in memory {rec['data_in_memory_mb']:,} MiB; "
              f"idle JAX worker {rec['idle_worker_rss_mb']} MiB", flush=True)
        ytest = pd.read_parquet(test, columns=["y"])["y"].to_numpy()
        Xtest = dd.read_parquet(str(test), columns=[f"x{j}" for j in range(D)])

        t1 = time.perf_counter()
        ebf = bt.EmpiricalBayesianForestRegressor(a.trees, trunk_min_samples_leaf=tl, min_samples_leaf=a.min_leaf,
                                                  random_state=a.seed)
        ebf.fit(str(train), target="y", client=client)
        rec["ebf_fit_s"] = round(time.perf_counter() - t1, 1)
        rec["ebf_steps_s"] = {k: round(v, 1) for k, v in ebf.dask_timings_.items()}
        n_leaves = int(np.sum(np.asarray(ebf.trunk_.left)[:int(ebf.trunk_.n_nodes)] == -1))
        rec["ebf_branches"] = n_leaves
        rec["worker_peak_rss_mb_after_ebf_fit"] = sorted(round(v / 2**20, 1) for v in client.run(_rss_peak).values())
        rec["client_peak_rss_mb_after_ebf_fit"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        t1 = time.perf_counter()
        pe = ebf.predict(Xtest).compute().to_numpy()
        rec["ebf_predict_s"] = round(time.perf_counter() - t1, 1)
        rec["ebf_rmse"] = float(np.sqrt(np.mean((pe - ytest) ** 2)))
        peaks = client.run(_rss_peak)
        rec["worker_peak_rss_mb_after_ebf"] = sorted(round(v / 2**20, 1) for v in peaks.values())
        print(f"EBF: {rec['ebf_fit_s']} s ({rec['ebf_steps_s']}), {n_leaves} branches, RMSE {rec['ebf_rmse']:.4f}",
              flush=True)
        del ebf
        if not a.skip_ssf:
            t1 = time.perf_counter()
            ssf_trees = a.trees * n_leaves if a.ssf_per_block else a.trees
            rec["ssf_trees"] = ssf_trees
            ssf = bt.SubSampleForestRegressor(ssf_trees, n_blocks=n_leaves, min_samples_leaf=a.min_leaf,
                                              random_state=a.seed)
            ssf.fit(str(train), target="y", client=client)
            rec["ssf_fit_s"] = round(time.perf_counter() - t1, 1)
            ps = ssf.predict(Xtest).compute().to_numpy()
            rec["ssf_rmse"] = float(np.sqrt(np.mean((ps - ytest) ** 2)))
            print(f"SSF ({n_leaves} blocks, {ssf_trees} trees): {rec['ssf_fit_s']} s, RMSE {rec['ssf_rmse']:.4f}", flush=True)
            del ssf
        peaks = client.run(_rss_peak)
        rec["worker_peak_rss_mb"] = sorted(round(v / 2**20, 1) for v in peaks.values())
        rec["worker_restarts"] = 0 if len(peaks) == a.workers else None
    rec["client_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    rec["bound_mb"] = round(rec["data_in_memory_mb"] + rec["idle_worker_rss_mb"], 1)
    rec["total_s"] = round(time.perf_counter() - t0, 1)
    print(f"peak RSS: workers {rec['worker_peak_rss_mb']} MiB, client {rec['client_peak_rss_mb']} MiB; bound "
          f"(data in memory + idle JAX worker) {rec['bound_mb']} MiB; total {rec['total_s']} s", flush=True)
    append_jsonl(a.out, rec)


if __name__ == "__main__":
    main()
