//! Change-data-capture messages (`../shared/spec/cdc-format.md`): a Kafka value that is a JSON
//! array of row changes, parsed into typed [`Change`]s, the directory level of each source
//! table, declared column types and their conversion, and the window of recent `GLOBAL_ID`s
//! that tells repeats apart. Pure functions and state only: the CDC table writer builds on it.

use chrono::{NaiveDate, NaiveDateTime, TimeZone};
use chrono_tz::Tz;
use std::borrow::Cow;
use std::collections::{HashSet, VecDeque};
use std::fmt;

/// Why a message is not CDC (it goes to `_errors/` or fails the task, as configured).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("the value is not JSON ({0})")]
    NotJson(String),
    #[error("the value is JSON but not an array of changes")]
    NotArray,
    #[error("the value is an empty array (a CDC message holds at least one change)")]
    Empty,
    #[error("change {index} is not a JSON object")]
    NotObject { index: usize },
    #[error("change {index} has no {field} (or it is not a string)")]
    Missing { index: usize, field: &'static str },
    #[error("change {index} has TYPE {found:?}; expected \"I\", \"U\" or \"D\"")]
    BadType { index: usize, found: String },
}

/// What a change did to its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    Insert,
    Update,
    Delete,
}

impl ChangeType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Insert => "I",
            Self::Update => "U",
            Self::Delete => "D",
        }
    }
}

/// Column name to value (`None`: JSON null), in the order the source sent them: a vector, not
/// a map, since every message is parsed and each table keeps its columns' order between rows
/// (`cdc_table`). Equality ignores the order; a name sent twice is kept twice here and its
/// last value counts, as JSON readers take it.
#[derive(Debug, Clone, Default, Eq)]
pub struct Values<'a>(pub Vec<(Cow<'a, str>, Option<Cow<'a, str>>)>);

impl<'a> Values<'a> {
    pub fn iter(&self) -> impl Iterator<Item = (&Cow<'a, str>, &Option<Cow<'a, str>>)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &Cow<'a, str>> {
        self.0.iter().map(|(k, _)| k)
    }

    /// A column's value (its last, when sent twice).
    pub fn get(&self, column: &str) -> Option<&Option<Cow<'a, str>>> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == column)
            .map(|(_, v)| v)
    }

    pub fn push(&mut self, column: Cow<'a, str>, value: Option<Cow<'a, str>>) {
        self.0.push((column, value));
    }
}

impl PartialEq for Values<'_> {
    fn eq(&self, other: &Self) -> bool {
        let names: HashSet<&str> = self.keys().map(|k| k.as_ref()).collect();
        let theirs: HashSet<&str> = other.keys().map(|k| k.as_ref()).collect();
        names == theirs && names.iter().all(|k| self.get(k) == other.get(k))
    }
}

impl<'a> std::ops::Index<&str> for Values<'a> {
    type Output = Option<Cow<'a, str>>;

    fn index(&self, column: &str) -> &Self::Output {
        match self.get(column) {
            Some(v) => v,
            None => panic!("no column {column:?} in these values"),
        }
    }
}

/// One row change of a message. Column values are kept as the source's text (`None`: JSON
/// null); a number or nested value the source sent unquoted is kept as its JSON text. Text
/// borrows from the message where it can (the dump parses every message); a change read back
/// from a table file owns its text (`Change<'static>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change<'a> {
    /// Its place in the message's array.
    pub index: usize,
    pub time_raw: Option<Cow<'a, str>>,
    /// `TIME` read as `yyyyMMddHHmmss` in the configured zone, in ms since the epoch.
    pub time_ms: Option<i64>,
    pub global_id: Option<Cow<'a, str>>,
    pub database: Option<Cow<'a, str>>,
    pub schema: Option<Cow<'a, str>>,
    pub table: Cow<'a, str>,
    pub kind: ChangeType,
    pub logical_clock_raw: Option<Cow<'a, str>>,
    pub logical_clock: Option<i64>,
    pub old_values: Option<Values<'a>>,
    pub new_values: Option<Values<'a>>,
    /// `OFFSET` (the source's binlog position) as its JSON text.
    pub offset_json: Option<Cow<'a, str>>,
}

