//! Reads a CDC message's JSON straight into its changes, in one pass (serde visitors, no
//! intermediate JSON tree): the archive's hot path parses every message. Also tells whether
//! the message is plain (rebuilds from its changes as equal JSON, see `cdc::Parsed`).

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;

/// The scalar `visit_*` methods of a visitor whose value is not a scalar: each gives `$none`.
macro_rules! scalars_are {
    ($value:ty, $none:ident) => {
        fn visit_str<E>(self, _: &str) -> Result<$value, E> {
            self.$none()
        }
        fn visit_unit<E>(self) -> Result<$value, E> {
            self.$none()
        }
        fn visit_bool<E>(self, _: bool) -> Result<$value, E> {
            self.$none()
        }
        fn visit_i64<E>(self, _: i64) -> Result<$value, E> {
            self.$none()
        }
        fn visit_u64<E>(self, _: u64) -> Result<$value, E> {
            self.$none()
        }
        fn visit_f64<E>(self, _: f64) -> Result<$value, E> {
            self.$none()
        }
    };
}

/// A string borrowed from the message when it has no escapes (serde's own `Cow` always copies).
pub(super) struct Text<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON value read as the text a table keeps: strings as they are, null as `None`, anything
/// else as its JSON text (and then the message is not plain).
pub(super) struct Cell<'a> {
    pub text: Option<Cow<'a, str>>,
    pub string_or_null: bool,
    pub is_null: bool,
}

impl<'de> Deserialize<'de> for Cell<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CellVisitor)
    }
}

struct CellVisitor;

fn other<'a>(v: serde_json::Value) -> Cell<'a> {
    Cell {
        text: Some(Cow::Owned(v.to_string())),
        string_or_null: false,
        is_null: false,
    }
}

impl<'de> Visitor<'de> for CellVisitor {
    type Value = Cell<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cell<'de>, E> {
        Ok(Cell {
            text: Some(Cow::Borrowed(v)),
            string_or_null: true,
            is_null: false,
        })
    }

    fn visit_str<E>(self, v: &str) -> Result<Cell<'de>, E> {
        Ok(Cell {
            text: Some(Cow::Owned(v.to_string())),
            string_or_null: true,
            is_null: false,
        })
    }

    fn visit_string<E>(self, v: String) -> Result<Cell<'de>, E> {
        Ok(Cell {
            text: Some(Cow::Owned(v)),
            string_or_null: true,
            is_null: false,
        })
    }

    fn visit_unit<E>(self) -> Result<Cell<'de>, E> {
        Ok(Cell {
            text: None,
            string_or_null: true,
            is_null: true,
        })
    }

    fn visit_none<E>(self) -> Result<Cell<'de>, E> {
        Ok(Cell {
            text: None,
            string_or_null: true,
            is_null: true,
        })
    }

    fn visit_bool<E>(self, v: bool) -> Result<Cell<'de>, E> {
        Ok(other(v.into()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Cell<'de>, E> {
        Ok(other(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Cell<'de>, E> {
        Ok(other(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Cell<'de>, E> {
        Ok(other(v.into()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Cell<'de>, A::Error> {
        let v = serde_json::Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(other(v))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Cell<'de>, A::Error> {
        let v = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(other(v))
    }
}

/// `OLD_VALUES` / `NEW_VALUES`: an object of column to [`Cell`]; anything else is kept as no
/// values (and the message is not plain).
pub(super) struct Values<'a> {
    pub map: Option<super::change::Values<'a>>,
    pub plain: bool,
}

impl<'de> Deserialize<'de> for Values<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValuesVisitor)
    }
}

struct ValuesVisitor;

impl ValuesVisitor {
    fn not_an_object<'a, E>(self) -> Result<Values<'a>, E> {
        Ok(Values {
            map: None,
            plain: false,
        })
    }
}

impl<'de> Visitor<'de> for ValuesVisitor {
    type Value = Values<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of column values")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Values<'de>, A::Error> {
        let mut out = Vec::with_capacity(map.size_hint().unwrap_or(16));
        let mut plain = true;
        while let Some(Text(k)) = map.next_key::<Text<'de>>()? {
            let c: Cell<'de> = map.next_value()?;
            // A ',' would not survive the null_columns list.
            plain &= c.string_or_null && !k.contains(',');
            out.push((k, c.text));
        }
        Ok(Values {
            map: Some(super::change::Values(out)),
            plain,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Values<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        self.not_an_object()
    }

    scalars_are!(Values<'de>, not_an_object);
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
pub(super) struct Item<'a> {
    pub object: bool,
    pub plain: bool,
    pub time: Option<Cow<'a, str>>,
    pub global_id: Option<Cow<'a, str>>,
    pub database: Option<Cow<'a, str>>,
    pub schema: Option<Cow<'a, str>>,
    /// Only when a string.
    pub table: Option<Cow<'a, str>>,
    pub kind: Option<Cell<'a>>,
    pub logical_clock: Option<Cow<'a, str>>,
    pub old_values: Option<super::change::Values<'a>>,
    pub new_values: Option<super::change::Values<'a>>,
    pub offset: Option<Cow<'a, str>>,
}

impl<'de> Deserialize<'de> for Item<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ItemVisitor)
    }
}

