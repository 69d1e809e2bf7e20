//! Before a partition is copied: do the flow's stored positions still describe its target? A
//! target partition that holds records while no position is stored (the positions topic was
//! lost) or that ends below the end its stored position noted (the target topic was deleted and
//! recreated) is refused, since resuming would copy records twice or leave records out.
//! `--reset` resolves the refusals of one start by recording fresh positions. Judgements and
//! messages are pure; the one read they may need, [`holds_committed`], is at the end.

use super::positions::Position;
use crate::kafka::{KafkaError, Reader};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

/// `strata replicate --reset`: how a start goes on past a refusal. One-shot: it records fresh
/// positions for the refused partitions only (a flow with none is left as it is), then the run
/// goes on normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    /// Take the target as it is: nothing in it is copied again. A partition without a position
    /// starts at the source's end (what reached the source before is not copied); one whose
    /// target was recreated resumes at its stored position (what the old topic held is gone).
    TargetEnd,
    /// Copy the refused partitions again from the source's first record. Only into a target
    /// partition that holds no record, or the copies would be there twice.
    SourceStart,
}

impl Reset {
    pub fn as_str(self) -> &'static str {
        match self {
            Reset::TargetEnd => "target-end",
            Reset::SourceStart => "source-start",
        }
    }
}

/// Why a partition may not be copied as its bookkeeping says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// No position is stored, but the target partition holds records, or held some (its log
    /// starts above 0): a copy from the start would repeat what it holds.
    Unrecorded,
    /// The target partition ends below `noted`, the end its stored position (`next`) noted:
    /// the topic was deleted and recreated (or lost records), and resuming skips what it held.
    Recreated { next: i64, noted: i64 },
}

/// A refused partition: the source partition, its target, the target's watermarks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub source: String,
    pub partition: i32,
    pub target: String,
    pub low: i64,
    pub high: i64,
    pub finding: Finding,
}

/// Judges one partition (pure but for `committed`, asked only when the watermarks cannot tell):
/// `stored` is its position, `low..high` its target partition (0, 0 when missing), `shared`
/// whether the target topic also holds records the flow did not copy (both ways, names kept),
/// where records without a position are expected. `committed`: whether a read_committed
/// reader finds a record in the target partition (a first start killed before its first commit
/// leaves aborted records only).
pub fn judge<E>(
    stored: Option<Position>,
    low: i64,
    high: i64,
    shared: bool,
    committed: impl FnOnce() -> Result<bool, E>,
) -> Result<Option<Finding>, E> {
    Ok(match stored {
        Some(Position {
            next,
            target_end: Some(noted),
        }) if high < noted => Some(Finding::Recreated { next, noted }),
        Some(_) => None,
        None if shared || high == 0 => None,
        None if low > 0 => Some(Finding::Unrecorded),
        None => committed()?.then_some(Finding::Unrecorded),
    })
}

/// The position `--reset` records for a refused partition (pure). `source` is the source
/// partition's watermarks; `target_empty` whether a read_committed reader finds no record in
/// the target partition. `Err`: why the reset cannot go on.
pub fn reset_position(
    r: &Refused,
    mode: Reset,
    source: (i64, i64),
    target_empty: bool,
) -> Result<Position, String> {
    let next = match (mode, &r.finding) {
        (Reset::SourceStart, _) if !target_empty => {
            return Err(format!(
                "--reset source-start copies {}[{}] again from its first record, but its target {}[{}] holds records (offsets {}..{}): they would be there twice; delete the target topic first, or use --reset target-end",
                r.source, r.partition, r.target, r.partition, r.low, r.high
            ))
        }
        (Reset::SourceStart, _) => source.0,
        (Reset::TargetEnd, Finding::Unrecorded) => source.1,
        (Reset::TargetEnd, Finding::Recreated { next, .. }) => *next,
    };
    Ok(Position {
        next,
        target_end: Some(r.high),
    })
}

/// How many refused partitions a message names at most.
const NAMED: usize = 10;

fn names(refused: &[&Refused], what: impl Fn(&Refused) -> String) -> String {
    let mut out: Vec<String> = refused.iter().take(NAMED).map(|r| what(r)).collect();
    if refused.len() > NAMED {
        out.push(format!("and {} more", refused.len() - NAMED));
    }
    out.join(", ")
}

