#!/usr/bin/env python3
"""Each value of charts/metainit renders what its `# --` comment in values.yaml says, and
the schema and the templates refuse a typo or a contradiction in it. Offline: `helm
template` only. scripts/check-chart.sh runs it; its other checks (lint, validation of every
object, the drift check against manifests/deployment) are there.

    python3 scripts/check-chart-values.py HELM CHART

Renders: the defaults; ci/all-on-values.yaml, which sets every value to something other
than its default; ci/openshift-values.yaml; and one render per value whose other settings
would hide it (nameOverride alone, an existing ServiceAccount, ...). Each check names the
value it is about, and every failure is listed before the exit (1). Needs PyYAML.
"""
import subprocess
import sys

import yaml

HELM, CHART = sys.argv[1], sys.argv[2]
CRDS = ["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
        "--api-versions", "monitoring.coreos.com/v1/PrometheusRule"]
# The selectors of chart 0.1.0 and of the kustomize base, for release metainit: they
# must never change (a Deployment's spec.selector is immutable).
SELECTOR = {"app.kubernetes.io/name": "metainit", "app.kubernetes.io/instance": "metainit-deployment"}
HOOK_POLICY = "before-hook-creation,hook-succeeded"
problems = []


def check(ok, what):
    if not ok:
        problems.append(what)
    return ok


def helm(args, release="metainit"):
    return subprocess.run([HELM, "template", release, CHART, "-n", "kube-system", *CRDS, *args],
                          capture_output=True, text=True)


def render(args, release="metainit"):
    out = helm(args, release)
    if out.returncode != 0:
        sys.exit(f"check-chart-values: helm template {' '.join(args)} failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def hook(d):
    return (d["metadata"].get("annotations") or {}).get("helm.sh/hook")


def one(docs, kind, hooks=False):
    found = [d for d in docs if d["kind"] == kind and bool(hook(d)) == hooks]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_spec(docs):
    return one(docs, "Deployment")["spec"]["template"]["spec"]


def container(docs):
    return pod_spec(docs)["containers"][0]


def test_pod(docs):
    return one(docs, "Pod", hooks=True)


def check_defaults():
    """Today's render, the hooks of `helm test` added: instance is the release's name on
    every object, the selectors are 0.1.0's, the security contexts the hardened ones."""
    docs = render([])
    for d in docs:
        name = f"{d['kind']} {d['metadata']['name']}"
        check(d["metadata"]["labels"].get("app.kubernetes.io/instance") == "metainit",
              f"defaults: {name} lacks app.kubernetes.io/instance=metainit (the release)")
    dep = one(docs, "Deployment")
    check(dep["spec"]["selector"]["matchLabels"] == SELECTOR,
          f"defaults: the Deployment's selector changed from 0.1.0's: {dep['spec']['selector']}")
    spec = pod_spec(docs)
    check(spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}},
          f"podSecurityContext: default renders {spec['securityContext']}")
    check(container(docs)["securityContext"] == {
        "runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": True,
        "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]}},
        f"securityContext: default renders {container(docs)['securityContext']}")
    check(dep["spec"]["revisionHistoryLimit"] == 3, "revisionHistoryLimit: default not 3")
    check(spec["terminationGracePeriodSeconds"] == 30, "terminationGracePeriodSeconds: default not 30")
    check("imagePullSecrets" not in spec and "affinity" not in spec,
          "imagePullSecrets, affinity: rendered though empty")
    check(one(docs, "PodDisruptionBudget")["spec"].get("minAvailable") == 1,
          "podDisruptionBudget.minAvailable: default not 1")
    check_tests(docs, "defaults", "metainit", "metainit-metrics")


def check_tests(docs, render_name, fullname, service):
    """tests.enabled: the test pod runs `metainit probe` against the metrics Service, with
    RBAC and a NetworkPolicy made before it, all `helm test` hooks deleted once passed."""
    hooks = [d for d in docs if hook(d)]
    for d in hooks:
        ann = d["metadata"]["annotations"]
        check(ann["helm.sh/hook"] == "test" and ann.get("helm.sh/hook-delete-policy") == HOOK_POLICY,
              f"tests ({render_name}): {d['kind']} is not a test hook deleted by {HOOK_POLICY}")
    weight = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hooks}
    check(set(weight) >= {"ServiceAccount", "Role", "RoleBinding", "Pod"},
          f"tests ({render_name}): hooks {sorted(weight)}")
    check(all(w < weight["Pod"] for k, w in weight.items() if k != "Pod"),
          f"tests ({render_name}): the pod's hook-weight is not the highest: {weight}")
    pod = test_pod(docs)
    spec = pod["spec"]
    c = spec["containers"][0]
    ns = pod["metadata"]["namespace"]
    check(c["command"] + c["args"] == ["/metainit", "probe", service, "--port", "metrics",
                                        "--path", "/readyz", "-n", ns,
                                        "--node-name", "$(NODE_NAME)"],
          f"tests ({render_name}): the probe's command line is {c['command'] + c['args']}")
    check(spec["restartPolicy"] == "Never", f"tests ({render_name}): restartPolicy")
    check(c["image"] == container(docs)["image"], f"tests ({render_name}): not the pods' image")
    dep = pod_spec(docs)
    for key in ("securityContext", "tolerations", "nodeSelector", "priorityClassName",
                "hostNetwork", "imagePullSecrets"):
        check(spec.get(key) == dep.get(key), f"tests ({render_name}): the test pod's {key} differs "
              f"from the pods': {spec.get(key)} != {dep.get(key)}")
    check(c.get("securityContext") == container(docs).get("securityContext"),
          f"tests ({render_name}): the container's securityContext differs from the pods'")
    api = [e for e in container(docs).get("env", []) if e["name"].startswith("KUBERNETES_SERVICE")]
    node = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    check(c.get("env", []) == [node] + api,
          f"tests ({render_name}): env {c.get('env')} is not NODE_NAME (its node) and apiServer's {api}")
    sa = one(docs, "ServiceAccount", hooks=True)["metadata"]["name"]
    binding = one(docs, "RoleBinding", hooks=True)
    role = one(docs, "Role", hooks=True)
    check(spec["serviceAccountName"] == sa and binding["subjects"][0]["name"] == sa
          and binding["roleRef"]["name"] == role["metadata"]["name"],
          f"tests ({render_name}): the pod's ServiceAccount is not the one bound to the Role")
    rights = sorted((r["resources"][0], v) for r in role["rules"] for v in r["verbs"])
    check(rights == [("pods", "list"), ("services", "get")],
          f"tests ({render_name}): the Role grants {rights}, not get services and list pods")
    check(pod["metadata"]["name"].startswith(fullname), f"tests ({render_name}): pod name")
    check_test_policy(docs, render_name, pod)


