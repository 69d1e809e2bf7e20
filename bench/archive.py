#!/usr/bin/env python3
"""`strata archive verify` beside the `strata dump --once` that wrote the archive.

Each round, per format: `dump --once` of the topic into a new directory (or S3 prefix), then
`archive verify` of what it wrote (every object read, checked against its seal's CRC-32C and
decoded); the table reports medians of the rounds: CPU seconds and wall-clock MB/s of each, and
both per GiB of the data set, so the two read the same bytes' worth. The topic must exist
(bench/run creates the data sets; the default is the 256 MiB one) and the services must be up.
Python standard library only; it reuses ab.py's runner and config writer.

  bench/archive.py --runs 3 --binary target/release/strata
  bench/archive.py --formats jsonl --s3 http://127.0.0.1:4566
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab  # noqa: E402  (bench/ab.py: measure, strata_config, empty_bucket)

DEFAULT_TOPIC = "strata-bench-g2-n262144-s1024-p8-seed42"
MIB = 1 << 20
GIB = 1 << 30


def data_bytes(topic, given):
    """Bytes of the data set: --data-bytes, or records x (value + 22 B key) from the name."""
    if given:
        return given
    m = re.search(r"-n(\d+)-s(\d+)-", topic)
    if not m:
        sys.exit(f"archive.py: cannot tell the size of {topic} from its name; pass --data-bytes")
    return int(m.group(1)) * (int(m.group(2)) + 22)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--topic", default=DEFAULT_TOPIC, help=f"topic to dump (default {DEFAULT_TOPIC})")
    ap.add_argument("--binary", default="target/release/strata", help="strata binary (default target/release/strata)")
    ap.add_argument("--formats", default="text,jsonl,parquet", help="comma separated (default text,jsonl,parquet)")
    ap.add_argument("--data-bytes", type=int, help="bytes of the data set (default: from the topic's name)")
    ap.add_argument("--s3", metavar="ENDPOINT", help="archive to this S3 endpoint (bucket strata-ab, emptied after each round) instead of file://")
    a = ap.parse_args()
    if not os.access(a.binary, os.X_OK):
        sys.exit(f"archive.py: {a.binary} is not an executable; cargo build --release first")
    gib = data_bytes(a.topic, a.data_bytes) / GIB
    formats = a.formats.split(",")
    results = {f: {"dump": [], "verify": [], "archive": 0, "records": 0} for f in formats}
    work = Path(tempfile.mkdtemp(prefix="strata-archive-bench-"))
    try:
        for r in range(1, a.runs + 1):
            for fmt in formats:
                print(f"[archive] round {r}/{a.runs} {fmt}", file=sys.stderr)
                out = work / "out"
                shutil.rmtree(out, ignore_errors=True)
                cfg = work / "run.toml"
                cfg.write_text(ab.strata_config(out, a.topic, fmt, {}, a.s3))
                results[fmt]["dump"].append(ab.measure([a.binary, "dump", "--once", "--config", str(cfg)]))
                results[fmt]["verify"].append(ab.measure([a.binary, "archive", "verify", "--config", str(cfg)]))
                ls = subprocess.run([a.binary, "archive", "ls", "--json", "--config", str(cfg)],
                                    check=True, capture_output=True, text=True)
                parts = json.loads(ls.stdout)["partitions"]
                results[fmt]["archive"] = sum(p["bytes"] for p in parts)
                results[fmt]["records"] = sum(p["records"] for p in parts)
                if a.s3:
                    ab.empty_bucket(a.s3)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"data set: {a.topic}, {gib * 1024:.0f} MiB; medians of {a.runs} round(s)")
    print("| format | archive MiB | dump CPU s | dump wall s | dump CPU s/GiB | dump MB/s | "
          "verify CPU s | verify wall s | verify CPU s/GiB | verify MB/s | verify archive MiB/s | verify peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for fmt, res in results.items():
        d = [statistics.median(m[i] for m in res["dump"]) for i in range(4)]
        v = [statistics.median(m[i] for m in res["verify"]) for i in range(4)]
        data_mb = gib * GIB / 1e6
        print(f"| {fmt} | {res['archive'] / MIB:.0f} | {d[0]:.2f} | {d[3]:.2f} | {d[0] / gib:.2f} | "
              f"{data_mb / d[3]:.0f} | {v[0]:.2f} | {v[3]:.2f} | {v[0] / gib:.2f} | {data_mb / v[3]:.0f} | "
              f"{res['archive'] / MIB / v[3]:.0f} | {max(m[4] for m in res['verify'])} |")


if __name__ == "__main__":
    main()
