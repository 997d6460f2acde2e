#!/usr/bin/env python3
"""What the pages once said against the code (issue 59), checked so that it does not come
back, where a check can hold it (python3, stdlib only).

    python3 scripts/check-truths.py     # exits 1 naming each problem, file:line

The user pages are README.md, charts/metainit/README.md, docs/src/introduction.md,
docs/src/faq.md, docs/src/troubleshooting.md and docs/src/{install,guides,reference}/*.md.
HTML comments (the `<!-- commands: ... -->` markers) are not text a reader sees, and are
left out. The checks:

1. No page says metainit cannot help (or that neither form helps) when a fail-closed webhook
   is down: `--webhooks` breaks that deadlock for the webhook's own pods.
2. Every `METAINIT_*` variable a user page names is one the command line reads (an
   `env = "..."` of src/cli), and a line that says one is set in the static pod names one
   that manifests/metainit.yaml sets.
3. Every `helm install` a user page shows pins the image by digest (`image.digest=sha256:`,
   or a values file: build-image.sh writes the digest into it), and none sets `image.tag=`.
4. No page says a create held by initializers "never returns"; a sentence about the create
   and the API server's request timeout gives the double's 1.13 figure
   (tests/kube-double/src/status.rs, as 1.13.12's finishRequest), and README.md and
   troubleshooting.md each have one.
5. The "Kubernetes" cells of README's "Choose a form" table and of choose.md, and the rows of
   compatibility.md's table, are what src/discovery/mod.rs decides (initializers, scheduling
   gates, `--webhooks`) and the chart's kubeVersion.
6. A user page states no image or binary size but the bounds scripts/image-check.sh
   enforces: the figures are BENCHMARKS.md's.
7. No user page names the test harness (a `tests/` path, the double, the node story, CI, the
   machines it runs on, a test script, `cargo test`/`cargo bench`) or the jargon "a rank",
   "seen at work"; each links docs/src/developers/how-tested.md at most once, as
   "How this is tested". The sections in PENDING are another change's, and are named, not
   checked, until it lands.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "docs" / "src"
USER_PAGES = [ROOT / "README.md", ROOT / "charts/metainit/README.md", BOOK / "introduction.md",
              BOOK / "faq.md", BOOK / "troubleshooting.md",
              *sorted((BOOK / "install").glob("*.md")), *sorted((BOOK / "guides").glob("*.md")),
              *sorted((BOOK / "reference").glob("*.md"))]
# Rewritten elsewhere (issue 59): checked for the harness once the rewrite lands.
PENDING = {
}
FENCE = re.compile(r"^\s*(```|~~~)")
HARNESS = [
    (re.compile(r"(?<![\w/.-])tests/"), "a tests/ path"),
    (re.compile(r"\bnode story\b", re.I), "the node story"),
    (re.compile(r"\bdouble\b", re.I), "the double"),
    (re.compile(r"\bthese machines\b|\bthe project's machines\b|where metainit is developed", re.I),
     "the machines the tests run on"),
    (re.compile(r"\bCI\b"), "CI"),
    (re.compile(r"scripts/(test|matrix|node|control-plane|image-check|demo-node)\.sh|\.ci/run"),
     "a test script"),
    (re.compile(r"\bcargo (test|bench)\b"), "a test command"),
    (re.compile(r"\ba rank\b|\branked\b|\branks?\s+(the|them)\b", re.I), "jargon ('a rank')"),
    (re.compile(r"\b(seen|saw\b[^.]{0,40}?) at work\b", re.I), "jargon ('seen at work')"),
]
CANNOT_HELP = re.compile(
    r"\b(cannot|can ?not|can't|does not|doesn't|do not|don't|never|neither\b[^.]{0,60}?)\s+helps?\b",
    re.I)
WEBHOOKISH = re.compile(r"webhook|failurePolicy|fail(s|ing)? closed", re.I)
VAR = re.compile(r"METAINIT_[A-Z0-9_]*[A-Z0-9]")
# A line that says a variable is the static pod's ("as in the static pod", "the static pod
# sets", "in the static pod's env").
STATIC_POD_SETS = re.compile(r"(as|set) in the static pod|static pod sets|static pod's `?env", re.I)
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s?(MB|MiB|GB|GiB)\b")
SIZED = re.compile(r"\bimage\b|\bbinary\b|\bcompressed\b", re.I)

problems = []


def rel(path):
    return str(path.relative_to(ROOT))


def problem(path, line, text):
    problems.append(f"{rel(path)}:{line}: {text}")


def read(path):
    return (ROOT / path).read_text() if not isinstance(path, Path) else path.read_text()


def without_comments(text):
    """The text with HTML comments blanked out, line numbers kept."""
    return re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)


def lines(path):
    """(number, line, in a fence) of a page, comments out."""
    fence = None
    for number, line in enumerate(without_comments(path.read_text()).splitlines(), 1):
        m = FENCE.match(line)
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
            yield number, line, True
            continue
        yield number, line, fence is not None


def paragraphs(path):
    """(first line's number, text) of each prose paragraph (fences out; a table's rows each
    a paragraph of their own)."""
    found, start, chunk = [], None, []
    for number, line, fenced in lines(path):
        if fenced or not line.strip() or line.lstrip().startswith("|"):
            if chunk:
                found.append((start, " ".join(chunk)))
            chunk, start = [], None
            if not fenced and line.lstrip().startswith("|"):
                found.append((number, line))
            continue
        if start is None:
            start = number
        chunk.append(line.strip())
    if chunk:
        found.append((start, " ".join(chunk)))
    return found


def sentences(text):
    return re.split(r"(?<=[.;!?])\s+(?=[A-Z(`])", text)


def pending_lines(path):
    """The line numbers of `path` another change owns."""
    owned = set()
    text = path.read_text().splitlines()
    for (page, heading), _ in PENDING.items():
        if rel(path) != page:
            continue
        if heading is None:
            return set(range(1, len(text) + 1))
        inside = False
        for number, line in enumerate(text, 1):
            if line.startswith("## "):
                inside = line.strip() == heading
            if inside:
                owned.add(number)
    return owned


# 1. "cannot help" a fail-closed webhook.
def cannot_help():
    for path in dict.fromkeys(USER_PAGES + sorted(BOOK.rglob("*.md"))):
        for number, para in paragraphs(path):
            for s in sentences(para):
                if WEBHOOKISH.search(s) and CANNOT_HELP.search(s):
                    problem(path, number, "says metainit cannot help a fail-closed webhook that "
                            "is down; --webhooks exempts the webhook's own namespace "
                            f"(docs/src/guides/webhooks.md): {CANNOT_HELP.search(s).group(0)!r}")


# 2. METAINIT_* variables.
def variables():
    read_by_cli = set()
    for rs in (ROOT / "src").rglob("*.rs"):
        read_by_cli |= set(re.findall(r'env\s*=\s*"(METAINIT_[A-Z0-9_]+)"', rs.read_text()))
    if not read_by_cli:
        problem(ROOT / "src/cli", 0, "no env = \"METAINIT_...\" found: the check reads nothing")
    manifest = "\n".join(l for l in (ROOT / "manifests/metainit.yaml").read_text().splitlines()
                         if not l.lstrip().startswith("#"))
    in_static_pod = set(VAR.findall(manifest))
    for path in USER_PAGES:
        for number, line, _ in lines(path):
            for var in VAR.findall(line):
                if var not in read_by_cli:
                    problem(path, number, f"{var}: no flag reads it (src/cli has no env = \"{var}\")")
                elif STATIC_POD_SETS.search(line) and var not in in_static_pod:
                    problem(path, number, f"{var} is tied to the static pod, which does not set it "
                            "(manifests/metainit.yaml)")


# 3. The chart installed by digest (a release's chart from its OCI registry pins it: its default).
def installs_by_digest():
    for path in USER_PAGES:
        command = ""
        for number, line, fenced in lines(path):
            if "image.tag=" in line:
                problem(path, number, "sets image.tag: install by digest (image.digest=sha256:...)")
            if not fenced:
                continue
            command += line.rstrip("\\").strip() + " "
            if line.rstrip().endswith("\\"):
                continue
            if re.search(r"\bhelm (install|upgrade --install)\b", command) and not re.search(
                    r"image\.digest=sha256:|(-f|--values)[ =]\S*values\.yaml"
                    r"|oci://\S+/charts/metainit\b", command):
                problem(path, number, "a helm install that does not pin the image by digest")
            command = ""


# 4. The create held by initializers.
def the_hung_create():
    status = (ROOT / "tests/kube-double/src/status.rs").read_text()
    m = re.search(r'Legacy, true\) => "request did not complete within requested timeout (\d+)s"',
                  status)
    if not m:
        problem(ROOT / "tests/kube-double/src/status.rs", 0, "no 1.13 request timeout found")
        return
    figure = m.group(1)
    for path in USER_PAGES:
        said = False
        for number, para in paragraphs(path):
            if re.search(r"\b(never|does not|doesn't) returns?\b", para, re.I) and \
                    re.search(r"create|initializ", para, re.I):
                problem(path, number, "says a create held by initializers never returns: the "
                        f"API server answers Timeout after {figure} s")
            for quoted in re.findall(r"requested timeout (\d+)s", para):
                if quoted != figure:
                    problem(path, number, f"quotes the timeout as {quoted}s, the API server's is {figure}s")
            for s in sentences(para):
                if re.search(r"create|initializ", s, re.I) and re.search(r"request timeout", s, re.I):
                    for n in re.findall(r"(\d+) ?s\b", s):
                        said = True
                        if n != figure:
                            problem(path, number, f"gives the create's timeout as {n} s, the "
                                    f"API server's is {figure} s")
        if rel(path) in ("README.md", "docs/src/troubleshooting.md") and not said:
            problem(path, 0, "does not say the held create times out after "
                    f"{figure} s (the API server's request timeout)")


# 5. The versions.
def table(path, heading=None):
    """The rows (line number, cells) of the first table of `path` after `heading`."""
    rows, started, seen_heading = [], False, heading is None
    for number, line, fenced in lines(path):
        if not seen_heading:
            seen_heading = line.strip() == heading
            continue
        if not fenced and line.startswith("|"):
            started = True
            if not re.match(r"^\|\s*-", line):
                rows.append((number, [c.strip() for c in line.strip().strip("|").split(" | ")]))
        elif started:
            break
    return rows


def versions():
    code = (ROOT / "src/discovery/mod.rs").read_text()
    init = re.search(r"\(1, (\d+)\.\.=(\d+)\) => Ok\(Mode::Initializers\)", code)
    gates = re.search(r"\(1, (\d+)\.\.\) \| \(2\.\., _\) => Ok\(Mode::SchedulingGates\)", code)
    hooks = re.search(r"fn has_webhook_support[^{]*\{\s*\(major, minor\) >= \(1, (\d+)\)", code)
    chart = re.search(r'^kubeVersion: ">=1\.(\d+)\.0-0"', (ROOT / "charts/metainit/Chart.yaml").read_text(), re.M)
    if not (init and gates and hooks and chart):
        problem(ROOT / "src/discovery/mod.rs", 0, "cannot read the versions the code decides "
                "(mode_of, has_webhook_support, Chart.yaml's kubeVersion): update this check")
        return
    lo, hi, g, w, c = (int(x) for x in (*init.groups(), gates.group(1), hooks.group(1), chart.group(1)))
    daemon = f"1.{lo} to 1.{hi}, 1.{g}+; `--webhooks` from 1.{w}"
    deployment = f"1.{g}+; `--webhooks` from 1.{w}"
    helm = f"1.{c}+ (the chart's `kubeVersion`)"
    readme = ROOT / "README.md"
    rows = table(readme, "## Choose a form")
    column = rows[0][1].index("Kubernetes") if rows and "Kubernetes" in rows[0][1] else None
    if column is None:
        problem(readme, 0, "no Kubernetes column in the table under \"## Choose a form\"")
    else:
        for number, cells in rows[1:]:
            first = cells[0]
            want = (daemon if first.startswith(("static pod", "`metainit --once`")) else
                    deployment if first.startswith("Deployment") else
                    helm if first.startswith("Helm chart") else None)
            if want is not None and cells[column] != want:
                problem(readme, number, f"Kubernetes is {cells[column]!r}; the code says {want!r}")
    choose = BOOK / "install/choose.md"
    row = [r for r in table(choose) if r[1][0] == "Kubernetes"]
    want = [daemon, f"{deployment} (the chart: 1.{c}+, its `kubeVersion`)"]
    if not row or row[0][1][1:] != want:
        problem(choose, row[0][0] if row else 0, f"the Kubernetes row is not {want}")
    compatibility = BOOK / "reference/compatibility.md"
    first = [cells[0] for _, cells in table(compatibility)[1:]]
    want = [f"1.{lo} to 1.{hi}", f"1.{hi + 1} to 1.{w - 1}", f"1.{w} to 1.{g - 1}", f"1.{g} and later"]
    if first != want:
        problem(compatibility, 0, f"the table's Kubernetes column is {first}; the code gives {want}")


# 6. Image sizes.
def sizes():
    script = (ROOT / "scripts/image-check.sh").read_text()
    b = re.search(r"max_binary=\$\(\((\d+) \* 1048576\)\)", script)
    z = re.search(r"max_compressed=(\d+)000000\b", script)
    if not (b and z):
        problem(ROOT / "scripts/image-check.sh", 0, "no max_binary or max_compressed bound found")
        return
    bounds = {(b.group(1), "MiB"), (z.group(1), "MB")}
    for path in USER_PAGES:
        for number, para in paragraphs(path):
            for s in sentences(para):
                if not SIZED.search(s):
                    continue
                for value, unit in SIZE.findall(s):
                    if (value, unit) not in bounds:
                        problem(path, number, f"an image or binary size, {value} {unit}: the "
                                "figures are BENCHMARKS.md's (\"Image sizes by architecture\"); link it")


# 7. The harness.
def front_page_commands(path, line):
    """The README's line giving the test command (and where CI runs it): the front page must."""
    return rel(path) == "README.md" and "`bash scripts/test.sh`" in line


