//! Logging events that come in floods: the first line at once, then at most one per interval
//! with the number of events it stands for. [`Throttle`] is pure (callers pass the time);
//! [`Throttles`] keeps one per kind of event. Used by the local APIs' refusals and by the
//! errors Kafka clients repeat.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Says when to log an event that may come in floods: the first at once, then at most one line
/// per interval, each with the number of events since the previous line. Pure: callers pass
/// the time, and call [`Throttle::flush`] now and then so the tail of a flood is reported too.
#[derive(Debug)]
pub struct Throttle {
    interval: Duration,
    last_line: Option<Instant>,
    held: u64,
}

impl Throttle {
    pub const fn new(interval: Duration) -> Self {
        Self {
            interval,
            last_line: None,
            held: 0,
        }
    }

    /// Counts one event at `now`; `Some(n)` when a line is due, `n` being the events it reports
    /// (this one and those held back since the last line).
    pub fn event(&mut self, now: Instant) -> Option<u64> {
        self.held += 1;
        self.due(now)
    }

    /// The events held back, when a line for them is due at `now`.
    pub fn flush(&mut self, now: Instant) -> Option<u64> {
        if self.held == 0 {
            return None;
        }
        self.due(now)
    }

    fn due(&mut self, now: Instant) -> Option<u64> {
        if self
            .last_line
            .is_some_and(|t| now.saturating_duration_since(t) < self.interval)
        {
            return None;
        }
        self.last_line = Some(now);
        Some(std::mem::take(&mut self.held))
    }
}

/// One [`Throttle`] per kind of event (an error's text, a refusal's reason), made on first use.
#[derive(Debug)]
pub struct Throttles {
    interval: Duration,
    by_kind: Mutex<HashMap<String, Throttle>>,
}

impl Throttles {
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            by_kind: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one event of `kind` now; `Some(n)` when a line is due (see [`Throttle::event`]).
    pub fn event(&self, kind: &str) -> Option<u64> {
        let now = Instant::now();
        let Ok(mut m) = self.by_kind.lock() else {
            return Some(1);
        };
        match m.get_mut(kind) {
            Some(t) => t.event(now),
            None => {
                let mut t = Throttle::new(self.interval);
                let n = t.event(now);
                m.insert(kind.to_string(), t);
                n
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttled_lines_count_what_they_stand_for() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut t = Throttle::new(Duration::from_secs(10));
        assert_eq!(t.flush(s(0)), None, "nothing to report");
        assert_eq!(t.event(s(0)), Some(1), "the first event is logged at once");
        assert_eq!(t.event(s(1)), None);
        assert_eq!(t.event(s(9)), None);
        assert_eq!(t.flush(s(9)), None, "not before the interval");
        assert_eq!(t.event(s(10)), Some(3), "the held two and this one");
        assert_eq!(t.event(s(12)), None);
        assert_eq!(t.flush(s(20)), Some(1), "the tail of a flood is reported");
        assert_eq!(t.flush(s(40)), None, "and only once");
        assert_eq!(t.event(s(41)), Some(1));
        // A clock that steps back holds lines rather than flooding.
        assert_eq!(t.event(s(30)), None);
    }

    #[test]
    fn each_kind_has_its_own_throttle() {
        let t = Throttles::new(Duration::from_secs(3600));
        assert_eq!(t.event("a"), Some(1));
        assert_eq!(t.event("a"), None);
        assert_eq!(t.event("b"), Some(1), "another kind is not held by a's");
        assert_eq!(t.event("a"), None);
    }
}
