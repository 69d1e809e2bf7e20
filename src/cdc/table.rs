//! A CDC table file, both ways: rows built as changes arrive (the Kafka position, the change's
//! metadata, then `new_<column>` and `old_<column>` for each source column a side's values had,
//! flat columns that DuckDB, Athena and Spark read plainly and that `union_by_name` readers
//! merge across files), in the declared types, with `errors` naming every value that did not
//! convert; written as Parquet marked as CDC, and read back into changes for restore.

use super::change::{convert, Change, ColumnType, Typed, Values};
use crate::format::{Compression, DecodeError, EncodeError, Output, Pieces};
use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder,
    Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
    TimestampMillisecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema, TimeUnit};
use chrono_tz::Tz;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

/// Where a change came from in Kafka (borrowed from the message: every message has one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    /// The message's key.
    pub key: Option<&'a [u8]>,
}

/// The room a table file's string and byte builders needed for one flush of rows, by column:
/// the table's next file (the partition's next bundle) starts its builders with it instead of
/// growing each from nothing, which copies what it holds at every doubling.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Room(HashMap<String, (usize, usize)>);

impl Room {
    /// Notes a flush of `rows` rows of `bytes` bytes in `column` (the largest flush counts).
    fn note(&mut self, column: &str, rows: usize, bytes: usize) {
        match self.0.get_mut(column) {
            Some(r) => *r = (r.0.max(rows), r.1.max(bytes)),
            None => {
                self.0.insert(column.to_string(), (rows, bytes));
            }
        }
    }

    /// A builder for `column` with the room it needed, counted in `reserved`.
    fn builder<T: arrow_array::types::ByteArrayType>(
        &self,
        column: &str,
        reserved: &mut usize,
    ) -> arrow_array::builder::GenericByteBuilder<T> {
        match self.0.get(column) {
            Some(&(rows, bytes)) => crate::format::with_room(rows, bytes, reserved),
            None => arrow_array::builder::GenericByteBuilder::new(),
        }
    }
}

/// Finishes a builder like `format::renew`, noting its room first.
fn renew_noting<T: arrow_array::types::ByteArrayType>(
    column: &str,
    b: &mut arrow_array::builder::GenericByteBuilder<T>,
    reserved: &mut usize,
    seen: &mut Room,
) -> arrow_array::GenericByteArray<T> {
    seen.note(column, b.len(), b.values_slice().len());
    crate::format::renew(b, reserved)
}

/// One source column's values, in its declared type.
enum Column {
    Str(StringBuilder),
    Int(Int32Builder),
    BigInt(Int64Builder),
    Double(Float64Builder),
    Decimal(Decimal128Builder),
    Bool(BooleanBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
}

impl Column {
    /// `name`: the file's column name, whose room `room` may know.
    fn new(
        ty: ColumnType,
        name: &str,
        room: &Room,
        reserved: &mut usize,
    ) -> Result<Self, ArrowError> {
        Ok(match ty {
            ColumnType::String => Self::Str(room.builder(name, reserved)),
            ColumnType::Int => Self::Int(Int32Builder::new()),
            ColumnType::BigInt => Self::BigInt(Int64Builder::new()),
            ColumnType::Double => Self::Double(Float64Builder::new()),
            ColumnType::Decimal { precision, scale } => Self::Decimal(
                Decimal128Builder::new().with_precision_and_scale(precision, scale as i8)?,
            ),
            ColumnType::Bool => Self::Bool(BooleanBuilder::new()),
            ColumnType::Date => Self::Date(Date32Builder::new()),
            ColumnType::Timestamp => {
                Self::Timestamp(TimestampMicrosecondBuilder::new().with_timezone("UTC"))
            }
        })
    }

    fn len(&self) -> usize {
        match self {
            Self::Str(b) => b.len(),
            Self::Int(b) => b.len(),
            Self::BigInt(b) => b.len(),
            Self::Double(b) => b.len(),
            Self::Decimal(b) => b.len(),
            Self::Bool(b) => b.len(),
            Self::Date(b) => b.len(),
            Self::Timestamp(b) => b.len(),
        }
    }

    fn append_nulls(&mut self, n: usize) {
        match self {
            Self::Str(b) => b.append_nulls(n),
            Self::Int(b) => b.append_nulls(n),
            Self::BigInt(b) => b.append_nulls(n),
            Self::Double(b) => b.append_nulls(n),
            Self::Decimal(b) => b.append_nulls(n),
            Self::Bool(b) => b.append_nulls(n),
            Self::Date(b) => b.append_nulls(n),
            Self::Timestamp(b) => b.append_nulls(n),
        }
    }

    /// Appends `raw` converted; `Err` (and a null) when it does not convert.
    fn append(&mut self, raw: &str, ty: ColumnType, tz: Tz) -> Result<(), String> {
        if let Self::Str(b) = self {
            b.append_value(raw);
            return Ok(());
        }
        let v = match convert(raw, ty, tz) {
            Ok(v) => v,
            Err(why) => {
                self.append_nulls(1);
                return Err(why);
            }
        };
        match (self, v) {
            (Self::Int(b), Typed::Int(x)) => b.append_value(x),
            (Self::BigInt(b), Typed::BigInt(x)) => b.append_value(x),
            (Self::Double(b), Typed::Double(x)) => b.append_value(x),
            (Self::Decimal(b), Typed::Decimal(x)) => b.append_value(x),
            (Self::Bool(b), Typed::Bool(x)) => b.append_value(x),
            (Self::Date(b), Typed::Date(x)) => b.append_value(x),
            (Self::Timestamp(b), Typed::Timestamp(x)) => b.append_value(x),
            (c, _) => c.append_nulls(1),
        }
        Ok(())
    }

