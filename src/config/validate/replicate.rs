//! `[[tasks]]` with `type = "replicate"`: Kafka-to-Kafka replication (MirrorMaker 2's model),
//! and the keys that belong to one task type only.

use super::*;

/// Keys of a replicate task (beside `type`, `name`, `topics`, `topic_regex`, `start_offset`,
/// `compression`, `topic_refresh_secs`, which both task types have).
pub(super) const REPLICATE_ONLY: &[&str] = &[
    "direction",
    "local_alias",
    "tasks",
    "rename_topics",
    "topic_map",
    "source_header",
    "replication_factor",
    "exactly_once",
    "sync_group_offsets",
    "sync_group_offsets_interval_secs",
    "groups_regex",
    "peer",
];

/// Keys of a dump task only.
pub(super) const DUMP_ONLY: &[&str] = &[
    "dump_interval_secs",
    "bucket",
    "directory",
    "time_directory",
    "time_zone",
    "time_source",
    "record_delimiter",
    "store_key",
    "key_separator",
    "format",
    "max_file_size",
    "allow_retention_gaps",
    "cdc",
];

/// Most topics an explicit topic map may name.
const MAX_MAPPED: usize = 20;

fn present(raw: &RawTask) -> Vec<&'static str> {
    let set: [(&'static str, bool); 25] = [
        ("direction", raw.direction.is_some()),
        ("local_alias", raw.local_alias.is_some()),
        ("tasks", raw.tasks.is_some()),
        ("rename_topics", raw.rename_topics.is_some()),
        ("topic_map", raw.topic_map.is_some()),
        ("source_header", raw.source_header.is_some()),
        ("replication_factor", raw.replication_factor.is_some()),
        ("exactly_once", raw.exactly_once.is_some()),
        ("sync_group_offsets", raw.sync_group_offsets.is_some()),
        (
            "sync_group_offsets_interval_secs",
            raw.sync_group_offsets_interval_secs.is_some(),
        ),
        ("groups_regex", raw.groups_regex.is_some()),
        ("peer", raw.peer.is_some()),
        ("dump_interval_secs", raw.dump_interval_secs.is_some()),
        ("bucket", raw.bucket.is_some()),
        ("directory", raw.directory.is_some()),
        ("time_directory", raw.time_directory.is_some()),
        ("time_zone", raw.time_zone.is_some()),
        ("time_source", raw.time_source.is_some()),
        ("record_delimiter", raw.record_delimiter.is_some()),
        ("store_key", raw.store_key.is_some()),
        ("key_separator", raw.key_separator.is_some()),
        ("format", raw.format.is_some()),
        ("max_file_size", raw.max_file_size.is_some()),
        ("allow_retention_gaps", raw.allow_retention_gaps.is_some()),
        ("cdc", raw.cdc.is_some()),
    ];
    set.iter().filter(|(_, p)| *p).map(|(k, _)| *k).collect()
}

/// Refuses the keys of the other task type.
pub(super) fn foreign_keys(cx: &mut Ctx<'_>, k: &str, raw: &RawTask, replicate: bool) {
    let (foreign, kind, other) = if replicate {
        (DUMP_ONLY, "replicate", "dump")
    } else {
        (REPLICATE_ONLY, "dump", "replicate")
    };
    for key in present(raw).into_iter().filter(|p| foreign.contains(p)) {
        cx.push(
            format!("{k}.{key}"),
            format!("applies to type = \"{other}\" tasks; this is a {kind} task: remove it"),
        );
    }
}

