//! Where dump archives live: `<dump directory>/<time directory>/<topic>+<partition>+<offset>.<ext>`.
//!
//! Pure functions only. An object's key depends on its records alone (topic, partition, first
//! offset, time directory of the first record), so a replay after a crash overwrites instead of
//! duplicating; offsets are zero-padded to 20 digits so listing order is offset order.

pub mod timedir;

pub use timedir::{Granularity, TimeDirError, TimeDirFormat};

use std::fmt;

/// The file-name part of an archive key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    pub topic: String,
    pub partition: i32,
    pub first_offset: i64,
    /// Extension without the leading dot, such as `jsonl.zst`.
    pub extension: String,
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}+{}+{:020}.{}",
            self.topic, self.partition, self.first_offset, self.extension
        )
    }
}

impl ObjectName {
    /// Parses `topic+partition+offset.ext`. Kafka topic names cannot contain `+`, so the two
    /// separators are unambiguous.
    pub fn parse(file_name: &str) -> Option<Self> {
        let (topic, rest) = file_name.split_once('+')?;
        let (partition, rest) = rest.split_once('+')?;
        let (offset, extension) = rest.split_once('.')?;
        if topic.is_empty() || offset.len() != 20 || extension.is_empty() {
            return None;
        }
        Some(Self {
            topic: topic.to_string(),
            partition: partition.parse().ok().filter(|p: &i32| *p >= 0)?,
            first_offset: offset.parse().ok()?,
            extension: extension.to_string(),
        })
    }
}

/// A dump directory: zero or more `/`-separated levels inside the bucket or store root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DumpDir(String);

/// Why a dump directory was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DumpDirError {
    #[error("has an empty level (\"//\"); write levels separated by a single '/'")]
    EmptyLevel,
    #[error("has the level {0:?}, which would leave the bucket; use plain names")]
    DotLevel(String),
    #[error("contains {0:?}; use letters, digits and '-', '_', '.', '=', '/'")]
    BadChar(char),
}

impl DumpDir {
    /// Accepts `a/b/c` (leading and trailing slashes are dropped); empty means the root.
    pub fn parse(s: &str) -> Result<Self, DumpDirError> {
        let trimmed = s.trim_matches('/');
        if trimmed.is_empty() {
            return Ok(Self(String::new()));
        }
        for level in trimmed.split('/') {
            if level.is_empty() {
                return Err(DumpDirError::EmptyLevel);
            }
            if level == "." || level == ".." {
                return Err(DumpDirError::DotLevel(level.to_string()));
            }
        }
        if let Some(c) = trimmed
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '=' | '/')))
        {
            return Err(DumpDirError::BadChar(c));
        }
        Ok(Self(trimmed.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `dir/` or the empty string, ready to prefix a key or a listing.
    pub fn prefix(&self) -> String {
        if self.0.is_empty() {
            String::new()
        } else {
            format!("{}/", self.0)
        }
    }
}

/// The full key of an archive object.
pub fn object_key(dir: &DumpDir, time_dir: &str, name: &ObjectName) -> String {
    format!("{}{}/{}", dir.prefix(), time_dir, name)
}

/// An archive key split back into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedKey {
    pub time_dir: String,
    pub name: ObjectName,
}

/// Splits a key listed under `dir` into time directory and name, or `None` for keys that are not
/// archives of this layout (foreign files, temp files).
pub fn parse_key(dir: &DumpDir, format: &TimeDirFormat, key: &str) -> Option<ParsedKey> {
    let rest = key.strip_prefix(&dir.prefix())?;
    let (time_dir, file) = rest.rsplit_once('/')?;
    if time_dir.split('/').count() != format.depth() {
        return None;
    }
    Some(ParsedKey {
        time_dir: time_dir.to_string(),
        name: ObjectName::parse(file)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name() -> ObjectName {
        ObjectName {
            topic: "orders.v1".into(),
            partition: 7,
            first_offset: 1234,
            extension: "jsonl.zst".into(),
        }
    }

    #[test]
    fn name_renders_padded_and_parses_back() {
        let n = name();
        assert_eq!(n.to_string(), "orders.v1+7+00000000000000001234.jsonl.zst");
        assert_eq!(ObjectName::parse(&n.to_string()), Some(n));
    }

    #[test]
    fn name_parse_rejects_foreign_files() {
        for bad in [
            "orders+7+1234.jsonl",
            "orders+x+00000000000000001234.txt",
            "orders+-1+00000000000000001234.txt",
            "orders+7+00000000000000001234",
            "+7+00000000000000001234.txt",
            "README.md",
        ] {
            assert_eq!(ObjectName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn padded_names_sort_by_offset() {
        let mut names: Vec<String> = [5i64, 100, 20, 3_000_000_000]
            .iter()
            .map(|o| {
                ObjectName {
                    first_offset: *o,
                    ..name()
                }
                .to_string()
            })
            .collect();
        names.sort();
        let offsets: Vec<i64> = names
            .iter()
            .map(|n| ObjectName::parse(n).unwrap().first_offset)
            .collect();
        assert_eq!(offsets, vec![5, 20, 100, 3_000_000_000]);
    }

    #[test]
    fn dump_dir_rules() {
        assert_eq!(
            DumpDir::parse("/backups/orders/").unwrap().as_str(),
            "backups/orders"
        );
        assert_eq!(DumpDir::parse("").unwrap().prefix(), "");
        assert_eq!(DumpDir::parse("a//b"), Err(DumpDirError::EmptyLevel));
        assert_eq!(
            DumpDir::parse("a/../b"),
            Err(DumpDirError::DotLevel("..".into()))
        );
        assert_eq!(DumpDir::parse("a b"), Err(DumpDirError::BadChar(' ')));
    }

    #[test]
    fn key_round_trip() {
        let dir = DumpDir::parse("backups/cdc").unwrap();
        let fmt = TimeDirFormat::parse("dt=yyyy-MM-dd/hr=HH").unwrap();
        let key = object_key(&dir, "dt=2026-11-29/hr=07", &name());
        assert_eq!(
            key,
            "backups/cdc/dt=2026-11-29/hr=07/orders.v1+7+00000000000000001234.jsonl.zst"
        );
        let parsed = parse_key(&dir, &fmt, &key).unwrap();
        assert_eq!(parsed.time_dir, "dt=2026-11-29/hr=07");
        assert_eq!(parsed.name, name());
        assert_eq!(
            parse_key(
                &dir,
                &fmt,
                "backups/cdc/2026/orders+1+00000000000000000000.txt"
            ),
            None
        );
        assert_eq!(
            parse_key(
                &dir,
                &fmt,
                "other/dt=2026-11-29/hr=07/x+1+00000000000000000000.txt"
            ),
            None
        );
    }
}
