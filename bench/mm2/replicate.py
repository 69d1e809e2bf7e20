#!/usr/bin/env python3
"""The replicate benchmark's driver; run it through bench/replicate.sh (which checks the dev
environment and resolves MirrorMaker 2's jars first). Python standard library only.

Source: the dev broker (STRATA_TEST_BOOTSTRAP, 127.0.0.1:9092), data set of bench/bench.py
(bench/gen.py records, 1 KiB values over 8 partitions, seed 42; reused when the topic already
holds it). Target: the dev peer (STRATA_TEST_PEER_BOOTSTRAP, 127.0.0.1:9094, SASL_PLAINTEXT;
the contenders log in with SCRAM-SHA-512 as user strata, this script's own kcat probes with
PLAIN because Debian's kcat cannot do SCRAM against Kafka 4.x).

Contenders, each once with exactly-once off and once on:
  mm2     org.apache.kafka.connect.mirror.MirrorMaker 4.3.1 (the dedicated driver), properties
          file first then --clusters <target alias>, tasks.max=2, aliases fresh for every run
          (so every run has its own target topic <source alias>.<topic>, Connect group and
          internal topics), plugin.discovery = service_load (as its start-up log advises);
          exactly-once: <target>.exactly.once.source.support = enabled,
          <source>.consumer.isolation.level = read_committed; internal REST on loopback.
  strata  "$STRATA_BIN" replicate --once --config FILE (FILE written here, password from
          PEER_PASSWORD in the environment); target topic src.<topic>, deleted before the run.

A run is complete when the target's end offsets add up to at least the data set's records and
the last record of every target partition (read_committed) is the data set's last record of
that partition; wall time and CPU are taken at that poll (MM2 is then stopped with SIGTERM; its
shutdown is not counted). With VERIFY=1 every run's target is then read whole (read_committed)
and must hold every record exactly once, in order, per partition.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, str(ROOT / "bench"))
import bench as B  # noqa: E402  (Dataset, machine, free_port, wait_for_low_load)

STATE = ROOT / ".dev" / "bench"
SRC = os.environ.get("STRATA_TEST_BOOTSTRAP", "127.0.0.1:9092")
DST = os.environ.get("STRATA_TEST_PEER_BOOTSTRAP", "127.0.0.1:9094")
PEER_USER = os.environ.get("STRATA_TEST_PEER_USER", "strata")
PEER_PASSWORD_FILE = Path(os.environ.get("STRATA_TEST_PEER_PASSWORD_FILE", ROOT / ".dev/kafka-peer/strata.password"))
PEER_KCAT = os.environ.get("STRATA_TEST_PEER_KCAT_CONFIG", str(ROOT / ".dev/kafka-peer/kcat.conf"))
PEER_JAVA = os.environ.get("STRATA_TEST_PEER_CLIENT_CONFIG", str(ROOT / ".dev/kafka-peer/client.properties"))
MM2_LIBS = Path(os.environ.get("MM2_LIBS", STATE / "mm2-libs"))
STRATA_BIN = Path(os.environ.get("STRATA_BIN", ROOT / "target" / "release" / "strata"))
MM2_HEAP = os.environ.get("MM2_HEAP", "-Xms256m -Xmx2g").split()
MM2_LOG_LEVEL = os.environ.get("MM2_LOG_LEVEL", "info")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
GIB, MIB = 1 << 30, 1 << 20
PARTITIONS, RECORD_SIZE, SEED = 8, 1024, 42
TAIL = 64  # records read from the end of each target partition by the completion check


def log(msg):
    print(f"[bench/replicate] {msg}", file=sys.stderr, flush=True)


def die(msg):
    print(f"[bench/replicate] error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


# --- /proc accounting: a process and all its descendants -------------------------------------------

def _stat(pid):
    """(ppid, utime+stime+cutime+cstime in s) of one process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), sum(int(x) for x in fields[11:15]) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def tree(root):
    """root and every live descendant."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st:
                kids.setdefault(st[0], []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def tree_cpu(root):
    """user+sys seconds of root's threads, its live descendants' and its reaped children's."""
    total = None
    for p in tree(root):
        st = _stat(p)
        if st:
            total = (total or 0) + st[1]
    return total


def hwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def tree_hwm_kib(root):
    vals = [v for v in (hwm_kib(p) for p in tree(root)) if v]
    return sum(vals) if vals else None


def service_cpu(name):
    pid = B.service_pid(name)
    return (pid, _stat(pid)[1]) if pid and _stat(pid) else (None, None)


# --- Kafka, through kcat (the peer with PLAIN: see the docstring) ----------------------------------

def kcat_base(cluster):
    return ["kcat", "-F", PEER_KCAT, "-b", DST] if cluster == "dst" else ["kcat", "-b", SRC]


def list_topics(cluster):
    r = subprocess.run([*kcat_base(cluster), "-L", "-J", "-m", "10"], capture_output=True, text=True)
    try:
        return {t["topic"] for t in json.loads(r.stdout).get("topics", []) if not t.get("error")}
    except ValueError:
        die(f"could not list the topics of {cluster}: {r.stderr.strip()[-400:]}")


def end_offsets(cluster, topic):
    """{partition: high watermark}, or {} while the topic does not exist."""
    args = [*kcat_base(cluster), "-Q", "-J"]
    for p in range(PARTITIONS):
        args += ["-t", f"{topic}:{p}:-1"]
    r = subprocess.run(args, capture_output=True, text=True)
    try:
        data = json.loads(r.stdout).get(topic, {})
    except ValueError:
        return {}
    return {int(v["partition"]): int(v["offset"]) for v in data.values()
            if isinstance(v, dict) and "offset" in v and int(v["offset"]) >= 0}


