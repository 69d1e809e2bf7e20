//! The write path: a segment's parts arrive in one order, from the broker's files (copy by
//! path) or from the request body (copy upload), and become a chunked (optionally zstd) `.log`
//! object, an indexes object and, last, the manifest. Memory stays within a few chunks (plus
//! the offset index) whatever the segment size.
//!
//! A retry of the same segment id overwrites; the old manifest is removed first and the new one
//! written last, so a manifest always describes complete objects. A copy that fails, times out
//! or is cancelled (the bridge hung up) aborts its uploads: nothing of it stays behind.

use super::error::TierError;
use super::files::SegmentSources;
use super::keys::SegmentKeys;
use super::manifest::{
    ChunkEntry, Compression, IndexEntry, IndexesLayout, LogLayout, Manifest, FORMAT_VERSION,
};
use super::protocol::{IndexType, SegmentMetadata, UploadSizes};
use super::stats;
use crate::layout::DumpDir;
use crate::store::{Finish, MultipartUpload, ObjectStore, StoreError};
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};

/// zstd level for chunks: fast, and Kafka batches are often compressed already.
const ZSTD_LEVEL: i32 = 3;

/// How long a copy may wait for one of the `tier.upload_concurrency` slots before it is
/// answered "busy" (the broker retries it later).
const COPY_WAIT: Duration = Duration::from_secs(60);

/// The longest a copy may take, from its slot to its manifest. Incomplete uploads older than a
/// few times this are a crash's leftovers (see `Tier::clean_up`).
pub const COPY_DEADLINE: Duration = Duration::from_secs(15 * 60);

/// Pieces an index file is read in.
const INDEX_PIECE: usize = 1 << 20;

/// A segment's parts in the order a copy receives them: the offset index comes first so that
/// its entries can be re-keyed from the `.log` bytes as they stream by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    OffsetIndex,
    TimeIndex,
    TransactionIndex,
    ProducerSnapshot,
    Log,
}

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::OffsetIndex => "offset index",
            Part::TimeIndex => "time index",
            Part::TransactionIndex => "transaction index",
            Part::ProducerSnapshot => "producer snapshot",
            Part::Log => ".log",
        }
    }

    /// The parts a segment with these sizes has, in order, with their sizes.
    pub fn sequence(sizes: &UploadSizes) -> Vec<(Part, u64)> {
        let mut v = vec![
            (Part::OffsetIndex, sizes.offset_index),
            (Part::TimeIndex, sizes.time_index),
        ];
        if let Some(t) = sizes.transaction_index {
            v.push((Part::TransactionIndex, t));
        }
        v.push((Part::ProducerSnapshot, sizes.producer_snapshot));
        v.push((Part::Log, sizes.log));
        v
    }
}

/// What a copy's source sends: the bytes of each part in order, then `End` once everything
/// arrived and checked (an upload's tag). A source that stops without `End` fails the copy.
pub enum Piece {
    Data(Part, Bytes),
    End,
}

pub type Source = mpsc::Receiver<Result<Piece, TierError>>;

pub struct Copier {
    store: Arc<dyn ObjectStore>,
    prefix: DumpDir,
    chunk_size: usize,
    compression: Compression,
    /// Segment copies running at once (`tier.upload_concurrency`), which bounds memory.
    permits: Semaphore,
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

