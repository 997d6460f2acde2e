# shellcheck shell=bash
# shellcheck disable=SC2154 # $dir, $here, $node_ip, $service_subnet: scripts/node.sh's globals, set before it calls this
# The static pods (sourced by scripts/node.sh): etcd, kube-apiserver, kube-controller-manager
# and kube-scheduler as kubeadm writes them (hostNetwork, system-node-critical, the host's
# configuration mounted at the same path), and metainit from manifests/metainit.yaml as
# shipped, with only its image changed.

# place NAME: moves DIR/staging/NAME.yaml into the manifests directory in one rename: the
# kubelet can read a file while it is half written.
place() {
  mv "$dir/staging/$1.yaml" "$dir/etc/kubernetes/manifests/$1.yaml"
}

# pod NAME PROBE-PORT PROBE-SCHEME ARGS...: a control-plane static pod whose
# container runs localhost/node/NAME:test with ARGS, mounting DIR (its configuration, its
# certificates, etcd's data and the API server's audit log) at the same path; PROBE-PORT 0
# for no probe.
pod() {
  local name=$1 port=$2 scheme=$3 args="" probe=""
  shift 3
  for a in "$@"; do args+="    - $a"$'\n'; done
  if [ "$port" != 0 ]; then
    probe="    livenessProbe:
      httpGet: {host: 127.0.0.1, path: /livez, port: $port, scheme: $scheme}
      initialDelaySeconds: 10
      periodSeconds: 10
      timeoutSeconds: 15
      failureThreshold: 8
"
  fi
  cat >"$dir/staging/$name.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  namespace: kube-system
  labels: {component: $name, tier: control-plane}
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: $name
    image: localhost/node/$name:test
    imagePullPolicy: Never
    command:
    - /usr/local/bin/$name
    args:
$args$probe    volumeMounts:
    - {name: node, mountPath: $dir/etc/kubernetes, readOnly: true}
    - {name: etcd-data, mountPath: $dir/etcd}
    - {name: log, mountPath: $dir/log}
  volumes:
  - name: node
    hostPath: {path: $dir/etc/kubernetes, type: Directory}
  - name: etcd-data
    hostPath: {path: $dir/etcd, type: DirectoryOrCreate}
  - name: log
    hostPath: {path: $dir/log, type: DirectoryOrCreate}
EOF
  place "$name"
}

# The API server's audit policy: who changed a pod, and when (the tests read who cleared a
# gate, and the boot benchmark when), nothing else.
audit_policy() {
  cat >"$dir/etc/kubernetes/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [patch, update]
  resources: [{group: "", resources: [pods]}]
- level: None
EOF
}

control_plane_pods() {
  local k=$dir/etc/kubernetes p=$dir/etc/kubernetes/pki
  audit_policy
  local etcd peer api_port
  etcd=http://127.0.0.1:$(cat "$dir/etcd.port")
  peer=http://127.0.0.1:$(cat "$dir/etcd-peer.port")
  api_port=$(cat "$dir/apiserver.port")
  pod etcd 0 HTTP --name=default "--data-dir=$dir/etcd/data" \
    "--listen-client-urls=$etcd" "--advertise-client-urls=$etcd" \
    "--listen-peer-urls=$peer" "--initial-advertise-peer-urls=$peer" \
    "--initial-cluster=default=$peer" --listen-metrics-urls= --unsafe-no-fsync --log-level=warn
  # Every address of the node's network namespace (loopback and the node's), the node's
  # advertised: the kubernetes Service's endpoint, where kube-proxy sends pods.
  pod kube-apiserver "$api_port" HTTPS "--etcd-servers=$etcd" \
    --bind-address=0.0.0.0 "--secure-port=$api_port" "--advertise-address=$node_ip" \
    "--tls-cert-file=$p/apiserver.crt" "--tls-private-key-file=$p/apiserver.key" \
    "--client-ca-file=$p/ca.crt" --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    "--kubelet-client-certificate=$p/apiserver-kubelet-client.crt" \
    "--kubelet-client-key=$p/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    "--service-cluster-ip-range=$service_subnet" "--service-account-issuer=https://127.0.0.1:$api_port" \
    "--service-account-key-file=$p/sa.pub" "--service-account-signing-key-file=$p/sa.key" \
    --enable-aggregator-routing=true --allow-privileged=true \
    "--audit-policy-file=$k/audit-policy.yaml" "--audit-log-path=$dir/log/audit.log"
  pod kube-controller-manager 0 HTTPS "--kubeconfig=$k/controller-manager.conf" \
    --leader-elect=false --secure-port=0 --use-service-account-credentials=true \
    --controllers=deployment,replicaset,job,garbagecollector,namespace,endpoint,endpointslice,serviceaccount,serviceaccount-token,root-ca-cert-publisher \
    "--service-account-private-key-file=$p/sa.key" "--root-ca-file=$p/ca.crt"
  pod kube-scheduler 0 HTTPS "--kubeconfig=$k/scheduler.conf" --leader-elect=false --secure-port=0
}

# metainit_pod: manifests/metainit.yaml with the image changed, and nothing else (checked: a
# diff of any other line fails). Its hostPath /etc/kubernetes/metainit.conf is the node's:
# the kubelet and containerd run where /etc/kubernetes is DIR's (scripts/node/mounts.sh).
metainit_pod() {
  local src=$here/manifests/metainit.yaml out=$dir/staging/metainit.yaml changed
  sed -e "s|^\(    image: \).*|\1localhost/node/metainit:test|" "$src" >"$out"
  changed=$(diff "$src" "$out" | grep -c '^>' || true)
  [ "$changed" = 1 ] || die "metainit's manifest: $changed lines changed, want the image only"
  cp "$out" "$dir/metainit.yaml"
  place metainit
}
