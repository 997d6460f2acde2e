#!/usr/bin/env bash
# Checks the kube-double with real clients: kubectl (create, get, table, list, watch,
# json patch, raw list and watch; on modern also namespaces, services, endpointslices,
# a validating webhook configuration; on the real server the admission it does: the double
# calls no webhook) and the Python
# `kubernetes` client (check.py), against both API generations; the modern checks also run
# against a real control plane (scripts/control-plane.sh), which the double must match.
# Run from the repository root; exits non-zero on any mismatch.
set -uo pipefail

KUBECTL=${KUBECTL:-kubectl}
PYTHON=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
PIDS=()
passed=0
failed=0

REAL_DIR=
cleanup() {
    [ -n "$REAL_DIR" ] && bash "$HERE/../../scripts/control-plane.sh" down "$REAL_DIR"
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rm -rf "$TMP"
}
trap cleanup EXIT

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; echo "     $2" | head -c 2000; echo; }

# expect NAME HAYSTACK NEEDLE: the text contains the needle.
expect() {
    if grep -qE -- "$3" <<<"$2"; then ok "$1"; else bad "$1" "wanted /$3/ in: $2"; fi
}
# refute NAME HAYSTACK NEEDLE: the text does not contain the needle.
refute() {
    if grep -qE -- "$3" <<<"$2"; then bad "$1" "did not want /$3/ in: $2"; else ok "$1"; fi
}

# free_port, through $PYTHON.
# shellcheck source=scripts/lib/ports.sh
. "$HERE/../../scripts/lib/ports.sh"

# start_double GENERATION [FLAGS...]: starts the binary, sets PORT and KC.
start_double() {
    local gen=$1
    shift
    PORT=$(free_port)
    KC="$TMP/$gen.kubeconfig"
    cargo run -q -p kube-double -- --generation "$gen" --listen "127.0.0.1:$PORT" \
        --kubeconfig-out "$KC" "$@" >"$TMP/$gen.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 600); do
        if curl -sf "http://127.0.0.1:$PORT/version" >/dev/null 2>&1 && [ -s "$KC" ]; then
            return 0
        fi
        sleep 0.5
    done
    echo "the $gen double did not start:" >&2
    cat "$TMP/$gen.log" >&2
    exit 1
}

k() { "$KUBECTL" --kubeconfig "$KC" "$@" 2>&1; }

write_pod() { # write_pod FILE NAME LABEL-APP [EXTRA-SPEC-YAML] [EXTRA-METADATA-YAML]
    cat >"$1" <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $2
  labels:
    app: $3
$5
spec:
$4
  containers:
  - name: c
    image: busybox
YAML
}

run_python() {
    local out
    out=$("$PYTHON" "$HERE/check.py" "$1" "$KC" ${2:+"$2"} 2>&1)
    local rc=$?
    echo "$out"
    local p f
    p=$(sed -nE 's/^python [a-z]+: ([0-9]+) passed, ([0-9]+) failed$/\1/p' <<<"$out")
    f=$(sed -nE 's/^python [a-z]+: ([0-9]+) passed, ([0-9]+) failed$/\2/p' <<<"$out")
    # No summary line, or one that counts nothing, is a check that did not run.
    if [ -z "$p" ] || [ $((p + f)) -eq 0 ]; then
        bad "python $1 printed no summary of its checks" "$(tail -n 5 <<<"$out")"
        return
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then bad "python $1 exit code" "$rc"; fi
}

echo "building kube-double"
cargo build -q -p kube-double || exit 1

