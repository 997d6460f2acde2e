//! The Helm chart (charts/metainit) on the real control plane: `helm install`, a gated
//! labelled pod in kube-system cleared by metainit running as the chart's ServiceAccount,
//! `helm upgrade --set webhooks.enabled=true` adding the rights of --webhooks, and
//! `helm uninstall` leaving nothing behind; an install with values of its own
//! (fullnameOverride, an existing ServiceAccount, a pod annotation, a pull secret,
//! commonLabels); and chart 0.1.0's default install upgraded in place to this chart (the
//! Deployment's uid and immutable selector kept). helm is the one tests/helm/go.mod pins:
//! `METAINIT_HELM` (scripts/test.sh sets it), else built by `bash scripts/helm.sh path`.
//!
//!   cargo test --test cluster_helm     (starts its own control plane unless
//!                                       METAINIT_CONTROL_PLANE names a running one)
//!
//! There is no kubelet (nor controller-manager), so the Deployment's pods never run: as
//! the Deployment-form test of tests/cluster.rs does, the test mints a token for the
//! chart's ServiceAccount and runs the local metainit with it.

mod common;

use common::{
    control_plane::{ControlPlane, WAIT, patched_by, scheduled, until},
    gated_pod,
    helm::{Helm, can_i, chart, labelled, release_secrets},
    helm_binary, until_readyz,
};

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn the_chart_installs_clears_a_pod_in_kube_system_upgrades_to_webhooks_and_uninstalls_clean()
{
    // The shared control plane, where tests/cluster.rs may have left the kustomize base in
    // kube-system (ServiceAccount metainit, ClusterRole metainit-deployment, ...): a release
    // named metainit would fail on those ("exists and cannot be imported"). Every name the
    // chart makes comes from the release's, so a release of its own cannot collide, and
    // this shows that no name is fixed; an own control plane would cost a second etcd and
    // kube-apiserver on a two-core machine for nothing more.
    // helm first: without it, fail before starting a control plane.
    let bin = helm_binary();
    let cp = ControlPlane::shared();
    let helm = Helm::new(bin, cp);
    // It contains the chart's name: the objects are named after it, as release metainit's are.
    let release = format!("metainit-helm-{}", std::process::id());
    let cluster = format!("{release}-deployment");
    let instance = format!("app.kubernetes.io/instance={release}");
    let user = format!("system:serviceaccount:kube-system:{release}");
    let chart = chart();

    let out = helm.ok(&["install", &release, &chart, "-n", "kube-system"]);
    assert!(out.contains("STATUS: deployed"), "helm install: {out}");
    let want: Vec<String> = [
        format!("clusterrole.rbac.authorization.k8s.io/{cluster}"),
        format!("clusterrolebinding.rbac.authorization.k8s.io/{cluster}"),
        format!("deployment.apps/{release}"),
        format!("networkpolicy.networking.k8s.io/{release}-admin"),
        format!("poddisruptionbudget.policy/{release}"),
        format!("role.rbac.authorization.k8s.io/{cluster}-peers"),
        format!("rolebinding.rbac.authorization.k8s.io/{cluster}-peers"),
        format!("service/{release}-metrics"),
        format!("serviceaccount/{release}"),
    ]
    .into();
    assert_eq!(
        labelled(cp, &instance),
        want,
        "the objects helm install made"
    );
    // The Deployment's fields, by a JSONPath template.
    let deployment = |jsonpath: &str| {
        cp.kubectl_ok(&[
            "get",
            "deployment",
            &release,
            "-n",
            "kube-system",
            "-o",
            &format!("jsonpath={jsonpath}"),
        ])
    };
    let spec = deployment(
        "{.spec.replicas} {.spec.template.spec.priorityClassName} {.spec.template.spec.serviceAccountName}",
    );
    assert_eq!(spec, format!("2 system-cluster-critical {release}"));

    // The chart's ServiceAccount clears a labelled gated pod in kube-system. --only: this
    // test's gate alone, whatever else waits in kube-system.
    let gate = format!("example.com/helm-{}", std::process::id());
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = cp.service_account_kubeconfig(dir.path(), "kube-system", &release);
    let name = format!("helm-gated-{}", std::process::id());
    cp.create("kube-system", &gated_pod(&name, true, &[&gate]));
    let metainit = cp.metainit(
        &kubeconfig,
        &["--namespace", "kube-system", "--only", &gate],
    );
    let pods = cp.pods("kube-system").await;
    scheduled(&pods, &name).await;
    assert!(metainit.stop().await.success());
    assert_eq!(patched_by(cp, &user, "kube-system"), [name.as_str()]);
    pods.delete(&name, &Default::default())
        .await
        .expect("deleted");

    // Off by default: no right to patch webhook configurations, no --webhooks.
    let webhooks = "validatingwebhookconfigurations.admissionregistration.k8s.io";
    assert_eq!(can_i(cp, &user, "patch", webhooks), "no");
    let args_of = || deployment("{.spec.template.spec.containers[0].args}");
    assert!(!args_of().contains("--webhooks"), "{}", args_of());

    let out = helm.ok(&[
        "upgrade",
        &release,
        &chart,
        "-n",
        "kube-system",
        "--reuse-values",
        "--set",
        "webhooks.enabled=true",
    ]);
    assert!(out.contains("REVISION: 2"), "helm upgrade: {out}");
    // The authorizer reads RBAC from its informers: the new binding counts a moment later.
    until("the webhooks' rights granted", WAIT, || async {
        (can_i(cp, &user, "patch", webhooks) == "yes").then_some(())
    })
    .await;
    for (verb, resource) in [
        (
            "watch",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
        ),
        ("list", "endpointslices.discovery.k8s.io"),
    ] {
        assert_eq!(can_i(cp, &user, verb, resource), "yes", "{verb} {resource}");
    }
    let args: Vec<String> = serde_json::from_str(&args_of()).expect("args as JSON");
    assert!(args.iter().any(|a| a == "--webhooks"), "{args:?}");
    assert!(
        labelled(cp, &instance).contains(&format!(
            "clusterrolebinding.rbac.authorization.k8s.io/{cluster}-webhooks"
        )),
        "the webhooks' ClusterRoleBinding"
    );

    // Those rights are enough: metainit --webhooks as the ServiceAccount gets ready (its
    // watches of webhook configurations running) and logs no failure. No webhook
    // configuration is made, so the API server dials nothing.
    let metainit = cp.metainit(
        &kubeconfig,
        &["--namespace", "kube-system", "--only", &gate, "--webhooks"],
    );
    until_readyz(&metainit.admin_addr().await, WAIT).await;
    until(
        "the webhook configurations listed as the ServiceAccount",
        WAIT,
        || async {
            cp.audit(&user)
                .iter()
                .any(|e| {
                    e["verb"] == "list"
                        && e["objectRef"]["resource"] == "validatingwebhookconfigurations"
                        && e["responseStatus"]["code"] == 200
                })
                .then_some(())
        },
    )
    .await;
    assert_eq!(metainit.problems(), Vec::<String>::new());
    assert!(metainit.stop().await.success());

    // Uninstall: every object it made is gone, cluster-scoped ones too, and so are helm's
    // records of the release.
    let manifest = helm.ok(&["get", "manifest", &release, "-n", "kube-system"]);
    // kubectl reads the objects' kinds and names from the manifest and GETs each.
    let existing = || {
        let (ok, out) = cp.kubectl_in(
            &["get", "-f", "-", "--ignore-not-found", "-o", "name"],
            Some(&manifest),
        );
        assert!(ok, "kubectl get -f (helm's manifest): {out}");
        let mut names: Vec<String> = out.lines().map(str::to_string).collect();
        names.sort();
        names
    };
    let mut made = want.clone();
    made.extend([
        format!("clusterrole.rbac.authorization.k8s.io/{cluster}-webhooks"),
        format!("clusterrolebinding.rbac.authorization.k8s.io/{cluster}-webhooks"),
    ]);
    made.sort();
    assert_eq!(existing(), made, "what helm get manifest lists");
    assert_eq!(
        release_secrets(cp, &release).len(),
        2,
        "one Secret a revision"
    );
    let out = helm.ok(&["uninstall", &release, "-n", "kube-system"]);
    assert!(out.contains("uninstalled"), "helm uninstall: {out}");
    until("every object of the release gone", WAIT, || async {
        existing().is_empty().then_some(())
    })
    .await;
    assert_eq!(labelled(cp, &instance), Vec::<String>::new());
    assert_eq!(release_secrets(cp, &release), Vec::<String>::new());
    let (listed, out) = cp.kubectl(&["get", "serviceaccount", &release, "-n", "kube-system"]);
    assert!(!listed && out.contains("NotFound"), "{out}");
    if let Err(dials) = cp.check_network() {
        panic!("the API server dialled off loopback: {dials}");
    }
}

