"""no-plaintext-secrets: secret-named env variables take their value from a Secret, and no
output of quickq-guard ever repeats the value."""

from __future__ import annotations

import json

import pytest
from builders import container, judge, messages, node_template, paths, pod, result, with_config

from webhook import Review, decode, load_policies
from webhook.cli.formats import NAMES, render_all
from webhook.cli.judge import Judged
from webhook.manifests import Document

PLANTED = "pl4nted-S3cret-value-93f1"


def env_pod(*entries, **changes):
    return pod(container(env=list(entries)), **changes)


@pytest.mark.parametrize("name", [
    "DB_PASSWORD", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "db_password", "MYSQL_PASSWD",
    "API_KEY", "APIKEY", "OPENAI_API_KEY", "SSH_PRIVATE_KEY", "AWS_ACCESS_KEY",
    "GCP_CREDENTIALS", "git-credential", "app.secret", "Secret", "hf.token",
    "dbPassword", "githubToken", "APIKey", "OAuthToken",
])
def test_secret_names_with_a_literal_value_are_denied(name):
    decision = judge(env_pod({"name": "LOG_LEVEL", "value": "info"},
                             {"name": name, "value": PLANTED}))
    assert not decision.allowed
    assert messages(decision, "no-plaintext-secrets") == [
        f"container 'app': env {name} holds a literal value; move it into a Secret and "
        "reference it with valueFrom.secretKeyRef"]
    assert paths(decision, "no-plaintext-secrets") == ["spec.containers[0].env[1].value"]


@pytest.mark.parametrize("name", [
    "TOKENIZER_PATH", "SECRET_NAME", "TOKEN_FILE", "PASSWORD_FILE", "SECRETS_DIR",
    "API_TOKEN_REF", "MODEL_PATH", "KEY", "PRIMARY_KEY", "MONKEY", "PASSWORDLESS",
    "KEYCLOAK_URL", "ACCESS_LOG", "tokenizerPath", "secretName",
])
def test_names_that_do_not_hold_a_secret_pass(name):
    decision = judge(env_pod({"name": name, "value": "/var/run/x"}))
    assert result(decision, "no-plaintext-secrets").status == "pass", name


def test_secret_from_a_secret_key_ref_or_an_empty_value_passes():
    decision = judge(env_pod(
        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
        {"name": "API_TOKEN", "value": ""},
    ))
    assert result(decision, "no-plaintext-secrets").status == "pass"


def test_init_container_and_node_template_env_are_checked():
    obj = pod(container(), initContainers=[
        container("init", env=[{"name": "GITHUB_TOKEN", "value": PLANTED}])])
    assert paths(judge(obj), "no-plaintext-secrets") == ["spec.initContainers[0].env[0].value"]
    template = node_template(env=[{"name": "DB_PASSWORD", "value": PLANTED}])
    assert paths(judge(template), "no-plaintext-secrets") == ["spec.env[0].value"]


def _everything_said(decision, policies) -> str:
    """Every text quickq-guard derives from a decision: messages, warnings, annotations, and
    every output format of `check`."""
    judged = [Judged(Document("pod.yaml:1", file="pod.yaml", line=1, column=1), decision)]
    parts = [decision.message, *decision.warnings, json.dumps(dict(decision.audit_annotations)),
             *(render_all(name, judged, policies) for name in NAMES),
             *(f.message for r in decision.results for f in r.findings),
             *(r.reason for r in decision.results), *(f.path for r in decision.results
                                                     for f in r.findings)]
    return "\n".join(parts)


@pytest.mark.parametrize("mode", ["enforce", "dry-run"])
def test_the_secret_value_appears_nowhere_in_the_decision(mode):
    policies = with_config(mode=mode)
    obj = env_pod({"name": "DB_PASSWORD", "value": PLANTED},
                  {"name": "AWS_SECRET_ACCESS_KEY", "value": PLANTED + "-2"})
    decision = judge(obj, policies)
    said = _everything_said(decision, policies)
    assert "DB_PASSWORD" in said and "AWS_SECRET_ACCESS_KEY" in said
    assert PLANTED not in said


