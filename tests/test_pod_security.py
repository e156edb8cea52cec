"""The Pod Security Standards profiles (policies/pod-security/): off by default, switched on
per profile and action by the global config, and, control by control, failing the Pods that
the Standards forbid (tests/pod_security_cases.py; the cluster test compares the same Pods
with the Kubernetes Pod Security Admission controller)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import CONTROLLERS, dotted_prefix, workload
from pod_security_cases import CASES, Case, container, restricted_container

from webhook import Config, PolicyError, Review, decode, evaluate, load_policies
from webhook.engine.policy import PolicySet

BASELINE = {"pss-host-process", "pss-host-namespaces", "pss-privileged",
            "pss-capabilities-baseline", "pss-host-path-volumes", "pss-host-ports",
            "pss-apparmor", "pss-selinux", "pss-proc-mount", "pss-seccomp-baseline",
            "pss-sysctls"}
RESTRICTED_ONLY = {"pss-volume-types", "pss-privilege-escalation", "pss-run-as-non-root",
                   "pss-run-as-user", "pss-seccomp-restricted", "pss-capabilities-restricted"}
# The restricted controls that replace a baseline one, as in the PSA controller.
REPLACED = {"pss-capabilities-baseline", "pss-host-path-volumes", "pss-seccomp-baseline"}
RESTRICTED = (BASELINE - REPLACED) | RESTRICTED_ONLY


def profile(**pod_security: Any) -> PolicySet:
    return load_policies(None, Config.model_validate({"podSecurity": pod_security}))


@pytest.fixture(scope="module")
def levels() -> dict[str, PolicySet]:
    return {"baseline": profile(enforce="baseline"), "restricted": profile(enforce="restricted")}


def pss_actions(loaded: PolicySet) -> dict[str, str]:
    return {p.id: p.action for p in loaded.policies if p.id.startswith("pss-")}


def failing_controls(obj: Any, loaded: PolicySet) -> set[str]:
    decision = evaluate(decode(obj), loaded)
    assert not [r for r in decision.results if r.status == "error"], decision.results
    return {str(r.policy) for r in decision.results
            if r.status == "fail" and str(r.policy).startswith("pss-")}


def test_the_profiles_are_off_unless_the_config_switches_them_on():
    assert pss_actions(load_policies()) == {}
    assert pss_actions(profile()) == {}
    assert pss_actions(profile(enforce="privileged", warn="privileged")) == {}


def test_each_profile_loads_its_controls_with_the_action_it_is_switched_on_for(levels):
    assert pss_actions(levels["baseline"]) == dict.fromkeys(BASELINE, "enforce")
    assert pss_actions(levels["restricted"]) == dict.fromkeys(RESTRICTED, "enforce")
    assert pss_actions(profile(audit="restricted")) == dict.fromkeys(RESTRICTED, "audit")
    assert pss_actions(profile(version="latest", warn="baseline")) == dict.fromkeys(
        BASELINE, "warn")


def test_a_control_runs_once_with_the_strongest_action_that_includes_it():
    mixed = pss_actions(profile(enforce="baseline", warn="restricted", audit="restricted"))
    assert mixed == {**dict.fromkeys(BASELINE, "enforce"),
                     **dict.fromkeys(RESTRICTED_ONLY, "warn")}
    # A Pod that adds SYS_ADMIN is denied by the baseline control and warned about by the
    # restricted one, as PSA denies with enforce=baseline and warns with warn=restricted.
    decision = evaluate(decode(workload("Pod", container(securityContext={
        "capabilities": {"add": ["SYS_ADMIN"]}}))),
                        profile(enforce="baseline", warn="restricted"))
    assert decision.outcome == "denied"
    assert "[pss-capabilities-baseline]" in decision.message
    assert any(w.startswith("[pss-capabilities-restricted]") for w in decision.warnings)


def test_a_policy_override_still_sets_one_control_apart():
    loaded = load_policies(None, Config.model_validate({
        "podSecurity": {"enforce": "restricted"},
        "policies": {"pss-run-as-user": {"action": "warn"}, "pss-sysctls": {"action": "off"}}}))
    actions = pss_actions(loaded)
    assert (actions["pss-run-as-user"], actions["pss-sysctls"],
            actions["pss-privileged"]) == ("warn", "off", "enforce")
    with pytest.raises(PolicyError, match="no policy with id 'pss-run-as-user'"):
        load_policies(None, Config.model_validate({
            "policies": {"pss-run-as-user": {"action": "warn"}}}))


@pytest.mark.parametrize(("settings", "problem"), [
    ({"enforce": "strict"}, "podSecurity.enforce: Input should be 'privileged', 'baseline' "
                            "or 'restricted'"),
    ({"version": "v1.30"}, "podSecurity.version: quickq-guard ships the Pod "
                           "Security Standards of v1.28 only"),
    ({"enforce": "baseline", "level": "x"}, "podSecurity.level: unknown field"),
])
def test_bad_settings_are_refused_naming_the_field(tmp_path, settings, problem):
    config = tmp_path / "config.yaml"
    config.write_text(f"podSecurity: {settings}\n")
    with pytest.raises(PolicyError) as error:
        load_policies(None, config)
    assert str(error.value).startswith(f"{config}: {problem}")


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_each_control_fails_exactly_the_pods_the_standard_forbids(levels, case: Case):
    loaded = levels[case.level]
    obj = case.pod("team")
    if case.ephemeral:
        assert failing_controls(obj, loaded) == set()
        obj = case.with_ephemeral(obj)
    assert failing_controls(obj, loaded) == set(case.expect)


def controller(kind: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A pod controller of `kind`, ReplicationController (a core kind PSA judges) included."""
    if kind != "ReplicationController":
        return workload(kind, *containers, **spec)
    obj = workload("ReplicaSet", *containers, **spec)
    obj.update(apiVersion="v1", kind=kind)
    obj["spec"]["selector"] = obj["spec"]["selector"]["matchLabels"]
    return obj


