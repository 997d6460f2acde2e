#!/usr/bin/env bash
# Checks the SBOM that scripts/build-static.sh writes beside a release binary: valid
# CycloneDX JSON whose components (name@version, each with its pkg:cargo purl and a
# license) are exactly the crates compiled into the binary, as cargo tree says
# independently of cargo-cyclonedx: metainit's normal dependencies for the binary's
# target, with the features the release build resolves (`-p metainit`: no
# dev-dependencies, no other workspace member), without proc-macros (they run in the
# compiler; -e no-proc-macro) and without metainit itself (the SBOM's subject).
# scripts/image-check.sh runs it on each architecture's SBOM.
#
#   bash scripts/check-sbom.sh ARCH SBOM      ARCH: amd64 or arm64
#
# Needs: cargo, python3.
set -euo pipefail

cd "$(dirname "$0")/.."
arch=${1:?usage: check-sbom.sh ARCH SBOM (ARCH: amd64 or arm64)}
sbom=${2:?usage: check-sbom.sh ARCH SBOM}

# shellcheck source=scripts/lib/rust-target.sh
source scripts/lib/rust-target.sh
# shellcheck source=scripts/lib/logging.sh
source scripts/lib/logging.sh
log_init check-sbom
target=$(rust_target check-sbom "$arch")
[[ -r $sbom ]] || die "no SBOM at $sbom (scripts/build-static.sh writes it)"

tree=$(mktemp)
trap 'rm -f "$tree"' EXIT
cargo tree --locked -p metainit -e normal,no-proc-macro --target "$target" --prefix none -f '{p}' >"$tree"
python3 scripts/check-sbom.py "$sbom" "$tree"
