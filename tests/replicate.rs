//! Replicate mode between the dev environment's two real clusters: the local broker and the
//! SASL (SCRAM-SHA-512) peer. Pull, push and both ways; record fidelity; topics and partitions
//! that appear later; kill -9, a zombie member and a target cut off mid-stream, each ending in
//! a read_committed read of the target that must hold every source record exactly once, in
//! order; MirrorMaker 2's offset syncs and checkpoints as Kafka's own client reads them.

mod common;

use common::clusters::*;
use common::*;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata::config::{Config, KafkaConfig};
use strata::format::Record;
use strata::replicate::mm2::{Checkpoint, OffsetSync};
use strata::replicate::{ReplicateOptions, Summary};

/// A replicate task's TOML: `lines` go into the task, `peer_lines` into its `[tasks.peer]`.
fn task_toml(name: &str, direction: &str, lines: &str, peer_lines: &str) -> String {
    format!(
        "[kafka]\nbootstrap_servers = \"{}\"\n\n[[tasks]]\ntype = \"replicate\"\nname = \"{name}\"\ndirection = \"{direction}\"\nlocal_alias = \"local\"\n{lines}\n[tasks.peer]\nalias = \"peer\"\n{}{peer_lines}",
        bootstrap(),
        peer_connection()
    )
}

async fn run_once(cfg: &Config) -> Vec<Summary> {
    init_logs();
    let opts = ReplicateOptions {
        once: true,
        once_deadline: Duration::from_secs(120),
        ..ReplicateOptions::default()
    };
    strata::replicate::run(cfg, opts, Arc::new(AtomicBool::new(false)))
        .await
        .expect("replicate --once")
}

/// A replicate run in this process until [`Running::stop`].
struct Running {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<Result<Vec<Summary>, strata::replicate::ReplicateError>>,
}

impl Running {
    fn start(cfg: Config) -> Self {
        init_logs();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = tokio::spawn(async move {
            strata::replicate::run(&cfg, ReplicateOptions::default(), s).await
        });
        Self { stop, handle }
    }

    async fn stop(self) -> Vec<Summary> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .await
            .expect("replicate task")
            .expect("replicate run")
    }
}

/// What a record carries that replication must keep (its offset aside): key, value, headers
/// (the source header aside), timestamp.
type Content = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Option<Vec<u8>>)>,
    Option<i64>,
);

fn content(r: &Record) -> Content {
    (
        r.key.clone(),
        r.value.clone(),
        r.headers
            .iter()
            .filter(|h| h.key != strata::replicate::SOURCE_HEADER)
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect(),
        r.timestamp,
    )
}

fn by_partition(records: &[Record]) -> BTreeMap<i32, Vec<&Record>> {
    let mut m: BTreeMap<i32, Vec<&Record>> = BTreeMap::new();
    for r in records {
        m.entry(r.partition.unwrap_or(-1)).or_default().push(r);
    }
    m
}

/// The target holds exactly the source's records, partition by partition, in order.
fn assert_same_partitions(source: &[Record], target: &[Record], what: &str) {
    let (s, t) = (by_partition(source), by_partition(target));
    assert_eq!(
        s.keys().collect::<Vec<_>>(),
        t.keys().collect::<Vec<_>>(),
        "{what}: partitions"
    );
    for (p, src) in &s {
        let dst = &t[p];
        assert_eq!(src.len(), dst.len(), "{what}: records in partition {p}");
        for (i, (a, b)) in src.iter().zip(dst.iter()).enumerate() {
            assert_eq!(content(a), content(b), "{what}: partition {p}, record {i}");
        }
    }
}

