//! `--once`: a backup run that exits 0 only when every partition of its topics is archived up
//! to the high watermark noted at start, whichever member of the group did the work.
//!
//! At start every partition gets a target (its high watermark). A partition is covered when
//! the group's committed offset reached its target, or when nothing but transaction markers
//! (which no consumer receives) lies between the committed offset and the target: a probe
//! reads that stretch to tell. The run stays in the group, taking over partitions whose
//! owners die, until all are covered or the deadline passes.

use super::Tp;
use crate::config::KafkaConfig;
use crate::kafka::KafkaError;
use crate::kafka::Reader;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Who archived a partition's records up to its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// This run stored (or had nothing to store but markers) up to the target.
    ThisRun,
    /// Another member of the group committed up to the target.
    OtherMember,
    /// Nothing arrived since the last committed offset.
    NothingNew,
    /// Not covered when the run ended.
    NotCovered,
}

impl Coverage {
    pub fn as_str(self) -> &'static str {
        match self {
            Coverage::ThisRun => "this run",
            Coverage::OtherMember => "another member",
            Coverage::NothingNew => "nothing new",
            Coverage::NotCovered => "NOT COVERED",
        }
    }
}

/// One partition of a `--once` run, for the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReport {
    pub topic: String,
    pub partition: i32,
    /// The group's committed offset at start (or the earliest retained offset).
    pub from: i64,
    /// The high watermark noted at start.
    pub to: i64,
    pub coverage: Coverage,
}

struct Target {
    from: i64,
    to: i64,
    covered: Option<Coverage>,
    /// This run stored something of it, or committed its target.
    touched: bool,
    next_probe: Instant,
}

/// The targets of a run and what is known about them.
pub(super) struct Targets {
    parts: BTreeMap<Tp, Target>,
    deadline: Instant,
    deadline_secs: u64,
}

/// How often a partition held by another member is probed for a tail of markers.
const PROBE_EVERY: Duration = Duration::from_secs(5);

/// Whether a partition is covered, from what the group committed (pure).
pub(crate) fn covered_by_commit(committed: Option<i64>, to: i64) -> bool {
    committed.is_some_and(|c| c >= to)
}

impl Targets {
    /// Notes the target of every partition of `topics`: its high watermark now, and where the
    /// group stands.
    pub fn note(
        consumer: &BaseConsumer<crate::kafka::source::SourceContext>,
        group: &Reader,
        topics: &[String],
        deadline: Duration,
    ) -> Result<Self, KafkaError> {
        let unreachable = |e: rdkafka::error::KafkaError| KafkaError::Unreachable {
            servers: "the configured brokers".into(),
            detail: e.to_string(),
        };
        let md = consumer
            .fetch_metadata(None, Duration::from_secs(30))
            .map_err(unreachable)?;
        let mut tpl = TopicPartitionList::new();
        for t in md
            .topics()
            .iter()
            .filter(|t| topics.iter().any(|n| n == t.name()))
        {
            for p in t.partitions() {
                tpl.add_partition(t.name(), p.id());
            }
        }
        let committed = crate::kafka::committed_offsets(group, &tpl, Duration::from_secs(30))
            .map_err(unreachable)?;
        let mut parts = BTreeMap::new();
        for e in tpl.elements() {
            let (low, high) = consumer
                .fetch_watermarks(e.topic(), e.partition(), Duration::from_secs(30))
                .map_err(|err| KafkaError::Topic {
                    topic: e.topic().to_string(),
                    detail: format!("watermarks of partition {}: {err}", e.partition()),
                })?;
            let c = offset_of(&committed, e.topic(), e.partition());
            // Without a committed offset the partition's start is settled once it is assigned
            // (from where its archive ends, or as the task starts): it is covered once that
            // start is committed.
            let from = c.map_or(low, |c| c.max(low));
            let nothing = c.is_some_and(|c| c >= high);
            parts.insert(
                Tp::new(e.topic(), e.partition()),
                Target {
                    from,
                    to: high,
                    covered: nothing.then_some(Coverage::NothingNew),
                    touched: false,
                    next_probe: Instant::now(),
                },
            );
        }
        Ok(Self {
            parts,
            deadline: Instant::now() + deadline,
            deadline_secs: deadline.as_secs(),
        })
    }