    /// Stores the segment from `source`; on return the broker's files are no longer needed.
    pub async fn copy(
        &self,
        seg: &SegmentMetadata,
        sizes: &UploadSizes,
        epochs: Bytes,
        mut source: Source,
    ) -> Result<SegmentKeys, TierError> {
        let _permit = match tokio::time::timeout(COPY_WAIT, self.permits.acquire()).await {
            Ok(p) => p.map_err(|_| TierError::Internal("the copy limiter was closed".into()))?,
            Err(_) => {
                stats::rejected("copy", "busy");
                return Err(TierError::Busy(format!(
                    "all {} copy slots (tier.upload_concurrency) stayed taken for {COPY_WAIT:?}",
                    self.permits.available_permits().max(1)
                )));
            }
        };
        let keys = SegmentKeys::new(&self.prefix, seg);
        // An earlier attempt's manifest would describe objects this copy is replacing.
        stats::timed("delete", self.store.delete(&keys.manifest)).await?;
        let mut writer = SegmentWriter {
            seg,
            log_up: ObjectUpload::new(self.store.as_ref(), &keys.log),
            indexes_up: ObjectUpload::new(self.store.as_ref(), &keys.indexes),
            chunk_size: self.chunk_size,
            compression: self.compression,
            chunk: BytesMut::new(),
            chunks: Vec::new(),
            log_size: 0,
            offset_index: Vec::new(),
            heads: BatchHeads::default(),
            entries: Vec::new(),
            position: 0,
            open_index: None,
        };
        let stored =
            tokio::time::timeout(COPY_DEADLINE, writer.consume(&mut source, sizes, epochs)).await;
        let (log, indexes) = match stored {
            Ok(Ok(layouts)) => layouts,
            Ok(Err(e)) => {
                writer.abort().await;
                return Err(e);
            }
            Err(_) => {
                writer.abort().await;
                return Err(TierError::CopyTimeout {
                    segment: seg.describe(),
                    limit: COPY_DEADLINE,
                });
            }
        };
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
}

/// The two objects of one copy while their parts arrive.
struct SegmentWriter<'a> {
    seg: &'a SegmentMetadata,
    log_up: ObjectUpload<'a>,
    indexes_up: ObjectUpload<'a>,
    chunk_size: usize,
    compression: Compression,
    /// `.log` bytes of the chunk being filled.
    chunk: BytesMut,
    chunks: Vec<ChunkEntry>,
    log_size: u64,
    /// Kept whole until the `.log` went by (re-keying), then appended last.
    offset_index: Vec<u8>,
    heads: BatchHeads,
    entries: Vec<IndexEntry>,
    /// Bytes in the indexes object so far.
    position: u64,
    /// The index being streamed into the indexes object: its type, size and CRC so far.
    open_index: Option<(IndexType, u64, u32)>,
}

