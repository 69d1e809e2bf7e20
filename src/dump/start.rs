//! Where an assigned partition starts, from the group's committed offset, the partition's
//! watermarks and where its archive ends (pure). A group whose offsets are gone goes on where
//! the archive ends; records deleted by retention before they were archived are a gap, which is
//! recorded beside the archive and reported, never skipped in silence. [`start_partition`] is
//! the sequencer's side of it: it asks Kafka and the index, then moves the partition.

use super::index::{self, PartitionIndex};
use super::requests::{facts, rewind_until_done, Seek};
use super::sequencer::{fatal, next_backoff, PartitionFlags, UploadContext};
use super::{DumpError, Tp};
use crate::config::StartOffset;
use crate::layout::DumpDir;
use crate::store::StoreError;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What Kafka says about a partition when it is assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Facts {
    pub committed: Option<i64>,
    pub low: i64,
    pub high: i64,
}

/// Offsets `from..to` (end exclusive) of a partition deleted before they were archived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    pub from: i64,
    pub to: i64,
}

impl Gap {
    pub fn offsets(&self) -> i64 {
        self.to - self.from
    }
}

/// How the partition starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Where the consumer starts on its own: the group's committed offset.
    AsCommitted,
    /// At `at`, committed at once (a group with no or an older offset learns where it is).
    Seek { at: i64, gap: Option<Gap> },
}

/// Why a partition cannot start: going on would archive records under the names of archived
/// ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The archive holds offsets up to `end` but the partition ends before it.
    ArchiveAhead { end: i64, high: i64 },
    /// The group committed past the partition's end.
    CommittedAhead { committed: i64, high: i64 },
}

/// The start of a partition (pure). `end` is the offset after the archive's newest object.
pub(crate) fn plan(f: Facts, end: Option<i64>, start: StartOffset) -> Result<Plan, Refusal> {
    if let Some(e) = end.filter(|e| *e > f.high) {
        return Err(Refusal::ArchiveAhead {
            end: e,
            high: f.high,
        });
    }
    let gap_to_low = |from: i64| (from < f.low).then_some(Gap { from, to: f.low });
    Ok(match f.committed {
        Some(c) if c > f.high => {
            return Err(Refusal::CommittedAhead {
                committed: c,
                high: f.high,
            })
        }
        // Retention deleted records from the committed offset on; what the archive holds of
        // them (a group that went back over it) is no gap.
        Some(c) if c < f.low => Plan::Seek {
            at: f.low,
            gap: gap_to_low(end.map_or(c, |e| e.max(c))),
        },
        Some(_) => Plan::AsCommitted,
        // The group forgot (deleted, expired): the archive knows where it ended.
        None => match end {
            Some(e) => Plan::Seek {
                at: e.max(f.low),
                gap: gap_to_low(e),
            },
            None => Plan::Seek {
                at: match start {
                    StartOffset::Earliest => f.low,
                    StartOffset::Latest => f.high,
                },
                gap: None,
            },
        },
    })
}

/// A gap as recorded beside the archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapRecord {
    pub task: String,
    pub topic: String,
    pub partition: i32,
    pub from: i64,
    pub to: i64,
    /// When the dump found it (RFC 3339, UTC).
    pub found_at: String,
    pub reason: String,
}

/// Where a gap is recorded: `<dir>.strata/gaps/<topic>/<partition>/<from>-<to>.json`.
pub(crate) fn gap_key(dir: &DumpDir, tp: &Tp, gap: Gap) -> String {
    format!(
        "{}.strata/gaps/{}/{}/{:020}-{:020}.json",
        dir.prefix(),
        tp.topic,
        tp.partition,
        gap.from,
        gap.to
    )
}

/// How a partition's start ended.
pub(super) enum Started {
    /// The partition reads on from the group's committed offset.
    AsCommitted,
    /// The partition was moved; its epoch is this now.
    Rewound(u64),
    /// Revoked, or the task failed.
    Stopped,
}

