"""An update that leaves a controller's pod template alone (a label edit, a scale) is never
patched: a patched template rolls out new pods. It is admitted unchanged, with a warning of
what the template lacks; an update that changes the template is patched as a create is."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import CONTROLLERS, gpu_container, judge, probe, workload

from webhook import Review, decode

MUTATE = ("inject-startup-probe", "inject-gpu-toleration")


def legacy(kind: str) -> dict[str, Any]:
    """A GPU controller from before quickq-guard: no startupProbe, no GPU toleration."""
    return workload(kind, gpu_container(livenessProbe=probe(10, 6)), name="gpu-legacy",
                    labels={"app": "gpu-legacy"}, priorityClassName="gpu")


@pytest.mark.parametrize("kind", CONTROLLERS)
def test_a_label_edit_is_admitted_unpatched_with_a_warning_per_missing_patch(kind: str) -> None:
    old = legacy(kind)
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "ml"
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert decision.allowed and decision.patch == () and decision.patched is None
    for policy in MUTATE:
        [warning] = [w for w in decision.warnings if w.startswith(f"[{policy}]")]
        assert warning.endswith("(not patched: this update leaves the pod template unchanged)")


@pytest.mark.parametrize("kind", CONTROLLERS)
def test_an_update_that_changes_the_pod_template_is_patched(kind: str) -> None:
    old = legacy(kind)
    create = judge(old)
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "ml"
    spec = new
    for key in ("spec", "jobTemplate", "spec") if kind == "CronJob" else ("spec",):
        spec = spec[key]
    spec["template"]["spec"]["containers"][0]["image"] = "registry.example.com/model:2"
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert decision.patch and len(decision.patch) == len(create.patch)
    assert not any("not patched" in w for w in decision.warnings)


def test_an_update_without_the_old_object_is_patched_as_before() -> None:
    obj = legacy("Deployment")
    assert judge(obj, review=Review(operation="UPDATE")).patch == judge(obj).patch


def test_a_template_that_needs_nothing_gives_no_warning_on_update() -> None:
    old = legacy("Deployment")
    old = copy.deepcopy(judge(old).patched)
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "ml"
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert decision.patch == () and decision.warnings == ()
