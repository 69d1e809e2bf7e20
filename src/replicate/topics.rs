//! Target topics: created when missing with the source's partition count, the configured
//! replica count and the source's retention-related settings; grown when the source grows;
//! checked to accept the batches a replica needs. Plus the flow's bookkeeping topics: created
//! compacted with the task's replica count, and refused when an existing one is not compacted.

use super::{off_thread, ReplicateError};
use crate::kafka::Admin;
use std::sync::Arc;

/// Topic settings copied from a source topic to a new target topic (when the source sets them).
/// Not `message.timestamp.type`: the target keeps the timestamps the records carry.
const COPIED: &[&str] = &[
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
    "segment.bytes",
    "segment.ms",
    "min.cleanable.dirty.ratio",
];

/// The smallest batch a target topic must accept (what a replica fetches at once).
pub const MIN_BATCH: u64 = 524_288;

/// Settings of a new target topic from the source's (pure).
pub fn copied_configs(
    source: &std::collections::BTreeMap<String, String>,
) -> Vec<(String, String)> {
    source
        .iter()
        .filter(|(k, _)| COPIED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Why a target topic cannot take the batches (pure): `Some(message)` naming the fix.
pub fn batch_problem(topic: &str, max_message_bytes: Option<&str>) -> Option<String> {
    let n: u64 = max_message_bytes?.trim().parse().ok()?;
    (n < MIN_BATCH).then(|| {
        format!(
            "target topic {topic:?} accepts batches of at most {n} bytes (max.message.bytes); replicated batches need at least {MIN_BATCH}: raise it, e.g. kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config max.message.bytes={MIN_BATCH}"
        )
    })
}

/// Makes sure `target` exists with at least the source topic's partitions and takes the
/// batches. `partitions` is the source's count.
pub async fn ensure_target(
    source: &Arc<Admin>,
    target: &Arc<Admin>,
    source_topic: &str,
    target_topic: &str,
    partitions: i32,
    replication: Option<i32>,
) -> Result<(), ReplicateError> {
    let (t, name) = (target.clone(), target_topic.to_string());
    match off_thread(move || t.partition_count(&name)).await? {
        Some(n) if n < partitions => {
            tracing::info!(topic = %target_topic, from = n, to = partitions, "the source topic grew: adding partitions to the target topic");
            target
                .add_partitions(target_topic, partitions as usize)
                .await?;
        }
        Some(_) => {}
        None => {
            check_replicas(target, target_topic, replication).await?;
            let configs = copied_configs(&source.topic_configs(source_topic).await?);
            let refs: Vec<(&str, &str)> = configs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            // -1: the target broker's default.replication.factor.
            target
                .create_topic(target_topic, partitions, replication.unwrap_or(-1), &refs)
                .await?;
            tracing::info!(topic = %target_topic, partitions, replication = ?replication, configs = ?configs, "created the target topic");
        }
    }
    let max = target
        .topic_config(target_topic, "max.message.bytes")
        .await?;
    if let Some(why) = batch_problem(target_topic, max.as_deref()) {
        return Err(ReplicateError::Setup(why));
    }
    Ok(())
}

/// Refuses to create `topic` with more replicas than its cluster has brokers.
async fn check_replicas(
    admin: &Arc<Admin>,
    topic: &str,
    replication: Option<i32>,
) -> Result<(), ReplicateError> {
    if let Some(rf) = replication {
        let a = admin.clone();
        let brokers = off_thread(move || a.broker_count()).await?;
        if rf as usize > brokers {
            return Err(ReplicateError::Replicas {
                topic: topic.to_string(),
                replicas: rf,
                brokers,
            });
        }
    }
    Ok(())
}

/// Why an existing bookkeeping topic cannot keep its records (pure): its `cleanup.policy` must
/// be `compact` alone (MirrorMaker 2 creates its offset syncs and checkpoints so), or records
/// expire, and a position that expired reads as lost bookkeeping. `Some(message)` names the fix.
pub fn policy_problem(topic: &str, cleanup_policy: Option<&str>, servers: &str) -> Option<String> {
    let policy = cleanup_policy?;
    let compact_only = policy
        .split(',')
        .map(str::trim)
        .all(|p| p.eq_ignore_ascii_case("compact"));
    (!compact_only).then(|| {
        format!(
            "bookkeeping topic {topic:?} has cleanup.policy={policy}; strata keeps its positions, offset syncs or checkpoints there and needs cleanup.policy=compact, or its records expire: fix it with kafka-configs.sh --bootstrap-server {servers} --alter --entity-type topics --entity-name {topic} --add-config cleanup.policy=compact"
        )
    })
}

/// A single-partition compacted bookkeeping topic (MirrorMaker 2's layout for its own), with
/// the task's replica count (`None`: the broker's default.replication.factor). An existing one
/// must be compacted.
pub async fn ensure_internal(
    admin: &Arc<Admin>,
    topic: &str,
    replication: Option<i32>,
    servers: &str,
) -> Result<(), ReplicateError> {
    let (a, name) = (admin.clone(), topic.to_string());
    if off_thread(move || a.partition_count(&name))
        .await?
        .is_some()
    {
        let policy = admin.topic_config(topic, "cleanup.policy").await?;
        return match policy_problem(topic, policy.as_deref(), servers) {
            Some(why) => Err(ReplicateError::Setup(why)),
            None => Ok(()),
        };
    }
    check_replicas(admin, topic, replication).await?;
    admin
        .create_topic(
            topic,
            1,
            replication.unwrap_or(-1),
            &[
                ("cleanup.policy", "compact"),
                // Compact often: the positions topic gets a record per transaction.
                ("segment.ms", "600000"),
                ("min.cleanable.dirty.ratio", "0.1"),
            ],
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn retention_settings_carry_over_and_timestamps_do_not() {
        let src = BTreeMap::from([
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("retention.ms".to_string(), "86400000".to_string()),
            (
                "message.timestamp.type".to_string(),
                "LogAppendTime".to_string(),
            ),
            ("max.message.bytes".to_string(), "2097152".to_string()),
        ]);
        let got = copied_configs(&src);
        let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            ["cleanup.policy", "max.message.bytes", "retention.ms"]
        );
    }

    #[test]
    fn small_batches_are_refused_with_the_fix() {
        assert!(batch_problem("t", Some("1048588")).is_none());
        assert!(batch_problem("t", Some("524288")).is_none());
        let e = batch_problem("orders", Some("100000")).unwrap();
        assert!(
            e.contains("orders") && e.contains("max.message.bytes=524288"),
            "{e}"
        );
        assert!(batch_problem("t", None).is_none());
    }

    #[test]
    fn bookkeeping_topics_must_be_compacted_alone() {
        assert!(policy_problem("p", Some("compact"), "k:9092").is_none());
        assert!(policy_problem("p", None, "k:9092").is_none());
        for bad in ["delete", "compact,delete", "delete, compact"] {
            let e = policy_problem("strata.t.a-b.positions.internal", Some(bad), "k:9092")
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(
                e.contains("strata.t.a-b.positions.internal")
                    && e.contains(&format!("cleanup.policy={bad}"))
                    && e.contains("--bootstrap-server k:9092")
                    && e.contains("--add-config cleanup.policy=compact"),
                "{e}"
            );
        }
    }
}
