//! The upload stage: every open object streams its parts to the store in its own task (many
//! at once, bounded by the in-flight budget); one sequencer per partition makes the
//! partition's objects visible strictly in order, each only after the previous one's offsets
//! are committed.
//!
//! That order is what keeps a replay from duplicating: at most one stored object of a partition
//! is ahead of its committed offset. Objects are created "first writer wins" (a conditional
//! create); before that, a small seal records where the object ends, so a writer that finds
//! the key taken (its own crashed predecessor's, or a zombie's) adopts the stored object: it
//! commits past it and rewinds the partition to right after it. A failed upload rewinds the
//! partition to the object's first offset: Kafka, not memory, holds data awaiting a retry.

use super::writer::{ObjectEnd, Opened, ToObject, WindowRequest};
use super::{Fatal, Tp};
use crate::layout::DumpDir;
use crate::store::{ErrorKind, Finish, Finished, MultipartUpload, ObjectStore, StoreError};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// What a sequencer asks of the poll loop (which owns the consumer).
pub(super) enum Control {
    /// Commit `offset` (the next offset to read) for the partition.
    Commit {
        tp: Tp,
        offset: i64,
        ack: oneshot::Sender<Result<(), String>>,
    },
    /// Seek the partition back to `to` (after committing it first when `commit`), bump its
    /// epoch and tell its writer. `to: None` means "to the group's committed offset".
    Rewind {
        tp: Tp,
        to: Option<i64>,
        commit: bool,
        /// The partition's next object must end right after this offset.
        cut: Option<i64>,
        ack: oneshot::Sender<Result<u64, String>>,
    },
}

/// Where a stored object ends, written before the object is created so that whoever finds the
/// key taken can tell where to go on. Removed once the object's offsets are committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Seal {
    pub key: String,
    pub last_offset: i64,
    pub next_offset: i64,
    pub records: u64,
    /// A CDC bundle's files and the tag of each one's upload (empty for a single object).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<(String, String)>,
}

/// Where the seals of the objects (or bundles) starting at `first` live.
pub(crate) fn seal_dir(dir: &DumpDir, tp: &Tp, first: i64) -> String {
    format!(
        "{}.strata/seals/{}/{}/{first:020}/",
        dir.prefix(),
        tp.topic,
        tp.partition
    )
}

/// The seal of the object under `key` (first offset `first`) written by the upload `tag`.
pub(crate) fn seal_key(dir: &DumpDir, tp: &Tp, first: i64, tag: &str) -> String {
    format!("{}{tag}", seal_dir(dir, tp, first))
}

/// The partition, first offset and upload tag a seal's key names (`None`: not a seal key).
pub(crate) fn parse_seal_key(dir: &DumpDir, key: &str) -> Option<(Tp, i64, String)> {
    let rest = key.strip_prefix(&format!("{}.strata/seals/", dir.prefix()))?;
    let mut parts = rest.split('/');
    let topic = parts.next()?;
    let partition = parts.next()?.parse().ok()?;
    let first = parts.next()?.parse().ok()?;
    let tag = parts.next()?;
    if topic.is_empty() || tag.is_empty() || parts.next().is_some() {
        return None;
    }
    Some((Tp::new(topic, partition), first, tag.to_string()))
}

/// Whether a seal a crash left may go: its object was never made visible by that upload
/// (`object_tag` is another's or none), or the group committed past it. A seal of a stored
/// object whose offsets are not committed stays: it is what lets the partition's next owner
/// adopt that object instead of finding its key taken with nothing saying where it ends.
pub(crate) fn seal_is_litter(
    seal: &Seal,
    seal_tag: &str,
    object_tag: Option<&str>,
    committed: Option<i64>,
) -> bool {
    object_tag != Some(seal_tag) || committed.is_some_and(|c| c >= seal.next_offset)
}

/// What the sequencers of a task share.
pub(super) struct UploadContext {
    pub task: String,
    pub dir: DumpDir,
    pub store: Arc<dyn ObjectStore>,
    pub control: std::sync::mpsc::Sender<Control>,
    pub fatal: Arc<Fatal>,
    pub stats: Arc<Mutex<super::Summary>>,
    pub metrics: Arc<super::Metrics>,
    /// Objects that could not be stored before their partition's sequencer stopped (other
    /// than by a revocation): a shutdown that leaves any is not a clean one.
    pub unstored: Arc<AtomicU64>,
}

