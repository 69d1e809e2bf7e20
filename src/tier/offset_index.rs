//! The offset index strata stores (and serves back for `fetch-index OFFSET`): the broker's own
//! entries, each keyed by the first offset of the batch it points at instead of its last one.
//!
//! Why: Kafka indexes a batch under its last offset. A consumer's next fetch asks for the first
//! offset of the batch after the last one it got, and looking that offset up lands one batch too
//! early. Reading its local disk, the broker skips that batch by its header; reading a remote
//! segment, it cannot skip bytes: it reads the whole batch through the plugin's stream and drops
//! it. With 1 MB batches (librdkafka's default batch size) every remote fetch moved twice the
//! bytes it returned. Keyed by first offsets, the lookup lands on the wanted batch.
//!
//! Positions and the number of entries stay as they are, so the index has the broker's density
//! and size; every entry still points at a batch start at or before any offset it is found
//! for, which is all Kafka's remote readers (fetch, offset for timestamp, the aborted
//! transaction bounds of read_committed fetches) rely on. An index that does not describe its
//! `.log` as expected is stored unchanged.

use std::io;

/// Bytes of an offset index entry: relative offset (i32) and position (i32), big endian.
const ENTRY: usize = 8;
/// A batch starts with its base offset (i64) and length (i32, bytes after these 12).
const BATCH_HEAD: usize = 12;
/// Bytes read at once from the `.log` when looking batch heads up (entries are close together).
const BLOCK: usize = 64 << 10;

