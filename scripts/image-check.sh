#!/usr/bin/env bash
# Proves the Dockerfile's final stage without pulling any base image: builds the static
# musl binary on the host, builds the final stage (read from the Dockerfile, its
# `COPY --from=builder` lines pointed at the host's binary and CA bundle) FROM scratch
# with buildah, checks what the image holds, and runs it.
#
#   bash scripts/image-check.sh
#
# Needs: cargo with the x86_64-unknown-linux-musl target (rustup target add), musl-tools,
# buildah, file, python3, and the host's CA bundle (Debian's ca-certificates). Runs as
# root; buildah keeps its storage in a temporary directory (vfs driver, chroot
# isolation: no daemon, no overlay mounts, no user namespaces), removed at the end.
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
target=x86_64-unknown-linux-musl
ca_bundle=/etc/ssl/certs/ca-certificates.crt

die() {
    echo "image-check: FAILED: $*" >&2
    exit 1
}

for tool in cargo buildah file ldd python3 timeout musl-gcc; do
    command -v "$tool" >/dev/null || die "$tool not found (see .ci/run for the packages)"
done
rustup target list --installed 2>/dev/null | grep -qx "$target" \
    || die "Rust target $target missing (rustup target add $target)"
[[ -r $ca_bundle ]] || die "no CA bundle at $ca_bundle (apt-get install ca-certificates)"