def test_the_secret_value_is_not_repeated_in_update_warnings():
    obj = env_pod({"name": "DB_PASSWORD", "value": PLANTED})
    decision = judge(obj, review=Review(operation="UPDATE", old_object=decode(obj)))
    assert decision.allowed
    assert any("DB_PASSWORD" in w for w in decision.warnings)
    assert PLANTED not in _everything_said(decision, load_policies())


def test_numeric_literal_secret_is_refused_by_kubernetes_and_is_not_echoed():
    # An env value must be a string: the API server refuses a number before any policy runs.
    decision = judge(env_pod({"name": "PIN_PASSWORD", "value": 93817265}))
    assert decision.outcome == "error"
    assert "spec.containers[0].env[0].value: expected a string, got a number" in decision.message
    assert "93817265" not in _everything_said(decision, load_policies())


def test_words_are_configurable_and_extra_words_are_detected():
    policies = with_config(policies={"no-plaintext-secrets": {"params": {"words": ["PIN"]}}})
    decision = judge(env_pod({"name": "CARD_PIN", "value": "12-34"},
                             {"name": "DB_PASSWORD", "value": "x"}), policies)
    assert paths(decision, "no-plaintext-secrets") == ["spec.containers[0].env[0].value"]


# --- values that are settings about a secret, not one ---------------------------------------


@pytest.mark.parametrize(("name", "value"), [
    ("ALLOW_EMPTY_PASSWORD", "yes"), ("ALLOW_EMPTY_PASSWORD", "NO"),
    ("ENABLE_TOKEN_AUTH", "true"), ("TOKEN_AUTH_ENABLED", "False"), ("SECRET_ROTATION", "On"),
    ("USE_API_KEY", "off"), ("REQUIRE_PASSWORD", " yes "),
    ("PASSWORD_MIN_LENGTH", "12"), ("TOKEN_TTL", "3600"), ("SECRET_VERSION", "2"),
    ("TOKEN_REFRESH_RATIO", "0.75"), ("PASSWORD_RETRIES", "-1"), ("TOKEN_LIMIT", "+5"),
    ("DATABASE_PASSWORD", "$(POSTGRES_PASSWORD)"),
    ("REDIS_PASSWORD", "$(REDIS_PRIMARY_PASSWORD)$(REDIS_SUFFIX)"),
    ("API_KEY", "$(OPENAI_API_KEY)"),
])
def test_a_boolean_word_a_number_or_only_references_are_not_secrets(name, value):
    decision = judge(env_pod({"name": name, "value": value}))
    assert result(decision, "no-plaintext-secrets").status == "pass", (name, value)


@pytest.mark.parametrize(("name", "value"), [
    ("DB_PASSWORD", "123456"), ("MYSQL_ROOT_PASSWORD", " 0000 "), ("API_KEY", "42"),
    ("AWS_SECRET_ACCESS_KEY", "3.14159"), ("ADMIN_TOKEN", "-1"),
])
def test_a_number_is_a_secret_where_the_name_is_the_secret_itself(name, value):
    decision = judge(env_pod({"name": name, "value": value}))
    assert result(decision, "no-plaintext-secrets").status == "fail", (name, value)
    assert value.strip() not in decision.message


@pytest.mark.parametrize("value", [
    "yes-really", "y", "truely", "0x1F", "12a", "1e9", "1 2", "$$(POSTGRES_PASSWORD)",
    "$(USER):$(PASSWORD)", "postgres://app:$(PASSWORD)@db/app", "$(PASSWORD", "$()",
    "hunter2", PLANTED,
])
def test_anything_else_is_still_a_literal_and_is_not_echoed(value):
    decision = judge(env_pod({"name": "DB_PASSWORD", "value": value}))
    assert paths(decision, "no-plaintext-secrets") == ["spec.containers[0].env[0].value"]
    if len(value) > 4:
        assert value not in _everything_said(decision, load_policies())


