"""Worker processes that fit trees on several CPU cores, one core each.

Why processes: XLA's CPU runtime spreads one compiled call over every core of
the process, but a level-wise tree fit has too little work per operation for
that to pay (one call on two cores runs about 1.5x faster than on one), and two
calls from two threads compete for the same thread pool.  A worker process
pinned to one core runs its calls single-threaded, so ``k`` workers fit ``k``
trees at a time at the single-core speed (see ``docs/performance.md``).

Each worker is a fresh interpreter (``python -c``, so the user's ``__main__``
is never re-imported and no ``if __name__ == "__main__"`` guard is needed),
pinned with ``os.sched_setaffinity`` before JAX starts.  The workers share a
JAX compilation cache in a temporary folder (removed at shutdown; a
``JAX_COMPILATION_CACHE_DIR`` set by the user is used instead): a new program
is compiled by one worker while the others wait, and they load it from the cache.  Messages are pickles
over the worker's stdin/stdout.

The workers and their cache folder belong to a :class:`WorkerPool`; ``close()`` stops them and
removes the folder.  The forest fits use the pool :func:`default_pool` returns: its workers are
started on first use, kept for later fits (their compiled programs stay warm) and stopped at
interpreter exit or by :func:`shutdown` (a later parallel fit starts them again).

Only the forest fit uses them (:func:`bayestrees.inference.forest.bootstrap.fit_forest`
with ``n_jobs > 1`` on the CPU backend).  A worker runs
:func:`bayestrees.inference.forest.chunk.fit_chunk`, the function the calling
process runs for a chunk of trees; this module never imports ``bootstrap``.  Set the environment variable
``BAYESTREES_PARALLEL=threads`` to use threads in the calling process instead.
"""
from __future__ import annotations

import atexit
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid

__all__ = ["WorkerError", "WorkerPool", "available_cpus", "default_pool", "get_workers", "shutdown",
           "use_processes", "serve"]


class WorkerError(RuntimeError):
    """A worker process died or could not be started."""


