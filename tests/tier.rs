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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata::format::Record;
use strata::store::ObjectStore;
use strata::tier::auth::{self, SessionKey, SharedSecret};
use strata::tier::{Manifest, SegmentMetadata};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Only one `strata tier` can listen where the broker's bridge calls.
static BROKER_TIER_PORT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn tier_addr() -> String {
    std::env::var("STRATA_TEST_TIER_ADDR").unwrap_or_else(|_| {
        panic!("STRATA_TEST_TIER_ADDR is not set: run with `./dev test` or `eval \"$(./dev env)\"`")
    })
}

/// The secret the dev broker's bridge reads (`rsm.config.strata.secret.file`).
fn dev_secret() -> PathBuf {
    PathBuf::from(
        std::env::var("STRATA_TEST_TIER_SECRET").unwrap_or_else(|_| {
            panic!("STRATA_TEST_TIER_SECRET is not set: run with `./dev test`")
        }),
    )
}

/// The private socket directory the dev broker's strata tier uses.
fn dev_socket_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("STRATA_TEST_TIER_SOCKET_DIR").unwrap_or_else(|_| {
            panic!("STRATA_TEST_TIER_SOCKET_DIR is not set: run with `./dev test`")
        }),
    )
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

/// Where a strata tier listens and the secret its bridge shares with it.
#[derive(Clone)]
struct Endpoint {
    addr: String,
    secret: SharedSecret,
}

impl Endpoint {
    fn new(addr: &str, secret_file: &Path) -> Self {
        Self {
            addr: addr.to_string(),
            secret: SharedSecret::load(secret_file).expect("the test's secret file"),
        }
    }
}

struct TierProcess {
    child: Option<Child>,
    log: PathBuf,
}

