"""The wrong verdicts issue 36 found on public AI-infrastructure repositories, each on a small
object of our own; the comment above each test names the source pattern it stands for."""

from __future__ import annotations

from builders import container, judge, messages, pod

LIVENESS = {"httpGet": {"path": "/health", "port": 8000}}


# 1. llm-d and KServe style deployments pin vLLM by digest, as disallow-latest-tag advises:
#    image: vllm/vllm-openai@sha256:<64 hex>
def test_a_vllm_image_pinned_by_digest_gets_vllms_startup_window():
    digest = "vllm/vllm-openai@sha256:" + "ab" * 32
    for image in (digest, "docker.io/" + digest):
        decision = judge(pod(container(image=image, livenessProbe=LIVENESS)))
        [operation] = decision.patch
        value = operation["value"]
        assert value["periodSeconds"] * value["failureThreshold"] == 1800, image
        assert "for up to 1800s" in messages(decision, "inject-startup-probe")[0]