/// What the stages of one partition tell each other without a message.
#[derive(Default)]
pub(super) struct PartitionFlags {
    /// Set by the poll loop: the sequencer drops what is not stored and stops.
    pub revoked: AtomicBool,
    /// Objects opened (counted by the writer) and not yet committed or dropped (by the
    /// sequencer).
    pub pending: AtomicU64,
    /// Objects stored and committed by this process.
    pub stored: AtomicU64,
    /// Set by the writer once it handled a `Close` of this partition (cleared by the poll loop
    /// when it routes more records or rewinds): nothing of it is left in the writer.
    pub closed: AtomicBool,
}

/// An open object's upload task's result.
enum Outcome {
    Ready {
        upload: Box<dyn MultipartUpload>,
        end: ObjectEnd,
        took: Duration,
        _held: Option<super::budget::Permit>,
    },
    /// A CDC bundle's uploads (every file written, none finished) and its window state.
    Bundle {
        uploads: Vec<(String, Box<dyn MultipartUpload>)>,
        window: (String, Vec<u8>),
        end: ObjectEnd,
        took: Duration,
        _held: Option<super::budget::Permit>,
    },
    /// The writer dropped the object (rewind, revocation): nothing to store.
    Discarded,
    Failed(StoreError),
}

struct InFlight {
    seq: u64,
    key: String,
    first: i64,
    task: JoinHandle<Outcome>,
}

/// Streams one object's parts into an upload.
async fn upload_object(
    store: Arc<dyn ObjectStore>,
    key: String,
    mut parts: mpsc::Receiver<ToObject>,
) -> Outcome {
    let started = Instant::now();
    let mut upload: Option<Box<dyn MultipartUpload>> = None;
    let mut bundle = None;
    // A short part (the last one, or a whole small object) may stay in the upload's buffer
    // until the finish: its room in the budget is held until then. A full part has gone out
    // once written, so its room is free at once; holding it until the next part would let
    // every open object sit on a permit while waiting for another (a deadlock once the open
    // objects outnumber the parts the budget has room for).
    let part_size = store.part_size();
    let mut held = None;
    while let Some(m) = parts.recv().await {
        match m {
            ToObject::Part(chunks, permit) => {
                let len: usize = chunks.iter().map(Bytes::len).sum();
                let u = match upload.as_mut() {
                    Some(u) => u,
                    None => match store.put_multipart(&key).await {
                        Ok(u) => upload.insert(u),
                        Err(e) => return Outcome::Failed(e),
                    },
                };
                for data in chunks {
                    if let Err(e) = u.write(data).await {
                        return Outcome::Failed(e);
                    }
                }
                held = (len < part_size).then_some(permit);
            }
            ToObject::Bundle(out, permit) => {
                let mut uploads = Vec::with_capacity(out.files.len());
                for (file, pieces) in out.files {
                    let mut u = match store.put_multipart(&file).await {
                        Ok(u) => u,
                        Err(e) => return Outcome::Failed(e),
                    };
                    // In pieces, as parts of a record object go (see `store::WRITE_PIECE`).
                    for piece in pieces {
                        if let Err(e) = u.write(piece).await {
                            return Outcome::Failed(e);
                        }
                    }
                    uploads.push((file, u));
                }
                bundle = Some((uploads, out.window));
                held = Some(permit);
            }
            ToObject::End(end) => {
                let took = started.elapsed();
                if let Some((uploads, window)) = bundle {
                    return Outcome::Bundle {
                        uploads,
                        window,
                        end,
                        took,
                        _held: held,
                    };
                }
                let upload = match upload {
                    Some(u) => u,
                    None => match store.put_multipart(&key).await {
                        Ok(u) => u,
                        Err(e) => return Outcome::Failed(e),
                    },
                };
                return Outcome::Ready {
                    upload,
                    end,
                    took,
                    _held: held,
                };
            }
        }
    }
    // Dropped without an end: the upload aborts itself when dropped.
    Outcome::Discarded
}

/// What to do once the head object was finished (pure: the decisions of the sequencer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Stored: commit its next offset, then go on.
    Commit(i64),
    /// The key was taken by an object that ends before `next`: commit `next` and rewind there.
    Adopt(i64),
    /// The key was taken by an object whose seal is gone: its writer committed past it, so this
    /// partition's position is stale; rewind to the group's committed offset.
    Stale,
}