    pub fn target(&self, tp: &Tp) -> Option<i64> {
        self.parts.get(tp).map(|t| t.to)
    }

    /// This run stored an object of the partition.
    pub fn touched(&mut self, tp: &Tp) {
        if let Some(t) = self.parts.get_mut(tp) {
            t.touched = true;
        }
    }

    pub fn all_covered(&self) -> bool {
        self.parts.values().all(|t| t.covered.is_some())
    }

    pub fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Time left until the deadline.
    pub fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Updates coverage from the group's committed offsets.
    pub fn update(&mut self, committed: &TopicPartitionList) {
        for (tp, t) in self.parts.iter_mut().filter(|(_, t)| t.covered.is_none()) {
            if covered_by_commit(offset_of(committed, &tp.topic, tp.partition), t.to) {
                t.covered = Some(if t.touched {
                    Coverage::ThisRun
                } else {
                    Coverage::OtherMember
                });
            }
        }
    }

    /// Records (offsets) still to go to the targets of partitions not covered yet.
    pub fn to_go(&self, committed: &TopicPartitionList) -> u64 {
        self.parts
            .iter()
            .filter(|(_, t)| t.covered.is_none())
            .map(|(tp, t)| {
                let at =
                    offset_of(committed, &tp.topic, tp.partition).map_or(t.from, |c| c.max(t.from));
                (t.to - at).max(0) as u64
            })
            .sum()
    }

    /// Partitions held by someone else that are due for a probe: `(tp, committed, target)`.
    pub fn due_for_probe(
        &mut self,
        committed: &TopicPartitionList,
        ours: impl Fn(&Tp) -> bool,
    ) -> Vec<(Tp, i64, i64)> {
        let now = Instant::now();
        let mut due = Vec::new();
        for (tp, t) in self.parts.iter_mut() {
            if t.covered.is_some() || ours(tp) || now < t.next_probe {
                continue;
            }
            if let Some(c) = offset_of(committed, &tp.topic, tp.partition) {
                t.next_probe = now + PROBE_EVERY;
                due.push((tp.clone(), c, t.to));
            }
        }
        due
    }

    /// A probe found only markers between the committed offset and the target.
    pub fn probed_empty(&mut self, tp: &Tp) {
        if let Some(t) = self.parts.get_mut(tp) {
            t.covered = Some(Coverage::OtherMember);
        }
    }

    /// Every partition of the run as reported at its end.
    pub fn report(&self) -> Vec<PartitionReport> {
        self.parts
            .iter()
            .map(|(tp, t)| PartitionReport {
                topic: tp.topic.to_string(),
                partition: tp.partition,
                from: t.from,
                to: t.to,
                coverage: t.covered.unwrap_or(Coverage::NotCovered),
            })
            .collect()
    }

    /// The error of a run that ran out of time.
    pub fn incomplete(&self, task: &str) -> super::DumpError {
        let list: Vec<String> = self
            .parts
            .iter()
            .filter(|(_, t)| t.covered.is_none())
            .map(|(tp, t)| format!("{}-{} (to offset {})", tp.topic, tp.partition, t.to))
            .collect();
        super::DumpError::OnceIncomplete {
            task: task.to_string(),
            deadline_secs: self.deadline_secs,
            partitions: list.join(", "),
        }
    }

    /// All target partitions, for fetching their committed offsets in one request.
    pub fn list(&self) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for tp in self.parts.keys() {
            tpl.add_partition(&tp.topic, tp.partition);
        }
        tpl
    }
}

pub(crate) fn offset_of(tpl: &TopicPartitionList, topic: &str, partition: i32) -> Option<i64> {
    match tpl.find_partition(topic, partition).map(|e| e.offset()) {
        Some(Offset::Offset(o)) => Some(o),
        _ => None,
    }
}

/// A consumer outside the group that reads a stretch of a partition to tell whether any record
/// (not just transaction markers) lies in it.
pub(super) struct Probe {
    consumer: Reader,
}