/// The index with each entry's offset replaced by the base offset of the batch at its position,
/// or why it cannot be: then the caller stores the broker's index as it is.
///
/// `read_at(position, buf)` fills `buf` from the `.log` at `position` (short only at its end);
/// `log_size` is the `.log`'s size and `base_offset` the segment's first offset (index offsets
/// are relative to it).
pub fn key_by_batch_start(
    index: &[u8],
    log_size: u64,
    base_offset: i64,
    mut read_at: impl FnMut(u64, &mut [u8]) -> io::Result<usize>,
) -> Result<Vec<u8>, String> {
    if !index.len().is_multiple_of(ENTRY) {
        return Err(format!(
            "its size ({} bytes) is not a multiple of {ENTRY}",
            index.len()
        ));
    }
    let mut out = Vec::with_capacity(index.len());
    let mut block = Vec::new();
    let mut block_at = 0u64;
    let mut previous: Option<(i64, u32)> = None;
    for (i, e) in index.chunks_exact(ENTRY).enumerate() {
        let relative = i32::from_be_bytes([e[0], e[1], e[2], e[3]]);
        let position = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
        let bad =
            |what: String| format!("entry {i} (offset {relative}, position {position}) {what}");
        if relative < 0 || position > i32::MAX as u32 {
            return Err(bad("is out of range".into()));
        }
        let pos = u64::from(position);
        if pos + BATCH_HEAD as u64 > log_size {
            return Err(bad(format!(
                "points past the end of the log ({log_size} bytes)"
            )));
        }
        let in_block = pos >= block_at && pos + BATCH_HEAD as u64 <= block_at + block.len() as u64;
        if !in_block {
            let len = BLOCK.min((log_size - pos) as usize);
            block.resize(len, 0);
            let mut filled = 0;
            while filled < len {
                let n = read_at(pos + filled as u64, &mut block[filled..])
                    .map_err(|e| bad(format!("cannot be checked: reading the log failed: {e}")))?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled < BATCH_HEAD {
                return Err(bad("points past the end of the log as read".into()));
            }
            block.truncate(filled);
            block_at = pos;
        }
        let at = (pos - block_at) as usize;
        let head = &block[at..at + BATCH_HEAD];
        let base = i64::from_be_bytes(head[..8].try_into().unwrap_or_default());
        let length = i32::from_be_bytes(head[8..12].try_into().unwrap_or_default());
        let last = base_offset + i64::from(relative);
        if length <= 0 || pos + BATCH_HEAD as u64 + length as u64 > log_size {
            return Err(bad(format!(
                "points at no batch (length {length} at that position)"
            )));
        }
        if base < base_offset || base > last {
            return Err(bad(format!(
                "points at a batch starting at offset {base}, outside {base_offset}..={last}"
            )));
        }
        if let Some((prev_base, prev_pos)) = previous {
            if base <= prev_base || position <= prev_pos {
                return Err(bad("is not after the entry before it".into()));
            }
        }
        previous = Some((base, position));
        let new_relative = (base - base_offset) as i32;
        out.extend_from_slice(&new_relative.to_be_bytes());
        out.extend_from_slice(&position.to_be_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log of batches (base offset, record count, body length), and Kafka's index over it:
    /// an entry (last offset, position) for every batch after the first `interval` bytes.
    fn log_of(batches: &[(i64, i64, usize)], interval: usize) -> (Vec<u8>, Vec<u8>) {
        let (mut log, mut index) = (Vec::new(), Vec::new());
        let mut since = 0usize;
        for &(base, count, body) in batches {
            if since > interval {
                index.extend_from_slice(&((base + count - 1 - 100) as i32).to_be_bytes());
                index.extend_from_slice(&(log.len() as u32).to_be_bytes());
                since = 0;
            }
            let start = log.len();
            log.extend_from_slice(&base.to_be_bytes());
            log.extend_from_slice(&(body as i32).to_be_bytes());
            log.resize(log.len() + body, 0xab);
            since += log.len() - start;
        }
        (log, index)
    }

    fn reader(log: &[u8]) -> impl FnMut(u64, &mut [u8]) -> io::Result<usize> + '_ {
        move |at, buf| {
            let at = at as usize;
            let n = buf.len().min(log.len().saturating_sub(at));
            buf[..n].copy_from_slice(&log[at..at + n]);
            Ok(n)
        }
    }

    fn entries(index: &[u8]) -> Vec<(i32, u32)> {
        index
            .chunks_exact(8)
            .map(|e| {
                (
                    i32::from_be_bytes(e[..4].try_into().unwrap()),
                    u32::from_be_bytes(e[4..].try_into().unwrap()),
                )
            })
            .collect()
    }

    #[test]
    fn entries_move_to_the_first_offset_of_their_batch() {
        // Segment base 100; batches of 10 records and 5000 bytes each.
        let batches: Vec<_> = (0..6).map(|i| (100 + 10 * i, 10, 5000)).collect();
        let (log, index) = log_of(&batches, 4096);
        assert_eq!(
            entries(&index),
            vec![
                (19, 5012),
                (29, 10024),
                (39, 15036),
                (49, 20048),
                (59, 25060)
            ]
        );
        let keyed = key_by_batch_start(&index, log.len() as u64, 100, reader(&log)).unwrap();
        assert_eq!(
            entries(&keyed),
            vec![
                (10, 5012),
                (20, 10024),
                (30, 15036),
                (40, 20048),
                (50, 25060)
            ]
        );
        // Small batches: not every batch has an entry; entries still name their own batch.
        let batches: Vec<_> = (0..200).map(|i| (100 + 3 * i, 3, 900)).collect();
        let (log, index) = log_of(&batches, 4096);
        let keyed = key_by_batch_start(&index, log.len() as u64, 100, reader(&log)).unwrap();
        assert_eq!(keyed.len(), index.len());
        for ((old, pos), (new, same)) in entries(&index).into_iter().zip(entries(&keyed)) {
            assert_eq!(pos, same);
            assert_eq!(new, old - 2, "batch of 3 records at {pos}");
        }
        assert_eq!(
            key_by_batch_start(&[], 0, 100, reader(&[])).unwrap(),
            Vec::<u8>::new()
        );
    }

    #[test]
    fn indexes_that_do_not_fit_the_log_are_refused() {
        let batches: Vec<_> = (0..6).map(|i| (100 + 10 * i, 10, 5000)).collect();
        let (log, index) = log_of(&batches, 4096);
        let size = log.len() as u64;
        let check = |index: &[u8], log: &[u8]| {
            key_by_batch_start(index, log.len() as u64, 100, reader(log)).unwrap_err()
        };
        assert!(check(&index[..12], &log).contains("multiple of 8"));
        // A position in the middle of a batch.
        let mut shifted = index.clone();
        shifted[7] += 1;
        let err = check(&shifted, &log);
        assert!(err.contains("entry 0"), "{err}");
        // Past the end of the log.
        let mut past = index.clone();
        past[4..8].copy_from_slice(&(size as u32).to_be_bytes());
        assert!(check(&past, &log).contains("past the end"));
        // An entry offset before the batch's first offset.
        let mut early = index.clone();
        early[..4].copy_from_slice(&5i32.to_be_bytes());
        assert!(check(&early, &log).contains("outside"));
        // Entries out of order.
        let mut swapped = index.clone();
        swapped.copy_within(0..8, 16);
        assert!(check(&swapped, &log).contains("not after"));
        // A read error.
        let err = key_by_batch_start(&index, size, 100, |_, _| Err(io::Error::other("disk gone")))
            .unwrap_err();
        assert!(err.contains("disk gone"), "{err}");
    }
}
