//! A scene of one test on the shared real control plane (tests/common/control_plane.rs),
//! which no other test sees: a label key of its own (metainit runs with `--label-key`),
//! namespaces of its own, cluster-wide names and gate names of its own, and a
//! ServiceAccount of its own that metainit runs as, so that the audit log's entries for
//! that user are this test's metainit's and no one else's ("nothing else written").
//! tests/common/webhooks.rs adds the webhook configurations; tests/cluster_gates.rs,
//! tests/cluster_orphaned.rs and tests/cluster_status.rs use it as it is.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::SystemTime,
};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};

use super::{
    Metainit,
    control_plane::{ControlPlane, WAIT},
    run_to_end_env,
};

/// What the scene's ServiceAccount may do.
pub enum Rights {
    /// The ClusterRoles of manifests/rbac.yaml and manifests/rbac-webhooks.yaml, as read
    /// from the files.
    Files,
    /// manifests/rbac.yaml's only.
    RbacOnly,
    /// A ClusterRole of the test's own with these rules.
    Rules(Value),
}

/// The documents of a shipped manifest (`manifests/rbac.yaml`).
fn manifest(file: &str) -> Vec<Value> {
    let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("manifest");
    serde_saphyr::from_multiple(&text).expect("yaml")
}

/// The ClusterRoles of the shipped manifests (their bindings name the user `metainit`,
/// which other tests rely on having only rbac.yaml's rights: not applied), once a process.
fn shipped_roles(cp: &ControlPlane) {
    static APPLIED: OnceLock<()> = OnceLock::new();
    APPLIED.get_or_init(|| {
        for file in ["manifests/rbac.yaml", "manifests/rbac-webhooks.yaml"] {
            for role in manifest(file).iter().filter(|d| d["kind"] == "ClusterRole") {
                let body = role.to_string();
                let (ok, out) = cp.kubectl_in(&["apply", "-f", "-"], Some(&body));
                assert!(ok, "{file}: {out}");
            }
        }
    });
}

pub struct Scene {
    pub cp: &'static ControlPlane,
    /// The label key of this scene's objects: `--label-key`.
    pub key: String,
    /// The ServiceAccount metainit runs as, as the audit log names it.
    pub user: String,
    /// A kubeconfig for it (a TokenRequest token).
    pub kubeconfig: PathBuf,
    /// `PID-N`: what makes the scene's cluster-wide names its own.
    pub id: String,
    /// Each namespace's name, by the short name the test gave it.
    pub namespaces: HashMap<String, String>,
    /// The first namespace, the ServiceAccount's.
    pub home: String,
    pub admin: kube::Client,
    _dir: tempfile::TempDir,
}

