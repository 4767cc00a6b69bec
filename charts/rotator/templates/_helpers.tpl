{{/*
The prefix of every object's name: "rotator" for a release named rotator (as config/default's
namePrefix rotator-), else "<release>-rotator" unless the release name holds "rotator" already.
*/}}
{{- define "rotator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rotator.serviceAccountName" -}}
{{- include "rotator.fullname" . }}-controller-manager
{{- end -}}

{{/*
config/default's label on every object (kustomize's `labels`), then Helm's own. The comparison
test ignores the Helm ones (helm.sh/chart, app.kubernetes.io/managed-by, instance, version).
*/}}
{{- define "rotator.labels" -}}
app.kubernetes.io/part-of: rotator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The controller's Pods: the Deployment's selector, the Service's, the PDB's, the policy's. */}}
{{- define "rotator.selectorLabels" -}}
app.kubernetes.io/name: rotator
app.kubernetes.io/component: controller
{{- end -}}

{{/* Where `helm test` builds its sample chain: a namespace the controller watches. */}}
{{- define "rotator.testNamespace" -}}
{{- if .Values.watchNamespaces -}}
{{- first .Values.watchNamespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* Whether the PodDisruptionBudget is rendered: podDisruptionBudget.enabled, or by default
(null) when there is more than one replica. */}}
{{- define "rotator.pdbEnabled" -}}
{{- $enabled := .Values.podDisruptionBudget.enabled -}}
{{- if kindIs "invalid" $enabled -}}
{{- if gt (int .Values.replicas) 1 }}true{{ end -}}
{{- else if $enabled -}}
true
{{- end -}}
{{- end -}}

{{/* sharding.shards as an integer (1 when a release's values predate it). */}}
{{- define "rotator.shards" -}}
{{- int (dig "shards" 1 (.Values.sharding | default dict)) -}}
{{- end -}}

{{/* The metrics port's name: https when secure (config/default), http otherwise. */}}
{{- define "rotator.metricsPortName" -}}
{{- if .Values.metrics.secure }}https{{ else }}http{{ end -}}
{{- end -}}
