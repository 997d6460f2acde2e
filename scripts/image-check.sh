#!/usr/bin/env bash
# Proves the Dockerfile's final stage, for linux/amd64 and linux/arm64, without pulling
# any base image: builds both static musl binaries on the host (scripts/build-static.sh,
# as the Dockerfile's builder does) and checks the SBOM written beside each
# (scripts/check-sbom.sh: the crates the binary links, by cargo tree), builds the final
# stage (read from the Dockerfile, its `COPY --from=builder` lines pointed at the host's
# binary and CA bundle) FROM scratch with buildah for each architecture, checks what each
# image holds and its OCI labels, and runs them: the amd64 image with buildah (--version,
# --check-config, the Deployment's command line with in-cluster credentials, --once
# against an unreachable server and against the kube-apiserver double), the binary taken
# out of the arm64 image under qemu-aarch64-static (--version, --once against the double).
#
#   bash scripts/image-check.sh
#
# Needs: cargo with the x86_64-unknown-linux-musl and aarch64-unknown-linux-musl targets
# (rustup target add), cargo-zigbuild and ziglang (pip), cargo-cyclonedx (.ci/run),
# buildah, qemu-aarch64-static (Debian's qemu-user-static), kubectl, openssl, file,
# python3 with PyYAML, git, and the host's CA bundle (Debian's ca-certificates). Runs as
# root; buildah keeps its storage in a temporary directory (vfs driver, chroot isolation:
# no daemon, no overlay mounts, no user namespaces), removed at the end.
set -euo pipefail

# ---- How a run against an unreachable API server must end. ADJUST HERE. ----------------
# metainit --once against https://127.0.0.1:1 (nothing listens there) retries until its
# --timeout, then gives up and says so: exit 1, well within UNREACHABLE_TIMEOUT. Add 124
# to the codes if it may instead still be retrying when `timeout` stops it. Whatever the
# code, it must not panic and must say something about the connection.
UNREACHABLE_ARGS=(--once --timeout=5s --kubeconfig=/kc)
UNREACHABLE_TIMEOUT=20
UNREACHABLE_EXIT_CODES=(1)
UNREACHABLE_MESSAGE='connect|connection|refused|unreachable|127\.0\.0\.1:1'
# -----------------------------------------------------------------------------------------

cd "$(dirname "$0")/.."
arches=(amd64 arm64)
declare -A rust_target=([amd64]=x86_64-unknown-linux-musl [arm64]=aarch64-unknown-linux-musl)
declare -A file_arch=([amd64]=x86-64 [arm64]=aarch64)
ca_bundle=/etc/ssl/certs/ca-certificates.crt

# shellcheck source=scripts/lib/logging.sh
source scripts/lib/logging.sh
# shellcheck source=scripts/lib/double.sh
source scripts/lib/double.sh
log_init image-check --failed

# cargo-cyclonedx: where .ci/run installs it, if it is not on PATH.
PATH=$PATH:${XDG_CACHE_HOME:-$HOME/.cache}/metainit/tools/bin
for tool in cargo cargo-zigbuild cargo-cyclonedx buildah file ldd readelf python3 timeout qemu-aarch64-static kubectl openssl; do
    command -v "$tool" >/dev/null || die "$tool not found (see .ci/run for the packages)"
done
python3 -c 'import ziglang' 2>/dev/null || die "zig not found (pip install ziglang)"
python3 -c 'import yaml' 2>/dev/null || die "python3 cannot import yaml (pip install kubernetes-validate brings it)"
for arch in "${arches[@]}"; do
    rustup target list --installed 2>/dev/null | grep -qx "${rust_target[$arch]}" \
        || die "Rust target ${rust_target[$arch]} missing (rustup target add ${rust_target[$arch]})"
done
[[ -r $ca_bundle ]] || die "no CA bundle at $ca_bundle (apt-get install ca-certificates)"

# shellcheck source=scripts/lib/image.sh
source scripts/lib/image.sh
version=$(crate_version) || die "cargo metadata"
# What a release build is given (Dockerfile: --build-arg REVISION, --build-arg SOURCE).
# shellcheck source=scripts/lib/revision.sh
source scripts/lib/revision.sh
revision=$(revision)
commit=${revision:0:12}
source_url=$(crate_field repository) || die "cargo metadata"
echo "metainit $version, revision $revision"

