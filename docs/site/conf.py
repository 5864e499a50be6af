"""Sphinx configuration of the bayestrees documentation site.

Build (from the repository root)::

    pip install -e ".[docs]" && sphinx-build -W -b html docs/site docs/_build/html

The pages are MyST Markdown; the API reference is generated from the NumPy-style docstrings
(autodoc, autosummary, numpydoc). The tutorials in ``tutorials/*.py`` stay the single source: they
are copied next to these pages at build time and rendered by myst-nb through jupytext. They are
not executed unless ``BAYESTREES_DOCS_EXECUTE=1`` (every tutorial, in full, which takes long) or
``BAYESTREES_DOCS_EXECUTE=pcfg,bcart`` (those); add ``BAYESTREES_TUTORIAL_QUICK=1`` for the reduced
sizes. Executed, their printed tables and figures appear on the pages. The lab notes in ``docs/lab-notes/*.md``
(and the architecture, ``docs/design.md``) are included unchanged under "Benchmarks and lab notes".
"""
import contextlib
import io
import os
import shutil
from pathlib import Path

import sys

import bayestrees

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
ROOT = HERE.parent.parent
# autosummary writes the API pages into api/generated (ignored by git) and never removes one whose
# name has moved, which then fails the build (a page in no toctree): every build starts afresh
shutil.rmtree(HERE / "api" / "generated", ignore_errors=True)

project = "bayestrees"
author = "the bayestrees developers"
copyright = "the bayestrees developers"
version = release = bayestrees.__version__

extensions = [
    "myst_nb",                 # MyST Markdown pages and notebooks (the tutorials, through jupytext)
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",                # NumPy-style docstrings
    "sphinx.ext.mathjax",
    "sphinx_copybutton",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".py": "myst-nb"}  # .rst first: autosummary writes its stubs in it
exclude_patterns = ["_build", "_ext", "_templates", "_generated", "conf.py", "**/.ipynb_checkpoints"]
templates_path = ["_templates"]
root_doc = "index"

# --- MyST ---------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3

# --- tutorials: percent-format scripts read through jupytext ----------------------------------------
nb_custom_formats = {".py": "bt_tutorials.read_tutorial"}
#: every script in tutorials/ becomes a page (tutorials/index.md lists them in its toctree; a script
#: missing there fails the build with "document isn't included in any toctree")
TUTORIALS = sorted(p.stem for p in (ROOT / "tutorials").glob("*.py"))


def _copy_if_changed(src: Path, dst: Path) -> None:
    if not dst.exists() or dst.read_bytes() != src.read_bytes():
        shutil.copy2(src, dst)


for _name in TUTORIALS:
    _copy_if_changed(ROOT / "tutorials" / f"{_name}.py", HERE / "tutorials" / f"{_name}.py")
for _stale in (HERE / "tutorials").glob("*.py"):  # a tutorial removed from tutorials/
    if _stale.stem not in TUTORIALS:
        _stale.unlink()

#: BAYESTREES_DOCS_EXECUTE: "0" or unset renders the tutorials without running them; "1" runs every
#: one; a comma-separated list of names (e.g. "pcfg,bcart") runs those
_EXECUTE = os.environ.get("BAYESTREES_DOCS_EXECUTE", "0").strip()
EXECUTE = _EXECUTE not in ("", "0")
nb_execution_mode = "force" if EXECUTE else "off"
if EXECUTE and _EXECUTE != "1":
    _run = {name.strip() for name in _EXECUTE.split(",")}
    nb_execution_excludepatterns = [f"tutorials/{name}.py" for name in TUTORIALS if name not in _run]
nb_execution_timeout = -1
nb_execution_raise_on_error = True
nb_merge_streams = True

if EXECUTE:
    # the executed tutorials write their figures under the build folder unless told otherwise
    os.environ.setdefault("BAYESTREES_TUTORIAL_OUT", str(ROOT / "docs" / "_build" / "tutorial-output"))

# --- command-line help, written at build time from the parser itself ---------------------------------
_GENERATED = HERE / "_generated"
_GENERATED.mkdir(exist_ok=True)


def _write_cli_help() -> None:
    from bayestrees.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal width: fix it for the page
    try:
        for command in [None, "demo", "fit", "predict", "summary", "plot"]:
            argv = ["--help"] if command is None else [command, "--help"]
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
                build_parser().parse_args(argv)
            text = buf.getvalue()
            path = _GENERATED / f"cli-{command or 'main'}.txt"
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


_write_cli_help()

# --- API reference ----------------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"            # numpydoc's Parameters sections say the types
numpydoc_show_class_members = False   # autodoc lists the members
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False



def _skip_foreign_members(app, what, name, obj, skip, options):
    """Leave out members that scikit-learn's base classes give every estimator (``get_params``,
    ``set_params``, ``score``, ``set_fit_request``, ...): scikit-learn documents them, and their
    docstrings refer to its own pages."""
    if str(getattr(obj, "__module__", "") or "").startswith("sklearn"):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_foreign_members)


# --- HTML -------------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"bayestrees {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_static_path = []
