//! The read path: manifest (cached) → chunks covering the requested bytes (through the chunk
//! cache, each a ranged GET of one whole stored chunk) → a lazily produced body.
//!
//! Every chunk is checked against its CRC-32C before a byte of it is served; a mismatch is an
//! error naming the object and chunk. The first chunk is read before the answer starts, so
//! common failures get a proper status; a later failure cuts the body short (the length header
//! promised more), which the broker sees as an I/O error rather than as wrong bytes.

use super::cache::{ChunkCache, ChunkKey};
use super::chunks::Piece;
use super::error::TierError;
use super::keys::SegmentKeys;
use super::manifest::{ChunkEntry, Compression, LoadedManifest, Manifest};
use super::protocol::{IndexType, SegmentMetadata};
use super::stats;
use crate::layout::DumpDir;
use crate::store::{ErrorKind, ObjectStore};
use bytes::Bytes;
use futures::future::FutureExt;
use futures::stream::{BoxStream, StreamExt};
use lru::LruCache;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// Object store GETs in flight at once (reads and prefetches together), so a burst of readers
/// does not get the bucket to throttle us.
const MAX_CONCURRENT_GETS: usize = 32;

/// Manifests kept parsed in memory (a few KiB each).
const MANIFEST_CACHE_ENTRIES: usize = 4096;

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
        }
    }

    /// Forgets a segment's cached manifest (after a copy or delete changed it).
    pub fn forget(&self, keys: &SegmentKeys) {
        self.manifests_lock().pop(&keys.manifest);
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
        if let Some(m) = self.manifests_lock().get(&keys.manifest) {
            return Ok((keys, m.clone()));
        }
        let store = &self.chunks.store;
        let raw = match stats::timed("get", store.get(&keys.manifest)).await {
            Ok(b) => b,
            Err(e) if e.kind == ErrorKind::NotFound => {
                return Err(TierError::SegmentNotFound {
                    segment: seg.describe(),
                    location: store.location(&keys.manifest),
                })
            }
            Err(e) => return Err(e.into()),
        };
        let bad = |message: String| TierError::BadManifest {
            location: store.location(&keys.manifest),
            message,
        };
        let manifest = Manifest::from_json(&raw).map_err(|e| bad(e.to_string()))?;
        if manifest.segment.segment_id != seg.segment_id
            || manifest.segment.topic_id != seg.topic_id
            || manifest.segment.partition != seg.partition
        {
            return Err(bad(format!(
                "it describes segment {}, not {}",
                manifest.segment.describe(),
                seg.describe()
            )));
        }
        let loaded = Arc::new(LoadedManifest::new(manifest).map_err(|e| bad(e.to_string()))?);
        let mut cached = self.manifests_lock();
        cached.put(keys.manifest.clone(), loaded.clone());
        while cached.len() > MANIFEST_CACHE_ENTRIES {
            cached.pop_lru();
        }
        Ok((keys, loaded))
    }

    /// Bytes `start..=end` of the segment's `.log` (`end` clamped; `None` = to the end).
    pub async fn read(
        &self,
        seg: &SegmentMetadata,
        start: u64,
        end: Option<u64>,
    ) -> Result<SegmentRead, TierError> {
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
        let len = plan.len();
        let mut stream = SegmentStream {
            src: self.chunks.clone(),
            location: self.chunks.store.location(&keys.log),
            object: Arc::from(keys.log.as_str()),
            manifest: m,
            pieces: Box::new(plan.pieces()),
            last_chunk: plan.last_chunk().unwrap_or(0),
            prefetched_to: None,
            failed: false,
        };
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
        Ok(SegmentRead { len, body })
    }

    /// The stored bytes of one index, verified.
    pub async fn index(&self, seg: &SegmentMetadata, t: IndexType) -> Result<Bytes, TierError> {
        let (keys, m) = self.manifest(seg).await?;
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
    src: ChunkSource,
    location: String,
    object: Arc<str>,
    manifest: Arc<LoadedManifest>,
    pieces: Box<dyn Iterator<Item = Piece> + Send>,
    /// Last chunk of the request: prefetch stops there.
    last_chunk: u64,
    /// Highest chunk a prefetch was started for.
    prefetched_to: Option<u64>,
    failed: bool,
}

impl SegmentStream {
    async fn serve(&mut self, piece: Piece) -> Result<Bytes, TierError> {
        self.prefetch_after(piece.chunk);
        let chunk = self
            .src
            .chunk(&self.object, &self.location, &self.manifest, piece.chunk)
            .await?;
        let out = chunk.slice(piece.within);
        stats::fetched(out.len() as u64);
        Ok(out)
    }

    /// Sequential readers (the broker reads on from where it stopped) find the next chunks
    /// loaded or on their way.
    fn prefetch_after(&mut self, chunk: u64) {
        let upto = chunk
            .saturating_add(self.src.prefetch_chunks)
            .min(self.last_chunk);
        let from = self.prefetched_to.map_or(chunk + 1, |p| p.max(chunk) + 1);
        for c in from..=upto {
            self.src
                .prefetch(&self.object, &self.location, &self.manifest, c);
        }
        if upto >= from {
            self.prefetched_to = Some(upto);
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

    fn prefetch(&self, object: &Arc<str>, location: &str, m: &LoadedManifest, index: u64) {
        if let Ok((key, load)) = self.loader(object, location, m, index) {
            self.cache.prefetch(&key, move || load.run().boxed());
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

    fn bad_copy(d: &[u8]) -> Vec<u8> {
        let mut v = d.to_vec();
        v[0] ^= 0x80;
        v
    }
}
