// kube-double: an in-memory kube-apiserver double over real HTTP on loopback, imitating
// Kubernetes 1.13 (initializers) or 1.33 (scheduling gates), with faults on demand.
#![forbid(unsafe_code)]

pub mod answers;
pub mod api;
pub mod auth;
pub mod cli;
pub mod config;
pub mod control;
pub mod discovery;
pub mod legacy;
pub mod modern;
pub mod namespaces;
pub mod openapi;
pub mod patch;
pub mod pods;
pub mod resources;
pub mod routes;
pub mod selectors;
pub mod server;
pub mod services;
pub mod state;
pub mod status;
pub mod store;
pub mod strategy;
pub mod table;
pub mod validation;
pub mod watch;
pub mod webhookconfig;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::net::TcpListener;

pub use config::{
    Answer, Config, Faults, Generation, InitializerRule, NONRESOURCE, Rejection, Reply,
};
pub use state::RequestRecord;
pub use store::{Change, Snapshot};

use api::Subresource;
use auth::Caller;
use resources::ResourceInfo;
use server::Server;

/// A running double. Cheap to clone; every method takes `&self`.
#[derive(Clone)]
pub struct Double {
    server: Arc<Server>,
}

fn unknown_resource(resource: &str) -> Value {
    status::status(
        404,
        "NotFound",
        format!("the server could not find the requested resource ({resource})"),
        None,
    )
}

impl Double {
    /// Binds `config.listen` and serves (or, with `down_at_start`, refuses
    /// connections for that long first).
    pub async fn start(config: Config) -> std::io::Result<Double> {
        config
            .faults
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let down = config.down_at_start;
        let shared = Arc::new(state::Shared::new(config, addr));
        let server = Server::new(shared);
        match down {
            Some(d) if !d.is_zero() => {
                drop(listener);
                server.resume_after(d);
            }
            _ => server.serve(listener),
        }
        Ok(Double { server })
    }

    fn shared(&self) -> &state::Shared {
        &self.server.shared
    }

    fn resource(&self, resource: &str) -> Result<ResourceInfo, Value> {
        self.shared()
            .registry
            .by_key(resource)
            .cloned()
            .ok_or_else(|| unknown_resource(resource))
    }

    /// The resource, when `namespace` fits its scope: `""` for a cluster-scoped resource,
    /// a namespace for a namespaced one. A mismatch is the 404 a URL of the wrong shape
    /// gets from the real server ("the server could not find the requested resource").
    fn scoped(&self, resource: &str, namespace: &str) -> Result<ResourceInfo, Value> {
        let res = self.resource(resource)?;
        if res.namespaced == namespace.is_empty() {
            return Err(status::path_not_found().status);
        }
        Ok(res)
    }

