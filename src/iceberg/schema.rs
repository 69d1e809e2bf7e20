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
}
