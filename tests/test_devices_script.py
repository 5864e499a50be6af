"""The device check's plumbing (``benchmarks/devices.py``), at its tiny sizes on the CPU: a workload in
a process of its own, one JSON line per workload, the table beside them, and the time budget."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "devices.py"


def _run(tmp_path, *args):
    out = tmp_path / "devices.jsonl"
    r = subprocess.run([sys.executable, str(SCRIPT), "--suite", "tiny", "--out", str(out), *args],
                       capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(line) for line in out.read_text().splitlines()], out.with_suffix(".md").read_text()


def test_a_workload_and_its_peer_are_measured_and_tabled(tmp_path):
    records, table = _run(tmp_path, "--only", "pcfg")
    (rec,) = records
    assert rec["workload"] == "pcfg" and rec["suite"] == "tiny" and "error" not in rec, rec
    assert rec["ours"]["s"] > 0 and rec["peer"]["s"] > 0 and rec["device"].startswith("cpu")
    # ours: log p(y | X); the recursion's: its unnormalised log Q over the same boxes (both finite, negative)
    assert -1e4 < rec["ours"]["value"] < 0 and -1e4 < rec["peer"]["value"] < 0
    assert "BCART-PCFG, Iris at 3 bins" in table and rec["device"] in table


def test_a_spent_budget_starts_nothing_and_says_so(tmp_path):
    records, table = _run(tmp_path, "--suite", "accelerator", "--budget", "0")
    assert [r["workload"] for r in records][:3] == ["bart", "treefn", "pcfg"]   # never-measured families first
    assert len(records) == 9 and all(r["error"].startswith("not run") for r in records)
    assert table.count("not run") == 9
