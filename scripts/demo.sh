#!/usr/bin/env bash
# The main job, on a local demo: a deadlocked initializer pod whose create blocks, and
# metainit breaking the deadlock; then the same with a scheduling gate. Runs against the
# bundled kube-apiserver double with kubectl; needs cargo and kubectl, nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build -q -p metainit -p kube-double
bin=target/debug
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_double() { # generation, extra flags...
  local gen=$1; shift
  local port; port=$(free_port)
  "$bin/kube-double" --generation "$gen" --listen "127.0.0.1:$port" --kubeconfig-out "$work/$gen.kubeconfig" "$@" \
    >"$work/$gen.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    kubectl --kubeconfig "$work/$gen.kubeconfig" version >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "the double did not start: $(cat "$work/$gen.log")" >&2
  exit 1
}

if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }

say "Kubernetes 1.13 double, initializer podimage.example.com configured for pods"
start_double legacy --initializer podimage.example.com=pods
export KUBECONFIG=$work/legacy.kubeconfig
kubectl version 2>/dev/null | grep Server

say "The initializer's own pod is created: its create blocks, waiting for the initializer that is this very pod"
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
sleep 2
echo "kubectl create still waiting after 2 s: $(kill -0 $create 2>/dev/null && echo yes || echo no)"
echo "kubectl get pods (uninitialized pods are hidden):"
kubectl get pods 2>&1 | sed 's/^/  /'
echo "seen with includeUninitialized=true:"
kubectl get --raw '/api/v1/namespaces/default/pods?includeUninitialized=true' |
  python3 -c 'import json,sys; [print("  ", p["metadata"]["name"], "pending:", [i["name"] for i in p["metadata"]["initializers"]["pending"]]) for p in json.load(sys.stdin)["items"]]'
"$bin/metainit" status | sed 's/^/  /'

say "metainit starts"
"$bin/metainit" --admin-addr 127.0.0.1:0 2>"$work/metainit.log" &
metainit=$!
pids+=($metainit)
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
wait $metainit && echo "metainit stopped on SIGTERM, exit 0"

say "Kubernetes 1.33 double: a pod held by a scheduling gate whose controller is down"
# --scheduler: the double's stand-in for kube-scheduler binds pods with no gates left to
# node-1. Without a scheduler the pod would stay Pending and kubectl would keep printing
# SchedulingGated after the gate goes: the API server sets that condition only at create.
start_double modern --scheduler node-1
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
say "metainit --once"
"$bin/metainit" --once 2>/dev/null
echo "gates now: $(kubectl get pod kueue-controller-manager-0 -o jsonpath='{.spec.schedulingGates}')"
for _ in $(seq 50); do
  [ -n "$(kubectl get pod kueue-controller-manager-0 -o jsonpath='{.spec.nodeName}')" ] && break
  sleep 0.1
done
echo "the scheduler bound it:"
kubectl get pods -o wide | sed 's/^/  /'
say "done"
