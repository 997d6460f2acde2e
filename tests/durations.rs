//! Durations out of range (#43 item 4): every duration flag, typed or read from its
//! `METAINIT_*` variable, refuses a value too large to add to a clock (exit 2, a message
//! that names the flag or the variable and the largest value accepted) instead of
//! panicking later in the clock's arithmetic (exit 134 with `panic = "abort"`).

mod common;

use std::time::Duration;

use common::run_to_end_env;

const LIMIT: Duration = Duration::from_secs(20);

/// A duration far beyond any clock: 99999999999999999 hours.
const HUGE: &str = "99999999999999999h";

/// The largest duration accepted, as the message states it.
const MAX: &str = "at most 87600h";

/// One duration flag: the command it belongs to (`None`: the watcher), what else it
/// needs to be accepted, the flag, its variable, and the value to give it (`{}`: the
/// duration).
struct Case {
    status: bool,
    with: &'static [&'static str],
    flag: &'static str,
    var: &'static str,
    value: &'static str,
}

const CASES: &[Case] = &[
    Case {
        status: false,
        with: &["--once"],
        flag: "--timeout",
        var: "METAINIT_TIMEOUT",
        value: "{}",
    },
    Case {
        status: false,
        with: &["--once"],
        flag: "--request-timeout",
        var: "METAINIT_REQUEST_TIMEOUT",
        value: "{}",
    },
    Case {
        status: false,
        with: &[],
        flag: "--release-gate",
        var: "METAINIT_RELEASE_GATES",
        value: "example.com/g={}",
    },
    Case {
        status: false,
        with: &["--webhooks"],
        flag: "--webhook-grace",
        var: "METAINIT_WEBHOOK_GRACE",
        value: "{}",
    },
    Case {
        status: false,
        with: &[],
        flag: "--shutdown-timeout",
        var: "METAINIT_SHUTDOWN_TIMEOUT",
        value: "{}",
    },
    Case {
        status: false,
        with: &[],
        flag: "--resync-period",
        var: "METAINIT_RESYNC_PERIOD",
        value: "{}",
    },
    Case {
        status: true,
        with: &[],
        flag: "--max-age",
        var: "METAINIT_MAX_AGE",
        value: "{}",
    },
    Case {
        status: true,
        with: &[],
        flag: "--timeout",
        var: "METAINIT_TIMEOUT",
        value: "{}",
    },
    Case {
        status: true,
        with: &[],
        flag: "--request-timeout",
        var: "METAINIT_REQUEST_TIMEOUT",
        value: "{}",
    },
    Case {
        status: true,
        with: &[],
        flag: "--release-gate",
        var: "METAINIT_RELEASE_GATES",
        value: "example.com/g={}",
    },
];

/// The command line of `case` against `kc`, with `flag_value` given to its flag or not.
fn args(case: &Case, kc: &str, flag_value: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    if case.status {
        args.push("status".into());
    } else {
        args.extend(["--admin-addr".into(), "127.0.0.1:0".into()]);
    }
    args.extend(["--kubeconfig".into(), kc.into()]);
    args.extend(case.with.iter().map(|a| a.to_string()));
    if let Some(v) = flag_value {
        args.extend([case.flag.to_string(), v.to_string()]);
    }
    args
}

async fn run(args: &[String], env: &[(&str, &str)]) -> (i32, String) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, stderr) = run_to_end_env(&args, env, LIMIT).await;
    (code, stderr)
}

/// No server: a kubeconfig at a port nothing listens on. Each value is refused before any
/// request (`--check-config` contacts none either); a value let through would hang in
/// retries or panic in a clock, and fail the exit code asserted.
struct NoServer {
    _dir: tempfile::TempDir,
    kubeconfig: String,
}

fn no_server() -> NoServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\n\
         users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
         current-context: c\n",
    )
    .expect("kubeconfig written");
    NoServer {
        kubeconfig: path.display().to_string(),
        _dir: dir,
    }
}

#[tokio::test]
async fn a_huge_duration_on_the_command_line_exits_2_naming_the_flag_and_the_bound() {
    let server = no_server();
    let kc = server.kubeconfig.clone();
    for case in CASES {
        let value = case.value.replace("{}", HUGE);
        let args = args(case, &kc, Some(&value));
        let (code, err) = run(&args, &[]).await;
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert_eq!(code, 2, "exit code of {args:?}: {err}");
        assert!(
            err.starts_with(&format!(
                "error: invalid value '{value}' for '{}",
                case.flag
            )),
            "{args:?}: {err}"
        );
        assert!(err.contains(MAX), "{args:?}: {MAX:?} not in {err}");
    }
}

#[tokio::test]
async fn a_huge_duration_in_the_environment_exits_2_naming_the_variable_and_the_bound() {
    let server = no_server();
    let kc = server.kubeconfig.clone();
    for case in CASES {
        let value = case.value.replace("{}", HUGE);
        let args = args(case, &kc, None);
        let env = [(case.var, value.as_str())];
        let (code, err) = run(&args, &env).await;
        assert!(!err.contains("panicked"), "{env:?} panicked: {err}");
        assert_eq!(code, 2, "exit code of {args:?} with {env:?}: {err}");
        assert!(
            err.starts_with(&format!(
                "error: invalid value '{value}' in the environment variable {} (read as {}): ",
                case.var, case.flag
            )),
            "{env:?}: {err}"
        );
        assert!(err.contains(MAX), "{env:?}: {MAX:?} not in {err}");
    }
}

/// A number of hours too large even for the parser's integers is refused the same way,
/// not as a malformed duration.
#[tokio::test]
async fn a_number_too_large_to_parse_says_the_bound_too() {
    let value = "99999999999999999999999999h";
    let (code, err) = run(&["--timeout".into(), value.into()], &[]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with(&format!("error: invalid value '{value}' for '--timeout")),
        "{err}"
    );
    assert!(err.contains(MAX), "{err}");
}

/// The bound itself is accepted by every flag.
#[tokio::test]
async fn the_largest_duration_is_accepted() {
    let server = no_server();
    let kc = server.kubeconfig.clone();
    let mut args: Vec<String> = ["--kubeconfig", &kc, "--check-config", "--webhooks"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    for case in CASES.iter().filter(|c| !c.status) {
        let value = case.value.replace("{}", "87600h");
        args.extend([case.flag.to_string(), value]);
    }
    let (code, err) = run(&args, &[]).await;
    assert_eq!(code, 0, "{args:?}: {err}");
}