# ---------------------------------------------------------------- modern (1.33 double, real)
# modern_checks NAME VERSION: the checks of a current API server, on the one KC points at;
# NAME is double (the double's 1.33) or real (the control plane of scripts/control-plane.sh),
# and names each check. (The body is not indented: it holds here-documents.)
modern_checks() {
local P=$1 VERSION=$2
write_pod "$TMP/gated.yaml" gated web "  schedulingGates:
  - name: example.com/a
  - name: example.com/b" ""
write_pod "$TMP/plain.yaml" plain other "" ""

expect "$P kubectl version" "$(k version -o json)" "\"gitVersion\": \"$VERSION\""
expect "$P create gated" "$(k create -f "$TMP/gated.yaml")" 'pod/gated created'
expect "$P create plain" "$(k create -f "$TMP/plain.yaml")" 'pod/plain created'
# An Event on the gated pod, as a controller writes one (core/v1): the events table, the
# field selectors and what kubectl describe finds with them.
uid=$(k get pod gated -o jsonpath='{.metadata.uid}')
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
cat >"$TMP/event.json" <<JSON
{"apiVersion": "v1", "kind": "Event", "metadata": {"name": "gated-ev"},
 "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "gated", "uid": "$uid"},
 "reason": "Tested", "message": "checked by check.sh", "type": "Normal",
 "source": {"component": "check", "host": "node-1"}, "count": 1,
 "firstTimestamp": "$now", "lastTimestamp": "$now"}
JSON
expect "$P create event" "$(k create -f "$TMP/event.json")" '^event/gated-ev created'
expect "$P events table" "$(k get events)" '^[0-9]+s +Normal +Tested +pod/gated +checked by check.sh'
expect "$P events wide table" "$(k get events -o wide)" 'pod/gated +check, node-1 +checked by check.sh +[0-9]+s +1 +gated-ev'
expect "$P events by field" \
    "$(k get events --field-selector involvedObject.name=gated,reason=Tested,source=check -o name)" '^event/gated-ev$'
expect "$P describe finds the pod's events" "$(k describe pod gated)" 'Normal +Tested +[0-9]+s +check +checked by check.sh'
# OpenAPI v3 declares fieldValidation: kubectl sends fieldValidation=Strict and the server
# refuses unknown fields; --validate=warn gets the server's warning; explain reads v3.
write_pod "$TMP/typo.yaml" typo other "  bogus: 1" ""
expect "$P server-side strict validation" "$(k create -f "$TMP/typo.yaml")" \
    'strict decoding error: unknown field "spec.bogus"'
expect "$P server-side warn validation" "$(k create -f "$TMP/typo.yaml" --validate=warn)" \
    'Warning: unknown field "spec.bogus"'
k delete pod typo >/dev/null
expect "$P explain schedulingGates" "$(k explain pod.spec.schedulingGates)" 'FIELD: schedulingGates <\[\]PodSchedulingGate>'
expect "$P apply creates" "$(k apply -f "$TMP/plain.yaml" 2>&1)" 'pod/plain (configured|unchanged)'
expect "$P get -o json condition" "$(k get pod gated -o jsonpath='{.status.conditions[0].reason}')" '^SchedulingGated$'
expect "$P get -o json gates" "$(k get pod gated -o json)" '"name": "example.com/b"'
# The stored pod (volume and mount: kube-api-access twice), less what differs by nature (uid, resourceVersion, times, the token
# volume's random suffix): compared between the double and the real server below.
k get pod gated -o json | "$PYTHON" -c '
import json, re, sys
pod = json.load(sys.stdin)
for field in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
    pod["metadata"].pop(field, None)
text = json.dumps(pod, sort_keys=True, indent=1)
text = re.sub(r"kube-api-access-[a-z0-9]{5}", "kube-api-access-XXXXX", text)
print(re.sub(r"\"\d{4}-\d\d-\d\dT[0-9:]+Z\"", "\"TIME\"", text))' >"$TMP/$P-pod.json"
expect "$P table STATUS SchedulingGated" "$(k get pods)" '^gated +0/1 +SchedulingGated +0 '
expect "$P table plain Pending" "$(k get pods)" '^plain +0/1 +Pending '
expect "$P wide table" "$(k get pods -o wide)" 'NOMINATED NODE +READINESS GATES'
expect "$P list" "$(k get pods -o name | sort | tr '\n' ' ')" '^pod/gated pod/plain $'
expect "$P list by label" "$(k get pods -l app=web -o name | tr '\n' ' ')" '^pod/gated $'
expect "$P list by field" "$(k get pods --field-selector metadata.name=plain -o name | tr '\n' ' ')" '^pod/plain $'
expect "$P raw list" "$(k get --raw '/api/v1/pods?labelSelector=app%3Dweb')" '"name":"gated"'

timeout 12 "$KUBECTL" --kubeconfig "$KC" get pods -w --request-timeout=6s >"$TMP/$P-watch.txt" 2>&1 &
wpid=$!
sleep 2
k label pod plain seen=yes >/dev/null
wait "$wpid"
expect "$P kubectl watch lists" "$(cat "$TMP/$P-watch.txt")" '^gated +0/1 +SchedulingGated'
expect "$P kubectl watch sees the change" "$(grep -c '^plain ' "$TMP/$P-watch.txt")" '^[2-9]$'

expect "$P adding a gate is refused" \
    "$(k patch pod gated --type=json -p '[{"op":"add","path":"/spec/schedulingGates/-","value":{"name":"X"}}]')" \
    "The Pod \"gated\" is invalid: spec.schedulingGates\[2\].name: Forbidden: only deletion is allowed, but found new scheduling gate 'X'"
expect "$P json patch removes gates" \
    "$(k patch pod gated --type=json -p '[{"op":"remove","path":"/spec/schedulingGates"}]')" 'pod/gated patched'
# No scheduler runs: the API server keeps the SchedulingGated condition it set at create
# (an update keeps the old status), so kubectl keeps printing it; the spec has no gates.
expect "$P table after clearing, no scheduler" "$(k get pods)" '^gated +0/1 +SchedulingGated '
expect "$P gates gone" "$(k get pod gated -o jsonpath='{.spec.schedulingGates}'; echo '<end>')" '^<end>$'
expect "$P condition kept" "$(k get pod gated -o jsonpath='{.status.conditions[0].reason}')" '^SchedulingGated$'
expect "$P removing again is 422" \
    "$(k patch pod gated --type=json -p '[{"op":"remove","path":"/spec/schedulingGates"}]')" \
    'The request is invalid: the server rejected our request due to an error in our request'
expect "$P delete" "$(k delete pod gated plain)" 'pod "plain" deleted'
expect "$P gone" "$(k get pods -o name)" '^$|No resources'

# Admission webhooks (1.33): a ValidatingWebhookConfiguration whose service gk/gk-svc has no
# ready endpoint fails pod creation closed, except in the namespace its selector exempts.
cat >"$TMP/webhook.yaml" <<'YAML'
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: gk
webhooks:
- name: validate.gk.example.com
  clientConfig:
    service: {namespace: gk, name: gk-svc, path: /validate}
  rules:
  - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}
  namespaceSelector:
    matchExpressions:
    - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}
  sideEffects: None
  admissionReviewVersions: [v1]
