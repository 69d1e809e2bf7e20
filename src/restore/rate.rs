//! The optional rate limit: a token bucket on record bytes, shared by every worker.
//!
//! A caller takes the bytes it is about to send and sleeps for the debt it ran into, so a
//! record larger than the bucket still passes and the long-run rate stays at the limit.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Pure token bucket: `take` says how long the caller must wait.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// `rate` bytes per second; bursts of a quarter second at most.
    pub fn new(rate: f64, now: Instant) -> Self {
        let capacity = (rate / 4.0).max(1.0);
        Self {
            rate,
            capacity,
            tokens: capacity,
            last: now,
        }
    }

    pub fn take(&mut self, bytes: u64, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now.max(self.last);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
        self.tokens -= bytes as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

/// A token bucket shared between threads; `acquire` blocks the calling thread.
#[derive(Debug)]
pub struct RateLimiter(Mutex<TokenBucket>);

impl RateLimiter {
    pub fn new(bytes_per_sec: f64) -> Self {
        Self(Mutex::new(TokenBucket::new(bytes_per_sec, Instant::now())))
    }

    pub fn acquire(&self, bytes: u64) {
        let wait = match self.0.lock() {
            Ok(mut b) => b.take(bytes, Instant::now()),
            Err(_) => Duration::ZERO,
        };
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_steady_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000.0, t0);
        assert_eq!(b.take(250, t0), Duration::ZERO, "a quarter second of burst");
        assert_eq!(b.take(100, t0), Duration::from_millis(100));
        // The debt is paid by waiting; after it, the next 100 bytes cost 100 ms again.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(b.take(100, t1), Duration::from_millis(100));
    }

    #[test]
    fn large_records_pass_with_a_proportional_wait() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000.0, t0);
        let w = b.take(5250, t0);
        assert_eq!(w, Duration::from_secs(5));
    }

    #[test]
    fn idle_time_refills_only_up_to_capacity() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000.0, t0);
        let _ = b.take(250, t0);
        let later = t0 + Duration::from_secs(60);
        assert_eq!(b.take(250, later), Duration::ZERO);
        assert_eq!(b.take(1, later), Duration::from_millis(1));
    }

    #[test]
    fn long_run_rate_is_the_limit() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10_000.0, t0);
        let mut now = t0;
        for _ in 0..1000 {
            now += b.take(100, now);
        }
        // 100 kB at 10 kB/s, minus the initial burst of 2.5 kB.
        let secs = (now - t0).as_secs_f64();
        assert!((secs - 9.75).abs() < 0.01, "{secs}");
    }
}
