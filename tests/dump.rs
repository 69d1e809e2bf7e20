//! Dump mode against the real broker, to `file://` and to LocalStack: formats, time
//! directories, delimiters, keys, empty intervals, regex subscriptions and `--once`.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use strata::format::{Delimiter, Record, TextOptions};
use strata::layout::TimeDirFormat;
use strata::store::{FsStore, ObjectStore};

fn utc_dir(ts: i64, pattern: &str) -> String {
    chrono::DateTime::from_timestamp_millis(ts)
        .unwrap()
        .format(pattern)
        .to_string()
}

fn task_toml(name: &str, topic: &str, extra: &str) -> String {
    format!(
        "[[tasks]]\nname = \"{name}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 2\n{extra}\n"
    )
}

/// Checks the invariants every archive must hold and returns records by (partition, offset).
fn check_layout(
    objects: &[ArchivedObject],
    dir: &str,
    time_dir: &str,
) -> BTreeMap<(i32, i64), Record> {
    let fmt = TimeDirFormat::parse(time_dir).unwrap();
    let mut by_offset = BTreeMap::new();
    for o in objects {
        assert!(!o.records.is_empty(), "{} is empty", o.key);
        let first = &o.records[0];
        if let (Some(p), Some(off)) = (first.partition, first.offset) {
            assert_eq!(p, o.name.partition, "{}", o.key);
            assert_eq!(
                off, o.name.first_offset,
                "object key names its first offset: {}",
                o.key
            );
            // the time directory is the first record's
            let period = fmt.period_start(first.timestamp.unwrap(), chrono_tz::Tz::UTC);
            let dir = if dir.is_empty() {
                String::new()
            } else {
                format!("{dir}/")
            };
            let want = format!(
                "{dir}{}/{}",
                fmt.render(period),
                o.key.rsplit('/').next().unwrap()
            );
            assert_eq!(
                o.key, want,
                "key = dump directory / first record's time directory / name"
            );
        }
        for r in &o.records {
            if let (Some(p), Some(off)) = (r.partition, r.offset) {
                assert!(
                    by_offset.insert((p, off), r.clone()).is_none(),
                    "offset {p}/{off} stored twice"
                );
            }
        }
    }
    by_offset
}

