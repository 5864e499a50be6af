"""Every script in ``benchmarks/`` imports: a moved module or a renamed function stops a benchmark at
its first line, which nothing else in the suite would see (the suite runs no benchmark).  The
scripts are imported, not run (each runs its work under ``if __name__ == "__main__"``), in a
subprocess, so that a script's module-level settings cannot reach the suite's process.  A script
may need a peer that is a benchmark-only install (bartz, stochtree, pymc-bart, Dask): missing, it
is reported, not failed."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: peers the benchmarks compare with, never dependencies of the package
PEERS = {"bartz", "stochtree", "pymc", "pymc_bart", "dask", "distributed", "pytensor"}

SCRIPT = r"""
import importlib.util, json, sys, pathlib
root = pathlib.Path("benchmarks")
sys.path.insert(0, str(root.resolve()))
out = {"ok": [], "missing": {}, "failed": {}}
for f in sorted(root.glob("*.py")):
    spec = importlib.util.spec_from_file_location("bench_" + f.stem, f)
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        out["ok"].append(f.name)
    except ModuleNotFoundError as e:
        out["missing"][f.name] = e.name
    except Exception as e:
        out["failed"][f.name] = repr(e)
print("RESULT " + json.dumps(out))
"""


def test_every_benchmark_script_imports():
    run = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and line, run.stderr[-2000:]
    out = json.loads(line[0][len("RESULT "):])
    assert not out["failed"], out["failed"]
    not_peers = {f: name for f, name in out["missing"].items() if name.split(".")[0] not in PEERS}
    assert not not_peers, not_peers
    assert len(out["ok"]) + len(out["missing"]) == len(list((ROOT / "benchmarks").glob("*.py")))
    assert len(out["ok"]) >= 30, out
