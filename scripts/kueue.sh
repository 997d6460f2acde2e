#!/usr/bin/env bash
# Kueue, a real admission controller that gates pods (the kueue.x-k8s.io/admission scheduling
# gate) behind its webhooks: its manager built unmodified from its Go module (tests/kueue/go.mod
# pins the version), as scripts/helm.sh builds helm, and installed on the real node of
# scripts/node.sh from the module's own config/default, changed only where that node needs it.
#
#   bash scripts/kueue.sh build               # once; cached outside the repo, prints the time it took
#   bash scripts/kueue.sh path                # prints the build's directory (fails if not built)
#   bash scripts/kueue.sh manifests           # prints config/default rendered for the node
#   bash scripts/kueue.sh image NODE_DIR      # builds localhost/node/kueue:test into the node's containerd
#   bash scripts/kueue.sh install NODE_DIR    # image, applies the manifests, waits until the webhook answers
#   bash scripts/kueue.sh uninstall [--keep-pods] NODE_DIR
#                                             # deletes what install applied; with --keep-pods
#                                             # as `helm uninstall` does: not the CRDs and
#                                             # their objects, nor the pods Kueue manages
#
# NODE_DIR is a node of scripts/node.sh: its containerd/containerd.sock and
# etc/kubernetes/admin.conf are used. The cache is ~/.cache/metainit/kueue (or
# $METAINIT_KUEUE_CACHE). Nothing is pulled: the image is built here FROM scratch.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
module=$here/tests/kueue
image_ref=localhost/node/kueue:test

# shellcheck source=scripts/lib/logging.sh
. "$here/scripts/lib/logging.sh"
# shellcheck source=scripts/lib/go-build.sh
. "$here/scripts/lib/go-build.sh"
log_init kueue.sh
trap 'say "failed at line $LINENO: $BASH_COMMAND"' ERR

version=$(awk '$1 == "sigs.k8s.io/kueue" && $2 ~ /^v/ { print $2; exit }' "$module/go.mod")
[ -n "$version" ] || die "cannot read Kueue's version in $module/go.mod"
# The recipe's number changes when the way of building does.
key=$(go_build_key 1 "$module/go.mod" "$module/go.sum")
cache=${METAINIT_KUEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/metainit/kueue}
out=$cache/kueue-$version-$key

# One scratch directory for the whole run (the overlay, the rendered manifests, buildah's
# storage), removed however the script ends.
work=$(mktemp -d "${TMPDIR:-/tmp}/kueue.XXXXXX")
trap 'rm -rf "$work"' EXIT

