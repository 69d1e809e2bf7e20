//! `[restore]`: what to replay from where, and into which cluster.

use super::store::bucket_name_problem;
use super::*;

fn timestamp(
    cx: &mut Ctx<'_>,
    k: &str,
    v: &Option<String>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let s = cx.text(k, v)?;
    chrono::DateTime::parse_from_rfc3339(&s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|_| {
            cx.push(
                k,
                format!("{s:?} is not an RFC 3339 time such as \"2026-11-29T00:00:00Z\""),
            )
        })
        .ok()
}

pub(super) fn restore(
    cx: &mut Ctx<'_>,
    raw: RawRestore,
    store: &StoreConfig,
    source_kafka: &KafkaConfig,
    memory_budget: ByteSize,
) -> Option<RestoreConfig> {
    cx.unknown("restore", &raw.unknown, RESTORE_KEYS);
    let before = cx.issues.len();
    let rstore = restore_store(cx, &raw.bucket, store);
    let directory = dump_dir(cx, "restore.directory", &raw.directory, "");
    let time_directory = raw
        .time_directory
        .is_some()
        .then(|| time_directory(cx, "restore.time_directory", &raw.time_directory));
    let time_zone = time_zone(cx, "restore.time_zone", &raw.time_zone);
    let topics = topic_selector(cx, "restore", &raw.topics, &raw.topic_regex, false);
    let (from, to) = time_range(cx, &raw.from, &raw.to);
    let naming = naming(cx, &raw.target_prefix, &raw.topic_map);
    let partitioning = partitioning(cx, &raw.partitioning);
    numbers(cx, &raw);
    let text = text_options(
        cx,
        "restore",
        &raw.record_delimiter,
        raw.store_key,
        &raw.key_separator,
    );
    let kafka = match raw.kafka {
        Some(k) => super::kafka::kafka(
            cx,
            "restore.kafka",
            k,
            super::kafka::Clients::RestoreOnly,
            KAFKA_KEYS,
        ),
        None => source_kafka.clone(),
    };
    if cx.issues.len() > before {
        return None;
    }
    Some(RestoreConfig {
        store: rstore,
        directory,
        time_directory,
        time_zone,
        topics,
        from,
        to,
        naming,
        partitioning,
        create_topics: raw.create_topics.unwrap_or(true),
        partitions: raw.partitions,
        replication_factor: raw.replication_factor,
        rate_limit_bytes_per_sec: raw.rate_limit_mib_per_sec.map(|r| r * 1024.0 * 1024.0),
        checkpoint: raw.checkpoint.map(PathBuf::from),
        skip_corrupt: raw.skip_corrupt.unwrap_or(false),
        exactly_once: raw.exactly_once.unwrap_or(false),
        text,
        kafka,
        memory_budget,
    })
}

/// `[store]`, or the same store with `restore.bucket`.
fn restore_store(cx: &mut Ctx<'_>, bucket: &Option<String>, store: &StoreConfig) -> StoreConfig {
    let Some(b) = cx.text("restore.bucket", bucket) else {
        return store.clone();
    };
    if let Some(p) = bucket_name_problem(&b) {
        cx.push("restore.bucket", p);
    }
    store.with_bucket(&b)
}

/// `from` and `to`, the second after the first.
fn time_range(
    cx: &mut Ctx<'_>,
    from: &Option<String>,
    to: &Option<String>,
) -> (
    Option<chrono::DateTime<chrono::Utc>>,
    Option<chrono::DateTime<chrono::Utc>>,
) {
    let from = timestamp(cx, "restore.from", from);
    let to = timestamp(cx, "restore.to", to);
    if let (Some(f), Some(t)) = (from, to) {
        if f >= t {
            cx.push(
                "restore.to",
                format!(
                    "{} is not after restore.from {}",
                    t.to_rfc3339(),
                    f.to_rfc3339()
                ),
            );
        }
    }
    (from, to)
}

/// Target topic names: `target_prefix`, and `topic_map` over it.
fn naming(
    cx: &mut Ctx<'_>,
    prefix: &Option<String>,
    map: &BTreeMap<String, String>,
) -> TopicNaming {
    let prefix = cx.text("restore.target_prefix", prefix).unwrap_or_default();
    if !prefix.is_empty() && !valid_topic_name(&prefix) {
        cx.push(
            "restore.target_prefix",
            format!(
                "{prefix:?} would make invalid topic names; use letters, digits, '.', '_', '-'"
            ),
        );
    }
    for (src, dst) in map {
        if !valid_topic_name(dst) {
            cx.push(
                format!("restore.topic_map.\"{src}\""),
                format!("{dst:?} is not a valid Kafka topic name"),
            );
        }
    }
    TopicNaming {
        map: map.clone(),
        prefix,
    }
}

fn partitioning(cx: &mut Ctx<'_>, raw: &Option<String>) -> Partitioning {
    cx.choice(
        "restore.partitioning",
        raw,
        Partitioning::Original,
        |s| match s {
            "original" => Some(Partitioning::Original),
            "key-hash" | "key_hash" => Some(Partitioning::KeyHash),
            _ => None,
        },
        "\"original\" or \"key-hash\"",
    )
}

/// Partitions, replication factor and rate limit are positive when set.
fn numbers(cx: &mut Ctx<'_>, raw: &RawRestore) {
    if raw.partitions.is_some_and(|p| p < 1) {
        cx.push("restore.partitions", "must be at least 1");
    }
    if raw.replication_factor.is_some_and(|r| r < 1) {
        cx.push(
            "restore.replication_factor",
            "must be at least 1; leave it out for the broker's default.replication.factor",
        );
    }
    if raw
        .rate_limit_mib_per_sec
        .is_some_and(|r| !(r > 0.0 && r.is_finite()))
    {
        cx.push(
            "restore.rate_limit_mib_per_sec",
            "must be a positive number of MiB per second",
        );
    }
}
