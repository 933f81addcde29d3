{{- /* IPv4 arithmetic, the subnet IDs and the facts of each Proxmox-backed subnet
(admission-and-packaging.md (f)): validation first, in the spec's order, each refusal a
message that names the subnet. */ -}}

{{- /* "a.b.c.d" -> its 32-bit value; fails with `what` when it is not an IPv4 address. */ -}}
{{- define "pxs.ip" -}}
{{- $addr := trim (index . 0) }}{{- $what := index . 1 }}
{{- $parts := splitList "." $addr }}
{{- if ne (len $parts) 4 }}{{- fail (printf "%s: %q is not an IPv4 address" $what $addr) }}{{- end }}
{{- $n := 0 }}
{{- range $parts }}
{{- if not (regexMatch "^[0-9]{1,3}$" .) }}{{- fail (printf "%s: %q is not an IPv4 address" $what $addr) }}{{- end }}
{{- if gt (atoi .) 255 }}{{- fail (printf "%s: %q is not an IPv4 address" $what $addr) }}{{- end }}
{{- $n = add (mul $n 256) (atoi .) }}
{{- end }}
{{- $n }}
{{- end }}

{{- /* 32-bit value -> "a.b.c.d" */ -}}
{{- define "pxs.dotted" -}}
{{- $n := int64 . }}
{{- printf "%d.%d.%d.%d" (div $n 16777216) (mod (div $n 65536) 256) (mod (div $n 256) 256) (mod $n 256) }}
{{- end }}

{{- /* "subnet-" + the first 8 hex digits of sha256("<namespace>/<vpc>/<name>"): a valid
Kube-OVN Subnet and Vlan name whatever the subnet's name (the controller's
SubnetNameInvalid is never reachable from here). */ -}}
{{- define "pxs.id" -}}
{{- printf "subnet-%s" (sha256sum (printf "%s/%s/%s" (index . 0) (index . 1) (index . 2)) | trunc 8) }}
{{- end }}