def last_index(ds, p):
    """Index of the data set's last record in partition p (record i goes to i % P)."""
    return p + PARTITIONS * ((ds.records - 1 - p) // PARTITIONS)


def order_id(key):
    m = re.fullmatch(rb'\{"order_id":(\d+)\}', key.strip())
    return int(m.group(1)) - 100000000 if m else None


def tail_complete(ds, topic, hw):
    """The last committed record of every target partition is the data set's last of it."""
    for p in range(PARTITIONS):
        if p >= ds.records:
            continue
        start = max(0, hw.get(p, 0) - TAIL)
        r = subprocess.run([*kcat_base("dst"), "-C", "-t", topic, "-p", str(p), "-o", str(start), "-e",
                            "-q", "-X", "isolation.level=read_committed", "-f", "%k\n"],
                           capture_output=True, timeout=60)
        ids = [order_id(k) for k in r.stdout.splitlines() if k]
        if last_index(ds, p) not in ids:
            return False
    return True


def verify_target(ds, topic):
    """Reads the whole target topic (read_committed): every record exactly once, in order."""
    proc = subprocess.Popen([*kcat_base("dst"), "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                             "-X", "isolation.level=read_committed", "-f", "%p %k\n"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    nxt = {p: p for p in range(PARTITIONS)}
    count = dup = gap = bad = 0
    for line in proc.stdout:
        count += 1
        try:
            p, key = line.split(b" ", 1)
            p, i = int(p), order_id(key)
        except ValueError:
            bad += 1
            continue
        if i is None or p not in nxt or i % PARTITIONS != p:
            bad += 1
        elif i == nxt[p]:
            nxt[p] += PARTITIONS
        elif i < nxt[p]:
            dup += 1
        else:
            gap += (i - nxt[p]) // PARTITIONS
            nxt[p] = i + PARTITIONS
    proc.wait()
    missing = sum(max(0, (last_index(ds, p) - nxt[p]) // PARTITIONS + 1) for p in range(PARTITIONS)
                  if p < ds.records)
    return {"records_read": count, "duplicates": dup, "missing": gap + missing, "foreign": bad,
            "ok": proc.returncode == 0 and count == ds.records and dup == gap == missing == bad == 0}


def topic_cmd(cluster, *args):
    cmd = [str(ROOT / "dev"), "kafka-class", "org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
           DST if cluster == "dst" else SRC, *(["--command-config", PEER_JAVA] if cluster == "dst" else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def delete_topics(cluster, names):
    names = sorted(names)
    if not names:
        return
    log(f"deleting {len(names)} topic(s) on {cluster}: {', '.join(names)}")
    # TopicCommand takes a regex; the names are [A-Za-z0-9._-], so escaping the dots is enough.
    topic_cmd(cluster, "--delete", "--topic", "|".join(re.escape(n).replace("\\-", "-") for n in names))
    for _ in range(120):
        if not (list_topics(cluster) & set(names)):
            return
        time.sleep(0.5)
    log(f"warning: topics still listed on {cluster} after 60 s: {sorted(list_topics(cluster) & set(names))}")


# --- one run ---------------------------------------------------------------------------------------

def reap(pid):
    """(exit code, CPU s, max RSS KiB) when pid has exited (reaped here), else None."""
    try:
        wpid, status, ru = os.wait4(pid, os.WNOHANG)
    except ChildProcessError:
        return (None, None, None)
    if wpid == 0:
        return None
    return (os.waitstatus_to_exitcode(status), ru.ru_utime + ru.ru_stime, ru.ru_maxrss)


def stop_group(proc, grace):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    t = time.monotonic()
    while time.monotonic() - t < grace:
        if reap(proc.pid) is not None:
            proc.returncode = 0
            return
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(proc.pid, 0)
    except ChildProcessError:
        pass
    proc.returncode = -9


def run_one(ds, key, eos, cmd, env, logf, target, timeout_s, exits_by_itself):
    """Starts cmd, polls the target every second until it holds the data set; returns figures."""
    side0 = {n: service_cpu(n) for n in ("kafka", "kafka-peer")}
    lf = open(logf, "w")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    m = {"contender": key, "exactly_once": eos, "rc": None, "log": str(logf)}
    first = exited = done = None
    hwm = cpu = 0
    why = None
    try:
        while True:
            tick = time.monotonic() - t0
            if exited is None:
                exited = reap(proc.pid)
                if exited is not None:
                    proc.returncode = exited[0]
                    m["exit_s"] = round(tick, 2)
                    cpu = exited[1] if exited[1] is not None else cpu
                    hwm = max(hwm, exited[2] or 0)
                else:
                    cpu = tree_cpu(proc.pid) or cpu
                    hwm = max(hwm, tree_hwm_kib(proc.pid) or 0)
            hw = end_offsets("dst", target)
            total = sum(hw.values())
            if total and first is None:
                first = (tick, cpu)
            if total >= ds.records and tail_complete(ds, target, hw):
                done = tick
                if exited is None:  # the figures at this moment, not after the checks above
                    cpu = tree_cpu(proc.pid) or cpu
                    hwm = max(hwm, tree_hwm_kib(proc.pid) or 0)
                m["target_end_offsets"] = total
                break
            if exited is not None and (exited[0] != 0 or tick - m["exit_s"] > 15):
                why = (f"exited with {exited[0]} at {m['exit_s']} s, the target holding {total} offsets "
                       f"of {ds.records} records")
                break
            if tick > timeout_s:
                why = f"not complete after {timeout_s:.0f} s (target: {total} offsets of {ds.records} records)"
                break
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t0 - tick)))
        side = {}
        for n, (pid, c0) in side0.items():
            c1 = _stat(pid)[1] if pid and _stat(pid) else None
            side[f"{n}_cpu_s"] = round(c1 - c0, 2) if c0 is not None and c1 is not None else None
        if exited is None and exits_by_itself and done is not None:
            # strata --once: give it a minute to exit by itself, then count all it spent too
            t = time.monotonic()
            while exited is None and time.monotonic() - t < 60:
                time.sleep(0.2)
                exited = reap(proc.pid)
            if exited is not None:
                proc.returncode = exited[0]
                m.update(exit_s=round(time.monotonic() - t0, 2), cpu_total_s=round(exited[1], 2))
            else:
                m["warning"] = "did not exit within 60 s after the target was complete; stopped"
    finally:
        if exited is None:
            stop_group(proc, 30)
        lf.close()
    m["rc"] = proc.returncode if exited is not None else None
    m.update(side)
    if done is None:
        m["error"] = why
        return m
    m.update(wall_s=round(done, 2), cpu_s=round(cpu, 2), max_rss_kib=hwm,
             mb_per_s=round(ds.bytes / 1e6 / done, 1), cpu_s_per_gib=round(cpu / (ds.bytes / GIB), 2),
             peak_rss_mib=round(hwm / 1024, 1),
             first_record_s=round(first[0], 2) if first else None,
             first_record_cpu_s=round(first[1], 2) if first else None)
    if first and done > first[0]:
        m["steady_mb_per_s"] = round(ds.bytes / 1e6 / (done - first[0]), 1)
        m["steady_cpu_s_per_gib"] = round((cpu - first[1]) / (ds.bytes / GIB), 2)
    if exits_by_itself and m.get("rc") not in (0, None):
        m["error"] = f"exited with {m['rc']} after the target was complete"
    return m


def mm2_props(ds, s, t, eos, port, password):
    lines = [
        f"clusters = {s}, {t}",
        f"{s}.bootstrap.servers = {SRC}",
        f"{t}.bootstrap.servers = {DST}",
        f"{t}.security.protocol = SASL_PLAINTEXT",
        f"{t}.sasl.mechanism = SCRAM-SHA-512",
        f'{t}.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required '
        f'username="{PEER_USER}" password="{password}";',
        f"{s}->{t}.enabled = true",
        f"{s}->{t}.topics = {ds.topic}",
        f"{t}->{s}.enabled = false",
        f"{t}->{s}.emit.heartbeats.enabled = false",
        "tasks.max = 2",
        "replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset.storage.replication.factor = 1",
        "status.storage.replication.factor = 1",
        "config.storage.replication.factor = 1",
        "# no authorizer on the dev clusters",
        "sync.topic.acls.enabled = false",
        "# what MM2 itself recommends at start ('All plugins have ServiceLoader manifests'): no",
        "# reflective classpath scan (about 5 s each for the driver and the herder here)",
        "plugin.discovery = service_load",
        f"{t}.plugin.discovery = service_load",
        "dedicated.mode.enable.internal.rest = true",
        f"listeners = http://127.0.0.1:{port}",
    ]
    if eos:
        lines += [f"{t}.exactly.once.source.support = enabled",
                  f"{s}.consumer.isolation.level = read_committed"]
    return "\n".join(lines) + "\n"


def run_mm2(ds, work, stamp, n, eos, password, timeout_s):
    s, t = f"s{stamp}r{n}", f"t{stamp}r{n}"
    d = work / f"mm2-eos{int(eos)}"
    d.mkdir(parents=True)
    props = d / "mm2.properties"
    with open(os.open(props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(mm2_props(ds, s, t, eos, B.free_port(), password))
    target = f"{s}.{ds.topic}"
    cmd = ["java", *MM2_HEAP, "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
           "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
           "-Djava.awt.headless=true",
           f"-Dorg.slf4j.simpleLogger.defaultLogLevel={MM2_LOG_LEVEL}",
           "-Dorg.slf4j.simpleLogger.showDateTime=true",
           "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common.config.AbstractConfig=warn",
           "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
           "-cp", f"{MM2_LIBS}/*", "org.apache.kafka.connect.mirror.MirrorMaker",
           str(props), "--clusters", t]
    before = {"src": list_topics("src"), "dst": list_topics("dst")}
    log(f"mm2, exactly once {'on' if eos else 'off'}: {s} -> {t}, target topic {target}")
    try:
        m = run_one(ds, "mm2", eos, cmd, dict(os.environ), d / "mm2.log", target, timeout_s, False)
    finally:
        # keep a copy of the settings without the password
        props.write_text(props.read_text().replace(password, "<hidden>"))
    m.update(source_alias=s, target_alias=t, target_topic=target)
    mine = re.compile(rf"(^|\.){s}\.|(^|\.){t}(\.|$)|^heartbeats$")
    cleanup = {c: {x for x in list_topics(c) - before[c] if mine.search(x)} for c in ("src", "dst")}
    return m, cleanup


STRATA_TOML = """\
[kafka]
bootstrap_servers = "{src}"
[[tasks]]
type = "replicate"
name = "{name}"
direction = "push"
local_alias = "src"
topics = ["{topic}"]
rename_topics = true
exactly_once = {eos}
[tasks.peer]
alias = "dst"
bootstrap_servers = "{dst}"
security_protocol = "SASL_PLAINTEXT"
sasl_mechanism = "SCRAM-SHA-512"
username = "{user}"
password = "${{PEER_PASSWORD}}"
"""


def strata_available():
    if not os.access(STRATA_BIN, os.X_OK):
        return f"no executable {STRATA_BIN}"
    try:
        r = subprocess.run([str(STRATA_BIN), "replicate", "--help"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    return None if r.returncode == 0 else f"{STRATA_BIN} has no 'replicate' subcommand"


def run_strata(ds, work, stamp, n, eos, password, timeout_s):
    d = work / f"strata-eos{int(eos)}"
    d.mkdir(parents=True)
    cfg = d / "replicate.toml"
    name = f"bench-replicate-{stamp}-r{n}"
    cfg.write_text(STRATA_TOML.format(src=SRC, dst=DST, name=name, topic=ds.topic, user=PEER_USER,
                                      eos="true" if eos else "false"))
    target = f"src.{ds.topic}"
    if target in list_topics("dst"):
        log(f"strata: {target} is left from an earlier run; deleting it first")
        delete_topics("dst", {target})
    before = {"src": list_topics("src"), "dst": list_topics("dst")}
    env = dict(os.environ, PEER_PASSWORD=password)
    log(f"strata, exactly once {'on' if eos else 'off'}: task {name}, target topic {target}")
    m = run_one(ds, "strata", eos, [str(STRATA_BIN), "replicate", "--once", "--config", str(cfg)], env,
                d / "strata.log", target, timeout_s, True)
    m.update(task=name, target_topic=target, config=str(cfg))
    mine = re.compile(r"^src\.|(^|\.)dst(\.|$)|^heartbeats$")
    cleanup = {c: {x for x in list_topics(c) - before[c] if mine.search(x)} for c in ("src", "dst")}
    cleanup["dst"].add(target)
    return m, cleanup


# --- report ----------------------------------------------------------------------------------------

def ratio(a, b):
    return round(a / b, 2) if a is not None and b else None


def fmt_ratio(x):
    return "—" if x is None else (f"{x:.2f}x" if x >= 0.1 else f"{x:.3f}x")


def table(runs):
    mm2 = {r["exactly_once"]: r for r in runs if r["contender"] == "mm2" and "wall_s" in r}
    lines = ["| contender | exactly once | wall s | MB/s | CPU s | CPU s/GiB | peak RSS MiB | CPU vs MM2 | MB/s vs MM2 |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        label = "MirrorMaker 2 (4.3.1)" if r["contender"] == "mm2" else "strata replicate"
        eos = "on" if r["exactly_once"] else "off"
        if "wall_s" not in r:
            lines.append(f"| {label} | {eos} | {r.get('skipped') or 'failed: ' + str(r.get('error'))} |" + " |" * 6)
            continue
        ref = mm2.get(r["exactly_once"])
        r["cpu_vs_mm2"] = ratio(r["cpu_s"], ref["cpu_s"]) if ref else None
        r["throughput_vs_mm2"] = ratio(r["mb_per_s"], ref["mb_per_s"]) if ref else None
        lines.append(f"| {label} | {eos} | {r['wall_s']:.2f} | {r['mb_per_s']:.1f} | {r['cpu_s']:.2f} "
                     f"| {r['cpu_s_per_gib']:.2f} | {r['peak_rss_mib']:.0f} | {fmt_ratio(r['cpu_vs_mm2'])} "
                     f"| {fmt_ratio(r['throughput_vs_mm2'])} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    a = ap.parse_args()
    contenders = os.environ.get("CONTENDERS", "mm2 strata").split()
    modes = [{"off": False, "on": True}[x] for x in os.environ.get("EOS", "off on").split()]
    verify = os.environ.get("VERIFY", "1") != "0"
    keep = os.environ.get("KEEP_TOPICS", "0") == "1"
    password = PEER_PASSWORD_FILE.read_text().strip()
    if "mm2" in contenders and not list(MM2_LIBS.glob("connect-mirror-[0-9]*.jar")):
        die(f"no MirrorMaker 2 jars in {MM2_LIBS} (bench/replicate.sh resolves them)")

    stamp = datetime.datetime.now().strftime("%Y%m%d%H%M%S")
    work = STATE / "work" / f"replicate-{stamp}"
    work.mkdir(parents=True)
    ds = B.Dataset(a.size_mib * MIB // RECORD_SIZE, RECORD_SIZE, PARTITIONS, SEED)
    log(f"data set: {ds.describe()}")
    ds.ensure()
    timeout_s = float(os.environ.get("TIMEOUT_S") or max(300, 60 * ds.bytes / 100e6))
    B.wait_for_low_load(float(os.environ.get("WAIT_LOAD", "0")), 1800)
    loads = [round(os.getloadavg()[0], 2)]

    runs, notes = [], []
    unavailable = strata_available() if "strata" in contenders else None
    if unavailable:
        print(f"strata replicate not available, skipped ({unavailable})", flush=True)
        notes.append(f"strata replicate not available, skipped ({unavailable}).")
    n = 0
    for key in contenders:
        for eos in modes:
            n += 1
            if key == "strata" and unavailable:
                runs.append({"contender": key, "exactly_once": eos, "skipped": "not available, skipped"})
                continue
            fn = run_mm2 if key == "mm2" else run_strata
            m, cleanup = fn(ds, work, stamp, n, eos, password, timeout_s)
            if "wall_s" in m:
                log(f"  complete after {m['wall_s']} s: {m['mb_per_s']} MB/s, {m['cpu_s']} CPU s, "
                    f"peak RSS {m['peak_rss_mib']} MiB")
                if verify:
                    m["verify"] = verify_target(ds, m["target_topic"])
                    log(f"  verify: {m['verify']}")
                    if not m["verify"]["ok"]:
                        m["error"] = f"the target does not hold the data set exactly: {m['verify']}"
            else:
                log(f"  failed: {m.get('error')}; see {m['log']}")
            runs.append(m)
            if not keep:
                for c in ("src", "dst"):
                    delete_topics(c, cleanup[c])
    loads.append(round(os.getloadavg()[0], 2))

    for r in runs:
        if r.get("contender") == "mm2" and r.get("first_record_s") is not None:
            notes.append(
                f"MM2, exactly once {'on' if r['exactly_once'] else 'off'}: {r['first_record_s']} s and "
                f"{r['first_record_cpu_s']} CPU s to start the JVM, the herder and the connectors before "
                f"the first record reached the target; from then on {r.get('steady_mb_per_s')} MB/s and "
                f"{r.get('steady_cpu_s_per_gib')} CPU s/GiB.")
        if r.get("error") and "wall_s" in r:
            notes.append(f"{r['contender']}, exactly once {'on' if r['exactly_once'] else 'off'}: {r['error']}")
        if r.get("warning"):
            notes.append(f"{r['contender']}: {r['warning']}")
    if a.size_mib < 256:
        notes.append("Small data sets: start-up dominates and the 1 s polling step is a large part of "
                     "the wall time; these figures prove the harness, not the contenders.")
    md = (f"### Replicate: {ds.describe()}, {SRC} -> {DST} (SASL_PLAINTEXT, SCRAM-SHA-512)\n\n"
          + table(runs) + "\n\n"
          + "".join(f"- {x}\n" for x in notes)
          + f"- load average (1 min) before / after: {loads[0]} / {loads[1]}\n")
    print(md, flush=True)
    mc = B.machine()
    mc.pop("connect_file", None)
    mc["mm2"] = next((p.name for p in sorted(MM2_LIBS.glob("connect-mirror-[0-9]*.jar"))), None)
    out = STATE / f"replicate-{stamp}.json"
    out.write_text(json.dumps({"stamp": stamp, "dataset": ds.as_json(), "source": SRC, "target": DST,
                               "machine": mc, "load_avg_1m": loads, "runs": runs, "notes": notes,
                               "markdown": md}, indent=1))
    log(f"raw numbers: {out}; logs: {work}")
    return 0 if all("error" not in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
