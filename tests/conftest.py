import contextlib
import os
import shutil
import tempfile

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

#: The suite compiles thousands of small programs and runs each for milliseconds, so most of its time
#: is XLA's compiler. Two flags cut that time, and change no result the tests check beyond float32
#: rounding:
#:
#: * LLVM's optimisation level 0 (XLA's own graph passes still run): the suite a third shorter on a
#:   2-core machine;
#: * XLA's CPU fusions emitted by the older IR emitter instead of the MLIR fusion emitters
#:   (``--xla_cpu_use_fusion_emitters=false``): with -O0, half the backend compile time again
#:   (records: ``docs/lab-notes/performance.md``). It is used only beside -O0: at XLA's default LLVM level
#:   it ran the compiler out of memory (``benchmarks/compile_flags.py``).
#:
#: The library itself runs at XLA's defaults; set ``BAYESTREES_TEST_XLA_OPT=default`` to test at them
#: too. Subprocesses that the tests start inherit the variable (``default_xla_env`` strips both flags).
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")


def _xla_accepts(flags: str) -> bool:
    """Whether this jaxlib's XLA knows ``flags`` (an unknown flag in ``XLA_FLAGS`` aborts the process)."""
    import subprocess
    import sys

    probe = "import jax, jax.numpy as jnp; jax.jit(lambda x: x + 1)(jnp.ones(2)).block_until_ready()"
    try:
        return subprocess.run([sys.executable, "-c", probe], env=dict(os.environ, XLA_FLAGS=flags),
                              capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


if os.environ.get("BAYESTREES_TEST_XLA_OPT", "0") != "default":
    _flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" not in _flags:
        _flags = f"{_flags} {TEST_XLA_FLAGS[0]}".strip()
    # only beside -O0 (a user's own optimisation level keeps the default emitter); the controller
    # probes once, and pytest-xdist workers and subprocesses inherit the outcome
    if (TEST_XLA_FLAGS[0] in _flags.split() and "xla_cpu_use_fusion_emitters" not in _flags
            and _xla_accepts(f"{_flags} {TEST_XLA_FLAGS[1]}")):
        _flags = f"{_flags} {TEST_XLA_FLAGS[1]}"
    os.environ["XLA_FLAGS"] = _flags

#: One on-disk JAX compilation cache for the whole run, unless the user set their own.  The pytest-xdist
#: workers and the subprocesses that tests start (the demo, the tutorials, the CLI, the worker pools)
#: inherit the variable, so a program compiled in one process is loaded by the others instead of being
#: compiled again.  It is made by the first process that loads this file (the controller) and removed
#: when that process ends its run.
#:
#: The library's own persistent cache (``bayestrees.compile_cache``: on by default, in the user's cache
#: folder) is never written by the tests: it leaves a folder given to JAX alone, and
#: ``BAYESTREES_COMPILATION_CACHE`` names the same folder for any process that drops JAX's variable.
#: (``tests/test_compile_cache.py`` checks the default set-up itself, in subprocesses with a temporary
#: ``XDG_CACHE_HOME``.)
SUITE_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    SUITE_CACHE = tempfile.mkdtemp(prefix="bayestrees-test-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = SUITE_CACHE
    os.environ["BAYESTREES_TEST_SUITE_CACHE"] = SUITE_CACHE
    # every program, however quick to compile: the small ones (the set-up, the summaries, the eager
    # operations) are compiled once per process otherwise (threshold 0 against 0.3 s: four estimator
    # files on 2 processes 148-149 s against 162-165 s, docs/lab-notes/performance.md)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("BAYESTREES_COMPILATION_CACHE", os.environ.get("JAX_COMPILATION_CACHE_DIR") or "0")


def pytest_unconfigure(config):
    _LEVEL_BLOCK.close()
    if SUITE_CACHE is not None:
        shutil.rmtree(SUITE_CACHE, ignore_errors=True)


#: The longest test files, longest first.  pytest-xdist's ``--dist loadfile`` hands out one file at a
#: time to each process as it becomes free; starting the long ones first keeps one of them from
#: being the last file left running while the other process idles (the greedy longest-first rule).
#: pytest-xdist 3.x reorders the files by their number of tests unless told not to
#: (``--loadscope-reorder``, on by default), which put the long files with few tests (the tutorials,
#: the command line, the float64 fits) anywhere, often last: :func:`pytest_configure` turns that off,
#: so the order below is the one the processes take.
#: ``BAYESTREES_FULL_TESTS=1`` also runs the tests marked ``full_only``: slow variants of non-default
#: kernels whose parts each have their own exactness test in the default run, and the further data
#: seeds of the exactness tests at the default lengths (the suite runs one or two of each).  Each
#: passed in the whole suite before it was marked (the list and the reasons:
#: ``docs/lab-notes/performance.md``).
FULL_TESTS = os.environ.get("BAYESTREES_FULL_TESTS", "0") not in ("", "0")


def pytest_configure(config):
    config.addinivalue_line("markers", "full_only: runs only with BAYESTREES_FULL_TESTS=1 (slow variants)")
    config.addinivalue_line("markers", "long_chains: a module of long chains, compiled at LLVM level 1 (conftest.LONG_CHAINS_LLVM_LEVEL)")
    config.addinivalue_line("markers", "compile_bound: a test of a long_chains module that compiles more than it runs: "
                                       "compiled at the suite's level")
    if getattr(config.option, "loadscopereorder", None):  # pytest-xdist: keep the order of LONG_FILES
        config.option.loadscopereorder = False


def pytest_runtest_setup(item):
    if item.get_closest_marker("full_only") is not None and not FULL_TESTS:
        pytest.skip("a slow variant: set BAYESTREES_FULL_TESTS=1 to run it")



LONG_FILES = (  # longest first, so that two processes end together; seconds per file from a run of the
               # whole suite (2 processes on a 2-core box, nothing else running; the record is in
               # docs/lab-notes/performance.md); the rest, under 27 s each, in collection order
              "test_treefn_exact.py",  # about 499 s (the one-tree cases at the default lengths, 2 sampler seeds each)
              "test_tutorials.py",  # about 240 s (one fixture: every tutorial's quick run, in a subprocess)
              "test_bcf_api.py",  # about 149 s
              "test_treefn_api.py",  # about 135 s
              "test_doc_examples.py",  # about 111 s
              "test_bcf_exact.py",  # about 111 s
              "test_bart_categories.py",  # about 96 s
              "test_sklearn_compat.py",  # about 96 s (each MCMC estimator's check compiles anew)
              "test_treefn_categories.py",  # about 95 s
              "test_bcart_sampler.py",  # about 95 s
              "test_bart_sampler.py",  # about 81 s
              "test_bart_rows.py",  # about 77 s (one subprocess with four CPU devices)
              "test_results_unchanged.py",  # about 76 s
              "test_cli.py",  # about 68 s
              "test_bart_multiclass.py",  # about 59 s
              "test_bart_missing.py",  # about 59 s
              "test_treefn_missing.py",  # about 57 s
              "test_sampler_exactness.py",  # about 52 s
              "test_contract.py",  # about 52 s
              "test_distributed.py",  # about 44 s
              "test_treefn_jit_data.py",  # about 44 s
              "test_safebayes.py",  # about 38 s
              "test_bart_api.py",  # about 36 s
              "test_save_load.py",  # about 32 s
              "test_new_rows.py",  # about 32 s
              "test_bcart_api.py",  # about 31 s
              "test_workers.py",  # about 30 s
              "test_pcfg.py",  # about 29 s
              "test_predict_interval.py",  # about 29 s
              "test_float64_mcmc.py")  # about 28 s


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)), len(LONG_FILES)))

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def every_program_cached():
    """The persistent compilation cache keeps every program while the test runs (so that a test can
    check that a second fit compiles nothing); skipped where the process has no such cache."""
    import jax

    from bayestrees.compile_cache import compilation_cache_dir

    if compilation_cache_dir() is None:
        pytest.skip("no persistent compilation cache in this process")
    saved = (jax.config.jax_persistent_cache_min_compile_time_secs,
             jax.config.jax_persistent_cache_min_entry_size_bytes)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    yield
    jax.config.update("jax_persistent_cache_min_compile_time_secs", saved[0])
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", saved[1])


