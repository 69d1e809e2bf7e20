//! The Parquet format. Columns: topic, partition, offset, timestamp (ms, UTC), timestamp_type,
//! key, value (binary, nullable) and headers as `list<struct<key: string, value: binary>>`
//! (a list, not a map: Kafka header keys may repeat). Readable by DuckDB, Spark and pyarrow.
//!
//! Rows gather in column builders and are handed to the writer in small batches; the writer
//! keeps one row group open and closes it at [`ROW_GROUP_BYTES`], so memory stays bounded.

use super::renew;
use super::sink::Counting;
use super::{
    Compression, DecodeError, EncodeError, Header, Output, Record, RecordView, TimestampType,
};
use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{
    Array, ArrayRef, Int32Array, Int64Array, ListArray, RecordBatch, StringArray, StructArray,
    TimestampMicrosecondArray, TimestampMillisecondArray,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as Codec, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use std::sync::{Arc, OnceLock};

/// Rows are handed to the writer once this many raw bytes are pending. The builders keep this
/// much capacity between batches, per open file: small, since a task may have hundreds open.
const BATCH_BYTES: usize = 1 << 20;
const BATCH_ROWS: usize = 16 * 1024;
/// Data pages close at about this size (the writer checks every [`WRITE_BATCH_ROWS`] rows): a
/// page, its compressed copy and the compressor's table then stay in the CPU cache, which
/// measured faster than the 1 MiB default (bench/README.md).
const PAGE_BYTES: usize = 256 << 10;
const WRITE_BATCH_ROWS: usize = 256;
/// The writer closes a row group at this estimated size. An open file holds its row group as
/// compressed pages, and the allocator keeps about as much again around them (each page is
/// compressed into a buffer twice its size, then shrunk): with 32 MiB row groups many open files
/// went over the memory budget and were closed early to stay within it; with 8 MiB every file
/// reaches `max_file_size`, for the same CPU (bench/README.md, "Memory with every default").
/// 8 MiB row groups are still large reads for S3 and whole units of work for DuckDB, Spark and
/// Athena.
pub(super) const ROW_GROUP_BYTES: usize = 8 << 20;

fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Binary, true),
    ])
}

fn header_item() -> Arc<Field> {
    Arc::new(Field::new(
        "element",
        DataType::Struct(header_fields()),
        false,
    ))
}

/// The one schema every strata Parquet archive has.
pub fn schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            Arc::new(Schema::new(vec![
                Field::new("topic", DataType::Utf8, false),
                Field::new("partition", DataType::Int32, false),
                Field::new("offset", DataType::Int64, false),
                Field::new(
                    "timestamp",
                    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                    true,
                ),
                Field::new("timestamp_type", DataType::Utf8, false),
                Field::new("key", DataType::Binary, true),
                Field::new("value", DataType::Binary, true),
                Field::new("headers", DataType::List(header_item()), false),
            ]))
        })
        .clone()
}

/// The Parquet codec of a task's compression.
fn codec(c: Compression) -> Result<Codec, EncodeError> {
    Ok(match c {
        // Level 1: most of level 3's ratio on record payloads at a fraction of the CPU.
        Compression::Zstd => Codec::ZSTD(ZstdLevel::try_new(1)?),
        Compression::Snappy => Codec::SNAPPY,
        _ => Codec::UNCOMPRESSED,
    })
}

/// What every Parquet file strata writes shares: the task's codec, the page size and the row
/// group size above.
pub(crate) fn writer_basics(
    c: Compression,
) -> Result<parquet::file::properties::WriterPropertiesBuilder, EncodeError> {
    Ok(WriterProperties::builder()
        .set_compression(codec(c)?)
        .set_data_page_size_limit(PAGE_BYTES)
        .set_write_batch_size(WRITE_BATCH_ROWS)
        .set_max_row_group_row_count(Some(1 << 20))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES)))
}

fn properties(c: Compression) -> Result<WriterProperties, EncodeError> {
    // Dictionaries and page statistics pay off only on the small repetitive columns; on key
    // and value bytes they cost CPU and buy nothing.
    let mut b = writer_basics(c)?
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None);
    for col in ["topic", "timestamp_type", "headers.list.element.key"] {
        b = b.set_column_dictionary_enabled(ColumnPath::from(col), true);
    }
    for col in ["partition", "offset", "timestamp"] {
        b = b.set_column_statistics_enabled(ColumnPath::from(col), EnabledStatistics::Chunk);
    }
    Ok(b.build())
}

