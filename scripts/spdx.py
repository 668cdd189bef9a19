#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Lists (or, with --add, fixes) the tracked source files that lack the
SPDX line in their first lines: C sources and headers, shell and Python
scripts, CMake and make files, the configure templates and the man pages.
Exit status 1 when one lacks it (without --add). tests/checks runs it."""
import subprocess
import sys

TAG = "SPDX-License-Identifier: BSD-3-Clause"
HEAD = 3  # the line must be among the first HEAD lines


def style(path):
    name = path.rsplit("/", 1)[-1]
    if name.endswith((".c", ".h", ".h.in")):
        return "/* %s */" % TAG
    if name.endswith((".sh", ".py")) or name in ("run", "Makefile", "CMakeLists.txt") or \
            name.endswith((".cmake.in", ".pc.in", "Doxyfile.in")):
        return "# %s" % TAG
    if name.endswith(".1"):
        return '.\\" %s' % TAG
    return None


def main():
    add = "--add" in sys.argv[1:]
    got = subprocess.run(["git", "ls-files"], capture_output=True, text=True)
    if got.returncode != 0:
        print("spdx: not a git checkout, nothing to list: skipped")
        return 77  # ctest's SKIP_RETURN_CODE
    files = got.stdout.split()
    missing = []
    for f in files:
        line = style(f)
        if line is None or f.startswith("fuzz/corpus/"):
            continue
        with open(f, encoding="utf-8") as fh:
            text = fh.read()
        if TAG in "".join(text.splitlines(True)[:HEAD]):
            continue
        if not add:
            missing.append(f)
            continue
        lines = text.splitlines(True)
        at = 1 if lines and lines[0].startswith("#!") else 0
        lines.insert(at, line + "\n")
        with open(f, "w", encoding="utf-8") as fh:
            fh.write("".join(lines))
    for f in missing:
        print("spdx: %s has no '%s' in its first %d lines" % (f, TAG, HEAD))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
