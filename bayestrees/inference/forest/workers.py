"""Worker processes that fit trees on several CPU cores, one core each.

Why processes: XLA's CPU runtime spreads one compiled call over every core of
the process, but a level-wise tree fit has too little work per operation for
that to pay (one call on two cores runs about 1.5x faster than on one), and two
calls from two threads compete for the same thread pool.  A worker process
pinned to one core runs its calls single-threaded, so ``k`` workers fit ``k``
trees at a time at the single-core speed (see ``docs/lab-notes/performance.md``).

Each worker is a fresh interpreter (``python -c``, so the user's ``__main__``
is never re-imported and no ``if __name__ == "__main__"`` guard is needed),
pinned with ``os.sched_setaffinity`` before JAX starts.  It imports only the modules a chunk fit
needs (``chunk`` and what it imports: the package ``__init__`` files, with the estimators,
ArviZ and the other families, are skipped), so it is ready in about a second instead of three.

The workers use the JAX compilation cache of the process that started them
(:mod:`bayestrees.compile_cache`: the persistent one in the user's cache folder by default, or the
user's own), or, when that process has none, a temporary folder of the pool's (removed at
shutdown).  A new program is compiled once, by an extra process that is not pinned to a core (so
the compiler uses every core) and exits afterwards (:func:`start_compiler`), while the workers
wait; they then load it from the cache.  A program the cache already held (:func:`program_cached`)
is loaded by every worker at once.  Messages are pickles over the worker's stdin/stdout.

The workers and their temporary cache folder belong to a :class:`WorkerPool`; ``close()`` stops
them and removes the folder.  The forest fits use the pool :func:`default_pool` returns: its workers are
started on first use, kept for later fits (their compiled programs stay warm) and stopped at
interpreter exit or by :func:`shutdown` (a later parallel fit starts them again).

Only the forest fit uses them (:func:`bayestrees.inference.forest.bootstrap.fit_forest`
with ``n_jobs > 1`` on the CPU backend), and only when the environment variable
``BAYESTREES_PARALLEL=processes`` asks for them (:func:`use_processes`).  A worker runs
:func:`bayestrees.inference.forest.chunk.fit_chunk`, the function the calling
process runs for a chunk of trees; this module never imports ``bootstrap``.  By default
(``BAYESTREES_PARALLEL=threads``) parallel fits run in threads of the calling process instead.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid

__all__ = ["WorkerError", "WorkerPool", "available_cpus", "default_pool", "get_workers", "program_cached",
           "release_freed_memory", "remember_program", "shutdown", "start_compiler", "use_processes", "serve"]


class WorkerError(RuntimeError):
    """A worker process died or could not be started."""


def available_cpus() -> list[int]:
    """The CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def use_processes(n_jobs: int) -> bool:
    """Whether ``n_jobs`` parallel fits should run in worker processes: only when asked for
    (``BAYESTREES_PARALLEL=processes``), on the CPU backend, on Linux.  By default they run in
    threads of the calling process: on the 2-core box the same fit time as worker processes (1.07x
    against 1.06x scikit-learn's), half the compile time and a third of the memory
    (``docs/lab-notes/performance.md``, "Forest memory")."""
    import jax

    mode = os.environ.get("BAYESTREES_PARALLEL", "threads")
    if mode not in ("threads", "processes"):
        raise ValueError(f"BAYESTREES_PARALLEL must be 'threads' or 'processes', got {mode!r}")
    if n_jobs <= 1 or mode == "threads":
        return False
    return jax.default_backend() == "cpu" and hasattr(os, "sched_setaffinity")


#: the worker's first lines: pin to a core, then import the worker loop without running the package
#: ``__init__`` files above it (``bayestrees``, ``inference``, ``forest``), which import the whole
#: library (ArviZ, the estimators, every family: 2 s of a worker's 3 s start); each is replaced by
#: an empty package module of the same name and folder, so the modules below import as usual
_BOOT = (
    "import os, sys, types\n"
    "cpu = int(sys.argv[1])\n"
    "if cpu >= 0: os.sched_setaffinity(0, {cpu})\n"
    "root = sys.argv[2]\n"
    "for name in ('bayestrees', 'bayestrees.inference', 'bayestrees.inference.forest'):\n"
    "    m = types.ModuleType(name)\n"
    "    m.__path__ = [os.path.join(root, *name.split('.')[1:])]\n"
    "    m.__package__ = name\n"
    "    sys.modules[name] = m\n"
    "from bayestrees.inference.forest.workers import serve\n"
    "serve()\n"
)

