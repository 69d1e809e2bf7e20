//! Tier mode: the storage service behind the broker's `RemoteStorageManager` bridge.
//!
//! Contract (HTTP, see `bridge/kafka-rsm/README.md`): every connection authenticates both ends
//! with the shared secret; copy stores a rolled segment (read from the broker's log dirs, or
//! uploaded in the request) as a chunked `.log` object, an indexes object and a manifest written
//! last, idempotently; fetch serves verified original bytes of any range through a bounded chunk
//! cache; delete is idempotent. `docs/tier.md` states the threat model.

mod api;
pub mod auth;
mod cache;
mod chunks;
mod copy;
mod error;
mod fetch;
mod files;
mod keys;
mod manifest;
mod offset_index;
mod protocol;
mod socket;
pub(crate) mod stats;
mod upload;

pub use api::HANDOFF;
pub use cache::BLOCK as HANDOFF_BLOCK;
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
    CopyRequest, CopyResponse, DeleteRequest, FetchIndexRequest, FetchRequest, FieldError, Handoff,
    HandoffPiece, IndexType, SegmentFiles, SegmentId, SegmentMetadata, TopicId, TopicName,
    UploadHeader, UploadSizes,
};
pub use socket::SOCKET_NAME;

use crate::config::Config;
use crate::store::ObjectStore;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
    secret: auth::SharedSecret,
    /// The Unix socket named in every hello (`None`: TCP only).
    socket: Option<PathBuf>,
    log_dirs: files::LogDirs,
    chunk_size: usize,
    /// `tier.max_requests`: fetches, index fetches, deletes and health checks at once.
    requests: Arc<tokio::sync::Semaphore>,
    max_requests: u32,
    /// `tier.handoff`: fetches over the Unix socket may be answered with cache files.
    handoff: bool,
}

impl Tier {
    /// Builds the service over a store (the chunk cache directory is emptied).
    pub async fn new(
        cfg: &Config,
        store: Arc<dyn ObjectStore>,
        secret: auth::SharedSecret,
        socket: Option<PathBuf>,
    ) -> Result<Self, TierError> {
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
            secret,
            socket,
            log_dirs: files::LogDirs::open(&t.log_dirs)?,
            chunk_size,
            requests: Arc::new(tokio::sync::Semaphore::new(t.max_requests as usize)),
            max_requests: t.max_requests,
            handoff: t.handoff,
        })
    }

    /// One of the `tier.max_requests` slots, waiting at most `wait`; else "busy" (counted and
    /// logged by the caller's failure).
    async fn request_slot(
        &self,
        op: &'static str,
        wait: Duration,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, TierError> {
        match tokio::time::timeout(wait, self.requests.clone().acquire_owned()).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => Err(TierError::Internal("the request limiter was closed".into())),
            Err(_) => {
                stats::rejected(op, "busy");
                Err(TierError::Busy(format!(
                    "all {} request slots (tier.max_requests) stayed taken for {wait:?}",
                    self.max_requests
                )))
            }
        }
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

    /// Removes what copies interrupted by a crash left behind: incomplete uploads (and
    /// `file://` temp files) under the prefix that started long before any copy could still
    /// run, so live copies of other brokers' strata tier sharing the bucket are not touched.
    async fn clean_up(&self) {
        let older_than = 4 * copy::COPY_DEADLINE;
        let prefix = format!("{}/", self.prefix.as_str());
        match self.store.remove_incomplete(&prefix, older_than).await {
            Ok(0) => {}
            Ok(n) => {
                stats::cleaned(n);
                tracing::info!(removed = n, prefix = %self.store.location(&prefix), "removed incomplete uploads a crash left behind");
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not look for incomplete uploads a crash left behind; an S3 lifecycle rule for incomplete multipart uploads cleans them up")
            }
        }
    }
}

/// Connections per listener whose caller has not yet authenticated (TLS handshake, hello and
/// first signed request not done). The bridge opens about one per broker thread that calls
/// strata tier and authenticates each within a round trip or two; beyond this, a new
/// connection closes the oldest waiting one.
pub const UNAUTHENTICATED_CONNECTIONS: usize = 32;
/// Time from a connection's accept to its first request whose MAC checked; a connection still
/// unauthenticated then is closed.
pub const UNAUTHENTICATED_DEADLINE: Duration = Duration::from_secs(5);

