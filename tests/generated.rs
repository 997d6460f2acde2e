//! The files generated from the command line's one clap tree and checked in: the shells'
//! completion scripts (`completions/`, what `metainit completions SHELL` writes) and the
//! man pages (`docs/man/`, clap_mangen). Each is regenerated and compared; a difference
//! fails with the command that rewrites them. Every long flag of every (sub)command must
//! be in each completion script and in its command's man page, and bash must complete one.
//! README's "Tested on" table, too, is generated: from scripts/matrix.sh's records.

use std::{path::PathBuf, process::Command};

use clap::CommandFactory;

const BLESS: &str = "METAINIT_BLESS";
const RUN: &str = "run METAINIT_BLESS=1 cargo test --test generated, and commit the result";

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Compares (or with METAINIT_BLESS=1 writes) each generated file with the checked-in one.
fn check(files: &[(PathBuf, Vec<u8>)]) {
    let bless = std::env::var_os(BLESS).is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (path, want) in files {
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, want).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            continue;
        }
        match std::fs::read(path) {
            Ok(have) if &have == want => {}
            Ok(_) => stale.push(format!("{} differs from the command line", path.display())),
            Err(e) => stale.push(format!("{} cannot be read ({e})", path.display())),
        }
    }
    assert!(stale.is_empty(), "{}: {RUN}", stale.join("; "));
}

/// The completion scripts, as the binary writes them.
fn completions() -> Vec<(&'static str, PathBuf, Vec<u8>)> {
    ["bash", "zsh", "fish"]
        .into_iter()
        .map(|shell| {
            let out = Command::new(env!("CARGO_BIN_EXE_metainit"))
                .args(["completions", shell])
                .output()
                .expect("metainit runs");
            assert!(
                out.status.success(),
                "metainit completions {shell}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            (
                shell,
                repo(&format!("completions/metainit.{shell}")),
                out.stdout,
            )
        })
        .collect()
}

/// The tree the man pages describe: the crate's version without the commit (which
/// would make every commit's pages differ), no `help` subcommand (as clap_mangen's own
/// `generate_to`).
fn tree() -> clap::Command {
    let mut cmd = metainit::cli::Cli::command()
        .version(env!("CARGO_PKG_VERSION"))
        .disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Every (sub)command, with its man page's file name and text.
fn man_pages() -> Vec<(clap::Command, PathBuf, Vec<u8>)> {
    fn walk(cmd: &clap::Command, out: &mut Vec<(clap::Command, PathBuf, Vec<u8>)>) {
        let man = clap_mangen::Man::new(cmd.clone());
        let mut text = Vec::new();
        man.render(&mut text).expect("man page renders");
        out.push((
            cmd.clone(),
            repo(&format!("docs/man/{}", man.get_filename())),
            text,
        ));
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, out);
        }
    }
    let mut out = Vec::new();
    walk(&tree(), &mut out);
    out
}

/// The long flags of a command, as `--name`, shown ones only.
fn long_flags(cmd: &clap::Command) -> Vec<String> {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect()
}

#[test]
fn completion_scripts_are_up_to_date() {
    let files = completions();
    check(
        &files
            .iter()
            .map(|(_, p, t)| (p.clone(), t.clone()))
            .collect::<Vec<_>>(),
    );
}

#[test]
fn man_pages_are_up_to_date() {
    let pages = man_pages();
    check(
        &pages
            .iter()
            .map(|(_, p, t)| (p.clone(), t.clone()))
            .collect::<Vec<_>>(),
    );
    // A page of a subcommand that is gone is stale too.
    let made: Vec<&PathBuf> = pages.iter().map(|(_, p, _)| p).collect();
    let extra: Vec<String> = std::fs::read_dir(repo("docs/man"))
        .expect("docs/man")
        .map(|e| e.unwrap().path())
        .filter(|p| !made.contains(&p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        extra.is_empty(),
        "{} generated from no command: delete them",
        extra.join(", ")
    );
}

#[test]
fn every_long_flag_is_in_each_completion_script_and_its_man_page() {
    let pages = man_pages();
    assert!(
        pages.len() >= 4,
        "the tree has metainit, status, probe, completions"
    );
    let scripts = completions();
    let mut missing = Vec::new();
    for (cmd, page, text) in &pages {
        let man = String::from_utf8_lossy(text);
        for flag in long_flags(cmd) {
            // roff writes each '-' as '\-'.
            if !man.contains(&flag.replace('-', "\\-")) {
                missing.push(format!(
                    "{flag} of {} not in {}",
                    cmd.get_name(),
                    page.display()
                ));
            }
            for (shell, path, script) in &scripts {
                let script = String::from_utf8_lossy(script);
                let name = &flag[2..];
                let found = match *shell {
                    "fish" => script.contains(&format!("-l {name}")),
                    _ => script.contains(&flag),
                };
                if !found {
                    missing.push(format!(
                        "{flag} of {} not in {}",
                        cmd.get_name(),
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(missing.is_empty(), "{}: {RUN}", missing.join("; "));
}

#[test]
fn bash_completes_a_subcommands_flag() {
    // Sourced as bash-completion would, then asked what follows `metainit status --all-`.
    let script = repo("completions/metainit.bash");
    let probe = format!(
        "source '{}'; COMP_WORDS=(metainit status --all-); COMP_CWORD=2; \
         _metainit metainit --all- status; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let out = Command::new("bash")
        .args(["-c", &probe])
        .output()
        .expect("bash runs");
    let words = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && words.lines().any(|w| w == "--all-namespaces"),
        "bash did not complete --all-namespaces (exit {:?}): {words}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// README's "Tested on" table is what scripts/matrix-table.py renders from the records
/// scripts/matrix.sh wrote (tests/matrix/*.tsv), one per pinned minor: never typed.
#[test]
fn the_tested_on_table_is_rendered_from_the_matrix_records() {
    let pinned: Vec<String> = std::fs::read_dir(repo("tests/control-plane"))
        .expect("tests/control-plane")
        .filter_map(|e| {
            let e = e.ok()?;
            e.path()
                .join("go.mod")
                .is_file()
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    assert!(
        !pinned.is_empty(),
        "no minor pinned under tests/control-plane"
    );
    let mut records = Vec::new();
    for minor in &pinned {
        let record = repo(&format!("tests/matrix/{minor}.tsv"));
        assert!(
            record.is_file(),
            "{minor} is pinned but has no record: run `bash scripts/matrix.sh --write {minor}`"
        );
        records.push(record);
    }
    let out = Command::new("python3")
        .arg(repo("scripts/matrix-table.py"))
        .arg("--check")
        .arg(repo("README.md"))
        .args(&records)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
