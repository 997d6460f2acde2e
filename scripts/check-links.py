#!/usr/bin/env python3
"""Links, anchors and pointers to headings, checked offline (python3, stdlib only).

    python3 scripts/check-links.py      # exits 1 naming each broken one, file:line

1. Every relative link of the Markdown pages (README.md, CONTRIBUTING.md, SECURITY.md,
   CHANGELOG.md, BENCHMARKS.md, RELIABILITY.md, docs/**/*.md, charts/metainit/README.md,
   tests/kube-double/README.md) points to a file or directory that exists, and its
   `#anchor` to a heading of that page: GitHub's slug rule, which mdBook 0.5's is for these
   headings (lower case; letters, digits, `-` and `_` kept; spaces to `-`; the rest
   dropped; a repeated slug gets `-1`, `-2`).
2. Every pointer to a heading in prose, in any file of the repository (the code's doc
   comments, the manifests, the chart, the man pages included): `README, "Section"`,
   `README's "Section"`, `BENCHMARKS.md, "Section"`, `tests/kube-double/README.md`,
   "Section"`; the section must be a heading of that file (or the start of one).
3. Every path of a Markdown file the repository's text names (`docs/src/guides/webhooks.md`,
   `docs/src/guides/operations.md#the-admin-port`) exists, with its anchor.
4. The book: SUMMARY.md names every page under docs/src, and every page it names exists.
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "docs" / "src"
PAGES = ["README.md", "CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md", "BENCHMARKS.md",
         "RELIABILITY.md", "charts/metainit/README.md", "tests/kube-double/README.md"]
# Files whose text is not prose: lock files, checksums, recorded data.
# This file too: its doc names the forms it checks, as examples.
SKIP = re.compile(r"(^|/)(Cargo\.lock|go\.sum|go\.mod)$|^tests/matrix/|\.(tsv|json|png|svg|ico)$"
                  r"|^scripts/check-links\.py$")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(\s|$)")
HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
# A pointer to a section: FILE, "Section" / FILE's "Section" / FILE ("Section".
# A file name inside a string of code ("README.md", "/docs/x.md") is not one.
POINTER = re.compile(
    r"(?<![\w./\"$}-])((?:[\w.-]+/)*[\w.-]+\.md|README)`?(?:'s\s+|,\s*|\s+\(?)\"([^\"]{2,120})\"")
MD_PATH = re.compile(r"(?<![\w./\"$}-])((?:[\w.-]+/)+[\w.-]+\.md)(#[\w-]+)?")
# Comment markers at the start of a line, so that a pointer may run over two lines.
COMMENT = re.compile(r"^\s*(?://[/!]?|#+|\*|--|\.\\\")?\s?")

problems = []


def problem(path, line, text):
    found = f"{path.relative_to(ROOT)}:{line}: {text}"
    if found not in problems:
        problems.append(found)


def outside_fences(text):
    """The lines of a Markdown text with their numbers, fenced code blocks left out."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
            continue
        if fence is None:
            yield number, line


