//! What a partition's sequencer asks of the task's thread, which owns the Kafka consumer:
//! commits, rewinds (seeks with a new epoch) and what Kafka says of the partition; each with a
//! helper that retries until it works or the partition is revoked.

use super::sequencer::{next_backoff, PartitionFlags, UploadContext};
use super::start::Facts;
use super::Tp;
use std::sync::atomic::Ordering;
use tokio::sync::oneshot;

/// What a sequencer asks of the task's thread (which owns the consumer).
pub(super) enum Control {
    /// Commit `offset` (the next offset to read) for the partition.
    Commit {
        tp: Tp,
        offset: i64,
        ack: oneshot::Sender<Result<(), String>>,
    },
    /// Seek the partition to `to`, bump its epoch and tell its writer. With `commit`, the
    /// group's committed offset wins when it is further (this member's position was stale),
    /// and `to` is committed when the group is behind it.
    Rewind {
        tp: Tp,
        to: i64,
        commit: bool,
        /// The partition's next object must end right after this offset.
        cut: Option<i64>,
        /// Objects of the partition must end before this offset (archived from there on).
        limit: Option<i64>,
        ack: oneshot::Sender<Result<u64, String>>,
    },
    /// The group's committed offset and the partition's watermarks, now.
    Facts { tp: Tp, ack: FactsAck },
}

/// Where the answer to [`Control::Facts`] goes.
pub(super) type FactsAck = oneshot::Sender<Result<Facts, String>>;

/// Where a rewind takes a partition.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seek {
    pub to: i64,
    pub commit: bool,
    pub cut: Option<i64>,
    pub limit: Option<i64>,
}

impl Seek {
    pub fn to(to: i64) -> Self {
        Self {
            to,
            commit: false,
            cut: None,
            limit: None,
        }
    }

    /// Commits the position too (see [`Control::Rewind`]).
    pub fn committing(self) -> Self {
        Self {
            commit: true,
            ..self
        }
    }
}

/// Commits `offset`, retrying with a pause until it works (`true`) or the partition is revoked
/// (`false`). The next object waits: it must not be made visible before this commit.
pub(super) async fn commit_until_done(
    cx: &UploadContext,
    tp: &Tp,
    offset: i64,
    flags: &PartitionFlags,
) -> bool {
    let mut pause = None;
    loop {
        let (ack, rx) = oneshot::channel();
        if cx
            .control
            .send(Control::Commit {
                tp: tp.clone(),
                offset,
                ack,
            })
            .is_err()
        {
            return false;
        }
        match rx.await {
            Ok(Ok(())) => return true,
            Ok(Err(why)) => {
                cx.metrics.commit_errors.increment(1);
                tracing::warn!(task = %cx.task, topic = %tp.topic, partition = tp.partition, %why, "offset commit failed; the object is stored, the commit is retried");
            }
            Err(_) => return false,
        }
        if flags.revoked.load(Ordering::Relaxed) || cx.fatal.is_set() {
            return false;
        }
        let p = next_backoff(pause);
        pause = Some(p);
        tokio::time::sleep(p).await;
    }
}

async fn rewind(cx: &UploadContext, tp: &Tp, seek: Seek) -> Result<u64, String> {
    let (ack, rx) = oneshot::channel();
    cx.control
        .send(Control::Rewind {
            tp: tp.clone(),
            to: seek.to,
            commit: seek.commit,
            cut: seek.cut,
            limit: seek.limit,
            ack,
        })
        .map_err(|_| "the poll loop stopped".to_string())?;
    rx.await.map_err(|_| "the poll loop stopped".to_string())?
}

/// Rewinds, retrying with a pause until it works or the partition is revoked (`None`).
pub(super) async fn rewind_until_done(
    cx: &UploadContext,
    tp: &Tp,
    seek: Seek,
    flags: &PartitionFlags,
) -> Option<u64> {
    let mut pause = None;
    loop {
        match rewind(cx, tp, seek).await {
            Ok(e) => return Some(e),
            Err(why) => {
                tracing::warn!(task = %cx.task, topic = %tp.topic, partition = tp.partition, %why, "rewinding the partition failed; retrying");
            }
        }
        if flags.revoked.load(Ordering::Relaxed) || cx.fatal.is_set() {
            return None;
        }
        let p = next_backoff(pause);
        pause = Some(p);
        tokio::time::sleep(p).await;
    }
}

/// What Kafka says about the partition now (through the poll loop).
pub(super) async fn facts(cx: &UploadContext, tp: &Tp) -> Result<Facts, String> {
    let (ack, rx) = oneshot::channel();
    cx.control
        .send(Control::Facts {
            tp: tp.clone(),
            ack,
        })
        .map_err(|_| "the poll loop stopped".to_string())?;
    rx.await.map_err(|_| "the poll loop stopped".to_string())?
}

/// [`facts`], retrying with a pause until it works or the partition is revoked (`None`).
pub(super) async fn facts_until_done(
    cx: &UploadContext,
    tp: &Tp,
    flags: &PartitionFlags,
) -> Option<Facts> {
    let mut pause = None;
    loop {
        match facts(cx, tp).await {
            Ok(f) => return Some(f),
            Err(why) => {
                tracing::warn!(task = %cx.task, topic = %tp.topic, partition = tp.partition, %why, "asking Kafka where the partition stands failed; retrying");
            }
        }
        if flags.revoked.load(Ordering::Relaxed) || cx.fatal.is_set() {
            return None;
        }
        let p = next_backoff(pause);
        pause = Some(p);
        tokio::time::sleep(p).await;
    }
}
