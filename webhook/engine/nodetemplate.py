"""The QuickQ NodeTemplate resource as a pydantic model: the source of `quickq-guard
validate-nodetemplates`, of the shipped JSON Schema (webhook/schemas/nodetemplate.schema.json)
and of the CRD's schema.

The model is strict where a typo is likely (unknown fields in spec, probes, resources) and
open where Kubernetes itself allows many shapes (volume sources).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
)

from webhook.engine.quantity import NON_NEGATIVE_PATTERN, parse_quantity


def _quantity(value: Any) -> Any:
    if parse_quantity(value) is None:
        shown = repr(value) if isinstance(value, str) else str(value)
        raise ValueError(f"{shown} is not a valid quantity; use e.g. 500m, 2, 256Mi or 1Gi")
    return value


Quantity = Annotated[
    str | int | float,
    BeforeValidator(_quantity),
    WithJsonSchema({
        "anyOf": [{"type": "string", "pattern": NON_NEGATIVE_PATTERN},
                  {"type": "number", "minimum": 0}],
        "description": "A Kubernetes quantity: 500m, 2, 256Mi, 1Gi, 1e3.",
    }),
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Metadata(Open):
    name: str = Field(min_length=1, max_length=253,
                      pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class Resources(Strict):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class SecretKeyRef(Strict):
    name: str = Field(min_length=1)
    key: str = Field(min_length=1)
    optional: bool | None = None


class ConfigMapKeyRef(SecretKeyRef):
    pass


class EnvSource(Strict):
    secretKeyRef: SecretKeyRef | None = None
    configMapKeyRef: ConfigMapKeyRef | None = None
    fieldRef: dict[str, Any] | None = None
    resourceFieldRef: dict[str, Any] | None = None


class EnvVar(Strict):
    name: str = Field(min_length=1)
    value: str | None = None
    valueFrom: EnvSource | None = None


class Volume(Open):
    """A Kubernetes volume: a name and one volume source (persistentVolumeClaim, emptyDir...)."""

    name: str = Field(min_length=1)


class HTTPGet(Strict):
    path: str | None = None
    port: int | str
    host: str | None = None
    scheme: Literal["HTTP", "HTTPS"] | None = None
    httpHeaders: list[dict[str, str]] | None = None


class TCPSocket(Strict):
    port: int | str
    host: str | None = None


class ExecAction(Strict):
    command: list[str]


class GRPCAction(Strict):
    port: int
    service: str | None = None


class Probe(Strict):
    httpGet: HTTPGet | None = None
    tcpSocket: TCPSocket | None = None
    exec: ExecAction | None = None
    grpc: GRPCAction | None = None
    initialDelaySeconds: int | None = Field(default=None, ge=0)
    periodSeconds: int | None = Field(default=None, ge=1)
    timeoutSeconds: int | None = Field(default=None, ge=1)
    successThreshold: int | None = Field(default=None, ge=1)
    failureThreshold: int | None = Field(default=None, ge=1)
    terminationGracePeriodSeconds: int | None = Field(default=None, ge=1)


class Health(Strict):
    liveness: Probe | None = None
    readiness: Probe | None = None
    startup: Probe | None = None


class SecurityContext(Strict):
    runAsUser: int | None = Field(default=None, ge=0)
    runAsGroup: int | None = Field(default=None, ge=0)
    runAsNonRoot: bool | None = None
    fsGroup: int | None = Field(default=None, ge=0)
    readOnlyRootFilesystem: bool | None = None
    allowPrivilegeEscalation: bool | None = None
    privileged: bool | None = None
    capabilities: dict[str, list[str]] | None = None
    seccompProfile: dict[str, str] | None = None
    seLinuxOptions: dict[str, str] | None = None


class Toleration(Strict):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = None
    tolerationSeconds: int | None = None


class Port(Strict):
    name: str | None = None
    containerPort: int = Field(ge=1, le=65535)
    protocol: Literal["TCP", "UDP", "SCTP"] | None = None


class NodeTemplateSpec(Strict):
    image: str = Field(min_length=1, description="The image with its version: registry/app:1.2.3")
    resources: Resources
    env: list[EnvVar] = Field(default_factory=list)
    volumes: list[Volume] = Field(default_factory=list)
    health: Health | None = None
    securityContext: SecurityContext | None = None
    tolerations: list[Toleration] = Field(default_factory=list)
    ports: list[Port] = Field(default_factory=list)
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)


class NodeTemplate(Strict):
    """A QuickQ custom node template (apiVersion quickq/v1 or quickq.io/v1)."""

    apiVersion: str = Field(pattern=r"^quickq(\.io)?/v1$")
    kind: Literal["NodeTemplate"]
    metadata: Metadata
    spec: NodeTemplateSpec


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a NodeTemplate, as shipped for editors and the CRD."""
    schema = NodeTemplate.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://quickq.io/schemas/nodetemplate.schema.json"
    return schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def lint(obj: Any) -> list[str]:
    """Problems with a NodeTemplate, one per field: `spec.resources.requests.memory: ...`."""
    try:
        NodeTemplate.model_validate(obj)
    except ValidationError as error:
        problems = []
        for item in error.errors():
            field = ".".join(str(part) for part in item["loc"]
                             if not str(part).startswith(("function-", "str", "int", "float")))
            reason = "unknown field" if item["type"] == "extra_forbidden" else item["msg"]
            reason = reason.removeprefix("Value error, ")
            problems.append(f"{field or '(document)'}: {reason}")
        return sorted(set(problems), key=problems.index)
    return []
