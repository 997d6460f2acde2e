#!/usr/bin/env bash
# Checks manifests/*.yaml and the kustomize base manifests/deployment: every document
# has a header comment; the static pod's files and the base as `kubectl kustomize`
# renders it (offline) pass `kubernetes-validate --strict` against the oldest and the
# newest Kubernetes schema that the installed kubernetes-validate ships; the static pod's
# own command line, with a throwaway kubeconfig in place of the node's, must pass the
# binary's --check-config; the Deployment's pieces must agree with each other and with
# the static pod's (same ClusterRole rules as rbac.yaml, same securityContext, probes on
# the admin address, selectors that match its pods and no others, a NetworkPolicy (if
# kept) that admits only the admin port from labelled namespaces, no kubeconfig), and
# its command line must parse and fall through to the in-cluster configuration.
# A PrometheusRule (a CRD: kubernetes-validate has no schema for it) is checked with
# promtool instead: its spec:, written out as a plain rule file, must pass `promtool check
# rules`, and the unit tests in scripts/NAME.test.yaml (for manifests/NAME.yaml) must pass
# `promtool test rules`.
#
#   bash scripts/check-manifests.sh [BINARY]     (default target/debug/metainit, under $CARGO_TARGET_DIR if set)
#
# Needs python3 with kubernetes-validate (which brings PyYAML), openssl, kubectl
# (for its built-in kustomize; nothing is sent to a cluster) and promtool.
# A document that needs a newer Kubernetes than the oldest schema says so in its header:
#   # check-manifests: min-kubernetes=1.26
set -euo pipefail

cd "$(dirname "$0")/.."
bin=${1:-${CARGO_TARGET_DIR:-target}/debug/metainit}

# shellcheck source=scripts/validate.sh
source scripts/validate.sh

# shellcheck source=scripts/lib/logging.sh
source scripts/lib/logging.sh
# shellcheck source=scripts/lib/kubeconfig.sh
source scripts/lib/kubeconfig.sh
log_init check-manifests --failed

command -v kubernetes-validate >/dev/null || die "kubernetes-validate not found (pip install kubernetes-validate)"
command -v openssl >/dev/null || die "openssl not found (apt-get install openssl)"
command -v kubectl >/dev/null || die "kubectl not found (it renders manifests/deployment: kubectl kustomize)"
command -v promtool >/dev/null \
    || die "promtool not found (it checks manifests/prometheus-rules.yaml: apt-get install prometheus)"
python3 -c 'import yaml, kubernetes_validate' 2>/dev/null \
    || die "python3 cannot import yaml and kubernetes_validate (pip install kubernetes-validate)"
[[ -x $bin ]] || die "no executable at $bin (run cargo build first, or pass the binary's path)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

