//! Bytes in flight between the writers and the store. A writer waits (on its own thread) for
//! room before it hands a part on; the upload gives the room back once the part is stored.
//! The permit, not a counter somewhere else, is the bound.

use std::sync::{Arc, Condvar, Mutex};

pub struct ByteBudget {
    used: Mutex<usize>,
    freed: Condvar,
    cap: usize,
}

/// Room for `n` bytes; given back when dropped.
pub struct Permit {
    budget: Arc<ByteBudget>,
    n: usize,
}

impl ByteBudget {
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            used: Mutex::new(0),
            freed: Condvar::new(),
            cap: cap.max(1),
        })
    }

    /// Waits until `n` bytes fit (a request larger than the whole budget waits for all of it).
    pub fn acquire(self: &Arc<Self>, n: usize) -> Permit {
        let n = n.min(self.cap);
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used + n > self.cap {
            used = self.freed.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += n;
        Permit {
            budget: self.clone(),
            n,
        }
    }

    pub fn used(&self) -> usize {
        *self.used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut used = self.budget.used.lock().unwrap_or_else(|p| p.into_inner());
        *used -= self.n;
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn writers_wait_for_room_and_get_it_back_when_parts_are_stored() {
        let b = ByteBudget::new(100);
        let a = b.acquire(60);
        let c = b.acquire(40);
        assert_eq!(b.used(), 100);
        let waiter = {
            let b = b.clone();
            std::thread::spawn(move || {
                let p = b.acquire(30);
                b.used() >= 30 && p.n == 30
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "no room yet");
        drop(a);
        assert!(waiter.join().unwrap());
        drop(c);
        assert_eq!(b.used(), 0);
        // A part larger than the budget takes all of it rather than waiting forever.
        let all = b.acquire(1000);
        assert_eq!(b.used(), 100);
        drop(all);
    }
}
