"""The server tests' names for the shared builders and server runner in webhook.testing."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette

from webhook.server.app import Guard, Settings, build_app
from webhook.testing import (
    NAMESPACE,
    SERVICE,
    SERVICE_DNS,
    Server,
    bad_pod,
    client_cert,
    file_serial,
    free_port,
    metric,
    post,
    with_probe,
)
from webhook.testing import admission_review as review
from webhook.testing import review_pod as pod

# This checkout.
REPO = Path(__file__).resolve().parents[2]

__all__ = ["NAMESPACE", "REPO", "SERVICE", "SERVICE_DNS", "Server", "app_of", "bad_pod",
           "client_cert", "file_serial", "free_port", "metric", "pod", "post", "posted",
           "review", "with_probe"]


# --- the webhook's app in this process, without a server -------------------------------------

def app_of(certs: Path, **settings: Any) -> Starlette:
    """The webhook's app on the shipped policies; `settings` as `serve`'s (mode=...)."""
    return build_app(Guard(Settings(cert=str(certs / "tls.crt"), key=str(certs / "tls.key"),
                                    policies=None, config=None, **settings)))


def posted(app: Starlette, path: str, *bodies: Any) -> list[httpx.Response]:
    """The app's answer to each body POSTed to `path`, in order."""
    async def send() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="https://test") as client:
            return [await client.post(path, json=body) for body in bodies]
    return asyncio.run(send())


# --- what a fake API client of the cluster-view tests answers -------------------------------

class Item(dict[str, Any]):
    """An object as lightkube's generic client yields it (a dict with to_dict())."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self)


class Listing:
    """A list call's answer: its items, then its resourceVersion (set once read)."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.resourceVersion = "7"

    async def __aiter__(self) -> AsyncIterator[Item]:
        for item in self.items:
            yield Item(item)
