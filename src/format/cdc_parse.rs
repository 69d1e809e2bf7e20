//! Reads a CDC message's JSON straight into its changes, in one pass (serde visitors, no
//! intermediate JSON tree): the archive's hot path parses every message. Also tells whether
//! the message is plain (rebuilds from its changes as equal JSON, see `cdc::Parsed`).

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// A JSON value read as the text a table keeps: strings as they are, null as `None`, anything
/// else as its JSON text (and then the message is not plain).
pub(super) struct Cell {
    pub text: Option<String>,
    pub string_or_null: bool,
    pub is_null: bool,
}

impl<'de> Deserialize<'de> for Cell {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CellVisitor)
    }
}

struct CellVisitor;

fn other(v: serde_json::Value) -> Cell {
    Cell {
        text: Some(v.to_string()),
        string_or_null: false,
        is_null: false,
    }
}

impl<'de> Visitor<'de> for CellVisitor {
    type Value = Cell;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E>(self, v: &str) -> Result<Cell, E> {
        Ok(Cell {
            text: Some(v.to_string()),
            string_or_null: true,
            is_null: false,
        })
    }

    fn visit_string<E>(self, v: String) -> Result<Cell, E> {
        Ok(Cell {
            text: Some(v),
            string_or_null: true,
            is_null: false,
        })
    }

    fn visit_unit<E>(self) -> Result<Cell, E> {
        Ok(Cell {
            text: None,
            string_or_null: true,
            is_null: true,
        })
    }

    fn visit_none<E>(self) -> Result<Cell, E> {
        Ok(Cell {
            text: None,
            string_or_null: true,
            is_null: true,
        })
    }

