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
Every rule starts with a `# why:` comment (helm keeps it in the rendered output); the chart's RBAC test
fails on a rule without one. Kubernetes RBAC cannot narrow a verb by label: the operator's watches pass a
label selector to the API server (managed-by=kct-operator plus the receiver label), and it writes only the
objects it renders, by name, each with an ownerReference to its TelemetryReceiver.
*/}}
{{- define "kct.namespacedRules" -}}
# why: kopf lists and watches the custom resources, and patches them (finalizer, progress annotations);
# kopf never replaces an object (no update).
- apiGroups: ["telemetry.kct.dev"]
  resources: ["clientmetricssubscriptions", "telemetryreceivers"]
  verbs: ["get", "list", "watch", "patch"]
# why: the reconcile outcome is merge-patched into the resources' status subresource.
- apiGroups: ["telemetry.kct.dev"]
  resources: ["clientmetricssubscriptions/status", "telemetryreceivers/status"]
  verbs: ["get", "patch"]
# why: kopf posts core/v1 events about each reconcile on the resource (it only creates them).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- if .Values.rbac.telemetryReceivers }}
# why: TelemetryReceiver children (the receiver's config, its generated push token, its Service) are
# created and updated with server-side apply (create, patch), read back (get), pruned (list by label,
# delete), and watched through the children's label selector so a deleted child is re-created at once.
# The get on Secrets also reads the Kafka client properties a spec.kafka.secretRef names.
- apiGroups: [""]
  resources: ["configmaps", "secrets", "services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# why: the receiver Deployment, managed like the other children (apply, read back, prune, watch).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# why: the receivers' PodDisruptionBudget (spec.podDisruptionBudget), managed like the other children.
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# why: the receivers' HorizontalPodAutoscaler (spec.autoscaling), managed like the other children.
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# why: the receivers' NetworkPolicy (spec.networkPolicy, on by default), managed like the other children.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# why: pod attribution (spec.receiver.attribution): the receivers' own ServiceAccount, a child like the others.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# why: pod attribution: the Role and RoleBinding that let a receiver's ServiceAccount read pods, replicasets
# and jobs in its own namespace, children like the others.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# why: pod attribution: Kubernetes lets the operator grant a receiver's Role only rights it holds itself
# (RBAC escalation prevention); besides, the operator lists the receiver pods (by their selector labels) to
# read each replica's client registry for the subscriptions' status.clients, and gets the aggregation's ended
# driver pods, whose termination message is the OTLP export's report (status.aggregation.export).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# why: status.clients of every subscription: each receiver replica's client registry (GET /v1/clients) is
# read through the API server's pod proxy, as `kubectl kct` does (no route to pod IPs, no NetworkPolicy hole).
- apiGroups: [""]
  resources: ["pods/proxy"]
  verbs: ["get"]
# why: pod attribution, as for pods: held only to be granted to receivers.
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["get", "list", "watch"]
# why: pod attribution, as for pods: held only to be granted to receivers.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch"]
{{- if .Values.rbac.sparkApplications }}
# why: the aggregation's (Scheduled)SparkApplications (spec.aggregation), managed like the other children;
# watched for the state the spark-operator writes into them.
- apiGroups: ["sparkoperator.k8s.io"]
  resources: ["sparkapplications", "scheduledsparkapplications"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- end }}
{{- else if .Values.rbac.readKafkaSecrets }}
# why: the client properties (SASL/TLS) of the Kafka clusters named by spec.kafka.secretRef, read by name.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
{{- end }}

{{/* Labels of the monitoring objects (dashboards, rules, monitors): the release's, without the operator's
selector labels, which would make them look like part of the operator's Deployment. */}}
{{- define "kct.monitoringLabels" -}}
helm.sh/chart: {{ include "kct.chart" . }}
app.kubernetes.io/name: {{ include "kct.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: monitoring
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kct
{{- end }}
