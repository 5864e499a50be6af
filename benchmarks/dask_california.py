"""California housing through the Dask path equals the single-machine EBF for the same seeds (issue 11).

Fits ``EmpiricalBayesianForestRegressor`` (the paper's settings: 100 trees, trunk minimum leaf
3000, ``min_samples_leaf=2``) once on the pandas data and once on the same rows as a Dask
DataFrame of ``--partitions`` partitions on a 2-worker local cluster, both in float64
(``jax_enable_x64``; in float32 the two paths sum the same statistics in different orders and
the rounding alone moves near-tied splits deep in the trees), and reports the largest
difference between the two forests' predictions at every training row, tree by tree.

    python benchmarks/dask_california.py [--trees 100] [--partitions 4] [--data-dir ../shared/data]

Writes one JSON line to ``benchmarks/results/dask_california.jsonl``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_common import RESULTS, append_jsonl, machine, parser  # noqa: E402


def main(argv=None):
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--trunk-leaf", type=int, default=3000)
    p.add_argument("--min-leaf", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--seed", type=int, default=5807)
    p.set_defaults(out=str(RESULTS / "dask_california.jsonl"))
    a = p.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd
    from distributed import Client, LocalCluster

    import bayestrees as bt
    from bayestrees.distributed.client import worker_env

    df = pd.read_csv(Path(a.data_dir) / "california_housing.csv")
    y = df.pop("medianHouseValue")
    trees = 10 if a.quick else a.trees
    kw = dict(draws=trees, trunk_min_samples_leaf=a.trunk_leaf, min_samples_leaf=a.min_leaf,
              random_state=a.seed, dtype="float64")
    t0 = time.perf_counter()
    ref = bt.EmpiricalBayesianForestRegressor(**kw, n_jobs=2).fit(df, y)
    t_single = time.perf_counter() - t0
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, env=worker_env()) as cluster, Client(cluster) as client:
        t0 = time.perf_counter()
        est = bt.EmpiricalBayesianForestRegressor(**kw).fit(dd.from_pandas(df, npartitions=a.partitions),
                                                            dd.from_pandas(y, npartitions=a.partitions),
                                                            client=client)
        t_dask = time.perf_counter() - t0
    a_draws, b_draws = ref.predict_draws(df), est.predict_draws(df)
    diff = np.abs(a_draws - b_draws)
    k = int(ref.trunk_.n_nodes)
    same_trunk = all(np.array_equal(np.asarray(getattr(ref.trunk_, f))[:k], getattr(est.trunk_, f)[:k])
                     for f in ("feature", "threshold", "left", "right"))
    rec = {"benchmark": "dask_california", "rows": int(len(df)), "trees": trees, "trunk_min_samples_leaf": a.trunk_leaf,
           "min_samples_leaf": a.min_leaf, "seed": a.seed, "partitions": a.partitions, "dtype": "float64",
           "same_trunk": bool(same_trunk), "trunk_nodes": k,
           "max_abs_diff_draws": float(diff.max()),
           "max_rel_diff_mean": float(np.max(np.abs(a_draws.mean(0) - b_draws.mean(0)) / np.abs(a_draws.mean(0)))),
           "rows_any_tree_differs_1e-6": int(np.sum((diff > 1e-6 * np.abs(a_draws)).any(0))),
           "single_fit_s": round(t_single, 1), "dask_fit_s": round(t_dask, 1), **machine()}
    print(f"same trunk: {same_trunk} ({k} nodes); largest |difference| of a tree's prediction: "
          f"{rec['max_abs_diff_draws']:.3g}; of the forest mean, relative: {rec['max_rel_diff_mean']:.3g}; rows where "
          f"some tree differs by more than 1e-6 (relative): {rec['rows_any_tree_differs_1e-6']}; fit {t_single:.1f} s "
          f"single machine (n_jobs=2), {t_dask:.1f} s Dask")
    append_jsonl(a.out, rec)


if __name__ == "__main__":
    main()
