//! `kubectl metainit`: the binary found by the real kubectl as the plugin `kubectl-metainit`
//! (a symlink on PATH), `status` through it with kubectl's flags, `kubectl plugin list`, and
//! the plugin with no subcommand printing its help instead of starting the daemon. `status`
//! runs on the real control plane (a scene of its own; the second context's server is the
//! fault proxy in front of it); the rest needs no server's answers (a double of 1.13's).

mod common;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use common::{
    fuzz::{Plan, Proxy},
    scene::{Rights, Scene},
    *,
};

const LIMIT: Duration = Duration::from_secs(30);

/// A directory holding `kubectl-metainit`, a symlink to the binary cargo built.
struct PluginDir {
    dir: tempfile::TempDir,
}

impl PluginDir {
    fn new() -> PluginDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_metainit"),
            dir.path().join("kubectl-metainit"),
        )
        .expect("symlink");
        PluginDir { dir }
    }

    fn plugin(&self) -> PathBuf {
        self.dir.path().join("kubectl-metainit")
    }

    /// Runs the real kubectl (from PATH) with the plugin's directory first on PATH:
    /// exit code, stdout, stderr.
    async fn kubectl(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        let path = format!(
            "{}:{}",
            self.dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = tokio::time::timeout(
            LIMIT,
            tokio::process::Command::new(kubectl())
                .args(args)
                .env("PATH", path)
                .env_remove("KUBECONFIG")
                .env("HOME", self.dir.path())
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish within {LIMIT:?}"))
        .expect("kubectl runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// kubectl on PATH: the test fails without it, it never passes by skipping.
fn kubectl() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
        .expect("kubectl is not on PATH: install it (the plugin tests run the real kubectl)")
}

/// A kubeconfig of three contexts with the scene's ServiceAccount's token: `first`
/// (current) at the real server (its CA), `second` at the fault proxy in front of it (plain
/// http: another server's address), `dead` at a port nothing listens on.
fn kubeconfig(dir: &Path, s: &Scene, second: &str, dead: &str) -> PathBuf {
    let token = std::fs::read_to_string(&s.kubeconfig).expect("the scene's kubeconfig");
    let token = token
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .expect("a token");
    let cluster =
        |name: &str, url: &str| format!("- name: {name}\n  cluster:\n    server: {url}\n");
    let context =
        |name: &str| format!("- name: {name}\n  context:\n    cluster: {name}\n    user: u\n");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n{}    certificate-authority: {}\n{}{}\
         users:\n- name: u\n  user:\n    token: {token}\n\
         contexts:\n{}{}{}current-context: first\n",
        cluster("first", &s.cp.server),
        s.cp.ca.display(),
        cluster("second", second),
        cluster("dead", dead),
        context("first"),
        context("second"),
        context("dead"),
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).expect("kubeconfig written");
    path
}

/// A URL on loopback where nothing listens.
async fn dead_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

/// `kubectl metainit status ARGS` with the kubeconfig `kc`: exit code, stdout, stderr.
async fn status(plugin: &PluginDir, kc: &str, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["metainit", "status", "--kubeconfig", kc];
    all.extend_from_slice(args);
    plugin.kubectl(&all, &[]).await
}

#[tokio::test]
#[ignore = "the real tier: a Go-built control plane (bash scripts/test.sh runs it; or cargo test --test NAME -- --ignored)"]
async fn kubectl_metainit_status_with_kubectls_flags() {
    let s = Scene::new(&["team-a", "team-b", "team-c"], Rights::Files).await;
    let gate = s.gate("example.com/quota");
    let (a, b, c) = (s.ns("team-a"), s.ns("team-b"), s.ns("team-c"));
    s.add("team-a", &s.gated_pod("web-1", &gate));
    s.add("team-b", &gated_pod("job-2", false, &[&gate]));
    s.add("team-c", &s.gated_pod("other-3", &gate));
    // The second context's server: the proxy, which forwards all and counts what it sees.
    let proxy = Proxy::start(&s.kubeconfig, Plan::Each(Vec::new())).await;
    let plugin = PluginDir::new();
    let dead = dead_url().await;
    let kc = kubeconfig(plugin.dir.path(), &s, &proxy.url, &dead);
    let kc = kc.display().to_string();

    let (code, out, err) = status(&plugin, &kc, &["-A"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    for (ns, name) in [(a, "web-1"), (b, "job-2"), (c, "other-3")] {
        assert!(
            out.lines().any(|l| l.contains(ns) && l.contains(name)),
            "{ns}/{name} not listed:\n{out}"
        );
    }
    assert!(
        proxy.seen().is_empty(),
        "the current context asked the second's server"
    );

    // --context: the second server is the one asked (-n: team-c's objects only).
    let (code, out, err) = status(&plugin, &kc, &["--context", "second", "-n", c]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("other-3") && !out.contains("web-1"), "{out}");
    assert!(
        !proxy.seen().is_empty(),
        "--context second did not ask its server"
    );

    // -n: one namespace.
    let (code, out, err) = status(&plugin, &kc, &["-n", b]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("job-2") && !out.contains("web-1"), "{out}");
    refusals(&plugin, &kc, &dead).await;
}

/// A context whose server is down, a context not in the kubeconfig, and -A with -n: each
/// exit 2, saying why.
async fn refusals(plugin: &PluginDir, kc: &str, dead: &str) {
    let args = ["-A", "--context", "dead", "--timeout", "0s"];
    let (code, out, err) = status(plugin, kc, &args).await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(msg::UNREACHABLE) && err.contains(dead),
        "the dead server is not named:\n{err}"
    );

    // A context that is not in the kubeconfig: named, with the ones that are.
    let (code, _, err) = status(plugin, kc, &["--context", "nosuch"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("context \"nosuch\" is not in the kubeconfig")
            && err.contains("first, second, dead"),
        "{err}"
    );

    // -A and -n together: which to drop, and the usage under kubectl's name.
    let (code, _, err) = status(plugin, kc, &["-A", "-n", "team-b"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("'--all-namespaces' cannot be used with '--namespace <NS>'")
            && err.contains("Usage: kubectl metainit status"),
        "{err}"
    );
}

#[tokio::test]
async fn kubectl_plugin_list_shows_it() {
    let plugin = PluginDir::new();
    let (code, out, err) = plugin.kubectl(&["plugin", "list"], &[]).await;
    let listed = plugin.plugin().display().to_string();
    assert!(
        out.lines().any(|l| l.trim() == listed),
        "kubectl plugin list (exit {code}) does not list {listed}:\n{out}\n{err}"
    );
    // kubectl's warnings about a plugin begin with its path ("... is not executable").
    assert!(
        !err.contains(&format!("warning: {listed}")),
        "kubectl warns about the plugin:\n{err}"
    );
}

#[tokio::test]
async fn no_subcommand_prints_the_help_and_starts_no_daemon() {
    // 1.13's double is enough: the plugin must send no request to any server.
    let bed = Bed::legacy(&[]).await;
    let plugin = PluginDir::new();
    let kc = bed.kubeconfig.display().to_string();
    bed.double.clear_requests();
    // A kubeconfig in reach: a daemon started by mistake would talk to the double.
    let env = [
        ("KUBECONFIG", kc.as_str()),
        ("METAINIT_ADMIN_ADDR", "127.0.0.1:0"),
    ];
    let (code, out, err) = plugin.kubectl(&["metainit"], &env).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("Usage: kubectl metainit <COMMAND>")
            && out.contains("status")
            && out.contains("probe")
            && out.contains("does not run through kubectl"),
        "{out}"
    );
    // The daemon's flags are not offered through kubectl.
    assert!(!out.contains("--admin-addr"), "{out}");
    assert!(err.is_empty(), "{err}");

    // Only the daemon's flags: refused, saying where the daemon runs.
    let (code, out, err) = plugin.kubectl(&["metainit", "--once"], &env).await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("kubectl metainit needs a subcommand")
            && err.contains("does not run through kubectl"),
        "{err}"
    );
    assert!(
        bed.double.requests().is_empty(),
        "the plugin talked to the API server: {:?}",
        bed.double.requests()
    );

    // The same binary under its own name is still the daemon's command line.
    let (code, out, _) = run_to_end(&["--help"], LIMIT).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("--admin-addr") && out.contains("Usage: metainit"),
        "{out}"
    );
}

/// `.krew.yaml` rendered as krew-release-bot renders it: `{{ addURIAndSha "URL" .TagName }}`
/// becomes `uri: URL` and, indented four spaces, `sha256: HEX` of the archive at URL (here
/// `sha256` for every URL); then each `{{ .TagName }}` becomes the tag.
fn render_krew(template: &str, tag: &str, sha256: &str) -> String {
    let mut out = String::new();
    let mut rest = template;
    const OPEN: &str = "{{ addURIAndSha \"";
    const CLOSE: &str = "\" .TagName }}";
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        let end = after.find(CLOSE).expect("addURIAndSha's URL closed");
        out.push_str(&format!("uri: {}\n    sha256: {sha256}", &after[..end]));
        rest = &after[end + CLOSE.len()..];
    }
    out.push_str(rest);
    out.replace("{{ .TagName }}", tag)
}

#[test]
fn the_krew_manifest_renders_what_krew_requires() {
    // A small release archive, as the release would make it: the binary under the plugin's
    // name at its root.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("kubectl-metainit"), b"#!/bin/sh\n").unwrap();
    let archive = dir.path().join("metainit-v1.2.3-linux-amd64.tar.gz");
    let tar = std::process::Command::new("tar")
        .arg("czf")
        .arg(&archive)
        .arg("-C")
        .arg(&root)
        .arg("kubectl-metainit")
        .status()
        .expect("tar runs");
    assert!(tar.success());
    let bytes = std::fs::read(&archive).unwrap();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let sha: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(".krew.yaml");
    let template = std::fs::read_to_string(&path).expect(".krew.yaml at the repository's root");
    assert_eq!(template.matches("addURIAndSha").count(), 2, "{template}");
    let rendered = render_krew(&template, "v1.2.3", &sha);
    assert!(!rendered.contains("{{"), "left unrendered:\n{rendered}");
    let doc: serde_json::Value = serde_saphyr::from_str(&rendered)
        .unwrap_or_else(|e| panic!("the rendered manifest is not YAML ({e}):\n{rendered}"));

    assert_eq!(
        doc["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(doc["kind"], "Plugin");
    assert_eq!(doc["metadata"]["name"], "metainit");
    let spec = &doc["spec"];
    let version = spec["version"].as_str().unwrap_or_default();
    let semver = version
        .strip_prefix('v')
        .map(|v| v.split('.').collect::<Vec<_>>())
        .is_some_and(|p| {
            p.len() == 3
                && p.iter()
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
    assert!(semver, "krew wants vMAJOR.MINOR.PATCH, not {version:?}");
    assert_eq!(version, "v1.2.3");
    for field in ["shortDescription", "description", "homepage"] {
        assert!(
            spec[field].as_str().is_some_and(|s| !s.trim().is_empty()),
            "spec.{field} is empty"
        );
    }
    let platforms = spec["platforms"].as_array().expect("spec.platforms");
    let mut arches = Vec::new();
    for p in platforms {
        let labels = &p["selector"]["matchLabels"];
        assert_eq!(labels["os"], "linux", "{p}");
        let arch = labels["arch"].as_str().expect("arch").to_string();
        let uri = p["uri"].as_str().expect("uri");
        assert_eq!(
            uri,
            format!(
                "https://github.com/metainit/metainit/releases/download/v1.2.3/metainit-v1.2.3-linux-{arch}.tar.gz"
            )
        );
        let hex = p["sha256"].as_str().expect("sha256");
        assert!(
            hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "{hex}"
        );
        assert_eq!(hex, sha);
        assert_eq!(p["bin"], "kubectl-metainit", "{p}");
        arches.push(arch);
    }
    assert_eq!(arches, ["amd64", "arm64"]);
}
