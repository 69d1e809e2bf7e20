//! Opening the broker's segment files for a copy: only regular files of the segment's own
//! partition directory under a configured log dir, named after the segment, reached without
//! following any symbolic link, and never larger than the broker declared.
//!
//! Each file is opened relative to a log dir handle taken at start (`openat` with
//! `O_NOFOLLOW` at every level), then checked on the open descriptor, so a path swapped for a
//! link or a device between the check and the read cannot redirect the read.

use super::error::TierError;
use super::protocol::{FieldError, SegmentFiles, SegmentMetadata};
use rustix::fs::{FileType, Mode, OFlags};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// Largest index file read (offset, time, transaction index, producer snapshot): Kafka caps
/// indexes at `segment.index.bytes` (10 MiB by default).
pub const MAX_INDEX_BYTES: u64 = 64 << 20;

/// One configured log dir: its path as configured and canonical (the broker may name files by
/// either), and a handle every open starts from.
struct LogDir {
    configured: PathBuf,
    canonical: PathBuf,
    handle: OwnedFd,
}

/// The broker's log dirs, opened at start.
pub struct LogDirs(Vec<LogDir>);

/// A segment file opened for reading, with the size it had when opened.
pub struct OpenedFile {
    pub file: std::fs::File,
    pub size: u64,
    pub path: PathBuf,
}

impl LogDirs {
    /// Opens every dir; an error names the one that is unusable.
    pub fn open(dirs: &[PathBuf]) -> Result<Self, TierError> {
        let mut out = Vec::new();
        for d in dirs {
            let fail = |e: std::io::Error| TierError::LogDir {
                path: d.clone(),
                source: TierError::io(e),
            };
            let canonical = std::fs::canonicalize(d).map_err(fail)?;
            let handle = rustix::fs::open(
                &canonical,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| fail(e.into()))?;
            out.push(LogDir {
                configured: d.clone(),
                canonical,
                handle,
            });
        }
        Ok(Self(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Opens the file a copy request names in `field`; `suffix` is its expected extension and
    /// `cap` the most bytes it may hold.
    pub fn open_segment_file(
        &self,
        seg: &SegmentMetadata,
        field: &'static str,
        path: &Path,
        cap: u64,
    ) -> Result<OpenedFile, TierError> {
        let bad = |message: String| TierError::BadRequest(FieldError::new(field, message));
        if self.is_empty() {
            return Err(TierError::CopyByPathOff);
        }
        let (dir, part, name) = self.split(path).ok_or_else(|| {
            bad(format!(
                "{} is not a file directly inside a partition directory of tier.log_dirs ({})",
                path.display(),
                self.describe()
            ))
        })?;
        let expected_part = format!("{}-{}", seg.topic, seg.partition);
        if part != expected_part {
            return Err(bad(format!(
                "{} is not in the segment's partition directory {expected_part}",
                path.display()
            )));
        }
        check_name(seg, field, name).map_err(|m| bad(format!("{}: {m}", path.display())))?;
        let read_fail = |e: std::io::Error| TierError::ReadFile {
            segment: seg.describe(),
            path: path.to_path_buf(),
            source: TierError::io(e),
        };
        let part_fd = rustix::fs::openat(
            &dir.handle,
            part,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| read_fail(e.into()))?;
        // NONBLOCK: opening a FIFO planted under the name must not hang the copy.
        let fd = rustix::fs::openat(
            &part_fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => bad(format!(
                "{} is a symbolic link; only the broker's own files are copied",
                path.display()
            )),
            e => read_fail(e.into()),
        })?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| read_fail(e.into()))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(bad(format!(
                "{} is not a regular file; only the broker's own segment files are copied",
                path.display()
            )));
        }
        let size = stat.st_size as u64;
        if size > cap {
            return Err(bad(format!(
                "{} holds {size} bytes, more than the {cap} allowed",
                path.display()
            )));
        }
        Ok(OpenedFile {
            file: std::fs::File::from(fd),
            size,
            path: path.to_path_buf(),
        })
    }

