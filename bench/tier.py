#!/usr/bin/env python3
"""Tier mode benchmark: a fully tiered topic consumed from the beginning through the broker
(Kafka reads it remotely through the bridge and `strata tier`), against the same bytes read from
the broker's local disk, at the same fetch size, for 1 and 8 partitions.

Cases, each measured REPEAT times (median reported), strata tier restarted on an empty cache
before each cold run:
  local         a topic without remote storage (page cache warm: the floor to compare with)
  warm          strata tier's cache warm, fetches handed off as cache files (tier.handoff on)
  warm-socket   the same, every byte over the Unix socket (tier.handoff = false)
  cold-s3d      empty cache, chunks from s3d (devenv/s3d, a fast local S3 server)
  cold-ls       empty cache, chunks from LocalStack
The consumer is kcat printing one byte per record (-f '\\n'), so it costs next to nothing, with
fetch.wait.max.ms=10: at the end of the topic the broker holds the last, empty fetch that long
(librdkafka's default of 500 ms added half a second to every read timed before 2026-12-06).
Reported per case: MiB/s, the ratio to local, CPU seconds of the consumer, the broker, strata
tier and the S3 server, strata tier's CPU seconds per GiB served and the share handed off, and
the broker's remote-read metrics (RemoteLogReaderFetchRateAndTimeMs, delayed remote fetch
expirations), read over the JVM's local attach by bench/tier/BrokerMetrics.java.

usage: bench/tier.sh [SIZE_MIB] [--size-mib 512] [--partitions 1 8] [--fetch-mib 1 8 32] [--repeat 3]
                     [--chunk 4MiB] [--prefetch 8] [--stores s3d localstack] [--out FILE]
needs: ./dev up (Kafka with tiered storage on, LocalStack), kcat, s3d (./dev setup), port of
       STRATA_TEST_TIER_ADDR free (no other strata tier running).
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "strata-bench"
MIB = 1 << 20
BROKER_LOG = ROOT / ".dev" / "logs" / "kafka.log"


def broker_log_since(offset):
    """What the dev broker logged since its log was `offset` bytes long (all of it, if it rolled)."""
    with open(BROKER_LOG, "rb") as f:
        f.seek(offset if BROKER_LOG.stat().st_size >= offset else 0)
        return f.read().decode(errors="replace")


def log(msg):
    print(f"[bench/tier] {msg}", file=sys.stderr, flush=True)


def die(msg):
    log(f"error: {msg}")
    sys.exit(1)


def dev_env():
    out = subprocess.run([str(ROOT / "dev"), "env"], capture_output=True, text=True, check=True).stdout
    env = {}
    for line in out.splitlines():
        m = re.match(r"export (\w+)=(.*)$", line)
        if m:
            env[m.group(1)] = m.group(2).strip("'\"")
    return env


sys.path.insert(0, str(ROOT / "bench"))
from bench import free_port, proc_cpu, service_pid as pid_file  # noqa: E402  (shared helpers)


class Bench:
    def __init__(self, a):
        self.a = a
        self.env = dev_env()
        self.boot = self.env["STRATA_TEST_BOOTSTRAP"]
        self.tier_addr = self.env["STRATA_TEST_TIER_ADDR"]
        self.log_dir = Path(self.env["STRATA_TEST_KAFKA_LOG_DIR"])
        self.bin = Path(os.environ.get("STRATA_BIN", ROOT / "target" / "release" / "strata"))
        self.work = Path(tempfile.mkdtemp(prefix="strata-bench-tier."))
        os.chmod(self.work, 0o700)
        # Short names: s3d (s3d's backend) keeps a multipart upload's state in a file named after the
        # base64 of the key, which must fit in 255 bytes.
        self.run_id = f"{int(time.time()) % 1000000:06d}"
        self.prefix = f"bt-{self.run_id}"
        self.broker = pid_file("kafka") or die("Kafka is not running: ./dev up")
        self.localstack = pid_file("localstack")
        self.tier = None
        self.tier_log = self.work / "tier.log"
        self.s3d = None
        self.topics = []
        self.mirrored = set()
        self.gen = 0
        self.down_from = None

    # --- services -----------------------------------------------------------------------
    def start_s3d(self):
        binary = Path(self.env.get("STRATA_TEST_S3D", ROOT / ".dev" / "s3d" / "s3d"))
        if not binary.exists():
            die(f"{binary} is missing (./dev setup builds s3d)")
        self.s3d_data = self.work / "s3d"
        (self.s3d_data / BUCKET).mkdir(parents=True)
        port = free_port()
        self.s3d_endpoint = f"http://127.0.0.1:{port}"
        self.s3d = subprocess.Popen([str(binary), "--host", "127.0.0.1", "--port", str(port), "--access-key", "test",
                                     "--secret-key", "test", str(self.s3d_data)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        die("s3d did not start")

    def start_tier(self, store, handoff=True):
        """strata tier on the broker's bridge endpoint, an empty cache, chunks from `store`."""
        self.stop_tier()
        self.gen += 1
        endpoint = self.s3d_endpoint if store == "s3d" else self.env["STRATA_TEST_S3_ENDPOINT"]
        self.metrics = f"127.0.0.1:{free_port()}"
        cache = self.cache = self.work / f"cache-{self.gen}"
        total = self.a.size_mib * len(self.a.partitions)
        cfg = self.work / "tier.toml"
        cfg.write_text(f"""[kafka]
bootstrap_servers = "{self.boot}"
[store]
url = "s3://{BUCKET}/{self.prefix}"
endpoint = "{endpoint}"
access_key = "test"
secret_key = "test"
region = "us-east-1"
create_bucket = {"true" if store != "s3d" else "false"}
[tier]
listen = "{self.tier_addr}"
secret_file = "{self.env['STRATA_TEST_TIER_SECRET']}"
log_dirs = ["{self.log_dir}"]
socket_dir = "{self.env['STRATA_TEST_TIER_SOCKET_DIR']}"
chunk_size = "{self.a.chunk}"
prefetch_chunks = {self.a.prefetch}
cache_dir = "{cache}"
cache_size = "{total * 2 + 256}MiB"
handoff = {"true" if handoff else "false"}
[telemetry]
metrics_listen = "{self.metrics}"
""")
        before = self.tier_log.stat().st_size if self.tier_log.exists() else 0
        out = open(self.tier_log, "ab")
        self.tier = subprocess.Popen([str(self.bin), "--log-format", "human", "tier", "--config", str(cfg)],
                                     stdout=out, stderr=out)
        for _ in range(300):
            with open(self.tier_log, "rb") as f:
                f.seek(before)
                if b"strata tier serving the broker bridge" in f.read():
                    break
            if self.tier.poll() is not None:
                die(f"strata tier exited; see {self.tier_log}")
            time.sleep(0.1)
        else:
            die("strata tier did not come up")
        # The bridge reconnects to the Unix socket on its next call. Had it called while strata
        # was down (the broker retries a copy now and then), it uses TCP, and so no handoff,
        # for 5 s: wait those out.
        if self.down_from is not None:
            called = "failed: could not connect" in broker_log_since(self.down_from)
            self.down_from = None
            if called:
                log("the bridge called while strata tier was down: waiting 6 s for it to use the Unix socket again")
                time.sleep(6)

    def stop_tier(self):
        if self.tier is not None:
            self.down_from = BROKER_LOG.stat().st_size
            self.tier.terminate()
            try:
                self.tier.wait(10)
            except subprocess.TimeoutExpired:
                self.tier.kill()
                self.tier.wait()
            self.tier = None
            # Each start gets an empty cache directory of its own; the last one's goes now (they
            # are GiBs each).
            shutil.rmtree(self.cache, ignore_errors=True)

    def tier_counters(self):
        text = urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=5).read().decode()
        out = {}
        for name in ("strata_tier_bytes_fetched_total", "strata_tier_bytes_handed_off_total"):
            m = re.search(rf"^{name} (\S+)$", text, re.M)
            out[name] = float(m.group(1)) if m else 0.0
        return out

    def broker_metrics(self):
        out = subprocess.run(["java", str(ROOT / "bench" / "tier" / "BrokerMetrics.java"), str(self.broker),
                              "kafka.log.remote:type=RemoteLogManager,name=RemoteLogReaderFetchRateAndTimeMs",
                              "kafka.server:type=DelayedRemoteFetchMetrics,*",
                              "kafka.server:type=BrokerTopicMetrics,name=RemoteFetchRequestsPerSec"],
                             capture_output=True, text=True).stdout
        m = {}
        for line in out.splitlines():
            name, attr, value = line.split("\t")
            short = re.search(r"name=(\w+)", name).group(1)
            try:
                m[f"{short}.{attr}"] = float(value)
            except ValueError:
                pass
        return m

    @staticmethod
    def metrics_delta(m0, m1):
        """Counts over one run, and each timer's mean over that run alone (from the cumulative
        means and counts the broker keeps)."""
        out = {k: (m1.get(k, 0) - m0.get(k, 0)) if k.endswith("Count") else m1.get(k) for k in m1}
        for k in m1:
            if k.endswith(".Mean"):
                name = k[:-len(".Mean")]
                c0, c1 = m0.get(f"{name}.Count", 0), m1.get(f"{name}.Count", 0)
                s0, s1 = c0 * m0.get(k, 0), c1 * m1[k]
                out[f"{name}.RunMean"] = (s1 - s0) / (c1 - c0) if c1 > c0 else None
        return out

    def request_log(self, level):
        subprocess.run([str(ROOT / "dev"), "kafka-class", "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server",
                        self.boot, "--alter", "--entity-type", "broker-loggers", "--entity-name", "1",
                        "--add-config", f"kafka.request.logger={level}"], check=True, capture_output=True)

    def fetch_times(self, topic, fetch_mib, partitions):
        """One read with the broker's request log on (DEBUG: a line per request, with its times):
        kcat's fetches that returned records, their median times in the broker (the request
        metrics cannot tell kcat's fetches from the broker's own long-polling consumer), and the
        read's time per fetch. Not one of the measured reads: the log costs the broker time."""
        start = BROKER_LOG.stat().st_size
        self.request_log("DEBUG")
        try:
            run = self.consume(topic, fetch_mib, partitions)
        finally:
            self.request_log("WARN")
        keys = ("totalTimeMs", "requestQueueTimeMs", "localTimeMs", "remoteTimeMs", "responseQueueTimeMs", "sendTimeMs")
        rows = []
        for line in broker_log_since(start).splitlines():
            if '"requestApiKeyName":"FETCH"' not in line or '"clientId":"rdkafka"' not in line:
                continue
            if sum(int(x) for x in re.findall(r'"recordsSizeInBytes":(\d+)', line)) == 0:
                continue  # the fetches at the end of the topic
            rows.append({k: float(re.search(rf'"{k}":([\d.]+)', line).group(1)) for k in keys})
        if not rows:
            return None
        out = {k: statistics.median(r[k] for r in rows) for k in keys}
        out["count"] = len(rows)
        out["sum_total"] = sum(r["totalTimeMs"] for r in rows)
        out["per_fetch"] = run["secs"] * 1000 / len(rows)
        return out

    # --- topics -------------------------------------------------------------------------
    def topic_cmd(self, *args):
        subprocess.run([str(ROOT / "dev"), "kafka-class", "org.apache.kafka.tools.TopicCommand",
                        "--bootstrap-server", self.boot, *args], check=True, capture_output=True)

    def local_logs(self, topic, partitions):
        return max(len(list((self.log_dir / f"{topic}-{p}").glob("*.log"))) for p in range(partitions))

    def prepare(self):
        log(f"generating {self.a.size_mib} MiB of records (1 KiB each, incompressible)")
        data = self.work / "data"
        with open(data, "wb") as f:
            raw = os.urandom(self.a.size_mib * MIB * 3 // 4)
            import base64
            b = base64.b64encode(raw)
            for i in range(0, len(b), 1023):
                f.write(b[i:i + 1023] + b"\n")
        self.bytes = data.stat().st_size
        self.records = self.bytes // 1024
        self.start_tier("s3d")
        seg = self.a.segment_mib * MIB
        for p in self.a.partitions:
            local, tier = f"tl{p}-{self.run_id}", f"tt{p}-{self.run_id}"
            self.topics += [local, tier]
            self.topic_cmd("--create", "--topic", local, "--partitions", str(p), "--config", f"segment.bytes={seg}")
            self.topic_cmd("--create", "--topic", tier, "--partitions", str(p), "--config", "remote.storage.enable=true",
                           "--config", f"segment.bytes={seg}", "--config", "local.retention.ms=1000",
                           "--config", "retention.ms=-1", "--config", "segment.ms=5000")
            log(f"producing {self.a.size_mib} MiB to {local} and {tier} ({p} partitions)")
            for t in (local, tier):
                with open(data, "rb") as f:
                    subprocess.run(["kcat", "-P", "-b", self.boot, "-t", t, "-z", "none"], stdin=f, check=True)
        time.sleep(6)
        for p in self.a.partitions:
            tier = f"tt{p}-{self.run_id}"
            # One more record per partition after segment.ms rolls its last data segment.
            for q in range(p):
                subprocess.run(["kcat", "-P", "-b", self.boot, "-t", tier, "-p", str(q), "-z", "none"],
                               input=b"end\n", check=True)
        t0 = time.monotonic()
        for p in self.a.partitions:
            tier = f"tt{p}-{self.run_id}"
            log(f"waiting until every data segment of {tier} is in the bucket and gone from local disk")
            while self.local_logs(tier, p) > 1:
                if time.monotonic() - t0 > 900:
                    die(f"{tier} still has local segments after 15 minutes")
                time.sleep(0.5)
        self.copy_secs = time.monotonic() - t0
        self.stop_tier()

    def mirror_to_localstack(self):
        """The tiered objects, as s3d holds them in files, put into LocalStack too (those not
        there yet: the broker tiers the segment of the end markers whenever local retention
        rolls it)."""
        import boto3
        s3 = boto3.client("s3", endpoint_url=self.env["STRATA_TEST_S3_ENDPOINT"], aws_access_key_id="test",
                          aws_secret_access_key="test", region_name="us-east-1")
        try:
            s3.create_bucket(Bucket=BUCKET)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        except Exception as e:  # BucketAlreadyExists on some versions
            if "BucketAlready" not in str(e):
                raise
        root = self.s3d_data / BUCKET
        files = [p for p in (root / self.prefix).rglob("*") if p.is_file() and p not in self.mirrored]
        if files:
            log(f"copying {len(files)} tiered objects into LocalStack")
        for p in files:
            s3.upload_file(str(p), BUCKET, p.relative_to(root).as_posix())
            self.mirrored.add(p)

    # --- measuring ----------------------------------------------------------------------
    def consume(self, topic, fetch_mib, partitions):
        """One read of the topic from the beginning: seconds and CPU seconds per process."""
        cmd = ["kcat", "-C", "-b", self.boot, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "\\n",
               "-X", f"fetch.message.max.bytes={fetch_mib * MIB}",
               "-X", f"fetch.max.bytes={max(52428800, fetch_mib * MIB)}",
               # At the end of the topic the broker holds an empty fetch this long before kcat
               # sees the end (librdkafka's default: 500 ms, which was in every time measured).
               "-X", "fetch.wait.max.ms=10"]
        procs = {"broker": self.broker, "tier": self.tier.pid if self.tier else None,
                 "s3d": self.s3d.pid if self.s3d else None, "localstack": self.localstack}
        before = {k: proc_cpu(v) for k, v in procs.items() if v}
        counters = self.tier_counters() if self.tier else None
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE)
        n = 0
        while True:
            b = p.stdout.read(1 << 16)
            if not b:
                break
            n += b.count(b"\n")
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        secs = time.monotonic() - t0
        if p.returncode != 0 or n < self.records:
            die(f"read {n} records of {topic} (kcat exit {p.returncode}), expected at least {self.records}")
        out = {"secs": secs, "mibs": self.bytes / MIB / secs, "consumer_cpu": ru.ru_utime + ru.ru_stime}
        for k, v in procs.items():
            if v and before.get(k) is not None:
                out[f"{k}_cpu"] = (proc_cpu(v) or before[k]) - before[k]
        if counters:
            after = self.tier_counters()
            served = after["strata_tier_bytes_fetched_total"] - counters["strata_tier_bytes_fetched_total"]
            handed = after["strata_tier_bytes_handed_off_total"] - counters["strata_tier_bytes_handed_off_total"]
            out["served_gib"] = served / (1 << 30)
            out["handed_off"] = handed / served if served else 0.0
        return out

    def run(self):
        self.start_s3d()
        self.prepare()
        log("warming up the broker's read paths (JIT, index caches)")
        self.start_tier("s3d")
        for p in self.a.partitions:
            self.consume(f"tl{p}-{self.run_id}", 1, p)
            self.consume(f"tt{p}-{self.run_id}", 1, p)
        self.results = {}
        for p in self.a.partitions:
            local, tier = f"tl{p}-{self.run_id}", f"tt{p}-{self.run_id}"
            for f in self.a.fetch_mib:
                log(f"{p} partition(s), {f} MiB fetches: {self.a.repeat} rounds")
                rows = {k: [] for k in ("local", "warm", "warm-socket", "cold-s3d", "cold-ls")}
                broker = None
                for r in range(self.a.repeat):
                    self.stop_tier()
                    rows["local"].append(self.consume(local, f, p))
                    self.start_tier("s3d")
                    rows["cold-s3d"].append(self.consume(tier, f, p))
                    m0 = self.broker_metrics() if r == 0 else None
                    rows["warm"].append(self.consume(tier, f, p))
                    if m0 is not None:
                        broker = {"remote": self.metrics_delta(m0, self.broker_metrics())}
                    self.start_tier("s3d", handoff=False)
                    self.consume(tier, f, p)  # fills the cache
                    rows["warm-socket"].append(self.consume(tier, f, p))
                    if "localstack" in self.a.stores:
                        self.mirror_to_localstack()
                        self.start_tier("localstack")
                        rows["cold-ls"].append(self.consume(tier, f, p))
                # One more pass, not in the figures: each fetch's time in the broker, from its request log.
                self.stop_tier()
                fetches = broker["fetches"] = {"local": self.fetch_times(local, f, p)}
                self.start_tier("s3d")
                fetches["cold-s3d"] = self.fetch_times(tier, f, p)
                fetches["warm"] = self.fetch_times(tier, f, p)
                self.results[(p, f)] = ({k: v for k, v in rows.items() if v}, broker)
        self.stop_tier()

    # --- report -------------------------------------------------------------------------
    def report(self):
        med = lambda runs, k: statistics.median(x[k] for x in runs if k in x) if any(k in x for x in runs) else None
        names = {"local": "local disk", "warm": "tiered, warm, cache files handed off",
                 "warm-socket": "tiered, warm, bytes over the socket", "cold-s3d": "tiered, cold, s3d",
                 "cold-ls": "tiered, cold, LocalStack"}
        wmem = Path("/proc/sys/net/core/wmem_max").read_text().strip()
        lines = [f"### Tier: {time.strftime('%Y-%m-%d', time.gmtime())}: {self.a.size_mib} MiB per topic, "
                 f"chunk {self.a.chunk}, prefetch {self.a.prefetch}",
                 "",
                 f"kcat from the beginning, one byte out per 1 KiB record, fetch.wait.max.ms 10; {self.a.segment_mib} MiB segments; median "
                 f"of {self.a.repeat}. Broker: socket.send.buffer.bytes 4 MiB (net.core.wmem_max {wmem}), "
                 "remote.fetch.max.wait.ms 5000, G1 regions 32 MiB. CPU columns are seconds for the whole read; "
                 "`tier s/GiB` is strata tier's CPU per GiB it served; `handed off` the share of those bytes the "
                 "bridge read from cache files.",
                 "",
                 "| partitions | fetch | case | MiB/s | vs local | consumer CPU | broker CPU | tier CPU | S3 CPU "
                 "| tier s/GiB | handed off |",
                 "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        notes = []
        for (p, f), (rows, broker) in self.results.items():
            local = med(rows["local"], "mibs")
            for k, runs in rows.items():
                mibs = med(runs, "mibs")
                s3 = med(runs, "s3d_cpu") if k == "cold-s3d" else med(runs, "localstack_cpu") if k == "cold-ls" else None
                tier = med(runs, "tier_cpu")
                gib = med(runs, "served_gib")
                per = f"{tier / gib:.2f}" if tier is not None and gib else ""
                handed = med(runs, "handed_off")
                fmt = lambda v: "" if v is None else f"{v:.2f}"
                lines.append(f"| {p} | {f} MiB | {names[k]} | {mibs:.0f} | {100 * mibs / local:.0f}% | "
                             f"{fmt(med(runs, 'consumer_cpu'))} | {fmt(med(runs, 'broker_cpu'))} | "
                             f"{fmt(tier) if k != 'local' else ''} | {fmt(s3)} | {per} | "
                             f"{'' if handed is None else f'{100 * handed:.0f}%'} |")
            if broker:
                w = broker["remote"]
                notes.append(f"- {p} partition(s), {f} MiB, warm run: {w.get('RemoteFetchRequestsPerSec.Count', 0):.0f} "
                             f"remote fetches, {w.get('RemoteLogReaderFetchRateAndTimeMs.Count', 0):.0f} remote "
                             f"reads averaging {w.get('RemoteLogReaderFetchRateAndTimeMs.RunMean') or 0:.2f} ms, "
                             f"{w.get('ExpiresPerSec.Count', 0):.0f} delayed remote fetches expired")
                for case in ("local", "warm", "cold-s3d"):
                    d = broker["fetches"][case]
                    if not d:
                        continue
                    notes.append(f"  - {names[case]}: {d['count']} fetches of {d['per_fetch']:.2f} ms each; median in "
                                 f"the broker {d['totalTimeMs']:.2f} ms (queue {d['requestQueueTimeMs']:.2f}, local "
                                 f"{d['localTimeMs']:.2f}, remote {d['remoteTimeMs']:.2f}, response queue "
                                 f"{d['responseQueueTimeMs']:.2f}, send {d['sendTimeMs']:.2f}), "
                                 f"{d['sum_total'] / d['count']:.2f} ms mean")
        lines += ["", f"Tiering {self.a.size_mib * len(self.a.partitions)} MiB (to s3d): {self.copy_secs:.0f} s "
                  "after the last produce.", "", "Broker metrics: remote reads in the first round; fetch times in the broker from its request log, in "
                  "one more read of each case (kcat's fetches that returned records; `each`: the read's time per fetch):", *notes]
        text = "\n".join(lines) + "\n"
        print(text)
        if self.a.out:
            Path(self.a.out).write_text(text)
        (ROOT / "bench" / "results").mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        (ROOT / "bench" / "results" / f"{stamp}-tier.json").write_text(json.dumps(
            [{"partitions": p, "fetch_mib": f, "cases": rows, "broker": broker}
             for (p, f), (rows, broker) in self.results.items()], indent=1))

    def cleanup(self):
        self.stop_tier()
        if self.topics:
            # Deleting a tiered topic makes the broker delete its remote segments: strata tier runs.
            try:
                self.start_tier("s3d")
                for t in self.topics:
                    self.topic_cmd("--delete", "--topic", t)
                time.sleep(5)
            except (subprocess.CalledProcessError, SystemExit):
                pass
            self.stop_tier()
        if self.s3d:
            self.s3d.terminate()
            self.s3d.wait()
        shutil.rmtree(self.work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # bench/run passes the data set's size as the argument, REPEAT, OUT and BENCH_SMOKE=1.
    ap.add_argument("size", type=int, nargs="?", help="MiB per topic (same as --size-mib)")
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--fetch-mib", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--repeat", type=int, default=int(os.environ.get("REPEAT", "3")))
    ap.add_argument("--segment-mib", type=int, default=64)
    ap.add_argument("--chunk", default="4MiB")
    ap.add_argument("--prefetch", type=int, default=8)
    ap.add_argument("--stores", nargs="+", default=["s3d", "localstack"], choices=["s3d", "localstack"])
    ap.add_argument("--out", default=os.environ.get("OUT"))
    a = ap.parse_args()
    if a.size:
        a.size_mib = a.size
    if os.environ.get("BENCH_SMOKE") == "1":
        a.repeat, a.partitions, a.fetch_mib = 1, [1], [1]
    if shutil.which("kcat") is None:
        die("kcat is missing (./dev setup installs it)")
    b = Bench(a)
    with socket.socket() as s:
        host, port = b.tier_addr.rsplit(":", 1)
        if s.connect_ex((host, int(port))) == 0:
            die(f"something already listens on {b.tier_addr} (another strata tier?); stop it first")
    if not b.bin.exists():
        log(f"building {b.bin}")
        subprocess.run(["cargo", "build", "--release", "--bin", "strata"], cwd=ROOT, check=True)
    try:
        b.run()
        b.report()
    finally:
        b.cleanup()


if __name__ == "__main__":
    main()
