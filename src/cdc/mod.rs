//! Change-data-capture topics (`../shared/spec/cdc-format.md`) as typed, de-duplicated tables:
//! one home for parsing messages (`change`, `parse`), the table files both ways (`table`), the
//! bundles a dump writes per offset range with the repeat window they carry (`bundle`), and
//! reading an archived object's files back into the original messages ([`decode_files`]).
//! Pure apart from the encoders; dump and restore call it, and it depends on `format` and
//! `layout` only.

pub mod bundle;
pub mod change;
mod parse;
pub mod table;

pub use bundle::{Bundle, Counts, MalformedAt, Pushed, Rooms, WindowState};
pub use change::{ColumnType, RepeatWindow};

use crate::format::{decode, DecodeError, FormatKind, FormatSpec, Record, TimestampType};
use bytes::Bytes;
use chrono_tz::Tz;
use std::collections::BTreeMap;

/// What a CDC task does with a message that is not CDC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMalformed {
    /// Stored as it came under `<dir>/_errors/`, and counted.
    Keep,
    /// The task stops with an error naming the message's offset.
    Fail,
}

impl OnMalformed {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::Fail => "fail",
        }
    }
}

/// How a CDC task reads its messages (`../shared/spec/cdc-format.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdcOptions {
    /// The zone `TIME` (`yyyyMMddHHmmss`, no offset) is written in.
    pub time_zone: Tz,
    /// `GLOBAL_ID`s remembered per partition to tell repeats apart.
    pub repeat_window: usize,
    pub on_malformed: OnMalformed,
    /// Declared column types, by table directory (`db.schema.table`) and column.
    pub types: BTreeMap<String, BTreeMap<String, ColumnType>>,
}

/// Reads one archive object from its files (one, or the files of a CDC bundle) into records in
/// offset order. A file that does not decode comes back as the error, with its `L` (where it is).
pub fn decode_files<L>(
    spec: &FormatSpec,
    topic: &str,
    files: Vec<(L, Bytes)>,
    limit: u64,
) -> Result<Vec<Record>, (L, DecodeError)> {
    let mut parts = Vec::with_capacity(files.len());
    for (at, data) in files {
        parts.push(decode_part(spec, topic, data, limit).map_err(|e| (at, e))?);
    }
    Ok(assemble(parts))
}

/// One file of an archive object, decoded: records, or the rows of a CDC table file (which
/// rebuild records only together with the other files of their bundle).
enum Part {
    Records(Vec<Record>),
    Changes(Vec<table::Fragment>),
}

/// Decodes one file: a CDC table file (its Parquet footer says so) into its rows, any other
/// file as [`decode`] does.
fn decode_part(
    spec: &FormatSpec,
    topic: &str,
    data: Bytes,
    limit: u64,
) -> Result<Part, DecodeError> {
    if spec.kind == FormatKind::Parquet && table::is_table_file(&data) {
        return table::decode(data, limit).map(Part::Changes);
    }
    decode(spec, topic, data, limit).map(Part::Records)
}

/// The records of one archive object from its files, in offset order. A CDC bundle's messages
/// come back from the files that kept them whole (repeats, malformed, verbatim) or else from
/// their table rows: the changes of every table, in their order, as the JSON array they came
/// in, with the message's key and timestamp.
fn assemble(parts: Vec<Part>) -> Vec<Record> {
    let mut whole: std::collections::BTreeMap<(i32, i64), Record> = Default::default();
    let mut rows: std::collections::BTreeMap<(i32, i64), Vec<table::Fragment>> = Default::default();
    let mut plain = Vec::new();
    for p in parts {
        match p {
            Part::Records(records) => {
                for r in records {
                    match (r.partition, r.offset) {
                        (Some(pt), Some(o)) => {
                            whole.insert((pt, o), r);
                        }
                        _ => plain.push(r),
                    }
                }
            }
            Part::Changes(fragments) => {
                for f in fragments {
                    rows.entry((f.partition, f.offset)).or_default().push(f);
                }
            }
        }
    }
    for (at, fragments) in rows {
        if whole.contains_key(&at) {
            continue;
        }
        let Some(first) = fragments.first() else {
            continue;
        };
        let (topic, timestamp, key) = (first.topic.clone(), first.timestamp, first.key.clone());
        let changes: Vec<change::Change> = fragments.into_iter().map(|f| f.change).collect();
        whole.insert(
            at,
            Record {
                topic,
                partition: Some(at.0),
                offset: Some(at.1),
                timestamp,
                timestamp_type: TimestampType::CreateTime,
                key,
                value: Some(change::message_json(&changes)),
                headers: Vec::new(),
            },
        );
    }
    plain.extend(whole.into_values());
    plain
}
