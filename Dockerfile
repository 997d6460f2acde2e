# syntax=docker/dockerfile:1
#
# metainit's image: a static musl binary and a CA bundle, nothing else (no shell, no
# libc, no package manager). Build and push, then set the image in
# manifests/metainit.yaml:
#   docker build -t ghcr.io/example/metainit:0.1.0 .
#   docker push ghcr.io/example/metainit:0.1.0
# scripts/image-check.sh builds and runs the final stage below without this builder
# stage (with a binary built on the host), so keep the two in step: it reads the final
# stage from this file and fails on a COPY it does not know how to stage.

# Any Rust at or above the crate's rust-version (Cargo.toml) builds it.
ARG RUST_VERSION=1

FROM rust:${RUST_VERSION}-bookworm AS builder
# musl-tools gives musl-gcc, for the C code in ring (rustls' crypto).
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools=1.2.3-1 \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
# The caches keep downloaded crates and compiled dependencies between builds; the binary
# is copied out of the cached target directory in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --target x86_64-unknown-linux-musl -p metainit \
    && install -D -m 0755 target/x86_64-unknown-linux-musl/release/metainit /out/metainit

FROM scratch
LABEL org.opencontainers.image.title="metainit" \
      org.opencontainers.image.description="Clears pending initializers and scheduling gates on labelled objects, to break bootstrap deadlocks" \
      org.opencontainers.image.licenses="Apache-2.0"
# rustls reads the system's roots from here, for API servers whose kubeconfig names no CA.
COPY --from=builder /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=builder /out/metainit /metainit
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# The uid that owns a dedicated /etc/kubernetes/metainit.conf (manifests/metainit.yaml).
USER 65532:65532
ENTRYPOINT ["/metainit"]
