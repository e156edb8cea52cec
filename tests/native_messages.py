"""How the API server joins an exported policy's messages, for the tests that compare them
with quickq-guard's findings (tests/test_cel_defaults.py, tests/cluster/test_native_proof.py).
"""

from __future__ import annotations

# The forms whose items are the keys of a map (a container's GPU resources): Kubernetes
# iterates a map in no fixed order, so the exported message gives a container's findings in
# an order of its own.
MAP_ORDER = frozenset({"require-gpu-limits"})


def joined(message: str, findings: list[str], any_order: bool = False) -> bool:
    """Whether the message is some of the findings, in their order (`any_order`: in any),
    joined by '; '."""
    for index, found in enumerate(findings):
        rest = findings[:index] + findings[index + 1:] if any_order else findings[index + 1:]
        if message == found or (message.startswith(found + "; ")
                                and joined(message[len(found) + 2:], rest, any_order)):
            return True
    return False