/// Settles where an assigned partition starts (see [`plan`]): asks the poll loop what
/// Kafka says about it and the index where its archive ends, records a gap retention made, and
/// moves the partition when it must not start at the group's committed offset. Retries while
/// Kafka or the store fail.
pub(super) async fn start_partition(
    cx: Arc<UploadContext>,
    tp: Tp,
    mut index: PartitionIndex,
    flags: Arc<PartitionFlags>,
) -> (Started, PartitionIndex) {
    let mut pause = None;
    loop {
        let looked = async {
            let f = facts(&cx, &tp).await.map_err(StartFailure::Kafka)?;
            let end = index
                .end(cx.store.as_ref())
                .await
                .map_err(StartFailure::Store)?;
            Ok::<_, StartFailure>((f, end))
        }
        .await;
        let failure = match looked {
            Ok((f, end)) => match plan(f, end, cx.start_offset) {
                Err(r) => {
                    cx.fatal.set(refused(&cx, &tp, r));
                    return (Started::Stopped, index);
                }
                Ok(Plan::AsCommitted) => return (Started::AsCommitted, index),
                Ok(Plan::Seek { at, gap }) => {
                    let recorded = match gap {
                        Some(g) => record_gap(&cx, &tp, g).await,
                        None => Ok(()),
                    };
                    match recorded {
                        Ok(()) => {
                            tracing::info!(task = %cx.task, topic = %tp.topic, partition = tp.partition, offset = at, committed = ?f.committed, archive_end = ?end, "partition starts here (the group had no offset or one retention passed)");
                            let moved =
                                rewind_until_done(&cx, &tp, Seek::to(at).committing(), &flags)
                                    .await;
                            return (moved.map_or(Started::Stopped, Started::Rewound), index);
                        }
                        Err(e) => StartFailure::Store(e),
                    }
                }
            },
            Err(e) => e,
        };
        match failure {
            StartFailure::Store(e) if fatal(&e) => {
                cx.metrics.store_fatal.increment(1);
                cx.fatal.set(DumpError::Store {
                    task: cx.task.clone(),
                    source: e,
                });
                return (Started::Stopped, index);
            }
            StartFailure::Store(e) => {
                cx.metrics.store_errors.increment(1);
                tracing::warn!(task = %cx.task, topic = %tp.topic, partition = tp.partition, error = %e, "reading the partition's archive index failed; retrying");
            }
            StartFailure::Kafka(why) => {
                tracing::warn!(task = %cx.task, topic = %tp.topic, partition = tp.partition, %why, "asking Kafka where the partition stands failed; retrying");
            }
        }
        if flags.revoked.load(Ordering::Relaxed) || cx.fatal.is_set() {
            return (Started::Stopped, index);
        }
        let p = next_backoff(pause);
        pause = Some(p);
        tokio::time::sleep(p).await;
    }
}

enum StartFailure {
    Kafka(String),
    Store(StoreError),
}

/// Records offsets retention deleted before they were archived: beside the archive, in the
/// log, in a counter, and for the run's end.
async fn record_gap(cx: &UploadContext, tp: &Tp, g: Gap) -> Result<(), StoreError> {
    store_gap(cx.store.as_ref(), &cx.dir, &cx.task, tp, g).await?;
    if let Ok(mut gaps) = cx.gaps.lock() {
        gaps.push((tp.clone(), g));
    }
    Ok(())
}

/// Stores a gap's record under the task's directory, and logs and counts it.
pub(crate) async fn store_gap(
    store: &dyn crate::store::ObjectStore,
    dir: &DumpDir,
    task: &str,
    tp: &Tp,
    g: Gap,
) -> Result<(), StoreError> {
    let record = GapRecord {
        task: task.to_string(),
        topic: tp.topic.to_string(),
        partition: tp.partition,
        from: g.from,
        to: g.to,
        found_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        reason: "deleted by the topic's retention before they were archived".into(),
    };
    let key = gap_key(dir, tp, g);
    // Plain structs serialize to JSON without failing.
    let body = serde_json::to_vec_pretty(&record).unwrap_or_default();
    store.put(&key, Bytes::from(body)).await?;
    tracing::warn!(task = %task, topic = %tp.topic, partition = tp.partition, from = g.from, to = g.to - 1, offsets = g.offsets(), record = %store.location(&key), "records were deleted by retention before they were archived: this archive lacks these offsets; archiving goes on from the partition's earliest retained offset");
    metrics::counter!("strata_dump_retention_gap_records_total", "task" => task.to_string(), "topic" => tp.topic.to_string())
        .increment(g.offsets().max(0) as u64);
    Ok(())
}

