#!/usr/bin/env python3
"""Convert committed measurement and trace rows to vramfit's one JSON schema (include/vramfit/json.hpp).

The harnesses used to write "lora_targets" as a string ("q_proj,k_proj,v_proj,o_proj",
"all-linear"); the schema writes the array of projection names, in vramfit's order of modules
(include/vramfit/model.hpp: all_modules), "all-linear" being all seven. This rewrites that field in
every row, and in the "arm" object of trace rows, of the files given (default: tests/data/*.jsonl,
tests/data/traces/*.jsonl and tests/data/traces/*.jsonl.gz).

Only the rows that change are rewritten, with the separators the row was written with (Python's
default ", " and ": ", or the compact "," and ":" of nlohmann and trace_capture.py), keeping the
order of keys; a row that would not come back byte for byte from its parse is refused instead. Every
other row keeps its bytes, and a file with nothing to change is not written, so running it again
changes nothing. Gzipped files stay gzipped, with the original header's name and time.

"attention" is left as it is: no committed row has "sdpa", and the reader
(include/vramfit/detail/replay.hpp: step_from) still reads "sdpa" as the default.

Usage: python3 tests/validation/convert_schema.py [--check] [FILE ...]
  --check: change nothing; exit 1 if any file would change.
"""
import argparse
import glob
import gzip
import io
import json
import os
import struct
import sys

# include/vramfit/model.hpp: all_modules.
ALL_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
SEPARATORS = ((", ", ": "), (",", ":"))


def targets_list(value):
    """The schema's array for a "lora_targets" value; arrays and nulls are returned as they are."""
    if not isinstance(value, str):
        return value
    s = value.strip()
    if s.lower() in ("all-linear", "all_linear"):
        return list(ALL_MODULES)
    if s.lower() == "attention":
        return ALL_MODULES[:4]
    names = [n.strip() for n in s.split(",")]
    unknown = [n for n in names if n not in ALL_MODULES]
    if unknown or not names:
        raise ValueError("unknown projection(s) %r in lora_targets %r" % (unknown, value))
    return [m for m in ALL_MODULES if m in names]


def convert_row(row):
    """Converts the row in place; True if anything changed."""
    changed = False
    for obj in (row, row.get("arm")):
        if isinstance(obj, dict) and isinstance(obj.get("lora_targets"), str):
            obj["lora_targets"] = targets_list(obj["lora_targets"])
            changed = True
    return changed


def convert_line(line, where):
    """The line in the schema (the same string when nothing changes)."""
    if not line.strip():
        return line
    row = json.loads(line)
    if not isinstance(row, dict):
        return line
    seps = [s for s in SEPARATORS if json.dumps(row, separators=s) == line]
    if not convert_row(row):
        return line
    if not seps:
        raise ValueError("%s: the row does not re-serialise to its own bytes; not converting it" % where)
    return json.dumps(row, separators=seps[0])


def gzip_header(raw):
    """(name, mtime) of a gzip member's header; name is None when the header has none."""
    flags, mtime = raw[3], struct.unpack("<I", raw[4:8])[0]
    name = None
    if flags & 0x08:  # FNAME, after FEXTRA when present
        pos = 10
        if flags & 0x04:
            pos += 2 + struct.unpack("<H", raw[10:12])[0]
        name = raw[pos:raw.index(b"\0", pos)].decode("latin-1")
    return name, mtime


def convert_file(path, check):
    """Converts one file; returns the number of rows changed."""
    raw = open(path, "rb").read()
    zipped = path.endswith(".gz")
    text = gzip.decompress(raw).decode("utf-8") if zipped else raw.decode("utf-8")
    lines = text.split("\n")
    out = [convert_line(line, "%s:%d" % (path, n + 1)) for n, line in enumerate(lines)]
    changed = sum(a != b for a, b in zip(lines, out))
    if changed and not check:
        data = "\n".join(out).encode("utf-8")
        if zipped:
            name, mtime = gzip_header(raw)
            buf = io.BytesIO()
            with gzip.GzipFile(filename=name or "", mode="wb", fileobj=buf, mtime=mtime) as f:
                f.write(data)
            data = buf.getvalue()
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return changed


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file would change")
    p.add_argument("files", nargs="*")
    a = p.parse_args(argv)
    files = a.files
    if not files:
        data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
        files = sorted(glob.glob(os.path.join(data, "*.jsonl")) + glob.glob(os.path.join(data, "traces", "*.jsonl"))
                       + glob.glob(os.path.join(data, "traces", "*.jsonl.gz")))
    total = 0
    for path in files:
        n = convert_file(path, a.check)
        total += n
        if n:
            print("%s: %d row(s) %s" % (os.path.relpath(path), n, "to convert" if a.check else "converted"))
    return 1 if a.check and total else 0


if __name__ == "__main__":
    sys.exit(main())
