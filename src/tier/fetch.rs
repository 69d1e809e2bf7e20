//! The read path: manifest (cached) → chunks covering the requested bytes (through the chunk
//! cache, each a ranged GET of one whole stored chunk) → a lazily produced body.
//!
//! Every chunk is checked against its CRC-32C before a byte of it is served; a mismatch is an
//! error naming the object and chunk. The first chunk is read before the answer starts, so
//! common failures get a proper status; a later failure cuts the body short (the length header
//! promised more), which the broker sees as an I/O error rather than as wrong bytes.

use super::cache::{ChunkCache, ChunkFile, ChunkKey, BLOCK};
use super::chunks::Piece;
use super::chunks::ReadPlan;
use super::error::TierError;
use super::keys::{partition_prefix, SegmentKeys};
use super::manifest::{ChunkEntry, Compression, LoadedManifest, Manifest};
use super::protocol::{Handoff, HandoffPiece, IndexType, SegmentMetadata};
use super::stats;
use crate::layout::DumpDir;
use crate::store::{ErrorKind, ObjectStore};
use bytes::Bytes;
use futures::future::FutureExt;
use futures::stream::{BoxStream, StreamExt};
use lru::LruCache;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Object store GETs in flight at once (reads and prefetches together), so a burst of readers
/// does not get the bucket to throttle us.
const MAX_CONCURRENT_GETS: usize = 32;

/// Manifests kept parsed in memory (a few KiB each).
const MANIFEST_CACHE_ENTRIES: usize = 4096;

/// How long a next segment found missing is not looked for again.
const LOOK_AGAIN: Duration = Duration::from_secs(10);

/// How a fetch is answered.
pub enum Answer {
    /// Cache files the bridge reads itself.
    Files(Handoff),
    Bytes(SegmentRead),
}

/// The bytes of a fetch: exactly `len` bytes unless an error ends the stream.
pub struct SegmentRead {
    pub len: u64,
    pub body: BoxStream<'static, Result<Bytes, TierError>>,
}

/// Serves segment bytes and indexes from the store.
pub struct Reader {
    prefix: DumpDir,
    chunks: ChunkSource,
    manifests: Mutex<LruCache<String, Arc<LoadedManifest>>>,
    /// Next segments looked up (see [`Reader::look_ahead`]) by key prefix: `None` when found
    /// or being looked up, else when it was last found missing.
    looked_ahead: Mutex<LruCache<String, Option<Instant>>>,
}

/// What loading a chunk needs; cheap to clone into a response stream.
#[derive(Clone)]
struct ChunkSource {
    store: Arc<dyn ObjectStore>,
    cache: ChunkCache,
    gets: Arc<Semaphore>,
    prefetch_chunks: u64,
}