    fn finish(&mut self, name: &str, reserved: &mut usize, seen: &mut Room) -> ArrayRef {
        match self {
            Self::Str(b) => Arc::new(renew_noting(name, b, reserved, seen)),
            Self::Int(b) => Arc::new(b.finish()),
            Self::BigInt(b) => Arc::new(b.finish()),
            Self::Double(b) => Arc::new(b.finish()),
            Self::Decimal(b) => Arc::new(b.finish()),
            Self::Bool(b) => Arc::new(b.finish()),
            Self::Date(b) => Arc::new(b.finish()),
            Self::Timestamp(b) => Arc::new(b.finish()),
        }
    }
}

/// One side's value columns (`new_<col>` or `old_<col>`), in the order first seen. A source
/// sends a table's columns in the same order every time, so each value is looked for first
/// where the previous row had it: one string compare instead of a map lookup.
struct Side {
    prefix: &'static str,
    names: Vec<String>,
    types: Vec<ColumnType>,
    columns: Vec<Column>,
    by_name: HashMap<String, usize>,
    /// The columns of the previous row's values, in their order.
    last: Vec<usize>,
    /// Per column, the row (by [`Self::seq`]) that last set it and at which place of its
    /// values: finds a name sent twice, whose last value counts.
    set: Vec<(u64, usize)>,
    /// Rows placed so far.
    seq: u64,
    /// This row's columns, in its values' order (`usize::MAX`: an earlier value of a name
    /// sent twice).
    row: Vec<usize>,
}

impl Side {
    fn new(prefix: &'static str) -> Self {
        Self {
            prefix,
            names: Vec::new(),
            types: Vec::new(),
            columns: Vec::new(),
            by_name: HashMap::new(),
            last: Vec::new(),
            set: Vec::new(),
            seq: 0,
            row: Vec::new(),
        }
    }

    /// The column of the `k`th value of a row, if the side has it.
    fn find(&self, k: usize, name: &str) -> Option<usize> {
        match self.last.get(k) {
            Some(&i) if self.names.get(i).is_some_and(|n| n == name) => Some(i),
            _ => self.by_name.get(name).copied(),
        }
    }

    /// Works out `values`' columns into `self.row` (adding new ones, null for the `rows`
    /// pending before, with the room `room` knows for them, counted in `reserved`).
    fn place(
        &mut self,
        values: &Values<'_>,
        rows: usize,
        types: &BTreeMap<String, ColumnType>,
        room: &Room,
        reserved: &mut usize,
    ) -> Result<(), ArrowError> {
        self.row.clear();
        self.seq += 1;
        for (k, (name, _)) in values.0.iter().enumerate() {
            let i = match self.find(k, name) {
                Some(i) => i,
                None => {
                    let ty = types
                        .get(name.as_ref())
                        .copied()
                        .unwrap_or(ColumnType::String);
                    let column = format!("{}_{name}", self.prefix);
                    let mut fresh = Column::new(ty, &column, room, reserved)?;
                    fresh.append_nulls(rows);
                    self.names.push(name.to_string());
                    self.types.push(ty);
                    self.columns.push(fresh);
                    self.set.push((0, 0));
                    self.by_name
                        .insert(name.to_string(), self.columns.len() - 1);
                    self.columns.len() - 1
                }
            };
            let (seq, at) = self.set[i];
            if seq == self.seq {
                self.row[at] = usize::MAX;
            }
            self.set[i] = (self.seq, k);
            self.row.push(i);
        }
        self.last.clone_from(&self.row);
        Ok(())
    }

    /// Whether every name of `values` has its column already.
    fn has_all(&self, values: &Values<'_>) -> bool {
        values
            .keys()
            .enumerate()
            .all(|(k, name)| self.find(k, name).is_some())
    }

    /// The columns in name order (the file's column order).
    fn sorted(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.names.len()).collect();
        order.sort_by(|a, b| self.names[*a].cmp(&self.names[*b]));
        order
    }
}

/// The rows of one table file, built as changes arrive: the metadata columns, then a column
/// per source column and side (`new_<col>`, `old_<col>`, added when first seen and null for
/// the rows before), then `errors` and `null_columns`.
pub struct TableBuilder {
    types: BTreeMap<String, ColumnType>,
    tz: Tz,
    rows: usize,
    topic: StringBuilder,
    partition: Int32Builder,
    offset: Int64Builder,
    kafka_timestamp: TimestampMillisecondBuilder,
    change_index: Int32Builder,
    time: TimestampMillisecondBuilder,
    /// time_raw, global_id, database, schema, table, type, logical_clock_raw (in that order).
    texts: [StringBuilder; 7],
    logical_clock: Int64Builder,
    kafka_key: BinaryBuilder,
    source_offset: StringBuilder,
    new: Side,
    old: Side,
    errors: StringBuilder,
    nulls: StringBuilder,
    /// The row being added's `errors` and `null_columns` text (kept to reuse their buffers).
    problems: String,
    null_names: String,
    /// Bytes appended since the last flush, roughly (for the memory the open bundle holds).
    bytes: usize,
    /// What the string and byte builders hold room for since the last flush (see
    /// `format::renew`); the pending rows' bytes live in it.
    reserved: usize,
    compression: Compression,
    /// The room the previous file of this table needed (for columns first seen here).
    room: Room,
    /// The room this file's flushes needed, for the next file.
    seen: Room,
    /// Rows flushed so far go here; its schema is fixed from the first flush on.
    writer: Option<parquet::arrow::ArrowWriter<Pieces>>,
    /// Rows appended in all.
    total: u64,
    /// The file's columns, fixed with its first flush.
    schema: Option<arrow_schema::SchemaRef>,
    /// The time columns in microseconds (what Iceberg's `timestamptz` is) instead of the
    /// archive's milliseconds.
    micros: bool,
}

/// A finished table file, as an Iceberg task commits it.
pub struct Finished {
    pub file: Pieces,
    /// The file's columns.
    pub schema: arrow_schema::SchemaRef,
    pub rows: u64,
}

/// Rows gather in the builders until this many (or [`FLUSH_BYTES`]), then go to the file's
/// writer: memory per open table stays small, and the writer's buffers are reused.
const FLUSH_ROWS: usize = 8192;
const FLUSH_BYTES: usize = 4 << 20;

fn utc_ms() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
}

fn arrow_type(t: ColumnType) -> DataType {
    match t {
        ColumnType::Int => DataType::Int32,
        ColumnType::BigInt => DataType::Int64,
        ColumnType::Double => DataType::Float64,
        ColumnType::Decimal { precision, scale } => DataType::Decimal128(precision, scale as i8),
        ColumnType::Bool => DataType::Boolean,
        ColumnType::Date => DataType::Date32,
        ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ColumnType::String => DataType::Utf8,
    }
}

