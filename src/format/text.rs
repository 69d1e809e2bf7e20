//! The text format: `value` (or `key separator value`) followed by the record delimiter.
//! Lossy by design: no partition, offset, timestamp or headers, and tombstones become empty.

use super::sink::Sink;
use super::{DecodeError, Output, Record, RecordView, TextOptions};
use std::io::{self, Write};

pub(super) struct TextEncoder<W: Output> {
    opts: TextOptions,
    out: Sink<W>,
    ambiguous: u64,
}

impl<W: Output> TextEncoder<W> {
    pub(super) fn new(opts: TextOptions, out: Sink<W>) -> Self {
        Self {
            opts,
            out,
            ambiguous: 0,
        }
    }

    pub(super) fn append(&mut self, r: &RecordView<'_>) -> io::Result<()> {
        let value = r.value.unwrap_or_default();
        let delim = self.opts.delimiter.byte();
        let mut ambiguous = delim.is_some_and(|d| memchr::memchr(d, value).is_some());
        if let Some(sep) = &self.opts.key_separator {
            let key = r.key.unwrap_or_default();
            ambiguous |=
                delim.is_some_and(|d| memchr::memchr(d, key).is_some()) || find(key, sep).is_some();
            self.out.write_all(key)?;
            self.out.write_all(sep)?;
        }
        self.out.write_all(value)?;
        if let Some(d) = delim {
            self.out.write_all(&[d])?;
        }
        self.ambiguous += u64::from(ambiguous);
        Ok(())
    }

    pub(super) fn memory_bytes(&self) -> usize {
        self.out.memory_bytes()
    }

    pub(super) fn output_bytes(&self) -> u64 {
        self.out.output_bytes()
    }

    pub(super) fn finish(self) -> io::Result<(W, u64)> {
        Ok((self.out.finish()?, self.ambiguous))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    memchr::memmem::find(hay, needle)
}

/// Splits a text object back into records: values, and keys when a separator is configured
/// (split at its first occurrence). Delimiter `none` cannot be split and is refused.
pub(super) fn decode(
    opts: &TextOptions,
    topic: &str,
    data: &[u8],
) -> Result<Vec<Record>, DecodeError> {
    let Some(delim) = opts.delimiter.byte() else {
        return Err(DecodeError::new(
            None,
            "text written with record_delimiter = \"none\" cannot be split back into records; \
             restore it with a format that keeps record boundaries (jsonl, parquet)",
        ));
    };
    let mut records = Vec::new();
    let mut pos = 0usize;
    let body = match data.last() {
        Some(&b) if b == delim => &data[..data.len() - 1],
        Some(_) => {
            return Err(DecodeError::new(
                Some(data.len() as u64),
                format!(
                    "text object does not end with the delimiter \"{}\"; was it written with \
                     another record_delimiter?",
                    opts.delimiter
                ),
            ))
        }
        None => return Ok(records),
    };
    for piece in body.split(|b| *b == delim) {
        let (key, value) = match &opts.key_separator {
            Some(sep) => match find(piece, sep) {
                Some(i) => (Some(piece[..i].to_vec()), piece[i + sep.len()..].to_vec()),
                None => {
                    return Err(DecodeError::new(
                        Some(pos as u64),
                        format!(
                            "record has no key separator {:?}; was the archive written with \
                             store_key = false or another key_separator?",
                            String::from_utf8_lossy(sep)
                        ),
                    ))
                }
            },
            None => (None, piece.to_vec()),
        };
        records.push(Record {
            topic: topic.to_string(),
            key,
            value: Some(value),
            ..Record::default()
        });
        pos += piece.len() + 1;
    }
    Ok(records)
}