struct ItemVisitor;

impl ItemVisitor {
    fn not_an_object<'a, E>(self) -> Result<Item<'a>, E> {
        Ok(Item::default())
    }
}

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = Item<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a row change object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Item<'de>, A::Error> {
        let mut it = Item {
            object: true,
            plain: true,
            ..Item::default()
        };
        // A text field: a string keeps its text; null is absent (not plain: the field was
        // there); anything else is its JSON text (not plain).
        fn text<'a>(c: Cell<'a>, plain: &mut bool) -> Option<Cow<'a, str>> {
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
                    let c: Cell<'de> = map.next_value()?;
                    it.table = c.text.filter(|_| c.string_or_null);
                }
                Field::TYPE => it.kind = Some(map.next_value()?),
                Field::OLD_VALUES => {
                    let v: Values<'de> = map.next_value()?;
                    it.plain &= v.plain;
                    it.old_values = v.map;
                }
                Field::NEW_VALUES => {
                    let v: Values<'de> = map.next_value()?;
                    it.plain &= v.plain;
                    it.new_values = v.map;
                }
                Field::OFFSET => {
                    let v: &'de serde_json::value::RawValue = map.next_value()?;
                    it.offset = Some(compact(v.get()));
                }
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                    it.plain = false;
                }
            }
        }
        Ok(it)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        self.not_an_object()
    }

    scalars_are!(Item<'de>, not_an_object);
}

/// JSON text without the whitespace between its tokens (borrowed when it has none): `OFFSET`
/// kept as sent, read without building a tree of it.
pub(super) fn compact(json: &str) -> Cow<'_, str> {
    let space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    if !json.bytes().any(space) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for ch in json.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                in_string = false;
            }
        } else if ch == '"' {
            in_string = true;
        } else if ch.is_ascii() && space(ch as u8) {
            continue;
        }
        out.push(ch);
    }
    Cow::Owned(out)
}

/// A whole message: an array of items, or something else.
pub(super) enum Message<'a> {
    Array(Vec<Item<'a>>),
    NotArray,
}

impl<'de> Deserialize<'de> for Message<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MessageVisitor)
    }
}

struct MessageVisitor;

impl MessageVisitor {
    fn not_an_array<'a, E>(self) -> Result<Message<'a>, E> {
        Ok(Message::NotArray)
    }
}

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array of row changes")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Message<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(1));
        while let Some(it) = seq.next_element::<Item<'de>>()? {
            items.push(it);
        }
        Ok(Message::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        self.not_an_array()
    }

    scalars_are!(Message<'de>, not_an_array);
}

#[cfg(test)]
mod tests {
    use super::compact;
    use std::borrow::Cow;

    #[test]
    fn compact_json_drops_the_space_between_tokens_only() {
        let tight = r#"{"BINLOG_NAME":"b.3","BINLOG_POS":42}"#;
        assert!(matches!(compact(tight), Cow::Borrowed(t) if t == tight));
        assert_eq!(
            compact("{ \"NAME\" :\t\"mysql bin \\\" x\",\n \"POS\": [1, 2] }\r\n"),
            r#"{"NAME":"mysql bin \" x","POS":[1,2]}"#
        );
        assert_eq!(compact(r#" "a\\" "#), r#""a\\""#);
    }
}