def available_cpus() -> list[int]:
    """The CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def use_processes(n_jobs: int) -> bool:
    """Whether ``n_jobs`` parallel fits should run in worker processes (CPU backend, Linux)."""
    import jax

    if n_jobs <= 1 or os.environ.get("BAYESTREES_PARALLEL", "processes") == "threads":
        return False
    return jax.default_backend() == "cpu" and hasattr(os, "sched_setaffinity")


_BOOT = (
    "import os, sys\n"
    "cpu = int(sys.argv[1])\n"
    "if cpu >= 0: os.sched_setaffinity(0, {cpu})\n"
    "from bayestrees.inference.forest.workers import serve\n"
    "serve()\n"
)


class _Worker:
    """One worker process and the pipe protocol to it."""

    def __init__(self, cpu: int, cache: str | None = None):
        env = dict(os.environ)
        env["JAX_PLATFORMS"] = "cpu"
        if cache is not None:
            env["BAYESTREES_WORKER_CACHE"] = cache
        self.cpu = cpu
        self.seen: set = set()  # signatures of the programs this worker has run
        self.lock = threading.Lock()
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(cpu)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, env=env)
        except OSError as e:  # pragma: no cover - depends on the system
            raise WorkerError(f"could not start a worker process: {e}") from e

    def call(self, *msg):
        with self.lock:
            try:
                pickle.dump(msg, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                self.proc.stdin.flush()
                status, payload = pickle.load(self.proc.stdout)
            except BaseException as e:
                # a reply not read would be taken for the answer to the next message: never reuse
                code = self.proc.poll()
                self.proc.kill()
                if not isinstance(e, (EOFError, BrokenPipeError, OSError, pickle.UnpicklingError)):
                    raise
                raise WorkerError(
                    f"worker process on CPU {self.cpu} stopped (exit code {code}); its error, if any, was "
                    f"printed above. Out of memory is the usual cause: use fewer n_jobs or a smaller "
                    f"chunk_size, or set BAYESTREES_PARALLEL=threads"
                ) from e
        if status == "error":
            raise payload
        return payload

    def close(self):
        """Ask the worker to stop (killed if it does not within 5 s) and close its pipes."""
        try:
            pickle.dump(None, self.proc.stdin)
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except Exception:
                pass


class WorkerPool:
    """Worker processes for parallel forest fits, and the compilation cache folder they share.

    Workers are started by :meth:`get` as they are needed and kept between fits; :meth:`close`
    stops them and removes the folder.  A closed pool may be used again: the next :meth:`get`
    starts fresh workers.  It is also a context manager (``with WorkerPool() as pool: ...``).

    Attributes
    ----------
    workers : list
        The running workers (a copy; each has ``cpu``, the core it is pinned to or -1, and
        ``proc``, its :class:`subprocess.Popen`).
    cache_dir : str or None
        The workers' shared JAX compilation cache (a temporary folder made when the first worker
        starts, unless ``JAX_COMPILATION_CACHE_DIR`` is set: the user's own cache is then used
        as it is), or None before that and after :meth:`close`.
    """

    def __init__(self):
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._cache: str | None = None

    @property
    def workers(self) -> list:
        with self._lock:
            return list(self._workers)

    @property
    def cache_dir(self) -> str | None:
        return self._cache

    def get(self, n_jobs: int, quiet: bool = False) -> list | None:
        """``n_jobs`` running workers (started if needed), pinned one per CPU when there are enough CPUs.

        Parameters
        ----------
        n_jobs : int
            Workers wanted.
        quiet : bool
            A failure to start them gives a ``RuntimeWarning`` and ``None`` (callers then use
            threads) instead of raising :class:`WorkerError`.

        Returns
        -------
        list of workers, or None
        """
        with self._lock:
            for w in [w for w in self._workers if w.proc.poll() is not None]:
                w.close()  # a dead worker's pipes are closed; a new one takes its place
            self._workers[:] = [w for w in self._workers if w.proc.poll() is None]
            cpus = available_cpus()
            try:
                while len(self._workers) < n_jobs:
                    free = [c for c in cpus if c not in {w.cpu for w in self._workers}]
                    self._workers.append(_Worker(free[0] if n_jobs <= len(cpus) and free else -1, self._cache_folder()))
            except WorkerError as e:
                if not quiet:
                    raise
                import warnings

                warnings.warn(f"{e}; fitting in threads instead", RuntimeWarning, stacklevel=3)
                return None
            return self._workers[:n_jobs]

    def _cache_folder(self) -> str | None:
        if "JAX_COMPILATION_CACHE_DIR" in os.environ:  # the user's own cache, if set, is used as it is
            return None
        if self._cache is None:
            self._cache = tempfile.mkdtemp(prefix="bayestrees-jax-cache-")
        return self._cache

    def close(self) -> None:
        """Stop every worker and remove the shared cache folder; calling it again does nothing."""
        with self._lock:
            for w in self._workers:
                w.close()
            self._workers.clear()
            if self._cache is not None:
                shutil.rmtree(self._cache, ignore_errors=True)
                self._cache = None

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_DEFAULT_POOL = WorkerPool()


def default_pool() -> WorkerPool:
    """The pool the forest fits use (closed at interpreter exit, or by :func:`shutdown`)."""
    return _DEFAULT_POOL


def get_workers(n_jobs: int, quiet: bool = False) -> list | None:
    """``default_pool().get(n_jobs, quiet)``: see :meth:`WorkerPool.get`."""
    return _DEFAULT_POOL.get(n_jobs, quiet)


def shutdown() -> None:
    """Stop every worker process of the default pool (they are started again on the next parallel fit)."""
    _DEFAULT_POOL.close()


atexit.register(shutdown)


class RemoteFit:
    """One forest fit: its data (``job`` of :func:`~bayestrees.inference.forest.bootstrap.fit_forest`) is sent
    once to each worker; then ``fit(worker, c)`` fits chunk ``c`` there."""

    def __init__(self, workers, job: dict):
        import jax
        import numpy as np

        self.token = uuid.uuid4().hex
        job = dict(job)
        key = job.pop("key")
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            job["key_data"] = np.asarray(jax.random.key_data(key))
            job["key_impl"] = str(jax.random.key_impl(key))
        else:  # a raw uint32 key
            job["key_data"], job["key_impl"] = np.asarray(key), None
        job = jax.tree_util.tree_map(lambda a: np.asarray(a) if isinstance(a, jax.Array) else a, job)
        job["x64"] = bool(jax.config.jax_enable_x64)
        for w in workers:
            w.call("setup", self.token, job)

    def fit(self, worker, c: int):
        return worker.call("fit", self.token, int(c))


def serve() -> None:
    """Worker main loop (run by each worker process, never in the caller): read a message, answer
    with ``("ok", result)`` or ``("error", exception)``."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the message stream
    inp = sys.stdin.buffer
    import jax
    import numpy as np

    cache = os.environ.get("BAYESTREES_WORKER_CACHE")
    if cache:
        # the first worker to compile a program writes it here and the others load it: loading
        # takes a fifth of the time and half the resident memory of compiling
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

    from .chunk import fit_chunk

    jobs: dict = {}
    while True:
        try:
            msg = pickle.load(inp)
        except EOFError:
            return
        if msg is None:
            return
        try:
            if msg[0] == "setup":
                _, token, setup = msg
                jax.config.update("jax_enable_x64", setup.pop("x64"))
                jobs.clear()  # one forest at a time per worker
                job = jax.tree_util.tree_map(lambda a: jax.numpy.asarray(a) if isinstance(a, np.ndarray) else a,
                                             setup)
                data, impl = job.pop("key_data"), job.pop("key_impl")
                job["key"] = data if impl is None else jax.random.wrap_key_data(data, impl=impl)
                jobs[token] = job
                result = None
            elif msg[0] == "fit":
                _, token, c = msg
                result = jax.tree_util.tree_map(np.asarray, fit_chunk(jobs[token], c))
            else:
                raise ValueError(f"unknown message {msg[0]!r}")
            reply = ("ok", result)
        except Exception as e:  # sent back and raised in the parent
            reply = ("error", e)
        try:
            pickle.dump(reply, out, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # an exception that does not pickle
            pickle.dump(("error", RuntimeError(f"{type(reply[1]).__name__}: {reply[1]}")), out)
        out.flush()