/// The bounds of both listeners (see [`crate::listen`]): 256 authenticated connections each,
/// and callers without the secret kept apart under a cap and a deadline of their own.
fn limits() -> crate::listen::Limits {
    crate::listen::Limits {
        unauthenticated: Some(crate::listen::Unauthenticated {
            max_connections: UNAUTHENTICATED_CONNECTIONS,
            deadline: UNAUTHENTICATED_DEADLINE,
        }),
        ..crate::listen::Limits::default()
    }
}

/// TLS for the TCP listener from PEM files; the key file must be private like the secret.
fn tls_acceptor(tls: &crate::config::TierTls) -> Result<tokio_rustls::TlsAcceptor, TierError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use std::os::unix::fs::MetadataExt;
    let fail = |path: &Path, e: String| TierError::Tls(format!("{}: {e}", path.display()));
    let meta = std::fs::metadata(&tls.key_file).map_err(|e| fail(&tls.key_file, e.to_string()))?;
    auth::check_private(meta.mode(), meta.uid(), rustix::process::geteuid().as_raw())
        .map_err(|e| fail(&tls.key_file, e))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert_file)
        .map_err(|e| fail(&tls.cert_file, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| fail(&tls.cert_file, e.to_string()))?;
    if certs.is_empty() {
        return Err(fail(&tls.cert_file, "holds no PEM certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key_file).map_err(|e| {
        fail(
            &tls.key_file,
            format!("holds no usable PEM private key: {e}"),
        )
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TierError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TierError::Tls(format!("the certificate and key do not fit: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves the bridge API on `cfg.tier.listen` (and the Unix socket in `tier.socket_dir`) until
/// `stop` is set. Refuses to start without a usable secret, log dirs, TLS files or socket dir.
pub async fn serve(cfg: &Config, stop: Arc<AtomicBool>) -> Result<(), TierError> {
    let t = &cfg.tier;
    let part = crate::telemetry::readiness::Part::register("tier");
    let secret = auth::SharedSecret::load(t.secret_file.as_deref().ok_or(TierError::NoSecret)?)?;
    let tls = t.tls.as_ref().map(tls_acceptor).transpose()?;
    let store = crate::store::open(&cfg.store)
        .await
        .map_err(TierError::StoreCheck)?;
    store.check().await.map_err(TierError::StoreCheck)?;
    let addr = t.listen;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| TierError::Listen {
            addr,
            source: TierError::io(e),
        })?;
    let mut unix = t
        .socket_dir
        .as_deref()
        .map(socket::bind_private)
        .transpose()?;
    let socket_path = unix.as_ref().map(|u| u.path.clone());
    let tier = Arc::new(Tier::new(cfg, store.clone(), secret, socket_path.clone()).await?);
    {
        let tier = tier.clone();
        tokio::spawn(async move { tier.clean_up().await });
    }
    tracing::info!(
        %addr,
        tls = tls.is_some(),
        socket = %socket_path.as_ref().map_or("none".to_string(), |p| p.display().to_string()),
        store = %store.location(t.prefix.as_str()),
        chunk_size = %t.chunk_size,
        compression = if t.compress_chunks { "zstd" } else { "none" },
        cache = %t.cache_dir.as_ref().map_or("memory".to_string(), |d| d.display().to_string()),
        cache_size = %t.cache_size,
        copies_by_path = !t.log_dirs.is_empty(),
        "strata tier serving the broker bridge"
    );
    // The store check passed and both listeners are bound.
    part.running();
    let stopped = || {
        let stop = stop.clone();
        async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let router = api::router(tier);
    let per_connection = |r: &axum::Router, transport| {
        let r = r.clone();
        move |admission| Tier::connection(&r, transport, admission)
    };
    // Refusals of requests are logged throttled; what is held back is logged from here.
    let flush = tokio::spawn(async {
        let mut tick = tokio::time::interval(crate::listen::WARN_INTERVAL);
        loop {
            tick.tick().await;
            api::flush_refusal_warnings();
        }
    });
    let tcp = crate::listen::serve(
        "tier",
        listener,
        tls,
        limits(),
        per_connection(&router, api::Transport::Tcp),
        stopped(),
    );
    let unix_listener = unix.as_mut().and_then(|u| u.take_listener());
    let over_unix = async {
        if let Some(l) = unix_listener {
            crate::listen::serve(
                "tier-unix",
                l,
                None,
                limits(),
                per_connection(&router, api::Transport::Unix),
                stopped(),
            )
            .await;
        }
    };
    tokio::join!(tcp, over_unix);
    flush.abort();
    api::flush_refusal_warnings();
    drop(unix);
    part.set(crate::telemetry::readiness::State::Finished);
    tracing::info!("strata tier stopped");
    Ok(())
}
