"""The tables' number formatter: any number, however large or small, stays narrow."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hpctrain.cli.view.table import NUMBER_WIDTH, number

SPECS = st.sampled_from([".4g", ".0f", ".3f", ".2f", "g", ".1f", ".3g"])


@given(value=st.floats(), spec=SPECS)
def test_any_float_is_at_most_number_width_characters(value: float, spec: str) -> None:
    text = number(value, spec)
    assert 0 < len(text) <= NUMBER_WIDTH
    if 1e-2 <= abs(value) < 1e4:  # ordinary values keep the spec's own form
        assert text == format(value, spec)


@given(value=st.integers(min_value=-(10**400), max_value=10**400), spec=SPECS)
def test_any_integer_is_at_most_number_width_characters(value: int, spec: str) -> None:
    assert 0 < len(number(value, spec)) <= NUMBER_WIDTH


def test_a_throughput_of_1e308_is_scientific_and_none_is_a_dash() -> None:
    assert number(1e308, ".0f") == "1e+308"
    assert number(-1.2345e308, ".0f") == "-1.23e+308"
    assert number(12345.6, ".0f") == "12346"
    assert number(None) == "-" and number("n/a") == "n/a"
