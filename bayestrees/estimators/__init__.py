"""scikit-learn style estimators, one module per family (shared plumbing in ``base``)."""
from .base import NotFittedError, load  # noqa: F401
