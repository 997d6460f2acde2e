//! Everything a user can get wrong on the command line or in the kubeconfig: each case
//! asserts the exit code and the message, and that nothing panics or hangs.

mod common;

use std::time::Duration;

use common::{run_to_end, run_to_end_env};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(30);

fn kubeconfig(dir: &std::path::Path, name: &str, server: &str) -> String {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
             users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n\
             current-context: ctx\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

/// A server that answers every request with one fixed response.
async fn fixed_server(
    status: &'static str,
    content_type: &'static str,
    body: &'static str,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}

async fn expect(args: &[&str], code: i32, wants: &[&str]) {
    let (got, stdout, stderr) = run_to_end(args, LIMIT).await;
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert_eq!(
        got, code,
        "exit code of {args:?}; stdout: {stdout}; stderr: {stderr}"
    );
    for want in wants {
        assert!(
            stderr.contains(want),
            "{args:?}: {want:?} not in stderr: {stderr}"
        );
    }
}

#[tokio::test]
async fn bad_flags_exit_2_naming_flag_value_and_rule() {
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), "kc", "http://127.0.0.1:1");
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--label-key", "bad key"],
            vec!["--label-key", "bad key", "at most 63 characters"],
        ),
        (
            vec!["--label-key", "example.com/"],
            vec!["--label-key", "example.com/", "DNS subdomain prefix"],
        ),
        (
            vec!["--label-key=-x"],
            vec!["--label-key", "-x", "begins and ends"],
        ),
        (vec!["Bad_Key!"], vec!["Bad_Key!", "label key"]),
        (
            vec!["--namespace", "Kube_System"],
            vec!["--namespace", "Kube_System", "DNS-1123 label"],
        ),
        (
            vec!["--resource", "Pods"],
            vec!["--resource", "Pods", "plural"],
        ),
        (
            vec!["--resource", "pods."],
            vec!["--resource", "pods.", "plural"],
        ),
        (
            vec!["--mode", "sideways"],
            vec!["--mode", "sideways", "auto, initializers, scheduling-gates"],
        ),
        (
            vec!["--log-format", "xml"],
            vec!["--log-format", "xml", "text, json"],
        ),
        (
            vec!["--admin-addr", "localhost"],
            vec!["--admin-addr", "localhost"],
        ),
        (
            vec!["--concurrency", "0"],
            vec!["--concurrency", "0", "1..=1000"],
        ),
        (
            vec!["--timeout", "10x"],
            vec!["--timeout", "10x", "a duration is"],
        ),
        (
            vec!["--shutdown-timeout", "soon"],
            vec!["--shutdown-timeout", "soon", "a duration is"],
        ),
        (
            vec!["--only", "bad name"],
            vec!["--only", "bad name", "initializer name"],
        ),
        (vec!["--no-such-flag"], vec!["--no-such-flag"]),
        (
            vec!["status", "--output", "xml"],
            vec!["--output", "xml", "table, json, yaml"],
        ),
        (
            vec!["status", "--max-age", "old"],
            vec!["--max-age", "old", "a duration is"],
        ),
    ];
    for (args, wants) in cases {
        expect(&args, 2, &wants).await;
    }
    // Errors found after parsing, still before any server is contacted.
    expect(
        &["--kubeconfig", &kc, "--label-key", "a", "b"],
        2,
        &["given twice", "'b'", "'a'"],
    )
    .await;
    expect(
        &[
            "--kubeconfig",
            &kc,
            "--resource",
            "pods",
            "--resource",
            "pods",
        ],
        2,
        &["--resource 'pods' is given twice"],
    )
    .await;
    expect(
        &[
            "--kubeconfig",
            &kc,
            "--mode",
            "scheduling-gates",
            "--resource",
            "deployments.apps",
        ],
        2,
        &[
            "--resource deployments.apps",
            "scheduling gates exist only on pods",
        ],
    )
    .await;
}

#[tokio::test]
async fn bad_kubeconfigs_exit_2_saying_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    let malformed = dir.path().join("malformed");
    std::fs::write(&malformed, "clusters: [ {{ not yaml").unwrap();
    let unreadable = dir.path().join("a-directory");
    std::fs::create_dir(&unreadable).unwrap();
    let good = kubeconfig(dir.path(), "good", "http://127.0.0.1:1");
    let (empty, malformed, unreadable) = (
        empty.display().to_string(),
        malformed.display().to_string(),
        unreadable.display().to_string(),
    );
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--kubeconfig", "/nonexistent/kubeconfig"],
            vec![
                "cannot read the kubeconfig /nonexistent/kubeconfig",
                "--kubeconfig",
            ],
        ),
        (
            vec!["--kubeconfig", &unreadable],
            vec!["cannot read the kubeconfig", &unreadable],
        ),
        (vec!["--kubeconfig", &empty], vec!["is empty"]),
        (
            vec!["--kubeconfig", &malformed],
            vec!["is not valid", &malformed],
        ),
        (
            vec!["--kubeconfig", &good, "--context", "nope"],
            vec!["context \"nope\" is not in the kubeconfig", "it has: ctx"],
        ),
        (vec!["--once"], vec!["no kubeconfig found", "--kubeconfig"]),
        (vec!["status"], vec!["no kubeconfig found"]),
    ];
    for (args, wants) in cases {
        expect(&args, 2, &wants).await;
    }
    let (code, stdout, _) = run_to_end(&["--kubeconfig", &good, "--check-config"], LIMIT).await;
    assert_eq!((code, stdout.trim()), (0, "configuration OK"));
}