fn assert_same_records(produced: &[Record], archived: &BTreeMap<(i32, i64), Record>, topic: &str) {
    let consumed = consume_all(topic);
    assert_eq!(consumed.len(), produced.len());
    assert_eq!(
        archived.len(),
        consumed.len(),
        "every record archived exactly once"
    );
    for c in &consumed {
        let a = &archived[&(c.partition.unwrap(), c.offset.unwrap())];
        assert_eq!(a, c, "archived record differs from the topic's");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lossless_formats_and_time_directories_to_file() {
    let cases = [
        ("jsonl", "none", "yyyy/MM/dd"),
        ("jsonl", "zstd", "yyyy/MM/dd/HH"),
        ("jsonl", "gzip", "dt=yyyy-MM-dd/hr=HH"),
        ("parquet", "zstd", "yyyy"),
        ("parquet", "snappy", "yyyy/MM"),
        ("parquet", "none", "yyyy/MM/dd/HH/mm"),
    ];
    for (format, compression, time_dir) in cases {
        let topic = unique(&format!("fmt-{format}-{compression}"));
        create_topic(&topic, 3).await;
        let produced = sample_records(&topic, 300, 3, base_ts());
        produce(&produced).await;
        let root = tempfile::tempdir().unwrap();
        let toml = format!(
            "{}{}",
            file_toml(root.path()),
            task_toml(&unique("task"), &topic, &format!("directory = \"arch/{format}\"\ntime_directory = \"{time_dir}\"\nformat = \"{format}\"\ncompression = \"{compression}\""))
        );
        let summary = dump_once(&toml).await;
        assert_eq!(summary[0].records, 300, "{format}/{compression}");
        let store = FsStore::new(root.path().to_path_buf());
        let objects = read_archive(&store, "arch/", TextOptions::default()).await;
        assert_eq!(summary[0].objects, objects.len() as u64, "summary objects");
        assert_eq!(
            summary[0].bytes,
            objects.iter().map(|o| o.size).sum::<u64>(),
            "summary bytes are the stored bytes ({format}/{compression})"
        );
        // 300 records one second apart from 22:00 span two hours and two days
        let dirs: std::collections::BTreeSet<String> = objects
            .iter()
            .map(|o| o.key.rsplit_once('/').unwrap().0.to_string())
            .collect();
        let want_dirs = match time_dir {
            "yyyy" | "yyyy/MM" => 1,
            "yyyy/MM/dd" => 1, // 300 s from 22:00 stay on the same day
            "yyyy/MM/dd/HH/mm" => 5,
            _ => 1,
        };
        assert_eq!(dirs.len(), want_dirs, "{time_dir}: {dirs:?}");
        let archived = check_layout(&objects, &format!("arch/{format}"), time_dir);
        assert_same_records(&produced, &archived, &topic);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn records_later_in_time_roll_the_file_and_late_ones_stay() {
    let topic = unique("timeroll");
    create_topic(&topic, 1).await;
    let hour = 3_600_000;
    let mut recs = sample_records(&topic, 6, 1, base_ts());
    // 22:00, 23:00, 22:30 (late: stays in the 23:00 file), 00:00 next day, ...
    let times = [0, hour, hour / 2, 2 * hour, 2 * hour + 1, hour];
    for (r, t) in recs.iter_mut().zip(times) {
        r.timestamp = Some(base_ts() + t);
    }
    produce(&recs).await;
    let root = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}{}",
        file_toml(root.path()),
        task_toml(
            &unique("task"),
            &topic,
            "format = \"jsonl\"\ntime_directory = \"yyyy/MM/dd/HH\""
        )
    );
    dump_once(&toml).await;
    let objects = read_archive(
        &FsStore::new(root.path().to_path_buf()),
        "",
        TextOptions::default(),
    )
    .await;
    let keys: Vec<String> = objects.iter().map(|o| o.key.clone()).collect();
    let base = topic.clone();
    assert_eq!(
        keys,
        vec![
            format!(
                "{}/{base}+0+00000000000000000000.jsonl",
                utc_dir(base_ts(), "%Y/%m/%d/%H")
            ),
            format!(
                "{}/{base}+0+00000000000000000001.jsonl",
                utc_dir(base_ts() + hour, "%Y/%m/%d/%H")
            ),
            format!(
                "{}/{base}+0+00000000000000000003.jsonl",
                utc_dir(base_ts() + 2 * hour, "%Y/%m/%d/%H")
            ),
        ]
    );
    let counts: Vec<usize> = objects.iter().map(|o| o.records.len()).collect();
    assert_eq!(counts, vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread")]
async fn text_with_each_delimiter_and_keys_on_and_off() {
    for (delim, delim_toml) in [
        (Delimiter::Newline, "\\n"),
        (Delimiter::Comma, ","),
        (Delimiter::Semicolon, ";"),
        (Delimiter::Pipe, "|"),
        (Delimiter::None, "none"),
    ] {
        for store_key in [false, true] {
            let topic = unique("text");
            create_topic(&topic, 2).await;
            let produced: Vec<Record> = (0..40)
                .map(|i| Record {
                    topic: topic.clone(),
                    partition: Some(i % 2),
                    key: Some(format!("k{i}").into_bytes()),
                    value: Some(format!("v{i}").into_bytes()),
                    timestamp: Some(base_ts()),
                    ..Record::default()
                })
                .collect();
            produce(&produced).await;
            let root = tempfile::tempdir().unwrap();
            let toml = format!(
                "{}{}",
                file_toml(root.path()),
                task_toml(&unique("task"), &topic, &format!("record_delimiter = \"{delim_toml}\"\nstore_key = {store_key}\nkey_separator = \"=\"\ncompression = \"gzip\""))
            );
            dump_once(&toml).await;
            let store = FsStore::new(root.path().to_path_buf());
            let listed = archive_listing(&store, "").await;
            assert_eq!(listed.len(), 2, "one object per partition");
            for meta in listed {
                assert!(meta.key.ends_with(".txt.gz"), "{}", meta.key);
                let raw = strata::format::decode(
                    &strata::format::FormatSpec::from_extension(
                        "txt.gz",
                        TextOptions {
                            delimiter: Delimiter::None,
                            key_separator: None,
                        },
                    )
                    .unwrap(),
                    &topic,
                    store.get(&meta.key).await.unwrap(),
                    u64::MAX,
                );
                assert!(raw.is_err(), "delimiter none cannot be split");
                let name = strata::layout::ObjectName::parse(meta.key.rsplit('/').next().unwrap())
                    .unwrap();
                let plain = {
                    use std::io::Read;
                    let bytes = store.get(&meta.key).await.unwrap();
                    let mut s = String::new();
                    flate2::read::GzDecoder::new(&bytes[..])
                        .read_to_string(&mut s)
                        .unwrap();
                    s
                };
                let d = delim
                    .byte()
                    .map(|b| (b as char).to_string())
                    .unwrap_or_default();
                let want: String = produced
                    .iter()
                    .filter(|r| r.partition == Some(name.partition))
                    .map(|r| {
                        let v = String::from_utf8(r.value.clone().unwrap()).unwrap();
                        let k = String::from_utf8(r.key.clone().unwrap()).unwrap();
                        if store_key {
                            format!("{k}={v}{d}")
                        } else {
                            format!("{v}{d}")
                        }
                    })
                    .collect();
                assert_eq!(plain, want, "{delim:?} keys={store_key}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn once_stops_at_the_high_watermark_and_resumes_where_it_committed() {
    let topic = unique("once");
    create_topic(&topic, 2).await;
    produce(&sample_records(&topic, 100, 2, base_ts())).await;
    let root = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}{}",
        file_toml(root.path()),
        task_toml(&unique("task"), &topic, "format = \"jsonl\"")
    );
    let s = dump_once(&toml).await;
    assert_eq!((s[0].records, s[0].objects), (100, 2));
    // nothing new: a second run writes nothing and succeeds
    let s = dump_once(&toml).await;
    assert_eq!((s[0].records, s[0].objects), (0, 0));
    produce(&sample_records(&topic, 30, 2, base_ts() + 1_000_000)).await;
    let s = dump_once(&toml).await;
    assert_eq!(s[0].records, 30);
    let objects = read_archive(
        &FsStore::new(root.path().to_path_buf()),
        "",
        TextOptions::default(),
    )
    .await;
    assert_eq!(objects.len(), 4);
    let archived = check_layout(&objects, "", "yyyy/MM/dd");
    assert_eq!(archived.len(), 130);
    let second_run_first: Vec<i64> = objects
        .iter()
        .map(|o| o.name.first_offset)
        .filter(|o| *o > 0)
        .collect();
    assert_eq!(
        second_run_first,
        vec![50, 50],
        "the next run starts at the committed offsets"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_keeps_the_parameters_it_was_created_with() {
    let topic = unique("params");
    create_topic(&topic, 1).await;
    produce(&sample_records(&topic, 10, 1, base_ts())).await;
    let root = tempfile::tempdir().unwrap();
    let conf = tempfile::tempdir().unwrap();
    let name = unique("params");
    let toml = |extra: &str| {
        format!(
            "{}{}",
            file_toml(root.path()),
            task_toml(&name, &topic, extra)
        )
    };
    dump_once(&toml("format = \"jsonl\"")).await;
    let record = root.path().join(format!(".strata/tasks/{name}.json"));
    assert!(record.exists(), "the first start records the layout");
    let cfg = conf.path().join("strata.toml");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(strata_bin())
            .args(args)
            .arg("--config")
            .arg(&cfg)
            .output()
            .unwrap();
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    // Same layout, other size: fine, and validate says it matches.
    std::fs::write(&cfg, toml("format = \"jsonl\"\nmax_file_size = \"8MiB\"")).unwrap();
    let (code, out) = run(&["validate"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("{name}: match")), "{out}");
    // Another format and time layout under the same name: refused by validate and by dump.
    std::fs::write(
        &cfg,
        toml("format = \"parquet\"\ntime_directory = \"yyyy/MM/dd/HH\""),
    )
    .unwrap();
    let (code, out) = run(&["validate"]);
    assert_eq!(code, Some(2), "{out}");
    for want in [
        "CHANGED since creation",
        "format: stored \"jsonl\", config \"parquet\"",
        "time_directory: stored \"yyyy/MM/dd\", config \"yyyy/MM/dd/HH\"",
    ] {
        assert!(out.contains(want), "validate names {want:?}:\n{out}");
    }
    let (code, out) = run(&["dump", "--once"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("cannot change after creation") && out.contains("create a new task"),
        "{out}"
    );
    let objects = read_archive(
        &FsStore::new(root.path().to_path_buf()),
        "",
        TextOptions::default(),
    )
    .await;
    assert!(
        objects.iter().all(|o| o.name.extension == "jsonl"),
        "nothing written in the new layout"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn once_with_a_missing_topic_fails_clearly() {
    let root = tempfile::tempdir().unwrap();
    let missing = unique("no-such-topic");
    let cfg = config(&format!(
        "{}{}",
        file_toml(root.path()),
        task_toml(&unique("task"), &missing, "")
    ));
    let err = strata::dump::run(
        &cfg,
        strata::dump::DumpOptions {
            once: true,
            ..Default::default()
        },
        Arc::new(AtomicBool::new(false)),
    )
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains(&missing) && msg.contains("check the topic names"),
        "{msg}"
    );
}

/// `exclude_topics` leaves out a topic the regex matches: its records are never archived.
#[tokio::test(flavor = "multi_thread")]
async fn exclude_topics_leave_out_a_topic_the_regex_matches() {
    let base = unique("excl");
    let (kept, left_out) = (format!("{base}.orders"), format!("{base}.orders.tmp"));
    create_topic(&kept, 1).await;
    create_topic(&left_out, 1).await;
    produce(&sample_records(&kept, 20, 1, base_ts())).await;
    produce(&sample_records(&left_out, 30, 1, base_ts())).await;
    let root = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}[[tasks]]\nname = \"{}\"\ntopic_regex = '{}\\..*'\nexclude_topics = ['.*\\.tmp']\nformat = \"jsonl\"\n",
        file_toml(root.path()),
        unique("excl-task"),
        regex::escape(&base)
    );
    let s = dump_once(&toml).await;
    assert_eq!(s[0].records, 20, "only the kept topic's records");
    let objects = read_archive(
        &FsStore::new(root.path().to_path_buf()),
        "",
        TextOptions::default(),
    )
    .await;
    let topics: std::collections::BTreeSet<&str> =
        objects.iter().map(|o| o.name.topic.as_str()).collect();
    assert_eq!(topics, [kept.as_str()].into(), "archived topics");
    assert_eq!(check_layout(&objects, "", "yyyy/MM/dd").len(), 20);
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_intervals_write_nothing_and_regex_picks_up_new_topics() {
    let prefix = unique("rx");
    let first = format!("{prefix}.a");
    create_topic(&first, 1).await;
    let root = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}[[tasks]]\nname = \"{}\"\ntopic_regex = \"{}\\\\..*\"\ndump_interval_secs = 1\ntopic_refresh_secs = 1\nformat = \"jsonl\"\n",
        file_toml(root.path()),
        unique("task"),
        prefix.replace('-', "\\\\-")
    );
    let cfg = config(&toml);
    let stop = Arc::new(AtomicBool::new(false));
    let run = tokio::spawn({
        let stop = stop.clone();
        async move { strata::dump::run(&cfg, strata::dump::DumpOptions::default(), stop).await }
    });
    let store = FsStore::new(root.path().to_path_buf());
    produce(&sample_records(&first, 10, 1, base_ts())).await;
    eventually(60, "first object", || async {
        archive_listing(&store, "").await.len() == 1
    })
    .await;
    // several empty intervals pass: no new object
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        archive_listing(&store, "").await.len(),
        1,
        "an interval without data writes no object"
    );
    // a topic created after start that matches the regex is picked up
    let second = format!("{prefix}.b");
    create_topic(&second, 1).await;
    let other = unique("unrelated");
    create_topic(&other, 1).await;
    eventually(60, "subscription to the new topic", || async {
        produce(&sample_records(&second, 1, 1, base_ts())).await;
        archive_listing(&store, "")
            .await
            .iter()
            .any(|o| o.key.contains(&format!("{second}+0+")))
    })
    .await;
    produce(&sample_records(&other, 5, 1, base_ts())).await;
    stop.store(true, Ordering::Relaxed);
    let summaries = run.await.unwrap().unwrap();
    assert!(summaries[0].records >= 11);
    let keys: Vec<String> = archive_listing(&store, "")
        .await
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert!(
        keys.iter().all(|k| !k.contains(&other)),
        "non-matching topic dumped: {keys:?}"
    );
    assert!(
        keys.iter().all(|k| !k.contains("__")),
        "internal topics never match: {keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dump_to_localstack_with_parquet_read_by_pyarrow() {
    let topic = unique("s3pq");
    create_topic(&topic, 2).await;
    let produced = sample_records(&topic, 200, 2, base_ts());
    produce(&produced).await;
    let prefix = unique("dump-s3");
    let toml = format!(
        "{}{}",
        s3_toml(&prefix),
        task_toml(
            &unique("task"),
            &topic,
            "format = \"parquet\"\ndirectory = \"pq\""
        )
    );
    dump_once(&toml).await;
    let store = s3_store(&prefix).await;
    let objects = read_archive(store.as_ref(), "pq/", TextOptions::default()).await;
    assert_eq!(objects.len(), 2);
    let archived = check_layout(&objects, "pq", "yyyy/MM/dd");
    assert_same_records(&produced, &archived, &topic);

    // An independent reader (pyarrow) sees the same rows and columns.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("p0.parquet");
    std::fs::write(&local, store.get(&objects[0].key).await.unwrap()).unwrap();
    let python =
        std::env::var("STRATA_TEST_PYTHON").expect("STRATA_TEST_PYTHON (./dev test sets it)");
    let script = r#"
import sys, json, pyarrow.parquet as pq
t = pq.read_table(sys.argv[1])
rows = t.to_pylist()
print(json.dumps({"schema": [f.name for f in t.schema], "n": t.num_rows,
  "first": {"offset": rows[0]["offset"], "partition": rows[0]["partition"], "key": rows[0]["key"].decode(),
            "headers": [[h["key"], None if h["value"] is None else h["value"].decode()] for h in rows[0]["headers"]],
            "ts": rows[0]["timestamp"].isoformat()},
  "nulls": sum(1 for r in rows if r["value"] is None)}))
"#;
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(&local)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pyarrow failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["schema"],
        serde_json::json!([
            "topic",
            "partition",
            "offset",
            "timestamp",
            "timestamp_type",
            "key",
            "value",
            "headers"
        ])
    );
    let ours = &objects[0].records;
    assert_eq!(v["n"], ours.len());
    assert_eq!(v["first"]["offset"], ours[0].offset.unwrap());
    assert_eq!(
        v["first"]["key"],
        String::from_utf8(ours[0].key.clone().unwrap()).unwrap()
    );
    assert_eq!(
        v["first"]["headers"],
        serde_json::json!([["source", "cdc"], ["seq", "0"], ["seq", null]])
    );
    assert_eq!(
        v["first"]["ts"],
        utc_dir(base_ts(), "%Y-%m-%dT%H:%M:%S+00:00")
    );
    assert_eq!(
        v["nulls"],
        ours.iter().filter(|r| r.value.is_none()).count()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn latest_start_is_remembered_between_once_runs() {
    let topic = unique("latest");
    create_topic(&topic, 2).await;
    produce(&sample_records(&topic, 20, 2, base_ts())).await;
    let root = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}{}",
        file_toml(root.path()),
        task_toml(
            &unique("task"),
            &topic,
            "format = \"jsonl\"\nstart_offset = \"latest\""
        )
    );
    let s = dump_once(&toml).await;
    assert_eq!(
        s[0].records, 0,
        "a new group at latest skips what is already there"
    );
    produce(&sample_records(&topic, 6, 2, base_ts())).await;
    let s = dump_once(&toml).await;
    assert_eq!(
        s[0].records, 6,
        "records produced after the first run are archived by the next"
    );
    let objects = read_archive(
        &FsStore::new(root.path().to_path_buf()),
        "",
        TextOptions::default(),
    )
    .await;
    let firsts: Vec<i64> = objects.iter().map(|o| o.name.first_offset).collect();
    assert_eq!(firsts, vec![10, 10]);
}

/// A topic written by a transactional producer ends with commit (and abort) markers that no
/// consumer receives: `--once` must still count the partitions as covered and exit 0, with
/// every committed record archived and no aborted one.
#[tokio::test(flavor = "multi_thread")]
async fn once_covers_a_transactional_topic_up_to_its_markers() {
    use rdkafka::producer::{FutureRecord, Producer};
    let topic = unique("txn");
    create_topic(&topic, 2).await;
    let p: rdkafka::producer::FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", unique("txn-producer"))
        .set("transaction.timeout.ms", "10000")
        .create()
        .unwrap();
    p.init_transactions(Duration::from_secs(30)).unwrap();
    let send_all = |n: usize, tag: &'static str| {
        let p = p.clone();
        let topic = topic.clone();
        async move {
            for i in 0..n {
                let value = format!("{tag}-{i}");
                p.send(
                    FutureRecord::<(), _>::to(&topic)
                        .partition((i % 2) as i32)
                        .payload(&value),
                    Duration::from_secs(10),
                )
                .await
                .map_err(|(e, _)| e)
                .unwrap();
            }
        }
    };
    p.begin_transaction().unwrap();
    send_all(40, "committed").await;
    p.commit_transaction(Duration::from_secs(30)).unwrap();
    p.begin_transaction().unwrap();
    send_all(10, "aborted").await;
    p.abort_transaction(Duration::from_secs(30)).unwrap();
    let root = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}{}",
        file_toml(root.path()),
        task_toml(&unique("txn-task"), &topic, "format = \"jsonl\"\n")
    );
    let summaries = dump_once(&toml).await;
    assert_eq!(summaries[0].partitions.len(), 2);
    for part in &summaries[0].partitions {
        assert_eq!(part.coverage, strata::dump::Coverage::ThisRun, "{part:?}");
        assert!(part.to > 20, "the watermark counts the markers: {part:?}");
    }
    let store = strata::store::FsStore::new(root.path().to_path_buf());
    let objects = read_archive(&store, "", strata::format::TextOptions::default()).await;
    let values: Vec<String> = objects
        .iter()
        .flat_map(|o| &o.records)
        .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
        .collect();
    assert_eq!(values.len(), 40, "{values:?}");
    assert!(values.iter().all(|v| v.starts_with("committed-")));
    // The group's committed offsets reached the watermarks: the next run has nothing to do.
    let again = dump_once(&toml).await;
    assert!(again[0]
        .partitions
        .iter()
        .all(|p| p.coverage == strata::dump::Coverage::NothingNew));
}

/// Peak resident memory of a finished child process (from /proc while it runs).
fn peak_rss_of(child: &mut std::process::Child) -> u64 {
    let pid = child.id();
    let mut peak = 0;
    loop {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            if let Some(kb) = s
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
            {
                peak = peak.max(kb * 1024);
            }
        }
        if child.try_wait().unwrap().is_some() {
            return peak;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 500 partitions, each with an open object: memory stays within the buffer budget (objects
/// close early when it fills) instead of growing with the number of partitions.
#[tokio::test(flavor = "multi_thread")]
async fn five_hundred_partitions_stay_within_the_memory_budget() {
    let topic = unique("wide");
    create_topic(&topic, 500).await;
    // Timestamps 1 s apart, ending now (brokers refuse records too far in the future).
    let start = chrono::Utc::now().timestamp_millis() - 50_000_000;
    let mut records = sample_records(&topic, 50_000, 500, start);
    for r in &mut records {
        r.value = Some(vec![b'w'; 1000]);
    }
    produce(&records).await;
    let root = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("wide.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}{}",
            file_toml(root.path()),
            task_toml(&unique("wide-task"), &topic, "format = \"parquet\"\n")
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(strata_bin())
        .args(["dump", "--once", "--config"])
        .arg(&cfg)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let peak = peak_rss_of(&mut child);
    let text = log.join().unwrap();
    assert!(child.wait().unwrap().success(), "{text}");
    let store = strata::store::FsStore::new(root.path().to_path_buf());
    let objects = read_archive(&store, "", strata::format::TextOptions::default()).await;
    assert_eq!(
        objects.iter().map(|o| o.records.len()).sum::<usize>(),
        50_000
    );
    let partitions: std::collections::BTreeSet<i32> =
        objects.iter().map(|o| o.name.partition).collect();
    assert_eq!(partitions.len(), 500);
    // The default budget (256 MiB) and the process itself within 300 MiB, as the memory
    // benchmark requires of large topics (bench/README.md).
    eprintln!("500 partitions: peak RSS {} MiB", peak >> 20);
    assert!(peak <= 300 << 20, "peak RSS {} MiB", peak >> 20);
}

/// A CDC topic becomes one typed Parquet table per source table that DuckDB reads as it is:
/// the final state and the number of distinct changes are exactly the source's, repeats are
/// left out of the tables (also across two runs, the window is stored with the objects), and
/// every message not in a table is kept whole beside them.
#[tokio::test(flavor = "multi_thread")]
async fn cdc_topics_become_typed_tables_without_repeats() {
    let topic = unique("cdc");
    create_topic(&topic, 3).await;
    let data = cdc::generate(&topic, 3, 600, base_ts(), 7);
    let root = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}{}",
        file_toml(root.path()),
        task_toml(
            &unique("task"),
            &topic,
            "format = \"parquet\"\ndirectory = \"cdc\"\n[tasks.cdc]\n[tasks.cdc.types.\"shop.orders\"]\nid = \"int\"\namount = \"decimal(10,2)\"\n"
        )
    );
    // Two runs, split where a restart sends messages of the first run again.
    let split = data.restarts[data.restarts.len() / 2];
    let mut summaries = Vec::new();
    for part in [&data.records[..split], &data.records[split..]] {
        produce(part).await;
        summaries.push(dump_once(&toml).await.remove(0));
    }
    let c: Vec<_> = summaries.iter().map(|s| s.cdc).collect();
    let sum = |f: fn(&strata::cdc::Counts) -> u64| c.iter().map(f).sum::<u64>();
    assert_eq!(sum(|c| c.messages), data.records.len() as u64);
    assert_eq!(sum(|c| c.changes), data.changes as u64, "changes in tables");
    assert_eq!(sum(|c| c.repeats), data.repeated as u64, "repeats left out");
    assert_eq!(sum(|c| c.malformed), data.malformed as u64);
    assert!(
        sum(|c| c.verbatim) > 0,
        "the unquoted numbers are kept whole"
    );
    assert!(
        summaries[1].cdc.repeats > 0,
        "a repeat of the first run's changes in the second"
    );

    let tables: Vec<&str> = cdc::table_dirs().into_iter().collect();
    let (state, changes) = cdc::archive_state(&root.path().join("cdc"), &tables);
    assert_eq!(changes, data.changes, "distinct changes in the tables");
    assert_eq!(state, data.state, "the tables' final state is the source's");

    // Beside the tables: the repeated and malformed messages, whole.
    let store = FsStore::new(root.path().to_path_buf());
    let side = |dir: &'static str| {
        let store = &store;
        async move {
            read_archive(store, &format!("cdc/{dir}/"), TextOptions::default())
                .await
                .iter()
                .map(|o| o.records.len())
                .sum::<usize>()
        }
    };
    assert_eq!(side("_errors").await, data.malformed);
    let repeat_messages = data.restarts.len() * 3;
    assert_eq!(side("_repeats").await, repeat_messages);
    assert_eq!(
        index_problems(&store, "cdc/", false).await,
        Vec::<String>::new()
    );
    assert!(store.list("cdc/.strata/seals/").await.unwrap().is_empty());
    let windows = store.list("cdc/.strata/cdc/").await.unwrap();
    assert_eq!(
        windows.len(),
        3,
        "one window state per partition: {windows:?}"
    );
}

/// Every `--once` run stores the cluster's state beside its archive, at its start and its end:
/// the topic's partitions, replicas, own configs and watermarks, and the committed offsets of
/// the groups that read it (not the task's own group).
#[tokio::test(flavor = "multi_thread")]
async fn once_runs_store_the_topics_definitions_and_the_groups_positions() {
    let topic = unique("state");
    create_topic_with(&topic, 2, &[("retention.ms", "604800001")]).await;
    produce(&sample_records(&topic, 50, 2, base_ts())).await;
    let reader = unique("state-reader");
    {
        use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
        let c: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .set("group.id", &reader)
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, rdkafka::Offset::Offset(20))
            .unwrap();
        tpl.add_partition_offset(&topic, 1, rdkafka::Offset::Offset(7))
            .unwrap();
        c.commit(&tpl, CommitMode::Sync).unwrap();
    }
    let root = tempfile::tempdir().unwrap();
    let task = unique("state-task");
    let toml = format!(
        "{}{}",
        file_toml(root.path()),
        task_toml(&task, &topic, "format = \"jsonl\"\ndirectory = \"d\"")
    );
    dump_once(&toml).await;
    let store = FsStore::new(root.path().to_path_buf());
    let dir = strata::layout::DumpDir::parse("d").unwrap();
    let listed = strata::state::list(&store, &dir, Some(&task))
        .await
        .unwrap();
    assert_eq!(
        listed.len(),
        2,
        "a snapshot at the start and one at the end: {listed:?}"
    );
    let first = strata::state::read(&store, &listed[0].2).await.unwrap();
    let last = strata::state::read(&store, &listed[1].2).await.unwrap();
    assert_eq!(first.occasion, strata::state::Occasion::Start);
    assert_eq!(last.occasion, strata::state::Occasion::End);
    let t = last.topic(&topic).expect("the archived topic is described");
    assert_eq!((t.partitions, t.replication_factor), (2, 1));
    assert_eq!(
        t.configs.get("retention.ms").map(String::as_str),
        Some("604800001")
    );
    assert_eq!(t.watermarks, vec![(0, 25), (0, 25)]);
    let g = last
        .groups
        .iter()
        .find(|g| g.group == reader)
        .expect("the reader group's positions");
    assert_eq!(
        g.offsets.get(&topic).cloned(),
        Some(BTreeMap::from([(0, 20), (1, 7)]))
    );
    assert!(
        last.groups.iter().all(|g| g.group != task),
        "the task's own group is strata's, not a reader to restore"
    );
    assert!(last.missing.is_empty(), "{:?}", last.missing);
}

/// A scheduled run writes its metrics for the node exporter's textfile collector, with the
/// time of its last success, which a failed run keeps; each run ends with one summary line.
#[tokio::test(flavor = "multi_thread")]
async fn once_writes_a_metrics_file_whose_last_success_outlives_failures() {
    let topic = unique("metrics-file");
    create_topic(&topic, 1).await;
    produce(&sample_records(&topic, 30, 1, base_ts())).await;
    let root = tempfile::tempdir().unwrap();
    let task = unique("metrics-task");
    let cfg = root.path().join("strata.toml");
    let write = |topic: &str| {
        std::fs::write(
            &cfg,
            format!(
                "{}{}",
                file_toml(&root.path().join("archive")),
                task_toml(&task, topic, "format = \"jsonl\"")
            ),
        )
        .unwrap()
    };
    let file = root.path().join("strata.prom");
    let run = || {
        std::process::Command::new(strata_bin())
            .args(["dump", "--once", "--once-deadline", "60", "--metrics-file"])
            .arg(&file)
            .arg("--config")
            .arg(&cfg)
            .output()
            .unwrap()
    };
    write(&topic);
    let out = run();
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("task {task}: 30 records, 1 objects")),
        "one summary line: {text}"
    );
    let metrics = std::fs::read_to_string(&file).unwrap();
    let line = format!("strata_dump_last_success_timestamp_seconds{{task=\"{task}\"}} ");
    let first = metrics
        .lines()
        .find(|l| l.starts_with(&line))
        .unwrap_or_else(|| panic!("no last success in {metrics}"))
        .to_string();
    assert!(
        metrics.contains("strata_dump_records_written_total"),
        "{metrics}"
    );
    // With JSON logs the summary is a JSON line too: every line of the output parses.
    let out = std::process::Command::new(strata_bin())
        .args([
            "--log-format",
            "json",
            "dump",
            "--once",
            "--once-deadline",
            "60",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{text}");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["message"] == "run summary"
            && l["summary"]
                .as_str()
                .is_some_and(|s| s.starts_with(&format!("task {task}: 0 records")))),
        "{text}"
    );
    // The next run fails (its topic is gone): the time of the last success stays.
    write(&unique("no-such-topic"));
    let out = run();
    assert_eq!(out.status.code(), Some(1));
    let metrics = std::fs::read_to_string(&file).unwrap();
    assert!(metrics.lines().any(|l| l == first), "{metrics}");
}

/// Adds ACLs on the dev broker with Kafka's own tool (rust-rdkafka has no ACL calls).
fn add_acls(args: &[&str]) {
    let dev = concat!(env!("CARGO_MANIFEST_DIR"), "/dev");
    let out = std::process::Command::new(dev)
        .args(["kafka-class", "org.apache.kafka.tools.AclCommand"])
        .args(["--bootstrap-server", &bootstrap(), "--add"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kafka-acls: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A principal that may read its topic and its group and nothing else: the records are
/// archived, and the snapshot names what it could not read with the ACL to add (the topic's
/// configs; the group list, which Kafka trims to the groups a principal may describe without
/// a word). With `state = "required"` the run fails instead, naming the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_without_rights_names_the_acls_and_still_archives() {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: use ./dev test"))
    };
    let topic = unique("state-acl");
    create_topic(&topic, 1).await;
    produce(&sample_records(&topic, 10, 1, base_ts())).await;
    let task = unique("state-acl-task");
    let user = var("STRATA_TEST_LIMITED_USER");
    let principal = format!("User:{user}");
    add_acls(&[
        "--allow-principal",
        &principal,
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        &topic,
        "--group",
        &task,
    ]);
    let password = std::fs::read_to_string(var("STRATA_TEST_LIMITED_PASSWORD_FILE")).unwrap();
    let root = tempfile::tempdir().unwrap();
    let cfg = root.path().join("strata.toml");
    let run = |state: &str| {
        std::fs::write(
            &cfg,
            format!(
                "[kafka]\nbootstrap_servers = \"{}\"\nsecurity_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"SCRAM-SHA-512\"\nusername = \"{user}\"\npassword = \"${{STRATA_TEST_ACL_PASSWORD}}\"\n[store]\nurl = \"file://{}\"\n{}",
                var("STRATA_TEST_SASL_BOOTSTRAP"),
                root.path().join("archive").display(),
                task_toml(&task, &topic, &format!("format = \"jsonl\"\ndirectory = \"d\"\nstate = \"{state}\""))
            ),
        )
        .unwrap();
        let out = std::process::Command::new(strata_bin())
            .args(["dump", "--once", "--once-deadline", "60", "--config"])
            .arg(&cfg)
            .env("STRATA_TEST_ACL_PASSWORD", password.trim())
            .env("RUST_LOG", "info")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let describe_configs = format!("the configs of topic \"{topic}\"");
    let describe_cluster = "--operation Describe --cluster";

    let (code, text) = run("best_effort");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(&format!("task {task}: 10 records")), "{text}");
    assert!(
        !text.contains(password.trim()),
        "the password is never logged"
    );
    let store = FsStore::new(root.path().join("archive"));
    let dir = strata::layout::DumpDir::parse("d").unwrap();
    let listed = strata::state::list(&store, &dir, Some(&task))
        .await
        .unwrap();
    let last = strata::state::read(&store, &listed.last().unwrap().2)
        .await
        .unwrap();
    assert_eq!(last.missing.len(), 2, "{:#?}", last);
    for want in [describe_configs.as_str(), describe_cluster] {
        assert!(
            text.lines().any(
                |l| l.contains("lacks something this principal may not read") && l.contains(want)
            ),
            "a warning naming {want:?}: {text}"
        );
    }
    assert!(last.topic(&topic).unwrap().configs.is_empty());
    assert_eq!(last.topic(&topic).unwrap().watermarks, vec![(0, 10)]);

    let (code, text) = run("required");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains(&describe_configs), "{text}");
}

/// `format = "iceberg"` with the embedded SQL catalog, to `file://` and to LocalStack S3:
/// PyIceberg reads every record once and as produced; the snapshot summaries hold the offsets;
/// a second `--once` resumes at the table's offsets and adds only the new records.
#[tokio::test(flavor = "multi_thread")]
async fn iceberg_tables_on_file_and_s3_are_read_back_by_pyiceberg() {
    for s3 in [false, true] {
        let topic = unique(if s3 { "ice-s3" } else { "ice.file" });
        create_topic(&topic, 3).await;
        produce(&sample_records(&topic, 300, 3, base_ts())).await;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("cat/catalog.db");
        let (head, warehouse, s3_props) = if s3 {
            let prefix = unique("ice");
            let props = serde_json::json!({"s3.endpoint": s3_endpoint(), "s3.access-key-id": "test",
                "s3.secret-access-key": "test", "s3.region": "us-east-1"});
            (
                s3_toml(&prefix),
                format!("s3://{TEST_BUCKET}/{prefix}/lake"),
                props,
            )
        } else {
            let root = dir.path().join("store");
            std::fs::create_dir_all(&root).unwrap();
            let w = format!("file://{}/lake", root.display());
            (file_toml(&root), w, serde_json::json!({}))
        };
        let task = unique("ice-task");
        let toml = format!(
            "{head}{}",
            task_toml(
                &task,
                &topic,
                &format!("format = \"iceberg\"\ncompression = \"zstd\"\ndirectory = \"lake\"\n[tasks.iceberg]\ncatalog_file = \"{}\"\n", db.display())
            )
        );
        let summary = dump_once(&toml).await;
        assert_eq!(summary[0].records, 300, "s3: {s3}");
        assert!(
            summary[0].objects >= 3,
            "a data file per partition and day at least"
        );
        let table = format!("kafka.{}", topic.replace(['-', '.'], "_"));
        let props = common::iceberg::sql_catalog(&db, &warehouse, s3_props);
        let read = common::iceberg::pyiceberg_read(&props, &table);
        assert_eq!(common::iceberg::check_table(&read, &topic), 300);
        assert_eq!(read["files"].as_u64(), Some(summary[0].objects));
        if !s3 {
            // The cluster state a recovery needs, at the run's start and end, as a dump's.
            let states = dir.path().join(format!("store/lake/.strata/state/{task}"));
            let n = std::fs::read_dir(&states).map_or(0, |d| d.count());
            assert_eq!(n, 2, "{}", states.display());
            // A second reader: iceberg-core through Java's JDBC catalog on the same SQLite file
            // (its S3 file IO is not among the test's jars).
            let java = common::iceberg::java_check(&db, &warehouse, &table);
            assert_eq!(java["records"], 300);
            assert_eq!(java["files"].as_u64(), Some(summary[0].objects));
            assert_eq!(
                java["spec"],
                serde_json::json!(["timestamp_day=day(timestamp)"])
            );
            assert_eq!(
                java["fields"][3],
                serde_json::json!([4, "timestamp", "timestamptz"])
            );
            assert_eq!(java["fields"][7][0], 8);
            let snaps = java["snapshots"].as_array().unwrap();
            assert_eq!(snaps.len(), read["snapshots"].as_array().unwrap().len());
            let last = snaps.last().unwrap();
            assert_eq!(last["id"], java["current"]);
            assert_eq!(last["operation"], "append");
            assert_eq!(last["summary"]["strata.offsets"], read["current"]);
        }

        // Another run reads from the table's offsets: only what came since.
        produce(&sample_records(&topic, 30, 3, base_ts() + 400_000)).await;
        let summary = dump_once(&toml).await;
        assert_eq!(
            summary[0].records, 30,
            "s3: {s3}: resumed at the table's offsets"
        );
        let read = common::iceberg::pyiceberg_read(&props, &table);
        assert_eq!(common::iceberg::check_table(&read, &topic), 330);
        let again = dump_once(&toml).await;
        assert_eq!(again[0].records, 0, "nothing new");
        let after = common::iceberg::pyiceberg_read(&props, &table);
        assert_eq!(
            after["snapshots"], read["snapshots"],
            "nothing new, nothing committed"
        );
    }
}

/// A CDC task with `format = "iceberg"`: one Iceberg table per source table. Over two runs
/// split where the source repeats messages of the first, with a column added mid-stream and
/// deletes, the documented current-state query (DuckDB over PyIceberg's scan) gives exactly
/// the source's final state; every change is in its table once, the added column is a schema
/// change with a new field id, the messages that are not CDC are in the topic's table, whose
/// snapshots hold how far the task got. A cut whose CDC tables were committed and whose topic's
/// table was not (the topic's table rolled back) is read again without a change twice.
#[tokio::test(flavor = "multi_thread")]
async fn cdc_topics_become_iceberg_tables_whose_current_state_is_the_sources() {
    let topic = unique("ice-cdc");
    create_topic(&topic, 3).await;
    let data = cdc::generate(&topic, 3, 600, base_ts(), 11);
    let (dir, root) = common::iceberg::scratch();
    let db = dir.path().join("catalog.db");
    let toml = format!(
        "{}{}",
        file_toml(&root),
        task_toml(
            &unique("ice-cdc-task"),
            &topic,
            &format!("format = \"iceberg\"\ndirectory = \"lake\"\n[tasks.iceberg]\ncatalog_file = \"{}\"\n[tasks.cdc]\n[tasks.cdc.types.\"shop.orders\"]\nid = \"int\"\namount = \"decimal(10,2)\"\n", db.display())
        )
    );
    // Three runs: the second starts with a restart's repeats of the first's messages, the
    // third with the first change that has a coupon (a column the tables have not seen).
    let coupon = data
        .records
        .iter()
        .position(|r| {
            String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).contains("coupon")
        })
        .unwrap();
    let restart = data.restarts[0];
    assert!(restart < coupon);
    let mut summaries = Vec::new();
    for part in [
        &data.records[..restart],
        &data.records[restart..coupon],
        &data.records[coupon..],
    ] {
        produce(part).await;
        summaries.push(dump_once(&toml).await.remove(0));
    }
    let sum = |f: fn(&strata::cdc::Counts) -> u64| summaries.iter().map(|s| f(&s.cdc)).sum::<u64>();
    assert_eq!(sum(|c| c.messages), data.records.len() as u64);
    assert_eq!(sum(|c| c.changes), data.changes as u64, "changes in tables");
    assert_eq!(sum(|c| c.repeats), data.repeated as u64, "repeats left out");
    assert_eq!(sum(|c| c.malformed), data.malformed as u64);
    assert!(
        summaries[1].cdc.repeats > 0,
        "a repeat of the first run's changes in the second (the window was stored)"
    );
    assert_eq!(summaries[0].cdc.repeats, 0);

    let props = common::iceberg::sql_catalog(
        &db,
        &format!("file://{}/lake", root.display()),
        serde_json::json!({}),
    );
    // As if the last cut's commit to the topic's table never landed, its CDC tables' did.
    let topic_name = format!("kafka.{}", topic.replace('-', "_"));
    let (was, now) = common::iceberg::roll_back_last_commit(&props, &topic_name);
    assert_ne!(was, now);
    let again = dump_once(&toml).await.remove(0);
    assert!(
        again.cdc.messages > 0,
        "read again from the topic's table's offsets"
    );
    assert_eq!(
        again.cdc.changes, 0,
        "every change read again is in its table"
    );
    let dirs: Vec<(&str, String)> = cdc::table_dirs()
        .into_iter()
        .map(|d| (d, format!("kafka.{}", d.replace('.', "_"))))
        .collect();
    let read = common::iceberg::cdc_tables(&props, &dirs);
    let mut state = cdc::State::new();
    let mut changes = 0;
    for (d, _) in &dirs {
        let t = &read[*d];
        assert_eq!(t["twice"], 0, "{d}: a change twice");
        changes += t["changes"].as_u64().unwrap() as usize;
        state.insert(
            d.to_string(),
            serde_json::from_value(t["state"].clone()).unwrap(),
        );
        let offsets = &t["offsets"][format!("strata.offsets.{topic}")];
        assert!(offsets.is_string(), "{d}: the last snapshot's offsets: {t}");
    }
    assert_eq!(changes, data.changes, "distinct changes in the tables");
    assert_eq!(
        state, data.state,
        "the current state is the source's final state"
    );
    // The coupon column came mid-stream: a schema change, its columns' ids after all others'.
    let orders = &read["shop.orders"];
    assert!(orders["schemas"].as_u64().unwrap() >= 2, "{orders}");
    let ids = orders["ids"].as_object().unwrap();
    let (coupons, others): (Vec<_>, Vec<_>) = ids.iter().partition(|(n, _)| n.ends_with("_coupon"));
    let first_coupon = coupons
        .iter()
        .map(|(_, v)| v.as_i64().unwrap())
        .min()
        .unwrap();
    assert!(
        others
            .iter()
            .all(|(_, v)| v.as_i64().unwrap() < first_coupon),
        "{ids:?}"
    );
    // iceberg-core on the same SQLite file: the evolved schema with the same ids, every row.
    let java = common::iceberg::java_check(
        &db,
        &format!("file://{}/lake", root.display()),
        "kafka.shop_orders",
    );
    assert_eq!(java["records"], orders["changes"]);
    let fields = java["fields"].as_array().unwrap();
    assert_eq!(fields.len(), ids.len());
    for f in fields {
        assert_eq!(ids[f[1].as_str().unwrap()], f[0], "{f}");
    }
    // The topic's table: the messages that are not CDC, and the offsets at the ends.
    let topic_table =
        common::iceberg::pyiceberg_read(&props, &format!("kafka.{}", topic.replace('-', "_")));
    assert_eq!(
        topic_table["rows"].as_array().unwrap().len(),
        data.malformed
    );
    let at: BTreeMap<String, i64> =
        serde_json::from_str(topic_table["current"].as_str().unwrap()).unwrap();
    let consumed = consume_all(&topic);
    for p in 0..3 {
        let end = consumed.iter().filter(|c| c.partition == Some(p)).count() as i64;
        assert_eq!(at[&p.to_string()], end, "partition {p}");
    }
    assert_eq!(dump_once(&toml).await[0].records, 0, "nothing new");
}

