#!/usr/bin/env python3
"""End-to-end latency of replication at a steady rate; run it through bench/replicate.sh with
LATENCY_S set (which checks the dev environment and resolves MirrorMaker 2's jars first).

For each contender (mm2, strata) and exactly-once mode (off, on): a fresh 8-partition source
topic on the dev broker; the contender runs continuously (MM2's dedicated driver; `strata
replicate` without --once) to the dev peer; once the target topic holds a few warm-up records,
a read_committed kcat on the target starts at its end and this script produces 1 KiB records
into the source at RATE_MIB MiB/s (default 20) for LATENCY_S seconds. Each record carries its
produce time as its create timestamp, which both contenders preserve, so the latency of a
record is the moment kcat hands it over minus its timestamp: produce to visible to a
read_committed consumer in the target. The first 5 s are a warm-up and not counted. Also
reported: the contender's CPU seconds per GiB over the measured window, and records seen
against records produced (a contender that falls behind shows it there).
"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import replicate as R  # noqa: E402  (kcat_base, mm2_props, STRATA_TOML, tree_cpu, ...)

WARMUP_S = 5
RECORD = 1024


def create_topic(topic):
    R.topic_cmd("src", "--create", "--topic", topic, "--partitions", str(R.PARTITIONS),
                "--replication-factor", "1")


class Producer:
    """kcat -P fed at a steady rate from this process; record timestamps are set on produce."""

    def __init__(self, topic, rate_mib):
        self.proc = subprocess.Popen([*R.kcat_base("src"), "-P", "-t", topic, "-X", "linger.ms=5",
                                      "-X", "queue.buffering.max.kbytes=65536"],
                                     stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.per_s = int(rate_mib * R.MIB / RECORD)
        self.sent = 0

    def burst(self, n):
        line = b"x" * (RECORD - 1) + b"\n"
        self.proc.stdin.write(line * n)
        self.proc.stdin.flush()
        self.sent += n

    def run_for(self, seconds, step=0.02):
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            due = int((time.monotonic() - t0) * self.per_s) - self.sent + self.warm
            if due > 0:
                self.burst(due)
            time.sleep(step)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class Watcher:
    """A read_committed kcat on the target from its end: the latency of every record it sees."""

    def __init__(self, topic):
        self.proc = subprocess.Popen([*R.kcat_base("dst"), "-C", "-u", "-q", "-t", topic, "-o", "end",
                                      "-X", "isolation.level=read_committed", "-f", "%T\\n"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.lat = []  # (seen at, ms)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for raw in self.proc.stdout:
            now = time.time() * 1000
            try:
                self.lat.append((now, now - int(raw)))
            except ValueError:
                pass

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.thread.join(timeout=10)


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 1)


def contender_cmd(key, eos, work, stamp, n, topic, password):
    d = work / f"latency-{key}-eos{int(eos)}"
    d.mkdir(parents=True)
    if key == "mm2":
        s, t = f"ls{stamp}r{n}", f"lt{stamp}r{n}"
        props = d / "mm2.properties"
        ds = type("D", (), {"topic": topic})
        with open(os.open(props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(R.mm2_props(ds, s, t, eos, R.B.free_port(), password))
        cmd = ["java", *R.MM2_HEAP, "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
               "-Djava.awt.headless=true", f"-Dorg.slf4j.simpleLogger.defaultLogLevel={R.MM2_LOG_LEVEL}",
               "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
               "-cp", f"{R.MM2_LIBS}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(props),
               "--clusters", t]
        return cmd, dict(os.environ), f"{s}.{topic}", d / "mm2.log", props
    cfg = d / "replicate.toml"
    name = f"bench-latency-{stamp}-r{n}"
    cfg.write_text(R.STRATA_TOML.format(src=R.SRC, dst=R.DST, name=name, topic=topic, user=R.PEER_USER,
                                        eos="true" if eos else "false"))
    cmd = [str(R.STRATA_BIN), "replicate", "--config", str(cfg)]
    return cmd, dict(os.environ, PEER_PASSWORD=password), f"src.{topic}", d / "strata.log", None


def run(key, eos, work, stamp, n, seconds, rate_mib, password):
    topic = f"bench-latency-{stamp}-r{n}"
    create_topic(topic)
    cmd, env, target, logf, props = contender_cmd(key, eos, work, stamp, n, topic, password)
    m = {"contender": key, "exactly_once": eos, "rate_mib_s": rate_mib, "seconds": seconds, "log": str(logf)}
    prod = Producer(topic, rate_mib)
    prod.warm = 0
    prod.burst(R.PARTITIONS * 10)
    prod.warm = prod.sent
    lf = open(logf, "w")
    proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    watcher = None
    try:
        t0 = time.monotonic()
        while sum(R.end_offsets("dst", target).values()) < prod.sent:
            if time.monotonic() - t0 > 180 or proc.poll() is not None:
                m["error"] = f"the warm-up records did not reach {target} (see {logf})"
                return m, topic, target
            time.sleep(0.5)
        m["ready_s"] = round(time.monotonic() - t0, 1)
        watcher = Watcher(target)
        time.sleep(2)  # kcat has its assignment and sits at the end
        cpu0 = R.tree_cpu(proc.pid)
        t_start = time.time() * 1000
        prod.run_for(seconds)
        cpu1 = R.tree_cpu(proc.pid)
        produced = prod.sent - prod.warm
        prod.close()
        time.sleep(10)  # the tail arrives
        m["peak_rss_mib"] = round((R.tree_hwm_kib(proc.pid) or 0) / 1024, 1)
    finally:
        if watcher:
            watcher.stop()
        R.stop_group(proc, 30)
        lf.close()
        if props:
            props.write_text(props.read_text().replace(password, "<hidden>"))
    lat = [ms for at, ms in watcher.lat if at >= t_start + WARMUP_S * 1000]
    m.update(produced=produced, seen=len(watcher.lat), p50_ms=pct(lat, 0.50), p99_ms=pct(lat, 0.99),
             max_ms=pct(lat, 1.0),
             cpu_s_per_gib=round((cpu1 - cpu0) / (produced * RECORD / R.GIB), 2) if produced else None)
    return m, topic, target


def table(runs):
    rows = ["| contender | exactly once | records produced / seen | p50 ms | p99 ms | max ms | CPU s/GiB at the rate | peak RSS MiB |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        if r.get("error"):
            rows.append(f"| {r['contender']} | {'on' if r['exactly_once'] else 'off'} | failed: {r['error']} | | | | | |")
            continue
        rows.append(f"| {r['contender']} | {'on' if r['exactly_once'] else 'off'} | {r['produced']:,} / {r['seen']:,} | "
                    f"{r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | {r['cpu_s_per_gib']} | {r['peak_rss_mib']} |")
    return "\n".join(rows)


def main():
    import datetime
    import json
    seconds = int(os.environ.get("LATENCY_S", "60"))
    rate = float(os.environ.get("RATE_MIB", "20"))
    contenders = os.environ.get("CONTENDERS", "mm2 strata").split()
    modes = [{"off": False, "on": True}[x] for x in os.environ.get("EOS", "off on").split()]
    password = R.PEER_PASSWORD_FILE.read_text().strip()
    stamp = datetime.datetime.now().strftime("%Y%m%d%H%M%S")
    work = R.STATE / "work" / f"latency-{stamp}"
    work.mkdir(parents=True)
    runs, n = [], 0
    for key in contenders:
        for eos in modes:
            n += 1
            R.log(f"latency: {key}, exactly once {'on' if eos else 'off'}, {rate} MiB/s for {seconds} s")
            m, topic, target = run(key, eos, work, stamp, n, seconds, rate, password)
            R.log(f"  {m}")
            runs.append(m)
            R.delete_topics("src", {topic})
            R.delete_topics("dst", {target})
    md = (f"### Replicate latency: 1 KiB records at {rate:g} MiB/s for {seconds} s over {R.PARTITIONS} partitions, "
          f"{R.SRC} -> {R.DST}, produce to visible to a read_committed consumer of the target "
          f"(first {WARMUP_S} s not counted)\n\n" + table(runs) + "\n")
    print(md, flush=True)
    out = R.STATE / f"latency-{stamp}.json"
    out.write_text(json.dumps({"stamp": stamp, "runs": runs, "markdown": md}, indent=1))
    R.log(f"raw numbers: {out}; logs: {work}")
    return 0 if all("error" not in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
