"""What a tenant's object or connection can cost the webhook, through a real kube-apiserver
(issue 32, items 1-3): a hostile env value is judged promptly, stalled request bodies do
not keep a large Pod from being reviewed, and unique huge images leave no memory behind."""

from __future__ import annotations

import ssl
import time
from pathlib import Path
from typing import Any

from cluster_helpers import ControlPlane, Guard, dry_run_create

NAMESPACE = "hostile"
JUDGED = 'admission webhook "validate.quickq-guard.quickq.io" denied the request'


def pod(name: str, image: str = "registry.example.com/web:1.0", **container: Any
        ) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                 "containers": [{"name": "web", "image": image,
                                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                               "limits": {"memory": "64Mi"}},
                                 **container}]},
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_hostile_env_value_is_judged_promptly(kube: ControlPlane) -> None:
    """`"http://h/?" + "key" * 100000` froze a worker for 76 s; the API server gave up
    after 5 s and, under Ignore, admitted the Pod beside it unjudged."""
    hostile = pod("hostile-env", image="nginx:latest", env=[
        {"name": "DB_PASSWORD", "value": "hunter2-S3cret"},
        {"name": "CALLBACK", "value": "http://h/?" + "key" * 100_000}])
    started = time.monotonic()
    done = dry_run_create(kube, hostile)
    seconds = time.monotonic() - started
    assert done.returncode == 1 and JUDGED in done.stderr, done.stderr[-500:]
    assert "[no-plaintext-secrets]" in done.stderr and "[disallow-latest-tag]" in done.stderr
    assert "hunter2" not in done.stderr
    assert seconds < 5, f"{seconds:.1f} s"


def _stalled(guard: Guard) -> ssl.SSLSocket:
    """A connection to the webhook that sent its headers and one byte of a 2 MB body."""
    tls = guard.webhook.tls(timeout=30)
    tls.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                b"application/json\r\nContent-Length: 2000000\r\n\r\n{")
    return tls


def test_stalled_bodies_do_not_stop_a_large_pod_from_being_reviewed(
        guard: Guard, kube: ControlPlane) -> None:
    """Two stalled bodies held both large-review turns for ever: a valid 140 KB Pod got
    "context deadline exceeded". Now each is dropped at the request deadline (4 s)."""
    notes = {"example.com/notes": "x" * 140_000}
    holders = [_stalled(guard) for _ in range(2)]
    try:
        time.sleep(3)  # well into the stalled requests' deadline
        good = pod("large-good")
        good["metadata"]["annotations"] = notes
        done = dry_run_create(kube, good)
        assert done.returncode == 0, done.stderr[-500:]
        holders += [_stalled(guard) for _ in range(2)]
        time.sleep(3)
        bad = pod("large-latest", image="nginx:latest")
        bad["metadata"]["annotations"] = notes
        done = dry_run_create(kube, bad)
        assert done.returncode == 1 and JUDGED in done.stderr, done.stderr[-500:]
        assert "[disallow-latest-tag]" in done.stderr
    finally:
        for tls in holders:
            tls.close()


def test_unique_huge_images_do_not_grow_the_webhook(guard: Guard, kube: ControlPlane) -> None:
    """About 100 dry-run creates with unique 2-2.8 MB images took a worker from 107 to
    333 MiB (a cache keyed by the image), past the chart's memory limit."""
    pid = guard.webhook.process.pid

    def create(index: int) -> None:
        image = f"r.example.com/x{index}/{'a' * 2_800_000}:1.0"
        done = dry_run_create(kube, pod(f"huge-{index}", image=image))
        assert done.returncode == 0, done.stderr[-300:]

    for index in range(3):  # what the first big reviews allocate once
        create(index)
    before = rss_mib(pid)
    for index in range(3, 33):
        create(index)
    grown = rss_mib(pid) - before
    # Kept, 30 images of 2.8 MB would be 84 MB (and more for their copies).
    assert grown < 30, f"RSS {before:.0f} -> {before + grown:.0f} MiB"
