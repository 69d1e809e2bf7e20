//! The writer stage: on its own thread, turns each partition's records into archive objects.
//! One object per partition is open at a time; its encoder writes into a [`PartSink`], which
//! hands every full part to the object's upload as it fills, so an open object holds at most
//! one part in memory. The roll rules (`roll`) decide where objects end.
//!
//! Input comes in order from the poll loop; a partition's records of an older epoch (before a
//! rewind) are dropped. Output: an [`Opened`] per object to the partition's sequencer, then
//! its parts and its end on the object's own channel.

use super::budget::{ByteBudget, Permit};
use super::roll::{self, RollReason};
use super::sequencer::PartitionFlags;
use super::{Fatal, Tp};
use crate::cdc::{Bundle, Counts, Pushed, WindowState};
use crate::config::{DumpTask, TimeSource};
use crate::format::{Encoder, Output};
use crate::kafka::source::Batch;
use crate::layout::{object_key, ObjectName};
use bytes::Bytes;
use chrono::NaiveDateTime;
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// What the poll loop tells a writer.
pub(super) enum ToWriter {
    /// A partition is this writer's now; its objects go to `objects` (its sequencer).
    Assigned {
        tp: Tp,
        epoch: u64,
        objects: mpsc::Sender<Opened>,
        flags: Arc<PartitionFlags>,
    },
    Batch {
        tp: Tp,
        batch: Batch,
    },
    /// The partition was rewound to `from`: drop its open object and older records. With
    /// `cut`, the next object ends exactly after that offset (a CDC bundle written again as an
    /// earlier attempt ended); with `limit`, objects end before that offset (the archive holds
    /// it already).
    Reset {
        tp: Tp,
        epoch: u64,
        from: i64,
        cut: Option<i64>,
        limit: Option<i64>,
    },
    Revoked {
        tp: Tp,
    },
    /// Close open objects: of one partition (a `--once` partition reached its target), or of
    /// all (shutdown).
    Close {
        tp: Option<Tp>,
    },
    /// Time passed: interval rolls.
    Tick,
}

/// A new object, for its partition's sequencer.
pub(super) struct Opened {
    pub seq: u64,
    pub epoch: u64,
    pub key: String,
    pub first_offset: i64,
    pub parts: mpsc::Receiver<ToObject>,
    /// A bundle whose writer has no state to go on from yet: the sequencer loads the stored
    /// one.
    pub state: Option<StateRequest>,
}

/// Asks for the state a bundle starting at `first_offset` goes on from (a CDC bundle's repeat
/// window): of the states stored under `prefix`, the one `pick` chooses. The answer is the
/// state's location and bytes, or `None` when there is none.
pub(super) struct StateRequest {
    pub prefix: String,
    pub first_offset: i64,
    pub pick: fn(&[String], i64) -> Option<&String>,
    pub reply: oneshot::Sender<Option<(String, Bytes)>>,
}

/// A finished bundle: every file, and the state the partition's next bundle goes on from
/// (stored under `state_prefix` before the files; the states of other positions go once the
/// bundle is committed).
pub(super) struct BundleOut {
    pub files: Vec<(String, Vec<Bytes>)>,
    pub state: (String, Vec<u8>),
    pub state_prefix: String,
}

/// What flows on one object's channel: its parts, then its end.
pub(super) enum ToObject {
    /// A part, as the chunks it was filled in.
    Part(Vec<Bytes>, Permit),
    /// A CDC bundle's files, all at once (then its end).
    Bundle(BundleOut, Permit),
    End(ObjectEnd),
}

/// How an object ended.
#[derive(Debug, Clone, Copy)]
pub(super) struct ObjectEnd {
    pub last_offset: i64,
    pub records: u64,
    /// The object's exact stored size.
    pub bytes: u64,
    pub reason: RollReason,
    /// What a CDC bundle counted.
    pub cdc: Option<Counts>,
    /// The earliest and latest record timestamps in it (ms since the epoch; `None`: no record
    /// carried one): what an archive listing shows and pruning goes by.
    pub times: Option<(i64, i64)>,
}

