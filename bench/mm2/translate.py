#!/usr/bin/env python3
"""Offset-translation lag of the replicate benchmark; run it through `TRANSLATE=1
bench/replicate.sh [SIZE_MIB]` (which checks the dev environment and resolves MirrorMaker 2's
jars first). Python standard library only; the Kafka helpers are bench/mm2/replicate.py's.

Before each contender runs, three consumer groups of the source commit positions on the data
set's topic (8 partitions): a quarter, half and all of every partition (ConsumerGroupCommand
--reset-offsets, no consumer running). Each contender then copies the whole topic with default
intervals, exactly once as EOS says (off, on):
  mm2     MirrorMaker 2 4.3.1's dedicated driver (settings of bench/mm2/replicate.py; checkpoints
          every 60 s, offset.lag.max 100, all defaults); kept running until WAIT_S (125) seconds
          after the copy completed, so that at least two checkpoint rounds saw every offset sync.
  strata  `strata replicate --once` with sync_group_offsets = true (interval 60 s): its last round,
          when the copy is complete, syncs the groups through the last offset syncs.
Then Kafka's own RemoteClusterUtils.translateOffsets (devenv/mm2's TranslateOffsets, on the
target, DefaultReplicationPolicy: both rename to <source alias>.<topic>) gives each group's
target offset per partition; the record there (read_committed) names its source offset, so
"behind" = group position - source offset of the record a consumer switching clusters reads
first (0 = exact; negative would be a skipped record). Markdown on stdout, raw numbers in
.dev/bench/translate-<stamp>.json.
"""

import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import replicate as R  # noqa: E402  (the replicate benchmark's helpers and settings)

B = R.B
FRACTIONS = (0.25, 0.5, 1.0)
WAIT_S = float(os.environ.get("WAIT_S", "125"))
MM2_CLASSPATH = os.environ.get("STRATA_TEST_MM2_CLASSPATH", "")


