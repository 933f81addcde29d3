{{/* Base name of the controller's own objects. */}}
{{- define "pnc.fullname" -}}
{{- default "proxmox-network-controller" .Values.fullnameOverride -}}
{{- end -}}

{{/* Labels Helm adds to every object (tests/test_charts_integration.py drops exactly these
     when it compares a rendering with manifests/). */}}
{{- define "pnc.releaseLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of manifests/ plus the release labels. */}}
{{- define "pnc.labels" -}}
app.kubernetes.io/name: proxmox-network-controller
{{ include "pnc.releaseLabels" . }}
{{- end -}}

{{/* The release labels as a dict, for objects read from files/. */}}
{{- define "pnc.releaseLabelsDict" -}}
{{- include "pnc.releaseLabels" . | fromYaml | toJson -}}
{{- end -}}

{{/* The ServiceAccount as a binding subject. */}}
{{- define "pnc.subject" -}}
- kind: ServiceAccount
  name: {{ include "pnc.fullname" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* Gateway management over TLS: the Secret Role, its flags and the tmpfs are rendered. */}}
{{- define "pnc.tls" -}}
{{- if and .Values.gateway.manage (or (contains "ssl:" .Values.ovn.nbAddress) (contains "ssl:" (.Values.ovn.sbAddress | default ""))) }}true{{ end -}}
{{- end -}}

{{/* Objects of a multi-document file under files/, as a list of dicts. */}}
{{- define "pnc.docs" -}}
{{- $docs := list -}}
{{- range (regexSplit "(?m)^---[ \t]*$" (.root.Files.Get .path) -1) -}}
{{- $o := fromYaml . -}}
{{- if and $o (hasKey $o "kind") -}}
{{- $docs = append $docs $o -}}
{{- end -}}
{{- end -}}
{{- toJson $docs -}}
{{- end -}}

{{/* The controller's resources: .Values.resources when set, else the sizing table's (docs/sizing.md). */}}
{{- define "pnc.resources" -}}
{{- if .Values.resources -}}
{{- toYaml .Values.resources -}}
{{- else -}}
{{- $memory := get (dict "small" (list "128Mi" "512Mi") "medium" (list "256Mi" "1Gi") "large" (list "512Mi" "1Gi")) (.Values.sizing | default "medium") -}}
requests:
  cpu: 10m
  memory: {{ index $memory 0 }}
limits:
  cpu: 500m
  memory: {{ index $memory 1 }}
{{- end -}}
{{- end -}}
