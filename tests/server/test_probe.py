"""The probe `quickq-guard cluster arm` and `helm test` send: on a dry run, a Pod with the
probe annotation gets a warning naming the endpoint that answered, denied or not."""

from __future__ import annotations

import httpx
import pytest
from server_helpers import post, review

from webhook.cli.cluster import probe_pod
from webhook.server.admission import probe_warning


@pytest.mark.parametrize("endpoint", ["validate", "mutate"])
def test_a_dry_run_probe_says_which_endpoint_answered(client: httpx.Client,
                                                      endpoint: str) -> None:
    response = post(client, f"/{endpoint}", review(probe_pod("team-a", "r.example/p:1.0"),
                                                   dry_run=True))
    assert response["allowed"] is True
    assert response["warnings"] == [probe_warning(endpoint)]
    assert probe_warning(endpoint, "ns/qg") == f"quickq-guard ns/qg: {endpoint} answered the probe"


def test_a_denied_probe_says_it_too(client: httpx.Client) -> None:
    response = post(client, "/validate", review(probe_pod("team-a", "r.example/p:latest"),
                                                dry_run=True))
    assert response["allowed"] is False
    assert "[disallow-latest-tag]" in response["status"]["message"]
    assert response["warnings"][0] == probe_warning("validate")


def test_without_dry_run_the_annotation_changes_nothing(client: httpx.Client) -> None:
    response = post(client, "/validate", review(probe_pod("team-a", "r.example/p:1.0")))
    assert "warnings" not in response