def check_test_policy(docs, render_name, pod):
    """With networkPolicy.enabled, a test hook NetworkPolicy admits the test pod, from its
    own namespace, to the pods' admin port."""
    main = [d for d in docs if d["kind"] == "NetworkPolicy" and not hook(d)]
    extra = [d for d in docs if d["kind"] == "NetworkPolicy" and hook(d)]
    if not main:
        check(not extra, f"tests ({render_name}): a test NetworkPolicy without networkPolicy.enabled")
        return
    if not check(len(extra) == 1, f"tests ({render_name}): no NetworkPolicy admits the test pod"):
        return
    spec = extra[0]["spec"]
    peers = [p for rule in spec["ingress"] for p in rule["from"]]
    check(spec["podSelector"] == main[0]["spec"]["podSelector"],
          f"tests ({render_name}): the test NetworkPolicy is not for the pods")
    check(any("namespaceSelector" not in p and all(pod["metadata"]["labels"].get(k) == v
              for k, v in p["podSelector"]["matchLabels"].items()) for p in peers),
          f"tests ({render_name}): the test NetworkPolicy does not admit the test pod")
    check([p for rule in spec["ingress"] for p in rule["ports"]] == [{"port": "admin", "protocol": "TCP"}],
          f"tests ({render_name}): the test NetworkPolicy admits more than the admin port")


