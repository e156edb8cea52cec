"""The hardening suite runs against the same real server as tests/server: its helpers and
fixtures (one CA, one enforce-mode `quickq-guard serve` per module) are reused as they are."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SERVER_TESTS = Path(__file__).resolve().parent.parent / "server"
if str(SERVER_TESTS) not in sys.path:
    sys.path.insert(0, str(SERVER_TESTS))

_spec = importlib.util.spec_from_file_location("_server_conftest", SERVER_TESTS / "conftest.py")
assert _spec is not None and _spec.loader is not None
_server_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_server_conftest)

certs_dir = _server_conftest.certs_dir
server = _server_conftest.server
client = _server_conftest.client
