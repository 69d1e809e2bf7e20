//! A CDC task's objects: the messages of one offset range of a partition become a *bundle*,
//! one Parquet file per source table (`<dir>/<db.schema.table>/<time dir>/`), plus the
//! messages kept whole: repeats (`_repeats/`), malformed ones (`_errors/`) and those the
//! table rows cannot rebuild exactly (`_verbatim/`). Every file of a bundle is named by the
//! bundle's first offset, so a replay of the range writes the same keys; the upload stage makes
//! a bundle visible and commits it as one (see `upload`). Pure apart from the encoders.

use super::change::{self as cdc, ColumnType, RepeatWindow};
use super::table::{Position, Room, TableBuilder};
use super::{CdcOptions, OnMalformed};
use crate::format::{
    Compression, EncodeError, Encoder, FormatKind, FormatSpec, Pieces, RecordView,
};
use crate::layout::{DumpDir, ObjectName};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Directories of the messages a bundle keeps whole, beside the tables.
pub const REPEATS: &str = "_repeats";
pub const ERRORS: &str = "_errors";
pub const VERBATIM: &str = "_verbatim";

/// What a bundle counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub messages: u64,
    /// Changes written to tables.
    pub changes: u64,
    /// Changes left out of the tables as repeats.
    pub repeats: u64,
    pub malformed: u64,
    /// Messages also kept whole because their rows do not rebuild them exactly.
    pub verbatim: u64,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, c: Self) {
        self.messages += c.messages;
        self.changes += c.changes;
        self.repeats += c.repeats;
        self.malformed += c.malformed;
        self.verbatim += c.verbatim;
    }
}

/// What became of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    Done,
    /// It stops the task (`on_malformed = "fail"`).
    Malformed(MalformedAt),
    /// It adds a column to a table whose file's columns are fixed: nothing of it was taken;
    /// the bundle ends before it and the next one starts with it.
    Widens,
    /// It is not CDC and the bundle keeps no sides ([`Bundle::for_tables`]): counted, and
    /// left to the caller to store.
    NotCdc,
}

/// A message that stops the task (`on_malformed = "fail"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("partition {partition} offset {offset} is not a CDC message: {why}; set [tasks.cdc] on_malformed = \"keep\" to store such messages under _errors/ instead")]
pub struct MalformedAt {
    pub partition: i32,
    pub offset: i64,
    pub why: String,
}

/// The open bundle of a partition.
pub struct Bundle {
    pub first_offset: i64,
    tables: BTreeMap<String, TableBuilder>,
    /// The room each table's file in the partition's previous bundle needed.
    rooms: Rooms,
    sides: BTreeMap<&'static str, Encoder<Pieces>>,
    /// Memory the bundle holds, roughly (rows and their text, side encoders).
    pub bytes: usize,
    pub counts: Counts,
    /// Whether messages are also kept whole (`_repeats/`, `_errors/`, `_verbatim/`).
    keeps: bool,
    /// Per table level, the offset below which its changes are in its table already.
    floors: BTreeMap<String, i64>,
}

/// Per table directory level, the room its builders needed ([`Room`]).
pub type Rooms = BTreeMap<String, Room>;

/// A finished bundle: its files (key, bytes in pieces), in key order.
pub struct Files {
    pub files: Vec<(String, Vec<Bytes>)>,
    pub counts: Counts,
    /// For the partition's next bundle.
    pub rooms: Rooms,
}

/// The side encoders write records as the lossless Parquet format does.
fn side_spec(compression: Compression) -> FormatSpec {
    FormatSpec {
        kind: FormatKind::Parquet,
        compression,
        text: Default::default(),
    }
}

/// A table's directory level, kept apart from the side directories and strata's `.strata/`.
pub fn table_level(c: &cdc::Change) -> String {
    let d = cdc::table_dir(c.database.as_deref(), c.schema.as_deref(), &c.table);
    match d.as_bytes().first() {
        Some(b @ (b'_' | b'.')) => format!("%{b:02X}{}", &d[1..]),
        _ => d,
    }
}

