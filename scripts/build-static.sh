#!/usr/bin/env bash
# Builds metainit's static musl release binary for one architecture with cargo-zigbuild
# (zig is the C compiler and linker for ring's C code and brings musl for both
# architectures), and copies it to OUT. The Dockerfile's builder stage and
# scripts/image-check.sh both build through this script, so the image CI checks is built
# the way a release is.
#
# It also writes the binary's software bill of materials, CycloneDX 1.5 JSON, beside it
# (target/TRIPLE/release/metainit.cdx.json) and beside OUT (OUT.cdx.json): cargo-cyclonedx
# for the same target, normal dependencies only (no build- or dev-dependencies), then
# scripts/sbom-prune.py drops the proc-macros and what only they use (they run in the
# compiler, nothing of them is linked). scripts/check-sbom.sh checks it against cargo tree.
#
#   bash scripts/build-static.sh ARCH OUT      ARCH: amd64 or arm64 (Docker's TARGETARCH)
#
# Needs: cargo, the Rust target (rustup target add x86_64-unknown-linux-musl
# aarch64-unknown-linux-musl), cargo-zigbuild with zig (pip install ziglang
# cargo-zigbuild), cargo-cyclonedx (cargo install --locked cargo-cyclonedx --version
# 0.5.9, as .ci/run does) and python3. METAINIT_REVISION, if set, is the commit --version
# reports (build.rs).
set -euo pipefail

cd "$(dirname "$0")/.."
arch=${1:?usage: build-static.sh ARCH OUT (ARCH: amd64 or arm64)}
out=${2:?usage: build-static.sh ARCH OUT}

# shellcheck source=scripts/lib/rust-target.sh
source scripts/lib/rust-target.sh
# shellcheck source=scripts/lib/logging.sh
source scripts/lib/logging.sh
log_init build-static
target=$(rust_target build-static "$arch")

# cargo-cyclonedx: where .ci/run installs it, if it is not on PATH.
PATH=$PATH:${XDG_CACHE_HOME:-$HOME/.cache}/metainit/tools/bin
release=${CARGO_TARGET_DIR:-target}/$target/release

build() {
    cargo zigbuild --release --locked --target "$target" -p metainit
    install -D -m 0755 "$release/metainit" "$out"
}

# cargo-cyclonedx writes one SBOM per workspace member, beside each Cargo.toml, under the
# name given; only metainit's (the root package's) is wanted, and none is left behind.
sbom_name=metainit-sbom-$$
sbom_meta=$(mktemp)
cleanup() {
    rm -f "$sbom_meta"
    find . \( -name target -o -name .git \) -prune -o -type f -name "$sbom_name.json" -exec rm -f {} +
}
trap cleanup EXIT
sbom() {
    command -v cargo-cyclonedx >/dev/null || die "cargo-cyclonedx not found (see .ci/run)"
    cargo cyclonedx --quiet --format json --spec-version 1.5 --target "$target" \
        --no-build-deps --override-filename "$sbom_name"
    cargo metadata --locked --format-version 1 >"$sbom_meta"
    python3 scripts/sbom-prune.py "$sbom_name.json" "$sbom_meta" >"$release/metainit.cdx.json"
    install -D -m 0644 "$release/metainit.cdx.json" "$out.cdx.json"
}

build
sbom
