"""Certificate rotation and policy reload under load: creates keep going through the API
server while `quickq-guard certs` issues new serving certificates and the policy config
changes, and none of them fails."""

from __future__ import annotations

import threading
from collections.abc import Callable

from cluster_helpers import (
    ApiClient,
    ControlPlane,
    Guard,
    container,
    pod,
    wait_until,
    webhook_certs,
)

NAMESPACE = "rotation"



class Load:
    """Creates of Pods every policy accepts, one after the other, until stopped."""

    def __init__(self, kube: ControlPlane) -> None:
        self.client = ApiClient(kube)
        self.failures: list[tuple[int, str]] = []
        self.created = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                status, answer = self.client.create(pod(f"load-{self.created}", NAMESPACE))
                if status == 201:
                    self.created += 1
                else:
                    self.failures.append((status, str(answer.get("message"))))
        finally:
            self.client.close()

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(60)


def latest_tag(kube: ControlPlane) -> Callable[[], tuple[int, str]]:
    client = ApiClient(kube)

    def verdict() -> tuple[int, str]:
        status, answer = client.create(pod("latest", NAMESPACE, container(image="web:latest")),
                                       dry_run=True)
        return status, str(answer.get("message", ""))
    return verdict


def test_creates_keep_succeeding_through_rotations_and_a_policy_reload(
        guard: Guard, kube: ControlPlane) -> None:
    original = guard.config.read_text()
    judge_latest = latest_tag(kube)
    with Load(kube) as load:
        for _ in range(2):
            before = guard.webhook.served_serial()
            webhook_certs(guard.certs)  # a new serving certificate from the same CA
            wait_until(lambda before=before: guard.webhook.served_serial() != before,
                       what="the webhook to serve the new certificate")
            created = load.created
            wait_until(lambda created=created: load.created >= created + 3,
                       what="creates through the new certificate")
        assert judge_latest()[0] == 403
        try:
            guard.config.write_text(original.replace(
                "policies: {}", "policies: {disallow-latest-tag: {action: warn}}"))
            wait_until(lambda: judge_latest()[0] == 201, what="the policy reload")
        finally:
            guard.config.write_text(original)
        wait_until(lambda: judge_latest()[0] == 403, what="the policy reload back")
        created = load.created
        wait_until(lambda: load.created >= created + 3, what="creates after the reload")
    assert load.failures == []
    assert load.created >= 20
