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


def test_german_credit_has_its_categorical_columns_coded_and_as_categories():
    X, y, names, cat = datasets.load_german_credit()
    assert X.shape == (1000, 20) and names == datasets.GERMAN_CREDIT_FEATURES
    assert y.sum() == 300 and set(np.unique(y)) == {0, 1}          # 300 bad credit risks of 1,000
    assert len(cat) == 13 and names[cat[0]] == "checking_status" and "age" not in [names[j] for j in cat]
    # codes 0 .. k-1 of 2 to 10 categories; the first row's checking status is A11, its purpose A43
    sizes = X[:, cat].max(0) + 1
    assert np.all(X[:, cat] == np.round(X[:, cat])) and sizes.min() == 2 and sizes.max() == 10
    assert X[0, names.index("checking_status")] == 0 and X[0, names.index("purpose")] == 3
    assert X[0, names.index("age")] == 67 and X[0, names.index("credit_amount")] == 1169
    frame, y2 = datasets.load_german_credit(as_frame=True)
    assert np.array_equal(y, y2) and list(frame.columns) == names
    assert frame["purpose"].dtype == "category" and list(frame["purpose"].cat.categories)[-1] == "A410"
    for j in cat:   # the frame's category order is the coded columns' order
        assert np.array_equal(frame[names[j]].cat.codes.to_numpy(), X[:, j].astype(int))
