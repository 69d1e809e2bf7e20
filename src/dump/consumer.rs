//! The dump consumer: one consumer group per task, cooperative rebalancing, no auto-commit.
//! Rebalance callbacks only record what changed; the worker applies it before it touches the
//! next message, so buffers of revoked partitions are dropped before anything else happens.

use crate::config::{DumpTask, KafkaConfig};
use crate::kafka::{client_config, servers, KafkaError};
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::statistics::Statistics;
use rdkafka::TopicPartitionList;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A change of the partitions this worker owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AssignmentChange {
    Assigned(Vec<(String, i32)>),
    Revoked(Vec<(String, i32)>),
}

/// What a consumer's records lag is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LagOf {
    /// The group's committed offset (dump commits each stored object): `strata_consumer_lag`.
    Committed,
    /// The position handed to the application (replicate keeps its positions in the target,
    /// not in the source group): `strata_replicate_lag_records`.
    Position,
}

pub(crate) struct DumpContext {
    task: String,
    /// A replication flow's name, labelled on its metrics beside the task.
    flow: Option<String>,
    lag_of: LagOf,
    /// Refusals the consumer saw: a metadata call that fails names them.
    pub(crate) watch: crate::kafka::Watch,
    changes: Mutex<Vec<AssignmentChange>>,
    /// Set with every change, so the per-poll check needs no lock.
    changed: AtomicBool,
}

impl DumpContext {
    /// A context for a consumer of `task` (its lag metrics carry the name).
    pub(crate) fn new(task: &str) -> Self {
        Self::measuring(task, LagOf::Committed)
    }

    /// A context whose lag metric counts from `lag_of`.
    pub(crate) fn measuring(task: &str, lag_of: LagOf) -> Self {
        Self {
            task: task.to_string(),
            flow: None,
            lag_of,
            watch: crate::kafka::Watch::default(),
            changes: Mutex::new(Vec::new()),
            changed: AtomicBool::new(false),
        }
    }

    /// The same, for a replication flow (`<source>-><target>`).
    pub(crate) fn of_flow(mut self, flow: String) -> Self {
        self.flow = Some(flow);
        self
    }

    /// Changes recorded since the last call, oldest first.
    pub(crate) fn take_changes(&self) -> Vec<AssignmentChange> {
        if !self.changed.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        self.changes
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default()
    }
}

fn list(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

impl ClientContext for DumpContext {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        // End of partition is how `--once` learns it is done, not a failure.
        if matches!(
            error.rdkafka_error_code(),
            Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF)
        ) {
            return;
        }
        // A refusal after start (a rotated password, a broker's new certificate) is logged as
        // such and remembered for the poll loop's start-up checks; start-up already proved the
        // settings, so one broker's refusal later does not end a long-running task: librdkafka
        // keeps trying and the lag metric shows the stall.
        if self.watch.note(&error, reason) {
            tracing::error!(task = %self.task, error = %error, reason, "kafka refused this client; check its credentials and certificates");
            return;
        }
        tracing::error!(task = %self.task, error = %error, reason, "kafka client error; librdkafka retries");
    }

    fn stats(&self, s: Statistics) {
        for (topic, t) in &s.topics {
            for (p, part) in &t.partitions {
                let lag = match self.lag_of {
                    LagOf::Committed => lag(part),
                    LagOf::Position => {
                        position_lag(part.ls_offset, part.hi_offset, part.app_offset)
                    }
                };
                let (true, Some(lag)) = (*p >= 0, lag) else {
                    continue;
                };
                let name = match self.lag_of {
                    LagOf::Committed => "strata_consumer_lag",
                    LagOf::Position => "strata_replicate_lag_records",
                };
                let (task, topic, partition) = (self.task.clone(), topic.clone(), p.to_string());
                match &self.flow {
                    None => metrics::gauge!(name, "task" => task, "topic" => topic, "partition" => partition)
                        .set(lag as f64),
                    Some(f) => metrics::gauge!(name, "task" => task, "flow" => f.clone(), "topic" => topic, "partition" => partition)
                        .set(lag as f64),
                }
            }
        }
    }
}

/// Records not yet committed. librdkafka reports -1 before a partition's first commit; then
/// everything retained is lag.
fn lag(p: &rdkafka::statistics::Partition) -> Option<i64> {
    if p.consumer_lag >= 0 {
        Some(p.consumer_lag)
    } else if p.committed_offset < 0 && p.hi_offset >= 0 && p.lo_offset >= 0 {
        Some(p.hi_offset - p.lo_offset)
    } else {
        None
    }
}

/// Records between the position handed to the application and the end a read_committed
/// reader can reach (the last stable offset; the high watermark when there is none). `None`
/// before the first record was handed out.
fn position_lag(last_stable: i64, high: i64, app_offset: i64) -> Option<i64> {
    let end = if last_stable >= 0 { last_stable } else { high };
    (app_offset >= 0 && end >= 0).then(|| (end - app_offset).max(0))
}

impl ConsumerContext for DumpContext {
    fn pre_rebalance(&self, _c: &BaseConsumer<Self>, r: &Rebalance<'_>) {
        let change = match r {
            Rebalance::Assign(tpl) => AssignmentChange::Assigned(list(tpl)),
            Rebalance::Revoke(tpl) => AssignmentChange::Revoked(list(tpl)),
            Rebalance::Error(e) => {
                tracing::warn!(task = %self.task, error = %e, "consumer group rebalance failed; librdkafka retries");
                return;
            }
        };
        tracing::info!(task = %self.task, ?change, "partition assignment changed");
        if let Ok(mut c) = self.changes.lock() {
            c.push(change);
            self.changed.store(true, Ordering::Release);
        }
    }
}

