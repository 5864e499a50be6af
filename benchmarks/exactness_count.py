"""Count the suite's tests that check a sampler against an exact answer or a calibration.

The count the suite-time work must not lower: tests collected by ``pytest --collect-only`` (the
default run, so ``full_only`` tests left out) whose node id (file and test name, parameters
included) names an exact referee: exact, enumeration, quadrature, closed form, calibration, SBC,
ranks, prior reproduction, invariance.

    python benchmarks/exactness_count.py            # the count, and the default run's test count
    python benchmarks/exactness_count.py --list     # and the tests counted

Run from the repository root.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: what a counted test's node id contains (lower case)
WORDS = ("exact", "enumerat", "quadrature", "closed", "calibrat", "sbc", "rank", "reproduc", "invarian")

PLUGIN = '''
import os, pytest
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    with open(os.environ["EXACTNESS_COUNT_OUT"], "w") as f:
        for it in items:
            marks = sorted({m.name for m in it.iter_markers()})
            f.write(f"{it.nodeid}\\t{','.join(marks)}\\n")
'''


def collected(root: Path) -> list[tuple[str, set]]:
    """``(node id, marker names)`` of every test the default run collects."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "exactness_collect.py").write_text(PLUGIN)
        out = Path(tmp) / "items.tsv"
        env = dict(os.environ, EXACTNESS_COUNT_OUT=str(out),
                   PYTHONPATH=os.pathsep.join([tmp, str(root), os.environ.get("PYTHONPATH", "")]))
        env.pop("BAYESTREES_FULL_TESTS", None)
        subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "exactness_collect",
                        "-p", "no:cacheprovider", "tests"], cwd=root, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        rows = [line.rstrip("\n").split("\t") for line in out.read_text().splitlines()]
    return [(nid, set(marks.split(",")) - {""}) for nid, marks in rows]


def counted(items) -> list[str]:
    """The node ids that name an exact referee, ``full_only`` tests left out."""
    return [nid for nid, marks in items if "full_only" not in marks and any(w in nid.lower() for w in WORDS)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the tests counted")
    args = parser.parse_args(argv)
    items = collected(Path.cwd())
    default = [nid for nid, marks in items if "full_only" not in marks]
    exact = counted(items)
    if args.list:
        print("\n".join(exact))
    print(f"exactness tests in the default run: {len(exact)} (of {len(default)} tests; {len(items)} with full_only)")


if __name__ == "__main__":
    main()
