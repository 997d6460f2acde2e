#!/usr/bin/env bash
# Checks the Helm chart charts/metainit, offline (nothing is sent to a cluster):
#   - `helm lint --strict`, with the default values and with each charts/metainit/ci/ file;
#   - each value renders what it says, and the schema and templates refuse a typo or a
#     contradiction in it: scripts/check-chart-values.py;
#   - values.schema.json refuses a typo (`--set replica=3`, `--set image.tga=x`) and a
#     value it does not allow (`--set logFormat=xml`): `helm template` must fail, naming it;
#   - `helm template` with the defaults and each ci/ file (all-on: every opt-in on and
#     every value changed; all-off; openshift), told that the Prometheus Operator's CRDs
#     exist (--api-versions): every object, the `helm test` hooks too, passes `kubernetes-validate --strict` against the
#     oldest schema the chart allows (its kubeVersion) and the newest one shipped; the
#     CRDs instead: the PrometheusRule's spec passes `promtool check rules` and the unit
#     tests of scripts/prometheus-rules.test.yaml, the ServiceMonitor selects the Service;
#   - each render holds together: the ClusterRoles' rules are manifests/rbac.yaml's and
#     rbac-webhooks.yaml's, bound to the chart's ServiceAccount, `--webhooks` comes with
#     its role and not without, every selector matches the pods, and the Deployment's
#     command line (a throwaway kubeconfig in place of the in-cluster one) passes the
#     binary's `--check-config`;
#   - no drift: release metainit in kube-system with the defaults renders the objects
#     `kubectl kustomize manifests/deployment` renders, the same once the chart's own labels
#     (helm.sh/chart, app.kubernetes.io/managed-by, app.kubernetes.io/version) are dropped;
#     the `helm test` hooks (templates/tests/, made only by `helm test`) are left out;
#     the PrometheusRule is manifests/prometheus-rules.yaml's, and the chart's copy of that
#     file (files/prometheus-rules.yaml) is byte for byte the same;
#   - docs/src/install/helm.md's table of the values is what scripts/chart-values.py makes.
#
#   bash scripts/check-chart.sh [BINARY]     (default target/debug/metainit, under $CARGO_TARGET_DIR if set)
#
# helm is the one tests/helm/go.mod pins (scripts/helm.sh builds it), or $METAINIT_HELM.
# Needs python3 with kubernetes-validate (which brings PyYAML), kubectl (for its built-in
# kustomize) and promtool.
set -euo pipefail

cd "$(dirname "$0")/.."
bin=${1:-${CARGO_TARGET_DIR:-target}/debug/metainit}
chart=charts/metainit

# shellcheck source=scripts/validate.sh
source scripts/validate.sh

# shellcheck source=scripts/lib/logging.sh
source scripts/lib/logging.sh
log_init check-chart --failed

command -v kubernetes-validate >/dev/null || die "kubernetes-validate not found (pip install kubernetes-validate)"
command -v kubectl >/dev/null || die "kubectl not found (it renders manifests/deployment: kubectl kustomize)"
command -v promtool >/dev/null || die "promtool not found (apt-get install prometheus)"
[[ -x $bin ]] || die "no executable at $bin (run cargo build first, or pass the binary's path)"
helm=${METAINIT_HELM:-$(bash scripts/helm.sh path)} || die "cannot build helm (scripts/helm.sh)"
[[ -x $helm ]] || die "METAINIT_HELM=$helm is not an executable"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# helm's own cache and settings: in the temporary directory, not the user's home.
export HELM_CACHE_HOME=$tmp/helm/cache HELM_CONFIG_HOME=$tmp/helm/config HELM_DATA_HOME=$tmp/helm/data
echo "helm $("$helm" version --short)"

