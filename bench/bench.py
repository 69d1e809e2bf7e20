#!/usr/bin/env python3
"""strata benchmark harness. Run it through `bench/run` (which brings the dev environment up,
builds the release binary and fetches the peer first); see bench/README.md.

Modes (--only; without it: dump, then restore and tier):
  dump     the floor (kcat into /dev/null), the peer (Kafka Connect standalone with the
           FileStreamSinkConnector) and strata dump --once in text/jsonl/parquet to file://, to
           LocalStack S3 and to s3d (a faster S3 server, built by ./dev, whose CPU does not hide
           strata's), alternating the contenders in every round; median of --runs rounds.
  memory   strata dump --once with default settings on a 4 GiB backlog over 32 partitions
           (peak RSS), with the kcat floor for reference.
  partitions  the same with 500 partitions of 100 B records (4M records): memory stays within
           the budget however many partitions are open.
  restore  bench/restore.sh, when it exists (written with the restore mode).
  tier     bench/tier.sh, when it exists (written with the tier mode).

Python standard library only, except boto3 (from .dev/venv-tools) to list and delete what the
S3 runs stored in LocalStack.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
STATE = ROOT / ".dev" / "bench"
WORK = STATE / "work"
DATASETS = STATE / "datasets"
RESULTS = BENCH / "results"
KAFKA_LIBS = ROOT / ".dev" / "kafka" / "libs"
PEER_LIBS = STATE / "peer-libs"
TOOLS_LOG4J = ROOT / "devenv" / "kafka" / "tools-log4j2.properties"

BOOT = os.environ.get("STRATA_TEST_BOOTSTRAP", "127.0.0.1:9092")
S3_ENDPOINT = os.environ.get("STRATA_TEST_S3_ENDPOINT", "http://127.0.0.1:4566")
S3_BUCKET = "strata-bench"
STRATA = Path(os.environ.get("STRATA_BIN", ROOT / "target" / "release" / "strata"))
S3D_BIN = Path(os.environ.get("STRATA_TEST_S3D", ROOT / ".dev" / "s3d" / "s3d"))
S3D_DATA = STATE / "s3d-data"
CLK_TCK = os.sysconf("SC_CLK_TCK")
GIB = 1 << 30
MIB = 1 << 20

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, str(BENCH))
from gen import VERSION as GEN_VERSION, Generator, key_bytes  # noqa: E402


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)



def bookkeeping(key):
    """strata's own records under `.strata/` (task parameters, seals): not archive objects."""
    return key.startswith(".strata/") or "/.strata/" in key

