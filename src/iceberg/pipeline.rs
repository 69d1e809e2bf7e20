//! The stages behind an Iceberg task's sink: the writer thread encodes each partition's records
//! into Parquet data files (one open file per partition and day), the committer task uploads
//! closed files and, at each cut, commits them to their topic's table together with the
//! offsets they cover. Messages of one partition travel one path (sink → writer → committer),
//! so an assignment, its files and its revocation arrive in order.

use super::catalog::Tables;
use super::offsets::{self, Advance, Offsets};
use super::IcebergError;
use crate::format::{Compression, Encoder, Pieces};
use crate::kafka::source::Batch;
use crate::kafka::Tp;
use crate::store::{Finish, ObjectStore};
use arrow_schema::SchemaRef;
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Literal, Struct};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// From the sink to the writer thread.
pub(super) enum ToWriter {
    /// The partition is this member's (generation `gen` of its assignments).
    Assigned {
        tp: Tp,
        gen: u64,
    },
    Batch {
        tp: Tp,
        batch: Batch,
    },
    /// `--once`: every record before `to` was taken (beyond the last lie markers at most).
    Reached {
        tp: Tp,
        to: i64,
    },
    Revoked {
        tp: Tp,
    },
    /// Close every open file and commit what was written.
    Cut,
}

/// From the writer thread to the committer.
pub(super) enum ToCommitter {
    Assigned {
        tp: Tp,
        gen: u64,
    },
    File {
        tp: Tp,
        day: Option<i32>,
        first: i64,
        records: u64,
        data: Pieces,
    },
    Revoked {
        tp: Tp,
    },
    /// Per partition: the first offset written since the last cut (`None`: only a target was
    /// reached) and the offset after the last record.
    Cut {
        advance: BTreeMap<Tp, (Option<i64>, i64)>,
    },
}

/// From the committer to the sink.
pub(super) enum Report {
    /// Where the table says the partition continues (`None`: it holds nothing of it).
    Start { tp: Tp, gen: u64, at: Option<i64> },
    /// A topic's table holds these offsets now (after a commit or a look).
    Table { topic: String, offsets: Offsets },
    /// The task cannot go on.
    Failed(IcebergError),
}

/// The arrow schema (with Iceberg field ids) each topic's data files are written with, set by
/// the committer when it loads the table, read by the writer.
pub(super) type Schemas = Arc<Mutex<HashMap<String, SchemaRef>>>;

/// What a task did, for its summary.
#[derive(Debug, Default, Clone)]
pub(super) struct Done {
    pub files: u64,
    pub records: u64,
    pub bytes: u64,
    pub commits: u64,
}

struct OpenFile {
    enc: Encoder<Pieces>,
    first: i64,
}

struct WriterPart {
    open: BTreeMap<Option<i32>, OpenFile>,
    first: Option<i64>,
    next: Option<i64>,
}

