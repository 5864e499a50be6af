import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Free JAX's compiled programs after each test module.

    One process compiles thousands of programs over the suite (many data shapes and sampler
    settings); releasing them between modules keeps its memory maps bounded.
    """
    yield
    import jax

    jax.clear_caches()