/// Every offset sync of `topic` in the syncs topic maps a source record to the same record in
/// the target.
fn assert_syncs_point_at_copies(
    syncs_cluster: &KafkaConfig,
    syncs_topic: &str,
    topic: &str,
    source: &[Record],
    target: &[Record],
) -> usize {
    let by_offset = |rs: &[Record]| -> BTreeMap<(i32, i64), Record> {
        rs.iter()
            .map(|r| ((r.partition.unwrap(), r.offset.unwrap()), r.clone()))
            .collect()
    };
    let (src, dst) = (by_offset(source), by_offset(target));
    let mut n = 0;
    for r in read_committed(syncs_cluster, syncs_topic) {
        let Ok(s) = OffsetSync::parse(r.key.as_deref().unwrap(), r.value.as_deref().unwrap())
        else {
            continue;
        };
        if s.topic != topic {
            continue;
        }
        let a = &src[&(s.partition, s.upstream)];
        let b = dst
            .get(&(s.partition, s.downstream))
            .unwrap_or_else(|| panic!("sync {s:?} points at no target record"));
        assert_eq!(content(a), content(b), "sync {s:?}");
        n += 1;
    }
    n
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_with_rename_keeps_keys_values_headers_timestamps_and_tombstones() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let topic = unique("pull");
    create_topic_on(&peer, &topic, 3).await;
    let records = sample_records(&topic, 3000, 3, base_ts());
    produce_to(&peer, &records).await;
    let toml = task_toml(
        &unique("pull-task"),
        "pull",
        &format!("topics = [\"{topic}\"]\nrename_topics = true\ncompression = \"zstd\"\n"),
        "",
    );
    let summary = run_once(&config_with_peer(&toml)).await;
    assert_eq!(summary.len(), 1);
    assert_eq!(summary[0].flow, "peer->local");
    assert_eq!(summary[0].records, 3000);
    let target = format!("peer.{topic}");
    let source = read_committed(&peer, &topic);
    let copied = read_committed(&local, &target);
    assert_same_partitions(&source, &copied, "pull");
    assert!(
        copied.iter().any(|r| r.value.is_none()),
        "tombstones copied"
    );
    // MirrorMaker 2's placement for pull: the offset syncs on the local (target) side.
    let n = assert_syncs_point_at_copies(
        &local,
        "mm2-offset-syncs.peer.internal",
        &topic,
        &source,
        &copied,
    );
    // One sync at least every 100 records per partition (offset.lag.max).
    assert!(n >= 3000 / 100, "{n} offset syncs");

    // A second run has nothing new to copy; the target stays as it is.
    let again = run_once(&config_with_peer(&toml)).await;
    assert_eq!(again[0].records, 0);
    assert_eq!(read_committed(&local, &target).len(), 3000);
}

/// At least once (no transactions, for targets that refuse them): every record arrives, in
/// order, and a second run resumes from the stored positions.
#[tokio::test(flavor = "multi_thread")]
async fn without_transactions_every_record_arrives_and_positions_follow() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let topic = unique("alo");
    create_topic_on(&peer, &topic, 2).await;
    produce_to(&peer, &sample_records(&topic, 500, 2, base_ts())).await;
    let toml = task_toml(
        &unique("alo-task"),
        "pull",
        &format!("topics = [\"{topic}\"]\nexactly_once = false\n"),
        "",
    );
    assert_eq!(run_once(&config_with_peer(&toml)).await[0].records, 500);
    produce_to(&peer, &sample_records(&topic, 200, 2, base_ts())).await;
    assert_eq!(run_once(&config_with_peer(&toml)).await[0].records, 200);
    let source = read_committed(&peer, &topic);
    let copied = read_committed(&local, &topic);
    assert_same_partitions(&source, &copied, "at least once");
}

