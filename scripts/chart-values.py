#!/usr/bin/env python3
"""The book's table of the chart's values (docs/src/install/helm.md), made from
charts/metainit/values.yaml (the
defaults and each value's `# --` comment) and values.schema.json (the types), so that it
is never written twice by hand; and the chart's own README (charts/metainit/README.md, what
`helm show readme` prints), made whole from Chart.yaml and the same table.

    python3 scripts/chart-values.py            # prints the table
    python3 scripts/chart-values.py --write    # rewrites it in docs/src/install/helm.md, between
                                               # the markers, and writes charts/metainit/README.md
    python3 scripts/chart-values.py --check    # exits 1 if either is stale

Each value with a `# --` comment right above it (more `#` lines continue it) is a row,
which covers what it holds (resources:); a group without one (image:) is covered by its
own values' rows. A value of the schema left uncovered fails, as does a comment on a key
the schema does not know. Needs python3 with PyYAML.
"""
import json
import re
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "lib"))
from block import cell, check_or_write, split  # noqa: E402
CHART = ROOT / "charts" / "metainit"
PAGE = ROOT / "docs" / "src" / "install" / "helm.md"
CHART_README = CHART / "README.md"
BEGIN = "<!-- chart-values: begin (scripts/chart-values.py --write makes this table) -->"
END = "<!-- chart-values: end -->"
# Helm's own key, set by a parent chart: allowed by the schema, not a setting of ours.
SKIP = {"global"}


def paths_of(schema, prefix=""):
    """Every value the schema names, groups included, as dotted paths with their schema."""
    for name, sub in schema.get("properties", {}).items():
        if not prefix and name in SKIP:
            continue
        yield prefix + name, sub
        if sub.get("type") == "object" and "properties" in sub:
            yield from paths_of(sub, prefix + name + ".")


def comments(text):
    """Each key's `# --` comment, by dotted path. Keys inside lists and maps come out as
    paths the schema does not name, and are ignored by the caller."""
    found, stack, pending = {}, [], None
    for line in text.splitlines():
        if not line.strip():
            pending = None
            continue
        m = re.match(r"^(\s*)# -- (.*)$", line)
        if m:
            pending = [m.group(2).strip()]
            continue
        m = re.match(r"^\s*#\s?(.*)$", line)
        if m:
            if pending is not None:
                pending.append(m.group(1).strip())
            continue
        m = re.match(r"^( *)([A-Za-z0-9_.-]+):", line)
        if not m:
            pending = None
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group(2)))
        if pending is not None:
            found[".".join(k for _, k in stack)] = " ".join(pending)
        pending = None
    return found


def type_of(schema):
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    t = schema.get("type", "any")
    if isinstance(t, list):
        t = " or ".join(t)
    if t == "array":
        return "list of " + type_of(schema.get("items", {}))
    if t == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return "map of " + type_of(extra)
    return t


def default_of(values, path):
    node = values
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(path)
        node = node[key]
    return "`" + json.dumps(node, separators=(",", ":")) + "`"


def table():
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    schema = json.loads((CHART / "values.schema.json").read_text())
    notes = comments(text)
    problems, lines = [], ["| Value | Type | Default | What it does |", "| --- | --- | --- | --- |"]
    known = dict(paths_of(schema))
    for path, sub in known.items():
        # A row for a value with a comment, which covers what it holds; a group without
        # one (image:) is covered by its own values' rows.
        if any(path.startswith(p + ".") for p in notes if p in known):
            continue
        if path not in notes:
            if not (sub.get("type") == "object" and "properties" in sub):
                problems.append(f"{path}: no `# --` comment above it in values.yaml")
            continue
        try:
            default = default_of(values, path)
        except KeyError:
            problems.append(f"{path}: in values.schema.json but not in values.yaml")
            continue
        lines.append(f"| `{path}` | {cell(type_of(sub))} | {cell(default)} | {cell(notes[path])} |")
    for path in notes:
        if path not in known:
            problems.append(f"{path}: a `# --` comment on a key the schema does not know")
    if problems:
        for p in problems:
            print(f"chart-values: charts/metainit/{p}", file=sys.stderr)
        sys.exit(1)
    return "\n".join(lines) + "\n"


def chart_readme(made):
    """The chart's README: what it is, how to install it, its values."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    name, app, version = chart["name"], chart["appVersion"], chart["version"]
    charts = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]["metadata"]["release"]["charts"]
    return f"""<!-- Made by scripts/chart-values.py --write from Chart.yaml and values.yaml: edit those. -->
# {name}

{chart["description"]}

Chart {chart["version"]}, metainit {app}, Kubernetes `{chart["kubeVersion"]}`. Source, issues and
the full documentation: {chart["home"]}.

metainit as a Deployment: it watches the pods that carry its label key
(`k8s.opsani.io/initializer` by default, the value ignored) and removes every scheduling gate
they hold, so that the controllers those gates wait for can start. Label your gate
controllers' pod templates with the key. On control-plane nodes, the static pod form (the
project's `manifests/metainit.yaml`) needs no API objects at all and is the one that can break
a deadlock of the whole control plane.

## Install

From a release: the chart in its OCI registry, its default image that release's, by digest:

<!-- commands: node chart-readme -->
```sh
helm install {name} {charts}/{name} --version {version} -n kube-system --wait
helm test {name} -n kube-system       # every replica's /readyz
```

From a release of your own (the project's `scripts/release.sh`), its `--charts` location; from
a copy of the chart, the image you pushed, by digest: `--set image.repository=REGISTRY/{name}
--set image.digest=sha256:DIGEST`.

`helm uninstall {name} -n kube-system` removes every object the chart made.
`values.schema.json` refuses a key it does not know, so a typo fails the install.

## Values

{made}"""


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("", "--write", "--check"):
        sys.exit(__doc__)
    made = table()
    if not mode:
        sys.stdout.write(made)
        return
    page = PAGE.relative_to(ROOT)
    head, _, tail = split("chart-values", PAGE.read_text(), BEGIN, END, page)
    fix = "python3 scripts/chart-values.py --write"
    check_or_write("chart-values", PAGE, head + made + tail, mode, f"{page}'s table of the chart's values", fix)
    check_or_write("chart-values", CHART_README, chart_readme(made), mode, "charts/metainit/README.md", fix)


if __name__ == "__main__":
    main()
