//! A release as a user makes one (docs/src/install/image.md, "Making a release"):
//! `scripts/release.sh` builds the image for amd64 and arm64 and pushes both under one tag to
//! a registry, Debian's `docker-registry` started here in the node's network namespace on
//! 127.0.0.1 (the machine pushes through scripts/node/forward.py, the node's containerd pulls
//! at the same address), pushes the chart there (`helm push`), and writes the release's
//! files, set to the pushed digest; those files, served on the node's 127.0.0.1 as a forge
//! serves a release's assets, and the chart from the registry, are all the three forms are
//! installed from. The registry's access log shows containerd's pull of that digest.

use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use serde_json::Value;

use crate::common::{
    helm_binary,
    node::{Node, WAIT, until, without_cargo_env},
};
pub use crate::docs::Pushed;

/// Where release.sh pushes the image and the chart, under the registry's address.
const REPOSITORY: &str = "platform/metainit";
const CHARTS: &str = "platform/charts";

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

    /// `scripts/release.sh --insecure` (the registry speaks plain HTTP), as the image page
    /// says: the pushed list names linux/amd64 and linux/arm64, the chart is in the
    /// registry, every file is in SHA256SUMS; the files then served on the node.
    pub fn release(&mut self, node: &Node) -> Pushed {
        let out = node.path("METAINIT_NODE").join("release");
        let repository = format!("127.0.0.1:{}/{REPOSITORY}", self.port);
        let charts = format!("oci://127.0.0.1:{}/{CHARTS}", self.port);
        let mut command = Command::new("bash");
        without_cargo_env(&mut command);
        let status = command
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/release.sh"))
            .args([
                "--insecure",
                "--image",
                &repository,
                "--charts",
                &charts,
                "--out",
            ])
            .arg(&out)
            .arg(format!("v{}", env!("CARGO_PKG_VERSION")))
            .env("PATH", helm_on_path())
            .status()
            .expect("bash runs");
        assert!(status.success(), "scripts/release.sh to {repository}");
        let pushed = Pushed {
            image: released_image(&out),
            release_url: self.serve(node, &out),
            out,
            charts,
        };
        assert!(
            pushed.image.starts_with(&format!("{repository}@sha256:")),
            "{}",
            pushed.image
        );
        self.holds_both_platforms(&pushed);
        self.holds_the_chart();
        checksums_hold(&pushed.out);
        println!(
            "release.sh pushed {} (linux/amd64, linux/arm64) and the chart; files: {:?}",
            pushed.image,
            release_files(&pushed.out)
        );
        pushed
    }

    /// The pushed index names both platforms.
    fn holds_both_platforms(&self, pushed: &Pushed) {
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
    }

    /// The registry lists the chart's version (Chart.yaml's) under CHARTS/metainit.
    fn holds_the_chart(&self) {
        let tags = self
            .get(
                &format!("/v2/{CHARTS}/metainit/tags/list"),
                "application/json",
            )
            .expect("the chart's tags");
        let version = chart_version();
        assert!(tags.contains(&format!("\"{version}\"")), "{tags}");
    }

    /// The release's files, served over HTTP on the node's 127.0.0.1 (as a forge serves a
    /// release's assets): their address.
    fn serve(&mut self, node: &Node, dir: &Path) -> String {
        let port = free_port();
        let server = node
            .in_netns("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
            ])
            .arg("--directory")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m http.server starts");
        self.children.push(server);
        let url = format!("http://127.0.0.1:{port}");
        until("the release's files served on the node", WAIT, || {
            node.in_netns("curl")
                .args(["-sf", "--max-time", "5", "-o", "/dev/null"])
                .arg(format!("{url}/SHA256SUMS"))
                .status()
                .ok()
                .filter(|s| s.success())
        });
        url
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

/// The image the release's static pod runs: REPOSITORY@DIGEST.
fn released_image(out: &Path) -> String {
    let manifest = std::fs::read_to_string(out.join("static-pod.yaml")).expect("static-pod.yaml");
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("    image: "))
        .expect("static-pod.yaml's image line")
        .to_string()
}

fn chart_version() -> String {
    let chart = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/metainit/Chart.yaml"),
    )
    .unwrap();
    chart
        .lines()
        .find_map(|l| l.strip_prefix("version: "))
        .expect("Chart.yaml's version")
        .to_string()
}

/// `sha256sum -c SHA256SUMS` passes in the release's directory, and names every other file.
fn checksums_hold(out: &Path) {
    let status = Command::new("sha256sum")
        .args(["-c", "--quiet", "SHA256SUMS"])
        .current_dir(out)
        .status()
        .expect("sha256sum runs");
    assert!(status.success(), "SHA256SUMS of {}", out.display());
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    for file in release_files(out) {
        assert!(
            file == "SHA256SUMS" || sums.contains(&format!("  {file}\n")),
            "{file} not in SHA256SUMS"
        );
    }
}

fn release_files(out: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    files
}

/// PATH with the tests' helm first (release.sh takes helm from PATH).
fn helm_on_path() -> String {
    format!(
        "{}:{}",
        helm_binary().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

impl Drop for Registry {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
