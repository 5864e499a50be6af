"""The Examples sections of the public API run, with the outputs they show.

Every public class and function of ``bayestrees`` (its ``__all__``) and every function of
``bayestrees.plots`` has an Examples section (``tests/test_docstrings.py`` checks that it is there);
here each one is run by the standard :mod:`doctest` module, one test per name, with ``bt``
(``bayestrees``) and ``np`` (NumPy) as globals.  The examples are written in reduced sizes (tens of
rows, a few trees or draws, one short chain), so the file takes seconds per family, most of it
compiling; they show shapes, types and names, never numbers that depend on floating-point details.
"""
import doctest
import inspect
import io

import jax
import numpy as np
import pytest

import bayestrees as bt
from bayestrees import compile_cache, plots

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _public() -> list[str]:
    names = [n for n in bt.__all__ if n != "__version__"
             and (inspect.isclass(getattr(bt, n)) or inspect.isfunction(getattr(bt, n)))]
    return names + [f"plots.{n}" for n in plots.__all__]


def _resolve(name: str):
    obj = bt
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.fixture
def jax_cache_settings():
    """Put JAX's persistent-cache settings back after an example that changes them (the
    compilation-cache functions), so later tests use the suite's cache as before."""
    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
            "jax_persistent_cache_min_entry_size_bytes")
    before = {k: getattr(jax.config, k) for k in keys}
    saved = dict(compile_cache._SAVED)
    yield
    from jax.experimental.compilation_cache import compilation_cache as cc

    for k, v in before.items():
        jax.config.update(k, v)
    compile_cache._SAVED.clear()
    compile_cache._SAVED.update(saved)
    cc.reset_cache()


@pytest.mark.filterwarnings("ignore::bayestrees.convergence.ConvergenceWarning")  # the runs are short
@pytest.mark.parametrize("name", _public())
def test_examples_run(name, jax_cache_settings, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything an example writes stays in a temporary folder
    if name.startswith("plots."):
        import matplotlib

        matplotlib.use("Agg")  # draw without a display
    obj = _resolve(name)
    finder = doctest.DocTestFinder(recurse=False)
    tests = [t for t in finder.find(obj, name=f"bayestrees.{name}", globs={"bt": bt, "np": np}) if t.examples]
    assert tests, f"bayestrees.{name} has no example to run"
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    out = io.StringIO()
    try:
        for t in tests:
            runner.run(t, out=out.write, clear_globs=True)
    finally:
        if name.startswith("plots."):
            import matplotlib.pyplot as plt

            plt.close("all")
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, f"bayestrees.{name}: {result.failed} example(s) failed\n{out.getvalue()}"


def test_no_example_is_skipped():
    """An example marked ``+SKIP`` would show an output nobody checks."""
    skipped = [name for name in _public()
               if "doctest: +SKIP" in (inspect.getdoc(_resolve(name)) or "")]
    assert not skipped, f"examples marked +SKIP: {skipped}"


def test_the_runner_reports_a_wrong_output():
    """The test above fails when an example's output is not what it shows."""
    def shows_a_wrong_output():
        """Summary.

        >>> np.zeros(3).shape
        (4,)
        """
    test = doctest.DocTestFinder().find(shows_a_wrong_output, globs={"np": np})[0]
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    runner.run(test, out=io.StringIO().write)
    assert runner.summarize(verbose=False).failed == 1
