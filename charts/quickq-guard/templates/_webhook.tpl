{{/*
Shared body of the validating and mutating webhooks. The namespaceSelector
leaves out the system namespaces and the release's own, so a broken webhook
can never block the pods that would repair it.
*/}}
{{- define "quickq-guard.webhookBody" -}}
{{- $root := .root -}}
admissionReviewVersions: [v1]
sideEffects: None
failurePolicy: {{ $root.Values.webhook.failurePolicy }}
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
{{- with $root.Values.webhook.objectSelector }}
objectSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.webhook.matchConditions }}
matchConditions:
  {{- toYaml . | nindent 2 }}
{{- end }}
rules:
  - apiGroups: [""]
    apiVersions: [v1]
    resources: [pods, replicationcontrollers]
    operations: [CREATE, UPDATE]
    scope: Namespaced
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
  {{- with $root.Values.nodeTemplate.groups }}
  - apiGroups: {{ toJson . }}
    apiVersions: ["*"]
    resources: [nodetemplates]
    operations: [CREATE, UPDATE]
    scope: Namespaced
  {{- end }}
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
