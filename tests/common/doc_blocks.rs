//! The documentation's shell blocks marked to be run (`<!-- commands: KIND ID -->`), as
//! scripts/check-commands.py lists them: the node story runs `node` ones
//! (tests/node_story/docs.rs), tests/developer_docs.rs and tests/developer_node.rs the `machine`
//! ones (`session`).

use std::{
    os::unix::process::CommandExt,
    path::Path,
    process::{Command, Stdio},
};

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The blocks marked `KIND STEP` (`node` or `machine`): each a page, a line and a body.
pub fn blocks(kind: &str, step: &str) -> Vec<Value> {
    let out = Command::new("python3")
        .arg(Path::new(ROOT).join("scripts/check-commands.py"))
        .args([format!("--{kind}"), step.to_string()])
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "check-commands.py --{kind} {step}");
    let blocks: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!blocks.is_empty(), "no block is marked `{kind} {step}`");
    blocks
}

/// What a block's trailing comments quote (`# "ok"`; a trailing `...` left out): texts its
/// output must hold.
pub fn expected(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.split_once("# \"").map(|(_, q)| q))
        .filter_map(|q| q.split_once('"').map(|(q, _)| q))
        .map(|q| q.trim_end_matches("...").to_string())
        .collect()
}

/// Fails naming the block if its output lacks a text a trailing comment quotes.
pub fn assert_expected(block: &Value, body: &str, output: &str) {
    for text in expected(body) {
        assert!(
            output.contains(&text),
            "{}:{}: the output lacks {text:?}",
            block["page"],
            block["line"]
        );
    }
}

/// Runs `bash -e -o pipefail -c SCRIPT` as `bash` (a Command for bash, its environment set)
/// from the repository's root, its stdout and stderr into `log`, in a process group of its
/// own, killed once the script ends (what it left in the background: a port-forward, a
/// server). Fails if the script fails; its output.
pub fn run_script(mut bash: Command, script: &str, log: &Path) -> String {
    let file = std::fs::File::create(log).unwrap();
    let mut child = bash
        .args(["-e", "-o", "pipefail", "-c", script])
        .current_dir(ROOT)
        .stdin(Stdio::null())
        // One open file for both (a shared offset): two would write over each other.
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .process_group(0)
        .spawn()
        .expect("bash runs");
    let status = child.wait().unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
    let output = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        status.success(),
        "the block failed ({status}):\n{script}\n{output}"
    );
    output
}

/// Runs every block marked `machine STEP`; prints each with its output.
pub fn session(step: &str) {
    let dir = tempfile::tempdir().unwrap();
    for block in blocks("machine", step) {
        let body = block["body"].as_str().unwrap();
        let mut bash = Command::new("bash");
        super::node::without_cargo_env(&mut bash);
        let output = run_script(bash, body, &dir.path().join("block.log"));
        println!(
            "{}:{} (machine {step}):\n{body}\n--- its output:\n{output}",
            block["page"], block["line"]
        );
        assert_expected(&block, body, &output);
    }
}