for values in "" "$chart"/ci/*-values.yaml; do
    out=$("$helm" lint --strict "$chart" -n kube-system ${values:+-f "$values"} 2>&1) \
        || die "helm lint --strict ${values:-(defaults)}:"$'\n'"$out"
    echo "ok    helm lint --strict ${values:-(defaults)}"
done

# A typo, or a value the schema does not allow, must stop `helm template` (and so an
# install), saying which.
while IFS='|' read -r set want; do
    if out=$("$helm" template metainit "$chart" -n kube-system --set "$set" 2>&1); then
        die "helm template --set $set rendered: values.schema.json let it through"
    fi
    grep -qF "$want" <<<"$out" || die "helm template --set $set failed, but not saying \"$want\":"$'\n'"$out"
    echo "ok    helm template --set $set fails: $want"
done <<'EOF'
replica=3|additional properties 'replica' not allowed
image.tga=x|additional properties 'tga' not allowed
webhooks.enable=true|additional properties 'enable' not allowed
logFormat=xml|value must be one of 'text', 'json'
replicas=0|minimum: got 0, want 1
releaseGates={example.com/quota}|does not match pattern
EOF

# The oldest schema to validate against: the chart's kubeVersion, or the oldest shipped.
min=$(sed -n 's/^kubeVersion: *"*>= *\([0-9]*\.[0-9]*\).*/\1/p' "$chart/Chart.yaml")
[[ -n $min ]] || die "cannot read the least Kubernetes version from $chart/Chart.yaml's kubeVersion"
read -r oldest newest < <(python3 - "$min" <<'PY'
import sys
import kubernetes_validate.utils as u
from packaging.version import Version
v = sorted(set(u.all_versions()), key=Version)
print(max(v[0], sys.argv[1] + ".0", key=Version), v[-1])
PY
)
echo "schemas: $oldest (the chart's kubeVersion) and $newest (kubernetes-validate $(kubernetes-validate --version))"

python3 scripts/check-chart-values.py "$helm" "$chart" || die "a value does not render what it says (see above)"

# The ServiceMonitor and PrometheusRule render only where their CRDs exist: say they do.
crds=(--api-versions monitoring.coreos.com/v1/ServiceMonitor --api-versions monitoring.coreos.com/v1/PrometheusRule)
mkdir -p "$tmp/render"
"$helm" template metainit "$chart" -n kube-system "${crds[@]}" >"$tmp/render/defaults.yaml" 2>"$tmp/err" \
    || die "helm template (defaults): $(cat "$tmp/err")"
