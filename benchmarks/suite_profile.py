"""Where the test suite's time goes: compilation and running, per test file.

A pytest plugin and its summary.  As a plugin it registers a ``jax.monitoring`` listener in every
test process (pytest-xdist's workers load it too) and adds, to the test that is running, JAX's
tracing, lowering to MLIR and backend (XLA) compile durations and the persistent compilation
cache's hits, misses and load time; each process writes its totals per test as JSON into
``BAYESTREES_SUITE_PROFILE_DIR`` when it ends.  Subprocesses that tests start (the tutorials, the
command line, the four-device BART test) are not profiled: their time shows as the test's wall time.

Run from the repository root::

    BAYESTREES_SUITE_PROFILE_DIR=profile PYTHONPATH=benchmarks \\
        python -m pytest -q -p suite_profile -n 2 --dist loadfile tests
    python benchmarks/suite_profile.py profile            # the table by file
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import time
from pathlib import Path

import pytest

_EVENTS = {"jaxpr_trace_duration": "trace", "jaxpr_to_mlir_module_duration": "lower",
           "backend_compile_duration": "backend", "cache_retrieval_time_sec": "cache_load"}
_COUNTS = {"cache_hits": "hits", "cache_misses": "misses"}
_current = ["(outside a test)"]
_totals: dict = collections.defaultdict(lambda: collections.defaultdict(float))


def _duration(event: str, seconds: float, **_):
    key = _EVENTS.get(event.rsplit("/", 1)[-1])
    if key is not None:
        _totals[_current[0]][key] += seconds


def _count(event: str, **_):
    key = _COUNTS.get(event.rsplit("/", 1)[-1])
    if key is not None:
        _totals[_current[0]][key] += 1


def pytest_configure(config):
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_duration)
    jax.monitoring.register_event_listener(_count)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = item.nodeid
    t0 = time.perf_counter()
    yield
    _totals[item.nodeid]["wall"] += time.perf_counter() - t0


def pytest_unconfigure(config):
    out = Path(os.environ.get("BAYESTREES_SUITE_PROFILE_DIR", "suite-profile"))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"process-{os.getpid()}.json").write_text(json.dumps(_totals))


def summarize(folder: Path, top: int = 40) -> str:
    """The table by test file (seconds summed over its tests), largest wall time first."""
    per: dict = collections.defaultdict(collections.Counter)
    for f in sorted(folder.glob("process-*.json")):
        for nodeid, events in json.loads(f.read_text()).items():
            per[nodeid.split("::")[0]].update(events)
    total = collections.Counter()
    for events in per.values():
        total.update(events)
    cols = ("wall", "backend", "lower", "trace", "cache_load", "hits", "misses")
    lines = [f"{'file':58s} " + " ".join(f"{c:>10s}" for c in cols)]
    for name, events in sorted(per.items(), key=lambda kv: -kv[1]["wall"])[:top]:
        lines.append(f"{name:58s} " + " ".join(f"{events[c]:10.0f}" for c in cols))
    lines.append(f"{'(all)':58s} " + " ".join(f"{total[c]:10.0f}" for c in cols))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="BAYESTREES_SUITE_PROFILE_DIR of the run")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    print(summarize(args.folder, args.top))


if __name__ == "__main__":
    main()
