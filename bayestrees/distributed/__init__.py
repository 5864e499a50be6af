"""Empirical Bayesian and sub-sample forests on a Dask cluster (the ``distributed`` extra).

The forest estimators take this path by themselves when ``X`` is a Dask DataFrame or a
Parquet path::

    import dask.dataframe as dd
    import bayestrees as bt

    df = dd.read_parquet("data/*.parquet")
    ebf = bt.EmpiricalBayesianForestRegressor(100, trunk_min_samples_leaf=50_000, min_samples_leaf=5)
    ebf.fit(df.drop(columns="y"), df["y"])        # or ebf.fit("data/*.parquet", target="y")
    ebf.predict(df.drop(columns="y")).compute()   # predictions computed on the cluster

Modules: :mod:`.inputs` (Dask input checks), :mod:`.client` (local cluster / address),
:mod:`.partitions` (per-partition tasks), :mod:`.trunk` (trunk from summed histograms),
:mod:`.weights` (Bayesian-bootstrap weights by global row index), :mod:`.branch_fit` (one
branch's forest), :mod:`.graft` (trunk + branches -> whole trees), :mod:`.fit` (the plan),
:mod:`.estimator` (the estimators' hooks).  See ``docs/lab-notes/distributed.md``.
"""
from .client import close_local_cluster, get_client, local_client
from .inputs import as_dask, is_dask_input

__all__ = ["get_client", "local_client", "close_local_cluster", "as_dask", "is_dask_input"]
