//! Restore mode against the real broker and LocalStack: lossless round trips (jsonl, parquet),
//! time ranges, text, dry run, kill -9 and resume (at least once and exactly once), and the
//! failures a user must be told about clearly.

mod common;

use common::clusters::{
    config_with_peer, create_topic_on, peer_connection, peer_kafka_config, peer_password,
    PEER_PASSWORD_VAR,
};
use common::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use strata::format::{Header, Record, TextOptions, TimestampType};
use strata::restore::{RestoreError, RestoreOptions, RestoreSummary};
use strata::store::FsStore;

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339()
}

fn dump_task(topic: &str, dir: &str, extra: &str) -> String {
    format!(
        "[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 300\ndirectory = \"{dir}\"\n{extra}\n",
        unique("task")
    )
}

/// Creates `topic`, produces `records` into it and dumps it with `store` + `task` TOML.
async fn archive(topic: &str, partitions: i32, records: &[Record], store: &str, task: &str) {
    create_topic(topic, partitions).await;
    produce(records).await;
    dump_once(&format!("{store}{task}")).await;
}

async fn restore_with(toml: &str, dry_run: bool) -> Result<RestoreSummary, RestoreError> {
    init_logs();
    let cfg = config(toml);
    let r = cfg.restore.expect("[restore] section");
    strata::restore::run(
        &r,
        RestoreOptions {
            dry_run,
            ..RestoreOptions::default()
        },
    )
    .await
}

async fn restore(toml: &str) -> RestoreSummary {
    restore_with(toml, false)
        .await
        .unwrap_or_else(|e| panic!("restore failed: {e}"))
}

/// What must survive a round trip, per record.
type Comparable = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<Header>,
    Option<i64>,
    TimestampType,
);

fn comparable(r: &Record) -> Comparable {
    (
        r.key.clone(),
        r.value.clone(),
        r.headers.clone(),
        r.timestamp,
        r.timestamp_type,
    )
}

/// What a text archive keeps of a record.
type KeyValue = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Records per partition, in offset order.
fn by_partition(records: &[Record]) -> BTreeMap<i32, Vec<Record>> {
    let mut m: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
    for r in records {
        m.entry(r.partition.unwrap()).or_default().push(r.clone());
    }
    for v in m.values_mut() {
        v.sort_by_key(|r| r.offset);
    }
    m
}

fn assert_same_per_partition(source: &[Record], target: &[Record]) {
    let (s, t) = (by_partition(source), by_partition(target));
    assert_eq!(
        s.keys().collect::<Vec<_>>(),
        t.keys().collect::<Vec<_>>(),
        "same partitions"
    );
    for (p, recs) in &s {
        let want: Vec<Comparable> = recs.iter().map(comparable).collect();
        let got: Vec<Comparable> = t[p].iter().map(comparable).collect();
        assert_eq!(want.len(), got.len(), "partition {p}: record count");
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(w, g, "partition {p}, record {i} differs");
        }
    }
}

/// The `seq` header sample_records sets: the record's identity.
fn seq(r: &Record) -> usize {
    let h = r
        .headers
        .iter()
        .find(|h| h.key == "seq" && h.value.is_some())
        .expect("seq header");
    String::from_utf8(h.value.clone().unwrap())
        .unwrap()
        .parse()
        .unwrap()
}

/// Reads a topic to its end with read_committed (works with transaction markers, where
/// `consume_all`'s offset arithmetic does not).
fn consume_committed(topic: &str) -> Vec<Record> {
    let admin = strata::kafka::Admin::new(&kafka_config()).unwrap();
    let parts = admin.partition_count(topic).unwrap().expect("topic exists");
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..parts {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut eof = BTreeSet::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while eof.len() < parts as usize {
        assert!(Instant::now() < deadline, "reading {topic} timed out");
        match c.poll(Duration::from_millis(500)) {
            None => {}
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
            }
            Some(Err(e)) => panic!("consume {topic}: {e}"),
            Some(Ok(m)) => {
                eof.remove(&m.partition());
                out.push(record_of(&m));
            }
        }
    }
    out
}

fn topic_exists(topic: &str) -> bool {
    strata::kafka::Admin::new(&kafka_config())
        .unwrap()
        .partition_count(topic)
        .unwrap()
        .is_some()
}

#[tokio::test(flavor = "multi_thread")]
async fn lossless_round_trip_through_localstack() {
    for (format, compression) in [("jsonl", "gzip"), ("parquet", "zstd")] {
        let topic = unique(&format!("rt-{format}"));
        let prefix = unique("restore-rt");
        let produced = sample_records(&topic, 400, 3, base_ts());
        archive(
            &topic,
            3,
            &produced,
            &s3_toml(&prefix),
            &dump_task(
                &topic,
                "backup",
                &format!("format = \"{format}\"\ncompression = \"{compression}\"\ntime_directory = \"yyyy/MM/dd/HH\""),
            ),
        )
        .await;
        let cp = tempfile::tempdir().unwrap();
        let summary = restore(&format!(
            "{}[restore]\ndirectory = \"backup\"\ntime_directory = \"yyyy/MM/dd/HH\"\ntopics = [\"{topic}\"]\ntarget_prefix = \"restored.\"\ncheckpoint = \"{}\"\n",
            s3_toml(&prefix),
            cp.path().join("cp.json").display()
        ))
        .await;
        assert_eq!(summary.records, 400, "{format}: {summary}");
        assert_eq!(summary.records_out_of_range, 0);
        assert!(summary.corrupt.is_empty());
        let target = format!("restored.{topic}");
        assert_eq!(
            strata::kafka::Admin::new(&kafka_config())
                .unwrap()
                .partition_count(&target)
                .unwrap(),
            Some(3),
            "created with the archive's partition count"
        );
        let source = consume_all(&topic);
        let restored = consume_all(&target);
        assert_same_per_partition(&source, &restored);
        // The sample has everything a lossless format must keep.
        assert!(restored.iter().any(|r| r.value.is_none()), "tombstones");
        assert!(restored.iter().any(|r| r.key.is_none()), "null keys");
        assert!(restored
            .iter()
            .any(|r| r.value.as_ref().is_some_and(|v| v.starts_with(&[0xff]))));
        assert!(restored
            .iter()
            .all(|r| r.headers.iter().filter(|h| h.key == "seq").count() == 2));

        // Running it again finds everything checkpointed and sends nothing.
        let again = restore(&format!(
            "{}[restore]\ndirectory = \"backup\"\ntime_directory = \"yyyy/MM/dd/HH\"\ntopics = [\"{topic}\"]\ntarget_prefix = \"restored.\"\ncheckpoint = \"{}\"\n",
            s3_toml(&prefix),
            cp.path().join("cp.json").display()
        ))
        .await;
        assert_eq!(again.records, 0);
        assert_eq!(again.skipped_objects.finished, summary.objects);
        assert_eq!(consume_all(&target).len(), 400);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn fewer_target_partitions_are_refused_and_key_hash_mode_places_by_key() {
    let topic = unique("fallback");
    let root = tempfile::tempdir().unwrap();
    let produced = sample_records(&topic, 120, 4, base_ts());
    archive(
        &topic,
        4,
        &produced,
        &file_toml(root.path()),
        &dump_task(&topic, "arch", "format = \"jsonl\""),
    )
    .await;
    // A target with 2 partitions: archived partitions 2 and 3 would have none of their own.
    // Refused before anything is written, naming topic, counts and the fixes.
    let target = unique("fallback-target");
    create_topic(&target, 2).await;
    let err = restore_with(
        &format!(
            "{}[restore]\ndirectory = \"arch\"\ntopic_map = {{ \"{topic}\" = \"{target}\" }}\ncheckpoint = \"{}\"\n",
            file_toml(root.path()),
            root.path().join("cp.json").display()
        ),
        false,
    )
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            RestoreError::TooFewPartitions {
                partitions: 2,
                needed: 4,
                ..
            }
        ),
        "{msg}"
    );
    for part in [
        format!("{target:?}"),
        "2 partition(s)".into(),
        format!("archive of {topic} has 4"),
        "--partitioning key-hash".into(),
        "--partitions 4".into(),
    ] {
        assert!(msg.contains(&part), "{part} in {msg}");
    }
    let admin = strata::kafka::Admin::new(&kafka_config()).unwrap();
    for p in 0..2 {
        assert_eq!(
            admin.watermarks(&target, p).unwrap(),
            (0, 0),
            "nothing written"
        );
    }
    // restore.partitions fewer than the archive's is refused the same way.
    let err = restore_with(
        &format!(
            "{}[restore]\ndirectory = \"arch\"\npartitions = 3\ntarget_prefix = \"few.\"\ncheckpoint = \"{}\"\n",
            file_toml(root.path()),
            root.path().join("cp-few.json").display()
        ),
        false,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            RestoreError::PartitionsSetTooLow {
                partitions: 3,
                needed: 4,
                ..
            }
        ),
        "{err}"
    );
    assert!(!topic_exists(&format!("few.{topic}")), "not created");

    // key-hash mode: keyed records land where Kafka's Java partitioner puts them. Check with
    // a known murmur2 value: partition = toPositive(murmur2(key)) % n.
    let kh = unique("keyhash-target");
    restore(&format!(
        "{}[restore]\ndirectory = \"arch\"\npartitioning = \"key-hash\"\npartitions = 5\ntopic_map = {{ \"{topic}\" = \"{kh}\" }}\ncheckpoint = \"{}\"\n",
        file_toml(root.path()),
        root.path().join("cp2.json").display()
    ))
    .await;
    let hashed = consume_all(&kh);
    assert_eq!(hashed.len(), 120);
    for r in hashed.iter().filter(|r| r.key.is_some()) {
        let want = (murmur2(r.key.as_ref().unwrap()) & 0x7fff_ffff) % 5;
        assert_eq!(r.partition, Some(want as i32), "key {:?}", r.key);
    }
}

