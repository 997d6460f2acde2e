#!/usr/bin/env python3
"""The project's address is written in one place, Cargo.toml, and every file names that one.

    python3 scripts/check-address.py      # exits 1 naming each file and line that differs

Cargo.toml's `package.repository` is the repository (https://github.com/OWNER/NAME), and
`package.metadata.release` holds where a release's image and chart go (scripts/release.sh's
defaults). In every tracked text file, a GitHub repository address ending in /metainit, a
ghcr.io image ending in /metainit and an oci:// charts location must be those; a
placeholder owner (`OWNER`, `example`) fails; a release download URL on a page must name
the crate's version (`.../releases/download/vVERSION/`), and an install of the chart from
an oci:// location its version (Chart.yaml's).
"""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Written from a fake tag or repository on purpose.
SKIP = {"scripts/check-address.py", "tests/plugin.rs", "CHANGELOG.md"}
REPO = re.compile(r"https?://github\.com/([\w.-]+)/metainit\b")
IMAGE = re.compile(r"\bghcr\.io/([\w.-]+)/metainit\b")
CHARTS = re.compile(r"\boci://ghcr\.io/[\w./-]+")
DOWNLOAD = re.compile(r"/releases/download/([^/\s`'\"]+)/")
CHART_VERSION = re.compile(r"\boci://\S+/charts/metainit\b.*?--version (\S+)")


def chart_version():
    chart = (ROOT / "charts/metainit/Chart.yaml").read_text()
    return re.search(r"^version: (\S+)$", chart, re.M).group(1)


def settings():
    package = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]
    release = package["metadata"]["release"]
    return package["repository"], release["image"], release["charts"], package["version"]


def tracked():
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True,
                         text=True, check=True).stdout
    for name in out.split():
        path = ROOT / name
        if name in SKIP or not path.is_file():
            continue
        try:
            yield name, path.read_text()
        except UnicodeDecodeError:
            continue


def problems_in(name, text, repository, image, charts, version):
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{name}:{number}"
        for m in REPO.finditer(line):
            if m.group(0).replace("http://", "https://") != repository:
                yield f"{where}: {m.group(0)}, not {repository}"
        for m in IMAGE.finditer(line):
            if m.group(0) != image:
                yield f"{where}: {m.group(0)}, not {image}"
        for m in CHARTS.finditer(line):
            if not m.group(0).startswith(charts):
                yield f"{where}: {m.group(0)}, not under {charts}"
        for m in DOWNLOAD.finditer(line):
            tag = m.group(1)
            if not tag.startswith("{{") and tag != f"v{version}":
                yield f"{where}: a download of {tag}, not v{version} (Cargo.toml's version)"
        for m in CHART_VERSION.finditer(line):
            if m.group(1) != chart_version():
                yield f"{where}: the chart's version {m.group(1)}, not {chart_version()} (Chart.yaml's)"
        if re.search(r"github\.com/OWNER\b|\bOWNER/metainit", line):
            yield f"{where}: a placeholder owner"


def main():
    repository, image, charts, version = settings()
    found = [p for name, text in tracked()
             for p in problems_in(name, text, repository, image, charts, version)]
    for problem in found:
        print(f"check-address: {problem}", file=sys.stderr)
    if found:
        print("check-address: the address lives in Cargo.toml ([package] repository, "
              "[package.metadata.release]); name that one", file=sys.stderr)
        return 1
    print(f"check-address: every file names {repository}, {image} and {charts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