/// A field of Deployment `name` in kube-system, by a JSONPath template.
fn deployment_field(cp: &ControlPlane, name: &str, jsonpath: &str) -> String {
    cp.kubectl_ok(&[
        "get",
        "deployment",
        name,
        "-n",
        "kube-system",
        "-o",
        &format!("jsonpath={jsonpath}"),
    ])
}

/// The subjects of every ClusterRoleBinding the release made: `namespace/name` each.
fn bound(cp: &ControlPlane, instance: &str) -> Vec<String> {
    let out = cp.kubectl_ok(&[
        "get",
        "clusterrolebindings.rbac.authorization.k8s.io",
        "-l",
        instance,
        "-o",
        "jsonpath={range .items[*]}{.subjects[*].namespace}/{.subjects[*].name}{\"\\n\"}{end}",
    ]);
    out.lines().map(str::to_string).collect()
}

/// The values that tests/cluster_helm.rs's non-default install and upgrade set: an
/// existing ServiceAccount, a pod annotation, a pull secret, labels.
fn own_values(account: &str, team: &str) -> Vec<String> {
    [
        "serviceAccount.create=false".to_string(),
        format!("serviceAccount.name={account}"),
        "podAnnotations.example\\.com/mesh=disabled".to_string(),
        "imagePullSecrets[0].name=regcred".to_string(),
        format!("commonLabels.example\\.com/team={team}"),
        "podLabels.example\\.com/pod=yes".to_string(),
    ]
    .iter()
    .flat_map(|v| ["--set".to_string(), v.clone()])
    .collect()
}