/// A message's changes, and whether [`message_json`] of them gives back the same JSON (every
/// field known, text where text is expected, column values strings or null): when it does not,
/// the dump keeps the message as it came, so that a restore is exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<'a> {
    pub changes: Vec<Change<'a>>,
    pub plain: bool,
}

/// `TIME` as the service writes it, `yyyyMMddHHmmss`, in `tz`.
pub fn parse_time(raw: &str, tz: Tz) -> Option<i64> {
    // By hand: chrono's format parser costs more than the rest of a change's fields together.
    let b = raw.as_bytes();
    if b.len() != 14 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| b[r].iter().fold(0u32, |v, d| v * 10 + u32::from(d - b'0'));
    let t = NaiveDate::from_ymd_opt(n(0..4) as i32, n(4..6), n(6..8))?.and_hms_opt(
        n(8..10),
        n(10..12),
        n(12..14),
    )?;
    tz.from_local_datetime(&t)
        .earliest()
        .map(|t| t.timestamp_millis())
}

/// Parses a message value into its changes, in array order.
pub fn parse_message(value: &[u8], tz: Tz) -> Result<Vec<Change<'_>>, Malformed> {
    parse(value, tz).map(|p| p.changes)
}

/// Parses a message value into its changes and tells whether they rebuild it.
pub fn parse(value: &[u8], tz: Tz) -> Result<Parsed<'_>, Malformed> {
    use super::parse::Message;
    // The whole value checked as UTF-8 once: the `str` reader then borrows each string as it
    // is, where the byte reader checks every string by itself (measured slower on changes'
    // many short strings).
    let text = std::str::from_utf8(value)
        .map_err(|e| Malformed::NotJson(format!("not UTF-8 text: {e}")))?;
    let items = match serde_json::from_str::<Message>(text) {
        Ok(Message::Array(items)) => items,
        Ok(Message::NotArray) => return Err(Malformed::NotArray),
        Err(e) => return Err(Malformed::NotJson(e.to_string())),
    };
    if items.is_empty() {
        return Err(Malformed::Empty);
    }
    let mut plain = true;
    let mut changes = Vec::with_capacity(items.len());
    for (index, it) in items.into_iter().enumerate() {
        if !it.object {
            return Err(Malformed::NotObject { index });
        }
        plain &= it.plain;
        let table = it
            .table
            .filter(|t| !t.is_empty())
            .ok_or(Malformed::Missing {
                index,
                field: "TABLE",
            })?;
        let kind = match it
            .kind
            .as_ref()
            .filter(|k| k.string_or_null)
            .and_then(|k| k.text.as_deref())
        {
            Some("I") => ChangeType::Insert,
            Some("U") => ChangeType::Update,
            Some("D") => ChangeType::Delete,
            Some(other) => {
                return Err(Malformed::BadType {
                    index,
                    found: other.to_string(),
                })
            }
            None => {
                return Err(Malformed::Missing {
                    index,
                    field: "TYPE",
                })
            }
        };
        // The sides a change type has, and only those, rebuild from the table's rows.
        plain &= it.old_values.is_some() == (kind != ChangeType::Insert)
            && it.new_values.is_some() == (kind != ChangeType::Delete);
        changes.push(Change {
            index,
            time_ms: it.time.as_deref().and_then(|t| parse_time(t, tz)),
            time_raw: it.time,
            global_id: it.global_id,
            database: it.database,
            schema: it.schema,
            table,
            kind,
            logical_clock: it.logical_clock.as_deref().and_then(|c| c.parse().ok()),
            logical_clock_raw: it.logical_clock,
            old_values: it.old_values,
            new_values: it.new_values,
            offset_json: it.offset,
        });
    }
    Ok(Parsed { changes, plain })
}

