//! Dump under failure, against the real broker and LocalStack: kill -9 at random moments,
//! two processes sharing a group through rebalances, and an object store outage. Each ends by
//! reading every object back and checking that every produced offset is archived exactly once.

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata::format::{Record, TextOptions};
use strata::store::{FsStore, ObjectStore};

/// Keeps producing small batches until stopped; returns how many records it produced.
fn start_producer(
    topic: &str,
    partitions: i32,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    let topic = topic.to_string();
    tokio::spawn(async move {
        let mut n = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let mut batch = sample_records(
                &topic,
                100,
                partitions,
                chrono::Utc::now().timestamp_millis(),
            );
            for r in &mut batch {
                r.value = Some(vec![b'x'; 300]);
            }
            produce(&batch).await;
            n += batch.len();
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        n
    })
}

/// Every offset from the log start to the high watermark of every partition must be archived
/// exactly once, and each object must start where the previous one of its partition ended.
async fn assert_exactly_once(store: &dyn ObjectStore, topic: &str, partitions: i32) -> usize {
    let objects = read_archive(store, "", TextOptions::default()).await;
    let admin = strata::kafka::Admin::new(&kafka_config()).unwrap();
    let mut by_partition: BTreeMap<i32, Vec<(i64, &Vec<Record>)>> = BTreeMap::new();
    for o in &objects {
        assert_eq!(o.name.topic, topic);
        assert_eq!(o.records[0].offset, Some(o.name.first_offset), "{}", o.key);
        by_partition
            .entry(o.name.partition)
            .or_default()
            .push((o.name.first_offset, &o.records));
    }
    let mut total = 0;
    for p in 0..partitions {
        let (low, high) = admin.watermarks(topic, p).unwrap();
        let mut next = low;
        let mut objs = by_partition.remove(&p).unwrap_or_default();
        objs.sort_by_key(|(o, _)| *o);
        for (first, records) in objs {
            assert_eq!(first, next, "partition {p}: object at {first} but the previous one ended before {next} (gap or overlap)");
            for r in records.iter() {
                assert_eq!(
                    r.offset,
                    Some(next),
                    "partition {p}: offsets inside an object are consecutive"
                );
                next += 1;
            }
        }
        assert_eq!(
            next, high,
            "partition {p}: archived up to {next}, high watermark {high}"
        );
        total += (high - low) as usize;
    }
    total
}

fn count_in(path: &Path, needle: &str) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.matches(needle).count())
        .unwrap_or(0)
}

fn write_config(dir: &Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("strata.toml");
    std::fs::write(&path, body).unwrap();
    path
}

/// Fast failure detection, so a killed member's partitions move on within seconds.
const FAST_GROUP: &str =
    "[kafka.properties]\n\"session.timeout.ms\" = 6000\n\"heartbeat.interval.ms\" = 500\n";

fn spawn_dump(cfg: &Path, log: &Path) -> std::process::Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    std::process::Command::new(strata_bin())
        .args(["dump", "--config"])
        .arg(cfg)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(out)
        .spawn()
        .unwrap()
}

