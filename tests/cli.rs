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
        // A subcommand after a flag would start the watcher with label key "status".
        (
            vec!["--kubeconfig", "/nowhere", "status"],
            vec![
                "\"status\" is a subcommand: give it first",
                "--label-key status",
            ],
        ),
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

/// kube takes a proxy from the kubeconfig's proxy-url, else from HTTPS_PROXY; metainit
/// has no proxy support built in, and says so rather than failing to connect.
#[tokio::test]
async fn a_proxy_is_refused_naming_where_it_comes_from() {
    let dir = tempfile::tempdir().unwrap();
    let plain = kubeconfig(dir.path(), "kc", "https://127.0.0.1:1");
    let with_url = dir.path().join("proxied");
    std::fs::write(
        &with_url,
        std::fs::read_to_string(&plain).unwrap().replace(
            "    server:",
            "    proxy-url: http://proxy.example:3128\n    server:",
        ),
    )
    .unwrap();
    let with_url = with_url.display().to_string();
    let cases = [
        (with_url.as_str(), None, "http://proxy.example:3128/"),
        (
            plain.as_str(),
            Some("http://env-proxy.example:8080"),
            "http://env-proxy.example:8080/",
        ),
    ];
    for (kc, env, proxy) in cases {
        let env: Vec<(&str, &str)> = env.map(|e| ("HTTPS_PROXY", e)).into_iter().collect();
        for args in [
            vec!["--kubeconfig", kc, "--check-config"],
            vec!["--kubeconfig", kc, "--once"],
        ] {
            let (code, _, stderr) = run_to_end_env(&args, &env, LIMIT).await;
            assert_eq!(code, 2, "{args:?} {env:?}: {stderr}");
            assert!(
                stderr.contains(proxy) && stderr.contains(common::msg::PROXY),
                "{args:?} {env:?}: {stderr}"
            );
        }
    }
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

fn user_kubeconfig(dir: &std::path::Path, server: &str, user: &str) -> String {
    let path = dir.join("user-kc");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
             users:\n- name: u\n  user:\n{user}contexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n\
             current-context: ctx\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn missing_credential_files_are_named_with_their_field_and_the_os_error() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "    tokenFile: /nonexistent/token\n",
            "/nonexistent/token",
            common::msg::TOKEN_FILE,
        ),
        (
            "    client-certificate: /nonexistent/cert.pem\n    client-key: /nonexistent/key.pem\n",
            "/nonexistent/cert.pem",
            common::msg::CLIENT_CERT,
        ),
        (
            "    client-certificate-data: Zm9v\n    client-key: /nonexistent/key.pem\n",
            "/nonexistent/key.pem",
            common::msg::CLIENT_KEY,
        ),
    ];
    for (user, file, field) in cases {
        let kc = user_kubeconfig(dir.path(), "https://127.0.0.1:1", user);
        let want = format!(
            "error: cannot read {file}{field}\"u\" in the kubeconfig {kc}: No such file or directory (os error 2)\n"
        );
        for args in [
            vec!["--kubeconfig", &kc, "--check-config"],
            vec!["--kubeconfig", &kc, "--once"],
            vec!["status", "--kubeconfig", &kc],
        ] {
            let (code, _, stderr) = run_to_end(&args, LIMIT).await;
            assert_eq!(code, 2, "{args:?}: {stderr}");
            assert!(
                stderr.ends_with(&want),
                "{args:?}: wanted {want:?}, got {stderr}"
            );
            assert!(
                !stderr.contains("certificate-authority") && !stderr.contains("'\""),
                "{stderr}"
            );
        }
    }
}

/// A server that accepts connections and never answers.
async fn silent_server() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    (format!("http://{addr}"), task)
}

