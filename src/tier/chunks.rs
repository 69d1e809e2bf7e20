//! Chunk arithmetic (pure): a segment's `.log` is cut into chunks of `chunk_size` bytes (the
//! last one shorter), and a read of original byte positions becomes a list of pieces, each a
//! sub-range of one chunk. Stored (possibly compressed) chunks lie back to back in the object,
//! so their places there are prefix sums of their stored sizes.

use std::ops::Range;

/// How a segment's original bytes are cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLayout {
    chunk_size: u64,
    total_size: u64,
}

/// A requested range the segment cannot satisfy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("start_position {start} is past the end of the segment ({size} bytes)")]
    StartPastEnd { start: u64, size: u64 },
    #[error("end_position {end} is before start_position {start}")]
    EndBeforeStart { start: u64, end: u64 },
}

impl ChunkLayout {
    /// `None` when `chunk_size` is 0.
    pub fn new(chunk_size: u64, total_size: u64) -> Option<Self> {
        (chunk_size > 0).then_some(Self {
            chunk_size,
            total_size,
        })
    }

    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    pub fn total_size(&self) -> u64 {
        self.total_size
    }

    pub fn chunk_count(&self) -> u64 {
        self.total_size.div_ceil(self.chunk_size)
    }

    /// Original byte positions of chunk `index`.
    pub fn chunk_span(&self, index: u64) -> Option<Range<u64>> {
        let start = index.checked_mul(self.chunk_size)?;
        (start < self.total_size).then(|| start..(start + self.chunk_size).min(self.total_size))
    }

    /// Length of chunk `index`, or `None` past the last chunk.
    pub fn chunk_len(&self, index: u64) -> Option<u64> {
        self.chunk_span(index).map(|r| r.end - r.start)
    }

    /// The chunk holding byte `position`.
    pub fn chunk_of(&self, position: u64) -> Option<u64> {
        (position < self.total_size).then(|| position / self.chunk_size)
    }

    /// Bytes `start..=end` (end clamped to the last byte; `None` = to the end). Reading at
    /// exactly the end of the segment is an empty read, like reading a file at its end.
    pub fn plan(&self, start: u64, end_inclusive: Option<u64>) -> Result<ReadPlan, RangeError> {
        if let Some(end) = end_inclusive {
            if end < start {
                return Err(RangeError::EndBeforeStart { start, end });
            }
        }
        if start > self.total_size {
            return Err(RangeError::StartPastEnd {
                start,
                size: self.total_size,
            });
        }
        let end = match end_inclusive {
            Some(e) => e.saturating_add(1).min(self.total_size),
            None => self.total_size,
        };
        Ok(ReadPlan {
            layout: *self,
            range: start..end,
        })
    }
}

/// A validated read of original bytes `range` (end exclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPlan {
    layout: ChunkLayout,
    range: Range<u64>,
}

/// One chunk's share of a read: original bytes `within` of chunk `chunk`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub chunk: u64,
    pub within: Range<usize>,
}

impl ReadPlan {
    pub fn range(&self) -> Range<u64> {
        self.range.clone()
    }

    pub fn len(&self) -> u64 {
        self.range.end - self.range.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `max_bytes` bytes of this read (all of it when shorter): one window of a
    /// sequential reader that asks again for the rest.
    pub fn first_bytes(&self, max_bytes: u64) -> ReadPlan {
        let Range { start, end } = self.range;
        ReadPlan {
            layout: self.layout,
            range: start..end.min(start.saturating_add(max_bytes)),
        }
    }

    /// Last chunk the read touches (`None` for an empty read).
    pub fn last_chunk(&self) -> Option<u64> {
        (!self.is_empty()).then(|| (self.range.end - 1) / self.layout.chunk_size)
    }

    /// The pieces in order; they cover the range exactly, without gaps or overlaps.
    pub fn pieces(&self) -> impl Iterator<Item = Piece> + Send + 'static {
        let size = self.layout.chunk_size;
        let Range { start, end } = self.range;
        let chunks = if start < end {
            (start / size)..((end - 1) / size + 1)
        } else {
            0..0
        };
        chunks.map(move |chunk| {
            let chunk_start = chunk * size;
            let from = start.max(chunk_start) - chunk_start;
            let to = end.min(chunk_start + size) - chunk_start;
            Piece {
                chunk,
                within: from as usize..to as usize,
            }
        })
    }
}

