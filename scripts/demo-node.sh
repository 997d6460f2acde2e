#!/usr/bin/env bash
# The mission's own scene on a real node (`bash scripts/demo.sh --node`): a control-plane
# node booted the kubeadm way (containerd, runc, a kubelet whose manifests directory holds
# etcd, kube-apiserver, kube-controller-manager and kube-scheduler as static pods), an
# installer whose webhook gates every new pod, its own controller's included, and the
# deadlock that makes; then manifests/metainit.yaml copied into the kubelet's directory,
# and the deadlock broken. Every step checks what it prints, and fails the demo if it did
# not happen. Needs root and what scripts/node.sh needs (.ci/run installs it); builds the
# node on first use (several minutes), then about four minutes.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

held=20 # seconds the deadlock is shown for

if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
fail() { echo "demo failed: $*" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# until_true SECONDS WHAT COMMAND...: polls COMMAND until it succeeds, or fails the demo.
until_true() {
  local limit=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt "$deadline" ] || fail "$what: not within ${limit}s"
    sleep 0.5
  done
}

# manifest FILE NAME=VALUE...: a manifest of tests/node/installer with its ${NAME}s replaced.
manifest() {
  local file=$1 text kv
  text=$(cat "tests/node/installer/$file")
  shift
  for kv in "$@"; do text=${text//"\${${kv%%=*}}"/${kv#*=}}; done
  case $text in *"\${"*) fail "$file: a value is missing" ;; esac
  printf '%s\n' "$text"
}

jsonpath() { kubectl "${@:2}" -o "jsonpath=$1" 2>/dev/null; }
controller_pod() { jsonpath '{.items[0].metadata.name}' -n installer get pods -l app=installer-controller; }
gates_of() { jsonpath '{.spec.schedulingGates[*].name}' -n "$1" get pod "$2"; }
is_ready() { [ "$(jsonpath '{.status.conditions[?(@.type=="Ready")].status}' -n "$1" get pod "$2")" = True ]; }
metainit_ready() { is_ready kube-system "metainit-$NODE_NAME"; }
webhook_ready() {
  is_ready installer "$(jsonpath '{.items[0].metadata.name}' -n installer get pods -l app=installer-webhook)"
}

boot() {
  say "A control-plane node boots, the kubeadm way, without metainit"
  local env
  env=$(bash scripts/node.sh up --owner $$ --without-metainit) || fail "scripts/node.sh up (its reason is above)"
  eval "$env"
  export KUBECONFIG=$NODE_ADMIN
  kubectl get pods -n kube-system -o wide | sed 's/^/  /'
}

install_webhook() {
  say "An installer: a webhook that puts a scheduling gate on every new pod, until its controller has processed it"
  local port ca
  port=$(free_port)
  manifest webhook.yaml "WEBHOOK_PORT=$port" | kubectl apply -f - | sed 's/^/  /'
  kubectl -n installer create secret tls webhook-tls --cert "$NODE_PKI/installer-webhook.crt" \
    --key "$NODE_PKI/installer-webhook.key" | sed 's/^/  /'
  until_true 120 "the webhook's pod Ready" webhook_ready
  ca=$(base64 -w0 "$NODE_PKI/ca.crt")
  manifest webhook-configuration.yaml "WEBHOOK_PORT=$port" "CA_BUNDLE=$ca" | kubectl apply -f - | sed 's/^/  /'
}

the_deadlock() {
  say "Its controller is deployed, its pod template labelled k8s.opsani.io/initializer: the webhook gates it too"
  manifest controller.yaml "READY_PORT=$(free_port)" "API_PORT=${NODE_SERVER##*:}" |
    kubectl apply -f - | sed 's/^/  /'
  until_true 120 "the controller's pod created" controller_pod
  pod=$(controller_pod)
  local start=$SECONDS
  while [ $((SECONDS - start)) -lt $held ]; do
    [ "$(gates_of installer "$pod")" = example.com/installer ] || fail "$pod lost its gate without metainit"
    [ -z "$(jsonpath '{.spec.nodeName}' -n installer get pod "$pod")" ] || fail "$pod was bound while gated"
    sleep 1
  done
  echo "after ${held}s, $pod is still gated, and nothing will ever lift the gate: the deadlock"
  kubectl get pods -n installer | sed 's/^/  /'
}

metainit_arrives() {
  say "manifests/metainit.yaml copied into the kubelet's manifests directory (image and kubeconfig path set)"
  bash scripts/node.sh metainit "$METAINIT_NODE"
  diff "manifests/metainit.yaml" "$NODE_METAINIT_MANIFEST" | sed 's/^/  /' || true
  until_true 120 "metainit's mirror pod Ready" metainit_ready
  kubectl get pod -n kube-system "metainit-$NODE_NAME" -o wide | sed 's/^/  /'
}

deadlock_broken() {
  local start=$SECONDS
  until_true 120 "$pod cleared and Ready" is_ready installer "$pod"
  [ -z "$(gates_of installer "$pod")" ] || fail "$pod Ready but still gated"
  echo "$pod: gate cleared, bound to $(jsonpath '{.spec.nodeName}' -n installer get pod "$pod"), Running and Ready within $((SECONDS - start))s"
  kubectl get pods -n installer | sed 's/^/  /'

  say "The installer does its job: a workload's pod, gated by the webhook, processed by the controller"
  kubectl run job -n workloads --image localhost/node/pause:test --image-pull-policy Never \
    --overrides '{"spec": {"hostNetwork": true}}' | sed 's/^/  /'
  until_true 120 "the workload processed and Running" processed
  echo "job: processed by $(jsonpath '{.metadata.annotations.example\.com/processed-by}' -n workloads get pod job), gate lifted, Running"
}

processed() {
  [ "$(jsonpath '{.metadata.annotations.example\.com/processed-by}' -n workloads get pod job)" = "$pod" ] &&
    [ "$(jsonpath '{.status.phase}' -n workloads get pod job)" = Running ]
}

pod=
boot
install_webhook
the_deadlock
metainit_arrives
deadlock_broken
bash scripts/node.sh check-network "$METAINIT_NODE" 2>&1 | sed 's/^node: /  /'
say "Done: the node goes down with this script"
