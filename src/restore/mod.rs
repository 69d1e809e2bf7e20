//! Restore mode: replays dump archives back into Kafka.
//! (Implementation in progress; see issue "Restore".)

use crate::config::RestoreConfig;

#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("restore is not implemented yet")]
    NotImplemented,
}

/// Options that are not configuration: what this run does.
#[derive(Debug, Clone, Copy, Default)]
pub struct RestoreOptions {
    pub dry_run: bool,
}

pub async fn run(_cfg: &RestoreConfig, _opts: RestoreOptions) -> Result<(), RestoreError> {
    Err(RestoreError::NotImplemented)
}
