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
mod offset_index;
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
pub use offset_index::key_by_batch_start;
pub use protocol::{
    CopyRequest, CopyResponse, DeleteRequest, FetchIndexRequest, FetchRequest, FieldError,
    IndexType, SegmentFiles, SegmentId, SegmentMetadata, TopicId, TopicName,
};

use crate::config::Config;
use crate::store::ObjectStore;
use axum::serve::ListenerExt;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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

/// Where strata tier also serves the API: a Unix domain socket in the temporary directory named
/// after the TCP address, so two services on one host never share one, and a restarted service
/// finds its own again. The bridge learns the path from the [`api::SOCKET_HEADER`] of any
/// answer over TCP and moves its next connections there (when the endpoint is on this host):
/// bulk reads over a Unix socket cost a third of loopback TCP's (measured 5.4 GB/s against
/// 1.8 GB/s on the 2-core dev host), and the broker reads every remote byte through it.
pub fn unix_socket_path(addr: SocketAddr) -> PathBuf {
    let ip = addr.ip().to_string().replace(':', "_");
    std::env::temp_dir().join(format!("strata-tier-{ip}-{}.sock", addr.port()))
}

/// Bytes a Unix socket may queue towards the bridge: a whole 1 MiB fetch window and then some.
/// A Unix stream socket holds only what its sender's buffer allows (208 KiB by default), and a
/// window larger than that is handed over in turns, each waiting for the broker's reader thread
/// to be scheduled (measured: 1 MiB windows read slower than over TCP, whose buffers grow by
/// themselves). The kernel caps this at `net.core.wmem_max`.
const UNIX_SEND_BUFFER: libc::c_int = 4 << 20;

fn widen_send_buffer(s: &tokio::net::UnixStream) {
    use std::os::fd::AsRawFd;
    let size = UNIX_SEND_BUFFER;
    // SAFETY: setsockopt on a socket this process owns, with a pointer to a live c_int and its
    // size; it changes only that socket's buffer limit.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "cannot widen a Unix socket's send buffer");
    }
}

/// Binds the Unix socket, replacing a socket file a previous process at this address left
/// behind. `None` (with a warning) when it cannot: the API stays on TCP only.
fn bind_unix(path: &Path) -> Option<tokio::net::UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            tracing::warn!(path = %path.display(), "not listening on a Unix socket: the path exists and is not a socket");
            return None;
        }
        let _ = std::fs::remove_file(path);
    }
    match tokio::net::UnixListener::bind(path) {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "not listening on a Unix socket; the bridge keeps using TCP");
            None
        }
    }
}

/// Serves the bridge API on `cfg.tier.listen` (and [`unix_socket_path`]) until `stop` is set.
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
    let socket = unix_socket_path(addr);
    let unix = bind_unix(&socket);
    let advertised = unix.as_ref().map(|_| socket.as_path());
    tracing::info!(
        %addr,
        socket = %advertised.map_or("none".to_string(), |p| p.display().to_string()),
        store = %store.location(cfg.tier.prefix.as_str()),
        chunk_size = %cfg.tier.chunk_size,
        compression = if cfg.tier.compress_chunks { "zstd" } else { "none" },
        cache = %cfg.tier.cache_dir.as_ref().map_or("memory".to_string(), |d| d.display().to_string()),
        cache_size = %cfg.tier.cache_size,
        "strata tier serving the broker bridge"
    );
    let stopped = || {
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
    let router = api::router(tier, advertised);
    let tcp = axum::serve(listener, router.clone()).with_graceful_shutdown(stopped());
    let unix = async {
        match unix {
            Some(l) => {
                let l = l.tap_io(|s| widen_send_buffer(s));
                axum::serve(l, router)
                    .with_graceful_shutdown(stopped())
                    .await
            }
            None => Ok(()),
        }
    };
    let servers = async { tokio::try_join!(tcp.into_future(), unix) };
    let drained = async {
        stopped().await;
        tokio::time::sleep(DRAIN).await;
    };
    let result = tokio::select! {
        r = servers => r.map(|_| ()).map_err(|e| TierError::Serve(TierError::io(e))),
        _ = drained => {
            tracing::warn!("requests still open {DRAIN:?} after the stop; quitting anyway");
            Ok(())
        }
    };
    if advertised.is_some() {
        let _ = std::fs::remove_file(&socket);
    }
    result?;
    tracing::info!("strata tier stopped");
    Ok(())
}