pub(super) struct ParquetEncoder<W: Output> {
    topic: String,
    partitions: Vec<i32>,
    offsets: Vec<i64>,
    timestamps: Vec<Option<i64>>,
    timestamp_types: Vec<TimestampType>,
    keys: BinaryBuilder,
    values: BinaryBuilder,
    header_offsets: Vec<i32>,
    header_keys: StringBuilder,
    header_values: BinaryBuilder,
    pending_bytes: usize,
    /// The writer's estimate of its open row group, taken after every batch: asking the writer
    /// walks every column, and the size check runs once per record.
    in_progress: usize,
    /// Bytes the binary builders hold capacity for (see [`renew`]); pending rows live in it.
    reserved: usize,
    writer: ArrowWriter<Counting<W>>,
    /// [`schema`], or the same columns with other field metadata and microsecond timestamps
    /// (an Iceberg table's data files: [`ParquetEncoder::with_schema`]).
    schema: SchemaRef,
    /// The list item of `headers` in `schema`.
    header_item: Arc<Field>,
    /// The timestamp column is in microseconds (its time zone kept).
    micros: Option<Arc<str>>,
}

/// Why a schema handed to [`ParquetEncoder::with_schema`] does not fit the record columns.
fn unfit(detail: &str) -> EncodeError {
    EncodeError::Arrow(arrow_schema::ArrowError::SchemaError(format!(
        "a table schema must have the record columns of strata's Parquet format: {detail}"
    )))
}

impl<W: Output> ParquetEncoder<W> {
    pub(super) fn new(topic: &str, c: Compression, out: W) -> Result<Self, EncodeError> {
        Self::with_schema(topic, c, out, schema())
    }

    /// An encoder of the record columns under `table`: [`schema`]'s names and types, except
    /// that the timestamp may be in microseconds, and with any field metadata (Iceberg's field
    /// ids) on the fields, the header list's item and its fields.
    pub(super) fn with_schema(
        topic: &str,
        c: Compression,
        out: W,
        table: SchemaRef,
    ) -> Result<Self, EncodeError> {
        let plain = schema();
        if table.fields().len() != plain.fields().len() {
            return Err(unfit("eight columns"));
        }
        let mut micros = None;
        for (t, p) in table.fields().iter().zip(plain.fields().iter()) {
            if t.name() != p.name() || t.is_nullable() != p.is_nullable() {
                return Err(unfit(&format!("column {:?}", p.name())));
            }
            match (t.data_type(), p.data_type()) {
                (DataType::Timestamp(TimeUnit::Microsecond, tz), DataType::Timestamp(..)) => {
                    micros = Some(tz.clone().unwrap_or_else(|| "UTC".into()));
                }
                (DataType::List(a), DataType::List(b)) => {
                    let same = match (a.data_type(), b.data_type()) {
                        (DataType::Struct(x), DataType::Struct(y)) => {
                            x.len() == y.len()
                                && x.iter().zip(y.iter()).all(|(x, y)| {
                                    x.name() == y.name()
                                        && x.data_type() == y.data_type()
                                        && x.is_nullable() == y.is_nullable()
                                })
                        }
                        _ => false,
                    };
                    if !same {
                        return Err(unfit("headers as list<struct<key, value>>"));
                    }
                }
                (a, b) if a == b => {}
                _ => return Err(unfit(&format!("column {:?}'s type", p.name()))),
            }
        }
        let header_item = match table.field(7).data_type() {
            DataType::List(item) => item.clone(),
            _ => return Err(unfit("headers as a list")),
        };
        Ok(Self {
            topic: topic.to_string(),
            partitions: Vec::new(),
            offsets: Vec::new(),
            timestamps: Vec::new(),
            timestamp_types: Vec::new(),
            keys: BinaryBuilder::new(),
            values: BinaryBuilder::new(),
            header_offsets: vec![0],
            header_keys: StringBuilder::new(),
            header_values: BinaryBuilder::new(),
            pending_bytes: 0,
            in_progress: 0,
            reserved: 0,
            writer: ArrowWriter::try_new(Counting::new(out), table.clone(), Some(properties(c)?))?,
            schema: table,
            header_item,
            micros,
        })
    }

