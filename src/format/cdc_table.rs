//! The rows of one source table as an Arrow batch, the shape of a CDC table file: the Kafka
//! position, the change's metadata, then `new_<column>` and `old_<column>` for every source
//! column seen (flat columns read plainly in DuckDB, Athena and Spark, and a file's schema
//! widens by adding columns, which `union_by_name` readers merge), in the declared types,
//! and `errors` naming every value that did not convert (the value is null there, never lost
//! from the row's meaning: the raw message stays restorable from the archive).

use super::cdc::{convert, Change, ColumnType, Typed};
use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder, Int32Builder, Int64Builder,
    StringBuilder, TimestampMicrosecondBuilder, TimestampMillisecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};
use chrono_tz::Tz;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Where a change came from in Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
}

/// The columns of a table's file: the source columns seen so far, in their declared types.
#[derive(Debug, Clone)]
pub struct TableSchema {
    columns: BTreeSet<String>,
    types: BTreeMap<String, ColumnType>,
    tz: Tz,
}

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

fn source_columns(c: &Change) -> impl Iterator<Item = &String> {
    c.new_values
        .iter()
        .chain(c.old_values.iter())
        .flat_map(|m| m.keys())
}

impl TableSchema {
    /// `types`: the config's declarations for this table (other columns are strings).
    pub fn new(types: BTreeMap<String, ColumnType>, tz: Tz) -> Self {
        Self {
            columns: BTreeSet::new(),
            types,
            tz,
        }
    }

    /// Whether every column of `c` is in the schema (else the file ends and a wider one
    /// opens).
    pub fn covers(&self, c: &Change) -> bool {
        source_columns(c).all(|k| self.columns.contains(k))
    }

    /// Adds the columns of `c`.
    pub fn widen(&mut self, c: &Change) {
        for k in source_columns(c) {
            if !self.columns.contains(k) {
                self.columns.insert(k.clone());
            }
        }
    }

    fn column_type(&self, col: &str) -> ColumnType {
        self.types.get(col).copied().unwrap_or(ColumnType::String)
    }

    pub fn arrow(&self) -> SchemaRef {
        let mut fields = vec![
            Field::new("topic", DataType::Utf8, false),
            Field::new("partition", DataType::Int32, false),
            Field::new("offset", DataType::Int64, false),
            Field::new("kafka_timestamp", utc_ms(), true),
            Field::new("change_index", DataType::Int32, false),
            Field::new("time", utc_ms(), true),
            Field::new("time_raw", DataType::Utf8, true),
            Field::new("global_id", DataType::Utf8, true),
            Field::new("database", DataType::Utf8, true),
            Field::new("schema", DataType::Utf8, true),
            Field::new("table", DataType::Utf8, false),
            Field::new("type", DataType::Utf8, false),
            Field::new("logical_clock", DataType::Int64, true),
            Field::new("logical_clock_raw", DataType::Utf8, true),
        ];
        for side in ["new", "old"] {
            for col in &self.columns {
                fields.push(Field::new(
                    format!("{side}_{col}"),
                    arrow_type(self.column_type(col)),
                    true,
                ));
            }
        }
        fields.push(Field::new("errors", DataType::Utf8, true));
        Arc::new(Schema::new(fields))
    }

    /// The rows as one batch (every change must be covered by the schema).
    pub fn batch(&self, rows: &[(Position, Change)]) -> Result<RecordBatch, ArrowError> {
        let n = rows.len();
        let mut errors: Vec<Vec<String>> = vec![Vec::new(); n];
        let mut cols: Vec<ArrayRef> = Vec::new();
        let strings = |f: &dyn Fn(&Position, &Change) -> Option<String>| -> ArrayRef {
            let mut b = StringBuilder::new();
            for (p, c) in rows {
                b.append_option(f(p, c));
            }
            Arc::new(b.finish())
        };
        cols.push(strings(&|p, _| Some(p.topic.clone())));
        let mut b = Int32Builder::new();
        rows.iter().for_each(|(p, _)| b.append_value(p.partition));
        cols.push(Arc::new(b.finish()));
        let mut b = Int64Builder::new();
        rows.iter().for_each(|(p, _)| b.append_value(p.offset));
        cols.push(Arc::new(b.finish()));
        let mut b = TimestampMillisecondBuilder::new().with_timezone("UTC");
        rows.iter().for_each(|(p, _)| b.append_option(p.timestamp));
        cols.push(Arc::new(b.finish()));
        let mut b = Int32Builder::new();
        rows.iter()
            .for_each(|(_, c)| b.append_value(i32::try_from(c.index).unwrap_or(i32::MAX)));
        cols.push(Arc::new(b.finish()));
        let mut b = TimestampMillisecondBuilder::new().with_timezone("UTC");
        rows.iter().for_each(|(_, c)| b.append_option(c.time_ms));
        cols.push(Arc::new(b.finish()));
        cols.push(strings(&|_, c| c.time_raw.clone()));
        cols.push(strings(&|_, c| c.global_id.clone()));
        cols.push(strings(&|_, c| c.database.clone()));
        cols.push(strings(&|_, c| c.schema.clone()));
        cols.push(strings(&|_, c| Some(c.table.clone())));
        cols.push(strings(&|_, c| Some(c.kind.as_str().to_string())));
        let mut b = Int64Builder::new();
        rows.iter()
            .for_each(|(_, c)| b.append_option(c.logical_clock));
        cols.push(Arc::new(b.finish()));
        cols.push(strings(&|_, c| c.logical_clock_raw.clone()));
        for side in ["new", "old"] {
            for col in &self.columns {
                let ty = self.column_type(col);
                let mut values = Vec::with_capacity(n);
                for (i, (_, c)) in rows.iter().enumerate() {
                    let map = if side == "new" {
                        &c.new_values
                    } else {
                        &c.old_values
                    };
                    let raw = map
                        .as_ref()
                        .and_then(|m| m.get(col))
                        .and_then(|v| v.as_deref());
                    values.push(match raw.map(|r| convert(r, ty, self.tz)) {
                        None => None,
                        Some(Ok(v)) => Some(v),
                        Some(Err(why)) => {
                            errors[i].push(format!("{side}_{col}: {why}"));
                            None
                        }
                    });
                }
                cols.push(typed_array(ty, values)?);
            }
        }
        let mut b = StringBuilder::new();
        for e in &errors {
            b.append_option((!e.is_empty()).then(|| e.join("; ")));
        }
        cols.push(Arc::new(b.finish()));
        RecordBatch::try_new(self.arrow(), cols)
    }
}