const TEXTS: [&str; 7] = [
    "time_raw",
    "global_id",
    "database",
    "schema",
    "table",
    "type",
    "logical_clock_raw",
];

impl TableBuilder {
    /// `types`: the config's declarations for this table (other columns are strings). `room`:
    /// what the table's previous file needed ([`Self::finish`]), or none.
    pub fn new(
        types: BTreeMap<String, ColumnType>,
        tz: Tz,
        compression: Compression,
        room: Room,
    ) -> Self {
        let mut reserved = 0;
        let r = &mut reserved;
        Self {
            compression,
            writer: None,
            types,
            tz,
            rows: 0,
            topic: room.builder("topic", r),
            partition: Int32Builder::new(),
            offset: Int64Builder::new(),
            kafka_timestamp: TimestampMillisecondBuilder::new().with_timezone("UTC"),
            change_index: Int32Builder::new(),
            time: TimestampMillisecondBuilder::new().with_timezone("UTC"),
            texts: TEXTS.map(|name| room.builder(name, r)),
            logical_clock: Int64Builder::new(),
            kafka_key: room.builder("kafka_key", r),
            source_offset: room.builder("source_offset", r),
            new: Side::new("new"),
            old: Side::new("old"),
            errors: room.builder("errors", r),
            nulls: room.builder("null_columns", r),
            problems: String::new(),
            null_names: String::new(),
            bytes: 0,
            reserved,
            room,
            seen: Room::default(),
            total: 0,
            schema: None,
            micros: false,
        }
    }

    /// Writes `kafka_timestamp` and `time` in microseconds (an Iceberg table's data file).
    pub fn in_micros(mut self) -> Self {
        self.micros = true;
        self
    }

    /// Whether `c` adds no column once the file's columns are fixed (its first rows were
    /// flushed): a change that does ends the bundle, and starts the next one.
    pub fn fits(&self, c: &Change) -> bool {
        self.writer.is_none()
            || [(&c.new_values, &self.new), (&c.old_values, &self.old)]
                .into_iter()
                .all(|(values, side)| values.as_ref().is_none_or(|v| side.has_all(v)))
    }

    /// Memory held: pending rows, the writer's open row group and the file written so far.
    pub fn memory_bytes(&self) -> usize {
        self.bytes.max(self.reserved)
            + self.rows * 96
            + self
                .writer
                .as_ref()
                .map_or(0, |w| w.memory_size() + Output::memory_bytes(w.inner()))
    }