    pub(super) fn append(&mut self, r: &RecordView<'_>) -> Result<(), EncodeError> {
        self.partitions.push(r.partition);
        self.offsets.push(r.offset);
        self.timestamps.push(r.timestamp);
        self.timestamp_types.push(r.timestamp_type);
        self.keys.append_option(r.key);
        self.values.append_option(r.value);
        let mut size = 40 + r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len);
        for h in r.headers {
            self.header_keys.append_value(h.key);
            self.header_values.append_option(h.value);
            size += 12 + h.key.len() + h.value.map_or(0, <[u8]>::len);
        }
        self.header_offsets
            .push(self.header_offsets.last().copied().unwrap_or(0) + r.headers.len() as i32);
        self.pending_bytes += size;
        if self.pending_bytes >= BATCH_BYTES || self.offsets.len() >= BATCH_ROWS {
            self.write_batch()?;
        }
        Ok(())
    }

    fn write_batch(&mut self) -> Result<(), EncodeError> {
        let n = self.offsets.len();
        if n == 0 {
            return Ok(());
        }
        let mut topics = StringBuilder::with_capacity(n, n * self.topic.len());
        for _ in 0..n {
            topics.append_value(&self.topic);
        }
        let header_offsets = std::mem::replace(&mut self.header_offsets, vec![0]);
        self.reserved = 0;
        let header_fields = match self.header_item.data_type() {
            DataType::Struct(f) => f.clone(),
            _ => header_fields(),
        };
        let headers_struct = StructArray::try_new(
            header_fields,
            vec![
                Arc::new(self.header_keys.finish()) as ArrayRef,
                Arc::new(renew(&mut self.header_values, &mut self.reserved)),
            ],
            None,
        )?;
        let headers = ListArray::try_new(
            self.header_item.clone(),
            OffsetBuffer::new(header_offsets.into()),
            Arc::new(headers_struct),
            None,
        )?;
        let ts_types: StringArray = self
            .timestamp_types
            .drain(..)
            .map(|t| Some(t.as_str()))
            .collect();
        let timestamps = std::mem::take(&mut self.timestamps);
        let timestamps: ArrayRef = match &self.micros {
            None => Arc::new(TimestampMillisecondArray::from(timestamps).with_timezone("UTC")),
            Some(tz) => Arc::new(
                TimestampMicrosecondArray::from_iter(
                    timestamps
                        .into_iter()
                        .map(|t| t.map(|ms| ms.saturating_mul(1000))),
                )
                .with_timezone(tz.clone()),
            ),
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(topics.finish()),
            Arc::new(Int32Array::from(std::mem::take(&mut self.partitions))),
            Arc::new(Int64Array::from(std::mem::take(&mut self.offsets))),
            timestamps,
            Arc::new(ts_types),
            Arc::new(renew(&mut self.keys, &mut self.reserved)),
            Arc::new(renew(&mut self.values, &mut self.reserved)),
            Arc::new(headers),
        ];
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        self.writer.write(&batch)?;
        self.in_progress = self.writer.in_progress_size();
        self.pending_bytes = 0;
        Ok(())
    }

    pub(super) fn memory_bytes(&self) -> usize {
        self.pending_bytes.max(self.reserved)
            + self.in_progress
            + self.writer.inner().inner.memory_bytes()
    }

    pub(super) fn output_bytes(&self) -> u64 {
        self.writer.inner().written + self.in_progress as u64
    }

    pub(super) fn finish(mut self) -> Result<W, EncodeError> {
        self.write_batch()?;
        let mut out = self.writer.into_inner()?;
        std::io::Write::flush(&mut out)?;
        Ok(out.inner)
    }
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, DecodeError> {
    batch.column_by_name(name).ok_or_else(|| {
        DecodeError::new(
            None,
            format!("parquet file has no column \"{name}\"; it was not written by strata dump"),
        )
    })
}

fn wrong_type(name: &str, a: &dyn Array) -> DecodeError {
    DecodeError::new(
        None,
        format!(
            "parquet column \"{name}\" has type {}, not the one strata writes",
            a.data_type()
        ),
    )
}

fn bytes_at(a: &dyn Array, name: &str, i: usize) -> Result<Option<Vec<u8>>, DecodeError> {
    let b = a
        .as_binary_opt::<i32>()
        .ok_or_else(|| wrong_type(name, a))?;
    Ok(b.is_valid(i).then(|| b.value(i).to_vec()))
}

/// Rows per decoded batch. The bound checked before decoding caps a batch's bytes (a batch is
/// at most the whole file), so this only sets the per-batch overhead against the arrays held
/// at once: 8192 rows of typical records are a few MiB.
pub(crate) const BATCH: usize = 8192;

/// A reader of a whole file in memory that reads the pages the way [`super::parquet_bound`]
/// walked them: one after another from each column chunk's start, never through an offset
/// index (which could point elsewhere).
pub(crate) fn reader_builder(
    data: &Bytes,
) -> parquet::errors::Result<ParquetRecordBatchReaderBuilder<Bytes>> {
    use parquet::arrow::arrow_reader::ArrowReaderOptions;
    use parquet::file::metadata::PageIndexPolicy;
    ParquetRecordBatchReaderBuilder::try_new_with_options(
        data.clone(),
        ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Skip),
    )
}

