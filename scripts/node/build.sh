# shellcheck shell=bash
# shellcheck disable=SC2154 # $bin, $dir, $here, $installer_module, $k8s_version, $minor, $module: scripts/node.sh's globals, set before it calls this
# The node's binaries and images (sourced by scripts/node.sh): kubelet,
# kube-controller-manager, kube-proxy and kubeadm built static from the minor's tests/node/MINOR/go.mod, the test's
# installer from tests/node/go.mod (its source is part of the cache key), the pause binary
# from the minor's build/pause/linux/pause.c, and FROM scratch images of the control plane, pause and
# metainit (the Dockerfile's final stage, as scripts/image-check.sh builds it).

# node_step TMP: the node's binaries into TMP, static, as Kubernetes releases them
# (kube-controller-manager runs FROM scratch); the installer whose deadlock tests/node.rs
# breaks (tests/node/installer); the pause binary from the minor's own source.
node_step() {
  local src
  command -v gcc >/dev/null || die "gcc is not installed (it builds the pause binary)"
  say "downloading modules for Kubernetes $k8s_version" &&
    go mod download &&
    (cd "$installer_module" && go mod download) &&
    say "building kubelet, kube-controller-manager, kube-proxy and kubeadm (two cores: several minutes the first time)" &&
    go_build -ldflags "$(version_ldflags)" -o "$1/" \
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubeadm &&
    (cd "$installer_module" && go_build -o "$1/installer" ./installer) &&
    src=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes) &&
    gcc -Os -static -DVERSION="$k8s_version" -o "$1/pause" "$src/build/pause/linux/pause.c"
}

# One build of each minor kept.
build() {
  go_build_cached --module "$module" --out "$bin" \
    --binaries "kubelet kube-controller-manager kube-proxy kubeadm pause installer" \
    --prune "kubernetes-v$minor.*" --what "the kubelet" -- node_step
}

# image NAME ENTRYPOINT FILE... : a FROM scratch image of the files (paths relative to the
# current directory, each copied to the same path under /), imported into the node's
# containerd as localhost/node/NAME:test.
image() {
  local name=$1 entry=$2 ctr
  shift 2
  ctr=$("${B[@]}" from scratch)
  for f in "$@"; do
    "${B[@]}" copy "$ctr" "$f" "/$f" >/dev/null
  done
  "${B[@]}" config --entrypoint "[\"$entry\"]" "$ctr"
  import "$ctr" "localhost/node/$name:test"
}

# import CONTAINER REF: commits a buildah container and hands it to containerd.
import() {
  "${B[@]}" commit --quiet "$1" "$2" >/dev/null
  "${B[@]}" push --quiet "$2" "oci-archive:$dir/images/image.tar:$2" >/dev/null
  ctr_ images import "$dir/images/image.tar" >/dev/null
  rm -f "$dir/images/image.tar"
  "${B[@]}" rm "$1" >/dev/null
}

ctr_() { ctr --address "$dir/containerd/containerd.sock" --namespace k8s.io "$@"; }

# metainit's image: the Dockerfile's final stage over the static release binary and the
# host's CA bundle (scripts/lib/image.sh), as scripts/build-image.sh builds it.
metainit_image() {
  local context=$dir/images/metainit
  mkdir -p "$context"
  # The revision image-check's build was given, and none of the variables cargo sets for a
  # test or bench that boots this node (OUT_DIR, LD_LIBRARY_PATH, RUSTUP_TOOLCHAIN, CARGO_*:
  # seen to rebuild ring and every crate above it): then this build is cargo's no-op.
  local v unset=()
  for v in $(compgen -e); do
    case $v in
      CARGO_HOME | CARGO_TARGET_DIR | CARGO_INCREMENTAL) ;;
      CARGO* | OUT_DIR | LD_LIBRARY_PATH | RUSTUP_TOOLCHAIN* | RUST_RECURSION_COUNT | METAINIT_*) unset+=(-u "$v") ;;
    esac
  done
  env "${unset[@]}" METAINIT_REVISION="$(revision)" \
    bash "$here/scripts/build-static.sh" amd64 "$context/bin/metainit" >&2
  image_build amd64 "$context/bin/metainit" localhost/node/metainit:test "$context/stage" \
    "$(crate_version)" "$(revision)"
  "${B[@]}" push --quiet localhost/node/metainit:test \
    "oci-archive:$dir/images/image.tar:localhost/node/metainit:test" >/dev/null
  ctr_ images import "$dir/images/image.tar" >/dev/null
  rm -f "$dir/images/image.tar"
}

images() {
  local cp_bin libs start=$SECONDS
  cp_bin=$(bash "$here/scripts/control-plane.sh" bin --version "$minor")
  mkdir -p "$dir/images/root"
  B=(buildah --root "$dir/images/storage" --runroot "$dir/images/run" --storage-driver vfs)
  # The control plane's binaries are linked to glibc: the image carries what ldd names.
  libs=$(ldd "$cp_bin/kube-apiserver" | grep -oE '/[^ ]+\.so[^ ]*' | sort -u | sed 's|^/||')
  local stage=$dir/images/root
  install -D -m 0755 "$cp_bin/etcd" "$stage/usr/local/bin/etcd"
  install -D -m 0755 "$cp_bin/kube-apiserver" "$stage/usr/local/bin/kube-apiserver"
  install -D -m 0755 "$cp_bin/kube-scheduler" "$stage/usr/local/bin/kube-scheduler"
  install -D -m 0755 "$bin/kube-controller-manager" "$stage/usr/local/bin/kube-controller-manager"
  install -D -m 0755 "$bin/pause" "$stage/pause"
  install -D -m 0755 "$bin/installer" "$stage/installer"
  for l in $libs; do install -D -m 0755 "$(readlink -f "/$l")" "$stage/$l"; done
  (
    cd "$stage" || exit 1
    # shellcheck disable=SC2086 # one word a library
    image etcd /usr/local/bin/etcd usr/local/bin/etcd $libs
    # shellcheck disable=SC2086
    image kube-apiserver /usr/local/bin/kube-apiserver usr/local/bin/kube-apiserver $libs
    # shellcheck disable=SC2086
    image kube-scheduler /usr/local/bin/kube-scheduler usr/local/bin/kube-scheduler $libs
    image kube-controller-manager /usr/local/bin/kube-controller-manager usr/local/bin/kube-controller-manager
    image pause /pause pause
    image installer /installer installer
  )
  metainit_image
  "${B[@]}" rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$dir/images"
  say "images built and imported in $((SECONDS - start))s"
}
