"""The Dockerfile's final stage as a Containerfile buildah can build from a plain context:
each `COPY --from=builder SRC DST` made a COPY of a file staged in the context (the static
binary as `metainit`, its SBOM as `metainit.cdx.json`, which scripts/build-static.sh writes
beside it, the CA bundle as `ca-certificates.crt`). Only those three files can be staged;
anything else fails, so a change to the final stage cannot slip past the checks that
build it (scripts/image-check.sh, scripts/node.sh).

    python3 scripts/final-stage.py Dockerfile > Containerfile
"""
import re, shlex, sys

staged = {  # builder path -> file in the context
    "/out/metainit": "metainit",
    "/out/metainit.cdx.json": "metainit.cdx.json",
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