#[tokio::test(flavor = "multi_thread")]
async fn push_keeps_names_and_refuses_changed_parameters() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let topic = unique("push");
    create_topic_on(&local, &topic, 2).await;
    let records = sample_records(&topic, 1000, 2, base_ts());
    produce_to(&local, &records).await;
    let name = unique("push-task");
    let lines = format!("topics = [\"{topic}\"]\nexactly_once = true\n");
    let toml = task_toml(&name, "push", &lines, "");
    let summary = run_once(&config_with_peer(&toml)).await;
    assert_eq!(summary[0].flow, "local->peer");
    let source = read_committed(&local, &topic);
    let copied = read_committed(&peer, &topic);
    assert_same_partitions(&source, &copied, "push");
    // Push: MirrorMaker 2's default placement, the syncs on the (local) source.
    assert_syncs_point_at_copies(
        &local,
        "mm2-offset-syncs.peer.internal",
        &topic,
        &source,
        &copied,
    );

    let changed = task_toml(
        &name,
        "push",
        &format!("{lines}compression = \"gzip\"\n"),
        "",
    );
    let err = strata::replicate::run(
        &config_with_peer(&changed),
        ReplicateOptions {
            once: true,
            once_deadline: Duration::from_secs(60),
            ..ReplicateOptions::default()
        },
        Arc::new(AtomicBool::new(false)),
    )
    .await
    .expect_err("changed parameters must be refused");
    let msg = err.to_string();
    assert!(
        msg.contains("compression") && msg.contains("create a new task"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn both_ways_with_source_headers_never_loop() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    // One name on both clusters: the flows meet in the same topics.
    let topic = unique("both-h");
    create_topic_on(&local, &topic, 2).await;
    create_topic_on(&peer, &topic, 2).await;
    let mut mine = sample_records(&topic, 300, 2, base_ts());
    for r in &mut mine {
        r.key = Some(b"local".to_vec());
    }
    let mut theirs = sample_records(&topic, 200, 2, base_ts());
    for r in &mut theirs {
        r.key = Some(b"peer".to_vec());
    }
    produce_to(&local, &mine).await;
    produce_to(&peer, &theirs).await;
    let toml = task_toml(
        &unique("both-h-task"),
        "both",
        &format!("topics = [\"{topic}\"]\nsource_header = true\n"),
        "",
    );
    let run = Running::start(config_with_peer(&toml));
    let count = |k: KafkaConfig, t: String| async move {
        tokio::task::spawn_blocking(move || read_committed(&k, &t).len())
            .await
            .unwrap()
    };
    eventually(90, "both clusters hold both sides' records", || {
        let (l, p, t) = (local.clone(), peer.clone(), topic.clone());
        async move { count(l, t.clone()).await == 500 && count(p, t).await == 500 }
    })
    .await;
    // Still exactly 500 a while later: nothing came back.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let summaries = run.stop().await;
    let on_local = read_committed(&local, &topic);
    let on_peer = read_committed(&peer, &topic);
    assert_eq!((on_local.len(), on_peer.len()), (500, 500));
    let copied: u64 = summaries.iter().map(|s| s.records).sum();
    assert_eq!(copied, 500, "each record crossed once: {summaries:?}");
    // The copies name where they came from; the originals carry no header.
    let origin = |r: &Record| {
        r.headers
            .iter()
            .find(|h| h.key == strata::replicate::SOURCE_HEADER)
            .and_then(|h| h.value.clone())
    };
    for r in &on_local {
        let want = (r.key.as_deref() == Some(b"peer")).then(|| b"peer".to_vec());
        assert_eq!(origin(r), want);
    }
    for r in &on_peer {
        let want = (r.key.as_deref() == Some(b"local")).then(|| b"local".to_vec());
        assert_eq!(origin(r), want);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn both_ways_with_rename_and_new_topics_and_partitions_later() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let stem = unique("both-r");
    let first = format!("{stem}-a");
    create_topic_on(&local, &first, 1).await;
    create_topic_on(&peer, &first, 1).await;
    produce_to(&local, &sample_records(&first, 100, 1, base_ts())).await;
    produce_to(&peer, &sample_records(&first, 50, 1, base_ts())).await;
    let toml = task_toml(
        &unique("both-r-task"),
        "both",
        &format!("topic_regex = \"{stem}-.*\"\nrename_topics = true\ntopic_refresh_secs = 1\n"),
        "",
    );
    let run = Running::start(config_with_peer(&toml));
    let len = |k: &KafkaConfig, t: &str| {
        let (k, t) = (k.clone(), t.to_string());
        async move {
            tokio::task::spawn_blocking(move || {
                strata::kafka::Admin::new(&k)
                    .unwrap()
                    .partition_count(&t)
                    .unwrap()
                    .map(|_| read_committed(&k, &t).len())
            })
            .await
            .unwrap()
        }
    };
    eventually(90, "renamed copies on both sides", || async {
        len(&local, &format!("peer.{first}")).await == Some(50)
            && len(&peer, &format!("local.{first}")).await == Some(100)
    })
    .await;
    // A topic created later is picked up; partitions added on the source reach the target.
    let second = format!("{stem}-b");
    create_topic_on(&peer, &second, 1).await;
    produce_to(&peer, &sample_records(&second, 40, 1, base_ts())).await;
    let admin = strata::kafka::Admin::new(&peer).unwrap();
    admin.add_partitions(&first, 3).await.unwrap();
    wait_for_partitions(&admin, &first, 3).await;
    produce_to(&peer, &sample_records(&first, 30, 3, base_ts())).await;
    eventually(
        90,
        "the new topic and the new partitions copied",
        || async {
            len(&local, &format!("peer.{second}")).await == Some(40)
                && len(&local, &format!("peer.{first}")).await == Some(80)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    run.stop().await;
    let target_admin = strata::kafka::Admin::new(&local).unwrap();
    assert_eq!(
        target_admin
            .partition_count(&format!("peer.{first}"))
            .unwrap(),
        Some(3)
    );
    // Copies never go home under another name.
    for (k, t) in [
        (&peer, format!("local.peer.{first}")),
        (&local, format!("peer.local.{first}")),
    ] {
        let a = strata::kafka::Admin::new(k).unwrap();
        assert_eq!(a.partition_count(&t).unwrap(), None, "{t} must not exist");
    }
    let src = read_committed(&peer, &first);
    let dst = read_committed(&local, &format!("peer.{first}"));
    assert_same_partitions(&src, &dst, "grown topic");
}

#[tokio::test(flavor = "multi_thread")]
async fn group_offsets_follow_to_the_target_and_kafkas_client_reads_the_checkpoints() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let topic = unique("sync");
    create_topic_on(&peer, &topic, 2).await;
    let records = sample_records(&topic, 2000, 2, base_ts());
    produce_to(&peer, &records).await;
    // An application reads part of the topic on the source and commits.
    let group = unique("app");
    let consumed_before = {
        let (peer, topic, group) = (peer.clone(), topic.clone(), group.clone());
        tokio::task::spawn_blocking(move || consume_and_commit(&peer, &topic, &group, 1100))
            .await
            .unwrap()
    };
    let toml = task_toml(
        &unique("sync-task"),
        "pull",
        // The default interval (60 s): a --once run this short syncs the groups in its last
        // round, through the last offset syncs, when everything is copied.
        &format!("topics = [\"{topic}\"]\nsync_group_offsets = true\ngroups_regex = \"{group}\"\n"),
        "",
    );
    run_once(&config_with_peer(&toml)).await;
    let committed = {
        let local = local.clone();
        let (topic, group) = (topic.clone(), group.clone());
        move || committed_offsets_on(&local, &group, &topic, 2)
    };
    let on_target = tokio::task::spawn_blocking(committed).await.unwrap();
    assert!(on_target.iter().all(|o| *o >= 0), "{on_target:?}");
    // The same group continues on the target: it misses nothing, and re-reads only what lies
    // between the last offset sync and where it was.
    let rest = {
        let (local, topic, group) = (local.clone(), topic.clone(), group.clone());
        tokio::task::spawn_blocking(move || consume_and_commit(&local, &topic, &group, usize::MAX))
            .await
            .unwrap()
    };
    let seen: std::collections::BTreeSet<Vec<u8>> = consumed_before
        .iter()
        .chain(rest.iter())
        .map(|r| r.value.clone().unwrap_or_default())
        .collect();
    let all: std::collections::BTreeSet<Vec<u8>> = records
        .iter()
        .map(|r| r.value.clone().unwrap_or_default())
        .collect();
    assert_eq!(seen, all, "no record missed across the switch");
    let reread = consumed_before.len() + rest.len() - records.len();
    assert!(
        reread <= 2 * 100,
        "{reread} records read twice (at most one sync interval per partition)"
    );
    // Kafka's own RemoteClusterUtils.translateOffsets on strata's checkpoints says the same.
    let cp = std::env::var("STRATA_TEST_MM2_CLASSPATH")
        .expect("STRATA_TEST_MM2_CLASSPATH (./dev test sets it)");
    let out = std::process::Command::new("java")
        .args([
            "-cp",
            &cp,
            "TranslateOffsets",
            &bootstrap(),
            "peer",
            &group,
            "identity",
        ])
        .output()
        .expect("java");
    assert!(
        out.status.success(),
        "TranslateOffsets: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let translated: BTreeMap<String, i64> = serde_json::from_slice(&out.stdout).unwrap();
    for (p, o) in on_target.iter().enumerate() {
        assert_eq!(
            translated.get(&format!("{topic}:{p}")),
            Some(o),
            "partition {p}: {translated:?}"
        );
    }
    // And the checkpoints are MirrorMaker 2's records.
    let cps: Vec<Checkpoint> = read_committed(&local, "peer.checkpoints.internal")
        .iter()
        .filter_map(|r| Checkpoint::parse(r.key.as_deref()?, r.value.as_deref()?).ok())
        .filter(|c| c.group == group)
        .collect();
    assert!(!cps.is_empty());
    assert!(cps.iter().all(|c| c.topic == topic && c.downstream >= 0));
}

/// Reads up to `max` records of `topic` as `group` (from its committed offsets, else the
/// start), commits where it stopped, returns what it read.
fn consume_and_commit(k: &KafkaConfig, topic: &str, group: &str, max: usize) -> Vec<Record> {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let c: BaseConsumer = strata::kafka::client_config(k, strata::config::ClientKind::Consumer)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    let mut out = Vec::new();
    let mut idle = Instant::now();
    while out.len() < max && idle.elapsed() < Duration::from_secs(8) {
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            out.push(record_of(&m.unwrap()));
            idle = Instant::now();
        }
    }
    c.commit_consumer_state(CommitMode::Sync).unwrap();
    c.unsubscribe();
    out
}

fn write_config(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn spawn_replicate(cfg: &Path, log: &Path, extra: &[&str]) -> std::process::Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    std::process::Command::new(strata_bin())
        .arg("replicate")
        .arg("--config")
        .arg(cfg)
        .args(extra)
        .env(PEER_PASSWORD_VAR, peer_password())
        .env("RUST_LOG", "strata=debug")
        .stdout(std::process::Stdio::null())
        .stderr(out)
        .spawn()
        .unwrap()
}

/// Produces small batches of numbered records to `topic` on `k` until stopped.
fn start_producer(
    k: KafkaConfig,
    topic: String,
    partitions: i32,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut n = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let mut batch = sample_records(
                &topic,
                100,
                partitions,
                chrono::Utc::now().timestamp_millis(),
            );
            for (i, r) in batch.iter_mut().enumerate() {
                r.value = Some(format!("record-{}", n + i).into_bytes());
            }
            produce_to(&k, &batch).await;
            n += batch.len();
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        n
    })
}

/// The settings that make a killed or stopped member's partitions move on quickly: a short
/// session, and (with `instance`) static membership so a restart takes its place at once.
fn fast_membership(instance: &str) -> String {
    format!("[tasks.peer.properties]\n\"session.timeout.ms\" = \"6000\"\n\"heartbeat.interval.ms\" = \"1000\"\n\"group.instance.id\" = \"{instance}\"\n")
}

async fn finish_and_check(
    cfg: &Path,
    log: &Path,
    local: &KafkaConfig,
    peer: &KafkaConfig,
    topic: &str,
    target: &str,
    produced: usize,
) {
    let mut last = spawn_replicate(cfg, log, &["--once", "--once-deadline", "120"]);
    let status = tokio::task::spawn_blocking(move || last.wait().unwrap())
        .await
        .unwrap();
    assert!(
        status.success(),
        "final --once run failed: see {}",
        log.display()
    );
    let source = read_committed(peer, topic);
    assert_eq!(source.len(), produced);
    let copied = read_committed(local, target);
    assert_same_partitions(&source, &copied, "after the faults");
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_copies_every_record_exactly_once() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let topic = unique("kill9");
    create_topic_on(&peer, &topic, 4).await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("kill9-task");
    let toml = format!(
        "{}{}",
        task_toml(
            &name,
            "pull",
            &format!("topics = [\"{topic}\"]\ntasks = 1\n"),
            ""
        ),
        fast_membership(&format!("{name}-member"))
    );
    let cfg = write_config(dir.path(), "kill9.toml", &toml);
    let log = dir.path().join("kill9.log");
    let stop = Arc::new(AtomicBool::new(false));
    let producer = start_producer(peer.clone(), topic.clone(), 4, stop.clone());
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..10 {
        let mut child = spawn_replicate(&cfg, &log, &[]);
        tokio::time::sleep(Duration::from_millis(rng.random_range(1500..4000))).await;
        signal(&child, "KILL");
        let _ = child.wait();
    }
    stop.store(true, Ordering::Relaxed);
    let produced = producer.await.unwrap();
    finish_and_check(&cfg, &log, &local, &peer, &topic, &topic, produced).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_member_resumed_after_its_partitions_moved_duplicates_nothing() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let topic = unique("zombie");
    create_topic_on(&peer, &topic, 4).await;
    let dir = tempfile::tempdir().unwrap();
    let name = unique("zombie-task");
    let lines = format!("topics = [\"{topic}\"]\ntasks = 1\n");
    let cfg_a = write_config(
        dir.path(),
        "a.toml",
        &format!(
            "{}{}",
            task_toml(&name, "pull", &lines, ""),
            fast_membership(&format!("{name}-a"))
        ),
    );
    let cfg_b = write_config(
        dir.path(),
        "b.toml",
        &format!(
            "{}{}",
            task_toml(&name, "pull", &lines, ""),
            fast_membership(&format!("{name}-b"))
        ),
    );
    let log = dir.path().join("zombie.log");
    let stop = Arc::new(AtomicBool::new(false));
    let producer = start_producer(peer.clone(), topic.clone(), 4, stop.clone());
    let a = spawn_replicate(&cfg_a, &log, &[]);
    let mut b = spawn_replicate(&cfg_b, &log, &[]);
    tokio::time::sleep(Duration::from_secs(8)).await;
    // A stops mid-work, past its session timeout: B takes its partitions and fences its
    // producers. Then A wakes up with its transactions and positions of before.
    let log_len = || std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
    signal(&a, "STOP");
    let stopped_at = log_len();
    tokio::time::sleep(Duration::from_secs(15)).await;
    let resumed_at = log_len();
    signal(&a, "CONT");
    tokio::time::sleep(Duration::from_secs(6)).await;
    // A new owner of partition 0 (as a member taking over does): whoever writes it now is a
    // zombie, and its next transaction must fail as fenced, not land.
    let fence_id = format!("strata.{name}.peer-local.{topic}.0");
    let fence: rdkafka::producer::BaseProducer = {
        let mut c = rdkafka::ClientConfig::new();
        c.set("bootstrap.servers", bootstrap())
            .set("transactional.id", &fence_id);
        c.create().unwrap()
    };
    tokio::task::spawn_blocking(move || {
        rdkafka::producer::Producer::init_transactions(&fence, Duration::from_secs(30)).unwrap()
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    stop.store(true, Ordering::Relaxed);
    let produced = producer.await.unwrap();
    let mut a = a;
    signal(&a, "TERM");
    signal(&b, "TERM");
    let _ = tokio::task::spawn_blocking(move || (a.wait(), b.wait())).await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let during_stop = text.get(stopped_at..resumed_at).unwrap_or_default();
    assert!(
        during_stop.contains("partition worker ready"),
        "B took A's partitions over while A was stopped:\n{during_stop}"
    );
    assert!(
        text.get(resumed_at..)
            .unwrap_or_default()
            .contains("producer was fenced"),
        "the writer of partition 0 was fenced; the log:\n{}",
        text.get(resumed_at..).unwrap_or_default()
    );
    finish_and_check(&cfg_b, &log, &local, &peer, &topic, &topic, produced).await;
}

/// Without transactions: every source record is in the target, and a partition's copy only
/// ever goes on with the next record or repeats earlier ones (after a rewind), never skips.
fn assert_at_least_once(source: &[Record], target: &[Record], what: &str) {
    let (s, t) = (by_partition(source), by_partition(target));
    for (p, src) in &s {
        let index: HashMap<Content, usize> = src
            .iter()
            .enumerate()
            .map(|(i, r)| (content(r), i))
            .collect();
        assert_eq!(
            index.len(),
            src.len(),
            "{what}: the test's records are distinct"
        );
        let mut reached = 0;
        for (k, r) in t
            .get(p)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let Some(&i) = index.get(&content(r)) else {
                panic!("{what}: partition {p}, target record {k} is not a source record");
            };
            assert!(
                i <= reached,
                "{what}: partition {p}, target record {k} skips from source record {reached} to {i}"
            );
            reached = reached.max(i + 1);
        }
        assert_eq!(
            reached,
            src.len(),
            "{what}: records of partition {p} copied"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_cut_off_mid_stream_and_back_loses_and_duplicates_nothing() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    // One task with transactions, one without, through the same cut.
    let topics = [unique("cut"), unique("cut-alo")];
    for t in &topics {
        create_topic_on(&local, t, 2).await;
    }
    // The peer through the test's own proxy (its PROXIED listener is advertised there).
    let proxy = TcpProxy::start(
        &std::env::var("STRATA_TEST_PEER_PROXY").expect("STRATA_TEST_PEER_PROXY"),
        &std::env::var("STRATA_TEST_PEER_PROXIED").expect("STRATA_TEST_PEER_PROXIED"),
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut runs = Vec::new();
    let mut producers = Vec::new();
    for (t, eos) in topics.iter().zip([true, false]) {
        let toml = task_toml(
            &unique("cut-task"),
            "push",
            &format!("topics = [\"{t}\"]\nexactly_once = {eos}\n"),
            "",
        )
        .replace(
            &format!("bootstrap_servers = \"{}\"", peer_bootstrap()),
            &format!("bootstrap_servers = \"{}\"", proxy.addr()),
        );
        producers.push(start_producer(local.clone(), t.clone(), 2, stop.clone()));
        runs.push(Running::start(config_with_peer(&toml)));
    }
    for t in &topics {
        eventually(60, &format!("records of {t} on the target"), || {
            let (p, t) = (peer.clone(), t.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    strata::kafka::Admin::new(&p)
                        .unwrap()
                        .partition_count(&t)
                        .unwrap()
                        .is_some()
                        && !read_committed(&p, &t).is_empty()
                })
                .await
                .unwrap()
            }
        })
        .await;
    }
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(10)).await;
    proxy.restore().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    for ((t, producer), run) in topics.iter().zip(producers).zip(runs) {
        let produced = producer.await.unwrap();
        eventually(120, "every record on the target", || {
            let (p, t) = (peer.clone(), t.clone());
            async move {
                let source = {
                    let (l, t) = (kafka_config(), t.clone());
                    tokio::task::spawn_blocking(move || read_committed(&l, &t))
                };
                let copied = tokio::task::spawn_blocking(move || read_committed(&p, &t));
                let (source, copied) = (source.await.unwrap(), copied.await.unwrap());
                source.len() == produced
                    && by_partition(&source).iter().all(|(p, s)| {
                        by_partition(&copied)
                            .get(p)
                            .and_then(|c| c.last())
                            .is_some_and(|l| s.last().is_some_and(|x| content(x) == content(l)))
                    })
            }
        })
        .await;
        run.stop().await;
        let source = read_committed(&local, t);
        let copied = read_committed(&peer, t);
        if t == &topics[0] {
            assert_same_partitions(&source, &copied, "after the cut");
        } else {
            assert_at_least_once(&source, &copied, "after the cut, without transactions");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_peer_password_fails_fast_naming_the_cluster_and_user() {
    let dir = tempfile::tempdir().unwrap();
    let toml = task_toml(&unique("badpw-task"), "pull", "topics = [\"x\"]\n", "");
    let cfg = write_config(dir.path(), "bad.toml", &toml);
    let started = Instant::now();
    let out = std::process::Command::new(strata_bin())
        .args(["replicate", "--once", "--config"])
        .arg(&cfg)
        .env(PEER_PASSWORD_VAR, "not-the-password")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "no endless retry"
    );
    assert!(
        err.contains("\"peer\"") && err.contains(&peer_user()) && err.contains("password"),
        "{err}"
    );
    assert!(
        !err.contains("not-the-password"),
        "the password leaked: {err}"
    );
    // The connectivity check says the same, per check.
    let out = std::process::Command::new(strata_bin())
        .args(["replicate-check", "--config"])
        .arg(&cfg)
        .env(PEER_PASSWORD_VAR, "not-the-password")
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("ok     task") && report.contains("cluster \"local\": bootstrap"),
        "{report}"
    );
    assert!(
        report.contains("FAILED task") && report.contains("cluster \"peer\": authentication"),
        "{report}"
    );
    // With the right password every check passes.
    let out = std::process::Command::new(strata_bin())
        .args(["replicate-check", "--config"])
        .arg(&cfg)
        .env(PEER_PASSWORD_VAR, peer_password())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(!report.contains("FAILED"), "{report}");
    assert!(
        report.contains("cluster \"peer\": authentication: logged in as"),
        "{report}"
    );
    // Pull only reads the peer: its topic-creation right is not asked for.
    assert!(
        !report.contains("cluster \"peer\": topic creation"),
        "{report}"
    );
}

/// A `--once` run's error (the run must fail).
async fn run_once_err(cfg: &Config) -> strata::replicate::ReplicateError {
    init_logs();
    strata::replicate::run(
        cfg,
        ReplicateOptions {
            once: true,
            once_deadline: Duration::from_secs(120),
            ..ReplicateOptions::default()
        },
        Arc::new(AtomicBool::new(false)),
    )
    .await
    .expect_err("the run must be refused")
}

/// Deletes a topic and waits until the cluster no longer lists it.
async fn delete_topic_on(k: &KafkaConfig, topic: &str) {
    let admin = strata::kafka::Admin::new(k).unwrap();
    admin.delete_topics(&[topic]).await.unwrap();
    eventually(60, &format!("{topic} deleted"), || {
        let (k, t) = (k.clone(), topic.to_string());
        async move {
            tokio::task::spawn_blocking(move || {
                strata::kafka::Admin::new(&k)
                    .unwrap()
                    .partition_count(&t)
                    .unwrap()
                    .is_none()
            })
            .await
            .unwrap()
        }
    })
    .await;
}

/// Lost bookkeeping, case 1: the positions topic is gone but the target holds the copies. A
/// start must not take it for a first start (that copies everything again); `--reset
/// target-end` keeps the target as it is and copies what reaches the source from then on.
#[tokio::test(flavor = "multi_thread")]
async fn lost_positions_with_a_filled_target_are_refused_until_reset() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let topic = unique("lostpos");
    create_topic_on(&peer, &topic, 2).await;
    produce_to(&peer, &sample_records(&topic, 300, 2, base_ts())).await;
    let name = unique("lostpos-task");
    let toml = task_toml(&name, "pull", &format!("topics = [\"{topic}\"]\n"), "");
    let cfg = config_with_peer(&toml);
    assert_eq!(run_once(&cfg).await[0].records, 300);
    delete_topic_on(
        &local,
        &format!("strata.{name}.peer-local.positions.internal"),
    )
    .await;
    produce_to(&peer, &sample_records(&topic, 50, 2, base_ts())).await;

    let err = run_once_err(&cfg).await;
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{topic}[0]"))
            && msg.contains(&format!("{topic}[1]"))
            && msg.contains("--reset target-end"),
        "{msg}"
    );
    assert_eq!(
        read_committed(&local, &topic).len(),
        300,
        "nothing copied again"
    );

    // target-end: the target stays as it is; what reached the source meanwhile is left out,
    // what comes later is copied once.
    let reset = ReplicateOptions {
        once: true,
        once_deadline: Duration::from_secs(120),
        reset: Some(strata::replicate::Reset::TargetEnd),
    };
    let summary = strata::replicate::run(&cfg, reset, Arc::new(AtomicBool::new(false)))
        .await
        .expect("--reset target-end");
    assert_eq!(summary[0].records, 0);
    produce_to(&peer, &sample_records(&topic, 40, 2, base_ts())).await;
    assert_eq!(run_once(&cfg).await[0].records, 40);
    let source = read_committed(&peer, &topic);
    let expected: Vec<Record> = source
        .iter()
        .filter(|r| !(150..175).contains(&r.offset.unwrap()))
        .cloned()
        .collect();
    assert_same_partitions(
        &expected,
        &read_committed(&local, &topic),
        "after the reset",
    );
}

/// Lost bookkeeping, case 2: the target topic was deleted and recreated while the positions
/// survived. Resuming would leave out everything the old topic held; `--reset source-start`
/// copies the source again into the empty target.
#[tokio::test(flavor = "multi_thread")]
async fn a_recreated_target_topic_is_refused_until_reset() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let topic = unique("recreated");
    create_topic_on(&peer, &topic, 2).await;
    produce_to(&peer, &sample_records(&topic, 200, 2, base_ts())).await;
    let toml = task_toml(
        &unique("recreated-task"),
        "pull",
        &format!("topics = [\"{topic}\"]\nrename_topics = true\n"),
        "",
    );
    let cfg = config_with_peer(&toml);
    assert_eq!(run_once(&cfg).await[0].records, 200);
    let target = format!("peer.{topic}");
    delete_topic_on(&local, &target).await;

    let err = run_once_err(&cfg).await;
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{target}[0]"))
            && msg.contains("recreated")
            && msg.contains("--reset source-start"),
        "{msg}"
    );

    // source-start: the empty target gets every source record again, once.
    let reset = ReplicateOptions {
        once: true,
        once_deadline: Duration::from_secs(120),
        reset: Some(strata::replicate::Reset::SourceStart),
    };
    let summary = strata::replicate::run(&cfg, reset, Arc::new(AtomicBool::new(false)))
        .await
        .expect("--reset source-start");
    assert_eq!(summary[0].records, 200);
    assert_same_partitions(
        &read_committed(&peer, &topic),
        &read_committed(&local, &target),
        "after the reset",
    );
    // One-shot: the next start finds its positions in order.
    assert_eq!(run_once(&cfg).await[0].records, 0);
}