def plain(heading):
    """A heading's text as rendered: links to their text, code and emphasis marks gone."""
    heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[`*]", "", heading).strip()


def slug(text):
    kept = "".join(c for c in text.lower() if c.isalnum() or c in "-_ ")
    return kept.replace(" ", "-")


headings_cache = {}


def headings(path):
    """A Markdown file's headings: (their plain texts, their anchors)."""
    if path not in headings_cache:
        texts, anchors, seen = [], set(), {}
        for _, line in outside_fences(path.read_text()):
            anchors.update(HTML_ID.findall(line))
            m = HEADING.match(line)
            if not m:
                continue
            text = plain(m.group(2))
            base = slug(text)
            n = seen.get(base, 0)
            seen[base] = n + 1
            anchors.add(base if n == 0 else f"{base}-{n}")
            texts.append(" ".join(text.split()))
        headings_cache[path] = (texts, anchors)
    return headings_cache[path]


def check_anchor(src, line, target, anchor):
    if target.is_dir() or target.suffix != ".md":
        problem(src, line, f"#{anchor}: {target.relative_to(ROOT)} is not a Markdown page")
    elif anchor not in headings(target)[1]:
        problem(src, line, f"no heading for #{anchor} in {target.relative_to(ROOT)}")


def check_link(src, line, link):
    if SCHEME.match(link) or link.startswith("//"):
        return
    path, _, anchor = link.partition("#")
    target = (src.parent / path).resolve() if path else src
    if ROOT not in target.parents and target != ROOT:
        problem(src, line, f"{link}: outside the repository")
    elif not target.exists():
        problem(src, line, f"{link}: no such file")
    elif anchor:
        check_anchor(src, line, target, anchor)


def check_page(page):
    """Step 1: the relative links and anchors of one Markdown page."""
    for number, line in outside_fences(page.read_text()):
        line = re.sub(r"`[^`]*`", "", line)
        for link in LINK.findall(line):
            check_link(page, number, link)
        m = REFDEF.match(line)
        if m:
            check_link(page, number, m.group(1))


def joined(text):
    """The text as one line, comment markers dropped, and where each line starts in it."""
    starts, parts, offset = [], [], 0
    for line in text.splitlines():
        line = COMMENT.sub("", line, count=1).strip()
        starts.append(offset)
        parts.append(line)
        offset += len(line) + 1
    return " ".join(parts), starts


def line_of(starts, offset):
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1


def named_file(src, name):
    """The file a pointer names: a path from the repository's root, else beside `src`."""
    if name == "README":
        name = "README.md"
    for base in (ROOT, src.parent):
        if (base / name).is_file():
            return (base / name).resolve()
    return None


def check_pointers(src, text):
    """Steps 2 and 3: pointers to sections and paths of Markdown files, in any text."""
    flat, starts = joined(text)
    for m in POINTER.finditer(flat):
        target = named_file(src, m.group(1))
        section = " ".join(m.group(2).split())
        line = line_of(starts, m.start())
        if target is None:
            problem(src, line, f"{m.group(1)}, \"{section}\": no such file")
            continue
        texts = headings(target)[0]
        if not any(t == section or t.startswith(section + " ") or t.startswith(section + ":")
                   or t.startswith(section + ",") for t in texts):
            problem(src, line, f"{m.group(1)}, \"{section}\": no such heading in "
                    f"{target.relative_to(ROOT)}")
    for m in MD_PATH.finditer(flat):
        path, anchor = m.group(1), (m.group(2) or "#")[1:]
        # A URL's path, or a file the build writes, is not the repository's; a relative
        # link (../x.md) is step 1's.
        if path.startswith(("target/", "./", "../")) or "://" in flat[max(0, m.start() - 40):m.start()]:
            continue
        target = named_file(src, path)
        line = line_of(starts, m.start())
        if target is None:
            problem(src, line, f"{path}: no such file")
        elif anchor:
            check_anchor(src, line, target, anchor)


def repository_files():
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], check=True, capture_output=True).stdout
    for name in sorted(set(out.decode().split("\0")) - {""}):
        path = ROOT / name
        if SKIP.search(name) or not path.is_file():
            continue
        try:
            yield path, path.read_text()
        except (UnicodeDecodeError, OSError):
            continue


def check_summary():
    """Step 4: SUMMARY.md and the pages under docs/src name each other."""
    summary = BOOK / "SUMMARY.md"
    named = set()
    for number, line in outside_fences(summary.read_text()):
        for link in LINK.findall(line):
            page = (BOOK / link.partition("#")[0]).resolve()
            named.add(page)
            if not page.is_file():
                problem(summary, number, f"{link}: no such page")
    for page in sorted(BOOK.rglob("*.md")):
        if page != summary and page.resolve() not in named:
            problem(page, 1, "a page of the book that docs/src/SUMMARY.md does not name")


README_MOST = 150


def main():
    pages = [ROOT / p for p in PAGES] + sorted((ROOT / "docs").rglob("*.md"))
    for page in pages:
        check_page(page)
    for path, text in repository_files():
        check_pointers(path, text)
    check_summary()
    # The front page stays a front page (issue 50): the rest belongs in the book.
    lines = len((ROOT / "README.md").read_text().splitlines())
    if lines > README_MOST:
        problems.append(f"README.md: {lines} lines, at most {README_MOST} (move the rest to docs/src)")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(f"check-links: {len(problems)} broken (links, anchors, pointers to headings)")
    print(f"check-links: ok ({len(pages)} pages' links and anchors, and every pointer to a "
          "heading or a page in the repository)")


if __name__ == "__main__":
    main()