/// A change as the JSON object it came as (for a plain message, see [`Parsed`]).
pub fn change_json(c: &Change<'_>) -> serde_json::Value {
    use serde_json::Value;
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: &Option<Cow<'_, str>>| {
        if let Some(v) = v {
            m.insert(k.to_string(), Value::String(v.to_string()));
        }
    };
    put("TIME", &c.time_raw);
    put("GLOBAL_ID", &c.global_id);
    put("DATABASE", &c.database);
    put("SCHEMA", &c.schema);
    put("LOGICAL_CLOCK", &c.logical_clock_raw);
    m.insert("TABLE".into(), Value::String(c.table.to_string()));
    m.insert("TYPE".into(), Value::String(c.kind.as_str().into()));
    let obj = |vals: &Values<'_>| {
        Value::Object(
            vals.iter()
                .map(|(k, v)| {
                    let v = v
                        .as_ref()
                        .map_or(Value::Null, |v| Value::String(v.to_string()));
                    (k.to_string(), v)
                })
                .collect(),
        )
    };
    if let Some(v) = &c.old_values {
        m.insert("OLD_VALUES".into(), obj(v));
    }
    if let Some(v) = &c.new_values {
        m.insert("NEW_VALUES".into(), obj(v));
    }
    if let Some(o) = &c.offset_json {
        m.insert(
            "OFFSET".into(),
            serde_json::from_str(o).unwrap_or_else(|_| Value::String(o.to_string())),
        );
    }
    Value::Object(m)
}

/// A message value rebuilt from its changes (in `index` order): compact JSON with object keys
/// sorted, so a source that writes that form gets its bytes back exactly.
pub fn message_json(changes: &[Change<'_>]) -> Vec<u8> {
    let mut sorted: Vec<&Change<'_>> = changes.iter().collect();
    sorted.sort_by_key(|c| c.index);
    let v = serde_json::Value::Array(sorted.into_iter().map(change_json).collect());
    // A Value of strings and objects always serializes.
    serde_json::to_vec(&v).unwrap_or_default()
}

/// The directory level of a source table: `DATABASE.SCHEMA.TABLE` (`DATABASE.TABLE` without a
/// schema). Bytes other than letters, digits, `-` and `_` are written `%XX`, so the dots stay
/// the only separators and every name maps to one level that any store accepts.
pub fn table_dir(database: Option<&str>, schema: Option<&str>, table: &str) -> String {
    fn escape(s: &str, out: &mut String) {
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    let mut out = String::new();
    for part in [database, schema].into_iter().flatten() {
        escape(part, &mut out);
        out.push('.');
    }
    escape(table, &mut out);
    out
}

/// A column type the config may declare for a table's column (strings by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Int,
    BigInt,
    Double,
    Decimal { precision: u8, scale: u8 },
    Bool,
    Date,
    Timestamp,
    String,
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Int => f.write_str("int"),
            Self::BigInt => f.write_str("bigint"),
            Self::Double => f.write_str("double"),
            Self::Decimal { precision, scale } => write!(f, "decimal({precision},{scale})"),
            Self::Bool => f.write_str("bool"),
            Self::Date => f.write_str("date"),
            Self::Timestamp => f.write_str("timestamp"),
            Self::String => f.write_str("string"),
        }
    }
}

impl std::str::FromStr for ColumnType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        Ok(match t.as_str() {
            "int" => Self::Int,
            "bigint" => Self::BigInt,
            "double" => Self::Double,
            "bool" => Self::Bool,
            "date" => Self::Date,
            "timestamp" => Self::Timestamp,
            "string" => Self::String,
            _ => {
                let inner = t
                    .strip_prefix("decimal(")
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| format!("unknown column type {s:?}; use int, bigint, double, decimal(p,s), bool, date, timestamp or string"))?;
                let (p, sc) = inner
                    .split_once(',')
                    .ok_or_else(|| format!("{s:?}: write decimal(precision,scale)"))?;
                let precision: u8 = p
                    .trim()
                    .parse()
                    .map_err(|_| format!("{s:?}: the precision is not a number"))?;
                let scale: u8 = sc
                    .trim()
                    .parse()
                    .map_err(|_| format!("{s:?}: the scale is not a number"))?;
                if precision == 0 || precision > 38 || scale > precision {
                    return Err(format!(
                        "{s:?}: precision must be 1 to 38 and scale at most the precision"
                    ));
                }
                Self::Decimal { precision, scale }
            }
        })
    }
}

/// A column value converted to its declared type.
#[derive(Debug, Clone, PartialEq)]
pub enum Typed {
    Int(i32),
    BigInt(i64),
    Double(f64),
    /// The unscaled value (`12.30` as decimal(5,2) is 1230).
    Decimal(i128),
    Bool(bool),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since the epoch (a value without an offset is read in the configured zone).
    Timestamp(i64),
    String(String),
}

