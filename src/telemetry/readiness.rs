//! What `/readyz` answers: each part of a mode (a dump task, a replicate flow, tier) registers
//! itself as starting and says when it runs, failed or stopped; the process is ready while
//! every registered part runs and no stop was asked for. Answers name parts (task and flow
//! names) and states only, never errors, paths or secrets.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Where a part is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Registered; has not yet reached Kafka and its store, or has not started its work.
    Starting,
    /// Reached Kafka and its store, and runs.
    Running,
    /// Ended with an error (the process is about to exit).
    Failed,
    /// Ended without an error (a `--once` run that finished).
    Finished,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Failed => "failed",
            Self::Finished => "finished",
        }
    }
}

#[derive(Debug, Default)]
struct Parts {
    parts: BTreeMap<String, State>,
    stopping: bool,
}

static PARTS: Mutex<Parts> = Mutex::new(Parts {
    parts: BTreeMap::new(),
    stopping: false,
});

fn parts() -> MutexGuard<'static, Parts> {
    PARTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A registered part; what its owner tells `/readyz`.
#[derive(Debug, Clone)]
pub struct Part {
    name: String,
}

impl Part {
    /// Registers `name` (e.g. `dump task orders`) as starting.
    pub fn register(name: impl Into<String>) -> Self {
        let name = name.into();
        parts().parts.insert(name.clone(), State::Starting);
        Self { name }
    }

    pub fn set(&self, state: State) {
        parts().parts.insert(self.name.clone(), state);
    }

    pub fn running(&self) {
        self.set(State::Running);
    }

    /// Ok ends the part as finished, an error as failed.
    pub fn ended<T, E>(&self, result: &Result<T, E>) {
        self.set(match result {
            Ok(_) => State::Finished,
            Err(_) => State::Failed,
        });
    }
}

/// A stop was asked for (a signal): not ready from now on, while the work in flight finishes.
pub fn stopping() {
    parts().stopping = true;
}

/// `Ok` when ready, else the reason (one short line).
pub fn check() -> Result<(), String> {
    let p = parts();
    verdict(&p.parts, p.stopping)
}

/// The readiness of the parts (pure): the first failed part wins, then the first that is not
/// running.
fn verdict(parts: &BTreeMap<String, State>, stopping: bool) -> Result<(), String> {
    if stopping {
        return Err("stopping".into());
    }
    if parts.is_empty() {
        return Err("starting: nothing runs yet".into());
    }
    let not = |s: State| parts.iter().find(|(_, v)| **v == s);
    for s in [State::Failed, State::Starting, State::Finished] {
        if let Some((name, state)) = not(s) {
            return Err(format!("{name}: {}", state.as_str()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(parts: &[(&str, State)]) -> BTreeMap<String, State> {
        parts.iter().map(|(n, s)| (n.to_string(), *s)).collect()
    }

    #[test]
    fn ready_only_while_every_part_runs() {
        use State::*;
        assert_eq!(
            verdict(&of(&[]), false),
            Err("starting: nothing runs yet".into())
        );
        assert_eq!(
            verdict(
                &of(&[("dump task a", Running), ("dump task b", Starting)]),
                false
            ),
            Err("dump task b: starting".into())
        );
        assert_eq!(
            verdict(
                &of(&[("dump task a", Running), ("dump task b", Running)]),
                false
            ),
            Ok(())
        );
        assert_eq!(
            verdict(
                &of(&[("dump task a", Starting), ("dump task b", Failed)]),
                false
            ),
            Err("dump task b: failed".into())
        );
        assert_eq!(
            verdict(&of(&[("tier", Finished)]), false),
            Err("tier: finished".into())
        );
        assert_eq!(
            verdict(&of(&[("tier", Running)]), true),
            Err("stopping".into())
        );
    }
}