tmp=$(mktemp -d)
B=(buildah --root "$tmp/storage" --runroot "$tmp/run" --storage-driver vfs)
cleanup() {
    double_stop
    "${B[@]}" rm --all >/dev/null 2>&1 || true
    "${B[@]}" rmi --all --force >/dev/null 2>&1 || true
    # Never delete through a mount buildah might have left behind.
    if grep -q " $tmp/" /proc/mounts; then
        echo "image-check: left $tmp in place: something is still mounted under it" >&2
    else
        rm -rf --one-file-system "$tmp"
    fi
}
trap cleanup EXIT

declare -A bin_size image_unpacked image_compressed
for arch in "${arches[@]}"; do
    echo "--- building the static binary for linux/$arch (${rust_target[$arch]})"
    bin=$tmp/bin/$arch/metainit
    METAINIT_REVISION=$revision bash scripts/build-static.sh "$arch" "$bin"
    kind=$(file -b "$bin")
    echo "file: $kind"
    [[ $kind == *"static-pie linked"* || $kind == *"statically linked"* ]] \
        || die "$bin is not statically linked"
    [[ $kind == *"${file_arch[$arch]}"* ]] || die "$bin is not an ${file_arch[$arch]} binary"
    # build.rs links with link/hot-text.ld: the code that runs, together at the start.
    [[ $(readelf -SW "$bin") == *" .text.hot "* ]] \
        || die "$bin has no .text.hot section: link/hot-text.ld was not applied (build.rs)"
    if [[ $arch == amd64 ]]; then
        libs=$(ldd "$bin" 2>&1 || true)
        echo "ldd: $libs"
        [[ $libs != *"=>"* ]] || die "$bin loads shared libraries"
    fi
    bash scripts/check-sbom.sh "$arch" "$bin.cdx.json" \
        || die "the $arch SBOM ($bin.cdx.json) is not what the binary links (see above)"
    bin_size[$arch]=$(stat -c %s "$bin")
    echo "binary ($arch): ${bin_size[$arch]} bytes"
    # Both builds are kept, on CI too: the node's image (scripts/node/build.sh) and the
    # release of tests/node.rs (scripts/release.sh) build the same binaries again, cargo's
    # no-op when they are here (removed on CI, tests/node.rs built arm64 again in 3 min 15 s,
    # 2026-12-02; kept, the disk at the suite's end is the same: both were back by then).
done

# The final stage, with each `COPY --from=builder SRC DST` made a COPY from the context
# scripts/lib/image.sh stages. Only the three files the final stage should hold can be
# staged; anything else fails here, so a change to the Dockerfile's final stage cannot slip
# past this check.
mkdir -p "$tmp/context"
python3 scripts/final-stage.py Dockerfile >"$tmp/context/Containerfile" || die "cannot make the final stage from the Dockerfile (see above)"
echo "--- final stage as built here:"
cat "$tmp/context/Containerfile"