#: the ``bayestrees`` package's folder (``_BOOT``'s ``root``)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Worker:
    """One worker process and the pipe protocol to it."""

    def __init__(self, cpu: int, cache: dict | None = None):
        env = dict(os.environ)
        env["JAX_PLATFORMS"] = "cpu"
        # one glibc malloc arena (unless the user chose): a worker runs on one core, so its threads
        # hardly contend for it, and the compiler's peak falls from about 640 to 560 MB, a
        # worker's from 310 to 300 MB, with the same compile and fit times (docs/lab-notes/performance.md,
        # "Forest memory")
        env.setdefault("MALLOC_ARENA_MAX", "1")
        if cache is not None:  # the compilation cache settings (compile_cache.worker_settings)
            env["BAYESTREES_WORKER_CACHE"] = json.dumps(cache)
        self.cpu = cpu
        self.cache = cache
        self.seen: set = set()  # signatures of the programs this worker has run
        self.lock = threading.Lock()
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(cpu), _PACKAGE_DIR],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
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
        The pool's own JAX compilation cache folder: a temporary folder made when a worker starts
        while the calling process has no compilation cache
        (:func:`bayestrees.compile_cache.compilation_cache_dir` None), or None (before that,
        after :meth:`close`, and while the workers use the calling process's cache).
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
            cache = self._cache_settings()
            if any(w.cache != cache for w in self._workers):  # the cache setting changed: new workers
                for w in self._workers:
                    w.close()
                self._workers.clear()
            cpus = available_cpus()
            try:
                while len(self._workers) < n_jobs:
                    free = [c for c in cpus if c not in {w.cpu for w in self._workers}]
                    self._workers.append(_Worker(free[0] if n_jobs <= len(cpus) and free else -1, cache))
            except WorkerError as e:
                if not quiet:
                    raise
                import warnings

                warnings.warn(f"{e}; fitting in threads instead", RuntimeWarning, stacklevel=3)
                return None
            return self._workers[:n_jobs]

    def _cache_settings(self) -> dict:
        """The compilation cache new workers use: the calling process's, else the pool's own folder."""
        from ...compile_cache import worker_settings

        settings = worker_settings()
        if settings is not None:
            return settings
        if self._cache is None:
            self._cache = tempfile.mkdtemp(prefix="bayestrees-jax-cache-")
        # the first worker to compile a program writes it here and the others load it: loading
        # takes a fifth of the time and half the resident memory of compiling
        return {"dir": self._cache, "min_compile_time_secs": 0.0, "min_entry_size_bytes": -1}

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


def start_compiler(workers) -> _Worker:
    """A worker process not pinned to a core, with the compilation cache of ``workers``: it fits a
    forest's first chunk while compiling its programs on every core, then is closed (its programs
    stay in the cache, and its memory goes with it)."""
    return _Worker(-1, workers[0].cache if workers else None)


def _program_marker(workers, sig) -> str | None:
    """A file in the workers' cache folder that stands for "the program of ``sig`` is in this cache".

    Its name hashes ``sig`` with what else the compiled program depends on: the JAX and jaxlib
    versions, ``XLA_FLAGS`` and the source of the modules that build the program.
    """
    folder = workers[0].cache["dir"] if workers and workers[0].cache else None
    if folder is None:
        return None
    import jax
    import jaxlib

    h = hashlib.sha256(repr((sig, jax.__version__, jaxlib.__version__, os.environ.get("XLA_FLAGS", ""))).encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("cart.py", "chunk.py"):
        try:
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
        except OSError:  # pragma: no cover - an installation without sources
            return None
    return os.path.join(folder, "bayestrees-programs", h.hexdigest()[:32])


def program_cached(workers, sig) -> bool:
    """Whether a fit with program signature ``sig`` has run before with the workers' compilation cache
    (so its programs are there to load, and every worker may load them at once)."""
    marker = _program_marker(workers, sig)
    return marker is not None and os.path.exists(marker)


def remember_program(workers, sig) -> None:
    """Record that the programs of ``sig`` are in the workers' compilation cache (see :func:`program_cached`)."""
    marker = _program_marker(workers, sig)
    if marker is None:
        return
    try:
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "wb"):
            pass
    except OSError:  # a read-only cache: the next fit compiles on one worker first, as without it
        pass


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


def release_freed_memory() -> None:
    """Hand memory the process has freed back to the system (glibc ``malloc_trim``; a no-op
    elsewhere).  Without it a process's resident size stays at the largest it ever was: a forest
    worker keeps the 50-60 MB it needed only while it loaded its program, and a Dask worker that fits
    hundreds of branches one after another starts whatever runs next (prediction) from its peak."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def serve() -> None:
    """Worker main loop (run by each worker process, never in the caller): read a message, answer
    with ``("ok", result)`` or ``("error", exception)``."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the message stream
    inp = sys.stdin.buffer
    import jax
    import numpy as np

    cache = os.environ.get("BAYESTREES_WORKER_CACHE")
    if cache:  # the compilation cache of the process that started this one, or the pool's folder
        from ...compile_cache import use_in_worker

        use_in_worker(json.loads(cache))

    from .chunk import fit_chunk

    jobs: dict = {}
    trim = False  # after the first chunk of a forest: its program is loaded (or compiled) by then
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
                trim = True
            elif msg[0] == "fit":
                _, token, c = msg
                result = jax.tree_util.tree_map(np.asarray, fit_chunk(jobs[token], c))
                if trim:  # what tracing, lowering and loading (or compiling) the program took and freed
                    release_freed_memory()
                    trim = False
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
