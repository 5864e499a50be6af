"""Every tutorial in ``tutorials/`` runs in its reduced mode and writes the figures it announces.

The tutorials run one after another in one subprocess (``BAYESTREES_TUTORIAL_QUICK=1``), each
with :func:`runpy.run_path` as ``__main__``, so the interpreter start, the imports and the compiled
programmes that several tutorials share are paid once. JAX's persistent compilation cache is the
suite's own when ``conftest.py`` made one (programs the other tests compiled are loaded, not
compiled again), else pytest's cache folder, so later runs of the suite skip most of the
compilation.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "tutorials"
NAMES = ["forests", "pcfg", "safebayes", "bcart", "compare", "bart", "models", "causal"]
if (TUTORIALS / "bet.py").exists():
    NAMES.append("bet")

RUNNER = r"""
import contextlib, io, json, runpy, sys, time, traceback
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
status = {}
for path in sys.argv[2:]:
    name = Path(path).stem
    buf = io.StringIO()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(buf):
            runpy.run_path(path, run_name="__main__")
        status[name] = {"ok": True}
    except BaseException:
        status[name] = {"ok": False, "error": traceback.format_exc()[-3000:]}
    plt.close("all")
    status[name].update(stdout=buf.getvalue(), seconds=time.perf_counter() - t0)
Path(sys.argv[1]).write_text(json.dumps(status))
"""


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, request):
    out = tmp_path_factory.mktemp("tutorials")
    cache = getattr(request.config, "cache", None)
    # the suite's own cache (a user's JAX_COMPILATION_CACHE_DIR is left alone: the runner writes even
    # programs that compile in no time)
    jax_cache = os.environ.get("BAYESTREES_TEST_SUITE_CACHE") or (
        cache.mkdir("bayestrees-jax-cache") if cache is not None else out / "jax-cache")
    env = dict(os.environ, BAYESTREES_TUTORIAL_QUICK="1", BAYESTREES_TUTORIAL_OUT=str(out), MPLBACKEND="Agg",
               JAX_COMPILATION_CACHE_DIR=str(jax_cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0", PYTHONWARNINGS="ignore")
    status_file = out / "status.json"
    r = subprocess.run([sys.executable, "-c", RUNNER, str(status_file), *[str(TUTORIALS / f"{n}.py") for n in NAMES]],
                       env=env, cwd=str(out), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and status_file.exists(), r.stderr[-3000:]
    return out, json.loads(status_file.read_text())


@pytest.mark.parametrize("name", NAMES)
def test_tutorial_runs_and_writes_its_figures(quick_run, name):
    out, status = quick_run
    st = status[name]
    assert st["ok"], st.get("error")
    announced = [Path(line.split("figure: ", 1)[1].strip()) for line in st["stdout"].splitlines()
                 if line.startswith("figure: ")]
    assert len(announced) >= 2, st["stdout"][-2000:]
    written = sorted((out / name).glob("*.png"))
    assert sorted(announced) == written
    for png in written:
        assert png.stat().st_size > 10_000, png  # a real figure, not an empty canvas


def test_tutorials_are_percent_scripts_that_explain_themselves():
    for name in NAMES:
        text = (TUTORIALS / f"{name}.py").read_text()
        assert text.startswith("# %% [markdown]"), name
        assert text.count("# %%") >= 4, name
        assert "BAYESTREES_TUTORIAL_QUICK" in text, name
