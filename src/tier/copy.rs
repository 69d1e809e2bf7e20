//! The write path: stream the segment's `.log` from disk in chunk-size reads (optionally zstd
//! per chunk) into one object, the indexes into another, then write the manifest. Memory stays
//! within a few chunks whatever the segment size: a reader thread is at most one chunk ahead of
//! the upload, and uploads go out in parts.
//!
//! A retry of the same segment id overwrites; the old manifest is removed first and the new one
//! written last, so a manifest always describes complete objects.

use super::error::TierError;
use super::keys::SegmentKeys;
use super::manifest::{
    ChunkEntry, Compression, IndexEntry, IndexesLayout, LogLayout, Manifest, FORMAT_VERSION,
};
use super::protocol::{CopyRequest, IndexType, SegmentMetadata};
use super::stats;
use crate::layout::DumpDir;
use crate::store::{MultipartUpload, ObjectStore, StoreError};
use bytes::{Bytes, BytesMut};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};

/// zstd level for chunks: fast, and Kafka batches are often compressed already.
const ZSTD_LEVEL: i32 = 3;

/// Objects up to this size go up in one PUT; larger ones in a multipart upload.
const SINGLE_PUT_MAX: usize = 8 << 20;

pub struct Copier {
    store: Arc<dyn ObjectStore>,
    prefix: DumpDir,
    chunk_size: usize,
    compression: Compression,
    /// Segment copies running at once (`tier.upload_concurrency`), which bounds memory.
    permits: Semaphore,
}

/// One piece read from a file, ready to upload.
struct Piece {
    /// Bytes as stored (compressed when asked).
    stored: Bytes,
    entry: ChunkEntry,
}

impl Copier {
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: DumpDir,
        chunk_size: usize,
        compression: Compression,
        concurrency: usize,
    ) -> Self {
        Self {
            store,
            prefix,
            chunk_size: chunk_size.max(1),
            compression,
            permits: Semaphore::new(concurrency.max(1)),
        }
    }

    /// Stores the segment; on return the broker's files are no longer needed.
    pub async fn copy(&self, req: &CopyRequest) -> Result<SegmentKeys, TierError> {
        let epochs = req.check()?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| TierError::Internal("the copy limiter was closed".into()))?;
        let seg = &req.segment;
        let keys = SegmentKeys::new(&self.prefix, seg);
        // An earlier attempt's manifest would describe objects this copy is replacing.
        stats::timed("delete", self.store.delete(&keys.manifest)).await?;
        let (log, indexes) = tokio::try_join!(
            self.upload_log(seg, &req.files.log, &keys.log),
            self.upload_indexes(seg, req, Bytes::from(epochs), &keys.indexes),
        )?;
        if log.size != seg.segment_size_bytes as u64 {
            tracing::warn!(segment = %seg.describe(), file_size = log.size, broker_size = seg.segment_size_bytes, "the .log file's size differs from the broker's segment size; storing the file as read");
        }
        let copied = log.size + indexes.size;
        let manifest = Manifest {
            format_version: FORMAT_VERSION,
            segment: seg.clone(),
            log,
            indexes,
        };
        stats::timed(
            "put",
            self.store
                .put(&keys.manifest, Bytes::from(manifest.to_json())),
        )
        .await?;
        stats::copied(copied);
        Ok(keys)
    }

    async fn upload_log(
        &self,
        seg: &SegmentMetadata,
        path: &Path,
        key: &str,
    ) -> Result<LogLayout, TierError> {
        let size = file_size(seg, path).await?;
        let mut up = SpillUpload::new(self.store.as_ref(), key, size);
        let mut chunks = Vec::new();
        let result = async {
            let mut rx = read_pieces(
                seg,
                path.to_path_buf(),
                self.chunk_size,
                self.compression == Compression::Zstd,
            );
            while let Some(piece) = rx.recv().await {
                let piece = piece?;
                chunks.push(piece.entry);
                up.write(piece.stored).await?;
            }
            Ok::<_, TierError>(())
        }
        .await;
        if let Err(e) = result {
            up.abort().await;
            return Err(e);
        }
        up.finish().await?;
        Ok(LogLayout {
            size: chunks.iter().map(|c| c.size).sum(),
            chunk_size: self.chunk_size as u64,
            compression: self.compression,
            chunks,
        })
    }

    /// All indexes back to back: offset, time, producer snapshot, transaction (when the
    /// segment has one), leader epochs.
    async fn upload_indexes(
        &self,
        seg: &SegmentMetadata,
        req: &CopyRequest,
        epochs: Bytes,
        key: &str,
    ) -> Result<IndexesLayout, TierError> {
        let f = &req.files;
        let mut files: Vec<(IndexType, &PathBuf)> = vec![
            (IndexType::Offset, &f.offset_index),
            (IndexType::Timestamp, &f.time_index),
            (IndexType::ProducerSnapshot, &f.producer_snapshot),
        ];
        if let Some(t) = &f.transaction_index {
            files.push((IndexType::Transaction, t));
        }
        let mut expected = epochs.len() as u64;
        for (_, path) in &files {
            expected += file_size(seg, path).await?;
        }
        let mut up = SpillUpload::new(self.store.as_ref(), key, expected);
        let mut entries = Vec::new();
        let mut position = 0u64;
        let result = async {
            for (index, path) in files {
                if index == IndexType::Offset {
                    let data = offset_index(seg, path, &req.files.log).await?;
                    put_whole(&mut up, &mut entries, &mut position, index, data).await?;
                    continue;
                }
                let mut rx = read_pieces(seg, path.clone(), self.chunk_size, false);
                let (mut size, mut crc) = (0u64, 0u32);
                while let Some(piece) = rx.recv().await {
                    let piece = piece?;
                    crc = crc32c::crc32c_append(crc, &piece.stored);
                    size += piece.entry.size;
                    up.write(piece.stored).await?;
                }
                entries.push(IndexEntry {
                    index,
                    position,
                    size,
                    crc32c: crc,
                });
                position += size;
            }
            put_whole(
                &mut up,
                &mut entries,
                &mut position,
                IndexType::LeaderEpoch,
                epochs,
            )
            .await?;
            Ok::<_, TierError>(())
        }
        .await;
        if let Err(e) = result {
            up.abort().await;
            return Err(e);
        }
        up.finish().await?;
        Ok(IndexesLayout {
            size: position,
            entries,
        })
    }
}

