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
    produce_until(topic, partitions, (100, Duration::from_millis(30)), stop)
}

/// Produces `pace.0` records of 300 bytes, then waits `pace.1`, until `stop`; the number
/// produced is the task's result.
fn produce_until(
    topic: &str,
    partitions: i32,
    pace: (usize, Duration),
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    let topic = topic.to_string();
    tokio::spawn(async move {
        let mut n = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let mut batch = sample_records(
                &topic,
                pace.0,
                partitions,
                chrono::Utc::now().timestamp_millis(),
            );
            for r in &mut batch {
                r.value = Some(vec![b'x'; 300]);
            }
            produce(&batch).await;
            n += batch.len();
            tokio::time::sleep(pace.1).await;
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

/// Starts `strata dump` `rounds` times and kills it with SIGKILL (no flush, no commit, no
/// goodbye to the group) at a random moment within `wait_ms` after it owns partitions.
async fn kill_rounds(cfg: &Path, log: &Path, rounds: usize, wait_ms: std::ops::Range<u64>) {
    let seed: u64 = rand::rng().random();
    eprintln!("crash test seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for round in 0..rounds {
        let assigned_before = count_in(log, "Assigned");
        let mut child = spawn_dump(cfg, log);
        eventually(
            60,
            &format!("round {round}: partitions assigned"),
            || async { count_in(log, "Assigned") > assigned_before },
        )
        .await;
        let wait = rng.random_range(wait_ms.clone());
        tokio::time::sleep(Duration::from_millis(wait)).await;
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

async fn kill_9_scenario(archive: Archive) {
    let topic = unique("crash");
    create_topic(&topic, 4).await;
    let dir = tempfile::tempdir().unwrap();
    // Static membership: a restarted process takes over its partitions at once instead of
    // waiting for the killed one's session to expire.
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}{FAST_GROUP}\"group.instance.id\" = \"{}\"\n[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"jsonl\"\nmax_file_size = \"1MiB\"\n[limits]\nleftover_age_secs = 0\n",
            archive.toml(None),
            unique("crash-member"),
            unique("crash-task")
        ),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let producer = start_producer(&topic, 4, stop.clone());
    let log = dir.path().join("dump.log");
    // A process opens its first objects about a second after its assignment and closes them a
    // second later: kills up to 4 s in land before, during and after the first uploads.
    kill_rounds(&cfg, &log, 10, 300..4000).await;
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
    let store = archive.store().await;
    let archived = assert_exactly_once(store.as_ref(), &topic, 4).await;
    assert_eq!(archived, produced);
    // Nothing of the killed writers stays: the final run removed their incomplete uploads (or
    // temp files) and the seals of attempts that lost, and every object has its seal.
    let mut litter: Vec<String> = store
        .incomplete("")
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.handle)
        .collect();
    litter.extend(index_problems(store.as_ref(), "", true).await);
    if let Archive::Dir(d) = &archive {
        litter.extend(
            walk_files(&d.path().join("archive"))
                .into_iter()
                .filter(|p| p.contains("/.strata-")),
        );
    }
    assert!(litter.is_empty(), "leftovers: {litter:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_archives_every_offset_exactly_once() {
    kill_9_scenario(Archive::fs()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_archives_every_offset_exactly_once_on_s3() {
    kill_9_scenario(Archive::s3()).await;
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

async fn rebalance_scenario(archive: Archive) {
    let topic = unique("rebalance");
    create_topic(&topic, 6).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}{FAST_GROUP}[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"parquet\"\n",
            archive.toml(None),
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
    let store = archive.store().await;
    let archived = assert_exactly_once(store.as_ref(), &topic, 6).await;
    assert_eq!(archived, produced);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_processes_share_partitions_through_rebalances() {
    rebalance_scenario(Archive::fs()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_processes_share_partitions_through_rebalances_on_s3() {
    rebalance_scenario(Archive::s3()).await;
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

/// The group's committed offsets on the dev broker (-1: none).
fn committed_offsets(group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    committed_offsets_on(&kafka_config(), group, topic, partitions)
}

// ------------------------------------------------------------------------------------------
// Several objects in flight, zombies, --once across members, errors that cannot heal.

/// Where a fault test archives: a local directory or a prefix in LocalStack.
enum Archive {
    Dir(tempfile::TempDir),
    S3(String),
}

impl Archive {
    fn fs() -> Self {
        Archive::Dir(tempfile::tempdir().unwrap())
    }

    fn s3() -> Self {
        Archive::S3(unique("faults"))
    }

    /// The `[kafka]` and `[store]` sections; `endpoint` replaces LocalStack's (a proxy).
    fn toml(&self, endpoint: Option<&str>) -> String {
        match self {
            Archive::Dir(d) => file_toml(&d.path().join("archive")),
            Archive::S3(prefix) => {
                let t = s3_toml(prefix);
                match endpoint {
                    Some(e) => t.replace(&s3_endpoint(), e),
                    None => t,
                }
            }
        }
    }

    async fn store(&self) -> Arc<dyn ObjectStore> {
        match self {
            Archive::Dir(d) => Arc::new(FsStore::new(d.path().join("archive"))),
            Archive::S3(prefix) => s3_store(prefix).await,
        }
    }
}

fn spawn_dump_debug(cfg: &Path, log: &Path, extra: &[&str]) -> std::process::Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    std::process::Command::new(strata_bin())
        .args(["dump"])
        .args(extra)
        .arg("--config")
        .arg(cfg)
        .env("RUST_LOG", "info,strata=debug")
        .stdout(std::process::Stdio::null())
        .stderr(out)
        .spawn()
        .unwrap()
}

/// A proxy that can hold every byte in both directions (connections stay open, nothing
/// moves) until released: a store that hangs mid-request.
struct HoldingProxy {
    addr: std::net::SocketAddr,
    held: Arc<AtomicBool>,
}

impl HoldingProxy {
    async fn start(target: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let held = Arc::new(AtomicBool::new(false));
        let gate = held.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let (target, gate) = (target.clone(), gate.clone());
                tokio::spawn(async move {
                    let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    let (ri, wi) = inbound.into_split();
                    let (ro, wo) = outbound.into_split();
                    tokio::join!(pump(ri, wo, gate.clone()), pump(ro, wi, gate));
                });
            }
        });
        Self { addr, held }
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    gate: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while gate.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A member stopped past its session timeout while its object is on its way, then resumed
/// after the partition's new owner stored and committed from the same offset: the zombie's
/// object finds its key taken and must neither replace nor duplicate the new owner's.
async fn zombie_scenario(archive: Archive) {
    let topic = unique("zombie");
    create_topic(&topic, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let task = unique("zombie-task");
    let body = format!(
        "[[tasks]]\nname = \"{task}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 2\nformat = \"jsonl\"\n"
    );
    // The zombie hears of its lost membership late (rare heartbeats), the new owner at once.
    let proxy = match &archive {
        Archive::S3(_) => {
            Some(HoldingProxy::start(s3_endpoint().trim_start_matches("http://").to_string()).await)
        }
        Archive::Dir(_) => None,
    };
    let zombie_cfg = dir.path().join("zombie.toml");
    std::fs::write(
        &zombie_cfg,
        format!(
            "{}[kafka.properties]\n\"session.timeout.ms\" = 6000\n\"heartbeat.interval.ms\" = 3000\n{body}",
            archive.toml(proxy.as_ref().map(|p| format!("http://{}", p.addr)).as_deref())
        ),
    )
    .unwrap();
    let owner_cfg = dir.path().join("owner.toml");
    std::fs::write(
        &owner_cfg,
        format!("{}{FAST_GROUP}{body}", archive.toml(None)),
    )
    .unwrap();
    let (zlog, wlog) = (dir.path().join("zombie.log"), dir.path().join("owner.log"));
    let mut zombie = spawn_dump_debug(&zombie_cfg, &zlog, &[]);
    eventually(60, "the zombie-to-be owns the partition", || async {
        count_in(&zlog, "Assigned") > 0
    })
    .await;
    let ts = chrono::Utc::now().timestamp_millis();
    produce(&sample_records(&topic, 100, 1, ts)).await;
    eventually(30, "the zombie-to-be opened an object", || async {
        count_in(&zlog, "object opened") > 0
    })
    .await;
    if let Some(p) = &proxy {
        // On S3 the object's way to the store hangs: the seal or the upload is in flight when
        // the member stops, and goes on when it resumes.
        p.held.store(true, Ordering::Relaxed);
        eventually(30, "the zombie-to-be closed its object", || async {
            count_in(&zlog, "object closed") > 0
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    signal(&zombie, "STOP");
    produce(&sample_records(&topic, 100, 1, ts + 1)).await;
    let mut owner = spawn_dump(&owner_cfg, &wlog);
    eventually(90, "the new owner stored objects", || async {
        count_in(&wlog, " stored") >= 1
    })
    .await;
    if let Some(p) = &proxy {
        p.held.store(false, Ordering::Relaxed);
    }
    signal(&zombie, "CONT");
    let conflict = || {
        count_in(&zlog, "already stored")
            + count_in(&zlog, "archived already")
            + count_in(&zlog, "stored and committed by another member")
    };
    if proxy.is_some() {
        let deadline = Instant::now() + Duration::from_secs(60);
        while conflict() == 0 {
            assert!(
                Instant::now() < deadline,
                "the zombie never met the new owner's object; its log:\n{}",
                std::fs::read_to_string(&zlog).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    } else {
        // Without a way to hold a local write, the zombie may just as well hear of its lost
        // membership first; the outcome must be exact either way.
        tokio::time::sleep(Duration::from_secs(5)).await;
        eprintln!("file:// zombie met the owner's object: {}", conflict() > 0);
    }
    assert!(sigterm(&mut owner).success(), "graceful stop of the owner");
    let _ = sigterm(&mut zombie);
    run_once(&owner_cfg);
    let store = archive.store().await;
    assert_eq!(assert_exactly_once(store.as_ref(), &topic, 1).await, 200);
    let zombie_text = std::fs::read_to_string(&zlog).unwrap();
    assert!(!zombie_text.contains("task failed"), "{zombie_text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn zombie_member_cannot_replace_what_the_new_owner_stored_on_s3() {
    zombie_scenario(Archive::s3()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn zombie_member_cannot_replace_what_the_new_owner_stored_on_file() {
    zombie_scenario(Archive::fs()).await;
}

/// An Iceberg task's member stopped (SIGSTOP) past its session timeout with records read and
/// not committed, while the partition's new owner commits them; resumed, the zombie commits
/// nothing: the table's offsets are the new owner's, so its commit is refused (or its revoke
/// comes first and drops its files). The table holds every record exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn iceberg_zombie_member_cannot_commit_over_the_new_owner() {
    let topic = unique("ice-zombie");
    create_topic(&topic, 1).await;
    let (dir, root) = common::iceberg::scratch();
    let db = dir.path().join("catalog.db");
    let task = unique("ice-zombie-task");
    let body = |interval: u64| {
        format!(
            "[[tasks]]\nname = \"{task}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = {interval}\nformat = \"iceberg\"\ndirectory = \"lake\"\n[tasks.iceberg]\ncatalog_file = \"{}\"\n",
            db.display()
        )
    };
    // The zombie cuts rarely and hears of its lost membership late (rare heartbeats).
    let zombie_cfg = dir.path().join("zombie.toml");
    std::fs::write(
        &zombie_cfg,
        format!(
            "{}[kafka.properties]\n\"session.timeout.ms\" = 6000\n\"heartbeat.interval.ms\" = 3000\n{}",
            file_toml(&root),
            body(30)
        ),
    )
    .unwrap();
    let owner_cfg = dir.path().join("owner.toml");
    std::fs::write(
        &owner_cfg,
        format!("{}{FAST_GROUP}{}", file_toml(&root), body(2)),
    )
    .unwrap();
    let (zlog, wlog) = (dir.path().join("zombie.log"), dir.path().join("owner.log"));
    let started = Instant::now();
    let mut zombie = spawn_dump_debug(&zombie_cfg, &zlog, &[]);
    eventually(60, "the zombie-to-be holds the partition", || async {
        count_in(&zlog, "partition starts") > 0
    })
    .await;
    let ts = chrono::Utc::now().timestamp_millis();
    produce(&sample_records(&topic, 100, 1, ts)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    signal(&zombie, "STOP");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "stopped before its first cut"
    );
    produce(&sample_records(&topic, 100, 1, ts + 1)).await;
    let mut owner = spawn_dump(&owner_cfg, &wlog);
    eventually(90, "the new owner committed", || async {
        count_in(&wlog, "committed to the table") >= 1
    })
    .await;
    // Resumed past its cut time: its first tick cuts, unless the revoke came first.
    tokio::time::sleep(Duration::from_secs(32).saturating_sub(started.elapsed())).await;
    signal(&zombie, "CONT");
    let deadline = Instant::now() + Duration::from_secs(30);
    let (refused, dropped) = loop {
        let (r, d) = (
            count_in(&zlog, "a commit was refused"),
            count_in(&zlog, "uncommitted data files are removed"),
        );
        if r + d > 0 || Instant::now() > deadline {
            break (r, d);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let zombie_text = std::fs::read_to_string(&zlog).unwrap();
    assert!(
        refused + dropped > 0,
        "the zombie neither failed its commit nor dropped its files:\n{zombie_text}"
    );
    eprintln!("zombie: commit refused {refused}, files dropped on revoke {dropped}");
    assert!(sigterm(&mut owner).success(), "graceful stop of the owner");
    let _ = sigterm(&mut zombie);
    assert!(
        !zombie_text.contains("committed to the table"),
        "the zombie committed:\n{zombie_text}"
    );
    run_once(&owner_cfg);
    let table = format!("kafka.{}", topic.replace('-', "_"));
    let props = common::iceberg::sql_catalog(
        &db,
        &format!("file://{}/lake", root.display()),
        serde_json::json!({}),
    );
    let read = common::iceberg::pyiceberg_read(&props, &table);
    assert_eq!(common::iceberg::check_table(&read, &topic), 200);
    // What the zombie wrote and never committed is gone.
    let files = walk_files(&root.join("lake"))
        .into_iter()
        .filter(|f| f.ends_with(".parquet"))
        .count();
    assert_eq!(
        files as u64,
        read["files"].as_u64().unwrap(),
        "no orphan data files"
    );
}

/// A member joins while the member holding the partitions has a commit in flight (the test's
/// REST catalog holds commits while a gate file exists): the holder finishes that commit before
/// it lets the partitions go, so the joiner starts only after it landed, at the table's offsets
/// after it. Before the fence the joiner started at once from the offsets before the held
/// commit, and its first commit was refused as a zombie's. Then: no commit refused, every
/// record in the table once.
#[tokio::test(flavor = "multi_thread")]
async fn iceberg_member_joining_during_a_commit_starts_after_it() {
    let topic = unique("ice-join");
    create_topic(&topic, 4).await;
    let (dir, root) = common::iceberg::scratch();
    let gate = dir.path().join("gate");
    let held = dir.path().join("gate.held");
    let server = common::iceberg::RestCatalog::gated(
        &dir.path().join("rest.db"),
        &format!("file://{}/lake", root.display()),
        &gate,
    );
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}{FAST_GROUP}[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"iceberg\"\ndirectory = \"lake\"\n[tasks.iceberg]\ncatalog = \"rest\"\nuri = \"{}\"\n",
            file_toml(&root),
            unique("ice-join-task"),
            server.uri
        ),
    );
    // Records keep coming, so every cut commits every partition the member holds.
    let stop = Arc::new(AtomicBool::new(false));
    let producer = produce_until(&topic, 4, (40, Duration::from_millis(200)), stop.clone());
    let first_log = dir.path().join("first.log");
    let mut first = spawn_dump(&cfg, &first_log);
    eventually(90, "the first member committed", || async {
        count_in(&first_log, "committed to the table") >= 1
    })
    .await;
    std::fs::write(&gate, "").unwrap();
    eventually(30, "a commit of the first member held", || async {
        held.exists()
    })
    .await;
    let log = dir.path().join("joiner.log");
    let mut joiner = spawn_dump(&cfg, &log);
    // The joiner needs two rebalances to get its partitions (about a second); give it eight.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until && count_in(&log, "partition starts") == 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started_early = count_in(&log, "partition starts");
    std::fs::remove_file(&gate).unwrap();
    assert_eq!(
        started_early,
        0,
        "the joiner started partitions while their old owner's commit was in flight:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    while count_in(&log, "committed to the table") < 2
        && count_in(&log, "a commit was refused") == 0
    {
        assert!(
            Instant::now() < deadline,
            "the joiner neither committed twice nor failed in 90 s:\n{}\nthe first member:\n{}",
            std::fs::read_to_string(&log).unwrap(),
            std::fs::read_to_string(&first_log).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = sigterm(&mut joiner);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("a commit was refused"),
        "the joiner was taken for a zombie:\n{text}"
    );
    assert!(
        status.success(),
        "the joiner stopped with {status}:\n{text}"
    );
    stop.store(true, Ordering::Relaxed);
    let produced = producer.await.unwrap();
    let status = sigterm(&mut first);
    let text = std::fs::read_to_string(&first_log).unwrap();
    assert!(
        status.success(),
        "the first member stopped with {status}:\n{text}"
    );
    assert!(!text.contains("a commit was refused"), "{text}");
    assert!(
        !text.contains("partitions given up while a commit was still in flight"),
        "a revoke waited past its bound:\n{text}"
    );
    run_once(&cfg);
    let table = format!("kafka.{}", topic.replace('-', "_"));
    let props = serde_json::json!({"type": "rest", "uri": server.uri});
    let read = common::iceberg::pyiceberg_read(&props, &table);
    assert_eq!(common::iceberg::check_table(&read, &topic), produced);
}

/// An Iceberg task killed with SIGKILL at three random moments while records keep coming, then
/// a final `--once`: every offset is in the table exactly once, no two commits overlap, and
/// the data files no snapshot names (uploads the kills cut off from their commit) are only
/// orphans for the engine's clean-up, never rows.
#[tokio::test(flavor = "multi_thread")]
async fn iceberg_kill_9_at_random_moments_keeps_every_offset_exactly_once() {
    let topic = unique("ice-crash");
    create_topic(&topic, 3).await;
    let (dir, root) = common::iceberg::scratch();
    let db = dir.path().join("catalog.db");
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}{FAST_GROUP}\"group.instance.id\" = \"{}\"\n[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"iceberg\"\nmax_file_size = \"1MiB\"\ndirectory = \"lake\"\n[tasks.iceberg]\ncatalog_file = \"{}\"\n",
            file_toml(&root),
            unique("ice-crash-member"),
            unique("ice-crash-task"),
            db.display()
        ),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let producer = start_producer(&topic, 3, stop.clone());
    let log = dir.path().join("dump.log");
    kill_rounds(&cfg, &log, 3, 1500..4000).await;
    stop.store(true, Ordering::Relaxed);
    let produced = producer.await.unwrap();
    run_once(&cfg);
    let commits = count_in(&log, "committed to the table");
    assert!(
        commits >= 2,
        "the killed processes committed {commits} times; the test proves little"
    );
    let table = format!("kafka.{}", topic.replace('-', "_"));
    let props = common::iceberg::sql_catalog(
        &db,
        &format!("file://{}/lake", root.display()),
        serde_json::json!({}),
    );
    let read = common::iceberg::pyiceberg_read(&props, &table);
    assert_eq!(common::iceberg::check_table(&read, &topic), produced);
    let on_disk = walk_files(&root.join("lake"))
        .into_iter()
        .filter(|f| f.ends_with(".parquet"))
        .count() as u64;
    let referenced = read["files"].as_u64().unwrap();
    assert!(on_disk >= referenced, "every file the table names exists");
    eprintln!(
        "{commits} commits before the last run; {referenced} data files in the table, {} orphans of killed uploads",
        on_disk - referenced
    );
}

/// The archive holds every offset below `high` of each partition, contiguously from 0.
async fn archived_up_to(store: &dyn ObjectStore, topic: &str, high: &[i64]) -> Result<(), String> {
    let objects = read_archive(store, "", TextOptions::default()).await;
    for (p, &h) in high.iter().enumerate() {
        let mut offsets: Vec<i64> = objects
            .iter()
            .filter(|o| o.name.topic == topic && o.name.partition == p as i32)
            .flat_map(|o| o.records.iter().filter_map(|r| r.offset))
            .collect();
        offsets.sort_unstable();
        let want: Vec<i64> = (0..h).collect();
        if offsets.len() < want.len() || offsets[..want.len()] != want[..] {
            return Err(format!(
                "partition {p}: {} of {h} offsets archived",
                offsets.iter().filter(|o| **o < h).count()
            ));
        }
    }
    Ok(())
}

/// `--once` while another member of the group holds some partitions (a continuous dump still
/// running, then one just killed): it exits 0 only once every partition is archived up to the
/// high watermarks noted at its start, and a deadline gives exit code 3 with the partitions.
#[tokio::test(flavor = "multi_thread")]
async fn once_covers_partitions_held_by_other_members() {
    let topic = unique("overlap");
    create_topic(&topic, 6).await;
    let archive = Archive::fs();
    let dir = tempfile::tempdir().unwrap();
    let task = unique("overlap-task");
    let cfg = |interval: u64| {
        let p = dir.path().join(format!("i{interval}.toml"));
        std::fs::write(
            &p,
            format!(
                "{}{FAST_GROUP}[[tasks]]\nname = \"{task}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = {interval}\nformat = \"jsonl\"\n",
                archive.toml(None)
            ),
        )
        .unwrap();
        p
    };
    let (continuous_cfg, once_cfg, slow_cfg) = (cfg(4), cfg(1), cfg(600));
    let admin = strata::kafka::Admin::new(&kafka_config()).unwrap();
    let high = || {
        (0..6)
            .map(|p| admin.watermarks(&topic, p).unwrap().1)
            .collect::<Vec<i64>>()
    };
    let store = archive.store().await;

    // 1. A continuous dump holds the partitions; --once joins, gets half, waits for the rest.
    let clog = dir.path().join("continuous.log");
    let mut continuous = spawn_dump(&continuous_cfg, &clog);
    eventually(60, "the continuous dump owns partitions", || async {
        count_in(&clog, "Assigned") > 0
    })
    .await;
    produce(&sample_records(
        &topic,
        600,
        6,
        chrono::Utc::now().timestamp_millis(),
    ))
    .await;
    let noted = high();
    let out = std::process::Command::new(strata_bin())
        .args(["dump", "--once", "--config"])
        .arg(&once_cfg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "--once failed:\n{text}");
    archived_up_to(store.as_ref(), &topic, &noted)
        .await
        .unwrap_or_else(|e| panic!("--once exited 0 but {e}:\n{text}"));
    assert!(
        text.contains("covered_by=\"another member\""),
        "some partitions were covered by the continuous member:\n{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.contains("covered_by=")).count(),
        6,
        "the summary lists every partition:\n{text}"
    );

    // 2. The continuous dump is killed; --once right after must wait out its session.
    continuous.kill().unwrap();
    continuous.wait().unwrap();
    produce(&sample_records(
        &topic,
        600,
        6,
        chrono::Utc::now().timestamp_millis(),
    ))
    .await;
    let noted = high();
    run_once(&once_cfg);
    archived_up_to(store.as_ref(), &topic, &noted)
        .await
        .unwrap();

    // 3. A member that holds partitions and commits nothing in time: exit 3, naming them.
    let slog = dir.path().join("slow.log");
    let mut slow = spawn_dump(&slow_cfg, &slog);
    eventually(60, "the slow member owns partitions", || async {
        count_in(&slog, "Assigned") > 0
    })
    .await;
    produce(&sample_records(
        &topic,
        600,
        6,
        chrono::Utc::now().timestamp_millis(),
    ))
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let out = std::process::Command::new(strata_bin())
        .args(["dump", "--once", "--once-deadline", "8", "--config"])
        .arg(&once_cfg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("did not cover every partition") && text.contains(&format!("{topic}-")),
        "{text}"
    );
    assert!(sigterm(&mut slow).success());
    run_once(&once_cfg);
    assert_eq!(assert_exactly_once(store.as_ref(), &topic, 6).await, 1800);
}

/// A crash between storing an object and committing its offsets leaves the object and its
/// seal. The next start removes crash leftovers but keeps that seal, finds the object's key
/// taken when it writes the records again, and adopts the object (no duplicate, no stall).
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_store_and_commit_is_adopted_after_the_leftover_clean_up() {
    let topic = unique("uncommitted");
    create_topic(&topic, 1).await;
    let archive = Archive::fs();
    let dir = tempfile::tempdir().unwrap();
    let task = unique("uncommitted-task");
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}[[tasks]]\nname = \"{task}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"jsonl\"\n[limits]\nleftover_age_secs = 0\n",
            archive.toml(None)
        ),
    );
    produce(&sample_records(
        &topic,
        100,
        1,
        chrono::Utc::now().timestamp_millis(),
    ))
    .await;
    run_once(&cfg);
    let store = archive.store().await;
    let objects: Vec<String> = store
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .filter(|k| !k.contains(".strata/"))
        .collect();
    assert_eq!(objects.len(), 1, "{objects:?}");
    let key = &objects[0];
    let tag = store
        .tag_of(key)
        .await
        .unwrap()
        .expect("a stored object has a tag");
    // What a crashed writer of a strata version before the kept index left: the seal it wrote
    // before the object where such versions wrote it (none in the index), and no commit.
    for s in store.list(".strata/index/").await.unwrap() {
        store.delete(&s.key).await.unwrap();
    }
    let seal = format!(".strata/seals/{topic}/0/{:020}/{tag}", 0);
    let body = format!(r#"{{"key":"{key}","last_offset":99,"next_offset":100,"records":100}}"#);
    store.put(&seal, body.into_bytes().into()).await.unwrap();
    // And the seal of an object a crash kept from becoming visible (killed between the seal
    // and the object): nothing ever finds it, so the clean-up must remove it.
    let orphan = format!(".strata/seals/{topic}/0/{:020}/never-stored", 100);
    let missing = key.replace(&format!("{:020}", 0), &format!("{:020}", 100));
    let body = format!(r#"{{"key":"{missing}","last_offset":149,"next_offset":150,"records":50}}"#);
    store.put(&orphan, body.into_bytes().into()).await.unwrap();
    {
        use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
        let c: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .set("group.id", &task)
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, rdkafka::Offset::Offset(0))
            .unwrap();
        c.commit(&tpl, CommitMode::Sync).unwrap();
    }
    assert_eq!(committed_offsets(&task, &topic, 1), vec![0]);
    // Older than the task's interval plus leftover_age_secs: a leftover by age.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let out = std::process::Command::new(strata_bin())
        .args(["dump", "--once", "--once-deadline", "30", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("adopting it"), "{text}");
    assert_eq!(assert_exactly_once(store.as_ref(), &topic, 1).await, 100);
    assert_eq!(committed_offsets(&task, &topic, 1), vec![100]);
    let left: Vec<String> = store
        .list(".strata/seals/")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert!(
        left.is_empty(),
        "the adopted object's seal moved into the index, the orphaned one is removed: {left:?}"
    );
    assert_eq!(
        index_problems(store.as_ref(), "", true).await,
        Vec::<String>::new()
    );
}

/// An upload cut off mid-part (the store gone during it) leaves no incomplete multipart upload
/// once the store is back, and everything is stored exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn an_upload_cut_off_mid_part_leaves_no_incomplete_upload() {
    init_logs();
    let topic = unique("cutoff");
    create_topic(&topic, 1).await;
    let prefix = unique("cutoff");
    let proxy = Proxy::start(s3_endpoint().trim_start_matches("http://").to_string()).await;
    let direct = s3_store(&prefix).await;
    let toml = format!(
        "{}[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 5\nformat = \"jsonl\"\nmax_file_size = \"64MiB\"\n",
        s3_toml(&prefix).replace(&s3_endpoint(), &format!("http://{}", proxy.addr)).replace("[store]", "[store]\nmax_attempts = 2"),
        unique("cutoff-task")
    );
    let cfg = config(&toml);
    let stop = Arc::new(AtomicBool::new(false));
    let run = tokio::spawn({
        let stop = stop.clone();
        async move { strata::dump::run(&cfg, strata::dump::DumpOptions::default(), stop).await }
    });
    // 12 MiB: more than two parts of 5 MiB, so the object is a multipart upload.
    let mut records = sample_records(&topic, 1200, 1, chrono::Utc::now().timestamp_millis());
    for r in &mut records {
        r.value = Some(vec![b'v'; 10 << 10]);
    }
    produce(&records).await;
    eventually(60, "a multipart upload under way", || async {
        !direct.incomplete("").await.unwrap().is_empty()
    })
    .await;
    proxy.up.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.up.store(true, Ordering::Relaxed);
    eventually(
        120,
        "everything stored after the store returned",
        || async {
            read_archive(direct.as_ref(), "", TextOptions::default())
                .await
                .iter()
                .map(|o| o.records.len())
                .sum::<usize>()
                >= 1200
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    run.await.unwrap().unwrap();
    eventually(60, "no incomplete multipart upload left", || async {
        direct.incomplete("").await.unwrap().is_empty()
    })
    .await;
    assert_eq!(assert_exactly_once(direct.as_ref(), &topic, 1).await, 1200);
}

/// A bucket deleted under a running dump: a clear error naming it and a non-zero exit, not an
/// endless silent retry.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_bucket_stops_the_dump_with_a_clear_error() {
    let topic = unique("nobucket");
    create_topic(&topic, 1).await;
    let bucket = unique("strata-gone").to_lowercase();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"jsonl\"\n",
            s3_toml("p").replace(TEST_BUCKET, &bucket),
            unique("nobucket-task")
        ),
    );
    let log = dir.path().join("dump.log");
    let mut child = spawn_dump(&cfg, &log);
    eventually(60, "assigned", || async { count_in(&log, "Assigned") > 0 }).await;
    produce(&sample_records(
        &topic,
        10,
        1,
        chrono::Utc::now().timestamp_millis(),
    ))
    .await;
    eventually(60, "stored", || async { count_in(&log, " stored") > 0 }).await;
    // Empty the bucket and delete it (again while the running dump still puts something there:
    // a seal, or an upload begun).
    let store = strata::store::open(&config(&std::fs::read_to_string(&cfg).unwrap()).store)
        .await
        .unwrap();
    let mut deleted = false;
    for _ in 0..5 {
        for o in store.list("").await.unwrap() {
            store.delete(&o.key).await.unwrap();
        }
        for w in store.incomplete("").await.unwrap() {
            store.abort_incomplete(&w).await.unwrap();
        }
        let status = std::process::Command::new(std::env::var("STRATA_TEST_PYTHON").unwrap())
            .args(["-c", &format!("import boto3; boto3.client('s3', endpoint_url='{}', aws_access_key_id='test', aws_secret_access_key='test', region_name='us-east-1').delete_bucket(Bucket='{bucket}')", s3_endpoint())])
            .status()
            .unwrap();
        if status.success() {
            deleted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(deleted, "delete the bucket");
    produce(&sample_records(
        &topic,
        10,
        1,
        chrono::Utc::now().timestamp_millis(),
    ))
    .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the dump kept running without its bucket:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{text}");
    assert!(
        text.contains(&bucket) && text.contains("does not exist"),
        "{text}"
    );
}

/// A store that checks signatures (s3d, built by ./dev) starts refusing strata's
/// credentials mid-run: a clear error and a non-zero exit.
#[tokio::test(flavor = "multi_thread")]
async fn refused_credentials_stop_the_dump_with_a_clear_error() {
    let topic = unique("denied");
    create_topic(&topic, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("s3s");
    std::fs::create_dir_all(data.join("strata-denied")).unwrap();
    let port = free_port();
    let server = S3d::start(&data, port, "strata", "right-secret").await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let cfg = write_config(
        dir.path(),
        &format!(
            "[kafka]\nbootstrap_servers = \"{}\"\n[store]\nurl = \"s3://strata-denied/p\"\nendpoint = \"{endpoint}\"\naccess_key = \"strata\"\nsecret_key = \"${{S3_SECRET}}\"\nmax_attempts = 2\n[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"jsonl\"\n",
            bootstrap(),
            unique("denied-task")
        ),
    );
    let log = dir.path().join("dump.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = std::process::Command::new(strata_bin())
        .args(["dump", "--config"])
        .arg(&cfg)
        .env("S3_SECRET", "right-secret")
        .stdout(std::process::Stdio::null())
        .stderr(out)
        .spawn()
        .unwrap();
    eventually(60, "assigned", || async { count_in(&log, "Assigned") > 0 }).await;
    produce(&sample_records(
        &topic,
        10,
        1,
        chrono::Utc::now().timestamp_millis(),
    ))
    .await;
    eventually(60, "stored", || async { count_in(&log, " stored") > 0 }).await;
    // The store's key is rotated: strata's secret is no longer valid.
    drop(server);
    let server = S3d::start(&data, port, "strata", "rotated-secret").await;
    produce(&sample_records(
        &topic,
        10,
        1,
        chrono::Utc::now().timestamp_millis(),
    ))
    .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the dump kept retrying refused credentials:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("access denied") && text.contains("store.secret_key"),
        "{text}"
    );
    assert!(!text.contains("right-secret"), "the secret is not logged");
}

/// kill -9 at random moments holds for a CDC task too: every message archived (as table rows
/// or kept whole), no change twice, the repeats within the window left out across restarts
/// (the window travels with the committed offsets), and the tables give the source's state.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_keeps_cdc_tables_exact() {
    let topic = unique("cdc-crash");
    create_topic(&topic, 3).await;
    let archive = Archive::fs();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}{FAST_GROUP}\"group.instance.id\" = \"{}\"\n[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"parquet\"\ndirectory = \"cdc\"\n[tasks.cdc]\n[tasks.cdc.types.\"shop.orders\"]\nid = \"int\"\namount = \"decimal(10,2)\"\n[limits]\nleftover_age_secs = 0\n",
            archive.toml(None),
            unique("cdc-member"),
            unique("cdc-task")
        ),
    );
    let data = common::cdc::generate(&topic, 3, 3000, chrono::Utc::now().timestamp_millis(), 11);
    let records = data.records.clone();
    let producing = tokio::spawn(async move {
        for chunk in records.chunks(60) {
            produce(chunk).await;
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    });
    let log = dir.path().join("dump.log");
    // A bundle closes a second after its first record (and its window is read first): kills
    // later than that let most rounds store something, or the test proves little.
    kill_rounds(&cfg, &log, 6, 800..3000).await;
    producing.await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    run_once(&cfg);
    assert!(
        count_in(&log, " stored") >= 3,
        "the killed processes stored too little; the test proves little"
    );
    eprintln!(
        "stored {}, rewritten to an earlier end {}, window loads {}",
        count_in(&log, " stored"),
        count_in(&log, "ended elsewhere"),
        count_in(&log, "repeat window")
    );
    let store = archive.store().await;
    let admin = strata::kafka::Admin::new(&kafka_config()).unwrap();
    let marks: Vec<(i64, i64)> = (0..3)
        .map(|p| admin.watermarks(&topic, p).unwrap())
        .collect();
    let read = common::cdc::read_cdc_archive(store.as_ref(), "cdc/").await;
    read.assert_exactly_once(&marks);
    assert_eq!(read.rows.len(), data.changes, "changes in the tables");
    assert_eq!(read.sides["_errors"].len(), data.malformed);
    let Archive::Dir(d) = &archive else {
        unreachable!()
    };
    let tables: Vec<&str> = common::cdc::table_dirs().into_iter().collect();
    let (state, changes) = common::cdc::archive_state(&d.path().join("archive/cdc"), &tables);
    assert_eq!(changes, data.changes);
    assert_eq!(state, data.state);
    assert_eq!(
        index_problems(store.as_ref(), "cdc/", false).await,
        Vec::<String>::new()
    );
    assert!(store.list("cdc/.strata/seals/").await.unwrap().is_empty());
}

// ------------------------------------------------------------------------------------------
// Answers lost on the way, group offsets that went back, a member that crashed, retention.

/// A store between strata and the real one whose first finish of an archive object stores the
/// object and then reports the answer lost (a connection reset after the store answered). With
/// `then_unknown`, the next question about that key fails too, so the writer cannot tell at once
/// whether its object was stored.
#[derive(Debug, Clone)]
struct LosesAnAnswer {
    inner: Arc<dyn ObjectStore>,
    armed: Arc<AtomicBool>,
    fired: Arc<AtomicBool>,
    then_unknown: bool,
    hidden: Arc<std::sync::Mutex<Option<String>>>,
}

struct LosingUpload {
    inner: Box<dyn strata::store::MultipartUpload>,
    key: String,
    store: LosesAnAnswer,
}

#[async_trait::async_trait]
impl strata::store::MultipartUpload for LosingUpload {
    async fn write(&mut self, data: bytes::Bytes) -> Result<(), strata::store::StoreError> {
        self.inner.write(data).await
    }
    async fn finish(
        self: Box<Self>,
        mode: strata::store::Finish,
    ) -> Result<strata::store::Finished, strata::store::StoreError> {
        let s = self.store.clone();
        let key = self.key.clone();
        let r = self.inner.finish(mode).await?;
        if mode == strata::store::Finish::CreateNew && s.armed.swap(false, Ordering::SeqCst) {
            s.fired.store(true, Ordering::SeqCst);
            if s.then_unknown {
                *s.hidden.lock().unwrap() = Some(key.clone());
            }
            return Err(strata::store::StoreError::new(
                strata::store::ErrorKind::Unreachable,
                key,
                "connection reset by peer (the store's answer was lost)",
            ));
        }
        Ok(r)
    }
    async fn abort(self: Box<Self>) -> Result<(), strata::store::StoreError> {
        self.inner.abort().await
    }
    fn tag(&self) -> &str {
        self.inner.tag()
    }
}

#[async_trait::async_trait]
impl ObjectStore for LosesAnAnswer {
    async fn put(&self, key: &str, data: bytes::Bytes) -> Result<(), strata::store::StoreError> {
        self.inner.put(key, data).await
    }
    async fn put_multipart(
        &self,
        key: &str,
    ) -> Result<Box<dyn strata::store::MultipartUpload>, strata::store::StoreError> {
        let inner = self.inner.put_multipart(key).await?;
        if key.contains(".strata/") {
            return Ok(inner);
        }
        Ok(Box::new(LosingUpload {
            inner,
            key: key.to_string(),
            store: self.clone(),
        }))
    }
    async fn get(&self, key: &str) -> Result<bytes::Bytes, strata::store::StoreError> {
        self.inner.get(key).await
    }
    async fn get_range(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes, strata::store::StoreError> {
        self.inner.get_range(key, range).await
    }
    async fn head(
        &self,
        key: &str,
    ) -> Result<strata::store::ObjectMeta, strata::store::StoreError> {
        self.inner.head(key).await
    }
    async fn list(
        &self,
        prefix: &str,
    ) -> Result<Vec<strata::store::ObjectMeta>, strata::store::StoreError> {
        self.inner.list(prefix).await
    }
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<Vec<strata::store::ObjectMeta>, strata::store::StoreError> {
        self.inner.list_page(prefix, start_after, max).await
    }
    async fn delete(&self, key: &str) -> Result<(), strata::store::StoreError> {
        self.inner.delete(key).await
    }
    async fn check(&self) -> Result<(), strata::store::StoreError> {
        self.inner.check().await
    }
    async fn incomplete(
        &self,
        prefix: &str,
    ) -> Result<Vec<strata::store::Incomplete>, strata::store::StoreError> {
        self.inner.incomplete(prefix).await
    }
    async fn abort_incomplete(
        &self,
        write: &strata::store::Incomplete,
    ) -> Result<(), strata::store::StoreError> {
        self.inner.abort_incomplete(write).await
    }
    async fn tag_of(&self, key: &str) -> Result<Option<String>, strata::store::StoreError> {
        let hidden = {
            let mut h = self.hidden.lock().unwrap();
            if h.as_deref() == Some(key) {
                h.take()
            } else {
                None
            }
        };
        if hidden.is_some() {
            return Err(strata::store::StoreError::new(
                strata::store::ErrorKind::Unreachable,
                key,
                "timed out",
            ));
        }
        self.inner.tag_of(key).await
    }
    fn part_size(&self) -> usize {
        self.inner.part_size()
    }
    fn location(&self, key: &str) -> String {
        self.inner.location(key)
    }
}

/// The store kept the object but its answer was lost; the writer (or its retry, which finds
/// the key taken) must count the object as its own and go on, not rewind forever.
async fn lost_answer_scenario(archive: Archive, then_unknown: bool) {
    let topic = unique("lost-answer");
    create_topic(&topic, 2).await;
    produce(&sample_records(&topic, 200, 2, base_ts())).await;
    let task = unique("lost-task");
    let cfg = config(&format!(
        "{}[[tasks]]\nname = \"{task}\"\ntopics = [\"{topic}\"]\nformat = \"jsonl\"\n",
        archive.toml(None)
    ));
    let (armed, fired) = (
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(false)),
    );
    let (a, f) = (armed.clone(), fired.clone());
    let run = strata::dump::run_wrapped(
        &cfg,
        strata::dump::DumpOptions {
            once: true,
            once_deadline: Duration::from_secs(40),
        },
        Arc::new(AtomicBool::new(false)),
        move |inner| {
            Arc::new(LosesAnAnswer {
                inner,
                armed: a.clone(),
                fired: f.clone(),
                then_unknown,
                hidden: Default::default(),
            })
        },
    )
    .await;
    if let Err(e) = run {
        panic!("the run did not finish: {e}");
    }
    assert!(
        fired.load(Ordering::SeqCst),
        "no answer was lost: the test proves nothing"
    );
    let store = archive.store().await;
    assert_eq!(assert_exactly_once(store.as_ref(), &topic, 2).await, 200);
    assert_eq!(
        index_problems(store.as_ref(), "", true).await,
        Vec::<String>::new()
    );
    let admin = strata::kafka::Admin::new(&kafka_config()).unwrap();
    let highs: Vec<i64> = (0..2)
        .map(|p| admin.watermarks(&topic, p).unwrap().1)
        .collect();
    assert_eq!(committed_offsets(&task, &topic, 2), highs);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_answer_of_a_stored_object_counts_as_stored() {
    lost_answer_scenario(Archive::fs(), false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_answer_the_store_cannot_confirm_at_once_is_adopted_on_s3() {
    lost_answer_scenario(Archive::s3(), true).await;
}

fn run_once_output(cfg: &Path, deadline_secs: u64) -> (Option<i32>, String) {
    let out = std::process::Command::new(strata_bin())
        .args(["dump", "--once", "--once-deadline"])
        .arg(deadline_secs.to_string())
        .arg("--config")
        .arg(cfg)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Commits `offset` for every partition of `topic` in `group` (what
/// `kafka-consumer-groups --reset-offsets` does).
fn reset_group(group: &str, topic: &str, partitions: i32, offset: i64) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Offset(offset))
            .unwrap();
    }
    c.commit(&tpl, CommitMode::Sync).unwrap();
}

fn admin_client() -> rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap()
}

/// A scheduled backup whose group was reset to the earliest offsets (and later deleted) while
/// its objects remain: the next runs adopt what is archived and go on after it, exactly once.
async fn reset_scenario(archive: Archive) {
    let topic = unique("reset");
    create_topic(&topic, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let task = unique("reset-task");
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}[[tasks]]\nname = \"{task}\"\ntopics = [\"{topic}\"]\nformat = \"jsonl\"\n",
            archive.toml(None)
        ),
    );
    let batch = |n: usize| sample_records(&topic, n, 2, chrono::Utc::now().timestamp_millis());
    // Two runs: two objects per partition.
    produce(&batch(100)).await;
    run_once(&cfg);
    produce(&batch(100)).await;
    run_once(&cfg);
    reset_group(&task, &topic, 2, 0);
    produce(&batch(100)).await;
    let (code, text) = run_once_output(&cfg, 60);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("adopting"), "{text}");
    let store = archive.store().await;
    assert_eq!(assert_exactly_once(store.as_ref(), &topic, 2).await, 300);
    // The group is gone altogether (deleted, or its offsets expired): the archive says where.
    let deleted = admin_client()
        .delete_groups(&[task.as_str()], &rdkafka::admin::AdminOptions::new())
        .await
        .unwrap();
    assert!(deleted.iter().all(|r| r.is_ok()), "{deleted:?}");
    assert_eq!(committed_offsets(&task, &topic, 2), vec![-1, -1]);
    produce(&batch(100)).await;
    let (code, text) = run_once_output(&cfg, 60);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(assert_exactly_once(store.as_ref(), &topic, 2).await, 400);
    assert_eq!(
        index_problems(store.as_ref(), "", true).await,
        Vec::<String>::new()
    );
    let admin = strata::kafka::Admin::new(&kafka_config()).unwrap();
    let highs: Vec<i64> = (0..2)
        .map(|p| admin.watermarks(&topic, p).unwrap().1)
        .collect();
    assert_eq!(committed_offsets(&task, &topic, 2), highs);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_reset_to_earliest_adopts_the_archive_and_goes_on() {
    reset_scenario(Archive::fs()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_reset_to_earliest_adopts_the_archive_and_goes_on_on_s3() {
    reset_scenario(Archive::s3()).await;
}

/// A continuous dump is killed (no goodbye to the group) and the scheduled `--once` run starts
/// at once: it waits for the dead member's session to time out, then archives everything.
#[tokio::test(flavor = "multi_thread")]
async fn once_right_after_a_crash_waits_for_the_group_and_archives_everything() {
    let topic = unique("after-crash");
    create_topic(&topic, 3).await;
    produce(&sample_records(&topic, 300, 3, base_ts())).await;
    let dir = tempfile::tempdir().unwrap();
    let archive = Archive::fs();
    // The dead member holds the group for 20 s: longer than any single request timeout.
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}[kafka.properties]\n\"session.timeout.ms\" = 20000\n\"heartbeat.interval.ms\" = 1000\n[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\nformat = \"jsonl\"\n",
            archive.toml(None),
            unique("after-crash-task")
        ),
    );
    let log = dir.path().join("continuous.log");
    let mut child = spawn_dump(&cfg, &log);
    eventually(60, "the continuous dump owns partitions", || async {
        count_in(&log, "Assigned") > 0
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let (code, text) = run_once_output(&cfg, 120);
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains("cannot reach Kafka"), "{text}");
    assert!(text.contains("waiting for the consumer group"), "{text}");
    let store = archive.store().await;
    assert_eq!(assert_exactly_once(store.as_ref(), &topic, 3).await, 300);
}

/// Offsets of a partition's archive, and the gap records of its directory.
async fn archived_offsets(store: &dyn ObjectStore, topic: &str) -> Vec<i64> {
    let mut offsets: Vec<i64> = read_archive(store, "", TextOptions::default())
        .await
        .iter()
        .filter(|o| o.name.topic == topic)
        .flat_map(|o| o.records.iter().map(|r| r.offset.unwrap()))
        .collect();
    offsets.sort();
    offsets
}

fn delete_records_before(topic: &str, offset: i64) {
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(offset))
        .unwrap();
    let rt = tokio::runtime::Handle::current();
    let done = tokio::task::block_in_place(|| {
        rt.block_on(admin_client().delete_records(&tpl, &rdkafka::admin::AdminOptions::new()))
    })
    .unwrap();
    assert_eq!(
        done.find_partition(topic, 0).unwrap().offset(),
        rdkafka::Offset::Offset(offset)
    );
}

/// Retention deleted records the group had not archived yet: the run archives what is there
/// (never skipping to the end), says so, records the gap and exits 4, unless the task allows
/// gaps. Both start modes.
#[tokio::test(flavor = "multi_thread")]
async fn records_deleted_before_they_were_archived_are_a_reported_gap() {
    let archive = Archive::fs();
    let dir = tempfile::tempdir().unwrap();
    let store = archive.store().await;
    for start in ["earliest", "latest"] {
        let topic = unique("gap");
        create_topic(&topic, 1).await;
        let task = unique("gap-task");
        let body = |allow: bool| {
            format!(
                "{}[[tasks]]\nname = \"{task}\"\ntopics = [\"{topic}\"]\nformat = \"jsonl\"\nstart_offset = \"{start}\"\ndirectory = \"{start}\"\nallow_retention_gaps = {allow}\n",
                archive.toml(None)
            )
        };
        let cfg = write_config(dir.path(), &body(false));
        let batch = |n: usize| sample_records(&topic, n, 1, chrono::Utc::now().timestamp_millis());
        produce(&batch(100)).await;
        run_once(&cfg);
        let first = if start == "earliest" { 0 } else { 100 };
        assert_eq!(committed_offsets(&task, &topic, 1), vec![100]);
        produce(&batch(100)).await;
        delete_records_before(&topic, 150);
        let (code, text) = run_once_output(&cfg, 60);
        assert_eq!(code, Some(4), "{text}");
        assert!(
            text.contains(&format!("{topic}-0 offsets 100..149")),
            "{text}"
        );
        let gap = format!(
            "{start}/.strata/gaps/{topic}/0/{:020}-{:020}.json",
            100, 150
        );
        let record: serde_json::Value =
            serde_json::from_slice(&store.get(&gap).await.unwrap()).unwrap();
        assert_eq!(
            (record["from"].as_i64(), record["to"].as_i64()),
            (Some(100), Some(150))
        );
        let mut want: Vec<i64> = (first..100).collect();
        want.extend(150..200);
        assert_eq!(archived_offsets(store.as_ref(), &topic).await, want);
        assert_eq!(committed_offsets(&task, &topic, 1), vec![200]);
        // A task that accepts gaps exits 0, and still records them.
        std::fs::write(&cfg, body(true)).unwrap();
        produce(&batch(50)).await;
        delete_records_before(&topic, 220);
        let (code, text) = run_once_output(&cfg, 60);
        assert_eq!(code, Some(0), "{text}");
        assert!(text.contains("deleted by retention"), "{text}");
        let gap = format!(
            "{start}/.strata/gaps/{topic}/0/{:020}-{:020}.json",
            200, 220
        );
        assert!(store.get(&gap).await.is_ok(), "no gap record {gap}");
        want.extend(220..250);
        assert_eq!(archived_offsets(store.as_ref(), &topic).await, want);
    }
}

/// An Iceberg task whose table is behind the partition's earliest retained offset: the run
/// writes what is there, records the gap beside the tables, says so and exits 4, as a dump.
#[tokio::test(flavor = "multi_thread")]
async fn records_deleted_before_an_iceberg_table_had_them_are_a_reported_gap() {
    let archive = Archive::fs();
    let dir = tempfile::tempdir().unwrap();
    let store = archive.store().await;
    let topic = unique("ice-gap");
    create_topic(&topic, 1).await;
    let db = dir.path().join("catalog.db");
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\nformat = \"iceberg\"\ndirectory = \"lake\"\n[tasks.iceberg]\ncatalog_file = \"{}\"\n",
            archive.toml(None),
            unique("ice-gap-task"),
            db.display()
        ),
    );
    let batch = |n: usize| sample_records(&topic, n, 1, chrono::Utc::now().timestamp_millis());
    produce(&batch(100)).await;
    run_once(&cfg);
    produce(&batch(100)).await;
    delete_records_before(&topic, 150);
    let (code, text) = run_once_output(&cfg, 60);
    assert_eq!(code, Some(4), "{text}");
    assert!(
        text.contains(&format!("{topic}-0 offsets 100..149")),
        "{text}"
    );
    let gap = format!("lake/.strata/gaps/{topic}/0/{:020}-{:020}.json", 100, 150);
    let record: serde_json::Value =
        serde_json::from_slice(&store.get(&gap).await.unwrap()).unwrap();
    assert_eq!(
        (record["from"].as_i64(), record["to"].as_i64()),
        (Some(100), Some(150))
    );
    let Archive::Dir(d) = &archive else {
        unreachable!()
    };
    let props = common::iceberg::sql_catalog(
        &db,
        &format!("file://{}/archive/lake", d.path().display()),
        serde_json::json!({}),
    );
    let read =
        common::iceberg::pyiceberg_read(&props, &format!("kafka.{}", topic.replace('-', "_")));
    let mut offsets: Vec<i64> = read["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["offset"].as_i64().unwrap())
        .collect();
    offsets.sort();
    let mut want: Vec<i64> = (0..100).collect();
    want.extend(150..200);
    assert_eq!(offsets, want);
}

// ------------------------------------------------------------------------------------------
// `strata archive ls | verify | prune` over what dump archived, damaged on purpose.

/// Runs `strata archive ARGS`; exit code, stdout, stderr.
fn archive_cmd(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(strata_bin())
        .arg("archive")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// `strata archive ARGS --json`, which must exit with `code`.
fn archive_json(args: &[&str], code: i32) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (got, out, err) = archive_cmd(&all);
    assert_eq!(got, Some(code), "archive {args:?}:\n{out}\n{err}");
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("archive {args:?}: not JSON ({e}):\n{out}"))
}

fn snapshot_at(
    topic: &str,
    at: chrono::DateTime<chrono::Utc>,
    watermarks: Vec<(i64, i64)>,
) -> strata::state::Snapshot {
    strata::state::Snapshot {
        version: strata::state::VERSION,
        task: "snapshots".into(),
        captured_at: at,
        occasion: strata::state::Occasion::End,
        topics: vec![strata::state::TopicState {
            name: topic.into(),
            id: None,
            partitions: watermarks.len() as i32,
            replication_factor: 1,
            configs: BTreeMap::new(),
            watermarks,
        }],
        groups: Vec::new(),
        missing: Vec::new(),
    }
}

/// (partition, first offset) -> key of every archive object, as the store lists them.
async fn stored_objects(store: &dyn ObjectStore, dir: &str) -> BTreeMap<(i64, i64), String> {
    let mut out = BTreeMap::new();
    for o in archive_listing(store, dir).await {
        let file = o.key.rsplit('/').next().unwrap();
        let name = strata::layout::ObjectName::parse(file).unwrap();
        out.insert(
            (i64::from(name.partition), name.first_offset),
            o.key.clone(),
        );
    }
    out
}

/// Four dump runs (the third after retention took offsets 60..69 of partition 0), snapshots
/// around them; then: `ls` shows what dump stored and the gap; `verify` is clean, then names a
/// deleted, a truncated and a flipped-byte object; prune's dry run lists the objects older than
/// its time and removes nothing, `--apply` removes exactly them, and what remains lists and
/// verifies with the pruned offsets accounted for.
async fn archive_tools_scenario(archive: Archive) {
    let topic = unique("archive-tools");
    create_topic_with(&topic, 2, &[("retention.ms", "-1")]).await;
    let task = unique("archive-task");
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}[[tasks]]\nname = \"{task}\"\ntopics = [\"{topic}\"]\nformat = \"jsonl\"\ndirectory = \"arch\"\nallow_retention_gaps = true\nstate = \"off\"\n",
            archive.toml(None)
        ),
    );
    // The runs take no snapshots of their own (`state = "off"`): the test plants snapshots
    // dated where prune's choice between them is known.
    let cfg_s = cfg.to_str().unwrap();
    let store = archive.store().await;
    let now = chrono::Utc::now();
    let ago = |h: i64| now - chrono::Duration::hours(h);
    // 40 records a run, 20 per partition: six days ago, four days ago, an hour ago, and half
    // an hour ago after retention deleted offsets 60..69 of partition 0.
    for (i, hours) in [144, 96, 1].into_iter().enumerate() {
        produce(&sample_records(
            &topic,
            40,
            2,
            ago(hours).timestamp_millis() + i as i64,
        ))
        .await;
        run_once(&cfg);
    }
    produce(&sample_records(
        &topic,
        40,
        2,
        (now - chrono::Duration::minutes(30)).timestamp_millis(),
    ))
    .await;
    delete_records_before(&topic, 70);
    run_once(&cfg);
    let d = strata::layout::DumpDir::parse("arch").unwrap();
    for (hours, marks) in [
        (120, vec![(0, 20), (0, 20)]),
        (96, vec![(0, 40), (0, 40)]),
        (84, vec![(0, 40), (0, 40)]),
        (0, vec![(70, 80), (0, 80)]),
    ] {
        strata::state::store(store.as_ref(), &d, &snapshot_at(&topic, ago(hours), marks))
            .await
            .unwrap();
    }
    let at: Vec<&str> = vec!["--config", cfg_s];

    // ls: what dump stored, per partition, and the retention gap.
    let objects = stored_objects(store.as_ref(), "arch/").await;
    let l = archive_json(&[&["ls"][..], &at].concat(), 0);
    let parts = l["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{l:#}");
    let mut listed = BTreeMap::new();
    for p in parts {
        assert_eq!(p["topic"], topic.as_str());
        for o in p["object_list"].as_array().unwrap() {
            assert_eq!(o["state"], "present", "{o}");
            assert_eq!(o["sealed"], true, "{o}");
            listed.insert(
                (
                    p["partition"].as_i64().unwrap(),
                    o["first_offset"].as_i64().unwrap(),
                ),
                o["key"].as_str().unwrap().to_string(),
            );
        }
    }
    let want: BTreeMap<(i64, i64), String> = objects
        .iter()
        .map(|(k, key)| (*k, store.location(key)))
        .collect();
    assert_eq!(listed, want, "ls lists every stored object");
    let p0 = &parts[0];
    assert_eq!(
        (
            p0["records"].as_u64(),
            p0["first_offset"].as_i64(),
            p0["next_offset"].as_i64()
        ),
        (Some(70), Some(0), Some(80))
    );
    let stretches: Vec<(i64, i64, String)> = p0["stretches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["from"].as_i64().unwrap(),
                s["to"].as_i64().unwrap(),
                s["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        stretches,
        vec![
            (0, 60, "archived".into()),
            (60, 70, "retention".into()),
            (70, 80, "archived".into())
        ]
    );
    assert_eq!(parts[1]["records"].as_u64(), Some(80));
    assert_eq!(l["snapshots"].as_array().unwrap().len(), 4);
    let (code, text, _) = archive_cmd(&[&["ls"][..], &at].concat());
    assert_eq!(code, Some(0));
    assert!(
        text.contains("retention gap") && text.contains("60..69"),
        "{text}"
    );

    // verify: clean.
    let v = archive_json(&[&["verify"][..], &at].concat(), 0);
    assert_eq!(v["objects"].as_u64(), Some(objects.len() as u64), "{v:#}");
    assert_eq!(
        v["checksummed"].as_u64(),
        Some(objects.len() as u64),
        "{v:#}"
    );
    assert!(v["problems"].as_array().unwrap().is_empty(), "{v:#}");

    // One object deleted, one truncated, one with a flipped byte (a letter for another, so
    // its JSON lines still decode).
    let deleted = objects[&(0, 20)].clone();
    let truncated = objects[&(1, 20)].clone();
    let flipped = objects[&(1, 40)].clone();
    store.delete(&deleted).await.unwrap();
    let data = store.get(&truncated).await.unwrap();
    store
        .put(&truncated, data.slice(..data.len() - 7))
        .await
        .unwrap();
    let mut data = store.get(&flipped).await.unwrap().to_vec();
    // Inside a record's value: `g-17` becomes `h-17`.
    let at_byte = data.windows(3).position(|w| w == b"\"g-").unwrap();
    let at_byte = at_byte + data[at_byte..].iter().position(|b| *b == b'g').unwrap();
    data[at_byte] = b'h';
    store.put(&flipped, data.into()).await.unwrap();
    let v = archive_json(&[&["verify"][..], &at].concat(), 1);
    let mut problems: Vec<(String, String)> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap().to_string(),
                p["object"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    problems.sort();
    assert_eq!(
        problems,
        vec![
            ("damaged".to_string(), store.location(&flipped)),
            ("deleted".to_string(), store.location(&deleted)),
            ("truncated".to_string(), store.location(&truncated)),
        ],
        "{v:#}"
    );
    let (code, text, _) = archive_cmd(&[&["verify"][..], &at].concat());
    assert_eq!(code, Some(1), "{text}");
    let damage = &v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "damaged")
        .unwrap()["detail"];
    assert!(
        damage.as_str().unwrap().contains("CRC-32C")
            && damage.as_str().unwrap().contains("still decode"),
        "{damage}"
    );
    for (kind, key) in [
        ("deleted", &deleted),
        ("truncated", &truncated),
        ("damaged", &flipped),
    ] {
        assert!(
            text.lines()
                .any(|l| l.contains(kind) && l.contains(&store.location(key))),
            "verify names {kind} {key}:\n{text}"
        );
    }

    // prune: a dry run lists the objects of the first two runs and removes nothing.
    let before = ago(72).to_rfc3339();
    let old: Vec<(i64, i64)> = objects
        .keys()
        .filter(|(_, first)| *first < 40)
        .copied()
        .collect();
    let listed_of = |r: &serde_json::Value| -> Vec<(i64, i64)> {
        let mut v: Vec<(i64, i64)> = r["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["partition"].as_i64().unwrap(),
                    o["first_offset"].as_i64().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let dry = archive_json(&[&["prune", "--before", &before][..], &at].concat(), 0);
    assert_eq!(dry["applied"], false);
    assert_eq!(listed_of(&dry), old, "{dry:#}");
    assert_eq!(dry["snapshots"].as_array().unwrap().len(), 2, "{dry:#}");
    assert!(
        dry["committed"].as_str().unwrap().contains(&task),
        "{dry:#}"
    );
    assert_eq!(
        stored_objects(store.as_ref(), "arch/").await.len(),
        objects.len() - 1
    );
    assert_eq!(
        strata::state::list(store.as_ref(), &d, None)
            .await
            .unwrap()
            .len(),
        4
    );

    // --apply removes exactly them, their seals and the two snapshots no longer needed.
    let done = archive_json(
        &[&["prune", "--before", &before, "--apply"][..], &at].concat(),
        0,
    );
    assert_eq!(listed_of(&done), old);
    let left = stored_objects(store.as_ref(), "arch/").await;
    let kept: Vec<(i64, i64)> = objects
        .keys()
        .filter(|k| !old.contains(k))
        .copied()
        .collect();
    assert_eq!(left.keys().copied().collect::<Vec<_>>(), kept);
    let snaps = strata::state::list(store.as_ref(), &d, None).await.unwrap();
    assert_eq!(
        snaps.iter().map(|s| s.1).collect::<Vec<_>>(),
        vec![ago(84), ago(0)]
            .into_iter()
            .map(|t| chrono::DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap())
            .collect::<Vec<_>>()
    );
    let seals = store.list("arch/.strata/index/").await.unwrap();
    assert_eq!(
        seals.len(),
        kept.len(),
        "one seal per kept object: {seals:?}"
    );

    // What remains: pruned offsets are accounted for; the flipped object is still named.
    let l = archive_json(&[&["ls"][..], &at].concat(), 0);
    let first: Vec<(String, i64, i64)> = l["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let s = &p["stretches"][0];
            (
                s["kind"].as_str().unwrap().to_string(),
                s["from"].as_i64().unwrap(),
                s["to"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        first,
        vec![("pruned".to_string(), 0, 40), ("pruned".to_string(), 0, 40)],
        "{l:#}"
    );
    let v = archive_json(&[&["verify"][..], &at].concat(), 1);
    let problems: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(problems, vec!["damaged"], "{v:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn archive_tools_list_verify_and_prune_on_file() {
    archive_tools_scenario(Archive::fs()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn archive_tools_list_verify_and_prune_on_s3() {
    archive_tools_scenario(Archive::s3()).await;
}
