"""Warnings exactly as kubectl prints them, after the API server has passed them on: it drops
repeated texts and, past 4096 bytes of warnings, cuts and drops the rest."""

from __future__ import annotations

import json

from cluster_helpers import ControlPlane, Guard, container, liveness, pod, warnings_of

NAMESPACE = "warnings"
SHORT_LIVENESS = ("[liveness-probe-tolerance] container '{}': livenessProbe restarts after 30s "
                  "of failures (failureThreshold 3 x periodSeconds 10); raise "
                  "livenessProbe.failureThreshold to 6 or more (>= 60s)")



def test_each_finding_reaches_kubectl_whole_for_every_container(kube: ControlPlane) -> None:
    """Two containers with the same too-short liveness probe: two whole warnings, each with
    its fix at the end (a finding wrapped over two warnings lost its ending, since the API
    server drops the second container's identical continuation)."""
    probe = liveness(period=10, threshold=3)
    done = kube.apply(pod("two-probes", NAMESPACE, container("a", livenessProbe=probe),
                          container("b", livenessProbe=probe)))
    assert done.returncode == 0, done.stderr
    assert warnings_of(done.stderr) == [SHORT_LIVENESS.format("a"), SHORT_LIVENESS.format("b")]


def test_past_the_warning_budget_kubectl_shows_whole_findings_and_a_count(
        guard: Guard, kube: ControlPlane) -> None:
    names = [f"c{index:02d}" for index in range(40)]
    probe = liveness(period=10, threshold=3)
    done = kube.apply(pod("many-probes", NAMESPACE,
                          *[container(name, livenessProbe=probe) for name in names]))
    assert done.returncode == 0, done.stderr
    warnings = warnings_of(done.stderr)
    shown, last = warnings[:-1], warnings[-1]
    assert shown == [SHORT_LIVENESS.format(name) for name in names[:len(shown)]]
    assert last == (f"quickq-guard: {len(names) - len(shown)} more finding(s) not shown here; "
                    "the webhook log lists each")
    # "the webhook log lists each": the review's log line names every finding, those left
    # out of the warnings included, by policy, container and field path (never a value).
    reviews = [json.loads(line) for line in guard.webhook.output().splitlines()
               if line.startswith("{") and '"many-probes"' in line]
    [validate] = [line for line in reviews if line.get("endpoint") == "validate"]
    logged = {(f["policy"], f["container"], f["path"]) for f in validate["findings"]}
    for index, name in enumerate(names):
        assert ("liveness-probe-tolerance", name,
                f"spec.containers[{index}].livenessProbe.failureThreshold") in logged
