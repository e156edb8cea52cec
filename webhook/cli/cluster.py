"""`quickq-guard cluster`: what the chart's hook Jobs do through the API server.

- `arm`: wait until both webhooks answer a server-side dry-run create, then switch them from
  `failurePolicy: Ignore` to the configured policies (post-install and post-upgrade hook). A
  webhook that never answered (an image that cannot be pulled, a wrong caBundle) is left at
  Ignore, so a failed install never blocks the cluster.
- `probe`: one dry-run create and what quickq-guard said about it (`helm test`).
- `remove`: delete the webhook configurations (pre-delete hook), so none is left behind
  pointing at a Service that is about to go.

A probe is a Pod with the annotation PROBE_ANNOTATION: on a dry-run request the server adds
the warning `quickq-guard <instance>: <endpoint> answered the probe` (`serve --instance`),
which tells an answer from a call that failed open, whatever the policies in force say about
the Pod, and this install's answer from another's.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from webhook.cli.exits import EXIT_FAILED, EXIT_OK, CliError, note

if TYPE_CHECKING:
    from webhook.cli.kubeapi import Answer, Api

ARMED_ANNOTATION = "quickq.io/failure-policy-armed"
VALIDATING = "validatingwebhookconfigurations"
# The chart's webhook entry for ConfigMaps, which stays failurePolicy Ignore once armed: the
# cluster's own components write ConfigMaps in every namespace (kube-root-ca.crt).
ALWAYS_IGNORE = "configmaps."
MUTATING = "mutatingwebhookconfigurations"
ENDPOINT = {VALIDATING: "validate", MUTATING: "mutate"}
POLICIES = ("Fail", "Ignore")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "cluster", help="arm, probe or remove the webhooks through the API server",
        description="What the Helm chart's hook Jobs run. In a Pod the ServiceAccount's "
                    "token is used; elsewhere pass --kubeconfig, or --server and credentials.")
    actions = parser.add_subparsers(title="actions", required=True, metavar="ACTION")
    arm = actions.add_parser(
        "arm", help="switch failurePolicy once the webhooks answer",
        description="Probe with server-side dry-run creates until every named webhook "
                    "answered one, then set each configuration's failurePolicy. Exit 1, "
                    "leaving them as they are, if that does not happen within --timeout.")
    _configurations(arm, with_policy=True)
    _probe_options(arm)
    arm.add_argument("--timeout", type=float, default=300, help="seconds (default: 300)")
    arm.add_argument("--interval", type=float, default=2, help=argparse.SUPPRESS)
    arm.set_defaults(command=run_arm)
    probe = actions.add_parser(
        "probe", help="one dry-run create, and what quickq-guard said",
        description="Dry-run create a probe Pod and check quickq-guard's answer: exit 0 "
                    "when it is the one --expect names, 1 when not.")
    _probe_options(probe)
    probe.add_argument("--image", default="registry.invalid/quickq-guard-probe:1.0",
                       help="the probe container's image (default: %(default)s)")
    probe.add_argument("--expect", choices=("answered", "denied", "warned"),
                       default="answered",
                       help="answered (by /validate), denied or warned by --policy")
    probe.add_argument("--policy", default="", help="the policy id the denial or warning names")
    probe.set_defaults(command=run_probe)
    remove = actions.add_parser("remove", help="delete the webhook configurations")
    _configurations(remove, with_policy=False)
    _connection(remove)
    remove.set_defaults(command=run_remove)


def _configurations(parser: argparse.ArgumentParser, with_policy: bool) -> None:
    shape = "NAME=Fail|Ignore" if with_policy else "NAME"
    parser.add_argument("--validating", metavar=shape, action="append", default=[],
                        help="a ValidatingWebhookConfiguration (repeatable)")
    parser.add_argument("--mutating", metavar=shape, action="append", default=[],
                        help="a MutatingWebhookConfiguration (repeatable)")


def _probe_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", required=True,
                        help="where the probe Pod is dry-run created (a judged namespace)")
    parser.add_argument("--instance", default="",
                        help="the install whose answer counts: its `serve --instance`")
    _connection(parser)


def _connection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="a kubeconfig file (its current context)")
    parser.add_argument("--server", help="API server URL (default: the Pod's)")
    parser.add_argument("--token-file", help="bearer token file")
    parser.add_argument("--certificate-authority", help="CA bundle of the API server")
    parser.add_argument("--client-certificate", help="client certificate (PEM)")
    parser.add_argument("--client-key", help="client key (PEM)")


def _api(args: argparse.Namespace) -> Api:
    from webhook.cli import kubeapi  # lightkube: here, every other command starts without it

    return kubeapi.Api(kubeapi.config(args.kubeconfig, args.server, args.token_file,
                                      args.certificate_authority, args.client_certificate,
                                      args.client_key))


def _targets(args: argparse.Namespace, with_policy: bool) -> list[tuple[str, str, str]]:
    """(resource, name, policy) of each configuration named on the command line."""
    targets = []
    for resource, names in ((VALIDATING, args.validating), (MUTATING, args.mutating)):
        for item in names:
            name, _, policy = item.partition("=")
            if with_policy and policy not in POLICIES:
                raise CliError(f"--{ENDPOINT[resource]}ing {item}: say NAME=Fail or "
                               "NAME=Ignore")
            if not name:
                raise CliError(f"--{ENDPOINT[resource]}ing {item}: the name is empty")
            targets.append((resource, name, policy))
    if not targets:
        raise CliError("name at least one --validating or --mutating configuration")
    return targets


def probe_pod(namespace: str, image: str) -> dict[str, Any]:
    """A Pod the shipped policies admit with the default image; the annotation makes the
    server say it answered."""
    from webhook.server.admission import PROBE_ANNOTATION  # only this command needs the server's

    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "quickq-guard-probe-", "namespace": namespace,
                     "labels": {"app": "quickq-guard-probe"},
                     "annotations": {PROBE_ANNOTATION: "true"}},
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe", "image": image,
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                              "limits": {"memory": "16Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }


def answered(answer: Answer, resource: str, instance: str) -> bool:
    """Whether this install's webhook of `resource` judged the probe (and did not fail open):
    its warning comes with a denial too."""
    from webhook.server.admission import probe_warning

    return probe_warning(ENDPOINT[resource], instance) in answer.warnings


def run_arm(args: argparse.Namespace) -> int:
    targets = _targets(args, with_policy=True)
    api = _api(args)
    deadline = time.monotonic() + args.timeout
    last = ""
    while True:
        answer = api.dry_run_create(probe_pod(args.namespace,
                                              "registry.invalid/quickq-guard-probe:1.0"))
        waiting = [resource for resource in {t[0] for t in targets}
                   if not answered(answer, resource, args.instance)]
        if not waiting:
            break
        said = answer.refusal or "admitted, no answer"
        status = f"{', '.join(sorted(ENDPOINT[r] for r in waiting))} not answering: {said}"
        if status != last:
            note(status)
            last = status
        if time.monotonic() >= deadline:
            note(f"no answer within {args.timeout:g}s; the webhook configurations keep "
                 "their failurePolicy (Ignore after an install: nothing is blocked)")
            return EXIT_FAILED
        time.sleep(args.interval)
    for resource, name, policy in targets:
        set_failure_policy(api, resource, name, policy)
        print(f"{resource}/{name}: failurePolicy {policy}")
    return EXIT_OK


def set_failure_policy(api: Api, resource: str, name: str, policy: str) -> None:
    """JSON-patch every webhook of the configuration to `policy` and mark it armed; each
    `test` guards against a configuration changed since it was read."""
    got = api.get(resource, name)
    ops: list[dict[str, Any]] = []
    for index, webhook in enumerate(got.get("webhooks") or []):
        if str(webhook.get("name", "")).startswith(ALWAYS_IGNORE):
            continue  # ConfigMaps: never held up by a webhook that is down
        ops += [{"op": "test", "path": f"/webhooks/{index}/name", "value": webhook["name"]},
                {"op": "replace", "path": f"/webhooks/{index}/failurePolicy", "value": policy}]
    if "annotations" in (got.get("metadata") or {}):
        ops.append({"op": "add", "path": "/metadata/annotations/"
                    + ARMED_ANNOTATION.replace("~", "~0").replace("/", "~1"), "value": "true"})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations",
                    "value": {ARMED_ANNOTATION: "true"}})
    api.json_patch(resource, name, ops)


def run_probe(args: argparse.Namespace) -> int:
    answer = _api(args).dry_run_create(probe_pod(args.namespace, args.image))
    said = answer.refusal or "admitted"
    tag = f"[{args.policy}]" if args.policy else "["
    if args.expect == "answered":
        good = answered(answer, VALIDATING, args.instance)
    elif args.expect == "denied":
        good = (answered(answer, VALIDATING, args.instance) and answer.refusal is not None
                and tag in said)
    else:
        good = (answered(answer, VALIDATING, args.instance) and answer.refusal is None
                and any(w.startswith(tag) for w in answer.warnings))
    for warning in answer.warnings:
        print(f"Warning: {warning}")
    print(said)
    if not good:
        note(f"expected the probe to be {args.expect}"
             + (f" by {args.policy}" if args.policy and args.expect != "answered" else ""))
    return EXIT_OK if good else EXIT_FAILED


def run_remove(args: argparse.Namespace) -> int:
    api = _api(args)
    for resource, name, _ in _targets(args, with_policy=False):
        deleted = api.delete(resource, name)
        print(f"{resource}/{name}: {'deleted' if deleted else 'gone already'}")
    return EXIT_OK
