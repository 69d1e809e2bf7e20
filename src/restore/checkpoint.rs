//! Restore progress on local disk: a small JSON file naming every archive object whose records
//! were all acknowledged by Kafka, the exact offset map of what they restored, and the settings
//! it was made with.
//!
//! Written after each finished object, atomically (temp file, fsync, rename, fsync of the
//! directory), so a killed restore leaves either the previous or the new version, each with
//! its offset map whole. A checkpoint made with other settings (source, topics, range,
//! target...) is refused, not silently reused.

use super::offset_map::Ranges;
use crate::config::RestoreConfig;
use crate::layout::ObjectName;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

const VERSION: u32 = 1;

/// Why the checkpoint cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint {path}: {detail}")]
    Io { path: PathBuf, detail: String },
    #[error("checkpoint {path} is not a strata restore checkpoint ({detail}); pass another --checkpoint or remove the file")]
    Invalid { path: PathBuf, detail: String },
    #[error("checkpoint {path} belongs to a restore with other settings ({differences}); rerun with the same settings to resume it, or pass another --checkpoint (or delete this one) to start a new restore")]
    Mismatch { path: PathBuf, differences: String },
}

/// The settings that decide which records go where; a checkpoint only resumes the same ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings(BTreeMap<String, String>);

impl Settings {
    pub fn of(cfg: &RestoreConfig) -> Self {
        let opt = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map_or("-".to_string(), |t| t.to_rfc3339())
        };
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            m.insert(k.to_string(), v);
        };
        put("source", cfg.store.url.to_string());
        put("directory", cfg.directory.as_str().to_string());
        put(
            "time_directory",
            cfg.time_directory
                .as_ref()
                .map_or("<any>".into(), |t| t.to_string()),
        );
        put("time_zone", cfg.time_zone.to_string());
        put(
            "topics",
            cfg.topics
                .as_ref()
                .map_or("<all>".into(), |t| t.to_string()),
        );
        put("from", opt(cfg.from));
        put("to", opt(cfg.to));
        put("target_prefix", cfg.naming.prefix.clone());
        put(
            "topic_map",
            cfg.naming
                .map
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
        );
        put("partitioning", format!("{:?}", cfg.partitioning));
        put(
            "partitions",
            cfg.partitions.map_or("-".into(), |p| p.to_string()),
        );
        put("target", cfg.kafka.bootstrap_servers.join(","));
        put("record_delimiter", cfg.text.delimiter.to_string());
        put(
            "key_separator",
            cfg.text
                .key_separator
                .as_ref()
                .map_or("-".into(), |s| String::from_utf8_lossy(s).into_owned()),
        );
        put("exactly_once", cfg.exactly_once.to_string());
        Self(m)
    }

    /// A short stable hash (FNV-1a, 64 bits) of the settings, in hex.
    pub fn fingerprint(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (k, v) in &self.0 {
            for b in k.bytes().chain([0]).chain(v.bytes()).chain([b'\n']) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("{h:016x}")
    }

    /// `key: was -> now` for every setting that differs, for the mismatch message.
    fn differences(&self, stored: &BTreeMap<String, String>) -> String {
        let keys: std::collections::BTreeSet<&String> =
            self.0.keys().chain(stored.keys()).collect();
        keys.into_iter()
            .filter(|k| self.0.get(*k) != stored.get(*k))
            .map(|k| {
                format!(
                    "{k}: {:?} -> {:?}",
                    stored.get(k).map_or("<unset>", String::as_str),
                    self.0.get(k).map_or("<unset>", String::as_str)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// What the checkpoint remembers about a finished object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// Records sent from it.
    pub records: u64,
    /// Whether the partition's offset map holds its records (false for text archives, which
    /// carry no offsets, key-hash placement, and checkpoints of a strata without the map).
    #[serde(default)]
    pub mapped: bool,
}

/// Where one archived partition's records landed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMap {
    pub target_topic: String,
    pub target_partition: i32,
    pub ranges: Ranges,
}

/// A finished object, as [`Checkpoint::finish`] records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// The archived topic and partition.
    pub topic: String,
    pub partition: i32,
    /// Records sent from it.
    pub records: u64,
    /// Its highest archived offset.
    pub last_offset: Option<i64>,
    /// Target topic, partition and the ranges its records landed at; `None` when unknown.
    pub map: Option<(String, i32, Ranges)>,
}

/// A finished object whose records are missing from its partition's offset map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmapped {
    pub object: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileBody {
    version: u32,
    fingerprint: String,
    settings: BTreeMap<String, String>,
    /// Finished archive objects by key.
    finished: BTreeMap<String, Finished>,
    /// Highest archived offset of finished objects, per `topic+partition`: records at or below
    /// it in overlapping objects were sent already.
    last_offsets: BTreeMap<String, i64>,
    /// The exact offset map of the finished objects, per archived `topic+partition`.
    #[serde(default)]
    offset_maps: BTreeMap<String, PartitionMap>,
}

/// The checkpoint of one restore.
#[derive(Debug)]
pub struct Checkpoint {
    path: PathBuf,
    body: FileBody,
}

fn partition_key(topic: &str, partition: i32) -> String {
    format!("{topic}+{partition}")
}

impl Checkpoint {
    /// The default location: `strata-restore-<fingerprint>.json` in the working directory.
    pub fn default_path(settings: &Settings) -> PathBuf {
        PathBuf::from(format!("strata-restore-{}.json", settings.fingerprint()))
    }

    /// Loads the checkpoint at `path`, or starts an empty one when the file does not exist
    /// (nothing is written until the first object finishes).
    pub fn open(path: &Path, settings: &Settings) -> Result<Self, CheckpointError> {
        let body = match std::fs::read(path) {
            Ok(bytes) => {
                let body: FileBody =
                    serde_json::from_slice(&bytes).map_err(|e| CheckpointError::Invalid {
                        path: path.to_path_buf(),
                        detail: e.to_string(),
                    })?;
                if body.version != VERSION {
                    return Err(CheckpointError::Invalid {
                        path: path.to_path_buf(),
                        detail: format!("version {} (this strata writes {VERSION})", body.version),
                    });
                }
                if body.fingerprint != settings.fingerprint() || body.settings != settings.0 {
                    return Err(CheckpointError::Mismatch {
                        path: path.to_path_buf(),
                        differences: settings.differences(&body.settings),
                    });
                }
                body
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileBody {
                version: VERSION,
                fingerprint: settings.fingerprint(),
                settings: settings.0.clone(),
                finished: BTreeMap::new(),
                last_offsets: BTreeMap::new(),
                offset_maps: BTreeMap::new(),
            },
            Err(e) => {
                return Err(CheckpointError::Io {
                    path: path.to_path_buf(),
                    detail: format!("cannot read it: {e}"),
                })
            }
        };
        Ok(Self {
            path: path.to_path_buf(),
            body,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_finished(&self, key: &str) -> bool {
        self.body.finished.contains_key(key)
    }

    pub fn finished_count(&self) -> usize {
        self.body.finished.len()
    }

    /// Keys of finished objects (tests and tools).
    pub fn finished_keys(&self) -> impl Iterator<Item = &str> {
        self.body.finished.keys().map(String::as_str)
    }

    pub fn last_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.body
            .last_offsets
            .get(&partition_key(topic, partition))
            .copied()
    }

    /// Marks an object finished (in memory only) and adds its records to the partition's
    /// offset map. Marking a finished object again changes nothing.
    pub fn mark(&mut self, key: &str, done: Done) {
        if self.body.finished.contains_key(key) {
            return;
        }
        let pk = partition_key(&done.topic, done.partition);
        let mut mapped = false;
        if let Some((target_topic, target_partition, ranges)) = done.map {
            let m = self
                .body
                .offset_maps
                .entry(pk.clone())
                .or_insert_with(|| PartitionMap {
                    target_topic: target_topic.clone(),
                    target_partition,
                    ranges: Ranges::new(),
                });
            if m.target_topic != target_topic || m.target_partition != target_partition {
                tracing::warn!(object = %key, "records of one archived partition went to two target partitions; its offset map is incomplete");
            } else if let Err(at) = m.ranges.extend(&ranges) {
                tracing::warn!(object = %key, source = at.source, target = at.target, "object restored out of offset order; its partition's offset map is incomplete");
            } else {
                mapped = true;
            }
        }
        self.body.finished.insert(
            key.to_string(),
            Finished {
                records: done.records,
                mapped,
            },
        );
        if let Some(o) = done.last_offset {
            let e = self.body.last_offsets.entry(pk).or_insert(o);
            *e = (*e).max(o);
        }
    }

    /// Marks an object finished and writes the file durably before returning.
    pub fn finish(&mut self, key: &str, done: Done) -> Result<(), CheckpointError> {
        self.mark(key, done);
        self.save()
    }

    /// The offset map of an archived partition (`None`: nothing of it restored), or the first
    /// finished object of the partition whose records it lacks.
    pub fn offset_map(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Option<&PartitionMap>, Unmapped> {
        let of_partition = |key: &str| {
            ObjectName::parse(key.rsplit('/').next().unwrap_or(key))
                .is_some_and(|n| n.topic == topic && n.partition == partition)
        };
        if let Some((key, _)) = self
            .body
            .finished
            .iter()
            .find(|(k, f)| !f.mapped && f.records > 0 && of_partition(k))
        {
            return Err(Unmapped {
                object: key.clone(),
            });
        }
        Ok(self.body.offset_maps.get(&partition_key(topic, partition)))
    }

    /// Every partition's offset map, by archived `topic+partition` (the benchmark's sizes).
    pub fn offset_maps(&self) -> &BTreeMap<String, PartitionMap> {
        &self.body.offset_maps
    }

    /// Writes the whole file: temp file in the same directory, fsync, rename, fsync directory.
    pub fn save(&self) -> Result<(), CheckpointError> {
        let err = |what: &str, e: std::io::Error| CheckpointError::Io {
            path: self.path.clone(),
            detail: format!("{what}: {e}; check that the directory exists and is writable"),
        };
        let data = serde_json::to_vec(&self.body).map_err(|e| CheckpointError::Io {
            path: self.path.clone(),
            detail: e.to_string(),
        })?;
        let file_name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "checkpoint".into());
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
        let mut f = std::fs::File::create(&tmp).map_err(|e| err("cannot create temp file", e))?;
        f.write_all(&data).map_err(|e| err("cannot write", e))?;
        f.sync_all().map_err(|e| err("cannot fsync", e))?;
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(|e| err("cannot rename temp file", e))?;
        if let Ok(d) = std::fs::File::open(&dir) {
            // Makes the rename durable; some filesystems refuse fsync on directories.
            let _ = d.sync_all();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn settings(extra: &str) -> Settings {
        let c = Config::from_toml(
            &format!("[store]\nurl = \"file:///a\"\n[restore]\ndirectory = \"d\"\n{extra}"),
            "t",
            |_| None,
        )
        .unwrap();
        Settings::of(&c.restore.unwrap())
    }

    fn done(
        topic: &str,
        partition: i32,
        records: u64,
        last_offset: Option<i64>,
        pairs: Option<&[(i64, i64)]>,
    ) -> Done {
        Done {
            topic: topic.into(),
            partition,
            records,
            last_offset,
            map: pairs.map(|pairs| {
                let mut r = Ranges::new();
                for (s, t) in pairs {
                    r.push(*s, *t).unwrap();
                }
                (format!("restored.{topic}"), partition, r)
            }),
        }
    }

    fn triples(m: &PartitionMap) -> Vec<(i64, i64, i64)> {
        m.ranges.as_slice().iter().map(|r| (*r).into()).collect()
    }

    #[test]
    fn the_offset_map_is_saved_with_the_objects_and_resumes_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.json");
        let s = settings("");
        let mut cp = Checkpoint::open(&path, &s).unwrap();
        cp.finish(
            "a/t+0+00000000000000000000.jsonl",
            done("t", 0, 3, Some(2), Some(&[(0, 0), (1, 1), (2, 2)])),
        )
        .unwrap();
        // The next object continues the range; one with a compaction gap adds one.
        cp.finish(
            "a/t+0+00000000000000000003.jsonl",
            done("t", 0, 2, Some(6), Some(&[(3, 3), (6, 4)])),
        )
        .unwrap();
        cp.finish(
            "a/t+1+00000000000000000000.jsonl",
            done("t", 1, 1, Some(0), Some(&[(0, 0)])),
        )
        .unwrap();
        let again = Checkpoint::open(&path, &s).unwrap();
        let m = again.offset_map("t", 0).unwrap().unwrap();
        assert_eq!(triples(m), vec![(0, 0, 4), (6, 4, 1)]);
        assert_eq!(
            (m.target_topic.as_str(), m.target_partition),
            ("restored.t", 0)
        );
        assert_eq!(again.offset_map("t", 2), Ok(None), "nothing restored there");
        // Marking a finished object again (an exactly-once marker the file knew) is a no-op.
        let mut again = again;
        again.mark(
            "a/t+0+00000000000000000003.jsonl",
            done("t", 0, 2, Some(6), Some(&[(3, 3), (6, 4)])),
        );
        assert_eq!(
            triples(again.offset_map("t", 0).unwrap().unwrap()),
            vec![(0, 0, 4), (6, 4, 1)]
        );
    }

    #[test]
    fn an_object_without_offsets_makes_its_partition_unmapped() {
        let dir = tempfile::tempdir().unwrap();
        let mut cp = Checkpoint::open(&dir.path().join("cp.json"), &settings("")).unwrap();
        cp.mark(
            "a/t+0+00000000000000000000.jsonl",
            done("t", 0, 2, Some(1), Some(&[(0, 0), (1, 1)])),
        );
        // A text object: records, but no offsets to map.
        cp.mark(
            "a/t+0+00000000000000000002.txt",
            done("t", 0, 5, None, None),
        );
        // An object that restored nothing (all out of range) needs no map.
        cp.mark(
            "a/t+1+00000000000000000000.jsonl",
            done("t", 1, 0, Some(9), None),
        );
        assert_eq!(
            cp.offset_map("t", 0),
            Err(Unmapped {
                object: "a/t+0+00000000000000000002.txt".into()
            })
        );
        assert_eq!(cp.offset_map("t", 1), Ok(None));
        // An object out of offset order is finished but not mapped.
        cp.mark(
            "a/u+0+00000000000000000005.jsonl",
            done("u", 0, 1, Some(5), Some(&[(5, 0)])),
        );
        cp.mark(
            "a/u+0+00000000000000000001.jsonl",
            done("u", 0, 1, Some(1), Some(&[(1, 1)])),
        );
        assert!(cp.is_finished("a/u+0+00000000000000000001.jsonl"));
        assert!(cp.offset_map("u", 0).is_err());
    }

    #[test]
    fn a_checkpoint_of_a_strata_without_the_map_is_read_as_unmapped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.json");
        let s = settings("");
        let old = serde_json::json!({
            "version": 1,
            "fingerprint": s.fingerprint(),
            "settings": s.0,
            "finished": {"a/t+0+00000000000000000000.jsonl": {"records": 3}},
            "last_offsets": {"t+0": 2},
        });
        std::fs::write(&path, serde_json::to_vec(&old).unwrap()).unwrap();
        let cp = Checkpoint::open(&path, &s).unwrap();
        assert!(cp.is_finished("a/t+0+00000000000000000000.jsonl"));
        assert!(
            cp.offset_map("t", 0).is_err(),
            "its records are not in any map"
        );
    }

    #[test]
    fn fingerprint_is_stable_and_setting_sensitive() {
        assert_eq!(settings("").fingerprint(), settings("").fingerprint());
        assert_ne!(
            settings("").fingerprint(),
            settings("target_prefix = \"x.\"").fingerprint()
        );
        assert_eq!(
            settings("").fingerprint(),
            settings("rate_limit_mib_per_sec = 3.0\nskip_corrupt = true").fingerprint(),
            "pace and error handling do not change what is written"
        );
    }

    #[test]
    fn round_trip_and_resume() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.json");
        let s = settings("");
        let mut cp = Checkpoint::open(&path, &s).unwrap();
        assert!(!path.exists(), "nothing written before the first object");
        cp.finish("a/t+0+1.jsonl", done("t", 0, 3, Some(9), None))
            .unwrap();
        cp.finish("a/t+0+2.jsonl", done("t", 0, 1, Some(4), None))
            .unwrap();
        let again = Checkpoint::open(&path, &s).unwrap();
        assert!(again.is_finished("a/t+0+1.jsonl"));
        assert!(!again.is_finished("a/t+0+3.jsonl"));
        assert_eq!(again.last_offset("t", 0), Some(9), "highest offset wins");
        assert_eq!(again.last_offset("t", 1), None);
        assert_eq!(again.finished_count(), 2);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temp files left: {leftovers:?}");
    }

    #[test]
    fn other_settings_are_refused_naming_the_difference() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.json");
        let mut cp = Checkpoint::open(&path, &settings("")).unwrap();
        cp.finish("k", done("t", 0, 1, None, None)).unwrap();
        let err = Checkpoint::open(&path, &settings("target_prefix = \"x.\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("target_prefix: \"\" -> \"x.\""), "{err}");
        assert!(err.contains("--checkpoint"), "{err}");
    }

    #[test]
    fn garbage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.json");
        std::fs::write(&path, b"{not json").unwrap();
        let err = Checkpoint::open(&path, &settings("")).unwrap_err();
        assert!(matches!(err, CheckpointError::Invalid { .. }), "{err}");
    }
}
