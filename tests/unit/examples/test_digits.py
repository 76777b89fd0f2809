"""The digits example's data: read without importing scikit-learn, split the same way everywhere."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain.examples import digits


def test_the_csv_read_is_scikit_learns_dataset() -> None:
    from sklearn.datasets import load_digits

    features, labels = digits.read_digits()
    expected_features, expected_labels = load_digits(return_X_y=True)
    assert np.array_equal(features, expected_features) and np.array_equal(labels, expected_labels)


def test_loading_does_not_import_scikit_learn() -> None:
    """The point of reading the CSV: every rank of every restart skips scikit-learn's 1.6 s import."""
    code = (
        "import sys; from hpctrain.examples import digits; digits.load(0.2); print('sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@settings(max_examples=30, deadline=None)
@given(
    labels=st.lists(st.integers(min_value=0, max_value=9), min_size=1, max_size=300),
    test_size=st.floats(min_value=0.0, max_value=1.0),
)
def test_the_split_is_a_stratified_partition(labels: list[int], test_size: float) -> None:
    array = np.array(labels)
    train, test = digits.stratified_split(array, test_size)
    assert sorted([*train, *test]) == list(range(len(labels)))  # every row once, in one of the two
    for label in set(labels):
        members = int((array == label).sum())
        assert int((array[test] == label).sum()) == round(members * test_size)
    again = digits.stratified_split(array, test_size)
    assert np.array_equal(again[0], train) and np.array_equal(again[1], test)  # the same on every rank