for values in "$chart"/ci/*-values.yaml; do
    name=$(basename "$values" -values.yaml)
    "$helm" template metainit "$chart" -n kube-system "${crds[@]}" -f "$values" >"$tmp/render/$name.yaml" 2>"$tmp/err" \
        || die "helm template -f $values: $(cat "$tmp/err")"
done
kubectl kustomize manifests/deployment >"$tmp/kustomize.yaml" 2>"$tmp/err" \
    || die "kubectl kustomize manifests/deployment: $(cat "$tmp/err")"
cmp -s "$chart/files/prometheus-rules.yaml" manifests/prometheus-rules.yaml \
    || die "$chart/files/prometheus-rules.yaml is not a copy of manifests/prometheus-rules.yaml: cp manifests/prometheus-rules.yaml $chart/files/"
echo "ok    $chart/files/prometheus-rules.yaml is manifests/prometheus-rules.yaml"

# Each render: split into one file per object (CRDs apart), check that the pieces hold
# together, and write the Deployment's command line out, NUL-separated, for --check-config.
python3 - "$tmp" manifests/rbac.yaml manifests/rbac-webhooks.yaml manifests/prometheus-rules.yaml \
    "$tmp/render"/*.yaml <<'PY' || die "see above"
import os, re, sys, yaml

tmp, rbac, rbac_webhooks, rules_path, renders = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
problems = []

def load(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]

def hook(d):
    return "helm.sh/hook" in (d["metadata"].get("annotations") or {})

def role_rules(path):
    roles = [d for d in load(path) if d["kind"] == "ClusterRole"]
    assert len(roles) == 1, f"{path}: expected one ClusterRole"
    return roles[0]["rules"]

base_rules, webhook_rules = role_rules(rbac), role_rules(rbac_webhooks)
alerts = [d for d in load(rules_path) if d["kind"] == "PrometheusRule"][0]
os.makedirs(f"{tmp}/docs", exist_ok=True)
listing = open(f"{tmp}/docs.list", "w")

for path in renders:
    name = os.path.basename(path)[:-len(".yaml")]
    every = load(path)
    def fail(msg):
        problems.append(f"helm template ({name}): {msg}")
    # The release's objects; the `helm test` hooks are validated, not counted among them.
    docs = [d for d in every if not hook(d)]
    def of(kind):
        return [d for d in docs if d["kind"] == kind]
    for i, d in enumerate(every):
        label = f"helm template ({name}): {d['kind']} {d['metadata']['name']}"
        if d["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        doc = f"{tmp}/docs/{name}-{i:02d}.yaml"
        yaml.safe_dump(d, open(doc, "w"))
        print(doc, label, file=listing)

    dep = of("Deployment")[0]
    ns = dep["metadata"]["namespace"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    spec = pod["spec"]
    sa = spec["serviceAccountName"]
    if [d["metadata"]["name"] for d in of("ServiceAccount")] not in ([sa], []):
        fail(f"the chart makes a ServiceAccount other than the pods' {sa}")
    roles = {d["metadata"]["name"]: d for d in of("ClusterRole")}
    for b in of("ClusterRoleBinding"):
        if b["subjects"] != [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]:
            fail(f"ClusterRoleBinding {b['metadata']['name']} is not for the ServiceAccount {sa}")
        if b["roleRef"]["name"] not in roles:
            fail(f"ClusterRoleBinding {b['metadata']['name']} refers to a ClusterRole the chart lacks")
    rule_sets = sorted((r["rules"] for r in roles.values()), key=len)
    c = spec["containers"][0]
    webhooks = "--webhooks" in c.get("args", [])
    want = [webhook_rules, base_rules] if webhooks else [base_rules]
    if sorted(want, key=len) != rule_sets:
        fail("the ClusterRoles' rules are not manifests/rbac.yaml's"
             + (" and rbac-webhooks.yaml's" if webhooks else " (alone: no --webhooks)"))
    if any(n in ("metainit", "metainit-webhooks") for n in roles):
        fail("a ClusterRole has a name of the static pod's (manifests/rbac*.yaml)")
    selectors = {"Deployment": dep["spec"]["selector"]["matchLabels"]}
    for d in of("PodDisruptionBudget"):
        selectors["PodDisruptionBudget"] = d["spec"]["selector"]["matchLabels"]
    for d in of("NetworkPolicy"):
        selectors["NetworkPolicy"] = d["spec"]["podSelector"]["matchLabels"]
    svc = of("Service")[0]
    selectors["Service"] = svc["spec"]["selector"]
    for t in spec.get("topologySpreadConstraints", []):
        selectors["topologySpreadConstraints"] = t["labelSelector"]["matchLabels"]
    for what, sel in selectors.items():
        if not sel or any(labels.get(k) != v for k, v in sel.items()):
            fail(f"the {what}'s selector {sel} does not match the pods' labels {labels}")
    if dep["spec"]["replicas"] < 2 and of("PodDisruptionBudget"):
        fail("a PodDisruptionBudget of minAvailable 1 for a single replica blocks every drain")
    for sm in of("ServiceMonitor"):
        sel = sm["spec"]["selector"]["matchLabels"]
        if any(svc["metadata"]["labels"].get(k) != v for k, v in sel.items()):
            fail(f"the ServiceMonitor's selector {sel} does not pick the Service")
        ports = {p["name"] for p in svc["spec"]["ports"]}
        if any(e["port"] not in ports for e in sm["spec"]["endpoints"]):
            fail(f"the ServiceMonitor scrapes a port the Service lacks ({ports})")
    for pr in of("PrometheusRule"):
        if pr["spec"] != alerts["spec"]:
            fail("the PrometheusRule's spec is not manifests/prometheus-rules.yaml's")
        os.makedirs(f"{tmp}/rules-{name}", exist_ok=True)
        yaml.safe_dump({"groups": pr["spec"]["groups"]},
                       open(f"{tmp}/rules-{name}/prometheus-rules.yaml", "w"), sort_keys=False)

    # The command line as the kubelet would run it: $(NODE_NAME) and $(POD_NAMESPACE)
    # given stand-ins.
    env = {"NODE_NAME": "check-chart-node", "POD_NAMESPACE": dep["metadata"].get("namespace", "default")}
    argv = [re.sub(r"\$\((NODE_NAME|POD_NAMESPACE)\)", lambda m: env[m.group(1)], str(a))
            for a in c.get("command", []) + c.get("args", [])]
    with open(f"{tmp}/argv-{name}", "w") as f:
        f.write("\0".join(argv) + "\0")

for p in problems:
    print(p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
echo "ok    every render holds together (RBAC, selectors, ServiceMonitor, PrometheusRule)"

failed=0
while read -r doc label; do
    for v in "$oldest" "$newest"; do
        validate_doc "$doc" "$label" "$v" || failed=1
    done
done <"$tmp/docs.list"
((failed == 0)) || die "the chart's objects do not validate"

for dir in "$tmp"/rules-*; do
    [[ -d $dir ]] || break
    label="helm template (${dir##*/rules-}): PrometheusRule spec"
    out=$(promtool check rules --lint-fatal "$dir/prometheus-rules.yaml" 2>&1) \
        || die "promtool check rules on $label:"$'\n'"$out"
    cp scripts/prometheus-rules.test.yaml "$dir/"
    out=$(cd "$dir" && promtool test rules prometheus-rules.test.yaml 2>&1) \
        || die "promtool test rules on $label:"$'\n'"$out"
    echo "ok    $label: promtool check rules and test rules"
done

