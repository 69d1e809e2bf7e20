//! Request bodies read under bounds (size, and time between arrivals), and the body of
//! `/v1/copy-upload` turned into a copy [`Source`]: the segment's files in their order, then
//! the tag that proves they came from the authenticated bridge unchanged.

use super::auth::UploadTag;
use super::copy::{Part, Piece, Source};
use super::error::TierError;
use super::protocol::UploadSizes;
use axum::body::{Body, BodyDataStream, Bytes};
use bytes::BytesMut;
use futures::StreamExt;
use std::time::Duration;

/// Bytes of the upload tag that ends the body.
pub const TAG_BYTES: usize = 32;

/// A request body read piece by piece; a gap longer than `idle` between pieces fails the read.
pub struct BodyReader {
    stream: BodyDataStream,
    buf: Bytes,
    idle: Duration,
    done: bool,
}

impl BodyReader {
    pub fn new(body: Body, idle: Duration) -> Self {
        Self {
            stream: body.into_data_stream(),
            buf: Bytes::new(),
            idle,
            done: false,
        }
    }

    /// Buffers the next frame; false at the end of the body.
    async fn fill(&mut self) -> Result<bool, TierError> {
        while self.buf.is_empty() {
            if self.done {
                return Ok(false);
            }
            match tokio::time::timeout(self.idle, self.stream.next()).await {
                Err(_) => return Err(TierError::SlowBody(self.idle)),
                Ok(None) => self.done = true,
                Ok(Some(Err(e))) => {
                    return Err(TierError::Body(format!("reading the request failed: {e}")))
                }
                Ok(Some(Ok(b))) => self.buf = b,
            }
        }
        Ok(true)
    }

    /// Exactly `n` bytes; a body that ends first is an error naming `what`.
    pub async fn exact(&mut self, n: usize, what: &str) -> Result<Bytes, TierError> {
        if !self.fill().await? && n > 0 {
            return Err(TierError::Body(format!("the body ended before the {what}")));
        }
        if self.buf.len() >= n {
            return Ok(self.buf.split_to(n));
        }
        let mut out = BytesMut::with_capacity(n);
        while out.len() < n {
            if !self.fill().await? {
                return Err(TierError::Body(format!(
                    "the body ended {} bytes into the {what} of {n}",
                    out.len()
                )));
            }
            let take = (n - out.len()).min(self.buf.len());
            out.extend_from_slice(&self.buf.split_to(take));
        }
        Ok(out.freeze())
    }

    /// The next bytes, at most `max`; `None` at the end of the body.
    pub async fn piece(&mut self, max: usize) -> Result<Option<Bytes>, TierError> {
        if !self.fill().await? {
            return Ok(None);
        }
        let n = max.min(self.buf.len());
        Ok(Some(self.buf.split_to(n)))
    }

    /// The whole (rest of the) body, refused when longer than `limit`.
    pub async fn all(&mut self, limit: usize) -> Result<Bytes, TierError> {
        let mut out = BytesMut::new();
        while let Some(b) = self.piece(usize::MAX).await? {
            if out.len() + b.len() > limit {
                return Err(TierError::TooLarge(format!(
                    "more than {limit} bytes; requests other than copy uploads are small JSON"
                )));
            }
            out.extend_from_slice(&b);
        }
        Ok(out.freeze())
    }
}

/// The files of an upload as a copy source: their bytes in [`Part`] order with exactly the
/// announced sizes, then `End` once the tag checked and nothing follows it.
pub fn upload_source(
    mut body: BodyReader,
    sizes: UploadSizes,
    mut tag: UploadTag,
    segment: String,
    piece: usize,
) -> Source {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::spawn(async move {
        let bad = |message: String| TierError::BadUpload {
            segment: segment.clone(),
            message,
        };
        let result = async {
            for (part, size) in Part::sequence(&sizes) {
                let mut left = size;
                while left > 0 {
                    let want = piece.min(usize::try_from(left).unwrap_or(usize::MAX));
                    let Some(data) = body.piece(want).await? else {
                        return Err(bad(format!("the body ended {left} bytes before the end of the {}", part.name())));
                    };
                    tag.update(&data);
                    left -= data.len() as u64;
                    if tx.send(Ok(Piece::Data(part, data))).await.is_err() {
                        // The copy stopped (and reported why).
                        return Ok(false);
                    }
                }
            }
            let got = body.exact(TAG_BYTES, "upload tag").await?;
            if !tag.verify(&got) {
                return Err(bad("the upload tag does not match the bytes received: they were altered or cut on the way; nothing was stored".into()));
            }
            if body.piece(1).await?.is_some() {
                return Err(bad(
                    "bytes follow the upload tag; the body is longer than its sizes say".into(),
                ));
            }
            Ok(true)
        }
        .await;
        let last = match result {
            Ok(true) => Ok(Piece::End),
            Ok(false) => return,
            Err(e) => Err(e),
        };
        let _ = tx.send(last).await;
    });
    rx
}