def die(msg):
    print(f"[bench] error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw).stdout


# --- /proc accounting (the broker, LocalStack, the peer) ------------------------------------------

def proc_cpu(pid):
    """user+sys seconds of one process (all its threads), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def proc_hwm_kib(pid):
    """Peak resident set (VmHWM) of a running process, KiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def service_pid(name):
    try:
        pid = int((ROOT / ".dev" / "run" / f"{name}.pid").read_text().strip())
        return pid if proc_cpu(pid) is not None else None
    except (OSError, ValueError):
        return None


class FastS3:
    """s3d on a free loopback port for the bench's whole run, with the key pair strata signs
    with. Objects are plain files under S3D_DATA/<bucket>/."""

    def __init__(self):
        if not S3D_BIN.exists():
            die(f"{S3D_BIN} is missing (./dev setup builds s3d)")
        shutil.rmtree(S3D_DATA, ignore_errors=True)
        (S3D_DATA / S3_BUCKET).mkdir(parents=True)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([str(S3D_BIN), "--host", "127.0.0.1", "--port", str(self.port),
                                      "--access-key", "test", "--secret-key", "test", str(S3D_DATA)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        die("s3d did not start")

    def list_and_delete(self, prefix):
        root = S3D_DATA / S3_BUCKET / prefix
        files = [p for p in root.rglob("*") if p.is_file() and not bookkeeping(p.relative_to(root).as_posix())] \
            if root.exists() else []
        n, size = len(files), sum(p.stat().st_size for p in files)
        shutil.rmtree(root, ignore_errors=True)
        return n, size

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


FAST = None


class SideCpu:
    """CPU the broker and the S3 servers spent during one measured run (they serve every contender;
    other engineers' tests may use them too, so these are indications, not measurements)."""

    def __init__(self):
        self.pids = {"broker": service_pid("kafka"), "localstack": service_pid("localstack"),
                     "s3d": FAST.proc.pid if FAST else None}
        self.start = {k: proc_cpu(p) if p else None for k, p in self.pids.items()}

    def stop(self):
        out = {}
        for k, p in self.pids.items():
            end = proc_cpu(p) if p else None
            s = self.start[k]
            out[f"{k}_cpu_s"] = round(end - s, 2) if end is not None and s is not None else None
        return out


# --- Kafka ----------------------------------------------------------------------------------------

def topic_partitions(topic):
    out = subprocess.run(["kcat", "-L", "-J", "-b", BOOT, "-t", topic, "-m", "10"],
                         capture_output=True, text=True).stdout
    try:
        meta = json.loads(out)
    except ValueError:
        return 0
    for t in meta.get("topics", []):
        if t.get("topic") == topic and not t.get("error"):
            return len(t.get("partitions", []))
    return 0


def offsets(topic, partitions, which):
    """{partition: offset}; which = -1 (end, the high watermark) or -2 (beginning)."""
    args = ["kcat", "-Q", "-J", "-b", BOOT]
    for p in range(partitions):
        args += ["-t", f"{topic}:{p}:{which}"]
    data = json.loads(run(args))[topic]
    return {int(v["partition"]): int(v["offset"]) for v in data.values() if isinstance(v, dict)}


def topic_cmd(*args):
    cmd = [str(ROOT / "dev"), "kafka-class", "org.apache.kafka.tools.TopicCommand",
           "--bootstrap-server", BOOT, *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        die(f"TopicCommand {' '.join(args)} failed: {r.stderr.strip()[-800:]}")


class Dataset:
    def __init__(self, records, size, partitions, seed):
        self.records, self.size, self.partitions, self.seed = records, size, partitions, seed
        self.topic = f"strata-bench-g{GEN_VERSION}-n{records}-s{size}-p{partitions}-seed{seed}"
        self.meta_file = DATASETS / f"{self.topic}.json"
        self.value_bytes = records * size
        self.key_bytes = key_bytes(records)
        self.sha256 = None
        self.generated = False
        self.produce_s = None

    @property
    def bytes(self):
        return self.key_bytes + self.value_bytes

    def describe(self):
        return (f"{self.records} records x {self.size} B values over {self.partitions} partitions "
                f"(seed {self.seed}): {self.bytes / MIB:.1f} MiB of keys+values")

    def as_json(self):
        return {"topic": self.topic, "records": self.records, "record_size": self.size,
                "partitions": self.partitions, "seed": self.seed, "key_bytes": self.key_bytes,
                "value_bytes": self.value_bytes, "bytes": self.bytes, "sha256": self.sha256,
                "generated_this_run": self.generated, "produce_s": self.produce_s}

    def complete(self):
        if topic_partitions(self.topic) != self.partitions:
            return False
        lo = offsets(self.topic, self.partitions, -2)
        hi = offsets(self.topic, self.partitions, -1)
        expect = {p: self.records // self.partitions + (1 if p < self.records % self.partitions else 0)
                  for p in range(self.partitions)}
        return all(lo.get(p) == 0 and hi.get(p) == expect[p] for p in range(self.partitions))

    def ensure(self):
        """Reuse the topic when it holds exactly the data set, else (re)create and fill it."""
        if self.meta_file.exists():
            self.sha256 = json.loads(self.meta_file.read_text()).get("sha256")
        if self.complete():
            log(f"data set: reusing topic {self.topic} ({self.describe()})")
            return
        have = topic_partitions(self.topic)
        if have:
            log(f"data set: topic {self.topic} is incomplete or stale; deleting it")
            topic_cmd("--delete", "--topic", self.topic)
            for _ in range(120):
                if topic_partitions(self.topic) == 0:
                    break
                time.sleep(0.5)
            time.sleep(2)
        topic_cmd("--create", "--if-not-exists", "--topic", self.topic,
                  "--partitions", str(self.partitions), "--replication-factor", "1")
        for _ in range(120):
            if topic_partitions(self.topic) == self.partitions:
                break
            time.sleep(0.5)
        else:
            die(f"topic {self.topic} did not appear")
        self.produce()
        if not self.complete():
            die(f"topic {self.topic} does not hold the data set after producing; see {WORK}/produce-*.log")

    def produce(self):
        import hashlib
        log(f"data set: producing {self.describe()} into {self.topic} (one kcat -P per partition)")
        WORK.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        procs, logs = [], []
        for p in range(self.partitions):
            lf = open(WORK / f"produce-{p}.log", "w")
            logs.append(lf)
            procs.append(subprocess.Popen(
                ["kcat", "-P", "-b", BOOT, "-t", self.topic, "-p", str(p), "-K", "\t", "-z", "none",
                 "-X", "linger.ms=20", "-X", "batch.size=1000000"],
                stdin=subprocess.PIPE, stderr=lf, stdout=lf))
        digest = hashlib.sha256()
        bufs = [[] for _ in range(self.partitions)]
        fill = [0] * self.partitions
        keys = 0
        done = 0
        for p, k, v in Generator(self.records, self.size, self.partitions, self.seed):
            line = k + b"\t" + v + b"\n"
            keys += len(k)
            digest.update(line)
            bufs[p].append(line)
            fill[p] += len(line)
            if fill[p] >= 1 << 20:
                procs[p].stdin.write(b"".join(bufs[p]))
                bufs[p], fill[p] = [], 0
            done += 1
            if done % 200000 == 0:
                log(f"  {done}/{self.records} records")
        for p in range(self.partitions):
            procs[p].stdin.write(b"".join(bufs[p]))
            procs[p].stdin.close()
        for p, pr in enumerate(procs):
            if pr.wait() != 0:
                die(f"kcat -P for partition {p} failed; see {WORK}/produce-{p}.log")
            logs[p].close()
        if keys != self.key_bytes:
            die(f"generator produced {keys} key bytes, expected {self.key_bytes}")
        self.sha256, self.generated = digest.hexdigest(), True
        self.produce_s = round(time.monotonic() - t0, 1)
        DATASETS.mkdir(parents=True, exist_ok=True)
        self.meta_file.write_text(json.dumps(self.as_json(), indent=1))
        log(f"data set: produced in {self.produce_s} s, sha256 {self.sha256}")


# --- measuring one command ------------------------------------------------------------------------

def timed(cmd, stdout, stderr, cwd=None):
    """Runs cmd under /usr/bin/time: wall, user, sys seconds and peak RSS from the kernel."""
    tf = WORK / "time.out"
    tf.unlink(missing_ok=True)
    r = subprocess.run(["/usr/bin/time", "-o", str(tf), "-f", "%e %U %S %M", *cmd],
                       stdout=stdout, stderr=stderr, cwd=cwd)
    line = tf.read_text().strip().splitlines()[-1].split()
    wall, user, sys_, rss = float(line[0]), float(line[1]), float(line[2]), int(line[3])
    return {"rc": r.returncode, "wall_s": wall, "user_s": user, "sys_s": sys_,
            "cpu_s": round(user + sys_, 2), "max_rss_kib": rss}


class Contender:
    def __init__(self, key, label, kind, fmt=None, store=None):
        self.key, self.label, self.kind, self.fmt, self.store = key, label, kind, fmt, store


FLOOR = Contender("kcat", "kcat -C -e > /dev/null (floor)", "floor")
PEER = Contender("peer", "Kafka Connect FileStreamSink (peer)", "peer")
STORE_LABELS = {"file": "file://", "s3": "S3 (LocalStack)", "fast": "S3 (s3d)"}
STRATA_ALL = [Contender(f"{f}-{s}", f"strata {f} -> {STORE_LABELS[s]}", "strata", f, s)
              for s in ("file", "s3", "fast") for f in ("text", "jsonl", "parquet")]
# CDC tables ([tasks.cdc]): Parquet, one table per source table, repeats left out.
STRATA_ALL.append(Contender("cdc-file", "strata CDC tables (parquet) -> file://", "strata", "cdc", "file"))


def run_floor(ds, tag):
    err = WORK / f"{tag}.log"
    with open(os.devnull, "wb") as null, open(err, "w") as ef:
        m = timed(["kcat", "-C", "-b", BOOT, "-t", ds.topic, "-o", "beginning", "-e"], null, ef)
    ends = re.findall(r"Reached end of topic \S+ \[(\d+)\] at offset (\d+)", err.read_text())
    m["records"] = sum(int(o) for _, o in ends)
    if m["rc"] != 0 or len(ends) != ds.partitions or m["records"] != ds.records:
        return fail(m, f"kcat read {m['records']} records from {len(ends)} partitions "
                       f"(rc {m['rc']}), expected {ds.records}; see {err}")
    err.unlink()
    return m


def fail(m, why):
    m["error"] = why
    log(f"  FAILED: {why}")
    return m


def s3_prefix(tag):
    """A short key prefix for a run's objects: s3s-fs (inside s3d) keeps an upload's metadata in
    a file named after the base64 of bucket and key plus the upload id, and a key much past 100
    bytes overflows the 255-byte file name limit (every CreateMultipartUpload then fails with
    InternalError, which strata retries until the --once deadline)."""
    return "b" + hashlib.sha256(tag.encode()).hexdigest()[:10]


def strata_config(ds, c, tag, out_dir, defaults):
    name = tag.replace("_", "-")[:64]
    # The dump comparison gives strata and the peer the same interval; the memory check keeps
    # every default (300 s), which --once runs of these sizes never reach anyway.
    interval = "" if defaults else f"dump_interval_secs = {DUMP_INTERVAL_SECS}\n"
    if c.store == "file":
        store = f'[store]\nurl = "file://{out_dir}"\n'
    elif c.store == "fast":
        store = (f'[store]\nurl = "s3://{S3_BUCKET}/{s3_prefix(tag)}"\nendpoint = "{FAST.endpoint}"\n'
                 f'access_key = "test"\nsecret_key = "test"\nregion = "us-east-1"\n')
    else:
        store = (f'[store]\nurl = "s3://{S3_BUCKET}/{s3_prefix(tag)}"\nendpoint = "{S3_ENDPOINT}"\n'
                 f'access_key = "test"\nsecret_key = "test"\nregion = "us-east-1"\ncreate_bucket = true\n')
    fmt, cdc = (("parquet", "\n[tasks.cdc]\n") if c.fmt == "cdc" else (c.fmt, ""))
    return (f'# written by bench/bench.py for one measured run; everything else is a default\n'
            f'[kafka]\nbootstrap_servers = "{BOOT}"\n\n{store}\n'
            f'[[tasks]]\nname = "{name}"\ntopics = ["{ds.topic}"]\nstart_offset = "earliest"\n'
            f'{interval}format = "{fmt}"\ndirectory = "{c.fmt}"\n{cdc}')


def run_strata(ds, c, tag, defaults=False):
    out_dir = WORK / tag
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    cfg = WORK / f"{tag}.toml"
    cfg.write_text(strata_config(ds, c, tag, out_dir, defaults))
    logf = WORK / f"{tag}.log"
    with open(logf, "w") as lf:
        m = timed([str(STRATA), "--log-format", "json", "dump", "--once", "--config", str(cfg)],
                  subprocess.DEVNULL, lf)
    records = objects = out_bytes = 0
    for line in logf.read_text().splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        f = ev.get("fields", ev)  # the fields are flattened into the event, or under "fields"
        if f.get("message") == "done":
            records += int(f.get("records", 0))
            objects += int(f.get("objects", 0))
            out_bytes += int(f.get("bytes", 0))
    m.update(records=records, objects=objects, output_bytes=out_bytes)
    if c.store == "file":
        files = [p for p in out_dir.rglob("*") if p.is_file() and not p.name.startswith(".strata-tmp")
                 and not bookkeeping(p.relative_to(out_dir).as_posix())]
        listed, listed_bytes = len(files), sum(p.stat().st_size for p in files)
        shutil.rmtree(out_dir, ignore_errors=True)
    elif c.store == "fast":
        out_dir.rmdir()
        listed, listed_bytes = FAST.list_and_delete(s3_prefix(tag))
    else:
        out_dir.rmdir()
        listed, listed_bytes = s3_list_and_delete(s3_prefix(tag))
    # What the store holds is the output size; strata's own byte count is checked against it
    # but a difference is only a warning (the records and objects are what must match).
    m.update(reported_bytes=out_bytes, output_bytes=listed_bytes, listed_objects=listed)
    problem = None
    if m["rc"] != 0:
        problem = f"strata exited {m['rc']}"
    elif records != ds.records:
        problem = f"strata archived {records} records, expected {ds.records}"
    elif listed != objects:
        problem = f"the store holds {listed} objects, strata reported {objects}"
    if problem:
        return fail(m, f"{problem}; see {logf} and {cfg}")
    if listed_bytes != out_bytes:
        m["warning"] = f"strata's summary reported {out_bytes} bytes, the store holds {listed_bytes}"
        log(f"  warning: {m['warning']}")
    if not KEEP_LOGS:
        logf.unlink()
        cfg.unlink()
    return m


_s3 = None


def s3_list_and_delete(prefix):
    """(objects, bytes) under s3://strata-bench/<prefix>/, then deletes them (LocalStack keeps
    objects in memory)."""
    global _s3
    if _s3 is None:
        import boto3
        _s3 = boto3.client("s3", endpoint_url=S3_ENDPOINT, aws_access_key_id="test",
                           aws_secret_access_key="test", region_name="us-east-1")
    n = size = 0
    keys = []
    for page in _s3.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            keys.append(o["Key"])
            if not bookkeeping(o["Key"]):
                n += 1
                size += o["Size"]
    for i in range(0, len(keys), 1000):
        _s3.delete_objects(Bucket=S3_BUCKET,
                           Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})
    return n, size


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_peer(ds, tag, timeout_s):
    """Kafka Connect standalone + FileStreamSinkConnector: runs until the output file holds every
    value, then its CPU and peak RSS are read from /proc and it is stopped with SIGTERM."""
    d = WORK / tag
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    out = d / "sink.txt"
    (d / "worker.properties").write_text(
        f"bootstrap.servers={BOOT}\n"
        "key.converter=org.apache.kafka.connect.converters.ByteArrayConverter\n"
        "value.converter=org.apache.kafka.connect.storage.StringConverter\n"
        f"offset.storage.file.filename={d}/connect.offsets\n"
        f"offset.flush.interval.ms={DUMP_INTERVAL_SECS * 1000}\n"
        f"listeners=http://127.0.0.1:{free_port()}\n")
    (d / "connector.properties").write_text(
        f"name={tag}\n"
        "connector.class=org.apache.kafka.connect.file.FileStreamSinkConnector\n"
        "tasks.max=1\n"
        f"topics={ds.topic}\n"
        f"file={out}\n")
    # As bin/connect-standalone.sh starts it: its heap and kafka-run-class.sh's JVM flags.
    cmd = ["java", "-Xms256M", "-Xmx2G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
           "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
           "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
           "-cp", f"{PEER_LIBS}/*",
           "org.apache.kafka.connect.cli.ConnectStandalone",
           str(d / "worker.properties"), str(d / "connector.properties")]
    expected = ds.value_bytes + ds.records  # every value, then "\n"
    logf = WORK / f"{tag}.log"
    lf = open(logf, "w")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=lf, stderr=lf, start_new_session=True)
    m = {"rc": None}
    first = None
    size = 0
    try:
        while True:
            try:
                size = out.stat().st_size
            except FileNotFoundError:
                size = 0
            if size and first is None:
                first = (time.monotonic() - t0, proc_cpu(proc.pid))
            if size >= expected:
                break
            if proc.poll() is not None:
                m["rc"] = proc.returncode
                break
            if time.monotonic() - t0 > timeout_s:
                break
            time.sleep(0.05)
        wall = time.monotonic() - t0
        cpu = proc_cpu(proc.pid)
        hwm = proc_hwm_kib(proc.pid)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        lf.close()
    m.update(wall_s=round(wall, 2), cpu_s=round(cpu, 2) if cpu is not None else None,
             max_rss_kib=hwm, output_bytes=size,
             startup_wall_s=round(first[0], 2) if first else None,
             startup_cpu_s=round(first[1], 2) if first and first[1] is not None else None)
    lines = 0
    if out.exists():
        with open(out, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                lines += chunk.count(b"\n")
    m["records"] = lines
    shutil.rmtree(d, ignore_errors=True)
    if cpu is None or size != expected or lines != ds.records:
        return fail(m, f"the peer wrote {lines} lines / {size} B (expected {ds.records} / {expected}) "
                       f"in {wall:.0f} s (exit {m['rc']}); see {logf}")
    logf.unlink()
    return m


# --- rounds, medians, ratios ------------------------------------------------------------------------

def measure(ds, contenders, runs, peer_timeout, defaults=False):
    results = {c.key: [] for c in contenders}
    log("warm-up: one unmeasured kcat read, so every contender finds the topic in the page cache")
    run_floor(ds, "warmup")
    stamp = datetime.datetime.now().strftime("%H%M%S")
    for r in range(1, runs + 1):
        for c in contenders:
            tag = f"bench-{c.key}-r{r}-{stamp}-{os.getpid()}"
            # Write back what earlier runs left dirty in the page cache first: an fsync (strata
            # syncs every object) can otherwise end up writing another contender's data.
            os.sync()
            load = os.getloadavg()[0]
            side = SideCpu()
            log(f"round {r}/{runs}: {c.label} (load {load:.2f})")
            if c.kind == "floor":
                m = run_floor(ds, tag)
            elif c.kind == "peer":
                m = run_peer(ds, tag, peer_timeout)
            else:
                m = run_strata(ds, c, tag, defaults)
            m.update(side.stop())
            m.update(round=r, load_before=round(load, 2))
            if "error" not in m:
                log(f"  {m['wall_s']:.2f} s wall, {m['cpu_s']:.2f} s CPU, "
                    f"{(m['max_rss_kib'] or 0) / 1024:.0f} MiB peak RSS, {m['records']} records")
            results[c.key].append(m)
    return results


def summarize(ds, contenders, results):
    rows = []
    for c in contenders:
        ok = [m for m in results[c.key] if "error" not in m]
        row = {"key": c.key, "label": c.label, "kind": c.kind, "format": c.fmt, "store": c.store,
               "runs_ok": len(ok), "runs_failed": len(results[c.key]) - len(ok)}
        if ok:
            med = lambda k: statistics.median(m[k] for m in ok if m.get(k) is not None)  # noqa: E731
            wall, cpu = med("wall_s"), med("cpu_s")
            row.update(
                wall_s=round(wall, 2), cpu_s=round(cpu, 2),
                wall_min_s=min(m["wall_s"] for m in ok), wall_max_s=max(m["wall_s"] for m in ok),
                cpu_min_s=min(m["cpu_s"] for m in ok), cpu_max_s=max(m["cpu_s"] for m in ok),
                records_per_s=round(ds.records / wall), mb_per_s=round(ds.bytes / 1e6 / wall, 1),
                cpu_s_per_gib=round(cpu / (ds.bytes / GIB), 2),
                peak_rss_mib=round(max(m["max_rss_kib"] for m in ok) / 1024, 1),
                peak_rss_median_mib=round(med("max_rss_kib") / 1024, 1))
            if any(m.get("output_bytes") for m in ok) and c.kind != "floor":
                row["output_bytes"] = int(med("output_bytes"))
            for side in ("broker_cpu_s", "localstack_cpu_s", "s3d_cpu_s"):
                vals = [m[side] for m in ok if m.get(side) is not None]
                if vals:
                    row[side] = round(statistics.median(vals), 2)
            if c.kind == "peer" and all(m.get("startup_cpu_s") is not None for m in ok):
                # After its first record is written: what a long-running worker would cost.
                steady_wall = statistics.median(m["wall_s"] - m["startup_wall_s"] for m in ok)
                steady_cpu = statistics.median(m["cpu_s"] - m["startup_cpu_s"] for m in ok)
                row.update(startup_cpu_s=round(med("startup_cpu_s"), 2),
                           startup_wall_s=round(med("startup_wall_s"), 2),
                           steady_mb_per_s=round(ds.bytes / 1e6 / steady_wall, 1) if steady_wall > 0 else None,
                           steady_cpu_s_per_gib=round(steady_cpu / (ds.bytes / GIB), 2))
        off = [m for m in ok if m.get("warning")]
        if off:
            worst = max(abs(m["reported_bytes"] - m["output_bytes"]) / max(1, m["output_bytes"]) for m in off)
            row["warnings"] = [f"in {len(off)} of {len(ok)} runs strata's summary (and log) reported a "
                               f"byte count that differs from what the store holds, by up to {100 * worst:.1f}%"]
        rows.append(row)
    by = {r["key"]: r for r in rows}
    for r in rows:
        for ref in ("kcat", "peer"):
            b = by.get(ref)
            if r["key"] == ref or not b or "cpu_s" not in b or "cpu_s" not in r:
                continue
            r[f"cpu_vs_{ref}"] = round(r["cpu_s"] / b["cpu_s"], 2) if b["cpu_s"] else None
            r[f"throughput_vs_{ref}"] = round(r["mb_per_s"] / b["mb_per_s"], 2)
    return rows


def fmt_ratio(x):
    if x is None:
        return "—"
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.3f}x"


def table(ds, rows):
    head = ("| contender | wall s | records/s | MB/s | CPU s | CPU s/GiB | peak RSS MiB | output MiB "
            "| CPU vs kcat | MB/s vs kcat | CPU vs peer | MB/s vs peer |")
    lines = [head, "|" + "---|" + "---:|" * 11]
    for r in rows:
        if "cpu_s" not in r:
            lines.append(f"| {r['label']} | failed ({r['runs_failed']} runs) |" + " |" * 10)
            continue
        out = f"{r['output_bytes'] / MIB:.0f}" if r.get("output_bytes") else "—"
        lines.append(
            f"| {r['label']} | {r['wall_s']:.2f} | {r['records_per_s']:,} | {r['mb_per_s']:.1f} "
            f"| {r['cpu_s']:.2f} | {r['cpu_s_per_gib']:.2f} | {r['peak_rss_mib']:.0f} | {out} "
            f"| {fmt_ratio(r.get('cpu_vs_kcat'))} | {fmt_ratio(r.get('throughput_vs_kcat'))} "
            f"| {fmt_ratio(r.get('cpu_vs_peer'))} | {fmt_ratio(r.get('throughput_vs_peer'))} |")
    return "\n".join(lines)


def checks_dump(rows):
    by = {r["key"]: r for r in rows}
    out = []
    for key, limit in (("text-file", 1.2), ("parquet-file", 3.0), ("text-s3", 1.4),
                       ("parquet-s3", 2.8), ("text-fast", 1.4), ("parquet-fast", 2.8)):
        r = by.get(key)
        if r and r.get("cpu_vs_kcat") is not None:
            ok = r["cpu_vs_kcat"] <= limit
            out.append({"check": f"{r['label']}: CPU at most {limit}x the floor's",
                        "value": r["cpu_vs_kcat"], "limit": limit, "pass": ok})
    # CDC tables parse every message: at most 1.5x the CPU of the plain Parquet dump.
    cdc, pq = by.get("cdc-file"), by.get("parquet-file")
    if cdc and pq and cdc.get("cpu_s") and pq.get("cpu_s"):
        ratio = round(cdc["cpu_s"] / pq["cpu_s"], 2)
        out.append({"check": "strata CDC tables: CPU at most 1.5x strata parquet's, same data",
                    "value": ratio, "limit": 1.5, "pass": ratio <= 1.5})
    # With a store that is not the bottleneck, S3 should cost little more wall time than a disk.
    for f in ("text", "jsonl", "parquet"):
        fast, disk = by.get(f"{f}-fast"), by.get(f"{f}-file")
        if fast and disk and "wall_s" in fast and "wall_s" in disk and disk["wall_s"]:
            ratio = round(fast["wall_s"] / disk["wall_s"], 2)
            out.append({"check": f"strata {f}: wall time to s3d at most 1.3x to file://",
                        "value": ratio, "limit": 1.3, "pass": ratio <= 1.3})
    return out


def checks_memory(rows):
    """The dump issue's limit for the six plain contenders. CDC tables are shown, not checked: their
    repeat windows (100,000 ids per partition by default, docs/cdc.md) are outside the buffer
    budget, so their peak grows with the partitions a task reads."""
    out = []
    for r in rows:
        if r["kind"] == "strata" and "peak_rss_mib" in r and r.get("format") != "cdc":
            out.append({"check": f"{r['label']}, default settings: peak RSS at most 300 MiB",
                        "value": r["peak_rss_mib"], "limit": 300, "pass": r["peak_rss_mib"] <= 300})
    return out


def checks_md(checks):
    return "\n".join(f"- {'PASS' if c['pass'] else 'FAIL'}: {c['check']} (measured {c['value']})"
                     for c in checks)


# --- restore / tier scripts ------------------------------------------------------------------------

def run_script(name, ds, runs, smoke, stamp):
    script = BENCH / f"{name}.sh"
    title = {"restore": "Restore", "tier": "Tier"}[name]
    if not script.exists():
        log(f"{name}: bench/{name}.sh does not exist yet")
        return {"available": False}, f"## {title}\n\nnot available yet (bench/{name}.sh does not exist).\n"
    size_mib = max(1, -(-ds.bytes // MIB))
    out = RESULTS / f"{stamp}-{name}.script.md"
    env = dict(os.environ, REPEAT=str(runs), STRATA_BIN=str(STRATA), OUT=str(out),
               BENCH_TOPIC=ds.topic, BENCH_RECORDS=str(ds.records), BENCH_RECORD_SIZE=str(ds.size),
               BENCH_PARTITIONS=str(ds.partitions), BENCH_SEED=str(ds.seed),
               BENCH_SMOKE="1" if smoke else "0", BENCH_GEN=str(BENCH / "gen.py"))
    logf = WORK / f"{name}-script.log"
    log(f"{name}: bash bench/{name}.sh {size_mib} (REPEAT={runs}); its log: {logf}")
    t0 = time.monotonic()
    with open(logf, "w") as lf:
        r = subprocess.run(["bash", str(script), str(size_mib)], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=lf, text=True)
    took = round(time.monotonic() - t0, 1)
    info = {"available": True, "command": f"bash bench/{name}.sh {size_mib}", "rc": r.returncode,
            "seconds": took, "markdown": r.stdout}
    if r.returncode != 0:
        tail = "\n".join(logf.read_text().splitlines()[-15:])
        md = (f"## {title}\n\n`bench/{name}.sh {size_mib}` failed (exit {r.returncode}) after {took} s; "
              f"last lines of its log:\n\n```text\n{tail}\n```\n")
    else:
        md = (f"## {title}\n\nFrom `bench/{name}.sh {size_mib}` (REPEAT={runs}, {took} s):\n\n"
              f"{r.stdout.strip()}\n")
    return info, md


# --- machine and versions -----------------------------------------------------------------------

def first_line(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None


def machine():
    mem = cpu = None
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / MIB, 1)
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src", "Cargo.toml",
                                 "Cargo.lock"], capture_output=True, text=True).stdout.strip())
    kcat_v = first_line(["sh", "-c", "kcat -V 2>&1 | grep -i '^Version'"])
    ls_v = None
    req = ROOT / "localstack" / "requirements.txt"
    if req.exists():
        m = re.search(r"^localstack-core==(\S+)", req.read_text(), re.M)
        ls_v = m and m.group(1)
    kafka_v = None
    pom = ROOT / "devenv" / "kafka" / "pom.xml"
    if pom.exists():
        m = re.search(r"<kafka.version>([^<]+)", pom.read_text())
        kafka_v = m and m.group(1)
    peer_jar = sorted(PEER_LIBS.glob("connect-file-*.jar"))
    return {
        "nproc": os.cpu_count(), "cpu": cpu, "mem_gib": mem, "kernel": platform.release(),
        "os": first_line(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
        "strata": first_line([str(STRATA), "--version"]), "commit": commit, "src_dirty": dirty,
        "rustc": first_line(["rustc", "--version"]), "kcat": kcat_v,
        "java": first_line(["sh", "-c", "java -version 2>&1"]), "kafka": kafka_v,
        "connect_file": peer_jar[-1].name if peer_jar else None, "localstack": ls_v,
    }


def machine_md(mc):
    return (f"{mc['nproc']} cores ({mc['cpu']}), {mc['mem_gib']} GiB RAM, Linux {mc['kernel']} ({mc['os']}); "
            f"{mc['strata']} at {mc['commit']}{' (src/ modified)' if mc['src_dirty'] else ''} built with "
            f"{mc['rustc']}; kcat {mc['kcat']}; Kafka {mc['kafka']} (one broker); {mc['java']}; "
            f"peer {mc['connect_file']}; LocalStack {mc['localstack']}")


# --- latest.md ---------------------------------------------------------------------------------------

SECTION_ORDER = ["dump", "memory", "partitions", "replicate", "restore", "tier"]


def update_latest(sections):
    """Replaces this run's sections in bench/results/latest.md, keeping the others."""
    latest = RESULTS / "latest.md"
    old = latest.read_text() if latest.exists() else ""
    have = dict(re.findall(r"<!-- bench:(\w+) -->\n(.*?)<!-- /bench:\1 -->\n", old, re.S))
    have.update(sections)
    body = ["# strata benchmark: latest full runs\n",
            "Written by `bench/run` (full runs only; each mode's section is replaced by its latest run). "
            "See bench/README.md for what is measured and how to read it.\n"]
    for k in SECTION_ORDER:
        if k in have:
            body.append(f"<!-- bench:{k} -->\n{have[k]}<!-- /bench:{k} -->\n")
    latest.write_text("\n".join(body))


# --- main ----------------------------------------------------------------------------------------

DUMP_INTERVAL_SECS = 60
KEEP_LOGS = False


def freeze_strata():
    """Measures a private copy of the binary: others may rebuild target/release/strata while a
    run is going on, and every round must run the same build."""
    global STRATA
    import hashlib
    data = STRATA.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    d = STATE / "bin"
    d.mkdir(parents=True, exist_ok=True)
    copy = d / f"strata-{digest[:12]}"
    if not copy.exists():
        for old in d.glob("strata-*"):
            old.unlink()
        tmp = d / f".tmp-{os.getpid()}"
        tmp.write_bytes(data)
        tmp.chmod(0o755)
        tmp.rename(copy)
    log(f"measuring {STRATA} as its copy {copy.relative_to(ROOT)}")
    STRATA = copy
    return digest


def wait_for_low_load(limit, max_wait):
    if limit <= 0:
        return
    need = 12  # 12 samples 5 s apart: a minute below the limit
    ok = 0
    t0 = time.monotonic()
    while ok < need:
        load = os.getloadavg()[0]
        ok = ok + 1 if load < limit else 0
        if ok >= need:
            break
        if time.monotonic() - t0 > max_wait:
            log(f"load is still {load:.2f} after {max_wait} s; measuring anyway (noted in the results)")
            return
        waited = time.monotonic() - t0
        if ok == 0 and (waited < 5 or int(waited) % 60 < 5):
            log(f"waiting for the 1-minute load to stay below {limit} for a minute (now {load:.2f}, "
                f"waited {waited:.0f} s of at most {max_wait})")
        time.sleep(5)


def dump_section(title, ds, rows, checks, runs, cmdline, mc, loads, notes):
    md = [f"## {title}\n",
          f"`{cmdline}` on {datetime.date.today().isoformat()}: {ds.describe()}, topic `{ds.topic}`"
          f"{', sha256 ' + ds.sha256[:16] + '…' if ds.sha256 else ''}. Median of {runs} runs, contenders "
          f"alternating in every round. 1-minute load {loads[0]:.2f} before, {loads[1]:.2f} after.\n",
          table(ds, rows), ""]
    if checks:
        md += ["Checks:", "", checks_md(checks), ""]
    md += notes + [f"Machine: {machine_md(mc)}.", ""]
    return "\n".join(md)


def main():
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny data set, 2 runs: proves the harness works")
    ap.add_argument("--records", type=int, help="records in the data set (default: 1 GiB worth; 4 GiB for memory)")
    ap.add_argument("--record-size", type=int, default=1024, help="bytes per record value (default 1024)")
    ap.add_argument("--partitions", type=int, help="partitions (default 8; 32 for memory)")
    ap.add_argument("--seed", type=int, default=42, help="generator seed (default 42)")
    ap.add_argument("--runs", type=int, help="rounds, median reported (default 3; 2 with --smoke)")
    ap.add_argument("--only", choices=["dump", "restore", "tier", "memory", "partitions"],
                    help="one mode (default: dump, restore, tier; memory and partitions only when asked)")
    ap.add_argument("--contenders", help="comma-separated subset of: kcat,peer," +
                    ",".join(c.key for c in STRATA_ALL) + " (kcat is always measured)")
    ap.add_argument("--wait-load", type=float, help="before measuring, wait until the 1-minute load "
                    "stays below this for a minute (default 1.0 for full runs, off for --smoke)")
    ap.add_argument("--wait-max", type=int, default=1200, help="give up waiting after this many seconds")
    ap.add_argument("--keep-logs", action="store_true",
                    help="keep every strata run's config and log in .dev/bench/work/ (failed runs' always stay)")
    a = ap.parse_args()
    global KEEP_LOGS
    KEEP_LOGS = a.keep_logs

    modes = [a.only] if a.only else (["dump"] if a.smoke else ["dump", "restore", "tier"])
    runs = a.runs or (2 if a.smoke else 3)
    if runs < 1:
        die("--runs must be at least 1")
    if not STRATA.exists():
        die(f"{STRATA} is missing; bench/run builds it (cargo build --release)")
    strata_sha = freeze_strata()
    WORK.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    cmdline = "bench/run" + ("" if len(sys.argv) == 1 else " " + " ".join(sys.argv[1:]))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    t_start = time.monotonic()
    mc = machine()
    mc["strata_sha256"] = strata_sha
    wanted = None
    if a.contenders:
        wanted = {x.strip() for x in a.contenders.split(",") if x.strip()}
        unknown = wanted - {"kcat", "peer"} - {c.key for c in STRATA_ALL}
        if unknown:
            die(f"unknown contenders: {', '.join(sorted(unknown))}")
    report = {"version": 1, "command": cmdline, "started": started, "smoke": a.smoke, "machine": mc,
              "modes": {}}
    sections = {}
    load_limit = a.wait_load if a.wait_load is not None else (0 if a.smoke else 1.0)
    for mode in modes:
        # partitions: the memory check with 500 open partitions of small records (the budget,
        # not the partition count, bounds memory).
        many = mode == "partitions"
        memory = mode in ("memory", "partitions")
        size = a.record_size if not many or a.record_size != 1024 else 100
        partitions = a.partitions or (500 if many else 32 if memory else 8)
        if a.records:
            records = a.records
        elif a.smoke:
            records = 20000
        elif many:
            records = 4_000_000
        else:
            records = (4 if memory else 1) * GIB // size
        ds = Dataset(records, size, partitions, a.seed)
        if mode in ("restore", "tier") and not (BENCH / f"{mode}.sh").exists():
            info, md = run_script(mode, ds, runs, a.smoke, stamp)
            report["modes"][mode] = {"dataset": ds.as_json(), **info}
            sections[mode] = md
            print("\n" + md, flush=True)
            continue
        ds.ensure()
        wait_for_low_load(load_limit, a.wait_max)
        if mode in ("restore", "tier"):
            info, md = run_script(mode, ds, runs, a.smoke, stamp)
            report["modes"][mode] = {"dataset": ds.as_json(), **info}
            sections[mode] = md
            print("\n" + md, flush=True)
            continue
        contenders = [FLOOR] + ([] if memory else [PEER]) + STRATA_ALL
        if wanted is not None:
            contenders = [c for c in contenders if c.key == "kcat" or c.key in wanted]
        loads = [os.getloadavg()[0]]
        # The peer gets at least 2 minutes, or 30x what the floor needs at 100 MB/s.
        peer_timeout = max(120, 30 * ds.bytes / 100e6)
        global FAST
        if any(c.store == "fast" for c in contenders) and FAST is None:
            FAST = FastS3()
        results = measure(ds, contenders, runs, peer_timeout, defaults=memory)
        loads.append(os.getloadavg()[0])
        rows = summarize(ds, contenders, results)
        # The limits are about 1 GiB / 4 GiB backlogs; at smoke size they mean nothing.
        checks = [] if a.smoke else checks_memory(rows) if memory else checks_dump(rows)
        notes = []
        peer = next((r for r in rows if r["key"] == "peer" and r.get("startup_cpu_s") is not None), None)
        if peer:
            notes.append(
                f"The peer's figures run from its start until its output file holds every record (its "
                f"shutdown is not counted). It spent {peer['startup_wall_s']:.1f} s and {peer['startup_cpu_s']:.1f} s "
                f"CPU (medians) starting the JVM, the worker and the connector before writing its first "
                f"record; from then on it ran at {peer['steady_mb_per_s']} MB/s and "
                f"{peer['steady_cpu_s_per_gib']} CPU s/GiB, which is what a long-running Connect worker "
                f"would cost.\n")
        if a.smoke:
            notes.append("Smoke data sets are too small for these ratios to mean anything (start-up "
                         "dominates and CPU times are in 10 ms steps); they prove that the harness works.\n")
        for r in rows:
            if r.get("warnings"):
                notes.append(f"Warning, {r['label']}: " + "; ".join(r["warnings"]) +
                             " (output MiB above is what the store holds).\n")
        s3 = [r for r in rows if r.get("store") == "s3" and r.get("localstack_cpu_s") is not None]
        if s3:
            notes.append("LocalStack's own CPU for the S3 runs (median, not included above): " +
                         ", ".join(f"{r['format']} {r['localstack_cpu_s']:.1f} s" for r in s3) + ".\n")
        fast = [r for r in rows if r.get("store") == "fast" and r.get("s3d_cpu_s") is not None]
        if fast:
            notes.append("s3d's own CPU for its runs (median, not included above): " +
                         ", ".join(f"{r['format']} {r['s3d_cpu_s']:.1f} s" for r in fast) + ".\n")
        title = ("Memory: default settings, 500 partitions of small records" if many
                 else "Memory: default settings, 4 GiB over 32 partitions" if memory and not a.records
                 else "Memory" if memory else "Dump")
        if a.smoke:
            title += " (smoke)"
        md = dump_section(title, ds, rows, checks, runs, cmdline, mc, loads, notes)
        print("\n" + md, flush=True)
        sections[mode] = md
        report["modes"][mode] = {"dataset": ds.as_json(), "runs": runs, "load_before": loads[0],
                                 "load_after": loads[1], "results": results, "summary": rows,
                                 "checks": checks}
    if FAST:
        FAST.stop()
    report["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    report["seconds"] = round(time.monotonic() - t_start, 1)
    kind = "smoke" if a.smoke else "full"
    base = RESULTS / f"{stamp}-{kind}-{'-'.join(modes)}"
    base.with_suffix(".md").write_text(
        f"# strata benchmark {stamp} ({kind})\n\n" +
        "\n".join(sections[m] for m in modes if m in sections))
    base.with_suffix(".json").write_text(json.dumps(report, indent=1))
    complete = not a.smoke and wanted is None
    if complete:
        # A mode that failed (or whose script is missing) keeps its previous section.
        good = {}
        for m, md in sections.items():
            info = report["modes"][m]
            if m in ("dump", "memory", "partitions"):
                ok = all(r["runs_failed"] == 0 for r in info["summary"])
            else:
                ok = info.get("available") and info.get("rc") == 0
            if ok:
                good[m] = md
        update_latest(good)
    failed = [r["label"] for m in report["modes"].values() for r in m.get("summary", []) if r["runs_failed"]]
    log(f"results: {base}.md and .json{', bench/results/latest.md updated' if complete else ''} "
        f"({report['seconds']} s in all)")
    if failed:
        die(f"some runs failed (their rows leave them out): {', '.join(failed)}")


if __name__ == "__main__":
    main()