def harness():
    for path in USER_PAGES:
        owned = pending_lines(path)
        text = without_comments(path.read_text())
        # A link's text may run over two lines.
        links = list(re.finditer(r"\[([^\]]*)\]\(\s*[^)]*how-tested\.md[^)]*\)", text))
        for link in links:
            words = " ".join(link.group(1).split())
            if words != "How this is tested":
                problem(path, text.count("\n", 0, link.start()) + 1,
                        f"a link to how-tested.md reads {words!r}, not 'How this is tested'")
        for number, line, _ in lines(path):
            if number in owned or front_page_commands(path, line):
                continue
            for pattern, what in HARNESS:
                m = pattern.search(line)
                if m:
                    problem(path, number, f"names {what} ({m.group(0)!r}): say it in "
                            "docs/src/developers/how-tested.md and link it once")
        if len(links) > 1:
            problem(path, 0, f"{len(links)} links to How this is tested, at most one")


def main():
    for check in (cannot_help, variables, installs_by_digest, the_hung_create, versions, sizes,
                  harness):
        check()
    for (page, heading), why in PENDING.items():
        print(f"check-truths: not checked for the harness yet: {page}"
              f"{', ' + heading if heading else ''} ({why})")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(f"check-truths: {len(problems)} problems")
    print(f"check-truths: ok ({len(USER_PAGES)} user pages)")


if __name__ == "__main__":
    main()
