"""A review's `operation` is one of the four the API server sends, and every metric label
value comes from a fixed set: made-up kinds or operations must not grow /metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_helpers import pod, review
from starlette.applications import Starlette

from webhook.server import metrics
from webhook.server.app import Guard, Settings, build_app


@pytest.fixture(scope="module")
def app(certs_dir: Path) -> Starlette:
    guard = Guard(Settings(cert=str(certs_dir / "tls.crt"), key=str(certs_dir / "tls.key"),
                           policies=None, config=None))
    return build_app(guard)


def _post(app: Starlette, path: str, bodies: list[Any]) -> list[httpx.Response]:
    async def send() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="https://test") as client:
            return [await client.post(path, json=body) for body in bodies]
    return asyncio.run(send())


@pytest.mark.parametrize("operation", ["EVIL\nOP", "create", "PATCH", "CREATE ", "Update"])
def test_an_operation_the_api_server_never_sends_is_a_400(app: Starlette,
                                                          operation: str) -> None:
    body = review(pod())
    body["request"]["operation"] = operation
    [answer] = _post(app, "/validate", [body])
    assert answer.status_code == 400
    assert "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT" in \
        answer.json()["error"]


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_operations_that_are_not_judged_are_still_allowed(app: Starlette,
                                                         operation: str) -> None:
    body = review(pod())
    body["request"]["operation"] = operation
    [answer] = _post(app, "/validate", [body])
    assert answer.status_code == 200 and answer.json()["response"]["allowed"] is True


def test_made_up_kinds_are_counted_as_other(app: Starlette) -> None:
    bodies = []
    for number in range(200):
        body = review(pod())
        body["request"]["kind"] = {"group": "", "version": "v1", "kind": f"Made{number}"}
        body["request"]["object"]["kind"] = f"Made{number}"
        bodies.append(body)
    answers = _post(app, "/validate", bodies)
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
