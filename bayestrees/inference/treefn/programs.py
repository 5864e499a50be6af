"""The compiled programs of a model's chains, kept between fits.

Tracing, lowering and compiling (or loading from the persistent compilation cache) the chains of a
model with tree functions takes seconds, and a fit of a small model may run for less than that
(``docs/lab-notes/models.md``, "Programs kept between fits").
:func:`~bayestrees.inference.treefn.fit.sample_model` therefore
keeps the chains of its last few fits (:data:`CAPACITY`) with their programs, and a fit whose
programs would be the same runs those again.

"The same" is decided without tracing the sampler: two fits share programs when their
:func:`fingerprint` is equal, which holds

- the model as a program: the jaxpr of one run of the model (its sites' values and log densities,
  with the data as inputs under ``jit_data=True``, else as constants, compared by their bytes),
  and every site's name, kind and distribution, with the constant attributes of a tree function's
  distribution (its rule prior, cut tables, category masks) by value;
- the tree kernel's settings and the choices it made from the data (conjugate path, per-row
  precisions, particles, moves: :meth:`~bayestrees.inference.treefn.kernel.TreeMoves.settings_key`);
- NUTS's settings, the warm-up length, JAX's precision and backend.

So a second fit of the same model on new data of the same shapes (``jit_data=True``: a
replication, a re-fit, ``bt.set_data``), or on the same data with another seed, runs at once.  The
model is traced for the fingerprint at each fit, so a global value it reads (directly or in a
function it calls) enters with the value it has then, and a changed one gives another fingerprint.
A kept chain traces its programs again from the model of the fit that made it (after
``jax.clear_caches()``, or for a new number of draws), so a kept fit is used only while that model
still traces to its fingerprint: a model that closes over a value changed since is dropped.
:func:`clear_programs` frees the kept programs.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers

from .site import TreeEnsemble, stump_initialisation

__all__ = ["CAPACITY", "fingerprint", "lookup", "remember", "clear_programs"]

#: fits whose chains and programs are kept (the least recently used is dropped first)
CAPACITY = 8

_KEPT: OrderedDict = OrderedDict()
_LOCK = threading.Lock()


class _Unkeyed(Exception):
    """A value the fingerprint cannot describe: the fit keeps no programs."""


def _value_key(v, held: list):
    """A hashable description of ``v`` that is equal only for values a traced program cannot tell apart.

    Arrays by shape, dtype and bytes; Python scalars, strings and containers by value; a traced value
    as its type (it is an input of the program); any other object by identity (``held`` keeps it
    alive, so that its identity is not reused while the key is)."""
    if isinstance(v, jax.core.Tracer):
        return ("traced", str(v.aval))
    if isinstance(v, (np.ndarray, np.generic, jax.Array)):   # (a tracer was answered above)
        if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key):
            raise _Unkeyed("a key array")
        a = np.asarray(v)
        if a.dtype.hasobject:
            raise _Unkeyed("an array of Python objects")
        return ("array", a.shape, str(a.dtype), hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest())
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        return (type(v).__name__, v)
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(_value_key(x, held) for x in v)
    if isinstance(v, dict):
        return ("dict",) + tuple((str(k), _value_key(x, held)) for k, x in sorted(v.items(), key=lambda kv: str(kv[0])))
    if isinstance(v, (set, frozenset)):
        return (type(v).__name__,) + tuple(sorted(repr(_value_key(x, held)) for x in v))
    try:   # a value with an equality of its own (a frozen dataclass, a rule prior)
        if type(v).__eq__ is not object.__eq__:
            hash(v)
            return ("value", type(v).__module__, type(v).__qualname__, v)
    except TypeError:
        pass
    held.append(v)
    return ("object", type(v).__module__, type(v).__qualname__, id(v))


def _distribution_key(fn, held: list):
    """A site's distribution: its class, shapes, and (a tree function's) constant attributes by value."""
    key = (type(fn).__module__, type(fn).__qualname__, tuple(fn.batch_shape), tuple(fn.event_shape))
    if isinstance(fn, TreeEnsemble):
        key += tuple((k, _value_key(v, held)) for k, v in sorted(vars(fn).items()))
    base = fn
    while hasattr(base, "base_dist"):
        base = base.base_dist
        key += (type(base).__qualname__,)
    return key + (type(base.support).__qualname__,)


def _model_key(run_model, run_args, run_kwargs, traced: bool, held: list):
    """The model as a program: the jaxpr of one seeded run (every site's value, and every sample site's
    log density at it), its constants by value, and its sites' names, kinds and distributions.
    ``traced``: ``run_args`` are inputs of the programs (``jit_data=True``), else their constants."""
    sites = []

    def run(*data):
        with stump_initialisation():
            tr = handlers.trace(handlers.seed(run_model, jax.random.key(0))).get_trace(*data, **run_kwargs)
        out = []
        for name, s in tr.items():
            if s["type"] not in ("sample", "deterministic"):
                continue
            out.append(s["value"])
            entry = (name, s["type"], bool(s.get("is_observed")))
            if s["type"] == "sample":
                out.append(jnp.sum(s["fn"].log_prob(s["value"])))
                entry += (_distribution_key(s["fn"], held), _value_key(dict(s.get("infer") or {}), held))
            sites.append(entry)
        return out

    closed = jax.make_jaxpr(run)(*run_args) if traced else jax.make_jaxpr(lambda: run(*run_args))()
    consts = tuple(_value_key(c, held) for c in closed.consts)
    return str(closed.jaxpr), consts, tuple(sites)


def fingerprint(run_model, run_args, run_kwargs, traced: bool, moves, settings: tuple):
    """``(key, held)``: the key under which a fit's chains and programs are kept (module docstring), or
    ``None`` where some part of the fit cannot be described by value (its programs are then its own);
    ``held``, the objects the key names by identity.  ``traced``: the data are inputs of the programs
    (``jit_data=True``)."""
    held: list = []
    try:
        return (_model_key(run_model, tuple(run_args), dict(run_kwargs), traced, held), moves.settings_key(),
                _value_key(settings, held), bool(jax.config.jax_enable_x64), jax.default_backend(),
                jax.device_count()), held
    except Exception:  # noqa: BLE001 - a value that cannot be described (or a model that fails traced): not kept
        return None, held


def lookup(key, run_args, run_kwargs, traced: bool):
    """``(chain, programs)`` kept under ``key``, or ``None``; a kept fit whose own model no longer
    traces to ``key`` (at this fit's arguments, which ``key`` says are the same) is dropped."""
    if key is None:
        return None
    with _LOCK:
        hit = _KEPT.get(key)
    if hit is None:
        return None
    try:
        same = _model_key(hit[3], tuple(run_args), dict(run_kwargs), traced, []) == key[0]
    except Exception:  # noqa: BLE001 - the kept model fails now: not used
        same = False
    with _LOCK:
        if not same:
            _KEPT.pop(key, None)
            return None
        if key in _KEPT:
            _KEPT.move_to_end(key)
    return hit[:2]


def remember(key, chain, programs: dict, held: list, run_model) -> None:
    """Keep ``chain`` and its ``programs`` under ``key`` (``held``: the objects the key names by
    identity; ``run_model``: the model the chain traces)."""
    if key is None:
        return
    with _LOCK:
        _KEPT[key] = (chain, programs, held, run_model)
        _KEPT.move_to_end(key)
        while len(_KEPT) > CAPACITY:
            _KEPT.popitem(last=False)


def clear_programs() -> None:
    """Free the chains and compiled programs kept from earlier fits."""
    with _LOCK:
        _KEPT.clear()
