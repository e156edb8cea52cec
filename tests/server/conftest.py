"""Fixtures for the server tests: one CA and serving certificate, one enforce-mode server per
module that asks for it, and the app in process (helpers live in server_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_helpers import NAMESPACE, SERVICE, Server, app_of
from starlette.applications import Starlette

from webhook.server.certs import ensure_certs


@pytest.fixture(scope="session")
def certs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    ensure_certs(out, SERVICE, NAMESPACE, days=2)
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certs_dir: Path) -> Iterator[Server]:
    """The shipped policies in enforce mode."""
    running = Server(tmp_path_factory.mktemp("server"), certs_dir)
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    """A TLS client of the module's server (a module with another server defines its own)."""
    with server.client() as client:
        yield client


@pytest.fixture(scope="module")
def app(certs_dir: Path) -> Starlette:
    """The webhook's app in this process, on the shipped policies in enforce mode."""
    return app_of(certs_dir)
