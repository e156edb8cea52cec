"""`quickq-guard serve --client-ca`: the API server presents a client certificate (its
AdmissionConfiguration's kubeConfigFile names it), and the webhook takes calls only from a
client whose certificate its CA signed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from cluster_helpers import (
    ControlPlane,
    Guard,
    Webhook,
    container,
    denies_bad_pod,
    issue,
    make_ca,
    pod,
    running,
)

NAMESPACE = "client-ca"
# The validating webhook's: the mutating one is failurePolicy Ignore by default, so its
# failed call admits silently.
FAILED_CALL = 'failed calling webhook "validate.quickq-guard.quickq.io"'



def refused_call(kube: ControlPlane) -> Callable[[], bool]:
    def check() -> bool:
        probe = pod("probe", NAMESPACE)
        done = kube.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe),
                            check=False)
        return FAILED_CALL in done.stderr
    return check


def test_the_api_servers_client_certificate_is_accepted(guard: Guard, kube: ControlPlane,
                                                        tmp_path: Path) -> None:
    with running(Webhook(guard.workdir, guard.certs, "--policies", str(guard.policies),
                         "--config", str(guard.config), client_ca=kube.webhook_client_ca.cert,
                         client=kube.webhook_client)) as webhook, \
            guard.pointed_at(webhook.url, lambda: denies_bad_pod(kube, NAMESPACE)):
        denied = kube.apply(pod("latest", NAMESPACE, container(image="nginx:latest")))
        assert denied.returncode == 1
        assert "[disallow-latest-tag] container 'web'" in denied.stderr
        admitted = kube.apply(pod("good", NAMESPACE))
        assert admitted.returncode == 0, admitted.stderr


def test_a_client_certificate_from_another_ca_is_refused(guard: Guard, kube: ControlPlane,
                                                         tmp_path: Path) -> None:
    other = make_ca(tmp_path, "other-ca")
    with running(Webhook(guard.workdir, guard.certs, "--policies", str(guard.policies),
                         "--config", str(guard.config), client_ca=other.cert,
                         client=issue(other, tmp_path, "other-client", client=True))) as webhook, \
            guard.pointed_at(webhook.url, refused_call(kube)):
        done = kube.apply(pod("refused", NAMESPACE))
        assert done.returncode == 1
        assert FAILED_CALL in done.stderr  # failurePolicy: Fail, as the chart defaults
