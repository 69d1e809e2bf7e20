//! Tier mode: the storage service behind the broker's `RemoteStorageManager` bridge.
//!
//! Contract (HTTP, see `bridge/kafka-rsm/README.md`): copy stores a rolled segment as a chunked
//! `.log` object, an indexes object and a manifest written last, idempotently; fetch serves
//! verified original bytes of any range through a bounded chunk cache; delete is idempotent.

mod api;
mod cache;
mod chunks;
mod copy;
mod error;
mod fetch;
mod keys;
mod manifest;
mod protocol;
mod stats;

pub use cache::{ChunkCache, ChunkKey};
pub use chunks::{ChunkLayout, Piece, RangeError, ReadPlan};
pub use error::TierError;
pub use keys::{partition_prefix, topic_prefix, SegmentKeys};
pub use manifest::{
    ChunkEntry, Compression, IndexEntry, IndexesLayout, LogLayout, Manifest, ManifestError,
    FORMAT_VERSION,
};
pub use protocol::{
    CopyRequest, CopyResponse, DeleteRequest, FetchIndexRequest, FetchRequest, FieldError,
    IndexType, SegmentFiles, SegmentId, SegmentMetadata, TopicId, TopicName,
};

use crate::config::Config;
use crate::store::ObjectStore;
use axum::serve::ListenerExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long in-flight requests may finish after a stop before the server quits anyway (the
/// broker may hold a fetch body open).
const DRAIN: Duration = Duration::from_secs(10);

/// Memory kept for recently used chunks in front of a disk cache: what a few sequential readers
/// need (the chunk being read and the prefetched ones), at least 32 MiB.
fn hot_bytes(t: &crate::config::TierConfig) -> u64 {
    let reader = (u64::from(t.prefetch_chunks) + 1) * t.chunk_size.bytes();
    (2 * reader).max(32 << 20)
}

/// The service's state, shared by every request.
pub struct Tier {
    store: Arc<dyn ObjectStore>,
    prefix: crate::layout::DumpDir,
    copier: copy::Copier,
    reader: Arc<fetch::Reader>,
}

impl Tier {
    /// Builds the service over a store (the chunk cache directory is emptied).
    pub async fn new(cfg: &Config, store: Arc<dyn ObjectStore>) -> Result<Self, TierError> {
        let t = &cfg.tier;
        let cache = match &t.cache_dir {
            Some(dir) => ChunkCache::on_disk(dir, t.cache_size.bytes(), hot_bytes(t)).await?,
            None => ChunkCache::memory(t.cache_size.bytes()),
        };
        let compression = if t.compress_chunks {
            Compression::Zstd
        } else {
            Compression::None
        };
        let chunk_size = usize::try_from(t.chunk_size.bytes())
            .map_err(|_| TierError::Internal("tier.chunk_size does not fit in memory".into()))?;
        Ok(Self {
            copier: copy::Copier::new(
                store.clone(),
                t.prefix.clone(),
                chunk_size,
                compression,
                t.upload_concurrency as usize,
            ),
            reader: Arc::new(fetch::Reader::new(
                store.clone(),
                t.prefix.clone(),
                cache,
                t.prefetch_chunks,
            )),
            store,
            prefix: t.prefix.clone(),
        })
    }

    /// Removes a segment's objects, manifest first; absent objects are fine.
    async fn delete(&self, seg: &SegmentMetadata) -> Result<(), TierError> {
        let keys = SegmentKeys::new(&self.prefix, seg);
        self.reader.forget(&keys);
        for key in keys.all() {
            stats::timed("delete", self.store.delete(key)).await?;
        }
        self.reader.forget(&keys);
        Ok(())
    }
}

/// Chunk buffers (MiBs each) come and go at the pace of the traffic, on many threads. glibc
/// would keep freed ones in per-thread arenas, so RSS would grow well past what is in use;
/// served from mmap, they go back to the system when freed.
fn return_big_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes an allocator tuning value; it is thread safe.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 512 << 10);
    }
}

/// Serves the bridge API on `cfg.tier.listen` until `stop` is set.
pub async fn serve(cfg: &Config, stop: Arc<AtomicBool>) -> Result<(), TierError> {
    stats::describe();
    return_big_buffers_to_the_system();
    let store = crate::store::open(&cfg.store)
        .await
        .map_err(TierError::StoreCheck)?;
    store.check().await.map_err(TierError::StoreCheck)?;
    let tier = Arc::new(Tier::new(cfg, store.clone()).await?);
    let addr = cfg.tier.listen;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| TierError::Listen {
            addr,
            source: TierError::io(e),
        })?;
    tracing::info!(
        %addr,
        store = %store.location(cfg.tier.prefix.as_str()),
        chunk_size = %cfg.tier.chunk_size,
        compression = if cfg.tier.compress_chunks { "zstd" } else { "none" },
        cache = %cfg.tier.cache_dir.as_ref().map_or("memory".to_string(), |d| d.display().to_string()),
        cache_size = %cfg.tier.cache_size,
        "strata tier serving the broker bridge"
    );
    let stopped = {
        let stop = stop.clone();
        async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // Answers go out as soon as they are written: no Nagle delay between a response's head and
    // its body on the broker's short request/response exchanges.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    let server = axum::serve(listener, api::router(tier)).with_graceful_shutdown(stopped);
    let drained = async {
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(DRAIN).await;
    };
    tokio::select! {
        r = server => r.map_err(|e| TierError::Serve(TierError::io(e)))?,
        _ = drained => tracing::warn!("requests still open {DRAIN:?} after the stop; quitting anyway"),
    }
    tracing::info!("strata tier stopped");
    Ok(())
}
