//! The Helm chart (charts/metainit) on the real control plane: `helm install`, a gated
//! labelled pod in kube-system cleared by metainit running as the chart's ServiceAccount,
//! `helm upgrade --set webhooks.enabled=true` adding the rights of --webhooks, and
//! `helm uninstall` leaving nothing behind. helm is the one tests/helm/go.mod pins:
//! `METAINIT_HELM` (scripts/test.sh sets it), else built by `bash scripts/helm.sh path`.
//!
//!   cargo test --test cluster_helm     (starts its own control plane unless
//!                                       METAINIT_CONTROL_PLANE names a running one)
//!
//! There is no kubelet (nor controller-manager), so the Deployment's pods never run: as
//! the Deployment-form test of tests/cluster.rs does, the test mints a token for the
//! chart's ServiceAccount and runs the local metainit with it.

mod common;

use std::{path::PathBuf, process::Command};

use common::{
    control_plane::{ControlPlane, WAIT, patched_by, scheduled, until},
    gated_pod, helm_binary, until_readyz,
};

/// helm as the control plane's admin, with its cache and settings in a directory of its own.
struct Helm {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    fn new(bin: PathBuf, cp: &ControlPlane) -> Helm {
        Helm {
            bin,
            kubeconfig: cp.admin.clone(),
            home: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// Runs helm, which must succeed; its standard output.
    fn ok(&self, args: &[&str]) -> String {
        let home = self.home.path();
        let out = Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env_remove("KUBECONFIG")
            .output()
            .expect("helm runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "helm {args:?} failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

/// What `kubectl auth can-i VERB RESOURCE -A` answers for `user`: "yes" or "no" (in
/// every namespace: the ClusterRoleBindings grant cluster-wide).
fn can_i(cp: &ControlPlane, user: &str, verb: &str, resource: &str) -> String {
    let (_, out) = cp.kubectl(&["auth", "can-i", verb, resource, "-A", "--as", user]);
    out.trim().to_string()
}

/// The kinds the chart makes here, as kubectl names them: all but the opt-ins ServiceMonitor
/// and PrometheusRule, whose CRDs (the Prometheus Operator's) this control plane lacks.
const NAMESPACED: &str = "serviceaccounts,deployments.apps,poddisruptionbudgets.policy,services,networkpolicies.networking.k8s.io";
const CLUSTER: &str =
    "clusterroles.rbac.authorization.k8s.io,clusterrolebindings.rbac.authorization.k8s.io";

/// `kind/name` of every object of those kinds that carries the release's instance label.
fn labelled(cp: &ControlPlane, instance: &str) -> Vec<String> {
    let selector = format!("app.kubernetes.io/instance={instance}");
    let mut found = Vec::new();
    for (kinds, scope) in [(NAMESPACED, "-n=kube-system"), (CLUSTER, "-A")] {
        let out = cp.kubectl_ok(&["get", kinds, scope, "-l", &selector, "-o", "name"]);
        found.extend(out.lines().map(str::to_string));
    }
    found.sort();
    found
}

/// The release's Secrets (helm keeps one per revision): their names.
fn release_secrets(cp: &ControlPlane, release: &str) -> Vec<String> {
    let selector = format!("owner=helm,name={release}");
    let out = cp.kubectl_ok(&[
        "get",
        "secrets",
        "-n",
        "kube-system",
        "-l",
        &selector,
        "-o",
        "name",
    ]);
    out.lines().map(str::to_string).collect()
}

#[tokio::test]
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
    let release = format!("helm-{}", std::process::id());
    let instance = format!("{release}-deployment");
    let user = format!("system:serviceaccount:kube-system:{release}");
    let chart = format!("{}/charts/metainit", env!("CARGO_MANIFEST_DIR"));
    let helm = Helm::new(bin, cp);

    let out = helm.ok(&["install", &release, &chart, "-n", "kube-system"]);
    assert!(out.contains("STATUS: deployed"), "helm install: {out}");
    let want: Vec<String> = [
        format!("clusterrole.rbac.authorization.k8s.io/{instance}"),
        format!("clusterrolebinding.rbac.authorization.k8s.io/{instance}"),
        format!("deployment.apps/{release}"),
        format!("networkpolicy.networking.k8s.io/{release}-admin"),
        format!("poddisruptionbudget.policy/{release}"),
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
            "clusterrolebinding.rbac.authorization.k8s.io/{instance}-webhooks"
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
        format!("clusterrole.rbac.authorization.k8s.io/{instance}-webhooks"),
        format!("clusterrolebinding.rbac.authorization.k8s.io/{instance}-webhooks"),
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