impl SegmentWriter<'_> {
    /// Takes every piece of the source, checking order and sizes against `sizes`.
    async fn consume(
        &mut self,
        source: &mut Source,
        sizes: &UploadSizes,
        epochs: Bytes,
    ) -> Result<(LogLayout, IndexesLayout), TierError> {
        let parts = Part::sequence(sizes);
        let mut at = 0usize;
        let mut got = 0u64;
        self.begin(parts[0].0);
        loop {
            let piece = source.recv().await.ok_or_else(|| {
                self.bad("the segment's bytes stopped before the end".to_string())
            })??;
            let (part, data) = match piece {
                Piece::End => break,
                Piece::Data(part, data) => (part, data),
            };
            // Move on past completed parts to the one this piece belongs to.
            while at + 1 < parts.len() && parts[at].0 != part && got == parts[at].1 {
                self.end_index();
                at += 1;
                got = 0;
                self.begin(parts[at].0);
            }
            let (expected, size) = parts[at];
            if expected != part || got + data.len() as u64 > size {
                return Err(self.bad(format!(
                    "{} bytes of the {} where {} of {size} bytes of the {} were due",
                    data.len(),
                    part.name(),
                    size - got,
                    expected.name()
                )));
            }
            got += data.len() as u64;
            self.take(part, data).await?;
        }
        // Whatever is left must be empty parts.
        loop {
            let (part, size) = parts[at];
            if got < size {
                return Err(self.bad(format!(
                    "{} bytes of the {} are missing",
                    size - got,
                    part.name()
                )));
            }
            self.end_index();
            at += 1;
            got = 0;
            match parts.get(at) {
                Some((p, _)) => self.begin(*p),
                None => break,
            }
        }
        self.finish(epochs).await
    }

    /// A part starts: an index gets its entry (also when empty); the `.log` needs the positions
    /// the offset index points at.
    fn begin(&mut self, part: Part) {
        let index = match part {
            Part::OffsetIndex => return,
            Part::Log => {
                self.heads.want(&self.offset_index);
                return;
            }
            Part::TimeIndex => IndexType::Timestamp,
            Part::TransactionIndex => IndexType::Transaction,
            Part::ProducerSnapshot => IndexType::ProducerSnapshot,
        };
        self.open_index = Some((index, 0, 0));
    }

    fn bad(&self, message: String) -> TierError {
        TierError::BadUpload {
            segment: self.seg.describe(),
            message,
        }
    }

    async fn take(&mut self, part: Part, data: Bytes) -> Result<(), TierError> {
        match part {
            Part::OffsetIndex => self.offset_index.extend_from_slice(&data),
            Part::Log => {
                self.heads.feed(self.log_size, &data);
                self.log_size += data.len() as u64;
                self.log_bytes(data).await?;
            }
            _ => {
                if let Some((_, size, crc)) = self.open_index.as_mut() {
                    *crc = crc32c::crc32c_append(*crc, &data);
                    *size += data.len() as u64;
                }
                self.indexes_up.write(data).await?;
            }
        }
        Ok(())
    }

    /// Records the entry of the index just streamed.
    fn end_index(&mut self) {
        if let Some((index, size, crc32c)) = self.open_index.take() {
            self.entries.push(IndexEntry {
                index,
                position: self.position,
                size,
                crc32c,
            });
            self.position += size;
        }
    }

    /// Cuts `.log` bytes into chunks; whole chunks go up at once.
    async fn log_bytes(&mut self, mut data: Bytes) -> Result<(), TierError> {
        while !data.is_empty() {
            if self.chunk.is_empty() && data.len() >= self.chunk_size {
                let whole = data.split_to(self.chunk_size);
                self.store_chunk(whole).await?;
                continue;
            }
            let take = (self.chunk_size - self.chunk.len()).min(data.len());
            self.chunk.extend_from_slice(&data.split_to(take));
            if self.chunk.len() == self.chunk_size {
                let full = std::mem::take(&mut self.chunk).freeze();
                self.store_chunk(full).await?;
            }
        }
        Ok(())
    }

    async fn store_chunk(&mut self, original: Bytes) -> Result<(), TierError> {
        let (compression, index) = (self.compression, self.chunks.len() as u64);
        let segment = self.seg.describe();
        let (stored, entry) =
            tokio::task::spawn_blocking(move || encode_chunk(original, compression))
                .await
                .map_err(|e| TierError::Internal(format!("chunk encoder: {e}")))?
                .map_err(|message| TierError::Compress {
                    segment,
                    chunk: index,
                    message,
                })?;
        self.chunks.push(entry);
        self.log_up.write(stored).await?;
        Ok(())
    }

    async fn finish(&mut self, epochs: Bytes) -> Result<(LogLayout, IndexesLayout), TierError> {
        if !self.chunk.is_empty() {
            let last = std::mem::take(&mut self.chunk).freeze();
            self.store_chunk(last).await?;
        }
        self.put_whole(IndexType::LeaderEpoch, epochs).await?;
        let index = std::mem::take(&mut self.offset_index);
        let keyed = match super::offset_index::key_by_batch_start(
            &index,
            self.log_size,
            self.seg.start_offset,
            |pos, buf| Ok(self.heads.read(pos, buf)),
        ) {
            Ok(keyed) => keyed,
            Err(why) => {
                tracing::warn!(segment = %self.seg.describe(), %why, "storing the offset index unchanged: remote reads of this segment will read one batch more per fetch");
                index
            }
        };
        self.put_whole(IndexType::Offset, Bytes::from(keyed))
            .await?;
        self.log_up.finish().await?;
        self.indexes_up.finish().await?;
        Ok((
            LogLayout {
                size: self.log_size,
                chunk_size: self.chunk_size as u64,
                compression: self.compression,
                chunks: std::mem::take(&mut self.chunks),
            },
            IndexesLayout {
                size: self.position,
                entries: std::mem::take(&mut self.entries),
            },
        ))
    }

    /// Appends an index held whole in memory to the indexes object, with its entry.
    async fn put_whole(&mut self, index: IndexType, data: Bytes) -> Result<(), TierError> {
        self.entries.push(IndexEntry {
            index,
            position: self.position,
            size: data.len() as u64,
            crc32c: crc32c::crc32c(&data),
        });
        self.position += data.len() as u64;
        if !data.is_empty() {
            self.indexes_up.write(data).await?;
        }
        Ok(())
    }

    async fn abort(&mut self) {
        self.log_up.abort().await;
        self.indexes_up.abort().await;
    }
}

/// A stored chunk and its entry: the original's CRC-32C, then (with zstd) the compressed bytes
/// and theirs.
fn encode_chunk(original: Bytes, compression: Compression) -> Result<(Bytes, ChunkEntry), String> {
    let crc = crc32c::crc32c(&original);
    let stored = match compression {
        Compression::None => original.clone(),
        Compression::Zstd => {
            Bytes::from(zstd::bulk::compress(&original, ZSTD_LEVEL).map_err(|e| e.to_string())?)
        }
    };
    let stored_crc = if compression == Compression::None {
        crc
    } else {
        crc32c::crc32c(&stored)
    };
    let entry = ChunkEntry {
        size: original.len() as u64,
        stored_size: stored.len() as u64,
        crc32c: crc,
        stored_crc32c: stored_crc,
    };
    Ok((stored, entry))
}

