"""A review's `operation` is one of the four the API server sends, and every metric label
value comes from a fixed set: made-up kinds or operations must not grow /metrics."""

from __future__ import annotations

import pytest
from server_helpers import pod, posted, review
from starlette.applications import Starlette

from webhook.server import metrics


@pytest.mark.parametrize("operation", ["EVIL\nOP", "create", "PATCH", "CREATE ", "Update"])
def test_an_operation_the_api_server_never_sends_is_a_400(app: Starlette,
                                                          operation: str) -> None:
    body = review(pod())
    body["request"]["operation"] = operation
    [answer] = posted(app, "/validate", body)
    assert answer.status_code == 400
    assert "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT" in \
        answer.json()["error"]


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_operations_that_are_not_judged_are_still_allowed(app: Starlette,
                                                         operation: str) -> None:
    body = review(pod())
    body["request"]["operation"] = operation
    [answer] = posted(app, "/validate", body)
    assert answer.status_code == 200 and answer.json()["response"]["allowed"] is True


def test_made_up_kinds_are_counted_as_other(app: Starlette) -> None:
    bodies = []
    for number in range(200):
        body = review(pod())
        body["request"]["kind"] = {"group": "", "version": "v1", "kind": f"Made{number}"}
        body["request"]["object"]["kind"] = f"Made{number}"
        bodies.append(body)
    answers = posted(app, "/validate", *bodies)
    assert {answer.status_code for answer in answers} == {200}
    text = metrics.render().decode()
    assert "Made" not in text
    assert 'kind="other"' in text


def test_label_values_come_from_a_fixed_set() -> None:
    assert metrics.kind_label("Deployment") == "Deployment"
    assert metrics.kind_label("PyTorchJob") == "PyTorchJob"
    assert metrics.kind_label("Widget") == "other"
    assert metrics.kind_label("Widget", ["Widget"]) == "Widget"
    assert metrics.kind_label("") == "unknown"
