#!/usr/bin/env python3
"""Interleaved A/B runs of `strata dump --once` and `strata replicate --once` variants against the
kcat floor.

Each round runs kcat, then every variant once, in that order; the table reports medians of the
rounds, so slow drift of a shared machine spreads over all variants instead of hitting one. The
topic must exist (bench/run creates it; the default is the 1 GiB data set of `bench/run --only
dump`) and the services must be up (`./dev up`).

A variant is NAME=BINARY:FORMAT (text, jsonl, parquet, cdc for CDC tables, iceberg for an
Iceberg table in the embedded SQL catalog, a new SQLite file and warehouse each run, iceberg-cdc
for CDC tables as Iceberg tables in such a catalog; replicate or
replicate-eos for `strata replicate --once` of the topic to the dev peer cluster, exactly once
off or on, into a new target topic each run), optionally followed by settings, each after a
colon:
  env.KEY=VALUE        an environment variable of the strata process (e.g. MALLOC_CONF)
  kafka.KEY=VALUE      a librdkafka property, written to [kafka.properties]
With --s3 ENDPOINT every variant dumps to that S3 server instead of a local directory.
--baseline NAME adds each variant's CPU relative to that variant's (medians). For a topic named
by bench/run (`...-n<records>-s<size>-...`) the table gives CPU seconds per GiB of key + value
bytes. Iceberg variants log JSON; their "committed to the table" lines give a second table:
commits per run, files per commit, each commit's latency against the catalog (`ms`, median and
maximum over every commit of every round) and commits per minute of wall time.

  bench/ab.py --runs 5 \\
      now=target/release/strata:text \\
      backoff1s=target/release/strata:parquet:kafka.fetch.queue.backoff.ms=1000 \\
      decay10s=target/release/strata:parquet:env.MALLOC_CONF=dirty_decay_ms:10000

  bench/ab.py --runs 5 --topic strata-bench-g2-n262144-s1024-p8-seed42 --baseline parquet \
      parquet=target/release/strata:parquet iceberg=target/release/strata:iceberg

Comparing builds (an allocator, a page size) means building the other commit into its own
directory first and naming that binary. Python standard library only.

  bench/ab.py --runs 5 --topic T before=/path/strata-a:replicate after=target/release/strata:replicate
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
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen import key_bytes  # noqa: E402

BOOT = os.environ.get("STRATA_TEST_BOOTSTRAP", "127.0.0.1:9092")
DEFAULT_TOPIC = "strata-bench-g2-n1048576-s1024-p8-seed42"


def parse_variant(spec):
    """NAME=BINARY:FORMAT[:env.K=V][:kafka.K=V]... -> (name, binary, format, env, props)."""
    name, sep, rest = spec.partition("=")
    parts = rest.split(":")
    if not sep or len(parts) < 2:
        sys.exit(f"ab.py: variant {spec!r} is not NAME=BINARY:FORMAT[:env.K=V|kafka.K=V...]")
    binary, fmt, env, props = parts[0], parts[1], {}, {}
    # A value may itself hold colons (MALLOC_CONF=a:1,b:2): glue pieces without a known prefix
    # back onto the setting before them.
    settings = []
    for p in parts[2:]:
        if p.startswith(("env.", "kafka.")) or not settings:
            settings.append(p)
        else:
            settings[-1] += ":" + p
    for s in settings:
        key, eq, value = s.partition("=")
        if not eq or not key.startswith(("env.", "kafka.")):
            sys.exit(f"ab.py: setting {s!r} of {name} is not env.KEY=VALUE or kafka.KEY=VALUE")
        (env if key.startswith("env.") else props)[key.split(".", 1)[1]] = value
    if not os.access(binary, os.X_OK):
        sys.exit(f"ab.py: {binary} (variant {name}) is not an executable; build it first")
    return name, binary, fmt, env, props


def measure(cmd, env=None):
    """Runs cmd to completion; returns (cpu s, user s, sys s, wall s, peak RSS MiB, stderr)."""
    os.sync()  # nobody pays for another run's writeback
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"ab.py: {' '.join(cmd)} failed:\n{err[-2000:]}")
    return (ru.ru_utime + ru.ru_stime, ru.ru_utime, ru.ru_stime, wall, ru.ru_maxrss // 1024, err)


S3_BUCKET = "strata-ab"


def empty_bucket(endpoint):
    """Deletes every object of S3_BUCKET (LocalStack keeps objects in memory: gigabytes per run)."""
    py = os.environ.get("STRATA_TEST_PYTHON", "python3")
    code = ("import boto3, sys\n"
            f"s3 = boto3.resource('s3', endpoint_url={endpoint!r}, aws_access_key_id='test',"
            " aws_secret_access_key='test', region_name='us-east-1')\n"
            f"b = s3.Bucket({S3_BUCKET!r})\n"
            "try:\n    b.objects.all().delete()\nexcept s3.meta.client.exceptions.NoSuchBucket:\n    pass\n")
    subprocess.run([py, "-c", code], check=True)


def strata_config(out_dir, topic, fmt, props, s3_endpoint=None):
    kafka_props = "".join(f'"{k}" = "{v}"\n' for k, v in props.items())
    store = (f'url = "file://{out_dir}"\n' if not s3_endpoint else
             f'url = "s3://{S3_BUCKET}/{uuid.uuid4().hex[:12]}"\nendpoint = "{s3_endpoint}"\n'
             'access_key = "test"\nsecret_key = "test"\ncreate_bucket = true\n')
    return (f'[kafka]\nbootstrap_servers = "{BOOT}"\n'
            + (f"\n[kafka.properties]\n{kafka_props}" if props else "")
            + f'\n[store]\n{store}\n'
            f'[[tasks]]\nname = "ab-{uuid.uuid4().hex[:12]}"\ntopics = ["{topic}"]\n'
            f'start_offset = "earliest"\ndirectory = "{fmt}"\n'
            # "cdc": CDC tables, which are Parquet files ([tasks.cdc] with its defaults).
            + ('format = "parquet"\n\n[tasks.cdc]\n' if fmt == "cdc" else
               'format = "iceberg"\n\n[tasks.cdc]\n' if fmt == "iceberg-cdc" else f'format = "{fmt}"\n')
            # "iceberg": the embedded SQL catalog, its SQLite file beside the output (new per run);
            # the warehouse is the default, <store url>/<directory>.
            + (f'\n[tasks.iceberg]\ncatalog_file = "{out_dir}/catalog.db"\n' if is_iceberg(fmt) else ""))


def is_iceberg(fmt):
    return fmt in ("iceberg", "iceberg-cdc")


def commits(stderr):
    """The (files, records, ms) of each "committed to the table" line of a JSON log."""
    out = []
    for line in stderr.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("message") == "committed to the table":
            out.append((int(ev["files"]), int(ev["records"]), int(ev["ms"])))
    return out


def data_bytes(topic):
    """Key + value bytes of a bench/run data set, from its topic name; None for other topics."""
    m = re.search(r"-n(\d+)-s(\d+)-", topic)
    return key_bytes(int(m[1])) + int(m[1]) * int(m[2]) if m else None


REPLICATE_TOML = """\
[kafka]
bootstrap_servers = "{src}"
{props}
[[tasks]]
type = "replicate"
name = "{name}"
direction = "push"
local_alias = "{alias}"
topics = ["{topic}"]
rename_topics = true
exactly_once = {eos}
[tasks.peer]
alias = "ab-peer"
bootstrap_servers = "{dst}"
security_protocol = "SASL_PLAINTEXT"
sasl_mechanism = "SCRAM-SHA-512"
username = "{user}"
password = "${{PEER_PASSWORD}}"
"""


def replicate_config(topic, fmt, props):
    """A push of the topic to the dev peer into a topic of its own (`<alias>.<topic>`)."""
    peer = os.environ.get("STRATA_TEST_PEER_BOOTSTRAP")
    if not peer:
        sys.exit("ab.py: replicate variants need the peer: eval \"$(./dev env)\" first")
    kafka_props = "".join(f'"{k}" = "{v}"\n' for k, v in props.items())
    tag = uuid.uuid4().hex[:10]
    return REPLICATE_TOML.format(
        src=BOOT, props=f"[kafka.properties]\n{kafka_props}" if props else "", name=f"ab-{tag}",
        alias=f"ab{tag}", topic=topic, eos="true" if fmt == "replicate-eos" else "false",
        dst=peer, user=os.environ.get("STRATA_TEST_PEER_USER", "strata"))


def peer_env():
    pw = Path(os.environ.get("STRATA_TEST_PEER_PASSWORD_FILE", "/nonexistent"))
    if not pw.exists():
        sys.exit("ab.py: no peer password file (STRATA_TEST_PEER_PASSWORD_FILE): eval \"$(./dev env)\"")
    return {"PEER_PASSWORD": pw.read_text().strip()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--topic", default=DEFAULT_TOPIC, help=f"topic to dump (default {DEFAULT_TOPIC})")
    ap.add_argument("--s3", metavar="ENDPOINT", help="dump to this S3 endpoint (e.g. LocalStack's "
                    "http://127.0.0.1:4566; objects go to bucket strata-ab, emptied after each run) instead of file://")
    ap.add_argument("--baseline", metavar="NAME", help="also give CPU relative to this variant")
    ap.add_argument("variants", nargs="+", help="NAME=BINARY:FORMAT[:env.K=V][:kafka.K=V]...")
    a = ap.parse_args()
    variants = [parse_variant(v) for v in a.variants]
    if a.baseline and a.baseline not in [v[0] for v in variants]:
        sys.exit(f"ab.py: --baseline {a.baseline} is not one of the variants")
    results = {"kcat": []}
    for v in variants:
        results[v[0]] = []
    work = Path(tempfile.mkdtemp(prefix="strata-ab-"))
    try:
        for r in range(1, a.runs + 1):
            print(f"[ab] round {r}/{a.runs}", file=sys.stderr)
            results["kcat"].append(measure(["kcat", "-C", "-b", BOOT, "-t", a.topic, "-o", "beginning", "-e", "-q"]))
            for name, binary, fmt, env, props in variants:
                out = work / "out"
                shutil.rmtree(out, ignore_errors=True)
                cfg = work / "run.toml"
                if fmt.startswith("replicate"):
                    cfg.write_text(replicate_config(a.topic, fmt, props))
                    cmd = [binary, "replicate", "--once", "--config", str(cfg)]
                    env = {**env, **peer_env()}
                else:
                    cfg.write_text(strata_config(out, a.topic, fmt, props, a.s3))
                    cmd = [binary, "dump", "--once", "--config", str(cfg)]
                    if is_iceberg(fmt):
                        cmd += ["--log-format", "json"]
                m = measure(cmd, {**os.environ, **env})
                if is_iceberg(fmt) and not commits(m[5]):
                    sys.exit(f"ab.py: {name} logged no commit:\n{m[5][-2000:]}")
                results[name].append(m)
                if a.s3:
                    empty_bucket(a.s3)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    floor = statistics.median(m[0] for m in results["kcat"])
    base = statistics.median(m[0] for m in results[a.baseline]) if a.baseline else None
    gib = (data_bytes(a.topic) or 0) / (1 << 30)
    print(f"| variant | CPU s | vs kcat |" + (f" vs {a.baseline} |" if base else "")
          + (" CPU s/GiB |" if gib else "") + " user s | sys s | wall s | peak RSS MiB | CPU s per round |")
    print("|---|---:|---:|" + ("---:|" if base else "") + ("---:|" if gib else "") + "---:|---:|---:|---:|---|")
    for name, ms in results.items():
        med = lambda i: statistics.median(m[i] for m in ms)
        print(f"| {name} | {med(0):.2f} | {med(0) / floor:.2f}x |"
              + (f" {med(0) / base:.2f}x |" if base else "") + (f" {med(0) / gib:.2f} |" if gib else "")
              + f" {med(1):.2f} | {med(2):.2f} | {med(3):.2f} | {max(m[4] for m in ms)} |"
              f" {', '.join(f'{m[0]:.2f}' for m in ms)} |")
    tables = [(v[0], [commits(m[5]) for m in results[v[0]]]) for v in variants if is_iceberg(v[2])]
    if tables:
        print()
        print("| variant | commits per run | files per commit | records per run | commit ms median |"
              " commit ms max | commits/min | commit ms per round |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, runs in tables:
        every = [c for run in runs for c in run]
        walls = [m[3] for m in results[name]]
        per_min = statistics.median(len(run) / w * 60 for run, w in zip(runs, walls))
        print(f"| {name} | {statistics.median(len(r) for r in runs):g} |"
              f" {statistics.median(c[0] for c in every):g} |"
              f" {statistics.median(sum(c[1] for c in r) for r in runs):g} |"
              f" {statistics.median(c[2] for c in every):g} | {max(c[2] for c in every)} |"
              f" {per_min:.1f} | {'; '.join(', '.join(str(c[2]) for c in r) for r in runs)} |")


if __name__ == "__main__":
    main()
