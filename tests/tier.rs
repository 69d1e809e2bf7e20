//! Tier mode against real services: `strata tier` runs as a subprocess; the broker (Kafka 4.4
//! with tiered storage through the Java bridge) calls it on STRATA_TEST_TIER_ADDR; objects go
//! to LocalStack.
//!
//! - `api_*`: the HTTP contract without the broker, on a free port, with a real `.log` taken
//!   from the broker's data dir: byte ranges across chunk edges, every index, idempotent copy
//!   and delete, a corrupted stored chunk, Kafka's DumpLogSegments on the served bytes.
//! - `broker_end_to_end`: a topic tiered through the bridge; strata tier killed during copies
//!   and restarted with cold caches; every record read back through the broker; served
//!   segments compared byte for byte with the broker's files; remote objects gone after the
//!   topic is deleted.

mod common;

use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata::format::Record;
use strata::store::ObjectStore;
use strata::tier::{Manifest, SegmentMetadata};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Only one `strata tier` can listen where the broker's bridge calls.
static BROKER_TIER_PORT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn tier_addr() -> String {
    std::env::var("STRATA_TEST_TIER_ADDR").unwrap_or_else(|_| {
        panic!("STRATA_TEST_TIER_ADDR is not set: run with `./dev test` or `eval \"$(./dev env)\"`")
    })
}

fn kafka_log_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("STRATA_TEST_KAFKA_LOG_DIR").unwrap_or_else(|_| {
            panic!("STRATA_TEST_KAFKA_LOG_DIR is not set: run with `./dev test`")
        }),
    )
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

// ------------------------------------------------------------------------------------------
// A `strata tier` child process, killed when dropped (also when a test fails).

struct TierProcess {
    child: Option<Child>,
    log: PathBuf,
}

