//! The manifest of a tiered segment (JSON, written last): the segment's metadata, how its `.log`
//! was cut and stored (chunk size, compression, every chunk's original and stored size and
//! CRC-32C), and where each index lies in the indexes object. It is checked when read back, so
//! a damaged manifest is reported as such rather than turning into wrong reads.

use super::chunks::{stored_offsets, ChunkLayout};
use super::protocol::{IndexType, SegmentMetadata};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Bumped on any change readers of older manifests could misread.
pub const FORMAT_VERSION: u32 = 1;

/// How each stored chunk was encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    /// One zstd frame per chunk, so any chunk decodes alone.
    Zstd,
}

/// One chunk of the `.log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkEntry {
    /// Original bytes (the segment's), before compression.
    pub size: u64,
    /// Bytes in the `.log` object.
    pub stored_size: u64,
    /// CRC-32C of the original bytes: what is served must match it.
    pub crc32c: u32,
    /// CRC-32C of the stored bytes: checked before decompressing.
    pub stored_crc32c: u32,
}

/// The `.log` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLayout {
    /// Original size of the segment's `.log` in bytes.
    pub size: u64,
    pub chunk_size: u64,
    pub compression: Compression,
    pub chunks: Vec<ChunkEntry>,
}

/// One index inside the indexes object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub index: IndexType,
    /// Byte position in the indexes object.
    pub position: u64,
    pub size: u64,
    pub crc32c: u32,
}

/// The indexes object: the indexes back to back. A segment without a transaction index has no
/// `TRANSACTION` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexesLayout {
    pub size: u64,
    pub entries: Vec<IndexEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    pub segment: SegmentMetadata,
    pub log: LogLayout,
    pub indexes: IndexesLayout,
}

/// Why a stored manifest cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ManifestError(String);

