"""Random keys: one neutral home for turning a user's seed into a JAX key.

Every layer (inference, models, estimators, command line) imports
:func:`make_key` from here, so no layer reaches into another for it.
"""
from __future__ import annotations

import jax
import numpy as np

__all__ = ["make_key"]


def make_key(random_seed) -> jax.Array:
    """A PRNG key from ``None`` (fresh entropy), an int, a numpy Generator/RandomState or a JAX key.

    Parameters
    ----------
    random_seed : None, int, numpy.random.Generator, numpy.random.RandomState or jax key
        A typed JAX key is returned as is; a raw ``uint32[2]`` key is wrapped.

    Returns
    -------
    jax.Array
        A typed PRNG key (``jax.random.key``).
    """
    if isinstance(random_seed, jax.Array):
        if jax.dtypes.issubdtype(random_seed.dtype, jax.dtypes.prng_key):
            return random_seed
        if random_seed.shape == (2,) and random_seed.dtype == np.uint32:
            return jax.random.wrap_key_data(random_seed)
        raise ValueError(f"a JAX array seed must be a PRNG key or uint32[2] key data, got {random_seed.dtype}"
                         f"{tuple(random_seed.shape)}")
    if random_seed is None:
        random_seed = int(np.random.SeedSequence().generate_state(1)[0])
    elif isinstance(random_seed, np.random.Generator):
        random_seed = int(random_seed.integers(2**31 - 1))
    elif isinstance(random_seed, np.random.RandomState):
        random_seed = int(random_seed.randint(2**31 - 1))
    elif isinstance(random_seed, (bool, np.bool_)) or not isinstance(random_seed, (int, np.integer)):
        raise ValueError(f"random_seed must be None, an int, a numpy Generator or a JAX key, got {random_seed!r}")
    return jax.random.key(int(random_seed))
