//! Shared harness of the integration tests: endpoints of the dev environment's real Kafka
//! broker and LocalStack (exported by `./dev test`), unique names so tests run in parallel,
//! and helpers to create topics, produce records and read objects back.
#![allow(dead_code)]

pub mod cdc;
pub mod clusters;
pub mod iceberg;
pub mod oidc;
pub mod store_suite;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header as KHeader, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata::config::{Config, KafkaConfig, StoreConfig};
use strata::format::{Header, Record, TimestampType};
use strata::store::ObjectStore;

fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: integration tests need the dev environment; run them with `./dev test` (or `eval \"$(./dev env)\"` after `./dev up`)")
    })
}

pub fn bootstrap() -> String {
    required_env("STRATA_TEST_BOOTSTRAP")
}

pub fn s3_endpoint() -> String {
    required_env("STRATA_TEST_S3_ENDPOINT")
}

pub const TEST_BUCKET: &str = "strata-it";

/// A name no other test (or earlier run) uses: `prefix-<pid>-<n>-<time>`.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        % 100_000_000;
    format!(
        "{prefix}-{}-{}-{t}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The `[kafka]` and `[store]` TOML of the dev environment, S3 under `prefix`.
pub fn s3_toml(prefix: &str) -> String {
    format!(
        "[kafka]\nbootstrap_servers = \"{}\"\n[store]\nurl = \"s3://{TEST_BUCKET}/{prefix}\"\nendpoint = \"{}\"\naccess_key = \"test\"\nsecret_key = \"test\"\ncreate_bucket = true\npart_size = \"5MiB\"\n",
        bootstrap(),
        s3_endpoint()
    )
}

pub fn file_toml(root: &std::path::Path) -> String {
    format!(
        "[kafka]\nbootstrap_servers = \"{}\"\n[store]\nurl = \"file://{}\"\n",
        bootstrap(),
        root.display()
    )
}

pub fn config(toml: &str) -> Config {
    Config::from_toml(toml, "test config", |k| std::env::var(k).ok())
        .unwrap_or_else(|e| panic!("test config invalid: {e}\n{toml}"))
}

pub fn kafka_config() -> KafkaConfig {
    config(&format!(
        "[kafka]\nbootstrap_servers = \"{}\"\n",
        bootstrap()
    ))
    .kafka
}

pub fn s3_store_config(prefix: &str) -> StoreConfig {
    config(&s3_toml(prefix)).store
}

pub async fn s3_store(prefix: &str) -> Arc<dyn ObjectStore> {
    let s = strata::store::open(&s3_store_config(prefix))
        .await
        .expect("open LocalStack store");
    s.check().await.expect("LocalStack bucket usable");
    s
}

/// An SDK client of the test S3 (LocalStack) as account `access_key` (LocalStack takes a
/// 12-digit key as the account id, any other as 000000000000), to see what strata's store
/// trait does not show: encryption, storage class, tags, bucket owners.
pub fn sdk_client_as(access_key: &str) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(s3_endpoint())
        .force_path_style(true)
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            access_key, "test", None, None, "tests",
        ))
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// [`sdk_client_as`] the account strata's test config uses.
pub fn sdk_client() -> aws_sdk_s3::Client {
    sdk_client_as("test")
}

/// How S3 stored an object: encryption, KMS key, storage class and tags (sorted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAs {
    pub sse: Option<String>,
    pub kms_key: Option<String>,
    pub storage_class: Option<String>,
    pub tags: Vec<(String, String)>,
}

/// HeadObject and GetObjectTagging of `bucket`/`key` (the full key).
pub async fn stored_as(bucket: &str, key: &str) -> StoredAs {
    let c = sdk_client();
    let head = c
        .head_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("HeadObject {bucket}/{key}: {e:?}"));
    let tagging = c
        .get_object_tagging()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GetObjectTagging {bucket}/{key}: {e:?}"));
    let mut tags: Vec<(String, String)> = tagging
        .tag_set
        .into_iter()
        .map(|t| (t.key, t.value))
        .collect();
    tags.sort();
    StoredAs {
        sse: head.server_side_encryption.map(|s| s.as_str().to_string()),
        kms_key: head.ssekms_key_id,
        storage_class: head.storage_class.map(|s| s.as_str().to_string()),
        tags,
    }
}