    /// `(log dir, partition dir name, file name)` when `path` is `<log dir>/<part>/<name>`.
    fn split<'a>(&self, path: &'a Path) -> Option<(&LogDir, &'a str, &'a str)> {
        self.0.iter().find_map(|d| {
            let rest = path
                .strip_prefix(&d.configured)
                .or_else(|_| path.strip_prefix(&d.canonical))
                .ok()?;
            let mut parts = rest.components();
            let (Some(Component::Normal(part)), Some(Component::Normal(name)), None) =
                (parts.next(), parts.next(), parts.next())
            else {
                return None;
            };
            Some((d, part.to_str()?, name.to_str()?))
        })
    }

    fn describe(&self) -> String {
        let dirs: Vec<String> = self
            .0
            .iter()
            .map(|d| d.configured.display().to_string())
            .collect();
        dirs.join(", ")
    }

    /// Opens every file of a copy request, checking the `.log` against the declared size.
    pub fn open_all(
        &self,
        seg: &SegmentMetadata,
        f: &SegmentFiles,
    ) -> Result<SegmentSources, TierError> {
        // Only `declared` bytes are ever read: a file of another size is refused first.
        let declared = seg.segment_size_bytes as u64;
        let log = self.open_segment_file(seg, "files.log", &f.log, u64::MAX)?;
        if log.size != declared {
            return Err(TierError::BadRequest(FieldError::new(
                "files.log",
                format!(
                    "{} holds {} bytes, but the broker declared segment_size_bytes {declared}",
                    log.path.display(),
                    log.size
                ),
            )));
        }
        let index = |field, p: &Path| self.open_segment_file(seg, field, p, MAX_INDEX_BYTES);
        Ok(SegmentSources {
            log,
            offset_index: index("files.offset_index", &f.offset_index)?,
            time_index: index("files.time_index", &f.time_index)?,
            transaction_index: match &f.transaction_index {
                Some(p) => Some(index("files.transaction_index", p)?),
                None => None,
            },
            producer_snapshot: index("files.producer_snapshot", &f.producer_snapshot)?,
        })
    }
}

/// The opened files of one copy.
pub struct SegmentSources {
    pub log: OpenedFile,
    pub offset_index: OpenedFile,
    pub time_index: OpenedFile,
    pub transaction_index: Option<OpenedFile>,
    pub producer_snapshot: OpenedFile,
}