impl Reader {
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: DumpDir,
        cache: ChunkCache,
        prefetch_chunks: u32,
    ) -> Self {
        Self {
            prefix,
            chunks: ChunkSource {
                store,
                cache,
                gets: Arc::new(Semaphore::new(MAX_CONCURRENT_GETS)),
                prefetch_chunks: u64::from(prefetch_chunks),
            },
            manifests: Mutex::new(LruCache::unbounded()),
            looked_ahead: Mutex::new(LruCache::unbounded()),
        }
    }

    /// Forgets a segment's cached manifest (after a copy or delete changed it).
    pub fn forget(&self, keys: &SegmentKeys) {
        self.manifests_lock().pop(&keys.manifest);
    }

    fn looked_ahead_lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, Option<Instant>>> {
        self.looked_ahead.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn manifests_lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, Arc<LoadedManifest>>> {
        self.manifests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The segment's manifest, from memory or the store.
    async fn manifest(
        &self,
        seg: &SegmentMetadata,
    ) -> Result<(SegmentKeys, Arc<LoadedManifest>), TierError> {
        let keys = SegmentKeys::new(&self.prefix, seg);
        let m = self.manifest_at(&keys.manifest, Some(seg)).await?;
        Ok((keys, m))
    }

    /// The manifest under `key`, checked to describe `expected` (or, without one, to be the
    /// manifest its own segment would have under this key).
    async fn manifest_at(
        &self,
        key: &str,
        expected: Option<&SegmentMetadata>,
    ) -> Result<Arc<LoadedManifest>, TierError> {
        if let Some(m) = self.manifests_lock().get(key) {
            return Ok(m.clone());
        }
        let store = &self.chunks.store;
        let raw = match stats::timed("get", store.get(key)).await {
            Ok(b) => b,
            Err(e) if e.kind == ErrorKind::NotFound => {
                return Err(TierError::SegmentNotFound {
                    segment: expected.map_or_else(|| key.to_string(), |s| s.describe()),
                    location: store.location(key),
                })
            }
            Err(e) => return Err(e.into()),
        };
        let bad = |message: String| TierError::BadManifest {
            location: store.location(key),
            message,
        };
        let manifest = Manifest::from_json(&raw).map_err(|e| bad(e.to_string()))?;
        let found = &manifest.segment;
        let fits = match expected {
            Some(seg) => {
                found.segment_id == seg.segment_id
                    && found.topic_id == seg.topic_id
                    && found.partition == seg.partition
            }
            None => SegmentKeys::new(&self.prefix, found).manifest == key,
        };
        if !fits {
            return Err(bad(format!(
                "it describes segment {}{}",
                found.describe(),
                expected.map_or(String::new(), |s| format!(", not {}", s.describe()))
            )));
        }
        let loaded = Arc::new(LoadedManifest::new(manifest).map_err(|e| bad(e.to_string()))?);
        let mut cached = self.manifests_lock();
        cached.put(key.to_string(), loaded.clone());
        while cached.len() > MANIFEST_CACHE_ENTRIES {
            cached.pop_lru();
        }
        Ok(loaded)
    }

    /// Starts fetching a segment's first chunks: the broker is about to read it from the start.
    fn prefetch_head(&self, keys: &SegmentKeys, m: &LoadedManifest) {
        let object: Arc<str> = Arc::from(keys.log.as_str());
        let location = self.chunks.store.location(&keys.log);
        let count = m.layout().chunk_count();
        for c in 0..count.min(self.chunks.prefetch_chunks + 1) {
            self.chunks.prefetch(&object, &location, m, c, true);
        }
    }

    /// A sequential reader nears the end of `seg`: find the partition's next segment (the one
    /// starting right after it; its id is only known by listing) and start fetching its
    /// manifest and first chunks, so the reader does not stall at the segment boundary.
    fn look_ahead(self: &Arc<Self>, seg: &SegmentMetadata) {
        let Some(next) = seg.end_offset.checked_add(1) else {
            return;
        };
        let prefix = format!("{}{next:020}-", partition_prefix(&self.prefix, seg));
        {
            let mut done = self.looked_ahead_lock();
            match done.get(&prefix) {
                Some(None) => return,
                Some(Some(missing)) if missing.elapsed() < LOOK_AGAIN => return,
                _ => {}
            }
            done.put(prefix.clone(), None);
            while done.len() > MANIFEST_CACHE_ENTRIES {
                done.pop_lru();
            }
        }
        let reader = self.clone();
        tokio::spawn(async move {
            let listed = match stats::timed("list", reader.chunks.store.list(&prefix)).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::debug!(error = %e, "looking for the next segment failed");
                    return;
                }
            };
            for o in listed.iter().filter(|o| o.key.ends_with(".manifest")) {
                match reader.manifest_at(&o.key, None).await {
                    Ok(m) => {
                        let keys = SegmentKeys::new(&reader.prefix, &m.manifest.segment);
                        reader.prefetch_head(&keys, &m);
                        return;
                    }
                    Err(e) => tracing::debug!(error = %e, "next segment's manifest unusable"),
                }
            }
            // Not tiered yet (or not at all): worth another look later.
            reader.looked_ahead_lock().put(prefix, Some(Instant::now()));
        });
    }

    /// Bytes `start..=end` of the segment's `.log` (`end` clamped; `None` = to the end), at
    /// most `max_bytes` of them. Prefetching and looking ahead follow the whole range, so a
    /// reader that takes it in windows finds the next chunks (and segment) on their way.
    ///
    /// With `handoff: Some(n)`, the first `n` bytes (`None`: the window) may be answered as
    /// cache files for the bridge to read instead ([`SegmentStream::handoff`]).
    pub async fn read(
        self: &Arc<Self>,
        seg: &SegmentMetadata,
        start: u64,
        end: Option<u64>,
        max_bytes: Option<u64>,
        handoff: Option<Option<u64>>,
    ) -> Result<Answer, TierError> {
        let (mut stream, window, plan) = self.stream(seg, start, end, max_bytes).await?;
        if let Some(handoff_max) = handoff {
            let files = handoff_max.map_or_else(|| window.clone(), |n| plan.first_bytes(n));
            if let Some(h) = stream.handoff(&files, handoff_max) {
                return Ok(Answer::Files(h));
            }
        }
        let len = window.len();
        // The first piece now: a missing or corrupt first chunk gets an error status.
        let first = match stream.pieces.next() {
            Some(p) => Some(stream.serve(p).await?),
            None => None,
        };
        let rest = futures::stream::unfold(stream, |mut s| async move {
            if s.failed {
                return None;
            }
            let piece = s.pieces.next()?;
            match s.serve(piece).await {
                Ok(b) => Some((Ok(b), s)),
                Err(e) => {
                    tracing::error!(error = %e, "fetch stopped mid-body");
                    stats::error("fetch");
                    s.failed = true;
                    Some((Err(e), s))
                }
            }
        });
        let body = futures::stream::iter(first.map(Ok)).chain(rest).boxed();
        Ok(Answer::Bytes(SegmentRead { len, body }))
    }

    /// The state of one read of `start..=end` (at most `max_bytes` of it), its window and the
    /// whole read.
    async fn stream(
        self: &Arc<Self>,
        seg: &SegmentMetadata,
        start: u64,
        end: Option<u64>,
        max_bytes: Option<u64>,
    ) -> Result<(SegmentStream, ReadPlan, ReadPlan), TierError> {
        let (keys, m) = self.manifest(seg).await?;
        let plan = m.layout().plan(start, end).map_err(|e| {
            TierError::BadRequest(super::protocol::FieldError {
                field: if matches!(e, super::chunks::RangeError::StartPastEnd { .. }) {
                    "start_position"
                } else {
                    "end_position"
                },
                message: format!("{e} (segment {})", seg.describe()),
            })
        })?;
        let window = max_bytes.map_or_else(|| plan.clone(), |n| plan.first_bytes(n));
        let stream = SegmentStream {
            reader: self.clone(),
            sequential: end.is_none().then(|| seg.clone()),
            segment_last_chunk: m.layout().chunk_count().saturating_sub(1),
            location: self.chunks.store.location(&keys.log),
            object: Arc::from(keys.log.as_str()),
            manifest: m,
            pieces: Box::new(window.pieces()),
            last_chunk: plan.last_chunk().unwrap_or(0),
            prefetched_to: None,
            promote: true,
            failed: false,
            served: 0,
            started: std::time::Instant::now(),
        };
        Ok((stream, window, plan))
    }

    /// Drops a cache file the bridge found damaged.
    pub fn distrust(&self, file: &str) {
        self.chunks.cache.distrust(file);
    }

    /// The stored bytes of one index, verified.
    pub async fn index(&self, seg: &SegmentMetadata, t: IndexType) -> Result<Bytes, TierError> {
        let (keys, m) = self.manifest(seg).await?;
        if t == IndexType::Offset {
            // The broker reads a segment's offset index right before its first read of the
            // segment, which for a consumer moving on from the previous segment starts at the
            // beginning: have those chunks on their way.
            self.prefetch_head(&keys, &m);
        }
        let entry = m
            .manifest
            .index(t)
            .ok_or_else(|| TierError::IndexNotFound {
                segment: seg.describe(),
                index: t,
            })?;
        if entry.size == 0 {
            return Ok(Bytes::new());
        }
        let store = &self.chunks.store;
        let range = entry.position..entry.position + entry.size;
        let data = {
            let _permit = self.chunks.gets.acquire().await.map_err(closed)?;
            stats::timed("get_range", store.get_range(&keys.indexes, range)).await?
        };
        let crc = crc32c::crc32c(&data);
        if data.len() as u64 != entry.size || crc != entry.crc32c {
            return Err(TierError::Corrupt {
                location: store.location(&keys.indexes),
                part: format!("{t} index"),
                detail: format!(
                    "{} bytes with crc32c {crc:08x}, expected {} bytes with {:08x}",
                    data.len(),
                    entry.size,
                    entry.crc32c
                ),
            });
        }
        Ok(data)
    }
}

