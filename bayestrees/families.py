"""The registry of families: one line per family.

Each family's room (``bayestrees/inference/<family>/``) builds a
:class:`~bayestrees.inference.family.Family`; the model context, the estimators, the
command line and ``bt.loo``/``bt.compare`` are written once over that protocol and read
the facts they need (likelihood, MCMC or not, command-line names) from here.

Adding a family: write its room (ending in ``FAMILY = Family(...)``), its estimators
(subclasses of :class:`bayestrees.estimators.base.FamilyEstimator` with ``_family =
FAMILY``), its model variable (a :class:`bayestrees.models.base.TreeRV` with ``family =
FAMILY``), and add one line below.
"""
from __future__ import annotations

from .inference import bart, bcart, bet, forest, pcfg, safebayes
from .inference.family import Family

__all__ = ["REGISTRY", "get_family", "presets", "Family"]

#: ``{name: Family}``, the name being ``attrs["family"]`` of the family's InferenceData
REGISTRY: dict[str, Family] = {
    forest.FAMILY.name: forest.FAMILY,
    pcfg.FAMILY.name: pcfg.FAMILY,
    safebayes.FAMILY.name: safebayes.FAMILY,
    bcart.FAMILY.name: bcart.FAMILY,
    bet.FAMILY.name: bet.FAMILY,
    bart.FAMILY.name: bart.FAMILY,
}


def get_family(name: str) -> Family:
    """The family called ``name`` (``attrs["family"]`` of its InferenceData).

    Raises
    ------
    ValueError
        For an unknown name, listing the known ones.
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown family {name!r}; the families are {sorted(REGISTRY)}") from None


def presets() -> dict[str, tuple[Family, str, dict]]:
    """Every command-line model name: ``{name: (family, title, config params)}``."""
    out = {}
    for fam in REGISTRY.values():
        for name, (title, params) in fam.presets.items():
            if name in out:
                raise RuntimeError(f"model name {name!r} is used by two families")
            out[name] = (fam, title, dict(params))
    return out
