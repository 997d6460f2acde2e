"""Checks a CycloneDX SBOM of metainit's release binary (scripts/build-static.sh writes it)
against the crates cargo says the binary is built from (scripts/check-sbom.sh):

    python3 scripts/check-sbom.py SBOM TREE

SBOM: the CycloneDX JSON. TREE: `cargo tree -p metainit -e normal,no-proc-macro --prefix none
-f '{p}'` for the binary's target, one crate a line ("name vVERSION", then maybe "(path)",
"(proc-macro)", "(*)"). The SBOM must be CycloneDX JSON (bomFormat, specVersion), describe
metainit, and list as components exactly the crates of TREE but metainit itself, each with
the purl pkg:cargo/NAME@VERSION and a license. Prints the count; fails naming what differs.
"""
import json, re, sys

PURL = re.compile(r"pkg:cargo/([A-Za-z0-9_-]+)@([^?#]+)(?:[?#].*)?$")


def tree_crates(path):
    crates = set()
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            if len(words) < 2 or not words[1].startswith("v"):
                sys.exit(f"check-sbom: cannot read cargo tree's line {line.strip()!r}")
            crates.add((words[0], words[1][1:]))
    return crates


def has_license(component):
    for entry in component.get("licenses") or []:
        if entry.get("expression") or (entry.get("license") or {}).get("id") \
                or (entry.get("license") or {}).get("name"):
            return True
    return False


def sbom_crates(bom, problems):
    if bom.get("bomFormat") != "CycloneDX":
        problems.append(f"bomFormat is {bom.get('bomFormat')!r}, want \"CycloneDX\"")
    if not re.fullmatch(r"1\.\d+", str(bom.get("specVersion", ""))):
        problems.append(f"specVersion is {bom.get('specVersion')!r}, want 1.x")
    subject = (bom.get("metadata") or {}).get("component") or {}
    if subject.get("name") != "metainit":
        problems.append(f"metadata.component is {subject.get('name')!r}, want metainit")
    crates = set()
    for c in bom.get("components") or []:
        label = f"{c.get('name')}@{c.get('version')}"
        crates.add((c.get("name"), c.get("version")))
        m = PURL.match(c.get("purl") or "")
        if not m:
            problems.append(f"component {label}: purl {c.get('purl')!r} is not pkg:cargo/NAME@VERSION")
        elif (m.group(1), m.group(2)) != (c.get("name"), c.get("version")):
            problems.append(f"component {label}: purl {c.get('purl')!r} names another crate")
        if not has_license(c):
            problems.append(f"component {label}: no license")
    return crates


def main(sbom_path, tree_path):
    try:
        with open(sbom_path) as f:
            bom = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"check-sbom: {sbom_path}: not readable JSON: {e}")
    problems = []
    listed = sbom_crates(bom, problems)
    linked = {(n, v) for n, v in tree_crates(tree_path) if n != "metainit"}
    fmt = lambda s: ", ".join(f"{n}@{v}" for n, v in sorted(s))
    if linked - listed:
        problems.append(f"built into the binary but not in the SBOM: {fmt(linked - listed)}")
    if listed - linked:
        problems.append(f"in the SBOM but not built into the binary: {fmt(listed - linked)}")
    if problems:
        sys.exit(f"check-sbom: {sbom_path}:\n  " + "\n  ".join(problems))
    print(f"check-sbom: {sbom_path}: CycloneDX {bom['specVersion']}, {len(listed)} crates, "
          "each with its purl and license, as cargo tree lists them")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: check-sbom.py SBOM TREE")
    main(sys.argv[1], sys.argv[2])