#[tokio::test]
async fn servers_that_cannot_work_end_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1: --once gives up after its timeout, exit 1.
    let unreachable = kubeconfig(dir.path(), "unreachable", "http://127.0.0.1:1");
    expect(
        &["--kubeconfig", &unreachable, "--once", "--timeout", "2s"],
        1,
        &[
            "could not reach the API server at http://127.0.0.1:1/",
            "within 2s",
        ],
    )
    .await;
    expect(
        &["status", "--kubeconfig", &unreachable, "--timeout", "2s"],
        2,
        &["could not reach the API server"],
    )
    .await;

    // An HTML 404 page is not Kubernetes.
    let html = fixed_server(
        "404 Not Found",
        "text/html",
        "<html><body><h1>Not Found</h1></body></html>",
    )
    .await;
    let html = kubeconfig(dir.path(), "html", &html);
    expect(
        &["--kubeconfig", &html, "--once"],
        2,
        &["does not look like a Kubernetes API server", "404"],
    )
    .await;
    expect(
        &["--kubeconfig", &html],
        2,
        &["does not look like a Kubernetes API server"],
    )
    .await;

    // A server between the two generations.
    let v120 = fixed_server(
        "200 OK",
        "application/json",
        r#"{"major":"1","minor":"20","gitVersion":"v1.20.15","platform":"linux/amd64"}"#,
    )
    .await;
    let v120 = kubeconfig(dir.path(), "v120", &v120);
    expect(
        &["--kubeconfig", &v120, "--once"],
        2,
        &[
            "Kubernetes 1.20 has neither initializers",
            "1.7 to 1.13",
            "1.26 or later",
        ],
    )
    .await;

    // https to a plain-HTTP server: a TLS mismatch.
    let plain = fixed_server("200 OK", "application/json", "{}").await;
    let tls = kubeconfig(dir.path(), "tls", &plain.replace("http://", "https://"));
    expect(
        &["--kubeconfig", &tls, "--once", "--timeout", "5s"],
        2,
        &["TLS"],
    )
    .await;
}

#[tokio::test]
async fn https_without_a_usable_ca_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let no_certs = dir.path().join("no-certs");
    std::fs::create_dir(&no_certs).unwrap();
    let kc = kubeconfig(dir.path(), "https", "https://127.0.0.1:1");
    // As in a FROM scratch image without a CA bundle: the system has no CA either.
    let env = [
        ("SSL_CERT_FILE", "/dev/null"),
        ("SSL_CERT_DIR", no_certs.to_str().unwrap()),
    ];
    for args in [
        vec!["--kubeconfig", &kc, "--check-config"],
        vec!["--kubeconfig", &kc, "--once"],
    ] {
        let (code, _, stderr) = run_to_end_env(&args, &env, LIMIT).await;
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("No CA certificates were loaded"),
            "{stderr}"
        );
        assert!(
            stderr.contains("add certificate-authority-data"),
            "{stderr}"
        );
    }
}

/// The commit build.rs should have recorded: METAINIT_REVISION when the build was given
/// one, else this checkout's HEAD, else "unknown" (no git, or not a checkout).
fn expected_commit() -> String {
    if let Some(r) = option_env!("METAINIT_REVISION")
        .map(str::trim)
        .filter(|r| !r.is_empty() && *r != "unknown")
    {
        return r.chars().take(12).collect();
    }
    let here = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(here)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let ours = git(&["rev-parse", "--show-toplevel"])
        .is_some_and(|top| std::fs::canonicalize(top).ok() == std::fs::canonicalize(here).ok());
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(commit) if ours => commit,
        _ => "unknown".to_string(),
    }
}

#[tokio::test]
async fn version_names_the_commit() {
    let (code, stdout, stderr) = run_to_end(&["--version"], LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    let commit = expected_commit();
    assert_eq!(
        stdout.trim(),
        format!("metainit {} (commit {commit})", env!("CARGO_PKG_VERSION"))
    );
    // In a checkout (CI's clone included) the commit is a real one, never the fallback.
    if std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.git")).exists() {
        assert!(
            commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()),
            "--version printed {stdout:?} in a git checkout"
        );
    }
}
