# syntax=docker/dockerfile:1
#
# metainit's image: a static musl binary, its SBOM and a CA bundle, nothing else (no
# shell, no libc, no package manager), for linux/amd64 and linux/arm64. The builder runs
# on the build machine's own platform and cross-compiles for the target's (TARGETARCH) with
# cargo-zigbuild, so an arm64 image needs no emulation to build. Build and push both,
# then set the image in manifests/metainit.yaml or manifests/deployment/kustomization.yaml:
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg SOURCE=https://github.com/metainit/metainit \
#     -t ghcr.io/metainit/metainit:0.1.0 --push .
# VERSION and REVISION become the image's OCI labels, and REVISION the commit that
# `metainit --version` prints (the build context has no .git to read it from).
# scripts/build-image.sh (what docs/src/install/image.md has users run: no base image
# pulled, both platforms pushed, each form set to the digest) and scripts/image-check.sh
# build the final stage below without this builder stage (scripts/lib/image.sh, over
# binaries built on the host by the same scripts/build-static.sh), so keep the two in
# step: they read the final stage from this file and fail on a COPY they do not know how
# to stage.

# Any Rust at or above the crate's rust-version (Cargo.toml) builds it.
ARG RUST_VERSION=1

FROM --platform=$BUILDPLATFORM rust:${RUST_VERSION}-bookworm AS builder
# python3-pip: for zig and cargo-zigbuild, from PyPI (zig is the C compiler and linker
# for ring's C code, and brings musl for both targets). cargo-cyclonedx: the binary's
# SBOM (scripts/build-static.sh), the version .ci/run installs (built from source: minutes,
# once, in this cached layer).
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-pip=23.0.1+dfsg-1 \
    && rm -rf /var/lib/apt/lists/* \
    && pip3 install --no-cache-dir --break-system-packages \
        ziglang==0.17.1 cargo-zigbuild==0.24.0 \
    && rustup target add x86_64-unknown-linux-musl aarch64-unknown-linux-musl \
    && cargo install --locked cargo-cyclonedx --version 0.5.9 \
    && rm -rf /usr/local/cargo/registry
WORKDIR /src
COPY . .
ARG TARGETARCH
ARG REVISION=unknown
# The caches keep downloaded crates and compiled dependencies between builds; the binary
# is copied out of the cached target directory in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    METAINIT_REVISION="$REVISION" bash scripts/build-static.sh "$TARGETARCH" /out/metainit

FROM scratch
ARG VERSION=unknown
ARG REVISION=unknown
ARG SOURCE=
LABEL org.opencontainers.image.title="metainit" \
      org.opencontainers.image.description="Clears pending initializers and scheduling gates on labelled objects, to break bootstrap deadlocks" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}"
# rustls reads the system's roots from here, for API servers whose kubeconfig names no CA.
COPY --from=builder /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=builder /out/metainit /metainit
# The binary's software bill of materials (CycloneDX JSON, the crates linked into it;
# scripts/build-static.sh writes it, scripts/check-sbom.sh checks it), in the image so it
# travels with the binary it describes.
COPY --from=builder /out/metainit.cdx.json /usr/share/doc/metainit/metainit.cdx.json
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# The uid that owns a dedicated /etc/kubernetes/metainit.conf (manifests/metainit.yaml).
USER 65532:65532
ENTRYPOINT ["/metainit"]
