//! Records the git commit the binary is built from, for `metainit --version` and the
//! `metainit_build_info` metric: `METAINIT_REVISION` if set (an image build, whose
//! context has no `.git`, passes it as a build argument), else `git rev-parse` on the
//! checkout, else "unknown" (a source tarball, or no git installed).

use std::{path::Path, process::Command};

const SHORT: usize = 12;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=METAINIT_REVISION");
    let commit = std::env::var("METAINIT_REVISION")
        .ok()
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty() && r != "unknown")
        .or_else(from_git)
        .map(|c| c.chars().take(SHORT).collect::<String>())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=METAINIT_GIT_COMMIT={commit}");
    hot_text();
    relr();
}

/// Relative relocations packed (DT_RELR, glibc 2.36 and later): a position-independent
/// binary's 14,000 of them took 357 KiB that the loader reads whole at every start, now a
/// few KiB. The static musl build the image ships is not position-independent and has none.
fn relr() {
    let target = |key: &str| std::env::var(key).unwrap_or_default();
    if target("CARGO_CFG_TARGET_OS") == "linux" && target("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// The binary's code that runs, start-up first, placed together at the start of its text
/// by a linker script (written by scripts/hot-text.py; BENCHMARKS.md § Code layout): the
/// kernel maps code in blocks of 64 KiB or more around each page that runs, so code that
/// runs scattered among code that does not made most of the text resident.
/// `METAINIT_HOT_TEXT=0` links without it, to measure what it gives.
fn hot_text() {
    println!("cargo:rerun-if-env-changed=METAINIT_HOT_TEXT");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || std::env::var("METAINIT_HOT_TEXT").as_deref() == Ok("0")
    {
        return;
    }
    let Ok(dir) = std::env::var("CARGO_MANIFEST_DIR") else {
        return;
    };
    let script = Path::new(&dir).join("link").join("hot-text.ld");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
}

/// The checkout's commit; also tells cargo to run this again when HEAD moves.
fn from_git() -> Option<String> {
    // Only this package's own checkout: not a repository that merely contains it.
    let top = git(&["rev-parse", "--show-toplevel"])?;
    let here = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    if Path::new(&top).canonicalize().ok()? != Path::new(&here).canonicalize().ok()? {
        return None;
    }
    let commit = git(&["rev-parse", "--verify", "HEAD"])?;
    // HEAD names the branch; the branch's ref file (or packed-refs) holds the commit. In
    // a worktree these live in different directories: ask git for each path. Only
    // existing files are named: cargo reruns the script every time for a missing one.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])?];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.extend(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.extend(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watched.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
    Some(commit)
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}