def test_a_secret_read_from_a_config_map_is_denied_without_echoing_anything():
    decision = judge(env_pod(
        {"name": "LOG_LEVEL", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "log"}}},
        {"name": "HF_TOKEN", "valueFrom": {"configMapKeyRef": {"name": "hf-" + PLANTED,
                                                              "key": "token"}}},
        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
    ))
    assert not decision.allowed
    assert messages(decision, "no-plaintext-secrets") == [
        "container 'app': env HF_TOKEN is read from a ConfigMap, which is stored and shown in "
        "plaintext; put it in a Secret and reference it with valueFrom.secretKeyRef"]
    assert paths(decision, "no-plaintext-secrets") == [
        "spec.containers[0].env[1].valueFrom.configMapKeyRef"]
    assert PLANTED not in _everything_said(decision, load_policies())


def test_config_map_reads_are_found_in_init_containers_and_node_templates():
    ref = {"configMapKeyRef": {"name": "creds", "key": "token"}}
    obj = pod(container(), initContainers=[
        container("fetch", env=[{"name": "GITHUB_TOKEN", "valueFrom": ref}])])
    assert paths(judge(obj), "no-plaintext-secrets") == [
        "spec.initContainers[0].env[0].valueFrom.configMapKeyRef"]
    template = node_template(env=[{"name": "apiKey", "valueFrom": ref}])
    assert paths(judge(template), "no-plaintext-secrets") == [
        "spec.env[0].valueFrom.configMapKeyRef"]


# --- shapes met in public AI repositories -----------------------------------------------------


@pytest.mark.parametrize(("name", "value"), [
    ("GOOGLE_APPLICATION_CREDENTIALS", "/var/secrets/google/key.json"),  # a mounted Secret
    ("AWS_WEB_IDENTITY_TOKEN", "/var/run/secrets/eks.amazonaws.com/serviceaccount/token"),
    ("TOKEN_URL", "https://oauth2.googleapis.com/token"),
    ("HF_TOKEN_ENDPOINT", "https://huggingface.co/api/whoami-v2"),
    ("OAUTH_TOKEN", "https://auth.example.com/oauth/token"),  # a URL without credentials
    ("API_KEY_HEADER", "X-API-Key"),
    ("DATABASE_URL", "postgres://db.example.com:5432/app"),
    ("DATABASE_URL", "postgres://app:$(DB_PASSWORD)@db:5432/app"),
    ("ENCRYPTION_KEY", "0" * 64),  # a placeholder
    ("CACHE_KEY", "user-id"),
    ("MODEL_REVISION", "0123456789abcdef0123456789abcdef01234567"),  # a commit, no key
])
def test_paths_urls_and_header_names_pass(name, value):
    decision = judge(env_pod({"name": name, "value": value}))
    assert result(decision, "no-plaintext-secrets").status == "pass", (name, value)


@pytest.mark.parametrize(("name", "value", "says"), [
    ("ENCRYPTION_KEY", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
     "holds what looks like key material"),
    ("SIGNING_KEY", "kQ8vX2mZp4Lr7Tn1Wy6Bc3Hd9Fg5Js0AeUoIiYt",
     "holds what looks like key material"),
    ("DATABASE_URL", "postgres://user:pw@host/db", "holds a URL with credentials in it"),
    ("REDIS_URL", "redis://:hunter2@redis:6379/0", "holds a URL with credentials in it"),
    ("WEBHOOK", "https://hooks.example.com/x?token=abc123", "holds a URL with credentials"),
    ("TOKEN_URL", "https://user:pw@auth.example.com/token", "holds a URL with credentials"),
])
def test_key_material_and_urls_with_credentials_are_denied(name, value, says):
    decision = judge(env_pod({"name": name, "value": value}))
    [message] = messages(decision, "no-plaintext-secrets")
    assert message.startswith(f"container 'app': env {name} ") and says in message
    assert not decision.allowed and value not in _everything_said(decision, load_policies())
    assert paths(decision, "no-plaintext-secrets") == ["spec.containers[0].env[0].value"]


# --- secrets as the kubelet and the clients see them (issue 32) ------------------------------

OPENAI = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"


def test_references_expand_as_the_kubelet_expands_them():
    from webhook.engine.rules.secrets import expand

    defined = {"A": "x", "B": None, "E": ""}
    assert expand("$(A)-$(B)-$(C)-$$(A)-$$$(A)-$(E)-$(A", defined) == "x-$(B)-$(C)-$(A)-$x--$(A"
    assert expand("$", defined) == "$" and expand("a$$", defined) == "a$"