@pytest.mark.parametrize("kind", [*CONTROLLERS, "ReplicationController"])
def test_controllers_are_judged_by_their_pod_template(levels, kind):
    loaded = levels["restricted"]
    bad = controller(kind, restricted_container(runAsUser=0), hostIPC=True,
                     securityContext={"runAsNonRoot": True,
                                      "seccompProfile": {"type": "RuntimeDefault"}})
    assert failing_controls(bad, loaded) == {"pss-run-as-user", "pss-host-namespaces"}
    good = controller(kind, restricted_container(), securityContext={
        "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}})
    assert failing_controls(good, loaded) == set()
    # AppArmor annotations live on the pod template's metadata in a controller.
    template = good["spec"]["jobTemplate"]["spec"]["template"] if kind == "CronJob" \
        else good["spec"]["template"]
    template["metadata"]["annotations"] = {
        "container.apparmor.security.beta.kubernetes.io/app": "unconfined"}
    assert failing_controls(good, loaded) == {"pss-apparmor"}


def test_findings_name_the_container_and_field_and_say_what_to_change(levels):
    obj = workload("Deployment", restricted_container("a"),
                   restricted_container("b", capabilities={"drop": ["ALL"],
                                                           "add": ["SYS_ADMIN", "NET_ADMIN"]}),
                   securityContext={"runAsNonRoot": True, "runAsUser": 0,
                                    "seccompProfile": {"type": "RuntimeDefault"}})
    decision = evaluate(decode(obj), levels["restricted"])
    [caps] = [r for r in decision.results if r.policy == "pss-capabilities-restricted"]
    [found] = caps.findings
    assert found.container == "b"
    assert found.path == f"{dotted_prefix('Deployment')}.containers[1].securityContext." \
                         "capabilities.add"
    assert found.message == ("container 'b': adds the capabilities SYS_ADMIN, NET_ADMIN; "
                             "remove them from securityContext.capabilities.add (only "
                             "NET_BIND_SERVICE may be added)")
    # A pod-level setting is one finding about the pod, not one per container.
    [user] = [r for r in decision.results if r.policy == "pss-run-as-user"]
    assert [(f.container, f.path) for f in user.findings] == [
        (None, "spec.template.spec.securityContext.runAsUser")]
    assert "[pss-run-as-user] the pod sets securityContext.runAsUser: 0 (root); set a " \
           "non-zero uid (field: spec.template.spec.securityContext.runAsUser)" \
           in decision.message


def test_an_update_warns_about_what_the_pod_already_had_and_denies_what_is_new(levels):
    loaded = levels["baseline"]
    old = workload("Pod", container(), hostPID=True)
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox:1.36",
                                           "securityContext": {"privileged": True}}]
    decision = evaluate(decode(new), loaded, Review(operation="UPDATE", old_object=decode(old)))
    assert decision.outcome == "denied"
    assert decision.message.count("\n- ") == 1
    assert "[pss-privileged] ephemeralContainer 'debug': runs privileged" in decision.message
    assert any(w.startswith("[pss-host-namespaces]") and "already violated" in w
               for w in decision.warnings)


def test_dry_run_mode_and_excluded_namespaces_apply_to_the_profiles_too():
    privileged = workload("Pod", container(securityContext={"privileged": True}))
    dry = load_policies(None, Config.model_validate({"mode": "dry-run",
                                                     "podSecurity": {"enforce": "baseline"}}))
    decision = evaluate(decode(privileged), dry)
    assert (decision.allowed, decision.outcome) == (True, "would-deny")
    privileged["metadata"]["namespace"] = "team-a"
    excluded = evaluate(decode(privileged),
                        load_policies(None, Config.model_validate(
        {"excludeNamespaces": ["team-*"], "podSecurity": {"enforce": "baseline"}})))
    assert excluded.allowed and all(r.status == "skip" for r in excluded.results)


def test_explicit_nulls_count_as_unset(levels):
    obj = workload("Pod", container(securityContext=None, ports=None))
    obj["spec"].update(securityContext=None, volumes=None)
    assert failing_controls(obj, levels["baseline"]) == set()
    obj["spec"]["containers"][0]["securityContext"] = {
        "capabilities": None, "seLinuxOptions": None, "seccompProfile": None,
        "windowsOptions": None, "privileged": None, "procMount": None}
    assert failing_controls(obj, levels["baseline"]) == set()
    obj["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": None}}
    assert failing_controls(obj, levels["baseline"]) == set()
    obj["spec"]["securityContext"] = {"sysctls": None, "seLinuxOptions": None}
    assert failing_controls(obj, levels["baseline"]) == set()
