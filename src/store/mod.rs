//! The object store every mode writes to and reads from: one small trait, two backends
//! (`s3` via aws-sdk-s3, `fs` for `file://`). A successful `put` means the object is durable
//! and replaced atomically; `delete` of a missing object succeeds.

mod fs;
mod s3;

pub use fs::FsStore;
pub use s3::S3Store;

use crate::config::{StoreConfig, StoreUrl};
use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What went wrong, so callers can branch (retry, skip, stop) and users can act.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    NoSuchBucket,
    Unauthorized,
    /// The store could not be reached (network, DNS, timeout): worth retrying.
    Unreachable,
    /// The store answered with an error (5xx, throttling, bad request).
    Service,
    InvalidInput,
    Io,
}

/// An object store failure naming the object (or bucket) and what to do about it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{location}: {message}")]
pub struct StoreError {
    pub kind: ErrorKind,
    /// `s3://bucket/key` or `file:///path`: the object or container concerned.
    pub location: String,
    pub message: String,
}

impl StoreError {
    pub fn new(kind: ErrorKind, location: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind,
            location: location.into(),
            message: message.into(),
        }
    }

    /// Failures a retry may fix: the store was down or overloaded.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Unreachable | ErrorKind::Service | ErrorKind::Io
        )
    }
}

/// An object as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Key relative to the store's root (bucket prefix or directory).
    pub key: String,
    pub size: u64,
    pub last_modified: Option<DateTime<Utc>>,
}

/// A write that was started and not finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incomplete {
    /// The key the object would have had.
    pub key: String,
    pub started: Option<DateTime<Utc>>,
    /// What the backend needs to discard it (an upload id, a temp file's path).
    pub handle: String,
}

/// An upload in parts, for objects too large to hold in memory at once. Nothing is visible
/// under the key until `finish` returns; an upload dropped without `finish` or `abort` (a
/// cancelled task) aborts itself, so no incomplete upload or temp file outlives its writer.
#[async_trait]
pub trait MultipartUpload: Send {
    /// Appends bytes; the backend cuts them into parts of its own size.
    async fn write(&mut self, data: Bytes) -> Result<(), StoreError>;
    async fn finish(self: Box<Self>) -> Result<(), StoreError>;
    /// Discards what was written; best effort.
    async fn abort(self: Box<Self>) -> Result<(), StoreError>;
}

/// The storage every mode uses. Keys are relative to the store's root and use `/`.
#[async_trait]
pub trait ObjectStore: Send + Sync + fmt::Debug {
    /// Stores a whole object durably, replacing any object under the key atomically.
    async fn put(&self, key: &str, data: Bytes) -> Result<(), StoreError>;
    async fn put_multipart(&self, key: &str) -> Result<Box<dyn MultipartUpload>, StoreError>;
    async fn get(&self, key: &str) -> Result<Bytes, StoreError>;
    /// Bytes `range.start..range.end` (end exclusive, clamped to the object's size).
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError>;
    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError>;
    /// Every object whose key starts with `prefix`, sorted by key.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError>;
    /// Removes an object; a missing object is not an error.
    async fn delete(&self, key: &str) -> Result<(), StoreError>;
    /// Proves the store is reachable and writable (creates the bucket when configured to).
    async fn check(&self) -> Result<(), StoreError>;
    /// Writes under `prefix` that were started and neither finished nor aborted: incomplete
    /// multipart uploads (S3), temp files (`file://`). Live writers' included.
    async fn incomplete(&self, prefix: &str) -> Result<Vec<Incomplete>, StoreError>;
    /// Discards one of them; already gone is fine.
    async fn abort_incomplete(&self, write: &Incomplete) -> Result<(), StoreError>;
    /// Removes what interrupted writes under `prefix` left behind that started more than
    /// `older_than` ago, so that a crash leaves nothing behind for good; returns how many.
    /// Younger writes may belong to a live writer (another process sharing the store).
    async fn remove_incomplete(
        &self,
        prefix: &str,
        older_than: std::time::Duration,
    ) -> Result<u64, StoreError> {
        let cutoff =
            Utc::now() - chrono::Duration::from_std(older_than).unwrap_or(chrono::Duration::MAX);
        let mut removed = 0;
        for w in self.incomplete(prefix).await? {
            if w.started.is_some_and(|t| t < cutoff) {
                self.abort_incomplete(&w).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }
    /// A local path where the object under `key` may be written in place before
    /// [`ObjectStore::put_staged`], so it never has to be held in memory; `None` when the store
    /// is not a local directory (build the object in memory and `put` it). The path is hidden
    /// from listings and its directory exists.
    fn staging_path(&self, _key: &str) -> Result<Option<PathBuf>, StoreError> {
        Ok(None)
    }
    /// Makes the local file at `path` the object under `key`, durably, and removes the file.
    /// Stores without staging upload it in parts, never holding it whole in memory.
    async fn put_staged(&self, key: &str, path: &Path) -> Result<(), StoreError> {
        use tokio::io::AsyncReadExt;
        let io = |e: std::io::Error| {
            StoreError::new(ErrorKind::Io, path.display().to_string(), e.to_string())
        };
        let mut file = tokio::fs::File::open(path).await.map_err(io)?;
        let mut up = self.put_multipart(key).await?;
        loop {
            let mut buf = vec![0u8; STAGED_READ];
            let mut filled = 0;
            while filled < buf.len() {
                let n = match file.read(&mut buf[filled..]).await {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = up.abort().await;
                        return Err(io(e));
                    }
                };
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled == 0 {
                break;
            }
            buf.truncate(filled);
            up.write(Bytes::from(buf)).await?;
        }
        up.finish().await?;
        tokio::fs::remove_file(path).await.map_err(io)
    }
    /// `s3://bucket/prefix/key` or `file:///root/key`, for messages.
    fn location(&self, key: &str) -> String;
}

/// Read size when a staged file is uploaded by a store without staging.
const STAGED_READ: usize = 8 << 20;

/// Builds the backend a store URL names.
pub async fn open(cfg: &StoreConfig) -> Result<Arc<dyn ObjectStore>, StoreError> {
    Ok(match &cfg.url {
        StoreUrl::File { root } => Arc::new(FsStore::new(root.clone())),
        StoreUrl::S3 { bucket, prefix } => {
            Arc::new(S3Store::connect(&cfg.s3, bucket.clone(), prefix.clone()).await?)
        }
    })
}

/// Refuses keys that could escape the root or that backends treat differently.
pub(crate) fn check_key(location: impl Fn() -> String, key: &str) -> Result<(), StoreError> {
    let bad = key.is_empty()
        || key.starts_with('/')
        || key.ends_with('/')
        || key
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
        || key.contains('\\');
    if bad {
        return Err(StoreError::new(
            ErrorKind::InvalidInput,
            location(),
            "is not a valid object key: use non-empty '/'-separated levels without '.' or '..'",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_escape_are_refused() {
        for bad in ["", "/abs", "a/../b", "a//b", "dir/", "./a", "a\\b"] {
            assert!(check_key(|| "x".into(), bad).is_err(), "{bad:?}");
        }
        for good in ["a", "a/b/c.txt", "t+0+00000000000000000001.jsonl"] {
            assert!(check_key(|| "x".into(), good).is_ok(), "{good:?}");
        }
    }
}