def check_all_on():
    """ci/all-on-values.yaml: each value where it says."""
    values = yaml.safe_load(open(f"{CHART}/ci/all-on-values.yaml"))
    docs = render(["-f", f"{CHART}/ci/all-on-values.yaml"])
    dep = one(docs, "Deployment")
    spec = pod_spec(docs)
    c = container(docs)
    image = values["image"]
    check(c["image"] == f"{image['repository']}@{image['digest']}",
          f"image.digest: the image is {c['image']}, not repository@digest")
    check(spec["imagePullSecrets"] == values["imagePullSecrets"], "imagePullSecrets: not in the pod spec")
    full = values["fullnameOverride"]
    for d in docs:
        what = f"{d['kind']} {d['metadata']['name']}"
        labels = d["metadata"]["labels"]
        check(d["metadata"]["name"].startswith(full), f"fullnameOverride: {what} not named after it")
        check(labels.get("app.kubernetes.io/instance") == "metainit", f"{what}: instance is not the release")
        check(labels.get("app.kubernetes.io/name") == values["nameOverride"], f"nameOverride: {what}'s name label")
        check(all(labels.get(k) == v for k, v in values["commonLabels"].items()),
              f"commonLabels: not on {what}")
    selectors = [dep["spec"]["selector"]["matchLabels"], one(docs, "Service")["spec"]["selector"],
                 one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]]
    check(all(s == {"app.kubernetes.io/name": values["nameOverride"],
                    "app.kubernetes.io/instance": f"{full}-deployment"} for s in selectors),
          f"selectors: {selectors} are not name and <fullname>-deployment alone")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    check(all(labels.get(k) == v for k, v in {**values["commonLabels"], **values["podLabels"]}.items()),
          f"commonLabels, podLabels: not on the pod template ({labels})")
    check(dep["spec"]["template"]["metadata"].get("annotations") == values["podAnnotations"],
          "podAnnotations: not on the pod template")
    sa = values["serviceAccount"]
    account = one(docs, "ServiceAccount")["metadata"]
    check(account["name"] == sa["name"] == spec["serviceAccountName"], "serviceAccount.name: not the pods'")
    check(account.get("annotations") == sa["annotations"], "serviceAccount.annotations: not on it")
    check(dep["spec"]["revisionHistoryLimit"] == values["revisionHistoryLimit"], "revisionHistoryLimit")
    check(spec["terminationGracePeriodSeconds"] == values["terminationGracePeriodSeconds"],
          "terminationGracePeriodSeconds")
    check(spec["securityContext"] == values["podSecurityContext"], "podSecurityContext: not the pod's")
    check(c["securityContext"] == values["securityContext"], "securityContext: not the container's")
    check(spec["affinity"] == values["affinity"], "affinity: not the pod's")
    spread = spec["topologySpreadConstraints"]
    want = [dict(t) for t in values["topologySpreadConstraints"]]
    want[0]["labelSelector"] = {"matchLabels": selectors[0]}
    check(spread == want, f"topologySpreadConstraints: {spread}, not {want} (the first given the selector)")
    pdb = one(docs, "PodDisruptionBudget")["spec"]
    check(pdb.get("maxUnavailable") == 1 and "minAvailable" not in pdb,
          f"podDisruptionBudget.maxUnavailable: the PDB says {pdb}")
    svc = one(docs, "Service")["spec"]
    check(svc["type"] == "NodePort" and svc["ports"][0]["port"] == values["service"]["port"],
          f"service.type, service.port: {svc['type']} {svc['ports']}")
    for kind in ("ServiceMonitor", "PrometheusRule"):
        check(len([d for d in docs if d["kind"] == kind]) == 1, f"{kind}: not rendered with its CRD")
    check_tests(docs, "all-on", full, f"{full}-metrics")


def check_one_by_one():
    """Values another value would hide in all-on: one render each."""
    docs = render(["--set", "nameOverride=mi"])
    check(one(docs, "Deployment")["metadata"]["name"] == "metainit-mi",
          "nameOverride: release metainit, name mi is not named metainit-mi")
    docs = render([], release="foo")
    check(one(docs, "Deployment")["metadata"]["name"] == "foo-metainit",
          "fullname: release foo is not named foo-metainit")
    docs = render(["--set", "serviceAccount.create=false,serviceAccount.name=existing"])
    check(not [d for d in docs if d["kind"] == "ServiceAccount" and not hook(d)],
          "serviceAccount.create=false: a ServiceAccount is made")
    check(pod_spec(docs)["serviceAccountName"] == "existing", "serviceAccount.name: not the pods'")
    for b in [d for d in docs if d["kind"] == "ClusterRoleBinding"]:
        check(b["subjects"] == [{"kind": "ServiceAccount", "name": "existing", "namespace": "kube-system"}],
              f"serviceAccount.name: ClusterRoleBinding binds {b['subjects']}")
    docs = render(["--set", "podDisruptionBudget.minAvailable=50%"])
    check(one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == "50%",
          "podDisruptionBudget.minAvailable: a percentage")
    docs = render(["--set", "tests.enabled=false"])
    check(not [d for d in docs if hook(d)], "tests.enabled=false: hooks rendered")
    docs = render(["--set", "networkPolicy.enabled=false"])
    check_tests(docs, "networkPolicy off", "metainit", "metainit-metrics")
    docs = render(["--set", "hostNetwork=true,apiServer.host=10.0.0.10,apiServer.port=6443"])
    check_tests(docs, "hostNetwork", "metainit", "metainit-metrics")
    check(test_pod(docs)["spec"].get("hostNetwork") is True, "hostNetwork: not on the test pod")
    docs = render(["-f", f"{CHART}/ci/openshift-values.yaml"])
    for d in [one(docs, "Deployment")["spec"]["template"], test_pod(docs)]:
        spec = d["spec"]
        fixed = {k: v for s in [spec.get("securityContext", {})] + [c.get("securityContext", {})
                 for c in spec["containers"]] for k, v in s.items()
                 if k in ("runAsUser", "runAsGroup", "fsGroup")}
        check(not fixed, f"ci/openshift-values.yaml: a pod fixes {fixed} (restricted-v2 refuses it)")
        check(all(c["securityContext"].get("runAsNonRoot") is True for c in spec["containers"]),
              "ci/openshift-values.yaml: runAsNonRoot not kept")