impl TierProcess {
    async fn start(config: &Path, addr: &str, log: &Path) -> Self {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(strata_bin())
            .args(["--log-format", "human", "tier", "--config"])
            .arg(config)
            .env("RUST_LOG", "info,strata=debug")
            .envs(
                std::env::var("TIER_TEST_MALLOC")
                    .ok()
                    .map(|v| ("MALLOC_MMAP_THRESHOLD_", v)),
            )
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn strata tier");
        let mut p = Self {
            child: Some(child),
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = p.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "strata tier exited with {status} at start:\n{}",
                    p.log_text()
                );
            }
            if let Ok(r) = try_http(addr, "GET", "/v1/health", b"").await {
                let pid = p.child.as_ref().unwrap().id();
                if r.status == 200 && r.text() == format!("ok pid={pid}") {
                    return p;
                }
                assert!(
                    r.status != 200,
                    "another process answers on {addr}: {} (a strata tier left running?)",
                    r.text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "strata tier did not answer on {addr}:\n{}",
                p.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, as a crash would.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for TierProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn write_config(dir: &Path, name: &str, store_prefix: &str, tier: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{}{tier}", s3_toml(store_prefix))).unwrap();
    path
}

// ------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client: the tests want to see statuses, headers and short bodies as sent.

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Reply {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn content_length(&self) -> Option<usize> {
        self.headers
            .get("content-length")
            .map(|v| v.parse().unwrap())
    }
}

async fn try_http(addr: &str, method: &str, path: &str, body: &[u8]) -> std::io::Result<Reply> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    // Read until the server closes; a reset after a cut-short body keeps what arrived.
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match tokio::time::timeout(Duration::from_secs(60), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
            Err(_) => panic!("{method} {path}: no data for 60 s"),
        }
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no HTTP head"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("bad status line"))?;
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.get("transfer-encoding").map(String::as_str) == Some("chunked") {
        body = dechunk(&body);
    }
    Ok(Reply {
        status,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if n == 0 || b.len() < eol + 2 + n {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[(eol + 4 + n).min(b.len())..];
    }
    out
}

async fn post(addr: &str, path: &str, json: &serde_json::Value) -> Reply {
    try_http(addr, "POST", path, json.to_string().as_bytes())
        .await
        .unwrap_or_else(|e| panic!("POST {path} to {addr}: {e}"))
}

async fn fetch(addr: &str, seg: &serde_json::Value, start: i64, end: Option<i64>) -> Reply {
    post(
        addr,
        "/v1/fetch",
        &serde_json::json!({"segment": seg, "start_position": start, "end_position": end}),
    )
    .await
}

async fn fetch_index(addr: &str, seg: &serde_json::Value, index: &str) -> Reply {
    post(
        addr,
        "/v1/fetch-index",
        &serde_json::json!({"segment": seg, "index": index}),
    )
    .await
}

// ------------------------------------------------------------------------------------------
// Data helpers.

/// Deterministic bytes that lz4 and zstd cannot shrink much.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Sample records (keys, repeated and null headers, tombstones, timestamps) with about
/// `pad` more bytes of incompressible value each.
fn big_records(topic: &str, n: usize, partitions: i32, base_ts: i64, pad: usize) -> Vec<Record> {
    let mut records = sample_records(topic, n, partitions, base_ts);
    for (i, r) in records.iter_mut().enumerate() {
        if let Some(v) = r.value.as_mut() {
            v.extend_from_slice(&noise(i as u64, pad));
        }
    }
    records
}

/// Base offsets of the `.log` files the broker has for a partition now.
fn local_segments(topic: &str, partition: i32) -> Vec<i64> {
    let dir = kafka_log_dir().join(format!("{topic}-{partition}"));
    let mut out: Vec<i64> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_suffix(".log")?.parse().ok()
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable();
    out
}

fn random_kafka_id() -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::new_v4().as_bytes())
}

/// Every manifest stored for a topic, parsed.
async fn manifests(store: &dyn ObjectStore, topic: &str) -> Vec<(String, Manifest)> {
    let mut out = Vec::new();
    for o in store.list(&format!("tiered/{topic}-")).await.unwrap() {
        if o.key.ends_with(".manifest") {
            let raw = match store.get(&o.key).await {
                Ok(r) => r,
                Err(_) => continue, // deleted meanwhile
            };
            let m = Manifest::from_json(&raw)
                .unwrap_or_else(|e| panic!("manifest {} is invalid: {e}", o.key));
            out.push((o.key, m));
        }
    }
    out
}

fn assert_same_records(topic: &str, partitions: i32, produced: &[Record], consumed: &[Record]) {
    assert_eq!(
        consumed.len(),
        produced.len(),
        "{topic}: record count read back"
    );
    for p in 0..partitions {
        let want: Vec<&Record> = produced.iter().filter(|r| r.partition == Some(p)).collect();
        let got: Vec<&Record> = consumed.iter().filter(|r| r.partition == Some(p)).collect();
        assert_eq!(got.len(), want.len(), "{topic}-{p}: record count");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.offset, Some(i as i64), "{topic}-{p}: offsets in order");
            assert_eq!(g.key, w.key, "{topic}-{p} offset {i}: key");
            assert_eq!(g.value, w.value, "{topic}-{p} offset {i}: value");
            assert_eq!(g.headers, w.headers, "{topic}-{p} offset {i}: headers");
            assert_eq!(
                g.timestamp, w.timestamp,
                "{topic}-{p} offset {i}: timestamp"
            );
        }
    }
}

/// `DumpLogSegments` (org.apache.kafka.tools) output for a segment file, minus the line naming the file.
fn dump_log_segment(file: &Path) -> String {
    let dev = std::env::var("STRATA_DEV").expect("STRATA_DEV (path of ./dev)");
    let out = Command::new(dev)
        .args([
            "kafka-class",
            "org.apache.kafka.tools.DumpLogSegments",
            "--deep-iteration",
            "--print-data-log",
            "--files",
        ])
        .arg(file)
        .output()
        .expect("run DumpLogSegments");
    assert!(
        out.status.success(),
        "DumpLogSegments failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("baseOffset"),
        "DumpLogSegments printed no batches:\n{text}"
    );
    text.lines()
        .filter(|l| !l.starts_with("Dumping "))
        .collect::<Vec<_>>()
        .join("\n")
}

// ------------------------------------------------------------------------------------------
// Direct API tests (no broker in the loop; a real segment from the broker's data dir).

/// The files of a rolled segment (base offset 0) of a plain topic, copied aside.
struct SourceSegment {
    dir: PathBuf,
    log: PathBuf,
    index: PathBuf,
    timeindex: PathBuf,
    snapshot: PathBuf,
    txnindex: PathBuf,
    epochs: Vec<u8>,
}