    /// Adds one change as a row (the caller checked [`Self::fits`]).
    pub fn append(&mut self, p: &Position, c: &Change) -> Result<(), EncodeError> {
        self.topic.append_value(p.topic);
        self.partition.append_value(p.partition);
        self.offset.append_value(p.offset);
        self.kafka_timestamp.append_option(p.timestamp);
        self.change_index
            .append_value(i32::try_from(c.index).unwrap_or(i32::MAX));
        self.time.append_option(c.time_ms);
        let kind = c.kind.as_str();
        for (b, v) in self.texts.iter_mut().zip([
            c.time_raw.as_deref(),
            c.global_id.as_deref(),
            c.database.as_deref(),
            c.schema.as_deref(),
            Some(c.table.as_ref()),
            Some(kind),
            c.logical_clock_raw.as_deref(),
        ]) {
            self.bytes += v.map_or(0, str::len);
            b.append_option(v);
        }
        self.logical_clock.append_option(c.logical_clock);
        self.kafka_key.append_option(p.key);
        self.source_offset.append_option(c.offset_json.as_deref());
        self.bytes += p.key.map_or(0, <[u8]>::len) + c.offset_json.as_ref().map_or(0, |o| o.len());
        self.problems.clear();
        self.null_names.clear();
        let (rows, tz) = (self.rows, self.tz);
        for (side, values) in [
            (&mut self.new, &c.new_values),
            (&mut self.old, &c.old_values),
        ] {
            let Some(values) = values else {
                continue;
            };
            side.place(values, rows, &self.types, &self.room, &mut self.reserved)?;
            for (&i, (col, v)) in side.row.iter().zip(&values.0) {
                if i == usize::MAX {
                    continue;
                }
                let column = &mut side.columns[i];
                match v {
                    None => {
                        column.append_nulls(1);
                        if !self.null_names.is_empty() {
                            self.null_names.push(',');
                        }
                        self.null_names.push_str(side.prefix);
                        self.null_names.push('_');
                        self.null_names.push_str(col);
                    }
                    Some(raw) => {
                        self.bytes += raw.len();
                        if let Err(why) = column.append(raw, side.types[i], tz) {
                            if !self.problems.is_empty() {
                                self.problems.push_str("; ");
                            }
                            let p = side.prefix;
                            // Writing into a String cannot fail.
                            let _ = write!(self.problems, "{p}_{col}: {why}");
                        }
                    }
                }
            }
        }
        self.rows += 1;
        self.total += 1;
        for column in self
            .new
            .columns
            .iter_mut()
            .chain(self.old.columns.iter_mut())
        {
            if column.len() < self.rows {
                column.append_nulls(1);
            }
        }
        self.errors
            .append_option((!self.problems.is_empty()).then_some(self.problems.as_str()));
        self.nulls
            .append_option((!self.null_names.is_empty()).then_some(self.null_names.as_str()));
        if self.rows >= FLUSH_ROWS || self.bytes >= FLUSH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands the pending rows to the file's writer.
    fn flush(&mut self) -> Result<(), EncodeError> {
        let batch = self.batch()?;
        self.rows = 0;
        self.bytes = 0;
        let w = match &mut self.writer {
            Some(w) => w,
            None => self.writer.insert(parquet::arrow::ArrowWriter::try_new(
                Pieces::default(),
                self.schema.insert(batch.schema()).clone(),
                Some(properties(self.compression, self.tz, &value_kinds(&batch))?),
            )?),
        };
        w.write(&batch)?;
        Ok(())
    }

    /// The finished Parquet file, and the room its builders needed (for the table's next file).
    pub fn finish(self) -> Result<(Pieces, Room), EncodeError> {
        self.finish_table().map(|(f, room)| (f.file, room))
    }

    /// [`Self::finish`] with the file's columns and row count.
    pub fn finish_table(mut self) -> Result<(Finished, Room), EncodeError> {
        if self.rows > 0 || self.writer.is_none() {
            self.flush()?;
        }
        let file = match self.writer.take() {
            Some(w) => w.into_inner()?,
            None => Pieces::default(),
        };
        let schema = self
            .schema
            .take()
            .unwrap_or_else(|| Arc::new(Schema::empty()));
        Ok((
            Finished {
                file,
                schema,
                rows: self.total,
            },
            self.seen,
        ))
    }

    /// The pending rows as one batch (the builders start over, with room for as many again).
    fn batch(&mut self) -> Result<RecordBatch, ArrowError> {
        let (reserved, seen) = (&mut self.reserved, &mut self.seen);
        *reserved = 0;
        let micros = self.micros;
        let time = |b: &mut TimestampMillisecondBuilder| -> ArrayRef {
            let a = b.finish();
            if micros {
                Arc::new(
                    a.unary::<_, arrow_array::types::TimestampMicrosecondType>(|ms| {
                        ms.saturating_mul(1000)
                    })
                    .with_timezone("UTC"),
                )
            } else {
                Arc::new(a)
            }
        };
        let time_type = if micros {
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        } else {
            utc_ms()
        };
        let mut fields = vec![
            Field::new("topic", DataType::Utf8, false),
            Field::new("partition", DataType::Int32, false),
            Field::new("offset", DataType::Int64, false),
            Field::new("kafka_timestamp", time_type.clone(), true),
            Field::new("change_index", DataType::Int32, false),
            Field::new("time", time_type, true),
        ];
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(renew_noting("topic", &mut self.topic, reserved, seen)),
            Arc::new(self.partition.finish()),
            Arc::new(self.offset.finish()),
            time(&mut self.kafka_timestamp),
            Arc::new(self.change_index.finish()),
            time(&mut self.time),
        ];
        // time_raw, global_id, database, schema, table, type; logical_clock sits before its raw text.
        for (i, (name, b)) in TEXTS.iter().zip(self.texts.iter_mut()).enumerate() {
            if i == 6 {
                fields.push(Field::new("logical_clock", DataType::Int64, true));
                cols.push(Arc::new(self.logical_clock.finish()));
            }
            fields.push(Field::new(
                *name,
                DataType::Utf8,
                !matches!(*name, "table" | "type"),
            ));
            cols.push(Arc::new(renew_noting(name, b, reserved, seen)));
        }
        fields.push(Field::new("kafka_key", DataType::Binary, true));
        cols.push(Arc::new(renew_noting(
            "kafka_key",
            &mut self.kafka_key,
            reserved,
            seen,
        )));
        fields.push(Field::new("source_offset", DataType::Utf8, true));
        cols.push(Arc::new(renew_noting(
            "source_offset",
            &mut self.source_offset,
            reserved,
            seen,
        )));
        for side in [&mut self.new, &mut self.old] {
            for i in side.sorted() {
                let name = format!("{}_{}", side.prefix, side.names[i]);
                cols.push(side.columns[i].finish(&name, reserved, seen));
                fields.push(Field::new(name, arrow_type(side.types[i]), true));
            }
        }
        fields.push(Field::new("errors", DataType::Utf8, true));
        cols.push(Arc::new(renew_noting(
            "errors",
            &mut self.errors,
            reserved,
            seen,
        )));
        fields.push(Field::new("null_columns", DataType::Utf8, true));
        cols.push(Arc::new(renew_noting(
            "null_columns",
            &mut self.nulls,
            reserved,
            seen,
        )));
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
    }
}

/// The Parquet key-value metadata that marks a CDC table file; its value is the time zone
/// its `TIME` and timestamp columns were read in (restore renders them back in it).
pub const CDC_META: &str = "strata.cdc.time_zone";

/// Columns whose values are (nearly) all different: a dictionary would only be hashed and
/// then dropped once it outgrows its page.
const UNIQUE: [&str; 9] = [
    "offset",
    "kafka_timestamp",
    "time",
    "time_raw",
    "global_id",
    "logical_clock",
    "logical_clock_raw",
    "kafka_key",
    "source_offset",
];

/// A string value column whose values average more than this many bytes holds free text
/// (notes, descriptions, JSON documents): min/max statistics on it prune nothing and cost a
/// byte comparison per value, and a dictionary of it is dropped once it outgrows its page.
const FREE_TEXT_BYTES: usize = 64;

/// Whether a string column holds free text, from `bytes` of text over `values` non-null values.
fn is_free_text(bytes: usize, values: usize) -> bool {
    values > 0 && bytes > FREE_TEXT_BYTES * values
}

/// Whether a dictionary pays on a column whose first rows hold `distinct` different values among
/// `values`: when most are different (ids, amounts, times), it is hashed and then written
/// beside indexes that save nothing.
fn dictionary_pays(values: usize, distinct: usize) -> bool {
    distinct * 2 <= values
}

/// How a value column is written, as its file's first rows show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Free text: neither statistics nor a dictionary.
    FreeText,
    /// Mostly different values: statistics, no dictionary.
    Distinct,
}

/// The `new_`/`old_` string columns of a file's first rows that are free text or mostly
/// distinct (judged once, as the file's settings are fixed with its first rows).
fn value_kinds(batch: &RecordBatch) -> Vec<(String, Kind)> {
    use arrow_array::cast::AsArray;
    use arrow_array::Array;
    batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .filter(|(f, _)| f.name().starts_with("new_") || f.name().starts_with("old_"))
        .filter_map(|(f, a)| {
            let s = a.as_string_opt::<i32>()?;
            let values = s.len() - s.null_count();
            let kind = if is_free_text(s.value_data().len(), values) {
                Kind::FreeText
            } else {
                let distinct: std::collections::HashSet<&str, foldhash::fast::RandomState> =
                    s.iter().flatten().collect();
                if dictionary_pays(values, distinct.len()) {
                    return None;
                }
                Kind::Distinct
            };
            Some((f.name().clone(), kind))
        })
        .collect()
}

