//! The exact offset map of a restore: for each archived partition, where every restored record
//! landed, as ranges `(source, target, len)` (source offsets `source..source+len` are at target
//! offsets `target..target+len`). A contiguous restore is one range; any jump of either offset
//! (compaction, aborted transactions, time filters, transaction markers) starts another.
//! Pure: built from delivery reports by the replay, stored with the checkpoint, read by groups.

use serde::{Deserialize, Serialize};

/// Consecutive records whose source and target offsets both advance by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(i64, i64, i64)", into = "(i64, i64, i64)")]
pub struct Range {
    pub source: i64,
    pub target: i64,
    pub len: i64,
}

impl From<(i64, i64, i64)> for Range {
    fn from((source, target, len): (i64, i64, i64)) -> Self {
        Self {
            source,
            target,
            len,
        }
    }
}

impl From<Range> for (i64, i64, i64) {
    fn from(r: Range) -> Self {
        (r.source, r.target, r.len)
    }
}

impl Range {
    /// The source offset after the range.
    fn source_end(&self) -> i64 {
        self.source + self.len
    }

    fn target_end(&self) -> i64 {
        self.target + self.len
    }
}

/// The ranges of one archived partition, in source (and target) offset order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ranges(Vec<Range>);

/// A record or range that does not come after what the map holds: the map stays as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfOrder {
    pub source: i64,
    pub target: i64,
}

impl Ranges {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn as_slice(&self) -> &[Range] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Records covered.
    pub fn records(&self) -> i64 {
        self.0.iter().map(|r| r.len).sum()
    }

    /// The highest source offset mapped.
    pub fn last_source(&self) -> Option<i64> {
        self.0.last().map(|r| r.source_end() - 1)
    }

    /// Adds one record: extends the last range when both offsets follow it, else starts one.
    /// Both offsets must be past the map's last record.
    pub fn push(&mut self, source: i64, target: i64) -> Result<(), OutOfOrder> {
        self.append(Range {
            source,
            target,
            len: 1,
        })
    }

    /// Adds a range after the map's last one, joining them when they are contiguous.
    pub fn append(&mut self, r: Range) -> Result<(), OutOfOrder> {
        if r.len <= 0 {
            return Ok(());
        }
        let out_of_order = OutOfOrder {
            source: r.source,
            target: r.target,
        };
        if r.source < 0 || r.target < 0 {
            return Err(out_of_order);
        }
        match self.0.last_mut() {
            Some(last) if r.source < last.source_end() || r.target < last.target_end() => {
                Err(out_of_order)
            }
            Some(last) if r.source == last.source_end() && r.target == last.target_end() => {
                last.len += r.len;
                Ok(())
            }
            _ => {
                self.0.push(r);
                Ok(())
            }
        }
    }

    /// Adds every range of `other` (the map of the next object), joining at the seam.
    pub fn extend(&mut self, other: &Ranges) -> Result<(), OutOfOrder> {
        let mut joined = self.clone();
        for r in &other.0 {
            joined.append(*r)?;
        }
        *self = joined;
        Ok(())
    }

    /// The map of one object: `sources[i]` landed at `targets[i]`; `None` when a record was
    /// not delivered (-1) or the offsets do not both increase.
    pub fn of_object(sources: &[i64], targets: &[i64]) -> Option<Ranges> {
        if sources.len() != targets.len() {
            return None;
        }
        let mut m = Ranges::new();
        for (s, t) in sources.iter().zip(targets) {
            m.push(*s, *t).ok()?;
        }
        Some(m)
    }

    /// The target offset of the first mapped record whose source offset is at least `source`,
    /// or `None` when every mapped record comes before it.
    pub fn first_at_or_after(&self, source: i64) -> Option<i64> {
        let i = self.0.partition_point(|r| r.source_end() <= source);
        let r = self.0.get(i)?;
        Some(if source <= r.source {
            r.target
        } else {
            r.target + (source - r.source)
        })
    }

    /// Where a consumer group committed at source offset `committed` (the next record it reads)
    /// resumes in the target: at the first restored record at or after it, so it skips nothing
    /// and reads nothing twice, or at `end` (the target partition's end after the restore) when
    /// it had read every restored record.
    pub fn translate(&self, committed: i64, end: i64) -> i64 {
        self.first_at_or_after(committed).unwrap_or(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(i64, i64)]) -> Ranges {
        let mut m = Ranges::new();
        for (s, t) in pairs {
            m.push(*s, *t).unwrap();
        }
        m
    }

    fn triples(m: &Ranges) -> Vec<(i64, i64, i64)> {
        m.as_slice().iter().map(|r| (*r).into()).collect()
    }

    #[test]
    fn a_contiguous_restore_is_one_range() {
        let pairs: Vec<(i64, i64)> = (0..1000).map(|i| (i + 500, i)).collect();
        let m = map(&pairs);
        assert_eq!(triples(&m), vec![(500, 0, 1000)]);
        assert_eq!(m.records(), 1000);
        assert_eq!(m.last_source(), Some(1499));
    }