async fn source_segment(tmp: &Path) -> SourceSegment {
    let topic = unique("tier-src");
    create_topic_with(&topic, 1, &[("segment.bytes", "1048576")]).await;
    let ts = chrono::Utc::now().timestamp_millis() - 3_600_000;
    produce(&big_records(&topic, 2600, 1, ts, 1000)).await;
    eventually(60, "the source topic rolled a segment", || async {
        local_segments(&topic, 0).len() >= 2
    })
    .await;
    let part = kafka_log_dir().join(format!("{topic}-0"));
    let dir = tmp.join("source");
    std::fs::create_dir_all(&dir).unwrap();
    let base = "00000000000000000000";
    let copy = |ext: &str| {
        let to = dir.join(format!("{base}.{ext}"));
        std::fs::copy(part.join(format!("{base}.{ext}")), &to).unwrap();
        to
    };
    let log = copy("log");
    let index = copy("index");
    let timeindex = copy("timeindex");
    // The producer snapshot taken when the segment rolled, or stand-in bytes.
    let next = local_segments(&topic, 0)[1];
    let snapshot = dir.join("snapshot");
    match std::fs::copy(part.join(format!("{next:020}.snapshot")), &snapshot) {
        Ok(_) => {}
        Err(_) => std::fs::write(&snapshot, noise(7, 300)).unwrap(),
    }
    let txnindex = dir.join(format!("{base}.txnindex"));
    std::fs::write(&txnindex, noise(8, 34 * 3)).unwrap();
    let admin = strata::kafka::Admin::new(&kafka_config()).unwrap();
    admin.delete_topics(&[&topic]).await.unwrap();
    assert!(std::fs::metadata(&log).unwrap().len() > 900_000);
    SourceSegment {
        dir,
        log,
        index,
        timeindex,
        snapshot,
        txnindex,
        epochs: b"0\n1\n0 0\n".to_vec(),
    }
}

fn segment_json(src: &SourceSegment, segment_id: &str) -> serde_json::Value {
    serde_json::json!({
        "topic": "tier-api", "topic_id": "AAECAwQFBgcICQoLDA0ODw", "partition": 0,
        "segment_id": segment_id, "start_offset": 0, "end_offset": 999,
        "max_timestamp_ms": 1700000000123i64, "event_timestamp_ms": 1700000000456i64,
        "broker_id": 1, "segment_size_bytes": std::fs::metadata(&src.log).unwrap().len(),
        "leader_epochs": [[0, 0]]
    })
}

fn copy_json(src: &SourceSegment, seg: &serde_json::Value, with_txn: bool) -> serde_json::Value {
    use base64::Engine;
    serde_json::json!({
        "segment": seg,
        "files": {
            "log": src.log, "offset_index": src.index, "time_index": src.timeindex,
            "transaction_index": if with_txn { Some(&src.txnindex) } else { None },
            "producer_snapshot": src.snapshot,
        },
        "leader_epoch_index": base64::engine::general_purpose::STANDARD.encode(&src.epochs),
    })
}

