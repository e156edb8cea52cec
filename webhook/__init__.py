"""quickq-guard: Kubernetes admission guardrails for GPU inference and training workloads.

The public API is what the webhook and the CLI use themselves, in two steps: decode() a
manifest as the Kubernetes API server hands it to a webhook (or find what it refuses), then
evaluate() it for a Review (everything beside the object: operation, old object, user,
namespace, dry-run, exceptions, claims, time):

    from webhook import Review, decode, evaluate, load_policies
    policies = load_policies()                       # the shipped policies/, or a directory
    decision = evaluate(decode(pod), policies)       # a CREATE, now
    decision.allowed, decision.message, decision.warnings, decision.patch
    update = Review(operation="UPDATE", old_object=decode(old_pod))
    decision = evaluate(decode(pod), policies, update)

An object the API server has decoded already (the webhook's) is evaluated as it is given,
without decode().
"""

from webhook.engine.decode import Decoded, decode
from webhook.engine.evaluate import evaluate
from webhook.engine.policy import Config, Policy, PolicyError, PolicySet
from webhook.engine.results import Decision, Finding, Resource, Result
from webhook.engine.review import Review
from webhook.loader import load_config, load_policies

__all__ = [
    "Config",
    "Decision",
    "Decoded",
    "Finding",
    "Policy",
    "PolicyError",
    "PolicySet",
    "Resource",
    "Result",
    "Review",
    "decode",
    "evaluate",
    "load_config",
    "load_policies",
]
__version__ = "0.1.0"  # the one place: pyproject, --version and SARIF read it; the chart's
# appVersion and the Dockerfile label are checked against it (tests/test_packaging.py)
