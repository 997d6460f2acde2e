#!/usr/bin/env python3
"""Checks the kube-double with the official Python `kubernetes` client.

Usage: check.py GENERATION KUBECONFIG [VERSION]
GENERATION is legacy or modern (the double), or real: the modern checks against a real
control plane (scripts/control-plane.sh) whose version is VERSION.

The legacy double must run with `--initializer podimage.example.com=pods`.
Prints one line per check and an `N passed, M failed` summary; exits 1 on any failure.
"""

import json
import sys
import urllib.parse
import threading
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

NS = "default"
passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


def status_of(fn):
    try:
        fn()
        return 200
    except ApiException as e:
        return e.status


def raw(api, method, path, query=None, body=None, content_type="application/json"):
    """A request with parameters the generated client does not know (includeUninitialized)."""
    url = api.api_client.configuration.host + path
    if query:
        url += "?" + urllib.parse.urlencode(query)
    headers = {"Content-Type": content_type, "Accept": "application/json"}
    api.api_client.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
    resp = api.api_client.call_api(method, url, header_params=headers, body=body)
    resp.read()
    return resp.status, json.loads(resp.data or b"null")


def watch_in_background(v1, seconds, **kw):
    events = []

    def run():
        w = watch.Watch()
        for ev in w.stream(v1.list_namespaced_pod, NS, timeout_seconds=seconds, **kw):
            events.append((ev["type"], ev["raw_object"]))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(1.0)
    return t, events


def modern(v1):
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "py-gated", "labels": {"from": "python"}},
        "spec": {"schedulingGates": [{"name": "example.com/a"}, {"name": "example.com/b"}],
                 "containers": [{"name": "c", "image": "busybox"}]},
    }
    created = v1.create_namespaced_pod(NS, pod)
    check("modern create", created.metadata.name == "py-gated")
    got = v1.read_namespaced_pod("py-gated", NS)
    conds = got.status.conditions or []
    check("modern gated condition",
          any(c.type == "PodScheduled" and c.status == "False" and c.reason == "SchedulingGated" for c in conds),
          repr(conds))
    check("modern gates kept", [g.name for g in got.spec.scheduling_gates] == ["example.com/a", "example.com/b"])
    lst = v1.list_namespaced_pod(NS, label_selector="from=python")
    check("modern list with selector", [p.metadata.name for p in lst.items] == ["py-gated"])
    check("modern list selector excludes", v1.list_namespaced_pod(NS, label_selector="from!=python").items == [])

    t, events = watch_in_background(v1, 3, resource_version=lst.metadata.resource_version)
    try:
        v1.patch_namespaced_pod("py-gated", NS, [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "late"}}])
        check("modern adding a gate is rejected", False)
    except ApiException as e:
        check("modern adding a gate is 422", e.status == 422 and "only deletion is allowed, but found new scheduling gate 'late'" in e.body, e.body)
    out = v1.patch_namespaced_pod("py-gated", NS, [{"op": "remove", "path": "/spec/schedulingGates"}])
    check("modern json patch clears gates", not out.spec.scheduling_gates)
    # The API server sets SchedulingGated only at create; an update keeps the old status
    # and no scheduler runs here, so the condition stays (PrepareForUpdate, strategy.go).
    check("modern condition kept without a scheduler",
          any(c.reason == "SchedulingGated" for c in (out.status.conditions or [])), repr(out.status.conditions))
    check("modern phase stays Pending", out.status.phase == "Pending")
    t.join(10)
    check("modern watch ended by timeout_seconds", not t.is_alive())
    types = [ty for ty, _ in events]
    check("modern watch saw MODIFIED", types == ["MODIFIED"], repr(types))
    code = status_of(lambda: v1.patch_namespaced_pod("py-gated", NS, [{"op": "remove", "path": "/spec/schedulingGates"}]))
    check("modern removing a missing path is 422", code == 422, str(code))
    v1.delete_namespaced_pod("py-gated", NS)
    check("modern delete", status_of(lambda: v1.read_namespaced_pod("py-gated", NS)) == 404)