async fn metric(addr: &str, name: &str) -> f64 {
    let r = try_http(addr, "GET", "/metrics", b"").await.unwrap();
    r.text()
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn api_scenario(compression: &str, chunk: u64) {
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let src = source_segment(tmp.path()).await;
    let original = std::fs::read(&src.log).unwrap();
    let size = original.len() as i64;
    let chunk_i = chunk as i64;

    let prefix = unique("tier-api");
    let addr = free_addr();
    let metrics_addr = free_addr();
    let config = write_config(
        tmp.path(),
        "tier.toml",
        &prefix,
        &format!(
            "[tier]\nlisten = \"{addr}\"\nprefix = \"tiered\"\nchunk_size = \"{chunk}\"\ncompression = \"{compression}\"\ncache_dir = \"{}\"\ncache_size = \"64MiB\"\n[telemetry]\nmetrics_listen = \"{metrics_addr}\"\n",
            tmp.path().join("cache").display()
        ),
    );
    let mut tier = TierProcess::start(&config, &addr, &tmp.path().join("tier.log")).await;
    let store = s3_store(&prefix).await;

    // Copy: 200 with no custom metadata; three objects; the manifest describes the chunks.
    let id_a = random_kafka_id();
    let seg_a = segment_json(&src, &id_a);
    let r = post(&addr, "/v1/copy", &copy_json(&src, &seg_a, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let answer: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(answer, serde_json::json!({"custom_metadata": null}));
    let base = format!("tiered/tier-api-AAECAwQFBgcICQoLDA0ODw/0/00000000000000000000-{id_a}");
    let keys: BTreeSet<String> = store
        .list("tiered/")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    let want: BTreeSet<String> = ["log", "indexes", "manifest"]
        .iter()
        .map(|e| format!("{base}.{e}"))
        .collect();
    assert_eq!(keys, want);
    let manifest =
        Manifest::from_json(&store.get(&format!("{base}.manifest")).await.unwrap()).unwrap();
    assert_eq!(manifest.log.size, size as u64);
    assert_eq!(manifest.log.chunk_size, chunk);
    assert_eq!(
        manifest.log.chunks.len() as u64,
        (size as u64).div_ceil(chunk)
    );
    assert!(manifest.log.chunks.len() >= 7, "several chunks per segment");
    let stored_log = store.head(&format!("{base}.log")).await.unwrap().size;
    assert_eq!(
        stored_log,
        manifest
            .log
            .chunks
            .iter()
            .map(|c| c.stored_size)
            .sum::<u64>()
    );
    if compression == "none" {
        assert_eq!(stored_log, size as u64);
    }

    // Byte ranges, both ends inclusive.
    let cases: Vec<(i64, Option<i64>)> = vec![
        (0, None),
        (0, Some(0)),
        (chunk_i - 1, Some(chunk_i)),
        (chunk_i, Some(2 * chunk_i - 1)),
        (size - 1, Some(size - 1)),
        (size - 1, None),
        (3 * chunk_i + 5, Some(6 * chunk_i + 1)),
        (12345, Some(size + 10_000)),
        (2 * chunk_i + 17, None),
        (size, None),
    ];
    for (start, end) in cases {
        let r = fetch(&addr, &seg_a, start, end).await;
        assert_eq!(r.status, 200, "fetch {start}..={end:?}: {}", r.text());
        let stop = end.map_or(size, |e| (e + 1).min(size));
        let want = &original[start as usize..stop as usize];
        assert_eq!(
            r.content_length(),
            Some(want.len()),
            "fetch {start}..={end:?}"
        );
        assert!(
            r.body == want,
            "fetch {start}..={end:?}: served bytes differ from the segment"
        );
    }
    for (start, end, field) in [
        (size + 1, None, "start_position"),
        (-1, None, "start_position"),
        (10, Some(9), "end_position"),
    ] {
        let r = fetch(&addr, &seg_a, start, end).await;
        assert_eq!(r.status, 400, "fetch {start}..={end:?}");
        assert!(r.text().contains(field), "{}", r.text());
    }

    // Kafka's own reader agrees with what was served.
    let full = fetch(&addr, &seg_a, 0, None).await.body;
    let served_dir = tmp.path().join("served");
    std::fs::create_dir_all(&served_dir).unwrap();
    let served = served_dir.join("00000000000000000000.log");
    std::fs::write(&served, &full).unwrap();
    assert_eq!(dump_log_segment(&served), dump_log_segment(&src.log));

    // Indexes: stored bytes unchanged; no transaction index → 404.
    for (index, file) in [
        ("OFFSET", &src.index),
        ("TIMESTAMP", &src.timeindex),
        ("PRODUCER_SNAPSHOT", &src.snapshot),
    ] {
        let r = fetch_index(&addr, &seg_a, index).await;
        assert_eq!(r.status, 200, "{index}: {}", r.text());
        assert!(
            r.body == std::fs::read(file).unwrap(),
            "{index} bytes differ"
        );
    }
    let r = fetch_index(&addr, &seg_a, "LEADER_EPOCH").await;
    assert_eq!((r.status, r.body.clone()), (200, src.epochs.clone()));
    let r = fetch_index(&addr, &seg_a, "TRANSACTION").await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("TRANSACTION"), "{}", r.text());

    // A segment with a transaction index.
    let seg_b = segment_json(&src, &random_kafka_id());
    let r = post(&addr, "/v1/copy", &copy_json(&src, &seg_b, true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = fetch_index(&addr, &seg_b, "TRANSACTION").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.body == std::fs::read(&src.txnindex).unwrap());

    // Copy again with the same id: overwrites, same bytes served.
    let r = post(&addr, "/v1/copy", &copy_json(&src, &seg_a, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(fetch(&addr, &seg_a, 0, None).await.body == original);

    // A sequential reader near the end of a segment has the next segment's first chunks
    // fetched ahead: reading them afterwards costs no GET.
    let mut seg_p = segment_json(&src, &random_kafka_id());
    seg_p["start_offset"] = serde_json::json!(2000);
    seg_p["end_offset"] = serde_json::json!(2999);
    let mut seg_next = segment_json(&src, &random_kafka_id());
    seg_next["start_offset"] = serde_json::json!(3000);
    seg_next["end_offset"] = serde_json::json!(3999);
    for seg in [&seg_p, &seg_next] {
        let r = post(&addr, "/v1/copy", &copy_json(&src, seg, false)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let prefetched = metric(&metrics_addr, "strata_tier_prefetches_total").await;
    let last_chunk_start = (size - 1) / chunk_i * chunk_i;
    let r = fetch(&addr, &seg_p, last_chunk_start, None).await;
    assert!(r.body == original[last_chunk_start as usize..]);
    eventually(30, "the next segment's first chunks prefetched", || async {
        metric(&metrics_addr, "strata_tier_prefetches_total").await >= prefetched + 3.0
    })
    .await;
    let misses = metric(&metrics_addr, "strata_tier_cache_misses_total").await;
    let r = fetch(&addr, &seg_next, 0, Some(chunk_i * 3 - 1)).await;
    assert!(r.body == original[..(chunk_i * 3) as usize]);
    assert_eq!(
        metric(&metrics_addr, "strata_tier_cache_misses_total").await,
        misses,
        "the next segment's first chunks came from the cache (or loads already running)"
    );

    // Requests that cannot be served.
    let unknown = segment_json(&src, &random_kafka_id());
    let r = fetch(&addr, &unknown, 0, None).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("not in remote storage"), "{}", r.text());
    let r = fetch_index(&addr, &unknown, "OFFSET").await;
    assert_eq!(r.status, 404, "{}", r.text());
    let mut bad = seg_a.clone();
    bad["topic_id"] = serde_json::json!("not-an-id");
    let r = fetch(&addr, &bad, 0, None).await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("segment.topic_id"), "{}", r.text());
    let r = try_http(&addr, "POST", "/v1/fetch", b"{\"segment\": 1")
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    let mut missing = copy_json(&src, &segment_json(&src, &random_kafka_id()), false);
    missing["files"]["log"] = serde_json::json!(tmp.path().join("gone.log"));
    let r = post(&addr, "/v1/copy", &missing).await;
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.text().contains("gone.log"), "{}", r.text());

    // A stored chunk damaged after upload: a clear error, never wrong bytes.
    let seg_c = segment_json(&src, &random_kafka_id());
    let id_c = seg_c["segment_id"].as_str().unwrap().to_string();
    let r = post(&addr, "/v1/copy", &copy_json(&src, &seg_c, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let base_c = format!("tiered/tier-api-AAECAwQFBgcICQoLDA0ODw/0/00000000000000000000-{id_c}");
    let m_c =
        Manifest::from_json(&store.get(&format!("{base_c}.manifest")).await.unwrap()).unwrap();
    let at: u64 = m_c.log.chunks[..5]
        .iter()
        .map(|c| c.stored_size)
        .sum::<u64>()
        + 7;
    let mut stored = store.get(&format!("{base_c}.log")).await.unwrap().to_vec();
    stored[at as usize] ^= 0x5a;
    store
        .put(&format!("{base_c}.log"), bytes::Bytes::from(stored))
        .await
        .unwrap();
    let r = fetch(&addr, &seg_c, 5 * chunk_i + 3, Some(5 * chunk_i + 100)).await;
    assert_eq!(r.status, 500, "{}", r.text());
    let msg = r.text();
    assert!(
        msg.contains("chunk 5")
            && msg.contains(&format!("{base_c}.log"))
            && msg.contains("corrupt"),
        "{msg}"
    );
    let r = fetch(&addr, &seg_c, 0, None).await;
    assert_eq!(r.status, 200, "the first chunks are intact");
    assert_eq!(r.content_length(), Some(size as usize));
    assert!(
        r.body.len() <= 5 * chunk as usize,
        "the body stops before the damaged chunk ({} bytes arrived)",
        r.body.len()
    );
    assert!(
        r.body == original[..r.body.len()],
        "what arrived is the segment's bytes"
    );

    // Delete: all three objects go; again (and for an unknown segment) still 2xx.
    for seg in [&seg_a, &seg_a, &unknown] {
        let r = post(&addr, "/v1/delete", &serde_json::json!({"segment": seg})).await;
        assert!(
            (200..300).contains(&r.status),
            "delete: {} {}",
            r.status,
            r.text()
        );
    }
    assert!(store.list(&format!("{base}.")).await.unwrap().is_empty());
    assert_eq!(fetch(&addr, &seg_a, 0, None).await.status, 404);
    assert_eq!(
        fetch(&addr, &seg_b, 0, Some(10)).await.status,
        200,
        "other segments stay"
    );

    // Metrics.
    assert!(metric(&metrics_addr, "strata_tier_bytes_copied_total").await >= 3.0 * size as f64);
    assert!(metric(&metrics_addr, "strata_tier_bytes_fetched_total").await >= size as f64);
    assert!(metric(&metrics_addr, "strata_tier_cache_misses_total").await >= 1.0);
    assert!(metric(&metrics_addr, "strata_tier_cache_hits_total").await >= 1.0);
    assert!(
        metric(
            &metrics_addr,
            "strata_tier_store_seconds_count{op=\"get_range\"}"
        )
        .await
            >= 1.0
    );
    assert!(metric(&metrics_addr, "strata_tier_errors_total{op=\"fetch\"}").await >= 1.0);

    // Leave nothing behind in the bucket.
    for seg in [&seg_b, &seg_c, &seg_p, &seg_next] {
        let r = post(&addr, "/v1/delete", &serde_json::json!({"segment": seg})).await;
        assert_eq!(r.status, 204, "{}", r.text());
    }
    assert_eq!(store.list("tiered/").await.unwrap(), vec![]);

    tier.kill();
    drop(src.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_uncompressed_chunks() {
    api_scenario("none", 64 << 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_zstd_chunks() {
    api_scenario("zstd", 128 << 10).await;
}

/// Peak and current resident memory of a process, in bytes (VmHWM, VmRSS).
fn memory_of(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} missing in /proc/{pid}/status"))
            * 1024
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Streams a fetch response: status, Content-Length, and the CRC-32C and size of the body.
async fn fetch_digest(addr: &str, seg: &serde_json::Value) -> (u16, u64, u32, u64) {
    let body =
        serde_json::json!({"segment": seg, "start_position": 0, "end_position": null}).to_string();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/fetch HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut pending = Vec::new();
    let (mut status, mut length, mut crc, mut size, mut in_body) = (0u16, 0u64, 0u32, 0u64, false);
    loop {
        let n = tokio::time::timeout(Duration::from_secs(60), s.read(&mut buf))
            .await
            .expect("fetch stalled")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        if in_body {
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            size += n as u64;
            continue;
        }
        pending.extend_from_slice(&buf[..n]);
        if let Some(split) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..split]).to_ascii_lowercase();
            status = head.split(' ').nth(1).unwrap().parse().unwrap();
            length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            crc = crc32c::crc32c(&pending[split + 4..]);
            size = (pending.len() - split - 4) as u64;
            in_body = true;
        }
    }
    (status, length, crc, size)
}

/// A segment far larger than a chunk is copied and served with memory bounded by a few
/// chunks, not by the segment: the upload streams, the reader streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_big_segment_memory_stays_within_a_few_chunks() {
    init_logs();
    const CHUNK: u64 = 4 << 20;
    const SIZE: u64 = 256 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let prefix = unique("tier-big");
    let addr = free_addr();
    let config = write_config(
        tmp.path(),
        "tier.toml",
        &prefix,
        &format!("[tier]\nlisten = \"{addr}\"\nprefix = \"tiered\"\nchunk_size = \"4MiB\"\ncache_size = \"16MiB\"\nprefetch_chunks = 2\n"),
    );
    let mut tier = TierProcess::start(&config, &addr, &tmp.path().join("tier.log")).await;
    let pid = tier.child.as_ref().unwrap().id();

    // The file: 1 MiB of noise, repeated, with the block number stamped in.
    let log = tmp.path().join("00000000000000000000.log");
    {
        use std::io::Write;
        let block = noise(42, 1 << 20);
        let mut f = std::io::BufWriter::new(std::fs::File::create(&log).unwrap());
        for i in 0..(SIZE >> 20) {
            f.write_all(&i.to_be_bytes()).unwrap();
            f.write_all(&block[8..]).unwrap();
        }
        f.flush().unwrap();
    }
    let want_crc = {
        use std::io::Read;
        let mut f = std::fs::File::open(&log).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut crc = 0;
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            crc = crc32c::crc32c_append(crc, &buf[..n]);
        }
        crc
    };
    let empty = |name: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, b"").unwrap();
        p
    };
    let seg = serde_json::json!({
        "topic": "tier-big", "topic_id": "AAECAwQFBgcICQoLDA0ODw", "partition": 0,
        "segment_id": random_kafka_id(), "start_offset": 0, "end_offset": 1,
        "max_timestamp_ms": 0, "event_timestamp_ms": 0, "broker_id": 1,
        "segment_size_bytes": SIZE, "leader_epochs": [[0, 0]]
    });
    let copy = serde_json::json!({
        "segment": seg,
        "files": {"log": log, "offset_index": empty("i"), "time_index": empty("t"),
                  "transaction_index": null, "producer_snapshot": empty("s")},
        "leader_epoch_index": "",
    });

    let (_, before) = memory_of(pid);
    let r = post(&addr, "/v1/copy", &copy).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let (peak, _) = memory_of(pid);
    let grew = peak.saturating_sub(before);
    eprintln!(
        "copy of {} MiB: RSS {} MiB before, peak {} MiB",
        SIZE >> 20,
        before >> 20,
        peak >> 20
    );
    assert!(
        grew <= 8 * CHUNK,
        "copying a {} MiB segment raised peak RSS by {} MiB (more than 8 chunks)",
        SIZE >> 20,
        grew >> 20
    );

    let (status, length, crc, size) = fetch_digest(&addr, &seg).await;
    assert_eq!((status, length, size), (200, SIZE, SIZE));
    assert_eq!(crc, want_crc, "served bytes differ");
    let (peak2, _) = memory_of(pid);
    eprintln!("fetch of {} MiB: peak {} MiB", SIZE >> 20, peak2 >> 20);
    assert!(
        peak2.saturating_sub(before) <= (16 << 20) + 10 * CHUNK,
        "serving a {} MiB segment raised peak RSS by {} MiB (more than the 16 MiB cache and 10 chunks)",
        SIZE >> 20,
        peak2.saturating_sub(before) >> 20
    );
    let r = post(&addr, "/v1/delete", &serde_json::json!({"segment": seg})).await;
    assert_eq!(r.status, 204);
    tier.kill();
}

// ------------------------------------------------------------------------------------------
// Through the broker.

/// Copies every rolled `.log` of the partitions aside as soon as it appears, so the bytes
/// served later can be compared with the broker's own files after it deleted them.
fn capture_segments(
    topic: String,
    partitions: i32,
    into: PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for p in 0..partitions {
                let segs = local_segments(&topic, p);
                // All but the newest are rolled, hence immutable.
                for base in segs.iter().take(segs.len().saturating_sub(1)) {
                    let to = into.join(format!("{p}-{base:020}.log"));
                    if to.exists() {
                        continue;
                    }
                    let from = kafka_log_dir().join(format!("{topic}-{p}/{base:020}.log"));
                    let tmp = to.with_extension("part");
                    if std::fs::copy(&from, &tmp).is_ok() {
                        let _ = std::fs::rename(&tmp, &to);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn broker_end_to_end() {
    init_logs();
    let _port = BROKER_TIER_PORT.lock().await;
    let addr = tier_addr();
    let tmp = tempfile::tempdir().unwrap();
    let prefix = unique("tier-e2e");
    let store = s3_store(&prefix).await;
    let config = |cache: &str| {
        write_config(
            tmp.path(),
            &format!("{cache}.toml"),
            &prefix,
            &format!(
                "[tier]\nlisten = \"{addr}\"\nprefix = \"tiered\"\nchunk_size = \"256KiB\"\ncompression = \"zstd\"\ncache_dir = \"{}\"\ncache_size = \"16MiB\"\nprefetch_chunks = 2\n",
                tmp.path().join(cache).display()
            ),
        )
    };
    let log = tmp.path().join("tier.log");
    let mut tier = TierProcess::start(&config("cache-1"), &addr, &log).await;

    let topic = unique("tier-e2e");
    let partitions = 2;
    create_topic_with(
        &topic,
        partitions,
        &[
            ("remote.storage.enable", "true"),
            ("segment.bytes", "1048576"),
            ("local.retention.ms", "1000"),
            ("retention.ms", "-1"),
        ],
    )
    .await;
    let captured = tmp.path().join("captured");
    std::fs::create_dir_all(&captured).unwrap();
    let stop_capture = Arc::new(AtomicBool::new(false));
    let capture = capture_segments(
        topic.clone(),
        partitions,
        captured.clone(),
        stop_capture.clone(),
    );

    // ≥ 20 MiB of keyed records, timestamps a day back so local retention applies at once.
    let records = big_records(
        &topic,
        24_000,
        partitions,
        chrono::Utc::now().timestamp_millis() - 86_400_000,
        1000,
    );
    let bytes: usize = records
        .iter()
        .map(|r| r.value.as_ref().map_or(0, Vec::len))
        .sum();
    assert!(bytes > 20 << 20, "{bytes} bytes of values");
    let producing = {
        let records = records.clone();
        tokio::spawn(async move { produce(&records).await })
    };

    // Kill strata tier while the broker is copying: the first segments are stored, more are
    // rolling.
    eventually(120, "the first manifest in the bucket", || async {
        !manifests(store.as_ref(), &topic).await.is_empty()
    })
    .await;
    tier.kill();
    let at_kill = manifests(store.as_ref(), &topic).await.len();
    producing.await.unwrap();
    eventually(
        60,
        "segments waiting for a copy while strata tier is down",
        || async {
            let rolled: usize = (0..partitions)
                .map(|p| local_segments(&topic, p).len().saturating_sub(1))
                .sum();
            rolled > 0
        },
    )
    .await;
    // Let the broker's copy attempts fail for a while (its task runs every second).
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Back with a cold cache: the broker retries and catches up.
    let mut tier = TierProcess::start(&config("cache-2"), &addr, &log).await;
    eventually(
        240,
        "early local segments deleted and copies caught up",
        || async {
            let local_start_moved = (0..partitions).all(|p| {
                let segs = local_segments(&topic, p);
                !segs.is_empty() && segs[0] > 0
            });
            let ms = manifests(store.as_ref(), &topic).await;
            let from_zero = (0..partitions).all(|p| {
                ms.iter()
                    .any(|(_, m)| m.segment.partition == p && m.segment.start_offset == 0)
            });
            local_start_moved && from_zero && ms.len() > at_kill
        },
    )
    .await;

    // Every record back through the broker, read from the bucket for the early offsets.
    let consumed = consume_all(&topic);
    assert_same_records(&topic, partitions, &records, &consumed);

    // Served bytes equal the broker's own segment files, byte for byte.
    stop_capture.store(true, Ordering::Relaxed);
    capture.join().unwrap();
    let ms = manifests(store.as_ref(), &topic).await;
    let mut compared = 0;
    for entry in std::fs::read_dir(&captured).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
        else {
            continue;
        };
        let (p, base) = name.split_once('-').unwrap();
        let (p, base): (i32, i64) = (p.parse().unwrap(), base.parse().unwrap());
        let Some((_, m)) = ms
            .iter()
            .find(|(_, m)| m.segment.partition == p && m.segment.start_offset == base)
        else {
            continue; // not tiered (yet)
        };
        let seg = serde_json::to_value(&m.segment).unwrap();
        let r = fetch(&addr, &seg, 0, None).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(
            r.body == std::fs::read(&path).unwrap(),
            "segment {p}@{base}: served bytes differ from the broker's file"
        );
        compared += 1;
    }
    assert!(compared >= 3, "compared {compared} segments byte for byte");

    // Restart with an empty cache: still every record.
    tier.kill();
    let mut tier = TierProcess::start(&config("cache-3"), &addr, &log).await;
    let consumed = consume_all(&topic);
    assert_same_records(&topic, partitions, &records, &consumed);

    // Deleting the topic removes its remote objects.
    let topic_id = {
        let m: &SegmentMetadata = &ms[0].1.segment;
        m.topic_id.to_string()
    };
    let admin = strata::kafka::Admin::new(&kafka_config()).unwrap();
    admin.delete_topics(&[&topic]).await.unwrap();
    let topic_prefix = format!("tiered/{topic}-{topic_id}/");
    eventually(
        180,
        "remote objects of the deleted topic removed",
        || async { store.list(&topic_prefix).await.unwrap().is_empty() },
    )
    .await;
    let text = tier.log_text();
    assert!(text.contains("segment deleted"), "{text}");
    tier.kill();
}