impl Bundle {
    /// `rooms`: what the partition's previous bundle returned ([`Files::rooms`]), or none.
    pub fn new(first_offset: i64, rooms: Rooms) -> Self {
        Self {
            first_offset,
            tables: BTreeMap::new(),
            rooms,
            sides: BTreeMap::new(),
            bytes: 0,
            counts: Counts::default(),
            keeps: true,
            floors: BTreeMap::new(),
        }
    }

    /// A bundle whose files are tables only, in microseconds (an Iceberg task's): no message
    /// is kept whole, a malformed one comes back as [`Pushed::NotCdc`], and a change of a
    /// table below its `floors` offset is left out (its table has it).
    pub fn for_tables(first_offset: i64, rooms: Rooms, floors: BTreeMap<String, i64>) -> Self {
        Self {
            keeps: false,
            floors,
            ..Self::new(first_offset, rooms)
        }
    }

    fn keep(
        &mut self,
        side: &'static str,
        topic: &str,
        r: &RecordView<'_>,
        compression: Compression,
    ) -> Result<(), EncodeError> {
        let e = match self.sides.entry(side) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => v.insert(Encoder::new(
                &side_spec(compression),
                topic,
                Pieces::default(),
            )?),
        };
        e.append(r)
    }

    /// Adds one message: its new changes to their tables, the message itself to a side when it
    /// holds repeats, is malformed, or does not rebuild from rows.
    pub fn push(
        &mut self,
        topic: &str,
        r: &RecordView<'_>,
        window: &mut RepeatWindow,
        opts: &CdcOptions,
        compression: Compression,
    ) -> Result<Pushed, EncodeError> {
        let parsed = match r.value {
            None => Err("the value is null (a tombstone)".to_string()),
            Some(v) => cdc::parse(v, opts.time_zone).map_err(|e| e.to_string()),
        };
        let parsed = match parsed {
            Ok(p) => p,
            Err(why) => {
                if opts.on_malformed == OnMalformed::Fail {
                    return Ok(Pushed::Malformed(MalformedAt {
                        partition: r.partition,
                        offset: r.offset,
                        why,
                    }));
                }
                self.taken(r);
                self.counts.malformed += 1;
                if !self.keeps {
                    return Ok(Pushed::NotCdc);
                }
                self.keep(ERRORS, topic, r, compression)?;
                return Ok(Pushed::Done);
            }
        };
        // Decided before anything of the message is taken (the window included), so that
        // where a bundle ends depends on the records alone.
        let levels: Vec<String> = parsed.changes.iter().map(table_level).collect();
        if parsed
            .changes
            .iter()
            .zip(&levels)
            .any(|(c, level)| self.tables.get(level).is_some_and(|t| !t.fits(c)))
        {
            return Ok(Pushed::Widens);
        }
        self.taken(r);
        let mut plain = parsed.plain && r.headers.is_empty();
        let mut repeated = 0u64;
        let position = Position {
            topic,
            partition: r.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key,
        };
        for (c, level) in parsed.changes.into_iter().zip(levels) {
            if c.global_id.as_deref().is_some_and(|id| window.check(id)) {
                repeated += 1;
                continue;
            }
            if self.floors.get(&level).is_some_and(|f| r.offset < *f) {
                continue;
            }
            let types = opts.types.get(&level);
            if let Some(types) = types {
                plain &= [&c.new_values, &c.old_values]
                    .into_iter()
                    .flatten()
                    .flat_map(|m| m.iter())
                    .all(|(col, v)| match (types.get(col.as_ref()), v) {
                        (Some(ty), Some(raw)) if *ty != ColumnType::String => {
                            cdc::renders_back(raw, *ty, opts.time_zone)
                        }
                        _ => true,
                    });
            }
            let t = match self.tables.entry(level) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    let room = self.rooms.remove(e.key()).unwrap_or_default();
                    let t = TableBuilder::new(
                        types.cloned().unwrap_or_default(),
                        opts.time_zone,
                        compression,
                        room,
                    );
                    e.insert(if self.keeps { t } else { t.in_micros() })
                }
            };
            t.append(&position, &c)?;
            self.counts.changes += 1;
        }
        if repeated > 0 {
            self.counts.repeats += repeated;
            if self.keeps {
                self.keep(REPEATS, topic, r, compression)?;
            }
        } else if !plain && self.keeps {
            self.counts.verbatim += 1;
            self.keep(VERBATIM, topic, r, compression)?;
        }
        Ok(Pushed::Done)
    }

    fn taken(&mut self, r: &RecordView<'_>) {
        self.counts.messages += 1;
        self.bytes += r.value.map_or(0, <[u8]>::len) + r.key.map_or(0, <[u8]>::len);
    }

    pub fn memory_bytes(&self) -> usize {
        self.tables
            .values()
            .map(TableBuilder::memory_bytes)
            .sum::<usize>()
            + self
                .sides
                .values()
                .map(Encoder::memory_bytes)
                .sum::<usize>()
    }

    /// Encodes the bundle's files, named by its first offset under `time_dir`.
    pub fn finish(
        self,
        dir: &DumpDir,
        time_dir: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Files, EncodeError> {
        let name = ObjectName {
            topic: topic.to_string(),
            partition,
            first_offset: self.first_offset,
            extension: "parquet".into(),
        };
        let key = |level: &str| format!("{}{level}/{time_dir}/{name}", dir.prefix());
        let (mut files, mut rooms) = (Vec::new(), Rooms::new());
        for (level, t) in self.tables {
            let (file, room) = t.finish()?;
            files.push((key(&level), file.into_pieces()));
            rooms.insert(level, room);
        }
        for (side, e) in self.sides {
            files.push((key(side), e.finish()?.out.into_pieces()));
        }
        files.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Files {
            files,
            counts: self.counts,
            rooms,
        })
    }
}

