"""The data sets shipped with the package load from the installed files, whole and in order."""
import numpy as np

from bayestrees import datasets


def test_shipped_data_sets_load_whole():
    X, y = datasets.load_mcycle()
    assert X.shape == (133, 1) and y.shape == (133,) and np.all(np.diff(X[:, 0]) >= 0)
    X, y, names = datasets.load_haberman()
    assert X.shape == (306, 3) and set(np.unique(y)) == {1, 2} and len(names) == 3


def test_california_housing_is_the_archive_version():
    X, y, names = datasets.load_california_housing()
    assert X.shape == (20640, 8) and y.shape == (20640,) and names == datasets.CALIFORNIA_FEATURES
    assert np.isfinite(X).all() and np.isfinite(y).all()
    # the values capped at 500,001 dollars, and the raw totals (not per-household averages)
    assert y.max() == 500001.0 and np.sum(y == 500001.0) > 900
    rooms, households = X[:, names.index("totalRooms")], X[:, names.index("households")]
    assert np.median(rooms / households) > 3 and rooms.max() > 10_000
    # inside California
    assert -125 < X[:, 0].min() and X[:, 0].max() < -114 and 32 < X[:, 1].min() and X[:, 1].max() < 42
