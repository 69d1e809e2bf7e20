//! Archive formats: `text`, `jsonl` and `parquet`, each with its encoder and decoder here, so
//! what dump writes is exactly what restore reads.
//!
//! Encoders take borrowed records one at a time and report the memory they hold (dump's buffer
//! budget counts it); decoders turn a whole object back into owned records.

mod jsonl;
pub(crate) mod parquet;
pub(crate) mod parquet_bound;
mod sink;
mod text;

use bytes::Bytes;
use std::fmt;
use std::str::FromStr;

/// How Kafka stamped a record's timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    #[default]
    NotAvailable,
    CreateTime,
    LogAppendTime,
}

impl TimestampType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotAvailable => "none",
            Self::CreateTime => "create",
            Self::LogAppendTime => "log_append",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Self::NotAvailable),
            "create" => Some(Self::CreateTime),
            "log_append" => Some(Self::LogAppendTime),
            _ => None,
        }
    }
}

/// A header as it travels through an encoder (borrowed from the consumer's message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderView<'a> {
    pub key: &'a str,
    pub value: Option<&'a [u8]>,
}

/// A record as it travels through an encoder (borrowed from the consumer's message).
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    pub timestamp_type: TimestampType,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [HeaderView<'a>],
}

/// A Kafka header read back from an archive. Keys may repeat; values may be null.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

/// A record read back from an archive. Fields a format does not keep are `None`/empty.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    pub topic: String,
    /// `None` when the format does not keep it (text): the object name still tells it.
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub timestamp: Option<i64>,
    pub timestamp_type: TimestampType,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<Header>,
}

impl Record {
    /// Heap bytes this record holds, roughly: its bytes plus per-record bookkeeping. What a
    /// restore's memory budget counts.
    pub fn heap_bytes(&self) -> u64 {
        let headers: usize = self
            .headers
            .iter()
            .map(|h| 48 + h.key.len() + h.value.as_ref().map_or(0, Vec::len))
            .sum();
        let bytes = self.key.as_ref().map_or(0, Vec::len) + self.value.as_ref().map_or(0, Vec::len);
        (bytes + headers + self.topic.len() + 96) as u64
    }

    /// Borrowed view of this record, for re-encoding (tests, tools).
    pub fn with_view<R>(&self, f: impl FnOnce(&RecordView<'_>) -> R) -> R {
        let headers: Vec<HeaderView<'_>> = self
            .headers
            .iter()
            .map(|h| HeaderView {
                key: &h.key,
                value: h.value.as_deref(),
            })
            .collect();
        f(&RecordView {
            partition: self.partition.unwrap_or(0),
            offset: self.offset.unwrap_or(0),
            timestamp: self.timestamp,
            timestamp_type: self.timestamp_type,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: &headers,
        })
    }
}

/// The archive format of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatKind {
    Text,
    Jsonl,
    Parquet,
}

impl FormatKind {
    pub const NAMES: &'static str = "\"text\", \"jsonl\" or \"parquet\"";

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Jsonl => "jsonl",
            Self::Parquet => "parquet",
        }
    }

    /// Formats that keep key, value, headers, timestamp and partition exactly.
    pub fn is_lossless(self) -> bool {
        !matches!(self, Self::Text)
    }
}

impl FromStr for FormatKind {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "text" => Ok(Self::Text),
            "jsonl" => Ok(Self::Jsonl),
            "parquet" => Ok(Self::Parquet),
            _ => Err(()),
        }
    }
}

/// Compression of a whole text/jsonl object, or the codec inside Parquet pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
    Snappy,
}

impl Compression {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
            Self::Snappy => "snappy",
        }
    }
}

impl FromStr for Compression {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "none" => Ok(Self::None),
            "gzip" => Ok(Self::Gzip),
            "zstd" => Ok(Self::Zstd),
            "snappy" => Ok(Self::Snappy),
            _ => Err(()),
        }
    }
}

/// What separates records in a text archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delimiter {
    Comma,
    Semicolon,
    Pipe,
    Newline,
    None,
}

impl Delimiter {
    pub const NAMES: &'static str = "\",\", \";\", \"|\", \"\\n\" or \"none\"";

    pub fn byte(self) -> Option<u8> {
        match self {
            Self::Comma => Some(b','),
            Self::Semicolon => Some(b';'),
            Self::Pipe => Some(b'|'),
            Self::Newline => Some(b'\n'),
            Self::None => None,
        }
    }
}