/// The refusal of a start (pure): what was found, partition by partition, and the ways on.
pub fn refusal(positions_topic: &str, refused: &[Refused]) -> String {
    let unrecorded: Vec<&Refused> = refused
        .iter()
        .filter(|r| r.finding == Finding::Unrecorded)
        .collect();
    let recreated: Vec<&Refused> = refused
        .iter()
        .filter(|r| matches!(r.finding, Finding::Recreated { .. }))
        .collect();
    let mut parts = Vec::new();
    if !unrecorded.is_empty() {
        parts.push(format!(
            "no position is stored for {} partition(s) whose target holds records: {}; the positions topic {positions_topic} is missing or was emptied, and copying from the source's start again would put those records into the target twice. Start once with `strata replicate --reset target-end` to keep the target as it is and copy only what reaches the source from then on, or delete those target topics and start again to copy everything",
            unrecorded.len(),
            names(&unrecorded, |r| format!(
                "{}[{}] (target {}[{}] holds offsets {}..{})",
                r.source, r.partition, r.target, r.partition, r.low, r.high
            ))
        ));
    }
    if !recreated.is_empty() {
        parts.push(format!(
            "the target of {} partition(s) ends below what it held when their positions were stored: {}; the target topic was deleted and recreated (or lost records), and resuming would leave out everything the old topic held. Start once with `strata replicate --reset source-start` to copy those partitions again from the source's first record into the empty target, or with `--reset target-end` to resume at the stored positions without what the old topic held",
            recreated.len(),
            names(&recreated, |r| match r.finding {
                Finding::Recreated { next, noted } => format!(
                    "{}[{}] (target {}[{}] ends at offset {}, its position, source offset {next}, was stored when it reached {noted})",
                    r.source, r.partition, r.target, r.partition, r.high
                ),
                Finding::Unrecorded => String::new(),
            })
        ));
    }
    format!(
        "{} (docs/replicate.md, \"Lost bookkeeping\")",
        parts.join("; and ")
    )
}

/// Whether a read_committed reader finds a record in a partition that ends at `high` (aborted
/// records and transaction markers do not count). It stops at the first record. `None`: it
/// could not tell within `wait`, because an open transaction holds read_committed readers back
/// (a killed worker's, until the partition's next worker fences it or it times out).
pub fn holds_committed(
    reader: &Reader,
    topic: &str,
    partition: i32,
    high: i64,
    wait: Duration,
) -> Result<Option<bool>, KafkaError> {
    let fail = |e: rdkafka::error::KafkaError| KafkaError::Topic {
        topic: topic.to_string(),
        detail: format!("cannot read partition {partition}: {e}"),
    };
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning)
        .map_err(fail)?;
    reader.assign(&tpl).map_err(fail)?;
    let deadline = Instant::now() + wait;
    let found = loop {
        if Instant::now() > deadline {
            break Ok(None);
        }
        match reader.poll(Duration::from_millis(100)) {
            Some(Ok(_)) => break Ok(Some(true)),
            // Markers and aborted records are never delivered: only the position tells that
            // the reader went past them to the end.
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) | None => {
                let at = reader.position().ok().and_then(|p| {
                    match p.find_partition(topic, partition).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => Some(o),
                        _ => None,
                    }
                });
                if at.is_some_and(|o| o >= high) {
                    break Ok(Some(false));
                }
            }
            Some(Err(e)) => break Err(fail(e)),
        }
    };
    let _ = reader.unassign();
    tracing::debug!(%topic, partition, high, found = ?found.as_ref().ok(), "read the target partition to tell whether it holds records");
    found
}

