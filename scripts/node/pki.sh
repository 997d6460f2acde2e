# shellcheck shell=bash
# shellcheck disable=SC2154 # $dir, $node_name, $node_ip: scripts/node.sh's globals, set before it calls this
# The node's certificates and kubeconfigs (sourced by scripts/node.sh), as kubeadm lays them
# out: DIR/etc/kubernetes/pki for the certificates, DIR/etc/kubernetes/*.conf for the
# kubeconfigs, every one signed by one test CA.

pki=
# cert NAME SUBJECT USAGE [SAN]: a certificate signed by the CA (USAGE: clientAuth or
# serverAuth; SAN: the subjectAltName line of a serving certificate).
cert() {
  local ext
  ext=$(printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n' "$3")
  [ -z "${4:-}" ] || ext+=$'\n'"subjectAltName=$4"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$pki/$1.key" -out "$pki/$1.csr" -subj "$2" 2>/dev/null
  openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 30 -out "$pki/$1.crt" -extfile <(echo "$ext") 2>/dev/null
  rm -f "$pki/$1.csr"
}

certificates() {
  pki=$dir/etc/kubernetes/pki
  mkdir -p "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" -subj "/CN=kubernetes" 2>/dev/null
  # The node's address and the kubernetes Service's (kube-proxy sends pods there) too.
  cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,IP:$node_ip,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  cert kubelet "/CN=$node_name" serverAuth "IP:127.0.0.1,IP:$node_ip,DNS:$node_name"
  cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
  cert kubelet-client "/O=system:nodes/CN=system:node:$node_name" clientAuth
  cert controller-manager "/CN=system:kube-controller-manager" clientAuth
  cert scheduler "/CN=system:kube-scheduler" clientAuth
  # The user the default ClusterRoleBinding system:node-proxier names.
  cert kube-proxy "/CN=system:kube-proxy" clientAuth
  cert metainit "/CN=metainit" clientAuth
  # The serving certificate of the installer's webhook (tests/node/installer), on loopback.
  cert installer-webhook "/CN=installer-webhook" serverAuth "IP:127.0.0.1"
  # The guard's (tests/node/guard), at its Service's name.
  cert guard-webhook "/CN=guard.guard.svc" serverAuth "DNS:guard.guard.svc"
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
}

# conf FILE CERT USER [HOST]: a kubeconfig with the certificate's data inside, as kubeadm writes
# it, its server the API server at HOST (127.0.0.1 unless given).
conf() {
  write_kubeconfig "$dir/etc/kubernetes/$1.conf" kubernetes \
    "https://${4:-127.0.0.1}:$(cat "$dir/apiserver.port")" "$pki/ca.crt" "$pki/$2" "$3"
}

kubeconfigs() {
  conf admin admin kubernetes-admin
  conf kubelet kubelet-client "system:node:$node_name"
  # kubeadm points the node's own components at its own API server, at its advertise address
  # (cmd/kubeadm/app/phases/kubeconfig: localAPIEndpoint), the others at the
  # controlPlaneEndpoint; the static pod page takes metainit's server from scheduler.conf.
  conf controller-manager controller-manager system:kube-controller-manager "$node_ip"
  conf scheduler scheduler system:kube-scheduler "$node_ip"
  conf kube-proxy kube-proxy system:kube-proxy
  conf metainit metainit metainit
  # As README's install steps say: the image's non-root user reads it, nobody else.
  chown 65532:65532 "$dir/etc/kubernetes/metainit.conf"
}
