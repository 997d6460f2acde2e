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

# shellcheck source=scripts/lib/logging.sh
. scripts/lib/logging.sh
# shellcheck source=scripts/lib/ports.sh
. scripts/lib/ports.sh
# shellcheck source=scripts/lib/wait.sh
. scripts/lib/wait.sh
# What fails the demo says "demo failed: WHY" (die, and a wait_for past its deadline).
log_init "demo failed"

# manifest FILE NAME=VALUE...: a manifest of tests/node/installer with its ${NAME}s replaced.
manifest() {
  local file=$1 text kv
  text=$(cat "tests/node/installer/$file")
  shift
  for kv in "$@"; do text=${text//"\${${kv%%=*}}"/${kv#*=}}; done
  case $text in *"\${"*) die "$file: a value is missing" ;; esac
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
  heading "A control-plane node boots, the kubeadm way, without metainit"
  local env
  env=$(bash scripts/node.sh up --owner $$ --without-metainit) || die "scripts/node.sh up (its reason is above)"
  eval "$env"
  export KUBECONFIG=$NODE_ADMIN
  kubectl get pods -n kube-system -o wide | sed 's/^/  /'
}

install_webhook() {
  heading "An installer: a webhook that puts a scheduling gate on every new pod, until its controller has processed it"
  local port ca
  port=$(free_port)
  manifest webhook.yaml "WEBHOOK_PORT=$port" | kubectl apply -f - | sed 's/^/  /'
  kubectl -n installer create secret tls webhook-tls --cert "$NODE_PKI/installer-webhook.crt" \
    --key "$NODE_PKI/installer-webhook.key" | sed 's/^/  /'
  wait_for --every 0.5 "the webhook's pod Ready" 120 webhook_ready || exit 1
  ca=$(base64 -w0 "$NODE_PKI/ca.crt")
  manifest webhook-configuration.yaml "WEBHOOK_PORT=$port" "CA_BUNDLE=$ca" | kubectl apply -f - | sed 's/^/  /'
}

the_deadlock() {
  heading "Its controller is deployed, its pod template labelled k8s.opsani.io/initializer: the webhook gates it too"
  manifest controller.yaml "READY_PORT=$(free_port)" "API_PORT=${NODE_SERVER##*:}" |
    kubectl apply -f - | sed 's/^/  /'
  wait_for --every 0.5 "the controller's pod created" 120 controller_pod || exit 1
  pod=$(controller_pod)
  local start=$SECONDS
  while [ $((SECONDS - start)) -lt $held ]; do
    [ "$(gates_of installer "$pod")" = example.com/installer ] || die "$pod lost its gate without metainit"
    [ -z "$(jsonpath '{.spec.nodeName}' -n installer get pod "$pod")" ] || die "$pod was bound while gated"
    sleep 1
  done
  echo "after ${held}s, $pod is still gated, and nothing will ever lift the gate: the deadlock"
  kubectl get pods -n installer | sed 's/^/  /'
}

metainit_arrives() {
  heading "manifests/metainit.yaml copied into the kubelet's manifests directory (image and kubeconfig path set)"
  bash scripts/node.sh metainit "$METAINIT_NODE"
  diff "manifests/metainit.yaml" "$NODE_METAINIT_MANIFEST" | sed 's/^/  /' || true
  wait_for --every 0.5 "metainit's mirror pod Ready" 120 metainit_ready || exit 1
  kubectl get pod -n kube-system "metainit-$NODE_NAME" -o wide | sed 's/^/  /'
}

deadlock_broken() {
  local start=$SECONDS
  wait_for --every 0.5 "$pod cleared and Ready" 120 is_ready installer "$pod" || exit 1
  [ -z "$(gates_of installer "$pod")" ] || die "$pod Ready but still gated"
  echo "$pod: gate cleared, bound to $(jsonpath '{.spec.nodeName}' -n installer get pod "$pod"), Running and Ready within $((SECONDS - start))s"
  kubectl get pods -n installer | sed 's/^/  /'

  heading "The installer does its job: a workload's pod, gated by the webhook, processed by the controller"
  kubectl run job -n workloads --image localhost/node/pause:test --image-pull-policy Never \
    --overrides '{"spec": {"hostNetwork": true}}' | sed 's/^/  /'
  wait_for --every 0.5 "the workload processed and Running" 120 processed || exit 1
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
heading "Done: the node goes down with this script"