{{- /* The facts of subnet `index . 1` (with its position `index . 2`) of root `index . 0`, as YAML. */ -}}
{{- define "pxs.facts" -}}
{{- $root := index . 0 }}{{- $s := index . 1 }}{{- $i := index . 2 }}
{{- $what := printf "subnets[%d] %q" $i $s.name }}
{{- if not $s.cidr }}{{- fail (printf "%s: a Proxmox-backed subnet needs a cidr" $what) }}{{- end }}
{{- $cidr := trim $s.cidr }}
{{- if or (contains ":" $cidr) (ne (len (splitList "/" $cidr)) 2) }}
{{- fail (printf "%s: cidr %q: Proxmox-backed subnets are IPv4 only (a.b.c.d/prefix)" $what $cidr) }}
{{- end }}
{{- $prefixText := last (splitList "/" $cidr) }}
{{- if not (regexMatch "^[0-9]{1,2}$" $prefixText) }}{{- fail (printf "%s: cidr %q: Proxmox-backed subnets are IPv4 only (a.b.c.d/prefix)" $what $cidr) }}{{- end }}
{{- $prefix := atoi $prefixText }}
{{- if or (lt $prefix 8) (gt $prefix 28) }}{{- fail (printf "%s: cidr %q: prefix /%d is outside /8../28" $what $cidr $prefix) }}{{- end }}
{{- $base := include "pxs.ip" (list (first (splitList "/" $cidr)) (printf "%s: cidr" $what)) | atoi }}
{{- $size := include "pxs.size" $prefix | atoi }}
{{- if ne (mod $base $size) 0 }}{{- fail (printf "%s: cidr %q is not a network address (host bits set)" $what $cidr) }}{{- end }}
{{- $network := printf "%s/%d" (include "pxs.dotted" $base) $prefix }}
{{- $gateway := add $base 1 }}
{{- $last := sub (add $base $size) 2 }}
{{- $from := add $base (div $size 4) }}
{{- $to := sub (add $base (div (mul $size 3) 4)) 1 }}
{{- $px := $s.proxmox | default dict }}
{{- with $px.vmRange }}
{{- $ends := splitList "-" . }}
{{- if ne (len $ends) 2 }}{{- fail (printf "%s: proxmox.vmRange %q must be first-last" $what .) }}{{- end }}
{{- $from = include "pxs.ip" (list (index $ends 0) (printf "%s: proxmox.vmRange" $what)) | atoi }}
{{- $to = include "pxs.ip" (list (index $ends 1) (printf "%s: proxmox.vmRange" $what)) | atoi }}
{{- if gt $from $to }}{{- fail (printf "%s: proxmox.vmRange %q ends before it starts" $what .) }}{{- end }}
{{- if or (le $from $gateway) (gt $to $last) }}
{{- fail (printf "%s: proxmox.vmRange %q must lie inside %s after the gateway %s and before the broadcast address" $what . $cidr (include "pxs.dotted" $gateway)) }}
{{- end }}
{{- end }}
{{- /* The zone: named, or the only one there is. */ -}}
{{- $zone := $px.zone | default "" }}
{{- $zones := dict }}
{{- range (lookup "proxmox.cozystack.io/v1alpha1" "ProxmoxNetworkZone" "" "").items | default list }}
{{- $_ := set $zones .metadata.name . }}
{{- end }}
{{- if not $zone }}
{{- $names := keys $zones | sortAlpha }}
{{- if eq (len $names) 0 }}
{{- if include "pxs.online" $root }}
{{- fail (printf "%s: no ProxmoxNetworkZone exists; ask the platform administrator for one, or set proxmox.zone" $what) }}
{{- end }}
{{- fail (printf "%s: set proxmox.zone (an offline render cannot read the zones)" $what) }}
{{- else if gt (len $names) 1 }}
{{- fail (printf "%s: several ProxmoxNetworkZones exist (%s); set proxmox.zone" $what (join ", " $names)) }}
{{- end }}
{{- $zone = first $names }}
{{- end }}
{{- $z := (get $zones $zone) | default dict }}
{{- if and (not $z) (include "pxs.online" $root) ($root.Capabilities.APIVersions.Has "proxmox.cozystack.io/v1alpha1/ProxmoxNetworkZone") }}
{{- fail (printf "%s: proxmox.zone %q: no such ProxmoxNetworkZone; the zones are %s (kubectl get proxmoxnetworkzones)" $what $zone ((keys $zones | sortAlpha | join ", ") | default "none")) }}
{{- end }}
{{- $zspec := $z.spec | default dict }}
{{- $egress := $zspec.egress | default dict }}
id: {{ include "pxs.id" (list $root.Release.Namespace $root.Values.vpc $s.name) | quote }}
name: {{ $s.name | quote }}
index: {{ $i }}
cidr: {{ $network | quote }}
prefix: {{ $prefix }}
gateway: {{ include "pxs.dotted" $gateway | quote }}
vmFrom: {{ include "pxs.dotted" $from | quote }}
vmTo: {{ include "pxs.dotted" $to | quote }}
zone: {{ $zone | quote }}
providerNetwork: {{ $zspec.providerNetwork | default "" | quote }}
mtu: {{ $zspec.mtu | default 0 }}
externalSubnet: {{ $egress.externalSubnet | default "" | quote }}
gatewayNamespace: {{ $egress.gatewayNamespace | default "" | quote }}
zoneFound: {{ not (empty $z) }}
{{- end }}

{{- /* Every subnet's facts, as a YAML list under "subnets"; with subnets, fails without the API. */ -}}
{{- define "pxs.all" -}}
{{- if and .Values.subnets (include "pxs.online" .) (not (.Capabilities.APIVersions.Has "proxmox.cozystack.io/v1alpha1/ProxmoxNetworkZone")) }}
{{- fail "the proxmox.cozystack.io API is not installed; ask the platform administrator to enable the proxmox-network package" }}
{{- end }}
{{- if not .Values.vpc }}{{- fail "vpc: the tenant VPC the subnets belong to is required" }}{{- end }}
{{- $seen := dict }}
{{- range $i, $s := .Values.subnets }}
{{- if hasKey $seen (toString $s.name) }}
{{- fail (printf "subnets[%d] %q: the name is used twice; each subnet needs a name of its own" $i $s.name) }}
{{- end }}
{{- $_ := set $seen (toString $s.name) true }}
{{- end }}
subnets:
{{- range $i, $s := .Values.subnets }}
- {{- include "pxs.facts" (list $ $s $i) | nindent 2 }}
{{- end }}
{{- end }}

