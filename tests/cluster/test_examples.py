"""The examples do what their comments say on a cluster with the chart installed:
`kubectl apply -f examples/good/` succeeds, and every file in examples/bad/ is denied by
quickq-guard itself, kubectl printing exactly what the file's comment shows."""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_helpers import REPO, ControlPlane, Guard

BAD = sorted((REPO / "examples" / "bad").glob("*.yaml"))
SHOWN = "#   "  # comment lines holding what kubectl prints


def promised_output(path: Path) -> list[str]:
    return [line[len(SHOWN):] for line in path.read_text().splitlines()
            if line.startswith(SHOWN)]


def test_kubectl_apply_of_the_good_examples_succeeds(guard: Guard) -> None:
    done = guard.plane.kubectl("apply", "-f", "examples/good/", check=False)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr
    stored = guard.plane.kubectl("get", "pods,deployments,nodetemplates.quickq.io",
                                 "-n", "default", "-o", "name").stdout.split()
    for name in ("pod/api", "pod/llm-inference", "deployment.apps/web",
                 "nodetemplate.quickq.io/gpu-inference-01"):
        assert name in stored


@pytest.mark.parametrize("path", BAD, ids=[path.name for path in BAD])
def test_each_bad_example_is_denied_by_quickq_guard_as_its_comment_shows(
        guard: Guard, path: Path) -> None:
    kube: ControlPlane = guard.plane
    relative = path.relative_to(REPO)
    done = kube.kubectl("apply", "-f", str(relative), check=False)
    assert done.returncode == 1
    assert 'admission webhook "validate.quickq-guard.quickq.io" denied the request' \
        in done.stderr
    assert done.stderr.splitlines() == promised_output(path), done.stderr