/// The error of a partition that must not start.
fn refused(cx: &UploadContext, tp: &Tp, r: Refusal) -> DumpError {
    let (task, topic, partition) = (cx.task.clone(), tp.topic.to_string(), tp.partition);
    match r {
        Refusal::ArchiveAhead { end, high } => DumpError::ArchiveAhead {
            task,
            topic,
            partition,
            end,
            high,
            index: cx.store.location(&index::partition_prefix(&cx.dir, tp)),
        },
        Refusal::CommittedAhead { committed, high } => DumpError::CommittedAhead {
            task,
            topic,
            partition,
            committed,
            high,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use StartOffset::{Earliest, Latest};

    fn facts(committed: Option<i64>, low: i64, high: i64) -> Facts {
        Facts {
            committed,
            low,
            high,
        }
    }

    fn seek(at: i64, gap: Option<(i64, i64)>) -> Result<Plan, Refusal> {
        Ok(Plan::Seek {
            at,
            gap: gap.map(|(from, to)| Gap { from, to }),
        })
    }

    #[test]
    fn a_group_with_an_offset_in_range_starts_there() {
        for start in [Earliest, Latest] {
            assert_eq!(
                plan(facts(Some(50), 0, 100), Some(50), start),
                Ok(Plan::AsCommitted)
            );
            assert_eq!(
                plan(facts(Some(100), 0, 100), None, start),
                Ok(Plan::AsCommitted)
            );
            // Behind its archive (reset): the objects it meets are adopted one by one.
            assert_eq!(
                plan(facts(Some(0), 0, 100), Some(80), start),
                Ok(Plan::AsCommitted)
            );
        }
    }

    #[test]
    fn records_deleted_before_they_were_archived_are_a_gap_in_either_start_mode() {
        for start in [Earliest, Latest] {
            assert_eq!(
                plan(facts(Some(40), 70, 100), None, start),
                seek(70, Some((40, 70)))
            );
            // Part of the deleted stretch is archived (the group had gone back over it).
            assert_eq!(
                plan(facts(Some(40), 70, 100), Some(60), start),
                seek(70, Some((60, 70)))
            );
            assert_eq!(
                plan(facts(Some(40), 70, 100), Some(90), start),
                seek(70, None)
            );
            // Everything was deleted: the start is the (empty) end, still a gap.
            assert_eq!(
                plan(facts(Some(40), 100, 100), None, start),
                seek(100, Some((40, 100)))
            );
        }
    }

    #[test]
    fn a_group_that_forgot_its_offsets_goes_on_where_the_archive_ends() {
        for start in [Earliest, Latest] {
            assert_eq!(plan(facts(None, 0, 100), Some(80), start), seek(80, None));
            assert_eq!(plan(facts(None, 0, 100), Some(100), start), seek(100, None));
            // ... and says what retention took meanwhile.
            assert_eq!(
                plan(facts(None, 90, 100), Some(80), start),
                seek(90, Some((80, 90)))
            );
        }
    }

    #[test]
    fn a_new_group_starts_as_configured() {
        assert_eq!(plan(facts(None, 10, 100), None, Earliest), seek(10, None));
        assert_eq!(plan(facts(None, 10, 100), None, Latest), seek(100, None));
    }

    #[test]
    fn an_archive_or_offset_past_the_partition_end_is_refused() {
        // The topic was deleted and created again: its offsets start over.
        assert_eq!(
            plan(facts(None, 0, 30), Some(500), Earliest),
            Err(Refusal::ArchiveAhead { end: 500, high: 30 })
        );
        assert_eq!(
            plan(facts(Some(500), 0, 30), None, Latest),
            Err(Refusal::CommittedAhead {
                committed: 500,
                high: 30
            })
        );
    }

    #[test]
    fn gaps_are_recorded_beside_the_archive() {
        let dir = DumpDir::parse("backups").unwrap();
        let k = gap_key(&dir, &Tp::new("orders", 2), Gap { from: 5, to: 70 });
        assert_eq!(
            k,
            "backups/.strata/gaps/orders/2/00000000000000000005-00000000000000000070.json"
        );
        assert_eq!(Gap { from: 5, to: 70 }.offsets(), 65);
    }
}
