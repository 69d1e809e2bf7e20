//! Tier mode: the storage service behind the broker's `RemoteStorageManager` bridge.
//! (Implementation in progress; see issue "Tier mode".)

use crate::config::Config;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TierError {
    #[error("tier mode is not implemented yet")]
    NotImplemented,
}

/// Serves the bridge API on `cfg.tier.listen` until `stop` is set.
pub async fn serve(_cfg: &Config, _stop: Arc<AtomicBool>) -> Result<(), TierError> {
    Err(TierError::NotImplemented)
}
