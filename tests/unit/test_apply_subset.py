"""``apply.subset``: the comparison every no-op reconcile makes, with fast paths for JSON types;
it must answer as the plain ABC-based definition does, for any JSON-like values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from controllers.runtime.apply import subset

SCALARS = st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from(["", "a", "b"])
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    ),
    max_leaves=8,
)


def reference(desired: Any, actual: Any) -> bool:
    """The definition: mappings may have extra keys, sequences match item by item (strings are
    scalars), scalars are equal."""
    if isinstance(desired, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and reference(v, actual[k]) for k, v in desired.items()
        )
    if isinstance(desired, Sequence) and not isinstance(desired, str | bytes):
        return (
            isinstance(actual, Sequence)
            and not isinstance(actual, str | bytes)
            and len(desired) == len(actual)
            and all(reference(d, a) for d, a in zip(desired, actual, strict=True))
        )
    return bool(desired == actual)


@given(VALUES, VALUES)
def test_subset_answers_as_the_definition_does(desired: Any, actual: Any) -> None:
    assert subset(desired, actual) == reference(desired, actual)


@given(VALUES)
def test_a_value_holds_itself_and_extra_keys_do_not_matter(value: Any) -> None:
    assert subset(value, value)
    assert subset({"k": value}, {"k": value, "extra": 1})


def test_strings_and_lists_of_characters_differ() -> None:
    assert not subset(["a"], "a")
    assert not subset("a", ["a"])
    assert subset((1, 2), [1, 2])