/// A bundle's tables, finished: per table level, its file.
pub struct TableFiles {
    pub tables: Vec<(String, super::table::Finished)>,
    pub counts: Counts,
    pub rooms: Rooms,
}

impl Bundle {
    /// Encodes the bundle's table files (a [`Self::for_tables`] bundle's).
    pub fn finish_tables(self) -> Result<TableFiles, EncodeError> {
        let (mut tables, mut rooms) = (Vec::new(), Rooms::new());
        for (level, t) in self.tables {
            let (f, room) = t.finish_table()?;
            rooms.insert(level.clone(), room);
            tables.push((level, f));
        }
        Ok(TableFiles {
            tables,
            counts: self.counts,
            rooms,
        })
    }
}

/// A partition's repeat window as stored with its bundles, for the offset it holds up to; read
/// with owned ids, written with ids borrowed from the window (`WindowState<&str>`: a bundle's
/// close writes up to `repeat_window` of them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowState<S = String> {
    /// The window holds the ids of every change before this offset.
    pub next_offset: i64,
    pub ids: Vec<S>,
}

/// Where the window state for `next` lives: `<dir>/.strata/cdc/<topic>/<partition>/<next>.json`.
pub fn window_key(dir: &DumpDir, topic: &str, partition: i32, next: i64) -> String {
    format!("{}{next:020}.json", window_prefix(dir, topic, partition))
}

pub fn window_prefix(dir: &DumpDir, topic: &str, partition: i32) -> String {
    format!("{}.strata/cdc/{topic}/{partition}/", dir.prefix())
}

/// The offset a window state key holds up to.
pub fn window_offset(key: &str) -> Option<i64> {
    let file = key.rsplit('/').next()?;
    let digits = file.strip_suffix(".json")?;
    (digits.len() == 20).then(|| digits.parse().ok()).flatten()
}