YAML
cat >"$TMP/namespace.yaml" <<'YAML'
apiVersion: v1
kind: Namespace
metadata:
  name: gk
YAML
cat >"$TMP/service.yaml" <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: gk-svc, namespace: gk}
spec:
  ports: [{port: 443, targetPort: 8443}]
YAML
cat >"$TMP/slice.yaml" <<'YAML'
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: gk-svc-abc
  namespace: gk
  labels: {kubernetes.io/service-name: gk-svc}
addressType: IPv4
endpoints:
- addresses: [192.0.2.7]
  conditions: {ready: false}
ports: [{port: 8443, protocol: TCP}]
YAML
expect "$P create webhook configuration" "$(k create -f "$TMP/webhook.yaml")" \
    'validatingwebhookconfiguration.admissionregistration.k8s.io/gk created'
expect "$P create namespace" "$(k create -f "$TMP/namespace.yaml")" '^namespace/gk created'
expect "$P create service" "$(k create -f "$TMP/service.yaml")" '^service/gk-svc created'
expect "$P create endpointslice" "$(k create -f "$TMP/slice.yaml")" \
    '^endpointslice.discovery.k8s.io/gk-svc-abc created'
# No endpoint may be on loopback: a webhook's endpoint for the tests is 192.0.2.x (TEST-NET-1).
sed -e 's/192\.0\.2\.7/127.0.0.1/' -e 's/gk-svc-abc/gk-svc-lo/' "$TMP/slice.yaml" >"$TMP/slice-lo.yaml"
expect "$P endpoint on loopback refused" "$(k create -f "$TMP/slice-lo.yaml")" \
    'The EndpointSlice "gk-svc-lo" is invalid: endpoints\[0\]\.addresses\[0\]: Invalid value: "127\.0\.0\.1": may not be in the loopback range \(127\.0\.0\.0/8, ::1/128\)'