@pytest.fixture(scope="session")
def default_xla_env():
    """The environment for a subprocess compiled at XLA's defaults (without the suite's ``TEST_XLA_FLAGS``;
    a dict shared by the tests that ask for it: copy it before changing it).

    For checks whose time is spent running a compiled sampler rather than compiling it: there the
    default level is the faster one (the particle Gibbs exact-posterior check: 85 s -> 39 s).
    """
    import re

    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "")
    for flag in TEST_XLA_FLAGS:
        flags = re.sub(rf"{flag.split('=')[0]}=\S+", "", flags)
    env["XLA_FLAGS"] = " ".join(flags.split())
    return env


_CALL_SCRIPT = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
module = __import__(sys.argv[2])
a = json.loads(sys.argv[3])
out = a.pop("out")
np.savez(out, **getattr(module, sys.argv[4])(**a))
"""


@pytest.fixture
def in_default_xla_process(tmp_path, default_xla_env):
    """``call(test_file, name, **kwargs)``: the function ``name`` of the test module ``test_file`` (its
    ``__file__``) called with ``kwargs`` (JSON) in a fresh process at XLA's defaults
    (:func:`default_xla_env`); the function returns a dict of arrays, which comes back through a file."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    def call(test_file, name: str, **kwargs) -> dict:
        path = Path(test_file).resolve()
        out = tmp_path / f"{path.stem}.{name}.npz"
        res = subprocess.run([sys.executable, "-c", _CALL_SCRIPT, str(path.parent), path.stem,
                              json.dumps(dict(kwargs, out=str(out))), name],
                             capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1],
                             env=default_xla_env, timeout=900)
        assert res.returncode == 0, res.stderr[-4000:]
        with np.load(out) as z:
            return {k: z[k] for k in z.files}

    return call