    pub fn addr(&self) -> SocketAddr {
        self.shared().addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    pub fn generation(&self) -> Generation {
        self.shared().config.generation
    }

    /// A kubeconfig whose cluster, user and context are all named `kube-double`.
    pub fn kubeconfig_yaml(&self, token: Option<&str>) -> String {
        kubeconfig_yaml(&self.url(), token)
    }

    pub fn write_kubeconfig(&self, path: &Path, token: Option<&str>) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml(token))
    }

    /// Creates as a client with `includeUninitialized=true` would: admission runs (legacy:
    /// pending initializers are filled from the rules; the double calls no webhooks) but it
    /// never blocks.
    ///
    /// Every method that names an object takes its namespace; a cluster-scoped object
    /// (namespaces, webhook configurations) has namespace `""`. The wrong scope is a 404.
    pub fn create(&self, resource: &str, namespace: &str, object: Value) -> Result<Value, Value> {
        let res = self.scoped(resource, namespace)?;
        api::create(
            self.shared(),
            &res,
            namespace,
            object,
            &Caller::everything(),
        )
        .map(|o| (*o).clone())
        .map_err(|e| e.status)
    }

    /// `create`, with the object made as if at `created` (in the past, typically): its
    /// `metadata.creationTimestamp` and every other time the create stamps (a gated
    /// pod's `PodScheduled=False/SchedulingGated` `lastTransitionTime`) are `created`,
    /// in one write (one ADDED event, one resourceVersion). Admission and validation are
    /// `create`'s.
    ///
    /// This is what a server restored from a backup shows: objects older than the
    /// server's uptime. No client can produce it on a real server: on create the
    /// registry overwrites whatever `creationTimestamp` the body carries with the
    /// server's clock (`rest.FillObjectMetaSystemFields` in k8s.io/apiserver
    /// `pkg/registry/rest/meta.go`, called first thing by `Store.create` in
    /// `pkg/registry/generic/registry/store.go`, 1.33.4), and so does the double's HTTP
    /// POST.
    pub fn create_created_at(
        &self,
        resource: &str,
        namespace: &str,
        object: Value,
        created: SystemTime,
    ) -> Result<Value, Value> {
        let res = self.scoped(resource, namespace)?;
        api::create_at(
            self.shared(),
            &res,
            namespace,
            object,
            &Caller::everything(),
            Some(created),
        )
        .map(|o| (*o).clone())
        .map_err(|e| e.status)
    }

    /// PUT semantics, with the same validation and admission as the HTTP API.
    pub fn update(&self, resource: &str, namespace: &str, object: Value) -> Result<Value, Value> {
        let res = self.scoped(resource, namespace)?;
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        api::update(
            self.shared(),
            &res,
            namespace,
            &name,
            object,
            &Caller::everything(),
            Subresource::Main,
            None,
        )
        .map(|o| (*o).clone())
        .map_err(|e| e.status)
    }

    /// PATCH with a content type (`application/json-patch+json`, `…merge-patch+json`,
    /// `…strategic-merge-patch+json`), same rules as over HTTP.
    pub fn patch(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        content_type: &str,
        patch: &Value,
    ) -> Result<Value, Value> {
        let res = self.scoped(resource, namespace)?;
        let kind = patch::PatchType::from_content_type(content_type).map_err(|e| e.status)?;
        let body = serde_json::to_vec(patch).unwrap_or_default();
        api::patch(
            self.shared(),
            &res,
            namespace,
            name,
            kind,
            &body,
            &Caller::everything(),
            Subresource::Main,
            None,
        )
        .map(|o| (*o).clone())
        .map_err(|e| e.status)
    }

    /// DELETE, with the same preconditions-free rules as over HTTP.
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) -> Result<Value, Value> {
        let res = self.scoped(resource, namespace)?;
        api::delete(self.shared(), &res, namespace, name, None)
            .map(|o| (*o).clone())
            .map_err(|e| e.status)
    }

    /// Deletes the object at once (one DELETED event; finalizers and preconditions are
    /// not honoured) and creates it again from its stored state without the server-set
    /// fields (uid, resourceVersion, creationTimestamp, generation, status, deletion
    /// fields): a new uid, and admission as for any create (legacy: pending initializers
    /// filled from the rules again; modern pods: the scheduling gates they were created
    /// with, so gated again), as a controller replacing a pod from its template would.
    /// Returns the new object, or the Status (404 when there is no such object). The
    /// delete half is the server's own (no admission); the create half is a client's
    /// create.
    pub fn recreate(&self, resource: &str, namespace: &str, name: &str) -> Result<Value, Value> {
        let res = self.scoped(resource, namespace)?;
        api::recreate(self.shared(), &res, namespace, name)
            .map(|o| (*o).clone())
            .map_err(|e| e.status)
    }

    /// The objects of every resource and the store's revision, as an etcd snapshot
    /// (cheap: objects are shared, not copied).
    pub fn snapshot(&self) -> Snapshot {
        self.shared().store.lock().snapshot()
    }

    /// etcd restored from `snapshot` and the API server restarted: every object and the
    /// revision go back to the snapshot's (possibly backwards; `Snapshot::default()` is
    /// the empty start, revision 0), the change log is cleared (watches and continue
    /// tokens from before the snapshot's revision get 410), and every open connection is
    /// aborted while the listener keeps accepting. A watch from a revision above the
    /// restored one is accepted and stays silent until the revision passes it.
    pub fn restore(&self, snapshot: &Snapshot) {
        self.shared().store.lock().restore(snapshot);
        self.server.drop_connections();
    }

    /// Replaces the token table at run time (RBAC catching up); `None` disables
    /// authentication. Requests already authenticated keep their permissions; a token
    /// no longer in the table gets 401, a permission removed the RBAC-style 403.
    pub fn set_tokens(&self, tokens: Option<HashMap<String, Vec<String>>>) {
        self.shared().set_tokens(tokens);
    }

    /// The token table now in force.
    pub fn tokens(&self) -> Option<HashMap<String, Vec<String>>> {
        self.shared().tokens().map(|t| (*t).clone())
    }

    /// The object, initialized or not.
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let res = self.scoped(resource, namespace).ok()?;
        api::get(self.shared(), &res, namespace, name)
            .ok()
            .map(|o| (*o).clone())
    }

    /// Every object of a resource, initialized or not, in namespace/name order (for
    /// `namespaces`, the implicit ones too: see `namespaces.rs`).
    pub fn list(&self, resource: &str) -> Vec<Value> {
        let Ok(res) = self.resource(resource) else {
            return Vec::new();
        };
        let opts = api::ListOptions {
            include_uninitialized: true,
            ..api::ListOptions::default()
        };
        match api::list(self.shared(), &res, &opts) {
            Ok(mut list) => match list.get_mut("items").map(Value::take) {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            },
            Err(_) => Vec::new(),
        }
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared().requests()
    }

    /// How many requests with this method arrived, answered or not (a slow or hung one
    /// counts as soon as it is received).
    pub fn arrived(&self, method: &str) -> usize {
        self.shared().arrived(method)
    }

    pub fn clear_requests(&self) {
        self.shared().clear_requests();
    }

    pub fn history(&self, resource: &str, namespace: &str, name: &str) -> Vec<Change> {
        self.shared()
            .store
            .lock()
            .history(resource, namespace, name)
    }

    /// Every event, `v1` and `events.k8s.io/v1`.
    pub fn events(&self) -> Vec<Value> {
        let mut out = self.list("events");
        out.extend(self.list("events.events.k8s.io"));
        out
    }

    pub fn set_faults(&self, faults: Faults) {
        self.shared().set_faults(faults);
    }

    pub fn faults(&self) -> Faults {
        self.shared().faults()
    }

    /// Refuses connections from now on and aborts open ones; state is kept.
    pub fn stop(&self) {
        self.server.stop();
    }

    /// Listens again on the same address.
    pub async fn resume(&self) -> std::io::Result<()> {
        self.server.resume().await
    }

    /// Stops now and resumes after `d` in the background.
    pub fn down_for(&self, d: Duration) {
        self.server.down_for(d);
    }

    /// Every resource version older than now becomes too old (410 on watch and continue).
    pub fn expire_versions(&self) {
        self.shared().store.lock().expire();
    }

    /// The store's current global revision.
    pub fn resource_version(&self) -> u64 {
        self.shared().store.lock().revision()
    }

    pub async fn shutdown(self) {
        self.server.stop();
        tokio::task::yield_now().await;
    }
}

pub fn kubeconfig_yaml(url: &str, token: Option<&str>) -> String {
    let user = match token {
        Some(t) => format!("    token: \"{t}\"\n"),
        None => "    {}\n".to_string(),
    };
    let user = if token.is_some() {
        format!("  user:\n{user}")
    } else {
        "  user: {}\n".to_string()
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-double\n  cluster:\n    server: {url}\nusers:\n- name: kube-double\n{user}contexts:\n- name: kube-double\n  context:\n    cluster: kube-double\n    user: kube-double\n    namespace: default\ncurrent-context: kube-double\npreferences: {{}}\n"
    )
}