/// Places of stored chunks in the object: entry `i` is the start of chunk `i`, the last entry
/// the object's size.
pub fn stored_offsets(stored_sizes: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut out = vec![0];
    let mut at = 0u64;
    for s in stored_sizes {
        at += s;
        out.push(at);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pieces(l: &ChunkLayout, start: u64, end: Option<u64>) -> Vec<(u64, Range<usize>)> {
        l.plan(start, end)
            .unwrap()
            .pieces()
            .map(|p| (p.chunk, p.within))
            .collect()
    }

    #[test]
    fn counts_and_spans() {
        let l = ChunkLayout::new(100, 250).unwrap();
        assert_eq!(l.chunk_count(), 3);
        assert_eq!(l.chunk_span(0), Some(0..100));
        assert_eq!(l.chunk_span(2), Some(200..250));
        assert_eq!(l.chunk_span(3), None);
        assert_eq!(l.chunk_len(2), Some(50));
        assert_eq!(l.chunk_of(99), Some(0));
        assert_eq!(l.chunk_of(100), Some(1));
        assert_eq!(l.chunk_of(249), Some(2));
        assert_eq!(l.chunk_of(250), None);
        assert_eq!(ChunkLayout::new(100, 300).unwrap().chunk_count(), 3);
        assert_eq!(ChunkLayout::new(100, 0).unwrap().chunk_count(), 0);
        assert!(ChunkLayout::new(0, 10).is_none());
    }

    #[test]
    fn edges_of_chunks_and_segment() {
        let l = ChunkLayout::new(100, 250).unwrap();
        // From the first byte to the end.
        assert_eq!(
            pieces(&l, 0, None),
            vec![(0, 0..100), (1, 0..100), (2, 0..50)]
        );
        // Only the last byte of the segment.
        assert_eq!(pieces(&l, 249, Some(249)), vec![(2, 49..50)]);
        // The last byte of a chunk, then the first of the next.
        assert_eq!(pieces(&l, 99, Some(99)), vec![(0, 99..100)]);
        assert_eq!(pieces(&l, 100, Some(100)), vec![(1, 0..1)]);
        // Across a chunk edge.
        assert_eq!(pieces(&l, 99, Some(100)), vec![(0, 99..100), (1, 0..1)]);
        // Exactly one whole chunk.
        assert_eq!(pieces(&l, 100, Some(199)), vec![(1, 0..100)]);
        // Across all chunks, end clamped to the segment.
        assert_eq!(
            pieces(&l, 50, Some(10_000)),
            vec![(0, 50..100), (1, 0..100), (2, 0..50)]
        );
        // At the end: an empty read; past it: an error.
        assert!(l.plan(250, None).unwrap().is_empty());
        assert_eq!(l.plan(250, None).unwrap().last_chunk(), None);
        assert_eq!(
            l.plan(251, None),
            Err(RangeError::StartPastEnd {
                start: 251,
                size: 250
            })
        );
        assert_eq!(
            l.plan(10, Some(9)),
            Err(RangeError::EndBeforeStart { start: 10, end: 9 })
        );
        assert_eq!(
            l.plan(u64::MAX - 1, Some(u64::MAX)).map(|_| ()),
            Err(RangeError::StartPastEnd {
                start: u64::MAX - 1,
                size: 250
            })
        );
        assert_eq!(l.plan(0, Some(u64::MAX)).unwrap().len(), 250);
    }

    #[test]
    fn first_bytes_cut_a_window_off_the_front() {
        let l = ChunkLayout::new(100, 250).unwrap();
        let plan = l.plan(50, None).unwrap();
        let w = plan.first_bytes(60);
        assert_eq!(w.range(), 50..110);
        assert_eq!(
            w.pieces().map(|p| (p.chunk, p.within)).collect::<Vec<_>>(),
            vec![(0, 50..100), (1, 0..10)]
        );
        assert_eq!(w.last_chunk(), Some(1));
        // Longer than the read, or at its end: the read itself.
        assert_eq!(plan.first_bytes(10_000), plan);
        assert_eq!(plan.first_bytes(200), plan);
        assert_eq!(plan.first_bytes(u64::MAX), plan);
        assert!(l.plan(250, None).unwrap().first_bytes(5).is_empty());
    }

    #[test]
    fn segment_of_exact_multiple_has_no_empty_tail() {
        let l = ChunkLayout::new(100, 200).unwrap();
        assert_eq!(pieces(&l, 0, None), vec![(0, 0..100), (1, 0..100)]);
        assert_eq!(l.plan(150, None).unwrap().last_chunk(), Some(1));
    }

    #[test]
    fn stored_offsets_are_prefix_sums() {
        assert_eq!(stored_offsets([]), vec![0]);
        assert_eq!(stored_offsets([10, 5, 7]), vec![0, 10, 15, 22]);
    }

    proptest! {
        /// Pieces tile the requested range exactly: consecutive chunks, each piece inside its
        /// chunk, total length equal to the clamped range.
        #[test]
        fn pieces_tile_the_range(
            chunk_size in 1u64..5000,
            total in 0u64..50_000,
            a in 0u64..60_000,
            b in proptest::option::of(0u64..60_000),
        ) {
            let l = ChunkLayout::new(chunk_size, total).unwrap();
            let (start, end) = match b { Some(b) if b < a => (b, Some(a)), other => (a, other) };
            match l.plan(start, end) {
                Err(RangeError::StartPastEnd { .. }) => prop_assert!(start > total),
                Err(e) => prop_assert!(false, "{e}"),
                Ok(plan) => {
                    let want_end = end.map_or(total, |e| (e + 1).min(total));
                    prop_assert_eq!(plan.range(), start..want_end.max(start));
                    let mut pos = start;
                    let mut prev: Option<u64> = None;
                    for p in plan.pieces() {
                        let span = l.chunk_span(p.chunk).unwrap();
                        prop_assert!(!p.within.is_empty());
                        prop_assert!(p.within.end as u64 <= span.end - span.start);
                        prop_assert_eq!(span.start + p.within.start as u64, pos);
                        if let Some(q) = prev { prop_assert_eq!(p.chunk, q + 1); }
                        prev = Some(p.chunk);
                        pos += (p.within.end - p.within.start) as u64;
                    }
                    prop_assert_eq!(pos, plan.range().end);
                    prop_assert_eq!(prev, plan.last_chunk());
                }
            }
        }

        /// Every byte belongs to exactly the chunk whose span contains it.
        #[test]
        fn chunk_of_agrees_with_spans(chunk_size in 1u64..5000, total in 1u64..50_000, pos in 0u64..50_000) {
            let l = ChunkLayout::new(chunk_size, total).unwrap();
            match l.chunk_of(pos) {
                None => prop_assert!(pos >= total),
                Some(c) => {
                    prop_assert!(c < l.chunk_count());
                    prop_assert!(l.chunk_span(c).unwrap().contains(&pos));
                }
            }
            let sum: u64 = (0..l.chunk_count()).map(|c| l.chunk_len(c).unwrap()).sum();
            prop_assert_eq!(sum, total);
        }
    }
}
