"""Trees inside the user's own model: tree ensembles as random functions in NumPyro models, its room.

:func:`bart_function` and :func:`tree_function` declare a tree function inside a NumPyro model
(:mod:`bayestrees.inference.treefn.site`); :class:`TreeMoves` updates the trees inside NumPyro's
``Gibbs`` kernel, NUTS the rest (:mod:`bayestrees.inference.treefn.kernel`); :func:`sample_model`
runs it and returns InferenceData (:mod:`bayestrees.inference.treefn.fit`).
"""
from .fit import ModelFit, load_model_fit, sample_model, tree_summaries_of
from .kernel import TreeMoves, TreeMovesState, function_log_density, tree_sites
from .site import (TreeEnsemble, bart_function, check_categorical, check_category_codes, cut_table, encode, evaluate,
                   tree_function, trees_site_name)

__all__ = ["bart_function", "tree_function", "TreeEnsemble", "TreeMoves", "TreeMovesState", "sample_model", "ModelFit",
           "load_model_fit", "evaluate", "cut_table", "encode", "trees_site_name", "tree_sites",
           "function_log_density", "tree_summaries_of", "check_categorical", "check_category_codes"]
