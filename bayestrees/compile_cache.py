"""A persistent JAX compilation cache, on by default, so that a new process loads compiled programs.

Why: a fresh process compiles every program it runs, and the forest engine alone takes 10-20 s to
compile on a small CPU (``docs/lab-notes/performance.md``, "First fit and the compilation cache").  JAX can
keep compiled programs on disk (its *persistent compilation cache*) and load them in later
processes; this module turns that on, in the user's cache folder:

* ``$XDG_CACHE_HOME/bayestrees/jax`` (else ``~/.cache/bayestrees/jax``) on Linux and other Unix,
  ``~/Library/Caches/bayestrees/jax`` on macOS, ``%LOCALAPPDATA%\\bayestrees\\jax`` on Windows.

When ``import bayestrees`` runs, the cache is set up unless

* JAX already has a cache folder (``JAX_COMPILATION_CACHE_DIR``, or
  ``jax.config.update("jax_compilation_cache_dir", ...)`` before the import): the user's own
  cache is used as it is, with the user's settings;
* JAX's cache is switched off (``jax_enable_compilation_cache=False``);
* the environment variable ``BAYESTREES_COMPILATION_CACHE`` is ``0`` (or ``off``, ``false``,
  ``no``); any other value that is not ``1``/``on``/``true``/``yes`` names the folder to use;
* the folder cannot be made or written to: then there is no cache (a debug-level log message says
  why), and nothing fails.

:func:`set_compilation_cache` changes it at any time in a running process (``False``: off;
``True``: the default folder; a path: that folder).  Programs are cached whatever their compile
time (``jax_persistent_cache_min_compile_time_secs`` 0, unless that was set through its
environment variable): the forest fit runs a few dozen small programs beside its large one, and
loading each takes a millisecond where compiling takes tens.

**Several processes at once.**  The forest's worker processes (:mod:`bayestrees.inference.forest.workers`)
use the folder of the process that started them, and several Python sessions may share it.  JAX
0.10's file cache writes an entry in place (open, write, close), so a process reading an entry
while another writes it can read a truncated file (JAX then warns and compiles), and a process
killed while writing leaves a truncated entry that every later run warns about.  This module
therefore makes the writes atomic: an entry is written to a temporary file in the same folder and
renamed into place (``os.replace``), so a reader sees either no entry or a whole one, and two
writers of the same entry each rename a whole file.  Errors of the file system (a full disk, a
folder made read-only) make a write or read a miss with a debug log, never an error or warning.
This is done by wrapping JAX's internal ``jax._src.compilation_cache.get_file_cache``; where a
JAX version lacks it, the wrap is skipped (debug log) and JAX's own writes are used.

The cache is trusted code: anyone who can write to the folder can make this user's processes run
code (JAX's warning).  The folder is made with the user's default permissions under their own
cache folder.  It grows with every new program (new data shapes, settings, JAX versions); delete
the folder to empty it (:func:`default_cache_dir` says where it is).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import NamedTuple

__all__ = ["ENV_VAR", "compilation_cache_dir", "default_cache_dir", "set_compilation_cache", "compile_log",
           "CompileEvent"]

logger = logging.getLogger(__name__)

#: The environment variable read at import: ``0`` turns the default cache off, a path moves it.
ENV_VAR = "BAYESTREES_COMPILATION_CACHE"

_OFF = {"0", "off", "false", "no", "none"}
_ON = {"", "1", "on", "true", "yes", "default"}

#: the JAX settings this module changed, with their values before (restored when it turns the cache off)
_SAVED: dict = {}


class CompileEvent(NamedTuple):
    """One program XLA compiled or loaded from the persistent cache (:func:`compile_log`)."""

    name: str | None   # the jitted function's name as JAX reports it (e.g. ``jit(_fori_collect_loop)``)
    seconds: float     # the backend's compile (or load) time
    loaded: bool       # loaded from the persistent compilation cache, not compiled


@contextlib.contextmanager
def compile_log():
    """Record the programs XLA compiles, or loads from the persistent cache, while the block runs.

    JAX reports each backend compilation as a duration event; a load from the persistent cache
    reports the same event with a cache hit recorded just before it, which is how a load is told
    from a compilation.  Programs found in JAX's in-memory cache report nothing.

    Yields
    ------
    list of CompileEvent
        Filled as the block runs, in order.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> x = jnp.arange(5.0)
    >>> with bt.compile_cache.compile_log() as log:
    ...     _ = jax.jit(lambda x: x * 3 + 1)(x)
    >>> [e.name for e in log]          # compiled, or loaded from the persistent cache (e.loaded)
    ['jit(<lambda>)']
    """
    import jax

    events: list = []
    hit = [False]

    def on_duration(event, duration, fun_name=None, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            events.append(CompileEvent(fun_name, float(duration), hit[0]))
            hit[0] = False

    def on_event(event, **kw):
        if event == "/jax/compilation_cache/cache_hits":
            hit[0] = True

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    try:
        yield events
    finally:
        jax.monitoring.unregister_event_duration_listener(on_duration)
        jax.monitoring.unregister_event_listener(on_event)


def default_cache_dir() -> Path:
    """The default folder: ``bayestrees/jax`` in the platform's per-user cache folder.

    Returns
    -------
    pathlib.Path
        ``$XDG_CACHE_HOME/bayestrees/jax`` (``~/.cache`` when ``XDG_CACHE_HOME`` is unset or not
        absolute) on Linux, ``~/Library/Caches/bayestrees/jax`` on macOS,
        ``%LOCALAPPDATA%\\bayestrees\\jax`` on Windows.
    """
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "bayestrees" / "jax"


def _from_env(value: str | None) -> Path | None:
    """The folder ``BAYESTREES_COMPILATION_CACHE=value`` asks for (None: off)."""
    v = "" if value is None else value.strip()
    if v.lower() in _OFF:
        return None
    if v.lower() in _ON:
        return default_cache_dir()
    return Path(os.path.expanduser(v))


def _writable(folder: Path) -> bool:
    """Make ``folder`` if needed and check that a file can be made in it (then removed)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
        return True
    except OSError as e:
        logger.debug("bayestrees: no persistent compilation cache: %s is not writable (%s)", folder, e)
        return False