/// Converts the source's text to `ty`; the error says why, for the row's error column.
pub fn convert(raw: &str, ty: ColumnType, tz: Tz) -> Result<Typed, String> {
    let s = raw.trim();
    let bad = || format!("{raw:?} is not a valid {ty}");
    Ok(match ty {
        ColumnType::String => Typed::String(raw.to_string()),
        ColumnType::Int => Typed::Int(s.parse().map_err(|_| bad())?),
        ColumnType::BigInt => Typed::BigInt(s.parse().map_err(|_| bad())?),
        ColumnType::Double => {
            let v: f64 = s.parse().map_err(|_| bad())?;
            Typed::Double(v)
        }
        ColumnType::Bool => Typed::Bool(match s.to_ascii_lowercase().as_str() {
            "true" | "t" | "1" | "yes" | "y" => true,
            "false" | "f" | "0" | "no" | "n" => false,
            _ => return Err(bad()),
        }),
        ColumnType::Date => {
            let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| bad())?;
            let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).ok_or_else(bad)?;
            Typed::Date(i32::try_from((d - epoch).num_days()).map_err(|_| bad())?)
        }
        ColumnType::Timestamp => {
            if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
                Typed::Timestamp(t.timestamp_micros())
            } else {
                let t = [
                    "%Y-%m-%d %H:%M:%S%.f",
                    "%Y-%m-%dT%H:%M:%S%.f",
                    "%Y%m%d%H%M%S",
                ]
                .iter()
                .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
                .ok_or_else(bad)?;
                let t = tz.from_local_datetime(&t).earliest().ok_or_else(bad)?;
                Typed::Timestamp(t.timestamp_micros())
            }
        }
        ColumnType::Decimal { precision, scale } => {
            Typed::Decimal(decimal(s, precision, scale).ok_or_else(bad)?)
        }
    })
}

/// A converted value as text again, the way [`convert`] reads it: a message whose typed
/// values do not render back to the text they came as is kept as it came (restore is exact).
pub fn render(v: &Typed, ty: ColumnType, tz: Tz) -> String {
    match v {
        Typed::Int(x) => x.to_string(),
        Typed::BigInt(x) => x.to_string(),
        Typed::Double(x) => x.to_string(),
        Typed::Bool(x) => x.to_string(),
        Typed::String(s) => s.clone(),
        Typed::Decimal(x) => match ty {
            ColumnType::Decimal { scale, .. } => render_decimal(*x, scale),
            _ => x.to_string(),
        },
        Typed::Date(d) => NaiveDate::from_ymd_opt(1970, 1, 1)
            .and_then(|e| e.checked_add_signed(chrono::Duration::days(i64::from(*d))))
            .map(|d| d.format("%Y-%m-%d").to_string())
            .unwrap_or_default(),
        Typed::Timestamp(us) => chrono::DateTime::from_timestamp_micros(*us)
            .map(|t| {
                let local = t.with_timezone(&tz).naive_local();
                if us.rem_euclid(1_000_000) == 0 {
                    local.format("%Y-%m-%d %H:%M:%S").to_string()
                } else {
                    local.format("%Y-%m-%d %H:%M:%S%.6f").to_string()
                }
            })
            .unwrap_or_default(),
    }
}

/// An unscaled decimal as text with `scale` digits after the point (`1230`, 2: `12.30`).
pub fn render_decimal(unscaled: i128, scale: u8) -> String {
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    let scale = scale as usize;
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

/// Whether `raw` of type `ty` comes back from its typed value as the same text.
pub fn renders_back(raw: &str, ty: ColumnType, tz: Tz) -> bool {
    ty == ColumnType::String || convert(raw, ty, tz).is_ok_and(|v| render(&v, ty, tz) == raw)
}

/// `s` as an unscaled decimal of `precision` digits with `scale` after the point; `None` when
/// it is not a decimal, has more fraction digits than `scale` (nothing is rounded away) or
/// does not fit.
fn decimal(s: &str, precision: u8, scale: u8) -> Option<i128> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > scale as usize
    {
        return None;
    }
    let int = int.trim_start_matches('0');
    if int.len() + scale as usize > precision as usize {
        return None;
    }
    let mut v: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        v = v.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    for _ in frac.len()..scale as usize {
        v = v.checked_mul(10)?;
    }
    Some(if neg { -v } else { v })
}