impl Probe {
    pub fn new(k: &KafkaConfig, task: &str) -> Result<Self, KafkaError> {
        let mut c = crate::kafka::client_config(k);
        c.set("group.id", format!("{task}.strata-once-probe"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true");
        for (key, value) in &k.properties {
            c.set(key, value);
        }
        let consumer = crate::kafka::reader(&c).map_err(|source| KafkaError::Client {
            servers: crate::kafka::servers(k),
            source,
        })?;
        Ok(Self { consumer })
    }

    /// `true` when `[from, to)` of the partition holds no record a consumer receives.
    pub fn only_markers(&self, tp: &Tp, from: i64, to: i64) -> bool {
        let mut tpl = TopicPartitionList::new();
        if tpl
            .add_partition_offset(&tp.topic, tp.partition, Offset::Offset(from))
            .is_err()
            || self.consumer.assign(&tpl).is_err()
        {
            return false;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let answer = loop {
            if Instant::now() > deadline {
                break false;
            }
            match self.consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => break m.offset() >= to,
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) | None => {
                    let pos = self
                        .consumer
                        .position()
                        .ok()
                        .and_then(|p| offset_of(&p, &tp.topic, tp.partition));
                    if pos.is_some_and(|p| p >= to) {
                        break true;
                    }
                }
                Some(Err(_)) => break false,
            }
        };
        let _ = self.consumer.unassign();
        answer
    }
}

use rdkafka::message::Message;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_covered_once_the_group_committed_its_target() {
        assert!(!covered_by_commit(None, 10));
        assert!(!covered_by_commit(Some(9), 10));
        assert!(covered_by_commit(Some(10), 10));
        assert!(covered_by_commit(Some(12), 10));
    }

    fn targets(parts: &[(&str, i32, i64, i64)]) -> Targets {
        Targets {
            parts: parts
                .iter()
                .map(|(t, p, from, to)| {
                    (
                        Tp::new(t, *p),
                        Target {
                            from: *from,
                            to: *to,
                            covered: (from >= to).then_some(Coverage::NothingNew),
                            touched: false,
                            next_probe: Instant::now(),
                        },
                    )
                })
                .collect(),
            deadline: Instant::now() + Duration::from_secs(60),
            deadline_secs: 60,
        }
    }

    fn committed(list: &[(&str, i32, i64)]) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for (t, p, o) in list {
            tpl.add_partition_offset(t, *p, Offset::Offset(*o)).unwrap();
        }
        tpl
    }

    #[test]
    fn coverage_follows_commits_of_any_member_and_probes() {
        let mut t = targets(&[("a", 0, 0, 10), ("a", 1, 5, 20), ("b", 0, 7, 7)]);
        assert!(!t.all_covered());
        t.touched(&Tp::new("a", 0));
        t.update(&committed(&[("a", 0, 10), ("a", 1, 19), ("b", 0, 7)]));
        let left: Vec<Coverage> = t.report().iter().map(|p| p.coverage).collect();
        assert_eq!(
            left,
            vec![
                Coverage::ThisRun,
                Coverage::NotCovered,
                Coverage::NothingNew
            ]
        );
        // a-1 is held by another member, one short of its target: probed for a marker tail.
        let due = t.due_for_probe(&committed(&[("a", 1, 19)]), |_| false);
        assert_eq!(due, vec![(Tp::new("a", 1), 19, 20)]);
        assert!(
            t.due_for_probe(&committed(&[("a", 1, 19)]), |_| false)
                .is_empty(),
            "not probed again at once"
        );
        t.probed_empty(&Tp::new("a", 1));
        assert!(t.all_covered());
        let r = t.report();
        let cov: Vec<Coverage> = r.iter().map(|p| p.coverage).collect();
        assert_eq!(
            cov,
            vec![
                Coverage::ThisRun,
                Coverage::OtherMember,
                Coverage::NothingNew
            ]
        );
        assert_eq!((r[1].from, r[1].to), (5, 20));
    }

    #[test]
    fn running_out_of_time_names_the_partitions_left() {
        let t = targets(&[("a", 0, 0, 10), ("a", 1, 0, 3)]);
        let e = t.incomplete("nightly").to_string();
        assert!(e.contains("a-0 (to offset 10), a-1 (to offset 3)"), "{e}");
        assert_eq!(t.incomplete("x").exit_code(), 3);
    }
}