def test_a_reference_is_judged_as_the_kubelet_expands_it_under_the_name_receiving_it():
    decision = judge(env_pod({"name": "PW", "value": PLANTED},
                             {"name": "POSTGRES_PASSWORD", "value": "$(PW)"},
                             {"name": "DSN", "value": "postgres://app:$(PW)@db/app"}))
    assert not decision.allowed
    assert messages(decision, "no-plaintext-secrets") == [
        "container 'app': env POSTGRES_PASSWORD receives a literal value through its $(...) "
        "references to other variables, which the kubelet fills in; move the value into a "
        "Secret and reference it with valueFrom.secretKeyRef"]
    assert paths(decision, "no-plaintext-secrets") == ["spec.containers[0].env[1].value"]
    assert PLANTED not in _everything_said(decision, load_policies())
    # From a Secret, defined later or nowhere: the kubelet puts no literal there.
    for entries in (
            ({"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
             {"name": "POSTGRES_PASSWORD", "value": "$(PW)"}),
            ({"name": "POSTGRES_PASSWORD", "value": "$(PW)"}, {"name": "PW", "value": PLANTED}),
            ({"name": "POSTGRES_PASSWORD", "value": "$(NOWHERE)"},)):
        assert result(judge(env_pod(*entries)), "no-plaintext-secrets").status == "pass", entries


@pytest.mark.parametrize("name", [
    "PGPASSWORD", "MYSQL_PWD", "RABBITMQ_DEFAULT_PASS", "DB_PASS", "DBPASSWORD", "REDISCLI_AUTH",
    "MONGO_INITDB_ROOT_PASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AZURE_CLIENT_SECRET", "AZURE_STORAGE_CONNECTION_STRING", "OPENAI_API_KEYS", "HF_TOKENS",
    "GPG_PASSPHRASE",
])
def test_the_credential_variables_of_common_clients_and_plurals_name_secrets(name):
    decision = judge(env_pod({"name": name, "value": PLANTED}))
    assert paths(decision, "no-plaintext-secrets") == ["spec.containers[0].env[0].value"], name


@pytest.mark.parametrize(("name", "value"), [
    ("ROUTER_TOKEN_TRACKER_TIME_UNIT", "seconds"), ("MAX_TOKENS", "4096"),
    ("MAX_NEW_TOKENS", "512"), ("TOKEN_LIMIT", "high"), ("PASS_THROUGH", "headers"),
    ("SECRET_ROTATION_INTERVAL", "24h"), ("PASSWORD_MIN_LENGTH", "twelve"),
])
def test_settings_that_count_llm_tokens_or_tune_a_secret_pass(name, value):
    decision = judge(env_pod({"name": name, "value": value}))
    assert result(decision, "no-plaintext-secrets").status == "pass", (name, value)


@pytest.mark.parametrize(("value", "kind"), [
    (OPENAI, "an OpenAI API key"), (f"{OPENAI};{OPENAI}", "an OpenAI API key"),
    ("sk-ant-api03-" + "Zx9_Yw8-Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe" * 2, "an Anthropic API key"),
    ("hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", "a Hugging Face token"),
    (GITHUB, "a GitHub token"), ("AKIAIOSFODNN7EXAMPLE", "an AWS access key"),
    ("AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "a Google Cloud API key"),
    ("xoxb-123456789012-abcdefABCDEF", "a Slack token"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n", "a private key"),
    (f"Bearer {JWT}", "a JSON Web Token"),
])
def test_well_known_credentials_are_recognized_by_value_in_env_args_and_command(value, kind):
    obj = pod(container(env=[{"name": "LLM_CONFIG", "value": value}],
                        command=["/bin/server"], args=["--api-key", value, "--verbose"]))
    decision = judge(obj)
    assert not decision.allowed
    assert messages(decision, "no-plaintext-secrets") == [
        f"container 'app': env LLM_CONFIG holds {kind}; move it into a Secret and reference it "
        "with valueFrom.secretKeyRef",
        f"container 'app': args[1] holds {kind}; move it into a Secret and reference it with "
        "valueFrom.secretKeyRef"]
    assert paths(decision, "no-plaintext-secrets") == [
        "spec.containers[0].env[0].value", "spec.containers[0].args[1]"]
    said = _everything_said(decision, load_policies())
    assert value.split()[-1] not in said and value.splitlines()[0] not in said


def test_a_literal_after_a_secret_flag_is_a_finding_and_a_reference_passes():
    decision = judge(pod(container(args=["--password", PLANTED, "--db-token=" + PLANTED,
                                         "--api-key", "$(API_KEY)", "--log-level", "info",
                                         "--host=0.0.0.0", "--key=/etc/tls/tls.key",
                                         "--mode=enforce", "--token-file", "/var/run/t"])))
    assert paths(decision, "no-plaintext-secrets") == ["spec.containers[0].args[1]",
                                                       "spec.containers[0].args[2]"]
    assert messages(decision, "no-plaintext-secrets")[0] == (
        "container 'app': args[1] gives --password a literal value; pass it from a Secret "
        "instead (an env variable with valueFrom.secretKeyRef, written $(VAR) in the argument)")
    assert PLANTED not in _everything_said(decision, load_policies())


# KubeAI's model manifests (kubeai-project/kubeai, manifests/models) pass vLLM
# --max-num-batched-token=8192: a count of tokens, not a token.
def test_a_number_given_a_flag_that_counts_is_a_setting_and_a_pin_is_still_a_secret():
    decision = judge(pod(container(args=[
        "--max-num-batched-token=8192", "--max-num-batched-tokens", "8192", "--max-token", "100",
        "--min-token=1", "--num-tokens=5", "--api-token=123456", "--password", "4242"])))
    assert paths(decision, "no-plaintext-secrets") == ["spec.containers[0].args[7]",
                                                       "spec.containers[0].args[9]"]


def test_config_maps_are_judged_by_their_data_keys_and_values():
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "db-credentials", "namespace": "team-a"},
              "data": {"DB_PASSWORD": PLANTED, "LOG_LEVEL": "info", "TOKEN_TTL": "3600",
                       "no-plaintext-secrets.yaml": "id: no-plaintext-secrets\n",
                       "client.yaml": f"openai:\n  key: {OPENAI}\n", "ca.crt": "-----BEGIN "
                       "CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}}
    decision = judge(config)
    assert not decision.allowed
    assert paths(decision, "no-plaintext-secrets") == ["data.DB_PASSWORD", "data[client.yaml]"]
    assert messages(decision, "no-plaintext-secrets")[0].startswith(
        "data key DB_PASSWORD holds a literal value, which a ConfigMap stores and shows")
    assert {r.status for r in decision.results if r.policy != "no-plaintext-secrets"} == {"skip"}
    said = _everything_said(decision, load_policies())
    assert PLANTED not in said and OPENAI not in said
    # kube-root-ca.crt, as kube-controller-manager writes it in every namespace, passes.
    root_ca = {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "kube-root-ca.crt", "namespace": "team-a"},
               "data": {"ca.crt": config["data"]["ca.crt"]}}
    assert judge(root_ca).allowed


def test_expansion_is_bounded_and_linear_whatever_the_references():
    """B="$(A)"x1000, C="$(B)"x1000 would fill in 100 GB: past a budget of 1 MiB per object
    values are judged as written; and a value of 300,000 unclosed `$(` is one pass."""
    import time

    big = "x" * 100_000
    entries = [{"name": "A", "value": big}, {"name": "B", "value": "$(A)" * 1000},
               {"name": "C", "value": "$(B)" * 1000}, {"name": "D", "value": "$(" * 300_000}]
    start = time.perf_counter()
    decision = judge(env_pod(*entries))
    assert time.perf_counter() - start < 5
    assert result(decision, "no-plaintext-secrets").status in ("pass", "fail")


def test_a_short_url_with_a_password_is_still_a_finding_whatever_the_name():
    decision = judge(env_pod({"name": "API_KEY_HEADER", "value": "s://u:$(a@b)@h"},
                             {"name": "DSN", "value": "pg://u:pw@h"}))
    assert paths(decision, "no-plaintext-secrets") == ["spec.containers[0].env[0].value",
                                                       "spec.containers[0].env[1].value"]