/// The error of a partition [`holds_committed`] could not read to its end.
pub fn undecided(topic: &str, partition: i32, wait: Duration) -> KafkaError {
    KafkaError::Topic {
        topic: topic.to_string(),
        detail: format!(
            "partition {partition} could not be read to its end within {} s to tell whether it holds records: an open transaction holds read_committed readers back until it ends (transaction.timeout.ms); start again later",
            wait.as_secs()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(next: i64, target_end: Option<i64>) -> Option<Position> {
        Some(Position { next, target_end })
    }

    /// `judge` with a reader that must not be asked.
    fn judged(stored: Option<Position>, low: i64, high: i64, shared: bool) -> Option<Finding> {
        judge(stored, low, high, shared, || -> Result<bool, ()> {
            panic!("the watermarks tell")
        })
        .unwrap()
    }

    #[test]
    fn a_stored_position_is_refused_only_when_the_target_ends_below_its_note() {
        assert_eq!(judged(pos(50, Some(120)), 0, 120, false), None);
        assert_eq!(judged(pos(50, Some(120)), 100, 300, false), None);
        assert_eq!(
            judged(pos(50, Some(120)), 0, 0, false),
            Some(Finding::Recreated {
                next: 50,
                noted: 120
            })
        );
        assert_eq!(
            judged(pos(50, Some(120)), 0, 119, true),
            Some(Finding::Recreated {
                next: 50,
                noted: 120
            })
        );
        // Positions of earlier versions noted nothing: nothing to compare.
        assert_eq!(judged(pos(50, None), 0, 0, false), None);
    }

    #[test]
    fn no_position_is_refused_when_the_target_holds_or_held_records() {
        // An empty or new target: a first start.
        assert_eq!(judged(None, 0, 0, false), None);
        // Records removed by retention or deletion: it held records.
        assert_eq!(judged(None, 40, 40, false), Some(Finding::Unrecorded));
        assert_eq!(judged(None, 40, 90, false), Some(Finding::Unrecorded));
        // A target that also holds the other side's own records (both ways, names kept).
        assert_eq!(judged(None, 40, 90, true), None);
        // From offset 0 on, only a read tells committed records from aborted ones.
        let read = |found: bool| judge(None, 0, 7, false, || Ok::<_, ()>(found)).unwrap();
        assert_eq!(read(true), Some(Finding::Unrecorded));
        assert_eq!(read(false), None);
        let failed = judge(None, 0, 7, false, || Err::<bool, _>("open transaction"));
        assert_eq!(failed, Err("open transaction"));
    }

    fn refused(finding: Finding, low: i64, high: i64) -> Refused {
        Refused {
            source: "orders".into(),
            partition: 1,
            target: "east.orders".into(),
            low,
            high,
            finding,
        }
    }

    #[test]
    fn a_reset_records_where_each_partition_goes_on() {
        let lost = refused(Finding::Unrecorded, 0, 300);
        let recreated = refused(
            Finding::Recreated {
                next: 250,
                noted: 300,
            },
            0,
            0,
        );
        let source = (20, 400);
        // target-end: nothing in the target is copied again.
        assert_eq!(
            reset_position(&lost, Reset::TargetEnd, source, false),
            Ok(Position {
                next: 400,
                target_end: Some(300)
            })
        );
        assert_eq!(
            reset_position(&recreated, Reset::TargetEnd, source, true),
            Ok(Position {
                next: 250,
                target_end: Some(0)
            })
        );
        // source-start: from the source's first record, into an empty target only.
        assert_eq!(
            reset_position(&recreated, Reset::SourceStart, source, true),
            Ok(Position {
                next: 20,
                target_end: Some(0)
            })
        );
        let e = reset_position(&lost, Reset::SourceStart, source, false).unwrap_err();
        assert!(
            e.contains("east.orders[1]") && e.contains("0..300") && e.contains("target-end"),
            "{e}"
        );
        // Emptied by retention: no record left to repeat.
        let expired = refused(Finding::Unrecorded, 300, 300);
        assert_eq!(
            reset_position(&expired, Reset::SourceStart, source, true),
            Ok(Position {
                next: 20,
                target_end: Some(300)
            })
        );
    }

    #[test]
    fn the_refusal_names_what_was_found_and_the_ways_on() {
        let lost = refused(Finding::Unrecorded, 0, 300);
        let recreated = refused(
            Finding::Recreated {
                next: 250,
                noted: 300,
            },
            0,
            0,
        );
        let m = refusal(
            "strata.t.east-west.positions.internal",
            std::slice::from_ref(&lost),
        );
        assert!(
            m.contains("orders[1] (target east.orders[1] holds offsets 0..300)")
                && m.contains("strata.t.east-west.positions.internal")
                && m.contains("--reset target-end")
                && !m.contains("source-start"),
            "{m}"
        );
        let m = refusal("p", std::slice::from_ref(&recreated));
        assert!(
            m.contains("recreated")
                && m.contains("ends at offset 0")
                && m.contains("source offset 250")
                && m.contains("--reset source-start")
                && m.contains("--reset target-end"),
            "{m}"
        );
        let many: Vec<Refused> = (0..13)
            .map(|p| Refused {
                partition: p,
                ..lost.clone()
            })
            .collect();
        let m = refusal("p", &many);
        assert!(
            m.contains("13 partition(s)") && m.contains("and 3 more"),
            "{m}"
        );
        assert!(!m.contains("orders[10]"), "{m}");
    }
}
