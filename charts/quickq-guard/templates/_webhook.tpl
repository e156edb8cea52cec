{{/*
Shared body of the validating and mutating webhooks. The namespaceSelector leaves out the
system namespaces, the release's own and those labelled quickq.io/ignore=true; the
matchConditions leave out excluded users and groups and the mirror pods kubelets make. The
API server applies both before it calls, so none of them waits for a webhook that is down.
*/}}
{{- define "quickq-guard.webhookBody" -}}
{{- $root := .root -}}
{{- $mutating := eq .path "/mutate" -}}
{{- $configMaps := .configMaps -}}
admissionReviewVersions: [v1]
sideEffects: None
failurePolicy: {{ .failurePolicy }}
timeoutSeconds: {{ $root.Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
clientConfig:
  {{- with $root.Values.webhook.url }}
  url: {{ printf "%s%s" (trimSuffix "/" .) $.path | quote }}
  {{- else }}
  service:
    name: {{ .svc }}
    namespace: {{ .ns }}
    path: {{ .path }}
    port: {{ $root.Values.service.port }}
  {{- end }}
  {{- with .caBundle }}
  caBundle: {{ . }}
  {{- end }}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ include "quickq-guard.excludedNamespaces" $root }}
    - key: quickq.io/ignore
      operator: NotIn
      values: ["true"]
{{- with $root.Values.webhook.objectSelector }}
objectSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
matchConditions:
  {{- include "quickq-guard.matchConditions" (dict "root" $root "mutating" $mutating "configMaps" $configMaps) | nindent 2 }}
rules:
  {{- if $configMaps }}
  - apiGroups: [""]
    apiVersions: [v1]
    resources: [configmaps]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  {{- else }}
  {{- if $mutating }}
  # A Pod is patched on CREATE only; its UPDATEs never reach the mutating webhook.
  - apiGroups: [""]
    apiVersions: [v1]
    resources: [pods]
    operations: [CREATE]
    scope: Namespaced
  - apiGroups: [""]
    apiVersions: [v1]
    resources: [replicationcontrollers]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  {{- else }}
  # pods/ephemeralcontainers: what `kubectl debug` adds to a running Pod.
  - apiGroups: [""]
    apiVersions: [v1]
    resources: [pods, pods/ephemeralcontainers, replicationcontrollers]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  {{- end }}
  - apiGroups: [apps]
    apiVersions: [v1]
    resources: [deployments, replicasets, statefulsets, daemonsets]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  - apiGroups: [batch]
    apiVersions: [v1]
    resources: [jobs, cronjobs]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  {{- with include "quickq-guard.workloadKindRules" $root | trim }}
  {{- . | nindent 2 }}
  {{- end }}
  {{- if and (not $mutating) $root.Values.workloadKinds.resourceClaims }}
  # DRA claims are judged (gpu-resource-claims), never patched.
  - apiGroups: [resource.k8s.io]
    apiVersions: ["*"]
    resources: [resourceclaims, resourceclaimtemplates]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  {{- end }}
  {{- with $root.Values.nodeTemplate.groups }}
  - apiGroups: {{ toJson . }}
    apiVersions: ["*"]
    resources: [nodetemplates]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  {{- end }}
  {{- end }}
{{- end -}}

