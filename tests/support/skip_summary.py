#!/usr/bin/env python3
"""Prints how many tests ctest skipped, and why, from its JUnit files.

    skip_summary.py BUILD_DIR/ctest-junit.xml [...]

hearth.sh test runs every ctest with --output-junit and calls this at the
end, so a run that skipped tests (a missing ../shared, a missing tool) says
so in its last lines instead of in the middle of thousands. The reason of a
GoogleTest skip is the line after "file:line: Skipped"; a script test's is
its "SKIPPED: ..." line. Exits 0 whatever it finds: it reports, CI decides.
"""
import collections
import sys
import xml.etree.ElementTree as ET


def reason(output):
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped") and i + 1 < len(lines):
            return lines[i + 1].strip()
        if line.startswith("SKIPPED:"):
            return line[len("SKIPPED:"):].strip()
    return "(no reason printed)"


def main(paths):
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            print("skip summary: cannot read %s: %s" % (path, e))
            continue
        reasons = collections.Counter()
        for case in root.iter("testcase"):
            if case.find("skipped") is None:
                continue
            out = case.find("system-out")
            reasons[reason(out.text if out is not None and out.text else "")] += 1
        total = sum(reasons.values())
        print("%s: %d test%s skipped" % (path, total, "" if total == 1 else "s"))
        for why, n in reasons.most_common():
            print("  %4d  %s" % (n, why))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
