"""Data layer: binning rules, categorical codes, missing values, validation."""
import numpy as np
import pandas as pd
import pytest

from bayestrees.data import Binner, bucket_size, check_y_classification, check_y_regression, missing_code


def test_exact_bins_are_midpoints_between_distinct_values():
    x = np.array([[3.0], [1.0], [2.0], [2.0], [10.0]])
    b = Binner().fit(x)
    fb = b.features_[0]
    assert fb.exact and fb.n_bins == 4
    np.testing.assert_allclose(fb.edges, [1.5, 2.5, 6.5])
    np.testing.assert_array_equal(b.transform(x)[:, 0], [2, 0, 1, 1, 3])
    assert b.dtype_ == np.uint8
    # new values are coded by the same edges: code <= t  <=>  x <= edges[t]
    np.testing.assert_array_equal(b.transform(np.array([[1.5], [1.51], [100.0], [-5.0]]))[:, 0], [0, 1, 3, 0])


def test_quantile_bins_when_many_distinct_values(rng):
    x = rng.normal(size=(5000, 1))
    b = Binner(max_bins=16).fit(x)
    codes = b.transform(x)[:, 0]
    assert not b.features_[0].exact
    assert codes.max() + 1 == b.features_[0].n_bins <= 16
    counts = np.bincount(codes)
    # quantile bins: roughly equal mass
    assert counts.min() > 0.5 * len(x) / 16 and counts.max() < 1.5 * len(x) / 16


def test_uint16_codes_when_more_than_255_bins(rng):
    x = rng.normal(size=(2000, 2))
    b = Binner(max_bins=1000).fit(x)
    assert b.dtype_ == np.uint16
    assert b.transform(x).max() < missing_code(np.uint16)


def test_missing_values_get_the_reserved_code():
    x = np.array([[1.0], [np.nan], [2.0]])
    b = Binner().fit(x)
    codes = b.transform(x)[:, 0]
    assert codes[1] == missing_code(b.dtype_) == 255
    assert b.features_[0].has_missing


def test_infinite_values_are_rejected():
    with pytest.raises(ValueError, match="infinite"):
        Binner().fit(np.array([[1.0], [np.inf]]))


def test_categorical_columns_ordered_by_mean_response():
    df = pd.DataFrame({"c": pd.Categorical(["a", "b", "c", "a", "b", "c"]), "x": [1.0, 2, 3, 4, 5, 6]})
    y = np.array([5.0, 1.0, 3.0, 5.0, 1.0, 3.0])
    b = Binner().fit(df, y)
    assert b.features_[0].kind == "categorical"
    assert b.features_[0].categories == ["b", "c", "a"]  # means 1 < 3 < 5
    np.testing.assert_array_equal(b.transform(df)[:, 0], [2, 0, 1, 2, 0, 1])
    with pytest.raises(ValueError, match="unseen"):
        b.transform(pd.DataFrame({"c": ["d"], "x": [1.0]}))


def test_object_arrays_and_lists_are_accepted():
    X = [[1, "u"], [2, "v"], [3, "u"]]
    b = Binner().fit(np.array(X, dtype=object))
    assert [f.kind for f in b.features_] == ["numeric", "categorical"]
    assert b.transform(np.array(X, dtype=object)).shape == (3, 2)


def test_wrong_feature_count_at_transform():
    b = Binner().fit(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="3 features"):
        b.transform(np.zeros((4, 2)))


@pytest.mark.parametrize("X", [np.zeros((0, 2)), np.zeros((3, 0)), np.zeros(5)])
def test_bad_shapes(X):
    with pytest.raises(ValueError):
        Binner().fit(X)


def test_y_checks():
    with pytest.raises(ValueError, match="NaN"):
        check_y_regression([1.0, np.nan])
    with pytest.raises(ValueError, match="numeric"):
        check_y_regression(["a", "b"])
    with pytest.raises(ValueError, match="match"):
        check_y_regression([1.0, 2.0], n=3)
    with pytest.raises(ValueError, match="one class"):
        check_y_classification([1, 1, 1])
    codes, classes = check_y_classification(["b", "a", "b"])
    np.testing.assert_array_equal(codes, [1, 0, 1])
    np.testing.assert_array_equal(classes, ["a", "b"])


def test_bucket_sizes_are_few_and_cover():
    sizes = {bucket_size(n) for n in range(1, 5000)}
    assert len(sizes) <= 14
    assert all(bucket_size(n) >= n for n in (1, 64, 65, 1000, 4999))
    large = np.arange(8193, 300_000, 7)
    padded = np.array([bucket_size(n) for n in large])
    assert np.all(padded >= large) and np.all(padded <= np.ceil(large * 1.032))
    assert len(set(padded.tolist())) <= 32 * 8  # 32 sizes per doubling


def test_coarse_buckets_give_two_sizes_per_doubling_at_any_size():
    # the branches of a distributed forest: sizes 16k to 31k rows share 3 compiled shapes, not 21
    sizes = np.arange(15_625, 31_250, 3)
    coarse = np.array([bucket_size(n, coarse=True) for n in sizes])
    assert np.all(coarse >= sizes) and np.all(coarse <= np.ceil(sizes * 2 ** 0.5))
    assert len(set(coarse.tolist())) <= 3
    assert len({bucket_size(n) for n in sizes}) > 15
    assert all(bucket_size(n, coarse=True) == bucket_size(n) for n in range(1, 8000, 37))