/// Appends an index held whole in memory to the indexes object, with its entry.
async fn put_whole(
    up: &mut SpillUpload<'_>,
    entries: &mut Vec<IndexEntry>,
    position: &mut u64,
    index: IndexType,
    data: Bytes,
) -> Result<(), TierError> {
    entries.push(IndexEntry {
        index,
        position: *position,
        size: data.len() as u64,
        crc32c: crc32c::crc32c(&data),
    });
    *position += data.len() as u64;
    if !data.is_empty() {
        up.write(data).await?;
    }
    Ok(())
}

/// The offset index to store: the broker's, keyed by batch start offsets (see
/// [`super::offset_index`]), or as it is when it does not fit the `.log`. Read whole: Kafka caps
/// an index at `segment.index.bytes` (10 MiB by default).
async fn offset_index(seg: &SegmentMetadata, path: &Path, log: &Path) -> Result<Bytes, TierError> {
    let segment = seg.describe();
    let base_offset = seg.start_offset;
    let (path, log) = (path.to_path_buf(), log.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let fail = |path: &Path, e: std::io::Error| TierError::ReadFile {
            segment: segment.clone(),
            path: path.to_path_buf(),
            source: TierError::io(e),
        };
        let index = std::fs::read(&path).map_err(|e| fail(&path, e))?;
        let file = std::fs::File::open(&log).map_err(|e| fail(&log, e))?;
        let size = file.metadata().map_err(|e| fail(&log, e))?.len();
        let read_at = |at: u64, buf: &mut [u8]| std::os::unix::fs::FileExt::read_at(&file, buf, at);
        match super::offset_index::key_by_batch_start(&index, size, base_offset, read_at) {
            Ok(keyed) => Ok(Bytes::from(keyed)),
            Err(why) => {
                tracing::warn!(%segment, index = %path.display(), %why, "storing the offset index unchanged: remote reads of this segment will read one batch more per fetch");
                Ok(Bytes::from(index))
            }
        }
    })
    .await
    .map_err(|e| TierError::Internal(format!("offset index task: {e}")))?
}