# kueue_step TMP: the manager into TMP, stamped with the module's release time, not the
# clock: the same go.mod gives the same binary.
kueue_step() {
  local date
  say "building Kueue $version (two cores: several minutes the first time)" &&
    date=$(go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' sigs.k8s.io/kueue) &&
    # Kueue's Makefile (`make build`, which its Dockerfile runs) stamps these three; the
    # module carries no commit, so that one says so.
    go_build \
      -ldflags "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$version -X sigs.k8s.io/kueue/pkg/version.GitCommit=none -X sigs.k8s.io/kueue/pkg/version.BuildDate=$date" \
      -o "$1/manager" sigs.k8s.io/kueue/cmd/kueue
}

# One build kept: those of other versions or recipes go.
build() {
  go_build_cached --module "$module" --out "$out" --binaries manager --prune 'kueue-*' \
    --what Kueue -- kueue_step
}

path() {
  [ -x "$out/manager" ] || die "Kueue $version is not built: run bash scripts/kueue.sh build"
  echo "$out"
}

# The module's config/default through an overlay; only what the node needs is changed.
manifests() {
  local src rendered
  src=$(cd "$module" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  [ -d "$src/config/default" ] || die "no config/default in $src (run: cd tests/kueue && go mod download)"
  # The module cache is read-only: kustomize reads a copy.
  rm -rf "$work/config" "$work/node"
  cp -r "$src/config" "$work/config"
  chmod -R u+w "$work/config"
  mkdir -p "$work/node"
  cat >"$work/node/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../config/default
images:
# The image built here (scripts/kueue.sh image) instead of the staging registry's: the node
# pulls nothing.
- name: us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue
  newName: ${image_ref%:*}
  newTag: ${image_ref##*:}
patches:
# Shipped as Always: the image is only in the node's containerd, never in a registry.
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: controller-manager
      namespace: kueue-system
    spec:
      template:
        spec:
          containers:
          - name: manager
            imagePullPolicy: Never
EOF
  rendered=$(kubectl kustomize "$work/node")
  # The manager's config already lists the pod integration (and batch/job) and leaves
  # managedJobsNamespaceSelector to its default (kube-system and Kueue's own namespace left
  # alone): checked, so a new version that drops either fails here rather than on the node.
  grep -q '^ *- "pod"$' <<<"$rendered" || die "Kueue $version's manager config does not list the pod integration"
  grep -q '^ *- "batch/job"$' <<<"$rendered" || die "Kueue $version's manager config does not list batch/job"
  grep -q "image: $image_ref\$" <<<"$rendered" || die "the overlay did not set the manager's image to $image_ref"
  echo "$rendered"
}

# The node's containerd, namespace k8s.io (the kubelet's).
ctr_() { ctr --address "$node/containerd/containerd.sock" --namespace k8s.io "$@"; }
kubectl_() { kubectl --kubeconfig "$node/etc/kubernetes/admin.conf" "$@"; }

node_dir() { # COMMAND NODE_DIR
  node=${2:-}
  [ -n "$node" ] || die "usage: bash scripts/kueue.sh $1 NODE_DIR"
  [ -S "$node/containerd/containerd.sock" ] || die "no containerd socket at $node/containerd/containerd.sock (is the node of scripts/node.sh up?)"
  [ -f "$node/etc/kubernetes/admin.conf" ] || die "no kubeconfig at $node/etc/kubernetes/admin.conf"
}

# Kueue's Dockerfile: /manager as the entrypoint, user 65532 as distroless's nonroot (the
# Deployment's runAsNonRoot needs a numeric user other than 0 in the image).
image() {
  local bin start=$SECONDS ctr
  bin=$(path)/manager
  local B=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
  ctr=$("${B[@]}" from --quiet scratch)
  "${B[@]}" copy --chmod 0755 "$ctr" "$bin" /manager >/dev/null
  "${B[@]}" config --entrypoint '["/manager"]' --user 65532:65532 --workingdir / "$ctr"
  "${B[@]}" commit --quiet "$ctr" "$image_ref" >/dev/null
  "${B[@]}" push --quiet "$image_ref" "oci-archive:$work/image.tar:$image_ref" >/dev/null
  ctr_ images import "$work/image.tar" >/dev/null
  "${B[@]}" rm "$ctr" >/dev/null
  "${B[@]}" rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$work/storage" "$work/run" "$work/image.tar"
  ctr_ images ls -q | grep -qx "$image_ref" || die "$image_ref is not in the node's containerd after the import"
  say "image $image_ref built and imported in $((SECONDS - start))s"
}

install() {
  local start=$SECONDS applied deadline gates=""
  image
  manifests >"$work/kueue.yaml"
  # One server-side apply: config/default holds no custom object, so nothing waits for a CRD.
  applied=$(kubectl_ apply --server-side -f "$work/kueue.yaml" -o name)
  # shellcheck disable=SC2046 # one word a CRD
  kubectl_ wait --for=condition=Established --timeout=60s $(grep '^customresourcedefinition' <<<"$applied") >/dev/null
  # Ready only once its cert-controller's Secret reached the pod's mount (the kubelet syncs
  # secret volumes about once a minute): a minute or two.
  kubectl_ -n kueue-system wait --for=condition=Available --timeout=300s deployment/kueue-controller-manager >/dev/null
  # Available says the manager is ready, not that the API server can reach its webhook (the
  # cert-controller injects the CA into the webhook configurations meanwhile). A pod that asks
  # for a queue, created as a server-side dry run, comes back gated only once the mutating pod
  # webhook answered (with kueue.x-k8s.io/admission, and kueue.x-k8s.io/topology too while
  # Kueue's TopologyAwareScheduling gate is on, as it is by default).
  deadline=$((SECONDS + 120))
  until [[ " $gates " == *" kueue.x-k8s.io/admission "* ]]; do
    [ "$SECONDS" -lt "$deadline" ] || die "Kueue's pod webhook did not gate a dry-run pod within 120s (last answer: ${gates:-none})"
    sleep 1
    gates=$(kubectl_ create --dry-run=server -o jsonpath='{.spec.schedulingGates[*].name}' -f - 2>&1 <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: kueue-webhook-probe
  namespace: default
  labels:
    kueue.x-k8s.io/queue-name: kueue-webhook-probe
spec:
  containers:
  - name: probe
    image: $image_ref
EOF
    ) || true
  done
  say "Kueue $version installed and its pod webhook answering in $((SECONDS - start))s"
}

# keep_crds NAMES: what `helm uninstall` leaves: the CRDs and their objects (Workloads,
# queues), and so the pods Kueue manages, gated; everything else of the manifests deleted.
keep_crds() {
  # shellcheck disable=SC2046 # one word an object
  kubectl_ delete --ignore-not-found --wait=true --timeout=180s \
    $(grep -vE '^customresourcedefinition\.' <<<"$1") >/dev/null
}

# remove_all NAMES: the pods Kueue manages and Kueue's objects (queues, flavors, workloads),
# while the manager still runs to remove its finalizers from them (otherwise those pods stay
# Terminating and the CRDs never finish deleting), then the rest.
remove_all() {
  local crds
  kubectl_ delete pods --all-namespaces --selector kueue.x-k8s.io/managed=true \
    --ignore-not-found --wait=true --timeout=120s >/dev/null
  crds=$(sed -n 's|^customresourcedefinition\.apiextensions\.k8s\.io/||p' <<<"$1")
  # shellcheck disable=SC2086 # one word a CRD
  crds=$(kubectl_ get crd --ignore-not-found -o name $crds | sed 's|^.*/||' | paste -sd, -)
  if [ -n "$crds" ]; then
    kubectl_ delete "$crds" --all --all-namespaces --ignore-not-found --wait=true --timeout=120s >/dev/null
  fi
  kubectl_ delete -f "$work/kueue.yaml" --ignore-not-found --wait=true --timeout=180s >/dev/null
}

uninstall() {
  local start=$SECONDS names
  manifests >"$work/kueue.yaml"
  names=$(kubectl_ create --dry-run=client -o name -f "$work/kueue.yaml")
  # First what the API server calls on Kueue's behalf: with the manager gone, an APIService
  # without a backend stops namespace deletion (discovery fails) and webhooks that fail closed
  # refuse the pods of every namespace.
  # shellcheck disable=SC2046 # one word an object
  kubectl_ delete --ignore-not-found --wait=true --timeout=60s \
    $(grep -E '^(mutatingwebhookconfiguration|validatingwebhookconfiguration|apiservice)\.' <<<"$names") >/dev/null
  if [ -n "$keep_pods" ]; then
    keep_crds "$names"
  else
    remove_all "$names"
  fi
  say "Kueue uninstalled in $((SECONDS - start))s"
}

case ${1:-} in
  build) build ;;
  path) path ;;
  manifests) manifests ;;
  image) node_dir "$@" && image ;;
  install) node_dir "$@" && install ;;
  uninstall)
    keep_pods=
    if [ "${2:-}" = --keep-pods ]; then keep_pods=1; set -- "$1" "${@:3}"; fi
    node_dir "$@" && uninstall
    ;;
  *)
    sed -n '2,/^set -Eeuo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
