# shellcheck shell=bash
# shellcheck disable=SC2154 # $dir: scripts/node.sh's global, set before it calls this
# The node's mount namespace (sourced by scripts/node.sh), made here, in which containerd,
# the kubelet, kube-proxy (and so every container) and the docs' blocks run. In it,
# /etc/kubernetes is DIR/etc/kubernetes, as on a kubeadm node: the kubelet's staticPodPath is
# /etc/kubernetes/manifests, manifests/metainit.yaml's hostPath /etc/kubernetes/metainit.conf
# is the node's, and the static pod's steps in the docs run as a user types them. The
# machine's /etc is never written: in the namespace, /etc is an overlay of it with a tmpfs
# on top (the machine may have no /etc/kubernetes, or a real node's), the mounts under it
# bound again; /usr/local the same way (the plugin page's symlink and man pages go there);
# nothing mounted in the namespace shows outside it, and it all goes when the namespace does
# (down).

mntns_path() { echo "$dir/ns/mnt"; }

mounts_up() {
  mkdir -p "$dir/ns"
  # A persistent namespace is a file bound on a mount that does not propagate.
  mount --bind "$dir/ns" "$dir/ns"
  mount --make-private "$dir/ns"
  touch "$(mntns_path)"
  unshare --mount="$(mntns_path)" --propagation private \
    bash -c "set -e; $(declare -f private_etc); private_etc \"\$1\"" _ "$dir"
}

# private_etc DIR, in the new namespace: /etc an overlay with a tmpfs on top, the mounts
# under the machine's /etc (a container's resolv.conf, hosts) bound again, and
# DIR/etc/kubernetes bound at /etc/kubernetes; /usr/local an overlay on the same tmpfs.
private_etc() {
  local top=$1/ns/top m
  local -a under
  mapfile -t under < <(awk '$5 ~ "^/etc/" { print $5 }' /proc/self/mountinfo)
  mkdir -p "$top"
  mount -t tmpfs -o mode=0700 metainit-node "$top"
  mkdir -p "$top/upper" "$top/work" "$top/etc"
  mount --rbind /etc "$top/etc"
  mount -t overlay -o "lowerdir=/etc,upperdir=$top/upper,workdir=$top/work" metainit-node /etc
  for m in "${under[@]}"; do
    mount --bind "$top/etc${m#/etc}" "$m"
  done
  mkdir -p /etc/kubernetes
  mount --bind "$1/etc/kubernetes" /etc/kubernetes
  mkdir -p "$top/usr-local/upper" "$top/usr-local/work"
  mount -t overlay \
    -o "lowerdir=/usr/local,upperdir=$top/usr-local/upper,workdir=$top/usr-local/work" \
    metainit-node /usr/local
}