/// A new KMS key of the test LocalStack (account 000000000000, us-east-1), its ARN: S3 checks
/// SSE-KMS keys against LocalStack's KMS. One JSON request (`TrentService.CreateKey`): the
/// tests have no KMS SDK, and LocalStack routes by the target header without checking the
/// signature.
pub async fn localstack_kms_key() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let endpoint = s3_endpoint();
    let host = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let body = r#"{"Description":"strata integration tests"}"#;
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-amz-json-1.1\r\nX-Amz-Target: TrentService.CreateKey\r\nAuthorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/kms/aws4_request, SignedHeaders=host, Signature=0\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut conn = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect(&host),
    )
    .await
    .expect("LocalStack answers in time")
    .expect("connect to LocalStack");
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut answer))
        .await
        .expect("KMS CreateKey answered in time")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    let (head, json) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "KMS CreateKey failed (is kms in LocalStack's SERVICES?): {answer}"
    );
    let v: serde_json::Value = serde_json::from_str(json).expect("CreateKey's JSON");
    v["KeyMetadata"]["Arn"]
        .as_str()
        .expect("the key's ARN")
        .to_string()
}

pub async fn create_topic(name: &str, partitions: i32) {
    create_topic_with(name, partitions, &[]).await
}

pub async fn create_topic_with(name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin = strata::kafka::Admin::new(&kafka_config()).expect("admin client");
    admin
        .create_topic(name, partitions, 1, configs)
        .await
        .expect("create topic");
    // Wait until metadata shows every partition, so producers and consumers see them.
    let deadline = Instant::now() + Duration::from_secs(30);
    while admin.partition_count(name).ok().flatten() != Some(partitions) {
        assert!(Instant::now() < deadline, "topic {name} did not appear");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .set("compression.type", "lz4")
        .create()
        .expect("producer")
}

/// Deterministic records for a test: keyed, with repeated and null headers, explicit
/// timestamps, a tombstone every 17th record and binary (non UTF-8) bytes every 5th.
pub fn sample_records(topic: &str, n: usize, partitions: i32, base_ts: i64) -> Vec<Record> {
    (0..n)
        .map(|i| {
            let value = if i % 17 == 16 {
                None
            } else if i % 5 == 4 {
                Some(vec![0xff, 0xfe, (i % 251) as u8, 0, b'\n', b',', b'|'])
            } else {
                Some(format!(r#"[{{"GLOBAL_ID":"g-{i}","TYPE":"I","TABLE":"orders","NEW_VALUES":{{"id":{i},"amount":{}}}}}]"#, i * 7 % 1000).into_bytes())
            };
            let key = if i % 11 == 10 { None } else { Some(format!("order-{i}").into_bytes()) };
            Record {
                topic: topic.to_string(),
                partition: Some((i as i32) % partitions),
                offset: None,
                timestamp: Some(base_ts + i as i64 * 1000),
                timestamp_type: TimestampType::CreateTime,
                key,
                value,
                headers: vec![
                    Header { key: "source".into(), value: Some(b"cdc".to_vec()) },
                    Header { key: "seq".into(), value: Some(i.to_string().into_bytes()) },
                    Header { key: "seq".into(), value: None },
                ],
            }
        })
        .collect()
}

/// Produces records to their `partition` with their key, value, headers and timestamp.
pub async fn produce(records: &[Record]) {
    produce_with(&producer(), records).await;
}

/// [`produce`] through a given producer (another cluster's).
pub async fn produce_with(p: &FutureProducer, records: &[Record]) {
    let mut pending = Vec::new();
    for r in records {
        let mut headers = OwnedHeaders::new();
        for h in &r.headers {
            headers = headers.insert(KHeader {
                key: &h.key,
                value: h.value.as_deref(),
            });
        }
        let mut fr: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&r.topic).headers(headers);
        if let Some(k) = &r.key {
            fr = fr.key(k.as_slice());
        }
        if let Some(v) = &r.value {
            fr = fr.payload(v.as_slice());
        }
        if let Some(p) = r.partition {
            fr = fr.partition(p);
        }
        if let Some(t) = r.timestamp {
            fr = fr.timestamp(t);
        }
        pending.push(p.send_result(fr).map_err(|(e, _)| e).expect("enqueue"));
        if pending.len() >= 10_000 {
            for d in pending.drain(..) {
                d.await.expect("delivery future").expect("delivered");
            }
        }
    }
    for d in pending {
        d.await.expect("delivery future").expect("delivered");
    }
}

/// Reads every record of a topic from the beginning up to the high watermarks.
pub fn consume_all(topic: &str) -> Vec<Record> {
    let admin = strata::kafka::Admin::new(&kafka_config()).expect("admin");
    let parts = admin
        .partition_count(topic)
        .expect("metadata")
        .expect("topic exists");
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    let mut remaining = 0i64;
    let mut highs = Vec::new();
    for p in 0..parts {
        let (lo, hi) = admin.watermarks(topic, p).expect("watermarks");
        highs.push(hi);
        remaining += hi - lo;
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("tpl");
    }
    c.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done = vec![false; parts as usize];
    for p in 0..parts {
        let (lo, hi) = admin.watermarks(topic, p).expect("watermarks");
        done[p as usize] = lo >= hi;
    }
    while done.iter().any(|d| !d) {
        assert!(
            Instant::now() < deadline,
            "consume_all({topic}) timed out with {remaining} records left"
        );
        let Some(m) = c.poll(Duration::from_millis(500)) else {
            continue;
        };
        let m = m.expect("consume");
        out.push(record_of(&m));
        if m.offset() + 1 >= highs[m.partition() as usize] {
            done[m.partition() as usize] = true;
        }
        remaining -= 1;
    }
    out
}

/// One archive object read back: its key, parsed name and records.
pub struct ArchivedObject {
    pub key: String,
    pub name: strata::layout::ObjectName,
    /// Size in the store.
    pub size: u64,
    pub records: Vec<Record>,
}

/// A consumed message as a [`Record`], with everything the formats keep.
pub fn record_of<M: Message>(m: &M) -> Record {
    Record {
        topic: m.topic().to_string(),
        partition: Some(m.partition()),
        offset: Some(m.offset()),
        timestamp: m.timestamp().to_millis(),
        timestamp_type: match m.timestamp() {
            rdkafka::Timestamp::CreateTime(_) => TimestampType::CreateTime,
            rdkafka::Timestamp::LogAppendTime(_) => TimestampType::LogAppendTime,
            rdkafka::Timestamp::NotAvailable => TimestampType::NotAvailable,
        },
        key: m.key().map(<[u8]>::to_vec),
        value: m.payload().map(<[u8]>::to_vec),
        headers: m
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| Header {
                        key: h.key.to_string(),
                        value: h.value.map(<[u8]>::to_vec),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Lists and decodes every archive object under `prefix` (keys relative to the store root).
/// The archive objects under `prefix`: strata's own records under `.strata/` (seals, task
/// parameters) left out.
pub async fn archive_listing(
    store: &dyn ObjectStore,
    prefix: &str,
) -> Vec<strata::store::ObjectMeta> {
    let mut all = store.list(prefix).await.expect("list archive");
    all.retain(|m| !m.key.contains(".strata/"));
    all
}

pub async fn read_archive(
    store: &dyn ObjectStore,
    prefix: &str,
    text: strata::format::TextOptions,
) -> Vec<ArchivedObject> {
    let mut out = Vec::new();
    for meta in store.list(prefix).await.expect("list archive") {
        // strata's own bookkeeping (seals of objects not yet committed) is not archive data.
        if meta.key.contains(".strata/") {
            continue;
        }
        let file = meta.key.rsplit('/').next().unwrap_or_default();
        let name = strata::layout::ObjectName::parse(file)
            .unwrap_or_else(|| panic!("unexpected object {}", meta.key));
        let spec = strata::format::FormatSpec::from_extension(&name.extension, text.clone())
            .expect("known extension");
        let data = store.get(&meta.key).await.expect("get object");
        assert_eq!(data.len() as u64, meta.size, "listed size of {}", meta.key);
        let records = strata::format::decode(&spec, &name.topic, data, u64::MAX)
            .unwrap_or_else(|e| panic!("decode {}: {e}", meta.key));
        out.push(ArchivedObject {
            key: meta.key,
            name,
            size: meta.size,
            records,
        });
    }
    out
}

/// Runs `strata dump --once` in-process with the given config text.
pub async fn dump_once(toml: &str) -> Vec<strata::dump::Summary> {
    init_logs();
    let cfg = config(toml);
    strata::dump::run(
        &cfg,
        strata::dump::DumpOptions {
            once: true,
            ..Default::default()
        },
        Arc::new(std::sync::atomic::AtomicBool::new(false)),
    )
    .await
    .expect("dump --once")
}

/// Polls `check` until it holds or `secs` pass.
pub async fn eventually<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if check().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// s3d (devenv/s3d, built by ./dev: an S3 server that checks signatures) serving the buckets
/// under `data` on `port` for one key pair; stopped when dropped.
pub struct S3d(pub std::process::Child);

impl S3d {
    pub async fn start(data: &std::path::Path, port: u16, access_key: &str, secret: &str) -> Self {
        let bin = std::env::var("STRATA_TEST_S3D").expect("STRATA_TEST_S3D (./dev test)");
        let child = std::process::Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", access_key, "--secret-key", secret])
            .arg(data)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        eventually(30, "s3d listening", || async {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await;
        S3d(child)
    }
}

impl Drop for S3d {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Path of the strata binary built for the tests.
pub fn strata_bin() -> &'static str {
    env!("CARGO_BIN_EXE_strata")
}

/// Test logs go through the test harness's capture (shown for failing tests).
pub fn init_logs() {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(filter)
        .try_init();
}

/// Yesterday 22:00 UTC: sample records (one per second) cross hours, and tests that need it cross
/// midnight. Recent, so the broker's 7-day retention keeps them.
pub fn base_ts() -> i64 {
    let midnight = chrono::Utc::now()
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .unwrap_or_default()
        .and_utc();
    midnight.timestamp_millis() - 2 * 3_600_000
}

/// A group's committed offsets on a cluster, -1 where it has none (OffsetFetch only; this
/// consumer never joins the group).
pub fn committed_offsets_on(
    k: &KafkaConfig,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Vec<i64> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = strata::kafka::client_config(k, strata::config::ClientKind::Consumer)
        .set("group.id", group)
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = c
        .committed_offsets(tpl, std::time::Duration::from_secs(10))
        .expect("committed offsets");
    (0..partitions)
        .map(|p| match got.find_partition(topic, p).map(|e| e.offset()) {
            Some(rdkafka::Offset::Offset(o)) => o,
            _ => -1,
        })
        .collect()
}

/// Sends a signal (`KILL`, `STOP`, `CONT`, `TERM`) to a child process.
pub fn signal(child: &std::process::Child, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig}");
}

/// What is wrong with the archive index under `dir` ("" or "cdc/"): seals whose upload never
/// made its object visible (litter), objects whose bytes do not match their seal's checksum,
/// and, when `every_object`, archive objects no visible seal describes. Empty when the index
/// is whole.
pub async fn index_problems(store: &dyn ObjectStore, dir: &str, every_object: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let mut described = std::collections::BTreeSet::new();
    for s in store.list(&format!("{dir}.strata/index/")).await.unwrap() {
        let tag = s.key.rsplit('/').next().unwrap().to_string();
        let seal: serde_json::Value = serde_json::from_slice(&store.get(&s.key).await.unwrap())
            .unwrap_or_else(|e| panic!("{}: not a seal: {e}", s.key));
        let mut files: Vec<(String, String)> = seal["files"]
            .as_array()
            .map(|f| {
                f.iter()
                    .map(|p| {
                        (
                            p[0].as_str().unwrap().to_string(),
                            p[1].as_str().unwrap().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        if files.is_empty() {
            files.push((seal["key"].as_str().unwrap().to_string(), tag));
        }
        let crcs: Vec<u64> = seal["crc32c"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c.as_u64()).collect())
            .unwrap_or_default();
        // Seals of strata versions before checksums (moved from .strata/seals/) have none.
        if !crcs.is_empty() && crcs.len() != files.len() {
            problems.push(format!(
                "seal {} has {} checksums for {} files",
                s.key,
                crcs.len(),
                files.len()
            ));
        }
        let mut visible = false;
        for (i, (file, t)) in files.into_iter().enumerate() {
            if store.tag_of(&file).await.ok().flatten().as_deref() == Some(t.as_str()) {
                visible = true;
                let data = store.get(&file).await.unwrap();
                if !crcs.is_empty()
                    && crcs.get(i).copied() != Some(u64::from(crc32c::crc32c(&data)))
                {
                    problems.push(format!("{file}: its bytes do not match the seal's CRC-32C"));
                }
                described.insert(file);
            }
        }
        if !visible {
            problems.push(format!("litter seal {}", s.key));
        }
    }
    if every_object {
        for o in store.list(dir).await.unwrap() {
            if !o.key.contains(".strata/") && !described.contains(&o.key) {
                problems.push(format!("no seal describes {}", o.key));
            }
        }
    }
    problems
}
