//! The first error of any stage of a task: every stage stops once one is set, and the task
//! returns that one (the later ones are consequences).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The first error of a task's stages; every stage stops once it is set.
pub struct Fatal<E> {
    set: AtomicBool,
    error: Mutex<Option<E>>,
}

impl<E> Default for Fatal<E> {
    fn default() -> Self {
        Self {
            set: AtomicBool::new(false),
            error: Mutex::new(None),
        }
    }
}

impl<E: std::fmt::Display> Fatal<E> {
    pub fn set(&self, e: E) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            tracing::error!(error = %e, "task failed");
            *slot = Some(e);
        }
        self.set.store(true, Ordering::Release);
    }

    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    pub fn take(&self) -> Option<E> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}