/// What `own_values` asks for, on the Deployment `name`'s pod template.
fn has_own_values(cp: &ControlPlane, name: &str, account: &str, team: &str) {
    let spec = deployment_field(
        cp,
        name,
        "{.spec.template.spec.serviceAccountName} {.spec.template.spec.imagePullSecrets[*].name} \
         {.spec.template.metadata.annotations.example\\.com/mesh} \
         {.spec.template.metadata.labels.example\\.com/team} \
         {.spec.template.metadata.labels.example\\.com/pod}",
    );
    assert_eq!(spec, format!("{account} regcred disabled {team} yes"));
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn the_chart_runs_as_an_existing_service_account_under_its_own_names_and_labels() {
    let bin = helm_binary();
    let cp = ControlPlane::shared();
    let helm = Helm::new(bin, cp);
    let pid = std::process::id();
    // No "metainit" in it: without fullnameOverride the objects would be values-PID-metainit.
    let release = format!("values-{pid}");
    let full = format!("own-names-{pid}");
    let account = format!("existing-{pid}");
    let team = format!("team-{pid}");
    let instance = format!("app.kubernetes.io/instance={release}");
    cp.kubectl_ok(&["create", "serviceaccount", &account, "-n", "kube-system"]);

    let mut args: Vec<String> = ["install", &release, &chart(), "-n", "kube-system", "--set"]
        .map(str::to_string)
        .into();
    args.push(format!("fullnameOverride={full}"));
    args.extend(own_values(&account, &team));
    let out = helm.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.contains("STATUS: deployed"), "helm install: {out}");

    // Named after fullnameOverride; no ServiceAccount made; commonLabels on every object.
    let want: Vec<String> = [
        format!("clusterrole.rbac.authorization.k8s.io/{full}-deployment"),
        format!("clusterrolebinding.rbac.authorization.k8s.io/{full}-deployment"),
        format!("deployment.apps/{full}"),
        format!("networkpolicy.networking.k8s.io/{full}-admin"),
        format!("poddisruptionbudget.policy/{full}"),
        format!("role.rbac.authorization.k8s.io/{full}-deployment-peers"),
        format!("rolebinding.rbac.authorization.k8s.io/{full}-deployment-peers"),
        format!("service/{full}-metrics"),
    ]
    .into();
    assert_eq!(
        labelled(cp, &instance),
        want,
        "the objects helm install made"
    );
    assert_eq!(
        labelled(cp, &format!("example.com/team={team}")),
        want,
        "commonLabels"
    );
    assert_eq!(bound(cp, &instance), [format!("kube-system/{account}")]);
    has_own_values(cp, &full, &account, &team);
    assert_eq!(
        deployment_field(cp, &full, "{.spec.selector.matchLabels}"),
        format!(
            r#"{{"app.kubernetes.io/instance":"{full}-deployment","app.kubernetes.io/name":"metainit"}}"#
        ),
        "the selector: commonLabels and podLabels never in it"
    );
    let user = format!("system:serviceaccount:kube-system:{account}");
    until(
        "the existing ServiceAccount's rights granted",
        WAIT,
        || async { (can_i(cp, &user, "patch", "pods") == "yes").then_some(()) },
    )
    .await;

    // Uninstall leaves the account it did not make.
    helm.ok(&["uninstall", &release, "-n", "kube-system"]);
    until("every object of the release gone", WAIT, || async {
        labelled(cp, &instance).is_empty().then_some(())
    })
    .await;
    cp.kubectl_ok(&["get", "serviceaccount", &account, "-n", "kube-system"]);
    cp.kubectl_ok(&["delete", "serviceaccount", &account, "-n", "kube-system"]);
}

