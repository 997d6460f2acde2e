"""A generated block of a page: the lines between a BEGIN marker and an END marker, which a
script of ours renders and then prints, checks (`--check`) or writes (`--write`):
scripts/chart-values.py (the chart's values), scripts/rights-table.py (SECURITY.md's rights)
and scripts/matrix-table.py (the README's "Tested on"). Imported with scripts/lib on sys.path.
"""
import difflib
import sys


def cell(text):
    """TEXT as a Markdown table cell: its pipes escaped."""
    return text.replace("|", "\\|")


def split(tool, text, begin, end, where):
    """(before, inside, after) of the one block of TEXT between a line BEGIN and END (the
    markers stay in before and after); exits naming WHERE unless each is there once, in order."""
    start = begin + "\n"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        sys.exit(f"{tool}: {where} needs one line '{begin}' and, after it, one '{end}'")
    head, rest = text.split(start, 1)
    inside, tail = rest.split(end, 1)
    return head + start, inside, end + tail


def check_or_write(tool, path, want, mode, what, fix):
    """Checks (`--check`: the difference shown, exit 1 saying to run FIX) or writes
    (`--write`) the file PATH as WANT; WHAT names it in the messages."""
    have = path.read_text() if path.exists() else ""
    if mode == "--write":
        path.write_text(want)
        print(f"{tool}: {what} written")
        return
    if have != want:
        sys.stdout.writelines(difflib.unified_diff(
            have.splitlines(True), want.splitlines(True),
            f"{what} (as written)", f"{what} (as {tool} makes it)"))
        sys.exit(f"{tool}: {what} is stale (above: - as written, + as made): run {fix}")
    print(f"{tool}: {what} is up to date")
