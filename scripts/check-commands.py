#!/usr/bin/env python3
"""Every shell block the documentation shows is run, or says which test runs its commands.

    python3 scripts/check-commands.py             # the check: exits 1 naming each problem
    python3 scripts/check-commands.py --node ID   # JSON: the blocks marked `node ID`
    python3 scripts/check-commands.py --machine ID   # JSON: the blocks marked `machine ID`

A shell block (```sh, bash, shell or console) in README.md, CONTRIBUTING.md,
charts/metainit/README.md or docs/src/**/*.md has a marker on the line just before its
fence, one of:

    <!-- commands: node ID -->             run on the real node by tests/node.rs (or
                                           tests/node_webhook.rs), at the
                                           step that names "ID" (tests/node_story/docs.rs
                                           runs it: every command must succeed, and a
                                           trailing comment's "quoted text" must be in the
                                           output; the substitutions it makes are listed
                                           there)
    <!-- commands: machine ID -->          a developer's session, run on this machine by
                                           tests/developer_docs.rs at the step that names
                                           "ID" (the same rules, no substitution)
    <!-- commands: FILE [FILE ...] -->     each command line of the block (continuations
                                           joined, trailing comment and repeated spaces
                                           dropped) is in one of these files, as a line
                                           or a part of one: the test, script or CI step
                                           that runs it
    <!-- commands: not run: REASON -->     shown, not run here, and why

It fails on a block without a marker, on a marker it cannot read, on a command line not in
the files its marker names, on a node ID no test names, and on a node step that names no
block. It prints how many blocks each kind covers.
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", "CONTRIBUTING.md", "charts/metainit/README.md"]
SHELL_FENCE = re.compile(r"^(\s*)```(sh|bash|shell|console)\s*$")
MARKER = re.compile(r"^\s*<!--\s*commands:\s*(.*?)\s*-->\s*$")
NODE_STORY = [ROOT / "tests/node.rs", ROOT / "tests/node_webhook.rs",
              *sorted((ROOT / "tests/node_story").glob("*.rs"))]
# Where each kind of run block is run: its files, and how a step there names a block.
RUNNERS = {
    "node": (NODE_STORY, r'docs::run\([^,]+,\s*"([a-z0-9-]+)"'),
    "machine": ([ROOT / "tests/developer_docs.rs", ROOT / "tests/developer_node.rs"],
                r'session\("([a-z0-9-]+)"\)'),
}


def pages():
    found = [ROOT / p for p in PAGES if (ROOT / p).exists()]
    return found + sorted((ROOT / "docs/src").rglob("*.md"))


def blocks():
    """(page, line, marker or None, [lines]) for each shell block."""
    for page in pages():
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = SHELL_FENCE.match(lines[i])
            if m:
                j = i + 1
                while j < len(lines) and not lines[j].strip().startswith("```"):
                    j += 1
                marker = MARKER.match(lines[i - 1]) if i else None
                body = [l[len(m.group(1)):] if l.startswith(m.group(1)) else l.lstrip()
                        for l in lines[i + 1:j]]
                yield page, i + 1, marker.group(1) if marker else None, body
                i = j
            i += 1


def strip_comment(line):
    """The line without a trailing `# comment` (a # outside quotes, after a space)."""
    quote = None
    for k, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (k == 0 or line[k - 1] in " \t"):
            return line[:k].rstrip()
    return line.rstrip()


def commands(body):
    """The block's command lines: comments dropped, continuations joined, spaces collapsed."""
    out, current = [], ""
    for line in body:
        line = strip_comment(line)
        if not line.strip():
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        out.append(" ".join((current + line).split()))
        current = ""
    if current.strip():
        out.append(" ".join(current.split()))
    return out


def normalized(text):
    """A file's text with continuations joined and spaces collapsed, line by line."""
    return [" ".join(l.split()) for l in re.sub(r"\\\n\s*", " ", text).splitlines()]


def check():
    problems = []
    counts = {"node": 0, "machine": 0, "files": 0, "not run": 0, "unmarked": 0}
    ids = {kind: set() for kind in RUNNERS}
    stories = {kind: "\n".join(p.read_text() for p in files if p.exists())
               for kind, (files, _) in RUNNERS.items()}
    for page, line, marker, body in blocks():
        where = f"{page.relative_to(ROOT)}:{line}"
        if marker is None:
            problems.append(f"{where}: a shell block without a `<!-- commands: ... -->` marker "
                            "on the line before it (scripts/check-commands.py says which)")
            counts["unmarked"] += 1
        elif marker.startswith("not run:"):
            if len(marker) < len("not run: ") + 10:
                problems.append(f"{where}: `not run:` needs a reason")
            counts["not run"] += 1
        elif marker.split(None, 1)[0] in RUNNERS:
            kind, step = (marker.split(None, 1) + [""])[:2]
            files, _ = RUNNERS[kind]
            if not re.fullmatch(r"[a-z0-9-]+", step):
                problems.append(f"{where}: {kind} step `{step}`: lowercase letters, digits, '-'")
            elif f'"{step}"' not in stories[kind]:
                names = ", ".join(str(f.relative_to(ROOT)) for f in files[:2])
                problems.append(f"{where}: no {kind} step runs \"{step}\" ({names}, ...)")
            ids[kind].add(step)
            counts[kind] += 1
        else:
            files = marker.split()
            texts = []
            for f in files:
                if not (ROOT / f).is_file():
                    problems.append(f"{where}: `{f}` is not a file of the repository")
                else:
                    texts.extend(normalized((ROOT / f).read_text()))
            for command in commands(body):
                if texts and not any(command in t for t in texts):
                    problems.append(f"{where}: `{command}` is in none of {', '.join(files)}")
            counts["files"] += 1
    for kind, (_, pattern) in RUNNERS.items():
        for step in re.findall(pattern, stories[kind]):
            if step not in ids[kind]:
                problems.append(f"the {kind} step \"{step}\" names no block")
    return problems, counts


def main():
    if len(sys.argv) == 3 and sys.argv[1] in ("--node", "--machine"):
        marker = f"{sys.argv[1][2:]} {sys.argv[2]}"
        found = [{"page": str(p.relative_to(ROOT)), "line": n, "body": "\n".join(b)}
                 for p, n, m, b in blocks() if m == marker]
        print(json.dumps(found))
        return
    if len(sys.argv) != 1:
        sys.exit("usage: check-commands.py [--node ID | --machine ID]")
    problems, counts = check()
    for p in problems:
        print(p, file=sys.stderr)
    total = sum(counts.values())
    if problems:
        sys.exit(f"check-commands: {len(problems)} problems in {total} shell blocks")
    print(f"check-commands: ok ({total} shell blocks: {counts['node']} run on the node, "
          f"{counts['machine']} developers' sessions run here, "
          f"{counts['files']} in the tests or scripts named, {counts['not run']} not run)")


if __name__ == "__main__":
    main()
