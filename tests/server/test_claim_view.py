"""The webhook's view of the cluster's DRA claims: every namespace listed and watched, a pod
consuming a GPU claim judged as `check` judges it with the claim among its input, and a claim
the view lacks (or a view not listed yet) said by gpu-claim-usage, never a crash."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from server_helpers import Item, Listing

from webhook import Review, decode
from webhook.engine.claims import claims_from
from webhook.engine.evaluate import evaluate
from webhook.engine.normalize import normalize
from webhook.loader import load_policies
from webhook.server import app, claim_view, cluster_view
from webhook.server.admission import parse_review
from webhook.server.claim_view import ClaimView
from webhook.server.cluster_view import ALL_NAMESPACES, ClusterView
from webhook.testing import admission_review, container, pod

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def template(name: str, namespace: str = "team-a",
             device_class: str = "gpu.nvidia.com") -> dict[str, Any]:
    # as a list's items come: no apiVersion, no kind
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}}}


def consumer(source: str = "one-gpu") -> dict[str, Any]:
    llm = container("llm", image="registry.example.com/llm:1.0")
    llm.setdefault("resources", {})["claims"] = [{"name": "gpu"}]
    return pod(llm, name="llm", namespace="team-a", securityContext={"runAsNonRoot": True},
               resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": source}])




class FakeApi:
    """Templates in several namespaces; only a list of every namespace is answered, so a
    view asking namespace by namespace would see none."""

    def __init__(self, templates: list[dict[str, Any]]) -> None:
        self.templates = templates
        self.events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.asked: list[tuple[str, str]] = []

    def list(self, resource: Any, namespace: str) -> Listing:
        self.asked.append((resource.__name__, namespace))
        if namespace != ALL_NAMESPACES:
            raise AssertionError(f"listed namespace {namespace}")
        claims = resource.__name__ == "ResourceClaim"
        return Listing([] if claims else self.templates)

    async def _events(self, claims: bool) -> AsyncIterator[tuple[str, Item]]:
        while True:
            if claims:
                await asyncio.sleep(3600)
            kind, obj = await self.events.get()
            yield kind, Item(obj)

    def watch(self, resource: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Item]]:
        assert kwargs["namespace"] == ALL_NAMESPACES
        return self._events(resource.__name__ == "ResourceClaim")

    async def close(self) -> None:
        pass


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


def view_of(api: FakeApi) -> ClaimView:
    return ClaimView(tuple(ClusterView(kind, [ALL_NAMESPACES], lambda: api,  # type: ignore[arg-type,return-value]
                                       keep=claim_view.spec_only)
                           for kind in claim_view.KINDS))


def status(decision: Any, policy: str) -> str:
    return str(next(r.status for r in decision.results if r.policy == policy))


def judged(view: ClaimView, obj: dict[str, Any]) -> Any:
    review = parse_review(json.dumps(admission_review(obj)).encode())
    return app.judge(review, load_policies(), claims=view.current())


def test_a_pod_consuming_a_gpu_claim_template_of_the_cluster_is_a_gpu_pod() -> None:
    async def scenario() -> None:
        api = FakeApi([template("one-gpu"), template("one-gpu", namespace="other",
                                                     device_class="nic.example.com")])
        view = view_of(api)
        view.begin()
        await settle()
        decision = judged(view, consumer())
        assert {"op": "add", "path": "/spec/tolerations", "value": [GPU_TOLERATION]} \
            in decision.patch
        assert status(decision, "gpu-priority-class") == "fail"
        # The same verdict `check` gives with the template among its input: check judges
        # the Pod as the API server hands it to the webhook (defaulted: webhook.engine.normalize).
        offline = evaluate(decode(consumer()),
                           load_policies(),
                           Review(claims=claims_from(
            [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
              **template("one-gpu")}])))
        online = judged(view, normalize(consumer())[0])
        assert (online.allowed, online.patch, online.warnings) == (
            offline.allowed, offline.patch, offline.warnings)
        # A template created later is seen through the watch.
        assert not any("tolerations" in op["path"] for op in judged(view, consumer("two")).patch)
        api.events.put_nowait(("ADDED", template("two")))
        await settle()
        assert any("tolerations" in op["path"] for op in judged(view, consumer("two")).patch)
        assert set(api.asked) == {("ResourceClaim", "*"), ("ResourceClaimTemplate", "*")}
        view.stop()

    asyncio.run(scenario())


def test_a_claim_not_in_the_cluster_is_said() -> None:
    async def scenario() -> None:
        view = view_of(FakeApi([]))
        view.begin()
        await settle()
        decision = judged(view, consumer("missing"))
        [warning] = [w for w in decision.warnings if w.startswith("[gpu-claim-usage]")]
        assert "ResourceClaimTemplate 'missing' is not in the cluster," in warning
        assert len(warning) <= 256  # what the API server keeps of a warning
        view.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize(("view", "where"), [
    (ClaimView(()), "quickq-guard's view (serve --watch-claims is off)"),
    (view_of(FakeApi([template("one-gpu")])),  # never run: not listed
     "the cluster (quickq-guard has not listed claims yet)"),
])
def test_no_view_resolves_nothing_and_says_why(view: ClaimView, where: str) -> None:
    decision = judged(view, consumer())
    assert decision.allowed and not any("tolerations" in op["path"] for op in decision.patch)
    [warning] = [w for w in decision.warnings if w.startswith("[gpu-claim-usage]")]
    assert f"'one-gpu' is not in {where}, so" in warning and len(warning) <= 256


def test_the_lookup_is_read_once_per_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_view, "RETRY_SECONDS", 0.01)

    async def scenario() -> None:
        kept = template("one-gpu")
        kept["metadata"]["managedFields"] = [{"manager": "kubectl"}]
        kept["status"] = {"reservedFor": [{"name": "a-pod"}]}
        view = view_of(FakeApi([kept]))
        view.begin()
        await settle()
        assert view.current() is view.current()
        # Only what the lookup reads is kept.
        [stored] = view.views[1].snapshot().values()  # type: ignore[union-attr]
        assert stored == {"metadata": {"name": "one-gpu", "namespace": "team-a"},
                          "spec": template("one-gpu")["spec"]}
        assert view.current().device_classes("ResourceClaimTemplate", "team-a", "one-gpu") \
            == ("gpu.nvidia.com",)
        view.stop()

    asyncio.run(scenario())