{{/*
The chart's matchConditions, then webhook.matchConditions. Every field read is guarded with
has(): an expression that fails counts as the webhook failing (failurePolicy), which is no
way to skip a call. With `namespaces`, those of the namespaces webhook: excluded users and
groups, then only a requester outside config.optOutGroups asking for an opt-out (a CREATE
with an excluded name, or the quickq.io/ignore=true label where the old object had none).
*/}}
{{- define "quickq-guard.matchConditions" -}}
{{- $root := .root -}}
{{- $config := $root.Values.config -}}
{{- $conditions := list -}}
{{- with $config.excludeUsers -}}
{{- $conditions = append $conditions (dict "name" "quickq-guard-exclude-users" "expression" (printf "!has(request.userInfo.username) || !(%s)" (include "quickq-guard.globsCel" (dict "globs" . "value" "request.userInfo.username")))) -}}
{{- end -}}
{{- with $config.excludeGroups -}}
{{- $conditions = append $conditions (dict "name" "quickq-guard-exclude-groups" "expression" (printf "!has(request.userInfo.groups) || !request.userInfo.groups.exists(g, %s)" (include "quickq-guard.globsCel" (dict "globs" . "value" "g")))) -}}
{{- end -}}
{{- if .namespaces -}}
{{- with $config.optOutGroups -}}
{{- $conditions = append $conditions (dict "name" "quickq-guard-untrusted" "expression" (printf "!has(request.userInfo.groups) || !request.userInfo.groups.exists(g, %s)" (include "quickq-guard.globsCel" (dict "globs" . "value" "g")))) -}}
{{- end -}}
{{- $names := include "quickq-guard.globsCel" (dict "globs" (include "quickq-guard.excludedNamespaces" $root | fromJsonArray) "value" "object.metadata.name") -}}
{{- $ignored := "has(%[1]s.metadata.labels) && 'quickq.io/ignore' in %[1]s.metadata.labels && %[1]s.metadata.labels['quickq.io/ignore'] == 'true'" -}}
{{- $conditions = append $conditions (dict "name" "quickq-guard-opt-out" "expression" (printf "(request.operation == 'CREATE' && has(object.metadata.name) && (%s)) || (%s && !(oldObject != null && %s))" $names (printf $ignored "object") (printf $ignored "oldObject"))) -}}
{{- toYaml $conditions -}}
{{- else -}}
{{- /* Only a kubelet makes mirror pods (Kubernetes' node identifier: a system:node:<name>
user in the system:nodes group); anyone else's pod with the annotation is judged. */ -}}
{{- $conditions = append $conditions (dict "name" "quickq-guard-skip-mirror-pods" "expression" "!(request.resource.resource == 'pods' && has(object.metadata.annotations) && 'kubernetes.io/config.mirror' in object.metadata.annotations && has(request.userInfo.username) && request.userInfo.username.startsWith('system:node:') && has(request.userInfo.groups) && 'system:nodes' in request.userInfo.groups)") -}}
{{- if .configMaps -}}
{{- $conditions = append $conditions (dict "name" "quickq-guard-skip-cluster-components" "expression" "!has(request.userInfo.username) || !(request.userInfo.username.startsWith('system:node:') || request.userInfo.username.startsWith('system:serviceaccount:kube-system:') || request.userInfo.username in ['system:kube-controller-manager', 'system:kube-scheduler', 'system:apiserver'])") -}}
{{- end -}}
{{- if .mutating -}}
{{- $conditions = append $conditions (dict "name" "quickq-guard-skip-deployment-replicasets" "expression" "!(request.resource.group == 'apps' && request.resource.resource == 'replicasets' && has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, o.kind == 'Deployment' && o.apiVersion.startsWith('apps/') && has(o.controller) && o.controller))") -}}
{{- end -}}
{{- toYaml (concat $conditions $root.Values.webhook.matchConditions) -}}
{{- end -}}
{{- end -}}

{{/*
A CEL test of `value` against shell globs as the engine reads them (`*` any run, `?` one
character; values.schema.json refuses `[`): names without a glob in one list, a lone
trailing `*` as a prefix, the rest as RE2 patterns.
*/}}
{{- define "quickq-guard.globsCel" -}}
{{- $value := .value -}}
{{- $exact := list -}}
{{- $prefixes := list -}}
{{- $patterns := list -}}
{{- range .globs -}}
{{- $rest := trimSuffix "*" . -}}
{{- if not (or (contains "*" .) (contains "?" .)) -}}
{{- $exact = append $exact . -}}
{{- else if not (or (contains "*" $rest) (contains "?" $rest)) -}}
{{- $prefixes = append $prefixes $rest -}}
{{- else -}}
{{- $patterns = append $patterns (printf "^%s$" (regexQuoteMeta . | replace `\*` ".*" | replace `\?` ".")) -}}
{{- end -}}
{{- end -}}
{{- $tests := list -}}
{{- with $exact -}}
{{- $tests = append $tests (printf "%s in %s" $value (toJson .)) -}}
{{- end -}}
{{- with $prefixes -}}
{{- $tests = append $tests (printf "%s.exists(p, %s.startsWith(p))" (toJson .) $value) -}}
{{- end -}}
{{- with $patterns -}}
{{- $tests = append $tests (printf "%s.exists(r, %s.matches(r))" (toJson .) $value) -}}
{{- end -}}
{{- join " || " $tests -}}
{{- end -}}


