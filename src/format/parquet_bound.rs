//! The most a Parquet file can decode to, found before decoding it: from the page headers the
//! reader follows (each page's decompressed size and value count, read here with a small Thrift
//! reader) and the longest entry of each dictionary. A file over its limit is refused before
//! any page is decoded, whatever its footer declares.
//!
//! Why not the footer's sizes: they count encoded bytes, so a dictionary value of 200 KiB that
//! run-length indices repeat 8192 times declares kilobytes and decodes to 1.6 GiB, in one
//! batch of the reader. The bound counts, per data page, its values at the longest dictionary
//! entry (dictionary encodings), its own size (plain encodings), or its value count times the
//! type's width (fixed-width types): never less than the reader allocates for the page.

use super::DecodeError;
use bytes::Bytes;
use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::column::page::{Page, PageReader};
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use parquet::file::serialized_reader::SerializedPageReader;
use std::sync::Arc;

/// Page types of the Parquet format (`PageType`).
const DATA_PAGE: i32 = 0;
const INDEX_PAGE: i32 = 1;
const DICTIONARY_PAGE: i32 = 2;
const DATA_PAGE_V2: i32 = 3;
/// Encodings whose values are indices into the chunk's dictionary.
const PLAIN_DICTIONARY: i32 = 2;
const RLE_DICTIONARY: i32 = 8;
/// Each value shares a prefix of the one before: a value can be as long as its whole page.
const DELTA_BYTE_ARRAY: i32 = 7;
/// Bytes the reader keeps per variable-length value besides its bytes (an `i32` offset).
const OFFSET: u64 = 4;

/// Refuses a file that may decode to more than `limit` bytes, before decoding any of it. Also
/// refuses column chunks outside the file (the reader panics on some of those).
pub(crate) fn check(data: &Bytes, meta: &ParquetMetaData, limit: u64) -> Result<(), DecodeError> {
    bound(data, meta, limit).map(drop)
}

/// The bound of the whole file; an error once it passes `limit`.
fn bound(data: &Bytes, meta: &ParquetMetaData, limit: u64) -> Result<u64, DecodeError> {
    let mut total = 0u64;
    for group in meta.row_groups() {
        let rows = usize::try_from(group.num_rows().max(0)).unwrap_or(usize::MAX);
        for col in group.columns() {
            chunk(data, col, rows, limit, &mut total)?;
        }
    }
    Ok(total)
}

/// What the reader holds per value of a fixed-width column: the physical width, or an Arrow
/// decimal's 16 or 32 bytes (a decimal stored as `INT32` still decodes to 16).
fn fixed_width(col: &ColumnChunkMetaData) -> Option<u64> {
    let descr = col.column_descr();
    let physical = match col.column_type() {
        Physical::BOOLEAN => 1,
        Physical::INT32 | Physical::FLOAT => 4,
        Physical::INT64 | Physical::DOUBLE => 8,
        Physical::INT96 => 12,
        Physical::FIXED_LEN_BYTE_ARRAY => u64::try_from(descr.type_length().max(0)).unwrap_or(0),
        _ => return None,
    };
    let decimal = descr.converted_type() == ConvertedType::DECIMAL
        || matches!(descr.logical_type_ref(), Some(LogicalType::Decimal { .. }));
    Some(if decimal { physical.max(32) } else { physical })
}

fn malformed(col: &ColumnChunkMetaData, why: impl std::fmt::Display) -> DecodeError {
    DecodeError::new(
        None,
        format!(
            "not a readable parquet file: column \"{}\": {why}",
            col.column_path()
        ),
    )
}

