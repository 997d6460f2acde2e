#!/usr/bin/env bash
# Builds metainit's static musl release binary for one architecture with cargo-zigbuild
# (zig is the C compiler and linker for ring's C code and brings musl for both
# architectures), and copies it to OUT. The Dockerfile's builder stage and
# scripts/image-check.sh both build through this script, so the image CI checks is built
# the way a release is.
#
#   bash scripts/build-static.sh ARCH OUT      ARCH: amd64 or arm64 (Docker's TARGETARCH)
#
# Needs: cargo, the Rust target (rustup target add x86_64-unknown-linux-musl
# aarch64-unknown-linux-musl), and cargo-zigbuild with zig (pip install ziglang
# cargo-zigbuild). METAINIT_REVISION, if set, is the commit --version reports (build.rs).
set -euo pipefail

cd "$(dirname "$0")/.."
arch=${1:?usage: build-static.sh ARCH OUT (ARCH: amd64 or arm64)}
out=${2:?usage: build-static.sh ARCH OUT}

case $arch in
amd64) target=x86_64-unknown-linux-musl ;;
arm64) target=aarch64-unknown-linux-musl ;;
*)
    echo "build-static: unsupported architecture '$arch' (amd64 or arm64)" >&2
    exit 2
    ;;
esac

cargo zigbuild --release --locked --target "$target" -p metainit
install -D -m 0755 "${CARGO_TARGET_DIR:-target}/$target/release/metainit" "$out"