impl Scene {
    /// A scene with namespaces named after `namespaces` (the first holds the
    /// ServiceAccount) and a ServiceAccount with `rights`.
    pub async fn new(namespaces: &[&str], rights: Rights) -> Scene {
        static N: AtomicUsize = AtomicUsize::new(0);
        let cp = ControlPlane::shared().with_rbac();
        shipped_roles(cp);
        let id = format!(
            "{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let home = cp.namespace(namespaces.first().expect("a namespace"));
        let namespaces: HashMap<String, String> = namespaces
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    s.to_string(),
                    if i == 0 {
                        home.clone()
                    } else {
                        cp.namespace(s)
                    },
                )
            })
            .collect();
        cp.kubectl_ok(&["create", "serviceaccount", "metainit", "-n", &home]);
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = cp.service_account_kubeconfig(dir.path(), &home, "metainit");
        let scene = Scene {
            cp,
            key: format!("t{id}.example.com/metainit"),
            user: format!("system:serviceaccount:{home}:metainit"),
            kubeconfig,
            id,
            namespaces,
            home,
            admin: cp.client().await,
            _dir: dir,
        };
        match rights {
            Rights::Files => {
                scene.bind("metainit");
                scene.bind("metainit-webhooks");
            }
            Rights::RbacOnly => scene.bind("metainit"),
            Rights::Rules(rules) => {
                let role = format!("metainit-{}", scene.id);
                scene.apply(&json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": role}, "rules": rules,
                }));
                scene.bind(&role);
            }
        }
        scene
    }

    /// Grants the ClusterRole `role` to the scene's ServiceAccount.
    pub fn bind(&self, role: &str) {
        self.apply(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{role}-{}", self.id)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "metainit", "namespace": self.home}],
        }));
    }

    /// manifests/rbac.yaml's Role for the instances' Leases, in the scene's first
    /// namespace and granted to its ServiceAccount: the arguments that make the scene's
    /// instances share the work there, among themselves only.
    pub fn peers(&self) -> Vec<String> {
        let docs = manifest("manifests/rbac.yaml");
        let role = docs
            .iter()
            .find(|d| d["kind"] == "Role")
            .expect("rbac.yaml's Role");
        self.apply(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "metainit-peers", "namespace": self.home},
            "rules": role["rules"],
        }));
        self.apply(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "metainit-peers", "namespace": self.home},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "metainit-peers"},
            "subjects": [{"kind": "ServiceAccount", "name": "metainit", "namespace": self.home}],
        }));
        vec!["--peers-namespace".into(), self.home.clone()]
    }

    pub fn apply(&self, obj: &Value) {
        let (ok, out) = self
            .cp
            .kubectl_in(&["apply", "-f", "-"], Some(&obj.to_string()));
        assert!(ok, "applying {obj}: {out}");
    }

    /// The namespace named after `short`.
    pub fn ns(&self, short: &str) -> &str {
        self.namespaces
            .get(short)
            .unwrap_or_else(|| panic!("no namespace {short} in the scene"))
    }

    /// The cluster-wide name of the scene's object `short`.
    pub fn name(&self, short: &str) -> String {
        format!("{short}-{}", self.id)
    }

    /// The scene's own scheduling gate named after `gate` (`kueue.x-k8s.io/admission`
    /// becomes `kueue.x-k8s.io/admission-PID-N`), for a metainit that sees every
    /// namespace: no other test's pod has it.
    pub fn gate(&self, gate: &str) -> String {
        format!("{gate}-{}", self.id)
    }

    pub async fn send(&self, req: http::Request<Vec<u8>>) -> Result<Value, (u16, String)> {
        match self.admin.request::<Value>(req).await {
            Ok(v) => Ok(v),
            Err(kube::Error::Api(s)) => Err((s.code, s.message)),
            Err(e) => panic!("the API server: {e}"),
        }
    }

    /// The pods of namespace `ns` (short), as the admin reaches them.
    pub fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), self.ns(ns))
    }

    /// Creates the object `obj` (JSON, or a `List` of them) in `ns` (short) as the admin.
    pub fn add(&self, ns: &str, obj: &Value) {
        self.cp.create(self.ns(ns), obj);
    }

    /// A pod labelled with the scene's key, gated by `gates`: one this scene's metainit
    /// clears.
    pub fn labelled_pod(&self, name: &str, gates: &[&str]) -> Value {
        let mut p = super::gated_pod(name, false, gates);
        p["metadata"]["labels"][&self.key] = json!("true");
        p
    }

    /// A pod labelled with the scene's key, gated by `gate`.
    pub fn gated_pod(&self, name: &str, gate: &str) -> Value {
        self.labelled_pod(name, &[gate])
    }

    /// The gates of pod `name` in `ns` (short) on the server.
    pub async fn gates(&self, ns: &str, name: &str) -> Vec<String> {
        let pod = self
            .pods(ns)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{ns}/{name}: {e}"));
        super::control_plane::gate_names(&pod)
    }

    /// The server's creationTimestamp of pod `name` in `ns` (short).
    pub async fn created(&self, ns: &str, name: &str) -> SystemTime {
        let pod = self.pods(ns).get(name).await.expect("the pod");
        let at = pod.metadata.creation_timestamp.expect("creationTimestamp");
        SystemTime::from(at.0)
    }

    /// metainit as the scene's ServiceAccount, for the scene's label key, clearing pods in
    /// the scene's first namespace only, with `args`.
    pub fn metainit(&self, args: &[&str]) -> Metainit {
        let mut all = vec!["--label-key", &self.key, "--namespace", &self.home];
        all.extend_from_slice(args);
        self.cp.metainit(&self.kubeconfig, &all)
    }

    /// metainit as the scene's ServiceAccount and label key in every namespace (a test
    /// whose rules name only the scene's gates), with `args`.
    pub fn metainit_everywhere(&self, args: &[&str]) -> Metainit {
        let mut all = vec!["--label-key", &self.key];
        all.extend_from_slice(args);
        self.cp.metainit(&self.kubeconfig, &all)
    }

    /// `metainit ARGS` (a subcommand first, if any) run to its end as the scene's
    /// ServiceAccount and label key, in its first namespace: exit code, stdout, stderr.
    pub async fn run(&self, args: &[&str]) -> (i32, String, String) {
        self.run_env(args, &[]).await
    }

    /// As `run`, with environment variables.
    pub async fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        let home = self.home.clone();
        self.run_in(Some(&home), args, env).await
    }

    /// As `run`, with `--namespace NS` if `namespace` is given, in every namespace if not.
    pub async fn run_in(
        &self,
        namespace: Option<&str>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> (i32, String, String) {
        let kubeconfig = self.kubeconfig.display().to_string();
        let mut all: Vec<&str> = Vec::new();
        let rest = match args.first() {
            Some(&"status") => {
                all.push("status");
                &args[1..]
            }
            _ => args,
        };
        all.extend(["--kubeconfig", &kubeconfig, "--label-key", &self.key]);
        if let Some(ns) = namespace {
            all.extend(["--namespace", ns]);
        }
        all.extend_from_slice(rest);
        run_to_end_env(&all, env, WAIT).await
    }

    /// The fault proxy (tests/common/fuzz.rs) in front of the real server, with `plan`: from
    /// now on the scene's kubeconfig (metainit's, `run`'s) goes through it. It forwards
    /// everything until `faulty(true)`.
    pub async fn behind(&mut self, plan: super::fuzz::Plan) -> super::fuzz::Proxy {
        let proxy = super::fuzz::Proxy::start(&self.kubeconfig, plan).await;
        let proxied = self.kubeconfig.with_file_name("proxied.kubeconfig");
        proxy.write_kubeconfig(&self.kubeconfig, &proxied);
        self.kubeconfig = proxied;
        proxy
    }

    /// The fault proxy in front of the real server, faulty at once, answering `/version` as
    /// a server of `git_version` (`v1.20.0`) would and forwarding everything else: an older
    /// Kubernetes as metainit reads it.
    pub async fn behind_version(&mut self, git_version: &str) -> super::fuzz::Proxy {
        use super::fuzz::{Fault, Plan};
        let minor = git_version.split('.').nth(1).unwrap_or_default();
        let version = json!({
            "major": "1", "minor": minor, "gitVersion": git_version, "gitCommit": "",
            "gitTreeState": "clean", "buildDate": "2020-12-08T17:51:19Z", "goVersion": "go1.15.5",
            "compiler": "gc", "platform": "linux/amd64",
        });
        let answer = Fault::Status(200, None, Some(version.to_string()));
        let at = Fault::At("/version".into(), Box::new(answer));
        let proxy = self
            .behind(Plan::Fixed(metainit::client::RequestKind::Get, at))
            .await;
        proxy.faulty(true);
        proxy
    }

    /// The audit log's entries for the scene's ServiceAccount, once each request is
    /// answered.
    pub fn requests(&self) -> Vec<Value> {
        self.cp
            .audit(&self.user)
            .into_iter()
            .filter(|e| e["stage"] == "ResponseComplete")
            .collect()
    }

    /// The requests that wrote something (any verb but get, list and watch), Events
    /// aside, as `VERB URI CODE`.
    pub fn writes(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|e| !matches!(e["verb"].as_str(), Some("get" | "list" | "watch")))
            .filter(|e| e["objectRef"]["resource"] != "events")
            .map(|e| {
                format!(
                    "{} {} {}",
                    e["verb"].as_str().unwrap_or(""),
                    e["requestURI"].as_str().unwrap_or(""),
                    e["responseStatus"]["code"]
                )
            })
            .collect()
    }

    /// The requests that wrote anything at all, Events included.
    pub fn all_writes(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|e| !matches!(e["verb"].as_str(), Some("get" | "list" | "watch")))
            .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
            .collect()
    }

    /// The accepted PATCHes of pods: `NS/NAME`, when each was received, and its body (the
    /// audit policy keeps the bodies of pods' PATCHes), in order.
    pub fn pod_patches(&self) -> Vec<(String, SystemTime, Value)> {
        self.requests()
            .iter()
            .filter(|e| e["verb"] == "patch" && e["objectRef"]["resource"] == "pods")
            .filter(|e| e["objectRef"]["subresource"].is_null())
            .filter(|e| {
                e["responseStatus"]["code"]
                    .as_u64()
                    .is_some_and(|c| c < 300)
            })
            .map(|e| {
                let r = &e["objectRef"];
                (
                    format!(
                        "{}/{}",
                        r["namespace"].as_str().unwrap_or(""),
                        r["name"].as_str().unwrap_or("")
                    ),
                    received(e),
                    e["requestObject"].clone(),
                )
            })
            .collect()
    }

    /// The names (`NS/NAME`) of the pods PATCHed and accepted, in order.
    pub fn patched(&self) -> Vec<String> {
        self.pod_patches().into_iter().map(|(n, _, _)| n).collect()
    }

    /// The URIs of the scene's LISTs and watches of pods.
    pub fn pod_reads(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|e| matches!(e["verb"].as_str(), Some("list" | "watch")))
            .filter(|e| e["objectRef"]["resource"] == "pods")
            .filter_map(|e| e["requestURI"].as_str().map(str::to_string))
            .collect()
    }

    /// The Events on pod `name` of `ns` (short), as the admin lists them.
    pub async fn pod_events(&self, ns: &str, name: &str) -> Vec<Value> {
        let path = format!(
            "/api/v1/namespaces/{}/events?fieldSelector=involvedObject.name%3D{name}",
            self.ns(ns)
        );
        let list = self
            .send(http::Request::get(path).body(Vec::new()).expect("request"))
            .await
            .expect("events listed");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// Asserts that the API server dialled nothing off loopback.
    pub fn check_network(&self) {
        if let Err(dials) = self.cp.check_network() {
            panic!("the API server dialled off loopback: {dials}");
        }
    }
}

/// When the API server received the request of an audit entry.
pub fn received(entry: &Value) -> SystemTime {
    let at = entry["requestReceivedTimestamp"]
        .as_str()
        .expect("requestReceivedTimestamp");
    let at: k8s_openapi::jiff::Timestamp = at.parse().expect("a timestamp");
    SystemTime::from(at)
}