/// Adds one column chunk's bound to `total`, failing as soon as `total` passes `limit`.
fn chunk(
    data: &Bytes,
    col: &ColumnChunkMetaData,
    rows: usize,
    limit: u64,
    total: &mut u64,
) -> Result<(), DecodeError> {
    // Where the reader starts and how far it reads (`ColumnChunkMetaData::byte_range`).
    let start = col
        .dictionary_page_offset()
        .unwrap_or_else(|| col.data_page_offset());
    let len = col.compressed_size();
    let (Ok(start), Ok(len)) = (usize::try_from(start), usize::try_from(len)) else {
        return Err(malformed(col, "negative offset or size"));
    };
    let end = start
        .checked_add(len)
        .filter(|e| *e <= data.len())
        .ok_or_else(|| malformed(col, "its pages lie outside the file"))?;
    let fixed = fixed_width(col);
    // The longest dictionary entry, once the dictionary page is read.
    let mut longest: Option<u64> = None;
    let mut pos = start;
    while pos < end {
        let (h, header_len) = page_header(&data[pos..end])
            .map_err(|e| malformed(col, format!("page header at byte {pos}: {e}")))?;
        let body = pos + header_len;
        let (Ok(compressed), Ok(size)) =
            (usize::try_from(h.compressed), u64::try_from(h.uncompressed))
        else {
            return Err(malformed(col, format!("page at byte {pos}: negative size")));
        };
        if compressed > end - body {
            return Err(malformed(
                col,
                format!("page at byte {pos} runs past its column chunk"),
            ));
        }
        let values = u64::try_from(h.num_values.max(0)).unwrap_or(0);
        let bound = match h.page_type {
            INDEX_PAGE => 0,
            DICTIONARY_PAGE => {
                // Held decoded while the chunk is read; checked before it is decompressed.
                let held = size.saturating_add(values.saturating_mul(OFFSET));
                add(total, held, limit)?;
                if fixed.is_none() {
                    let entry = if pos == start {
                        longest_entry(data, col, rows)?.unwrap_or(size)
                    } else {
                        size
                    };
                    longest = Some(longest.unwrap_or(0).max(entry));
                }
                0
            }
            DATA_PAGE | DATA_PAGE_V2 => {
                let decoded = match (fixed, h.encoding) {
                    (Some(w), _) => values.saturating_mul(w),
                    (None, PLAIN_DICTIONARY | RLE_DICTIONARY) => {
                        values.saturating_mul(longest.unwrap_or(size).saturating_add(OFFSET))
                    }
                    (None, DELTA_BYTE_ARRAY) => values.saturating_mul(size.saturating_add(OFFSET)),
                    (None, _) => size.saturating_add(values.saturating_mul(OFFSET)),
                };
                decoded.max(size)
            }
            _ => size,
        };
        add(total, bound, limit)?;
        pos = body + compressed;
    }
    Ok(())
}

fn add(total: &mut u64, bytes: u64, limit: u64) -> Result<(), DecodeError> {
    *total = total.saturating_add(bytes);
    if *total > limit {
        return Err(super::too_large(limit));
    }
    Ok(())
}

/// The longest entry of the chunk's dictionary page (its first page), read and decompressed
/// by the parquet reader itself; `None` when its entries do not parse (the reader then fails).
fn longest_entry(
    data: &Bytes,
    col: &ColumnChunkMetaData,
    rows: usize,
) -> Result<Option<u64>, DecodeError> {
    let mut pages = SerializedPageReader::new(Arc::new(data.clone()), col, rows, None)
        .map_err(|e| malformed(col, e))?;
    let Some(Page::DictionaryPage {
        buf, num_values, ..
    }) = pages.get_next_page().map_err(|e| malformed(col, e))?
    else {
        return Ok(None);
    };
    // PLAIN byte arrays: a 4-byte little-endian length, then the bytes.
    let mut rest = &buf[..];
    let mut longest = 0u64;
    for _ in 0..num_values {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Ok(None);
        };
        let n = u32::from_le_bytes(*len) as usize;
        if n > tail.len() {
            return Ok(None);
        }
        longest = longest.max(n as u64);
        rest = &tail[n..];
    }
    Ok(Some(longest))
}