#[tokio::test]
async fn start_up_failures_give_the_last_error_or_say_nothing_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (silent, _task) = silent_server().await;
    let kc = kubeconfig(dir.path(), "silent", &silent);
    let want = format!(
        "error: {}{silent}/ within 1.5s (GET /version; {}): {}",
        common::msg::UNREACHABLE,
        common::msg::TIMEOUT_SPENT,
        common::msg::NO_ANSWER
    );
    for (args, code) in [
        (
            vec!["--kubeconfig", &kc, "--once", "--timeout", "1500ms"],
            1,
        ),
        (
            vec!["status", "--kubeconfig", &kc, "--timeout", "1500ms"],
            2,
        ),
    ] {
        let (got, _, stderr) = run_to_end(&args, LIMIT).await;
        assert_eq!(got, code, "{args:?}: {stderr}");
        // What was left of the budget: `--once`'s started before it connected.
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with(&want) && last.ends_with('s'),
            "{args:?}: wanted {want:?}: {stderr}"
        );
    }
    // --timeout 0s: one attempt, its own error.
    let (got, _, stderr) = run_to_end(
        &[
            "status",
            "--kubeconfig",
            &kc,
            "--timeout",
            "0s",
            "--request-timeout",
            "1s",
        ],
        LIMIT,
    )
    .await;
    assert_eq!(got, 2, "{stderr}");
    assert!(
        stderr.contains(common::msg::TRIED_ONCE)
            && stderr.contains("no answer within 1s (--request-timeout)"),
        "{stderr}"
    );

    // A server that answers 503: the last error, its code, reason and message as fields
    // of the WARN lines, and no Rust debug text anywhere.
    let busy = fixed_server(
        "503 Service Unavailable",
        "application/json",
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server is restarting","reason":"ServiceUnavailable","code":503}"#,
    )
    .await;
    let kc = kubeconfig(dir.path(), "busy", &busy);
    let (got, _, stderr) =
        run_to_end(&["--kubeconfig", &kc, "--once", "--timeout", "2s"], LIMIT).await;
    assert_eq!(got, 1, "{stderr}");
    assert!(
        stderr.ends_with(&format!(
            "{}{busy}/ within 2s (GET /version; {}): 503 ServiceUnavailable: the server is restarting\n",
            common::msg::UNREACHABLE,
            common::msg::TIMEOUT_SPENT
        )),
        "{stderr}"
    );
    let warn = stderr
        .lines()
        .find(|l| l.contains(common::msg::NOT_REACHABLE_YET))
        .unwrap_or_else(|| panic!("no retry line: {stderr}"));
    assert!(
        warn.contains("WARN") && warn.contains(common::msg::STATUS_FIELDS),
        "{warn}"
    );
    assert!(
        !stderr.contains("Status {") && !stderr.contains("Some("),
        "debug text: {stderr}"
    );

    // An error answer with no body at all.
    let empty = fixed_server("404 Not Found", "text/plain", "").await;
    let kc = kubeconfig(dir.path(), "empty", &empty);
    let (got, _, stderr) = run_to_end(&["--kubeconfig", &kc, "--once"], LIMIT).await;
    assert_eq!(got, 2, "{stderr}");
    assert!(
        stderr.ends_with(&format!(
            "error: GET /version: {empty}/ {}: it answered 404 {}\n",
            common::msg::NOT_KUBERNETES,
            common::msg::EMPTY_BODY
        )),
        "{stderr}"
    );
}