impl Manifest {
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing plain structs and enums to JSON cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Parses and checks a manifest: version known, chunk sizes consistent with the layout,
    /// indexes inside the indexes object.
    pub fn from_json(bytes: &[u8]) -> Result<Self, ManifestError> {
        #[derive(Deserialize)]
        struct Version {
            format_version: u32,
        }
        let v: Version = serde_json::from_slice(bytes)
            .map_err(|e| ManifestError(format!("not a strata manifest: {e}")))?;
        if v.format_version != FORMAT_VERSION {
            return Err(ManifestError(format!(
                "format_version {} is not {FORMAT_VERSION}, the one this strata reads; upgrade strata",
                v.format_version
            )));
        }
        let m: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| ManifestError(format!("not a strata manifest: {e}")))?;
        m.check()?;
        Ok(m)
    }

    fn check(&self) -> Result<(), ManifestError> {
        let log = &self.log;
        let layout = ChunkLayout::new(log.chunk_size, log.size)
            .ok_or_else(|| ManifestError("log.chunk_size is 0".into()))?;
        if layout.chunk_count() != log.chunks.len() as u64 {
            return Err(ManifestError(format!(
                "log has {} chunks, but {} bytes in chunks of {} make {}",
                log.chunks.len(),
                log.size,
                log.chunk_size,
                layout.chunk_count()
            )));
        }
        for (i, c) in log.chunks.iter().enumerate() {
            if Some(c.size) != layout.chunk_len(i as u64) {
                return Err(ManifestError(format!(
                    "chunk {i} has size {}, the layout says {:?}",
                    c.size,
                    layout.chunk_len(i as u64)
                )));
            }
            if log.compression == Compression::None
                && (c.stored_size != c.size || c.stored_crc32c != c.crc32c)
            {
                return Err(ManifestError(format!(
                    "chunk {i} is uncompressed but its stored size or checksum differs"
                )));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for e in &self.indexes.entries {
            if !seen.insert(e.index) {
                return Err(ManifestError(format!("index {} listed twice", e.index)));
            }
            let end = e.position.checked_add(e.size);
            if end.is_none_or(|end| end > self.indexes.size) {
                return Err(ManifestError(format!(
                    "index {} at {}+{} lies outside the {}-byte indexes object",
                    e.index, e.position, e.size, self.indexes.size
                )));
            }
        }
        Ok(())
    }

    pub fn index(&self, t: IndexType) -> Option<&IndexEntry> {
        self.indexes.entries.iter().find(|e| e.index == t)
    }

    /// The places of stored chunks in the `.log` object (see [`stored_offsets`]).
    pub fn stored_offsets(&self) -> Vec<u64> {
        stored_offsets(self.log.chunks.iter().map(|c| c.stored_size))
    }
}

/// A manifest ready for reads: layout and stored chunk places computed once.
#[derive(Debug, Clone)]
pub struct LoadedManifest {
    pub manifest: Manifest,
    layout: ChunkLayout,
    offsets: Vec<u64>,
}

impl LoadedManifest {
    pub fn new(manifest: Manifest) -> Result<Self, ManifestError> {
        manifest.check()?;
        let layout = ChunkLayout::new(manifest.log.chunk_size, manifest.log.size)
            .ok_or_else(|| ManifestError("log.chunk_size is 0".into()))?;
        let offsets = manifest.stored_offsets();
        Ok(Self {
            manifest,
            layout,
            offsets,
        })
    }

    pub fn layout(&self) -> ChunkLayout {
        self.layout
    }

    /// Bytes of chunk `i` in the `.log` object.
    pub fn stored_range(&self, i: u64) -> Option<Range<u64>> {
        let i = usize::try_from(i).ok()?;
        Some(*self.offsets.get(i)?..*self.offsets.get(i + 1)?)
    }

    pub fn chunk(&self, i: u64) -> Option<&ChunkEntry> {
        self.manifest.log.chunks.get(usize::try_from(i).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Manifest {
        Manifest {
            format_version: FORMAT_VERSION,
            segment: serde_json::from_str(
                r#"{"topic": "orders", "topic_id": "AAECAwQFBgcICQoLDA0ODw", "partition": 3,
                "segment_id": "EBESExQVFhcYGRobHB0eHw", "start_offset": 100, "end_offset": 199,
                "max_timestamp_ms": 1700000000123, "event_timestamp_ms": 1700000000456,
                "broker_id": 1, "segment_size_bytes": 250, "leader_epochs": [[0, 100], [2, 150]]}"#,
            )
            .unwrap(),
            log: LogLayout {
                size: 250,
                chunk_size: 100,
                compression: Compression::Zstd,
                chunks: vec![
                    ChunkEntry {
                        size: 100,
                        stored_size: 40,
                        crc32c: 1,
                        stored_crc32c: 11,
                    },
                    ChunkEntry {
                        size: 100,
                        stored_size: 60,
                        crc32c: 2,
                        stored_crc32c: 12,
                    },
                    ChunkEntry {
                        size: 50,
                        stored_size: 55,
                        crc32c: 3,
                        stored_crc32c: 13,
                    },
                ],
            },
            indexes: IndexesLayout {
                size: 30,
                entries: vec![
                    IndexEntry {
                        index: IndexType::Offset,
                        position: 0,
                        size: 16,
                        crc32c: 7,
                    },
                    IndexEntry {
                        index: IndexType::Timestamp,
                        position: 16,
                        size: 12,
                        crc32c: 8,
                    },
                    IndexEntry {
                        index: IndexType::ProducerSnapshot,
                        position: 28,
                        size: 0,
                        crc32c: 0,
                    },
                    IndexEntry {
                        index: IndexType::LeaderEpoch,
                        position: 28,
                        size: 2,
                        crc32c: 9,
                    },
                ],
            },
        }
    }

    #[test]
    fn round_trips() {
        let m = sample();
        let back = Manifest::from_json(&m.to_json()).unwrap();
        assert_eq!(back, m);
        assert!(back.index(IndexType::Transaction).is_none());
        assert_eq!(back.index(IndexType::Timestamp).unwrap().position, 16);
        let json = String::from_utf8(m.to_json()).unwrap();
        assert!(json.contains("\"compression\": \"zstd\""), "{json}");
        assert!(json.contains("\"index\": \"LEADER_EPOCH\""), "{json}");
    }

    #[test]
    fn stored_places_are_computed() {
        let l = LoadedManifest::new(sample()).unwrap();
        assert_eq!(l.layout().chunk_count(), 3);
        assert_eq!(l.stored_range(0), Some(0..40));
        assert_eq!(l.stored_range(1), Some(40..100));
        assert_eq!(l.stored_range(2), Some(100..155));
        assert_eq!(l.stored_range(3), None);
        assert_eq!(l.chunk(2).unwrap().crc32c, 3);
    }

    #[test]
    fn inconsistent_manifests_are_refused() {
        let check = |f: &dyn Fn(&mut Manifest)| {
            let mut m = sample();
            f(&mut m);
            Manifest::from_json(&m.to_json()).unwrap_err().to_string()
        };
        assert!(check(&|m| m.format_version = 2).contains("format_version 2"));
        assert!(check(&|m| {
            m.log.chunks.pop();
        })
        .contains("chunks"));
        assert!(check(&|m| m.log.chunks[0].size = 99).contains("chunk 0"));
        assert!(check(&|m| m.log.chunk_size = 0).contains("chunk_size"));
        assert!(check(&|m| m.indexes.entries[3].size = 3).contains("LEADER_EPOCH"));
        assert!(check(&|m| m.indexes.entries[1].index = IndexType::Offset).contains("twice"));
        assert!(check(&|m| {
            m.log.compression = Compression::None;
        })
        .contains("uncompressed"));
        let err = Manifest::from_json(b"{\"format_version\": 1}").unwrap_err();
        assert!(err.to_string().contains("not a strata manifest"), "{err}");
        assert!(Manifest::from_json(b"garbage").is_err());
    }
}