expect "$P webhook table" "$(k get validatingwebhookconfigurations)" '^gk +1 +[0-9]+s'
expect "$P webhook defaults" \
    "$(k get validatingwebhookconfiguration gk -o jsonpath='{.webhooks[0].failurePolicy} {.webhooks[0].timeoutSeconds} {.webhooks[0].clientConfig.service.port}')" \
    '^Fail 10 443$'
expect "$P namespace table" "$(k get namespaces)" '^gk +Active +[0-9]+s'
expect "$P namespace name label" "$(k get ns gk -o jsonpath='{.metadata.labels}')" '"kubernetes.io/metadata.name":"gk"'
expect "$P service table" "$(k get services -n gk)" '^gk-svc +ClusterIP +10\.96\.[0-9.]+ +<none> +443/TCP +[0-9]+s'
expect "$P endpointslice table" "$(k get endpointslices -n gk)" '^gk-svc-abc +IPv4 +8443 +192\.0\.2\.7 +[0-9]+s'
if [ "$P" = real ]; then
    # A real server refuses a pod in a namespace that does not exist (NamespaceLifecycle)
    # and one without the ServiceAccount default (no controller-manager makes it here).
    k create namespace team-a >/dev/null
    k create serviceaccount default -n team-a >/dev/null
    # The admission the webhook does is the real server's only (the double calls no
    # webhook, docs/src/developers/double.md). No endpoint is made ready here: the server
    # would call the webhook at that address.
    expect "$P pod refused while no endpoint is ready" "$(k run web --image=busybox -n team-a)" \
        'Error from server \(InternalError\): Internal error occurred: failed calling webhook "validate.gk.example.com": failed to call webhook: Post "https://gk-svc.gk.svc:443/validate\?timeout=10s": no endpoints available for service "gk-svc"'
    expect "$P pod in the exempted namespace" "$(k run web --image=busybox -n kube-system)" '^pod/web created'
fi
expect "$P apply webhook configuration" "$(k apply -f "$TMP/webhook.yaml")" 'gk (configured|unchanged)'
expect "$P delete webhook configuration" "$(k delete -f "$TMP/webhook.yaml")" 'validatingwebhookconfiguration.admissionregistration.k8s.io "gk" deleted'
[ "$P" = real ] && k delete pod web -n kube-system >/dev/null
if [ "$P" = real ]; then run_python real "$VERSION"; else run_python modern; fi
}

start_double modern --bookmark-interval 1s
echo "modern double on port $PORT"
modern_checks double v1.33.4

# The same checks on a real kube-apiserver (with etcd and kube-scheduler), one of this
# script's own: what the double imitates, checked against the real thing.
bash "$HERE/../../scripts/control-plane.sh" up --owner $$ >"$TMP/real.env" || exit 1
# shellcheck disable=SC1091
source "$TMP/real.env"
REAL_DIR=$METAINIT_CONTROL_PLANE
KC=$CONTROL_PLANE_ADMIN
# As on the double (which runs no scheduler): nothing binds the pods, so a cleared
# pod keeps its SchedulingGated condition and a delete is immediate (a bound pod would wait
# for a kubelet that does not exist).
bash "$HERE/../../scripts/control-plane.sh" stop kube-scheduler "$REAL_DIR"
echo "real control plane: $CONTROL_PLANE_SERVER"
modern_checks real "$CONTROL_PLANE_KUBERNETES"
expect "the real API server dialled nothing off loopback" \
    "$(bash "$HERE/../../scripts/control-plane.sh" check-network "$REAL_DIR" 2>&1)" '^control-plane: nothing dialled'
expect "the double stores a new pod as the real server does" \
    "$(diff "$TMP/double-pod.json" "$TMP/real-pod.json" && grep -c 'kube-api-access-XXXXX' "$TMP/real-pod.json")" '^2$'

