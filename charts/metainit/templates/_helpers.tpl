{{/*
Names and labels shared by the templates.

Names come from metainit.fullname, Helm's `helm create` logic: fullnameOverride, else the
release's name if it contains the chart's (or nameOverride), else <release>-<name>. So
release "metainit" gets the kustomize base's names (manifests/deployment). The
cluster-scoped ones end in -deployment, as the base's do: the static pod's
(manifests/rbac.yaml, rbac-webhooks.yaml) are metainit and metainit-webhooks, and removing
one install path must leave the other's rights alone. Truncated to 53 so that every
suffix (-metrics, -test-readyz) still fits a 63-character name.
*/}}

{{- define "metainit.name" -}}
{{ default .Chart.Name .Values.nameOverride | trunc 53 | trimSuffix "-" }}
{{- end }}

{{- define "metainit.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 53 | trimSuffix "-" }}
{{- else }}
{{- $name := include "metainit.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 53 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 53 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The ClusterRole and ClusterRoleBinding, and the pods' instance label. */}}
{{- define "metainit.clusterName" -}}
{{ include "metainit.fullname" . }}-deployment
{{- end }}

{{/* The ServiceAccount the pods run as and the ClusterRoleBindings bind. */}}
{{- define "metainit.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "metainit.fullname" .) .Values.serviceAccount.name }}
{{- else if .Values.serviceAccount.name }}
{{- .Values.serviceAccount.name }}
{{- else }}
{{- fail "serviceAccount.create=false needs serviceAccount.name: the existing ServiceAccount in the release's namespace to run as (the ClusterRoleBindings bind it)" }}
{{- end }}
{{- end }}

{{/* The image: repository@digest when image.digest is set, else repository:tag. */}}
{{- define "metainit.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
What the selectors match: the Deployment's pods and nothing else. Their instance label is
<fullname>-deployment, not the release's name: it tells these pods from the static pod's
mirror pods (also app.kubernetes.io/name: metainit, in kube-system), and it is what the
selectors of chart 0.1.0 and of the kustomize base say, which cannot change on a
Deployment once made (spec.selector is immutable). So the pods carry
app.kubernetes.io/instance: <fullname>-deployment, and every object the chart makes
app.kubernetes.io/instance: <release> (metainit.labels). commonLabels and podLabels never
enter a selector.
*/}}
{{- define "metainit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "metainit.name" . }}
app.kubernetes.io/instance: {{ include "metainit.clusterName" . | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels the chart sets itself: commonLabels and podLabels may not name them. */}}
{{- define "metainit.reservedLabels" -}}
{{- list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "app.kubernetes.io/component" "helm.sh/chart" "k8s.opsani.io/initializer" | toJson }}
{{- end }}

{{/* Fails if the map of labels `labels` names one of the chart's own, under `value`. */}}
{{- define "metainit.checkLabels" -}}
{{- $reserved := include "metainit.reservedLabels" .root | fromJsonArray }}
{{- range $k, $v := .labels }}
{{- if has $k $reserved }}
{{- fail (printf "%s.%s: the chart sets this label itself (selectors and app.kubernetes.io/instance depend on it): pick another key" $.value $k) }}
{{- end }}
{{- end }}
{{- end }}

{{/* commonLabels, after that check. */}}
{{- define "metainit.commonLabels" -}}
{{- include "metainit.checkLabels" (dict "root" . "labels" .Values.commonLabels "value" "commonLabels") }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Every object's labels: its name, the release as instance, helm's own, commonLabels. */}}
{{- define "metainit.labels" -}}
app.kubernetes.io/name: {{ include "metainit.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- include "metainit.commonLabels" . }}
{{- end }}

{{/* The pods' labels: the selector's, the opt-in, commonLabels, podLabels. */}}
{{- define "metainit.podLabels" -}}
{{- include "metainit.checkLabels" (dict "root" . "labels" .Values.podLabels "value" "podLabels") }}
{{- include "metainit.selectorLabels" . }}
# The opt-in: a running replica clears a new replica's scheduling gates.
k8s.opsani.io/initializer: "true"
{{- include "metainit.commonLabels" . }}
{{- with .Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The test hooks' labels (templates/tests/): the chart's, and a component of their own that
the test NetworkPolicy admits.
*/}}
{{- define "metainit.testLabels" -}}
{{ include "metainit.labels" . }}
app.kubernetes.io/component: test
{{- end }}

{{/* The pods' pull secrets, priority, security context and placement, shared by the
Deployment and the test pod (templates/tests/readyz.yaml). */}}
{{- define "metainit.podPlacement" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .Values.hostNetwork }}
# The node's network namespace (values.yaml, hostNetwork).
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* KUBERNETES_SERVICE_HOST and _PORT from apiServer, for a container's env. */}}
{{- define "metainit.apiServerEnv" -}}
{{- with .Values.apiServer.host }}
# In place of the `kubernetes` Service (values.yaml, apiServer).
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ $.Values.apiServer.port | quote }}
{{- end }}
{{- end }}