/// A REST catalog (Apache Iceberg's own REST server, from Maven Central's jars, over a SQLite
/// file) that wants a bearer token: without one, or with client credentials it does not know,
/// the run fails naming the catalog (and no secret); with the OAuth2 client credentials strata
/// gets the token and creates the table and commits through it, with the token alone it
/// resumes at the table's offsets, and PyIceberg reads the table through the same server.
#[tokio::test(flavor = "multi_thread")]
async fn iceberg_tables_through_a_rest_catalog() {
    let topic = unique("ice-rest");
    create_topic(&topic, 2).await;
    produce(&sample_records(&topic, 200, 2, base_ts())).await;
    let (dir, root) = common::iceberg::scratch();
    let token = format!("tok{}", unique("en").replace('-', ""));
    let server = common::iceberg::RestCatalog::start(
        &dir.path().join("rest.db"),
        &format!("file://{}/lake", root.display()),
        Some((&token, "strata:s3cret-client")),
    );
    let task = unique("ice-rest-task");
    let toml = |auth: &str| {
        format!(
            "{}{}",
            file_toml(&root),
            task_toml(
                &task,
                &topic,
                &format!("format = \"iceberg\"\ndirectory = \"lake\"\n[tasks.iceberg]\ncatalog = \"rest\"\nuri = \"{}\"\n{auth}", server.uri)
            )
        )
    };
    for auth in ["", "credential = \"strata:wrong-secret-42\"\n"] {
        let cfg = config(&toml(auth));
        let e = strata::dump::run(
            &cfg,
            strata::dump::DumpOptions {
                once: true,
                ..Default::default()
            },
            Arc::new(AtomicBool::new(false)),
        )
        .await
        .expect_err("refused without a valid token")
        .to_string();
        assert!(e.contains("the rest catalog"), "{e}");
        assert!(!e.contains("wrong-secret-42"), "a secret in the error: {e}");
    }
    let summary = dump_once(&toml("credential = \"strata:s3cret-client\"\n")).await;
    assert_eq!(summary[0].records, 200);
    let table = format!("kafka.{}", topic.replace('-', "_"));
    let props = serde_json::json!({"type": "rest", "uri": server.uri, "token": token});
    let read = common::iceberg::pyiceberg_read(&props, &table);
    assert_eq!(common::iceberg::check_table(&read, &topic), 200);
    produce(&sample_records(&topic, 20, 2, base_ts() + 400_000)).await;
    assert_eq!(
        dump_once(&toml(&format!("token = \"{token}\"\n"))).await[0].records,
        20,
        "resumed at the table's offsets"
    );
    let read = common::iceberg::pyiceberg_read(&props, &table);
    assert_eq!(common::iceberg::check_table(&read, &topic), 220);
}