/// The fields of a Parquet `PageHeader` the bound needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PageHeader {
    page_type: i32,
    uncompressed: i32,
    compressed: i32,
    /// Values (levels) of a data page, entries of a dictionary page.
    num_values: i32,
    encoding: i32,
}

/// Reads a `PageHeader` (Thrift compact protocol) from the start of `buf`: the header and its
/// length in bytes.
fn page_header(buf: &[u8]) -> Result<(PageHeader, usize), String> {
    let mut r = Compact { buf, pos: 0 };
    let mut h = PageHeader {
        page_type: -1,
        uncompressed: -1,
        compressed: -1,
        num_values: 0,
        encoding: -1,
    };
    let (mut has_type, mut has_sizes) = (false, 0);
    let mut last = 0i16;
    while let Some((id, ty)) = r.field(&mut last)? {
        match (id, ty) {
            (1, I32) => {
                h.page_type = r.i32()?;
                has_type = true;
            }
            (2, I32) => {
                h.uncompressed = r.i32()?;
                has_sizes += 1;
            }
            (3, I32) => {
                h.compressed = r.i32()?;
                has_sizes += 1;
            }
            // DataPageHeader, DictionaryPageHeader: num_values is field 1, encoding field 2;
            // DataPageHeaderV2: num_values 1, encoding 4.
            (5 | 7 | 8, STRUCT) => {
                let encoding_field = if id == 8 { 4 } else { 2 };
                let mut last = 0i16;
                while let Some((sub, ty)) = r.field(&mut last)? {
                    match (sub, ty) {
                        (1, I32) => h.num_values = r.i32()?,
                        (s, I32) if s == encoding_field => h.encoding = r.i32()?,
                        _ => r.skip(ty, 1)?,
                    }
                }
            }
            _ => r.skip(ty, 0)?,
        }
    }
    if !has_type || has_sizes != 2 {
        return Err("a required field is missing".into());
    }
    Ok((h, r.pos))
}

// Thrift compact protocol type ids.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const I8: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;
/// Nesting a page header never needs (statistics are two levels deep).
const MAX_DEPTH: u8 = 16;