/// The writer thread: runs until the sink drops its sender, then cuts once more.
pub(super) fn write(
    rx: std::sync::mpsc::Receiver<ToWriter>,
    tx: mpsc::Sender<ToCommitter>,
    schemas: Schemas,
    compression: Compression,
    max_file_size: u64,
    fail: impl Fn(IcebergError),
) {
    let mut parts: HashMap<Tp, WriterPart> = HashMap::new();
    let send = |m: ToCommitter| tx.blocking_send(m).is_ok();
    let close = |tp: &Tp, day: Option<i32>, f: OpenFile| -> Result<bool, IcebergError> {
        let records = f.enc.records();
        let done = f.enc.finish().map_err(|e| IcebergError::Encode {
            topic: tp.topic.to_string(),
            detail: e.to_string(),
        })?;
        Ok(send(ToCommitter::File {
            tp: tp.clone(),
            day,
            first: f.first,
            records,
            data: done.out,
        }))
    };
    let cut = |parts: &mut HashMap<Tp, WriterPart>| -> Result<bool, IcebergError> {
        let mut advance = BTreeMap::new();
        for (tp, p) in parts.iter_mut() {
            for (day, f) in std::mem::take(&mut p.open) {
                if !close(tp, day, f)? {
                    return Ok(false);
                }
            }
            if let Some(next) = p.next.take() {
                advance.insert(tp.clone(), (p.first.take(), next));
            }
        }
        Ok(send(ToCommitter::Cut { advance }))
    };
    let result = (|| -> Result<(), IcebergError> {
        while let Ok(msg) = rx.recv() {
            match msg {
                ToWriter::Assigned { tp, gen } => {
                    parts.insert(
                        tp.clone(),
                        WriterPart {
                            open: BTreeMap::new(),
                            first: None,
                            next: None,
                        },
                    );
                    if !send(ToCommitter::Assigned { tp, gen }) {
                        return Ok(());
                    }
                }
                ToWriter::Revoked { tp } => {
                    parts.remove(&tp);
                    if !send(ToCommitter::Revoked { tp }) {
                        return Ok(());
                    }
                }
                ToWriter::Reached { tp, to } => {
                    if let Some(p) = parts.get_mut(&tp) {
                        p.next = Some(p.next.map_or(to, |n| n.max(to)));
                    }
                }
                ToWriter::Batch { tp, batch } => {
                    let Some(p) = parts.get_mut(&tp) else {
                        continue;
                    };
                    let schema = schemas
                        .lock()
                        .ok()
                        .and_then(|s| s.get(&*tp.topic).cloned())
                        .ok_or_else(|| IcebergError::Encode {
                            topic: tp.topic.to_string(),
                            detail: "records came before the table was loaded".into(),
                        })?;
                    let mut full = Vec::new();
                    batch.try_for_each(tp.partition, |r| -> Result<(), IcebergError> {
                        let day = offsets::day_of(r.timestamp);
                        let f = match p.open.entry(day) {
                            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                            std::collections::btree_map::Entry::Vacant(v) => {
                                let enc = Encoder::parquet_with_schema(
                                    &tp.topic,
                                    compression,
                                    Pieces::default(),
                                    schema.clone(),
                                )
                                .map_err(|e| {
                                    IcebergError::Encode {
                                        topic: tp.topic.to_string(),
                                        detail: e.to_string(),
                                    }
                                })?;
                                v.insert(OpenFile {
                                    enc,
                                    first: r.offset,
                                })
                            }
                        };
                        f.enc.append(r).map_err(|e| IcebergError::Encode {
                            topic: tp.topic.to_string(),
                            detail: e.to_string(),
                        })?;
                        if f.enc.output_bytes() >= max_file_size && !full.contains(&day) {
                            full.push(day);
                        }
                        p.first.get_or_insert(r.offset);
                        p.next = Some(r.offset + 1);
                        Ok(())
                    })?;
                    for day in full {
                        if let Some(f) = p.open.remove(&day) {
                            if !close(&tp, day, f)? {
                                return Ok(());
                            }
                        }
                    }
                }
                ToWriter::Cut => {
                    if !cut(&mut parts)? {
                        return Ok(());
                    }
                }
            }
        }
        // The sink is done: what is written gets committed.
        cut(&mut parts)?;
        Ok(())
    })();
    if let Err(e) = result {
        fail(e);
    }
}

/// One partition, as the committer sees it.
struct CommitterPart {
    /// The table's offset when this member took the partition, then after each commit.
    base: Option<i64>,
    /// Data files stored and not committed yet, with their store keys.
    pending: Vec<(DataFile, String)>,
}

/// Everything the committer works with.
pub(super) struct Committer {
    pub tables: Arc<Tables>,
    pub store: Arc<dyn ObjectStore>,
    pub schemas: Schemas,
    pub reports: std::sync::mpsc::Sender<Report>,
    pub done: Arc<Mutex<Done>>,
    pub task: String,
}

impl Committer {
    /// Runs until the writer is gone; a failure is reported and ends it (the files it stored
    /// for commits that never landed are removed).
    pub async fn run(self, mut rx: mpsc::Receiver<ToCommitter>) {
        let mut parts: HashMap<Tp, CommitterPart> = HashMap::new();
        let mut locations: HashMap<String, String> = HashMap::new();
        while let Some(msg) = rx.recv().await {
            let r = self.handle(msg, &mut parts, &mut locations).await;
            if let Err(e) = r {
                let orphans: Vec<String> = parts
                    .values_mut()
                    .flat_map(|p| p.pending.drain(..).map(|(_, k)| k))
                    .collect();
                self.remove(&orphans).await;
                let _ = self.reports.send(Report::Failed(e));
                return;
            }
        }
        let orphans: Vec<String> = parts
            .values_mut()
            .flat_map(|p| p.pending.drain(..).map(|(_, k)| k))
            .collect();
        self.remove(&orphans).await;
    }

    /// Removes data files no commit refers to (best effort; what stays is listed in the log
    /// for the catalog's orphan-file clean-up).
    async fn remove(&self, keys: &[String]) {
        for k in keys {
            if let Err(e) = self.store.delete(k).await {
                tracing::warn!(task = %self.task, file = %self.store.location(k), error = %e, "a data file no commit refers to could not be removed; an engine's orphan-file clean-up removes it (docs/iceberg.md)");
            }
        }
    }

