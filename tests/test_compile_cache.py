"""The persistent compilation cache (``bayestrees.compile_cache``): on by default in the user's cache
folder, off or moved by ``BAYESTREES_COMPILATION_CACHE`` or :func:`bayestrees.set_compilation_cache`,
a folder the user gave JAX left alone, and whole-file writes that several processes can share.

The suite itself runs with a temporary cache folder given to JAX (``tests/conftest.py``); the tests
here that change this process's cache put it back afterwards.
"""
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayestrees as bt
from bayestrees import compile_cache

ROOT = Path(__file__).resolve().parents[1]

_SETTINGS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes", "jax_enable_compilation_cache")


@pytest.fixture
def own_cache():
    """Lets a test change this process's JAX cache settings, and puts them back (the suite's folder)."""
    from jax.experimental.compilation_cache import compilation_cache as cc

    saved = {name: getattr(jax.config, name) for name in _SETTINGS}
    yield
    for name, value in saved.items():
        jax.config.update(name, value)
    cc.reset_cache()


def _env(tmp_path, **extra):
    """A child's environment: no cache folder given to JAX, and a user cache folder under ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if k not in (
        "JAX_COMPILATION_CACHE_DIR", "BAYESTREES_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), HOME=str(tmp_path / "home"), PYTHONWARNINGS="ignore", **extra)
    return env


_IMPORT = """
import json, os, jax, jax.numpy as jnp
import bayestrees as bt
folder = bt.compilation_cache_dir()
jax.jit(lambda x: x * 3.0 - 1.0)(jnp.arange(5.0)).block_until_ready()
print(json.dumps({"folder": folder, "entries": sorted(os.listdir(folder)) if folder else []}))
"""


def test_the_default_cache_is_on_in_the_user_cache_folder(tmp_path):
    # the real import path, in a fresh process whose JAX has no folder of its own
    p = subprocess.run([sys.executable, "-c", _IMPORT], cwd=ROOT, capture_output=True, text=True,
                       env=_env(tmp_path), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    if sys.platform != "darwin" and os.name != "nt":
        assert out["folder"] == str(tmp_path / "xdg" / "bayestrees" / "jax")
    assert any(e.endswith("-cache") for e in out["entries"])  # the program compiled there


def test_the_variable_turns_it_off_or_moves_it_and_a_folder_given_to_jax_stays(tmp_path, monkeypatch, own_cache):
    # what import runs (compile_cache.setup_default), first with the suite's folder given to JAX
    suite = jax.config.jax_compilation_cache_dir
    assert suite and compile_cache.setup_default() == suite  # the user's folder is used as it is
    assert jax.config.jax_compilation_cache_dir == suite
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the default folder, never the real one
    cases = [("0", None), ("off", None), (str(tmp_path / "mine"), str(tmp_path / "mine"))]
    if sys.platform != "darwin" and os.name != "nt":
        assert compile_cache.default_cache_dir() == tmp_path / "xdg" / "bayestrees" / "jax"
        cases += [("1", str(tmp_path / "xdg" / "bayestrees" / "jax")), ("", str(tmp_path / "xdg" / "bayestrees" / "jax"))]
    for value, expected in cases:
        bt.set_compilation_cache(False)  # as in a process whose JAX has no folder
        monkeypatch.setenv(compile_cache.ENV_VAR, value)
        assert compile_cache.setup_default() == expected, value
        assert bt.compilation_cache_dir() == expected, value


def test_set_compilation_cache_sets_moves_and_turns_off_the_folder(tmp_path, monkeypatch, own_cache):
    monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", raising=False)  # the suite's threshold
    folder = tmp_path / "cache"
    assert bt.set_compilation_cache(folder) == str(folder)
    assert bt.compilation_cache_dir() == str(folder) == jax.config.jax_compilation_cache_dir
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0  # small programs too
    jax.jit(lambda x: x * 7.0 + 0.25)(jnp.arange(3.0)).block_until_ready()
    assert any(f.endswith("-cache") for f in os.listdir(folder))  # written there
    assert not [f for f in os.listdir(folder) if f.endswith(".tmp")]  # renamed into place
    assert bt.set_compilation_cache(False) is None and bt.compilation_cache_dir() is None
    before = set(os.listdir(folder))
    jax.jit(lambda x: x * 11.0 + 0.5)(jnp.arange(3.0)).block_until_ready()
    assert set(os.listdir(folder)) == before  # off: nothing more written
    # a folder that cannot be made: no cache, no error
    (tmp_path / "file").write_text("not a folder")
    assert bt.set_compilation_cache(tmp_path / "file" / "cache") is None
    assert bt.compilation_cache_dir() is None
    with pytest.raises(TypeError, match="True, False or a folder"):
        bt.set_compilation_cache(3)


def test_an_entry_is_never_seen_half_written(tmp_path):
    """A reader polling while entries are written sees no entry or a whole one (temporary file, then rename)."""
    from jax._src.lru_cache import LRUCache

    assert compile_cache._install_atomic_writes()
    cache = compile_cache._atomic_cache_class()(LRUCache(str(tmp_path), max_size=-1))
    values = {f"k{i}": bytes([i]) * (4 << 20) for i in range(12)}
    seen, done = [], threading.Event()

    def read():
        while not done.is_set():
            for key, value in values.items():
                got = cache.get(key)
                if got is not None:
                    seen.append(got == value)

    t = threading.Thread(target=read)
    t.start()
    for key, value in values.items():
        cache.put(key, value)
    done.set()
    t.join()
    assert seen and all(seen)
    assert sorted(os.listdir(tmp_path)) == sorted(f"{k}-cache" for k in values)
    cache.put("k0", b"other")  # one key, one program: the first entry stays
    assert cache.get("k0") == values["k0"]


_WRITER = """
import json, sys, time, warnings
import importlib.util
warnings.simplefilter("always")
spec = importlib.util.spec_from_file_location("bt_compile_cache", sys.argv[1])
cc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cc)
import jax, jax.numpy as jnp
cc.use_in_worker({"dir": sys.argv[2], "min_compile_time_secs": 0.0, "min_entry_size_bytes": -1})
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
def make(k):  # twelve different programs (k is a constant of each)
    return jax.jit(lambda x: jnp.sin(x * k) + jnp.cumsum(x) * k)
