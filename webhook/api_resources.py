"""The lightkube classes of the kinds quickq-guard reads and writes, one per kind and process.

lightkube registers each generic class it makes, and for a core-group kind (group "") it looks
for an earlier one under another key than it registers it: a second `create_*_resource` of the
same core kind fails ("Another class for resource 'Pod' is already registered"). The webhook's
views, the audit and the cluster hooks can all run in one process (a user's script, the
tests), so they take their classes from here, which looks in lightkube's registry first.
"""

from __future__ import annotations

from typing import Any

from lightkube.generic_resource import (
    create_global_resource,
    create_namespaced_resource,
    get_generic_resource,
)


def resource(group: str, version: str, kind: str, plural: str, namespaced: bool = True) -> Any:
    """The generic lightkube class of a kind: the one lightkube holds, else a new one."""
    made = get_generic_resource(  # type: ignore[no-untyped-call]
        f"{group}/{version}" if group else version, kind)
    if made is not None:
        return made
    make = create_namespaced_resource if namespaced else create_global_resource
    return make(group, version, kind, plural)
