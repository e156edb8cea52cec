{{/* Chart name, overridable so two installs can coexist under other names. */}}
{{- define "quickq-guard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Resource name prefix: <release>-quickq-guard unless the release already says it. */}}
{{- define "quickq-guard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "quickq-guard.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "quickq-guard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable across upgrades, so never add version labels here. */}}
{{- define "quickq-guard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "quickq-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
Labels on every object: the standard ones, `app` (which the require-labels policy asks for)
and commonLabels, merged as one map so a key given twice is written once (commonLabels
win, except the selector labels, which values.schema.json refuses to override).
*/}}
{{- define "quickq-guard.labelMap" -}}
{{- $standard := dict
  "helm.sh/chart" (include "quickq-guard.chart" .)
  "app.kubernetes.io/version" .Chart.AppVersion
  "app.kubernetes.io/component" "admission-webhook"
  "app.kubernetes.io/part-of" "quickq-guard"
  "app.kubernetes.io/managed-by" .Release.Service
  "app" (include "quickq-guard.name" .) -}}
{{- $labels := mergeOverwrite $standard (deepCopy .Values.commonLabels) (include "quickq-guard.selectorLabels" . | fromYaml) -}}
{{- toJson $labels -}}
{{- end -}}

{{- define "quickq-guard.labels" -}}
{{- include "quickq-guard.labelMap" . | fromJson | toYaml -}}
{{- end -}}

{{/* The pods' labels: every object's, then podLabels (the selector labels stay). */}}
{{- define "quickq-guard.podLabels" -}}
{{- $labels := mergeOverwrite (include "quickq-guard.labelMap" . | fromJson) (deepCopy .Values.podLabels) (include "quickq-guard.selectorLabels" . | fromYaml) -}}
{{- toYaml $labels -}}
{{- end -}}

{{- define "quickq-guard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "quickq-guard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Service the API server calls; its DNS names are the certificate's SANs. */}}
{{- define "quickq-guard.serviceName" -}}
{{- include "quickq-guard.fullname" . -}}
{{- end -}}

{{- define "quickq-guard.tlsSecretName" -}}
{{- if eq .Values.certs.mode "secret" -}}
{{- required "certs.secret.name is required when certs.mode=secret" .Values.certs.secret.name -}}
{{- else -}}
{{- printf "%s-tls" (include "quickq-guard.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "quickq-guard.certificateName" -}}
{{- printf "%s-serving" (include "quickq-guard.fullname" .) -}}
{{- end -}}

{{/* DNS names of the Service, in the order the serving certificate lists them. */}}
{{- define "quickq-guard.dnsNames" -}}
{{- $svc := include "quickq-guard.serviceName" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}

{{/* Namespaces the webhooks never see: the system ones, the configured ones, cert-manager's
in that mode, and the release's own. */}}
{{- define "quickq-guard.excludedNamespaces" -}}
{{- $all := concat .Values.config.systemNamespaces .Values.config.excludeNamespaces -}}
{{- if eq .Values.certs.mode "cert-manager" -}}
{{- $all = append $all .Values.certs.certManager.namespace -}}
{{- end -}}
{{- uniq (append $all .Release.Namespace) | toJson -}}
{{- end -}}

{{- define "quickq-guard.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion | toString -}}
{{- if eq $tag "latest" -}}
{{- fail "image.tag must be a pinned version, not latest" -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}


{{/* A memory quantity (schema-checked: digits and a unit) in whole MiB. */}}
{{- define "quickq-guard.mebibytes" -}}
{{- $quantity := toString . -}}
{{- $digits := regexFind "^[0-9]+" $quantity -}}
{{- $unit := trimPrefix $digits $quantity -}}
{{- $bytes := dict "" 1 "k" 1000 "Ki" 1024 "M" 1000000 "Mi" 1048576 "G" 1000000000 "Gi" 1073741824 "T" 1000000000000 "Ti" 1099511627776 -}}
{{- div (mul (int64 $digits) (index $bytes $unit)) 1048576 -}}
{{- end -}}

{{/*
The container's resources, the memory limit derived from server.workers (64Mi + 256Mi each)
unless given, and refused below 32Mi + 64Mi per worker, where the workers would be OOM-killed.
The figure (benchmarks/hostile_load.py): one worker idles at 85-100 MiB; 256 reviews at the
3 MiB body limit at once (one per connection a worker serves, --max-connections) took it to
285 MiB, each waiting connection holding what it read before uvicorn paused it (~0.5 MiB)
and two reviews read and judged; 12 at once 145 MiB; 3,000 clients stopping in the handshake
or the headers +14-20 MiB: 320Mi holds the worst with headroom.
*/}}
{{- define "quickq-guard.resources" -}}
{{- $workers := int .Values.server.workers -}}
{{- $resources := deepCopy .Values.resources -}}
{{- $limits := default (dict) $resources.limits -}}
{{- $floor := add 32 (mul 64 $workers) -}}
{{- if hasKey $limits "memory" -}}
{{- $given := include "quickq-guard.mebibytes" $limits.memory | int64 -}}
{{- if lt $given (int64 $floor) -}}
{{- fail (printf "resources.limits.memory %v holds %d MiB, too little for %d server.workers: give at least %dMi (32Mi + 64Mi per worker), or fewer workers" $limits.memory $given $workers $floor) -}}
{{- end -}}
{{- else -}}
{{- $_ := set $limits "memory" (printf "%dMi" (add 64 (mul 256 $workers))) -}}
{{- end -}}
{{- $_ := set $resources "limits" $limits -}}
{{- toYaml $resources -}}
{{- end -}}

{{/* Labels of the hook Jobs' pods and the test Pod: not the webhook pods' selector labels,
so neither the Service nor the PodDisruptionBudget ever counts them. */}}
{{- define "quickq-guard.hookLabels" -}}
{{- $labels := include "quickq-guard.labelMap" . | fromJson -}}
{{- $_ := set $labels "app.kubernetes.io/name" (printf "%s-hook" (include "quickq-guard.name" .)) -}}
{{- $_ := set $labels "app.kubernetes.io/component" "hook" -}}
{{- toYaml $labels -}}
{{- end -}}

{{/* The pod spec of a hook Job or the test Pod: `quickq-guard cluster <args>`. */}}
{{- define "quickq-guard.hookPod" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "quickq-guard.fullname" $root }}-hooks
restartPolicy: Never
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: {{ .name }}
    image: {{ include "quickq-guard.image" $root | quote }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    command: {{ concat (list "quickq-guard" "cluster") .args | toJson }}
    resources:
      requests: {cpu: 10m, memory: 48Mi}
      limits: {cpu: 200m, memory: 96Mi}
    securityContext:
      {{- toYaml $root.Values.securityContext | nindent 6 }}
{{- end -}}

{{/* The audit controller's name (its Deployment, ServiceAccount, RBAC and Lease). */}}
{{- define "quickq-guard.auditName" -}}
{{- printf "%s-audit" (include "quickq-guard.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The audit pods' selector labels: not the webhook pods', so the webhook's Service,
PodDisruptionBudget and anti-affinity never count them. */}}
{{- define "quickq-guard.auditSelectorLabels" -}}
app.kubernetes.io/name: {{ include "quickq-guard.name" . }}-audit
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "quickq-guard.auditLabels" -}}
{{- $labels := mergeOverwrite (include "quickq-guard.labelMap" . | fromJson) (include "quickq-guard.auditSelectorLabels" . | fromYaml) -}}
{{- $_ := set $labels "app.kubernetes.io/component" "audit" -}}
{{- toYaml $labels -}}
{{- end -}}

{{/* The report kinds of audit.reportApi: the API group, the namespaced kind's plural and the
cluster-scoped one's. */}}
{{- define "quickq-guard.reportKinds" -}}
{{- if eq .Values.audit.reportApi "wgpolicyk8s" -}}
{{- dict "group" "wgpolicyk8s.io" "namespaced" "policyreports" "cluster" "clusterpolicyreports" | toJson -}}
{{- else -}}
{{- dict "group" "openreports.io" "namespaced" "reports" "cluster" "clusterreports" | toJson -}}
{{- end -}}
{{- end -}}

{{/*
What the audit controller may read: every kind the validating webhook judges (its rules, as
_webhook.tpl renders them, so the two never drift apart; subresources left out) and the
ConfigMaps when their webhook entry judges them, with get, list and watch only.
*/}}
{{- define "quickq-guard.auditReadRules" -}}
{{- $bodies := list (include "quickq-guard.webhookBody" (dict "root" . "path" "/validate" "failurePolicy" "Fail" "svc" "audit" "ns" .Release.Namespace "configMaps" false) | fromYaml) -}}
{{- if .Values.webhook.configMaps -}}
{{- $bodies = append $bodies (include "quickq-guard.webhookBody" (dict "root" . "path" "/validate" "failurePolicy" "Ignore" "svc" "audit" "ns" .Release.Namespace "configMaps" true) | fromYaml) -}}
{{- end -}}
{{- $rules := list -}}
{{- range $body := $bodies -}}
{{- range $body.rules -}}
{{- $resources := list -}}
{{- range .resources -}}
{{- if not (contains "/" .) -}}
{{- $resources = append $resources . -}}
{{- end -}}
{{- end -}}
{{- $rules = append $rules (dict "apiGroups" .apiGroups "resources" $resources "verbs" (list "get" "list" "watch")) -}}
{{- end -}}
{{- end -}}
{{- toYaml $rules -}}
{{- end -}}