/// Settings and shared state of a task's writers.
pub(super) struct WriterContext {
    pub task: Arc<DumpTask>,
    /// Parts handed on and not yet stored.
    pub in_flight: Arc<ByteBudget>,
    pub part_size: usize,
    /// Memory this writer's open objects may hold before the largest are closed.
    pub open_limit: usize,
    /// Memory held by the open objects of all writers (for the buffered-bytes gauge).
    pub buffered: Arc<AtomicUsize>,
    pub fatal: Arc<Fatal>,
}

/// Runs until the poll loop hangs up.
pub(super) fn run(rx: std::sync::mpsc::Receiver<ToWriter>, cx: WriterContext) {
    let mut w = Writer {
        parts: HashMap::new(),
        held: 0,
        windows: crate::memory::Claim::default(),
        cx,
    };
    while let Ok(msg) = rx.recv() {
        if let Err(e) = w.handle(msg) {
            w.cx.fatal.set(e);
            return;
        }
    }
    w.close_all(RollReason::Shutdown);
    w.account();
}

struct Writer {
    parts: HashMap<Tp, PartitionWriter>,
    /// Memory of the open objects as last accounted.
    held: usize,
    /// The CDC repeat windows' memory, which is outside the buffer budget.
    windows: crate::memory::Claim,
    cx: WriterContext,
}

struct PartitionWriter {
    tp: Tp,
    /// Room for the parts and bundles handed on.
    in_flight: Arc<ByteBudget>,
    epoch: u64,
    /// Records below this offset are dropped (set by a rewind).
    from: i64,
    objects: mpsc::Sender<Opened>,
    flags: Arc<PartitionFlags>,
    next_seq: u64,
    open: Option<OpenObject>,
    /// The current object's sequencer hung up: drop records until a rewind or revocation.
    discarding: bool,
    /// CDC: the ids of the changes before the next record (`None`: to be loaded).
    window: Option<crate::cdc::RepeatWindow>,
    /// The next object ends right after this offset (no other roll before it).
    cut: Option<i64>,
    /// Objects end before this offset: the archive holds it already.
    limit: Option<i64>,
    /// CDC: the room the tables of the partition's last bundle needed.
    rooms: crate::cdc::Rooms,
}

/// What an open object is being written as. One per open object, and most are records: the
/// encoder stays inline (its size depends on the gzip backend the dependencies select).
#[allow(clippy::large_enum_variant)]
enum Body {
    Records(Encoder<PartSink>),
    /// A CDC bundle, encoded when it closes; its files go to the upload at once.
    Cdc {
        bundle: Bundle,
        tx: mpsc::Sender<ToObject>,
    },
}

impl Body {
    fn memory_bytes(&self) -> usize {
        match self {
            Body::Records(e) => e.memory_bytes(),
            Body::Cdc { bundle, .. } => bundle.memory_bytes(),
        }
    }

    /// The size the size roll looks at (a bundle's raw message bytes: its files are smaller).
    fn output_bytes(&self) -> u64 {
        match self {
            Body::Records(e) => e.output_bytes(),
            Body::Cdc { bundle, .. } => bundle.bytes as u64,
        }
    }
}

struct OpenObject {
    seq: u64,
    body: Body,
    key: String,
    last_offset: i64,
    /// The earliest and latest record timestamps appended.
    times: Option<(i64, i64)>,
    period: NaiveDateTime,
    /// UTC ms span of `period` when exact: records inside it skip the time-zone arithmetic.
    span: Option<(i64, i64)>,
    opened_at: Instant,
}

