"""Finding the Dask cluster to run on.

``client=None`` starts (once per process, then reused) a :class:`distributed.LocalCluster` on
this machine's cores, listening on the loopback interface only; a
:class:`distributed.Client` is used as it is; a string is a scheduler address
(``"tcp://host:8786"``), connected to within ``timeout`` seconds or a ``ValueError``.
"""
from __future__ import annotations

import os

__all__ = ["get_client", "local_client", "close_local_cluster", "worker_memory_limits", "worker_env"]

_LOCAL: dict = {}


def _import_distributed():
    try:
        import distributed
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError('the Dask path needs the "distributed" extra: pip install "bayestrees[distributed]"') from e
    return distributed


def local_client(n_workers: int | None = None):
    """The process-wide local cluster's client, started on first use.

    Parameters
    ----------
    n_workers : int, optional
        Worker processes, one thread each (default: the CPUs this process may use, but at most
        one per 2 GiB of memory; each worker's memory limit is its share of the machine's memory).

    Returns
    -------
    distributed.Client
    """
    distributed = _import_distributed()
    c = _LOCAL.get("client")
    if c is not None and c.status == "running":
        return c
    if n_workers is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        # a worker compiling and running the JAX engine needs about 2 GiB (docs/lab-notes/distributed.md):
        # fewer workers with more memory each rather than workers the nanny would kill
        import psutil

        n_workers = max(1, min(cpus, int(psutil.virtual_memory().total // (2 * 2**30))))
    cluster = distributed.LocalCluster(n_workers=max(1, int(n_workers)), threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None, env=worker_env())
    client = distributed.Client(cluster)
    _LOCAL.update(cluster=cluster, client=client)
    return client


def worker_env() -> dict:
    """Environment for local worker processes: a JAX compilation cache shared by the workers (this
    process's, :func:`bayestrees.compilation_cache_dir`, else ``JAX_COMPILATION_CACHE_DIR``, else a
    temporary folder), so that a program one worker compiled, or a restarted worker or an earlier
    process compiled before, is loaded instead of compiled again."""
    import tempfile

    from ..compile_cache import compilation_cache_dir

    cache = compilation_cache_dir() or os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if not cache:
        cache = _LOCAL.get("cache") or tempfile.mkdtemp(prefix="bayestrees-dask-jax-cache-")
        _LOCAL["cache"] = cache
    return {"JAX_COMPILATION_CACHE_DIR": cache, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.5"}


def close_local_cluster() -> None:
    """Close the local cluster started by :func:`local_client`, if any."""
    c, cl = _LOCAL.pop("client", None), _LOCAL.pop("cluster", None)
    if c is not None:
        c.close()
    if cl is not None:
        cl.close()


def get_client(client=None, *, timeout: float = 10.0):
    """The Dask client a fit or prediction runs on.

    Parameters
    ----------
    client : None, distributed.Client or str
        None: the current default client when there is one (the most recently created, as in
        Dask: lazy results then compute where their inputs were sent), else the local cluster
        (:func:`local_client`); a Client: itself; a string: the address of a running scheduler.
    timeout : float
        Seconds to wait for a scheduler given by address.

    Returns
    -------
    distributed.Client

    Raises
    ------
    ValueError
        The scheduler could not be reached within ``timeout`` seconds, or ``client`` is of
        another type.
    """
    distributed = _import_distributed()
    if client is None:
        try:
            c = distributed.default_client()
        except ValueError:  # no client in this process
            return local_client()
        return c if getattr(c, "status", None) == "running" else local_client()
    if isinstance(client, distributed.Client):
        return client
    if isinstance(client, str):
        try:
            return distributed.Client(client, timeout=timeout)
        except (OSError, TimeoutError) as e:
            raise ValueError(f"could not reach a Dask scheduler at {client!r} within {timeout:g} s ({e}); "
                             "check the address and that the scheduler is running, or pass client=None "
                             "for a local cluster") from None
    raise ValueError(f"client must be None, a distributed.Client or a scheduler address, got {type(client).__name__}")


def worker_memory_limits(client) -> dict:
    """Memory limit (bytes; 0 when unlimited) of every worker, by address."""
    info = client.scheduler_info(n_workers=-1) if _accepts_n_workers(client) else client.scheduler_info()
    return {addr: int(w.get("memory_limit") or 0) for addr, w in info.get("workers", {}).items()}


def _accepts_n_workers(client) -> bool:
    import inspect

    try:
        return "n_workers" in inspect.signature(client.scheduler_info).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False
