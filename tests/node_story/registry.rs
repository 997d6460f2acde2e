//! The image a user makes (docs/src/install/image.md): `scripts/build-image.sh` builds it for
//! amd64 and arm64 and pushes both under one tag to a registry, Debian's `docker-registry`
//! started here in the node's network namespace on 127.0.0.1 (the machine pushes through
//! scripts/node/forward.py, the node's containerd pulls at the same address); the forms it
//! writes, set to the pushed digest, are what the static pod, the Deployment form and the
//! chart then run. The registry's access log shows containerd's pull of that digest.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use serde_json::Value;

pub use crate::docs::Pushed;
use crate::{
    common::node::{Node, WAIT, running_and_ready, until, without_cargo_env},
    docs,
};

/// Where build-image.sh pushes, under the registry's address.
const REPOSITORY: &str = "platform/metainit";

pub struct Registry {
    children: Vec<Child>,
    port: u16,
    log: PathBuf,
}

impl Pushed {
    pub fn digest(&self) -> &str {
        self.image.rsplit_once('@').expect("REPOSITORY@DIGEST").1
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().unwrap().port()
}

impl Registry {
    pub fn start(node: &Node) -> Registry {
        let port = free_port();
        let dir = node.path("METAINIT_NODE").join("registry");
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: info}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: '127.0.0.1:{port}'}}\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let log = dir.join("registry.log");
        let file = std::fs::File::create(&log).unwrap();
        let registry = node
            .in_netns("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("docker-registry starts (Debian's docker-registry; .ci/run installs it)");
        let forward = Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/node/forward.py"))
            .arg(node.get("NODE_NETNS"))
            .arg(port.to_string())
            .stdout(Stdio::null())
            .spawn()
            .expect("forward.py starts");
        let registry = Registry {
            children: vec![registry, forward],
            port,
            log,
        };
        until("the registry answering /v2/", WAIT, || {
            registry.get("/v2/", "application/json").map(|_| ())
        });
        registry
    }

    /// GET `path` of the registry, from the machine: the body, if it answered 200.
    fn get(&self, path: &str, accept: &str) -> Option<String> {
        let out = Command::new("curl")
            .args(["-sf", "--max-time", "5", "-H"])
            .arg(format!("Accept: {accept}"))
            .arg(format!("http://127.0.0.1:{}{path}", self.port))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `scripts/build-image.sh --insecure` (the registry speaks plain HTTP), as the image page
    /// says; the pushed list names linux/amd64 and linux/arm64.
    pub fn build_and_push(&self, node: &Node) -> Pushed {
        let out = node.path("METAINIT_NODE").join("image");
        let repository = format!("127.0.0.1:{}/{REPOSITORY}", self.port);
        let mut command = Command::new("bash");
        without_cargo_env(&mut command);
        let status = command
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-image.sh"))
            .args(["--insecure", "--out"])
            .arg(&out)
            .arg(&repository)
            .status()
            .expect("bash runs");
        assert!(status.success(), "scripts/build-image.sh {repository}");
        let image =
            std::fs::read_to_string(out.join("image")).expect("build-image.sh's image file");
        let pushed = Pushed {
            image: image.trim().to_string(),
            out,
        };
        assert!(
            pushed.image.starts_with(&format!("{repository}@sha256:")),
            "{}",
            pushed.image
        );
        let index = self
            .get(
                &format!("/v2/{REPOSITORY}/manifests/{}", pushed.digest()),
                "application/vnd.oci.image.index.v1+json",
            )
            .expect("the pushed index, by its digest");
        let index: Value = serde_json::from_str(&index).unwrap();
        let mut platforms: Vec<String> = index["manifests"]
            .as_array()
            .expect("an index")
            .iter()
            .map(|m| format!("{}/{}", m["platform"]["os"], m["platform"]["architecture"]))
            .collect();
        platforms.sort();
        assert_eq!(
            platforms,
            ["\"linux\"/\"amd64\"", "\"linux\"/\"arm64\""],
            "{index}"
        );
        println!(
            "build-image.sh pushed {} (linux/amd64, linux/arm64)",
            pushed.image
        );
        pushed
    }

    /// The registry's log shows containerd fetching the pushed list by its digest.
    pub fn pulled_by_containerd(&self, pushed: &Pushed) -> bool {
        let get = format!("GET /v2/{REPOSITORY}/manifests/{}", pushed.digest());
        std::fs::read_to_string(&self.log).is_ok_and(|log| {
            log.lines()
                .any(|l| l.contains(&get) && l.contains("containerd"))
        })
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The node's static pod as the docs install it, every block run (`docs::run`): the static
/// pod page's kubeconfig of the user metainit made by kubeadm (from the kubeadm-config
/// ConfigMap scripts/node/kubeadm.sh uploads, as `kubeadm init` does), in place of the one
/// scripts/node/pki.sh made with openssl; the image page's `sed` of the image line into
/// /etc/kubernetes/metainit.yaml, then the static pod
/// page's and the README's copy of build-image.sh's `metainit.yaml` there and move into
/// /etc/kubernetes/manifests (the node's, in its mount namespace), in place of the node's
/// own. The kubelet pulls the image from the registry, the mirror pod runs it with kubeadm's
/// kubeconfig, Ready, clearing a labelled pod as the user metainit. The node's own manifest
/// back after.
pub fn the_static_pod_from_it(node: &Node, registry: &Registry, pushed: &Pushed) {
    let live = node.path("NODE_MANIFESTS").join("metainit.yaml");
    let own = node.path("METAINIT_NODE").join("metainit.own.yaml");
    std::fs::copy(&live, &own).unwrap();
    kubeadms_kubeconfig(node);
    docs::run(node, "image-sed", Some(pushed));
    let written = node
        .path("METAINIT_NODE")
        .join("etc/kubernetes/metainit.yaml");
    let sed = std::fs::read_to_string(&written)
        .expect("the sed block wrote /etc/kubernetes/metainit.yaml");
    assert!(
        sed.contains("    image: registry.example.com/metainit@sha256:DIGEST\n"),
        "the sed block's file has no image line set:\n{sed}"
    );
    docs::run(node, "static-pod-place", Some(pushed));
    docs::run(node, "readme-static-pod", Some(pushed));
    assert!(
        !written.exists(),
        "/etc/kubernetes/metainit.yaml left beside the manifests"
    );
    let placed = std::fs::read_to_string(&live).unwrap();
    let built = std::fs::read_to_string(pushed.out.join("metainit.yaml")).unwrap();
    assert_eq!(placed, built, "the node's manifest is not build-image.sh's");
    crate::forms::runs_image(node, "component=metainit", pushed);
    assert!(
        registry.pulled_by_containerd(pushed),
        "the registry's log shows no pull of {} by containerd",
        pushed.image
    );
    crate::forms::clears_by(node, "by-static-pod-from-registry", "metainit");
    std::fs::rename(&own, &live).unwrap();
    until("the node's own metainit back", WAIT, || {
        node.metainit().filter(|p| {
            p["spec"]["containers"][0]["image"] == "localhost/node/metainit:test"
                && running_and_ready(p)
        })
    });
}

/// The static pod page's step 2: kubeadm writes a new /etc/kubernetes/metainit.conf, owned
/// by 65532 and mode 0600, its server the ClusterConfiguration's controlPlaneEndpoint.
fn kubeadms_kubeconfig(node: &Node) {
    use std::os::unix::fs::MetadataExt;
    let conf = node
        .path("METAINIT_NODE")
        .join("etc/kubernetes/metainit.conf");
    let before = std::fs::read_to_string(&conf).unwrap();
    docs::run(node, "static-pod-kubeconfig", None);
    let after = std::fs::read_to_string(&conf).unwrap();
    assert_ne!(before, after, "kubeadm wrote no new kubeconfig");
    assert!(
        after.contains("client-certificate-data") && after.contains("name: metainit@kubernetes"),
        "not kubeadm's kubeconfig of the user metainit:\n{after}"
    );
    assert!(
        after.contains(&format!("server: {}", node.get("NODE_SERVER"))),
        "{after}"
    );
    let meta = std::fs::metadata(&conf).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (65532, 65532, 0o600)
    );
}