    #[test]
    fn a_jump_of_either_offset_starts_a_range() {
        // Source gap (compaction) at 3; target gap (a commit marker) after source 7.
        let m = map(&[
            (0, 0),
            (1, 1),
            (2, 2),
            (5, 3),
            (6, 4),
            (7, 5),
            (8, 7),
            (9, 8),
        ]);
        assert_eq!(triples(&m), vec![(0, 0, 3), (5, 3, 3), (8, 7, 2)]);
        assert_eq!(m.records(), 8);
    }

    #[test]
    fn out_of_order_records_are_refused_and_leave_the_map_alone() {
        let mut m = map(&[(10, 0), (11, 1)]);
        assert_eq!(
            m.push(11, 2),
            Err(OutOfOrder {
                source: 11,
                target: 2
            })
        );
        assert!(m.push(12, 1).is_err(), "target went back");
        assert!(m.push(-1, 5).is_err());
        assert_eq!(triples(&m), vec![(10, 0, 2)]);
        // A failed extend changes nothing either.
        let next = map(&[(20, 5)]);
        let mut bad = next.clone();
        bad.0.push(Range {
            source: 3,
            target: 10,
            len: 1,
        });
        assert!(m.extend(&bad).is_err());
        assert_eq!(triples(&m), vec![(10, 0, 2)]);
        m.extend(&next).unwrap();
        assert_eq!(triples(&m), vec![(10, 0, 2), (20, 5, 1)]);
    }

    #[test]
    fn an_object_s_map_needs_every_record_delivered_in_order() {
        let m = Ranges::of_object(&[4, 5, 7], &[10, 11, 12]).unwrap();
        assert_eq!(triples(&m), vec![(4, 10, 2), (7, 12, 1)]);
        assert_eq!(Ranges::of_object(&[4, 5], &[10, -1]), None, "undelivered");
        assert_eq!(Ranges::of_object(&[4, 5], &[10]), None);
        assert_eq!(Ranges::of_object(&[5, 4], &[10, 11]), None);
        assert_eq!(Ranges::of_object(&[], &[]), Some(Ranges::new()));
    }

    #[test]
    fn objects_join_at_the_seam_when_contiguous() {
        let mut m = map(&[(0, 100), (1, 101)]);
        m.extend(&map(&[(2, 102), (3, 103)])).unwrap();
        assert_eq!(triples(&m), vec![(0, 100, 4)]);
        m.extend(&map(&[(4, 105)])).unwrap();
        assert_eq!(triples(&m), vec![(0, 100, 4), (4, 105, 1)]);
        m.extend(&Ranges::new()).unwrap();
        assert_eq!(m.records(), 5);
    }

    #[test]
    fn translation_resumes_at_the_first_restored_record_at_or_after_the_position() {
        // Sources 0..3 at 0..3, 5..8 at 3..6 (3 and 4 compacted away), 8..10 at 7..9 (a
        // marker at target 6).
        let m = map(&[
            (0, 0),
            (1, 1),
            (2, 2),
            (5, 3),
            (6, 4),
            (7, 5),
            (8, 7),
            (9, 8),
        ]);
        let end = 9;
        assert_eq!(m.translate(0, end), 0, "the beginning");
        assert_eq!(m.translate(2, end), 2, "inside a range");
        assert_eq!(
            m.translate(3, end),
            3,
            "a gap: the next restored record (5)"
        );
        assert_eq!(m.translate(4, end), 3);
        assert_eq!(m.translate(6, end), 4);
        assert_eq!(m.translate(8, end), 7, "after the marker");
        assert_eq!(m.translate(9, end), 8, "the last record is not skipped");
        assert_eq!(m.translate(10, end), end, "every record read: the end");
        assert_eq!(m.translate(1_000, end), end);
        assert_eq!(m.translate(-5, end), 0, "before the first restored record");
        assert_eq!(Ranges::new().translate(7, 42), 42, "nothing restored");
    }

    #[test]
    fn translation_neither_skips_nor_repeats_any_record() {
        // Every position of a gappy map: the records a consumer reads from the translated
        // offset are exactly the restored records at or after the position.
        let pairs: Vec<(i64, i64)> = vec![(3, 10), (4, 11), (9, 12), (10, 14), (11, 15), (20, 16)];
        let m = map(&pairs);
        let end = 17;
        for committed in 0..25 {
            let at = m.translate(committed, end);
            let read: Vec<i64> = pairs
                .iter()
                .filter(|(_, t)| *t >= at)
                .map(|(s, _)| *s)
                .collect();
            let want: Vec<i64> = pairs
                .iter()
                .filter(|(s, _)| *s >= committed)
                .map(|(s, _)| *s)
                .collect();
            assert_eq!(read, want, "committed at {committed}");
        }
    }

    #[test]
    fn serialized_as_compact_triples() {
        let m = map(&[(0, 0), (1, 1), (5, 2)]);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, "[[0,0,2],[5,2,1]]");
        let back: Ranges = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
    }
}