{{/*
Rules for the ML workload kinds switched on in workloadKinds (their CRDs may be absent, so
each API group is opt-in) and for the custom kinds. Cluster-scoped runtimes get their own
rule: a namespaceSelector does not apply to them.
*/}}
{{- define "quickq-guard.workloadKindRules" -}}
{{- $groups := list -}}
{{- $kinds := .Values.workloadKinds -}}
{{- if $kinds.kserve -}}
{{- $groups = append $groups (dict "group" "serving.kserve.io" "namespaced" (list "inferenceservices" "servingruntimes") "cluster" (list "clusterservingruntimes")) -}}
{{- end -}}
{{- if $kinds.kubeflowTraining -}}
{{- $groups = append $groups (dict "group" "kubeflow.org" "namespaced" (list "pytorchjobs" "tfjobs" "mpijobs" "xgboostjobs" "paddlejobs" "jaxjobs")) -}}
{{- end -}}
{{- if $kinds.kubeflowTrainer -}}
{{- $groups = append $groups (dict "group" "trainer.kubeflow.org" "namespaced" (list "trainingruntimes") "cluster" (list "clustertrainingruntimes")) -}}
{{- end -}}
{{- if $kinds.ray -}}
{{- $groups = append $groups (dict "group" "ray.io" "namespaced" (list "rayclusters" "rayjobs" "rayservices")) -}}
{{- end -}}
{{- if $kinds.jobset -}}
{{- $groups = append $groups (dict "group" "jobset.x-k8s.io" "namespaced" (list "jobsets")) -}}
{{- end -}}
{{- if $kinds.leaderWorkerSet -}}
{{- $groups = append $groups (dict "group" "leaderworkerset.x-k8s.io" "namespaced" (list "leaderworkersets")) -}}
{{- end -}}
{{- if $kinds.volcano -}}
{{- $groups = append $groups (dict "group" "batch.volcano.sh" "namespaced" (list "jobs")) -}}
{{- end -}}
{{- if $kinds.kaito -}}
{{- $groups = append $groups (dict "group" "kaito.sh" "namespaced" (list "workspaces")) -}}
{{- end -}}
{{- if $kinds.appWrapper -}}
{{- $groups = append $groups (dict "group" "workload.codeflare.dev" "namespaced" (list "appwrappers")) -}}
{{- end -}}
{{- if $kinds.argo -}}
{{- $groups = append $groups (dict "group" "argoproj.io" "namespaced" (list "workflows" "workflowtemplates" "cronworkflows") "cluster" (list "clusterworkflowtemplates")) -}}
{{- end -}}
{{- if $kinds.aibrix -}}
{{- $groups = append $groups (dict "group" "orchestration.aibrix.ai" "namespaced" (list "stormservices" "rayclusterfleets")) -}}
{{- end -}}
{{- if $kinds.ome -}}
{{- $groups = append $groups (dict "group" "ome.io" "namespaced" (list "inferenceservices" "servingruntimes") "cluster" (list "clusterservingruntimes")) -}}
{{- end -}}
{{- if $kinds.dynamo -}}
{{- $groups = append $groups (dict "group" "nvidia.com" "namespaced" (list "dynamographdeployments")) -}}
{{- end -}}
{{- if $kinds.nim -}}
{{- $groups = append $groups (dict "group" "apps.nvidia.com" "namespaced" (list "nimservices")) -}}
{{- end -}}
{{- if $kinds.kubeai -}}
{{- $groups = append $groups (dict "group" "kubeai.org" "namespaced" (list "models")) -}}
{{- end -}}
{{- if $kinds.llmd -}}
{{- $groups = append $groups (dict "group" "llm-d.ai" "namespaced" (list "modelservices")) -}}
{{- end -}}
{{- range .Values.customKinds -}}
{{- if eq (default "Namespaced" .scope) "Cluster" -}}
{{- $groups = append $groups (dict "group" .group "cluster" (list .resource)) -}}
{{- else -}}
{{- $groups = append $groups (dict "group" .group "namespaced" (list .resource)) -}}
{{- end -}}
{{- end -}}
{{- range $groups }}
{{- $group := .group }}
{{- if .namespaced }}
- apiGroups: [{{ $group | quote }}]
  apiVersions: ["*"]
  resources: {{ .namespaced | toJson }}
  operations: [CREATE, UPDATE]
  scope: Namespaced
{{- end }}
{{- if .cluster }}
- apiGroups: [{{ $group | quote }}]
  apiVersions: ["*"]
  resources: {{ .cluster | toJson }}
  operations: [CREATE, UPDATE]
  scope: Cluster
{{- end }}
{{- end }}
{{- end -}}

{{/*
The namespaces webhook: who may opt a namespace out (webhook.engine.namespaces). It has the
validating webhook's failurePolicy, yet can never lock the cluster out: its matchConditions
send it only an opt-out asked for by someone outside config.optOutGroups (and not excluded),
so the API server's own namespaces, an admin's requests and every other namespace create or
update never wait for it. No namespaceSelector: on a Namespace it would be matched against
that namespace itself, and leave out exactly the names and the label this webhook is for.
*/}}
{{- define "quickq-guard.namespacesWebhook" -}}
{{- $root := .root -}}
admissionReviewVersions: [v1]
sideEffects: None
failurePolicy: {{ .failurePolicy }}
timeoutSeconds: {{ $root.Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
clientConfig:
  {{- with $root.Values.webhook.url }}
  url: {{ printf "%s%s" (trimSuffix "/" .) $.path | quote }}
  {{- else }}
  service:
    name: {{ .svc }}
    namespace: {{ .ns }}
    path: {{ .path }}
    port: {{ $root.Values.service.port }}
  {{- end }}
  {{- with .caBundle }}
  caBundle: {{ . }}
  {{- end }}
matchConditions:
  {{- include "quickq-guard.matchConditions" (dict "root" $root "namespaces" true) | nindent 2 }}
rules:
  - apiGroups: [""]
    apiVersions: [v1]
    resources: [namespaces]
    operations: [CREATE, UPDATE]
    scope: Cluster
{{- end -}}
