//! The JSON the bridge sends (see `bridge/kafka-rsm/README.md`), parsed into checked types.
//!
//! Identifiers are validated while parsing so that nothing malformed reaches an object key;
//! every refusal names the field, because the bridge shows the message in the broker's log.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// A request field that does not hold what the protocol promises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: &'static str,
    pub message: String,
}

impl FieldError {
    pub(crate) fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

/// A Kafka topic name: 1..=249 of `[A-Za-z0-9._-]`, not `.` or `..` (Kafka's own rule), so it
/// is safe as one level of an object key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TopicName(String);

impl TryFrom<String> for TopicName {
    type Error = FieldError;

    fn try_from(s: String) -> Result<Self, FieldError> {
        let legal = !s.is_empty()
            && s.len() <= 249
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if legal {
            Ok(Self(s))
        } else {
            Err(FieldError::new(
                "segment.topic",
                format!(
                    "{s:?} is not a Kafka topic name (1-249 of letters, digits, '.', '_', '-')"
                ),
            ))
        }
    }
}

impl From<TopicName> for String {
    fn from(t: TopicName) -> Self {
        t.0
    }
}

impl TopicName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks Kafka's `Uuid.toString()`: 22 characters of URL-safe base64 without padding, which
/// decode to 16 bytes. Only the canonical spelling is accepted so that one id has one key.
fn check_kafka_uuid(field: &'static str, s: &str) -> Result<(), FieldError> {
    use base64::Engine;
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s);
    match decoded {
        Ok(b) if s.len() == 22 && b.len() == 16 => {
            // Re-encoding must give the same text: rejects non-canonical trailing bits.
            if base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&b) == s {
                Ok(())
            } else {
                Err(FieldError::new(
                    field,
                    format!("{s:?} is not a canonical Kafka Uuid string"),
                ))
            }
        }
        _ => Err(FieldError::new(
            field,
            format!("{s:?} is not a Kafka Uuid (22 characters of URL-safe base64)"),
        )),
    }
}

macro_rules! kafka_id {
    ($name:ident, $field:literal, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl TryFrom<String> for $name {
            type Error = FieldError;

            fn try_from(s: String) -> Result<Self, FieldError> {
                check_kafka_uuid($field, &s)?;
                Ok(Self(s))
            }
        }

        impl From<$name> for String {
            fn from(t: $name) -> Self {
                t.0
            }
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

kafka_id!(TopicId, "segment.topic_id", "A topic's Kafka Uuid.");
kafka_id!(
    SegmentId,
    "segment.segment_id",
    "A remote segment's Kafka Uuid; new for every copy attempt."
);

/// `RemoteLogSegmentMetadata` as the bridge sends it; also stored in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentMetadata {
    pub topic: TopicName,
    pub topic_id: TopicId,
    pub partition: i32,
    pub segment_id: SegmentId,
    /// First offset in the segment (inclusive).
    pub start_offset: i64,
    /// Last offset in the segment (inclusive).
    pub end_offset: i64,
    pub max_timestamp_ms: i64,
    pub event_timestamp_ms: i64,
    pub broker_id: i32,
    /// Size of the `.log` file, as the broker saw it.
    pub segment_size_bytes: i32,
    /// `[epoch, start offset]` pairs, ascending by epoch.
    pub leader_epochs: Vec<(i32, i64)>,
}

impl SegmentMetadata {
    /// Range checks serde cannot express.
    pub fn check(&self) -> Result<(), FieldError> {
        if self.partition < 0 {
            return Err(FieldError::new(
                "segment.partition",
                format!("{} is negative", self.partition),
            ));
        }
        if self.start_offset < 0 {
            return Err(FieldError::new(
                "segment.start_offset",
                format!("{} is negative", self.start_offset),
            ));
        }
        if self.end_offset < self.start_offset {
            return Err(FieldError::new(
                "segment.end_offset",
                format!(
                    "{} is before start_offset {}",
                    self.end_offset, self.start_offset
                ),
            ));
        }
        if self.segment_size_bytes < 0 {
            return Err(FieldError::new(
                "segment.segment_size_bytes",
                format!("{} is negative", self.segment_size_bytes),
            ));
        }
        Ok(())
    }

    /// `topic-partition@start_offset (segment id)`, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{}-{}@{} ({})",
            self.topic, self.partition, self.start_offset, self.segment_id
        )
    }
}

