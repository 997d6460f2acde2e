#!/usr/bin/env python3
"""SECURITY.md's table of the rights metainit's manifests grant, made from the manifests
themselves, so that it never says less (or more) than they grant: every rule of every
ClusterRole and Role in manifests/rbac*.yaml and in the kustomization of
manifests/deployment, one row each, with the comment right above the rule in its manifest
as the reason (a rule without one continues the comment before it in the same role: "as
above"; `WHY` below covers a role's first rule when it has none).

    python3 scripts/rights-table.py            # prints the table
    python3 scripts/rights-table.py --write    # rewrites it in SECURITY.md, between the markers
    python3 scripts/rights-table.py --check    # exits 1 if it is stale, showing the difference

Roles with the same kind, namespace and rules are one group of rows naming each of them
(the static pod's `metainit` and the Deployment's `metainit-deployment`). The chart is not
rendered here (that needs helm, which scripts/helm.sh builds from Go): scripts/check-chart.sh
holds its roles to these files (its ClusterRoles' rules are rbac.yaml's and
rbac-webhooks.yaml's; with the defaults it renders what manifests/deployment does, its
Leases Role included). Its `helm test` hook Role (get services, list pods) is the test
pod's, not metainit's, and is left out. Every role in the table must also be named in
SECURITY.md outside it, where the page says what its holder can do. Needs python3 with
PyYAML.
"""
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "lib"))
from block import cell, check_or_write, split  # noqa: E402
MANIFESTS = ROOT / "manifests"
DEPLOYMENT = MANIFESTS / "deployment"
PAGE = ROOT / "SECURITY.md"
BEGIN = "<!-- rights-table: begin (scripts/rights-table.py --write makes this table) -->"
END = "<!-- rights-table: end -->"
KINDS = ("ClusterRole", "Role")
# The reason for a role's first rule when its manifest has no comment above it, by API group
# and resources.
WHY = {
    ("coordination.k8s.io", ("leases",)):
        "Each instance keeps its own Lease (`metainit-NAME`) and lists the others', so that "
        "one PATCH clears each pod; it deletes its own when it stops, and those of instances "
        "long gone.",
}


def documents(path):
    """Each `---` document of a file: its text and the object it holds."""
    for text in re.split(r"(?m)^---\s*$", path.read_text()):
        obj = yaml.safe_load(text)
        if obj:
            yield text, obj


def rule_comments(text, count):
    """The comment right above each item of the object's `rules:` list, in order (None
    where there is none). Fails if the items found are not `count`."""
    comments, pending, inside, indent = [], [], False, None
    for line in text.splitlines():
        if not inside:
            inside = line.rstrip() == "rules:"
            continue
        m = re.match(r"^(\s*)#\s?(.*)$", line)
        if m:
            pending.append(m.group(2).strip())
            continue
        m = re.match(r"^(\s*)- ", line)
        if m and (indent is None or len(m.group(1)) == indent):
            indent = len(m.group(1))
            comments.append(" ".join(pending) or None)
        elif re.match(r"^\S", line):
            break
        pending = []
    if len(comments) != count:
        raise ValueError(f"found {len(comments)} items under rules:, YAML says {count}")
    return comments


def sources():
    """The files metainit's roles are in: manifests/rbac*.yaml, and what
    manifests/deployment's kustomization applies, with the namespace it sets."""
    # rbac.yaml, the one every form needs, first.
    for path in sorted(MANIFESTS.glob("rbac*.yaml"), key=lambda p: (p.name != "rbac.yaml", p.name)):
        yield path, None
    kust = yaml.safe_load((DEPLOYMENT / "kustomization.yaml").read_text())
    for name in kust["resources"]:
        yield DEPLOYMENT / name, kust.get("namespace")


def roles():
    """Every role: (kind, namespace, rules with their reasons, file, name), in file order."""
    found, problems = [], []
    for path, namespace in sources():
        where = path.relative_to(ROOT)
        for text, obj in documents(path):
            if obj.get("kind") not in KINDS:
                continue
            meta = obj["metadata"]
            name = f"{obj['kind']} {meta['name']}"
            ns = (meta.get("namespace") or namespace) if obj["kind"] == "Role" else None
            if obj["kind"] == "Role" and not ns:
                problems.append(f"{where}: {name} has no namespace")
            try:
                notes = rule_comments(text, len(obj.get("rules") or []))
            except ValueError as e:
                problems.append(f"{where}: {name}: {e}")
                continue
            rules = []
            for i, (rule, note) in enumerate(zip(obj["rules"], notes)):
                for group in rule.get("apiGroups") or [""]:
                    key = (group, tuple(rule.get("resources") or []))
                    why = note or WHY.get(key) or ("as above" if i else None)
                    if why is None:
                        problems.append(f"{where}: {name}: no comment above its rule on "
                                        f"{', '.join(key[1])} and none in WHY")
                    rules.append((group, key[1], tuple(rule.get("verbs") or []),
                                  tuple(rule.get("resourceNames") or []), why))
            found.append((obj["kind"], ns, tuple(rules), str(where), meta["name"]))
    if problems:
        for p in problems:
            print(f"rights-table: {p}", file=sys.stderr)
        sys.exit(1)
    return found


def code(items):
    return ", ".join(f"`{i}`" for i in items)


def table():
    """The Markdown table: one row per rule, roles that grant the same rules grouped."""
    groups = {}
    for kind, ns, rules, where, name in roles():
        # The reasons are the manifests' words, not rights: they do not split a group.
        key = (kind, ns, tuple(r[:4] for r in rules))
        groups.setdefault(key, [rules, []])[1].append(f"`{name}` ({where})")
    lines = ["| role (manifest) | scope | API group | resources | verbs | why |",
             "| --- | --- | --- | --- | --- | --- |"]
    for (kind, ns, _), (rules, names) in groups.items():
        scope = "cluster" if kind == "ClusterRole" else f"namespace `{ns}`"
        for i, (group, resources, verbs, only, why) in enumerate(rules):
            who = ", ".join(names) if i == 0 else ""
            api = f"`{group}`" if group else "core"
            what = code(resources) + (f" named {code(only)}" if only else "")
            lines.append(f"| {who} | {scope} | {api} | {what} | "
                         f"{code(verbs)} | {cell(why)} |")
    return "\n".join(lines) + "\n", [n for _, (_, names) in groups.items() for n in names]


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("", "--write", "--check"):
        sys.exit(__doc__)
    made, names = table()
    if not mode:
        sys.stdout.write(made)
        return
    head, inside, tail = split("rights-table", PAGE.read_text(), BEGIN, END, "SECURITY.md")
    unsaid = [n.split("`")[1] for n in names if n.split("`")[1] not in head + tail]
    for n in unsaid:
        said = "SECURITY.md does not say" if mode == "--check" else "now say in SECURITY.md"
        print(f"rights-table: {said} what a holder of `{n}` can do (name the role outside "
              "the table)", file=sys.stderr)
    check_or_write("rights-table", PAGE, head + made + tail, mode, "SECURITY.md's rights table",
                   "python3 scripts/rights-table.py --write")
    if unsaid and mode == "--check":
        sys.exit(1)


if __name__ == "__main__":
    main()