/// Bytes of a batch head the offset index re-keying reads: base offset and length.
const HEAD: usize = 12;

/// The first bytes of the batches the offset index points at, caught as the `.log` streams by
/// (the re-keying needs them, and the `.log` is not kept).
#[derive(Default)]
struct BatchHeads {
    wanted: Vec<u64>,
    next: usize,
    got: HashMap<u64, [u8; HEAD]>,
    /// A head cut by a piece boundary: where it starts and its bytes so far.
    partial: Option<(u64, Vec<u8>)>,
}

impl BatchHeads {
    /// The positions of the index's entries (the index is re-keyed, or refused, later).
    fn want(&mut self, index: &[u8]) {
        self.wanted = index
            .chunks_exact(8)
            .map(|e| u64::from(u32::from_be_bytes([e[4], e[5], e[6], e[7]])))
            .collect();
        self.wanted.sort_unstable();
        self.wanted.dedup();
    }

    /// `data` holds the `.log` bytes from position `at`.
    fn feed(&mut self, at: u64, data: &[u8]) {
        let end = at + data.len() as u64;
        if let Some((p, mut buf)) = self.partial.take() {
            let take = (HEAD - buf.len()).min(data.len());
            buf.extend_from_slice(&data[..take]);
            if buf.len() == HEAD {
                self.got.insert(p, buf.try_into().unwrap_or([0; HEAD]));
            } else {
                self.partial = Some((p, buf));
                return;
            }
        }
        while let Some(&p) = self.wanted.get(self.next) {
            if p < at {
                self.next += 1;
                continue;
            }
            if p >= end {
                break;
            }
            let off = (p - at) as usize;
            if data.len() - off >= HEAD {
                let mut h = [0u8; HEAD];
                h.copy_from_slice(&data[off..off + HEAD]);
                self.got.insert(p, h);
            } else {
                self.partial = Some((p, data[off..].to_vec()));
            }
            self.next += 1;
        }
    }

    /// What `key_by_batch_start` reads at `pos`: the head caught there, or nothing.
    fn read(&self, pos: u64, buf: &mut [u8]) -> usize {
        match self.got.get(&pos) {
            Some(h) => {
                let n = HEAD.min(buf.len());
                buf[..n].copy_from_slice(&h[..n]);
                n
            }
            None => 0,
        }
    }
}

/// The source of a copy by path: the opened files read on a blocking thread, in [`Part`]
/// order, exactly the sizes they had when opened (a file that shrinks fails the copy; bytes a
/// file gained since are not read).
pub fn file_source(files: SegmentSources, segment: String, log_piece: usize) -> Source {
    let (tx, rx) = mpsc::channel(1);
    tokio::task::spawn_blocking(move || {
        let SegmentSources {
            log,
            offset_index,
            time_index,
            transaction_index,
            producer_snapshot,
        } = files;
        let mut parts = vec![
            (Part::OffsetIndex, offset_index),
            (Part::TimeIndex, time_index),
        ];
        if let Some(t) = transaction_index {
            parts.push((Part::TransactionIndex, t));
        }
        parts.push((Part::ProducerSnapshot, producer_snapshot));
        parts.push((Part::Log, log));
        for (part, mut f) in parts {
            let piece = if part == Part::Log {
                log_piece
            } else {
                INDEX_PIECE
            };
            let mut left = f.size;
            while left > 0 {
                let mut buf = vec![0u8; piece.min(left as usize)];
                let r = read_full(&mut f.file, &mut buf).and_then(|n| {
                    if n < buf.len() {
                        Err(std::io::Error::other(format!(
                            "the file shrank while being copied ({} of {} bytes read)",
                            f.size - left + n as u64,
                            f.size
                        )))
                    } else {
                        Ok(())
                    }
                });
                if let Err(e) = r {
                    let _ = tx.blocking_send(Err(TierError::ReadFile {
                        segment: segment.clone(),
                        path: f.path.clone(),
                        source: TierError::io(e),
                    }));
                    return;
                }
                left -= buf.len() as u64;
                // A closed channel means the copy failed: stop reading.
                if tx
                    .blocking_send(Ok(Piece::Data(part, Bytes::from(buf))))
                    .is_err()
                {
                    return;
                }
            }
        }
        let _ = tx.blocking_send(Ok(Piece::End));
    });
    rx
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

/// One object of a copy while its bytes arrive (small objects go up in one PUT: the store's
/// upload starts parts only when there is a whole part).
struct ObjectUpload<'a> {
    store: &'a dyn ObjectStore,
    key: &'a str,
    upload: Option<Box<dyn MultipartUpload>>,
}

