//! The stages behind an Iceberg task's sink: the writer thread encodes each partition's records
//! into Parquet data files (one open file per partition and day), the committer task uploads
//! closed files and, at each cut, commits them to their topic's table together with the
//! offsets they cover. Messages of one partition travel one path (sink → writer → committer),
//! so an assignment, its files and its revocation arrive in order.

use super::catalog::Tables;
use super::fence::Fence;
use super::offsets::{self, Advance, Offsets, TableOf};
use super::IcebergError;
use crate::cdc::bundle::{window_key, window_prefix};
use crate::cdc::{Bundle, CdcOptions, Counts, Pushed, RepeatWindow, Rooms, WindowState};
use crate::format::{Compression, Encoder, Pieces};
use crate::kafka::source::Batch;
use crate::kafka::Tp;
use crate::layout::DumpDir;
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
    /// A CDC task's partition starts: what its tables hold already, and its repeat window.
    Start {
        tp: Tp,
        start: CdcStart,
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

/// Where a CDC task's partition starts, as its tables say.
#[derive(Debug, Clone, Default)]
pub(super) struct CdcStart {
    /// Per table level, the offset below which its changes are in its table already (a cut
    /// that committed some tables and not the topic's).
    pub floors: BTreeMap<String, i64>,
    /// The repeat window's ids at the start.
    pub window: Vec<String>,
}

/// From the writer thread to the committer.
pub(super) enum ToCommitter {
    Assigned {
        tp: Tp,
        gen: u64,
    },
    /// A data file of the topic's table (`level: None`) or of a CDC table.
    File {
        tp: Tp,
        file: Written,
    },
    Revoked {
        tp: Tp,
    },
    /// Per partition: the first offset written since the last cut (`None`: only a target was
    /// reached) and the offset after the last record; a CDC task's repeat windows there (the
    /// stored state) and what its bundles counted.
    Cut {
        advance: BTreeMap<Tp, (Option<i64>, i64)>,
        windows: BTreeMap<Tp, Vec<u8>>,
        counts: BTreeMap<String, Counts>,
    },
}

/// A closed data file.
pub(super) struct Written {
    /// The CDC table (`db[.schema].table`) it belongs to; `None`: the topic's table.
    pub level: Option<String>,
    /// The day of its records (a topic's table only).
    pub day: Option<i32>,
    pub first: i64,
    pub records: u64,
    pub data: Pieces,
    /// A CDC table file's columns.
    pub columns: Vec<(String, iceberg::spec::Type)>,
}

/// From the committer to the sink.
pub(super) enum Report {
    /// Where the table says the partition continues (`None`: it holds nothing of it).
    Start {
        tp: Tp,
        gen: u64,
        at: Option<i64>,
        cdc: Option<CdcStart>,
    },
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
    pub cdc: Counts,
}

struct OpenFile {
    enc: Encoder<Pieces>,
    first: i64,
}

/// A CDC partition's open bundle and what it goes on with.
struct CdcPart {
    bundle: Option<Bundle>,
    window: RepeatWindow,
    floors: BTreeMap<String, i64>,
    rooms: Rooms,
    /// What the bundles closed since the last cut counted.
    counts: Counts,
}

struct WriterPart {
    open: BTreeMap<Option<i32>, OpenFile>,
    first: Option<i64>,
    next: Option<i64>,
    /// A CDC task's partition, once started.
    cdc: Option<CdcPart>,
}

/// What the writer thread writes with.
pub(super) struct WriterSetup {
    pub schemas: Schemas,
    pub compression: Compression,
    pub max_file_size: u64,
    pub cdc: Option<CdcOptions>,
    /// The task's share of `limits.buffer_memory` for open files: past it, the largest open
    /// file (or CDC bundle) closes early.
    pub open_budget: usize,
}

/// The writer thread: runs until the sink drops its sender, then cuts once more.
pub(super) fn write(
    rx: std::sync::mpsc::Receiver<ToWriter>,
    tx: mpsc::Sender<ToCommitter>,
    setup: WriterSetup,
    fail: impl Fn(IcebergError),
) {
    let mut w = Writer {
        parts: HashMap::new(),
        tx,
        setup,
    };
    let result = (|| -> Result<(), Gone> {
        while let Ok(msg) = rx.recv() {
            w.take(msg)?;
        }
        // The sink is done: what is written gets committed.
        w.cut()
    })();
    if let Err(Gone::Failed(e)) = result {
        fail(e);
    }
}

/// Why the writer stops early.
enum Gone {
    /// The committer is gone (it reported why).
    Closed,
    Failed(IcebergError),
}

impl From<IcebergError> for Gone {
    fn from(e: IcebergError) -> Self {
        Self::Failed(e)
    }
}

struct Writer {
    parts: HashMap<Tp, WriterPart>,
    tx: mpsc::Sender<ToCommitter>,
    setup: WriterSetup,
}

fn encode_err(tp: &Tp, e: impl std::fmt::Display) -> IcebergError {
    IcebergError::Encode {
        topic: tp.topic.to_string(),
        detail: e.to_string(),
    }
}

impl Writer {
    fn send(&self, m: ToCommitter) -> Result<(), Gone> {
        self.tx.blocking_send(m).map_err(|_| Gone::Closed)
    }

    fn take(&mut self, msg: ToWriter) -> Result<(), Gone> {
        match msg {
            ToWriter::Assigned { tp, gen } => {
                self.parts.insert(
                    tp.clone(),
                    WriterPart {
                        open: BTreeMap::new(),
                        first: None,
                        next: None,
                        cdc: None,
                    },
                );
                self.send(ToCommitter::Assigned { tp, gen })
            }
            ToWriter::Start { tp, start } => {
                if let (Some(p), Some(opts)) = (self.parts.get_mut(&tp), &self.setup.cdc) {
                    p.cdc = Some(CdcPart {
                        bundle: None,
                        window: RepeatWindow::from_state(opts.repeat_window, start.window),
                        floors: start.floors,
                        rooms: Rooms::new(),
                        counts: Counts::default(),
                    });
                }
                Ok(())
            }
            ToWriter::Revoked { tp } => {
                self.parts.remove(&tp);
                self.send(ToCommitter::Revoked { tp })
            }
            ToWriter::Reached { tp, to } => {
                if let Some(p) = self.parts.get_mut(&tp) {
                    p.next = Some(p.next.map_or(to, |n| n.max(to)));
                }
                Ok(())
            }
            ToWriter::Batch { tp, batch } => self.batch(tp, batch),
            ToWriter::Cut => self.cut(),
        }
    }

    fn batch(&mut self, tp: Tp, batch: Batch) -> Result<(), Gone> {
        let Some(mut p) = self.parts.remove(&tp) else {
            return Ok(());
        };
        let r = self.records(&tp, &mut p, &batch);
        self.parts.insert(tp, p);
        r?;
        self.keep_in_budget()
    }

    /// Closes the largest open files and bundles while what is open holds more memory than
    /// the budget (they are committed at the next cut, as files closed at `max_file_size`).
    fn keep_in_budget(&mut self) -> Result<(), Gone> {
        let mut open: Vec<(Holder, usize)> = Vec::new();
        for (tp, p) in &self.parts {
            for (day, f) in &p.open {
                open.push((Holder::File(tp.clone(), *day), f.enc.memory_bytes()));
            }
            if let Some(b) = p.cdc.as_ref().and_then(|c| c.bundle.as_ref()) {
                open.push((Holder::Bundle(tp.clone()), b.memory_bytes()));
            }
        }
        for h in to_close(open, self.setup.open_budget) {
            match h {
                Holder::File(tp, day) => {
                    if let Some(f) = self.parts.get_mut(&tp).and_then(|p| p.open.remove(&day)) {
                        self.close(&tp, day, f)?;
                    }
                }
                Holder::Bundle(tp) => {
                    let mut closed = Vec::new();
                    if let Some(c) = self.parts.get_mut(&tp).and_then(|p| p.cdc.as_mut()) {
                        close_bundle(&tp, c, &mut closed)?;
                    }
                    for file in closed {
                        self.send(ToCommitter::File {
                            tp: tp.clone(),
                            file,
                        })?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes a batch's records: into the topic's table, or (a CDC task's) as changes into
    /// their tables' bundle, and what is not CDC into the topic's table.
    fn records(&mut self, tp: &Tp, p: &mut WriterPart, batch: &Batch) -> Result<(), Gone> {
        let schema = self
            .setup
            .schemas
            .lock()
            .ok()
            .and_then(|s| s.get(&*tp.topic).cloned())
            .ok_or_else(|| encode_err(tp, "records came before the table was loaded"))?;
        let mut full = Vec::new();
        let (compression, max) = (self.setup.compression, self.setup.max_file_size);
        let mut closed: Vec<Written> = Vec::new();
        let WriterPart {
            open,
            first,
            next,
            cdc,
        } = p;
        batch.try_for_each(tp.partition, |r| -> Result<(), IcebergError> {
            first.get_or_insert(r.offset);
            *next = Some(r.offset + 1);
            let Some(opts) = &self.setup.cdc else {
                return append_record(tp, open, r, &schema, compression, max, &mut full);
            };
            let c = cdc
                .as_mut()
                .ok_or_else(|| encode_err(tp, "records came before the partition started"))?;
            loop {
                let b = c.bundle.get_or_insert_with(|| {
                    Bundle::for_tables(r.offset, std::mem::take(&mut c.rooms), c.floors.clone())
                });
                match b
                    .push(&tp.topic, r, &mut c.window, opts, compression)
                    .map_err(|e| encode_err(tp, e))?
                {
                    Pushed::Done => break,
                    // Not CDC, kept (`on_malformed = "keep"`): in the topic's table.
                    Pushed::NotCdc => {
                        append_record(tp, open, r, &schema, compression, max, &mut full)?;
                        break;
                    }
                    Pushed::Malformed(at) => {
                        return Err(IcebergError::Malformed {
                            topic: tp.topic.to_string(),
                            at,
                        })
                    }
                    // A column for a table whose file's columns are fixed: the bundle closes
                    // and the next one takes the message.
                    Pushed::Widens => close_bundle(tp, c, &mut closed)?,
                }
            }
            if c.bundle
                .as_ref()
                .is_some_and(|b| b.memory_bytes() as u64 >= max)
            {
                close_bundle(tp, c, &mut closed)?;
            }
            Ok(())
        })?;
        for w in closed {
            self.send(ToCommitter::File {
                tp: tp.clone(),
                file: w,
            })?;
        }
        for day in full {
            if let Some(f) = open.remove(&day) {
                self.close(tp, day, f)?;
            }
        }
        Ok(())
    }

    fn close(&self, tp: &Tp, day: Option<i32>, f: OpenFile) -> Result<(), Gone> {
        let records = f.enc.records();
        let done = f.enc.finish().map_err(|e| encode_err(tp, e))?;
        self.send(ToCommitter::File {
            tp: tp.clone(),
            file: Written {
                level: None,
                day,
                first: f.first,
                records,
                data: done.out,
                columns: Vec::new(),
            },
        })
    }

    /// Closes every open file and bundle and asks the committer to commit.
    fn cut(&mut self) -> Result<(), Gone> {
        let mut advance = BTreeMap::new();
        let mut windows = BTreeMap::new();
        let mut counts: BTreeMap<String, Counts> = BTreeMap::new();
        let mut files = Vec::new();
        for (tp, p) in self.parts.iter_mut() {
            for (day, f) in std::mem::take(&mut p.open) {
                files.push((tp.clone(), day, f));
            }
            let mut closed = Vec::new();
            if let Some(c) = p.cdc.as_mut() {
                close_bundle(tp, c, &mut closed)?;
                *counts.entry(tp.topic.to_string()).or_default() += std::mem::take(&mut c.counts);
            }
            for w in closed {
                self.tx
                    .blocking_send(ToCommitter::File {
                        tp: tp.clone(),
                        file: w,
                    })
                    .map_err(|_| Gone::Closed)?;
            }
            if let Some(next) = p.next.take() {
                if let Some(c) = &p.cdc {
                    let state = WindowState {
                        next_offset: next,
                        ids: c.window.state().collect(),
                    };
                    // Plain structs serialize to JSON without failing.
                    windows.insert(tp.clone(), serde_json::to_vec(&state).unwrap_or_default());
                }
                advance.insert(tp.clone(), (p.first.take(), next));
            }
        }
        for (tp, day, f) in files {
            self.close(&tp, day, f)?;
        }
        self.send(ToCommitter::Cut {
            advance,
            windows,
            counts,
        })
    }
}

/// What holds memory in the writer: an open file of a partition and day, or a CDC bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    File(Tp, Option<i32>),
    Bundle(Tp),
}

/// What to close so that the rest fits `budget` (pure): the largest first.
fn to_close<H>(mut open: Vec<(H, usize)>, budget: usize) -> Vec<H> {
    let mut total: usize = open.iter().map(|(_, b)| b).sum();
    open.sort_by_key(|h| std::cmp::Reverse(h.1));
    let mut out = Vec::new();
    for (h, bytes) in open {
        if total <= budget {
            break;
        }
        total -= bytes;
        out.push(h);
    }
    out
}

/// Appends a record to the topic table's open file of its day (opened with `schema`); a file
/// that reached `max` bytes is noted in `full`.
fn append_record(
    tp: &Tp,
    open: &mut BTreeMap<Option<i32>, OpenFile>,
    r: &crate::format::RecordView<'_>,
    schema: &SchemaRef,
    compression: Compression,
    max: u64,
    full: &mut Vec<Option<i32>>,
) -> Result<(), IcebergError> {
    let day = offsets::day_of(r.timestamp);
    let f = match open.entry(day) {
        std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
        std::collections::btree_map::Entry::Vacant(v) => {
            let enc = Encoder::parquet_with_schema(
                &tp.topic,
                compression,
                Pieces::default(),
                schema.clone(),
            )
            .map_err(|e| encode_err(tp, e))?;
            v.insert(OpenFile {
                enc,
                first: r.offset,
            })
        }
    };
    f.enc.append(r).map_err(|e| encode_err(tp, e))?;
    if f.enc.output_bytes() >= max && !full.contains(&day) {
        full.push(day);
    }
    Ok(())
}

/// Closes a CDC partition's open bundle (if any) into its tables' files.
fn close_bundle(tp: &Tp, c: &mut CdcPart, out: &mut Vec<Written>) -> Result<(), IcebergError> {
    let Some(b) = c.bundle.take() else {
        return Ok(());
    };
    let first = b.first_offset;
    let done = b.finish_tables().map_err(|e| encode_err(tp, e))?;
    c.rooms = done.rooms;
    c.counts += done.counts;
    for (level, f) in done.tables {
        let columns = f
            .schema
            .fields()
            .iter()
            .map(|field| {
                super::schema::iceberg_type(field.data_type(), field.name())
                    .map(|t| (field.name().clone(), t))
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| encode_err(tp, e))?;
        out.push(Written {
            level: Some(level),
            day: None,
            first,
            records: f.rows,
            data: f.file,
            columns,
        });
    }
    Ok(())
}

/// A data file stored and not committed yet.
struct Pending {
    of: TableOf,
    file: DataFile,
    key: String,
    first: i64,
    columns: Vec<(String, iceberg::spec::Type)>,
}

/// One partition, as the committer sees it.
struct CommitterPart {
    /// The sink's assignment it is held under (a commit checks the member still holds it).
    gen: u64,
    /// The topic table's offset when this member took the partition, then after each commit.
    base: Option<i64>,
    /// A CDC task's: each CDC table's offset of the partition, likewise.
    levels: HashMap<String, Option<i64>>,
    pending: Vec<Pending>,
}

impl CommitterPart {
    fn keys(&mut self) -> Vec<String> {
        self.pending.drain(..).map(|p| p.key).collect()
    }
}

/// Everything the committer works with.
pub(super) struct Committer {
    pub tables: Arc<Tables>,
    pub store: Arc<dyn ObjectStore>,
    pub schemas: Schemas,
    pub reports: std::sync::mpsc::Sender<Report>,
    pub done: Arc<Mutex<Done>>,
    pub task: String,
    /// A CDC task's directory (its repeat windows are stored there).
    pub cdc: Option<DumpDir>,
    /// The partitions this member still holds; a revoke waits for the commit in flight.
    pub fence: Arc<Fence>,
}

impl Committer {
    /// Runs until the writer is gone; a failure is reported and ends it (the files it stored
    /// for commits that never landed are removed).
    pub async fn run(self, mut rx: mpsc::Receiver<ToCommitter>) {
        let mut parts: HashMap<Tp, CommitterPart> = HashMap::new();
        let mut locations: HashMap<TableOf, String> = HashMap::new();
        while let Some(msg) = rx.recv().await {
            let r = self.handle(msg, &mut parts, &mut locations).await;
            if let Err(e) = r {
                let orphans: Vec<String> = parts.values_mut().flat_map(|p| p.keys()).collect();
                self.remove(&orphans).await;
                let _ = self.reports.send(Report::Failed(e));
                return;
            }
        }
        let orphans: Vec<String> = parts.values_mut().flat_map(|p| p.keys()).collect();
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

    /// A CDC partition's start: the CDC tables' offsets of it, and the repeat window stored
    /// for where it continues.
    async fn cdc_start(
        &self,
        dir: &DumpDir,
        tp: &Tp,
        at: Option<i64>,
    ) -> Result<(CdcStart, HashMap<String, Option<i64>>), IcebergError> {
        let tables = self.tables.cdc_offsets(&tp.topic).await?;
        let mut start = CdcStart::default();
        let mut levels = HashMap::new();
        for (level, o) in tables {
            let t = o.get(&tp.partition).copied();
            if let Some(t) = t {
                start.floors.insert(level.clone(), t);
            }
            levels.insert(level, t);
        }
        if let Some(at) = at {
            let prefix = window_prefix(dir, &tp.topic, tp.partition);
            let keys: Vec<String> = self
                .store
                .list(&prefix)
                .await?
                .into_iter()
                .map(|o| o.key)
                .collect();
            if let Some(k) = crate::cdc::bundle::state_for(&keys, at) {
                let data = self.store.get(k).await?;
                let state: WindowState = serde_json::from_slice(&data).map_err(|e| {
                    IcebergError::Encode {
                        topic: tp.topic.to_string(),
                        detail: format!(
                            "the repeat window {} does not read: {e}; delete it (the window starts empty)",
                            self.store.location(k)
                        ),
                    }
                })?;
                start.window = state.ids;
            }
        }
        Ok((start, levels))
    }

    async fn handle(
        &self,
        msg: ToCommitter,
        parts: &mut HashMap<Tp, CommitterPart>,
        locations: &mut HashMap<TableOf, String>,
    ) -> Result<(), IcebergError> {
        match msg {
            ToCommitter::Assigned { tp, gen } => {
                let (table, offsets) = self.tables.offsets(&tp.topic).await?;
                let of = TableOf::Topic(tp.topic.to_string());
                if let std::collections::hash_map::Entry::Vacant(e) = locations.entry(of) {
                    let schema = super::schema::arrow_schema(table.metadata().current_schema())
                        .map_err(|detail| IcebergError::Table {
                            table: self.tables.ident(&tp.topic).to_string(),
                            detail,
                        })?;
                    if let Ok(mut s) = self.schemas.lock() {
                        s.insert(tp.topic.to_string(), schema);
                    }
                    e.insert(table.metadata().location().to_string());
                }
                let at = offsets.get(&tp.partition).copied();
                let (cdc, levels) = match &self.cdc {
                    Some(dir) => {
                        let (start, levels) = self.cdc_start(dir, &tp, at).await?;
                        (Some(start), levels)
                    }
                    None => (None, HashMap::new()),
                };
                if let Some(mut old) = parts.insert(
                    tp.clone(),
                    CommitterPart {
                        gen,
                        base: at,
                        levels,
                        pending: Vec::new(),
                    },
                ) {
                    self.remove(&old.keys()).await;
                }
                let _ = self.reports.send(Report::Start { tp, gen, at, cdc });
            }
            ToCommitter::Revoked { tp } => {
                if let Some(mut p) = parts.remove(&tp) {
                    let keys = p.keys();
                    if !keys.is_empty() {
                        tracing::info!(task = %self.task, topic = %tp.topic, partition = tp.partition, files = keys.len(), "partition revoked: its uncommitted data files are removed; its new owner reads it again from the table's offset");
                    }
                    self.remove(&keys).await;
                }
            }
            ToCommitter::File { tp, file } => {
                if !parts.contains_key(&tp) {
                    return Ok(());
                }
                let of = match &file.level {
                    None => TableOf::Topic(tp.topic.to_string()),
                    Some(level) => TableOf::Cdc {
                        level: level.clone(),
                        topic: tp.topic.to_string(),
                    },
                };
                let location = match locations.get(&of) {
                    Some(l) => l.clone(),
                    None => {
                        let t = self.tables.table(&of, &file.columns).await?;
                        let l = t.metadata().location().to_string();
                        locations.insert(of.clone(), l.clone());
                        l
                    }
                };
                let unique = uuid::Uuid::new_v4().simple().to_string();
                let path = match &of {
                    TableOf::Topic(_) => offsets::data_file_path(
                        &location,
                        file.day,
                        tp.partition,
                        file.first,
                        &unique,
                    ),
                    TableOf::Cdc { .. } => {
                        offsets::cdc_file_path(&location, tp.partition, file.first, &unique)
                    }
                };
                let key = self.tables.key_of(&path)?;
                let size = file.data.len() as u64;
                let mut up = self.store.put_multipart(&key).await.map_err(store_err)?;
                for piece in file.data.into_pieces() {
                    up.write(piece).await.map_err(store_err)?;
                }
                up.finish(Finish::Replace).await.map_err(store_err)?;
                let partition = match &of {
                    TableOf::Topic(_) => Struct::from_iter([file.day.map(Literal::int)]),
                    TableOf::Cdc { .. } => Struct::empty(),
                };
                let data_file = DataFileBuilder::default()
                    .content(DataContentType::Data)
                    .file_path(path)
                    .file_format(DataFileFormat::Parquet)
                    .partition(partition)
                    .partition_spec_id(0)
                    .record_count(file.records)
                    .file_size_in_bytes(size)
                    .build()
                    .map_err(|e| IcebergError::Table {
                        table: self.tables.ident_of(&of).to_string(),
                        detail: e.to_string(),
                    })?;
                if let Some(p) = parts.get_mut(&tp) {
                    p.pending.push(Pending {
                        of,
                        file: data_file,
                        key,
                        first: file.first,
                        columns: file.columns,
                    });
                }
            }
            ToCommitter::Cut {
                advance,
                windows,
                counts,
            } => self.cut(parts, advance, windows, counts).await?,
        }
        Ok(())
    }

    /// Commits a cut: per topic, its CDC tables' files first, then the topic's table with
    /// the offsets the cut reached (what a restart goes on from).
    async fn cut(
        &self,
        parts: &mut HashMap<Tp, CommitterPart>,
        advance: BTreeMap<Tp, (Option<i64>, i64)>,
        windows: BTreeMap<Tp, Vec<u8>>,
        mut counts: BTreeMap<String, Counts>,
    ) -> Result<(), IcebergError> {
        // In flight before ownership is checked: a revoke waits for this cut, or this cut
        // leaves out what the revoke took (its files go with the Revoked message).
        let _in_flight = self.fence.in_flight();
        let mut by_topic: BTreeMap<String, Vec<(Tp, Option<i64>, i64)>> = BTreeMap::new();
        for (tp, (first, next)) in advance {
            by_topic
                .entry(tp.topic.to_string())
                .or_default()
                .push((tp, first, next));
        }
        for (topic, list) in by_topic {
            let list: Vec<(Tp, Option<i64>, i64)> = list
                .into_iter()
                .filter(|(tp, _, next)| {
                    parts.get(tp).is_some_and(|p| {
                        (p.base != Some(*next) || !p.pending.is_empty())
                            && self.fence.owns(tp, p.gen)
                    })
                })
                .collect();
            if list.is_empty() {
                continue;
            }
            let counted = counts.remove(&topic);
            // The repeat windows where the partitions continue, before any commit.
            if let Some(dir) = &self.cdc {
                for (tp, _, next) in &list {
                    if let Some(state) = windows.get(tp) {
                        let key = window_key(dir, &tp.topic, tp.partition, *next);
                        self.store
                            .put(&key, bytes::Bytes::from(state.clone()))
                            .await?;
                    }
                }
            }
            // The CDC tables, each with its partitions' files.
            let mut levels: BTreeMap<TableOf, Vec<(Tp, Pending)>> = BTreeMap::new();
            for (tp, _, _) in &list {
                let Some(p) = parts.get_mut(tp) else { continue };
                let (cdc, rest): (Vec<Pending>, Vec<Pending>) = p
                    .pending
                    .drain(..)
                    .partition(|f| matches!(f.of, TableOf::Cdc { .. }));
                p.pending = rest;
                for f in cdc {
                    levels
                        .entry(f.of.clone())
                        .or_default()
                        .push((tp.clone(), f));
                }
            }
            for (of, files) in levels {
                let TableOf::Cdc { level, .. } = &of else {
                    continue;
                };
                let mut adv = BTreeMap::new();
                let mut columns: Vec<(String, iceberg::spec::Type)> = Vec::new();
                for (tp, f) in &files {
                    let next = list
                        .iter()
                        .find(|(t, _, _)| t == tp)
                        .map_or(f.first, |(_, _, n)| *n);
                    let base = parts
                        .get(tp)
                        .and_then(|p| p.levels.get(level).copied())
                        .flatten();
                    let e = adv.entry(tp.partition).or_insert(Advance {
                        base,
                        first: Some(f.first),
                        next,
                    });
                    e.first = e.first.min(Some(f.first));
                    for c in &f.columns {
                        if !columns.iter().any(|(n, _)| *n == c.0) {
                            columns.push(c.clone());
                        }
                    }
                }
                let keys: Vec<String> = files.iter().map(|(_, f)| f.key.clone()).collect();
                let data: Vec<DataFile> = files.iter().map(|(_, f)| f.file.clone()).collect();
                match self.commit(&of, data, &adv, &columns).await {
                    Ok(_) => {
                        for (tp, _) in &files {
                            if let (Some(p), Some(a)) = (parts.get_mut(tp), adv.get(&tp.partition))
                            {
                                p.levels.insert(level.clone(), Some(a.next));
                            }
                        }
                    }
                    Err(e) => {
                        self.remove(&keys).await;
                        return Err(e);
                    }
                }
            }
            // The topic's table: its records (a CDC task's: what was not CDC) and the offsets.
            let mut adv = BTreeMap::new();
            let mut files = Vec::new();
            let mut keys = Vec::new();
            let mut olds = Vec::new();
            for (tp, first, next) in &list {
                let Some(p) = parts.get_mut(tp) else { continue };
                adv.insert(
                    tp.partition,
                    Advance {
                        base: p.base,
                        first: *first,
                        next: *next,
                    },
                );
                olds.push((tp.clone(), p.base, *next));
                for f in p.pending.drain(..) {
                    files.push(f.file);
                    keys.push(f.key);
                }
            }
            let of = TableOf::Topic(topic.clone());
            match self.commit(&of, files, &adv, &[]).await {
                Ok(now) => {
                    for (tp, _, next) in &list {
                        if let Some(p) = parts.get_mut(tp) {
                            p.base = Some(*next);
                        }
                    }
                    if let (Some(c), Ok(mut d)) = (counted, self.done.lock()) {
                        d.cdc += c;
                        d.records += c.messages;
                    }
                    let _ = self.reports.send(Report::Table {
                        topic: topic.clone(),
                        offsets: now,
                    });
                }
                Err(e) => {
                    self.remove(&keys).await;
                    return Err(e);
                }
            }
            // The windows of the starts left behind are not needed any more.
            if let Some(dir) = &self.cdc {
                for (tp, old, next) in olds {
                    if let Some(old) = old.filter(|o| *o != next) {
                        let _ = self
                            .store
                            .delete(&window_key(dir, &tp.topic, tp.partition, old))
                            .await;
                    }
                }
            }
        }
        Ok(())
    }

    /// One commit, logged, counted and measured.
    async fn commit(
        &self,
        of: &TableOf,
        files: Vec<DataFile>,
        adv: &BTreeMap<i32, Advance>,
        columns: &[(String, iceberg::spec::Type)],
    ) -> Result<Offsets, IcebergError> {
        let n = files.len() as u64;
        let records: u64 = files.iter().map(DataFile::record_count).sum();
        let bytes: u64 = files.iter().map(DataFile::file_size_in_bytes).sum();
        let started = std::time::Instant::now();
        let now = self.tables.commit(of, files, adv, columns).await?;
        tracing::info!(task = %self.task, table = %self.tables.ident_of(of), files = n, records, bytes, ms = started.elapsed().as_millis() as u64, "committed to the table");
        metrics::counter!("strata_iceberg_commits_total", "task" => self.task.clone()).increment(1);
        metrics::histogram!("strata_iceberg_commit_seconds", "task" => self.task.clone())
            .record(started.elapsed().as_secs_f64());
        if let Ok(mut d) = self.done.lock() {
            d.files += n;
            if self.cdc.is_none() {
                d.records += records;
            }
            d.bytes += bytes;
            d.commits += 1;
        }
        Ok(now)
    }
}

fn store_err(e: crate::store::StoreError) -> IcebergError {
    IcebergError::Store(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_open_files_close_until_the_rest_fits() {
        let open = vec![("a", 10), ("b", 40), ("c", 25), ("d", 5)];
        assert_eq!(to_close(open.clone(), 100), Vec::<&str>::new());
        assert_eq!(to_close(open.clone(), 60), vec!["b"]);
        assert_eq!(to_close(open.clone(), 30), vec!["b", "c"]);
        assert_eq!(to_close(open, 0), vec!["b", "c", "a", "d"]);
    }
}
