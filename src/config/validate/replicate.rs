//! A `[[tasks]]` entry with `type = "replicate"`: Kafka-to-Kafka replication (MirrorMaker 2's
//! model), its peer cluster, target naming and group offset sync.

use super::*;

/// Most topics an explicit topic map may name.
const MAX_MAPPED: usize = 20;

pub(super) fn task(cx: &mut Ctx<'_>, k: &str, raw: &RawReplicateTask) -> Option<ReplicateTask> {
    let before = cx.issues.len();
    let name = tasks::name(cx, k, &raw.name);
    let direction = direction(cx, k, &raw.direction);
    let local_alias = alias(cx, &format!("{k}.local_alias"), &raw.local_alias);
    let (peer_alias, peer) = peer(cx, k, raw.peer.as_ref());
    if let (Some(l), Some(p)) = (&local_alias, &peer_alias) {
        if l == p {
            cx.push(
                format!("{k}.peer.alias"),
                format!(
                    "is {p:?}, the same as local_alias; the two clusters need different aliases"
                ),
            );
        }
    }
    let topics = topics(cx, k, raw);
    let pipelines = pipelines(cx, k, raw.tasks);
    let naming = naming(cx, k, &raw.topic_map, raw.rename_topics.unwrap_or(false));
    let source_header = raw.source_header.unwrap_or(false);
    if direction == Direction::Both && naming != TargetNaming::Rename && !source_header {
        cx.push(format!("{k}.direction"), "is \"both\", but neither rename_topics = true nor source_header = true is set: records would be copied back and forth forever; set one of them");
    }
    if let Some(rf) = raw.replication_factor {
        if !(1..=32).contains(&rf) {
            cx.push(
                format!("{k}.replication_factor"),
                format!("{rf} is outside 1..=32"),
            );
        }
    }
    let start_offset = start_offset(cx, k, &raw.start_offset);
    let compression = compression(cx, k, &raw.compression);
    let group_sync = group_sync(cx, k, raw);
    let topic_refresh = tasks::topic_refresh(cx, k, raw.topic_refresh_secs);
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
        pipelines,
        naming,
        source_header,
        replication_factor: raw.replication_factor,
        start_offset,
        compression,
        exactly_once: raw.exactly_once.unwrap_or(true),
        group_sync,
        topic_refresh,
    })
}

fn direction(cx: &mut Ctx<'_>, k: &str, raw: &Option<String>) -> Direction {
    cx.choice(
        &format!("{k}.direction"),
        raw,
        Direction::Pull,
        |s| match s {
            "pull" => Some(Direction::Pull),
            "push" => Some(Direction::Push),
            "both" => Some(Direction::Both),
            _ => None,
        },
        "\"pull\" (peer to local), \"push\" (local to peer) or \"both\"",
    )
}

fn alias(cx: &mut Ctx<'_>, key: &str, raw: &Option<String>) -> Option<Alias> {
    match cx.text(key, raw) {
        None => {
            cx.push(
                key,
                "is missing; name the cluster (1-20 of letters, digits, '-', '_')",
            );
            None
        }
        Some(a) => Alias::parse(&a).map_err(|m| cx.push(key, m)).ok(),
    }
}

/// `[tasks.peer]`: the other cluster's alias and connection, checked like `[kafka]`.
fn peer(cx: &mut Ctx<'_>, k: &str, raw: Option<&RawPeer>) -> (Option<Alias>, Option<KafkaConfig>) {
    let key = format!("{k}.peer");
    let Some(p) = raw else {
        cx.push(key, "is missing; a [tasks.peer] table gives the other cluster: alias, bootstrap_servers and its security settings");
        return (None, None);
    };
    let alias = alias(cx, &format!("{key}.alias"), &p.alias);
    if p.kafka.bootstrap_servers.is_none() {
        cx.push(
            format!("{key}.bootstrap_servers"),
            "is missing; list the peer cluster's brokers (\"host:port\", ...)",
        );
    }
    let known = [RawPeer::KEYS, KAFKA_KEYS].concat();
    let kafka = kafka::kafka(cx, &key, p.kafka.clone(), kafka::Clients::Tasks, &known);
    (alias, Some(kafka))
}

/// Like a dump task's, but internal topics are never replicated.
fn topics(cx: &mut Ctx<'_>, k: &str, raw: &RawReplicateTask) -> Option<TopicSelector> {
    let topics = topic_selector(cx, k, &raw.topics, &raw.topic_regex, true);
    if let Some(TopicSelector::List(list)) = &topics {
        for t in list.iter().filter(|t| crate::config::never_replicated(t)) {
            cx.push(format!("{k}.topics"), format!("{t:?} is an internal topic (a name starting with \"__\" or ending in \"internal\"); those are never replicated"));
        }
    }
    topics
}

/// `tasks`: consumer/producer pipelines per direction.
fn pipelines(cx: &mut Ctx<'_>, k: &str, raw: Option<u32>) -> u32 {
    let n = raw.unwrap_or(2);
    if n == 0 || n > 64 {
        cx.push(
            format!("{k}.tasks"),
            format!("{n} is outside 1..=64 (consumer/producer pipelines per direction)"),
        );
    }
    n.clamp(1, 64)
}

/// What the target topics are called: `topic_map`, `rename_topics` or the source's names.
fn naming(
    cx: &mut Ctx<'_>,
    k: &str,
    map: &Option<BTreeMap<String, String>>,
    rename: bool,
) -> TargetNaming {
    let key = format!("{k}.topic_map");
    match (map, rename) {
        (Some(_), true) => {
            cx.push(key, "and rename_topics = true are both set; use one: an explicit map, or <source alias>.<topic> for every topic");
            TargetNaming::Rename
        }
        (Some(m), false) => {
            if m.len() > MAX_MAPPED {
                cx.push(
                    &key,
                    format!("maps {} topics, at most {MAX_MAPPED} are allowed", m.len()),
                );
            }
            for t in m.iter().flat_map(|(from, to)| [from, to]) {
                if !valid_topic_name(t) {
                    cx.push(&key, format!("{t:?} is not a valid Kafka topic name"));
                }
            }
            TargetNaming::Map(m.clone())
        }
        (None, true) => TargetNaming::Rename,
        (None, false) => TargetNaming::Identity,
    }
}

fn compression(cx: &mut Ctx<'_>, k: &str, raw: &Option<String>) -> ProduceCompression {
    cx.choice(
        &format!("{k}.compression"),
        raw,
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
    )
}

/// `sync_group_offsets` and the keys that only apply with it.
fn group_sync(cx: &mut Ctx<'_>, k: &str, raw: &RawReplicateTask) -> Option<GroupSync> {
    let key = |f: &str| format!("{k}.{f}");
    let interval = raw.sync_group_offsets_interval_secs.unwrap_or(60);
    if interval == 0 || interval > 86_400 {
        cx.push(
            key("sync_group_offsets_interval_secs"),
            format!("{interval} is outside 1..=86400 seconds"),
        );
    }
    if !raw.sync_group_offsets.unwrap_or(false) {
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
        return None;
    }
    let pattern = raw.groups_regex.as_deref().unwrap_or(".*");
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
}