impl TierProcess {
    /// Starts strata tier and waits until it answers an authenticated health check with its
    /// own pid (not another process left on the port).
    async fn start(config: &Path, ep: &Endpoint, log: &Path) -> Self {
        let mut p = Self::spawn(config, log);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = p.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "strata tier exited with {status} at start:\n{}",
                    p.log_text()
                );
            }
            if let Ok(mut c) = Conn::open(ep).await {
                let r = c.call("GET", "/v1/health", b"").await;
                let pid = p.child.as_ref().unwrap().id();
                assert_eq!(
                    r.text(),
                    format!("ok pid={pid}"),
                    "another strata tier answers on {} (one left running?)",
                    ep.addr
                );
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "strata tier did not answer on {}:\n{}",
                ep.addr,
                p.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn spawn(config: &Path, log: &Path) -> Self {
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
        Self {
            child: Some(child),
            log: log.to_path_buf(),
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

/// The `[tier]` lines every test's strata tier needs: its secret, the log dir copies come
/// from, and (optionally) its private socket directory.
fn access_toml(secret: &Path, log_dir: &Path, socket_dir: Option<&Path>) -> String {
    let mut t = format!(
        "secret_file = \"{}\"\nlog_dirs = [\"{}\"]\n",
        secret.display(),
        log_dir.display()
    );
    if let Some(d) = socket_dir {
        t.push_str(&format!("socket_dir = \"{}\"\n", d.display()));
    }
    t
}

fn write_config(dir: &Path, name: &str, store_prefix: &str, tier: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{}{tier}", s3_toml(store_prefix))).unwrap();
    path
}

/// A fresh secret file in `dir`.
fn new_secret(dir: &Path) -> PathBuf {
    let p = dir.join("tier.secret");
    strata::tier::auth::write_new_secret(&p).unwrap();
    p
}

// ------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client speaking the bridge's protocol: the tests want to see statuses,
// headers and bodies as sent, and to break the protocol on purpose.

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

/// Takes a body as it arrives, instead of the reply keeping it.
type Sink<'a> = &'a mut (dyn FnMut(&[u8]) + Send);

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// One connection: after [`Conn::hello`], requests are signed and answers checked.
struct Conn {
    io: Box<dyn Io>,
    host: String,
    /// Read but not yet consumed.
    pending: Vec<u8>,
    key: Option<SessionKey>,
    seq: u64,
}

/// What a hello answered.
struct Hello {
    socket: Option<String>,
}

impl Conn {
    async fn tcp(addr: &str) -> std::io::Result<Self> {
        let s = tokio::net::TcpStream::connect(addr).await?;
        Ok(Self::over(Box::new(s), addr))
    }

    async fn unix(path: &Path) -> std::io::Result<Self> {
        let s = tokio::net::UnixStream::connect(path).await?;
        Ok(Self::over(Box::new(s), "localhost"))
    }

    fn over(io: Box<dyn Io>, host: &str) -> Self {
        Self {
            io,
            host: host.to_string(),
            pending: Vec::new(),
            key: None,
            seq: 0,
        }
    }

    /// Connected and authenticated over TCP.
    async fn open(ep: &Endpoint) -> std::io::Result<Self> {
        let mut c = Self::tcp(&ep.addr).await?;
        c.hello(&ep.secret).await?;
        Ok(c)
    }

    /// The handshake; panics when strata's proof is wrong (the server under test is ours).
    async fn hello(&mut self, secret: &SharedSecret) -> std::io::Result<Hello> {
        let (hello, proof_ok) = self.hello_unchecked(secret).await?;
        assert!(proof_ok, "strata tier's hello proof is wrong");
        Ok(hello)
    }

    /// The handshake without judging the proof (a bridge holding another secret).
    async fn hello_unchecked(&mut self, secret: &SharedSecret) -> std::io::Result<(Hello, bool)> {
        let cn = auth::nonce();
        let body = serde_json::json!({"version": 1, "client_nonce": cn}).to_string();
        let r = self
            .exchange("POST", "/v1/hello", JSON, &[], body.as_bytes(), None)
            .await?;
        if r.status != 200 {
            return Err(std::io::Error::other(format!(
                "hello: {} {}",
                r.status,
                r.text()
            )));
        }
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let sn = v["server_nonce"].as_str().unwrap();
        let socket = v["socket"].as_str().map(str::to_string);
        let proof_ok = auth::same_mac(
            v["proof"].as_str().unwrap(),
            &auth::server_proof(secret, &cn, sn, socket.as_deref()),
        );
        self.key = Some(SessionKey::derive(secret, &cn, sn));
        self.seq = 0;
        Ok((Hello { socket }, proof_ok))
    }

    /// Writes a signed request and leaves the answer unread (a bridge that stops reading).
    async fn send_only(&mut self, path: &str, body: &[u8]) {
        let (_, auth_header) = self.sign("POST", path, body);
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {JSON}\r\nContent-Length: {}\r\nstrata-auth: {auth_header}\r\n\r\n",
            self.host,
            body.len()
        );
        self.io.write_all(head.as_bytes()).await.unwrap();
        self.io.write_all(body).await.unwrap();
    }

    /// A signed request; the answer's signature must check.
    async fn call(&mut self, method: &str, path: &str, body: &[u8]) -> Reply {
        self.call_streaming(method, path, body, None).await
    }

    async fn call_streaming(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
        sink: Option<Sink<'_>>,
    ) -> Reply {
        let ctype = if method == "GET" { "" } else { JSON };
        let (seq, auth_header) = self.sign(method, path, body);
        let streamed = sink.is_some();
        let r = self
            .exchange(
                method,
                path,
                ctype,
                &[("strata-auth", auth_header)],
                body,
                sink,
            )
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        self.check_signature(&r, seq, path, streamed);
        r
    }

    /// The next sequence number and its `Strata-Auth` header for a body.
    fn sign(&mut self, method: &str, path: &str, covered: &[u8]) -> (u64, String) {
        self.seq += 1;
        let key = self.key.as_ref().expect("hello first");
        let mac = key.request_mac(self.seq, method, path, &auth::sha256_hex(covered));
        (self.seq, format!("{} {mac}", self.seq))
    }

    fn check_signature(&self, r: &Reply, seq: u64, path: &str, streamed: bool) {
        let key = self.key.as_ref().unwrap();
        let handoff =
            r.headers.get("content-type").map(String::as_str) == Some(strata::tier::HANDOFF);
        let digest = if path == "/v1/fetch" && r.status == 200 && !handoff {
            format!("stream {}", r.content_length().unwrap())
        } else {
            assert!(!streamed, "only fetch bodies are streamed");
            auth::sha256_hex(&r.body)
        };
        let want = key.response_mac(seq, r.status, &digest);
        let got = r.headers.get("strata-auth").map(String::as_str);
        assert_eq!(
            got,
            Some(want.as_str()),
            "{path}: the answer's signature ({} {})",
            r.status,
            r.text()
        );
    }

    /// Sends one request as given and reads the answer: up to its Content-Length, or until
    /// the server closes (a body cut short keeps what arrived). `sink` takes the body instead
    /// of the reply.
    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        headers: &[(&str, String)],
        body: &[u8],
        mut sink: Option<Sink<'_>>,
    ) -> std::io::Result<Reply> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        if !content_type.is_empty() {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let written = async {
            self.io.write_all(head.as_bytes()).await?;
            self.io.write_all(body).await
        }
        .await;
        match written {
            Ok(()) => self.read_reply(method, path, sink.take()).await,
            // A server may answer before the body is in (a refusal, busy) and close: read
            // that answer, as HTTP clients do, so a test sees why.
            Err(e) => self
                .read_reply(method, path, sink.take())
                .await
                .map_err(|_| e),
        }
    }

    async fn read_reply(
        &mut self,
        method: &str,
        path: &str,
        mut sink: Option<Sink<'_>>,
    ) -> std::io::Result<Reply> {
        let mut buf = vec![0u8; 1 << 20];
        let split = loop {
            if let Some(i) = self.pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            let n = self.read_some(&mut buf, method, path).await?;
            if n == 0 {
                return Err(std::io::Error::other("the server closed before answering"));
            }
            self.pending.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&self.pending[..split]).into_owned();
        self.pending.drain(..split + 4);
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
        let length = if status == 204 || status == 304 {
            Some(0)
        } else {
            headers
                .get("content-length")
                .map(|v| v.parse::<usize>().unwrap())
        };
        let mut body = Vec::new();
        let mut got = 0usize;
        let mut take = |data: &[u8], body: &mut Vec<u8>| match sink.as_mut() {
            Some(f) => f(data),
            None => body.extend_from_slice(data),
        };
        let first = std::mem::take(&mut self.pending);
        let first_len = length.map_or(first.len(), |l| l.min(first.len()));
        take(&first[..first_len], &mut body);
        self.pending = first[first_len..].to_vec();
        got += first_len;
        while length.is_none_or(|l| got < l) {
            // A reset after a cut-short body keeps what arrived.
            let n: usize = self
                .read_some(&mut buf, method, path)
                .await
                .unwrap_or_default();
            if n == 0 {
                break;
            }
            let want = length.map_or(n, |l| (l - got).min(n));
            take(&buf[..want], &mut body);
            self.pending.extend_from_slice(&buf[want..n]);
            got += want;
        }
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    async fn read_some(
        &mut self,
        buf: &mut [u8],
        method: &str,
        path: &str,
    ) -> std::io::Result<usize> {
        match tokio::time::timeout(Duration::from_secs(60), self.io.read(buf)).await {
            Ok(r) => r,
            Err(_) => panic!("{method} {path}: no data for 60 s"),
        }
    }
}

const JSON: &str = "application/json";

/// One authenticated request on a new connection.
async fn post(ep: &Endpoint, path: &str, json: &serde_json::Value) -> Reply {
    let mut c = Conn::open(ep)
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", ep.addr));
    c.call("POST", path, json.to_string().as_bytes()).await
}

async fn fetch(ep: &Endpoint, seg: &serde_json::Value, start: i64, end: Option<i64>) -> Reply {
    post(
        ep,
        "/v1/fetch",
        &serde_json::json!({"segment": seg, "start_position": start, "end_position": end}),
    )
    .await
}

async fn fetch_index(ep: &Endpoint, seg: &serde_json::Value, index: &str) -> Reply {
    post(
        ep,
        "/v1/fetch-index",
        &serde_json::json!({"segment": seg, "index": index}),
    )
    .await
}

/// A plain GET (the metrics endpoint).
async fn plain_get(addr: &str, path: &str) -> Reply {
    let mut c = Conn::tcp(addr).await.unwrap();
    c.exchange("GET", path, "", &[], b"", None).await.unwrap()
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

/// The files of a rolled segment (base offset 0) of a plain topic, copied aside into a log dir
/// of the test's own (`<logs>/tier-api-0/`), where strata tier may read them.
struct SourceSegment {
    dir: PathBuf,
    logs: PathBuf,
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
    let logs = tmp.join("logs");
    let dir = logs.join("tier-api-0");
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
    let snapshot = dir.join(format!("{next:020}.snapshot"));
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
        logs,
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

/// A copy request for `src`'s files under the names the segment's start offset gives them
/// (hard links beside the originals: strata tier copies only files named after the segment).
fn copy_json(src: &SourceSegment, seg: &serde_json::Value, with_txn: bool) -> serde_json::Value {
    use base64::Engine;
    let start = seg["start_offset"].as_i64().unwrap();
    let named = |file: &Path| {
        let ext = file.extension().unwrap().to_str().unwrap();
        let to = src.dir.join(format!("{start:020}.{ext}"));
        if !to.exists() {
            std::fs::hard_link(file, &to).unwrap();
        }
        to
    };
    serde_json::json!({
        "segment": seg,
        "files": {
            "log": named(&src.log), "offset_index": named(&src.index), "time_index": named(&src.timeindex),
            "transaction_index": if with_txn { Some(named(&src.txnindex)) } else { None },
            "producer_snapshot": src.snapshot,
        },
        "leader_epoch_index": base64::engine::general_purpose::STANDARD.encode(&src.epochs),
    })
}

async fn metric(addr: &str, name: &str) -> f64 {
    let r = plain_get(addr, "/metrics").await;
    r.text()
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The API contract. `store_settings`: `[store]` lines (encryption, class, tags) and how S3
/// must then show every object tier writes.
async fn api_scenario(compression: &str, chunk: u64, store_settings: Option<(String, StoredAs)>) {
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let src = source_segment(tmp.path()).await;
    let secret = new_secret(tmp.path());
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
            "{}[tier]\nlisten = \"{addr}\"\nprefix = \"tiered\"\nchunk_size = \"{chunk}\"\ncompression = \"{compression}\"\ncache_dir = \"{}\"\ncache_size = \"64MiB\"\n{}[telemetry]\nmetrics_listen = \"{metrics_addr}\"\n",
            store_settings.as_ref().map_or("", |(lines, _)| lines.as_str()),
            tmp.path().join("cache").display(),
            access_toml(&secret, &src.logs, None),
        ),
    );
    let ep = Endpoint::new(&addr, &secret);
    let mut tier = TierProcess::start(&config, &ep, &tmp.path().join("tier.log")).await;
    let store = s3_store(&prefix).await;

    // Copy: 200 with no custom metadata; three objects; the manifest describes the chunks.
    let id_a = random_kafka_id();
    let seg_a = segment_json(&src, &id_a);
    let r = post(&ep, "/v1/copy", &copy_json(&src, &seg_a, false)).await;
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
    // The segment, its indexes and its manifest carry [store]'s settings.
    if let Some((_, stored)) = &store_settings {
        for key in &keys {
            assert_eq!(
                &stored_as(TEST_BUCKET, &format!("{prefix}/{key}")).await,
                stored,
                "{key}"
            );
        }
    }
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
        let r = fetch(&ep, &seg_a, start, end).await;
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
        let r = fetch(&ep, &seg_a, start, end).await;
        assert_eq!(r.status, 400, "fetch {start}..={end:?}");
        assert!(r.text().contains(field), "{}", r.text());
    }

    // Kafka's own reader agrees with what was served.
    let full = fetch(&ep, &seg_a, 0, None).await.body;
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
        let r = fetch_index(&ep, &seg_a, index).await;
        assert_eq!(r.status, 200, "{index}: {}", r.text());
        assert!(
            r.body == std::fs::read(file).unwrap(),
            "{index} bytes differ"
        );
    }
    let r = fetch_index(&ep, &seg_a, "LEADER_EPOCH").await;
    assert_eq!((r.status, r.body.clone()), (200, src.epochs.clone()));
    let r = fetch_index(&ep, &seg_a, "TRANSACTION").await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("TRANSACTION"), "{}", r.text());

    // A segment with a transaction index.
    let seg_b = segment_json(&src, &random_kafka_id());
    let r = post(&ep, "/v1/copy", &copy_json(&src, &seg_b, true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = fetch_index(&ep, &seg_b, "TRANSACTION").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.body == std::fs::read(&src.txnindex).unwrap());

    // Copy again with the same id: overwrites, same bytes served.
    let r = post(&ep, "/v1/copy", &copy_json(&src, &seg_a, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(fetch(&ep, &seg_a, 0, None).await.body == original);

    // A sequential reader near the end of a segment has the next segment's first chunks
    // fetched ahead: reading them afterwards costs no GET.
    let mut seg_p = segment_json(&src, &random_kafka_id());
    seg_p["start_offset"] = serde_json::json!(2000);
    seg_p["end_offset"] = serde_json::json!(2999);
    let mut seg_next = segment_json(&src, &random_kafka_id());
    seg_next["start_offset"] = serde_json::json!(3000);
    seg_next["end_offset"] = serde_json::json!(3999);
    for seg in [&seg_p, &seg_next] {
        let r = post(&ep, "/v1/copy", &copy_json(&src, seg, false)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let prefetched = metric(&metrics_addr, "strata_tier_prefetches_total").await;
    let last_chunk_start = (size - 1) / chunk_i * chunk_i;
    let r = fetch(&ep, &seg_p, last_chunk_start, None).await;
    assert!(r.body == original[last_chunk_start as usize..]);
    eventually(30, "the next segment's first chunks prefetched", || async {
        metric(&metrics_addr, "strata_tier_prefetches_total").await >= prefetched + 3.0
    })
    .await;
    let misses = metric(&metrics_addr, "strata_tier_cache_misses_total").await;
    let r = fetch(&ep, &seg_next, 0, Some(chunk_i * 3 - 1)).await;
    assert!(r.body == original[..(chunk_i * 3) as usize]);
    assert_eq!(
        metric(&metrics_addr, "strata_tier_cache_misses_total").await,
        misses,
        "the next segment's first chunks came from the cache (or loads already running)"
    );

    // Requests that cannot be served.
    let unknown = segment_json(&src, &random_kafka_id());
    let r = fetch(&ep, &unknown, 0, None).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("not in remote storage"), "{}", r.text());
    let r = fetch_index(&ep, &unknown, "OFFSET").await;
    assert_eq!(r.status, 404, "{}", r.text());
    let mut bad = seg_a.clone();
    bad["topic_id"] = serde_json::json!("not-an-id");
    let r = fetch(&ep, &bad, 0, None).await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("segment.topic_id"), "{}", r.text());
    let r = Conn::open(&ep)
        .await
        .unwrap()
        .call("POST", "/v1/fetch", b"{\"segment\": 1")
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    // A file of the segment's own name that is not there: named in the error.
    let mut gone_seg = segment_json(&src, &random_kafka_id());
    gone_seg["start_offset"] = serde_json::json!(5000);
    gone_seg["end_offset"] = serde_json::json!(5999);
    let mut missing = copy_json(&src, &gone_seg, false);
    let gone = src.dir.join("00000000000000005000.log");
    std::fs::remove_file(&gone).unwrap();
    missing["files"]["log"] = serde_json::json!(gone);
    let r = post(&ep, "/v1/copy", &missing).await;
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(
        r.text().contains(&gone.display().to_string()),
        "{}",
        r.text()
    );

    // A stored chunk damaged after upload: a clear error, never wrong bytes.
    let seg_c = segment_json(&src, &random_kafka_id());
    let id_c = seg_c["segment_id"].as_str().unwrap().to_string();
    let r = post(&ep, "/v1/copy", &copy_json(&src, &seg_c, false)).await;
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
    let r = fetch(&ep, &seg_c, 5 * chunk_i + 3, Some(5 * chunk_i + 100)).await;
    assert_eq!(r.status, 500, "{}", r.text());
    let msg = r.text();
    assert!(
        msg.contains("chunk 5")
            && msg.contains(&format!("{base_c}.log"))
            && msg.contains("corrupt"),
        "{msg}"
    );
    let r = fetch(&ep, &seg_c, 0, None).await;
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
        let r = post(&ep, "/v1/delete", &serde_json::json!({"segment": seg})).await;
        assert!(
            (200..300).contains(&r.status),
            "delete: {} {}",
            r.status,
            r.text()
        );
    }
    assert!(store.list(&format!("{base}.")).await.unwrap().is_empty());
    assert_eq!(fetch(&ep, &seg_a, 0, None).await.status, 404);
    assert_eq!(
        fetch(&ep, &seg_b, 0, Some(10)).await.status,
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
        let r = post(&ep, "/v1/delete", &serde_json::json!({"segment": seg})).await;
        assert_eq!(r.status, 204, "{}", r.text());
    }
    assert_eq!(store.list("tiered/").await.unwrap(), vec![]);

    tier.kill();
    drop(src.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_uncompressed_chunks() {
    api_scenario("none", 64 << 10, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_zstd_chunks() {
    // Tier's objects take [store]'s encryption, storage class and tags, as dump's do.
    let key = localstack_kms_key().await;
    let lines = format!(
        "sse = \"aws:kms\"\nsse_kms_key_id = \"{key}\"\nstorage_class = \"STANDARD_IA\"\ntags = {{ tier = \"yes\" }}\n"
    );
    let stored = StoredAs {
        sse: Some("aws:kms".into()),
        kms_key: Some(key),
        storage_class: Some("STANDARD_IA".into()),
        tags: vec![("tier".into(), "yes".into())],
    };
    api_scenario("zstd", 128 << 10, Some((lines, stored))).await;
}

/// A signed fetch request on `c` asking for a handoff (and reporting `damaged`).
async fn fetch_handoff(
    c: &mut Conn,
    seg: &serde_json::Value,
    start: u64,
    max: u64,
    damaged: Option<&str>,
) -> Reply {
    let mut req = serde_json::json!({"segment": seg, "start_position": start, "end_position": null,
        "max_bytes": max, "handoff": true});
    if let Some(d) = damaged {
        req["damaged_file"] = serde_json::json!(d);
    }
    c.call("POST", "/v1/fetch", req.to_string().as_bytes())
        .await
}

/// The bytes a handoff answer names, read as the bridge does: each block checked against the
/// answer's CRC-32C. `Err` names the first piece whose file is gone or fails its check.
fn read_handoff(h: &strata::tier::Handoff) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let dir = Path::new(&h.dir);
    assert_eq!(
        std::fs::metadata(dir).unwrap().mode() & 0o777,
        0o700,
        "private"
    );
    let mut out = Vec::new();
    for p in &h.pieces {
        assert!(
            !p.file.contains('/') && p.file.ends_with(".chunk"),
            "{}",
            p.file
        );
        let path = dir.join(&p.file);
        let f = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", p.file))?;
        let meta = f.metadata().unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600, "{}", p.file);
        assert_eq!(meta.len(), p.size, "{}", p.file);
        let bs = h.block_size;
        let first = p.offset / bs;
        let last = (p.offset + p.len - 1) / bs;
        assert_eq!(p.crc32c.len() as u64, last - first + 1);
        let from = first * bs;
        let to = ((last + 1) * bs).min(p.size);
        let mut buf = vec![0u8; (to - from) as usize];
        f.read_exact_at(&mut buf, from).unwrap();
        for (i, block) in buf.chunks(bs as usize).enumerate() {
            if crc32c::crc32c(block) != p.crc32c[i] {
                return Err(p.file.clone());
            }
        }
        let at = (p.offset - from) as usize;
        out.extend_from_slice(&buf[at..at + p.len as usize]);
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_handoff_of_cache_files() {
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let src = source_segment(tmp.path()).await;
    let secret = new_secret(tmp.path());
    let original = std::fs::read(&src.log).unwrap();
    let chunk = 200u64 << 10;
    let (addr, metrics_addr) = (free_addr(), free_addr());
    let run = tmp.path().join("run");
    let cache = tmp.path().join("cache");
    let prefix = unique("tier-handoff");
    // Room for 4 chunks: reading the whole segment evicts its first ones.
    let config = write_config(
        tmp.path(),
        "tier.toml",
        &prefix,
        &format!(
            "[tier]\nlisten = \"{addr}\"\nprefix = \"tiered\"\nchunk_size = \"200KiB\"\ncache_dir = \"{}\"\ncache_size = \"800KiB\"\nprefetch_chunks = 0\n{}[telemetry]\nmetrics_listen = \"{metrics_addr}\"\n",
            cache.display(),
            access_toml(&secret, &src.logs, Some(&run)),
        ),
    );
    let ep = Endpoint::new(&addr, &secret);
    let mut tier = TierProcess::start(&config, &ep, &tmp.path().join("tier.log")).await;
    let seg = segment_json(&src, &random_kafka_id());
    let r = post(&ep, "/v1/copy", &copy_json(&src, &seg, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut u = Conn::unix(&run.join(strata::tier::SOCKET_NAME))
        .await
        .unwrap();
    u.hello(&ep.secret).await.unwrap();
    let mut t = Conn::open(&ep).await.unwrap();
    let parse = |r: &Reply| -> Option<strata::tier::Handoff> {
        assert_eq!(r.status, 200, "{}", r.text());
        (r.headers.get("content-type").map(String::as_str) == Some(strata::tier::HANDOFF))
            .then(|| serde_json::from_slice(&r.body).unwrap())
    };

    // Cold: bytes. Over TCP: always bytes (the peer may be on another host).
    let start = 150_000u64;
    let r = fetch_handoff(&mut u, &seg, start, 200_000, None).await;
    assert!(parse(&r).is_none(), "nothing on disk yet: bytes");
    assert!(r.body == original[start as usize..start as usize + 200_000]);
    let r = fetch_handoff(&mut t, &seg, start, 200_000, None).await;
    assert!(parse(&r).is_none(), "no handoff over TCP");
    assert!(r.body == original[start as usize..start as usize + 200_000]);

    // Warm, over the Unix socket: the files, verified block by block, hold the bytes.
    let deadline = Instant::now() + Duration::from_secs(30);
    let h = loop {
        if let Some(h) = parse(&fetch_handoff(&mut u, &seg, start, 200_000, None).await) {
            break h;
        }
        assert!(
            Instant::now() < deadline,
            "the chunks never reached the cache directory"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(h.dir, cache.join("strata-chunks").display().to_string());
    assert_eq!(h.block_size, strata::tier::HANDOFF_BLOCK);
    assert_eq!((h.len, h.partial, h.pieces.len()), (200_000, false, 2));
    assert_eq!(h.pieces[0].offset, start % chunk);
    assert_eq!(
        read_handoff(&h).unwrap(),
        original[start as usize..start as usize + 200_000]
    );
    // Asked to, a handoff covers more than `max_bytes` (the bridge keeps it for the broker's
    // next fetches); bytes, over TCP, stay within `max_bytes`.
    let ahead = serde_json::json!({"segment": seg, "start_position": start,
        "end_position": null, "max_bytes": 100_000, "handoff": true,
        "handoff_max_bytes": 200_000})
    .to_string();
    let r = u.call("POST", "/v1/fetch", ahead.as_bytes()).await;
    let wide = parse(&r).unwrap();
    assert_eq!(
        (wide.len, wide.partial, wide.max_bytes),
        (200_000, false, Some(200_000)),
        "{wide:?}"
    );
    assert_eq!(read_handoff(&wide).unwrap(), read_handoff(&h).unwrap());
    let r = t.call("POST", "/v1/fetch", ahead.as_bytes()).await;
    assert!(parse(&r).is_none());
    assert!(r.body == original[start as usize..start as usize + 100_000]);
    // A window running into a chunk not on disk is cut there, marked partial.
    let r = fetch_handoff(&mut u, &seg, start, 1 << 20, None).await;
    let h2 = parse(&r).unwrap();
    assert!(h2.partial && h2.len == 2 * chunk - start, "{h2:?}");
    assert!(metric(&metrics_addr, "strata_tier_bytes_handed_off_total").await >= 200_000.0);

    // A damaged file: the bridge's check catches it; reported, strata drops it and the next
    // answer does not name it again.
    let victim = h.pieces[1].file.clone();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(cache.join("strata-chunks").join(&victim))
            .unwrap();
        f.write_all_at(b"X", 1234).unwrap();
    }
    assert_eq!(read_handoff(&h), Err(victim.clone()));
    let r = fetch_handoff(&mut u, &seg, start, 200_000, Some(&victim)).await;
    match parse(&r) {
        None => assert!(r.body == original[start as usize..start as usize + 200_000]),
        Some(again) => {
            assert!(again.pieces.iter().all(|p| p.file != victim), "{again:?}");
            assert!(again.partial, "the dropped chunk is not on disk");
        }
    }
    assert!(
        !cache.join("strata-chunks").join(&victim).exists(),
        "dropped"
    );

    // Eviction: reading the whole segment through a 4-chunk cache unlinks the early files;
    // their names are never used again, so a stale answer fails to open, never reads others.
    let mut seen = BTreeSet::new();
    for p in &h.pieces {
        seen.insert(p.file.clone());
    }
    let mut pos = 0u64;
    while pos < original.len() as u64 {
        let r = fetch_handoff(&mut u, &seg, pos, 1 << 20, None).await;
        let got = match parse(&r) {
            Some(h) => {
                for p in &h.pieces {
                    seen.insert(p.file.clone());
                }
                read_handoff(&h).unwrap()
            }
            None => r.body,
        };
        assert!(!got.is_empty());
        assert!(
            got == original[pos as usize..pos as usize + got.len()],
            "at {pos}"
        );
        pos += got.len() as u64;
    }
    let first_file = h.pieces[0].file.clone();
    eventually(30, "the first chunk's file evicted", || async {
        !cache.join("strata-chunks").join(&first_file).exists()
    })
    .await;
    let err = read_handoff(&h).unwrap_err();
    assert!(
        err.contains(&first_file) && err.contains("No such file"),
        "{err}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let h3 = loop {
        let r = fetch_handoff(&mut u, &seg, start, 200_000, None).await;
        if let Some(h) = parse(&r).filter(|h| !h.partial) {
            break h;
        }
        assert!(
            Instant::now() < deadline,
            "the first chunks never came back to the cache"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        h3.pieces.iter().all(|p| !seen.contains(&p.file)),
        "a name was reused: {h3:?}"
    );
    assert_eq!(
        read_handoff(&h3).unwrap(),
        original[start as usize..start as usize + 200_000]
    );
    tier.kill();
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
async fn fetch_digest(ep: &Endpoint, seg: &serde_json::Value) -> (u16, u64, u32, u64) {
    let body =
        serde_json::json!({"segment": seg, "start_position": 0, "end_position": null}).to_string();
    let (mut crc, mut size) = (0u32, 0u64);
    let mut sink = |b: &[u8]| {
        crc = crc32c::crc32c_append(crc, b);
        size += b.len() as u64;
    };
    let r = Conn::open(ep)
        .await
        .unwrap()
        .call_streaming("POST", "/v1/fetch", body.as_bytes(), Some(&mut sink))
        .await;
    (r.status, r.content_length().unwrap_or(0) as u64, crc, size)
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
    let secret = new_secret(tmp.path());
    let logs = tmp.path().join("logs");
    let part = logs.join("tier-big-0");
    std::fs::create_dir_all(&part).unwrap();
    let config = write_config(
        tmp.path(),
        "tier.toml",
        &prefix,
        &format!("[tier]\nlisten = \"{addr}\"\nprefix = \"tiered\"\nchunk_size = \"4MiB\"\ncache_size = \"16MiB\"\nprefetch_chunks = 2\n{}", access_toml(&secret, &logs, None)),
    );
    let ep = Endpoint::new(&addr, &secret);
    let mut tier = TierProcess::start(&config, &ep, &tmp.path().join("tier.log")).await;
    let pid = tier.child.as_ref().unwrap().id();

    // The file: 1 MiB of noise, repeated, with the block number stamped in.
    let log = part.join("00000000000000000000.log");
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
        let p = part.join(name);
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
        "files": {"log": log, "offset_index": empty("00000000000000000000.index"),
                  "time_index": empty("00000000000000000000.timeindex"),
                  "transaction_index": null, "producer_snapshot": empty("00000000000000000002.snapshot")},
        "leader_epoch_index": "",
    });

    let (_, before) = memory_of(pid);
    let r = post(&ep, "/v1/copy", &copy).await;
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

    let (status, length, crc, size) = fetch_digest(&ep, &seg).await;
    assert_eq!((status, length, size), (200, SIZE, SIZE));
    assert_eq!(crc, want_crc, "served bytes differ");
    let (peak2, _) = memory_of(pid);
    eprintln!("fetch of {} MiB: peak {} MiB", SIZE >> 20, peak2 >> 20);
    // What this guards against is memory that grows with the segment (256 MiB). strata tier
    // keeps freed pages for a second for reuse (src/main.rs), so under load (the other tests of
    // this binary run beside it) the peak holds more chunks than are in use at once.
    assert!(
        peak2.saturating_sub(before) <= (16 << 20) + 16 * CHUNK,
        "serving a {} MiB segment raised peak RSS by {} MiB (more than the 16 MiB cache and 16 chunks)",
        SIZE >> 20,
        peak2.saturating_sub(before) >> 20
    );
    // Then it hands them back, idle or not: within a few decay periods, RSS is back near the
    // cache and the chunks it keeps.
    let idle_bound = (16 << 20) + 4 * CHUNK;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let idle = loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let (_, rss) = memory_of(pid);
        if rss.saturating_sub(before) <= idle_bound || std::time::Instant::now() > deadline {
            break rss;
        }
    };
    eprintln!("idle after the fetch: RSS {} MiB", idle >> 20);
    assert!(
        idle.saturating_sub(before) <= idle_bound,
        "10 s after serving, RSS is still {} MiB above where it started (more than the 16 MiB cache and 4 chunks): freed pages were not handed back",
        idle.saturating_sub(before) >> 20
    );
    let r = post(&ep, "/v1/delete", &serde_json::json!({"segment": seg})).await;
    assert_eq!(r.status, 204);
    tier.kill();
}

// ------------------------------------------------------------------------------------------
// Through the broker.

/// A process holding strata tier's port that answers every request with a copy
/// acknowledgement, as an attacker would while strata tier restarts; it records the paths.
struct Impostor {
    seen: Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Impostor {
    async fn start(addr: &str) -> Self {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let log = log.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = vec![0u8; 1 << 16];
                    loop {
                        let Some(split) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..split]).to_string();
                        let path = head.split(' ').nth(1).unwrap_or("").to_string();
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        while buf.len() < split + 4 + len {
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buf.drain(..split + 4 + len);
                        log.lock().unwrap().push(path);
                        let body = br#"{"custom_metadata":null}"#;
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                            body.len()
                        );
                        if s.write_all(answer.as_bytes()).await.is_err()
                            || s.write_all(body).await.is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        Self { seen, task }
    }

    /// Stops listening; the paths it was asked for.
    async fn stop(self) -> Vec<String> {
        self.task.abort();
        let _ = self.task.await;
        // Give the port back before strata tier binds it again.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let seen = self.seen.lock().unwrap().clone();
        seen
    }
}

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
    // A cache smaller than the data (reads evict while the bridge reads files), except
    // cache-2's, which holds everything so the damage pass below meets every file it damaged.
    let config = |cache: &str| {
        let size = if cache == "cache-2" { "64MiB" } else { "16MiB" };
        write_config(
            tmp.path(),
            &format!("{cache}.toml"),
            &prefix,
            &format!(
                "[tier]\nlisten = \"{addr}\"\nprefix = \"tiered\"\nchunk_size = \"256KiB\"\ncompression = \"zstd\"\ncache_dir = \"{}\"\ncache_size = \"{size}\"\nprefetch_chunks = 2\n{}",
                tmp.path().join(cache).display(),
                access_toml(&dev_secret(), &kafka_log_dir(), Some(&dev_socket_dir())),
            ),
        )
    };
    let ep = Endpoint::new(&addr, &dev_secret());
    let log = tmp.path().join("tier.log");
    let mut tier = TierProcess::start(&config("cache-1"), &ep, &log).await;

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

    // An impostor takes the port while strata tier is down and acknowledges everything: the
    // bridge must refuse it (it cannot prove the secret), so no copy is acknowledged and the
    // broker keeps every local segment that was not really tiered.
    let before: Vec<Vec<i64>> = (0..partitions).map(|p| local_segments(&topic, p)).collect();
    let impostor = Impostor::start(&addr).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let seen = impostor.stop().await;
    assert!(
        seen.iter().any(|p| p == "/v1/hello"),
        "the bridge never called the impostor (the test proves nothing): {seen:?}"
    );
    assert!(
        seen.iter().all(|p| p == "/v1/hello"),
        "the bridge went past the hello with an impostor: {seen:?}"
    );
    let tiered = manifests(store.as_ref(), &topic).await;
    for p in 0..partitions {
        let now = local_segments(&topic, p);
        for gone in before[p as usize].iter().filter(|b| !now.contains(b)) {
            assert!(
                tiered
                    .iter()
                    .any(|(_, m)| m.segment.partition == p && m.segment.start_offset == *gone),
                "{topic}-{p}: the broker deleted local segment {gone}, which is not in the bucket"
            );
        }
    }

    // Back with a cold cache: the broker retries and catches up.
    let mut tier = TierProcess::start(&config("cache-2"), &ep, &log).await;
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
        let r = fetch(&ep, &seg, 0, None).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(
            r.body == std::fs::read(&path).unwrap(),
            "segment {p}@{base}: served bytes differ from the broker's file"
        );
        compared += 1;
    }
    assert!(compared >= 3, "compared {compared} segments byte for byte");

    // The bridge read warm chunks from the cache files (it shares the host and the socket).
    assert!(
        tier.log_text().contains("fetch handed off"),
        "no fetch was handed off to the bridge"
    );
    // Every cache file damaged on disk: the bridge's checks refuse them and it reads those
    // bytes over the socket instead, telling strata which files to drop; still every record.
    let chunk_dir = tmp.path().join("cache-2").join("strata-chunks");
    let mut damaged = 0;
    for entry in std::fs::read_dir(&chunk_dir).unwrap() {
        use std::os::unix::fs::FileExt;
        let path = entry.unwrap().path();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        if f.write_all_at(b"\xff\x00\xff", 100).is_ok() {
            damaged += 1;
        }
    }
    assert!(
        damaged > 0,
        "no chunk file to damage in {}",
        chunk_dir.display()
    );
    let consumed = consume_all(&topic);
    assert_same_records(&topic, partitions, &records, &consumed);
    assert!(
        tier.log_text()
            .contains("the bridge found a chunk cache file damaged"),
        "the bridge reported no damaged file"
    );

    // Restart with an empty cache: still every record.
    tier.kill();
    let mut tier = TierProcess::start(&config("cache-3"), &ep, &log).await;
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

// ------------------------------------------------------------------------------------------
// The lockdown: only the broker's own files, only an authenticated caller, bounded requests.

const UPLOAD: &str = "application/vnd.strata.segment-upload";

/// A `/v1/copy-upload` body: length-prefixed JSON header, the files, the tag.
fn upload_body(key: &SessionKey, seq: u64, header: &[u8], files: &[&[u8]]) -> Vec<u8> {
    let mut body = (header.len() as u32).to_be_bytes().to_vec();
    body.extend_from_slice(header);
    let mut tag = key.upload_tag(seq);
    for f in files {
        tag.update(f);
        body.extend_from_slice(f);
    }
    body.extend_from_slice(&tag.finish());
    body
}

/// The header of an upload of `src`'s files (no transaction index).
fn upload_header(src: &SourceSegment, seg: &serde_json::Value) -> (Vec<u8>, Vec<Vec<u8>>) {
    use base64::Engine;
    let files: Vec<Vec<u8>> = [&src.index, &src.timeindex, &src.snapshot, &src.log]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let header = serde_json::json!({
        "segment": seg,
        "sizes": {"offset_index": files[0].len(), "time_index": files[1].len(),
                  "transaction_index": null, "producer_snapshot": files[2].len(), "log": files[3].len()},
        "leader_epoch_index": base64::engine::general_purpose::STANDARD.encode(&src.epochs),
    });
    (header.to_string().into_bytes(), files)
}

impl Conn {
    /// Sends an upload; `tamper` flips one file byte after the tag was computed.
    async fn upload(&mut self, header: &[u8], files: &[Vec<u8>], tamper: bool) -> Reply {
        let (seq, auth_header) = self.sign("POST", "/v1/copy-upload", header);
        let refs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
        let mut body = upload_body(self.key.as_ref().unwrap(), seq, header, &refs);
        if tamper {
            let at = body.len() - 40;
            body[at] ^= 1;
        }
        let r = self
            .exchange(
                "POST",
                "/v1/copy-upload",
                UPLOAD,
                &[("strata-auth", auth_header)],
                &body,
                None,
            )
            .await
            .unwrap();
        self.check_signature(&r, seq, "/v1/copy-upload", false);
        r
    }
}

/// Incomplete multipart uploads under the bucket prefix (S3's own listing, not strata's).
async fn incomplete_uploads(prefix: &str) -> Vec<String> {
    let store = s3_store(prefix).await;
    store
        .incomplete("")
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.key)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_lockdown() {
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let src = source_segment(tmp.path()).await;
    let secret_path = new_secret(tmp.path());
    let secret_text = std::fs::read_to_string(&secret_path)
        .unwrap()
        .trim()
        .to_string();
    let prefix = unique("tier-lock");
    let (addr, metrics_addr) = (free_addr(), free_addr());
    let run = tmp.path().join("run");
    let config = write_config(
        tmp.path(),
        "tier.toml",
        &prefix,
        &format!(
            "[tier]\nlisten = \"{addr}\"\nprefix = \"tiered\"\nchunk_size = \"1MiB\"\nmax_requests = 1\n{}[telemetry]\nmetrics_listen = \"{metrics_addr}\"\n",
            access_toml(&secret_path, &src.logs, Some(&run))
        ),
    );
    let ep = Endpoint::new(&addr, &secret_path);
    let mut tier = TierProcess::start(&config, &ep, &tmp.path().join("tier.log")).await;
    let store = s3_store(&prefix).await;
    let seg = segment_json(&src, &random_kafka_id());
    let copy = copy_json(&src, &seg, false).to_string();

    // --- Callers that do not authenticate.
    let refused = |r: &Reply, status: u16, what: &str| {
        assert_eq!(r.status, status, "{what}: {}", r.text());
        assert_eq!(
            r.headers.get("connection").map(String::as_str),
            Some("close"),
            "{what}: the connection is closed"
        );
        assert!(!r.headers.contains_key("strata-auth"), "{what}: unsigned");
    };
    let mut c = Conn::tcp(&addr).await.unwrap();
    let r = c
        .exchange("POST", "/v1/copy", JSON, &[], copy.as_bytes(), None)
        .await
        .unwrap();
    refused(&r, 401, "a copy without a hello");
    assert!(r.text().contains("strata-auth"), "{}", r.text());
    let mut c = Conn::tcp(&addr).await.unwrap();
    let r = c
        .exchange("GET", "/v1/health", "", &[], b"", None)
        .await
        .unwrap();
    refused(&r, 401, "an unauthenticated health check");
    // What a web page in a local browser can send without a preflight.
    let mut c = Conn::open(&ep).await.unwrap();
    let (_, auth_header) = c.sign("POST", "/v1/copy", copy.as_bytes());
    let r = c
        .exchange(
            "POST",
            "/v1/copy",
            "text/plain",
            &[("strata-auth", auth_header)],
            copy.as_bytes(),
            None,
        )
        .await
        .unwrap();
    refused(&r, 415, "a text/plain copy");
    // Another secret: strata's proof does not check, and its requests are refused.
    let other = SharedSecret::from_text(&[b'x'; 40]).unwrap();
    let mut c = Conn::tcp(&addr).await.unwrap();
    let (_, proof_ok) = c.hello_unchecked(&other).await.unwrap();
    assert!(
        !proof_ok,
        "strata's proof must not check against another secret"
    );
    let (_, auth_header) = c.sign("POST", "/v1/copy", copy.as_bytes());
    let r = c
        .exchange(
            "POST",
            "/v1/copy",
            JSON,
            &[("strata-auth", auth_header)],
            copy.as_bytes(),
            None,
        )
        .await
        .unwrap();
    refused(&r, 401, "a request signed with another secret");
    assert!(r.text().contains("tier.secret_file"), "{}", r.text());
    // A replayed request (same number) and a second hello on one connection.
    let mut c = Conn::open(&ep).await.unwrap();
    let health = |seq: u64, key: &SessionKey| {
        format!(
            "{seq} {}",
            key.request_mac(seq, "GET", "/v1/health", &auth::sha256_hex(b""))
        )
    };
    let h1 = health(1, c.key.as_ref().unwrap());
    let r = c
        .exchange(
            "GET",
            "/v1/health",
            "",
            &[("strata-auth", h1.clone())],
            b"",
            None,
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let r = c
        .exchange("GET", "/v1/health", "", &[("strata-auth", h1)], b"", None)
        .await
        .unwrap();
    refused(&r, 401, "a replayed request");
    let mut c = Conn::open(&ep).await.unwrap();
    let e = c
        .hello(&ep.secret)
        .await
        .err()
        .expect("a second hello is refused");
    assert!(e.to_string().contains("401"), "{e}");
    // Bodies: too large, and one that never finishes.
    let mut c = Conn::open(&ep).await.unwrap();
    let big = vec![b' '; 2 << 20];
    let (_, auth_header) = c.sign("POST", "/v1/fetch", &big);
    let r = c
        .exchange(
            "POST",
            "/v1/fetch",
            JSON,
            &[("strata-auth", auth_header)],
            &big,
            None,
        )
        .await
        .unwrap();
    refused(&r, 413, "a 2 MiB JSON body");
    // A body that stops arriving: on a connection whose caller authenticated, refused after
    // the body's idle limit; before that, the connection is closed at the deadline of
    // unauthenticated connections, unanswered.
    let slow_body = |seq: u64| {
        format!("POST /v1/fetch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nstrata-auth: {seq} 00\r\n\r\n{{\"segm")
    };
    let mut authed = Conn::open(&ep).await.unwrap();
    assert_eq!(authed.call("GET", "/v1/health", b"").await.status, 200);
    let mut unauthed = Conn::open(&ep).await.unwrap();
    let started = Instant::now();
    authed.io.write_all(slow_body(2).as_bytes()).await.unwrap();
    unauthed
        .io
        .write_all(slow_body(1).as_bytes())
        .await
        .unwrap();
    let r = unauthed.read_reply("POST", "/v1/fetch", None).await;
    assert!(
        r.is_err(),
        "an unauthenticated connection is closed without an answer: {r:?}"
    );
    let r = authed.read_reply("POST", "/v1/fetch", None).await.unwrap();
    refused(&r, 408, "a body that stops arriving");
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "timed out after the body's idle limit"
    );

    // --- Copies of files strata tier does not own.
    let copy_with = |field: &str, path: &Path, seg: &serde_json::Value| {
        let mut c = copy_json(&src, seg, false);
        c["files"][field] = serde_json::json!(path);
        c
    };
    for (field, path, want) in [
        ("log", PathBuf::from("/proc/self/environ"), "files.log"),
        (
            "offset_index",
            PathBuf::from("/dev/zero"),
            "files.offset_index",
        ),
        ("log", tmp.path().join("tier.secret"), "files.log"),
        (
            "log",
            src.logs
                .join("tier-api-0")
                .join("..")
                .join("tier-api-0")
                .join("00000000000000000000.log"),
            "files.log",
        ),
    ] {
        let r = post(&ep, "/v1/copy", &copy_with(field, &path, &seg)).await;
        assert_eq!(r.status, 400, "{}: {}", path.display(), r.text());
        assert!(r.text().contains(want), "{}", r.text());
    }
    // A link to the secret planted under a segment's own name, in a partition directory.
    let part1 = src.logs.join("tier-api-1");
    std::fs::create_dir_all(&part1).unwrap();
    let link = part1.join("00000000000000000000.log");
    std::os::unix::fs::symlink(&secret_path, &link).unwrap();
    let mut seg1 = seg.clone();
    seg1["partition"] = serde_json::json!(1);
    let r = post(&ep, "/v1/copy", &copy_with("log", &link, &seg1)).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("symbolic link"), "{}", r.text());
    // Another partition's file, and more bytes than the broker declared.
    let r = post(&ep, "/v1/copy", &copy_with("log", &src.log, &seg1)).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("tier-api-1"), "{}", r.text());
    let mut small = seg.clone();
    small["segment_size_bytes"] = serde_json::json!(1000);
    let r = post(&ep, "/v1/copy", &copy_json(&src, &small, false)).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("segment_size_bytes 1000"), "{}", r.text());
    assert_eq!(
        fetch(&ep, &seg, 0, None).await.status,
        404,
        "nothing was stored"
    );
    assert!(store.list("tiered/").await.unwrap().is_empty());

    // --- Copy by upload gives the same segment as copy by path.
    let r = post(&ep, "/v1/copy", &copy_json(&src, &seg, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let up_seg = segment_json(&src, &random_kafka_id());
    let (header, files) = upload_header(&src, &up_seg);
    let r = Conn::open(&ep)
        .await
        .unwrap()
        .upload(&header, &files, true)
        .await;
    assert_eq!(r.status, 400, "a tampered upload: {}", r.text());
    assert!(r.text().contains("tag"), "{}", r.text());
    assert_eq!(
        fetch(&ep, &up_seg, 0, None).await.status,
        404,
        "a tampered upload stores nothing"
    );
    let r = Conn::open(&ep)
        .await
        .unwrap()
        .upload(&header, &files, false)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        fetch(&ep, &up_seg, 0, None).await.body,
        fetch(&ep, &seg, 0, None).await.body
    );
    for index in ["OFFSET", "TIMESTAMP", "PRODUCER_SNAPSHOT", "LEADER_EPOCH"] {
        let (a, b) = (
            fetch_index(&ep, &up_seg, index).await,
            fetch_index(&ep, &seg, index).await,
        );
        assert_eq!((a.status, &a.body), (200, &b.body), "{index}");
    }

    // --- An upload cut off mid-way aborts its multipart upload.
    const BIG: usize = 32 << 20;
    let big_seg = {
        let mut s = segment_json(&src, &random_kafka_id());
        s["start_offset"] = serde_json::json!(20000);
        s["end_offset"] = serde_json::json!(20999);
        s["segment_size_bytes"] = serde_json::json!(BIG);
        s
    };
    let big_log = noise(3, BIG);
    let header = serde_json::json!({
        "segment": big_seg,
        "sizes": {"offset_index": 0, "time_index": 0, "transaction_index": null, "producer_snapshot": 0, "log": BIG},
        "leader_epoch_index": "",
    })
    .to_string();
    let mut c = Conn::open(&ep).await.unwrap();
    let (seq, auth_header) = c.sign("POST", "/v1/copy-upload", header.as_bytes());
    let body = upload_body(c.key.as_ref().unwrap(), seq, header.as_bytes(), &[&big_log]);
    let head = format!(
        "POST /v1/copy-upload HTTP/1.1\r\nHost: x\r\nContent-Type: {UPLOAD}\r\nContent-Length: {}\r\nstrata-auth: {auth_header}\r\n\r\n",
        body.len()
    );
    c.io.write_all(head.as_bytes()).await.unwrap();
    c.io.write_all(&body[..12 << 20]).await.unwrap();
    eventually(30, "the upload's multipart upload started", || async {
        !incomplete_uploads(&prefix).await.is_empty()
    })
    .await;
    drop(c);
    eventually(
        15,
        "the cut-off upload's multipart upload aborted",
        || async { incomplete_uploads(&prefix).await.is_empty() },
    )
    .await;
    assert_eq!(fetch(&ep, &big_seg, 0, None).await.status, 404);

    // --- At the concurrency cap (max_requests = 1) a request is answered "busy".
    let r = Conn::open(&ep)
        .await
        .unwrap()
        .upload(&header.clone().into_bytes(), &[big_log], false)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let mut holder = Conn::open(&ep).await.unwrap();
    let held = serde_json::json!({"segment": big_seg, "start_position": 0, "end_position": null})
        .to_string();
    holder.send_only("/v1/fetch", held.as_bytes()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = fetch(&ep, &seg, 0, Some(10)).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("tier.max_requests"), "{}", r.text());
    drop(holder);
    eventually(
        20,
        "the slot is free again once the reader hangs up",
        || async { fetch(&ep, &seg, 0, Some(10)).await.status == 200 },
    )
    .await;

    // --- The Unix socket: named (and vouched for) in the hello, private, same protocol.
    let mut c = Conn::open(&ep).await.unwrap();
    let hello_socket = {
        let mut c2 = Conn::tcp(&addr).await.unwrap();
        c2.hello(&ep.secret).await.unwrap().socket
    };
    let sock = run.join(strata::tier::SOCKET_NAME);
    assert_eq!(hello_socket, Some(sock.display().to_string()));
    assert_eq!(c.call("GET", "/v1/health", b"").await.status, 200);
    {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&run).unwrap().mode() & 0o777, 0o700);
        assert_eq!(
            std::fs::symlink_metadata(&sock).unwrap().mode() & 0o777,
            0o600
        );
    }
    let mut u = Conn::unix(&sock).await.unwrap();
    u.hello(&ep.secret).await.unwrap();
    let r = u
        .call(
            "POST",
            "/v1/fetch",
            serde_json::json!({"segment": seg, "start_position": 0, "end_position": 99})
                .to_string()
                .as_bytes(),
        )
        .await;
    assert_eq!(r.body, std::fs::read(&src.log).unwrap()[..100]);

    // --- Nothing secret or local leaks into metrics or logs.
    let m = plain_get(&metrics_addr, "/metrics").await.text();
    assert!(m.contains("strata_tier_rejected_total"), "{m}");
    assert!(
        metric(
            &metrics_addr,
            "strata_tier_rejected_total{op=\"fetch\",reason=\"busy\"}"
        )
        .await
            >= 1.0,
        "{m}"
    );
    let tmp_text = tmp.path().display().to_string();
    for leak in [secret_text.as_str(), tmp_text.as_str(), "environ"] {
        assert!(!m.contains(leak), "/metrics shows {leak:?}");
    }
    for seg in [&seg, &up_seg, &big_seg] {
        let r = post(&ep, "/v1/delete", &serde_json::json!({"segment": seg})).await;
        assert_eq!(r.status, 204, "{}", r.text());
    }
    assert!(store.list("tiered/").await.unwrap().is_empty());
    let log = tier.log_text();
    assert!(!log.contains(&secret_text), "the secret appears in the log");
    tier.kill();
}

/// How a slow caller without the secret holds a connection.
#[derive(Debug, Clone, Copy)]
enum Slow {
    /// Connects and sends nothing.
    Silent,
    /// Sends a request head a byte at a time.
    Head,
    /// Sends a hello head, then its body a byte at a time.
    HelloBody,
    /// Passes the hello (which needs no secret), then sends a request's body a byte at a time:
    /// strata reads it whole before it can check the request's MAC.
    RequestBody,
}

/// Holds one connection the way `kind` says, a byte every half second, until strata closes
/// it. `started` counts connections made; `open` those not yet closed by strata.
async fn dribble(io: Box<dyn Io>, kind: Slow, started: Arc<AtomicUsize>, open: Arc<AtomicUsize>) {
    open.fetch_add(1, Ordering::SeqCst);
    started.fetch_add(1, Ordering::SeqCst);
    let mut c = Conn::over(io, "x");
    let head: &[u8] = match kind {
        Slow::Silent => b"",
        Slow::Head => b"POST /v1/hello HTTP/1.1\r\nHost: x\r\nX-Slow: ",
        Slow::HelloBody => b"POST /v1/hello HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
        Slow::RequestBody => b"POST /v1/copy HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\nstrata-auth: 1 00\r\n\r\n{",
    };
    let sent = match kind {
        Slow::RequestBody => {
            let other = SharedSecret::from_text(&[b'z'; 40]).unwrap();
            c.hello_unchecked(&other).await.is_ok() && c.io.write_all(head).await.is_ok()
        }
        _ => c.io.write_all(head).await.is_ok(),
    };
    if sent {
        let mut buf = [0u8; 4096];
        loop {
            tokio::select! {
                r = c.io.read(&mut buf) => match r {
                    Ok(0) | Err(_) => break,
                    // An answer: the close follows.
                    Ok(_) => continue,
                },
                _ = tokio::time::sleep(Duration::from_millis(500)), if !matches!(kind, Slow::Silent) => {
                    let byte: &[u8] = if matches!(kind, Slow::Head) { b"a" } else { b" " };
                    if c.io.write_all(byte).await.is_err() {
                        break;
                    }
                }
            }
        }
    }
    open.fetch_sub(1, Ordering::SeqCst);
}

/// Callers without the secret cannot take the API down by being slow: hundreds of connections
/// that dribble a request head or body, over TCP and over the Unix socket, and a copy and
/// fetches on new connections still succeed while they are open; strata closes every one of
/// them (the oldest when too many wait, the rest at the pre-authentication deadline), counts
/// them, and logs them in a few lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_slow_unauthenticated_callers() {
    init_logs();
    const PER_LISTENER: usize = 300;
    let tmp = tempfile::tempdir().unwrap();
    let src = source_segment(tmp.path()).await;
    let secret_path = new_secret(tmp.path());
    let prefix = unique("tier-slow");
    let (addr, metrics_addr) = (free_addr(), free_addr());
    let run = tmp.path().join("run");
    let config = write_config(
        tmp.path(),
        "tier.toml",
        &prefix,
        &format!(
            "[tier]\nlisten = \"{addr}\"\nprefix = \"tiered\"\nchunk_size = \"256KiB\"\n{}[telemetry]\nmetrics_listen = \"{metrics_addr}\"\n",
            access_toml(&secret_path, &src.logs, Some(&run))
        ),
    );
    let ep = Endpoint::new(&addr, &secret_path);
    let mut tier = TierProcess::start(&config, &ep, &tmp.path().join("tier.log")).await;
    let sock = run.join(strata::tier::SOCKET_NAME);

    let (started, open) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let kinds = [Slow::Silent, Slow::Head, Slow::HelloBody, Slow::RequestBody];
    let mut slow = Vec::new();
    for i in 0..2 * PER_LISTENER {
        let io: Box<dyn Io> = if i % 2 == 0 {
            Box::new(tokio::net::TcpStream::connect(&addr).await.unwrap())
        } else {
            Box::new(tokio::net::UnixStream::connect(&sock).await.unwrap())
        };
        let kind = kinds[(i / 2) % kinds.len()];
        slow.push(tokio::spawn(dribble(
            io,
            kind,
            started.clone(),
            open.clone(),
        )));
    }
    eventually(30, "every slow connection made", || async {
        started.load(Ordering::SeqCst) == 2 * PER_LISTENER
    })
    .await;

    // New connections of a caller holding the secret get through while the slow ones wait.
    let bound = Duration::from_secs(15);
    let seg = segment_json(&src, &random_kafka_id());
    let r = tokio::time::timeout(bound, post(&ep, "/v1/copy", &copy_json(&src, &seg, false)))
        .await
        .expect("a copy on a new TCP connection got no answer while slow callers held connections");
    assert_eq!(r.status, 200, "{}", r.text());
    let original = std::fs::read(&src.log).unwrap();
    let r = tokio::time::timeout(bound, fetch(&ep, &seg, 0, Some(99_999)))
        .await
        .expect(
            "a fetch on a new TCP connection got no answer while slow callers held connections",
        );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.body == original[..100_000], "the TCP fetch's bytes");
    let over_unix = async {
        let mut u = Conn::unix(&sock).await.unwrap();
        u.hello(&ep.secret).await.unwrap();
        let body =
            serde_json::json!({"segment": seg, "start_position": 1000, "end_position": 200_999});
        u.call("POST", "/v1/fetch", body.to_string().as_bytes())
            .await
    };
    let r = tokio::time::timeout(bound, over_unix).await.expect(
        "a fetch on a new Unix socket connection got no answer while slow callers held connections",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.body == original[1000..201_000],
        "the Unix socket fetch's bytes"
    );
    // Not by waiting for them to go: some were still connected when the fetches were done.
    let still_open = open.load(Ordering::SeqCst);
    assert!(
        still_open > 0,
        "every slow connection was closed before the copy and fetches were done"
    );

    // strata closes every one of them, whatever it was waiting for.
    eventually(30, "strata closed every slow connection", || async {
        open.load(Ordering::SeqCst) == 0
    })
    .await;
    for s in slow {
        s.await.unwrap();
    }
    let mut closed = 0.0;
    for listener in ["tier", "tier-unix"] {
        for reason in ["unauthenticated_cap", "unauthenticated_deadline"] {
            let name = format!(
                "strata_http_rejected_total{{listener=\"{listener}\",reason=\"{reason}\"}}"
            );
            closed += metric(&metrics_addr, &name).await;
        }
    }
    assert!(
        closed >= (2 * PER_LISTENER) as f64,
        "{closed} unauthenticated connections counted as closed"
    );
    // Logged in a few lines with counts, not a line each.
    let log = tier.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("unauthenticated"))
        .collect();
    eprintln!("{}", lines.join("\n"));
    let lines = lines.len();
    assert!(
        (1..=8).contains(&lines),
        "{lines} log lines about unauthenticated connections:\n{log}"
    );
    // The service is still there for the bridge.
    let r = post(&ep, "/v1/delete", &serde_json::json!({"segment": seg})).await;
    assert_eq!(r.status, 204, "{}", r.text());
    tier.kill();
}

