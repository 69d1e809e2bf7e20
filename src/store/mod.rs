//! The object store every mode writes to and reads from: one small trait, two backends
//! (`s3` via aws-sdk-s3, `fs` for `file://`). A successful `put` means the object is durable
//! and replaced atomically; `delete` of a missing object succeeds.

mod aws_env;
mod chunks;
mod fs;
mod iam;
mod s3;

pub use crate::io::{write_in_pieces, WRITE_PIECE};
pub(crate) use aws_env::error_chain;
pub use aws_env::resolve_region;

pub use fs::FsStore;
pub use s3::S3Store;

use crate::config::{StoreConfig, StoreUrl};
use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

/// What went wrong, so callers can branch (retry, skip, stop) and users can act.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    NoSuchBucket,
    Unauthorized,
    /// The store could not be reached (network, DNS, timeout): worth retrying.
    Unreachable,
    /// The store answered with an error a retry may heal (5xx, throttling, request timeout).
    Service,
    /// The store refused the request itself (a 4xx such as `InvalidRequest`, a key too long):
    /// sending it again gets the same answer, so callers stop and tell the operator.
    Rejected,
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

/// How a finished upload becomes the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Replacing whatever is stored under the key.
    Replace,
    /// Only if nothing is stored under the key yet (S3 `If-None-Match: *`, a hard link on
    /// `file://`): the first writer of a key wins.
    CreateNew,
}

/// What a finished upload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    Stored,
    /// `Finish::CreateNew` found the key taken; this upload is discarded.
    Exists,
}

/// The one way objects are written while they are open: bytes go out as they come (parts of
/// `part_size` on S3, a temp file on `file://`), and nothing is visible under the key until
/// `finish` returns. An object that stays below one part goes up in a single PUT. An upload
/// dropped without `finish` or `abort` (a cancelled task) aborts itself, so no incomplete
/// upload or temp file outlives its writer.
#[async_trait]
pub trait MultipartUpload: Send {
    /// Appends bytes; the backend cuts them into parts of its own size.
    async fn write(&mut self, data: Bytes) -> Result<(), StoreError>;
    async fn finish(self: Box<Self>, mode: Finish) -> Result<Finished, StoreError>;
    /// Discards what was written; best effort.
    async fn abort(self: Box<Self>) -> Result<(), StoreError>;
    /// Names the object version this upload makes, as [`ObjectStore::tag_of`] will report it
    /// once stored (so a writer that lost a `CreateNew` race can find out whose object won).
    fn tag(&self) -> &str;
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
    /// One page of a listing: up to `max` objects whose key starts with `prefix` and sorts
    /// after `start_after` (all of them when `None`), sorted by key. What a reader of a long
    /// listing that needs only its first entries asks for (one request on S3).
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<Vec<ObjectMeta>, StoreError> {
        let mut all = self.list(prefix).await?;
        if let Some(after) = start_after {
            all.retain(|o| o.key.as_str() > after);
        }
        all.truncate(max);
        Ok(all)
    }
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
    /// The tag of the object stored under `key` (see [`MultipartUpload::tag`]); `None` when
    /// the object carries none (written by something else than a strata upload).
    async fn tag_of(&self, key: &str) -> Result<Option<String>, StoreError>;
    /// Bytes an upload sends at once (its part size): what a writer holds per open object.
    fn part_size(&self) -> usize;
    /// Whether the store refuses a [`Finish::CreateNew`] of a taken key (some S3-compatible
    /// stores ignore `If-None-Match`): two probe uploads of one key under `probe_key`, removed
    /// after.
    async fn refuses_taken_keys(&self, probe_key: &str) -> Result<bool, StoreError> {
        let mut first = self.put_multipart(probe_key).await?;
        first.write(Bytes::from_static(b"1")).await?;
        first.finish(Finish::CreateNew).await?;
        let mut second = self.put_multipart(probe_key).await?;
        second.write(Bytes::from_static(b"2")).await?;
        let again = second.finish(Finish::CreateNew).await;
        self.delete(probe_key).await?;
        Ok(again? == Finished::Exists)
    }
    /// `s3://bucket/prefix/key` or `file:///root/key`, for messages.
    fn location(&self, key: &str) -> String;
}

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