/// How much of the buffer budget librdkafka's prefetch queue may use.
pub(super) const QUEUE_SHARE: usize = 8;

/// Re-check of a full prefetch queue, in ms; a fraction of the time the worker takes to drain
/// the queue at its slowest.
const FETCH_QUEUE_BACKOFF_MS: &str = "20";

/// Upper bound of one partition's share of a fetch response.
const PARTITION_FETCH_MAX: usize = 4 << 20;

/// librdkafka's fetch and queue sizes within `queue_bytes`: the response being received (a
/// quarter, `fetch.max.bytes`) and the messages queued ahead of the poll loop (the rest); the
/// queue limit does not count the response, so both come out of the share. Measured choices
/// (bench/README.md, "What moved the dump figures"):
/// - partitions fetch up to 4 MiB at a time instead of 1 MiB: fewer requests and socket reads
///   per byte, never more than one fetch response may hold;
/// - a full queue is re-checked after 20 ms instead of 1 s, so a worker slower than the
///   network (Parquet, jsonl) does not drain the queue and then sit idle.
fn fetch_settings(queue_bytes: usize) -> [(&'static str, String); 4] {
    let fetch_max = (queue_bytes / 4).clamp(1 << 20, 50 << 20);
    let queue_kib = (queue_bytes.saturating_sub(fetch_max) / 1024).max(1024);
    let partition_fetch_max = fetch_max.min(PARTITION_FETCH_MAX);
    [
        ("queued.max.messages.kbytes", queue_kib.to_string()),
        ("fetch.max.bytes", fetch_max.to_string()),
        ("max.partition.fetch.bytes", partition_fetch_max.to_string()),
        ("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS.to_string()),
    ]
}

/// Creates the task's consumer. `queue_bytes` bounds librdkafka's prefetch queue.
pub(super) fn create(
    k: &KafkaConfig,
    task: &DumpTask,
    queue_bytes: usize,
    once: bool,
) -> Result<BaseConsumer<DumpContext>, KafkaError> {
    let mut c = client_config(k);
    c.set("group.id", task.name.as_str())
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // Where a partition starts is settled explicitly once it is assigned (`start_offset`
        // applies to a new group there); a position out of range (retention passed it) must
        // never jump to the end and skip what is still there.
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("isolation.level", "read_committed")
        // Uploads happen between polls; leave room for a slow store before the group
        // decides this member is dead.
        .set("max.poll.interval.ms", "600000")
        .set("statistics.interval.ms", "10000")
        .set("enable.partition.eof", if once { "true" } else { "false" });
    for (key, value) in fetch_settings(queue_bytes) {
        c.set(key, value);
    }
    for (key, value) in &k.properties {
        c.set(key, value);
    }
    c.create_with_context(DumpContext::new(task.name.as_str()))
        .map_err(|source| KafkaError::Client {
            servers: servers(k),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(queue_bytes: usize, key: &str) -> usize {
        let all = fetch_settings(queue_bytes);
        let found = all.iter().find(|(k, _)| *k == key);
        found
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} missing or not a number in {all:?}"))
    }

    #[test]
    fn the_default_budget_fetches_4_mib_per_partition_and_rechecks_a_full_queue_quickly() {
        // The default budget of 256 MiB gives librdkafka an eighth: the response being
        // received and the queue together.
        let queue = (256 << 20) / QUEUE_SHARE;
        assert_eq!(setting(queue, "queued.max.messages.kbytes"), 24 * 1024);
        assert_eq!(setting(queue, "fetch.max.bytes"), 8 << 20);
        assert_eq!(setting(queue, "max.partition.fetch.bytes"), 4 << 20);
        assert_eq!(setting(queue, "fetch.queue.backoff.ms"), 20);
    }

    #[test]
    fn a_partition_never_fetches_more_than_a_whole_fetch_may_hold() {
        for queue in [0, 1 << 10, 1 << 20, 3 << 20, 8 << 20, 64 << 20, 1 << 30] {
            let fetch = setting(queue, "fetch.max.bytes");
            let partition = setting(queue, "max.partition.fetch.bytes");
            assert!(partition <= fetch, "queue {queue}: {partition} > {fetch}");
            assert!(
                (1 << 20..=50 << 20).contains(&fetch),
                "queue {queue}: fetch {fetch}"
            );
            assert!(partition >= 1 << 20, "queue {queue}: partition {partition}");
        }
        // A small queue keeps librdkafka's 1 MiB floor instead of starving a partition.
        assert_eq!(setting(2 << 20, "max.partition.fetch.bytes"), 1 << 20);
    }

    #[test]
    fn position_lag_counts_to_the_last_stable_offset() {
        assert_eq!(
            position_lag(100, 120, 90),
            Some(10),
            "an open transaction's records wait"
        );
        assert_eq!(position_lag(-1, 120, 90), Some(30));
        assert_eq!(position_lag(100, 100, 100), Some(0));
        assert_eq!(position_lag(100, 100, 105), Some(0), "never negative");
        assert_eq!(
            position_lag(100, 100, -1001),
            None,
            "nothing handed out yet"
        );
    }
}
