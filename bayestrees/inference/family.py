"""The family protocol: what every family of tree posteriors provides, described once.

A family (Bayesian forests, BCART-PCFG, safe-Bayes, Bayesian CART, BET) lives in its own
room, ``bayestrees/inference/<family>/``, whose ``__init__`` builds one :class:`Family`
from the room's functions.  The model context (:mod:`bayestrees.models`), the
scikit-learn style estimators (:mod:`bayestrees.estimators`), the command line
(:mod:`bayestrees.cli`) and the model comparison helpers (:mod:`bayestrees.diagnostics`)
are written once over this protocol; :mod:`bayestrees.families` lists the families.

Every family's functions have one signature each:

``config(**params)``
    its frozen config dataclass: the single source of the hyperparameters' defaults
    (read by the estimators' tests and by the command line's help text); it has
    ``draws`` and ``chains`` fields.
``fit(key, data, config) -> result``
    the family's ``fit_<family>``.
``prepare_data(X, y, *, task, max_bins, categorical) -> TrainingData``
    validation and binning for this family.
``to_inferencedata(result, data, *, y_name="y", attrs=None) -> InferenceData``
    the posterior contract (``docs/design.md``).
``values(result, codes) -> ndarray (chains * draws, n, V)``
    the fitted function of every posterior draw at coded rows (``V = 1`` for a
    regression, class probabilities otherwise).
``predictive(key, result, data, idata, codes) -> dict``
    posterior predictive draws at coded rows for the draws of ``idata``, as keyword
    arguments of :func:`bayestrees.convert.predictive_group`.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, Mapping

from ..data import check_max_bins, prepare_data

__all__ = ["Family", "config_defaults", "config_help", "renamed_params", "prepare_data_keeping_missing"]


@dataclass(frozen=True)
class Family:
    """One family of tree posteriors, described once.

    Parameters
    ----------
    name : str
        The family's name: ``attrs["family"]`` of its InferenceData and its key in
        :data:`bayestrees.families.REGISTRY`.
    title : str
        One line saying what the family is (help texts).
    config : type
        The frozen config dataclass (with ``draws`` and ``chains`` fields).
    fit : callable
        ``fit(key, data, config) -> result``.
    prepare_data : callable
        ``prepare_data(X, y, *, task, max_bins, categorical) -> TrainingData``.
    to_inferencedata : callable
        ``to_inferencedata(result, data, *, y_name="y", attrs=None) -> arviz.InferenceData``.
    values : callable
        ``values(result, codes) -> ndarray (chains * draws, n, V)``.
    predictive : callable
        ``predictive(key, result, data, idata, codes) -> dict`` (arguments of
        :func:`bayestrees.convert.predictive_group`).
    tasks : tuple of str
        The tasks the family fits.
    likelihood : bool
        Whether its InferenceData has a ``log_likelihood`` group (``bt.loo`` works).
    no_likelihood : str
        Why not, when ``likelihood`` is False (``bt.loo``'s error message).
    mcmc : bool
        Whether the draws are Markov chains (R-hat and ESS are meaningful).
    draws_are : str
        What the draws are, for a family that is not MCMC (why there is no R-hat).
    summary_attrs : tuple of str
        Posterior attributes that ``bayestrees summary`` prints for this family.
    missing_values : bool
        Whether rows may hold missing values (NaN).
    max_bins : int
        Default bins per feature of the data layer.
    presets : mapping
        Command-line model names: ``{name: (title, params)}``, ``params`` set on the
        family's config (``{}``: the defaults).
    convergence_draws : callable, optional
        ``convergence_draws(result) -> {name: (chains, draws) array}``: the scalar draws the
        convergence table reads (every scalar posterior variable, in the InferenceData's order, then
        ``lp``), taken from the result, so that a fit reports its convergence without building the
        InferenceData (built on first access instead).  None: they are read from the InferenceData.
    """

    name: str
    title: str
    config: type
    fit: Callable
    prepare_data: Callable
    to_inferencedata: Callable
    values: Callable
    predictive: Callable
    tasks: tuple = ("regression", "classification")
    likelihood: bool = True
    no_likelihood: str = ""
    mcmc: bool = False
    draws_are: str = ""
    summary_attrs: tuple = ()
    missing_values: bool = False
    max_bins: int = 32
    presets: Mapping[str, tuple[str, dict]] = field(default_factory=dict)
    convergence_draws: Callable | None = None

    def make_config(self, **params) -> Any:
        """The family's config from keyword parameters; ``ValueError`` naming the known ones
        for an unknown parameter (and for any invalid value)."""
        known = set(config_defaults(self.config))
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"unknown parameter(s) {unknown} for the {self.name} family; known: {sorted(known)}")
        return self.config(**params)


def prepare_data_keeping_missing(X, y, *, task: str = "auto", max_bins: int = 32, categorical=None):
    """Validate and bin ``(X, y)`` for a tree sampler that routes missing values (the MCMC families):
    NaN in ``X`` keeps the binner's missing code (the rules that route it:
    :mod:`bayestrees.inference.missing`).

    Parameters
    ----------
    X : array-like or DataFrame (n, d), NaN for a missing value
    y : array-like (n,)
    task : {"auto", "regression", "classification"}
    max_bins : int
        Bins per feature (:func:`bayestrees.data.check_max_bins`).
    categorical : list of int, optional
        Columns to treat as categorical.

    Returns
    -------
    TrainingData
    """
    return prepare_data(X, y, task=task, max_bins=check_max_bins(max_bins), categorical=categorical,
                        allow_nan=True)


def config_defaults(config: type) -> dict[str, Any]:
    """``{field: default}`` of a config dataclass (fields without a default are left out)."""
    out = {}
    for f in fields(config):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:  # pragma: no cover - no config uses one today
            out[f.name] = f.default_factory()
    return out


_ENTRY = re.compile(r"^(\w+(?:\s*,\s*\w+)*)\s*:\s*(.*)$")


def config_help(config: type) -> dict[str, str]:
    """One line of help per field, read from the config's NumPy-style ``Parameters`` section.

    Both layouts in use are read: ``name : type`` followed by an indented description (the help
    is ``type: description``), and ``name : description`` on one line (and the lines below it).
    Sphinx roles and double backquotes are dropped.  A line naming several
    fields (``draws, tune, chains, thin : ...``) gives each of them the same text.
    """
    doc = config.__doc__ or ""
    lines = doc.expandtabs().splitlines()
    try:
        start = next(i for i, s in enumerate(lines) if s.strip() == "Parameters") + 2
    except StopIteration:
        return {}
    base = None
    out: dict[str, list[str]] = {}
    current: list[str] = []
    for s in lines[start:]:
        if not s.strip():
            continue
        indent = len(s) - len(s.lstrip())
        if base is None:
            base = indent
        if indent < base or s.strip() in ("Raises", "Returns", "Notes", "Attributes") or set(s.strip()) == {"-"}:
            break
        m = _ENTRY.match(s.strip()) if indent == base else None
        if m:
            current = [m.group(2).strip()]
            for name in re.split(r"\s*,\s*", m.group(1)):
                out[name] = current
        elif current is not None:
            current.append(s.strip())
    help_ = {}
    for name, parts in out.items():
        head, rest = parts[0], " ".join(parts[1:]).strip()
        typed = len(head.split()) <= 6 and not head.endswith(("(", ","))  # ``name : type`` then a description
        text = (f"{head}: {rest}" if typed else f"{head} {rest}") if head and rest else head or rest
        help_[name] = re.sub(r":\w+:`~?([\w.]+)`", r"\1", text).replace("``", "")
    return help_


def renamed_params(params: dict, renames: Mapping[str, str], owner: str, *, stacklevel: int = 3) -> dict:
    """Map old keyword names to new ones with a ``FutureWarning`` naming the new one.

    Parameters
    ----------
    params : dict
        Keyword arguments as given.
    renames : mapping
        ``{old name: new name}``.
    owner : str
        What the keywords belong to (for the message).

    Returns
    -------
    dict
        ``params`` with every old name replaced by its new name.

    Raises
    ------
    TypeError
        When both the old and the new name are given.
    """
    out = dict(params)
    for old, new in renames.items():
        if old in out:
            if new in out:
                raise TypeError(f"{owner}: give {new!r} only ({old!r} is its former name)")
            warnings.warn(f"{owner}: {old!r} is renamed {new!r}; the old name will be removed in the next release",
                          FutureWarning, stacklevel=stacklevel)
            out[new] = out.pop(old)
    return out
