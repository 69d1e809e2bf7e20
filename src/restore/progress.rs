//! Restore progress: an indicatif bar on a terminal, a log line every few seconds otherwise.
//! Position and ETA are measured in archive bytes (object sizes, known up front); records and
//! bytes sent are shown beside them.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a log line is written when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);
const TICK: Duration = Duration::from_millis(200);

#[derive(Debug)]
pub struct Progress {
    total_objects: u64,
    total_bytes: u64,
    objects: AtomicU64,
    archive_bytes: AtomicU64,
    records: AtomicU64,
    sent_bytes: AtomicU64,
    started: Instant,
    bar: Option<ProgressBar>,
    done: AtomicBool,
}

/// Counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    pub objects: u64,
    pub total_objects: u64,
    pub archive_bytes: u64,
    pub total_bytes: u64,
    pub records: u64,
    pub sent_bytes: u64,
    pub elapsed: Duration,
}

impl Snapshot {
    /// Bytes sent per second so far.
    pub fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.sent_bytes as f64 / secs
        } else {
            0.0
        }
    }

    /// Time left at the average pace of archive bytes so far; `None` before any progress.
    pub fn eta(&self) -> Option<Duration> {
        if self.archive_bytes == 0 || self.elapsed.is_zero() {
            return None;
        }
        let left = self.total_bytes.saturating_sub(self.archive_bytes) as f64;
        let pace = self.archive_bytes as f64 / self.elapsed.as_secs_f64();
        Some(Duration::from_secs_f64(left / pace))
    }

    /// The log line written when there is no terminal.
    pub fn line(&self) -> String {
        let pct = if self.total_bytes > 0 {
            self.archive_bytes as f64 * 100.0 / self.total_bytes as f64
        } else {
            100.0
        };
        format!(
            "{}/{} objects ({pct:.1}% of archive bytes), {} records, {} sent, {}/s, ETA {}",
            self.objects,
            self.total_objects,
            self.records,
            human(self.sent_bytes as f64),
            human(self.rate()),
            self.eta()
                .map_or("unknown".to_string(), |d| format!("{}s", d.as_secs()))
        )
    }
}

/// Bytes in the largest binary unit that keeps a number >= 1: "412.0 KiB", "3.5 MiB".
pub fn human(bytes: f64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes.max(0.0);
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

impl Progress {
    /// `interactive`: draw a bar (stderr is a terminal); otherwise log lines.
    pub fn new(total_objects: u64, total_bytes: u64, interactive: bool) -> Arc<Self> {
        let bar = interactive.then(|| {
            let bar = ProgressBar::with_draw_target(
                Some(total_bytes),
                ProgressDrawTarget::stderr_with_hz(5),
            );
            let style = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] [{wide_bar}] {percent}% ETA {eta} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        });
        Arc::new(Self {
            total_objects,
            total_bytes,
            objects: AtomicU64::new(0),
            archive_bytes: AtomicU64::new(0),
            records: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            started: Instant::now(),
            bar,
            done: AtomicBool::new(false),
        })
    }

    pub fn sent(&self, records: u64, bytes: u64) {
        self.records.fetch_add(records, Relaxed);
        self.sent_bytes.fetch_add(bytes, Relaxed);
    }

    pub fn archive_read(&self, bytes: u64) {
        self.archive_bytes.fetch_add(bytes, Relaxed);
    }

    pub fn object_done(&self) {
        self.objects.fetch_add(1, Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            objects: self.objects.load(Relaxed),
            total_objects: self.total_objects,
            archive_bytes: self.archive_bytes.load(Relaxed),
            total_bytes: self.total_bytes,
            records: self.records.load(Relaxed),
            sent_bytes: self.sent_bytes.load(Relaxed),
            elapsed: self.started.elapsed(),
        }
    }

    /// Refreshes the bar (or logs) until [`Self::finish`] is called.
    pub fn spawn_reporter(self: &Arc<Self>) -> std::io::Result<std::thread::JoinHandle<()>> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("restore-progress".into())
            .spawn(move || {
                let mut last_log = Instant::now();
                while !me.done.load(Relaxed) {
                    std::thread::sleep(TICK);
                    let s = me.snapshot();
                    match &me.bar {
                        Some(bar) => {
                            bar.set_position(s.archive_bytes.min(s.total_bytes));
                            bar.set_message(format!(
                                "{}/{} objects, {} records, {}, {}/s",
                                s.objects,
                                s.total_objects,
                                s.records,
                                human(s.sent_bytes as f64),
                                human(s.rate())
                            ));
                        }
                        None if last_log.elapsed() >= LOG_EVERY => {
                            last_log = Instant::now();
                            tracing::info!("restore progress: {}", s.line());
                        }
                        None => {}
                    }
                }
            })
    }

    /// Stops the reporter and clears the bar.
    pub fn finish(&self) {
        self.done.store(true, Relaxed);
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// Prints a line above the bar (or logs it when there is none).
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => tracing::warn!("{line}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(archive: u64, total: u64, sent: u64, secs: u64) -> Snapshot {
        Snapshot {
            objects: 1,
            total_objects: 4,
            archive_bytes: archive,
            total_bytes: total,
            records: 10,
            sent_bytes: sent,
            elapsed: Duration::from_secs(secs),
        }
    }

    #[test]
    fn eta_and_rate() {
        let s = snap(25, 100, 2 * 1048576, 10);
        assert_eq!(s.eta(), Some(Duration::from_secs(30)));
        assert!((s.rate() - 209715.2).abs() < 1e-6);
        assert_eq!(snap(0, 100, 0, 10).eta(), None);
        assert_eq!(snap(100, 100, 0, 10).eta(), Some(Duration::ZERO));
        let line = s.line();
        assert!(line.contains("1/4 objects (25.0%"), "{line}");
        assert!(line.contains("ETA 30s"), "{line}");
        assert!(line.contains("2.0 MiB sent, 204.8 KiB/s"), "{line}");
        assert_eq!(human(0.0), "0.0 B");
        assert_eq!(human(3.5 * 1073741824.0), "3.5 GiB");
    }
}