impl Writer {
    fn handle(&mut self, msg: ToWriter) -> Result<(), super::DumpError> {
        match msg {
            ToWriter::Assigned {
                tp,
                epoch,
                objects,
                flags,
            } => {
                self.parts.insert(
                    tp.clone(),
                    PartitionWriter {
                        tp,
                        in_flight: self.cx.in_flight.clone(),
                        epoch,
                        from: 0,
                        objects,
                        flags,
                        next_seq: 0,
                        open: None,
                        discarding: false,
                        window: None,
                        cut: None,
                        limit: None,
                        rooms: Default::default(),
                    },
                );
            }
            ToWriter::Batch { tp, batch } => self.batch(&tp, batch)?,
            ToWriter::Reset {
                tp,
                epoch,
                from,
                cut,
                limit,
            } => {
                if let Some(p) = self.parts.get_mut(&tp) {
                    // Dropping the open object's channel without an end discards its upload.
                    p.open = None;
                    p.epoch = epoch;
                    p.from = from;
                    p.discarding = false;
                    // The window went on past what is read again: load the one stored for it.
                    p.window = None;
                    p.cut = cut;
                    p.limit = limit;
                }
            }
            ToWriter::Revoked { tp } => {
                self.parts.remove(&tp);
            }
            ToWriter::Close { tp: Some(tp) } => {
                if let Some(p) = self.parts.get_mut(&tp) {
                    p.close(&self.cx.task, RollReason::Shutdown)?;
                    p.flags.closed.store(true, Ordering::Relaxed);
                }
            }
            ToWriter::Close { tp: None } => self.close_all(RollReason::Shutdown),
            ToWriter::Tick => {
                let now = Instant::now();
                for p in self.parts.values_mut() {
                    if p.cut.is_none()
                        && p.open.as_ref().is_some_and(|o| {
                            roll::interval_due(o.opened_at, now, self.cx.task.interval)
                        })
                    {
                        p.close(&self.cx.task, RollReason::Interval)?;
                    }
                }
            }
        }
        self.account();
        self.enforce_limit()
    }

    fn batch(&mut self, tp: &Tp, batch: Batch) -> Result<(), super::DumpError> {
        let Some(p) = self.parts.get_mut(tp) else {
            return Ok(());
        };
        if batch.epoch != p.epoch || p.discarding {
            return Ok(());
        }
        let cx = &self.cx;
        batch.try_for_each(tp.partition, |r| {
            if r.offset < p.from || p.discarding {
                return Ok(());
            }
            p.append(tp, r, cx)
        })
    }

    fn close_all(&mut self, reason: RollReason) {
        for p in self.parts.values_mut() {
            if let Err(e) = p.close(&self.cx.task, reason) {
                self.cx.fatal.set(e);
            }
        }
    }

    /// Updates the shared gauge with this writer's open memory, and the claim of its windows.
    fn account(&mut self) {
        let windows = self
            .parts
            .values()
            .filter_map(|p| p.window.as_ref())
            .map(crate::cdc::RepeatWindow::memory_bytes)
            .sum::<usize>();
        self.windows.set(windows as u64);
        let now: usize = self.parts.values().map(PartitionWriter::memory).sum();
        if now >= self.held {
            self.cx
                .buffered
                .fetch_add(now - self.held, Ordering::Relaxed);
        } else {
            self.cx
                .buffered
                .fetch_sub(self.held - now, Ordering::Relaxed);
        }
        self.held = now;
    }

    /// Closes the largest open objects while this writer holds more than its share.
    fn enforce_limit(&mut self) -> Result<(), super::DumpError> {
        if self.held <= self.cx.open_limit {
            return Ok(());
        }
        // A bundle that must end at a given offset is left alone: a forced end elsewhere would
        // write its keys with other contents.
        let tps: Vec<Tp> = self
            .parts
            .iter()
            .filter(|(_, p)| p.cut.is_none())
            .map(|(t, _)| t.clone())
            .collect();
        let sizes: Vec<usize> = tps
            .iter()
            .map(|t| self.parts.get(t).map_or(0, PartitionWriter::memory))
            .collect();
        let picked = roll::pick_for_memory(
            &sizes,
            self.held,
            self.cx.open_limit,
            self.cx.open_limit / 2,
        );
        for i in picked {
            if let Some(p) = self.parts.get_mut(&tps[i]) {
                p.close(&self.cx.task, RollReason::Memory)?;
            }
        }
        self.account();
        Ok(())
    }
}