impl<'a> ObjectUpload<'a> {
    fn new(store: &'a dyn ObjectStore, key: &'a str) -> Self {
        Self {
            store,
            key,
            upload: None,
        }
    }

    async fn write(&mut self, data: Bytes) -> Result<(), StoreError> {
        if self.upload.is_none() {
            self.upload =
                Some(stats::timed("start_upload", self.store.put_multipart(self.key)).await?);
        }
        match self.upload.as_mut() {
            Some(up) => stats::timed("upload_part", up.write(data)).await,
            None => Ok(()),
        }
    }

    async fn finish(&mut self) -> Result<(), StoreError> {
        match self.upload.take() {
            Some(up) => stats::timed("complete_upload", up.finish(Finish::Replace))
                .await
                .map(|_| ()),
            None => stats::timed("put", self.store.put(self.key, Bytes::new())).await,
        }
    }

    /// Discards what was written (an upload also aborts itself when dropped).
    async fn abort(&mut self) {
        if let Some(up) = self.upload.take() {
            if let Err(e) = up.abort().await {
                tracing::warn!(error = %e, "abort of an upload failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_heads_are_caught_across_piece_boundaries() {
        // Three "batches" at 0, 20 and 45, each head 12 bytes of a recognisable pattern.
        let mut log = [0u8; 64];
        for (i, at) in [0usize, 20, 45].into_iter().enumerate() {
            for j in 0..HEAD {
                log[at + j] = (i * 16 + j) as u8 + 1;
            }
        }
        let mut index = Vec::new();
        for at in [20u32, 0, 45, 45] {
            index.extend_from_slice(&0i32.to_be_bytes());
            index.extend_from_slice(&at.to_be_bytes());
        }
        for cut in [1usize, 5, 13, 22, 50, 64] {
            let mut h = BatchHeads::default();
            h.want(&index);
            let mut at = 0u64;
            for piece in log.chunks(cut) {
                h.feed(at, piece);
                at += piece.len() as u64;
            }
            for p in [0u64, 20, 45] {
                let mut buf = [0u8; 64];
                assert_eq!(h.read(p, &mut buf), HEAD, "cut {cut}, position {p}");
                assert_eq!(&buf[..HEAD], &log[p as usize..p as usize + HEAD]);
            }
            let mut buf = [0u8; 4];
            assert_eq!(h.read(1, &mut buf), 0);
        }
    }

    #[test]
    fn part_sequences_follow_the_sizes() {
        let mut sizes = UploadSizes {
            offset_index: 8,
            time_index: 12,
            transaction_index: None,
            producer_snapshot: 3,
            log: 100,
        };
        let parts: Vec<Part> = Part::sequence(&sizes).iter().map(|(p, _)| *p).collect();
        assert_eq!(
            parts,
            [
                Part::OffsetIndex,
                Part::TimeIndex,
                Part::ProducerSnapshot,
                Part::Log
            ]
        );
        sizes.transaction_index = Some(0);
        assert_eq!(Part::sequence(&sizes)[2], (Part::TransactionIndex, 0));
    }

    #[test]
    fn chunks_encode_with_both_checksums() {
        let data = Bytes::from(vec![7u8; 10_000]);
        let (stored, e) = encode_chunk(data.clone(), Compression::None).unwrap();
        assert_eq!(stored, data);
        assert_eq!((e.size, e.stored_size), (10_000, 10_000));
        assert_eq!(e.crc32c, e.stored_crc32c);
        let (z, e) = encode_chunk(data.clone(), Compression::Zstd).unwrap();
        assert!(z.len() < 1000);
        assert_eq!(e.crc32c, crc32c::crc32c(&data));
        assert_eq!(e.stored_crc32c, crc32c::crc32c(&z));
        let back = super::super::fetch::decode_chunk(z, &e, Compression::Zstd).unwrap();
        assert_eq!(back, data);
    }
}
