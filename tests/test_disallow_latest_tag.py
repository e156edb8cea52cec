"""disallow-latest-tag: every image is pinned by a version tag or a digest."""

from __future__ import annotations

import pytest
from builders import container, judge, judge_given, messages, paths, pod, result

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize("image", [
    "registry.example.com/app:1.2.3",
    "app:1.0",
    "registry:5000/app:2.1",
    f"app@{DIGEST}",
    f"app:latest@{DIGEST}",
    f"registry:5000/team/app@{DIGEST}",
])
def test_pinned_images_pass(image):
    assert result(judge(pod(container(image=image))), "disallow-latest-tag").status == "pass"


@pytest.mark.parametrize(("image", "problem"), [
    ("app:latest", "uses the 'latest' tag"),
    ("app", "has no tag"),
    ("registry:5000/app", "has no tag"),
    ("registry.example.com/team/app", "has no tag"),
    ("app:", "has an empty tag"),
    ("app@", "has an empty digest"),
])
def test_unpinned_images_are_denied(image, problem):
    decision = judge(pod(container(image=image)))
    assert not decision.allowed
    [message] = messages(decision, "disallow-latest-tag")
    assert message.startswith(f"container 'app': image '{image}' {problem}; pin it")
    assert paths(decision, "disallow-latest-tag") == ["spec.containers[0].image"]


def test_message_suggests_a_pinned_reference_keeping_the_registry_port():
    decision = judge(pod(container(image="registry:5000/app:latest")))
    [message] = messages(decision, "disallow-latest-tag")
    assert "(registry:5000/app:1.2.3)" in message
    assert "(registry:5000/app@sha256:...)" in message


def test_init_and_ephemeral_container_images_are_judged():
    decision = judge(pod(
        container(),
        initContainers=[container("init", image="busybox")],
        ephemeralContainers=[{"name": "debug", "image": "busybox:latest"}],
    ))
    assert paths(decision, "disallow-latest-tag") == [
        "spec.initContainers[0].image", "spec.ephemeralContainers[0].image"]
    assert messages(decision, "disallow-latest-tag")[1].startswith("ephemeralContainer 'debug'")


def test_missing_image_is_denied():
    # The API server refuses a Pod's container without an image; a custom kind's objects are
    # judged as written, and the policy says what to set.
    assert "spec.containers[0].image: required value" in judge(
        pod(container(image=None))).message
    decision = judge_given(pod(container(image=None)))
    [message] = messages(decision, "disallow-latest-tag")
    assert "set image to a pinned reference" in message


@pytest.mark.parametrize("image", ["$VLLM_IMAGE", "${IMAGE}", "$(IMAGE)", "{{ .Values.image }}",
                                   "registry.example.com/vllm:$TAG"])
def test_an_unrendered_variable_is_named_as_one(image):
    decision = judge(pod(container(image=image)))
    assert messages(decision, "disallow-latest-tag") == [
        f"container 'app': image '{image}' is an unrendered variable, which Kubernetes does not "
        "expand in image; render the manifest first (envsubst, helm template, kustomize "
        "build) or set a pinned reference (registry/app:1.2.3)"]


def test_oci_image_volumes_are_judged_like_container_images_in_every_kind():
    """An image volume's content is mounted, and can be run: `attacker/tools:latest` there
    is what it is in a container (Kubernetes 1.36 admits and stores it)."""
    from builders import workload

    volumes = [{"name": "cache", "emptyDir": {}},
               {"name": "tools", "image": {"reference": "attacker/tools:latest",
                                           "pullPolicy": "Always"}},
               {"name": "weights", "image": {"reference": f"models/llama@{DIGEST}"}}]
    decision = judge(pod(container(), volumes=volumes))
    assert not decision.allowed
    assert messages(decision, "disallow-latest-tag") == [
        "volume 'tools': image.reference 'attacker/tools:latest' uses the 'latest' tag; pin it "
        "to a version (attacker/tools:1.2.3) or a digest (attacker/tools@sha256:...)"]
    assert paths(decision, "disallow-latest-tag") == ["spec.volumes[1].image.reference"]
    for kind, prefix in (("Deployment", "spec.template.spec"),
                         ("CronJob", "spec.jobTemplate.spec.template.spec")):
        decision = judge(workload(kind, container(), volumes=volumes))
        assert paths(decision, "disallow-latest-tag") == [f"{prefix}.volumes[1].image.reference"]
    pinned = judge(pod(container(), volumes=[volumes[2]]))
    assert result(pinned, "disallow-latest-tag").status == "pass"