/// A table file's writer settings: the task's codec, marked as CDC (with its time zone), page
/// statistics on (analysts filter on these columns) except on free text, dictionaries on the
/// columns that repeat (value columns: as their first rows show), and the plain encoder's page
/// size.
fn properties(
    compression: Compression,
    tz: Tz,
    kinds: &[(String, Kind)],
) -> Result<parquet::file::properties::WriterProperties, EncodeError> {
    use parquet::file::properties::EnabledStatistics;
    use parquet::schema::types::ColumnPath;
    let mut b =
        crate::format::parquet::writer_basics(compression)?.set_key_value_metadata(Some(vec![
            parquet::file::metadata::KeyValue::new(CDC_META.to_string(), tz.name().to_string()),
        ]));
    for col in UNIQUE {
        b = b.set_column_dictionary_enabled(ColumnPath::from(col), false);
    }
    for (col, kind) in kinds {
        b = b.set_column_dictionary_enabled(ColumnPath::from(col.as_str()), false);
        if *kind == Kind::FreeText {
            b = b.set_column_statistics_enabled(
                ColumnPath::from(col.as_str()),
                EnabledStatistics::None,
            );
        }
    }
    Ok(b.build())
}

/// A change read back from a table file, with the message it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub change: Change<'static>,
}

impl Fragment {
    /// Bytes this change adds to the record restored from it: its text and its values with
    /// their column names, as the message's JSON holds them, and a record's bookkeeping (as
    /// [`crate::format::Record::heap_bytes`] counts it). What the decode limit counts, as for other
    /// formats; the change itself takes up to about twice that until it becomes the record.
    fn decoded_bytes(&self) -> u64 {
        let c = &self.change;
        let text = [
            &c.time_raw,
            &c.global_id,
            &c.database,
            &c.schema,
            &c.logical_clock_raw,
            &c.offset_json,
        ]
        .into_iter()
        .flatten()
        .map(|s| s.len())
        .sum::<usize>();
        let values = [&c.old_values, &c.new_values]
            .into_iter()
            .flatten()
            .flat_map(|v| v.iter())
            .map(|(k, v)| 8 + k.len() + v.as_ref().map_or(0, |v| v.len()))
            .sum::<usize>();
        let bytes = self.topic.len() + self.key.as_ref().map_or(0, Vec::len) + c.table.len();
        (bytes + text + values + 96) as u64
    }
}

/// Whether a Parquet object is a CDC table file (its footer says so).
pub fn is_table_file(data: &bytes::Bytes) -> bool {
    parquet::file::reader::SerializedFileReader::new(data.clone()).is_ok_and(|r| {
        use parquet::file::reader::FileReader;
        r.metadata()
            .file_metadata()
            .key_value_metadata()
            .is_some_and(|kv| kv.iter().any(|k| k.key == CDC_META))
    })
}

fn bad(message: String) -> DecodeError {
    DecodeError { at: None, message }
}

