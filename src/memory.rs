//! The process's resident memory against its budget. jemalloc (strata's allocator, also
//! `malloc`'s for librdkafka) keeps freed pages for reuse for a few seconds; under loads that
//! fragment its extents (compressed Parquet pages, fetch buffers of every size) those pages
//! alone were a third of a dump's peak. A [`Governor`] thread reads the resident size and, when
//! it passes the limit, has the allocator hand its free pages back at once. It never touches
//! memory in use: the budget's shares bound that.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the resident size is read (a read of `/proc/self/statm`, a few microseconds).
const SAMPLE: Duration = Duration::from_millis(20);
/// Least time between two releases: each hands back every free page, and the pages reused next
/// fault in again, so a process whose live memory alone is over the limit must not release in
/// a loop.
const MIN_GAP: Duration = Duration::from_millis(100);

/// The resident set size of this process, in bytes (Linux; `None` elsewhere).
pub fn resident() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// Hands the allocator's free pages back to the system now; `false` if it refused.
pub fn release_free_pages() -> bool {
    // SAFETY: "arena.<i>.purge" takes neither input nor output (null pointers, length 0, as
    // jemalloc documents); 4096 is MALLCTL_ARENAS_ALL, every arena. strata's binaries and
    // tests link tikv-jemalloc-sys with its allocator override, so `malloc` is jemalloc's.
    let r = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    r == 0
}

/// Whether to release free pages now (pure).
fn due(resident: u64, limit: u64, since_last: Option<Duration>) -> bool {
    resident > limit && since_last.is_none_or(|d| d >= MIN_GAP)
}

/// Releases the allocator's free pages whenever the process's resident size passes `limit`;
/// stops when dropped.
pub struct Governor {
    stop: Arc<AtomicBool>,
    releases: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Governor {
    /// `limit`: the resident size to stay under. `None` when this platform cannot tell the
    /// resident size (nothing to govern) or the thread cannot start.
    pub fn start(limit: u64) -> Option<Self> {
        resident()?;
        let stop = Arc::new(AtomicBool::new(false));
        let releases = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), releases.clone());
        let thread = std::thread::Builder::new()
            .name("memory".into())
            .spawn(move || {
                let mut last: Option<Instant> = None;
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(SAMPLE);
                    let Some(rss) = resident() else { return };
                    if due(rss, limit, last.map(|t| t.elapsed())) {
                        last = Some(Instant::now());
                        if release_free_pages() {
                            n.fetch_add(1, Ordering::Relaxed);
                            metrics::counter!("strata_memory_releases_total").increment(1);
                            tracing::debug!(
                                resident = rss,
                                limit,
                                "resident memory over the limit: free pages handed back"
                            );
                        }
                    }
                }
            })
            .ok()?;
        Some(Self {
            stop,
            releases,
            thread: Some(thread),
        })
    }

    /// How many times free pages were handed back.
    pub fn releases(&self) -> u64 {
        self.releases.load(Ordering::Relaxed)
    }
}

impl Drop for Governor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_only_over_the_limit_and_not_in_a_loop() {
        let mib = 1 << 20;
        assert!(!due(299 * mib, 300 * mib, None));
        assert!(
            !due(300 * mib, 300 * mib, None),
            "at the limit is within it"
        );
        assert!(due(301 * mib, 300 * mib, None), "the first time over");
        assert!(!due(400 * mib, 300 * mib, Some(MIN_GAP / 2)));
        assert!(due(400 * mib, 300 * mib, Some(MIN_GAP)));
    }

    #[test]
    fn the_resident_size_is_read_and_free_pages_go_back() {
        let before = resident().expect("Linux has /proc/self/statm");
        assert!(before > 1 << 20, "{before}");
        // Freed pages stay with the allocator until they are released; that they are is all
        // this can check in a process other tests share.
        drop(vec![1u8; 64 << 20]);
        assert!(release_free_pages(), "jemalloc refused arena.4096.purge");
    }
}