def compilation_cache_dir() -> str | None:
    """The folder JAX's persistent compilation cache uses in this process, or None when it is off.

    It is the folder set by this module or by the user (``JAX_COMPILATION_CACHE_DIR``,
    ``jax.config.update("jax_compilation_cache_dir", ...)``), whichever was set last.

    Returns
    -------
    str or None
        The folder, or None when the persistent cache is off.

    Examples
    --------
    >>> import tempfile
    >>> folder = bt.set_compilation_cache(tempfile.mkdtemp())
    >>> bt.compilation_cache_dir() == folder
    True
    >>> bt.set_compilation_cache(False)      # off for the rest of this process
    >>> print(bt.compilation_cache_dir())
    None
    """
    import jax

    if not jax.config.jax_enable_compilation_cache:
        return None
    return jax.config.jax_compilation_cache_dir or None


def _set_jax(name: str, value) -> None:
    import jax

    _SAVED.setdefault(name, getattr(jax.config, name))
    jax.config.update(name, value)


def _apply(folder: Path | None) -> str | None:
    """Point JAX's cache at ``folder`` (None: off) and make the change take effect now."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    if folder is not None and not _writable(folder):
        folder = None
    if folder is None:
        jax.config.update("jax_compilation_cache_dir", None)
        for name, value in _SAVED.items():  # the thresholds back to what they were
            jax.config.update(name, value)
        _SAVED.clear()
    else:
        _install_atomic_writes()
        jax.config.update("jax_compilation_cache_dir", str(folder))
        # every program, however quick to compile, unless the user chose a threshold
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            _set_jax("jax_persistent_cache_min_compile_time_secs", 0.0)
        if "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES" not in os.environ:
            _set_jax("jax_persistent_cache_min_entry_size_bytes", -1)
    # JAX opens its cache once, at the first compilation; reset so the new folder is used from now on
    cc.reset_cache()
    logger.debug("bayestrees: persistent compilation cache %s", folder if folder is not None else "off")
    return None if folder is None else str(folder)


def set_compilation_cache(cache: bool | str | os.PathLike = True) -> str | None:
    """Turn JAX's persistent compilation cache on or off in this process, or move it.

    Parameters
    ----------
    cache : bool or path
        ``True``: the default folder (:func:`default_cache_dir`); ``False``: no persistent cache
        (whoever set it up: this also switches off a folder the user gave JAX); a path: that
        folder (made if needed).  Worker processes that the forests start later use the same
        setting (running ones are restarted at the next parallel fit).

    Returns
    -------
    str or None
        The folder now in use, or None when the cache is off (also when the folder could not be
        made or written to: a debug-level log message then says why).

    Examples
    --------
    >>> import os, tempfile
    >>> folder = os.path.join(tempfile.mkdtemp(), "jax-cache")
    >>> bt.set_compilation_cache(folder) == folder          # made if needed
    True
    >>> os.path.isdir(folder)
    True
    >>> bt.set_compilation_cache(False)      # no cache for the rest of this process
    """
    if cache is True:
        folder = default_cache_dir()
    elif cache is False or cache is None:
        folder = None
    elif isinstance(cache, (str, os.PathLike)):
        folder = Path(os.path.expanduser(os.fspath(cache)))
    else:
        raise TypeError(f"cache must be True, False or a folder path, got {type(cache).__name__}")
    return _apply(folder)


def setup_default() -> str | None:
    """What ``import bayestrees`` does: the cache of ``BAYESTREES_COMPILATION_CACHE`` (default: on,
    :func:`default_cache_dir`) unless JAX already has a cache folder or has its cache switched off.

    Returns
    -------
    str or None
        The folder in use after the call (the user's own, ours, or None).
    """
    import jax

    if jax.config.jax_compilation_cache_dir or not jax.config.jax_enable_compilation_cache:
        _install_atomic_writes()  # the user's folder, used as it is, gets whole-file writes too
        return compilation_cache_dir()
    folder = _from_env(os.environ.get(ENV_VAR))
    if folder is None:
        return None
    try:
        return _apply(folder)
    except Exception as e:  # never let the cache stop the import
        logger.debug("bayestrees: no persistent compilation cache (%s: %s)", type(e).__name__, e)
        return None


def worker_settings() -> dict | None:
    """The cache settings worker processes should use: this process's, or None when it has no cache.

    Returns
    -------
    dict or None
        ``{"dir": ..., "min_compile_time_secs": ..., "min_entry_size_bytes": ...}``.
    """
    import jax

    folder = compilation_cache_dir()
    if folder is None:
        return None
    return {"dir": folder, "min_compile_time_secs": float(jax.config.jax_persistent_cache_min_compile_time_secs),
            "min_entry_size_bytes": int(jax.config.jax_persistent_cache_min_entry_size_bytes)}


def use_in_worker(settings: dict) -> None:
    """Apply :func:`worker_settings` of the parent in a worker process (before it compiles)."""
    import jax

    _install_atomic_writes()
    jax.config.update("jax_compilation_cache_dir", settings["dir"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", settings["min_compile_time_secs"])
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", settings["min_entry_size_bytes"])


# --- whole-file writes -------------------------------------------------------------------------

def _atomic_cache_class():
    """The class of :func:`_install_atomic_writes`'s caches (made on first use: it subclasses JAX's
    internal ``CacheInterface``)."""
    from jax._src.compilation_cache_interface import CacheInterface

    class AtomicFileCache(CacheInterface):
        """JAX's file cache (``LRUCache`` without eviction) with each entry written to a temporary
        file and renamed into place, and file-system errors turned into misses."""

        def __init__(self, base):
            self._base = base
            self._path = base._path

        def get(self, key: str):
            try:
                return self._base.get(key)
            except OSError as e:  # unreadable, or removed between the check and the read
                logger.debug("bayestrees: compilation cache read of %s failed: %s", key, e)
                return None

        def put(self, key: str, value: bytes) -> None:
            if not key:
                raise ValueError("key cannot be empty")
            folder = Path(str(self._base.path))
            final = folder / f"{key}-cache"
            tmp = folder / f".{key}-cache.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
            try:
                if final.exists():  # one key, one program: the first writer's entry stays
                    return
                with open(tmp, "wb") as f:
                    f.write(value)
                os.replace(tmp, final)  # atomic: readers see no entry or a whole one
            except OSError as e:  # a full disk, a folder made read-only: no entry, and no error
                logger.debug("bayestrees: compilation cache write of %s failed: %s", key, e)
                try:
                    tmp.unlink()
                except OSError:
                    pass

    return AtomicFileCache


def _install_atomic_writes() -> bool:
    """Wrap JAX's ``get_file_cache`` so that a local cache folder without a size limit (JAX's
    default) gets whole-file writes; a folder with a size limit keeps JAX's own locked writes.

    Returns
    -------
    bool
        Whether the wrap is in place (False where this JAX version lacks the internals it wraps).
    """
    try:
        from jax._src import compilation_cache as jcc
        from jax._src import lru_cache

        original = jcc.get_file_cache
        local = lru_cache._is_local_filesystem
        atomic = _atomic_cache_class()
    except (ImportError, AttributeError) as e:  # pragma: no cover - another JAX version
        logger.debug("bayestrees: JAX's file cache is used as it is (%s)", e)
        return False
    if getattr(original, "_bayestrees_atomic", False):
        return True

    def get_file_cache(path):
        out = original(path)
        if out is not None and type(out[0]) is lru_cache.LRUCache and not out[0].eviction_enabled \
                and local(str(path)):
            out = (atomic(out[0]), out[1])
        return out

    get_file_cache._bayestrees_atomic = True
    get_file_cache.__wrapped__ = original
    jcc.get_file_cache = get_file_cache
    return True
