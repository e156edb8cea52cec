"""CEL forms of built-in rules, for the export only (policies/cel-forms/).

A built-in rule is Python, which no API server runs. Where CEL would slow the webhook below
its speed target (disallow-latest-tag in CEL takes ~3x the time of the rule), the webhook
and `check` keep the rule and the export writes out its CEL form instead: a CEL policy
file of the same id whose findings (message, container, field) tests/test_cel_defaults.py
holds equal to the rule's. A form is used only for a rule that the policy runs under its own
id, with the params the form was written for (its own `params`, none for a param-less rule):
other params would need other validations. The policy's action and match (with the
config's overrides) carry over.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from webhook.engine.policy import Policy, PolicySet
from webhook.loader import default_policies_dir, load_policies

FORMS_DIR = default_policies_dir() / "cel-forms"
# Why each other built-in validate rule has no CEL form: what `export` says, and the table
# of docs/export.md. A lookup no admission policy can make, a finding CEL cannot word or place
# the same, or a form not written yet.
PYTHON_ONLY = {
    "gpu-claim-usage": (
        "it reads the ResourceClaims and ResourceClaimTemplates a pod names, which an "
        "admission policy cannot look up"),
    "gpu-resource-claims": (
        "it judges ResourceClaims and ResourceClaimTemplates, whose kinds the export does not "
        "cover; no CEL form written"),
    "valid-resource-quantities": (
        "no CEL form needed: the API server itself refuses an invalid quantity (decoding) "
        "and a request above its limit (validation) before any admission policy runs"),
}


# What an exported form leaves to the webhook: a lookup no admission policy can make. `export`
# says it (a note) and docs/export.md's table does.
FORM_GAPS = {
    "no-plaintext-secrets": (
        "the exported policy judges each env value as written: $(VAR) references as the "
        "kubelet expands them, credentials of well-known formats, args and command, and "
        "ConfigMaps themselves are judged by the webhook"),
    "disallow-latest-tag": (
        "OCI image volumes (volumes[].image.reference) are not judged by the exported policy, "
        "whose CEL form judges each container in container scope; the webhook judges them"),
    "gpu-priority-class": (
        "pods that get GPUs only through DRA claims are not asked for a priority class by the "
        "exported policy (whether a claim hands out GPUs is its device class, and it cannot "
        "look the claim up); the webhook asks"),
    "require-kueue-queue": (
        "workloads whose pods get GPUs only through DRA claims are not asked for a Kueue queue "
        "by the exported policy (whether a claim hands out GPUs is its device class, and it "
        "cannot look the claim up); the webhook asks"),
}


def gap(policy: Policy) -> str:
    """What the policy, exported from its CEL form, leaves to the webhook ('' for nothing)."""
    if policy.cel is None or Path(policy.source).parent != FORMS_DIR:
        return ""
    return FORM_GAPS.get(policy.id, "")


def with_cel_forms(policies: PolicySet) -> PolicySet:
    """The policies, each built-in rule that has a CEL form replaced by it, for export."""
    forms = {form.id: form for form in load_policies(FORMS_DIR).policies}
    out = []
    for policy in policies.policies:
        form = forms.get(policy.id)
        if form is not None and form.cel is not None and policy.rule is not None \
                and policy.rule.name == policy.id \
                and policy.params.model_dump(mode="json") == _plain(form.cel.params):
            policy = replace(form, action=policy.action, match=policy.match,
                             description=policy.description)
        out.append(policy)
    return PolicySet(tuple(out), policies.config)


def _plain(params: Any) -> Any:
    """A form's params as JSON data, to compare with a rule's."""
    return json.loads(json.dumps(dict(params), default=list))
