"""No hidden global state: importing or fitting changes no process-wide setting, and the state the
library keeps (worker pool, prior-forest cache) is owned by objects with an explicit ``close()``.

The one documented exception: ``import bayestrees`` gives JAX a persistent compilation cache folder
when JAX has none (``bayestrees.compile_cache``; ``BAYESTREES_COMPILATION_CACHE=0`` or
``bt.set_compilation_cache(False)`` turns it off; ``tests/test_compile_cache.py``)."""
import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

_LIST_MODULES = """
import json, sys
import bayestrees
print(json.dumps([m for m in list(sys.modules) if m.split('.')[0] != 'bayestrees']))
"""

_COMPARE_FILTERS = """
import importlib, json, sys, warnings
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except BaseException:
        pass
before = list(warnings.filters)
import bayestrees
after = list(warnings.filters)
print(json.dumps({"same": after == before, "added": [repr(f) for f in after if f not in before]}))
"""


def _python(code, *args):
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_bayestrees_sets_no_warning_filter():
    # the third-party modules bayestrees loads are imported first (some of them, numpy and scipy
    # among them, add filters of their own); importing bayestrees itself must then add none
    deps = _python(_LIST_MODULES)
    res = _python(_COMPARE_FILTERS, json.dumps(deps))
    assert res["same"], res["added"]


def _branch(dtype):
    from bayestrees.distributed.branch_fit import BranchSpec, fit_branch
    from bayestrees.inference.forest.cart import CARTConfig

    r = np.random.default_rng(0)
    codes = r.integers(0, 20, (40, 3)).astype(np.uint8)
    y = r.normal(size=40)
    key = tuple(np.asarray(jax.random.key_data(jax.random.key(0))).tolist())
    spec = BranchSpec(cart=CARTConfig(min_samples_leaf=5), n_trees=2, weights="exponential", key_data=key,
                      y_shift=0.0, y_scale=1.0, dtype=dtype, task="regression")
    return fit_branch(codes, y, np.arange(40, dtype=np.int64) * 3, spec)


def test_a_float64_branch_fit_does_not_turn_on_x64():
    if jax.config.jax_enable_x64:
        pytest.skip("64-bit JAX is already on in this process")
    t = _branch("float64")
    assert not jax.config.jax_enable_x64  # the process-wide setting is untouched
    assert t.value.dtype == np.float64 and t.weight.dtype == np.float64  # yet the fit ran in float64
    assert _branch("float32").value.dtype == np.float32 and not jax.config.jax_enable_x64


def test_the_prior_forest_cache_is_an_object_with_an_idempotent_close():
    from bayestrees.inference.safebayes import prior_trees as pt

    key = jax.random.key(3)
    cache = pt.PriorForestCache(maxsize=2)
    a = cache.get(key, 2, 3, max_internal=7)
    assert cache.get(key, 2, 3, max_internal=7) is a and len(cache) == 1  # memoised
    cache.get(jax.random.key(4), 2, 3, max_internal=7)
    cache.get(jax.random.key(5), 2, 3, max_internal=7)
    assert len(cache) == 2  # least recently used out
    cache.close()
    assert len(cache) == 0
    cache.close()  # idempotent
    b = cache.get(key, 2, 3, max_internal=7)  # usable again, the same draw
    assert b is not a and all(np.array_equal(u, v) for u, v in zip(jax.tree_util.tree_leaves(a),
                                                                    jax.tree_util.tree_leaves(b)))
    # the module-level default, used by every safe-Bayes fit, is reachable and closable
    default = pt.default_prior_cache()
    c = pt.cached_prior_forest(key, 2, 3, max_internal=7)
    assert pt.cached_prior_forest(key, 2, 3, max_internal=7) is c and len(default) >= 1
    pt.clear_prior_cache()
    assert len(default) == 0
    pt.clear_prior_cache()
    assert pt.cached_prior_forest(key, 2, 3, max_internal=7) is not c