/// Bad values from the environment are refused before any request (the booleans that are
/// accepted: tests/cluster_cli.rs).
#[tokio::test]
async fn bad_values_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), "kc", "http://127.0.0.1:1");
    let args = ["--kubeconfig", kc.as_str(), "--admin-addr", "127.0.0.1:0"];
    for (var, value, rule) in [
        ("METAINIT_DRY_RUN", "maybe", common::msg::BOOLEAN_RULE),
        ("METAINIT_ONCE", "on-ish", common::msg::BOOLEAN_RULE),
        ("METAINIT_TIMEOUT", "10x", "a duration is"),
        (
            "METAINIT_MODE",
            "sideways",
            "possible values: auto, initializers, scheduling-gates",
        ),
        ("METAINIT_RESOURCE", "pods,Pods", "a resource is"),
    ] {
        let (code, _, err) = run_to_end_env(&args, &[(var, value)], LIMIT).await;
        assert_eq!(code, 2, "{var}={value}: {err}");
        let flag = var
            .trim_start_matches("METAINIT_")
            .to_ascii_lowercase()
            .replace('_', "-");
        let bad = if value == "pods,Pods" { "Pods" } else { value };
        assert!(
            err.starts_with(&format!(
                "error: invalid value '{bad}' {}{} (read as --{flag}): {rule}",
                common::msg::ENV_VALUE,
                var.trim_start_matches("METAINIT_")
            )),
            "{var}={value}: {err}"
        );
    }
    // A value typed on the command line is still reported under its flag.
    let (code, _, err) =
        run_to_end_env(&["--timeout", "10x"], &[("METAINIT_TIMEOUT", "10x")], LIMIT).await;
    assert_eq!(code, 2);
    assert!(
        err.starts_with("error: invalid value '10x' for '--timeout"),
        "{err}"
    );
}

#[tokio::test]
async fn admin_addr_takes_localhost_and_says_what_form_it_expects() {
    // 1.13's double is enough: the flag's parsing and the admin server's address.
    let bed = common::Bed::legacy(&[]).await;
    let kc = bed.kubeconfig.display().to_string();
    let m = common::Metainit::spawn(&[
        "--kubeconfig".into(),
        kc.clone(),
        "--admin-addr".into(),
        "localhost:0".into(),
    ]);
    let addr = m.admin_addr().await;
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    assert_eq!(common::admin_get(&addr, "/healthz").await.0, 200);
    assert!(m.stop().await.success());
    for bad in ["localhost", "example.com:80", "127.0.0.1:99999"] {
        let (code, _, err) = run_to_end(
            &["--kubeconfig", &kc, "--admin-addr", bad, "--check-config"],
            LIMIT,
        )
        .await;
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(
            err.starts_with(&format!(
                "error: invalid value '{bad}' for '--admin-addr <ADDR>': {}",
                common::msg::ADMIN_ADDR_RULE
            )),
            "{err}"
        );
    }
}

/// An invalid node name is refused before any request, typed or from `NODE_NAME` (the
/// fallback to `NODE_NAME` and the hostname: tests/cluster_cli.rs).
#[tokio::test]
async fn an_invalid_node_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), "kc", "http://127.0.0.1:1");
    let (code, _, err) = run_to_end(
        &[
            "--kubeconfig",
            &kc,
            "--node-name",
            "Bad_Name",
            "--check-config",
        ],
        LIMIT,
    )
    .await;
    assert_eq!(code, 2);
    assert!(
        err.starts_with(&format!(
            "error: invalid value 'Bad_Name' for '--node-name <NAME>': {}",
            common::msg::NODE_NAME_RULE
        )),
        "{err}"
    );
    let (code, _, err) = run_to_end_env(
        &["--kubeconfig", &kc, "--check-config"],
        &[("NODE_NAME", "Bad_Name")],
        LIMIT,
    )
    .await;
    assert_eq!(code, 2);
    assert!(
        err.starts_with(&format!(
            "error: invalid node name 'Bad_Name' {}: {}",
            common::msg::NODE_NAME_ENV,
            common::msg::NODE_NAME_RULE
        )),
        "{err}"
    );
}

/// A label key given both as `status`'s argument and as `--label-key` is refused (the
/// positional key itself: tests/cluster_cli.rs).
#[tokio::test]
async fn status_refuses_a_label_key_given_twice() {
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), "kc", "http://127.0.0.1:1");
    expect(
        &[
            "status",
            "example.com/mine",
            "--label-key",
            "other",
            "--kubeconfig",
            &kc,
        ],
        2,
        &[
            common::msg::LABEL_KEY_TWICE,
            "'example.com/mine'",
            "'other'",
        ],
    )
    .await;
}

