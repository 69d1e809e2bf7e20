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
/// fault in again.
const MIN_GAP: Duration = Duration::from_millis(100);
/// Longest time between two releases while live memory alone is over the limit (memory outside
/// the budget, such as CDC repeat windows): releasing every 100 ms then only made the process
/// fault its pages in again (bench/README.md, "CDC tables").
const MAX_GAP: Duration = Duration::from_secs(5);
/// Memory this process holds outside its buffer budget (CDC repeat windows), in bytes: the
/// governor's limit grows by it, or it would hand free pages back over and over only to have
/// them faulted in again.
static OUTSIDE_BUDGET: AtomicU64 = AtomicU64::new(0);

/// A holder's share of [`OUTSIDE_BUDGET`], kept up to date with [`Claim::set`] and given back
/// when dropped.
#[derive(Debug, Default)]
pub struct Claim(u64);

impl Claim {
    pub fn set(&mut self, bytes: u64) {
        if bytes >= self.0 {
            OUTSIDE_BUDGET.fetch_add(bytes - self.0, Ordering::Relaxed);
        } else {
            OUTSIDE_BUDGET.fetch_sub(self.0 - bytes, Ordering::Relaxed);
        }
        self.0 = bytes;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.set(0);
    }
}

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

/// When to release free pages (pure): once over the limit, at most every `gap`; the gap doubles
/// (up to [`MAX_GAP`]) while a release leaves the process over the limit, and is back to
/// [`MIN_GAP`] once one brings it under.
#[derive(Debug)]
struct Pacer {
    limit: u64,
    gap: Duration,
    last: Option<Instant>,
}

impl Pacer {
    fn new(limit: u64) -> Self {
        Self {
            limit,
            gap: MIN_GAP,
            last: None,
        }
    }

    fn due(&self, resident: u64, now: Instant) -> bool {
        resident > self.limit && self.last.is_none_or(|t| now.duration_since(t) >= self.gap)
    }

    /// After a release at `now` that left the process at `resident`; `true` the first time live
    /// memory alone is found over the limit.
    fn released(&mut self, resident: u64, now: Instant) -> bool {
        self.last = Some(now);
        if resident > self.limit {
            let first = self.gap == MIN_GAP;
            self.gap = (self.gap * 2).min(MAX_GAP);
            first
        } else {
            self.gap = MIN_GAP;
            false
        }
    }
}

/// Releases the allocator's free pages whenever the process's resident size passes `limit` plus
/// what [`Claim`]s hold outside the budget; stops when dropped.
pub struct Governor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Governor {
    /// `limit`: the resident size to stay under. `None` when this platform cannot tell the
    /// resident size (nothing to govern) or the thread cannot start.
    pub fn start(limit: u64) -> Option<Self> {
        resident()?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("memory".into())
            .spawn(move || {
                let mut pacer = Pacer::new(limit);
                let mut told = false;
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(SAMPLE);
                    let Some(rss) = resident() else { return };
                    pacer.limit = limit + OUTSIDE_BUDGET.load(Ordering::Relaxed);
                    if !pacer.due(rss, Instant::now()) || !release_free_pages() {
                        continue;
                    }
                    metrics::counter!("strata_memory_releases_total").increment(1);
                    let after = resident().unwrap_or(rss);
                    tracing::debug!(before = rss, after, limit = pacer.limit, "resident memory over the limit: free pages handed back");
                    if pacer.released(after, Instant::now()) && !told {
                        told = true;
                        tracing::info!(resident_mib = after >> 20, limit_mib = pacer.limit >> 20, "memory in use is over the budget even without the allocator's free pages; free pages are handed back less often while it lasts");
                    }
                }
            })
            .ok()?;
        Some(Self {
            stop,
            thread: Some(thread),
        })
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
    fn releases_only_over_the_limit_and_less_often_while_they_cannot_help() {
        let mib = 1 << 20;
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut p = Pacer::new(300 * mib);
        assert!(!p.due(299 * mib, t0));
        assert!(!p.due(300 * mib, t0), "at the limit is within it");
        assert!(p.due(301 * mib, t0), "the first time over");
        // A release that gets under the limit: the next may come 100 ms later.
        assert!(!p.released(250 * mib, t0));
        assert!(!p.due(400 * mib, at(50)));
        assert!(p.due(400 * mib, at(100)));
        // Releases that leave live memory over the limit space out: 200, 400 ... 5000 ms.
        assert!(p.released(350 * mib, at(100)), "told once");
        assert!(!p.due(400 * mib, at(250)));
        assert!(p.due(400 * mib, at(300)));
        assert!(!p.released(350 * mib, at(300)), "not told again");
        let mut t = 300;
        for _ in 0..10 {
            t += 5000;
            assert!(p.due(400 * mib, at(t)));
            p.released(350 * mib, at(t));
        }
        assert!(
            !p.due(400 * mib, at(t + 4999)),
            "never more often than every 5 s"
        );
        assert!(p.due(400 * mib, at(t + 5000)));
        // One that gets under again: back to 100 ms.
        p.released(200 * mib, at(t + 5000));
        assert!(p.due(400 * mib, at(t + 5100)));
    }

    #[test]
    fn claims_add_up_and_are_given_back() {
        // Other tests' claims may come and go meanwhile; only this one's effect is checked.
        let mut a = Claim::default();
        a.set(1 << 40);
        assert!(OUTSIDE_BUDGET.load(Ordering::Relaxed) >= 1 << 40);
        a.set(1 << 20);
        let now = OUTSIDE_BUDGET.load(Ordering::Relaxed);
        assert!((1 << 20..1 << 40).contains(&now), "{now}");
        drop(a);
        assert!(OUTSIDE_BUDGET.load(Ordering::Relaxed) < 1 << 40);
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
