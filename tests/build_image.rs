//! scripts/build-image.sh refuses bad input before it builds anything: exit 2, the rule
//! broken and the usage, on stderr (docs/src/install/image.md). Its build and push run in
//! tests/node.rs, against a registry on the node.

use std::process::Command;

fn refused(args: &[&str], says: &str) {
    let out = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/build-image.sh"
        ))
        .args(args)
        .output()
        .expect("bash runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(
        err.contains(says) && err.contains("usage: build-image.sh"),
        "{args:?}: {err}"
    );
    assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
}

#[test]
fn bad_input_is_refused_with_what_to_fix() {
    refused(&[], "name the repository to push to");
    refused(
        &["registry.example.com/Metainit"],
        "is not a repository name",
    );
    refused(&["registry.example.com/metainit:-x"], "is not a tag");
    refused(
        &["registry.example.com/metainit@sha256:00"],
        "has a digest: give REPOSITORY[:TAG]",
    );
    refused(
        &["--platforms", "s390x", "registry.example.com/metainit"],
        "unsupported platform 's390x'",
    );
    refused(&["--platforms"], "--platforms needs a value");
    refused(
        &["--frobnicate", "r.example.com/m"],
        "unknown option --frobnicate",
    );
    refused(&["r.example.com/a", "r.example.com/b"], "one REPOSITORY");
}