/// Chart 0.1.0, packaged from commit 54150fd (`helm package charts/metainit`): what an
/// upgrade starts from. Its Deployment's selector must survive every later version.
const CHART_0_1_0: &str = "tests/helm/metainit-0.1.0.tgz";

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn a_default_install_of_chart_0_1_0_upgrades_in_place_to_this_chart_with_other_values() {
    let bin = helm_binary();
    let cp = ControlPlane::shared();
    let helm = Helm::new(bin, cp);
    let pid = std::process::id();
    let release = format!("metainit-up-{pid}");
    let account = format!("existing-up-{pid}");
    let team = format!("team-up-{pid}");
    let old = format!("{}/{CHART_0_1_0}", env!("CARGO_MANIFEST_DIR"));
    let out = helm.ok(&["install", &release, &old, "-n", "kube-system"]);
    assert!(
        out.contains("STATUS: deployed"),
        "helm install 0.1.0: {out}"
    );
    let identity =
        || deployment_field(cp, &release, "{.metadata.uid} {.spec.selector.matchLabels}");
    let before = identity();
    assert!(
        before.contains(&format!("{release}-deployment")),
        "{before}"
    );

    // The new chart, with an existing ServiceAccount and the pods' extras: the same
    // Deployment, patched (a changed selector would fail here: it is immutable).
    cp.kubectl_ok(&["create", "serviceaccount", &account, "-n", "kube-system"]);
    let mut args: Vec<String> = ["upgrade", &release, &chart(), "-n", "kube-system"]
        .map(str::to_string)
        .into();
    args.extend(own_values(&account, &team));
    let out = helm.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.contains("REVISION: 2"), "helm upgrade: {out}");
    assert_eq!(identity(), before, "the Deployment's uid and selector");
    has_own_values(cp, &release, &account, &team);
    let instance = format!("app.kubernetes.io/instance={release}");
    assert!(
        labelled(cp, &instance).contains(&format!("deployment.apps/{release}")),
        "the Deployment's instance label is now the release's"
    );
    assert_eq!(bound(cp, &instance), [format!("kube-system/{account}")]);
    // The chart's own ServiceAccount, no longer wanted, is gone.
    let (found, out) = cp.kubectl(&["get", "serviceaccount", &release, "-n", "kube-system"]);
    assert!(!found && out.contains("NotFound"), "{out}");

    helm.ok(&["uninstall", &release, "-n", "kube-system"]);
    until("every object of the release gone", WAIT, || async {
        labelled(cp, &instance).is_empty().then_some(())
    })
    .await;
    cp.kubectl_ok(&["delete", "serviceaccount", &account, "-n", "kube-system"]);
}
