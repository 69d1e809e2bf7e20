//! Runs of records sent to the target without a transaction, oldest first, until the target
//! acknowledged them: a partition's position may only move past records the target holds, and
//! the producer keeps sending while earlier runs are in flight (pure; the worker does the I/O).

use std::collections::VecDeque;

/// One run: the records of what the worker gathered, sent one after the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Run {
    /// Source offset of the last record sent (`None`: every record was filtered out).
    pub last_sent: Option<i64>,
    /// The position once the run is stored: after its last record or `--once`'s end.
    pub next: i64,
    pub records: u64,
    pub bytes: u64,
    pub last_timestamp: Option<i64>,
}

/// What became stored since the last look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settled {
    pub next: i64,
    pub records: u64,
    pub bytes: u64,
    pub last_timestamp: Option<i64>,
}

#[derive(Debug, Default)]
pub(super) struct Unacked {
    runs: VecDeque<Run>,
}

impl Unacked {
    pub fn push(&mut self, run: Run) {
        self.runs.push_back(run);
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Forgets every run (after a failure: they are read again).
    pub fn clear(&mut self) {
        self.runs.clear();
    }

    /// Takes the runs whose records are all acknowledged, `acked` being the source offset of
    /// the newest acknowledged record (the target acknowledges a partition's records in order,
    /// with an idempotent producer). A run with nothing sent settles with the runs before it.
    pub fn settle(&mut self, acked: Option<i64>) -> Option<Settled> {
        let mut out: Option<Settled> = None;
        while let Some(r) = self.runs.front() {
            let stored = match r.last_sent {
                None => true,
                Some(last) => acked.is_some_and(|a| a >= last),
            };
            if !stored {
                break;
            }
            let Some(r) = self.runs.pop_front() else {
                break;
            };
            let s = out.get_or_insert(Settled {
                next: r.next,
                records: 0,
                bytes: 0,
                last_timestamp: None,
            });
            s.next = r.next;
            s.records += r.records;
            s.bytes += r.bytes;
            s.last_timestamp = r.last_timestamp.or(s.last_timestamp);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(last_sent: Option<i64>, next: i64, records: u64) -> Run {
        Run {
            last_sent,
            next,
            records,
            bytes: records * 10,
            last_timestamp: last_sent.map(|o| 1000 + o),
        }
    }

    #[test]
    fn the_position_follows_only_fully_acknowledged_runs() {
        let mut u = Unacked::default();
        u.push(run(Some(9), 10, 10));
        u.push(run(Some(19), 20, 10));
        u.push(run(Some(29), 30, 10));
        assert_eq!(u.settle(None), None);
        // Half of the second run is in: only the first settles.
        let s = u.settle(Some(14)).unwrap();
        assert_eq!((s.next, s.records, s.bytes), (10, 10, 100));
        assert_eq!(u.settle(Some(14)), None);
        let s = u.settle(Some(29)).unwrap();
        assert_eq!(
            s,
            Settled {
                next: 30,
                records: 20,
                bytes: 200,
                last_timestamp: Some(1029)
            }
        );
        assert!(u.is_empty());
    }

    #[test]
    fn a_run_with_nothing_sent_waits_for_the_runs_before_it() {
        let mut u = Unacked::default();
        u.push(run(Some(9), 10, 10));
        // Filtered records (they came from the target), or --once's trailing markers.
        u.push(run(None, 40, 0));
        assert_eq!(u.settle(Some(8)), None);
        let s = u.settle(Some(9)).unwrap();
        assert_eq!((s.next, s.records, s.last_timestamp), (40, 10, Some(1009)));
        u.push(run(None, 50, 0));
        assert_eq!(u.settle(Some(9)).map(|s| s.next), Some(50));
    }

    #[test]
    fn a_failure_forgets_what_is_in_flight() {
        let mut u = Unacked::default();
        u.push(run(Some(9), 10, 10));
        u.clear();
        assert!(u.is_empty());
        assert_eq!(u.settle(Some(100)), None);
    }
}
