"""The documentation site (``docs/site``) builds with warnings as errors, and its API reference
covers every public name.

The build needs the ``docs`` extra (``pip install -e ".[docs]"``): Sphinx, MyST-NB, jupytext,
numpydoc and the theme. Without it the tests are skipped, so the ``test`` extra alone still passes.
The tutorials are rendered without being run (``BAYESTREES_DOCS_EXECUTE=0``), so the build takes
seconds, not the minutes of the tutorials' fits.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

for _module in ("sphinx", "myst_nb", "jupytext", "numpydoc", "pydata_sphinx_theme", "sphinx_copybutton"):
    pytest.importorskip(_module, reason="the docs extra is not installed (pip install -e '.[docs]')")

import bayestrees  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "docs" / "site"


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs-html")
    env = dict(os.environ, BAYESTREES_DOCS_EXECUTE="0", MPLBACKEND="Agg")
    # -W: every warning fails the build; -E: read every page again (no saved environment)
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html",
         "-d", str(out / ".doctrees"), str(SITE), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return out


def test_site_builds_with_warnings_as_errors(built_site):
    for page in ["index", "install", "getting-started", "contract", "compare", "scaling", "cli",
                 "guides/index", "api/index", "api/modules", "tutorials/index", "lab-notes/index"]:
        assert (built_site / f"{page}.html").exists(), page


def test_every_family_has_a_guide_and_a_rendered_tutorial(built_site):
    for name in ["forests", "pcfg", "bcart", "safebayes", "bet", "bart"]:
        assert (built_site / "guides" / f"{name}.html").exists(), name
    for script in sorted((ROOT / "tutorials").glob("*.py")):
        page = built_site / "tutorials" / f"{script.stem}.html"
        assert page.exists(), f"tutorials/{script.name} is not rendered"
        # rendered, not run: the code cells are there and no output cell
        html = page.read_text()
        assert "cell_input" in html and "cell_output" not in html, script.name


def test_every_lab_note_is_in_the_lab_notes_section(built_site):
    notes = sorted((ROOT / "docs" / "lab-notes").glob("*.md")) + [ROOT / "docs" / "design.md"]
    assert len(notes) > 5
    for note in notes:
        page = built_site / "lab-notes" / f"{note.stem}.html"
        assert page.exists(), f"{note.relative_to(ROOT)} is not included under docs/site/lab-notes/"


def test_every_public_name_has_an_api_page(built_site):
    generated = built_site / "api" / "generated"
    missing = [name for name in bayestrees.__all__
               if name != "__version__" and not (generated / f"bayestrees.{name}.html").exists()]
    assert not missing, f"public names without an API page (add them to docs/site/api/): {missing}"


def test_command_line_help_is_on_the_page(built_site):
    html = (built_site / "cli.html").read_text()
    for option in ["--target", "--model", "--draws", "--chains"]:
        assert option in html, option