impl FromStr for Delimiter {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "," => Ok(Self::Comma),
            ";" => Ok(Self::Semicolon),
            "|" => Ok(Self::Pipe),
            "\n" | "\\n" => Ok(Self::Newline),
            "none" | "" => Ok(Self::None),
            _ => Err(()),
        }
    }
}

impl fmt::Display for Delimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Comma => ",",
            Self::Semicolon => ";",
            Self::Pipe => "|",
            Self::Newline => "\\n",
            Self::None => "none",
        })
    }
}

/// Options only the text format has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextOptions {
    pub delimiter: Delimiter,
    /// `Some(separator)` writes `key separator value`; `None` writes values only.
    pub key_separator: Option<Vec<u8>>,
}

impl Default for TextOptions {
    fn default() -> Self {
        Self {
            delimiter: Delimiter::Newline,
            key_separator: None,
        }
    }
}

/// Everything an encoder or decoder needs to know about an archive's format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatSpec {
    pub kind: FormatKind,
    pub compression: Compression,
    pub text: TextOptions,
}

/// A format/compression pair that cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("compression \"{compression}\" does not apply to format \"{kind}\"; use {allowed}")]
pub struct UnsupportedCompression {
    pub kind: &'static str,
    pub compression: &'static str,
    pub allowed: &'static str,
}

impl FormatSpec {
    pub fn new(
        kind: FormatKind,
        compression: Compression,
        text: TextOptions,
    ) -> Result<Self, UnsupportedCompression> {
        let ok = match kind {
            FormatKind::Text | FormatKind::Jsonl => compression != Compression::Snappy,
            FormatKind::Parquet => compression != Compression::Gzip,
        };
        if !ok {
            return Err(UnsupportedCompression {
                kind: kind.as_str(),
                compression: compression.as_str(),
                allowed: match kind {
                    FormatKind::Parquet => "\"zstd\", \"snappy\" or \"none\"",
                    _ => "\"gzip\", \"zstd\" or \"none\"",
                },
            });
        }
        Ok(Self {
            kind,
            compression,
            text,
        })
    }

    /// The default codec of a format when the user names none.
    pub fn default_compression(kind: FormatKind) -> Compression {
        match kind {
            // Snappy: Spark's and parquet-mr's default, the cheapest codec per byte written;
            // zstd gives smaller files for more CPU.
            FormatKind::Parquet => Compression::Snappy,
            _ => Compression::None,
        }
    }

    /// File extension (no leading dot); Parquet compresses inside, so it has one extension.
    pub fn extension(&self) -> &'static str {
        match (self.kind, self.compression) {
            (FormatKind::Parquet, _) => "parquet",
            (FormatKind::Text, Compression::Gzip) => "txt.gz",
            (FormatKind::Text, Compression::Zstd) => "txt.zst",
            (FormatKind::Text, _) => "txt",
            (FormatKind::Jsonl, Compression::Gzip) => "jsonl.gz",
            (FormatKind::Jsonl, Compression::Zstd) => "jsonl.zst",
            (FormatKind::Jsonl, _) => "jsonl",
        }
    }

    /// The format and compression an extension stands for; text options come from elsewhere.
    pub fn from_extension(ext: &str, text: TextOptions) -> Option<Self> {
        let (kind, compression) = match ext {
            // The codec of a Parquet file is read from the file itself.
            "parquet" => (FormatKind::Parquet, Compression::Snappy),
            "txt" => (FormatKind::Text, Compression::None),
            "txt.gz" => (FormatKind::Text, Compression::Gzip),
            "txt.zst" => (FormatKind::Text, Compression::Zstd),
            "jsonl" => (FormatKind::Jsonl, Compression::None),
            "jsonl.gz" => (FormatKind::Jsonl, Compression::Gzip),
            "jsonl.zst" => (FormatKind::Jsonl, Compression::Zstd),
            _ => return None,
        };
        Some(Self {
            kind,
            compression,
            text,
        })
    }
}

