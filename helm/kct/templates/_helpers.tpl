{{/* Names and labels, from one place. Names are DNS labels: truncated to 63 characters. */}}

{{- define "kct.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kct.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kct.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels never change between chart versions (a Deployment's selector is immutable). */}}
{{- define "kct.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kct.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "kct.labels" -}}
helm.sh/chart: {{ include "kct.chart" . }}
{{ include "kct.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kct
{{- end }}

{{- define "kct.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kct.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kct.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The rules the operator needs in every namespace it watches. Rendered into one ClusterRole (watching all
namespaces, bound cluster-wide) or into one Role per watched namespace. No wildcards: each verb is needed.
*/}}
{{- define "kct.namespacedRules" -}}
# The custom resources: kopf lists and watches them, patches them (finalizer, its progress annotations)
# and writes their status.
- apiGroups: ["telemetry.kct.dev"]
  resources: ["clientmetricssubscriptions", "telemetryreceivers"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["telemetry.kct.dev"]
  resources: ["clientmetricssubscriptions/status", "telemetryreceivers/status"]
  verbs: ["get", "patch", "update"]
# kopf posts core/v1 events about each reconcile on the resource.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if .Values.rbac.telemetryReceivers }}
# TelemetryReceiver children: created, updated with server-side apply, pruned; owned through ownerReferences.
- apiGroups: [""]
  resources: ["configmaps", "secrets", "services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Pod attribution (spec.receiver.attribution): the receiver's ServiceAccount, and a Role + RoleBinding letting
# it read pods, replicasets and jobs. Kubernetes lets the operator grant only what it holds itself: hence
# the read rights on those three.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch"]
{{- if .Values.rbac.sparkApplications }}
- apiGroups: ["sparkoperator.k8s.io"]
  resources: ["sparkapplications", "scheduledsparkapplications"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- end }}
{{- else if .Values.rbac.readKafkaSecrets }}
# Client properties (SASL/TLS) of the Kafka clusters named by spec.kafka.secretRef.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
{{- end }}