/// A first start killed before its first commit leaves aborted records in the target and no
/// position: that is no lost bookkeeping, and the next start copies everything.
#[tokio::test(flavor = "multi_thread")]
async fn aborted_records_in_the_target_are_no_lost_bookkeeping() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let topic = unique("aborted");
    create_topic_on(&peer, &topic, 1).await;
    create_topic_on(&local, &topic, 1).await;
    produce_to(&peer, &sample_records(&topic, 30, 1, base_ts())).await;
    let (l, t) = (local.clone(), topic.clone());
    tokio::task::spawn_blocking(move || {
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let p: BaseProducer =
            strata::kafka::client_config(&l, strata::config::ClientKind::Producer)
                .set("transactional.id", unique("aborting"))
                .create()
                .unwrap();
        p.init_transactions(Duration::from_secs(30)).unwrap();
        p.begin_transaction().unwrap();
        for i in 0..5 {
            let v = format!("aborted-{i}");
            p.send(BaseRecord::<(), _>::to(&t).partition(0).payload(&v))
                .unwrap();
        }
        p.flush(Duration::from_secs(30)).unwrap();
        p.abort_transaction(Duration::from_secs(30)).unwrap();
    })
    .await
    .unwrap();
    let toml = task_toml(
        &unique("aborted-task"),
        "pull",
        &format!("topics = [\"{topic}\"]\n"),
        "",
    );
    assert_eq!(run_once(&config_with_peer(&toml)).await[0].records, 30);
    assert_same_partitions(
        &read_committed(&peer, &topic),
        &read_committed(&local, &topic),
        "past the aborted records",
    );
}

