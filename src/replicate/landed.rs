//! Where a worker's replicated records landed on the target, as runs of consecutive source
//! offsets that map to consecutive target offsets, and MirrorMaker 2's offset syncs drawn from
//! them. Delivery reports may arrive interleaved (rust-rdkafka's flush polls on the caller's
//! thread beside the producer's own), so the runs are kept sorted and merged when they meet;
//! the syncs come out in source order whatever the order of arrival (pure).

/// An offset sync at least every this many records: MirrorMaker 2's `offset.lag.max`.
pub(super) const SYNC_EVERY: i64 = 100;

/// A run: `len` source records from `upstream` landed at `downstream` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    upstream: i64,
    downstream: i64,
    len: i64,
}

impl Segment {
    fn follows(&self, upstream: i64, downstream: i64) -> bool {
        self.upstream + self.len == upstream && self.downstream + self.len == downstream
    }
}

#[derive(Debug, Default)]
pub(super) struct Landed {
    /// Sorted by upstream offset, never overlapping.
    segments: Vec<Segment>,
}

impl Landed {
    /// One delivered record: source offset `upstream` is at `downstream` in the target.
    pub fn add(&mut self, upstream: i64, downstream: i64) {
        // The common case: the next record of the newest run.
        if let Some(last) = self.segments.last_mut() {
            if last.follows(upstream, downstream) {
                last.len += 1;
                return;
            }
        }
        let at = self.segments.partition_point(|s| s.upstream <= upstream);
        if at > 0 {
            let before = self.segments[at - 1];
            if upstream < before.upstream + before.len {
                return; // reported before
            }
            if before.follows(upstream, downstream) {
                self.segments[at - 1].len += 1;
                self.merge_after(at - 1);
                return;
            }
        }
        self.segments.insert(
            at,
            Segment {
                upstream,
                downstream,
                len: 1,
            },
        );
        self.merge_after(at);
    }

    /// Joins segment `i` with the next one when they meet.
    fn merge_after(&mut self, i: usize) {
        if let Some(&next) = self.segments.get(i + 1) {
            let s = self.segments[i];
            if s.follows(next.upstream, next.downstream) {
                self.segments[i].len += next.len;
                self.segments.remove(i + 1);
            }
        }
    }

    /// The offset syncs, in source order: the start of every run, one every [`SYNC_EVERY`]
    /// records within it, and the last record.
    pub fn syncs(&self) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        for s in &self.segments {
            let mut k = 0;
            while k < s.len {
                out.push((s.upstream + k, s.downstream + k));
                k += SYNC_EVERY;
            }
        }
        if let Some(s) = self.segments.last() {
            let last = (s.upstream + s.len - 1, s.downstream + s.len - 1);
            if out.last() != Some(&last) {
                out.push(last);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_records_give_a_sync_every_hundred_and_the_last() {
        let mut l = Landed::default();
        for u in 1000..1250 {
            l.add(u, u + 7);
        }
        assert_eq!(
            l.syncs(),
            vec![(1000, 1007), (1100, 1107), (1200, 1207), (1249, 1256)]
        );
        assert_eq!(l.segments.len(), 1);
    }

    #[test]
    fn a_gap_starts_a_new_run() {
        let mut l = Landed::default();
        for u in 0..10 {
            l.add(u, u);
        }
        // Ten records filtered out; a transaction marker in the target.
        for u in 20..30 {
            l.add(u, u - 9);
        }
        assert_eq!(l.syncs(), vec![(0, 0), (20, 11), (29, 20)]);
    }

    #[test]
    fn interleaved_reports_give_the_same_syncs_in_source_order() {
        let mut straight = Landed::default();
        let mut mixed = Landed::default();
        let pairs: Vec<(i64, i64)> = (0..500).map(|u| (u, u + 3)).collect();
        for &(u, d) in &pairs {
            straight.add(u, d);
        }
        // Two threads each serving their own batch of reports, interleaved one by one.
        let (a, b) = pairs.split_at(250);
        for i in 0..250 {
            mixed.add(b[i].0, b[i].1);
            mixed.add(a[i].0, a[i].1);
        }
        assert_eq!(mixed.syncs(), straight.syncs());
        assert_eq!(mixed.segments.len(), 1);
        // A report seen twice changes nothing.
        mixed.add(10, 13);
        assert_eq!(mixed.syncs(), straight.syncs());
    }

    #[test]
    fn nothing_landed_gives_no_sync() {
        assert!(Landed::default().syncs().is_empty());
    }
}