impl PartitionWriter {
    fn memory(&self) -> usize {
        self.open.as_ref().map_or(0, |o| o.body.memory_bytes())
    }

    fn append(
        &mut self,
        tp: &Tp,
        r: &crate::format::RecordView<'_>,
        cx: &WriterContext,
    ) -> Result<(), super::DumpError> {
        let task = &cx.task;
        let placed_at = match task.time_source {
            TimeSource::Record => r.timestamp.unwrap_or_else(now_ms),
            TimeSource::Dump => now_ms(),
        };
        let period = match &self.open {
            Some(o) if o.span.is_some_and(|(a, b)| a <= placed_at && placed_at < b) => o.period,
            _ => task.time_directory.period_start(placed_at, task.time_zone),
        };
        if self
            .open
            .as_ref()
            .is_some_and(|o| roll::rolls_before(o.period, period))
        {
            self.close(task, RollReason::TimeDirectory)?;
        }
        if self.cut.is_some_and(|cut| r.offset > cut) {
            self.cut = None;
            self.close(task, RollReason::Cut)?;
        }
        if self.limit.is_some_and(|limit| r.offset >= limit) {
            self.limit = None;
            self.close(task, RollReason::Archived)?;
        }
        if self.open.is_none() {
            let Some(open) = self.open_object(tp, r.offset, period, cx)? else {
                self.discarding = true;
                return Ok(());
            };
            self.open = Some(open);
        }
        let Some(o) = self.open.as_mut() else {
            return Ok(());
        };
        let appended = match &mut o.body {
            Body::Records(e) => e.append(r),
            Body::Cdc { bundle, .. } => {
                let (Some(window), Some(cdc)) = (self.window.as_mut(), task.cdc.as_ref()) else {
                    return Err(no_window(task));
                };
                match bundle.push(&tp.topic, r, window, cdc, task.format.compression) {
                    // Not from a bundle with sides.
                    Ok(Pushed::Done | Pushed::NotCdc) => Ok(()),
                    Ok(Pushed::Malformed(m)) => {
                        return Err(super::DumpError::Malformed {
                            task: task.name.to_string(),
                            topic: tp.topic.to_string(),
                            source: m,
                        })
                    }
                    Ok(Pushed::Widens) => {
                        // A new column for a table whose file is under way: this message
                        // starts the next bundle (a fresh bundle takes any message).
                        self.close(task, RollReason::Schema)?;
                        return self.append(tp, r, cx);
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match appended {
            Ok(()) => {}
            Err(e) if discarded(&e) => {
                self.open = None;
                self.discarding = true;
                return Ok(());
            }
            Err(e) => return Err(encode_error(task, &o.key, e)),
        }
        o.last_offset = r.offset;
        if let Some(t) = r.timestamp {
            o.times = Some(o.times.map_or((t, t), |(a, b)| (a.min(t), b.max(t))));
        }
        if let Some(cut) = self.cut {
            if r.offset >= cut {
                self.cut = None;
                self.close(task, RollReason::Cut)?;
            }
        } else if roll::rolls_on_size(o.body.output_bytes(), task.max_file_size.bytes()) {
            self.close(task, RollReason::Size)?;
        }
        Ok(())
    }

    /// Opens the partition's next object; `None` when its sequencer is gone.
    fn open_object(
        &mut self,
        tp: &Tp,
        first_offset: i64,
        period: NaiveDateTime,
        cx: &WriterContext,
    ) -> Result<Option<OpenObject>, super::DumpError> {
        let task = &cx.task;
        let name = ObjectName {
            topic: tp.topic.to_string(),
            partition: tp.partition,
            first_offset,
            extension: task.format.extension().to_string(),
        };
        let key = object_key(&task.directory, &task.time_directory.render(period), &name);
        let (tx, rx) = mpsc::channel(2);
        let seq = self.next_seq;
        self.next_seq += 1;
        let cdc = task.cdc.as_ref();
        let (state, loaded) = match cdc {
            Some(_) if self.window.is_none() => {
                let (reply, rx) = oneshot::channel();
                (
                    Some(StateRequest {
                        prefix: crate::cdc::bundle::window_prefix(
                            &task.directory,
                            &tp.topic,
                            tp.partition,
                        ),
                        first_offset,
                        pick: crate::cdc::bundle::state_for,
                        reply,
                    }),
                    Some(rx),
                )
            }
            _ => (None, None),
        };
        let opened = Opened {
            seq,
            epoch: self.epoch,
            key: key.clone(),
            first_offset,
            parts: rx,
            state,
        };
        // Counted before it is sent: from here until the sequencer is done with it, the
        // partition is not idle (a `--once` run must not commit past it).
        self.flags.pending.fetch_add(1, Ordering::Relaxed);
        if self.objects.blocking_send(opened).is_err() {
            self.flags.pending.fetch_sub(1, Ordering::Relaxed);
            return Ok(None);
        }
        tracing::debug!(task = %task.name, key = %key, seq, first_offset, "object opened");
        if let (Some(rx), Some(cdc)) = (loaded, cdc) {
            // The sequencer answers once it read the stored window; it hangs up when the
            // object went stale (a rewind) or the partition was revoked.
            let Ok(stored) = rx.blocking_recv() else {
                return Ok(None);
            };
            let ids = match stored {
                Some((at, raw)) => {
                    serde_json::from_slice::<WindowState>(&raw)
                        .map_err(|e| super::DumpError::Store {
                            task: task.name.to_string(),
                            source: crate::store::StoreError::new(
                                crate::store::ErrorKind::InvalidInput,
                                at,
                                format!("is not a repeat window state ({e}); remove it, and repeats of the changes before it are no longer recognised"),
                            ),
                        })?
                        .ids
                }
                None => {
                    if first_offset > 0 {
                        tracing::info!(task = %task.name, topic = %tp.topic, partition = tp.partition, offset = first_offset, "no stored repeat window for this position: repeats are recognised from here on");
                    }
                    Vec::new()
                }
            };
            self.window = Some(crate::cdc::RepeatWindow::from_state(cdc.repeat_window, ids));
        }
        let body = if cdc.is_some() {
            Body::Cdc {
                bundle: Bundle::new(first_offset, std::mem::take(&mut self.rooms)),
                tx,
            }
        } else {
            let sink = PartSink::new(tx, cx.in_flight.clone(), cx.part_size);
            Body::Records(
                Encoder::new(&task.format, &tp.topic, sink)
                    .map_err(|e| encode_error(task, &key, e))?,
            )
        };
        Ok(Some(OpenObject {
            seq,
            body,
            key,
            last_offset: first_offset,
            times: None,
            span: task.time_directory.exact_span(period, task.time_zone),
            period,
            opened_at: Instant::now(),
        }))
    }

    /// Finishes the open object: its last part and its end go to the upload.
    fn close(&mut self, task: &DumpTask, reason: RollReason) -> Result<(), super::DumpError> {
        let Some(o) = self.open.take() else {
            return Ok(());
        };
        if matches!(o.body, Body::Cdc { .. }) {
            return self.close_bundle(task, o, reason);
        }
        let Body::Records(encoder) = o.body else {
            return Ok(());
        };
        let done = match encoder.finish() {
            Ok(d) => d,
            Err(e) if discarded(&e) => {
                self.discarding = true;
                return Ok(());
            }
            Err(e) => return Err(encode_error(task, &o.key, e)),
        };
        if done.ambiguous > 0 {
            tracing::warn!(task = %task.name, key = %o.key, records = done.ambiguous, "records contain the record delimiter or key separator: restore cannot split them back exactly; use format = \"jsonl\" or \"parquet\" for such data");
        }
        let end = ObjectEnd {
            last_offset: o.last_offset,
            records: done.records,
            bytes: done.out.written,
            reason,
            cdc: None,
            times: o.times,
        };
        tracing::debug!(task = %task.name, key = %o.key, seq = o.seq, reason = reason.as_str(), records = done.records, "object closed");
        if done.out.end(end).is_err() {
            self.discarding = true;
        }
        Ok(())
    }
}

impl PartitionWriter {
    /// Encodes a bundle's files and hands them, with the window after them, to the upload.
    fn close_bundle(
        &mut self,
        task: &DumpTask,
        o: OpenObject,
        reason: RollReason,
    ) -> Result<(), super::DumpError> {
        let (Body::Cdc { bundle, tx }, Some(w)) = (o.body, self.window.as_ref()) else {
            return Err(no_window(task));
        };
        let (key, period, last_offset) = (o.key.as_str(), o.period, o.last_offset);
        let window = WindowState {
            next_offset: last_offset + 1,
            ids: w.state().collect(),
        };
        let first = bundle.first_offset;
        let tp_topic = self.tp.topic.clone();
        let done = bundle
            .finish(
                &task.directory,
                &task.time_directory.render(period),
                &tp_topic,
                self.tp.partition,
            )
            .map_err(|e| encode_error(task, key, e))?;
        let bytes: usize = done.files.iter().flat_map(|(_, b)| b).map(Bytes::len).sum();
        let state_key = crate::cdc::bundle::window_key(
            &task.directory,
            &tp_topic,
            self.tp.partition,
            window.next_offset,
        );
        // Plain structs serialize to JSON without failing.
        let state = serde_json::to_vec(&window).unwrap_or_default();
        let end = ObjectEnd {
            last_offset,
            records: done.counts.messages,
            bytes: bytes as u64,
            reason,
            cdc: Some(done.counts),
            times: o.times,
        };
        tracing::debug!(task = %task.name, key = %key, first, files = done.files.len(), reason = reason.as_str(), "bundle closed");
        self.rooms = done.rooms;
        let permit = self.in_flight.acquire(bytes + state.len());
        let out = BundleOut {
            files: done.files,
            state: (state_key, state),
            state_prefix: crate::cdc::bundle::window_prefix(
                &task.directory,
                &tp_topic,
                self.tp.partition,
            ),
        };
        if tx.blocking_send(ToObject::Bundle(out, permit)).is_err()
            || tx.blocking_send(ToObject::End(end)).is_err()
        {
            self.discarding = true;
        }
        Ok(())
    }
}

/// An open bundle always has its partition's window; not having it is a bug, not a skip.
fn no_window(task: &DumpTask) -> super::DumpError {
    super::DumpError::Worker {
        task: task.name.to_string(),
        detail: "a CDC bundle is open without its repeat window".into(),
    }
}

fn encode_error(task: &DumpTask, key: &str, e: crate::format::EncodeError) -> super::DumpError {
    super::DumpError::Encode {
        task: task.name.to_string(),
        detail: format!("{key}: {e}"),
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The error a [`PartSink`] gives once its upload is gone (a rewind or revocation dropped it).
const DISCARDED: &str = "strata: the object's upload was discarded";

fn discarded(e: &crate::format::EncodeError) -> bool {
    e.to_string().contains(DISCARDED)
}

/// Bytes gather in chunks of this size (each allocated once, at its full size): a part is a
/// run of chunks, so filling one never reallocates and copies what it holds.
const CHUNK: usize = 256 << 10;

/// An open object's output: bytes gather into a part; each full part goes to the upload (after
/// waiting for room in the in-flight budget), so memory per open object stays within a part.
pub(super) struct PartSink {
    /// Full chunks of the part being filled.
    chunks: Vec<Bytes>,
    /// Bytes in `chunks`.
    filled: usize,
    chunk: Vec<u8>,
    part_size: usize,
    tx: mpsc::Sender<ToObject>,
    in_flight: Arc<ByteBudget>,
    /// Bytes written so far: the object's exact size once finished.
    pub written: u64,
}

impl PartSink {
    fn new(tx: mpsc::Sender<ToObject>, in_flight: Arc<ByteBudget>, part_size: usize) -> Self {
        Self {
            chunks: Vec::new(),
            filled: 0,
            chunk: Vec::new(),
            part_size: part_size.max(1),
            tx,
            in_flight,
            written: 0,
        }
    }

    fn seal_chunk(&mut self) {
        if !self.chunk.is_empty() {
            let full = std::mem::take(&mut self.chunk);
            self.filled += full.len();
            self.chunks.push(Bytes::from(full));
        }
    }

    fn send_part(&mut self) -> io::Result<()> {
        self.seal_chunk();
        if self.chunks.is_empty() {
            return Ok(());
        }
        let part = std::mem::take(&mut self.chunks);
        let permit = self.in_flight.acquire(self.filled);
        self.filled = 0;
        self.tx
            .blocking_send(ToObject::Part(part, permit))
            .map_err(|_| io::Error::other(DISCARDED))
    }

    /// The last part and the object's end; `Err` when the upload is gone.
    fn end(mut self, end: ObjectEnd) -> io::Result<()> {
        self.send_part()?;
        self.tx
            .blocking_send(ToObject::End(end))
            .map_err(|_| io::Error::other(DISCARDED))
    }
}

impl io::Write for PartSink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_all(data)?;
        Ok(data.len())
    }

    fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        self.written += data.len() as u64;
        while !data.is_empty() {
            let want = CHUNK.min(self.part_size - self.filled);
            if self.chunk.capacity() == 0 {
                self.chunk.reserve_exact(want);
            }
            let take = (want - self.chunk.len()).min(data.len());
            self.chunk.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.chunk.len() == want {
                self.seal_chunk();
                if self.filled == self.part_size {
                    self.send_part()?;
                }
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Output for PartSink {
    fn memory_bytes(&self) -> usize {
        self.filled + self.chunk.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn parts_are_cut_at_the_part_size_and_never_held_larger() {
        let (tx, mut rx) = mpsc::channel(16);
        let budget = ByteBudget::new(1 << 20);
        let mut sink = PartSink::new(tx, budget.clone(), 1000);
        for _ in 0..25 {
            sink.write_all(&[7u8; 123]).unwrap();
            assert!(sink.memory_bytes() <= 1000);
        }
        assert_eq!(sink.written, 25 * 123);
        sink.end(ObjectEnd {
            last_offset: 9,
            records: 25,
            bytes: 25 * 123,
            reason: RollReason::Size,
            cdc: None,
            times: None,
        })
        .unwrap();
        let mut sizes = Vec::new();
        let mut ended = false;
        while let Ok(m) = rx.try_recv() {
            match m {
                ToObject::Part(b, _) => sizes.push(b.iter().map(Bytes::len).sum::<usize>()),
                ToObject::Bundle(..) => panic!("a record object sends parts, not a bundle"),
                ToObject::End(e) => {
                    ended = true;
                    assert_eq!((e.records, e.bytes), (25, 3075));
                }
            }
        }
        assert_eq!(sizes, vec![1000, 1000, 1000, 75]);
        assert!(ended);
        assert_eq!(
            budget.used(),
            0,
            "permits came back as the parts were taken"
        );
    }

    #[test]
    fn a_discarded_upload_turns_into_an_error_the_writer_recognises() {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let mut sink = PartSink::new(tx, ByteBudget::new(100), 10);
        let e = sink.write_all(&[1u8; 25]).unwrap_err();
        assert!(e.to_string().contains(DISCARDED));
        let wrapped = crate::format::EncodeError::from(e);
        assert!(discarded(&wrapped));
    }
}
