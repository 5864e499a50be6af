"""``benchmarks/mutations.py`` (the mutation table of the tree samplers) stays plantable: every planted
error's snippet occurs exactly once in its file, and every test it names exists.  A refactor that moves
one of those lines fails here, so the table is updated with the code rather than found stale."""
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _harness():
    spec = importlib.util.spec_from_file_location("mutations", ROOT / "benchmarks" / "mutations.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_planted_error_can_be_planted():
    mod = _harness()
    assert len(mod.MUTATIONS) >= 20
    assert mod.check_snippets(ROOT, mod.MUTATIONS) == []


def test_every_named_test_exists():
    for m in _harness().MUTATIONS:
        for node in m.tests:
            path, _, name = node.partition("::")
            source = (ROOT / path).read_text()
            if name:
                assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", source, re.M), (m.name, node)
