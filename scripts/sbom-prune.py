"""Keeps, in cargo-cyclonedx's SBOM of metainit, only the crates compiled into the binary
(scripts/build-static.sh runs it):

    python3 scripts/sbom-prune.py CDX METADATA > metainit.cdx.json

CDX: cargo-cyclonedx's CycloneDX JSON for the release target (normal dependencies, no
build-dependencies). METADATA: `cargo metadata --format-version 1`. cargo-cyclonedx also
lists proc-macros and what only they use: the compiler runs them while building, on the
build machine, and none of their code is in the binary. This walks the SBOM's own
dependency graph from metainit and stops at each proc-macro crate (a crate whose library
target cargo metadata says is a proc-macro), so proc-macros, and crates only they reach, go
(from components and from dependencies); nothing else changes. Whether what is left is
what the binary links is scripts/check-sbom.sh's question, answered from cargo tree.
"""
import json, sys


def proc_macros(metadata):
    return {(p["name"], p["version"]) for p in metadata["packages"]
            if any("proc-macro" in t["kind"] for t in p["targets"])}


def main(cdx_path, metadata_path):
    with open(cdx_path) as f:
        bom = json.load(f)
    with open(metadata_path) as f:
        macros = proc_macros(json.load(f))
    by_ref = {c["bom-ref"]: c for c in bom.get("components", [])}
    edges = {d["ref"]: d.get("dependsOn", []) for d in bom.get("dependencies", [])}
    root = bom["metadata"]["component"]["bom-ref"]
    keep, todo = {root}, [root]
    while todo:
        for ref in edges.get(todo.pop(), []):
            c = by_ref.get(ref)
            if ref in keep or (c and (c["name"], c["version"]) in macros):
                continue
            keep.add(ref)
            todo.append(ref)
    bom["components"] = [c for c in bom.get("components", []) if c["bom-ref"] in keep]
    bom["dependencies"] = [
        {**d, "dependsOn": [r for r in d.get("dependsOn", []) if r in keep]}
        for d in bom.get("dependencies", []) if d["ref"] in keep
    ]
    json.dump(bom, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: sbom-prune.py CDX METADATA")
    main(sys.argv[1], sys.argv[2])