/// The local files of a rolled segment, as absolute paths on this host.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SegmentFiles {
    pub log: PathBuf,
    pub offset_index: PathBuf,
    pub time_index: PathBuf,
    pub transaction_index: Option<PathBuf>,
    pub producer_snapshot: PathBuf,
}

/// `POST /v1/copy`.
#[derive(Debug, Clone, Deserialize)]
pub struct CopyRequest {
    pub segment: SegmentMetadata,
    pub files: SegmentFiles,
    /// Standard base64 (with padding) of the leader-epoch checkpoint; `""` when empty.
    pub leader_epoch_index: String,
}

impl CopyRequest {
    /// Checks the segment and paths, and decodes the leader-epoch bytes.
    pub fn check(&self) -> Result<Vec<u8>, FieldError> {
        self.segment.check()?;
        let f = &self.files;
        let paths = [
            ("files.log", Some(&f.log)),
            ("files.offset_index", Some(&f.offset_index)),
            ("files.time_index", Some(&f.time_index)),
            ("files.transaction_index", f.transaction_index.as_ref()),
            ("files.producer_snapshot", Some(&f.producer_snapshot)),
        ];
        for (field, path) in paths {
            if let Some(p) = path {
                if !p.is_absolute() {
                    return Err(FieldError::new(
                        field,
                        format!("{} is not an absolute path", p.display()),
                    ));
                }
            }
        }
        decode_epochs(&self.leader_epoch_index)
    }
}

/// The sizes of a segment's files, as `/v1/copy-upload` announces them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct UploadSizes {
    pub offset_index: u64,
    pub time_index: u64,
    pub transaction_index: Option<u64>,
    pub producer_snapshot: u64,
    pub log: u64,
}

/// The JSON header of `POST /v1/copy-upload`; the files' bytes follow it in the body.
#[derive(Debug, Clone, Deserialize)]
pub struct UploadHeader {
    pub segment: SegmentMetadata,
    pub sizes: UploadSizes,
    /// As in [`CopyRequest::leader_epoch_index`].
    pub leader_epoch_index: String,
}

impl UploadHeader {
    /// Checks the segment and the sizes against the limits, and decodes the leader-epoch bytes.
    pub fn check(&self, max_index: u64) -> Result<Vec<u8>, FieldError> {
        self.segment.check()?;
        let s = &self.sizes;
        if s.log != self.segment.segment_size_bytes as u64 {
            return Err(FieldError::new(
                "sizes.log",
                format!(
                    "{} differs from segment_size_bytes {}",
                    s.log, self.segment.segment_size_bytes
                ),
            ));
        }
        let indexes = [
            ("sizes.offset_index", Some(s.offset_index)),
            ("sizes.time_index", Some(s.time_index)),
            ("sizes.transaction_index", s.transaction_index),
            ("sizes.producer_snapshot", Some(s.producer_snapshot)),
        ];
        for (field, size) in indexes {
            if let Some(n) = size.filter(|n| *n > max_index) {
                return Err(FieldError::new(
                    field,
                    format!("{n} bytes is more than the {max_index} an index may hold"),
                ));
            }
        }
        decode_epochs(&self.leader_epoch_index)
    }
}

fn decode_epochs(b64: &str) -> Result<Vec<u8>, FieldError> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| FieldError::new("leader_epoch_index", format!("is not base64: {e}")))
}

/// The answer to a successful copy; strata attaches no custom metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyResponse {
    pub custom_metadata: Option<String>,
}

/// `POST /v1/fetch`: bytes `start_position..=end_position` of the segment's `.log`.
#[derive(Debug, Clone, Deserialize)]
pub struct FetchRequest {
    pub segment: SegmentMetadata,
    pub start_position: i64,
    /// Inclusive; `None` means to the end of the segment.
    pub end_position: Option<i64>,
    /// At most this many bytes of the range in this response (from `start_position`); the
    /// bridge asks again from where it stopped when the broker reads on. The broker reads about
    /// one consumer fetch (1 MiB) of a "to the end" stream and closes it: a window it reads to
    /// the end keeps the connection reusable, where an abandoned body would cost the connection
    /// and the megabytes pushed into its socket buffers. `None`: the whole range.
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// The bridge shares the host and reads cache files itself: answer with a [`Handoff`] when
    /// the window starts in a chunk cached on disk (honoured over the Unix socket only).
    #[serde(default)]
    pub handoff: bool,
    /// With `handoff`: a handoff may cover up to this many bytes, more than `max_bytes` (the
    /// bridge keeps the answer for the broker's next fetches of the segment, which then need
    /// no request); bytes over the socket stay within `max_bytes`. `None`: `max_bytes`.
    #[serde(default)]
    pub handoff_max_bytes: Option<u64>,
    /// A cache file a handoff named whose bytes failed the bridge's check: dropped, so the
    /// chunk is fetched from the store again.
    #[serde(default)]
    pub damaged_file: Option<String>,
}

