"""Every public name of ``bayestrees`` (its ``__all__``) has a docstring with a summary line;
every public class and function that takes parameters documents them in a numpydoc "Parameters"
section (one entry per parameter; ``name : type`` or ``a, b : type`` lines); every public function
says what it returns in a "Returns" section (``None`` included), as do the estimators' ``fit`` and
``predict*`` methods, with their parameters; and every public class and function has an "Examples"
section with at least one ``>>>`` line (``tests/test_doc_examples.py`` runs them).

The API reference of the documentation site (``docs/site/api``) is generated from these docstrings.
A name that fails a check for a known reason may be listed in a ``KNOWN_*`` set, which marks its
test ``xfail(strict=True)``: the check is not loosened for it, and a fix makes its test pass
unexpectedly, which fails until the name is taken off the list.  No name is listed today.
"""
import inspect
import re

import pytest

import bayestrees

#: public names whose docstrings still lack what the tests ask, by test (none today)
KNOWN_NO_SECTION: set[str] = set()
KNOWN_UNDOCUMENTED: set[str] = set()
KNOWN_NO_RETURNS: set[str] = set()
KNOWN_NO_EXAMPLES: set[str] = set()

NAMES = [name for name in bayestrees.__all__ if name != "__version__"]
_SECTION = re.compile(r"^([A-Z][\w ]*)\n-{3,}[ \t]*$", re.M)
_ENTRY = re.compile(r"^(\*{0,2}[A-Za-z_][\w]*(?:\s*,\s*\*{0,2}[A-Za-z_]\w*)*)\s*(?::.*)?$")


def _sections(doc: str) -> dict:
    found = list(_SECTION.finditer(doc))
    return {m.group(1).strip(): doc[m.end():(found[i + 1].start() if i + 1 < len(found) else len(doc))]
            for i, m in enumerate(found)}


def _parameters(obj) -> list[str]:
    """The named parameters of a class's constructor or a function (not ``self``, ``*args``, ``**kw``)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values()
            if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _documented(section: str) -> set[str]:
    names = set()
    for line in section.splitlines():
        if line and not line[0].isspace():
            m = _ENTRY.match(line)
            if m:
                names |= {n.strip().lstrip("*") for n in m.group(1).split(",")}
    return names


def _callables():
    return [n for n in NAMES if (inspect.isclass(getattr(bayestrees, n)) or inspect.isfunction(getattr(bayestrees, n)))
            and _parameters(getattr(bayestrees, n))]


def _routines():
    """The public classes and functions (every one, with parameters or without)."""
    return [n for n in NAMES if inspect.isclass(getattr(bayestrees, n)) or inspect.isfunction(getattr(bayestrees, n))]


def _functions():
    return [n for n in NAMES if inspect.isfunction(getattr(bayestrees, n))]


def _known(names, known, why):
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=why)) if n in known else n for n in names]


@pytest.mark.parametrize("name", NAMES)
def test_public_name_has_a_summary_line(name):
    doc = inspect.getdoc(getattr(bayestrees, name))
    assert doc, f"bayestrees.{name} has no docstring"
    summary = doc.strip().splitlines()[0].strip()
    assert len(summary) >= 10, f"bayestrees.{name}: summary line {summary!r}"


@pytest.mark.parametrize("name", _known(_callables(), KNOWN_NO_SECTION, "no Parameters section yet"))
def test_public_callable_has_a_parameters_section(name):
    doc = inspect.getdoc(getattr(bayestrees, name)) or ""
    assert "Parameters" in _sections(doc), f"bayestrees.{name} takes parameters but has no Parameters section"


@pytest.mark.parametrize("name", _known(_callables(), KNOWN_UNDOCUMENTED, "parameters not yet documented"))
def test_every_parameter_is_documented(name):
    obj = getattr(bayestrees, name)
    section = _sections(inspect.getdoc(obj) or "").get("Parameters", "")
    missing = [p for p in _parameters(obj) if p not in _documented(section)]
    assert not missing, f"bayestrees.{name}: parameters missing from its Parameters section: {missing}"


@pytest.mark.parametrize("name", _known(_functions(), KNOWN_NO_RETURNS, "no Returns section yet"))
def test_public_function_has_a_returns_section(name):
    sections = _sections(inspect.getdoc(getattr(bayestrees, name)) or "")
    returns = sections.get("Returns", sections.get("Yields", ""))
    assert returns.strip(), (f"bayestrees.{name} has no Returns section (a function that returns nothing "
                             "says ``None``)")
    # the first entry names a type (``name : type`` or ``type``) at the section's margin
    first = next(line for line in returns.splitlines() if line.strip())
    assert not first[0].isspace(), f"bayestrees.{name}: the Returns section starts with {first!r}"


#: the estimators' methods whose docstrings are checked like the public functions'
METHODS = ("fit", "predict", "predict_proba", "predict_draws", "predict_interval")


def _estimator_methods():
    estimators = [n for n in NAMES
                  if inspect.isclass(getattr(bayestrees, n)) and hasattr(getattr(bayestrees, n), "fit")]
    return [f"{n}.{m}" for n in estimators for m in METHODS if hasattr(getattr(bayestrees, n), m)]


@pytest.mark.parametrize("name", _estimator_methods())
def test_estimator_method_documents_its_parameters_and_returns(name):
    cls, method = name.split(".")
    obj = getattr(getattr(bayestrees, cls), method)
    sections = _sections(inspect.getdoc(obj) or "")
    missing = [p for p in _parameters(obj) if p not in _documented(sections.get("Parameters", ""))]
    assert not missing, f"bayestrees.{name}: parameters missing from its Parameters section: {missing}"
    assert sections.get("Returns", "").strip(), f"bayestrees.{name} has no Returns section"


@pytest.mark.parametrize("name", _known(_routines(), KNOWN_NO_EXAMPLES, "no Examples section yet"))
def test_public_routine_has_an_examples_section(name):
    examples = _sections(inspect.getdoc(getattr(bayestrees, name)) or "").get("Examples", "")
    assert ">>> " in examples, f"bayestrees.{name} has no Examples section with a >>> line"


def test_the_section_parser_reads_numpydoc_entries():
    doc = inspect.cleandoc("""Summary line here.

    Parameters
    ----------
    a, b : int
        Two.
    c
        Three.
    **kwargs
        More.

    Returns
    -------
    int

    Examples
    --------
    >>> f(1, 2, 3)
    6
    """)
    sections = _sections(doc)
    assert set(sections) == {"Parameters", "Returns", "Examples"}
    assert _documented(sections["Parameters"]) == {"a", "b", "c", "kwargs"}
    assert sections["Returns"].strip() == "int"
    assert ">>> f(1, 2, 3)" in sections["Examples"]