    fn visit_bool<E>(self, v: bool) -> Result<Cell, E> {
        Ok(other(v.into()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Cell, E> {
        Ok(other(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Cell, E> {
        Ok(other(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Cell, E> {
        Ok(other(v.into()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Cell, A::Error> {
        let v = serde_json::Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(other(v))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Cell, A::Error> {
        let v = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(other(v))
    }
}

/// `OLD_VALUES` / `NEW_VALUES`: an object of column to [`Cell`]; anything else is kept as no
/// values (and the message is not plain).
pub(super) struct Values {
    pub map: Option<BTreeMap<String, Option<String>>>,
    pub plain: bool,
}

impl<'de> Deserialize<'de> for Values {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValuesVisitor)
    }
}

struct ValuesVisitor;

impl ValuesVisitor {
    fn not_an_object<E>(self) -> Result<Values, E> {
        Ok(Values {
            map: None,
            plain: false,
        })
    }
}

impl<'de> Visitor<'de> for ValuesVisitor {
    type Value = Values;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of column values")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Values, A::Error> {
        let mut out = BTreeMap::new();
        let mut plain = true;
        while let Some(k) = map.next_key::<String>()? {
            let c: Cell = map.next_value()?;
            // A ',' would not survive the null_columns list.
            plain &= c.string_or_null && !k.contains(',');
            out.insert(k, c.text);
        }
        Ok(Values {
            map: Some(out),
            plain,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Values, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        self.not_an_object()
    }

    fn visit_str<E>(self, _: &str) -> Result<Values, E> {
        self.not_an_object()
    }

    fn visit_unit<E>(self) -> Result<Values, E> {
        self.not_an_object()
    }

    fn visit_bool<E>(self, _: bool) -> Result<Values, E> {
        self.not_an_object()
    }

    fn visit_i64<E>(self, _: i64) -> Result<Values, E> {
        self.not_an_object()
    }

    fn visit_u64<E>(self, _: u64) -> Result<Values, E> {
        self.not_an_object()
    }

    fn visit_f64<E>(self, _: f64) -> Result<Values, E> {
        self.not_an_object()
    }
}

#[derive(Deserialize)]
#[allow(clippy::upper_case_acronyms, non_camel_case_types)]
enum Field {
    TIME,
    GLOBAL_ID,
    DATABASE,
    SCHEMA,
    TABLE,
    TYPE,
    LOGICAL_CLOCK,
    OLD_VALUES,
    NEW_VALUES,
    OFFSET,
    #[serde(other)]
    Other,
}

/// One element of a message's array, as read (validated into a `Change` by the caller).
#[derive(Default)]
pub(super) struct Item {
    pub object: bool,
    pub plain: bool,
    pub time: Option<String>,
    pub global_id: Option<String>,
    pub database: Option<String>,
    pub schema: Option<String>,
    /// Only when a string.
    pub table: Option<String>,
    pub kind: Option<Cell>,
    pub logical_clock: Option<String>,
    pub old_values: Option<BTreeMap<String, Option<String>>>,
    pub new_values: Option<BTreeMap<String, Option<String>>>,
    pub offset: Option<String>,
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ItemVisitor)
    }
}

struct ItemVisitor;

impl ItemVisitor {
    fn not_an_object<E>(self) -> Result<Item, E> {
        Ok(Item::default())
    }
}

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = Item;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a row change object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Item, A::Error> {
        let mut it = Item {
            object: true,
            plain: true,
            ..Item::default()
        };
        // A text field: a string keeps its text; null is absent (not plain: the field was
        // there); anything else is its JSON text (not plain).
        fn text(c: Cell, plain: &mut bool) -> Option<String> {
            *plain &= c.string_or_null && !c.is_null;
            c.text
        }
        while let Some(k) = map.next_key::<Field>()? {
            match k {
                Field::TIME => it.time = text(map.next_value()?, &mut it.plain),
                Field::GLOBAL_ID => it.global_id = text(map.next_value()?, &mut it.plain),
                Field::DATABASE => it.database = text(map.next_value()?, &mut it.plain),
                Field::SCHEMA => it.schema = text(map.next_value()?, &mut it.plain),
                Field::LOGICAL_CLOCK => it.logical_clock = text(map.next_value()?, &mut it.plain),
                Field::TABLE => {
                    let c: Cell = map.next_value()?;
                    it.table = c.text.filter(|_| c.string_or_null);
                }
                Field::TYPE => it.kind = Some(map.next_value()?),
                Field::OLD_VALUES => {
                    let v: Values = map.next_value()?;
                    it.plain &= v.plain;
                    it.old_values = v.map;
                }
                Field::NEW_VALUES => {
                    let v: Values = map.next_value()?;
                    it.plain &= v.plain;
                    it.new_values = v.map;
                }
                Field::OFFSET => {
                    let v: serde_json::Value = map.next_value()?;
                    it.offset = Some(v.to_string());
                }
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                    it.plain = false;
                }
            }
        }
        Ok(it)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        self.not_an_object()
    }

    fn visit_str<E>(self, _: &str) -> Result<Item, E> {
        self.not_an_object()
    }

    fn visit_unit<E>(self) -> Result<Item, E> {
        self.not_an_object()
    }

    fn visit_bool<E>(self, _: bool) -> Result<Item, E> {
        self.not_an_object()
    }

    fn visit_i64<E>(self, _: i64) -> Result<Item, E> {
        self.not_an_object()
    }

    fn visit_u64<E>(self, _: u64) -> Result<Item, E> {
        self.not_an_object()
    }

    fn visit_f64<E>(self, _: f64) -> Result<Item, E> {
        self.not_an_object()
    }
}

/// A whole message: an array of items, or something else.
pub(super) enum Message {
    Array(Vec<Item>),
    NotArray,
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MessageVisitor)
    }
}

struct MessageVisitor;

impl MessageVisitor {
    fn not_an_array<E>(self) -> Result<Message, E> {
        Ok(Message::NotArray)
    }
}

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array of row changes")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Message, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(1));
        while let Some(it) = seq.next_element::<Item>()? {
            items.push(it);
        }
        Ok(Message::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        self.not_an_array()
    }

    fn visit_str<E>(self, _: &str) -> Result<Message, E> {
        self.not_an_array()
    }

    fn visit_unit<E>(self) -> Result<Message, E> {
        self.not_an_array()
    }

    fn visit_bool<E>(self, _: bool) -> Result<Message, E> {
        self.not_an_array()
    }

    fn visit_i64<E>(self, _: i64) -> Result<Message, E> {
        self.not_an_array()
    }

    fn visit_u64<E>(self, _: u64) -> Result<Message, E> {
        self.not_an_array()
    }

    fn visit_f64<E>(self, _: f64) -> Result<Message, E> {
        self.not_an_array()
    }
}
