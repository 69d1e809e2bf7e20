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

/// The last `n` `/`-separated levels of `dirs` (where a time directory sits above an object),
/// or `None` when there are fewer.
pub fn trailing_levels(dirs: &str, n: usize) -> Option<&str> {
    if dirs.is_empty() || n == 0 {
        return None;
    }
    let levels = dirs.split('/').count();
    if levels < n {
        return None;
    }
    let skip = levels - n;
    let start = if skip == 0 {
        0
    } else {
        dirs.match_indices('/').nth(skip - 1)?.0 + 1
    };
    Some(&dirs[start..])
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
        let (dirs, file) = key.rsplit_once('/').unwrap();
        let rest = dirs.strip_prefix("backups/cdc/").unwrap();
        assert_eq!(
            trailing_levels(rest, fmt.depth()),
            Some("dt=2026-11-29/hr=07")
        );
        assert_eq!(ObjectName::parse(file), Some(name()));
    }

    #[test]
    fn trailing_levels_take_the_innermost() {
        assert_eq!(trailing_levels("a/b/c/d", 3), Some("b/c/d"));
        assert_eq!(trailing_levels("a/b/c", 3), Some("a/b/c"));
        assert_eq!(trailing_levels("b/c", 3), None);
        assert_eq!(trailing_levels("", 1), None);
        assert_eq!(trailing_levels("2026", 1), Some("2026"));
    }
}
