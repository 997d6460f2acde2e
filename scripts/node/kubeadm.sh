# shellcheck shell=bash
# shellcheck disable=SC2154 # $bin, $dir, $k8s_version, $pod_subnet, $service_subnet: scripts/node.sh's globals, set before it calls this
# What kubeadm leaves on a control-plane node that the static pod's install steps read
# (sourced by scripts/node.sh; docs/src/install/static-pod.md): the kubeadm binary, in the
# node's /usr/local/bin (its mount namespace's overlay: the machine's is not written), and the
# kubeadm-config ConfigMap its uploadconfig phase writes in kube-system, whose
# ClusterConfiguration `kubeadm kubeconfig user --config` reads (the CA under its
# certificatesDir, the server its controlPlaneEndpoint). That endpoint, 127.0.0.1:PORT, stands
# for an HA cluster's load balancer: another address than the advertise address the node's
# scheduler.conf names (scripts/node/pki.sh), which the page's block sets as the server.

kubeadm_install() {
  nsenter --mount="$(mntns_path)" install -m 0755 "$bin/kubeadm" /usr/local/bin/kubeadm
}

# The ClusterConfiguration as `kubeadm init` would have uploaded it for this node.
cluster_configuration() {
  cat <<EOC
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: kubernetes
kubernetesVersion: $k8s_version
controlPlaneEndpoint: 127.0.0.1:$(cat "$dir/apiserver.port")
certificatesDir: /etc/kubernetes/pki
networking:
  dnsDomain: cluster.local
  podSubnet: $pod_subnet
  serviceSubnet: $service_subnet
EOC
}

kubeadm_config() {
  admin -n kube-system create configmap kubeadm-config \
    --from-literal=ClusterConfiguration="$(cluster_configuration)" \
    --dry-run=client -o yaml | admin apply -f - >/dev/null
}