fn closed(_: tokio::sync::AcquireError) -> TierError {
    TierError::Internal("the GET limiter was closed".into())
}

/// State of one response body.
struct SegmentStream {
    reader: Arc<Reader>,
    /// The segment, when read to its end (the broker's sequential reads): near its end, the
    /// next segment is looked up ahead.
    sequential: Option<SegmentMetadata>,
    segment_last_chunk: u64,
    location: String,
    object: Arc<str>,
    manifest: Arc<LoadedManifest>,
    pieces: Box<dyn Iterator<Item = Piece> + Send>,
    /// Last chunk of the request: prefetch stops there.
    last_chunk: u64,
    /// Highest chunk a prefetch was started for.
    prefetched_to: Option<u64>,
    /// Whether chunks cached on disk are read into memory ahead of the reader.
    promote: bool,
    failed: bool,
    /// Bytes handed to the connection, and since when: logged when the body ends or the
    /// reader hangs up (the broker usually does after its fetch size).
    served: u64,
    started: std::time::Instant,
}

impl Drop for SegmentStream {
    fn drop(&mut self) {
        tracing::debug!(object = %self.object, served = self.served, us = self.started.elapsed().as_micros() as u64, "fetch body ended");
    }
}

impl SegmentStream {
    async fn serve(&mut self, piece: Piece) -> Result<Bytes, TierError> {
        self.prefetch_after(piece.chunk);
        let chunk = self
            .reader
            .chunks
            .chunk(&self.object, &self.location, &self.manifest, piece.chunk)
            .await?;
        let out = chunk.slice(piece.within);
        stats::fetched(out.len() as u64);
        self.served += out.len() as u64;
        Ok(out)
    }

