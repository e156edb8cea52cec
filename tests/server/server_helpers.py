"""The server tests' names for the shared builders and server runner in webhook.testing."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

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

# This checkout (webhook.testing.REPO is the package's parent, which is not the checkout when
# the tests run on the compiled build scripts/compiled installs).
REPO = Path(__file__).resolve().parents[2]

__all__ = ["NAMESPACE", "REPO", "SERVICE", "SERVICE_DNS", "Server", "bad_pod", "client_cert",
           "file_serial", "free_port", "metric", "pod", "post", "review", "with_probe"]


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