/// Of the stored window states, the one a bundle starting at `first` goes on from: the latest
/// at or before it (states of attempts that were never committed end later and are skipped).
pub fn state_for(keys: &[String], first: i64) -> Option<&String> {
    keys.iter()
        .filter_map(|k| window_offset(k).map(|o| (o, k)))
        .filter(|(o, _)| *o <= first)
        .max_by_key(|(o, _)| *o)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::TimestampType;
    use chrono_tz::Tz;

    fn opts(on_malformed: OnMalformed) -> CdcOptions {
        CdcOptions {
            time_zone: Tz::UTC,
            repeat_window: 100,
            on_malformed,
            types: BTreeMap::from([(
                "shop.orders".to_string(),
                BTreeMap::from([(
                    "amount".to_string(),
                    ColumnType::Decimal {
                        precision: 10,
                        scale: 2,
                    },
                )]),
            )]),
        }
    }

    fn view(offset: i64, value: &str) -> RecordView<'_> {
        RecordView {
            partition: 3,
            offset,
            timestamp: Some(1_700_000_000_000),
            timestamp_type: TimestampType::CreateTime,
            key: Some(b"k"),
            value: Some(value.as_bytes()),
            headers: &[],
        }
    }

    /// An Iceberg task's bundle: tables only, in microseconds; a message that is not CDC comes
    /// back to the caller; a table's changes below its floor are left out (its table has them)
    /// while their ids still fill the repeat window.
    #[test]
    fn a_tables_only_bundle_keeps_no_sides_and_leaves_out_what_a_table_has() {
        let o = opts(OnMalformed::Keep);
        let mut w = RepeatWindow::new(100);
        let floors = BTreeMap::from([("shop.orders".to_string(), 41)]);
        let mut b = Bundle::for_tables(40, Rooms::new(), floors);
        let msg = |g: &str, h: &str| {
            format!(
                r#"[{{"DATABASE":"shop","GLOBAL_ID":"{g}","NEW_VALUES":{{"amount":"1.5"}},"TABLE":"orders","TYPE":"I"}},{{"DATABASE":"shop","GLOBAL_ID":"{h}","NEW_VALUES":{{"id":"1"}},"TABLE":"users","TYPE":"I"}}]"#
            )
        };
        let (m40, m41) = (msg("g1", "g2"), msg("g3", "g4"));
        for (off, m) in [(40, m40.as_str()), (41, m41.as_str())] {
            let p = b.push("cdc", &view(off, m), &mut w, &o, Compression::Snappy);
            assert_eq!(p.unwrap(), Pushed::Done);
        }
        let p = b.push(
            "cdc",
            &view(42, "not json"),
            &mut w,
            &o,
            Compression::Snappy,
        );
        assert_eq!(p.unwrap(), Pushed::NotCdc);
        // g1 was below the floor, and is still a repeat.
        let p = b.push(
            "cdc",
            &view(43, &msg("g1", "g5")),
            &mut w,
            &o,
            Compression::Snappy,
        );
        assert_eq!(p.unwrap(), Pushed::Done);
        assert_eq!(
            b.counts,
            Counts {
                messages: 4,
                changes: 4,
                repeats: 1,
                malformed: 1,
                verbatim: 0
            }
        );
        let f = b.finish_tables().unwrap();
        let rows: Vec<(&str, u64)> = f.tables.iter().map(|(l, t)| (l.as_str(), t.rows)).collect();
        assert_eq!(rows, [("shop.orders", 1), ("shop.users", 3)]);
        let time = f.tables[0].1.schema.field_with_name("time").unwrap();
        assert_eq!(
            time.data_type(),
            &arrow_schema::DataType::Timestamp(
                arrow_schema::TimeUnit::Microsecond,
                Some("UTC".into())
            )
        );
    }

    #[test]
    fn changes_go_to_their_tables_and_whole_messages_to_the_sides() {
        let o = opts(OnMalformed::Keep);
        let mut w = RepeatWindow::new(100);
        let mut b = Bundle::new(40, Rooms::new());
        let msgs = [
            r#"[{"DATABASE":"shop","GLOBAL_ID":"g1","NEW_VALUES":{"amount":"1.00"},"TABLE":"orders","TYPE":"I"},{"DATABASE":"shop","GLOBAL_ID":"g2","NEW_VALUES":{"id":"1"},"TABLE":"users","TYPE":"I"}]"#,
            // g1 again (a repeat) with a new change g3: g3 goes to the table, the message to _repeats.
            r#"[{"DATABASE":"shop","GLOBAL_ID":"g1","NEW_VALUES":{"amount":"1.00"},"TABLE":"orders","TYPE":"I"},{"DATABASE":"shop","GLOBAL_ID":"g3","NEW_VALUES":{"amount":"2.00"},"TABLE":"orders","TYPE":"I"}]"#,
            "not json",
            // 1.5 renders back as 1.50: kept whole as well.
            r#"[{"DATABASE":"shop","GLOBAL_ID":"g4","NEW_VALUES":{"amount":"1.5"},"TABLE":"orders","TYPE":"I"}]"#,
        ];
        for (i, m) in msgs.iter().enumerate() {
            let pushed = b
                .push(
                    "cdc",
                    &view(40 + i as i64, m),
                    &mut w,
                    &o,
                    Compression::Snappy,
                )
                .unwrap();
            assert_eq!(pushed, Pushed::Done);
        }
        assert_eq!(
            b.counts,
            Counts {
                messages: 4,
                changes: 4,
                repeats: 1,
                malformed: 1,
                verbatim: 1
            }
        );
        let dir = DumpDir::parse("arch").unwrap();
        let f = b.finish(&dir, "2023/11/14", "cdc", 3).unwrap();
        let keys: Vec<&str> = f.files.iter().map(|(k, _)| k.as_str()).collect();
        let name = "cdc+3+00000000000000000040.parquet";
        assert_eq!(
            keys,
            [
                format!("arch/_errors/2023/11/14/{name}"),
                format!("arch/_repeats/2023/11/14/{name}"),
                format!("arch/_verbatim/2023/11/14/{name}"),
                format!("arch/shop.orders/2023/11/14/{name}"),
                format!("arch/shop.users/2023/11/14/{name}"),
            ]
        );
        let orders = super::super::table::decode(f.files[3].1.concat().into(), 1 << 30).unwrap();
        let ids: Vec<_> = orders
            .iter()
            .map(|r| r.change.global_id.clone().unwrap())
            .collect();
        assert_eq!(ids, ["g1", "g3", "g4"]);
        let spec = side_spec(Compression::Snappy);
        let repeats =
            crate::format::decode(&spec, "cdc", f.files[1].1.concat().into(), 1 << 30).unwrap();
        assert_eq!(repeats.len(), 1);
        assert_eq!(repeats[0].offset, Some(41));
        assert_eq!(repeats[0].value.as_deref(), Some(msgs[1].as_bytes()));
    }

    #[test]
    fn a_new_column_after_the_first_rows_were_flushed_ends_the_bundle_before_its_message() {
        let o = opts(OnMalformed::Keep);
        let mut w = RepeatWindow::new(100_000);
        let mut b = Bundle::new(0, Rooms::new());
        let msg = |i: usize, extra: &str| {
            format!(
                r#"[{{"DATABASE":"shop","GLOBAL_ID":"g{i}","NEW_VALUES":{{"id":"{i}"{extra}}},"TABLE":"users","TYPE":"I"}}]"#
            )
        };
        // Before any flush a new column just widens the file.
        let first = msg(0, r#","name":"a""#);
        assert_eq!(
            b.push("cdc", &view(0, &first), &mut w, &o, Compression::Snappy)
                .unwrap(),
            Pushed::Done
        );
        let mut i = 1;
        while b.tables["shop.users"].fits(
            &cdc::parse(msg(0, r#","email":"x""#).as_bytes(), Tz::UTC)
                .unwrap()
                .changes[0],
        ) {
            let m = msg(i, "");
            assert_eq!(
                b.push("cdc", &view(i as i64, &m), &mut w, &o, Compression::Snappy)
                    .unwrap(),
                Pushed::Done
            );
            i += 1;
            assert!(i < 100_000, "the table never flushed");
        }
        let widening = msg(i, r#","email":"x""#);
        let before = (b.counts, w.len());
        assert_eq!(
            b.push(
                "cdc",
                &view(i as i64, &widening),
                &mut w,
                &o,
                Compression::Snappy
            )
            .unwrap(),
            Pushed::Widens
        );
        assert_eq!(
            (b.counts, w.len()),
            before,
            "nothing of the message was taken"
        );
        let mut next = Bundle::new(i as i64, Rooms::new());
        assert_eq!(
            next.push(
                "cdc",
                &view(i as i64, &widening),
                &mut w,
                &o,
                Compression::Snappy
            )
            .unwrap(),
            Pushed::Done
        );
        // The first bundle's file holds all its rows.
        let dir = DumpDir::parse("d").unwrap();
        let f = b.finish(&dir, "2024", "cdc", 3).unwrap();
        let rows = super::super::table::decode(f.files[0].1.concat().into(), 1 << 30).unwrap();
        assert_eq!(rows.len(), i);
        assert_eq!(
            rows[0].change.new_values.as_ref().unwrap()["name"].as_deref(),
            Some("a")
        );
    }

    #[test]
    fn a_malformed_message_stops_the_task_when_so_configured() {
        let mut b = Bundle::new(0, Rooms::new());
        let pushed = b
            .push(
                "cdc",
                &view(7, "[]"),
                &mut RepeatWindow::new(10),
                &opts(OnMalformed::Fail),
                Compression::Snappy,
            )
            .unwrap();
        let Pushed::Malformed(err) = pushed else {
            panic!("{pushed:?}");
        };
        assert_eq!((err.partition, err.offset), (3, 7));
        assert_eq!(b.counts, Counts::default(), "nothing of it was taken");
        assert!(err.to_string().contains("on_malformed = \"keep\""), "{err}");
    }

    #[test]
    fn tables_never_take_the_name_of_a_side_or_of_strata_s_own_directory() {
        let level = |db: Option<&str>, t: &str| {
            let msg =
                serde_json::json!([{"DATABASE": db, "TABLE": t, "TYPE": "I", "NEW_VALUES": {}}])
                    .to_string();
            table_level(&cdc::parse(msg.as_bytes(), Tz::UTC).unwrap().changes[0])
        };
        assert_eq!(level(None, "_errors"), "%5Ferrors");
        assert_eq!(level(Some(""), "strata"), "%2Estrata");
        assert_eq!(level(Some("shop"), "orders"), "shop.orders");
    }

    #[test]
    fn a_bundle_goes_on_from_the_latest_window_at_or_before_it() {
        let dir = DumpDir::parse("d").unwrap();
        let keys: Vec<String> = [0i64, 100, 250, 400]
            .iter()
            .map(|o| window_key(&dir, "t", 1, *o))
            .collect();
        assert_eq!(keys[1], "d/.strata/cdc/t/1/00000000000000000100.json");
        assert_eq!(state_for(&keys, 250), Some(&keys[2]));
        assert_eq!(state_for(&keys, 300), Some(&keys[2]));
        assert_eq!(state_for(&keys, 99), Some(&keys[0]));
        assert_eq!(state_for(&keys[1..], 50), None);
        assert_eq!(window_offset("d/.strata/cdc/t/1/x.json"), None);
    }

    #[test]
    fn a_window_state_written_from_the_window_reads_back_whole() {
        let mut w = RepeatWindow::new(3);
        for id in ["a", "b\"q\"", "c", "d"] {
            w.check(id);
        }
        let json = serde_json::to_vec(&WindowState {
            next_offset: 9,
            ids: w.state().collect(),
        })
        .unwrap();
        let back: WindowState = serde_json::from_slice(&json).unwrap();
        assert_eq!(back.next_offset, 9);
        assert_eq!(back.ids, ["b\"q\"", "c", "d"]);
    }
}
