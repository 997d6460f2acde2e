#!/usr/bin/env bash
# The main job, on a local demo: a deadlocked initializer pod whose create blocks, and
# metainit breaking the deadlock; then the same with a scheduling gate; then with an
# admission webhook that intercepts its own pods (`--webhooks`: what metainit reads and
# writes; the double calls no webhook). Runs against the
# bundled kube-apiserver double with kubectl; needs cargo, kubectl and python3.
#
#   bash scripts/demo.sh           # this one, on the double
#   bash scripts/demo.sh --node    # the same scene on a real node (scripts/demo-node.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --node ]; then exec bash scripts/demo-node.sh; fi
[ $# -eq 0 ] || { echo "usage: bash scripts/demo.sh [--node]" >&2; exit 2; }

cargo build -q -p metainit
bin=${CARGO_TARGET_DIR:-target}/debug
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  double_stop
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=scripts/lib/double.sh
. scripts/lib/double.sh
log_init demo


heading "Kubernetes 1.13 double, initializer podimage.example.com configured for pods"
double_start "$work/legacy.kubeconfig" legacy --initializer podimage.example.com=pods
export KUBECONFIG=$work/legacy.kubeconfig
kubectl version 2>/dev/null | grep Server

heading "The initializer's own pod is created: its create blocks, waiting for the initializer that is this very pod"
kubectl create -f - >"$work/create.out" 2>&1 <<'YAML' &
apiVersion: v1
kind: Pod
metadata:
  name: podimage-initializer
  labels:
    app: podimage-initializer
    k8s.opsani.io/initializer: "true"
spec:
  containers:
  - name: initializer
    image: registry.example/podimage-initializer:1.0
YAML
create=$!
# The create blocks: seen stored (uninitialized) on the server while kubectl still waits.
for _ in $(seq 100); do
  kubectl get --raw '/api/v1/namespaces/default/pods/podimage-initializer' >/dev/null 2>&1 && break
  sleep 0.1
done
sleep 1
if ! kill -0 $create 2>/dev/null; then
  echo "kubectl create returned, it should block: $(cat "$work/create.out")" >&2
  exit 1
fi
echo "kubectl create still waiting, the pod stored uninitialized: yes"
echo "kubectl get pods (uninitialized pods are hidden):"
kubectl get pods 2>&1 | sed 's/^/  /'
echo "seen with includeUninitialized=true:"
kubectl get --raw '/api/v1/namespaces/default/pods?includeUninitialized=true' |
  python3 -c 'import json,sys; [print("  ", p["metadata"]["name"], "pending:", [i["name"] for i in p["metadata"]["initializers"]["pending"]]) for p in json.load(sys.stdin)["items"]]'
"$bin/metainit" status | sed 's/^/  /'

heading "metainit starts"
"$bin/metainit" --admin-addr 127.0.0.1:0 2>"$work/metainit.log" &
metainit=$!
pids+=("$metainit")
if wait $create; then
  echo "kubectl create returned: $(cat "$work/create.out")"
else
  echo "kubectl create failed: $(cat "$work/create.out")" >&2
  exit 1
fi
init=$(kubectl get pod podimage-initializer -o jsonpath='{.metadata.initializers}')
echo "initializers now: ${init:-none}"
kubectl get pods | sed 's/^/  /'
grep -E 'cleared' "$work/metainit.log" | sed 's/^/  metainit: /'
kill -TERM $metainit
if wait $metainit; then
  echo "metainit stopped on SIGTERM, exit 0"
else
  echo "metainit exited $? on SIGTERM, want 0: $(tail -n 5 "$work/metainit.log")" >&2
  exit 1
fi

heading "Kubernetes 1.33 double: a pod held by a scheduling gate whose controller is down"
# The double runs no scheduler: once the gate is gone, the demo binds the pod itself as
# kube-scheduler does (POST pods/NAME/binding, which the API server refuses while a gate
# is left). Without a binding kubectl would keep printing SchedulingGated after the gate
# goes: the API server sets that condition only at create (tests/cluster_gates.rs shows
# the real kube-scheduler binding it). The workload kinds too: `status --risks` reads
# their pod templates.
double_start "$work/modern.kubeconfig" modern --resource deployments.apps --resource statefulsets.apps \
  --resource daemonsets.apps --resource replicasets.apps --resource jobs.batch
export KUBECONFIG=$work/modern.kubeconfig
kubectl create -f - <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: kueue-controller-manager-0
  namespace: default
  labels:
    k8s.opsani.io/initializer: "true"
spec:
  schedulingGates:
  - name: kueue.x-k8s.io/admission
  containers:
  - name: manager
    image: registry.example/kueue:0.9
YAML
kubectl get pods -o wide | sed 's/^/  /'
"$bin/metainit" status | sed 's/^/  /'
heading "metainit --once"
"$bin/metainit" --once 2>/dev/null
gates=$(kubectl get pod kueue-controller-manager-0 -o jsonpath='{.spec.schedulingGates}')
echo "gates now: ${gates:-none}"
if [ -n "$gates" ]; then echo "the gate is still there" >&2; exit 1; fi
# kube-scheduler's binding, as it POSTs it.
if ! kubectl create --raw /api/v1/namespaces/default/pods/kueue-controller-manager-0/binding -f - >/dev/null <<'JSON'
{"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "kueue-controller-manager-0"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}
JSON
then echo "the binding was refused" >&2; exit 1; fi
node=$(kubectl get pod kueue-controller-manager-0 -o jsonpath='{.spec.nodeName}')
if [ "$node" != node-1 ]; then echo "not bound: node '$node'" >&2; exit 1; fi
echo "bound, as kube-scheduler binds it, to $node:"
kubectl get pods -o wide | sed 's/^/  /'
heading "The same 1.33 double: a validating webhook that intercepts its own pods, and its pods are gone"
# The webhook fails closed on every pod creation; its service has one endpoint, not ready
# (its pod is gone): on a real API server its own replacement pod cannot be created, the
# deadlock of the admission-webhook era. The double stores the configuration but calls no
# webhook (it models Kubernetes 1.13 and faults: the refusal itself is played on a real API
# server by `bash scripts/demo.sh --node` and tests/cluster_webhooks_daemon.rs), so what is
# shown here is what metainit reads and writes. The configuration carries the label key:
# metainit may act on it.
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Namespace
metadata:
  name: policy
---
apiVersion: v1
kind: Service
metadata:
  name: policy-webhook
  namespace: policy
spec:
  selector:
    app: policy-controller
  ports:
  - port: 443
    targetPort: 8443
---
# The webhook's own controller (the double runs no controller: a template only).
apiVersion: apps/v1
kind: Deployment
metadata:
  name: policy-controller
  namespace: policy
spec:
  selector:
    matchLabels:
      app: policy-controller
  template:
    metadata:
      labels:
        app: policy-controller
    spec:
      containers:
      - name: controller
        image: registry.example/policy:1
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: policy-webhook-1
  namespace: policy
  labels:
    kubernetes.io/service-name: policy-webhook
addressType: IPv4
endpoints:
- addresses: ["10.0.0.7"]
  conditions:
    ready: false
ports:
- port: 8443
  protocol: TCP
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: policy-webhook
  labels:
    k8s.opsani.io/initializer: ""
webhooks:
- name: validate.policy.example.com
  clientConfig:
    service:
      namespace: policy
      name: policy-webhook
      path: /validate
  rules:
  - operations: ["CREATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["pods"]
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: ["v1"]
YAML
# What a wait below (up to 30 s, scripts/lib/wait.sh) says when it fails the demo: metainit's log.
webhooks_log() { echo "$1 did not happen within $2 s; metainit's log:" >&2; cat "$work/webhooks.log" >&2; }
selector() { kubectl get validatingwebhookconfiguration policy-webhook -o jsonpath='{.webhooks[0].namespaceSelector}'; }
before=$(selector)
echo "the webhook's namespaceSelector, as the API server defaulted it: $before"

heading "metainit status --risks --webhooks: the forecast, before anything is stuck"
# Exit 3: a finding. The webhook fails closed on its own pods (self-interception); its
# configuration carries the label key, so metainit --webhooks would clear it.
set +e
"$bin/metainit" status --risks --webhooks >"$work/risks.txt"
code=$?
set -e
sed 's/^/  /' "$work/risks.txt"
if [ "$code" != 3 ] || ! grep -q "^self-interception: validating/policy-webhook/validate.policy.example.com" "$work/risks.txt"; then
  echo "status --risks exited $code without the self-interception finding" >&2; exit 1
fi

heading "metainit --webhooks --webhook-grace 2s"
"$bin/metainit" --webhooks --webhook-grace 2s --admin-addr 127.0.0.1:0 2>"$work/webhooks.log" &
metainit=$!
pids+=("$metainit")
# Exempted, and only it: one expression added, `kubernetes.io/metadata.name NotIn [policy]`.
exempted() {
  local now
  now=$(selector)
  [[ $now != "$before" && $now == *'"kubernetes.io/metadata.name"'* && $now == *'"NotIn"'* &&
    $now == *'["policy"]'* ]]
}
wait_for --every 0.1 --late webhooks_log "the exemption" 30 exempted || exit 1
echo "after 2 s without a ready endpoint, the webhook's own namespace is exempted, and only it"
echo "(its pods can be created; every other namespace still fails closed):"
echo "  namespaceSelector: $(selector)"
"$bin/metainit" status --webhooks | sed 's/^/  /'
echo "the forecast now (the webhook's own namespace exempted): its pods can start; what the"
echo "webhook, still down, blocks meanwhile (every other namespace) is the one finding left:"
set +e
"$bin/metainit" status --risks >"$work/risks.txt"
code=$?
set -e
sed 's/^/  /' "$work/risks.txt"
if [ "$code" != 3 ] || ! grep -q "^down: validating/policy-webhook/validate.policy.example.com" "$work/risks.txt" ||
  grep -q "^self-interception:" "$work/risks.txt"; then
  echo "status --risks exited $code: want the down finding alone" >&2; exit 1
fi

heading "The webhook's pod is ready again: its EndpointSlice says so"
kubectl patch endpointslice policy-webhook-1 -n policy --type=json \
  -p '[{"op": "replace", "path": "/endpoints/0/conditions/ready", "value": true}]' >/dev/null
restored() { [ "$(selector)" = "$before" ]; }
wait_for --every 0.1 --late webhooks_log "the restore" 30 restored || exit 1
echo "after 2 s with a ready endpoint, the selector is what it was: $(selector)"
grep -E "exempted the webhook's own namespace|restored the webhook's namespace selector" "$work/webhooks.log" |
  sed 's/^/  metainit: /'
echo "Events on the configuration:"
events=$(kubectl get events -n default --no-headers \
  -o custom-columns=REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message | grep -E "Webhook" || true)
if [ -z "$events" ]; then echo "no Webhook Event was written" >&2; exit 1; fi
echo "  ${events//$'\n'/$'\n'  }"
kill -TERM $metainit
if wait $metainit; then
  echo "metainit stopped on SIGTERM, exit 0"
else
  echo "metainit exited $? on SIGTERM, want 0: $(tail -n 5 "$work/webhooks.log")" >&2
  exit 1
fi
heading "done"
