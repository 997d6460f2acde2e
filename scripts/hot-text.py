#!/usr/bin/env python3
"""Writes link/hot-text.ld, the linker script that puts the code metainit runs in one
place at the start of the binary's text (build.rs passes it to the linker; BENCHMARKS.md
§ "Code layout" says why and how to regenerate it: scripts/hot-text.sh).

    python3 scripts/hot-text.py BINARY STARTUP [BURST ...] [-- BINARY STARTUP [BURST ...]] ...

Each BINARY is a release build with its symbols (CARGO_PROFILE_RELEASE_STRIP=false), each
STARTUP and BURST a callgrind file of a run of that binary (`valgrind --tool=callgrind
--demangle=no`): STARTUP from exec to idle, whose functions go first, BURST any others.
Several builds (the glibc one the benchmark runs, the static musl one the image ships)
give one script. A function is named without what differs between builds: its hash
(`17h…E`), a crate disambiguator (`Cs…_`) and LTO's suffix (`.llvm.N`, `.N`); a generic
function most of whose instances never run (drop glue, `Debug` for every type) is left in
place rather than moved with all of them.
"""
import collections, re, subprocess, sys

groups, cur = [], []
for arg in sys.argv[1:]:
    if arg == "--":
        groups.append(cur)
        cur = []
    else:
        cur.append(arg)
groups.append(cur)
if any(len(g) < 2 for g in groups):
    sys.exit(__doc__)


def symbols(binary):
    out = subprocess.run(["nm", "-S", binary], capture_output=True, text=True, check=True).stdout
    sizes = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "tTwW":
            sizes[f[3]] = int(f[1], 16)
    if not sizes:
        sys.exit(f"{binary}: no symbols (build it with CARGO_PROFILE_RELEASE_STRIP=false)")
    return sizes


def executed(path, sizes):
    """Functions with instructions of their own in a callgrind file (names as mangled)."""
    names, cost, fn, skip = {}, collections.Counter(), None, False
    for line in open(path):
        if skip:
            skip = False
            continue
        m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if m:
            if m[3]:
                names[m[2]] = m[3]
            if m[1] == "fn":
                fn = names[m[2]]
            continue
        if line.startswith("calls="):
            skip = True
            continue
        f = line.split()
        if fn and len(f) >= 2 and (f[0].isdigit() or f[0][0] in "+-*"):
            cost[fn] += int(f[1])
    return [n for n, c in cost.items() if c > 0 and n in sizes]


def pattern(name):
    name = re.sub(r"\.(llvm\.)?\d+$", "", name)
    if re.search(r"17h[0-9a-f]{16}E$", name):
        return name[:-20] + "*"
    if name.startswith("_R"):
        return re.sub(r"Cs[0-9A-Za-z]*_", "Cs*_", name) + "*"
    return name


def glob_re(p):
    return re.compile("".join(".*" if c == "*" else re.escape(c) for c in p) + r"\Z")


stages = ([], [])  # start-up, then the rest: patterns in first-seen order
hot = collections.Counter()  # pattern -> bytes of run code, per build (the largest)
matched = collections.Counter()  # pattern -> bytes of all code it moves, per build
seen = set()
for binary, *profiles in groups:
    sizes = symbols(binary)
    run, hot_here = set(), collections.Counter()
    for i, path in enumerate(profiles):
        for name in sorted(executed(path, sizes)):
            p = pattern(name)
            if name not in run:
                run.add(name)
                hot_here[p] += sizes[name]
            if p not in seen:
                seen.add(p)
                stages[min(i, 1)].append(p)
    by_prefix = collections.defaultdict(list)
    for name, size in sizes.items():
        by_prefix[name[:16]].append((name, size))
    for p in hot_here:
        rx = glob_re(p)
        pool = by_prefix[p[:16]] if "*" not in p[:16] else sizes.items()
        matched[p] = max(matched[p], sum(s for n, s in pool if rx.match(n)))
        hot[p] = max(hot[p], hot_here[p])

kept = [[p for p in stage if matched[p] <= max(64 * 1024, 4 * hot[p])] for stage in stages]
left = sum(hot[p] for stage in stages for p in stage if matched[p] > max(64 * 1024, 4 * hot[p]))
moved = sum(matched[p] for stage in kept for p in stage)
print(f"/* Written by scripts/hot-text.py from {len(groups)} build(s): {sum(map(len, kept))} patterns,")
print(f"   {moved // 1024} KiB of code moved (the most in one build), {left // 1024} KiB of run code left in")
print("   place (generic functions most of whose instances never run). */")
print("SECTIONS")
print("{")
print("  .text.hot : {")
for title, stage in zip(("start-up to idle", "the rest: clearing, Events, webhooks"), kept):
    print(f"    /* {title} */")
    for p in stage:
        # LLVM names a cold function's section `.text.unlikely.NAME` (`#[cold]`, as
        # hashbrown's `reserve_rehash`): it runs at start-up all the same.
        print(f"    *(.text.{p} .text.unlikely.{p})")
print("  }")
print("}")
print("INSERT BEFORE .text;")
print(f"hot-text: {sum(map(len, kept))} patterns, {moved // 1024} KiB moved, {left // 1024} KiB left", file=sys.stderr)
