//! The source consumer's context: rebalance callbacks only record what changed (the source
//! applies it before it touches the next message, so what a sink holds of a revoked partition
//! is dropped before anything else happens); errors are logged and refusals remembered; lag
//! metrics come from librdkafka's statistics.

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::statistics::Statistics;
use rdkafka::TopicPartitionList;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A change of the partitions this member owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssignmentChange {
    Assigned(Vec<(String, i32)>),
    Revoked(Vec<(String, i32)>),
}

/// What a consumer's records lag is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LagOf {
    /// The group's committed offset (dump commits each stored object): `strata_consumer_lag`.
    Committed,
    /// The position handed to the application (replicate keeps its positions in the target,
    /// not in the source group): `strata_replicate_lag_records`.
    Position,
}

/// Called in the rebalance callback with the partitions a member gives up, before librdkafka
/// lets them go: a sink whose writes the group does not fence (an Iceberg table's commits)
/// finishes what is in flight there, so the next owner starts after it.
pub type RevokeHook = std::sync::Arc<dyn Fn(&[(String, i32)]) + Send + Sync>;

pub struct SourceContext {
    task: String,
    /// A replication flow's name, labelled on its metrics beside the task.
    flow: Option<String>,
    lag_of: LagOf,
    /// Refusals the consumer saw: a metadata call that fails names them.
    pub(crate) watch: crate::kafka::Watch,
    changes: Mutex<Vec<AssignmentChange>>,
    /// Set with every change, so the per-poll check needs no lock.
    changed: AtomicBool,
    on_revoke: Option<RevokeHook>,
}

impl SourceContext {
    /// A context for a consumer of `task` (its lag metrics carry the name).
    pub fn new(task: &str) -> Self {
        Self::measuring(task, LagOf::Committed)
    }

    /// A context whose lag metric counts from `lag_of`.
    pub fn measuring(task: &str, lag_of: LagOf) -> Self {
        Self {
            task: task.to_string(),
            flow: None,
            lag_of,
            watch: crate::kafka::Watch::default(),
            changes: Mutex::new(Vec::new()),
            changed: AtomicBool::new(false),
            on_revoke: None,
        }
    }

    /// The same, calling `hook` with every revoke.
    pub fn on_revoke(mut self, hook: Option<RevokeHook>) -> Self {
        self.on_revoke = hook;
        self
    }

    /// The same, for a replication flow (`<source>-><target>`).
    pub fn of_flow(mut self, flow: String) -> Self {
        self.flow = Some(flow);
        self
    }

    /// Changes recorded since the last call, oldest first.
    pub fn take_changes(&self) -> Vec<AssignmentChange> {
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

impl ClientContext for SourceContext {
    crate::kafka::msk_iam::oauth_token_hook!();

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
        if let Some(times) = crate::kafka::refusal::retried(&error) {
            tracing::error!(task = %self.task, error = %error, reason, times, "kafka client error; librdkafka retries");
        }
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

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, _c: &BaseConsumer<Self>, r: &Rebalance<'_>) {
        let change = match r {
            Rebalance::Assign(tpl) => AssignmentChange::Assigned(list(tpl)),
            Rebalance::Revoke(tpl) => {
                let revoked = list(tpl);
                if let Some(hook) = &self.on_revoke {
                    hook(&revoked);
                }
                AssignmentChange::Revoked(revoked)
            }
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

#[cfg(test)]
mod tests {
    use super::*;

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