/// The `GLOBAL_ID`s a partition archived most recently, at most `capacity` of them: a change
/// whose id is among them is a repeat. Its state (oldest first) is stored with the objects and
/// committed with the offsets, so a restart goes on with the same window.
///
/// The ids' text lies back to back in one buffer and the set holds small plain entries (part of
/// the hash and the id's number): a check allocates nothing and compares text only when the
/// hashes agree. A window of 100,000 ids of ten bytes holds about 5 MB.
#[derive(Debug, Clone, Default)]
pub struct RepeatWindow {
    capacity: usize,
    ring: IdRing,
    /// Each id as (the hash's low half, its number in `ring`).
    ids: hashbrown::HashTable<(u32, u32)>,
    /// foldhash, seeded per process as std's maps are.
    hasher: foldhash::fast::RandomState,
}

/// The window's ids, oldest first, numbered from `first` (numbers and text positions are kept
/// modulo 2^32, far above what a window holds).
#[derive(Debug, Clone, Default)]
struct IdRing {
    slots: VecDeque<Slot>,
    first: u64,
    /// The ids' text; its first `dead` bytes belong to ids that left the window.
    text: Vec<u8>,
    dead: usize,
    /// Where `text[0]` is in the stream of every id's text.
    base: u32,
}

/// Where one id's text is, in the stream of all ids' text. It holds no hash (8 bytes, not 16):
/// the oldest id's is computed again when it leaves.
#[derive(Debug, Clone, Copy)]
struct Slot {
    at: u32,
    len: u32,
}

/// Ids a window makes room for at once: its capacity, up to this (it grows past it as needed).
const WINDOW_PRESIZE: usize = 1 << 17;

/// Bytes of text of departed ids a window keeps before moving the rest to the front.
const WINDOW_DEAD_MIN: usize = 64 << 10;

impl IdRing {
    fn with_capacity(room: usize) -> Self {
        Self {
            slots: VecDeque::with_capacity(room),
            ..Self::default()
        }
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    fn text_of(&self, slot: &Slot) -> &[u8] {
        let from = slot.at.wrapping_sub(self.base) as usize;
        self.text
            .get(from..from.saturating_add(slot.len as usize))
            .unwrap_or_default()
    }

    /// The text of the id numbered `n` (empty when it is not in the ring).
    fn text(&self, n: u32) -> &[u8] {
        self.slots
            .get(n.wrapping_sub(self.first as u32) as usize)
            .map_or(&[], |s| self.text_of(s))
    }

    /// Adds an id; its number.
    fn push(&mut self, id: &[u8]) -> u32 {
        let at = self.base.wrapping_add(self.text.len() as u32);
        self.text.extend_from_slice(id);
        let n = (self.first + self.slots.len() as u64) as u32;
        self.slots.push_back(Slot {
            at,
            len: u32::try_from(id.len()).unwrap_or(u32::MAX),
        });
        n
    }

    /// Drops the oldest id (its text goes once departed text is half the buffer).
    fn pop(&mut self) {
        let Some(old) = self.slots.pop_front() else {
            return;
        };
        self.first += 1;
        self.dead += old.len as usize;
        if self.dead >= WINDOW_DEAD_MIN && self.dead * 2 >= self.text.len() {
            self.text.drain(..self.dead);
            self.base = self.base.wrapping_add(self.dead as u32);
            self.dead = 0;
        }
    }

    fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>() + self.text.capacity()
    }
}

impl RepeatWindow {
    pub fn new(capacity: usize) -> Self {
        let room = capacity.min(WINDOW_PRESIZE);
        Self {
            capacity,
            ring: IdRing::with_capacity(room),
            ids: hashbrown::HashTable::with_capacity(room),
            hasher: Default::default(),
        }
    }

    /// Rebuilds a window from its stored state.
    pub fn from_state(capacity: usize, ids: impl IntoIterator<Item = String>) -> Self {
        let mut w = Self::new(capacity);
        for id in ids {
            w.check(&id);
        }
        w
    }

