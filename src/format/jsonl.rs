//! The jsonl format: one JSON object per line with topic, partition, offset, timestamp,
//! timestamp type, key, value and headers. Bytes that are UTF-8 are written as `key`/`value`
//! strings; any other bytes as `key_b64`/`value_b64` (standard base64), so every record
//! round-trips exactly and text stays readable. Absent or `null` means a null key/value.

use super::sink::Sink;
use super::{DecodeError, Header, Output, Record, RecordView, TimestampType};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::io::{self, Write};

pub(super) struct JsonlEncoder<W: Output> {
    topic: String,
    out: Sink<W>,
}

/// Bytes as they appear in JSON: a UTF-8 string, or base64 under the `_b64` field.
enum Bytes64<'a> {
    Null,
    Text(&'a str),
    B64(String),
}

impl<'a> Bytes64<'a> {
    fn of(b: Option<&'a [u8]>) -> Self {
        match b {
            None => Self::Null,
            Some(b) => match std::str::from_utf8(b) {
                Ok(s) => Self::Text(s),
                Err(_) => Self::B64(B64.encode(b)),
            },
        }
    }
    fn text(&self) -> Option<&str> {
        match self {
            Self::Text(s) => Some(s),
            _ => None,
        }
    }
    fn b64(&self) -> Option<&str> {
        match self {
            Self::B64(s) => Some(s),
            _ => None,
        }
    }
}

#[derive(Serialize)]
struct OutHeader<'a> {
    key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_b64: Option<&'a str>,
}

#[derive(Serialize)]
struct OutRecord<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
    timestamp: Option<i64>,
    timestamp_type: &'static str,
    key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_b64: Option<&'a str>,
    value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_b64: Option<&'a str>,
    headers: Vec<OutHeader<'a>>,
}

impl<W: Output> JsonlEncoder<W> {
    pub(super) fn new(topic: &str, out: Sink<W>) -> Self {
        Self {
            topic: topic.to_string(),
            out,
        }
    }

    pub(super) fn append(&mut self, r: &RecordView<'_>) -> io::Result<()> {
        let key = Bytes64::of(r.key);
        let value = Bytes64::of(r.value);
        let header_values: Vec<Bytes64<'_>> =
            r.headers.iter().map(|h| Bytes64::of(h.value)).collect();
        let headers = r
            .headers
            .iter()
            .zip(&header_values)
            .map(|(h, v)| OutHeader {
                key: h.key,
                value: v.text(),
                value_b64: v.b64(),
            })
            .collect();
        let rec = OutRecord {
            topic: &self.topic,
            partition: r.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            timestamp_type: r.timestamp_type.as_str(),
            key: key.text(),
            key_b64: key.b64(),
            value: value.text(),
            value_b64: value.b64(),
            headers,
        };
        serde_json::to_writer(&mut self.out, &rec).map_err(io::Error::other)?;
        self.out.write_all(b"\n")
    }

    pub(super) fn memory_bytes(&self) -> usize {
        self.out.memory_bytes()
    }

    pub(super) fn output_bytes(&self) -> u64 {
        self.out.output_bytes()
    }

    pub(super) fn finish(self) -> io::Result<W> {
        self.out.finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InHeader {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    value_b64: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InRecord {
    topic: String,
    partition: i32,
    offset: i64,
    #[serde(default)]
    timestamp: Option<i64>,
    #[serde(default)]
    timestamp_type: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    key_b64: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    value_b64: Option<String>,
    #[serde(default)]
    headers: Vec<InHeader>,
}

fn bytes_of(
    field: &str,
    text: Option<String>,
    b64: Option<String>,
) -> Result<Option<Vec<u8>>, String> {
    match (text, b64) {
        (Some(_), Some(_)) => Err(format!("both \"{field}\" and \"{field}_b64\" are set")),
        (Some(t), None) => Ok(Some(t.into_bytes())),
        (None, Some(b)) => B64
            .decode(b)
            .map(Some)
            .map_err(|e| format!("\"{field}_b64\" is not valid base64: {e}")),
        (None, None) => Ok(None),
    }
}

fn convert(r: InRecord) -> Result<Record, String> {
    let timestamp_type = match r.timestamp_type.as_deref() {
        None => TimestampType::NotAvailable,
        Some(s) => TimestampType::parse(s).ok_or_else(|| {
            format!("unknown timestamp_type {s:?}; expected none, create or log_append")
        })?,
    };
    let headers = r
        .headers
        .into_iter()
        .map(|h| {
            Ok(Header {
                value: bytes_of("value", h.value, h.value_b64)?,
                key: h.key,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Record {
        topic: r.topic,
        partition: Some(r.partition),
        offset: Some(r.offset),
        timestamp: r.timestamp,
        timestamp_type,
        key: bytes_of("key", r.key, r.key_b64)?,
        value: bytes_of("value", r.value, r.value_b64)?,
        headers,
    })
}

pub(super) fn decode(data: &[u8]) -> Result<Vec<Record>, DecodeError> {
    let mut records = Vec::new();
    let mut line_start = 0usize;
    for line in data.split(|b| *b == b'\n') {
        let at = line_start as u64;
        line_start += line.len() + 1;
        if line.is_empty() {
            continue;
        }
        let raw: InRecord = serde_json::from_slice(line)
            .map_err(|e| DecodeError::new(Some(at), format!("invalid jsonl record: {e}")))?;
        records.push(convert(raw).map_err(|m| DecodeError::new(Some(at), m))?);
    }
    Ok(records)
}