/// Kafka's `Utils.murmur2`, as the Java producer's default partitioner uses it.
fn murmur2(data: &[u8]) -> u32 {
    let (seed, m, r) = (0x9747_b28c_u32, 0x5bd1_e995_u32, 24);
    let mut h = seed ^ data.len() as u32;
    let chunks = data.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(m);
        k ^= k >> r;
        k = k.wrapping_mul(m);
        h = h.wrapping_mul(m);
        h ^= k;
    }
    match rest.len() {
        3 => {
            h ^= u32::from(rest[2]) << 16;
            h ^= u32::from(rest[1]) << 8;
            h ^= u32::from(rest[0]);
            h = h.wrapping_mul(m);
        }
        2 => {
            h ^= u32::from(rest[1]) << 8;
            h ^= u32::from(rest[0]);
            h = h.wrapping_mul(m);
        }
        1 => {
            h ^= u32::from(rest[0]);
            h = h.wrapping_mul(m);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(m);
    h ^= h >> 15;
    h
}

#[tokio::test(flavor = "multi_thread")]
async fn time_range_restores_exactly_the_records_in_range() {
    let topic = unique("range");
    let prefix = unique("restore-range");
    // 600 records, one per second over ten minutes; minute directories.
    let produced = sample_records(&topic, 600, 3, base_ts());
    archive(
        &topic,
        3,
        &produced,
        &s3_toml(&prefix),
        &dump_task(
            &topic,
            "ranged",
            "format = \"parquet\"\ntime_directory = \"yyyy/MM/dd/HH/mm\"",
        ),
    )
    .await;
    let (from, to) = (base_ts() + 150_000, base_ts() + 421_500);
    let cp = tempfile::tempdir().unwrap();
    let summary = restore(&format!(
        "{}[restore]\ndirectory = \"ranged\"\ntime_directory = \"yyyy/MM/dd/HH/mm\"\nfrom = \"{}\"\nto = \"{}\"\ntarget_prefix = \"window.\"\ncheckpoint = \"{}\"\n",
        s3_toml(&prefix),
        rfc3339(from),
        rfc3339(to),
        cp.path().join("cp.json").display()
    ))
    .await;
    let want: Vec<usize> = (0..600)
        .filter(|i| {
            let t = base_ts() + *i as i64 * 1000;
            t >= from && t < to
        })
        .collect();
    assert_eq!(want.len(), 272);
    let restored = consume_all(&format!("window.{topic}"));
    let mut got: Vec<usize> = restored.iter().map(seq).collect();
    got.sort();
    assert_eq!(got, want, "exactly the records in [from, to)");
    assert_eq!(summary.records, 272);
    // Directories before `from` (22:00, 22:01) were not read; of those from `to` on (22:08,
    // 22:09) only the first per partition, for late records.
    assert_eq!(summary.skipped_objects.before_range, 2 * 3, "{summary}");
    assert_eq!(summary.skipped_objects.after_range, 3, "{summary}");
    assert!(summary.records_out_of_range > 0);
    // Original partitions and order are kept.
    let src: BTreeMap<usize, Record> = consume_all(&topic)
        .into_iter()
        .map(|r| (seq(&r), r))
        .collect();
    let expected: Vec<Record> = restored
        .iter()
        .map(|r| {
            let mut s = src[&seq(r)].clone();
            s.offset = r.offset;
            s
        })
        .collect();
    assert_same_per_partition(&expected, &restored);
}

#[tokio::test(flavor = "multi_thread")]
async fn text_round_trip_restores_values_and_keys_when_stored() {
    for store_key in [true, false] {
        let topic = unique("text");
        let root = tempfile::tempdir().unwrap();
        // Text cannot carry the delimiter inside a value; use plain values.
        let mut produced = sample_records(&topic, 90, 3, base_ts());
        for (i, r) in produced.iter_mut().enumerate() {
            r.value = Some(format!("value-{i}|ok").into_bytes());
            r.key = Some(format!("key-{i}").into_bytes());
        }
        archive(
            &topic,
            3,
            &produced,
            &file_toml(root.path()),
            &dump_task(
                &topic,
                "txt",
                &format!("format = \"text\"\nstore_key = {store_key}\nkey_separator = \"=\"\nrecord_delimiter = \"\\n\"\ncompression = \"zstd\""),
            ),
        )
        .await;
        let summary = restore(&format!(
            "{}[restore]\ndirectory = \"txt\"\nstore_key = {store_key}\nkey_separator = \"=\"\nrecord_delimiter = \"\\n\"\ntarget_prefix = \"text.\"\ncheckpoint = \"{}\"\n",
            file_toml(root.path()),
            root.path().join("cp.json").display()
        ))
        .await;
        assert_eq!(summary.records, 90);
        assert!(summary.text_objects > 0);
        assert!(summary.to_string().contains("only values"), "{summary}");
        let restored = by_partition(&consume_all(&format!("text.{topic}")));
        let source = by_partition(&consume_all(&topic));
        for (p, recs) in &source {
            let want: Vec<KeyValue> = recs
                .iter()
                .map(|r| (store_key.then(|| r.key.clone()).flatten(), r.value.clone()))
                .collect();
            let got: Vec<KeyValue> = restored[p]
                .iter()
                .map(|r| (r.key.clone(), r.value.clone()))
                .collect();
            assert_eq!(got, want, "partition {p}, store_key = {store_key}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_lists_objects_and_writes_nothing() {
    let topic = unique("dry");
    let root = tempfile::tempdir().unwrap();
    let produced = sample_records(&topic, 150, 3, base_ts());
    archive(
        &topic,
        3,
        &produced,
        &file_toml(root.path()),
        &dump_task(
            &topic,
            "arch",
            "format = \"jsonl\"\ntime_directory = \"yyyy/MM/dd/HH/mm\"",
        ),
    )
    .await;
    let archived = read_archive(
        &FsStore::new(root.path().to_path_buf()),
        "arch/",
        TextOptions::default(),
    )
    .await;
    let cp = root.path().join("cp.json");
    let target = format!("dry.{topic}");
    let out = Command::new(strata_bin())
        .args(["restore", "--dry-run", "--time-directory-is-config-only"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "unknown flags are refused");
    let out = Command::new(strata_bin())
        .arg("restore")
        .arg("--source")
        .arg(format!("file://{}", root.path().display()))
        .args([
            "--directory",
            "arch",
            "--topics",
            &topic,
            "--target-prefix",
            "dry.",
        ])
        .arg("--checkpoint")
        .arg(&cp)
        .arg("--bootstrap-servers")
        .arg(bootstrap())
        .arg("--dry-run")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Flags only, no layout: the minute directories are found by the objects' names.
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("total: {} object(s)", archived.len())),
        "{stdout}"
    );

    let cfg_path = root.path().join("restore.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "[kafka]\nbootstrap_servers = \"{}\"\n[restore]\ntime_directory = \"yyyy/MM/dd/HH/mm\"\n",
            bootstrap()
        ),
    )
    .unwrap();
    let out = Command::new(strata_bin())
        .arg("restore")
        .arg("--config")
        .arg(&cfg_path)
        .arg("--source")
        .arg(format!("file://{}", root.path().display()))
        .args([
            "--directory",
            "arch",
            "--topics",
            &topic,
            "--target-prefix",
            "dry.",
        ])
        .arg("--checkpoint")
        .arg(&cp)
        .arg("--dry-run")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for o in &archived {
        let line = stdout
            .lines()
            .find(|l| l.ends_with(&o.key))
            .unwrap_or_else(|| panic!("{} not listed:\n{stdout}", o.key));
        let count: usize = line.split_whitespace().next().unwrap().parse().unwrap();
        assert_eq!(count, o.records.len(), "{line}");
    }
    assert!(
        stdout.contains(&format!("total: {} object(s)", archived.len())),
        "{stdout}"
    );
    assert!(
        stdout.contains("150 record(s) would be restored"),
        "{stdout}"
    );
    let first = chrono::DateTime::from_timestamp_millis(base_ts())
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    assert!(
        stdout.contains(&first),
        "time span starts at the first record: {stdout}"
    );
    assert!(!cp.exists(), "no checkpoint written");
    assert!(!topic_exists(&target), "no topic created");
}

/// Objects of a `file://` archive per partition in offset order, with their record seqs.
fn objects_by_partition(root: &Path, dir: &str) -> BTreeMap<i32, Vec<(String, Vec<usize>)>> {
    let rt = tokio::runtime::Handle::current();
    let objects = tokio::task::block_in_place(|| {
        rt.block_on(read_archive(
            &FsStore::new(root.to_path_buf()),
            &format!("{dir}/"),
            TextOptions::default(),
        ))
    });
    let mut m: BTreeMap<i32, Vec<(i64, String, Vec<usize>)>> = BTreeMap::new();
    for o in objects {
        m.entry(o.name.partition).or_default().push((
            o.name.first_offset,
            o.key.clone(),
            o.records.iter().map(seq).collect(),
        ));
    }
    m.into_iter()
        .map(|(p, mut v)| {
            v.sort();
            (p, v.into_iter().map(|(_, k, s)| (k, s)).collect())
        })
        .collect()
}

fn checkpoint_keys(path: &Path) -> BTreeSet<String> {
    let Ok(bytes) = std::fs::read(path) else {
        return BTreeSet::new();
    };
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v["finished"].as_object().unwrap().keys().cloned().collect()
}

/// Kills a rate-limited restore once some objects are checkpointed, runs it again, and checks
/// that every record arrived and that only records of objects in flight at the kill (the
/// first unfinished object of each partition) may appear twice.
async fn kill_and_resume(exactly_once: bool) {
    let topic = unique(if exactly_once { "kill-eos" } else { "kill" });
    let root = tempfile::tempdir().unwrap();
    // 900 records over 15 minutes, minute directories: 45 objects of 20 records.
    let produced = sample_records(&topic, 900, 3, base_ts());
    archive(
        &topic,
        3,
        &produced,
        &file_toml(root.path()),
        &dump_task(
            &topic,
            "arch",
            "format = \"jsonl\"\ntime_directory = \"yyyy/MM/dd/HH/mm\"",
        ),
    )
    .await;
    let objects = objects_by_partition(root.path(), "arch");
    let total_objects: usize = objects.values().map(Vec::len).sum();
    assert_eq!(total_objects, 45);
    let cp = root.path().join("cp.json");
    let target = format!("resumed.{topic}");
    let cfg_path = root.path().join("restore.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "{}[restore]\ndirectory = \"arch\"\ntime_directory = \"yyyy/MM/dd/HH/mm\"\ntarget_prefix = \"resumed.\"\ncheckpoint = \"{}\"\nexactly_once = {exactly_once}\n",
            file_toml(root.path()),
            cp.display()
        ),
    )
    .unwrap();
    // About 30 kB/s of ~170-byte records: the run takes several seconds.
    let mut child = Command::new(strata_bin())
        .args(["restore", "--config"])
        .arg(&cfg_path)
        .args(["--rate-limit-mib-per-sec", "0.03"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = checkpoint_keys(&cp).len();
        if done >= 6 {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("restore ended before the kill: {status}");
        }
        assert!(Instant::now() < deadline, "no progress in the checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let finished_at_kill = checkpoint_keys(&cp);
    assert!(
        finished_at_kill.len() < total_objects,
        "killed too late to test anything: {}",
        finished_at_kill.len()
    );
    // Objects that may have been in flight: the first unfinished one of each partition.
    let mut may_repeat = BTreeSet::new();
    for objs in objects.values() {
        if let Some((_, seqs)) = objs.iter().find(|(k, _)| !finished_at_kill.contains(k)) {
            may_repeat.extend(seqs.iter().copied());
        }
    }

    let out = Command::new(strata_bin())
        .args(["restore", "--config"])
        .arg(&cfg_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "resume failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    let skipped: usize = summary
        .split(" already restored")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no skip count in {summary}"));
    if exactly_once {
        // Committed markers may know an object the local file had not recorded yet.
        assert!(skipped >= finished_at_kill.len(), "{summary}");
    } else {
        assert_eq!(skipped, finished_at_kill.len(), "{summary}");
    }
    assert_eq!(
        checkpoint_keys(&cp).len(),
        total_objects,
        "checkpoint complete"
    );

    let restored = if exactly_once {
        consume_committed(&target)
    } else {
        consume_all(&target)
    };
    let mut count: BTreeMap<usize, usize> = BTreeMap::new();
    for r in &restored {
        *count.entry(seq(r)).or_default() += 1;
    }
    for i in 0..900 {
        let n = count.get(&i).copied().unwrap_or(0);
        assert!(n >= 1, "record {i} missing");
        if exactly_once {
            assert_eq!(n, 1, "record {i} duplicated despite exactly_once");
        } else {
            assert!(n <= 2, "record {i} sent {n} times");
            assert!(
                n == 1 || may_repeat.contains(&i),
                "record {i} duplicated but its object was not in flight"
            );
        }
    }
    // The offset map survived the kill whole: every archived record is in it, at the target
    // offset that holds that very record (for a re-sent object, its second copy).
    let source_seq: HashMap<(i32, i64), usize> = consume_all(&topic)
        .iter()
        .map(|r| ((r.partition.unwrap(), r.offset.unwrap()), seq(r)))
        .collect();
    let target_seq: HashMap<(i32, i64), usize> = restored
        .iter()
        .map(|r| ((r.partition.unwrap(), r.offset.unwrap()), seq(r)))
        .collect();
    let body: serde_json::Value = serde_json::from_slice(&std::fs::read(&cp).unwrap()).unwrap();
    for p in 0..3 {
        let ranges = body["offset_maps"][format!("{topic}+{p}")]["ranges"]
            .as_array()
            .unwrap_or_else(|| panic!("no offset map of partition {p}"))
            .clone();
        let mut mapped = 0;
        for r in &ranges {
            let (s, t, len) = (
                r[0].as_i64().unwrap(),
                r[1].as_i64().unwrap(),
                r[2].as_i64().unwrap(),
            );
            for i in 0..len {
                assert_eq!(
                    target_seq.get(&(p, t + i)),
                    source_seq.get(&(p, s + i)),
                    "partition {p}: source {} mapped to target {}",
                    s + i,
                    t + i
                );
            }
            mapped += len;
        }
        assert_eq!(
            mapped,
            300,
            "partition {p}: every record mapped ({} ranges)",
            ranges.len()
        );
    }
    let dups = restored.len() - 900;
    assert!(
        dups <= may_repeat.len(),
        "{dups} > bound {}",
        may_repeat.len()
    );
    eprintln!(
        "kill test (exactly_once = {exactly_once}): {} objects finished at the kill, {dups} duplicate(s), bound {}",
        finished_at_kill.len(),
        may_repeat.len()
    );
    // First occurrences keep the original order per partition.
    let mut seen = BTreeSet::new();
    for p in 0..3 {
        let firsts: Vec<usize> = restored
            .iter()
            .filter(|r| r.partition == Some(p))
            .map(seq)
            .filter(|s| seen.insert(*s))
            .collect();
        let want: Vec<usize> = (0..900).filter(|i| i % 3 == p as usize).collect();
        assert_eq!(firsts, want, "partition {p} order");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_and_resume_duplicates_at_most_the_objects_in_flight() {
    kill_and_resume(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_and_resume_exactly_once_has_no_duplicates() {
    kill_and_resume(true).await;
}

/// Runs `strata restore ARGS` to its end; returns stderr after asserting exit 0 and no ERROR
/// line (a normal run logs none).
fn restore_cli(args: &[&str]) -> String {
    let out = Command::new(strata_bin())
        .args(["--log-format", "human", "restore"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "restore {args:?}: {stderr}");
    assert!(
        !stderr.lines().any(|l| l.contains("ERROR")),
        "a normal restore logs no ERROR line:\n{stderr}"
    );
    stderr
}

#[tokio::test(flavor = "multi_thread")]
async fn the_config_that_dumped_restores_whatever_its_layout() {
    // A legal topic name that starts with `.strata-`, records of year 10000 (five-digit year
    // directories), a dump directory two levels deep and a non-default time layout.
    let topic = unique(".strata-any");
    let root = tempfile::tempdir().unwrap();
    create_topic_with(
        &topic,
        2,
        &[("message.timestamp.after.max.ms", "9223372036854775807")],
    )
    .await;
    let mut produced = sample_records(&topic, 60, 2, base_ts());
    let year_10000 = chrono::NaiveDate::from_ymd_opt(10000, 1, 2)
        .and_then(|d| d.and_hms_opt(3, 4, 5))
        .unwrap()
        .and_utc()
        .timestamp_millis();
    for (i, r) in produced.iter_mut().rev().take(6).enumerate() {
        r.timestamp = Some(year_10000 + i as i64);
    }
    produce(&produced).await;
    let task_name = unique("layout");
    let toml = format!(
        "{}[[tasks]]\nname = \"{task_name}\"\ntopics = [\"{topic}\"]\ndirectory = \"backups/team\"\ntime_directory = \"dt=yyyy-MM-dd/HH\"\nformat = \"jsonl\"\n",
        file_toml(root.path())
    );
    dump_once(&toml).await;
    let team = root.path().join("backups/team");
    assert!(
        std::fs::read_dir(&team).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("dt=10000-")),
        "five-digit year directory"
    );
    let source = consume_all(&topic);
    assert_eq!(source.len(), 60);
    // Kafka 4 refuses timestamps over an hour ahead unless the topic allows them.
    for prefix in ["same-file.", "by-task.", "any-depth."] {
        create_topic_with(
            &format!("{prefix}{topic}"),
            2,
            &[("message.timestamp.after.max.ms", "9223372036854775807")],
        )
        .await;
    }

    // 1. The very file that dumped (no [restore] table), exactly once: the only dump task
    //    gives directory and layout.
    let cfg = root.path().join("strata.toml");
    std::fs::write(&cfg, &toml).unwrap();
    let cp = root.path().join("cp1.json");
    restore_cli(&[
        "--config",
        cfg.to_str().unwrap(),
        "--target-prefix",
        "same-file.",
        "--checkpoint",
        cp.to_str().unwrap(),
        "--exactly-once",
    ]);
    assert_same_per_partition(&source, &consume_committed(&format!("same-file.{topic}")));

    // 2. A file with a second dump task: `--task` picks the layout; a time range shows the
    //    layout is used (the year-10000 directories are skipped, not misread).
    let other = format!(
        "{toml}[[tasks]]\nname = \"{}\"\ntopics = [\"unrelated\"]\ndirectory = \"elsewhere\"\n",
        unique("other")
    );
    std::fs::write(&cfg, &other).unwrap();
    let cp = root.path().join("cp2.json");
    restore_cli(&[
        "--config",
        cfg.to_str().unwrap(),
        "--task",
        &task_name,
        "--to",
        "9999-01-01T00:00:00Z",
        "--target-prefix",
        "by-task.",
        "--checkpoint",
        cp.to_str().unwrap(),
    ]);
    let restored = consume_all(&format!("by-task.{topic}"));
    assert_eq!(restored.len(), 54, "all but the six records of year 10000");
    assert!(restored.iter().all(|r| r.timestamp < Some(year_10000)));

    // 3. No task and no layout, only a parent directory: found at any depth.
    let summary = restore(&format!(
        "{}[restore]\ndirectory = \"backups\"\ntarget_prefix = \"any-depth.\"\ncheckpoint = \"{}\"\n",
        file_toml(root.path()),
        root.path().join("cp3.json").display()
    ))
    .await;
    assert_eq!(summary.records, 60, "{summary}");
    assert_same_per_partition(&source, &consume_all(&format!("any-depth.{topic}")));
}

#[tokio::test(flavor = "multi_thread")]
async fn prefix_with_no_archive_is_a_clear_error() {
    let prefix = unique("restore-empty");
    let err = restore_with(
        &format!(
            "{}[restore]\ndirectory = \"nothing-here\"\ncheckpoint = \"/tmp/{}.json\"\n",
            s3_toml(&prefix),
            unique("cp")
        ),
        false,
    )
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, RestoreError::NoArchive { .. }), "{msg}");
    assert!(
        msg.contains(&format!("s3://{TEST_BUCKET}/{prefix}/nothing-here")),
        "{msg}"
    );
    assert!(msg.contains("--source"), "{msg}");

    // Through the binary: non-zero exit, the message on stderr.
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(strata_bin())
        .arg("restore")
        .arg("--source")
        .arg(format!("file://{}", empty.path().display()))
        .arg("--checkpoint")
        .arg(empty.path().join("cp.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no archive under"), "{stderr}");

    // An archived topic that does not match the selection names what is there.
    let topic = unique("present");
    let root = tempfile::tempdir().unwrap();
    archive(
        &topic,
        1,
        &sample_records(&topic, 5, 1, base_ts()),
        &file_toml(root.path()),
        &dump_task(&topic, "arch", "format = \"jsonl\""),
    )
    .await;
    let err = restore_with(
        &format!(
            "{}[restore]\ndirectory = \"arch\"\ntopics = [\"absent\"]\ncheckpoint = \"{}\"\n",
            file_toml(root.path()),
            root.path().join("cp.json").display()
        ),
        false,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("no archived objects of topics [absent]"),
        "{err}"
    );
    assert!(err.contains(&topic), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn corrupt_object_is_named_with_its_byte_offset_and_skip_corrupt_continues() {
    let topic = unique("corrupt");
    let root = tempfile::tempdir().unwrap();
    let produced = sample_records(&topic, 200, 2, base_ts());
    archive(
        &topic,
        2,
        &produced,
        &file_toml(root.path()),
        &dump_task(
            &topic,
            "arch",
            "format = \"jsonl\"\ntime_directory = \"yyyy/MM/dd/HH/mm\"",
        ),
    )
    .await;
    let objects = objects_by_partition(root.path(), "arch");
    // Damage the second object of partition 1: keep its first line, then garbage.
    let (key, seqs) = objects[&1][1].clone();
    let path = root.path().join(&key);
    let original = std::fs::read(&path).unwrap();
    let first_line = original.iter().position(|b| *b == b'\n').unwrap() + 1;
    let mut damaged = original[..first_line].to_vec();
    damaged.extend_from_slice(b"{\"topic\": \"x\", this is not json\n");
    std::fs::write(&path, &damaged).unwrap();

    let toml = |prefix: &str, cp: &str, extra: &str| {
        format!(
            "{}[restore]\ndirectory = \"arch\"\ntime_directory = \"yyyy/MM/dd/HH/mm\"\ntarget_prefix = \"{prefix}\"\ncheckpoint = \"{}\"\n{extra}",
            file_toml(root.path()),
            root.path().join(cp).display()
        )
    };
    let err = restore_with(&toml("broken.", "a.json", ""), false)
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, RestoreError::Corrupt(_)), "{msg}");
    assert!(msg.contains(&key), "names the object: {msg}");
    assert!(
        msg.contains(&format!("at byte {first_line}")),
        "names the byte offset {first_line}: {msg}"
    );
    assert!(msg.contains("--skip-corrupt"), "{msg}");
    let done = checkpoint_keys(&root.path().join("a.json"));
    assert!(
        !done.contains(&key),
        "a corrupt object is never checkpointed"
    );

    let summary = restore(&toml("skipped.", "b.json", "skip_corrupt = true\n")).await;
    assert_eq!(summary.corrupt.len(), 1, "{summary}");
    assert!(summary.corrupt[0].location.ends_with(&key));
    assert_eq!(summary.corrupt[0].at, Some(first_line as u64));
    assert_eq!(summary.records, 200 - seqs.len() as u64);
    assert!(summary.to_string().contains("1 corrupt"), "{summary}");
    let restored: BTreeSet<usize> = consume_all(&format!("skipped.{topic}"))
        .iter()
        .map(seq)
        .collect();
    let want: BTreeSet<usize> = (0..200).filter(|i| !seqs.contains(i)).collect();
    assert_eq!(restored, want);

    // A decompression bomb: about 100 KB of concatenated zstd frames of zeros that would
    // expand to 1.6 GB. Decoding stops at the memory budget, in the dry run and the restore.
    std::fs::write(&path, &original).unwrap();
    let dir = Path::new(&key).parent().unwrap();
    let bomb_key = dir.join(format!("{topic}+0+00000000000001000000.jsonl.zst"));
    let frame = zstd::encode_all(&vec![0u8; 16 << 20][..], 19).unwrap();
    std::fs::write(root.path().join(&bomb_key), frame.repeat(100)).unwrap();
    let bomb_key = bomb_key.to_str().unwrap().to_string();
    let limited = |cp: &str, extra: &str| {
        format!(
            "[limits]\nbuffer_memory = \"16MiB\"\n{}",
            toml("bomb.", cp, extra)
        )
    };
    let dry = restore_with(&limited("c.json", "skip_corrupt = true\n"), true)
        .await
        .unwrap();
    let bombed: Vec<_> = dry
        .corrupt
        .iter()
        .filter(|c| c.location.ends_with(&bomb_key))
        .collect();
    assert_eq!(bombed.len(), 1, "{dry}");
    assert!(
        bombed[0].detail.contains("decodes to more than 16MiB"),
        "{:?}",
        bombed[0]
    );
    let err = restore_with(&limited("d.json", ""), false)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&bomb_key), "names the object: {err}");
    assert!(err.contains("decodes to more than 16MiB"), "{err}");
}

/// A Parquet file shaped as strata dump writes them, of `rows` records whose key and value are
/// one `len`-byte value, dictionary-encoded: each column holds the value once, the footer
/// declares kilobytes, and the rows decode to `rows * len` bytes per column.
///
/// Written in two steps, because the parquet writer hashes every value it dictionary-encodes
/// (8192 values of 200 KiB take a debug build about 20 s): a file whose keys and values are one
/// byte, then the same pages with the one-entry dictionaries of key and value replaced.
fn dictionary_bomb(topic: &str, rows: usize, len: usize) -> Vec<u8> {
    use bytes::Bytes;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression, Encoding};
    use parquet::column::page::{CompressedPage, Page, PageWriter};
    use parquet::column::writer::ColumnCloseResult;
    use parquet::file::properties::{EnabledStatistics, WriterProperties};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::writer::{SerializedFileWriter, SerializedPageWriter, TrackedWrite};
    use parquet::schema::types::ColumnPath;
    use std::sync::Arc;

    let spec = strata::format::FormatSpec::new(
        strata::format::FormatKind::Parquet,
        strata::format::Compression::None,
        TextOptions::default(),
    )
    .unwrap();
    let mut e = strata::format::Encoder::in_memory(&spec, topic).unwrap();
    for i in 0..rows {
        let r = Record {
            topic: topic.to_string(),
            partition: Some(0),
            offset: Some(i as i64),
            timestamp: Some(base_ts() + i as i64),
            timestamp_type: TimestampType::CreateTime,
            key: Some(b"k".to_vec()),
            value: Some(b"v".to_vec()),
            headers: Vec::new(),
        };
        r.with_view(|v| e.append(v)).unwrap();
    }
    let dumped = Bytes::from(e.finish().unwrap().out);
    // Step 1: the same rows, key and value dictionary-encoded, nothing compressed.
    let reader = ParquetRecordBatchReaderBuilder::try_new(dumped)
        .unwrap()
        .build()
        .unwrap();
    let props = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_dictionary_enabled(false)
        .set_column_dictionary_enabled(ColumnPath::from("key"), true)
        .set_column_dictionary_enabled(ColumnPath::from("value"), true)
        .build();
    let mut small = None;
    for b in reader {
        let b = b.unwrap();
        let w = small.get_or_insert_with(|| {
            ArrowWriter::try_new(Vec::new(), b.schema(), Some(props.clone())).unwrap()
        });
        w.write(&b).unwrap();
    }
    let small = Bytes::from(small.unwrap().into_inner().unwrap());
    // Step 2: every column chunk as it is, but key's and value's dictionary.
    let file = SerializedFileReader::new(small.clone()).unwrap();
    let meta = file.metadata();
    assert_eq!(meta.num_row_groups(), 1);
    let out_props = Arc::new(
        WriterProperties::builder()
            .set_key_value_metadata(meta.file_metadata().key_value_metadata().cloned())
            .build(),
    );
    let mut w = SerializedFileWriter::new(
        Vec::new(),
        meta.file_metadata().schema_descr().root_schema_ptr(),
        out_props,
    )
    .unwrap();
    let mut group = w.next_row_group().unwrap();
    for (i, col) in meta.row_group(0).columns().iter().enumerate() {
        let name = col.column_path().string();
        let (chunk, metadata) = if name == "key" || name == "value" {
            let mut entry = (len as u32).to_le_bytes().to_vec();
            entry.resize(4 + len, b'x');
            let mut sink = TrackedWrite::new(Vec::new());
            let mut pages = SerializedPageWriter::new(&mut sink);
            let dict = Page::DictionaryPage {
                buf: Bytes::from(entry),
                num_values: 1,
                encoding: Encoding::PLAIN,
                is_sorted: false,
            };
            let dict_size = dict.buffer().len();
            let dict_len = pages
                .write_page(CompressedPage::new(dict, dict_size))
                .unwrap()
                .bytes_written;
            let mut old = file
                .get_row_group(0)
                .unwrap()
                .get_column_page_reader(i)
                .unwrap();
            while let Some(p) = old.get_next_page().unwrap() {
                if p.page_type() != parquet::basic::PageType::DICTIONARY_PAGE {
                    let size = p.buffer().len();
                    pages.write_page(CompressedPage::new(p, size)).unwrap();
                }
            }
            pages.close().unwrap();
            let chunk = Bytes::from(sink.into_inner().unwrap());
            let metadata = col
                .clone()
                .into_builder()
                .set_dictionary_page_offset(Some(0))
                .set_data_page_offset(dict_len as i64)
                .set_total_compressed_size(chunk.len() as i64)
                .set_total_uncompressed_size(chunk.len() as i64)
                .build()
                .unwrap();
            (chunk, metadata)
        } else {
            (small.clone(), col.clone())
        };
        let close = ColumnCloseResult {
            bytes_written: metadata.compressed_size() as u64,
            rows_written: rows as u64,
            metadata,
            bloom_filter: None,
            column_index: None,
            offset_index: None,
        };
        group.append_column(&chunk, close).unwrap();
    }
    group.close().unwrap();
    w.into_inner().unwrap()
}

/// Runs `strata ARGS` to its end: exit code, stderr and the peak resident size of the process
/// in bytes (the kernel's maximum resident set, from `wait4`).
// The child is reaped by `wait4`, which std's `Child::wait` cannot replace: it has no rusage.
#[allow(clippy::zombie_processes)]
fn run_measured(args: &[&str]) -> (Option<i32>, String, u64) {
    let mut child = Command::new(strata_bin())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reading = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).unwrap();
        s
    });
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value to be filled in; the pointers outlive the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    // ru_maxrss is in KiB on Linux.
    (code, reading.join().unwrap(), usage.ru_maxrss as u64 * 1024)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parquet_file_that_decodes_to_gigabytes_stops_near_the_memory_budget() {
    // A 200 KiB dictionary value repeated 8192 times in key and value: 400 KiB of file whose
    // first batch of 8192 rows decodes to 3.2 GiB.
    let topic = unique("dictbomb");
    let root = tempfile::tempdir().unwrap();
    let key = format!("arch/2026/01/02/{topic}+0+00000000000000000000.parquet");
    let path = root.path().join(&key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let data = dictionary_bomb(&topic, 8192, 200 << 10);
    assert!(data.len() < 1 << 20, "{} bytes", data.len());
    std::fs::write(&path, &data).unwrap();
    let cfg = root.path().join("restore.toml");
    std::fs::write(
        &cfg,
        format!(
            "[limits]\nbuffer_memory = \"64MiB\"\n{}[restore]\ndirectory = \"arch\"\ntarget_prefix = \"bomb.\"\ncheckpoint = \"{}\"\n",
            file_toml(root.path()),
            root.path().join("cp.json").display()
        ),
    )
    .unwrap();
    let (code, stderr, peak) = run_measured(&["restore", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&key), "names the object: {stderr}");
    assert!(stderr.contains("decodes to more than 64MiB"), "{stderr}");
    // What a restore may hold for one object: its records up to the decode limit (64 MiB
    // here), one batch of arrays (the bound caps it at the limit too) and the file; plus the
    // process itself (runtime, librdkafka, allocator), under 64 MiB. Refused before decoding,
    // it peaks near the process alone (48 MiB measured); without the bound, the reader's first
    // batch alone is 3.2 GiB (4 GiB measured).
    let bound = 2 * (64 << 20) + (128 << 20);
    assert!(
        peak <= bound,
        "the restore peaked at {} MiB of resident memory (bound {} MiB)",
        peak >> 20,
        bound >> 20
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_that_refuses_writes_is_a_clear_failure() {
    let topic = unique("refuse");
    let root = tempfile::tempdir().unwrap();
    archive(
        &topic,
        2,
        &sample_records(&topic, 50, 2, base_ts()),
        &file_toml(root.path()),
        &dump_task(&topic, "arch", "format = \"jsonl\""),
    )
    .await;
    let cfg_path = root.path().join("restore.toml");
    let write_cfg = |extra: &str| {
        std::fs::write(
            &cfg_path,
            format!(
                "{}[restore]\ndirectory = \"arch\"\ncheckpoint = \"{}\"\n{extra}",
                file_toml(root.path()),
                root.path().join("cp.json").display()
            ),
        )
        .unwrap()
    };

    // 1. The target topic is missing and may not be created.
    write_cfg("create_topics = false\ntarget_prefix = \"missing.\"\n");
    let out = Command::new(strata_bin())
        .args(["restore", "--config"])
        .arg(&cfg_path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("\"missing.{topic}\" does not exist")),
        "{stderr}"
    );
    assert!(stderr.contains("create_topics"), "{stderr}");
    assert!(!topic_exists(&format!("missing.{topic}")));

    // 2. The broker rejects every record (smaller max.message.bytes than any record).
    let tiny = format!("tiny.{topic}");
    create_topic_with(&tiny, 2, &[("max.message.bytes", "64")]).await;
    write_cfg("target_prefix = \"tiny.\"\n");
    let out = Command::new(strata_bin())
        .args(["restore", "--config"])
        .arg(&cfg_path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("refused records"), "{stderr}");
    assert!(stderr.contains(&tiny), "{stderr}");
    assert!(
        !stdout.contains("restored "),
        "no success summary: {stdout}"
    );
    assert!(
        checkpoint_keys(&root.path().join("cp.json")).is_empty(),
        "nothing checkpointed"
    );

    // 3. The target cluster cannot be reached.
    let out = Command::new(strata_bin())
        .args(["restore", "--config"])
        .arg(&cfg_path)
        .args(["--bootstrap-servers", "127.0.0.1:1", "--checkpoint"])
        .arg(root.path().join("cp-unreachable.json"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot reach Kafka at 127.0.0.1:1"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_of_other_settings_is_refused() {
    let topic = unique("cpmismatch");
    let root = tempfile::tempdir().unwrap();
    archive(
        &topic,
        1,
        &sample_records(&topic, 10, 1, base_ts()),
        &file_toml(root.path()),
        &dump_task(&topic, "arch", "format = \"jsonl\""),
    )
    .await;
    let cp = root.path().join("cp.json");
    let toml = |prefix: &str| {
        format!(
            "{}[restore]\ndirectory = \"arch\"\ntarget_prefix = \"{prefix}\"\ncheckpoint = \"{}\"\n",
            file_toml(root.path()),
            cp.display()
        )
    };
    restore(&toml("one.")).await;
    let err = restore_with(&toml("two."), false)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("target_prefix: \"one.\" -> \"two.\""), "{err}");
    assert!(!topic_exists(&format!("two.{topic}")));
}

// --- Kafka security: the dev broker's SASL_PLAINTEXT, SSL and SASL_SSL listeners ------------

/// Environment variable the secured configs name for the password.
const PASSWORD_VAR: &str = "STRATA_TEST_SECURE_PASSWORD";

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run the tests with `./dev test`"))
}

fn password_of(file_var: &str) -> String {
    std::fs::read_to_string(env(file_var))
        .unwrap()
        .trim()
        .to_string()
}

fn tls_file(name: &str) -> String {
    format!("{}/{name}", env("STRATA_TEST_TLS_DIR"))
}

/// A `[kafka]` table for one of the secured listeners; the password is `${PASSWORD_VAR}`.
fn secure_kafka(
    listener: &str,
    mechanism: Option<&str>,
    user: &str,
    ca: &str,
    client_cert: bool,
) -> String {
    let (servers, protocol) = match listener {
        "sasl" => (env("STRATA_TEST_SASL_BOOTSTRAP"), "SASL_PLAINTEXT"),
        "ssl" => (env("STRATA_TEST_SSL_BOOTSTRAP"), "SSL"),
        _ => (env("STRATA_TEST_SASL_SSL_BOOTSTRAP"), "SASL_SSL"),
    };
    let mut t =
        format!("[kafka]\nbootstrap_servers = \"{servers}\"\nsecurity_protocol = \"{protocol}\"\n");
    if let Some(m) = mechanism {
        t += &format!(
            "sasl_mechanism = \"{m}\"\nusername = \"{user}\"\npassword = \"${{{PASSWORD_VAR}}}\"\n"
        );
    }
    if protocol != "SASL_PLAINTEXT" {
        t += &format!("ssl_ca_location = \"{}\"\n", tls_file(ca));
    }
    if client_cert {
        t += &format!(
            "ssl_certificate_location = \"{}\"\nssl_key_location = \"{}\"\n",
            tls_file("client.pem"),
            tls_file("client.key")
        );
    }
    t
}

/// Runs the binary with the password in the environment; returns (exit code, all output) after
/// checking that the output never shows `password`.
fn run_secured(args: &[&str], password: &str) -> (Option<i32>, String) {
    let mut child = Command::new(strata_bin())
        .args(args)
        .env(PASSWORD_VAR, password)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Only a guard against a hang (a refusal retried forever); nothing is timed.
    let deadline = Instant::now() + Duration::from_secs(180);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("strata {args:?} did not end: a refusal must not be retried forever");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains(password),
        "the password appears in the output:\n{text}"
    );
    (out.status.code(), text)
}

#[tokio::test(flavor = "multi_thread")]
async fn dump_and_restore_over_sasl_ssl_and_mutual_tls() {
    let password = password_of("STRATA_TEST_KAFKA_PASSWORD_FILE");
    let user = env("STRATA_TEST_KAFKA_USER");
    for (name, kafka) in [
        (
            "sasl-ssl",
            secure_kafka("sasl_ssl", Some("SCRAM-SHA-512"), &user, "ca.pem", false),
        ),
        ("mtls", secure_kafka("ssl", None, "", "ca.pem", true)),
    ] {
        let topic = unique(&format!("sec-{name}"));
        let root = tempfile::tempdir().unwrap();
        create_topic(&topic, 2).await;
        produce(&sample_records(&topic, 80, 2, base_ts())).await;
        let cfg = root.path().join("strata.toml");
        std::fs::write(
            &cfg,
            format!(
                "{kafka}[store]\nurl = \"file://{}\"\n[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\nformat = \"jsonl\"\n",
                root.path().join("arch").display(),
                unique("sec")
            ),
        )
        .unwrap();
        let cfg = cfg.to_str().unwrap();
        let (code, out) = run_secured(&["dump", "--once", "--config", cfg], &password);
        assert_eq!(code, Some(0), "{name}: dump\n{out}");
        let cp = root.path().join("cp.json");
        let (code, out) = run_secured(
            &[
                "restore",
                "--config",
                cfg,
                "--target-prefix",
                "secured.",
                "--exactly-once",
                "--checkpoint",
                cp.to_str().unwrap(),
            ],
            &password,
        );
        assert_eq!(code, Some(0), "{name}: restore\n{out}");
        assert_same_per_partition(
            &consume_all(&topic),
            &consume_committed(&format!("secured.{topic}")),
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_secured_listener_connects() {
    let password = password_of("STRATA_TEST_KAFKA_PASSWORD_FILE");
    let user = env("STRATA_TEST_KAFKA_USER");
    for (what, kafka) in [
        (
            "SASL_PLAINTEXT PLAIN",
            secure_kafka("sasl", Some("PLAIN"), &user, "", false),
        ),
        (
            "SASL_PLAINTEXT SCRAM-SHA-512",
            secure_kafka("sasl", Some("SCRAM-SHA-512"), &user, "", false),
        ),
        (
            "SSL without a client certificate",
            secure_kafka("ssl", None, "", "ca.pem", false),
        ),
        (
            "SASL_SSL PLAIN",
            secure_kafka("sasl_ssl", Some("PLAIN"), &user, "ca.pem", false),
        ),
    ] {
        let cfg = strata::config::Config::from_toml(&kafka, "t", |k| {
            (k == PASSWORD_VAR).then(|| password.clone())
        })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let admin = tokio::task::spawn_blocking(move || strata::kafka::Admin::connect(&cfg.kafka))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(admin.broker_count().unwrap(), 1, "{what}");
    }
}

/// A `[kafka]` table for the dev broker's OAUTHBEARER listener, logging in as an OAuth client
/// of `endpoint`; the client secret is `${PASSWORD_VAR}`.
fn oauth_kafka(endpoint: &str, client_id: &str) -> String {
    format!(
        "[kafka]\nbootstrap_servers = \"{}\"\nsecurity_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"OAUTHBEARER\"\noauth_token_endpoint = \"{endpoint}\"\noauth_client_id = \"{client_id}\"\noauth_client_secret = \"${{{PASSWORD_VAR}}}\"\noauth_scope = \"kafka\"\n",
        env("STRATA_TEST_OAUTH_BOOTSTRAP")
    )
}

/// OAUTHBEARER with OIDC client credentials: librdkafka fetches a token from the test's token
/// endpoint, the broker checks it against the provider's key (JWKS file) and lets its subject
/// in. An admin client, a dump (consumer) and an exactly-once restore (transactional producer)
/// all log in this way.
#[tokio::test(flavor = "multi_thread")]
async fn oauthbearer_logins_take_tokens_from_the_oidc_token_endpoint() {
    let secret = format!("oauth-secret-{}", unique("s"));
    let provider = common::oidc::Provider::start("strata-test-client", &secret).await;
    let kafka = oauth_kafka(&provider.token_endpoint(), "strata-test-client");

    let cfg = strata::config::Config::from_toml(&kafka, "t", |k| {
        (k == PASSWORD_VAR).then(|| secret.clone())
    })
    .unwrap();
    let admin = tokio::task::spawn_blocking(move || strata::kafka::Admin::connect(&cfg.kafka))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("admin over OAUTHBEARER: {e}"));
    assert_eq!(admin.broker_count().unwrap(), 1);
    assert!(provider.issued() >= 1, "the token came from the endpoint");

    let topic = unique("sec-oauth");
    let root = tempfile::tempdir().unwrap();
    create_topic(&topic, 2).await;
    produce(&sample_records(&topic, 40, 2, base_ts())).await;
    let cfg = root.path().join("strata.toml");
    std::fs::write(
        &cfg,
        format!(
            "{kafka}[store]\nurl = \"file://{}\"\n[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\nformat = \"jsonl\"\n",
            root.path().join("arch").display(),
            unique("oauth")
        ),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let issued = provider.issued();
    let (code, out) = run_secured(&["dump", "--once", "--config", cfg], &secret);
    assert_eq!(code, Some(0), "dump\n{out}");
    assert!(provider.issued() > issued, "the dump fetched its own token");
    let cp = root.path().join("cp.json");
    let (code, out) = run_secured(
        &[
            "restore",
            "--config",
            cfg,
            "--target-prefix",
            "oauth.",
            "--exactly-once",
            "--checkpoint",
            cp.to_str().unwrap(),
        ],
        &secret,
    );
    assert_eq!(code, Some(0), "restore\n{out}");
    assert_same_per_partition(
        &consume_all(&topic),
        &consume_committed(&format!("oauth.{topic}")),
    );
    assert_eq!(provider.refused(), 0);
}

/// A client secret the token endpoint refuses ends the command with an error that names the
/// endpoint and the client (never the secret), instead of a login retried forever.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_oauth_client_names_the_token_endpoint() {
    let provider = common::oidc::Provider::start("strata-test-client", "the-right-secret").await;
    let topic = unique("sec-oauth-refused");
    create_topic(&topic, 1).await;
    let root = tempfile::tempdir().unwrap();
    let cfg = root.path().join("strata.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}[store]\nurl = \"file://{}\"\n[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\n",
            oauth_kafka(&provider.token_endpoint(), "strata-test-client"),
            root.path().join("arch").display(),
            unique("oauth")
        ),
    )
    .unwrap();
    let (code, out) = run_secured(
        &["dump", "--once", "--config", cfg.to_str().unwrap()],
        "a-wrong-client-secret",
    );
    assert_eq!(code, Some(1), "a refused client is a failure\n{out}");
    for want in [
        "no login token for Kafka at",
        provider.token_endpoint().as_str(),
        "client \"strata-test-client\"",
        "oauth_client_secret",
    ] {
        assert!(out.contains(want), "the error names {want:?}:\n{out}");
    }
    assert!(provider.refused() >= 1);
    assert_eq!(provider.issued(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_logins_certificates_and_acls_are_clear_errors() {
    let topic = unique("sec-refused");
    create_topic(&topic, 1).await;
    produce(&sample_records(&topic, 5, 1, base_ts())).await;
    let good = password_of("STRATA_TEST_KAFKA_PASSWORD_FILE");
    let limited = password_of("STRATA_TEST_LIMITED_PASSWORD_FILE");
    let user = env("STRATA_TEST_KAFKA_USER");
    let limited_user = env("STRATA_TEST_LIMITED_USER");
    let root = tempfile::tempdir().unwrap();
    let wrong = "wrong-password-0123456789";
    let limited_kafka = secure_kafka(
        "sasl_ssl",
        Some("SCRAM-SHA-512"),
        &limited_user,
        "ca.pem",
        false,
    );
    let cases: [(&str, String, &str, Vec<String>); 5] = [
        (
            "wrong password",
            secure_kafka("sasl", Some("SCRAM-SHA-512"), &user, "", false),
            wrong,
            vec![
                format!("refused the login of user \"{user}\" (SCRAM-SHA-512)"),
                env("STRATA_TEST_SASL_BOOTSTRAP"),
            ],
        ),
        (
            "unknown user",
            secure_kafka("sasl", Some("PLAIN"), "nobody-here", "", false),
            good.as_str(),
            vec!["refused the login of user \"nobody-here\" (PLAIN)".to_string()],
        ),
        (
            "untrusted CA",
            secure_kafka("ssl", None, "", "other-ca.pem", false),
            "",
            vec![
                "TLS with Kafka at".to_string(),
                tls_file("other-ca.pem"),
                "certificate verify failed".to_string(),
            ],
        ),
        (
            "missing ACL, dump",
            limited_kafka.clone(),
            limited.as_str(),
            vec![
                format!("does not authorize user \"{limited_user}\""),
                "Topic authorization failed".to_string(),
                topic.clone(),
            ],
        ),
        (
            "missing ACL, restore",
            limited_kafka.clone(),
            limited.as_str(),
            vec![
                format!("does not authorize user \"{limited_user}\""),
                "creating topic".to_string(),
            ],
        ),
    ];
    let archive_dir = root.path().join("arch");
    for (i, (what, kafka, password, wanted)) in cases.iter().enumerate() {
        let cfg = root.path().join(format!("c{i}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "{kafka}[store]\nurl = \"file://{}\"\n[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\n",
                archive_dir.display(),
                unique("refused")
            ),
        )
        .unwrap();
        let cfg = cfg.to_str().unwrap();
        let cp_path = root
            .path()
            .join(format!("cp{i}.json"))
            .display()
            .to_string();
        let args: Vec<&str> = if what.ends_with("restore") {
            // An archive to restore from, written over the plaintext listener.
            dump_once(&format!(
                "{}[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\n",
                file_toml(&archive_dir),
                unique("plain")
            ))
            .await;
            vec![
                "restore",
                "--config",
                cfg,
                "--target-prefix",
                "denied.",
                "--checkpoint",
                cp_path.as_str(),
            ]
        } else {
            vec!["dump", "--once", "--config", cfg]
        };
        let password = if password.is_empty() {
            "unused-password-value"
        } else {
            password
        };
        let (code, out) = run_secured(&args, password);
        assert_eq!(code, Some(1), "{what}: a refusal is a failure\n{out}");
        for w in wanted {
            assert!(
                out.contains(w.as_str()),
                "{what}: the error names {w:?}:\n{out}"
            );
        }
        assert!(
            !out.contains(&good) && !out.contains(&limited) && !out.contains(wrong),
            "{what}: a secret in the output"
        );
    }
}

/// A CDC archive (tables, repeats, malformed and verbatim messages) restores every original
/// message: same partition and order, keys and timestamps, the value byte for byte where the
/// source wrote canonical JSON (and where the archive kept the message whole), equal JSON
/// otherwise. Through LocalStack, with a dry run first.
#[tokio::test(flavor = "multi_thread")]
async fn cdc_tables_restore_the_original_messages() {
    let topic = unique("rt-cdc");
    let prefix = unique("restore-cdc");
    let data = cdc::generate(&topic, 3, 500, base_ts(), 3);
    assert!(data.repeated > 0 && data.malformed > 0);
    archive(
        &topic,
        3,
        &data.records,
        &s3_toml(&prefix),
        &dump_task(
            &topic,
            "cdc",
            "format = \"parquet\"\ncompression = \"zstd\"\n[tasks.cdc]\n[tasks.cdc.types.\"shop.orders\"]\nid = \"int\"\namount = \"decimal(10,2)\"\n",
        ),
    )
    .await;
    let cp = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}[restore]\ndirectory = \"cdc\"\ntopics = [\"{topic}\"]\ntarget_prefix = \"restored.\"\ncheckpoint = \"{}\"\n",
        s3_toml(&prefix),
        cp.path().join("cp.json").display()
    );
    let dry = restore_with(&toml, true).await.unwrap();
    assert_eq!(dry.records, data.records.len() as u64, "dry run: {dry}");
    let summary = restore(&toml).await;
    assert_eq!(summary.records, data.records.len() as u64, "{summary}");
    assert!(summary.corrupt.is_empty());
    let source = by_partition(&consume_all(&topic));
    let restored = by_partition(&consume_all(&format!("restored.{topic}")));
    let (mut exact, mut equal_json) = (0, 0);
    for (p, want) in &source {
        let got = &restored[p];
        assert_eq!(want.len(), got.len(), "partition {p}: message count");
        for (w, g) in want.iter().zip(got) {
            assert_eq!(
                (&w.key, w.timestamp),
                (&g.key, g.timestamp),
                "partition {p} offset {:?}",
                w.offset
            );
            let (wv, gv) = (w.value.as_ref().unwrap(), g.value.as_ref().unwrap());
            if wv == gv {
                exact += 1;
                continue;
            }
            let parsed = |v: &[u8]| serde_json::from_slice::<serde_json::Value>(v).unwrap();
            let canonical = parsed(wv).to_string().into_bytes();
            assert_ne!(
                &canonical,
                wv,
                "a canonical message came back changed: {}",
                String::from_utf8_lossy(wv)
            );
            assert_eq!(
                parsed(wv),
                parsed(gv),
                "partition {p} offset {:?}",
                w.offset
            );
            equal_json += 1;
        }
    }
    assert!(equal_json > 0, "the test has non-canonical messages");
    assert!(exact > equal_json);
}

// --- topics and consumer groups from the state snapshots, onto the peer cluster ------------

/// A keyed record of the groups test; `seq` names it. A second apart: the broker rolls
/// segments by record time (`segment.ms`).
fn keyed(topic: &str, partition: i32, key: &str, seq: usize) -> Record {
    Record {
        topic: topic.to_string(),
        partition: Some(partition),
        offset: None,
        timestamp: Some(base_ts() + seq as i64 * 1000),
        timestamp_type: TimestampType::CreateTime,
        key: Some(key.as_bytes().to_vec()),
        value: Some(format!("{topic}/{seq}").into_bytes()),
        headers: vec![Header {
            key: "seq".into(),
            value: Some(seq.to_string().into_bytes()),
        }],
    }
}

/// Commits positions for `group` on a cluster without joining it.
fn commit_positions(k: &strata::config::KafkaConfig, group: &str, at: &[(String, i32, i64)]) {
    use rdkafka::consumer::CommitMode;
    let c: BaseConsumer = strata::kafka::client_config(k, strata::config::ClientKind::Consumer)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for (t, p, o) in at {
        tpl.add_partition_offset(t, *p, Offset::Offset(*o)).unwrap();
    }
    c.commit(&tpl, CommitMode::Sync).unwrap();
}

/// Produces to a topic in three transactions per partition: committed, aborted, committed, so
/// that a read_committed reader sees offset gaps (the aborted records and the markers).
fn produce_with_aborted_transactions(topic: &str, partitions: i32) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", unique("restore-aborting"))
        .create()
        .unwrap();
    p.init_transactions(Duration::from_secs(30)).unwrap();
    let mut seq = 0;
    for (round, commit) in [(0, true), (1, false), (2, true), (3, false), (4, true)] {
        p.begin_transaction().unwrap();
        for part in 0..partitions {
            for i in 0..(8 + round) {
                let r = keyed(topic, part, &format!("k{i}"), seq);
                seq += 1;
                let hs = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
                    key: "seq",
                    value: r.headers[0].value.as_deref(),
                });
                p.send(
                    BaseRecord::to(topic)
                        .partition(part)
                        .key(r.key.as_deref().unwrap())
                        .payload(r.value.as_deref().unwrap())
                        .timestamp(r.timestamp.unwrap())
                        .headers(hs),
                )
                .unwrap();
            }
        }
        p.flush(Duration::from_secs(30)).unwrap();
        if commit {
            p.commit_transaction(Duration::from_secs(30)).unwrap();
        } else {
            p.abort_transaction(Duration::from_secs(30)).unwrap();
        }
    }
}

/// Offsets a read_committed reader sees, per partition.
fn present_offsets(topic: &str) -> BTreeMap<i32, Vec<i64>> {
    let mut out: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for r in consume_committed(topic) {
        out.entry(r.partition.unwrap())
            .or_default()
            .push(r.offset.unwrap());
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

/// Offsets missing between a partition's first and last present record.
fn gaps(present: &[i64]) -> Vec<i64> {
    let set: BTreeSet<i64> = present.iter().copied().collect();
    match (present.first(), present.last()) {
        (Some(a), Some(b)) => (*a..*b).filter(|o| !set.contains(o)).collect(),
        _ => vec![],
    }
}

/// What a consumer of `group` subscribed to `topic` on `k` reads from the group's committed
/// offsets to the end (read_committed), per partition. With `auto.offset.reset = error`, a
/// partition without a committed offset fails the test.
fn consume_group(
    k: &strata::config::KafkaConfig,
    group: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, Vec<Record>> {
    let c: BaseConsumer = strata::kafka::client_config(k, strata::config::ClientKind::Consumer)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "error")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    let mut out: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
    let mut eof = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while eof.len() < partitions as usize {
        assert!(
            Instant::now() < deadline,
            "group {group} did not reach the end of {topic}: {eof:?}"
        );
        match c.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
            }
            Some(Err(e)) => panic!("group {group} on {topic}: {e}"),
            Some(Ok(m)) => {
                eof.remove(&m.partition());
                out.entry(m.partition()).or_default().push(record_of(&m));
            }
        }
    }
    out
}

/// Key, value and headers: a record's identity across clusters.
type Identity = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<Header>);

fn identity(r: &Record) -> Identity {
    (r.key.clone(), r.value.clone(), r.headers.clone())
}

/// Sets a topic's configs (replacing every one it had).
async fn set_topic_configs(topic: &str, configs: &[(&str, &str)]) {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
    let a: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let mut c = AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (k, v) in configs {
        c = c.set(k, v);
    }
    for r in a.alter_configs([&c], &AdminOptions::new()).await.unwrap() {
        r.unwrap();
    }
}

/// Restores in-process onto the peer (its password filled in).
async fn restore_to_peer(
    toml: &str,
    groups: Option<&str>,
    dry_run: bool,
) -> Result<RestoreSummary, RestoreError> {
    init_logs();
    let cfg = config_with_peer(toml);
    strata::restore::run(
        &cfg.restore.expect("[restore]"),
        RestoreOptions {
            dry_run,
            groups: groups.map(|g| strata::restore::group_regex(g).unwrap()),
            ..RestoreOptions::default()
        },
    )
    .await
}

/// Topics and consumer groups come back exactly: the dev broker is the source (a plain topic,
/// a compacted one and one with aborted transactions, groups committed in the middle, at gaps
/// and at the ends), the peer the target. A group with an active member is refused before
/// anything is written; a dry run prints the table (its predictions are the real offsets of a
/// new topic); after the restore (plain, then exactly once through the CLI) a consumer of each
/// group on the peer reads exactly the archived records from its source position on.
#[tokio::test(flavor = "multi_thread")]
async fn groups_resume_on_the_peer_exactly_after_their_source_positions() {
    use strata::restore::groups::TargetOffset;
    init_logs();
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let plain = unique("grp-plain");
    let compacted = unique("grp-compacted");
    let aborted = unique("grp-aborted");

    // A compacted topic that compacts soon: segments roll every 100 ms (of record time) and
    // the cleaner takes any dirty segment. Per partition, a first round of 6 keys, then 5
    // rounds over 3 of them: compaction leaves gaps between the survivors.
    create_topic_with(
        &compacted,
        2,
        &[
            ("cleanup.policy", "compact"),
            ("segment.ms", "100"),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    )
    .await;
    let mut seq = 0;
    for round in 0..6 {
        let mut batch = Vec::new();
        for p in 0..2 {
            for k in 0..(if round == 0 { 6 } else { 3 }) {
                batch.push(keyed(&compacted, p, &format!("k{k}"), seq));
                seq += 1;
            }
        }
        produce(&batch).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    create_topic_with(&plain, 3, &[("retention.ms", "604800001")]).await;
    produce(&sample_records(&plain, 120, 3, base_ts())).await;
    create_topic(&aborted, 2).await;
    let t = aborted.clone();
    tokio::task::spawn_blocking(move || produce_with_aborted_transactions(&t, 2))
        .await
        .unwrap();
    // The cleaner looks every 15 s (the broker's default log.cleaner.backoff.ms).
    let deadline = Instant::now() + Duration::from_secs(60);
    let compacted_gaps = loop {
        if present_offsets(&compacted)
            .values()
            .any(|v| !gaps(v).is_empty())
        {
            break true;
        }
        if Instant::now() > deadline {
            eprintln!("note: the broker did not compact {compacted} within 60 s; its archive has no compaction gaps (the aborted transactions still make gaps)");
            break false;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    // Only cleanup.policy stays, so the restored topic does not compact under the test.
    set_topic_configs(&compacted, &[("cleanup.policy", "compact")]).await;

    // Positions on the source: in the middle, at gaps (compacted records, aborted records,
    // transaction markers), at the last record and at the end.
    let topics = [
        (plain.clone(), 3),
        (compacted.clone(), 2),
        (aborted.clone(), 2),
    ];
    let admin = strata::kafka::Admin::new(&local).unwrap();
    let (group_a, group_b, other) = (unique("grp-a"), unique("grp-b"), unique("other-grp"));
    let (mut pos_a, mut pos_b) = (Vec::new(), Vec::new());
    for (t, _) in &topics {
        for (p, present) in present_offsets(t) {
            let g = gaps(&present);
            let high = admin.watermarks(t, p).unwrap().1;
            let a = if t == &aborted && p == 1 {
                g[0] // the first transaction's commit marker
            } else {
                present[present.len() / 3]
            };
            let b = if t == &plain {
                [high, *present.last().unwrap(), 0][p as usize]
            } else if !g.is_empty() {
                g[g.len() / 2]
            } else {
                present[present.len() / 2]
            };
            pos_a.push((t.clone(), p, a));
            pos_b.push((t.clone(), p, b));
        }
    }
    commit_positions(&local, &group_a, &pos_a);
    commit_positions(&local, &group_b, &pos_b);
    commit_positions(&local, &other, &pos_a);

    let root = tempfile::tempdir().unwrap();
    dump_once(&format!(
        "{}[[tasks]]\nname = \"{}\"\ntopics = [\"{plain}\", \"{compacted}\", \"{aborted}\"]\ndump_interval_secs = 300\ndirectory = \"d\"\nformat = \"jsonl\"\n",
        file_toml(root.path()),
        unique("grp-task")
    ))
    .await;
    let store = FsStore::new(root.path().to_path_buf());
    let mut archived: BTreeMap<(String, i32), Vec<Record>> = BTreeMap::new();
    for o in read_archive(&store, "d/", TextOptions::default()).await {
        for r in o.records {
            archived
                .entry((o.name.topic.clone(), o.name.partition))
                .or_default()
                .push(r);
        }
    }
    for v in archived.values_mut() {
        v.sort_by_key(|r| r.offset);
    }
    let archived_gaps = |t: &str| {
        archived
            .iter()
            .filter(|((topic, _), _)| topic == t)
            .map(|(_, v)| gaps(&v.iter().map(|r| r.offset.unwrap()).collect::<Vec<_>>()).len())
            .sum::<usize>()
    };
    assert!(archived_gaps(&aborted) > 0, "aborted records leave gaps");
    assert_eq!(archived_gaps(&plain), 0);

    let groups_re = format!("{}|{}", regex::escape(&group_a), regex::escape(&group_b));
    let prefix = format!("{}.", unique("gr"));
    let cp = root.path().join("cp.json");
    let toml = format!(
        "[kafka]\n{}[store]\nurl = \"file://{}\"\n[restore]\ndirectory = \"d\"\ntarget_prefix = \"{prefix}\"\ncheckpoint = \"{}\"\n",
        peer_connection(),
        root.path().display(),
        cp.display()
    );
    let peer_admin = strata::kafka::Admin::new(&peer).unwrap();
    let target = |t: &str| format!("{prefix}{t}");

    // 1. A group with an active member on the target is refused by name, before anything
    // is written.
    let busy = unique("grp-busy");
    create_topic_on(&peer, &busy, 1).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let member = {
        let (peer, group, busy, stop) = (peer.clone(), group_b.clone(), busy.clone(), stop.clone());
        std::thread::spawn(move || {
            let c: BaseConsumer =
                strata::kafka::client_config(&peer, strata::config::ClientKind::Consumer)
                    .set("group.id", &group)
                    .set("enable.auto.commit", "false")
                    .create()
                    .unwrap();
            c.subscribe(&[&busy]).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = c.poll(Duration::from_millis(100));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while peer_admin.group_members(&group_b).unwrap() == 0 {
        assert!(Instant::now() < deadline, "the member did not join");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let err = restore_to_peer(&toml, Some(&groups_re), false)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, RestoreError::GroupActive { group, members: 1, .. } if *group == group_b),
        "{err}"
    );
    assert!(err.to_string().contains(&format!("{group_b:?}")), "{err}");
    for (t, _) in &topics {
        assert_eq!(
            peer_admin.partition_count(&target(t)).unwrap(),
            None,
            "nothing written"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    member.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while peer_admin.group_members(&group_b).unwrap() > 0 {
        assert!(Instant::now() < deadline, "the member did not leave");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // 2. The dry run prints the table and writes nothing.
    let dry = restore_to_peer(&toml, Some(&groups_re), true)
        .await
        .unwrap();
    assert!(!dry.groups_committed);
    assert_eq!(dry.groups.len(), pos_a.len() + pos_b.len(), "{dry}");
    let table = dry.to_string();
    assert!(
        table.contains("TARGET OFFSET") && table.contains(&group_a) && !table.contains(&other),
        "{table}"
    );
    for (t, _) in &topics {
        assert_eq!(
            peer_admin.partition_count(&target(t)).unwrap(),
            None,
            "dry run: no topic"
        );
    }

    // 3. The restore: topics with the archived partitions and configs, groups committed.
    let real = restore_to_peer(&toml, Some(&groups_re), false)
        .await
        .unwrap();
    assert!(real.groups_committed, "{real}");
    assert_eq!(real.created.len(), 3, "{real}");
    for (t, n) in &topics {
        assert_eq!(peer_admin.partition_count(&target(t)).unwrap(), Some(*n));
    }
    assert_eq!(
        peer_admin
            .topic_config(&target(&plain), "retention.ms")
            .await
            .unwrap()
            .as_deref(),
        Some("604800001")
    );
    assert_eq!(
        peer_admin
            .topic_config(&target(&compacted), "cleanup.policy")
            .await
            .unwrap()
            .as_deref(),
        Some("compact")
    );
    // A new topic restored without transactions: the dry run's predictions are the offsets.
    for (d, r) in dry.groups.iter().zip(&real.groups) {
        assert_eq!(d.position, r.position);
        let p = &r.position;
        let high = peer_admin
            .watermarks(&p.target_topic, p.partition)
            .unwrap()
            .1;
        match (d.target, r.target) {
            (TargetOffset::AfterEnd(n), TargetOffset::At(t)) => assert_eq!(n as i64, t, "{p:?}"),
            (TargetOffset::End, TargetOffset::At(t)) => assert_eq!(t, high, "{p:?}"),
            other => panic!("{p:?}: {other:?}"),
        }
    }
    // A dry run now reads the offsets from the checkpoint's map.
    let after = restore_to_peer(&toml, Some(&groups_re), true)
        .await
        .unwrap();
    for (a, r) in after.groups.iter().zip(&real.groups) {
        assert!(
            a.target == r.target || a.target == TargetOffset::End,
            "{:?}: {:?} vs {:?}",
            a.position,
            a.target,
            r.target
        );
    }
    // The offset map: one range per contiguous partition, more where the source has gaps.
    let body: serde_json::Value = serde_json::from_slice(&std::fs::read(&cp).unwrap()).unwrap();
    let ranges = |t: &str, p: i32| {
        body["offset_maps"][format!("{t}+{p}")]["ranges"]
            .as_array()
            .unwrap_or_else(|| panic!("no offset map of {t}+{p}: {body}"))
            .len()
    };
    for p in 0..3 {
        assert_eq!(ranges(&plain, p), 1);
    }
    assert!(ranges(&aborted, 0) > 1 && ranges(&aborted, 1) > 1);
    if compacted_gaps {
        assert!(ranges(&compacted, 0) + ranges(&compacted, 1) > 2);
    }

    // 4. Each group's consumer on the peer reads exactly what followed its source position.
    let check = |prefix: &str| {
        for (group, positions) in [(&group_a, &pos_a), (&group_b, &pos_b)] {
            for (t, n) in &topics {
                let tt = format!("{prefix}{t}");
                let got = consume_group(&peer, group, &tt, *n);
                for p in 0..*n {
                    let committed = positions
                        .iter()
                        .find(|(pt, pp, _)| pt == t && *pp == p)
                        .unwrap()
                        .2;
                    let want: Vec<Identity> = archived[&(t.clone(), p)]
                        .iter()
                        .filter(|r| r.offset.unwrap() >= committed)
                        .map(identity)
                        .collect();
                    let read: Vec<Identity> = got
                        .get(&p)
                        .map_or(vec![], |v| v.iter().map(identity).collect());
                    let missing = want.iter().filter(|w| !read.contains(w)).count();
                    let twice = read
                        .iter()
                        .enumerate()
                        .filter(|(i, r)| read[..*i].contains(r))
                        .count();
                    assert_eq!(
                        (missing, twice),
                        (0, 0),
                        "group {group} on {tt} partition {p}, committed at {committed}"
                    );
                    assert_eq!(read, want, "group {group} on {tt} partition {p}");
                }
            }
        }
    };
    check(&prefix);
    assert_eq!(
        committed_offsets_on(&peer, &other, &target(&plain), 3),
        vec![-1, -1, -1],
        "a group --groups does not match is left alone"
    );

    // 5. The same through the CLI, exactly once (transaction markers in the target), into
    // topics created without the archived configs.
    let prefix2 = format!("{}.", unique("gr-eos"));
    let cfg_path = root.path().join("eos.toml");
    std::fs::write(
        &cfg_path,
        format!(
            "[kafka]\n{}[store]\nurl = \"file://{}\"\n[restore]\ndirectory = \"d\"\ntarget_prefix = \"{prefix2}\"\ncheckpoint = \"{}\"\n",
            peer_connection(),
            root.path().display(),
            root.path().join("cp-eos.json").display()
        ),
    )
    .unwrap();
    let out = Command::new(strata_bin())
        .env(PEER_PASSWORD_VAR, peer_password())
        .args(["restore", "--config"])
        .arg(&cfg_path)
        .args([
            "--groups",
            &groups_re,
            "--exactly-once",
            "--no-topic-configs",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("positions committed"), "{stdout}");
    check(&prefix2);
    assert_eq!(
        peer_admin
            .topic_config(&format!("{prefix2}{compacted}"), "cleanup.policy")
            .await
            .unwrap()
            .as_deref(),
        Some("delete"),
        "--no-topic-configs"
    );
}
