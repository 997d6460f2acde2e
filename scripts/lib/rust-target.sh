# shellcheck shell=bash
# The Rust target of a release architecture (Docker's TARGETARCH): the one mapping that
# scripts/build-static.sh (which builds for it) and scripts/check-sbom.sh (which checks
# its SBOM against it) share. Sourced.

# rust_target PROG ARCH: prints the target triple, or says ARCH is unsupported and exits 2.
rust_target() {
  case $2 in
  amd64) echo x86_64-unknown-linux-musl ;;
  arm64) echo aarch64-unknown-linux-musl ;;
  *)
    echo "$1: unsupported architecture '$2' (amd64 or arm64)" >&2
    exit 2
    ;;
  esac
}