    /// The window as cache files for the bridge to read (see [`Handoff`]): the run of its
    /// chunks, from the first, that are on disk. `None` when the first is not (or the cache is
    /// in memory): the bytes go over the socket. Prefetching follows as for bytes, minus
    /// reading files into memory, which the bridge does not need. `max_bytes`: the size of the
    /// window asked for, told back to the bridge.
    fn handoff(&mut self, window: &ReadPlan, max_bytes: Option<u64>) -> Option<Handoff> {
        let dir = self.reader.chunks.cache.dir()?.display().to_string();
        let mut pieces = Vec::new();
        let mut len = 0;
        for piece in window.pieces() {
            let Some(file) = self.cached_file(piece.chunk) else {
                break;
            };
            self.promote = false;
            self.prefetch_after(piece.chunk);
            let range = piece.within.start as u64..piece.within.end as u64;
            len += range.end - range.start;
            pieces.push(handoff_piece(&file, range));
        }
        if pieces.is_empty() {
            return None;
        }
        stats::fetched(len);
        stats::handed_off(len);
        Some(Handoff {
            dir,
            block_size: BLOCK,
            len,
            partial: len < window.len(),
            max_bytes,
            pieces,
        })
    }

    /// The chunk's cache file, if it is on disk.
    fn cached_file(&self, chunk: u64) -> Option<Arc<ChunkFile>> {
        let entry = self.manifest.chunk(chunk)?;
        let key = ChunkSource::key(&self.object, chunk, entry);
        self.reader.chunks.cache.file(&key)
    }

    /// Sequential readers (the broker reads on from where it stopped) find the next chunks
    /// loaded or on their way.
    fn prefetch_after(&mut self, chunk: u64) {
        let chunks = &self.reader.chunks;
        let ahead = chunk.saturating_add(chunks.prefetch_chunks);
        let upto = ahead.min(self.last_chunk);
        let from = self.prefetched_to.map_or(chunk + 1, |p| p.max(chunk) + 1);
        for c in from..=upto {
            chunks.prefetch(
                &self.object,
                &self.location,
                &self.manifest,
                c,
                self.promote,
            );
        }
        if upto >= from {
            self.prefetched_to = Some(upto);
        }
        if ahead >= self.segment_last_chunk {
            if let Some(seg) = self.sequential.take() {
                self.reader.look_ahead(&seg);
            }
        }
    }
}

