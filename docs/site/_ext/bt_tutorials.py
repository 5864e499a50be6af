"""Reading the tutorials (percent-format scripts) as notebooks for myst-nb.

jupytext reads the cells; the notebook is marked as Python so that its code cells get Python
highlighting.
"""
import jupytext


def read_tutorial(text: str):
    """Read a percent-format script as a notebook marked as Python 3.

    Parameters
    ----------
    text : str
        The script's text.

    Returns
    -------
    nbformat.NotebookNode
        The notebook, one cell per ``# %%`` block.
    """
    nb = jupytext.reads(text, fmt="py:percent")
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python", "pygments_lexer": "ipython3"}
    return nb