{{- /* The vpc chart's labels (section (f)): the VPC is named by its ID (a tenant VPC's Kube-OVN
name); the controller turns port security off only on egress gateway pods whose
VpcEgressGateway carries cozystack.io/vpcId equal to its spec.vpc (reference-behaviour §12). */ -}}
{{- define "pxs.vpcLabels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
cozystack.io/vpcId: {{ .Values.vpc | quote }}
cozystack.io/vpcName: {{ .Values.vpc | quote }}
cozystack.io/tenantName: {{ .Release.Namespace | quote }}
{{- end }}

{{- define "pxs.labels" -}}
{{ include "pxs.vpcLabels" .root }}
cozystack.io/subnetName: {{ .f.name | quote }}
proxmox.cozystack.io/zone: {{ .f.zone | quote }}
{{- end }}

{{- /* The VPC, read with lookup when the cluster answers (not in an offline `helm template`,
where lookup returns nothing): a tenant VPC, not the cluster's default one (whose router port
is the cluster router's, field-reports.md R2), that exists and, when it names its namespaces
(Kube-OVN's Vpc.spec.namespaces), serves the release's. */ -}}
{{- define "pxs.assertVpc" -}}
{{- if eq .Values.vpc "ovn-cluster" }}
{{- fail "vpc \"ovn-cluster\" is the cluster's default VPC; Proxmox-backed subnets belong to a tenant VPC" }}
{{- end }}
{{- $vpcs := (lookup "kubeovn.io/v1" "Vpc" "" "").items | default list }}
{{- if $vpcs }}
{{- $vpc := dict }}
{{- range $vpcs }}{{- if eq .metadata.name $.Values.vpc }}{{- $vpc = . }}{{- end }}{{- end }}
{{- if not $vpc }}
{{- fail (printf "vpc %q: no such Kube-OVN Vpc; create the tenant's VPC first" .Values.vpc) }}
{{- end }}
{{- $namespaces := ($vpc.spec | default dict).namespaces | default list }}
{{- if and $namespaces (not (has .Release.Namespace $namespaces)) }}
{{- fail (printf "vpc %q serves namespaces %s, not %q: it is another tenant's" .Values.vpc (join ", " (sortAlpha $namespaces)) .Release.Namespace) }}
{{- end }}
{{- end }}
{{- end }}

{{- /* Two subnets of one VPC must not overlap: Kube-OVN refuses the second one, and a VM
range inside both would be handed out twice. Checked between the subnets of this release,
and against the VPC's other Subnets when the cluster answers. `all` is pxs.all's result. */ -}}
{{- define "pxs.assertNoOverlap" -}}
{{- $root := index . 0 }}{{- $all := index . 1 }}
{{- $ranges := list }}
{{- $ids := dict }}
{{- range $all.subnets }}
{{- $ranges = append $ranges (dict "what" (printf "subnets[%d] %q" (int .index) .name) "cidr" .cidr "id" .id) }}
{{- $_ := set $ids .id true }}
{{- end }}
{{- range (lookup "kubeovn.io/v1" "Subnet" "" "").items | default list }}
{{- $spec := .spec | default dict }}
{{- if and (eq ($spec.vpc | default "") $root.Values.vpc) (not (hasKey $ids .metadata.name)) (not (contains ":" ($spec.cidrBlock | default ""))) (contains "/" ($spec.cidrBlock | default "")) }}
{{- $ranges = append $ranges (dict "what" (printf "Kube-OVN Subnet %q of the VPC" .metadata.name) "cidr" (first (splitList "," $spec.cidrBlock)) "id" .metadata.name) }}
{{- end }}
{{- end }}
{{- range $i, $a := $all.subnets }}
{{- range $j, $b := $ranges }}
{{- if and (ne $b.id $a.id) (or (ge $j (len $all.subnets)) (lt $j $i)) (include "pxs.overlaps" (list $a.cidr $b.cidr)) }}
{{- fail (printf "subnets[%d] %q: cidr %s overlaps %s (%s); subnets of one VPC need ranges of their own" (int $a.index) $a.name $a.cidr $b.what $b.cidr) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /* "true" when two IPv4 CIDRs (list a b) share an address, else empty; host bits are
ignored (Kube-OVN's cidrBlock may carry them). */ -}}
{{- define "pxs.overlaps" -}}
{{- $r := list }}
{{- range . }}
{{- $size := include "pxs.size" (last (splitList "/" .) | atoi) | atoi }}
{{- $base := include "pxs.ip" (list (first (splitList "/" .)) "cidr") | atoi }}
{{- $base = sub $base (mod $base $size) }}
{{- $r = append $r (list $base (add $base $size)) }}
{{- end }}
{{- if and (lt (index $r 0 0) (index $r 1 1)) (lt (index $r 1 0) (index $r 0 1)) }}true{{- end }}
{{- end }}

{{- /* 2^(32-prefix): the number of addresses of a /prefix. */ -}}
{{- define "pxs.size" -}}
{{- $size := 1 }}{{- range until (sub 32 (int .) | int) }}{{- $size = mul $size 2 }}{{- end }}
{{- $size }}
{{- end }}

{{- /* Release safety (section (f), vpc.assertProxmoxSubnetsReleasable): when the API is
served, the ProxmoxNetworks this release made for this VPC (labels cozystack.io/vpcId and
app.kubernetes.io/instance) that the values no longer have must hold no VM address: an
upgrade that drops a subnet with addresses in use is refused. Uninstall renders nothing and
is not checked; the finalizers hold the objects instead. `all` is pxs.all's result. */ -}}
{{- define "pxs.assertReleasable" -}}
{{- $root := index . 0 }}{{- $all := index . 1 }}
{{- if $root.Capabilities.APIVersions.Has "proxmox.cozystack.io/v1alpha1/ProxmoxNetworkZone" }}
{{- $ids := dict }}
{{- range $all.subnets }}{{- $_ := set $ids .id true }}{{- end }}
{{- range (lookup "proxmox.cozystack.io/v1alpha1" "ProxmoxNetwork" $root.Release.Namespace "").items | default list }}
{{- $labels := .metadata.labels | default dict }}
{{- if and (eq (get $labels "cozystack.io/vpcId") $root.Values.vpc) (eq (get $labels "app.kubernetes.io/instance") $root.Release.Name) (not (hasKey $ids .metadata.name)) }}
{{- $used := int (((.status | default dict).ipPool | default dict).used | default 0) }}
{{- if gt $used 0 }}
{{- fail (printf "subnet %q is Proxmox-backed and %d VM address(es) are still allocated on it; delete those machines before removing the subnet" (get $labels "cozystack.io/subnetName") $used) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /* The cluster answers: lookup sees kube-system (an offline `helm template` sees nothing and
skips every check that reads the cluster). */ -}}
{{- define "pxs.online" -}}
{{- if (lookup "v1" "Namespace" "" "kube-system") }}true{{ end -}}
{{- end }}

{{- /* An install or upgrade while this release's objects of the same names are still being
deleted (a VM holds an address, Kube-OVN still lists the Subnet): refused, naming what is
terminating, rather than adopting objects that are about to go. `all` is pxs.all's result. */ -}}
{{- define "pxs.assertNotTerminating" -}}
{{- $root := index . 0 }}{{- $all := index . 1 }}
{{- if include "pxs.online" $root }}
{{- $ns := $root.Release.Namespace }}
{{- range $f := $all.subnets }}
{{- range $k := list (list "proxmox.cozystack.io/v1alpha1" "ProxmoxNetwork" $ns "proxmoxnetworks") (list "kubeovn.io/v1" "Subnet" "" "subnets") (list "ipam.cluster.x-k8s.io/v1alpha2" "InClusterIPPool" $ns "inclusterippools") }}
{{- $o := lookup (index $k 0) (index $k 1) (index $k 2) $f.id }}
{{- $since := (($o | default dict).metadata | default dict).deletionTimestamp }}
{{- if $since }}
{{- $where := ternary (printf " -n %s" (index $k 2)) "" (ne (index $k 2) "") }}
{{- fail (printf "subnet %q: %s %q is still being deleted (since %s: a VM may still hold an address); wait until it is gone (kubectl get %s %s%s), then install again" $f.name (index $k 1) $f.id $since (index $k 3) $f.id $where) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