pub(super) fn task(cx: &mut Ctx<'_>, k: &str, raw: &RawTask) -> Option<ReplicateTask> {
    let before = cx.issues.len();
    foreign_keys(cx, k, raw, true);
    let key = |s: &str| format!("{k}.{s}");
    let name = match cx.text(&key("name"), &raw.name) {
        None => {
            cx.push(key("name"), "is missing; every task needs a name");
            None
        }
        Some(n) => TaskName::parse(&n)
            .map_err(|m| cx.push(key("name"), m))
            .ok(),
    };
    let direction = cx.choice(
        &key("direction"),
        &raw.direction,
        Direction::Pull,
        |s| match s {
            "pull" => Some(Direction::Pull),
            "push" => Some(Direction::Push),
            "both" => Some(Direction::Both),
            _ => None,
        },
        "\"pull\" (peer to local), \"push\" (local to peer) or \"both\"",
    );
    let alias = |cx: &mut Ctx<'_>, field: &str, v: &Option<String>| match cx.text(field, v) {
        None => {
            cx.push(
                field,
                "is missing; name the cluster (1-20 of letters, digits, '-', '_')",
            );
            None
        }
        Some(a) => Alias::parse(&a).map_err(|m| cx.push(field, m)).ok(),
    };
    let local_alias = alias(cx, &key("local_alias"), &raw.local_alias);
    let (peer_alias, peer) = match &raw.peer {
        None => {
            cx.push(key("peer"), "is missing; a [tasks.peer] table gives the other cluster: alias, bootstrap_servers and its security settings");
            (None, None)
        }
        Some(p) => {
            let a = alias(cx, &key("peer.alias"), &p.alias);
            let raw_kafka = p.kafka.clone();
            if p.kafka.bootstrap_servers.is_none() {
                cx.push(
                    key("peer.bootstrap_servers"),
                    "is missing; list the peer cluster's brokers (\"host:port\", ...)",
                );
            }
            (
                a,
                Some(kafka::kafka(
                    cx,
                    &key("peer"),
                    raw_kafka,
                    kafka::Clients::Tasks,
                )),
            )
        }
    };
    if let (Some(l), Some(p)) = (&local_alias, &peer_alias) {
        if l == p {
            cx.push(
                key("peer.alias"),
                format!(
                    "is {p:?}, the same as local_alias; the two clusters need different aliases"
                ),
            );
        }
    }
    let topics = super::topic_selector(cx, k, &raw.topics, &raw.topic_regex, true);
    if let Some(TopicSelector::List(list)) = &topics {
        for t in list.iter().filter(|t| crate::config::never_replicated(t)) {
            cx.push(key("topics"), format!("{t:?} is an internal topic (a name starting with \"__\" or ending in \"internal\"); those are never replicated"));
        }
    }
    let pipelines = raw.tasks.unwrap_or(2);
    if pipelines == 0 || pipelines > 64 {
        cx.push(
            key("tasks"),
            format!("{pipelines} is outside 1..=64 (consumer/producer pipelines per direction)"),
        );
    }
    let rename = raw.rename_topics.unwrap_or(false);
    let naming = match (&raw.topic_map, rename) {
        (Some(_), true) => {
            cx.push(key("topic_map"), "and rename_topics = true are both set; use one: an explicit map, or <source alias>.<topic> for every topic");
            TargetNaming::Rename
        }
        (Some(m), false) => {
            if m.len() > MAX_MAPPED {
                cx.push(
                    key("topic_map"),
                    format!("maps {} topics, at most {MAX_MAPPED} are allowed", m.len()),
                );
            }
            for (from, to) in m {
                for t in [from, to] {
                    if !super::valid_topic_name(t) {
                        cx.push(
                            key("topic_map"),
                            format!("{t:?} is not a valid Kafka topic name"),
                        );
                    }
                }
            }
            TargetNaming::Map(m.clone())
        }
        (None, true) => TargetNaming::Rename,
        (None, false) => TargetNaming::Identity,
    };
    let source_header = raw.source_header.unwrap_or(false);
    if direction == Direction::Both && naming != TargetNaming::Rename && !source_header {
        cx.push(key("direction"), "is \"both\", but neither rename_topics = true nor source_header = true is set: records would be copied back and forth forever; set one of them");
    }
    if let Some(rf) = raw.replication_factor {
        if !(1..=32).contains(&rf) {
            cx.push(key("replication_factor"), format!("{rf} is outside 1..=32"));
        }
    }
    let start_offset = super::start_offset(cx, k, &raw.start_offset);
    let compression = cx.choice(
        &key("compression"),
        &raw.compression,
        ProduceCompression::None,
        |s| match s {
            "none" => Some(ProduceCompression::None),
            "gzip" => Some(ProduceCompression::Gzip),
            "snappy" => Some(ProduceCompression::Snappy),
            "lz4" => Some(ProduceCompression::Lz4),
            "zstd" => Some(ProduceCompression::Zstd),
            _ => None,
        },
        "\"none\", \"gzip\", \"snappy\", \"lz4\" or \"zstd\"",
    );
    let interval = raw.sync_group_offsets_interval_secs.unwrap_or(60);
    if interval == 0 || interval > 86_400 {
        cx.push(
            key("sync_group_offsets_interval_secs"),
            format!("{interval} is outside 1..=86400 seconds"),
        );
    }
    let group_sync = if raw.sync_group_offsets.unwrap_or(false) {
        let pattern = raw.groups_regex.clone().unwrap_or_else(|| ".*".into());
        match regex::Regex::new(&format!("^(?:{pattern})$")) {
            Ok(groups) => Some(GroupSync {
                interval: Duration::from_secs(interval.max(1)),
                groups,
            }),
            Err(e) => {
                let detail = e.to_string().lines().last().unwrap_or_default().to_string();
                cx.push(
                    key("groups_regex"),
                    format!("is not a valid regular expression: {detail}"),
                );
                None
            }
        }
    } else {
        for (f, set) in [
            ("groups_regex", raw.groups_regex.is_some()),
            (
                "sync_group_offsets_interval_secs",
                raw.sync_group_offsets_interval_secs.is_some(),
            ),
        ] {
            if set {
                cx.push(key(f), "applies only with sync_group_offsets = true");
            }
        }
        None
    };
    let refresh = raw
        .topic_refresh_secs
        .unwrap_or(defaults::TOPIC_REFRESH_SECS);
    if refresh == 0 {
        cx.push(key("topic_refresh_secs"), "must be at least 1");
    }
    if cx.issues.len() > before {
        return None;
    }
    Some(ReplicateTask {
        name: name?,
        direction,
        local_alias: local_alias?,
        peer_alias: peer_alias?,
        peer: peer?,
        topics: topics?,
        pipelines: pipelines.clamp(1, 64),
        naming,
        source_header,
        replication_factor: raw.replication_factor,
        start_offset,
        compression,
        exactly_once: raw.exactly_once.unwrap_or(true),
        group_sync,
        topic_refresh: Duration::from_secs(refresh.max(1)),
    })
}
