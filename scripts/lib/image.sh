# shellcheck shell=bash
# metainit's image for one architecture, as the Dockerfile's final stage makes it, from a
# static binary built on this machine (scripts/build-static.sh writes BIN and BIN.cdx.json
# beside it) and the machine's CA bundle: FROM scratch, no base image, nothing pulled.
# scripts/build-image.sh (what a user runs), scripts/image-check.sh (CI's checks of it) and
# the node's image (scripts/node/build.sh) all build through it. Sourced.

# image_build ARCH BIN TAG CONTEXT [VERSION REVISION SOURCE]: builds TAG with the caller's
# buildah command line, the array B (its storage flags included); CONTEXT is an empty
# scratch directory it stages the final stage's files in (the caller removes it).
image_build() {
  local arch=$1 bin=$2 tag=$3 context=$4 version=${5:-unknown} revision=${6:-unknown} source=${7:-}
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd) || return
  # One chain: a caller's `|| die` turns errexit off in here.
  mkdir -p "$context" &&
    cp "$bin" "$context/metainit" &&
    cp "$bin.cdx.json" "$context/metainit.cdx.json" &&
    cp /etc/ssl/certs/ca-certificates.crt "$context/ca-certificates.crt" &&
    python3 "$root/scripts/final-stage.py" "$root/Dockerfile" >"$context/Containerfile" &&
    "${B[@]}" build --quiet --isolation chroot --platform "linux/$arch" \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg SOURCE="$source" \
    -f "$context/Containerfile" -t "$tag" "$context" >/dev/null
}

# crate_field KEY: a field of metainit's package in Cargo.toml (version, repository), or of
# its [package.metadata.release] table (release.image, release.charts).
crate_field() {
  cargo metadata --format-version 1 --no-deps --manifest-path \
    "$(dirname "${BASH_SOURCE[0]}")/../../Cargo.toml" | python3 -c '
import json, sys
package = [p for p in json.load(sys.stdin)["packages"] if p["name"] == "metainit"][0]
key = sys.argv[1]
value = package["metadata"]["release"][key[8:]] if key.startswith("release.") else package[key]
print(value)' "$1"
}

# crate_version: metainit's version, from Cargo.toml.
crate_version() {
  crate_field version
}