def commit_groups(ds, stamp, run):
    """Commits one group per fraction on the source; returns {group: {partition: position}}."""
    per = ds.records // R.PARTITIONS
    groups = {}
    for f in FRACTIONS:
        g = f"bench-translate-{stamp}-r{run}-{int(f * 100)}"
        at = int(per * f)
        r = subprocess.run([str(R.ROOT / "dev"), "kafka-class",
                            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                            "--bootstrap-server", R.SRC, "--group", g, "--topic", ds.topic,
                            "--reset-offsets", "--to-offset", str(at), "--execute"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            R.die(f"could not commit group {g}: {r.stderr.strip()[-400:]}")
        groups[g] = {p: at for p in range(R.PARTITIONS)}
    return groups


def translate(source_alias, group):
    """RemoteClusterUtils.translateOffsets on the target: {partition: offset} ({} when none)."""
    r = subprocess.run(["java", "-cp", MM2_CLASSPATH, "TranslateOffsets", R.DST, source_alias, group,
                        "default", f"@{R.PEER_JAVA}"], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-300:]}
    try:
        return {int(k.rsplit(":", 1)[1]): v for k, v in json.loads(r.stdout).items()}
    except (ValueError, IndexError):
        return {"error": f"unreadable answer: {r.stdout[:200]}"}


def source_offset_at(ds, topic, p, offset, end):
    """Source offset of the first record a read_committed consumer gets at `offset` of `topic`."""
    if offset >= end:
        return (ds.records - 1 - p) // R.PARTITIONS + 1  # past the last: the partition's end
    r = subprocess.run([*R.kcat_base("dst"), "-C", "-t", topic, "-p", str(p), "-o", str(offset), "-c", "1",
                        "-e", "-q", "-X", "isolation.level=read_committed", "-f", "%k"],
                       capture_output=True, timeout=60)
    if not r.stdout.strip():
        # Only transaction markers from there to the end: the consumer reads nothing before
        # the end of the partition.
        return (ds.records - 1 - p) // R.PARTITIONS + 1
    i = R.order_id(r.stdout)
    return None if i is None else i // R.PARTITIONS


def measure(ds, target, source_alias, groups):
    end = R.end_offsets("dst", target)
    out = {}
    for g, positions in groups.items():
        t = translate(source_alias, g)
        if "error" in t:
            out[g] = {"error": t["error"]}
            continue
        behind = {}
        for p, at in positions.items():
            if p not in t:
                behind[p] = None
                continue
            src = source_offset_at(ds, target, p, t[p], end.get(p, 0))
            behind[p] = None if src is None else at - src
        out[g] = {"position": positions[0], "translated": t, "behind": behind}
    return out


def wait_complete(ds, proc, target, timeout_s):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        hw = R.end_offsets("dst", target)
        if sum(hw.values()) >= ds.records and R.tail_complete(ds, target, hw):
            return time.monotonic() - t0
        if proc.poll() is not None and proc.returncode != 0:
            return None
        time.sleep(1)
    return None


def run(ds, work, stamp, n, key, eos, password, timeout_s):
    groups = commit_groups(ds, stamp, n)
    d = work / f"{key}-eos{int(eos)}"
    d.mkdir(parents=True)
    before = {"src": R.list_topics("src"), "dst": R.list_topics("dst")}
    if key == "mm2":
        s, t = f"s{stamp}r{n}", f"t{stamp}r{n}"
        props = d / "mm2.properties"
        with open(os.open(props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(R.mm2_props(ds, s, t, eos, B.free_port(), password))
        cmd = ["java", *R.MM2_HEAP, "-cp", f"{R.MM2_LIBS}/*",
               f"-Dorg.slf4j.simpleLogger.defaultLogLevel={R.MM2_LOG_LEVEL}",
               "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
               "org.apache.kafka.connect.mirror.MirrorMaker", str(props), "--clusters", t]
        env, alias, target = dict(os.environ), s, f"{s}.{ds.topic}"
        mine = re.compile(rf"(^|\.){s}\.|(^|\.){t}(\.|$)|^heartbeats$")
    else:
        cfg = d / "replicate.toml"
        name = f"bench-translate-{stamp}-r{n}"
        # The task's own keys go before its [tasks.peer] table.
        toml = R.STRATA_TOML.format(src=R.SRC, dst=R.DST, name=name, topic=ds.topic, user=R.PEER_USER,
                                    eos="true" if eos else "false")
        cfg.write_text(toml.replace("[tasks.peer]", "sync_group_offsets = true\n"
                                    f'groups_regex = "bench-translate-{stamp}-r{n}-.*"\n[tasks.peer]'))
        cmd = [str(R.STRATA_BIN), "replicate", "--once", "--config", str(cfg)]
        env, alias, target = dict(os.environ, PEER_PASSWORD=password), "src", f"src.{ds.topic}"
        if target in before["dst"]:
            R.delete_topics("dst", {target})
            before["dst"].discard(target)
        mine = re.compile(r"^src\.|(^|\.)dst(\.|$)|^heartbeats$")
    R.log(f"translate: {key}, exactly once {'on' if eos else 'off'}, target topic {target}")
    m = {"contender": key, "exactly_once": eos, "target_topic": target, "log": str(d / f"{key}.log")}
    with open(d / f"{key}.log", "w") as lf:
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            done = wait_complete(ds, proc, target, timeout_s)
            if done is None:
                m["error"] = f"the copy did not complete (rc {proc.poll()}); see {m['log']}"
            else:
                m["copy_s"] = round(done, 1)
                t1 = time.monotonic()
                if key == "mm2":
                    time.sleep(WAIT_S)
                else:
                    proc.wait(timeout=120)
                    m["rc"] = proc.returncode
                m["translated_after_s"] = round(time.monotonic() - t1, 1)
                m["groups"] = measure(ds, target, alias, groups)
        finally:
            if proc.poll() is None:
                R.stop_group(proc, 30)
    if key == "mm2":
        props.write_text(props.read_text().replace(password, "<hidden>"))
    cleanup = {c: {x for x in R.list_topics(c) - before[c] if mine.search(x)} for c in ("src", "dst")}
    if key == "strata":
        cleanup["dst"].add(target)
    return m, cleanup


def table(runs):
    lines = ["| contender | exactly once | group at (of each partition) | records behind: max | mean | "
             "translated after the copy |", "|---|---|---|---:|---:|---:|"]
    for r in runs:
        label = "MirrorMaker 2 (4.3.1)" if r["contender"] == "mm2" else "strata replicate --once"
        eos = "on" if r["exactly_once"] else "off"
        if "groups" not in r:
            lines.append(f"| {label} | {eos} | failed: {r.get('error')} | | | |")
            continue
        for g, x in r["groups"].items():
            pct = g.rsplit("-", 1)[1] + " %"
            b = [v for v in x.get("behind", {}).values() if v is not None]
            if "error" in x or len(b) < R.PARTITIONS:
                why = x.get("error") or f"{R.PARTITIONS - len(b)} partition(s) not translated"
                lines.append(f"| {label} | {eos} | {pct} | {why} | | |")
                continue
            lines.append(f"| {label} | {eos} | {pct} ({x['position']}) | {max(b)} | {sum(b) / len(b):.0f} "
                         f"| {r['translated_after_s']} s |")
    return "\n".join(lines)


def main():
    if not MM2_CLASSPATH:
        R.die("STRATA_TEST_MM2_CLASSPATH is not set (./dev env exports it; ./dev setup builds TranslateOffsets)")
    size_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    contenders = os.environ.get("CONTENDERS", "mm2 strata").split()
    modes = [{"off": False, "on": True}[x] for x in os.environ.get("EOS", "off on").split()]
    password = R.PEER_PASSWORD_FILE.read_text().strip()
    stamp = datetime.datetime.now().strftime("%Y%m%d%H%M%S")
    work = R.STATE / "work" / f"translate-{stamp}"
    work.mkdir(parents=True)
    ds = B.Dataset(size_mib * R.MIB // R.RECORD_SIZE, R.RECORD_SIZE, R.PARTITIONS, R.SEED)
    ds.ensure()
    timeout_s = float(os.environ.get("TIMEOUT_S") or max(300, 60 * ds.bytes / 100e6))
    runs, n = [], 0
    for key in contenders:
        for eos in modes:
            n += 1
            m, cleanup = run(ds, work, stamp, n, key, eos, password, timeout_s)
            R.log(f"  {json.dumps({k: v for k, v in m.items() if k != 'groups'})}")
            runs.append(m)
            for c in ("src", "dst"):
                R.delete_topics(c, cleanup[c])
    per = ds.records // R.PARTITIONS
    md = (f"### Offset translation: {ds.describe()} ({per} records per partition), groups committed on "
          f"the source before the copy, translated with RemoteClusterUtils.translateOffsets\n\n"
          + table(runs) + "\n")
    print(md, flush=True)
    out = R.STATE / f"translate-{stamp}.json"
    out.write_text(json.dumps({"stamp": stamp, "dataset": ds.as_json(), "runs": runs, "markdown": md}, indent=1))
    R.log(f"raw numbers: {out}; logs: {work}")
    bad = [r for r in runs if "groups" not in r
           or any("error" in x or any(v is None or v < 0 for v in x["behind"].values())
                  for x in r["groups"].values())]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