/// strata tier refuses to start rather than serve an API others could reach or imitate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tier_refuses_unsafe_setups() {
    use std::os::unix::fs::PermissionsExt;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let secret = new_secret(tmp.path());
    let logs = tmp.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let prefix = unique("tier-refuse");
    let run = tmp.path().join("run");
    let refuses = |name: &str, tier: String, want: &'static str| {
        let config = write_config(
            tmp.path(),
            &format!("{name}.toml"),
            &prefix,
            &format!("[tier]\nlisten = \"{}\"\n{tier}", free_addr()),
        );
        let log = tmp.path().join(format!("{name}.log"));
        let mut p = TierProcess::spawn(&config, &log);
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = p.child.as_mut().unwrap().try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: strata tier started:\n{}",
                p.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let text = p.log_text();
        assert!(!status.success(), "{name}: exit {status}");
        assert!(text.contains(want), "{name}: wanted {want:?} in:\n{text}");
    };
    refuses(
        "no-secret",
        format!("log_dirs = [\"{}\"]\n", logs.display()),
        "tier.secret_file is not set",
    );
    let open_secret = tmp.path().join("open.secret");
    std::fs::copy(&secret, &open_secret).unwrap();
    std::fs::set_permissions(&open_secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    refuses(
        "open-secret",
        access_toml(&open_secret, &logs, None),
        "mode 0644",
    );
    refuses(
        "no-log-dir",
        access_toml(&secret, &tmp.path().join("missing"), None),
        "tier.log_dirs",
    );
    std::fs::create_dir_all(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
    refuses(
        "open-socket-dir",
        access_toml(&secret, &logs, Some(&run)),
        "mode 0777",
    );
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Someone else answers at the socket path (another strata tier, or an impostor).
    let _taken =
        std::os::unix::net::UnixListener::bind(run.join(strata::tier::SOCKET_NAME)).unwrap();
    refuses(
        "socket-taken",
        access_toml(&secret, &logs, Some(&run)),
        "another process listens",
    );
    let tls_half = format!(
        "{}tls_cert_file = \"{}\"\n",
        access_toml(&secret, &logs, None),
        secret.display()
    );
    refuses("tls-half", tls_half, "tier.tls_key_file");
}

/// The TCP listener with TLS, for brokers on other hosts: the bridge's handshake runs inside
/// it, and a plain connection gets no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_over_tls() {
    use rustls_pki_types::pem::PemObject;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let (cert, key) = (tmp.path().join("tier.pem"), tmp.path().join("tier.key"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=strata-tier",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let secret = new_secret(tmp.path());
    let logs = tmp.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let addr = free_addr();
    let config = write_config(
        tmp.path(),
        "tier.toml",
        &unique("tier-tls"),
        &format!(
            "[tier]\nlisten = \"{addr}\"\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n{}",
            cert.display(),
            key.display(),
            access_toml(&secret, &logs, None)
        ),
    );
    let mut tier = TierProcess::spawn(&config, &tmp.path().join("tier.log"));
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_file_iter(&cert).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let client = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(client));
    let ep = Endpoint::new(&addr, &secret);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut c = loop {
        if let Ok(tcp) = tokio::net::TcpStream::connect(&addr).await {
            let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let tls = connector
                .connect(name, tcp)
                .await
                .expect("TLS handshake with strata tier");
            break Conn::over(Box::new(tls), &addr);
        }
        assert!(
            Instant::now() < deadline,
            "strata tier did not listen:\n{}",
            tier.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    c.hello(&ep.secret).await.unwrap();
    let r = c.call("GET", "/v1/health", b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Plain HTTP to the TLS port is not answered as HTTP.
    let mut plain = Conn::tcp(&addr).await.unwrap();
    assert!(plain.hello(&ep.secret).await.is_err());
    tier.kill();
}
