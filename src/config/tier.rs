//! `[tier]` as validated: the tier service's listener, access rules, chunking and cache.

use super::{ByteSize, DumpDir};
use std::net::SocketAddr;
use std::path::PathBuf;

/// The tier service: the broker bridge's storage backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierConfig {
    pub listen: SocketAddr,
    pub prefix: DumpDir,
    pub chunk_size: ByteSize,
    pub compress_chunks: bool,
    /// `None`: chunks are cached in memory.
    pub cache_dir: Option<PathBuf>,
    pub cache_size: ByteSize,
    pub prefetch_chunks: u32,
    pub upload_concurrency: u32,
    /// The secret shared with the bridge; required to serve (checked when `strata tier` starts).
    pub secret_file: Option<PathBuf>,
    /// The broker's log dirs: copies by path read only inside them. Empty: copies by path are
    /// refused (the bridge uploads the bytes instead).
    pub log_dirs: Vec<PathBuf>,
    /// Private directory of the Unix socket (`tier.sock`); `None`: TCP only.
    pub socket_dir: Option<PathBuf>,
    /// `tier.handoff`: warm fetches over the Unix socket answered with cache files for the
    /// bridge to read (see `docs/tier.md`); off, every byte crosses the socket.
    pub handoff: bool,
    /// TLS on the TCP listener (required for a non-loopback `listen`).
    pub tls: Option<TierTls>,
    /// Fetch, fetch-index, delete and health requests served at once; more get 503.
    pub max_requests: u32,
}

/// PEM files of the tier listener's certificate chain and private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}