/// A Thrift compact protocol reader over a byte slice: just enough to read a page header and
/// skip what it does not need. Every element read consumes at least a byte, so no loop runs
/// longer than the input.
struct Compact<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Compact<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.buf.get(self.pos).ok_or("ends inside a page header")?;
        self.pos += 1;
        Ok(b)
    }

    fn bytes(&mut self, n: usize) -> Result<(), String> {
        if n > self.buf.len() - self.pos {
            return Err("ends inside a page header".into());
        }
        self.pos += n;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a varint longer than 10 bytes".into())
    }

    fn zigzag(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn i32(&mut self) -> Result<i32, String> {
        i32::try_from(self.zigzag()?).map_err(|_| "an i32 out of range".to_string())
    }

    /// The next field's id and type; `None` at the struct's end.
    fn field(&mut self, last: &mut i16) -> Result<Option<(i16, u8)>, String> {
        let b = self.byte()?;
        if b == 0 {
            return Ok(None);
        }
        let delta = i16::from(b >> 4);
        let id = if delta == 0 {
            i16::try_from(self.zigzag()?).map_err(|_| "a field id out of range".to_string())?
        } else {
            last.checked_add(delta).ok_or("a field id out of range")?
        };
        *last = id;
        Ok(Some((id, b & 0x0f)))
    }

    /// Skips a value of type `ty` (a field's: booleans carry their value in the type).
    fn skip(&mut self, ty: u8, depth: u8) -> Result<(), String> {
        match ty {
            BOOL_TRUE | BOOL_FALSE => Ok(()),
            _ => self.skip_value(ty, depth),
        }
    }

    /// Skips a value of type `ty` as it is written inside a collection (booleans take a byte).
    fn skip_value(&mut self, ty: u8, depth: u8) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("nested too deeply".into());
        }
        match ty {
            BOOL_TRUE | BOOL_FALSE | I8 => self.bytes(1),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.bytes(8),
            BINARY => {
                let n = usize::try_from(self.varint()?).map_err(|_| "a length out of range")?;
                self.bytes(n)
            }
            LIST | SET => {
                let b = self.byte()?;
                let n = match b >> 4 {
                    15 => self.varint()?,
                    n => u64::from(n),
                };
                for _ in 0..n {
                    self.skip_value(b & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            MAP => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                let kv = self.byte()?;
                for _ in 0..n {
                    self.skip_value(kv >> 4, depth + 1)?;
                    self.skip_value(kv & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            STRUCT => {
                let mut last = 0i16;
                while let Some((_, t)) = self.field(&mut last)? {
                    self.skip(t, depth + 1)?;
                }
                Ok(())
            }
            other => Err(format!("unknown Thrift type {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Compression, Encoder, FormatKind, FormatSpec, Record, TextOptions};
    use super::*;
    use arrow_array::{ArrayRef, BinaryArray, RecordBatch};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression as Codec, ZstdLevel};
    use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::schema::types::ColumnPath;
    use proptest::prelude::*;

    fn records(n: usize, value: usize) -> Vec<Record> {
        (0..n)
            .map(|i| Record {
                topic: "orders".into(),
                partition: Some(1),
                offset: Some(i as i64),
                timestamp: Some(1_700_000_000_000 + i as i64),
                timestamp_type: super::super::TimestampType::CreateTime,
                key: (i % 3 != 0).then(|| format!("key-{i}").into_bytes()),
                value: Some(vec![b'a' + (i % 26) as u8; value + i % 7]),
                headers: (0..i % 4)
                    .map(|h| super::super::Header {
                        key: format!("h{h}"),
                        value: (h != 2).then(|| vec![h as u8; 5]),
                    })
                    .collect(),
            })
            .collect()
    }

    /// A file as strata dump writes it.
    fn strata_file(records: &[Record]) -> Bytes {
        let spec = FormatSpec::new(
            FormatKind::Parquet,
            Compression::Snappy,
            TextOptions::default(),
        )
        .unwrap();
        let mut e = Encoder::in_memory(&spec, "orders").unwrap();
        for r in records {
            r.with_view(|v| e.append(v)).unwrap();
        }
        Bytes::from(e.finish().unwrap().out)
    }

    /// `file`'s rows, changed by `map` and written again with `props`.
    fn rewrite(
        file: Bytes,
        props: WriterProperties,
        map: impl Fn(RecordBatch) -> RecordBatch,
    ) -> Bytes {
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        let mut w =
            ArrowWriter::try_new(Vec::new(), super::super::parquet::schema(), Some(props)).unwrap();
        for b in reader {
            w.write(&map(b.unwrap())).unwrap();
        }
        Bytes::from(w.into_inner().unwrap())
    }

    /// Key and value of every row one `len`-byte value, dictionary-encoded: the file holds it
    /// once, the rows decode to `rows` copies in each column.
    fn dictionary_bomb(rows: usize, len: usize) -> Bytes {
        let big = vec![b'x'; len];
        let props = WriterProperties::builder()
            .set_statistics_enabled(EnabledStatistics::None)
            .set_compression(Codec::SNAPPY)
            .set_dictionary_enabled(false)
            .set_column_dictionary_enabled(ColumnPath::from("key"), true)
            .set_column_dictionary_enabled(ColumnPath::from("value"), true)
            .build();
        rewrite(strata_file(&records(rows, 1)), props, |b| {
            let col: ArrayRef = Arc::new(BinaryArray::from_iter_values(std::iter::repeat_n(
                &big[..],
                b.num_rows(),
            )));
            let mut cols = b.columns().to_vec();
            cols[5] = col.clone();
            cols[6] = col;
            RecordBatch::try_new(b.schema(), cols).unwrap()
        })
    }

    /// Bytes the calling thread has allocated so far (jemalloc's counter: strata's `malloc`).
    fn allocated() -> u64 {
        tikv_jemalloc_ctl::thread::allocatedp::read()
            .expect("jemalloc thread.allocatedp")
            .get()
    }

    #[test]
    fn a_repeated_dictionary_value_is_refused_before_anything_is_decoded() {
        // 8192 rows of a 4 KiB value in key and value: a file of less than 100 KiB (mostly
        // offsets and timestamps) whose footer declares about as much, decoding to 64 MiB in
        // the reader's first batch.
        let data = dictionary_bomb(8192, 4 << 10);
        assert!(data.len() < 128 << 10, "{} bytes", data.len());
        let limit = 16 << 20;
        let before = allocated();
        let err = super::super::parquet::decode(data.clone(), limit).unwrap_err();
        let spent = allocated() - before;
        assert!(err.message.contains("decodes to more than 16MiB"), "{err}");
        assert!(
            spent < 2 << 20,
            "decoding allocated {spent} bytes before refusing a file of {} bytes",
            data.len()
        );
        // Within a limit above what it decodes to, it reads back.
        let rows = super::super::parquet::decode(data, 1 << 30).unwrap();
        assert_eq!(rows.len(), 8192);
        assert_eq!(rows[8191].value.as_ref().map(Vec::len), Some(4 << 10));
    }

    #[test]
    fn the_bound_never_refuses_what_the_records_fit_in() {
        // The bound has a constant part per column chunk (dictionaries, levels), so a file of
        // a single record may pass its records' size by a few dozen bytes.
        for (n, value) in [(1, 0), (10, 3), (3000, 40), (20_000, 700)] {
            let recs = records(n, value);
            let exact: u64 = recs.iter().map(Record::heap_bytes).sum();
            let data = strata_file(&recs);
            let got = super::super::parquet::decode(data.clone(), exact + 1024)
                .unwrap_or_else(|e| panic!("{n} records of {exact} bytes: {e}"));
            assert_eq!(got, recs);
            // And it is an upper bound: the same file refused below what it decodes to.
            let bytes: u64 = recs
                .iter()
                .map(|r| {
                    (r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len))
                        as u64
                })
                .sum();
            let meta = ParquetRecordBatchReaderBuilder::try_new(data.clone()).unwrap();
            assert!(check(&data, meta.metadata(), bytes.saturating_sub(1)).is_err() || bytes == 0);
        }
    }

    /// Every page header of every column, as the parquet crate's own reader reports them:
    /// (type, decompressed size, values, encoding).
    fn pages_by_parquet(data: &Bytes) -> Vec<(i32, usize, u32, String)> {
        let reader = SerializedFileReader::new(data.clone()).unwrap();
        let mut out = Vec::new();
        for g in 0..reader.num_row_groups() {
            let group = reader.get_row_group(g).unwrap();
            for c in 0..group.num_columns() {
                let mut pages = group.get_column_page_reader(c).unwrap();
                while let Some(p) = pages.get_next_page().unwrap() {
                    let kind = match p.page_type() {
                        parquet::basic::PageType::DATA_PAGE => DATA_PAGE,
                        parquet::basic::PageType::DATA_PAGE_V2 => DATA_PAGE_V2,
                        parquet::basic::PageType::DICTIONARY_PAGE => DICTIONARY_PAGE,
                        _ => INDEX_PAGE,
                    };
                    out.push((
                        kind,
                        p.buffer().len(),
                        p.num_values(),
                        format!("{:?}", p.encoding()),
                    ));
                }
            }
        }
        out
    }

    /// The same, from this module's walk of the headers.
    fn pages_by_walk(data: &Bytes) -> Vec<(i32, usize, u32, String)> {
        let meta = ParquetRecordBatchReaderBuilder::try_new(data.clone()).unwrap();
        let mut out = Vec::new();
        for g in meta.metadata().row_groups() {
            for col in g.columns() {
                let start = col
                    .dictionary_page_offset()
                    .unwrap_or_else(|| col.data_page_offset()) as usize;
                let end = start + col.compressed_size() as usize;
                let mut pos = start;
                while pos < end {
                    let (h, n) = page_header(&data[pos..end]).unwrap();
                    let encoding = [
                        "PLAIN",
                        "GROUP_VAR_INT",
                        "PLAIN_DICTIONARY",
                        "RLE",
                        "BIT_PACKED",
                        "DELTA_BINARY_PACKED",
                        "DELTA_LENGTH_BYTE_ARRAY",
                        "DELTA_BYTE_ARRAY",
                        "RLE_DICTIONARY",
                        "BYTE_STREAM_SPLIT",
                    ][h.encoding as usize]
                        .to_string();
                    out.push((
                        h.page_type,
                        h.uncompressed as usize,
                        h.num_values as u32,
                        encoding,
                    ));
                    pos += n + h.compressed as usize;
                }
            }
        }
        out
    }

    #[test]
    fn page_headers_read_as_the_parquet_reader_reads_them() {
        let base = strata_file(&records(5000, 300));
        let props = |version, dictionary, stats, codec| {
            WriterProperties::builder()
                .set_writer_version(version)
                .set_dictionary_enabled(dictionary)
                .set_statistics_enabled(stats)
                .set_compression(codec)
                .set_data_page_size_limit(64 << 10)
                .set_max_row_group_row_count(Some(2000))
                .build()
        };
        let zstd = Codec::ZSTD(ZstdLevel::try_new(3).unwrap());
        let files = [
            ("as dumped", base.clone()),
            (
                "v1, dictionaries, page statistics, uncompressed",
                rewrite(
                    base.clone(),
                    props(
                        WriterVersion::PARQUET_1_0,
                        true,
                        EnabledStatistics::Page,
                        Codec::UNCOMPRESSED,
                    ),
                    |b| b,
                ),
            ),
            (
                "v2 (delta byte arrays), page statistics, zstd",
                rewrite(
                    base.clone(),
                    props(
                        WriterVersion::PARQUET_2_0,
                        false,
                        EnabledStatistics::Page,
                        zstd,
                    ),
                    |b| b,
                ),
            ),
            (
                "v2, dictionaries, chunk statistics, snappy",
                rewrite(
                    base.clone(),
                    props(
                        WriterVersion::PARQUET_2_0,
                        true,
                        EnabledStatistics::Chunk,
                        Codec::SNAPPY,
                    ),
                    |b| b,
                ),
            ),
        ];
        for (what, data) in files {
            let want = pages_by_parquet(&data);
            assert!(want.len() >= 10, "{what}: {} pages", want.len());
            assert_eq!(pages_by_walk(&data), want, "{what}");
            // Each of these decodes within the size of its records.
            let limit: u64 = records(5000, 300).iter().map(Record::heap_bytes).sum();
            let meta = ParquetRecordBatchReaderBuilder::try_new(data.clone()).unwrap();
            if !what.starts_with("v2 (delta") {
                check(&data, meta.metadata(), limit).unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }

    proptest! {
        #[test]
        fn any_bytes_give_a_header_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            // Never a panic; a header that reads is self-delimiting.
            if let Ok((h, n)) = page_header(&bytes) {
                prop_assert!(n <= bytes.len());
                prop_assert_eq!(page_header(&bytes[..n]), Ok((h, n)));
            }
        }
    }

    #[test]
    fn chunks_outside_the_file_are_errors_not_panics() {
        let data = strata_file(&records(10, 5));
        let meta = ParquetRecordBatchReaderBuilder::try_new(data.clone()).unwrap();
        // The same footer over a file cut inside its last column chunk.
        let end = meta.metadata().row_groups()[0]
            .columns()
            .iter()
            .map(|c| {
                let (start, len) = c.byte_range();
                start + len
            })
            .max()
            .unwrap();
        let cut = data.slice(..end as usize - 1);
        let err = check(&cut, meta.metadata(), 1 << 30).unwrap_err();
        assert!(err.message.contains("outside the file"), "{err}");
    }
}
