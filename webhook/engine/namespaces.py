"""Opt-outs only for those trusted with them: who may make a namespace quickq-guard never judges.

The chart leaves out, by name, the namespaces of `excludeNamespaces` (its systemNamespaces,
the release's own), whether they exist yet or not, and every namespace labelled
`quickq.io/ignore=true`. A tenant allowed to create namespaces could otherwise create
`longhorn-system`, or a namespace born with that label, and run anything in it unjudged. So a
Namespace CREATE with an excluded name, and a CREATE or UPDATE that sets the label, is denied
unless the requester is in `optOutGroups` (or is excluded from judgement altogether:
excludeUsers, excludeGroups). Nothing else about a Namespace is judged. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.engine.globs import matches_any
from webhook.engine.policy import Config
from webhook.engine.results import Finding, Result, Status
from webhook.engine.schema import is_mapping

RESULT_ID = "namespace-opt-out"
IGNORE_LABEL = "quickq.io/ignore"
NAME_PATH = ("metadata", "name")
LABEL_PATH = ("metadata", "labels", IGNORE_LABEL)
# Offline there is no requester, and a Namespace is judged only for who asks for it.
OFFLINE = ("a Namespace is judged only for who creates or labels it (an opt-out needs a "
           "trusted group), which only the webhook knows")


def is_namespace(obj: Any) -> bool:
    """A core/v1 Namespace."""
    return is_mapping(obj) and obj.get("kind") == "Namespace" and obj.get("apiVersion") == "v1"


def judge_opt_outs(obj: Mapping[str, Any], old_object: Any, operation: str,
                   username: str | None, groups: tuple[str, ...], config: Config) -> Result:
    """The one result of a Namespace: fail with a finding per opt-out an untrusted requester
    asks for, pass otherwise; skip offline (no requester)."""
    if username is None and not groups:
        return Result(RESULT_ID, "validate", "enforce", "skip", reason=OFFLINE)
    trusted = _trusted(username, groups, config)
    if trusted:
        return Result(RESULT_ID, "validate", "enforce", "pass", reason=trusted)
    findings = []
    name = _metadata(obj).get("name")
    if operation == "CREATE" and isinstance(name, str) and \
            matches_any(name, config.excludeNamespaces):
        findings.append(Finding(
            f"namespace {name} is one quickq-guard never judges (excludeNamespaces, the "
            f"chart's systemNamespaces); only members of {_named(config)} may create it",
            NAME_PATH))
    old = old_object if operation == "UPDATE" and is_mapping(old_object) else {}
    if _ignored(obj) and not _ignored(old):
        findings.append(Finding(
            f"the label {IGNORE_LABEL}=true leaves every pod of the namespace unjudged; only "
            f"members of {_named(config)} may set it", LABEL_PATH))
    status: Status = "fail" if findings else "pass"
    return Result(RESULT_ID, "validate", "enforce", status, tuple(findings))


def _trusted(username: str | None, groups: tuple[str, ...], config: Config) -> str:
    """Why the requester may opt a namespace out, or '' when not."""
    for group in groups:
        if matches_any(group, config.optOutGroups):
            return f"group {group} may opt namespaces out (optOutGroups)"
    return excluded_requester(username, groups, config)


def excluded_requester(username: str | None, groups: tuple[str, ...], config: Config) -> str:
    """Why the requester is never judged (excludeUsers, excludeGroups), or '' when judged."""
    if username and config.excludeUsers and matches_any(username, config.excludeUsers):
        return f"user {username} is excluded"
    for group in groups if config.excludeGroups else ():
        if matches_any(group, config.excludeGroups):
            return f"group {group} is excluded"
    return ""


def _metadata(obj: Any) -> Mapping[str, Any]:
    metadata = obj.get("metadata") if is_mapping(obj) else None
    return metadata if is_mapping(metadata) else {}


def _ignored(obj: Any) -> bool:
    labels = _metadata(obj).get("labels")
    return is_mapping(labels) and labels.get(IGNORE_LABEL) == "true"


def _named(config: Config) -> str:
    groups = config.optOutGroups
    return ", ".join(groups) if groups else "no group (optOutGroups is empty)"