fn run_once(cfg: &Path) {
    let out = std::process::Command::new(strata_bin())
        .args(["dump", "--once", "--config"])
        .arg(cfg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dump --once failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sigterm(child: &mut std::process::Child) -> std::process::ExitStatus {
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "dump did not stop within 90 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_archives_every_offset_exactly_once() {
    let topic = unique("crash");
    create_topic(&topic, 4).await;
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    // Static membership: a restarted process takes over its partitions at once instead of
    // waiting for the killed one's session to expire.
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}{FAST_GROUP}\"group.instance.id\" = \"{}\"\n[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"jsonl\"\nmax_file_size = \"1MiB\"\n[limits]\nleftover_age_secs = 0\n",
            file_toml(&archive),
            unique("crash-member"),
            unique("crash-task")
        ),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let producer = start_producer(&topic, 4, stop.clone());
    let seed: u64 = rand::rng().random();
    eprintln!("crash test seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let log = dir.path().join("dump.log");
    for round in 0..10 {
        let assigned_before = count_in(&log, "Assigned");
        let mut child = spawn_dump(&cfg, &log);
        // Kill only once this process owns partitions, at a random moment after that.
        eventually(
            60,
            &format!("round {round}: partitions assigned"),
            || async { count_in(&log, "Assigned") > assigned_before },
        )
        .await;
        let wait = rng.random_range(200..2500);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        child.kill().unwrap(); // SIGKILL: no flush, no commit, no goodbye to the group
        child.wait().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let produced = producer.await.unwrap();
    // What the killed writers left (incomplete uploads, temp files, seals) is older than the
    // task's interval plus limits.leftover_age_secs (0 here) by now: the next start removes it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    run_once(&cfg);
    let stored = count_in(&log, " stored");
    assert!(
        stored >= 5,
        "the killed processes stored only {stored} objects; the test proves little"
    );
    let archived = assert_exactly_once(&FsStore::new(archive.clone()), &topic, 4).await;
    assert_eq!(archived, produced);
    // Nothing of the killed writers stays: the final run removed their temp files and seals,
    // and left none of its own.
    let litter: Vec<String> = walk_files(&archive)
        .into_iter()
        .filter(|p| p.contains("/.strata-") || p.contains("/.strata/"))
        .collect();
    assert!(litter.is_empty(), "leftovers: {litter:?}");
}

fn walk_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk_files(&e.path()));
        } else {
            out.push(e.path().display().to_string());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn two_processes_share_partitions_through_rebalances() {
    let topic = unique("rebalance");
    create_topic(&topic, 6).await;
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}{FAST_GROUP}[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"parquet\"\n",
            file_toml(&archive),
            unique("rebalance-task")
        ),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let producer = start_producer(&topic, 6, stop.clone());
    let (log_a, log_b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let mut a = spawn_dump(&cfg, &log_a);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut b = spawn_dump(&cfg, &log_b);
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(sigterm(&mut a).success(), "graceful stop of A");
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let produced = producer.await.unwrap();
    assert!(sigterm(&mut b).success(), "graceful stop of B");
    run_once(&cfg);
    let (la, lb) = (
        std::fs::read_to_string(&log_a).unwrap(),
        std::fs::read_to_string(&log_b).unwrap(),
    );
    assert!(la.contains(" stored"), "A stored nothing:\n{la}");
    assert!(lb.contains(" stored"), "B stored nothing:\n{lb}");
    assert!(lb.contains("Assigned"), "B never got partitions:\n{lb}");
    let archived = assert_exactly_once(&FsStore::new(archive), &topic, 6).await;
    assert_eq!(archived, produced);
}

/// A TCP proxy in front of LocalStack that can refuse connections: from strata's side the
/// store is gone (connection refused), while LocalStack keeps what it already stored.
struct Proxy {
    addr: std::net::SocketAddr,
    up: Arc<AtomicBool>,
}

impl Proxy {
    async fn start(target: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let flag = up.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if !flag.load(Ordering::Relaxed) {
                    drop(inbound); // refuse: close at once
                    continue;
                }
                let target = target.clone();
                let flag = flag.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = async { while flag.load(Ordering::Relaxed) { tokio::time::sleep(Duration::from_millis(50)).await } } => {}
                    }
                });
            }
        });
        Self { addr, up }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn store_outage_loses_nothing_and_commits_nothing_unstored() {
    init_logs();
    let topic = unique("outage");
    create_topic(&topic, 2).await;
    let prefix = unique("outage");
    let endpoint = s3_endpoint();
    let proxy = Proxy::start(endpoint.trim_start_matches("http://").to_string()).await;
    let direct = s3_store(&prefix).await;
    let group = unique("outage-task");
    let toml = format!(
        "{}[[tasks]]\nname = \"{group}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"jsonl\"\n",
        s3_toml(&prefix).replace(&endpoint, &format!("http://{}", proxy.addr)).replace("[store]", "[store]\nmax_attempts = 2")
    );
    let cfg = config(&toml);
    let stop = Arc::new(AtomicBool::new(false));
    let run = tokio::spawn({
        let stop = stop.clone();
        async move { strata::dump::run(&cfg, strata::dump::DumpOptions::default(), stop).await }
    });
    produce(&sample_records(
        &topic,
        200,
        2,
        chrono::Utc::now().timestamp_millis(),
    ))
    .await;
    // Archive objects only: seals (strata's note of where an object not yet committed ends)
    // are bookkeeping under .strata/.
    let archived = || async {
        direct
            .list("")
            .await
            .unwrap()
            .into_iter()
            .filter(|o| !o.key.contains(".strata/"))
            .count()
    };
    eventually(60, "objects before the outage", || async {
        archived().await >= 2
    })
    .await;

    proxy.up.store(false, Ordering::Relaxed);
    // Connections already open are cut within 50 ms; what was on its way before may land.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = archived().await;
    for _ in 0..5 {
        produce(&sample_records(
            &topic,
            200,
            2,
            chrono::Utc::now().timestamp_millis(),
        ))
        .await;
        tokio::time::sleep(Duration::from_millis(800)).await;
    }
    assert_eq!(
        archived().await,
        before,
        "nothing can be stored while the store is down"
    );
    // The committed offsets must not cover anything that was not stored.
    let committed = committed_offsets(&group, &topic, 2);
    let objects = read_archive(direct.as_ref(), "", TextOptions::default()).await;
    for p in 0..2 {
        let stored_end = objects
            .iter()
            .filter(|o| o.name.partition == p)
            .flat_map(|o| &o.records)
            .filter_map(|r| r.offset)
            .max()
            .map_or(0, |o| o + 1);
        assert!(
            committed[p as usize] <= stored_end,
            "partition {p}: committed {} beyond what is stored ({stored_end})",
            committed[p as usize]
        );
    }

    proxy.up.store(true, Ordering::Relaxed);
    let admin = strata::kafka::Admin::new(&kafka_config()).unwrap();
    let total: i64 = (0..2).map(|p| admin.watermarks(&topic, p).unwrap().1).sum();
    eventually(
        120,
        "everything stored after the store returned",
        || async {
            read_archive(direct.as_ref(), "", TextOptions::default())
                .await
                .iter()
                .map(|o| o.records.len() as i64)
                .sum::<i64>()
                >= total
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    run.await.unwrap().unwrap();
    assert_eq!(
        assert_exactly_once(direct.as_ref(), &topic, 2).await as i64,
        total
    );
    let committed = committed_offsets(&group, &topic, 2);
    for p in 0..2 {
        assert_eq!(
            committed[p as usize],
            admin.watermarks(&topic, p).unwrap().1,
            "partition {p} fully committed at the end"
        );
    }
}

/// The group's committed offsets (OffsetFetch only; this consumer never joins the group).
fn committed_offsets(group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    (0..partitions)
        .map(|p| match got.find_partition(topic, p).map(|e| e.offset()) {
            Some(rdkafka::Offset::Offset(o)) => o,
            _ => 0,
        })
        .collect()
}