read -r oldest newest < <(python3 -c '
import kubernetes_validate.utils as u
v = u.all_versions()
print(v[0], v[-1])
')
echo "schemas shipped by kubernetes-validate $(kubernetes-validate --version): oldest $oldest, newest $newest"

# The kustomize base as it would be applied, rendered offline.
mkdir -p "$tmp/rendered"
rendered=$tmp/rendered/deployment.yaml
kubectl kustomize manifests/deployment >"$rendered" 2>"$tmp/kustomize.err" \
    || die "kubectl kustomize manifests/deployment: $(cat "$tmp/kustomize.err")"

# Split every file into its documents, one file each, and list "DOC_FILE MIN_VERSION
# LABEL"; a document without a leading comment (what it is for, what to edit) fails
# here. Each argument is "validate:PATH" (the static pod's files: header and schema),
# "header:PATH" (the base's sources: header only) or "rendered:PATH" (the base as
# rendered, which has no comments: schema only). A PrometheusRule among the static pod's
# files gets its header checked but no schema: its spec: goes to rules/NAME.yaml instead
# (the groups of all of them in manifests/NAME.yaml), for promtool below.
validated=(manifests/*.yaml)
headed=(manifests/deployment/*.yaml)
python3 - "$tmp/docs" \
    "${validated[@]/#/validate:}" \
    "${headed[@]/#/header:}" \
    "rendered:$rendered" >"$tmp/docs.list" <<'PY' || die "see above"
import os, re, sys, yaml
out, args = sys.argv[1], sys.argv[2:]
os.makedirs(os.path.join(out, "rules"))
bad = False
n = 0
rules = {}
for arg in args:
    how, path = arg.split(":", 1)
    with open(path) as f:
        text = f.read()
    shown = "kubectl kustomize manifests/deployment" if how == "rendered" else path
    found = 0
    for i, chunk in enumerate(re.split(r"^---[ \t]*$", text, flags=re.M)):
        lines = [l for l in chunk.splitlines() if l.strip()]
        if not any(not l.lstrip().startswith("#") for l in lines):
            continue  # only comments (or nothing): not a document
        found += 1
        label = f"{shown} (document {i + 1})"
        if how == "rendered":
            d = yaml.safe_load(chunk)
            label = f"{shown} ({d['kind']} {d['metadata']['name']})"
        if how != "rendered" and not lines[0].startswith("#"):
            print(f"{label}: no '#' header comment saying what it is for and what to edit",
                  file=sys.stderr)
            bad = True
        if how == "header":
            continue
        try:
            d = yaml.safe_load(chunk)
        except yaml.YAMLError as e:
            print(f"{label}: not YAML: {e}", file=sys.stderr)
            bad = True
            continue
        if not isinstance(d, dict):
            print(f"{label}: not a Kubernetes object", file=sys.stderr)
            bad = True
            continue
        if (d.get("apiVersion"), d.get("kind")) == ("monitoring.coreos.com/v1", "PrometheusRule"):
            spec = d.get("spec") or {}
            if set(spec) != {"groups"}:
                print(f"{label}: a PrometheusRule's spec: must hold groups: and nothing else "
                      f"(found {sorted(spec)})", file=sys.stderr)
                bad = True
            rules.setdefault(os.path.basename(path), []).extend(spec.get("groups") or [])
            continue
        m = re.search(r"^#\s*check-manifests:\s*min-kubernetes=(\d+\.\d+)\s*$", chunk, re.M)
        n += 1
        doc = os.path.join(out, f"{n:03d}.yaml")
        with open(doc, "w") as f:
            f.write(chunk.lstrip("\n"))
        print(doc, m.group(1) + ".0" if m else "-", label)
    if found == 0:
        print(f"no documents found in {shown}", file=sys.stderr)
        bad = True
for name, groups in rules.items():
    with open(os.path.join(out, "rules", name), "w") as f:
        yaml.safe_dump({"groups": groups}, f, sort_keys=False)
sys.exit(1 if bad else 0)
PY

# Prints the later of two versions (x.y or x.y.z).
later() {
    python3 -c '
import sys
from packaging.version import Version
print(max(sys.argv[1:], key=Version))
' "$@"
}

failed=0
while read -r doc min label; do
    versions=("$oldest" "$newest")
    if [[ $min != - ]]; then
        first=$(later "$oldest" "$min")
        [[ $(later "$first" "$newest") == "$newest" ]] \
            || die "$label needs Kubernetes $min, newer than the newest schema $newest"
        versions=("$first" "$newest")
    fi
    # PrometheusRules never get here (promtool checks them).
    for v in $(printf '%s\n' "${versions[@]}" | sort -u); do
        validate_doc "$doc" "$label" "$v" || failed=1
    done
done <"$tmp/docs.list"
((failed == 0)) || die "manifests do not validate"

# Alerting rules: promtool reads plain rule files (top-level groups:), so it checks the
# spec: of each PrometheusRule as written out above, and runs the unit tests beside it
# (their rule_files: name that file: prometheus-rules.yaml for
# manifests/prometheus-rules.yaml).
rules_dir=$tmp/docs/rules
for rules in "$rules_dir"/*.yaml; do
    [[ -e $rules ]] || break
    name=$(basename "$rules" .yaml)
    label="manifests/$name.yaml (PrometheusRule spec)"
    out=$(promtool check rules --lint-fatal "$rules" 2>&1) \
        || die "promtool check rules on $label:"$'\n'"${out//$rules/$label}"
    echo "ok    $label: promtool check rules: $(grep -o '[0-9]* rules found' <<<"$out")"
    tests=scripts/$name.test.yaml
    [[ -f $tests ]] || die "$label has no unit tests: write $tests (promtool test rules)"
    cp "$tests" "$rules_dir/"
    out=$(cd "$rules_dir" && promtool test rules "$name.test.yaml" 2>&1) \
        || die "promtool test rules $tests:"$'\n'"$out"
    echo "ok    $label: promtool test rules $tests"
done

# A kubeconfig shaped like the one `kubeadm kubeconfig user` writes: its own CA, a client
# certificate for CN=metainit, and a server that does not exist (--check-config never
# connects).
# X.509 v3 with kubeadm's extensions: rustls refuses v1 certificates.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=kubernetes \
    -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign \
    -keyout "$tmp/ca.key" -out "$tmp/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=metainit \
    -keyout "$tmp/client.key" -out "$tmp/client.csr" 2>/dev/null
printf '%s\n' basicConstraints=critical,CA:FALSE \
    keyUsage=critical,digitalSignature,keyEncipherment extendedKeyUsage=clientAuth \
    >"$tmp/client.ext"
openssl x509 -req -days 1 -in "$tmp/client.csr" -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" \
    -CAcreateserial -extfile "$tmp/client.ext" -out "$tmp/client.crt" 2>/dev/null
write_kubeconfig "$tmp/kubeconfig" kubernetes https://127.0.0.1:1 "$tmp/ca.crt" "$tmp/client" metainit

# The static pod's command line as the kubelet would run it: $(VAR) expanded from the
# container's env (downward-API values get a stand-in), the kubeconfig path swapped for
# the file above. Written NUL-separated: first the env as NAME=VALUE, then an empty
# field, then argv. Also checks that the pod's pieces agree with each other.
python3 - manifests/metainit.yaml "$tmp/kubeconfig" >"$tmp/argv" <<'PY' || die "see above"
import re, sys, yaml

path, kubeconfig = sys.argv[1], sys.argv[2]
problems = []
with open(path) as f:
    pods = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "Pod"]
if len(pods) != 1:
    sys.exit(f"{path}: expected one Pod (the static pod), found {len(pods)}")
pod = pods[0]
spec = pod["spec"]
if len(spec.get("containers", [])) != 1:
    sys.exit(f"{path}: expected one container")
c = spec["containers"][0]

stand_ins = {"spec.nodeName": "check-manifests-node"}
env = {}
for e in c.get("env", []):
    if "value" in e:
        env[e["name"]] = str(e["value"])
    elif "fieldRef" in e.get("valueFrom", {}):
        fp = e["valueFrom"]["fieldRef"]["fieldPath"]
        if fp not in stand_ins:
            problems.append(f"env {e['name']}: no stand-in for fieldRef {fp}; add one here")
        env[e["name"]] = stand_ins.get(fp, "")
    else:
        problems.append(f"env {e['name']}: only value and fieldRef are possible in a static pod")

def expand(s):
    # The kubelet's rules: $(NAME) for a defined NAME is replaced, $$ is a literal $,
    # anything else stays as written.
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, s)

argv = [expand(str(a)) for a in c.get("command", []) + c.get("args", [])]
if not argv:
    sys.exit(f"{path}: the container has no command (the check needs the full command line)")
for k, v in list(env.items()):
    env[k] = expand(v)

# Find and swap the kubeconfig path: --kubeconfig=PATH, --kubeconfig PATH or the env var.
kc_path = None
for i, a in enumerate(argv):
    if a.startswith("--kubeconfig="):
        kc_path, argv[i] = a.split("=", 1)[1], "--kubeconfig=" + kubeconfig
    elif a == "--kubeconfig" and i + 1 < len(argv):
        kc_path, argv[i + 1] = argv[i + 1], kubeconfig
if kc_path is None and "METAINIT_KUBECONFIG" in env:
    kc_path, env["METAINIT_KUBECONFIG"] = env["METAINIT_KUBECONFIG"], kubeconfig
if kc_path is None:
    problems.append("no --kubeconfig: a static pod has no in-cluster credentials")
else:
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = [m for m in c.get("volumeMounts", [])
              if kc_path == m["mountPath"] or kc_path.startswith(m["mountPath"].rstrip("/") + "/")]
    if not mounts:
        problems.append(f"--kubeconfig {kc_path} is not under any volumeMount")
    for m in mounts:
        if not m.get("readOnly"):
            problems.append(f"volumeMount {m['name']} for the kubeconfig is not readOnly")
        if "hostPath" not in volumes.get(m["name"], {}):
            problems.append(f"volume {m['name']} for the kubeconfig is not a hostPath")

# The probes must ask the address the admin server listens on.
admin = None
for i, a in enumerate(argv):
    if a.startswith("--admin-addr="):
        admin = a.split("=", 1)[1]
    elif a == "--admin-addr" and i + 1 < len(argv):
        admin = argv[i + 1]
admin = admin or env.get("METAINIT_ADMIN_ADDR") or "127.0.0.1:10275"
host, _, port = admin.rpartition(":")
for probe in ("livenessProbe", "startupProbe", "readinessProbe"):
    get = c.get(probe, {}).get("httpGet")
    if get is None:
        continue
    if str(get.get("port")) != port:
        problems.append(f"{probe} port {get.get('port')} is not the admin port {port}")
    # An admin server on every interface (0.0.0.0, [::]) answers a probe on any of them.
    if host.strip("[]") not in ("0.0.0.0", "::") and get.get("host", "") != host.strip("[]"):
        problems.append(f"{probe} host {get.get('host')!r} is not the admin host {host!r}")

if problems:
    for p in problems:
        print(f"{path}: {p}", file=sys.stderr)
    sys.exit(1)
fields = [f"{k}={v}" for k, v in env.items()] + [""] + argv
sys.stdout.write("\0".join(fields) + "\0")
PY

mapfile -d '' fields <"$tmp/argv"
pod_env=()
i=0
while [[ -n ${fields[i]} ]]; do
    pod_env+=("${fields[i]}")
    i=$((i + 1))
done
argv=("${fields[@]:i+1}")
# The image's binary is the one under test; keep the rest of the command line as written.
cmd=("$bin" "${argv[@]:1}" --check-config)

# A clean environment, as in the container: only PATH, a HOME without a ~/.kube, and the
# pod's env.
run_check() {
    env -i PATH="$PATH" HOME="$tmp/home" "${pod_env[@]}" timeout 20 "$@"
}
mkdir -p "$tmp/home"
echo "static pod command line: ${argv[*]}"
echo "running: ${cmd[*]}"
set +e
out=$(run_check "${cmd[@]}" 2>&1)
rc=$?
set -e
echo "$out"
((rc == 0)) || die "--check-config on the static pod's command line exited $rc (want 0)"
grep -q "configuration OK" <<<"$out" || die "--check-config did not print \"configuration OK\""
if grep -q panicked <<<"$out"; then die "--check-config panicked"; fi

# The same command line with the kubeconfig gone must be refused as bad input (exit 2),
# which proves the check reads the file the manifest names.
kc=$tmp/kubeconfig
missing=("${cmd[@]//"$kc"/"$tmp/missing.conf"}")
set +e
out=$(run_check "${missing[@]}" 2>&1)
rc=$?
set -e
((rc == 2)) || die "--check-config with a missing kubeconfig exited $rc (want 2): $out"
if grep -q panicked <<<"$out"; then die "--check-config panicked on a missing kubeconfig"; fi
echo "missing kubeconfig refused as expected: $out"

# The Deployment: its pieces must agree with each other and with the static pod's, and it
# must not need a kubeconfig. Written like the static pod's: env NAME=VALUE, an empty
# field, then argv, NUL-separated.
python3 - "$rendered" manifests/rbac.yaml manifests/metainit.yaml >"$tmp/deploy-argv" <<'PY' \
    || die "manifests/deployment does not hold together (see above)"
import re, sys, yaml

rendered, rbac_path, static_path = sys.argv[1:4]
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
problems = []

def only(kind):
    found = [d for d in docs if d["kind"] == kind]
    if len(found) != 1:
        sys.exit(f"manifests/deployment: expected one {kind}, found {len(found)}")
    return found[0]

dep, sa, role, binding = (only(k) for k in
                          ("Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"))
pdb, svc = only("PodDisruptionBudget"), only("Service")
ns = dep["metadata"].get("namespace")
if ns != "kube-system":
    problems.append(f"the Deployment is in namespace {ns!r}, want kube-system")
for d in docs:
    if d["kind"] not in ("ClusterRole", "ClusterRoleBinding") and d["metadata"].get("namespace") != ns:
        problems.append(f"{d['kind']} {d['metadata']['name']} is not in {ns}")

# The same rules as the static pod's ClusterRole: one rule set, two bindings.
static_role = [d for d in yaml.safe_load_all(open(rbac_path)) if d and d["kind"] == "ClusterRole"]
if len(static_role) != 1:
    sys.exit(f"{rbac_path}: expected one ClusterRole")
if role.get("rules") != static_role[0].get("rules"):
    problems.append("the ClusterRole's rules differ from manifests/rbac.yaml's: edit "
                    "manifests/deployment/clusterrole.yaml and rbac.yaml together")
if role["metadata"]["name"] == static_role[0]["metadata"]["name"]:
    problems.append("the ClusterRole has the static pod's name: removing one path would "
                    "remove the other's role")

# The ServiceAccount gets the ClusterRole, and the pods run as it with its token.
pod = dep["spec"]["template"]
spec = pod["spec"]
if spec.get("serviceAccountName") != sa["metadata"]["name"]:
    problems.append(f"serviceAccountName {spec.get('serviceAccountName')!r} is not the "
                    f"ServiceAccount {sa['metadata']['name']!r}")
if spec.get("automountServiceAccountToken") is False or sa.get("automountServiceAccountToken") is False:
    problems.append("automountServiceAccountToken is false: the pods would have no credentials")
ref = binding["roleRef"]
if (ref.get("kind"), ref.get("name")) != ("ClusterRole", role["metadata"]["name"]):
    problems.append(f"the ClusterRoleBinding refers to {ref}, not the ClusterRole "
                    f"{role['metadata']['name']}")
want_subject = {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": ns}
if binding.get("subjects") != [want_subject]:
    problems.append(f"the ClusterRoleBinding's subjects are {binding.get('subjects')}, "
                    f"want [{want_subject}]")

if len(spec.get("containers", [])) != 1:
    sys.exit("manifests/deployment: expected one container")
c = spec["containers"][0]
env = {}
for e in c.get("env", []):
    if "value" in e:
        env[e["name"]] = str(e["value"])
    elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
        env[e["name"]] = "check-manifests-node"
    elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
        env[e["name"]] = "kube-system"
    else:
        problems.append(f"env {e['name']}: no stand-in for it here; add one")

def expand(s):
    def sub(m):
        return "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, s)

argv = [expand(str(a)) for a in c.get("command", []) + c.get("args", [])]
if not argv:
    sys.exit("manifests/deployment: the container has no command")

# In-cluster credentials only: no kubeconfig by flag, variable or mounted file.
if any(a == "--kubeconfig" or a.startswith("--kubeconfig=") for a in argv):
    problems.append("--kubeconfig in the Deployment's args: it must use the in-cluster config")
for name in ("METAINIT_KUBECONFIG", "KUBECONFIG"):
    if name in env:
        problems.append(f"{name} in the Deployment's env: it must use the in-cluster config")
if any("hostPath" in v for v in spec.get("volumes", [])):
    problems.append("a hostPath volume in the Deployment: it must not depend on a node's files")

# Probes reach the admin server on the pod IP: it must listen there, on the port they ask.
admin = None
for i, a in enumerate(argv):
    if a.startswith("--admin-addr="):
        admin = a.split("=", 1)[1]
    elif a == "--admin-addr" and i + 1 < len(argv):
        admin = argv[i + 1]
admin = admin or env.get("METAINIT_ADMIN_ADDR") or "127.0.0.1:10275"
host, _, port = admin.rpartition(":")
if host.strip("[]") not in ("0.0.0.0", "::"):
    problems.append(f"--admin-addr {admin}: the kubelet's probes and the Service reach the pod "
                    "on its IP; listen on 0.0.0.0 (or [::])")
named = {p["name"]: str(p["containerPort"]) for p in c.get("ports", []) if "name" in p}
def port_of(p):
    return named.get(p, str(p))
for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
    get = c.get(probe, {}).get("httpGet")
    if get is None:
        problems.append(f"no {probe} with httpGet")
        continue
    if port_of(get.get("port")) != port:
        problems.append(f"{probe} port {get.get('port')} is not the admin port {port}")
    if get.get("path") != path:
        problems.append(f"{probe} path {get.get('path')!r}, want {path!r}")
    if "host" in get:
        problems.append(f"{probe} has a host: the kubelet should probe the pod IP")
svc_ports = svc["spec"].get("ports", [])
if not any(port_of(p.get("targetPort", p.get("port"))) == port for p in svc_ports):
    problems.append(f"the Service does not send to the admin port {port}")

# Every selector picks the Deployment's pods and not the static pod's mirror pods.
labels = pod["metadata"].get("labels", {})
static = [d for d in yaml.safe_load_all(open(static_path)) if d and d["kind"] == "Pod"][0]
static_labels = static["metadata"].get("labels", {})
def matches(selector, lbls):
    return all(lbls.get(k) == v for k, v in selector.items())
selectors = {
    "Deployment selector": dep["spec"]["selector"].get("matchLabels", {}),
    "PodDisruptionBudget selector": pdb["spec"]["selector"].get("matchLabels", {}),
    "Service selector": svc["spec"].get("selector", {}),
}
for i, t in enumerate(spec.get("topologySpreadConstraints", [])):
    selectors[f"topologySpreadConstraints[{i}]"] = t.get("labelSelector", {}).get("matchLabels", {})

# The NetworkPolicy, unless removed (networkpolicy.yaml says how): it selects the pods,
# and admits only the admin port, only from the namespaces a selector names.
policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
if len(policies) > 1:
    problems.append(f"{len(policies)} NetworkPolicies, want at most one")
for pol in policies:
    pspec = pol["spec"]
    selectors["NetworkPolicy podSelector"] = pspec.get("podSelector", {}).get("matchLabels", {})
    if "Ingress" not in pspec.get("policyTypes", []):
        problems.append("the NetworkPolicy does not restrict Ingress")
    for i, rule in enumerate(pspec.get("ingress", [])):
        peers = rule.get("from", [])
        if not peers or any(not p.get("namespaceSelector", {}).get("matchLabels") for p in peers):
            problems.append(f"NetworkPolicy ingress[{i}] admits more than labelled namespaces")
        ports = [port_of(p.get("port")) for p in rule.get("ports", [])]
        if ports != [port]:
            problems.append(f"NetworkPolicy ingress[{i}] admits ports {ports}, want the admin "
                            f"port {port} only")
if not spec.get("topologySpreadConstraints"):
    problems.append("no topologySpreadConstraints: the replicas may share a node")
for what, sel in selectors.items():
    if not sel:
        problems.append(f"{what} is empty")
    elif not matches(sel, labels):
        problems.append(f"{what} {sel} does not match the pod template's labels {labels}")
    elif matches(sel, static_labels):
        problems.append(f"{what} {sel} also matches the static pod's labels {static_labels}")

# A running replica clears a new one's gates: the pods carry the label key metainit uses.
key = None
for i, a in enumerate(argv):
    if a.startswith("--label-key="):
        key = a.split("=", 1)[1]
    elif a == "--label-key" and i + 1 < len(argv):
        key = argv[i + 1]
key = key or env.get("METAINIT_LABEL_KEY") or "k8s.opsani.io/initializer"
if key not in labels:
    problems.append(f"the pod template lacks the label key {key}: a replica could not "
                    "clear the gates of its own replacement")

# As hardened as the static pod.
sc = static["spec"]["containers"][0].get("securityContext")
if c.get("securityContext") != sc:
    problems.append(f"the container's securityContext {c.get('securityContext')} is not the "
                    f"static pod's {sc}")
if spec.get("securityContext", {}).get("seccompProfile") != static["spec"].get("securityContext", {}).get("seccompProfile"):
    problems.append("the pod's seccompProfile is not the static pod's")

if dep["spec"].get("replicas", 1) < 2:
    problems.append("fewer than 2 replicas")
if spec.get("priorityClassName") != "system-cluster-critical":
    problems.append(f"priorityClassName {spec.get('priorityClassName')!r}, want system-cluster-critical")

if problems:
    for p in problems:
        print(f"manifests/deployment: {p}", file=sys.stderr)
    sys.exit(1)
fields = [f"{k}={v}" for k, v in env.items()] + [""] + argv
sys.stdout.write("\0".join(fields) + "\0")
PY

# The Deployment's command line must parse, and with no kubeconfig anywhere it must go on
# to the in-cluster configuration (whose absence here is then the only complaint).
# scripts/image-check.sh runs the same command line in the image with a service
# account's files in place, where it must pass.
mapfile -d '' fields <"$tmp/deploy-argv"
pod_env=()
i=0
while [[ -n ${fields[i]} ]]; do
    pod_env+=("${fields[i]}")
    i=$((i + 1))
done
argv=("${fields[@]:i+1}")
cmd=("$bin" "${argv[@]:1}" --check-config)
echo "Deployment command line: ${argv[*]}"
set +e
out=$(run_check "${cmd[@]}" 2>&1)
rc=$?
set -e
if grep -q panicked <<<"$out"; then die "--check-config on the Deployment's command line panicked"; fi
if ((rc != 2)) || ! grep -q "no kubeconfig found and not running in a cluster" <<<"$out"; then
    die "the Deployment's command line, outside a cluster, exited $rc (want 2, asking for the in-cluster config): $out"
fi
echo "outside a cluster, it asks for the in-cluster configuration, as expected: $out"

echo "check-manifests: all manifests OK"
