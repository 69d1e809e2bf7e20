//! Object names of tiered segments (pure):
//! `<prefix>/<topic>-<topicId>/<partition>/<20-digit start offset>-<segment id>.{log,indexes,manifest}`.
//!
//! The topic id keeps a re-created topic of the same name apart; the zero-padded start offset
//! makes listing order offset order; the segment id (new for each copy attempt) makes a retry of
//! the same attempt overwrite and different attempts never collide.

use super::protocol::SegmentMetadata;
use crate::layout::DumpDir;

/// The three objects of one segment, relative to the store root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentKeys {
    /// The `.log` bytes, chunk after chunk (each possibly compressed).
    pub log: String,
    /// Every index of the segment, one after the other.
    pub indexes: String,
    /// Written last: its presence means the other two are complete.
    pub manifest: String,
}

impl SegmentKeys {
    pub fn new(prefix: &DumpDir, s: &SegmentMetadata) -> Self {
        let base = format!(
            "{}{:020}-{}",
            partition_prefix(prefix, s),
            s.start_offset,
            s.segment_id
        );
        Self {
            log: format!("{base}.log"),
            indexes: format!("{base}.indexes"),
            manifest: format!("{base}.manifest"),
        }
    }

    /// Every key, manifest first: the order in which delete removes them, so a reader never
    /// finds a manifest whose data is gone.
    pub fn all(&self) -> [&str; 3] {
        [&self.manifest, &self.log, &self.indexes]
    }
}

/// `<prefix>/<topic>-<topicId>/`: everything tiered for one topic incarnation.
pub fn topic_prefix(prefix: &DumpDir, s: &SegmentMetadata) -> String {
    format!("{}{}-{}/", prefix.prefix(), s.topic, s.topic_id)
}

/// `<prefix>/<topic>-<topicId>/<partition>/`.
pub fn partition_prefix(prefix: &DumpDir, s: &SegmentMetadata) -> String {
    format!("{}{}/", topic_prefix(prefix, s), s.partition)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment() -> SegmentMetadata {
        serde_json::from_str(
            r#"{"topic": "orders.v1", "topic_id": "AAECAwQFBgcICQoLDA0ODw", "partition": 3,
            "segment_id": "EBESExQVFhcYGRobHB0eHw", "start_offset": 100, "end_offset": 199,
            "max_timestamp_ms": 1, "event_timestamp_ms": 2, "broker_id": 1,
            "segment_size_bytes": 4096, "leader_epochs": [[0, 100]]}"#,
        )
        .unwrap()
    }

    #[test]
    fn keys_follow_the_documented_layout() {
        let k = SegmentKeys::new(&DumpDir::parse("tiered/prod").unwrap(), &segment());
        let base = "tiered/prod/orders.v1-AAECAwQFBgcICQoLDA0ODw/3/00000000000000000100-EBESExQVFhcYGRobHB0eHw";
        assert_eq!(k.log, format!("{base}.log"));
        assert_eq!(k.indexes, format!("{base}.indexes"));
        assert_eq!(k.manifest, format!("{base}.manifest"));
        assert_eq!(k.all()[0], k.manifest);
    }

    #[test]
    fn an_empty_prefix_means_the_store_root() {
        let k = SegmentKeys::new(&DumpDir::default(), &segment());
        assert!(k.log.starts_with("orders.v1-AAECAwQFBgcICQoLDA0ODw/3/"));
        assert_eq!(
            topic_prefix(&DumpDir::default(), &segment()),
            "orders.v1-AAECAwQFBgcICQoLDA0ODw/"
        );
    }

    #[test]
    fn zero_padding_sorts_by_offset() {
        let p = DumpDir::parse("t").unwrap();
        let mut a = segment();
        a.start_offset = 9;
        let mut b = segment();
        b.start_offset = 10;
        assert!(SegmentKeys::new(&p, &a).log < SegmentKeys::new(&p, &b).log);
    }
}
