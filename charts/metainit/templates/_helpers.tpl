{{/*
Names and labels shared by the templates. Objects are named after the release, so that
release "metainit" gets the kustomize base's names (manifests/deployment) and any other
release gets names of its own. The cluster-scoped ones end in -deployment, as the base's
do: the static pod's (manifests/rbac.yaml, rbac-webhooks.yaml) are metainit and
metainit-webhooks, and removing one install path must leave the other's rights alone.
*/}}

{{- define "metainit.name" -}}
{{ .Release.Name | trunc 53 | trimSuffix "-" }}
{{- end }}

{{/* The ClusterRole and ClusterRoleBinding, and the instance label. */}}
{{- define "metainit.clusterName" -}}
{{ include "metainit.name" . }}-deployment
{{- end }}

{{/*
What the selectors match: the Deployment's pods and nothing else. The instance label is
<release>-deployment, which tells these pods from the static pod's mirror pods (also
app.kubernetes.io/name: metainit, in kube-system) and gives release "metainit" the base's
selectors, which cannot be changed on a Deployment once made.
*/}}
{{- define "metainit.selectorLabels" -}}
app.kubernetes.io/name: metainit
app.kubernetes.io/instance: {{ include "metainit.clusterName" . | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Every object's labels: the selector's and helm's own. */}}
{{- define "metainit.labels" -}}
{{ include "metainit.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