impl ChunkSource {
    fn key(object: &Arc<str>, index: u64, e: &ChunkEntry) -> ChunkKey {
        ChunkKey {
            object: object.clone(),
            index,
            crc32c: e.crc32c,
            len: e.size,
        }
    }

    fn loader(
        &self,
        object: &Arc<str>,
        location: &str,
        m: &LoadedManifest,
        index: u64,
    ) -> Result<(ChunkKey, LoadChunk), TierError> {
        let (Some(entry), Some(range)) = (m.chunk(index).copied(), m.stored_range(index)) else {
            return Err(TierError::Internal(format!(
                "chunk {index} is not in the manifest of {location}"
            )));
        };
        let key = Self::key(object, index, &entry);
        let load = LoadChunk {
            store: self.store.clone(),
            gets: self.gets.clone(),
            object: object.clone(),
            location: location.to_string(),
            index,
            range,
            entry,
            compression: m.manifest.log.compression,
        };
        Ok((key, load))
    }

    async fn chunk(
        &self,
        object: &Arc<str>,
        location: &str,
        m: &LoadedManifest,
        index: u64,
    ) -> Result<Bytes, TierError> {
        let (key, load) = self.loader(object, location, m, index)?;
        self.cache.get(&key, move || load.run().boxed()).await
    }

    fn prefetch(
        &self,
        object: &Arc<str>,
        location: &str,
        m: &LoadedManifest,
        index: u64,
        promote: bool,
    ) {
        if let Ok((key, load)) = self.loader(object, location, m, index) {
            self.cache
                .prefetch(&key, move || load.run().boxed(), promote);
        }
    }
}

/// One chunk fetch: ranged GET, checks, decompression.
struct LoadChunk {
    store: Arc<dyn ObjectStore>,
    gets: Arc<Semaphore>,
    object: Arc<str>,
    location: String,
    index: u64,
    range: Range<u64>,
    entry: ChunkEntry,
    compression: Compression,
}

impl LoadChunk {
    async fn run(self) -> Result<Bytes, TierError> {
        let stored = {
            let _permit = self.gets.acquire().await.map_err(closed)?;
            if self.range.is_empty() {
                Bytes::new()
            } else {
                stats::timed(
                    "get_range",
                    self.store.get_range(&self.object, self.range.clone()),
                )
                .await?
            }
        };
        tokio::task::spawn_blocking(move || decode_chunk(stored, &self.entry, self.compression))
            .await
            .map_err(|e| TierError::Internal(format!("chunk check task: {e}")))?
            .map_err(|detail| TierError::Corrupt {
                location: self.location,
                part: format!("chunk {}", self.index),
                detail,
            })
    }
}

/// The piece of a handoff for bytes `range` of a cache file: the CRCs of the blocks it touches.
fn handoff_piece(file: &ChunkFile, range: Range<u64>) -> HandoffPiece {
    let first = (range.start / BLOCK) as usize;
    let last = (range.end.saturating_sub(1) / BLOCK) as usize;
    let crc32c = file
        .blocks
        .get(first..=last.min(file.blocks.len().saturating_sub(1)))
        .unwrap_or_default()
        .to_vec();
    HandoffPiece {
        file: file.name.clone(),
        size: file.len,
        offset: range.start,
        len: range.end - range.start,
        crc32c,
    }
}

