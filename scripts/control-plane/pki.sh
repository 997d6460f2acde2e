# shellcheck shell=bash
# shellcheck disable=SC2154 # $dir: scripts/control-plane.sh's global, set before it calls this
# Certificates and kubeconfigs (sourced by scripts/control-plane.sh): a test CA made with
# openssl, the client certificates it signs, the ServiceAccount keys, and kubeconfigs with
# the certificates' data inside. The API servers' serving certificate is the first
# kube-apiserver's own (--cert-dir), which the others serve too (scripts/control-plane/processes.sh).

# certificate NAME SUBJECT: a client certificate signed by the test CA.
certificate() {
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/pki/$1.key" -out "$dir/pki/$1.csr" -subj "$2" 2>/dev/null
  openssl x509 -req -in "$dir/pki/$1.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" \
    -CAcreateserial -days 30 -out "$dir/pki/$1.crt" \
    -extfile <(printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n') 2>/dev/null
  rm -f "$dir/pki/$1.csr"
}

# The CA, the admin's, metainit's and kube-scheduler's certificates, the ServiceAccount keys.
make_pki() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -keyout "$dir/pki/ca.key" -out "$dir/pki/ca.crt" -subj "/CN=metainit-test-ca" 2>/dev/null
  certificate admin "/O=system:masters/CN=kubernetes-admin"
  certificate metainit "/CN=metainit"
  certificate scheduler "/CN=system:kube-scheduler"
  openssl genrsa -out "$dir/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub" 2>/dev/null
}

# Whether the first kube-apiserver has written its serving certificate and key (it does as
# it starts, into --cert-dir), both whole: the other instances serve them.
serving_cert_written() {
  openssl x509 -noout -in "$dir/serving/apiserver.crt" 2>/dev/null &&
    openssl pkey -noout -in "$dir/serving/apiserver.key" 2>/dev/null
}

# kubeconfig NAME USER [CERT [I]]: DIR/NAME.kubeconfig for USER with the certificate CERT's
# data inside (NAME's by default), as kubeadm writes it, for kube-apiserver I (the first by
# default).
kubeconfig() {
  write_kubeconfig "$dir/$1.kubeconfig" control-plane "https://127.0.0.1:$(apiserver_port "${4:-1}")" \
    "$dir/pki/serving-ca.crt" "$dir/pki/${3:-$1}" "$2"
}

# The kubeconfigs: the admin's, kube-scheduler's, and the user metainit's for each
# kube-apiserver (metainit.kubeconfig for the first, metainit-I.kubeconfig for the others).
write_kubeconfigs() {
  local i
  kubeconfig admin kubernetes-admin
  kubeconfig scheduler system:kube-scheduler
  for i in $(seq "$(apiservers)"); do
    kubeconfig "metainit$(suffix "$i")" metainit metainit "$i"
  done
}