/// A fetch answered with verified cache files for the bridge to read itself, when strata tier
/// and the broker share a host: no byte crosses the socket. Each piece names a file in `dir`
/// (named once, never rewritten; unlinked when evicted), the range of it to read, and the
/// CRC-32C of every `block_size` block that range touches, which the bridge checks before it
/// hands a byte to the broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    pub dir: String,
    pub block_size: u64,
    /// Bytes the pieces cover, from the request's start position.
    pub len: u64,
    /// The window goes on after `len` (its next chunk is not on disk): the bridge asks again
    /// from there, rather than taking the short answer for the end of the range.
    pub partial: bool,
    /// The window this answers: the request's `handoff_max_bytes`, else its `max_bytes` (an
    /// answer shorter than it, not partial, ends the range). Strata versions before
    /// `handoff_max_bytes` leave it out, and then it is `max_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    pub pieces: Vec<HandoffPiece>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffPiece {
    /// File name inside `dir`.
    pub file: String,
    /// The file's size (the chunk's length).
    pub size: u64,
    pub offset: u64,
    pub len: u64,
    /// CRC-32C of blocks `offset / block_size ..= (offset + len - 1) / block_size`.
    pub crc32c: Vec<u32>,
}

impl FetchRequest {
    /// The byte range as unsigned positions: `(start, inclusive end)`; also checks `max_bytes`.
    pub fn check(&self) -> Result<(u64, Option<u64>), FieldError> {
        self.segment.check()?;
        for (field, n) in [
            ("max_bytes", self.max_bytes),
            ("handoff_max_bytes", self.handoff_max_bytes),
        ] {
            if n == Some(0) {
                return Err(FieldError::new(
                    field,
                    "is 0; it must be at least 1 (or absent)".to_string(),
                ));
            }
        }
        let start = u64::try_from(self.start_position).map_err(|_| {
            FieldError::new(
                "start_position",
                format!("{} is negative", self.start_position),
            )
        })?;
        let end = match self.end_position {
            None => None,
            Some(e) if e < self.start_position => {
                return Err(FieldError::new(
                    "end_position",
                    format!("{e} is before start_position {start}"),
                ))
            }
            Some(e) => Some(e as u64),
        };
        Ok((start, end))
    }
}

/// Kafka's `RemoteStorageManager.IndexType`, by its enum name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum IndexType {
    Offset,
    Timestamp,
    ProducerSnapshot,
    Transaction,
    LeaderEpoch,
}

impl IndexType {
    pub const ALL: [IndexType; 5] = [
        IndexType::Offset,
        IndexType::Timestamp,
        IndexType::ProducerSnapshot,
        IndexType::Transaction,
        IndexType::LeaderEpoch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            IndexType::Offset => "OFFSET",
            IndexType::Timestamp => "TIMESTAMP",
            IndexType::ProducerSnapshot => "PRODUCER_SNAPSHOT",
            IndexType::Transaction => "TRANSACTION",
            IndexType::LeaderEpoch => "LEADER_EPOCH",
        }
    }
}

impl fmt::Display for IndexType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `POST /v1/fetch-index`.
#[derive(Debug, Clone, Deserialize)]
pub struct FetchIndexRequest {
    pub segment: SegmentMetadata,
    pub index: IndexType,
}