echo "--- building the static binary"
cargo build --release --locked --target "$target" -p metainit
meta=$(cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
m = json.load(sys.stdin)
v = [p["version"] for p in m["packages"] if p["name"] == "metainit"]
print(m["target_directory"], v[0])
') || die "cargo metadata"
read -r target_dir version <<<"$meta"
bin=$target_dir/$target/release/metainit
[[ -x $bin ]] || die "cargo did not leave a binary at $bin"

kind=$(file -b "$bin")
echo "file: $kind"
[[ $kind == *"static-pie linked"* || $kind == *"statically linked"* ]] \
    || die "$bin is not statically linked"
libs=$(ldd "$bin" 2>&1 || true)
echo "ldd: $libs"
[[ $libs != *"=>"* ]] || die "$bin loads shared libraries"
echo "binary: $(du -h "$bin" | cut -f1)"

tmp=$(mktemp -d)
B=(buildah --root "$tmp/storage" --runroot "$tmp/run" --storage-driver vfs)
final=localhost/metainit-image-check:final
tested=localhost/metainit-image-check:test
cleanup() {
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

# The final stage, with each `COPY --from=builder SRC DST` made a COPY from this context.
# Only the two files the final stage should hold can be staged; anything else fails here,
# so a change to the Dockerfile's final stage cannot slip past this check.
mkdir -p "$tmp/context"
cp "$bin" "$tmp/context/metainit"
cp "$ca_bundle" "$tmp/context/ca-certificates.crt"
python3 - Dockerfile >"$tmp/context/Containerfile" <<'PY' || die "cannot make the final stage from the Dockerfile (see above)"
import re, shlex, sys

staged = {  # builder path -> file in the context
    "/out/metainit": "metainit",
    "/etc/ssl/certs/ca-certificates.crt": "ca-certificates.crt",
}
with open(sys.argv[1]) as f:
    text = f.read()
# Instructions: comments dropped, continuation lines joined.
lines = [l for l in text.splitlines() if not l.lstrip().startswith("#")]
instructions = [i.strip() for i in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines() if i.strip()]
starts = [n for n, i in enumerate(instructions) if i.split()[0].upper() == "FROM"]
if not starts:
    sys.exit("Dockerfile: no FROM")
stage = instructions[starts[-1]:]
if stage[0].split()[1].lower() != "scratch":
    sys.exit(f"Dockerfile: the final stage is not FROM scratch: {stage[0]}")
out = ["FROM scratch"]
for ins in stage[1:]:
    word = ins.split()[0].upper()
    if word in ("COPY", "ADD"):
        args = shlex.split(ins)[1:]
        flags = [a for a in args if a.startswith("--")]
        paths = [a for a in args if not a.startswith("--")]
        if not any(f.startswith("--from=") for f in flags):
            sys.exit(f"Dockerfile: the final stage copies from the build context: {ins}")
        *sources, dest = paths
        for s in sources:
            if s not in staged:
                sys.exit(f"Dockerfile: image-check.sh cannot stage {s} (from: {ins})")
        flags = [f for f in flags if not f.startswith("--from=") and not f.startswith("--link")]
        out.append(" ".join(["COPY", *flags, *(staged[s] for s in sources), dest]))
    elif word in ("RUN", "ONBUILD"):
        sys.exit(f"Dockerfile: {word} in a FROM scratch stage: {ins}")
    else:
        out.append(ins)
print("\n".join(out))
PY
echo "--- final stage as built here:"
cat "$tmp/context/Containerfile"
"${B[@]}" bud --quiet --isolation chroot -f "$tmp/context/Containerfile" -t "$final" "$tmp/context" >/dev/null

# What the image holds and how it starts, from its OCI layout.
"${B[@]}" push --quiet "$final" "oci:$tmp/oci" >/dev/null
user=$(python3 - "$tmp/oci" <<'PY'
import json, os, re, sys, tarfile

d = sys.argv[1]
def blob(digest):
    return os.path.join(d, "blobs", *digest.split(":"))
index = json.load(open(os.path.join(d, "index.json")))
manifest = json.load(open(blob(index["manifests"][0]["digest"])))
config = json.load(open(blob(manifest["config"]["digest"])))["config"]
files = {}
for layer in manifest["layers"]:
    with tarfile.open(blob(layer["digest"])) as t:
        files.update({"/" + re.sub(r"^\./", "", m.name).lstrip("/"): m
                      for m in t.getmembers() if not m.isdir()})
problems = []
want = {"/metainit", "/etc/ssl/certs/ca-certificates.crt"}
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
if problems:
    sys.exit("image: " + "; ".join(problems))
size = sum(l["size"] for l in manifest["layers"]) + manifest["config"]["size"]
print(user, file=sys.stdout)
print(f"image holds {sorted(files)}; USER {user}; ENTRYPOINT {config['Entrypoint']}; "
      f"{size / 1e6:.1f} MB compressed", file=sys.stderr)
PY
) || die "the image is not what the Dockerfile's final stage should make (see above)"
echo "image size: $("${B[@]}" images --format '{{.Size}}' "$final") (unpacked)"

# A test image on top: a kubeconfig for a server where nothing listens, readable by the
# image's user (as a dedicated metainit.conf on the node would be) and naming no CA, so
# the client has to load the image's CA bundle.
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
printf 'FROM %s\nCOPY --chown=%s kubeconfig /kc\n' "$final" "$user" >"$tmp/context/Containerfile.test"
"${B[@]}" bud --quiet --isolation chroot -f "$tmp/context/Containerfile.test" -t "$tested" "$tmp/context" >/dev/null

# Runs /metainit ARGS... in a fresh container of the test image, as the image's user, within
# SECONDS; sets rc and elapsed, output in $tmp/out and $tmp/err. buildah reports the
# program's exit status as its own, but a death by signal (a panic aborts: panic=abort)
# as exit 1 with "subprocess exited on <signal>" on stderr: see no_crash.
run() {
    local seconds=$1 ctr start
    shift
    ctr=$("${B[@]}" from --quiet "$tested")
    start=$SECONDS
    set +e
    timeout -k 5 "$seconds" "${B[@]}" run --isolation chroot "$ctr" -- /metainit "$@" \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    set -e
    elapsed=$((SECONDS - start))
    "${B[@]}" rm "$ctr" >/dev/null
    echo "--- /metainit $* -> exit $rc after ${elapsed}s"
    sed 's/^/    /' "$tmp/out" "$tmp/err" | tail -n 20
}
no_crash() {
    if grep -q panicked "$tmp/out" "$tmp/err"; then die "$1: panicked"; fi
    if ((rc != 124)) && grep -q "subprocess exited on" "$tmp/err"; then
        die "$1: killed by a signal ($(grep -o 'subprocess exited on .*' "$tmp/err" | head -n1))"
    fi
}

run 10 --version
no_crash "--version"
((rc == 0)) || die "--version exited $rc"
grep -q "^metainit $version" "$tmp/out" || die "--version did not print \"metainit $version\""

run 10 --check-config --kubeconfig=/kc
no_crash "--check-config"
((rc == 0)) || die "--check-config exited $rc (want 0)"
grep -q "configuration OK" "$tmp/out" "$tmp/err" || die "--check-config did not print \"configuration OK\""

run "$UNREACHABLE_TIMEOUT" "${UNREACHABLE_ARGS[@]}"
no_crash "--once against an unreachable server"
[[ " ${UNREACHABLE_EXIT_CODES[*]} " == *" $rc "* ]] \
    || die "--once against an unreachable server exited $rc, want one of: ${UNREACHABLE_EXIT_CODES[*]}"
if grep -qi "no CA certificates" "$tmp/out" "$tmp/err"; then
    die "--once: the client found no CA certificates (is SSL_CERT_FILE / the CA bundle in the image?)"
fi
grep -Eqi "$UNREACHABLE_MESSAGE" "$tmp/out" "$tmp/err" \
    || die "--once against an unreachable server said nothing about the connection"

echo "image-check: OK (metainit $version, image $("${B[@]}" images --format '{{.Size}}' "$final"))"