/// The bookkeeping topics are created with the task's replication factor (more replicas than
/// brokers is refused before anything is created), and an existing one that is not compacted
/// is refused with the command that fixes it.
#[tokio::test(flavor = "multi_thread")]
async fn bookkeeping_topics_follow_replication_factor_and_must_be_compacted() {
    let (local, peer) = (kafka_config(), peer_kafka_config());
    let topic = unique("bk");
    create_topic_on(&peer, &topic, 1).await;
    let brokers = strata::kafka::Admin::new(&local)
        .unwrap()
        .broker_count()
        .unwrap();
    let name = unique("bk-task");
    let positions = format!("strata.{name}.peer-local.positions.internal");
    let too_many = task_toml(
        &name,
        "pull",
        &format!(
            "topics = [\"{topic}\"]\nreplication_factor = {}\n",
            brokers + 1
        ),
        "",
    );
    let msg = run_once_err(&config_with_peer(&too_many)).await.to_string();
    assert!(
        msg.contains(&positions) && msg.contains("replicas"),
        "{msg}"
    );
    assert_eq!(
        strata::kafka::Admin::new(&local)
            .unwrap()
            .partition_count(&positions)
            .unwrap(),
        None,
        "nothing created"
    );

    // A positions topic someone created with cleanup.policy = delete: its records would expire.
    let admin = strata::kafka::Admin::new(&local).unwrap();
    admin
        .create_topic(&positions, 1, 1, &[("cleanup.policy", "delete")])
        .await
        .unwrap();
    wait_for_partitions(&admin, &positions, 1).await;
    let toml = task_toml(&name, "pull", &format!("topics = [\"{topic}\"]\n"), "");
    let msg = run_once_err(&config_with_peer(&toml)).await.to_string();
    assert!(
        msg.contains(&positions)
            && msg.contains("cleanup.policy")
            && msg.contains("--add-config cleanup.policy=compact"),
        "{msg}"
    );
}
