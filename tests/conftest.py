"""Shared fixtures for the engine, policy and CLI tests (builders live in builders.py)."""

from __future__ import annotations

import pytest
from builders import default_policies

from webhook import PolicySet


@pytest.fixture
def policies() -> PolicySet:
    """The shipped default policies under the default config."""
    return default_policies()