    /// `true` when `id` was seen within the window (a repeat); else remembers it.
    pub fn check(&mut self, id: &str) -> bool {
        use std::hash::BuildHasher as _;
        let id = id.as_bytes();
        let hash = self.hasher.hash_one(id);
        let low = hash as u32;
        let ring = &self.ring;
        if self
            .ids
            .find(hash, |&(h, n)| h == low && ring.text(n) == id)
            .is_some()
        {
            return true;
        }
        if self.capacity == 0 {
            return false;
        }
        if self.ring.len() == self.capacity {
            let oldest = self.ring.first as u32;
            let old_hash = self.hasher.hash_one(self.ring.text(oldest));
            if let Ok(entry) = self.ids.find_entry(old_hash, |&(_, n)| n == oldest) {
                entry.remove();
            }
            self.ring.pop();
        }
        let n = self.ring.push(id);
        // Growing the set (past the presized room) hashes each id's text again.
        let (ring, hasher) = (&self.ring, &self.hasher);
        self.ids
            .insert_unique(hash, (low, n), |&(_, n)| hasher.hash_one(ring.text(n)));
        false
    }

    /// The ids, oldest first, for storing.
    pub fn state(&self) -> impl Iterator<Item = &str> {
        self.ring
            .slots
            .iter()
            .map(|s| std::str::from_utf8(self.ring.text_of(s)).unwrap_or_default())
    }

    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ring.len() == 0
    }

    /// Memory the window holds: its ring and set (sized for up to its capacity from the start)
    /// and the ids' text.
    pub fn memory_bytes(&self) -> usize {
        self.ring.memory_bytes()
            + self.ids.capacity() * (std::mem::size_of::<(u32, u32)>() + 1) * 8 / 7
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: &str = r#"[
      {"TIME":"20180831165311","GLOBAL_ID":"g1","DATABASE":"shop","TABLE":"orders","TYPE":"I",
       "LOGICAL_CLOCK":"1617327447310000011","NEW_VALUES":{"id":"7","amount":"12.30","note":null},
       "OFFSET":{"BINLOG_NAME":"mysql-bin.000003","BINLOG_POS":"4242"}},
      {"TIME":"20180831165312","GLOBAL_ID":"g2","DATABASE":"shop","SCHEMA":"public","TABLE":"orders",
       "TYPE":"U","LOGICAL_CLOCK":"1617327447310000012","OLD_VALUES":{"id":"7","amount":"12.30"},
       "NEW_VALUES":{"id":"7","amount":13.5}},
      {"GLOBAL_ID":"g3","DATABASE":"shop","TABLE":"users","TYPE":"D","OLD_VALUES":{"id":"1"}}
    ]"#;

    #[test]
    fn escaped_text_is_read_as_its_characters_and_plain_text_is_borrowed() {
        let msg =
            r#"[{"TABLE":"t\u00e9","TYPE":"I","NEW_VALUES":{"n\"k":"a\"b\u00e9","m":"plain"}}]"#;
        let p = parse(msg.as_bytes(), Tz::UTC).unwrap();
        assert!(p.plain);
        let c = &p.changes[0];
        assert_eq!(c.table, "t\u{e9}");
        let v = c.new_values.as_ref().unwrap();
        assert_eq!(v["n\"k"].as_deref(), Some("a\"b\u{e9}"));
        assert!(matches!(v["m"], Some(Cow::Borrowed("plain"))), "{v:?}");
        // And it rebuilds as equal JSON.
        let back: serde_json::Value = serde_json::from_slice(&message_json(&p.changes)).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(msg).unwrap()
        );
    }

    #[test]
    fn a_message_becomes_its_changes_in_order() {
        let tz: Tz = "Asia/Shanghai".parse().unwrap();
        let cs = parse_message(MSG.as_bytes(), tz).unwrap();
        assert_eq!(cs.len(), 3);
        let c = &cs[0];
        assert_eq!(
            (c.index, c.kind, c.table.as_ref()),
            (0, ChangeType::Insert, "orders")
        );
        assert_eq!(c.time_raw.as_deref(), Some("20180831165311"));
        // 16:53:11 in Shanghai (UTC+8) is 08:53:11 UTC.
        assert_eq!(c.time_ms, Some(1_535_705_591_000));
        assert_eq!(c.logical_clock, Some(1_617_327_447_310_000_011));
        assert_eq!(c.schema, None);
        assert!(c.old_values.is_none());
        let new = c.new_values.as_ref().unwrap();
        assert_eq!(new["amount"].as_deref(), Some("12.30"));
        assert_eq!(new["note"], None);
        // An unquoted number is kept as its JSON text.
        assert_eq!(
            cs[1].new_values.as_ref().unwrap()["amount"].as_deref(),
            Some("13.5")
        );
        assert_eq!(cs[1].schema.as_deref(), Some("public"));
        assert_eq!((cs[2].kind, cs[2].time_ms), (ChangeType::Delete, None));
        assert!(cs[2].new_values.is_none());
    }

    #[test]
    fn malformed_messages_say_what_is_wrong() {
        let tz = Tz::UTC;
        let cases: [(&str, Malformed); 6] = [
            ("{\"TABLE\":", Malformed::NotJson(String::new())),
            ("{\"TABLE\":\"t\"}", Malformed::NotArray),
            ("[]", Malformed::Empty),
            ("[1]", Malformed::NotObject { index: 0 }),
            (
                r#"[{"TABLE":"t","TYPE":"I"},{"TYPE":"I"}]"#,
                Malformed::Missing {
                    index: 1,
                    field: "TABLE",
                },
            ),
            (
                r#"[{"TABLE":"t","TYPE":"X"}]"#,
                Malformed::BadType {
                    index: 0,
                    found: "X".into(),
                },
            ),
        ];
        for (msg, want) in cases {
            let got = parse_message(msg.as_bytes(), tz).unwrap_err();
            match (&got, &want) {
                (Malformed::NotJson(_), Malformed::NotJson(_)) => {}
                _ => assert_eq!(got, want, "{msg}"),
            }
        }
        assert_eq!(
            parse_message(br#"[{"TABLE":"t"}]"#, tz)
                .unwrap_err()
                .to_string(),
            "change 0 has no TYPE (or it is not a string)"
        );
    }

    #[test]
    fn odd_metadata_is_kept_raw_not_fatal() {
        let cs = parse_message(
            br#"[{"TABLE":"t","TYPE":"I","TIME":"yesterday","LOGICAL_CLOCK":"12x"}]"#,
            Tz::UTC,
        )
        .unwrap();
        assert_eq!(cs[0].time_raw.as_deref(), Some("yesterday"));
        assert_eq!((cs[0].time_ms, cs[0].logical_clock), (None, None));
        assert_eq!(cs[0].logical_clock_raw.as_deref(), Some("12x"));
    }

    #[test]
    fn table_directories_are_one_level_with_dots_only_between_names() {
        assert_eq!(table_dir(Some("shop"), None, "orders"), "shop.orders");
        assert_eq!(
            table_dir(Some("shop"), Some("public"), "order_items"),
            "shop.public.order_items"
        );
        assert_eq!(table_dir(Some("my.db"), None, "a/b c"), "my%2Edb.a%2Fb%20c");
        assert_eq!(table_dir(None, None, "t"), "t");
    }

    #[test]
    fn column_types_parse_and_refuse_with_the_fix() {
        for (s, t) in [
            ("int", ColumnType::Int),
            ("BIGINT", ColumnType::BigInt),
            (
                "decimal(10, 2)",
                ColumnType::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
            ("timestamp", ColumnType::Timestamp),
        ] {
            assert_eq!(s.parse::<ColumnType>().unwrap(), t, "{s}");
            assert_eq!(t.to_string().parse::<ColumnType>().unwrap(), t);
        }
        assert!("float"
            .parse::<ColumnType>()
            .unwrap_err()
            .contains("decimal(p,s)"));
        assert!("decimal(2,3)".parse::<ColumnType>().is_err());
        assert!("decimal(39,0)".parse::<ColumnType>().is_err());
        assert!("decimal(10)".parse::<ColumnType>().is_err());
    }

    #[test]
    fn values_convert_to_their_declared_types_or_say_why_not() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        let d = |p, s| ColumnType::Decimal {
            precision: p,
            scale: s,
        };
        assert_eq!(convert("42", ColumnType::Int, tz), Ok(Typed::Int(42)));
        assert_eq!(
            convert("9000000000", ColumnType::BigInt, tz),
            Ok(Typed::BigInt(9_000_000_000))
        );
        assert_eq!(
            convert("1.5", ColumnType::Double, tz),
            Ok(Typed::Double(1.5))
        );
        assert_eq!(convert("12.3", d(5, 2), tz), Ok(Typed::Decimal(1230)));
        assert_eq!(convert("-0.05", d(5, 2), tz), Ok(Typed::Decimal(-5)));
        assert_eq!(convert("t", ColumnType::Bool, tz), Ok(Typed::Bool(true)));
        assert_eq!(
            convert("1970-01-02", ColumnType::Date, tz),
            Ok(Typed::Date(1))
        );
        // Naive timestamps are read in the zone: 01:00 in Berlin in winter is midnight UTC.
        assert_eq!(
            convert("1970-01-01 01:00:00", ColumnType::Timestamp, tz),
            Ok(Typed::Timestamp(0))
        );
        assert_eq!(
            convert("1970-01-01T00:00:01.5Z", ColumnType::Timestamp, tz),
            Ok(Typed::Timestamp(1_500_000))
        );
        for (raw, ty) in [
            ("4x", ColumnType::Int),
            ("3000000000", ColumnType::Int),
            ("maybe", ColumnType::Bool),
            ("12.345", d(5, 2)),
            ("1234.5", d(5, 2)),
            ("1.2.3", d(5, 2)),
            ("-", d(5, 2)),
            ("2023-02-30", ColumnType::Date),
            ("noon", ColumnType::Timestamp),
        ] {
            let e = convert(raw, ty, tz).unwrap_err();
            assert_eq!(e, format!("{raw:?} is not a valid {ty}"));
        }
    }

    #[test]
    fn the_repeat_window_remembers_the_newest_ids_and_survives_a_restart() {
        let mut w = RepeatWindow::new(3);
        assert!(!w.check("a"));
        assert!(!w.check("b"));
        assert!(w.check("a"), "a repeat within the window");
        assert!(!w.check("c"));
        assert!(!w.check("d")); // a leaves the window
        assert!(
            !w.check("a"),
            "beyond the window a repeat is not recognised"
        );
        assert_eq!(w.state().collect::<Vec<_>>(), ["c", "d", "a"]);
        let mut back = RepeatWindow::from_state(3, w.state().map(String::from));
        assert!(back.check("d"));
        assert!(!back.check("b"));
        assert_eq!(back.len(), 3);
        assert!(!RepeatWindow::new(0).check("x"));
    }

    /// Against a plain model (a queue and a set of owned strings): ids of several lengths, some
    /// not ASCII, many repeats, long enough that departed ids' text is dropped many times.
    #[test]
    fn the_repeat_window_agrees_with_a_plain_queue_and_set() {
        use std::collections::HashSet;
        let capacity = 5_000;
        let mut w = RepeatWindow::new(capacity);
        let (mut queue, mut set) = (VecDeque::new(), HashSet::new());
        let mut x: u64 = 42;
        for i in 0..200_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Mostly new ids; one in eight is one of the last ~6,000 again.
            let n = if x >> 61 == 0 {
                i.saturating_sub(x % 6_000)
            } else {
                i
            };
            let id = match n % 3 {
                0 => format!("{n}"),
                1 => format!("g-{n}-é"),
                _ => format!("{n:0>24}"),
            };
            let repeat = set.contains(&id);
            assert_eq!(w.check(&id), repeat, "id {id} at {i}");
            if !repeat {
                if queue.len() == capacity {
                    let old: String = queue.pop_front().unwrap();
                    set.remove(&old);
                }
                queue.push_back(id.clone());
                set.insert(id);
            }
        }
        assert!(w.state().eq(queue.iter().map(String::as_str)));
        // A slot, a set entry and ~15 bytes of text per id, with room to grow (an allocation per
        // id, as before, took over 70).
        let per_id = w.memory_bytes() / capacity;
        assert!((24..=90).contains(&per_id), "{per_id} bytes per id");
    }

    #[test]
    fn a_repeat_window_larger_than_its_first_room_still_finds_old_ids() {
        let capacity = WINDOW_PRESIZE + 1000;
        let mut w = RepeatWindow::new(capacity);
        for i in 0..capacity {
            assert!(!w.check(&format!("id{i}")));
        }
        assert!(w.check("id0"), "the set grew and kept the oldest id");
        assert!(w.check(&format!("id{}", capacity - 1)));
        assert!(!w.check("new"));
        assert!(!w.check("id0"), "id0 left the window for 'new'");
    }
}