/// Reads a table file's rows back into changes (typed values rendered back to the text they
/// came as). `limit` bounds the decoded bytes, as for every archive object.
pub fn decode(data: bytes::Bytes, limit: u64) -> Result<Vec<Fragment>, DecodeError> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{
        Date32Type, Decimal128Type, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType,
        TimestampMillisecondType,
    };
    use arrow_array::Array;
    let builder = crate::format::parquet::reader_builder(&data)
        .map_err(|e| bad(format!("not a readable parquet file: {e}")))?;
    crate::format::parquet_bound::check(&data, builder.metadata(), limit)?;
    let tz: Tz = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == CDC_META))
        .and_then(|k| k.value.as_deref())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            bad(format!(
                "not a CDC table file (no readable {CDC_META} in its footer)"
            ))
        })?;
    let reader = builder
        .with_batch_size(crate::format::parquet::BATCH)
        .build()
        .map_err(|e| bad(format!("not a readable parquet file: {e}")))?;
    let mut out = Vec::new();
    let mut decoded = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| bad(format!("parquet row batch: {e}")))?;
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| bad(format!("CDC table file has no column \"{name}\"")))
        };
        let wrong = |name: &str| bad(format!("column \"{name}\" has an unexpected type"));
        let string_at =
            |a: &ArrayRef, name: &str, i: usize| -> Result<Option<String>, DecodeError> {
                let s = a.as_string_opt::<i32>().ok_or_else(|| wrong(name))?;
                Ok(s.is_valid(i).then(|| s.value(i).to_string()))
            };
        let (topic, part, off, ts, index) = (
            col("topic")?,
            col("partition")?,
            col("offset")?,
            col("kafka_timestamp")?,
            col("change_index")?,
        );
        let part = part
            .as_primitive_opt::<Int32Type>()
            .ok_or_else(|| wrong("partition"))?;
        let off = off
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| wrong("offset"))?;
        let ts = ts
            .as_primitive_opt::<TimestampMillisecondType>()
            .ok_or_else(|| wrong("kafka_timestamp"))?;
        let index = index
            .as_primitive_opt::<Int32Type>()
            .ok_or_else(|| wrong("change_index"))?;
        let key = col("kafka_key")?;
        let key = key
            .as_binary_opt::<i32>()
            .ok_or_else(|| wrong("kafka_key"))?;
        // The text columns as the builder writes them, then source_offset and null_columns.
        let metas: Vec<(&str, ArrayRef)> = TEXTS
            .into_iter()
            .chain(["source_offset", "null_columns"])
            .map(|n| col(n).map(|c| (n, c)))
            .collect::<Result<_, _>>()?;
        // Value columns: (side, source column, array).
        let schema = batch.schema();
        let values: Vec<(bool, String, ArrayRef)> = schema
            .fields()
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                let name = f.name();
                let (new, col) = match (name.strip_prefix("new_"), name.strip_prefix("old_")) {
                    (Some(c), _) => (true, c),
                    (_, Some(c)) => (false, c),
                    _ => return None,
                };
                Some((new, col.to_string(), batch.column(i).clone()))
            })
            .collect();
        for i in 0..batch.num_rows() {
            let meta = |n: usize| string_at(&metas[n].1, metas[n].0, i);
            let table = meta(4)?.ok_or_else(|| bad(format!("row {i}: no table")))?;
            let kind = match meta(5)?.as_deref() {
                Some("I") => super::change::ChangeType::Insert,
                Some("U") => super::change::ChangeType::Update,
                Some("D") => super::change::ChangeType::Delete,
                other => return Err(bad(format!("row {i}: change type {other:?}"))),
            };
            // A side's values exist when the change had them: an insert has no old values, a
            // delete no new ones (an update has both).
            let mut new_values = (kind != super::change::ChangeType::Delete).then(Values::default);
            let mut old_values = (kind != super::change::ChangeType::Insert).then(Values::default);
            for (new, name, a) in &values {
                if !a.is_valid(i) {
                    continue;
                }
                let text = match a.data_type() {
                    DataType::Utf8 => a.as_string::<i32>().value(i).to_string(),
                    DataType::Int32 => a.as_primitive::<Int32Type>().value(i).to_string(),
                    DataType::Int64 => a.as_primitive::<Int64Type>().value(i).to_string(),
                    DataType::Float64 => a.as_primitive::<Float64Type>().value(i).to_string(),
                    DataType::Boolean => a.as_boolean().value(i).to_string(),
                    DataType::Decimal128(_, scale) => super::change::render_decimal(
                        a.as_primitive::<Decimal128Type>().value(i),
                        u8::try_from(*scale).unwrap_or(0),
                    ),
                    DataType::Date32 => super::change::render(
                        &Typed::Date(a.as_primitive::<Date32Type>().value(i)),
                        ColumnType::Date,
                        tz,
                    ),
                    DataType::Timestamp(TimeUnit::Microsecond, _) => super::change::render(
                        &Typed::Timestamp(a.as_primitive::<TimestampMicrosecondType>().value(i)),
                        ColumnType::Timestamp,
                        tz,
                    ),
                    _ => {
                        return Err(wrong(&format!(
                            "{}_{name}",
                            if *new { "new" } else { "old" }
                        )))
                    }
                };
                let side = if *new {
                    &mut new_values
                } else {
                    &mut old_values
                };
                side.get_or_insert_with(Values::default)
                    .push(Cow::Owned(name.clone()), Some(Cow::Owned(text)));
            }
            if let Some(nulls) = meta(8)? {
                for n in nulls.split(',') {
                    let (side, name) = match (n.strip_prefix("new_"), n.strip_prefix("old_")) {
                        (Some(c), _) => (&mut new_values, c),
                        (_, Some(c)) => (&mut old_values, c),
                        _ => return Err(bad(format!("row {i}: null_columns names {n:?}"))),
                    };
                    side.get_or_insert_with(Values::default)
                        .push(Cow::Owned(name.to_string()), None);
                }
            }
            let fragment = Fragment {
                topic: topic
                    .as_string_opt::<i32>()
                    .ok_or_else(|| wrong("topic"))?
                    .value(i)
                    .to_string(),
                partition: part.value(i),
                offset: off.value(i),
                timestamp: ts.is_valid(i).then(|| ts.value(i)),
                key: key.is_valid(i).then(|| key.value(i).to_vec()),
                change: Change {
                    index: usize::try_from(index.value(i)).unwrap_or(0),
                    time_raw: meta(0)?.map(Cow::Owned),
                    time_ms: None,
                    global_id: meta(1)?.map(Cow::Owned),
                    database: meta(2)?.map(Cow::Owned),
                    schema: meta(3)?.map(Cow::Owned),
                    table: Cow::Owned(table),
                    kind,
                    logical_clock_raw: meta(6)?.map(Cow::Owned),
                    logical_clock: None,
                    old_values,
                    new_values,
                    offset_json: meta(7)?.map(Cow::Owned),
                },
            };
            // Column names repeat in every row's values: rows can be far larger than the
            // arrays they came from, so they are counted too.
            decoded += fragment.decoded_bytes();
            if decoded > limit {
                return Err(crate::format::too_large(limit));
            }
            out.push(fragment);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::change::parse_message;
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Decimal128Type, Int32Type};
    use arrow_array::Array;

    fn rows(msg: &str, offset: i64) -> Vec<(Position<'static>, Change<'_>)> {
        parse_message(msg.as_bytes(), Tz::UTC)
            .unwrap()
            .into_iter()
            .map(|c| {
                (
                    Position {
                        topic: "cdc.shop",
                        partition: 2,
                        offset,
                        timestamp: Some(1_700_000_000_000),
                        key: None,
                    },
                    c,
                )
            })
            .collect()
    }

    /// A table of strings only, Snappy-compressed, with no room carried over.
    fn untyped() -> TableBuilder {
        TableBuilder::new(
            BTreeMap::new(),
            Tz::UTC,
            super::Compression::Snappy,
            Room::default(),
        )
    }

    /// `id` an int, `amount` a decimal(10,2); other columns strings.
    fn id_and_amount() -> BTreeMap<String, ColumnType> {
        BTreeMap::from([
            ("id".to_string(), ColumnType::Int),
            (
                "amount".to_string(),
                ColumnType::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
        ])
    }

    #[test]
    fn a_table_file_has_metadata_then_new_and_old_columns_in_declared_types() {
        let types = id_and_amount();
        let mut s = TableBuilder::new(types, Tz::UTC, super::Compression::Snappy, Room::default());
        let mut all = rows(
            r#"[{"TIME":"20240101000000","GLOBAL_ID":"g1","DATABASE":"shop","TABLE":"orders","TYPE":"I","LOGICAL_CLOCK":"5","NEW_VALUES":{"id":"7","amount":"12.30","note":"hi"}}]"#,
            40,
        );
        all.extend(rows(
            r#"[{"GLOBAL_ID":"g2","DATABASE":"shop","TABLE":"orders","TYPE":"U","OLD_VALUES":{"id":"7","amount":"12.30"},"NEW_VALUES":{"id":"x7","amount":"13"}}]"#,
            41,
        ));
        for (p, c) in &all {
            s.append(p, c).unwrap();
        }
        // It is a Parquet file as it is: read it back with the plain reader.
        let file = s.finish().unwrap().0.to_bytes();
        let mut back: Vec<RecordBatch> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                .unwrap()
                .build()
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        assert_eq!(back.len(), 1);
        let b = back.remove(0);
        let names: Vec<String> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(
            names[16..],
            [
                "new_amount",
                "new_id",
                "new_note",
                "old_amount",
                "old_id",
                "errors",
                "null_columns"
            ]
        );
        assert_eq!(b.num_rows(), 2);
        let id = b
            .column_by_name("new_id")
            .unwrap()
            .as_primitive::<Int32Type>();
        assert_eq!((id.value(0), id.is_null(1)), (7, true));
        let amount = b
            .column_by_name("new_amount")
            .unwrap()
            .as_primitive::<Decimal128Type>();
        assert_eq!((amount.value(0), amount.value(1)), (1230, 1300));
        let errors = b.column_by_name("errors").unwrap().as_string::<i32>();
        assert!(errors.is_null(0));
        assert_eq!(errors.value(1), "new_id: \"x7\" is not a valid int");
        // A side has the columns its values had: no old note was seen.
        assert!(b.column_by_name("old_note").is_none());
        let old_id = b.column_by_name("old_id").unwrap();
        assert_eq!(old_id.null_count(), 1, "the insert has no old values");
        let kind = b.column_by_name("type").unwrap().as_string::<i32>();
        assert_eq!((kind.value(0), kind.value(1)), ("I", "U"));
    }

    #[test]
    fn values_land_in_their_columns_whatever_their_order_across_flushes() {
        let mut s = untyped();
        // More rows than one flush holds; the values' order changes every 3rd row, a new
        // column comes in on row 5, and every 1000th row sends `b` twice (its last value counts).
        let n = FLUSH_ROWS as i64 + 500;
        for i in 0..n {
            let values = match (i % 3, i % 1000 == 7, i >= 5) {
                (_, true, _) => format!(r#""b":"x","a":"a{i}","b":"b{i}","c":"c{i}""#),
                (0, _, true) => format!(r#""c":"c{i}","b":"b{i}","a":"a{i}""#),
                (_, _, true) => format!(r#""a":"a{i}","b":"b{i}","c":"c{i}""#),
                _ => format!(r#""b":"b{i}","a":"a{i}""#),
            };
            let msg = format!(r#"[{{"TABLE":"t","TYPE":"I","NEW_VALUES":{{{values}}}}}]"#);
            for (p, c) in rows(&msg, i) {
                assert!(s.fits(&c));
                s.append(&p, &c).unwrap();
            }
        }
        let back = decode(s.finish().unwrap().0.to_bytes(), 1 << 30).unwrap();
        assert_eq!(back.len(), n as usize);
        for (i, f) in back.iter().enumerate() {
            let v = f.change.new_values.as_ref().unwrap();
            assert_eq!(f.offset, i as i64);
            assert_eq!(v["a"].as_deref(), Some(format!("a{i}").as_str()), "row {i}");
            assert_eq!(v["b"].as_deref(), Some(format!("b{i}").as_str()), "row {i}");
            let c = (i >= 5 || i % 1000 == 7).then(|| format!("c{i}"));
            assert_eq!(
                v.get("c").cloned().flatten().as_deref(),
                c.as_deref(),
                "row {i}"
            );
        }
    }

    #[test]
    fn dictionaries_only_on_the_columns_that_repeat_and_no_statistics_on_free_text() {
        let mut s = untyped();
        for i in 0..100 {
            // A note of 65 bytes or more on average is free text; 64 is not.
            let (note, short) = ("n".repeat(60 + i as usize % 10), "s".repeat(64));
            let msg = format!(
                r#"[{{"TIME":"20240101000000","GLOBAL_ID":"g{i}","DATABASE":"shop","TABLE":"orders","TYPE":"I","LOGICAL_CLOCK":"{i}","NEW_VALUES":{{"id":"{i}","note":"{note}","code":"{short}","status":"s{}"}}}}]"#,
                i % 3
            );
            for (p, c) in rows(&msg, i) {
                s.append(&p, &c).unwrap();
            }
        }
        use parquet::file::reader::FileReader;
        let file = s.finish().unwrap().0.to_bytes();
        let reader = parquet::file::reader::SerializedFileReader::new(file).unwrap();
        let group = reader.metadata().row_group(0);
        let dictionary = |name: &str| {
            group
                .columns()
                .iter()
                .find(|c| c.column_path().string() == name)
                .unwrap_or_else(|| panic!("no column {name}"))
                .dictionary_page_offset()
                .is_some()
        };
        for col in UNIQUE {
            assert!(!dictionary(col), "{col} has a dictionary");
        }
        for col in [
            "topic",
            "table",
            "type",
            "database",
            "new_code",
            "new_status",
        ] {
            assert!(dictionary(col), "{col} has no dictionary");
        }
        assert!(!dictionary("new_note"), "free text has a dictionary");
        assert!(
            !dictionary("new_id"),
            "a column of distinct values has a dictionary"
        );
        let statistics = |name: &str| {
            group
                .columns()
                .iter()
                .find(|c| c.column_path().string() == name)
                .is_some_and(|c| c.statistics().is_some())
        };
        for col in ["new_id", "new_code", "new_status", "global_id", "time"] {
            assert!(statistics(col), "{col} has no statistics");
        }
        assert!(!statistics("new_note"), "free text has statistics");
    }

    #[test]
    fn a_tables_next_file_starts_with_the_room_its_last_one_needed() {
        let fill = |s: &mut TableBuilder, from: i64| {
            for i in from..from + 50 {
                let note = "n".repeat(100);
                let msg = format!(
                    r#"[{{"GLOBAL_ID":"g{i}","DATABASE":"shop","TABLE":"orders","TYPE":"I","NEW_VALUES":{{"id":"{i}","note":"{note}"}}}}]"#
                );
                for (p, c) in rows(&msg, i) {
                    s.append(&p, &c).unwrap();
                }
            }
        };
        let compression = super::Compression::Snappy;
        let mut first = TableBuilder::new(BTreeMap::new(), Tz::UTC, compression, Room::default());
        fill(&mut first, 0);
        let (_, room) = first.finish().unwrap();
        assert_eq!(room.0.get("new_note"), Some(&(50, 5000)));
        assert_eq!(room.0.get("topic"), Some(&(50, 50 * "cdc.shop".len())));
        assert_eq!(room.0.get("global_id").map(|r| r.0), Some(50));
        // The next file's builders start with that room (and a quarter), counted as held.
        let mut next = TableBuilder::new(BTreeMap::new(), Tz::UTC, compression, room);
        let at_start = next.memory_bytes();
        assert!(at_start >= 50 * "cdc.shop".len() * 5 / 4, "{at_start}");
        fill(&mut next, 50);
        let (file, _) = next.finish().unwrap();
        let back = decode(file.to_bytes(), 1 << 30).unwrap();
        assert_eq!(back.len(), 50);
        assert_eq!(back[7].offset, 57);
        let values = back[7].change.new_values.as_ref().unwrap();
        assert_eq!(values["note"].as_deref(), Some("n".repeat(100).as_str()));
        assert_eq!(values["id"].as_deref(), Some("57"));
    }

    #[test]
    fn free_text_is_told_by_the_average_length_of_its_values() {
        assert!(!is_free_text(0, 0), "no values: not free text");
        assert!(!is_free_text(64 * 10, 10));
        assert!(is_free_text(64 * 10 + 1, 10));
        assert!(is_free_text(700, 1));
    }

    #[test]
    fn a_dictionary_pays_when_at_most_half_the_values_differ() {
        assert!(dictionary_pays(0, 0));
        assert!(dictionary_pays(100, 50));
        assert!(!dictionary_pays(100, 51));
        assert!(!dictionary_pays(8192, 8192));
    }

    #[test]
    fn plain_messages_come_back_from_table_files_byte_for_byte() {
        // Canonical form: compact, keys sorted. Nulls, typed values, OFFSET, a schema, deletes.
        let msgs = [
            r#"[{"DATABASE":"shop","GLOBAL_ID":"g1","LOGICAL_CLOCK":"5","NEW_VALUES":{"amount":"12.30","id":"7","note":null},"OFFSET":{"BINLOG_NAME":"b.3","BINLOG_POS":"42"},"TABLE":"orders","TIME":"20240101000000","TYPE":"I"}]"#,
            r#"[{"DATABASE":"shop","GLOBAL_ID":"g2","NEW_VALUES":{"amount":"13.00","id":"7"},"OLD_VALUES":{"amount":"12.30","id":"7"},"SCHEMA":"public","TABLE":"orders","TYPE":"U"},{"DATABASE":"shop","GLOBAL_ID":"g3","OLD_VALUES":{"amount":"1.00","id":"8"},"SCHEMA":"public","TABLE":"orders","TYPE":"D"}]"#,
        ];
        let types = id_and_amount();
        let mut s = TableBuilder::new(types, Tz::UTC, super::Compression::Zstd, Room::default());
        for (i, m) in msgs.iter().enumerate() {
            let p = super::super::change::parse(m.as_bytes(), Tz::UTC).unwrap();
            assert!(p.plain, "{m}");
            for c in p.changes {
                let at = Position {
                    topic: "t",
                    partition: 0,
                    offset: i as i64,
                    timestamp: Some(5),
                    key: Some(b"k"),
                };
                s.append(&at, &c).unwrap();
            }
        }
        let data = s.finish().unwrap().0.to_bytes();
        assert!(is_table_file(&data));
        let back = decode(data, 1 << 30).unwrap();
        assert_eq!(back.len(), 3);
        for (i, m) in msgs.iter().enumerate() {
            let changes: Vec<Change> = back
                .iter()
                .filter(|f| f.offset == i as i64)
                .map(|f| f.change.clone())
                .collect();
            assert_eq!(
                String::from_utf8(super::super::change::message_json(&changes)).unwrap(),
                *m
            );
        }
        assert_eq!(back[0].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(back[0].timestamp, Some(5));
    }

    #[test]
    fn decoding_stops_at_the_limit_when_rows_outgrow_their_file() {
        // A column name of 2000 bytes is in the file once; every row's values repeat it. Its
        // values are small integers: 8192 rows are a few KiB of Parquet and 16 MiB of changes.
        let name = "c".repeat(2000);
        let types = BTreeMap::from([(name.clone(), ColumnType::Int)]);
        let compression = super::Compression::Snappy;
        let mut s = TableBuilder::new(types, Tz::UTC, compression, Room::default());
        let msg = format!(r#"[{{"TABLE":"t","TYPE":"I","NEW_VALUES":{{"{name}":"1"}}}}]"#);
        for i in 0..8192 {
            for (p, c) in rows(&msg, i) {
                s.append(&p, &c).unwrap();
            }
        }
        let data = s.finish().unwrap().0.to_bytes();
        assert!(data.len() < 64 << 10, "{} bytes", data.len());
        let err = match decode(data.clone(), 4 << 20) {
            Ok(f) => panic!("{} changes decoded within 4 MiB", f.len()),
            Err(e) => e,
        };
        assert!(err.message.contains("decodes to more than 4MiB"), "{err}");
        assert_eq!(decode(data, 1 << 30).unwrap().len(), 8192);
    }

    #[test]
    fn messages_the_rows_cannot_rebuild_are_not_plain() {
        for m in [
            r#"[{"TABLE":"t","TYPE":"I","NEW_VALUES":{"id":7}}]"#,
            r#"[{"TABLE":"t","TYPE":"I","NEW_VALUES":{"id":"7"},"EXTRA":"x"}]"#,
            r#"[{"TABLE":"t","TYPE":"U","NEW_VALUES":{"id":"7"}}]"#,
            r#"[{"TABLE":"t","TYPE":"I","DATABASE":null,"NEW_VALUES":{"id":"7"}}]"#,
            r#"[{"TABLE":"t","TYPE":"I","NEW_VALUES":{"a,b":"7"}}]"#,
        ] {
            assert!(
                !super::super::change::parse(m.as_bytes(), Tz::UTC)
                    .unwrap()
                    .plain,
                "{m}"
            );
        }
    }
}