/// One column of converted values (each `Typed` is of the column's type by construction).
fn typed_array(ty: ColumnType, values: Vec<Option<Typed>>) -> Result<ArrayRef, ArrowError> {
    macro_rules! build {
        ($builder:expr, $variant:ident) => {{
            let mut b = $builder;
            for v in values {
                match v {
                    Some(Typed::$variant(x)) => b.append_value(x),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    Ok(match ty {
        ColumnType::Int => build!(Int32Builder::new(), Int),
        ColumnType::BigInt => build!(Int64Builder::new(), BigInt),
        ColumnType::Double => build!(Float64Builder::new(), Double),
        ColumnType::Bool => build!(BooleanBuilder::new(), Bool),
        ColumnType::Date => build!(Date32Builder::new(), Date),
        ColumnType::Timestamp => build!(
            TimestampMicrosecondBuilder::new().with_timezone("UTC"),
            Timestamp
        ),
        ColumnType::String => build!(StringBuilder::new(), String),
        ColumnType::Decimal { precision, scale } => build!(
            Decimal128Builder::new().with_precision_and_scale(precision, scale as i8)?,
            Decimal
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::super::cdc::parse_message;
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Decimal128Type, Int32Type};
    use arrow_array::Array;

    fn rows(msg: &str, offset: i64) -> Vec<(Position, Change)> {
        parse_message(msg.as_bytes(), Tz::UTC)
            .unwrap()
            .into_iter()
            .map(|c| {
                (
                    Position {
                        topic: "cdc.shop".into(),
                        partition: 2,
                        offset,
                        timestamp: Some(1_700_000_000_000),
                    },
                    c,
                )
            })
            .collect()
    }

    #[test]
    fn a_table_file_has_metadata_then_new_and_old_columns_in_declared_types() {
        let types = BTreeMap::from([
            ("id".to_string(), ColumnType::Int),
            (
                "amount".to_string(),
                ColumnType::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
        ]);
        let mut s = TableSchema::new(types, Tz::UTC);
        let mut all = rows(
            r#"[{"TIME":"20240101000000","GLOBAL_ID":"g1","DATABASE":"shop","TABLE":"orders","TYPE":"I","LOGICAL_CLOCK":"5","NEW_VALUES":{"id":"7","amount":"12.30","note":"hi"}}]"#,
            40,
        );
        all.extend(rows(
            r#"[{"GLOBAL_ID":"g2","DATABASE":"shop","TABLE":"orders","TYPE":"U","OLD_VALUES":{"id":"7","amount":"12.30"},"NEW_VALUES":{"id":"x7","amount":"13"}}]"#,
            41,
        ));
        assert!(!s.covers(&all[0].1));
        for (_, c) in &all {
            s.widen(c);
        }
        assert!(all.iter().all(|(_, c)| s.covers(c)));
        let b = s.batch(&all).unwrap();
        let names: Vec<String> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(
            names[14..],
            [
                "new_amount",
                "new_id",
                "new_note",
                "old_amount",
                "old_id",
                "old_note",
                "errors"
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
        let old_note = b.column_by_name("old_note").unwrap();
        assert_eq!(old_note.null_count(), 2);
        let kind = b.column_by_name("type").unwrap().as_string::<i32>();
        assert_eq!((kind.value(0), kind.value(1)), ("I", "U"));
        // And it is a Parquet file as it is.
        let mut file = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut file, b.schema(), None).unwrap();
        w.write(&b).unwrap();
        w.close().unwrap();
        let back: Vec<RecordBatch> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                bytes::Bytes::from(file),
            )
            .unwrap()
            .build()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back, vec![b]);
    }
}