/// The original bytes of a stored chunk, or why they cannot be trusted.
pub(crate) fn decode_chunk(
    stored: Bytes,
    e: &ChunkEntry,
    compression: Compression,
) -> Result<Bytes, String> {
    if stored.len() as u64 != e.stored_size {
        return Err(format!(
            "{} stored bytes, the manifest says {}",
            stored.len(),
            e.stored_size
        ));
    }
    let crc = crc32c::crc32c(&stored);
    if crc != e.stored_crc32c {
        return Err(format!(
            "stored crc32c {crc:08x}, the manifest says {:08x}",
            e.stored_crc32c
        ));
    }
    let original = match compression {
        Compression::None => stored,
        Compression::Zstd => {
            let cap = usize::try_from(e.size).map_err(|_| "chunk too large".to_string())?;
            let data = zstd::bulk::decompress(&stored, cap)
                .map_err(|err| format!("zstd frame does not decode: {err}"))?;
            let crc = crc32c::crc32c(&data);
            if data.len() as u64 != e.size || crc != e.crc32c {
                return Err(format!(
                    "decompressed to {} bytes with crc32c {crc:08x}, the manifest says {} bytes with {:08x}",
                    data.len(),
                    e.size,
                    e.crc32c
                ));
            }
            Bytes::from(data)
        }
    };
    if original.len() as u64 != e.size {
        return Err(format!(
            "{} bytes, the manifest says {}",
            original.len(),
            e.size
        ));
    }
    Ok(original)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(original: &[u8], stored: &[u8]) -> ChunkEntry {
        ChunkEntry {
            size: original.len() as u64,
            stored_size: stored.len() as u64,
            crc32c: crc32c::crc32c(original),
            stored_crc32c: crc32c::crc32c(stored),
        }
    }

    #[test]
    fn intact_chunks_decode() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 7) as u8).collect();
        let z = zstd::bulk::compress(&data, 3).unwrap();
        let e = entry(&data, &z);
        assert_eq!(
            decode_chunk(Bytes::from(z), &e, Compression::Zstd).unwrap(),
            data
        );
        let e = entry(&data, &data);
        assert_eq!(
            decode_chunk(Bytes::from(data.clone()), &e, Compression::None).unwrap(),
            data
        );
    }

    #[test]
    fn corrupt_chunks_are_refused() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let e = entry(&data, &data);
        let mut bad = data.clone();
        bad[5000] ^= 1;
        let err = decode_chunk(Bytes::from(bad), &e, Compression::None).unwrap_err();
        assert!(err.contains("crc32c"), "{err}");
        let err =
            decode_chunk(Bytes::from(data[..9999].to_vec()), &e, Compression::None).unwrap_err();
        assert!(err.contains("9999 stored bytes"), "{err}");

        // A compressed chunk whose stored checksum was (also) rewritten still has to
        // decompress to the original checksum.
        let z = zstd::bulk::compress(&data, 3).unwrap();
        let other = zstd::bulk::compress(&bad_copy(&data), 3).unwrap();
        let mut e = entry(&data, &other);
        e.stored_size = other.len() as u64;
        let err = decode_chunk(Bytes::from(other), &e, Compression::Zstd).unwrap_err();
        assert!(err.contains("decompressed"), "{err}");
        // Garbage that passes the stored checksum but is no zstd frame.
        let garbage = vec![7u8; z.len()];
        let e = entry(&data, &garbage);
        let err = decode_chunk(Bytes::from(garbage), &e, Compression::Zstd).unwrap_err();
        assert!(err.contains("zstd"), "{err}");
    }

    #[test]
    fn a_handoff_piece_carries_the_checksums_of_the_blocks_it_touches() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 256) as u8).collect();
        let file = ChunkFile {
            path: "/c/x".into(),
            name: "00000000000000aa-3.chunk".into(),
            len: data.len() as u64,
            blocks: super::super::cache::block_crcs(&data),
        };
        let b = BLOCK;
        let p = handoff_piece(&file, 10..20);
        assert_eq!((p.offset, p.len, p.size), (10, 10, 200_000));
        assert_eq!(p.crc32c, vec![file.blocks[0]]);
        let p = handoff_piece(&file, b - 1..b + 1);
        assert_eq!(p.crc32c, file.blocks[0..2].to_vec());
        let p = handoff_piece(&file, b..2 * b);
        assert_eq!(p.crc32c, vec![file.blocks[1]], "an exact block");
        let p = handoff_piece(&file, 5..200_000);
        assert_eq!(p.crc32c, file.blocks);
        assert_eq!(p.file, file.name);
    }

    fn bad_copy(d: &[u8]) -> Vec<u8> {
        let mut v = d.to_vec();
        v[0] ^= 0x80;
        v
    }
}