def _memory_maps() -> int:
    """Memory maps of this process (Linux); 0 where /proc is not there."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


#: release compiled programs past this many memory maps (the kernel's default limit is 65,530)
MAX_MAPS = 30_000


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Free JAX's compiled programs after a test module when the process holds many memory maps.

    One process compiles thousands of programs over the suite (many data shapes and sampler
    settings), and each compiled program is mapped into memory; past the kernel's limit of
    65,530 maps, XLA crashes while compiling.  Releasing only when the count is high keeps
    programs that later modules reuse (releasing after every module made the suite compile
    the shared shapes again).
    """
    yield
    if _memory_maps() > MAX_MAPS:
        import jax

        jax.clear_caches()


#: LLVM's optimisation level for the programs compiled by the test modules marked ``long_chains``
#: (``pytestmark``).  Those run long chains of small samplers, so their time goes to running compiled
#: programs more than to compiling them: at level 1 a one-tree function's fit at the default lengths
#: ran in 4.1-4.5 s against 7.0-7.4 s at level 0, for somewhat more compile time
#: (``docs/lab-notes/performance.md``).  The whole suite at level 1 was much slower (its thousands
#: of short programs compile longer), and so were files that compile more than they run, so the
#: level is raised for the marked modules alone; ``BAYESTREES_TEST_LONG_CHAINS_LLVM=0`` keeps them
#: at the suite's level.
LONG_CHAINS_LLVM_LEVEL = int(os.environ.get("BAYESTREES_TEST_LONG_CHAINS_LLVM", "1"))


@contextlib.contextmanager
def llvm_level(level: int):
    """Programs compiled inside the block at LLVM optimisation ``level`` (the other XLA flags kept).

    XLA's debug options are set per compilation (``xla_backend_optimization_level`` is one of them,
    and part of the persistent cache's key); JAX builds them in ``jax._src.compiler.get_compile_options``,
    which this wraps for the block.  Where that function is not there (another JAX), the block runs
    as it is.  JAX's in-memory caches are cleared on entry and on exit, so that no program compiled
    at one level runs at the other: the bit-identity guard (``test_results_unchanged.py``) compares
    against a record made at the suite's level.
    """
    import jax

    try:
        from jax._src import compiler
        original = compiler.get_compile_options
    except (ImportError, AttributeError):
        yield
        return

    def options(*args, **kwargs):
        opts = original(*args, **kwargs)
        opts.executable_build_options.debug_options.xla_backend_optimization_level = level
        return opts

    jax.clear_caches()
    compiler.get_compile_options = options
    try:
        yield
    finally:
        compiler.get_compile_options = original
        jax.clear_caches()


#: the LLVM level this process compiles at now (``None``: the suite's), and the ``llvm_level`` block
#: that holds it, left when a test wants another level or when the run ends
_LEVEL = {"level": None}
_LEVEL_BLOCK = contextlib.ExitStack()


def _compile_at(level):
    if level != _LEVEL["level"]:
        _LEVEL_BLOCK.close()
        if level is not None:
            _LEVEL_BLOCK.enter_context(llvm_level(level))
        _LEVEL["level"] = level


@pytest.fixture(autouse=True)
def _long_chains_optimised(request):
    """A test of a module marked ``long_chains`` compiles at :data:`LONG_CHAINS_LLVM_LEVEL` when the suite
    runs at LLVM level 0, unless it is marked ``compile_bound`` (a prior check or a short scan in such a
    module: at level 1 the three cached-log-density cases of ``test_treefn_exact.py`` took 56 s against
    20 s, ``docs/lab-notes/performance.md``).  The level changes only between tests that want different
    ones, so a module's tests share their in-memory programs."""
    long = (request.node.get_closest_marker("long_chains") is not None
            and request.node.get_closest_marker("compile_bound") is None)
    raise_level = (long and LONG_CHAINS_LLVM_LEVEL > 0
                   and "--xla_backend_optimization_level=0" in os.environ.get("XLA_FLAGS", "").split())
    _compile_at(LONG_CHAINS_LLVM_LEVEL if raise_level else None)
    yield
