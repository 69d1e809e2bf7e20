//! What can go wrong in tier mode, with the HTTP status the bridge turns into a Kafka exception
//! (404 → `RemoteResourceNotFoundException`, anything else → `RemoteStorageException`).

use super::protocol::{FieldError, IndexType};
use crate::store::{ErrorKind, StoreError};
use axum::http::StatusCode;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Cloneable (io errors behind `Arc`) because one chunk load may answer several readers.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TierError {
    #[error("cannot listen on {addr} (tier.listen): {source}; stop the process using it or pick another port and point the broker's rsm.config.strata.endpoint at it")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("the object store is not usable: {0}")]
    StoreCheck(#[source] StoreError),
    #[error("serving the bridge API failed: {0}")]
    Serve(#[source] Arc<std::io::Error>),
    #[error("chunk cache directory {path} (tier.cache_dir): {source}; make it writable by strata or unset tier.cache_dir to cache in memory")]
    CacheDir {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("chunk cache directory {path} (tier.cache_dir): {message}")]
    CacheDirUnsafe { path: PathBuf, message: String },
    #[error("bad request: {0}")]
    BadRequest(#[from] FieldError),
    #[error("bad request: the body is not a valid {what} request: {message}")]
    BadJson { what: &'static str, message: String },
    #[error("segment {segment} is not in remote storage: no manifest at {location}")]
    SegmentNotFound { segment: String, location: String },
    #[error("segment {segment} has no {index} index")]
    IndexNotFound { segment: String, index: IndexType },
    #[error("cannot read {path} of segment {segment}: {source}; strata tier must run on the broker's host as a user that can read its log.dirs")]
    ReadFile {
        segment: String,
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("manifest {location} is unusable: {message}; delete the topic's remote data or restore the object")]
    BadManifest { location: String, message: String },
    /// Stored bytes that fail their checksum: never served.
    #[error("{part} of {location} is corrupt ({detail}); refusing to serve it: the object was damaged after upload, restore it or delete the topic's remote data")]
    Corrupt {
        location: String,
        /// `chunk 3` or `OFFSET index`.
        part: String,
        detail: String,
    },
    #[error("compressing chunk {chunk} of segment {segment} failed: {message}")]
    Compress {
        segment: String,
        chunk: u64,
        message: String,
    },
    #[error("tier.log_dirs {path}: {source}; list the broker's log.dirs as existing directories strata tier can read")]
    LogDir {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("copies by path are off: tier.log_dirs is empty; list the broker's log.dirs there, or set the bridge's rsm.config.strata.copy.mode=upload")]
    CopyByPathOff,
    #[error("tier.secret_file is not set: strata tier serves only a bridge that shares its secret; create one with `strata tier-secret FILE` and name it in tier.secret_file and in the broker's rsm.config.strata.secret.file")]
    NoSecret,
    #[error(transparent)]
    Secret(#[from] super::auth::SecretError),
    #[error("Unix socket {path} (tier.socket_dir): {message}")]
    Socket { path: PathBuf, message: String },
    #[error("TLS (tier.tls_cert_file, tier.tls_key_file): {0}")]
    Tls(String),
    /// The caller did not authenticate; the connection is closed after the answer.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    #[error("unsupported content type {found:?}: {op} takes {expected}")]
    ContentType {
        op: &'static str,
        found: String,
        expected: &'static str,
    },
    #[error("bad request body: {0}")]
    Body(String),
    #[error("request body too large: {0}")]
    TooLarge(String),
    #[error(
        "the request body did not arrive within {0:?}; the client is too slow or stopped sending"
    )]
    SlowBody(std::time::Duration),
    #[error("busy: {0}; the broker retries later")]
    Busy(String),
    #[error("upload of segment {segment} refused: {message}")]
    BadUpload { segment: String, message: String },
    #[error("copy of segment {segment} took longer than {limit:?}; its uploads were aborted")]
    CopyTimeout {
        segment: String,
        limit: std::time::Duration,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

impl TierError {
    /// The status the bridge sees.
    pub fn status(&self) -> StatusCode {
        match self {
            TierError::BadRequest(_)
            | TierError::BadJson { .. }
            | TierError::BadUpload { .. }
            | TierError::Body(_)
            | TierError::CopyByPathOff => StatusCode::BAD_REQUEST,
            TierError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            TierError::ContentType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            TierError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            TierError::SlowBody(_) => StatusCode::REQUEST_TIMEOUT,
            TierError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            TierError::SegmentNotFound { .. } | TierError::IndexNotFound { .. } => {
                StatusCode::NOT_FOUND
            }
            TierError::Store(e) => match e.kind {
                // A manifest was read, then its data vanished: the segment is being deleted.
                ErrorKind::NotFound => StatusCode::NOT_FOUND,
                ErrorKind::Unreachable | ErrorKind::Service => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub(crate) fn io(source: std::io::Error) -> Arc<std::io::Error> {
        Arc::new(source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_bridge_contract() {
        let field = FieldError {
            field: "start_position",
            message: "-1 is negative".into(),
        };
        let bad = TierError::from(field);
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        assert!(bad.to_string().contains("start_position"));
        let missing = TierError::IndexNotFound {
            segment: "t-0@0".into(),
            index: IndexType::Transaction,
        };
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        let store = |kind| TierError::Store(StoreError::new(kind, "s3://b/k", "x")).status();
        assert_eq!(
            store(ErrorKind::Unreachable),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(store(ErrorKind::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(
            store(ErrorKind::Unauthorized),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        let corrupt = TierError::Corrupt {
            location: "s3://b/k.log".into(),
            part: "chunk 2".into(),
            detail: "crc32c 1 != 2".into(),
        };
        assert_eq!(corrupt.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(corrupt.to_string().contains("chunk 2 of s3://b/k.log"));
    }
}