/// A failure to encode; only Parquet's writer can fail on valid input.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("parquet writer: {0}")]
    Parquet(#[from] ::parquet::errors::ParquetError),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    #[error("compressor: {0}")]
    Io(#[from] std::io::Error),
}

/// A failure to decode an archive object, with where in it the problem is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", at.map(|a| format!("at byte {a}: ")).unwrap_or_default())]
pub struct DecodeError {
    /// Byte offset in the decompressed stream (text, jsonl) or file (parquet), when known.
    pub at: Option<u64>,
    pub message: String,
}

impl DecodeError {
    fn new(at: Option<u64>, message: impl Into<String>) -> Self {
        Self {
            at,
            message: message.into(),
        }
    }
}

/// Where an encoder writes (memory, a staging file, ...), and the memory that target holds,
/// so callers can keep a buffer budget whatever the target is.
pub trait Output: std::io::Write + Send {
    fn memory_bytes(&self) -> usize;
}

impl Output for Vec<u8> {
    fn memory_bytes(&self) -> usize {
        self.capacity()
    }
}

/// An in-memory output held as pieces of [`PIECE`] bytes: a file that grows is never copied
/// into a larger buffer (a doubling `Vec` copies all of it and faults in fresh pages at every
/// step: bench/README.md, "CDC tables"), and the pieces go to an upload as they are.
#[derive(Debug, Default)]
pub struct Pieces {
    done: Vec<Bytes>,
    open: Vec<u8>,
    len: usize,
}

/// The size of a [`Pieces`] piece: the store's write piece, so no piece is cut again.
pub const PIECE: usize = crate::io::WRITE_PIECE;

impl Pieces {
    /// Bytes written.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces, in order.
    pub fn into_pieces(mut self) -> Vec<Bytes> {
        if !self.open.is_empty() {
            self.done.push(Bytes::from(std::mem::take(&mut self.open)));
        }
        self.done
    }

    /// All of it as one buffer (a copy: for readers that want it whole).
    pub fn to_bytes(&self) -> Bytes {
        let mut all = Vec::with_capacity(self.len);
        for p in &self.done {
            all.extend_from_slice(p);
        }
        all.extend_from_slice(&self.open);
        Bytes::from(all)
    }
}

impl std::io::Write for Pieces {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.write_all(data)?;
        Ok(data.len())
    }

    fn write_all(&mut self, mut data: &[u8]) -> std::io::Result<()> {
        self.len += data.len();
        while !data.is_empty() {
            if self.open.capacity() == 0 {
                self.open.reserve_exact(PIECE);
            }
            let take = (PIECE - self.open.len()).min(data.len());
            self.open.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.open.len() == PIECE {
                self.done.push(Bytes::from(std::mem::take(&mut self.open)));
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Output for Pieces {
    fn memory_bytes(&self) -> usize {
        self.done.len() * PIECE + self.open.capacity()
    }
}

/// An encoder's result: its output and what went into it.
#[derive(Debug)]
pub struct Finished<W> {
    pub out: W,
    pub records: u64,
    /// Text records whose key or value contain the delimiter or separator: restore cannot
    /// split them back exactly.
    pub ambiguous: u64,
}

/// Turns records of one topic-partition into one archive object written to `W`.
pub struct Encoder<W: Output> {
    kind: EncoderKind<W>,
    records: u64,
}

enum EncoderKind<W: Output> {
    Text(text::TextEncoder<W>),
    Jsonl(jsonl::JsonlEncoder<W>),
    Parquet(Box<parquet::ParquetEncoder<W>>),
}

impl Encoder<Vec<u8>> {
    /// An encoder that builds the object in memory.
    pub fn in_memory(spec: &FormatSpec, topic: &str) -> Result<Self, EncodeError> {
        Self::new(spec, topic, Vec::new())
    }
}

impl<W: Output> Encoder<W> {
    pub fn new(spec: &FormatSpec, topic: &str, out: W) -> Result<Self, EncodeError> {
        let kind =
            match spec.kind {
                FormatKind::Text => EncoderKind::Text(text::TextEncoder::new(
                    spec.text.clone(),
                    sink::Sink::new(spec.compression, out)?,
                )),
                FormatKind::Jsonl => EncoderKind::Jsonl(jsonl::JsonlEncoder::new(
                    topic,
                    sink::Sink::new(spec.compression, out)?,
                )),
                FormatKind::Parquet => EncoderKind::Parquet(Box::new(
                    parquet::ParquetEncoder::new(topic, spec.compression, out)?,
                )),
            };
        Ok(Self { kind, records: 0 })
    }

    /// A Parquet encoder of the record columns under another schema of the same columns: an
    /// Iceberg table's, whose fields carry field ids and whose timestamps are in microseconds.
    pub fn parquet_with_schema(
        topic: &str,
        compression: Compression,
        out: W,
        schema: arrow_schema::SchemaRef,
    ) -> Result<Self, EncodeError> {
        Ok(Self {
            kind: EncoderKind::Parquet(Box::new(parquet::ParquetEncoder::with_schema(
                topic,
                compression,
                out,
                schema,
            )?)),
            records: 0,
        })
    }

    pub fn append(&mut self, r: &RecordView<'_>) -> Result<(), EncodeError> {
        self.records += 1;
        match &mut self.kind {
            EncoderKind::Text(e) => e.append(r)?,
            EncoderKind::Jsonl(e) => e.append(r)?,
            EncoderKind::Parquet(e) => e.append(r)?,
        }
        Ok(())
    }

    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes of memory held: compressor state, pending rows and the output's own buffers.
    pub fn memory_bytes(&self) -> usize {
        match &self.kind {
            EncoderKind::Text(e) => e.memory_bytes(),
            EncoderKind::Jsonl(e) => e.memory_bytes(),
            EncoderKind::Parquet(e) => e.memory_bytes(),
        }
    }

    /// Size of the object so far (compressed where the format compresses as it goes; Parquet
    /// counts its open row group as encoded so far).
    pub fn output_bytes(&self) -> u64 {
        match &self.kind {
            EncoderKind::Text(e) => e.output_bytes(),
            EncoderKind::Jsonl(e) => e.output_bytes(),
            EncoderKind::Parquet(e) => e.output_bytes(),
        }
    }

    /// Completes the object (trailers, footers) and hands back the output.
    pub fn finish(self) -> Result<Finished<W>, EncodeError> {
        let (out, ambiguous) = match self.kind {
            EncoderKind::Text(e) => e.finish()?,
            EncoderKind::Jsonl(e) => (e.finish()?, 0),
            EncoderKind::Parquet(e) => (e.finish()?, 0),
        };
        Ok(Finished {
            out,
            records: self.records,
            ambiguous,
        })
    }
}

/// Reads a whole archive object back into records. `topic` and `partition` come from the
/// object's name and fill what the format does not store (text). `limit` bounds the decoded
/// bytes (the caller's memory budget): a few KB of crafted zstd or gzip can expand to
/// gigabytes, so decoding stops there with an error instead of running out of memory.
pub fn decode(
    spec: &FormatSpec,
    topic: &str,
    data: Bytes,
    limit: u64,
) -> Result<Vec<Record>, DecodeError> {
    match spec.kind {
        FormatKind::Parquet => parquet::decode(data, limit),
        FormatKind::Text => {
            let raw = sink::decompress(spec.compression, &data, limit)?;
            text::decode(&spec.text, topic, &raw)
        }
        FormatKind::Jsonl => {
            let raw = sink::decompress(spec.compression, &data, limit)?;
            jsonl::decode(&raw)
        }
    }
}

/// The error of an object that decodes to more than `limit` bytes.
pub(crate) fn too_large(limit: u64) -> DecodeError {
    DecodeError::new(
        None,
        format!(
            "decodes to more than {} (the larger of limits.buffer_memory and 16 times the \
             object's size: a restore's memory for one object); if the object is genuine, raise \
             limits.buffer_memory",
            crate::size::ByteSize(limit)
        ),
    )
}

/// A builder of strings or bytes with room for `rows` rows of `bytes` bytes and a quarter more
/// (the next batch is rarely the same size, and one byte more than the room doubles, and copies,
/// the whole buffer). Adds its capacity to `reserved`.
pub(crate) fn with_room<T: arrow_array::types::ByteArrayType>(
    rows: usize,
    bytes: usize,
    reserved: &mut usize,
) -> arrow_array::builder::GenericByteBuilder<T> {
    let (rows, bytes) = (rows + rows / 4, bytes + bytes / 4);
    *reserved += bytes + (rows + 1) * std::mem::size_of::<T::Offset>();
    arrow_array::builder::GenericByteBuilder::with_capacity(rows, bytes)
}

/// Finishes a builder of strings or bytes and leaves in its place one with room for as much
/// again ([`with_room`]), so the next batch of rows fills buffers allocated once: a builder grown
/// from nothing copies all it holds at every doubling (a tenth of a CDC dump's CPU went to that).
pub(crate) fn renew<T: arrow_array::types::ByteArrayType>(
    b: &mut arrow_array::builder::GenericByteBuilder<T>,
    reserved: &mut usize,
) -> arrow_array::GenericByteArray<T> {
    use arrow_array::builder::ArrayBuilder as _;
    let fresh = with_room(b.len(), b.values_slice().len(), reserved);
    std::mem::replace(b, fresh).finish()
}

#[cfg(test)]
mod tests;
