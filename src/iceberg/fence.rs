//! Which partitions this member still owns, as the committer sees it. The group does not fence
//! a table's commits: a commit that lands after its member gave the partition up would come
//! after the next owner read the table's offsets, and that owner's first commit would then be
//! refused as a zombie's. So the rebalance callback marks revoked partitions and waits for a
//! commit in flight to end before the member lets them go, and every commit checks ownership
//! after it declared itself in flight.

use crate::kafka::Tp;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a revoke looks whether the commit in flight ended.
const LOOK: Duration = Duration::from_millis(5);

#[derive(Default)]
pub(super) struct Fence {
    /// The assignment (the sink's generation) under which each partition is held.
    owned: Mutex<HashMap<Tp, u64>>,
    /// Commits in flight.
    busy: AtomicUsize,
}

/// A commit in flight, until dropped.
pub(super) struct InFlight<'a>(&'a Fence);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Fence {
    /// The sink took `tp` under assignment `gen`.
    pub fn own(&self, tp: &Tp, gen: u64) {
        if let Ok(mut o) = self.owned.lock() {
            o.insert(tp.clone(), gen);
        }
    }

    /// The rebalance callback: `tps` are given up; waits at most `wait` for a commit in flight
    /// to end. `false` when it did not end in time (its partitions' next owner may then find
    /// the table moved after it started).
    pub fn give_up(&self, tps: &[(String, i32)], wait: Duration) -> bool {
        if let Ok(mut o) = self.owned.lock() {
            for (topic, partition) in tps {
                o.remove(&Tp::new(topic, *partition));
            }
        }
        let until = Instant::now() + wait;
        while self.busy.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(LOOK);
        }
        true
    }

    /// Declares a commit in flight; check [`Fence::owns`] after this, not before: a revoke
    /// either sees the commit in flight and waits for it, or the commit sees the revoke.
    pub fn in_flight(&self) -> InFlight<'_> {
        self.busy.fetch_add(1, Ordering::SeqCst);
        InFlight(self)
    }

    /// Whether `tp` is still held under assignment `gen`.
    pub fn owns(&self, tp: &Tp, gen: u64) -> bool {
        self.owned
            .lock()
            .is_ok_and(|o| o.get(tp).is_some_and(|g| *g == gen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tp(p: i32) -> Tp {
        Tp::new("t", p)
    }

    #[test]
    fn a_partition_is_owned_under_its_latest_assignment_only() {
        let f = Fence::default();
        assert!(!f.owns(&tp(0), 1), "never assigned");
        f.own(&tp(0), 1);
        f.own(&tp(1), 2);
        assert!(f.owns(&tp(0), 1));
        assert!(f.give_up(&[("t".into(), 0)], Duration::ZERO));
        assert!(!f.owns(&tp(0), 1), "revoked");
        assert!(f.owns(&tp(1), 2), "another partition stays");
        f.own(&tp(0), 3);
        assert!(!f.owns(&tp(0), 1), "a commit of the earlier assignment");
        assert!(f.owns(&tp(0), 3));
    }

    #[test]
    fn a_revoke_waits_for_the_commit_in_flight() {
        let f = Arc::new(Fence::default());
        f.own(&tp(0), 1);
        let flight = f.in_flight();
        assert!(f.owns(&tp(0), 1));
        let (tx, rx) = std::sync::mpsc::channel();
        let g = f.clone();
        let revoke = std::thread::spawn(move || {
            let ended = g.give_up(&[("t".into(), 0)], Duration::from_secs(30));
            let _ = tx.send(ended);
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "the revoke returned while the commit was in flight"
        );
        drop(flight);
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)), Ok(true));
        let _ = revoke.join();
        // A commit that starts after the revoke sees it.
        let _flight = f.in_flight();
        assert!(!f.owns(&tp(0), 1));
    }

    #[test]
    fn a_revoke_gives_up_waiting_at_its_bound() {
        let f = Fence::default();
        f.own(&tp(0), 1);
        let _flight = f.in_flight();
        assert!(!f.give_up(&[("t".into(), 0)], Duration::from_millis(20)));
        assert!(!f.owns(&tp(0), 1));
    }
}
