#!/usr/bin/env python3
"""Prints, briefly, why each failed ctest entry failed: the lines a CI log's tail must show.

ctest --output-on-failure prints a failed test's output where the test ended, often far above
the summary. This reads ctest's log (Testing/Temporary/LastTest.log) and prints, for every failed
test, its failed checks (Catch2: the case, file:line and expression) or else the last lines of its
output, so that the end of the output says which check failed.

    python3 tools/ctest_failures.py BUILD_DIR [MAX_LINES]
"""
import os
import re
import sys

WIDTH = 200


def clip(line):
    line = line.rstrip()
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."


def tests(log):
    """Yields (name, output lines, passed) for each test in the log."""
    block = re.compile(r'^\d+/\d+ Test: (.*)$')
    name, out, in_output = None, [], False
    for line in log.splitlines():
        m = block.match(line)
        if m:
            name, out, in_output = m.group(1), [], False
        elif name is None:
            continue
        elif line == "Output:":
            in_output = True
        elif line == "<end of output>":
            in_output = False
        elif in_output:
            out.append(line)
        elif line in ("Test Passed.", "Test Failed.") or line.startswith("Test Failed") or "Timeout" in line:
            yield name, out, line == "Test Passed."
            name = None


def catch_failures(out, test):
    """Catch2's failed checks: '[case: ]file:line: EXPRESSION', one line each. A case's name stands
    between two rules of dashes; it is left out where the test's name already holds it."""
    found, case, name = [], "", None
    for i, line in enumerate(out):
        if re.fullmatch(r"-{70,}", line.rstrip()):  # Catch's rule (ctest's own is shorter)
            if name is None:
                name = []
            else:
                case, name = " ".join(name), None
            continue
        if name is not None:
            name.append(line.strip())
            continue
        m = re.match(r'^(\S+:\d+): FAILED:$', line)
        if m:
            expr = out[i + 1].strip() if i + 1 < len(out) else ""
            if i + 3 < len(out) and out[i + 2].strip() == "with expansion:":
                expr += " -> " + out[i + 3].strip()
            where = os.path.basename(m.group(1))
            found.append(f"{where}: {expr}" if case in test else f"{case}: {where}: {expr}")
    return found


def main():
    build = sys.argv[1]
    budget = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    path = os.path.join(build, "Testing", "Temporary", "LastTest.log")
    try:
        with open(path, errors="replace") as f:
            log = f.read()
    except OSError as e:
        print(f"(no ctest log to summarise: {e})")
        return
    lines = []
    for name, out, passed in tests(log):
        if passed:
            continue
        checks = catch_failures(out, name)
        body = checks[:3] if checks else [l for l in out if l.strip()][-3:]
        lines.append(f"== failed: {name}")
        lines += ["   " + l for l in body]
    if lines:
        print("== why the failed tests failed (the full output is above):")
        for l in lines[:budget]:
            print(clip(l))


if __name__ == "__main__":
    main()