    async fn handle(
        &self,
        msg: ToCommitter,
        parts: &mut HashMap<Tp, CommitterPart>,
        locations: &mut HashMap<String, String>,
    ) -> Result<(), IcebergError> {
        match msg {
            ToCommitter::Assigned { tp, gen } => {
                let (table, offsets) = self.tables.offsets(&tp.topic).await?;
                if !locations.contains_key(&*tp.topic) {
                    let schema = super::schema::arrow_schema(table.metadata().current_schema())
                        .map_err(|detail| IcebergError::Table {
                            table: self.tables.ident(&tp.topic).to_string(),
                            detail,
                        })?;
                    if let Ok(mut s) = self.schemas.lock() {
                        s.insert(tp.topic.to_string(), schema);
                    }
                    locations.insert(
                        tp.topic.to_string(),
                        table.metadata().location().to_string(),
                    );
                }
                let at = offsets.get(&tp.partition).copied();
                if let Some(old) = parts.insert(
                    tp.clone(),
                    CommitterPart {
                        base: at,
                        pending: Vec::new(),
                    },
                ) {
                    let keys: Vec<String> = old.pending.into_iter().map(|(_, k)| k).collect();
                    self.remove(&keys).await;
                }
                let _ = self.reports.send(Report::Start { tp, gen, at });
            }
            ToCommitter::Revoked { tp } => {
                if let Some(p) = parts.remove(&tp) {
                    let keys: Vec<String> = p.pending.into_iter().map(|(_, k)| k).collect();
                    if !keys.is_empty() {
                        tracing::info!(task = %self.task, topic = %tp.topic, partition = tp.partition, files = keys.len(), "partition revoked: its uncommitted data files are removed; its new owner reads it again from the table's offset");
                    }
                    self.remove(&keys).await;
                }
            }
            ToCommitter::File {
                tp,
                day,
                first,
                records,
                data,
            } => {
                let Some(p) = parts.get_mut(&tp) else {
                    return Ok(());
                };
                let Some(location) = locations.get(&*tp.topic) else {
                    return Ok(());
                };
                let unique = uuid::Uuid::new_v4().simple().to_string();
                let path = offsets::data_file_path(location, day, tp.partition, first, &unique);
                let key = self.tables.key_of(&path)?;
                let size = data.len() as u64;
                let mut up = self.store.put_multipart(&key).await.map_err(store_err)?;
                for piece in data.into_pieces() {
                    up.write(piece).await.map_err(store_err)?;
                }
                up.finish(Finish::Replace).await.map_err(store_err)?;
                let file = DataFileBuilder::default()
                    .content(DataContentType::Data)
                    .file_path(path)
                    .file_format(DataFileFormat::Parquet)
                    .partition(Struct::from_iter([day.map(Literal::int)]))
                    .partition_spec_id(0)
                    .record_count(records)
                    .file_size_in_bytes(size)
                    .build()
                    .map_err(|e| IcebergError::Table {
                        table: self.tables.ident(&tp.topic).to_string(),
                        detail: e.to_string(),
                    })?;
                p.pending.push((file, key));
            }
            ToCommitter::Cut { advance } => {
                let mut by_topic: BTreeMap<String, Vec<(Tp, Option<i64>, i64)>> = BTreeMap::new();
                for (tp, (first, next)) in advance {
                    by_topic
                        .entry(tp.topic.to_string())
                        .or_default()
                        .push((tp, first, next));
                }
                for (topic, list) in by_topic {
                    let mut adv = BTreeMap::new();
                    let mut files = Vec::new();
                    let mut keys = Vec::new();
                    let mut records = 0;
                    let mut bytes = 0;
                    for (tp, first, next) in &list {
                        let Some(p) = parts.get_mut(tp) else { continue };
                        if p.base == Some(*next) && p.pending.is_empty() {
                            continue;
                        }
                        adv.insert(
                            tp.partition,
                            Advance {
                                base: p.base,
                                first: *first,
                                next: *next,
                            },
                        );
                        for (f, k) in p.pending.drain(..) {
                            records += f.record_count();
                            bytes += f.file_size_in_bytes();
                            files.push(f);
                            keys.push(k);
                        }
                    }
                    if adv.is_empty() {
                        continue;
                    }
                    let n = files.len() as u64;
                    let started = std::time::Instant::now();
                    match self.tables.commit(&topic, files, &adv).await {
                        Ok(now) => {
                            for (tp, _, next) in &list {
                                if let Some(p) = parts.get_mut(tp) {
                                    if adv.contains_key(&tp.partition) {
                                        p.base = Some(*next);
                                    }
                                }
                            }
                            tracing::info!(task = %self.task, table = %self.tables.ident(&topic), files = n, records, bytes, ms = started.elapsed().as_millis() as u64, "committed to the table");
                            metrics::counter!("strata_iceberg_commits_total", "task" => self.task.clone()).increment(1);
                            metrics::histogram!("strata_iceberg_commit_seconds", "task" => self.task.clone()).record(started.elapsed().as_secs_f64());
                            if let Ok(mut d) = self.done.lock() {
                                d.files += n;
                                d.records += records;
                                d.bytes += bytes;
                                d.commits += 1;
                            }
                            let _ = self.reports.send(Report::Table {
                                topic,
                                offsets: now,
                            });
                        }
                        Err(e) => {
                            self.remove(&keys).await;
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn store_err(e: crate::store::StoreError) -> IcebergError {
    IcebergError::Store(e)
}