pub(crate) fn decide(first: i64, last: i64, finished: Finished, found: Option<&Seal>) -> Step {
    match finished {
        Finished::Stored => Step::Commit(last + 1),
        Finished::Exists => match found {
            Some(s) if s.next_offset > first => Step::Adopt(s.next_offset),
            _ => Step::Stale,
        },
    }
}

/// Store failures no retry heals: the operator must act.
pub(crate) fn fatal(e: &StoreError) -> bool {
    matches!(
        e.kind,
        ErrorKind::NoSuchBucket
            | ErrorKind::Unauthorized
            | ErrorKind::Rejected
            | ErrorKind::InvalidInput
    )
}

/// Longest pause between retries of a failing partition.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

fn next_backoff(d: Option<Duration>) -> Duration {
    d.map_or(Duration::from_secs(1), |d| (d * 2).min(MAX_BACKOFF))
}

/// Runs a partition's sequencer until its writer hangs up (revocation or shutdown).
pub(super) async fn sequence(
    tp: Tp,
    mut epoch: u64,
    mut opened: mpsc::Receiver<Opened>,
    flags: Arc<PartitionFlags>,
    cx: Arc<UploadContext>,
) {
    let mut queue: VecDeque<InFlight> = VecDeque::new();
    let mut backoff: Option<Duration> = None;
    let mut input_open = true;
    // Seals that could not be removed (the store was down): removed after the next success.
    let mut stale: Vec<String> = Vec::new();
    // Records were read and are not stored: a failure rewound the partition and nothing was
    // stored since. A sequencer that ends so (not revoked) leaves its records for the next run.
    let mut behind = false;
    loop {
        if !input_open && queue.is_empty() {
            if behind && !flags.revoked.load(Ordering::Relaxed) {
                cx.unstored.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(task = %cx.task, topic = %tp.topic, partition = tp.partition, "stopping with records of this partition not stored; they are read again by the next run");
            }
            return;
        }
        if flags.revoked.load(Ordering::Relaxed) || cx.fatal.is_set() {
            abort_all(&mut queue, &flags);
            return;
        }
        let done = tokio::select! {
            m = opened.recv(), if input_open => {
                match m {
                    Some(o) if o.epoch < epoch => {
                        // A rewind made it stale.
                        flags.pending.fetch_sub(1, Ordering::Relaxed);
                        drop(o);
                    }
                    Some(o) => {
                        if let Some(req) = o.window {
                            tokio::spawn(load_window(cx.clone(), tp.clone(), req, flags.clone()));
                        }
                        let task = tokio::spawn(upload_object(cx.store.clone(), o.key.clone(), o.parts));
                        queue.push_back(InFlight { seq: o.seq, key: o.key, first: o.first_offset, task });
                    }
                    None => input_open = false,
                }
                None
            }
            r = head_outcome(&mut queue), if !queue.is_empty() => Some(r),
            // Notice a revocation or another stage's fatal error while waiting.
            _ = tokio::time::sleep(Duration::from_millis(200)) => None,
        };
        let Some(outcome) = done else {
            continue;
        };
        let Some(head) = queue.pop_front() else {
            continue;
        };
        // The head counts as pending until its offsets are committed or the partition was
        // rewound past it: until then the partition is not idle.
        let result = finish_head(&tp, &head, outcome, &cx, &flags, &mut stale).await;
        if result.is_ok() && !stale.is_empty() {
            let mut left = Vec::new();
            for key in stale.drain(..) {
                if cx.store.delete(&key).await.is_err() {
                    left.push(key);
                }
            }
            stale = left;
        }
        match result {
            Ok(Some(new_epoch)) => {
                // Rewound: what was queued behind the head belongs to the old position.
                epoch = new_epoch;
                abort_all(&mut queue, &flags);
                backoff = None;
            }
            Ok(None) => {
                backoff = None;
                behind = false;
            }
            Err(e) if fatal(&e) => {
                cx.metrics.store_fatal.increment(1);
                cx.fatal.set(super::DumpError::Store {
                    task: cx.task.clone(),
                    source: e,
                });
                abort_all(&mut queue, &flags);
                flags.pending.fetch_sub(1, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                // Retry from the head's first offset once the store had a moment.
                cx.metrics.store_errors.increment(1);
                let pause = next_backoff(backoff);
                backoff = Some(pause);
                tracing::warn!(task = %cx.task, topic = %tp.topic, partition = tp.partition, seq = head.seq, error = %e, retry_in_s = pause.as_secs(), "storing failed; the partition is read again from the object's first offset after a pause (its offsets stay uncommitted)");
                abort_all(&mut queue, &flags);
                behind = true;
                tokio::time::sleep(pause).await;
                if let Some(e) = rewind_until_done(&cx, &tp, Some(head.first), false, &flags).await
                {
                    epoch = e;
                }
            }
        }
        flags.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The head object's outcome, once its upload task is done.
async fn head_outcome(queue: &mut VecDeque<InFlight>) -> Outcome {
    let Some(head) = queue.front_mut() else {
        return std::future::pending().await;
    };
    match (&mut head.task).await {
        Ok(o) => o,
        Err(e) => Outcome::Failed(StoreError::new(
            ErrorKind::Io,
            head.key.clone(),
            format!("upload task failed: {e}"),
        )),
    }
}

fn abort_all(queue: &mut VecDeque<InFlight>, flags: &PartitionFlags) {
    for f in queue.drain(..) {
        flags.pending.fetch_sub(1, Ordering::Relaxed);
        // Cancelling the task drops its upload, which aborts itself.
        f.task.abort();
    }
}

/// Makes the head object visible and commits it, or adopts what holds its key. `Ok(Some(e))`:
/// the partition was rewound and is at epoch `e` now. Transient failures come back as `Err`
/// for a retry; the caller tells fatal ones apart.
async fn finish_head(
    tp: &Tp,
    head: &InFlight,
    outcome: Outcome,
    cx: &UploadContext,
    flags: &PartitionFlags,
    stale: &mut Vec<String>,
) -> Result<Option<u64>, StoreError> {
    let (upload, end, took) = match outcome {
        Outcome::Discarded => return Ok(None),
        Outcome::Failed(e) => return Err(e),
        Outcome::Bundle {
            uploads,
            window,
            end,
            took,
            ..
        } => return finish_bundle(tp, head, uploads, window, end, took, cx, flags, stale).await,
        Outcome::Ready {
            upload, end, took, ..
        } => (upload, end, took),
    };
    let store = &cx.store;
    let own_seal = seal_key(&cx.dir, tp, head.first, upload.tag());
    let seal = Seal {
        key: head.key.clone(),
        last_offset: end.last_offset,
        next_offset: end.last_offset + 1,
        records: end.records,
        files: Vec::new(),
    };
    // The seal first: an object that exists always has one while it is not committed.
    store.put(&own_seal, Bytes::from(seal_json(&seal))).await?;
    let finished = upload.finish(Finish::CreateNew).await;
    let finished = match finished {
        Ok(f) => f,
        Err(e) => {
            if store.delete(&own_seal).await.is_err() {
                stale.push(own_seal);
            }
            return Err(e);
        }
    };
    let found = match finished {
        Finished::Stored => None,
        Finished::Exists => {
            if store.delete(&own_seal).await.is_err() {
                stale.push(own_seal.clone());
            }
            found_seal(cx, tp, head).await?
        }
    };
    let step = decide(
        head.first,
        end.last_offset,
        finished,
        found.as_ref().map(|(s, _)| s),
    );
    match step {
        Step::Commit(next) => {
            if !commit_until_done(cx, tp, next, flags).await {
                // Revoked before the commit: the seal stays, so that the partition's new owner
                // adopts this object instead of writing its records again.
                tracing::info!(task = %cx.task, object = %store.location(&head.key), "stored, but the partition was revoked before its offsets were committed; its new owner adopts the object");
                return Ok(None);
            }
            if store.delete(&own_seal).await.is_err() {
                stale.push(own_seal);
            }
            count_stored(cx, flags, &end, took, 1);
            tracing::info!(task = %cx.task, object = %store.location(&head.key), records = end.records, bytes = end.bytes, ms = took.as_millis() as u64, reason = end.reason.as_str(), "stored");
            Ok(None)
        }
        Step::Adopt(next) => {
            tracing::info!(task = %cx.task, object = %store.location(&head.key), next_offset = next, "the object was already stored (a restart or another member wrote it first): adopting it and going on after it");
            cx.metrics.adopted.increment(1);
            let epoch = rewind_until_done(cx, tp, Some(next), true, flags).await;
            if let Some((_, key)) = found {
                if store.delete(&key).await.is_err() {
                    stale.push(key);
                }
            }
            Ok(epoch)
        }
        Step::Stale => {
            tracing::warn!(task = %cx.task, object = %store.location(&head.key), "the object was stored and committed by another member: this partition's position is stale; going on from the group's committed offset");
            Ok(rewind_until_done(cx, tp, None, false, flags).await)
        }
    }
}

/// Counts a stored and committed object (or bundle of `objects` files).
fn count_stored(
    cx: &UploadContext,
    flags: &PartitionFlags,
    end: &ObjectEnd,
    took: Duration,
    objects: u64,
) {
    let m = &cx.metrics;
    m.objects.increment(objects);
    m.written_records.increment(end.records);
    m.written_bytes.increment(end.bytes);
    m.upload_seconds.record(took.as_secs_f64());
    if let Some(c) = end.cdc {
        m.cdc_changes.increment(c.changes);
        m.cdc_repeats.increment(c.repeats);
        m.cdc_malformed.increment(c.malformed);
        m.cdc_verbatim.increment(c.verbatim);
    }
    if let Ok(mut s) = cx.stats.lock() {
        s.objects += objects;
        s.records += end.records;
        s.bytes += end.bytes;
        if let Some(c) = end.cdc {
            s.cdc.changes += c.changes;
            s.cdc.repeats += c.repeats;
            s.cdc.malformed += c.malformed;
            s.cdc.verbatim += c.verbatim;
            s.cdc.messages += c.messages;
        }
    }
    flags.stored.fetch_add(1, Ordering::Relaxed);
}

/// Answers a writer's request for the repeat window its bundle goes on from: the stored state
/// at or before the bundle's first offset (none: an empty window). Retries while the store
/// fails, until the writer no longer waits or the partition is revoked.
async fn load_window(
    cx: Arc<UploadContext>,
    tp: Tp,
    req: WindowRequest,
    flags: Arc<PartitionFlags>,
) {
    let prefix = super::cdc::window_prefix(&cx.dir, &tp.topic, tp.partition);
    let mut pause = None;
    loop {
        let found = async {
            let listed = cx.store.list(&prefix).await?;
            let keys: Vec<String> = listed.into_iter().map(|o| o.key).collect();
            let Some(key) = super::cdc::state_for(&keys, req.first_offset) else {
                return Ok::<_, StoreError>(None);
            };
            let raw = cx.store.get(key).await?;
            serde_json::from_slice::<super::cdc::WindowState>(&raw)
                .map(Some)
                .map_err(|e| {
                    StoreError::new(
                        ErrorKind::InvalidInput,
                        cx.store.location(key),
                        format!("is not a repeat window state ({e}); remove it, and repeats of the changes before it are no longer recognised"),
                    )
                })
        }
        .await;
        match found {
            Ok(state) => {
                if state.is_none() && req.first_offset > 0 {
                    tracing::info!(task = %cx.task, topic = %tp.topic, partition = tp.partition, offset = req.first_offset, "no stored repeat window for this position: repeats are recognised from here on");
                }
                let _ = req.reply.send(state.map(|s| s.ids).unwrap_or_default());
                return;
            }
            Err(e) if fatal(&e) => {
                cx.fatal.set(super::DumpError::Store {
                    task: cx.task.clone(),
                    source: e,
                });
                return;
            }
            Err(e) => {
                tracing::warn!(task = %cx.task, topic = %tp.topic, partition = tp.partition, error = %e, "reading the stored repeat window failed; retrying");
            }
        }
        if req.reply.is_closed() || flags.revoked.load(Ordering::Relaxed) || cx.fatal.is_set() {
            return;
        }
        let p = next_backoff(pause);
        pause = Some(p);
        tokio::time::sleep(p).await;
    }
}

/// Makes a CDC bundle visible and commits it as one. Every file is created only if its key
/// is free; a key already taken is fine only when an unfinished attempt at the same range (a
/// seal with the same end) made it, since that attempt wrote the same contents. An earlier
/// attempt that ended elsewhere and made some file visible makes this one start over and end
/// where that one did. Before the commit nothing is undone: the seal explains what is visible.
#[allow(clippy::too_many_arguments)]
async fn finish_bundle(
    tp: &Tp,
    head: &InFlight,
    uploads: Vec<(String, Box<dyn MultipartUpload>)>,
    window: (String, Vec<u8>),
    end: ObjectEnd,
    took: Duration,
    cx: &UploadContext,
    flags: &PartitionFlags,
    stale: &mut Vec<String>,
) -> Result<Option<u64>, StoreError> {
    let store = &cx.store;
    let first = head.first;
    let mut explained: std::collections::HashSet<(String, String)> = Default::default();
    let mut done_seals = Vec::new();
    for o in store.list(&seal_dir(&cx.dir, tp, first)).await? {
        let raw = match store.get(&o.key).await {
            Ok(r) => r,
            Err(e) if e.kind == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let Ok(seal) = serde_json::from_slice::<Seal>(&raw) else {
            done_seals.push(o.key);
            continue;
        };
        if seal.last_offset == end.last_offset {
            explained.extend(seal.files.iter().cloned());
            done_seals.push(o.key);
            continue;
        }
        let mut visible = false;
        for (file, tag) in &seal.files {
            if store.tag_of(file).await?.as_deref() == Some(tag.as_str()) {
                visible = true;
                break;
            }
        }
        if !visible {
            // That attempt made nothing visible: its seal is litter.
            done_seals.push(o.key);
            continue;
        }
        tracing::info!(task = %cx.task, topic = %tp.topic, partition = tp.partition, first, end = seal.last_offset, "an earlier attempt at this bundle ended elsewhere and left files: writing it again to end where that one did");
        drop(uploads);
        return Ok(rewind_cut(cx, tp, first, seal.last_offset, flags).await);
    }
    store.put(&window.0, Bytes::from(window.1)).await?;
    let files: Vec<(String, String)> = uploads
        .iter()
        .map(|(k, u)| (k.clone(), u.tag().to_string()))
        .collect();
    let tag = files.first().map(|(_, t)| t.clone()).unwrap_or_default();
    let own_seal = seal_key(&cx.dir, tp, first, &tag);
    let seal = Seal {
        key: head.key.clone(),
        last_offset: end.last_offset,
        next_offset: end.last_offset + 1,
        records: end.records,
        files,
    };
    store.put(&own_seal, Bytes::from(seal_json(&seal))).await?;
    let count = uploads.len() as u64;
    for (key, u) in uploads {
        if u.finish(Finish::CreateNew).await? == Finished::Exists {
            let t = store.tag_of(&key).await?;
            if !t.is_some_and(|t| explained.contains(&(key.clone(), t))) {
                return Err(StoreError::new(
                    ErrorKind::Service,
                    store.location(&key),
                    "exists, and no unfinished attempt at this bundle made it (another member may have stored this range; if not, the directory holds a foreign object: move it away); retrying from the bundle's first offset",
                ));
            }
        }
    }
    if !commit_until_done(cx, tp, end.last_offset + 1, flags).await {
        tracing::info!(task = %cx.task, topic = %tp.topic, partition = tp.partition, first, "bundle stored, but the partition was revoked before its offsets were committed; its new owner writes it again with the same contents");
        return Ok(None);
    }
    for k in std::iter::once(own_seal).chain(done_seals) {
        if store.delete(&k).await.is_err() {
            stale.push(k);
        }
    }
    // Window states of other positions are no longer needed (the committed one is kept).
    if let Ok(states) = store
        .list(&super::cdc::window_prefix(&cx.dir, &tp.topic, tp.partition))
        .await
    {
        for s in states.into_iter().filter(|s| s.key != window.0) {
            if store.delete(&s.key).await.is_err() {
                stale.push(s.key);
            }
        }
    }
    count_stored(cx, flags, &end, took, count);
    let c = end.cdc.unwrap_or_default();
    tracing::info!(task = %cx.task, bundle = %store.location(&head.key), files = count, messages = end.records, changes = c.changes, repeats = c.repeats, malformed = c.malformed, bytes = end.bytes, ms = took.as_millis() as u64, reason = end.reason.as_str(), "stored");
    Ok(None)
}

async fn rewind_cut(
    cx: &UploadContext,
    tp: &Tp,
    to: i64,
    cut: i64,
    flags: &PartitionFlags,
) -> Option<u64> {
    rewind_with(cx, tp, Some(to), false, Some(cut), flags).await
}

/// The seal of the object holding the head's key (its writer's), with the seal's key.
async fn found_seal(
    cx: &UploadContext,
    tp: &Tp,
    head: &InFlight,
) -> Result<Option<(Seal, String)>, StoreError> {
    let Some(tag) = cx.store.tag_of(&head.key).await? else {
        return Ok(None);
    };
    let key = seal_key(&cx.dir, tp, head.first, &tag);
    match cx.store.get(&key).await {
        Ok(raw) => Ok(serde_json::from_slice::<Seal>(&raw)
            .ok()
            .filter(|s| s.key == head.key)
            .map(|s| (s, key))),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn seal_json(s: &Seal) -> Vec<u8> {
    // Plain structs serialize to JSON without failing.
    serde_json::to_vec(s).unwrap_or_default()
}

/// Commits `offset`, retrying with a pause until it works (`true`) or the partition is revoked
/// (`false`). The next object waits: it must not be made visible before this commit.
async fn commit_until_done(
    cx: &UploadContext,
    tp: &Tp,
    offset: i64,
    flags: &PartitionFlags,
) -> bool {
    let mut pause = None;
    loop {
        let (ack, rx) = oneshot::channel();
        if cx
            .control
            .send(Control::Commit {
                tp: tp.clone(),
                offset,
                ack,
            })
            .is_err()
        {
            return false;
        }
        match rx.await {
            Ok(Ok(())) => return true,
            Ok(Err(why)) => {
                cx.metrics.commit_errors.increment(1);
                tracing::warn!(task = %cx.task, topic = %tp.topic, partition = tp.partition, %why, "offset commit failed; the object is stored, the commit is retried");
            }
            Err(_) => return false,
        }
        if flags.revoked.load(Ordering::Relaxed) || cx.fatal.is_set() {
            return false;
        }
        let p = next_backoff(pause);
        pause = Some(p);
        tokio::time::sleep(p).await;
    }
}

async fn rewind(
    cx: &UploadContext,
    tp: &Tp,
    to: Option<i64>,
    commit: bool,
    cut: Option<i64>,
) -> Result<u64, String> {
    let (ack, rx) = oneshot::channel();
    cx.control
        .send(Control::Rewind {
            tp: tp.clone(),
            to,
            commit,
            cut,
            ack,
        })
        .map_err(|_| "the poll loop stopped".to_string())?;
    rx.await.map_err(|_| "the poll loop stopped".to_string())?
}

async fn rewind_until_done(
    cx: &UploadContext,
    tp: &Tp,
    to: Option<i64>,
    commit: bool,
    flags: &PartitionFlags,
) -> Option<u64> {
    rewind_with(cx, tp, to, commit, None, flags).await
}

async fn rewind_with(
    cx: &UploadContext,
    tp: &Tp,
    to: Option<i64>,
    commit: bool,
    cut: Option<i64>,
    flags: &PartitionFlags,
) -> Option<u64> {
    let mut pause = None;
    loop {
        match rewind(cx, tp, to, commit, cut).await {
            Ok(e) => return Some(e),
            Err(why) => {
                tracing::warn!(task = %cx.task, topic = %tp.topic, partition = tp.partition, %why, "rewinding the partition failed; retrying");
            }
        }
        if flags.revoked.load(Ordering::Relaxed) || cx.fatal.is_set() {
            return None;
        }
        let p = next_backoff(pause);
        pause = Some(p);
        tokio::time::sleep(p).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal(next: i64) -> Seal {
        Seal {
            key: "k".into(),
            last_offset: next - 1,
            next_offset: next,
            records: 1,
            files: Vec::new(),
        }
    }

    #[test]
    fn decisions_after_an_object_finished() {
        assert_eq!(decide(100, 199, Finished::Stored, None), Step::Commit(200));
        // Taken by a longer or shorter object: commit past that one, rewind to right after it.
        assert_eq!(
            decide(100, 199, Finished::Exists, Some(&seal(250))),
            Step::Adopt(250)
        );
        assert_eq!(
            decide(100, 199, Finished::Exists, Some(&seal(150))),
            Step::Adopt(150)
        );
        // Taken, but nothing says where it ends (its writer committed and removed the seal).
        assert_eq!(decide(100, 199, Finished::Exists, None), Step::Stale);
        assert_eq!(
            decide(100, 199, Finished::Exists, Some(&seal(100))),
            Step::Stale
        );
    }

    #[test]
    fn only_failures_an_operator_must_fix_stop_the_task() {
        let err = |kind| StoreError::new(kind, "s3://b/k", "x");
        for kind in [
            ErrorKind::NoSuchBucket,
            ErrorKind::Unauthorized,
            ErrorKind::Rejected,
            ErrorKind::InvalidInput,
        ] {
            assert!(fatal(&err(kind)), "{kind:?}");
        }
        for kind in [
            ErrorKind::Unreachable,
            ErrorKind::Service,
            ErrorKind::Io,
            ErrorKind::NotFound,
        ] {
            assert!(!fatal(&err(kind)), "{kind:?}");
        }
    }

    #[test]
    fn seals_live_beside_the_archive_and_never_parse_as_archives() {
        let dir = DumpDir::parse("backups/orders").unwrap();
        let tp = Tp::new("orders", 3);
        let k = seal_key(&dir, &tp, 42, "ino-77");
        assert_eq!(
            k,
            "backups/orders/.strata/seals/orders/3/00000000000000000042/ino-77"
        );
        let file = k.rsplit('/').next().unwrap();
        assert!(crate::layout::ObjectName::parse(file).is_none());
        let s = seal(10);
        assert_eq!(serde_json::from_slice::<Seal>(&seal_json(&s)).unwrap(), s);
    }

    #[test]
    fn seal_keys_parse_back() {
        let dir = DumpDir::parse("backups/orders").unwrap();
        let tp = Tp::new("orders", 3);
        let k = seal_key(&dir, &tp, 42, "ino-77");
        assert_eq!(parse_seal_key(&dir, &k), Some((tp, 42, "ino-77".into())));
        for bad in [
            "backups/orders/2026/12/02/orders+3+00000000000000000042.jsonl",
            "backups/orders/.strata/seals/orders/x/00000000000000000042/t",
            "backups/orders/.strata/seals/orders/3/00000000000000000042",
            "backups/orders/.strata/seals/orders/3/00000000000000000042/t/more",
            "other/.strata/seals/orders/3/00000000000000000042/t",
        ] {
            assert_eq!(parse_seal_key(&dir, bad), None, "{bad}");
        }
    }

    #[test]
    fn a_crash_seal_stays_while_its_stored_object_is_not_committed() {
        let s = seal(200);
        // The writer died before its object became visible, or another upload won the key.
        assert!(seal_is_litter(&s, "t1", None, None));
        assert!(seal_is_litter(&s, "t1", Some("t2"), Some(100)));
        // Stored, not committed (or the commit is unknown): the next owner adopts it.
        assert!(!seal_is_litter(&s, "t1", Some("t1"), None));
        assert!(!seal_is_litter(&s, "t1", Some("t1"), Some(100)));
        assert!(!seal_is_litter(&s, "t1", Some("t1"), Some(199)));
        // Stored and committed; the writer died before removing the seal.
        assert!(seal_is_litter(&s, "t1", Some("t1"), Some(200)));
        assert!(seal_is_litter(&s, "t1", Some("t1"), Some(350)));
    }

    #[test]
    fn backoff_doubles_to_a_cap() {
        let mut d = None;
        let mut seen = Vec::new();
        for _ in 0..7 {
            let n = next_backoff(d);
            seen.push(n.as_secs());
            d = Some(n);
        }
        assert_eq!(seen, vec![1, 2, 4, 8, 16, 30, 30]);
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;
    use crate::dump::budget::ByteBudget;
    use crate::store::FsStore;

    /// Three open objects, room for two parts: a full part's room must come back once the part
    /// is written, or each object sits on a permit while its writer waits for the next one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn open_objects_do_not_sit_on_the_room_of_written_parts() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(FsStore::new(dir.path().to_path_buf()));
        let part = store.part_size();
        let budget = ByteBudget::new(2 * part);
        let mut senders = Vec::new();
        let mut uploads = Vec::new();
        for i in 0..3 {
            let (tx, rx) = mpsc::channel(4);
            senders.push(tx);
            uploads.push(tokio::spawn(upload_object(
                store.clone(),
                format!("o{i}"),
                rx,
            )));
        }
        let (finished, writer) = tokio::sync::oneshot::channel();
        // A thread of its own: if it never gets room, the test fails instead of hanging.
        std::thread::spawn(move || {
            // Two full parts per object, round-robin, as a writer of three partitions does.
            for _ in 0..2 {
                for tx in &senders {
                    let permit = budget.acquire(part);
                    let data = Bytes::from(vec![7u8; part]);
                    if tx
                        .blocking_send(ToObject::Part(vec![data], permit))
                        .is_err()
                    {
                        return;
                    }
                }
            }
            let _ = finished.send(());
        });
        let done = tokio::time::timeout(Duration::from_secs(20), writer).await;
        assert!(
            matches!(done, Ok(Ok(()))),
            "the writer waited for room no part gives back"
        );
        for u in uploads {
            u.abort();
        }
    }
}
