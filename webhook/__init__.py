"""quickq-guard: Kubernetes admission guardrails for GPU inference and training workloads.

The public API is what the webhook and the CLI use themselves:

    from webhook import load_policies, evaluate
    policies = load_policies()              # the shipped policies/, or a directory of yours
    decision = evaluate(pod, policies)      # operation="UPDATE", old_object=... for updates
    decision.allowed, decision.message, decision.warnings, decision.patch
"""

from webhook.engine.evaluate import evaluate
from webhook.engine.policy import Config, Policy, PolicyError, PolicySet
from webhook.engine.results import Decision, Finding, Resource, Result
from webhook.loader import load_config, load_policies

__all__ = [
    "Config",
    "Decision",
    "Finding",
    "Policy",
    "PolicyError",
    "PolicySet",
    "Resource",
    "Result",
    "evaluate",
    "load_config",
    "load_policies",
]
__version__ = "0.1.0"  # the one place: pyproject, --version and SARIF read it; the chart's
# appVersion and the Dockerfile label are checked against it (tests/test_packaging.py)
