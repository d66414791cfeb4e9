#!/usr/bin/env python3
"""Checks structured-output samples independently of hearth.

usage: validate_samples.py SCHEMA_DIR SAMPLES.json

SAMPLES.json is a list of {"schema": file name, "seed", "finish", "text"}.
Every sample must have ended because its value was complete ("eos"), and
its text must parse with Python's json module (strictly: one value, no
trailing data, no NaN) and validate against its schema with the jsonschema
package (Draft 2020-12), formats checked by the explicit rules below.
Prints one line per schema; exits 1 on the first schema with a failure
(after listing up to five failing samples).
"""
import collections
import datetime
import json
import re
import sys
import uuid

import jsonschema

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME = re.compile(r"^\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

checker = jsonschema.FormatChecker(formats=())


@checker.checks("date", raises=ValueError)
def _is_date(s):
    if not isinstance(s, str):
        return True
    if not _DATE.match(s):
        raise ValueError("not YYYY-MM-DD")
    datetime.date.fromisoformat(s)
    return True


@checker.checks("time", raises=ValueError)
def _is_time(s):
    if not isinstance(s, str):
        return True
    if not _TIME.match(s):
        raise ValueError("not HH:MM:SS[.frac][zone]")
    h, m, sec = int(s[0:2]), int(s[3:5]), int(s[6:8])
    if h > 23 or m > 59 or sec > 60:
        raise ValueError("time out of range")
    return True


@checker.checks("date-time", raises=ValueError)
def _is_date_time(s):
    if not isinstance(s, str):
        return True
    date, sep, time = s.partition("T")
    if not sep:
        raise ValueError("no T")
    _is_date(date)
    _is_time(time)
    return True


@checker.checks("uuid", raises=ValueError)
def _is_uuid(s):
    if not isinstance(s, str):
        return True
    if not _UUID.match(s):
        raise ValueError("not 8-4-4-4-12 hex")
    uuid.UUID(s)
    return True


def _no_constants(name):
    raise ValueError("not JSON: " + name)


def main():
    schema_dir, samples_file = sys.argv[1], sys.argv[2]
    with open(samples_file, encoding="utf-8") as f:
        samples = json.load(f)
    by_schema = collections.OrderedDict()
    for s in samples:
        by_schema.setdefault(s["schema"], []).append(s)
    failed = False
    for name, group in by_schema.items():
        with open(f"{schema_dir}/{name}", encoding="utf-8") as f:
            schema = json.load(f)
        validator = jsonschema.Draft202012Validator(schema, format_checker=checker)
        bad = []
        lengths = []
        for s in group:
            text = s["text"]
            lengths.append(len(text))
            if s["finish"] != "eos":
                bad.append((s["seed"], f"finished by {s['finish']!r}, not a complete value", text))
                continue
            try:
                value = json.loads(text, parse_constant=_no_constants)
            except ValueError as e:
                bad.append((s["seed"], f"not JSON: {e}", text))
                continue
            errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
            if errors:
                e = errors[0]
                bad.append((s["seed"], f"invalid at {list(e.path)}: {e.message}", text))
        mean = sum(lengths) / max(len(lengths), 1)
        print(f"{name}: {len(group) - len(bad)}/{len(group)} valid, "
              f"mean {mean:.0f} bytes, longest {max(lengths, default=0)}")
        for seed, why, text in bad[:5]:
            print(f"  seed {seed}: {why}\n    {text[:300]!r}")
        failed |= bool(bad)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