#[tokio::test]
async fn with_json_logs_the_fatal_error_is_a_json_line() {
    let check = |stderr: &str, message: &str| {
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.contains(common::msg::JSON_ERROR), "{stderr}");
        let line: serde_json::Value =
            serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {last}"));
        assert_eq!(line["level"], "ERROR");
        assert_eq!(line["exit_code"], 2);
        assert!(line["timestamp"].is_string(), "{line}");
        assert!(
            line["message"].as_str().unwrap().starts_with(message),
            "{line}"
        );
        assert!(
            !stderr.contains("\nerror: ") && !stderr.starts_with("error: "),
            "{stderr}"
        );
    };
    for args in [
        vec!["--log-format", "json", "--kubeconfig", "/nonexistent"],
        vec![
            "status",
            "--log-format",
            "json",
            "--kubeconfig",
            "/nonexistent",
        ],
    ] {
        let (code, _, stderr) = run_to_end(&args, LIMIT).await;
        assert_eq!(code, 2, "{stderr}");
        check(
            &stderr,
            "cannot read the kubeconfig /nonexistent (from --kubeconfig)",
        );
    }
    // Even a bad command line, when JSON logs are asked for.
    let (code, _, stderr) =
        run_to_end(&["--log-format=json", "--label-key", "bad key"], LIMIT).await;
    assert_eq!(code, 2, "{stderr}");
    check(&stderr, "invalid value 'bad key' for '--label-key <KEY>'");
    let (code, _, stderr) = run_to_end_env(
        &["--concurrency", "0"],
        &[("METAINIT_LOG_FORMAT", "json")],
        LIMIT,
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    check(&stderr, "invalid value '0' for '--concurrency <N>'");
}

#[tokio::test]
async fn check_config_checks_every_rule_that_needs_no_server() {
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), "kc", "http://127.0.0.1:1");
    let run = [
        "--kubeconfig",
        kc.as_str(),
        "--mode",
        "scheduling-gates",
        "--resource",
        "deployments.apps",
    ];
    for check in [true, false] {
        let mut args = run.to_vec();
        if check {
            args.push("--check-config");
        }
        let (code, out, err) = run_to_end(&args, LIMIT).await;
        assert_eq!(code, 2, "{args:?}: {out} {err}");
        assert_eq!(
            err,
            format!(
                "error: --resource deployments.apps: {}\n",
                common::msg::GATES_NEED_PODS
            ),
            "{args:?}"
        );
        assert!(!out.contains(common::msg::CONFIG_OK));
    }
    for args in [
        vec![
            "--kubeconfig",
            &kc,
            "--check-config",
            "a",
            "--label-key",
            "b",
        ],
        vec![
            "--kubeconfig",
            &kc,
            "--check-config",
            "--resource",
            "pods,pods",
        ],
    ] {
        let (code, out, err) = run_to_end(&args, LIMIT).await;
        assert_eq!(code, 2, "{args:?}: {out} {err}");
    }
    let (code, out, _) = run_to_end_env(
        &[
            "--kubeconfig",
            &kc,
            "--check-config",
            "--mode",
            "scheduling-gates",
        ],
        &[("NODE_NAME", "cp-1")],
        LIMIT,
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "configuration OK\n"));
}

#[test]
fn the_troubleshooting_guide_has_every_message_the_tests_assert() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/src/troubleshooting.md");
    let doc = std::fs::read_to_string(path).expect("docs/src/troubleshooting.md");
    let missing: Vec<&&str> = common::msg::ALL
        .iter()
        .filter(|m| !doc.contains(**m))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/src/troubleshooting.md: {missing:#?}"
    );
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(
        readme.contains("docs/src/troubleshooting.md"),
        "the README links the guide"
    );
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