def modern_webhooks(v1, real):
    """Namespaces, a webhook configuration, a Service and an EndpointSlice through the typed
    clients; on the real server, a pod refused while the webhook's service has no ready
    endpoint."""
    adm = client.AdmissionregistrationV1Api()
    if real:
        # A real server refuses pods in a namespace that does not exist, and without the
        # ServiceAccount default (no controller-manager runs to make it).
        v1.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "py-team"}})
        v1.create_namespaced_service_account("py-team", {"metadata": {"name": "default"}})
    ns = v1.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "py-gk"}})
    check("modern namespace name label", ns.metadata.labels == {"kubernetes.io/metadata.name": "py-gk"}, repr(ns.metadata.labels))
    v1.create_namespaced_service("py-gk", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "py-svc"},
        "spec": {"ports": [{"port": 443, "targetPort": 8443}]},
    })
    cfg = adm.create_validating_webhook_configuration({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "py-gk"},
        "webhooks": [{
            "name": "validate.py-gk.example.com",
            "clientConfig": {"service": {"namespace": "py-gk", "name": "py-svc", "path": "/validate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["py-team"]}]},
            "sideEffects": "None", "admissionReviewVersions": ["v1"],
        }],
    })
    hook = cfg.webhooks[0]
    check("modern webhook defaults", (hook.failure_policy, hook.match_policy, hook.timeout_seconds, hook.client_config.service.port)
          == ("Fail", "Equivalent", 10, 443), repr(hook))
    names = [c.metadata.name for c in adm.list_validating_webhook_configuration().items]
    check("modern list webhook configurations", names == ["py-gk"], repr(names))
    if real:
        # The admission the webhook does, and the 422 of a bad configuration, are the real
        # server's only: the double calls no webhook and validates no configuration
        # (docs/src/developers/double.md). No endpoint is made ready: the server would call it.
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "py-web"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        try:
            v1.create_namespaced_pod("py-team", pod)
            check("modern pod refused by the webhook", False)
        except ApiException as e:
            want = ('failed calling webhook "validate.py-gk.example.com": failed to call webhook: '
                    'Post "https://py-svc.py-gk.svc:443/validate?timeout=10s": no endpoints available for service "py-svc"')
            check("modern pod refused by the webhook", e.status == 500 and json.loads(e.body)["message"] == "Internal error occurred: " + want, e.body)
        code = status_of(lambda: adm.patch_validating_webhook_configuration("py-gk", [
            {"op": "add", "path": "/webhooks/0/namespaceSelector/matchExpressions/0/values", "value": []}]))
        check("modern invalid selector is 422", code == 422, str(code))
    adm.delete_validating_webhook_configuration("py-gk")
    check("modern webhook configuration deleted", adm.list_validating_webhook_configuration().items == [])


def legacy(v1):
    body = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "py-hidden", "labels": {"from": "python"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    status, obj = raw(v1, "POST", f"/api/v1/namespaces/{NS}/pods", [("includeUninitialized", "true")], body)
    check("legacy create with includeUninitialized returns at once, 202 while uninitialized", status == 202, str(status))
    check("legacy pending filled from the rules",
          obj["metadata"].get("initializers", {}).get("pending") == [{"name": "podimage.example.com"}], repr(obj["metadata"]))
    # A GET by name has no initialization filter (1.13 Store.Get): only LIST and WATCH hide it.
    status, got = raw(v1, "GET", f"/api/v1/namespaces/{NS}/pods/py-hidden")
    check("legacy GET by name returns it uninitialized",
          status == 200 and got["metadata"].get("initializers", {}).get("pending") == [{"name": "podimage.example.com"}],
          f"{status} {got}")
    check("legacy hidden from LIST", v1.list_namespaced_pod(NS, label_selector="from=python").items == [])
    status, lst = raw(v1, "GET", "/api/v1/pods", [("includeUninitialized", "true"), ("labelSelector", "from=python")])
    check("legacy visible with includeUninitialized", [i["metadata"]["name"] for i in lst["items"]] == ["py-hidden"])

    t, events = watch_in_background(v1, 3)
    status, _ = raw(v1, "PATCH", f"/api/v1/namespaces/{NS}/pods/py-hidden", body=[{"op": "remove", "path": "/metadata/initializers"}],
                    content_type="application/json-patch+json")
    check("legacy clearing patch", status == 200, str(status))
    t.join(10)
    check("legacy watch ended by timeout_seconds", not t.is_alive())
    check("legacy plain watcher sees ADDED at initialization",
          [(ty, o["metadata"]["name"]) for ty, o in events] == [("ADDED", "py-hidden")], repr([e[0] for e in events]))
    got = v1.read_namespaced_pod("py-hidden", NS)
    check("legacy visible after initialization", got.metadata.name == "py-hidden")
    out = v1.patch_namespaced_pod("py-hidden", NS, [{"op": "add", "path": "/metadata/labels/patched", "value": "yes"}])
    check("legacy json patch", out.metadata.labels.get("patched") == "yes")
    lst = v1.list_namespaced_pod(NS, label_selector="from=python,patched=yes")
    check("legacy list with selector", [p.metadata.name for p in lst.items] == ["py-hidden"])
    v1.delete_namespaced_pod("py-hidden", NS)
    check("legacy delete", status_of(lambda: v1.read_namespaced_pod("py-hidden", NS)) == 404)


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in ("legacy", "modern", "real"):
        print(__doc__)
        return 2
    generation, kubeconfig = sys.argv[1], sys.argv[2]
    config.load_kube_config(config_file=kubeconfig)
    v1 = client.CoreV1Api()
    version = client.VersionApi().get_code()
    want = {"legacy": "v1.13.12", "modern": "v1.33.4"}.get(generation) or sys.argv[3]
    check(f"{generation} version", version.git_version == want, version.git_version)
    try:
        (legacy if generation == "legacy" else modern)(v1)
        if generation != "legacy":
            modern_webhooks(v1, real=generation == "real")
    except Exception as e:  # a crash is a failure, reported like the others
        check(f"{generation} unexpected error", False, repr(e))
    print(f"python {generation}: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