/// Reads a file in `piece_size` pieces on a blocking thread, checksumming (and compressing)
/// each; at most one piece waits in the channel, so the reader stays one piece ahead.
fn read_pieces(
    seg: &SegmentMetadata,
    path: PathBuf,
    piece_size: usize,
    compress: bool,
) -> mpsc::Receiver<Result<Piece, TierError>> {
    let (tx, rx) = mpsc::channel(1);
    let segment = seg.describe();
    tokio::task::spawn_blocking(move || {
        let fail = |e: std::io::Error| TierError::ReadFile {
            segment: segment.clone(),
            path: path.clone(),
            source: TierError::io(e),
        };
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                let _ = tx.blocking_send(Err(fail(e)));
                return;
            }
        };
        for index in 0u64.. {
            let mut buf = vec![0u8; piece_size];
            let n = match read_full(&mut file, &mut buf) {
                Ok(n) => n,
                Err(e) => {
                    let _ = tx.blocking_send(Err(fail(e)));
                    return;
                }
            };
            if n == 0 {
                return;
            }
            buf.truncate(n);
            let crc = crc32c::crc32c(&buf);
            let (stored, stored_crc) = if compress {
                match zstd::bulk::compress(&buf, ZSTD_LEVEL) {
                    Ok(z) => {
                        let c = crc32c::crc32c(&z);
                        (z, c)
                    }
                    Err(e) => {
                        let _ = tx.blocking_send(Err(TierError::Compress {
                            segment: segment.clone(),
                            chunk: index,
                            message: e.to_string(),
                        }));
                        return;
                    }
                }
            } else {
                (buf, crc)
            };
            let piece = Piece {
                entry: ChunkEntry {
                    size: n as u64,
                    stored_size: stored.len() as u64,
                    crc32c: crc,
                    stored_crc32c: stored_crc,
                },
                stored: Bytes::from(stored),
            };
            // A closed channel means the upload failed: stop reading.
            if tx.blocking_send(Ok(piece)).is_err() || n < piece_size {
                return;
            }
        }
    });
    rx
}

async fn file_size(seg: &SegmentMetadata, path: &Path) -> Result<u64, TierError> {
    tokio::fs::metadata(path)
        .await
        .map(|m| m.len())
        .map_err(|e| TierError::ReadFile {
            segment: seg.describe(),
            path: path.to_path_buf(),
            source: TierError::io(e),
        })
}

/// Fills `buf` unless the file ends first; returns the bytes read.
fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// An upload that is one PUT for small objects and a multipart upload for large ones, decided
/// by the expected size so that large objects are never gathered in memory (and a small one
/// that turns out larger switches on the way).
struct SpillUpload<'a> {
    store: &'a dyn ObjectStore,
    key: &'a str,
    /// Gathered bytes of a small object.
    pending: BytesMut,
    multipart: Option<Box<dyn MultipartUpload>>,
    /// Expected to exceed [`SINGLE_PUT_MAX`]: go multipart at the first write.
    large: bool,
}

impl<'a> SpillUpload<'a> {
    fn new(store: &'a dyn ObjectStore, key: &'a str, expected: u64) -> Self {
        let large = expected > SINGLE_PUT_MAX as u64;
        Self {
            store,
            key,
            pending: BytesMut::with_capacity(if large { 0 } else { expected as usize }),
            multipart: None,
            large,
        }
    }

    async fn write(&mut self, data: Bytes) -> Result<(), StoreError> {
        if self.multipart.is_none()
            && (self.large || self.pending.len() + data.len() > SINGLE_PUT_MAX)
        {
            let mut mp = stats::timed("start_upload", self.store.put_multipart(self.key)).await?;
            if !self.pending.is_empty() {
                let gathered = std::mem::take(&mut self.pending).freeze();
                stats::timed("upload_part", mp.write(gathered)).await?;
            }
            self.multipart = Some(mp);
        }
        match self.multipart.as_mut() {
            Some(mp) => stats::timed("upload_part", mp.write(data)).await,
            None => {
                self.pending.extend_from_slice(&data);
                Ok(())
            }
        }
    }

    async fn finish(self) -> Result<(), StoreError> {
        match self.multipart {
            Some(mp) => stats::timed("complete_upload", mp.finish()).await,
            None => stats::timed("put", self.store.put(self.key, self.pending.freeze())).await,
        }
    }

    /// Best effort: the multipart upload is dropped; its parts would otherwise linger.
    async fn abort(self) {
        if let Some(mp) = self.multipart {
            if let Err(e) = mp.abort().await {
                tracing::warn!(error = %e, "abort of a multipart upload failed");
            }
        }
    }
}