# ---------------------------------------------------------------- legacy (1.13)
start_double legacy --initializer podimage.example.com=pods --post-timeout 2s --bookmark-interval 1s
echo "legacy double on port $PORT"
write_pod "$TMP/hidden.yaml" hidden legacy "" ""
write_pod "$TMP/bypass.yaml" bypass legacy "" "  initializers:
    pending: []"

expect "legacy kubectl version" "$(k version -o json)" '"gitVersion": "v1.13.12"'
expect "legacy create blocks then times out" "$(k create -f "$TMP/hidden.yaml")" \
    'Timeout: request did not complete within requested timeout 2s'
# A GET by name returns it (1.13 Store.Get has no initialization filter); LIST hides it.
expect "legacy uninitialized pod by name" "$(k get pod hidden -o jsonpath='{.metadata.initializers.pending[0].name}')" \
    '^podimage.example.com$'
refute "legacy uninitialized pod not listed" "$(k get pods -o name)" 'pod/hidden'
refute "legacy raw list hides it" "$(k get --raw '/api/v1/pods')" '"name":"hidden"'
expect "legacy raw list with includeUninitialized" \
    "$(k get --raw '/api/v1/pods?includeUninitialized=true&labelSelector=app%3Dlegacy')" \
    '"initializers":\{"pending":\[\{"name":"podimage.example.com"\}\]\}'
refute "legacy raw list selector filters" \
    "$(k get --raw '/api/v1/pods?includeUninitialized=true&labelSelector=app%3Dother')" '"name":"hidden"'

timeout 12 "$KUBECTL" --kubeconfig "$KC" get --raw '/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=5' \
    >"$TMP/legacy-raw-watch.txt" 2>&1 &
rpid=$!
timeout 12 "$KUBECTL" --kubeconfig "$KC" get pods -w --request-timeout=6s >"$TMP/legacy-watch.txt" 2>&1 &
wpid=$!
sleep 2
# kubectl reads the object by name before patching it, which works while uninitialized.
expect "legacy kubectl patch clears it" \
    "$(k patch pod hidden --type=json -p '[{"op":"remove","path":"/metadata/initializers"}]')" 'pod/hidden patched'
wait "$rpid"
wait "$wpid"
expect "legacy raw watch sees ADDED at initialization" "$(cat "$TMP/legacy-raw-watch.txt")" '^\{"type":"ADDED","object":.*"name":"hidden"'
refute "legacy raw watch saw nothing before" "$(cat "$TMP/legacy-raw-watch.txt")" 'podimage.example.com'
expect "legacy kubectl watch sees it" "$(cat "$TMP/legacy-watch.txt")" '^hidden +0/1 +Pending'
expect "legacy visible now" "$(k get pod hidden -o name)" '^pod/hidden$'
expect "legacy initializers gone" "$(k get pod hidden -o jsonpath='{.metadata.initializers}'; echo '<end>')" '^<end>$'
expect "legacy json patch" \
    "$(k patch pod hidden --type=json -p '[{"op":"add","path":"/metadata/labels/patched","value":"yes"}]')" 'pod/hidden patched'
expect "legacy list by label" "$(k get pods -l patched=yes -o name | tr '\n' ' ')" '^pod/hidden $'
expect "legacy create with empty initializers bypasses" "$(k create -f "$TMP/bypass.yaml")" 'pod/bypass created'
# 1.13 has no server-side field validation: kubectl validates against /openapi/v2.
write_pod "$TMP/legacy-gated.yaml" lgated legacy "  schedulingGates:
  - name: example.com/a" ""
expect "legacy client-side validation from openapi v2" "$(k create -f "$TMP/legacy-gated.yaml")" \
    'unknown field "schedulingGates" in io.k8s.api.core.v1.PodSpec'
expect "legacy explain initializers" "$(k explain pod.metadata.initializers)" 'Initializers tracks the progress of initialization'
expect "legacy table" "$(k get pods)" '^bypass +0/1 +Pending '
expect "legacy list" "$(k get pods -o name | sort | tr '\n' ' ')" '^pod/bypass pod/hidden $'
expect "legacy delete" "$(k delete pod hidden bypass)" 'pod "bypass" deleted'
run_python legacy

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
