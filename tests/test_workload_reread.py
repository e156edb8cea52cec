"""read_workload(..., previous): the re-read after a patch reuses the containers it did not copy."""

from __future__ import annotations

import pytest
from builders import container, pod

from webhook.engine.patch import add, apply_patch
from webhook.engine.workload import InvalidObject, read_workload

GROUPS = ("quickq", "quickq.io")


def test_a_patched_container_is_read_again_and_the_others_are_reused():
    obj = pod(container("app"), container("sidecar"))
    before = read_workload(obj, GROUPS)
    patched = apply_patch(obj, [add(("spec", "containers", 0, "startupProbe"),
                                    {"exec": {"command": ["true"]}})])
    after = read_workload(patched, GROUPS, before)
    assert after == read_workload(patched, GROUPS)
    assert after.containers[0] is not before.containers[0]
    assert after.containers[0].data["startupProbe"] == {"exec": {"command": ["true"]}}
    assert after.containers[1] is before.containers[1]


def test_a_container_that_moved_is_read_again_with_its_new_path():
    obj = pod(container("app"))
    before = read_workload(obj, GROUPS)
    patched = apply_patch(obj, [add(("spec", "containers", 0), container("first"))])
    after = read_workload(patched, GROUPS, before)
    assert [c.path for c in after.containers] == [("spec", "containers", 0),
                                                  ("spec", "containers", 1)]
    assert after.containers[1] is not before.containers[0]
    assert after == read_workload(patched, GROUPS)


def test_a_patch_that_breaks_a_field_is_still_caught():
    obj = pod(container("app"))
    before = read_workload(obj, GROUPS)
    patched = apply_patch(obj, [add(("spec", "containers", 0, "startupProbe"), "nope")])
    with pytest.raises(InvalidObject, match=r"spec\.containers\[0\]\.startupProbe"):
        read_workload(patched, GROUPS, before)
