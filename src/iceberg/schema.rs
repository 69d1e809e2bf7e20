//! A table's Iceberg schema as the arrow schema (strata's arrow major, not the crate's) its
//! data files are written with: the same names and types, every field carrying its Iceberg
//! field id, which is how readers match Parquet columns to table columns.

use arrow_schema::{DataType, Field, Fields, Schema as ArrowSchema, SchemaRef, TimeUnit};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use std::collections::HashMap;
use std::sync::Arc;

/// The arrow schema of `schema`'s columns, with field ids.
pub fn arrow_schema(schema: &Schema) -> Result<SchemaRef, String> {
    let fields: Result<Vec<Field>, String> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| field(f))
        .collect();
    Ok(Arc::new(ArrowSchema::new(fields?)))
}

fn field(f: &NestedField) -> Result<Field, String> {
    let ty = data_type(&f.field_type, &f.name)?;
    Ok(
        Field::new(&f.name, ty, !f.required).with_metadata(HashMap::from([(
            PARQUET_FIELD_ID_META_KEY.to_string(),
            f.id.to_string(),
        )])),
    )
}

fn data_type(t: &Type, name: &str) -> Result<DataType, String> {
    Ok(match t {
        Type::Primitive(p) => match p {
            PrimitiveType::Boolean => DataType::Boolean,
            PrimitiveType::Int => DataType::Int32,
            PrimitiveType::Long => DataType::Int64,
            PrimitiveType::Float => DataType::Float32,
            PrimitiveType::Double => DataType::Float64,
            PrimitiveType::Date => DataType::Date32,
            PrimitiveType::String => DataType::Utf8,
            PrimitiveType::Binary => DataType::Binary,
            PrimitiveType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            PrimitiveType::Timestamptz => {
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
            }
            other => {
                return Err(format!(
                    "column {name:?} has type {other}, which strata does not write"
                ))
            }
        },
        Type::Struct(s) => {
            let fields: Result<Vec<Field>, String> = s.fields().iter().map(|f| field(f)).collect();
            DataType::Struct(Fields::from(fields?))
        }
        Type::List(l) => DataType::List(Arc::new(field(&l.element_field)?)),
        Type::Map(_) => {
            return Err(format!(
                "column {name:?} is a map, which strata does not write"
            ))
        }
    })
}

/// The Iceberg type of a CDC table file's column (`cdc::table` writes these arrow types).
pub fn iceberg_type(t: &DataType, name: &str) -> Result<Type, String> {
    Ok(Type::Primitive(match t {
        DataType::Utf8 => PrimitiveType::String,
        DataType::Binary => PrimitiveType::Binary,
        DataType::Int32 => PrimitiveType::Int,
        DataType::Int64 => PrimitiveType::Long,
        DataType::Float64 => PrimitiveType::Double,
        DataType::Boolean => PrimitiveType::Boolean,
        DataType::Date32 => PrimitiveType::Date,
        DataType::Decimal128(p, s) if *s >= 0 => PrimitiveType::Decimal {
            precision: u32::from(*p),
            scale: *s as u32,
        },
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => PrimitiveType::Timestamptz,
        other => {
            return Err(format!(
                "column {name:?} has the arrow type {other}, which has no Iceberg column here"
            ))
        }
    }))
}

/// A CDC table's first schema: the columns of its first data file, in their order, ids from 1,
/// all optional (a later file may lack any of them).
pub fn cdc_schema(columns: &[(String, Type)]) -> Result<Schema, iceberg::Error> {
    Schema::builder()
        .with_schema_id(0)
        .with_fields(
            columns
                .iter()
                .zip(1..)
                .map(|((name, ty), id)| NestedField::optional(id, name, ty.clone()).into()),
        )
        .build()
}

/// The table property through which readers match columns of data files written without
/// field ids (a CDC table's: its columns appear as the source sends them) to the table's.
pub const NAME_MAPPING: &str = "schema.name-mapping.default";

