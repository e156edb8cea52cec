"""CEL forms of built-in rules, for the export only (policies/cel-forms/).

A built-in rule is Python, which no API server runs. Where CEL would slow the webhook below
its speed target (disallow-latest-tag in CEL takes ~3x the time of the rule), the webhook
and `check` keep the rule and the export writes out its CEL form instead: a CEL policy
file of the same id whose findings (message, container, field) tests/test_cel_defaults.py
holds equal to the rule's. A form is used only for a param-less rule that the policy runs
under its own id; the policy's action and match (with the config's overrides) carry over.
"""

from __future__ import annotations

from dataclasses import replace

from webhook.engine.policy import PolicySet
from webhook.loader import default_policies_dir, load_policies

FORMS_DIR = default_policies_dir() / "cel-forms"


def with_cel_forms(policies: PolicySet) -> PolicySet:
    """The policies, each built-in rule that has a CEL form replaced by it, for export."""
    forms = {form.id: form for form in load_policies(FORMS_DIR).policies}
    out = []
    for policy in policies.policies:
        form = forms.get(policy.id)
        if form is not None and policy.rule is not None and policy.rule.name == policy.id \
                and not type(policy.params).model_fields:
            policy = replace(form, action=policy.action, match=policy.match,
                             description=policy.description)
        out.append(policy)
    return PolicySet(tuple(out), policies.config)
