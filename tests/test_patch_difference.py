"""engine.patch.difference: the patch `quickq-guard test` shows when a patched resource is not
the expected one (it replaced the jsonpatch package's make_patch at run time)."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
from hypothesis import example, given
from hypothesis import strategies as st

from webhook.engine.patch import apply_patch, difference

_scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["a", "b", "a/b~"])
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["x", "y", "a/b", "~z", "0"]), inner, max_size=4),
    max_leaves=12)


@given(_values, _values)
@example([True, [False]], [1, [False]])  # equal to Python, not to JSON: a replace
def test_the_difference_turns_one_object_into_the_other(source: Any, target: Any) -> None:
    operations = difference(source, target)
    assert apply_patch(source, operations) == target
    # the same patch means the same to another RFC 6902 implementation
    assert jsonpatch.apply_patch(source, operations) == target
    # the same JSON (Python's == takes True for 1 and False for 0, anywhere inside)
    if json.dumps(source, sort_keys=True) == json.dumps(target, sort_keys=True):
        assert operations == []


def test_an_item_added_to_a_list_is_an_add_of_that_item() -> None:
    source = {"spec": {"containers": [{"name": "a"}], "gone": 1}}
    target = {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}, "metadata": {}}
    assert difference(source, target) == [
        {"op": "remove", "path": "/spec/gone"},
        {"op": "add", "path": "/spec/containers/1", "value": {"name": "b"}},
        {"op": "add", "path": "/metadata", "value": {}}]


def test_a_boolean_is_not_the_number_it_equals() -> None:
    assert difference({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]