/// The name mapping of top-level `fields` (id, name): `[{"field-id":1,"names":["topic"]},...]`.
pub fn name_mapping<'a>(fields: impl IntoIterator<Item = (i32, &'a str)>) -> String {
    let list: Vec<serde_json::Value> = fields
        .into_iter()
        .map(|(id, name)| serde_json::json!({"field-id": id, "names": [name]}))
        .collect();
    serde_json::Value::Array(list).to_string()
}

/// The columns a CDC data file adds to `schema` (by name, in the file's order), or why it
/// cannot: a column of the same name and another type.
pub fn added_columns(
    schema: &Schema,
    file: &[(String, Type)],
) -> Result<Vec<(String, Type)>, String> {
    let mut out = Vec::new();
    for (name, ty) in file {
        match schema.field_by_name(name) {
            Some(f) if *f.field_type == *ty => {}
            Some(f) => {
                return Err(format!(
                    "column {name:?} is {} in the table and {ty} in the new data; a column's type cannot change (declare it in [tasks.cdc.types] as the table has it)",
                    f.field_type
                ))
            }
            None => {
                if !out.iter().any(|(n, _): &(String, Type)| n == name) {
                    out.push((name.clone(), ty.clone()));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_schema_keeps_names_types_and_ids() {
        let s = arrow_schema(&super::super::catalog::record_schema().unwrap()).unwrap();
        let names: Vec<&str> = s.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "topic",
                "partition",
                "offset",
                "timestamp",
                "timestamp_type",
                "key",
                "value",
                "headers"
            ]
        );
        let id = |f: &Field| f.metadata()[PARQUET_FIELD_ID_META_KEY].clone();
        assert_eq!(id(s.field(3)), "4");
        assert!(matches!(
            s.field(3).data_type(),
            DataType::Timestamp(TimeUnit::Microsecond, Some(_))
        ));
        let DataType::List(item) = s.field(7).data_type() else {
            panic!("headers is a list")
        };
        assert_eq!(id(item), "9");
        let DataType::Struct(kv) = item.data_type() else {
            panic!("of structs")
        };
        assert_eq!((id(&kv[0]), id(&kv[1])), ("10".into(), "11".into()));
        // strata's Parquet encoder takes it: same columns, other metadata, microseconds.
        crate::format::Encoder::parquet_with_schema(
            "t",
            crate::format::Compression::Zstd,
            Vec::new(),
            s,
        )
        .unwrap();
    }

    #[test]
    fn cdc_columns_map_to_iceberg_and_only_new_ones_are_added() {
        let s = |t: PrimitiveType| Type::Primitive(t);
        assert_eq!(
            iceberg_type(&DataType::Decimal128(10, 2), "amount").unwrap(),
            s(PrimitiveType::Decimal {
                precision: 10,
                scale: 2
            })
        );
        assert_eq!(
            iceberg_type(
                &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                "time"
            )
            .unwrap(),
            s(PrimitiveType::Timestamptz)
        );
        let e = iceberg_type(
            &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            "time",
        )
        .unwrap_err();
        assert!(e.contains("\"time\""), "{e}");
        let table = cdc_schema(&[
            ("id".into(), s(PrimitiveType::String)),
            ("n".into(), s(PrimitiveType::Long)),
        ])
        .unwrap();
        assert_eq!(table.field_by_name("n").unwrap().id, 2);
        assert!(!table.field_by_name("id").unwrap().required);
        let file = [
            ("n".to_string(), s(PrimitiveType::Long)),
            ("coupon".to_string(), s(PrimitiveType::String)),
            ("id".to_string(), s(PrimitiveType::String)),
        ];
        assert_eq!(
            added_columns(&table, &file).unwrap(),
            vec![("coupon".to_string(), s(PrimitiveType::String))]
        );
        let e = added_columns(&table, &[("n".to_string(), s(PrimitiveType::String))]).unwrap_err();
        assert!(e.contains("\"n\" is long in the table and string"), "{e}");
        assert_eq!(
            name_mapping([(1, "id"), (2, "n")]),
            r#"[{"field-id":1,"names":["id"]},{"field-id":2,"names":["n"]}]"#
        );
    }
}