funcs = [make(k) for k in range(12)]
print("ready", flush=True)
sys.stdin.readline()  # both processes start compiling at once
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    for f in funcs:
        f(jnp.arange(64.0)).block_until_ready()
    sys.stdout.write("done\\n"); sys.stdout.flush()
    sys.stdin.readline()  # then load everything back from the folder both wrote
    jax.clear_caches()
    events.clear()
    for f in funcs:
        f(jnp.arange(64.0)).block_until_ready()
print(json.dumps({"warnings": [str(x.message) for x in w],
                  "hits": events.count("/jax/compilation_cache/cache_hits")}))
"""


def test_two_processes_writing_one_cache_at_once(tmp_path):
    folder = tmp_path / "shared"
    module = str(ROOT / "bayestrees" / "compile_cache.py")
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, module, str(folder)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
             for _ in range(2)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()[-2000:]
    for p in procs:  # go
        p.stdin.write("\n")
        p.stdin.flush()
    for p in procs:
        assert p.stdout.readline().strip() == "done", p.stderr.read()[-2000:]
    for p in procs:  # both have written: now each loads every program from the folder
        p.stdin.write("\n")
        p.stdin.flush()
    results = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-2000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    for r in results:
        assert not [w for w in r["warnings"] if "compilation cache" in w], r["warnings"]
        assert r["hits"] >= 12  # every program loaded whole, whichever process wrote it
    names = os.listdir(folder)
    assert not [n for n in names if n.endswith(".tmp")]
    assert len([n for n in names if n.startswith("jit__lambda")]) == 12