/// Kafka names a segment's files by its base offset in 20 digits; the producer snapshot by the
/// offset after the segment.
fn check_name(seg: &SegmentMetadata, field: &str, name: &str) -> Result<(), String> {
    let (stem, ext) = name
        .rsplit_once('.')
        .ok_or_else(|| format!("{name:?} has no extension"))?;
    let want_ext = match field {
        "files.log" => "log",
        "files.offset_index" => "index",
        "files.time_index" => "timeindex",
        "files.transaction_index" => "txnindex",
        _ => "snapshot",
    };
    if ext != want_ext {
        return Err(format!("{name:?} is not a .{want_ext} file"));
    }
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{name:?} is not named by a 20-digit offset"));
    }
    if want_ext != "snapshot" && stem != format!("{:020}", seg.start_offset) {
        return Err(format!(
            "{name:?} is not named after the segment's start offset {}",
            seg.start_offset
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment() -> SegmentMetadata {
        serde_json::from_str(
            r#"{"topic": "orders", "topic_id": "AAECAwQFBgcICQoLDA0ODw", "partition": 3,
 "segment_id": "EBESExQVFhcYGRobHB0eHw", "start_offset": 100, "end_offset": 199,
 "max_timestamp_ms": 1, "event_timestamp_ms": 1, "broker_id": 1,
 "segment_size_bytes": 5, "leader_epochs": [[0, 100]]}"#,
        )
        .unwrap()
    }

    const LOG: &str = "00000000000000000100.log";

    fn layout() -> (tempfile::TempDir, PathBuf, LogDirs) {
        let tmp = tempfile::tempdir().unwrap();
        let logs = tmp.path().join("logs");
        let part = logs.join("orders-3");
        std::fs::create_dir_all(&part).unwrap();
        std::fs::write(part.join(LOG), b"12345").unwrap();
        std::fs::write(part.join("00000000000000000100.index"), b"").unwrap();
        let dirs = LogDirs::open(std::slice::from_ref(&logs)).unwrap();
        (tmp, part, dirs)
    }

    fn open(dirs: &LogDirs, field: &'static str, p: &Path, cap: u64) -> Result<u64, String> {
        dirs.open_segment_file(&segment(), field, p, cap)
            .map(|f| f.size)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_segments_own_files_open() {
        let (_t, part, dirs) = layout();
        assert_eq!(open(&dirs, "files.log", &part.join(LOG), 5), Ok(5));
        let index = part.join("00000000000000000100.index");
        assert_eq!(open(&dirs, "files.offset_index", &index, 10), Ok(0));
    }

    #[test]
    fn anything_else_is_refused() {
        let (tmp, part, dirs) = layout();
        let refused = |field, p: &Path, want: &str| {
            let e = open(&dirs, field, p, 1 << 20).unwrap_err();
            assert!(e.contains(want), "{}: {e}", p.display());
            assert!(e.contains(field), "{e}");
        };
        refused(
            "files.log",
            Path::new("/proc/self/environ"),
            "not a file directly inside",
        );
        refused(
            "files.log",
            Path::new("/dev/zero"),
            "not a file directly inside",
        );
        // Outside the partition directory, or in another partition's.
        std::fs::write(part.parent().unwrap().join(LOG), b"x").unwrap();
        refused(
            "files.log",
            &part.parent().unwrap().join(LOG),
            "not a file directly inside",
        );
        let other = part.parent().unwrap().join("orders-4");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join(LOG), b"12345").unwrap();
        refused(
            "files.log",
            &other.join(LOG),
            "not in the segment's partition directory orders-3",
        );
        refused(
            "files.log",
            &part.join("..").join("orders-3").join(LOG),
            "not a file directly inside",
        );
        // Names that are not the segment's.
        refused(
            "files.log",
            &part.join("00000000000000000099.log"),
            "start offset 100",
        );
        refused(
            "files.log",
            &part.join("leader-epoch-checkpoint"),
            "extension",
        );
        refused(
            "files.offset_index",
            &part.join(LOG),
            "is not a .index file",
        );
        // A link to a secret, planted under the segment's name.
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, b"s3cr3t").unwrap();
        let link_part = part.parent().unwrap().join("orders-3");
        std::fs::remove_file(link_part.join(LOG)).unwrap();
        std::os::unix::fs::symlink(&secret, link_part.join(LOG)).unwrap();
        refused("files.log", &part.join(LOG), "symbolic link");
        // A FIFO (or device) under the name: refused without blocking.
        std::fs::remove_file(part.join(LOG)).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            part.join(LOG),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        refused("files.log", &part.join(LOG), "not a regular file");
        // A partition directory that is a link elsewhere.
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join(LOG), b"12345").unwrap();
        std::fs::remove_dir_all(&part).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &part).unwrap();
        let e = open(&dirs, "files.log", &part.join(LOG), 5).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
    }

    #[test]
    fn sizes_are_bounded() {
        let (_t, part, dirs) = layout();
        let e = open(&dirs, "files.log", &part.join(LOG), 4).unwrap_err();
        assert!(e.contains("more than the 4 allowed"), "{e}");
        let mut seg = segment();
        let files = SegmentFiles {
            log: part.join(LOG),
            offset_index: part.join("00000000000000000100.index"),
            time_index: part.join("00000000000000000100.index"),
            transaction_index: None,
            producer_snapshot: part.join("00000000000000000200.snapshot"),
        };
        seg.segment_size_bytes = 6;
        let e = dirs.open_all(&seg, &files).err().unwrap().to_string();
        assert!(e.contains("declared segment_size_bytes 6"), "{e}");
    }

    #[test]
    fn no_log_dirs_means_no_copies_by_path() {
        let dirs = LogDirs::open(&[]).unwrap();
        let e = open(&dirs, "files.log", Path::new("/x/orders-3/a.log"), 5).unwrap_err();
        assert!(e.contains("tier.log_dirs"), "{e}");
    }
}
