//! When a file closes, and which files to flush when memory runs short. Pure functions, so the
//! rules that decide object boundaries are tested without Kafka or a store.

use chrono::NaiveDateTime;
use std::time::{Duration, Instant};

/// Why a file was closed (a field of the "file closed" log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollReason {
    /// The dump interval elapsed since the file's first record.
    Interval,
    /// The file reached `max_file_size`.
    Size,
    /// A record belongs to a later time directory than the file.
    TimeDirectory,
    /// The buffer budget is full and this file is among the largest.
    Memory,
    /// Shutdown or the end of a `--once` run.
    Shutdown,
    /// A CDC bundle written again ends where an earlier attempt at it ended.
    Cut,
    /// A CDC message adds a column to a table whose file's columns are fixed.
    Schema,
    /// The archive already holds the partition's next offsets (an object stored before).
    Archived,
}

impl RollReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interval => "interval",
            Self::Size => "size",
            Self::TimeDirectory => "time_directory",
            Self::Memory => "memory",
            Self::Shutdown => "shutdown",
            Self::Cut => "cut",
            Self::Schema => "schema",
            Self::Archived => "archived",
        }
    }
}

/// Must the open file close before a record of `record_period` is added? Only a *later*
/// period rolls: a late record stays in the current file, so keys depend on records alone.
pub fn rolls_before(file_period: NaiveDateTime, record_period: NaiveDateTime) -> bool {
    record_period > file_period
}

/// Must the file close after its last append?
pub fn rolls_on_size(output_bytes: u64, max_file_size: u64) -> bool {
    output_bytes >= max_file_size
}

/// Has the file been open for a whole interval?
pub fn interval_due(opened_at: Instant, now: Instant, interval: Duration) -> bool {
    now.saturating_duration_since(opened_at) >= interval
}

/// Given the memory of each open file, the indexes to flush (largest first) so that what stays
/// buffered drops to `low_water`. Empty when `total <= budget`.
pub fn pick_for_memory(
    sizes: &[usize],
    total: usize,
    budget: usize,
    low_water: usize,
) -> Vec<usize> {
    if total <= budget {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by(|a, b| sizes[*b].cmp(&sizes[*a]));
    let mut left = total;
    let mut picked = Vec::new();
    for i in order {
        if left <= low_water {
            break;
        }
        if sizes[i] == 0 {
            continue;
        }
        left = left.saturating_sub(sizes[i]);
        picked.push(i);
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn day(d: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 11, d)
            .unwrap()
            .and_hms_opt(0, 0, 0)
            .unwrap()
    }

    #[test]
    fn only_later_periods_roll() {
        assert!(rolls_before(day(29), day(30)));
        assert!(!rolls_before(day(29), day(29)));
        assert!(
            !rolls_before(day(29), day(28)),
            "late records stay in the open file"
        );
    }

    #[test]
    fn size_and_interval_edges() {
        assert!(!rolls_on_size(99, 100));
        assert!(rolls_on_size(100, 100));
        let t0 = Instant::now();
        assert!(!interval_due(
            t0,
            t0 + Duration::from_millis(999),
            Duration::from_secs(1)
        ));
        assert!(interval_due(
            t0,
            t0 + Duration::from_secs(1),
            Duration::from_secs(1)
        ));
        assert!(!interval_due(
            t0 + Duration::from_secs(5),
            t0,
            Duration::from_secs(1)
        ));
    }

    #[test]
    fn memory_picks_largest_until_low_water() {
        let sizes = [10, 50, 0, 30, 20];
        assert!(pick_for_memory(&sizes, 110, 120, 80).is_empty());
        assert_eq!(pick_for_memory(&sizes, 110, 100, 80), vec![1]);
        assert_eq!(pick_for_memory(&sizes, 110, 100, 20), vec![1, 3, 4]);
        assert_eq!(pick_for_memory(&sizes, 110, 100, 0), vec![1, 3, 4, 0]);
    }
}