# A typo in each new value, and each contradiction: `helm template` must fail, saying so.
REFUSED = [
    (["--set", "image.digets=x"], "additional properties 'digets' not allowed"),
    (["--set", "image.digest=sha256:abc"], "does not match pattern"),
    (["--set", "imagePullSecrets[0].nmae=x"], "additional properties 'nmae' not allowed"),
    (["--set", "nameOverrid=x"], "additional properties 'nameOverrid' not allowed"),
    (["--set", "fullnameOverride=Bad_Name"], "does not match pattern"),
    (["--set", "serviceAccount.nmae=x"], "additional properties 'nmae' not allowed"),
    (["--set", "serviceAccount.annotation.x=y"], "additional properties 'annotation' not allowed"),
    (["--set", "serviceAccount.create=false"], "serviceAccount.create=false needs serviceAccount.name"),
    (["--set", "commonLabel.x=y"], "additional properties 'commonLabel' not allowed"),
    (["--set", "commonLabels.app\\.kubernetes\\.io/instance=x"], "commonLabels.app.kubernetes.io/instance: the chart sets this label"),
    (["--set", "podLabels.app\\.kubernetes\\.io/name=x"], "podLabels.app.kubernetes.io/name: the chart sets this label"),
    (["--set", "podAnnotation.x=y"], "additional properties 'podAnnotation' not allowed"),
    (["--set", "podSecurityContext.runAsUsr=1"], "additional properties 'runAsUsr' not allowed"),
    (["--set", "securityContext.runAsUsr=1"], "additional properties 'runAsUsr' not allowed"),
    (["--set", "securityContext.capabilities.dorp={ALL}"], "additional properties 'dorp' not allowed"),
    (["--set", "affinity.nodeAfinity.x=y"], "additional properties 'nodeAfinity' not allowed"),
    (["--set", "topologySpreadConstraints[0].maxSkw=1"], "additional properties 'maxSkw' not allowed"),
    (["--set", "terminationGracePeriodSecond=1"], "additional properties 'terminationGracePeriodSecond' not allowed"),
    (["--set", "revisionHistoryLimit=-1"], "minimum: got -1, want 0"),
    (["--set", "podDisruptionBudget.minAvailabel=1"], "additional properties 'minAvailabel' not allowed"),
    (["--set", "podDisruptionBudget.maxUnavailable=1"], "set minAvailable or maxUnavailable, not both"),
    (["--set", "service.prot=1"], "additional properties 'prot' not allowed"),
    (["--set", "service.type=External"], "value must be one of"),
    (["--set", "tests.enable=true"], "additional properties 'enable' not allowed"),
]
# Without --api-versions: the CRDs are absent, and the message says what to do.
ABSENT = [
    (["--set", "serviceMonitor.enabled=true"], "--api-versions monitoring.coreos.com/v1/ServiceMonitor"),
    (["--set", "prometheusRule.enabled=true"], "--api-versions monitoring.coreos.com/v1/PrometheusRule"),
]


def check_refusals():
    for args, want, crds in [(a, w, True) for a, w in REFUSED] + [(a, w, False) for a, w in ABSENT]:
        cmd = [HELM, "template", "metainit", CHART, "-n", "kube-system", *(CRDS if crds else []), *args]
        out = subprocess.run(cmd, capture_output=True, text=True)
        label = " ".join(args)
        if check(out.returncode != 0, f"helm template {label} rendered: nothing refused it"):
            if check(want in out.stderr, f"helm template {label} failed, but not saying \"{want}\":\n{out.stderr}"):
                print(f"ok    helm template {label} fails: {want}")


def main():
    check_defaults()
    check_all_on()
    check_one_by_one()
    check_refusals()
    for p in problems:
        print(f"check-chart-values: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print("ok    each value renders what values.yaml says (defaults, ci/all-on, ci/openshift, one by one)")


if __name__ == "__main__":
    main()
