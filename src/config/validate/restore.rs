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
    let rstore = match cx.text("restore.bucket", &raw.bucket) {
        None => store.clone(),
        Some(b) => {
            if let Some(p) = bucket_name_problem(&b) {
                cx.push("restore.bucket", p);
            }
            store.with_bucket(&b)
        }
    };
    let directory = cx
        .text("restore.directory", &raw.directory)
        .unwrap_or_default();
    let directory = crate::layout::DumpDir::parse(&directory).unwrap_or_else(|e| {
        cx.push("restore.directory", format!("{directory:?} {e}"));
        crate::layout::DumpDir::default()
    });
    let time_directory = raw
        .time_directory
        .is_some()
        .then(|| time_directory(cx, "restore.time_directory", &raw.time_directory));
    let time_zone = time_zone(cx, "restore.time_zone", &raw.time_zone);
    let topics = topic_selector(cx, "restore", &raw.topics, &raw.topic_regex, false);
    let from = timestamp(cx, "restore.from", &raw.from);
    let to = timestamp(cx, "restore.to", &raw.to);
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
    let prefix = cx
        .text("restore.target_prefix", &raw.target_prefix)
        .unwrap_or_default();
    if !prefix.is_empty() && !valid_topic_name(&prefix) {
        cx.push(
            "restore.target_prefix",
            format!(
                "{prefix:?} would make invalid topic names; use letters, digits, '.', '_', '-'"
            ),
        );
    }
    for (src, dst) in &raw.topic_map {
        if !valid_topic_name(dst) {
            cx.push(
                format!("restore.topic_map.\"{src}\""),
                format!("{dst:?} is not a valid Kafka topic name"),
            );
        }
    }
    let partitioning = cx.choice(
        "restore.partitioning",
        &raw.partitioning,
        Partitioning::Original,
        |s| match s {
            "original" => Some(Partitioning::Original),
            "key-hash" | "key_hash" => Some(Partitioning::KeyHash),
            _ => None,
        },
        "\"original\" or \"key-hash\"",
    );
    if let Some(p) = raw.partitions {
        if p < 1 {
            cx.push("restore.partitions", "must be at least 1");
        }
    }
    let replication_factor = raw.replication_factor;
    if replication_factor.is_some_and(|r| r < 1) {
        cx.push(
            "restore.replication_factor",
            "must be at least 1; leave it out for the broker's default.replication.factor",
        );
    }
    let rate = raw.rate_limit_mib_per_sec;
    if rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        cx.push(
            "restore.rate_limit_mib_per_sec",
            "must be a positive number of MiB per second",
        );
    }
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
        naming: TopicNaming {
            map: raw.topic_map,
            prefix,
        },
        partitioning,
        create_topics: raw.create_topics.unwrap_or(true),
        partitions: raw.partitions,
        replication_factor,
        rate_limit_bytes_per_sec: rate.map(|r| r * 1024.0 * 1024.0),
        checkpoint: raw.checkpoint.map(PathBuf::from),
        skip_corrupt: raw.skip_corrupt.unwrap_or(false),
        exactly_once: raw.exactly_once.unwrap_or(false),
        text,
        kafka,
        memory_budget,
    })
}