# What an image holds, how it starts and what its labels say, from its OCI layout;
# prints the image's user and copies its /metainit to the path given (and its SBOM to
# that path with .cdx.json appended).
inspect() {
    python3 - "$@" <<'PY'
import json, os, re, shutil, sys, tarfile

d, arch, version, revision, source, extract_to = sys.argv[1:7]
def blob(digest):
    return os.path.join(d, "blobs", *digest.split(":"))
index = json.load(open(os.path.join(d, "index.json")))
manifest = json.load(open(blob(index["manifests"][0]["digest"])))
image = json.load(open(blob(manifest["config"]["digest"])))
config = image["config"]
files = {}
sbom = "/usr/share/doc/metainit/metainit.cdx.json"
for layer in manifest["layers"]:
    with tarfile.open(blob(layer["digest"])) as t:
        for m in t.getmembers():
            if m.isdir():
                continue
            name = "/" + re.sub(r"^\./", "", m.name).lstrip("/")
            files[name] = m
            if name in ("/metainit", sbom):
                to = extract_to if name == "/metainit" else extract_to + ".cdx.json"
                with t.extractfile(m) as src, open(to, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            if name == "/metainit":
                os.chmod(extract_to, 0o755)
problems = []
if (image.get("os"), image.get("architecture")) != ("linux", arch):
    problems.append(f"platform {image.get('os')}/{image.get('architecture')}, want linux/{arch}")
want = {"/metainit", sbom, "/etc/ssl/certs/ca-certificates.crt"}
if set(files) != want:
    problems.append(f"image files {sorted(files)}, want only {sorted(want)}")
if "/metainit" in files and not files["/metainit"].mode & 0o111:
    problems.append("/metainit is not executable")
if config.get("Entrypoint") != ["/metainit"]:
    problems.append(f"ENTRYPOINT {config.get('Entrypoint')}, want [\"/metainit\"] (exec form)")
user = config.get("User", "")
if user.split(":")[0] in ("", "0", "root"):
    problems.append(f"USER {user!r}: the image must not run as root")
env = dict(e.split("=", 1) for e in config.get("Env", []))
if env.get("SSL_CERT_FILE") not in files:
    problems.append(f"SSL_CERT_FILE={env.get('SSL_CERT_FILE')!r} is not a file in the image")
labels = config.get("Labels") or {}
oci = "org.opencontainers.image."
for key, want_value in (("title", "metainit"), ("licenses", "Apache-2.0"),
                        ("version", version), ("revision", revision), ("source", source)):
    if labels.get(oci + key) != want_value:
        problems.append(f"label {oci}{key}={labels.get(oci + key)!r}, want {want_value!r}")
if problems:
    sys.exit(f"image ({arch}): " + "; ".join(problems))
size = sum(l["size"] for l in manifest["layers"]) + manifest["config"]["size"]
print(user, size)
print(f"image ({arch}) holds {sorted(files)}; USER {user}; ENTRYPOINT {config['Entrypoint']}; "
      f"labels {json.dumps({k: v for k, v in labels.items() if k.startswith(oci)})}; "
      f"{size / 1e6:.2f} MB compressed", file=sys.stderr)
PY
}

user=
for arch in "${arches[@]}"; do
    echo "--- building the linux/$arch image"
    image_build "$arch" "$tmp/bin/$arch/metainit" "localhost/metainit-image-check:$arch" \
        "$tmp/stage-$arch" "$version" "$revision" "$source_url" \
        || die "the $arch image did not build (see above)"
    "${B[@]}" push --quiet "localhost/metainit-image-check:$arch" "oci:$tmp/oci-$arch" >/dev/null
    read -r user "image_compressed[$arch]" < <(inspect "$tmp/oci-$arch" "$arch" "$version" \
        "$revision" "$source_url" "$tmp/from-image-$arch") \
        || die "the $arch image is not what the Dockerfile's final stage should make (see above)"
    cmp -s "$tmp/from-image-$arch" "$tmp/bin/$arch/metainit" \
        || die "the $arch image's /metainit is not the binary built for $arch"
    cmp -s "$tmp/from-image-$arch.cdx.json" "$tmp/bin/$arch/metainit.cdx.json" \
        || die "the $arch image's SBOM is not the one checked for $arch's binary"
    image_unpacked[$arch]=$("${B[@]}" images --format '{{.Size}}' "localhost/metainit-image-check:$arch")
    echo "image size ($arch): ${image_unpacked[$arch]} (unpacked)"
done

# The kube-apiserver double, as Kubernetes 1.33, for --once runs that have something to do.
echo "--- starting the kube-apiserver double"
double_kc=$tmp/context/double.kubeconfig
double_start "$double_kc" modern
k() { kubectl --kubeconfig "$double_kc" "$@"; }

# gated_pods PREFIX: a labelled and an unlabelled pod, each held by a scheduling gate.
gated_pods() {
    local name labels
    for name in "$1-labelled" "$1-unlabelled"; do
        labels="app: image-check"
        [[ $name == *-labelled ]] && labels+=$'\n    k8s.opsani.io/initializer: "true"'
        k create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  labels:
    $labels
spec:
  schedulingGates:
  - name: example.com/quota
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10
EOF
    done
}
# cleared PREFIX: the labelled pod has no gates left and the unlabelled one keeps its own.
cleared() {
    local labelled unlabelled
    labelled=$(k get pod "$1-labelled" -o jsonpath='{.spec.schedulingGates}')
    unlabelled=$(k get pod "$1-unlabelled" -o jsonpath='{.spec.schedulingGates[*].name}')
    echo "gates now: $1-labelled: ${labelled:-none}; $1-unlabelled: ${unlabelled:-none}"
    [[ -z $labelled ]] || die "$1: the labelled pod still has its gates: $labelled"
    [[ $unlabelled == example.com/quota ]] || die "$1: the unlabelled pod's gates changed: $unlabelled"
}

# A test image on top of the amd64 one: a kubeconfig for a server where nothing listens,
# readable by the image's user (as a dedicated metainit.conf on the node would be) and
# naming no CA, so the client has to load the image's CA bundle; the double's
# kubeconfig; and the files a service account's token volume gives a pod.
cat >"$tmp/context/kubeconfig" <<'EOF'
apiVersion: v1
kind: Config
clusters:
- name: unreachable
  cluster:
    server: https://127.0.0.1:1
users:
- name: metainit
  user:
    token: image-check
contexts:
- name: unreachable
  context:
    cluster: unreachable
    user: metainit
current-context: unreachable
EOF
sa=$tmp/context/serviceaccount
mkdir -p "$sa"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=kubernetes \
    -keyout "$tmp/sa-ca.key" -out "$sa/ca.crt" 2>/dev/null
printf 'image-check-token' >"$sa/token"
printf 'kube-system' >"$sa/namespace"
tested=localhost/metainit-image-check:test
printf '%s\n' "FROM localhost/metainit-image-check:amd64" \
    "COPY --chown=$user kubeconfig /kc" \
    "COPY --chown=$user double.kubeconfig /double.kc" \
    "COPY serviceaccount/ /var/run/secrets/kubernetes.io/serviceaccount/" \
    >"$tmp/context/Containerfile.test"
"${B[@]}" bud --quiet --isolation chroot -f "$tmp/context/Containerfile.test" -t "$tested" "$tmp/context" >/dev/null

# Runs /metainit ARGS... in a fresh container of the test image, as the image's user,
# with the environment in the array run_env, within SECONDS; sets rc and elapsed, output
# in $tmp/out and $tmp/err. buildah reports the program's exit status as its own, but a
# death by signal (a panic aborts: panic=abort) as exit 1 with "subprocess exited on
# <signal>" on stderr: see no_crash.
run_env=()
run() {
    local seconds=$1 ctr start e
    shift
    ctr=$("${B[@]}" from --quiet "$tested")
    for e in "${run_env[@]}"; do "${B[@]}" config --env "$e" "$ctr"; done
    start=$SECONDS
    set +e
    timeout -k 5 "$seconds" "${B[@]}" run --isolation chroot "$ctr" -- /metainit "$@" \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    set -e
    elapsed=$((SECONDS - start))
    "${B[@]}" rm "$ctr" >/dev/null
    echo "--- amd64 image: /metainit $* -> exit $rc after ${elapsed}s"
    sed 's/^/    /' "$tmp/out" "$tmp/err" | tail -n 20
}
# As run, for the binary taken out of the arm64 image, under qemu-aarch64-static on the host.
run_arm64() {
    local seconds=$1 start
    shift
    start=$SECONDS
    set +e
    env -i PATH="$PATH" HOME="$tmp/home" SSL_CERT_FILE="$ca_bundle" \
        timeout -k 5 "$seconds" qemu-aarch64-static "$tmp/from-image-arm64" "$@" \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    set -e
    elapsed=$((SECONDS - start))
    echo "--- arm64 binary under qemu-aarch64-static: metainit $* -> exit $rc after ${elapsed}s"
    sed 's/^/    /' "$tmp/out" "$tmp/err" | tail -n 20
}
no_crash() {
    if grep -q panicked "$tmp/out" "$tmp/err"; then die "$1: panicked"; fi
    if ((rc != 124)) && grep -q "subprocess exited on" "$tmp/err"; then
        die "$1: killed by a signal ($(grep -o 'subprocess exited on .*' "$tmp/err" | head -n1))"
    fi
    if ((rc > 128 && rc != 124)); then die "$1: killed by signal $((rc - 128))"; fi
}
mkdir -p "$tmp/home"

for runner in run run_arm64; do
    $runner 10 --version
    no_crash "--version"
    ((rc == 0)) || die "--version exited $rc"
    grep -qx "metainit $version (commit $commit)" "$tmp/out" \
        || die "--version did not print \"metainit $version (commit $commit)\""
done

run 10 --check-config --kubeconfig=/kc
no_crash "--check-config"
((rc == 0)) || die "--check-config exited $rc (want 0)"
grep -q "configuration OK" "$tmp/out" "$tmp/err" || die "--check-config did not print \"configuration OK\""

# The Deployment's command line (manifests/deployment, as rendered), in a pod's
# environment: no kubeconfig, the service account's files, the API server's address in
# the variables the kubelet sets. It must accept the in-cluster configuration.
# shellcheck disable=SC2016 # Python's text, and $(NODE_NAME), $(POD_NAMESPACE) the manifest's own
mapfile -t deploy_args < <(kubectl kustomize manifests/deployment | python3 -c '
import sys, yaml
dep = [d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "Deployment"][0]
c = dep["spec"]["template"]["spec"]["containers"][0]
argv = c.get("command", []) + c.get("args", [])
stand_ins = {"$(NODE_NAME)": "image-check-node", "$(POD_NAMESPACE)": "kube-system"}
for k, v in stand_ins.items():
    argv = [a.replace(k, v) for a in argv]
print("\n".join(argv[1:]))
') || die "cannot read the Deployment's command line"
run_env=(KUBERNETES_SERVICE_HOST=10.96.0.1 KUBERNETES_SERVICE_PORT=443)
run 10 "${deploy_args[@]}" --check-config
run_env=()
no_crash "the Deployment's command line"
if ((rc != 0)) || ! grep -q "configuration OK" "$tmp/out"; then
    die "the Deployment's command line with in-cluster credentials exited $rc (want 0, \"configuration OK\")"
fi

run "$UNREACHABLE_TIMEOUT" "${UNREACHABLE_ARGS[@]}"
no_crash "--once against an unreachable server"
[[ " ${UNREACHABLE_EXIT_CODES[*]} " == *" $rc "* ]] \
    || die "--once against an unreachable server exited $rc, want one of: ${UNREACHABLE_EXIT_CODES[*]}"
if grep -qi "no CA certificates" "$tmp/out" "$tmp/err"; then
    die "--once: the client found no CA certificates (is SSL_CERT_FILE / the CA bundle in the image?)"
fi
grep -Eqi "$UNREACHABLE_MESSAGE" "$tmp/out" "$tmp/err" \
    || die "--once against an unreachable server said nothing about the connection"

# --once against the double: the labelled pod's gate goes, the unlabelled pod's stays.
gated_pods amd64
run 60 --once --timeout=30s --kubeconfig=/double.kc
no_crash "amd64 --once against the double"
((rc == 0)) || die "amd64 --once against the double exited $rc (want 0)"
cleared amd64

gated_pods arm64
run_arm64 60 --once --timeout=30s --kubeconfig="$double_kc"
no_crash "arm64 --once against the double"
((rc == 0)) || die "arm64 --once against the double exited $rc (want 0)"
cleared arm64

echo "--- sizes"
for arch in "${arches[@]}"; do
    awk -v a="$arch" -v b="${bin_size[$arch]}" -v u="${image_unpacked[$arch]}" \
        -v c="${image_compressed[$arch]}" 'BEGIN {
            printf "linux/%s: binary %d bytes (%.2f MiB); image %s unpacked, %d bytes (%.2f MB) compressed\n",
                a, b, b / 1048576, u, c, c / 1e6
        }'
done
# The bounds BENCHMARKS.md, "Image sizes by architecture" states: a binary over 10 MiB or an
# image over 5 MB compressed fails.
max_binary=$((10 * 1048576)) max_compressed=5000000
for arch in "${arches[@]}"; do
    ((bin_size[$arch] <= max_binary)) \
        || die "the $arch binary is ${bin_size[$arch]} bytes, over the bound of $max_binary (BENCHMARKS.md, image sizes)"
    ((image_compressed[$arch] <= max_compressed)) \
        || die "the $arch image is ${image_compressed[$arch]} bytes compressed, over the bound of $max_compressed (BENCHMARKS.md, image sizes)"
done
echo "image-check: OK (metainit $version, commit $commit, linux/amd64 and linux/arm64)"