pub(super) fn decode(data: Bytes, limit: u64) -> Result<Vec<Record>, DecodeError> {
    let perr = |e: parquet::errors::ParquetError| {
        DecodeError::new(None, format!("not a readable parquet file: {e}"))
    };
    let builder = reader_builder(&data).map_err(perr)?;
    // Nothing is decoded before the page headers and dictionaries say the whole file fits;
    // records are still counted as they are built (the bound counts arrays, not records).
    super::parquet_bound::check(&data, builder.metadata(), limit)?;
    let reader = builder.with_batch_size(BATCH).build().map_err(perr)?;
    let mut records = Vec::new();
    let mut decoded = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| DecodeError::new(None, format!("parquet row batch: {e}")))?;
        let topic = column(&batch, "topic")?;
        let topic = topic
            .as_string_opt::<i32>()
            .ok_or_else(|| wrong_type("topic", topic))?;
        let part = column(&batch, "partition")?;
        let part = part
            .as_primitive_opt::<Int32Type>()
            .ok_or_else(|| wrong_type("partition", part))?;
        let off = column(&batch, "offset")?;
        let off = off
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| wrong_type("offset", off))?;
        let ts = column(&batch, "timestamp")?;
        let ts = ts
            .as_primitive_opt::<TimestampMillisecondType>()
            .ok_or_else(|| wrong_type("timestamp", ts))?;
        let tst = column(&batch, "timestamp_type")?;
        let tst = tst
            .as_string_opt::<i32>()
            .ok_or_else(|| wrong_type("timestamp_type", tst))?;
        let keys = column(&batch, "key")?;
        let values = column(&batch, "value")?;
        let headers = column(&batch, "headers")?;
        let headers = headers
            .as_list_opt::<i32>()
            .ok_or_else(|| wrong_type("headers", headers))?;
        let hstruct = headers
            .values()
            .as_struct_opt()
            .ok_or_else(|| wrong_type("headers", headers.values()))?;
        let hkeys = hstruct
            .column(0)
            .as_string_opt::<i32>()
            .ok_or_else(|| wrong_type("headers.key", hstruct))?;
        let hvalues = hstruct.column(1);
        let hoffsets = headers.value_offsets();
        for i in 0..batch.num_rows() {
            let timestamp_type = TimestampType::parse(tst.value(i)).ok_or_else(|| {
                DecodeError::new(
                    None,
                    format!("row {i}: unknown timestamp_type {:?}", tst.value(i)),
                )
            })?;
            let mut hs = Vec::new();
            for j in hoffsets[i] as usize..hoffsets[i + 1] as usize {
                hs.push(Header {
                    key: hkeys.value(j).to_string(),
                    value: bytes_at(hvalues.as_ref(), "headers.value", j)?,
                });
            }
            let r = Record {
                topic: topic.value(i).to_string(),
                partition: Some(part.value(i)),
                offset: Some(off.value(i)),
                timestamp: ts.is_valid(i).then(|| ts.value(i)),
                timestamp_type,
                key: bytes_at(keys.as_ref(), "key", i)?,
                value: bytes_at(values.as_ref(), "value", i)?,
                headers: hs,
            };
            decoded += r.heap_bytes();
            if decoded > limit {
                return Err(super::too_large(limit));
            }
            records.push(r);
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Output that keeps the file for the test but, like a part sent to the store, holds no
    /// memory of the encoder's.
    struct Stored(Vec<u8>);

    impl std::io::Write for Stored {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Output for Stored {
        fn memory_bytes(&self) -> usize {
            0
        }
    }

    #[test]
    fn row_groups_close_at_their_size_and_bound_the_memory_of_an_open_file() {
        let mut e = ParquetEncoder::new("t", Compression::Snappy, Stored(Vec::new())).unwrap();
        // 40 MiB of values that do not compress (xorshift bytes).
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut peak = 0;
        for i in 0..10_240i64 {
            let value: Vec<u8> = (0..4096)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let r = RecordView {
                partition: 0,
                offset: i,
                timestamp: Some(i),
                timestamp_type: TimestampType::CreateTime,
                key: None,
                value: Some(&value),
                headers: &[],
            };
            e.append(&r).unwrap();
            peak = peak.max(e.memory_bytes());
        }
        // A row group, plus the rows pending for the next batch and the builders' capacity.
        let bound = ROW_GROUP_BYTES + 3 * BATCH_BYTES;
        assert!(
            peak <= bound,
            "an open file held {peak} bytes (bound {bound})"
        );
        let data = Bytes::from(e.finish().unwrap().0);
        let groups = ParquetRecordBatchReaderBuilder::try_new(data)
            .unwrap()
            .metadata()
            .num_row_groups();
        assert!(
            (5..=6).contains(&groups),
            "40 MiB in row groups of about 8 MiB gave {groups}"
        );
    }
}
