//! `dump --once` progress on a terminal: records archived and to go (up to the targets noted at
//! start), bytes, rate and time left, redrawn a few times a second; nothing when stderr is not
//! a terminal (the run ends with one summary line instead, see `main`).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::{Duration, Instant};

pub(super) struct OnceProgress {
    bar: Option<ProgressBar>,
    started: Instant,
}

impl OnceProgress {
    pub fn new(terminal: bool) -> Self {
        let bar = terminal.then(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} {pos}/{len} records {msg} [{elapsed_precise}, {eta} left]",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b
        });
        Self {
            bar,
            started: Instant::now(),
        }
    }

    /// Records and bytes taken so far, and records still to go to the targets.
    pub fn update(&self, records: u64, bytes: u64, to_go: u64) {
        let Some(b) = &self.bar else {
            return;
        };
        b.set_length(records + to_go);
        b.set_position(records);
        b.set_message(rate_text(bytes, self.started.elapsed()));
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// `12.0 MiB at 3.4 MiB/s` (pure).
pub(super) fn rate_text(bytes: u64, elapsed: Duration) -> String {
    let mib = bytes as f64 / (1 << 20) as f64;
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { mib / secs } else { 0.0 };
    format!("{mib:.1} MiB at {rate:.1} MiB/s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_rate_read_in_mib() {
        assert_eq!(
            rate_text(12 << 20, Duration::from_secs(4)),
            "12.0 MiB at 3.0 MiB/s"
        );
        assert_eq!(rate_text(0, Duration::ZERO), "0.0 MiB at 0.0 MiB/s");
    }
}