# Each render's command line must pass --check-config. A Deployment has no kubeconfig (it
# uses the in-cluster one, absent here), so a throwaway one is added: http, so that no
# certificate is needed; --check-config never connects.
cat >"$tmp/kubeconfig" <<'EOF'
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "http://127.0.0.1:1"}
users:
- name: u
  user: {}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
EOF
mkdir -p "$tmp/home"
for file in "$tmp"/argv-*; do
    mapfile -d '' argv <"$file"
    cmd=("$bin" "${argv[@]:1}" --kubeconfig "$tmp/kubeconfig" --check-config)
    set +e
    out=$(env -i PATH="$PATH" HOME="$tmp/home" timeout 20 "${cmd[@]}" 2>&1)
    rc=$?
    set -e
    if ((rc != 0)) || ! grep -q "configuration OK" <<<"$out"; then
        die "--check-config on the Deployment's command line (${file##*/argv-}) exited $rc: ${argv[*]}"$'\n'"$out"
    fi
    echo "ok    --check-config (${file##*/argv-}): ${argv[*]:1}"
done

# The drift check: the defaults against the kustomize base, object by object.
python3 - "$tmp/render/defaults.yaml" "$tmp/kustomize.yaml" <<'PY' || die "the chart has drifted from manifests/deployment (see above)"
import difflib, sys, yaml

# Labels only helm adds; every other field must be the same.
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"}

def objects(path):
    found = {}
    for d in yaml.safe_load_all(open(path)):
        if not d:
            continue
        if "helm.sh/hook" in (d["metadata"].get("annotations") or {}):
            continue  # `helm test`'s, which the base has no use for
        labels = d["metadata"].get("labels", {})
        for k in HELM_LABELS & set(labels):
            del labels[k]
        m = d["metadata"]
        found[(d["kind"], m.get("namespace", ""), m["name"])] = d
    return found

chart, base = objects(sys.argv[1]), objects(sys.argv[2])
bad = False
for key in sorted(set(chart) | set(base)):
    kind, ns, name = key
    what = f"{kind} {ns}/{name}" if ns else f"{kind} {name}"
    if key not in chart:
        print(f"drift: {what} is in manifests/deployment, not in the chart", file=sys.stderr)
        bad = True
    elif key not in base:
        print(f"drift: {what} is in the chart, not in manifests/deployment", file=sys.stderr)
        bad = True
    elif chart[key] != base[key]:
        a = yaml.safe_dump(base[key], sort_keys=True).splitlines()
        b = yaml.safe_dump(chart[key], sort_keys=True).splitlines()
        print(f"drift: {what} differs (- kustomize, + chart):", file=sys.stderr)
        print("\n".join(difflib.unified_diff(a, b, "kustomize", "chart", lineterm="", n=2)),
              file=sys.stderr)
        bad = True
    else:
        print(f"ok    no drift: {what}")
sys.exit(1 if bad else 0)
PY

python3 scripts/chart-values.py --check || die "docs/src/install/helm.md's values table, or the chart's README, is stale"

# What `helm show readme` prints, from the chart and from its package: the chart's README
# (compared as command substitution leaves them: helm adds a newline at the end).
readme=$(cat "$chart/README.md")
[[ $("$helm" show readme "$chart") == "$readme" ]] \
    || die "helm show readme $chart does not print $chart/README.md"
"$helm" package "$chart" -d "$tmp/package" >/dev/null || die "helm package $chart failed"
[[ $("$helm" show readme "$tmp"/package/metainit-*.tgz) == "$readme" ]] \
    || die "the packaged chart's README is not $chart/README.md"
echo "ok    helm show readme: the chart's README, packaged too"

# The chart's appVersion is the crate's version, and the Artifact Hub images annotation
# names that tag.
python3 - "$chart" <<'PY' || die "Chart.yaml's appVersion or images annotation"
import re, sys, yaml
chart = yaml.safe_load(open(sys.argv[1] + "/Chart.yaml"))
crate = re.search(r'^version = "([^"]+)"', open("Cargo.toml").read(), re.M).group(1)
app = chart["appVersion"]
if app != crate:
    sys.exit(f"appVersion {app} is not the crate's version {crate} (Cargo.toml)")
images = yaml.safe_load(chart["annotations"]["artifacthub.io/images"])
tags = {i["image"].rsplit(":", 1)[-1] for i in images}
if tags != {app}:
    sys.exit(f"artifacthub.io/images names {sorted(tags)}, not the appVersion {app}")
print(f"ok    appVersion {app} is the crate's version; artifacthub.io/images names it")
PY
echo "check-chart: the chart is OK"