/// `POST /v1/delete`.
#[derive(Debug, Clone, Deserialize)]
pub struct DeleteRequest {
    pub segment: SegmentMetadata,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEGMENT: &str = r#"{"topic": "orders", "topic_id": "AAECAwQFBgcICQoLDA0ODw", "partition": 3,
 "segment_id": "EBESExQVFhcYGRobHB0eHw", "start_offset": 100, "end_offset": 199,
 "max_timestamp_ms": 1700000000123, "event_timestamp_ms": 1700000000456, "broker_id": 1,
 "segment_size_bytes": 4096, "leader_epochs": [[0, 100], [2, 150]]}"#;

    fn segment_with(field: &str, value: &str) -> String {
        let mut v: serde_json::Value = serde_json::from_str(SEGMENT).unwrap();
        v[field] = serde_json::from_str(value).unwrap();
        v.to_string()
    }

    #[test]
    fn the_readme_example_parses() {
        let s: SegmentMetadata = serde_json::from_str(SEGMENT).unwrap();
        assert_eq!(s.topic.as_str(), "orders");
        assert_eq!(s.partition, 3);
        assert_eq!(s.leader_epochs, vec![(0, 100), (2, 150)]);
        s.check().unwrap();
        let back: SegmentMetadata =
            serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn copy_request_decodes_the_epoch_index() {
        let body = format!(
            r#"{{"segment": {SEGMENT}, "files": {{"log": "/d/0.log", "offset_index": "/d/0.index",
            "time_index": "/d/0.timeindex", "transaction_index": null, "producer_snapshot": "/d/1.snapshot"}},
            "leader_epoch_index": "CAcGBQ=="}}"#
        );
        let r: CopyRequest = serde_json::from_str(&body).unwrap();
        assert_eq!(r.check().unwrap(), vec![8, 7, 6, 5]);
        assert!(r.files.transaction_index.is_none());
        let relative = body.replace("\"/d/0.index\"", "\"d/0.index\"");
        let r: CopyRequest = serde_json::from_str(&relative).unwrap();
        assert_eq!(r.check().unwrap_err().field, "files.offset_index");
        let bad64 = body.replace("CAcGBQ==", "not base64!");
        let r: CopyRequest = serde_json::from_str(&bad64).unwrap();
        assert_eq!(r.check().unwrap_err().field, "leader_epoch_index");
    }

    #[test]
    fn identifiers_that_could_break_keys_are_refused() {
        for (field, value) in [
            ("topic", r#""../etc""#),
            ("topic", r#""a/b""#),
            ("topic", r#""""#),
            ("topic", r#"".""#),
            ("topic_id", r#""short""#),
            ("topic_id", r#""AAECAwQFBgcICQoLDA0OD/""#),
            ("segment_id", r#""EBESExQVFhcYGRobHB0eHx""#),
        ] {
            let err = serde_json::from_str::<SegmentMetadata>(&segment_with(field, value))
                .expect_err(value)
                .to_string();
            assert!(err.contains(&format!("segment.{field}")), "{err}");
        }
    }

    #[test]
    fn ranges_are_checked() {
        let s: SegmentMetadata = serde_json::from_str(SEGMENT).unwrap();
        let req = |start, end| FetchRequest {
            segment: s.clone(),
            start_position: start,
            end_position: end,
            max_bytes: None,
            handoff: false,
            handoff_max_bytes: None,
            damaged_file: None,
        };
        assert_eq!(req(0, None).check().unwrap(), (0, None));
        let window = FetchRequest {
            max_bytes: Some(1 << 20),
            ..req(7, None)
        };
        assert_eq!(window.check().unwrap(), (7, None));
        let zero = FetchRequest {
            max_bytes: Some(0),
            ..req(7, None)
        };
        assert_eq!(zero.check().unwrap_err().field, "max_bytes");
        let zero = FetchRequest {
            handoff_max_bytes: Some(0),
            ..req(7, None)
        };
        assert_eq!(zero.check().unwrap_err().field, "handoff_max_bytes");
        let parsed: FetchRequest = serde_json::from_str(&format!(
            r#"{{"segment": {SEGMENT}, "start_position": 3, "end_position": null}}"#
        ))
        .unwrap();
        assert_eq!(parsed.max_bytes, None, "max_bytes is optional");
        assert!(
            !parsed.handoff && parsed.damaged_file.is_none(),
            "so are these"
        );
        assert_eq!(req(5, Some(5)).check().unwrap(), (5, Some(5)));
        assert_eq!(req(-1, None).check().unwrap_err().field, "start_position");
        assert_eq!(req(5, Some(4)).check().unwrap_err().field, "end_position");
        let mut bad = s.clone();
        bad.end_offset = 99;
        assert_eq!(bad.check().unwrap_err().field, "segment.end_offset");
    }

    #[test]
    fn index_types_use_kafka_enum_names() {
        for t in IndexType::ALL {
            let json = format!("\"{}\"", t.name());
            assert_eq!(serde_json::from_str::<IndexType>(&json).unwrap(), t);
            assert_eq!(serde_json::to_string(&t).unwrap(), json);
        }
        assert!(serde_json::from_str::<IndexType>("\"offset\"").is_err());
    }
}
