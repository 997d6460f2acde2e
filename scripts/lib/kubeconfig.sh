# shellcheck shell=bash
# A kubeconfig with a client certificate's data inside, as kubeadm writes one: for the test
# control plane's users (scripts/control-plane/pki.sh), the node's (scripts/node/pki.sh) and
# the flags' check (scripts/check-manifests.sh).

# b64 FILE: FILE's bytes as one line of base64.
b64() { base64 -w0 <"$1"; }

# write_kubeconfig OUT CLUSTER SERVER CA CERT USER: OUT (mode 0600) naming the cluster CLUSTER
# at SERVER (https://HOST:PORT) signed by the CA certificate CA, for USER with CERT.crt and
# CERT.key, its context USER@CLUSTER current.
write_kubeconfig() {
  local out=$1 cluster=$2 server=$3 ca=$4 cert=$5 user=$6
  cat >"$out" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: $cluster
  cluster:
    server: $server
    certificate-authority-data: $(b64 "$ca")
users:
- name: $user
  user:
    client-certificate-data: $(b64 "$cert.crt")
    client-key-data: $(b64 "$cert.key")
contexts:
- name: $user@$cluster
  context: {cluster: $cluster, user: $user}
current-context: $user@$cluster
YAML
  chmod 0600 "$out"
}
