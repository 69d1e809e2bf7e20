//! Restore progress on local disk: a small JSON file naming every archive object whose records
//! were all acknowledged by Kafka, plus the settings it was made with.
//!
//! Written after each finished object, atomically (temp file, fsync, rename, fsync of the
//! directory), so a killed restore leaves either the previous or the new version. A checkpoint
//! made with other settings (source, topics, range, target...) is refused, not silently reused.

use crate::config::RestoreConfig;
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

    /// Marks an object finished (in memory only); `last_offset` is its highest archived offset.
    pub fn mark(
        &mut self,
        key: &str,
        finished: Finished,
        topic: &str,
        partition: i32,
        last_offset: Option<i64>,
    ) {
        self.body.finished.insert(key.to_string(), finished);
        if let Some(o) = last_offset {
            let e = self
                .body
                .last_offsets
                .entry(partition_key(topic, partition))
                .or_insert(o);
            *e = (*e).max(o);
        }
    }

    /// Marks an object finished and writes the file durably before returning.
    pub fn finish(
        &mut self,
        key: &str,
        finished: Finished,
        topic: &str,
        partition: i32,
        last_offset: Option<i64>,
    ) -> Result<(), CheckpointError> {
        self.mark(key, finished, topic, partition, last_offset);
        self.save()
    }

    /// Writes the whole file: temp file in the same directory, fsync, rename, fsync directory.
    pub fn save(&self) -> Result<(), CheckpointError> {
        let err = |what: &str, e: std::io::Error| CheckpointError::Io {
            path: self.path.clone(),
            detail: format!("{what}: {e}; check that the directory exists and is writable"),
        };
        let data = serde_json::to_vec_pretty(&self.body).map_err(|e| CheckpointError::Io {
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
        cp.finish("a/t+0+1.jsonl", Finished { records: 3 }, "t", 0, Some(9))
            .unwrap();
        cp.finish("a/t+0+2.jsonl", Finished { records: 1 }, "t", 0, Some(4))
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
        cp.finish("k", Finished { records: 1 }, "t", 0, None)
            .unwrap();
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
