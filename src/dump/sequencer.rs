//! The upload stage's ordering half: one sequencer per partition settles where the partition
//! starts, then makes its objects (streamed by `upload.rs`) visible strictly in order, each only
//! after the previous one's offsets are committed.
//!
//! That order is what keeps a replay from duplicating: at most one stored object of a partition
//! is ahead of its committed offset. Objects are created "first writer wins" (a conditional
//! create); before that, a seal records where the object ends and stays as the object's entry
//! in the archive's index ([`super::index`]). A writer that finds the key taken (by its own
//! earlier attempt, a crashed predecessor, a zombie, or because the group's offsets went back)
//! adopts the stored object: it commits past it and rewinds the partition to right after it.
//! A failed upload rewinds the partition to the object's first offset: Kafka, not memory, holds
//! data awaiting a retry.

use super::index::{self, PartitionIndex, Place, Seal};
use super::requests::{commit_until_done, facts_until_done, rewind_until_done, Control, Seek};
use super::start::{start_partition, Gap, Started};
use super::upload::{abort_all, head_outcome, upload_object, InFlight, Outcome};
use super::writer::{ObjectEnd, Opened, StateRequest};
use super::{DumpError, Fatal, Tp};
use crate::config::StartOffset;
use crate::layout::DumpDir;
use crate::store::{ErrorKind, Finish, Finished, MultipartUpload, ObjectStore, StoreError};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

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
    /// Where a new group starts (a partition with no committed offset and no archive).
    pub start_offset: StartOffset,
    /// Seals older than this whose upload never made its object visible are litter.
    pub litter_age: Duration,
    /// Offsets retention deleted before they were archived, found by this run.
    pub gaps: Arc<Mutex<Vec<(Tp, Gap)>>>,
}

/// What the stages of one partition tell each other without a message.
#[derive(Default)]
pub(super) struct PartitionFlags {
    /// Set by the poll loop: the sequencer drops what is not stored and stops.
    pub revoked: AtomicBool,
    /// Objects opened (counted by the writer) and not yet committed or dropped (by the
    /// sequencer).
    pub pending: AtomicU64,
    /// Objects stored (or adopted) and committed by this process.
    pub stored: AtomicU64,
    /// Set by the writer once it handled a `Close` of this partition (cleared by the poll loop
    /// when it routes more records or rewinds): nothing of it is left in the writer.
    pub closed: AtomicBool,
}

/// What to do once the head object was finished (pure: the decisions of the sequencer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Stored by this upload (also when its answer was lost and a retry found the key taken
    /// by this very upload): commit its next offset, then go on.
    Commit(i64),
    /// The key was taken by an object whose seal says it ends before `next`: commit `next`
    /// (unless the group is past it) and go on there.
    Adopt(i64),
    /// The key was taken by an object no seal explains (written by strata before the index
    /// was kept, or by another program).
    Unexplained,
}

/// `own`: the object under the key carries this upload's tag.
pub(crate) fn decide(
    first: i64,
    last: i64,
    finished: Finished,
    own: bool,
    found: Option<&Seal>,
) -> Step {
    match finished {
        Finished::Stored => Step::Commit(last + 1),
        Finished::Exists if own => Step::Commit(last + 1),
        Finished::Exists => match found {
            Some(s) if s.next_offset > first => Step::Adopt(s.next_offset),
            _ => Step::Unexplained,
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

pub(super) fn next_backoff(d: Option<Duration>) -> Duration {
    d.map_or(Duration::from_secs(1), |d| (d * 2).min(MAX_BACKOFF))
}

/// Runs a partition's sequencer until its writer hangs up (revocation or shutdown). Before it
/// makes any object visible, the partition's start is settled (see [`super::start`]).
pub(super) async fn sequence(
    tp: Tp,
    epoch: u64,
    mut opened: mpsc::Receiver<Opened>,
    flags: Arc<PartitionFlags>,
    cx: Arc<UploadContext>,
) {
    let index = PartitionIndex::new(&cx.dir, &tp, cx.litter_age);
    let mut starting = Some(tokio::spawn(start_partition(
        cx.clone(),
        tp.clone(),
        index,
        flags.clone(),
    )));
    let mut s = Sequencer {
        tp,
        epoch,
        cx,
        flags,
        queue: VecDeque::new(),
        index: None,
        placed: None,
        limit: None,
        stale: Vec::new(),
        unresolved: Vec::new(),
        behind: false,
    };
    let mut backoff: Option<Duration> = None;
    let mut input_open = true;
    loop {
        if !input_open && s.queue.is_empty() && starting.is_none() {
            if s.behind && !s.flags.revoked.load(Ordering::Relaxed) {
                s.cx.unstored.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(task = %s.cx.task, topic = %s.tp.topic, partition = s.tp.partition, "stopping with records of this partition not stored; they are read again by the next run");
            }
            return;
        }
        if s.flags.revoked.load(Ordering::Relaxed) || s.cx.fatal.is_set() {
            abort_all(&mut s.queue, &s.flags);
            return;
        }
        let done = tokio::select! {
            r = async {
                match starting.as_mut() {
                    Some(t) => t.await,
                    None => std::future::pending().await,
                }
            }, if starting.is_some() => {
                starting = None;
                let Ok((how, index)) = r else {
                    s.cx.fatal.set(DumpError::Worker { task: s.cx.task.clone(), detail: "a partition's start failed".into() });
                    continue;
                };
                s.index = Some(index);
                match how {
                    Started::AsCommitted => {
                        if let Some(first) = s.queue.front().map(|h| h.first) {
                            s.check_place(first).await;
                        }
                    }
                    Started::Rewound(e) => s.moved(e),
                    Started::Stopped => {
                        abort_all(&mut s.queue, &s.flags);
                        return;
                    }
                }
                None
            }
            m = opened.recv(), if input_open => {
                match m {
                    Some(o) if o.epoch < s.epoch => {
                        // A rewind made it stale.
                        s.flags.pending.fetch_sub(1, Ordering::Relaxed);
                        drop(o);
                    }
                    Some(o) => {
                        if let Some(req) = o.state {
                            tokio::spawn(load_state(s.cx.clone(), s.tp.clone(), req, s.flags.clone()));
                        }
                        let first = o.first_offset;
                        let task = tokio::spawn(upload_object(s.cx.store.clone(), o.key.clone(), o.parts));
                        s.queue.push_back(InFlight { seq: o.seq, key: o.key, first, task });
                        // The first object after a (re)start, and any below where the archive
                        // is known to end, is checked against what is archived already.
                        let below = s.index.as_ref().and_then(PartitionIndex::known_end).is_some_and(|e| first < e);
                        if s.index.is_some() && (s.placed != Some(s.epoch) || below) {
                            s.check_place(first).await;
                        }
                    }
                    None => input_open = false,
                }
                None
            }
            r = head_outcome(&mut s.queue), if !s.queue.is_empty() && starting.is_none() => Some(r),
            // Notice a revocation or another stage's fatal error while waiting.
            _ = tokio::time::sleep(Duration::from_millis(200)) => None,
        };
        let Some(outcome) = done else {
            continue;
        };
        let Some(head) = s.queue.pop_front() else {
            continue;
        };
        // The head counts as pending until its offsets are committed or the partition was
        // rewound past it: until then the partition is not idle.
        let result = s.finish_head(&head, outcome).await;
        if result.is_ok() && !s.stale.is_empty() {
            let mut left = Vec::new();
            for key in s.stale.drain(..) {
                if s.cx.store.delete(&key).await.is_err() {
                    left.push(key);
                }
            }
            s.stale = left;
        }
        match result {
            Ok(Some(new_epoch)) => {
                // Rewound: what was queued behind the head belongs to the old position.
                s.moved(new_epoch);
                backoff = None;
            }
            Ok(None) => {
                backoff = None;
                s.behind = false;
            }
            Err(e) if fatal(&e) => {
                s.cx.metrics.store_fatal.increment(1);
                s.cx.fatal.set(DumpError::Store {
                    task: s.cx.task.clone(),
                    source: e,
                });
                abort_all(&mut s.queue, &s.flags);
                s.flags.pending.fetch_sub(1, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                // Retry from the head's first offset once the store had a moment.
                s.cx.metrics.store_errors.increment(1);
                let pause = next_backoff(backoff);
                backoff = Some(pause);
                tracing::warn!(task = %s.cx.task, topic = %s.tp.topic, partition = s.tp.partition, seq = head.seq, error = %e, retry_in_s = pause.as_secs(), "storing failed; the partition is read again from the object's first offset after a pause (its offsets stay uncommitted)");
                abort_all(&mut s.queue, &s.flags);
                s.behind = true;
                tokio::time::sleep(pause).await;
                if let Some(e) =
                    rewind_until_done(&s.cx, &s.tp, Seek::to(head.first), &s.flags).await
                {
                    s.moved(e);
                }
            }
        }
        s.flags.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One partition's sequencer: its queue of objects in flight and what it knows of the
/// partition's archive.
struct Sequencer {
    tp: Tp,
    epoch: u64,
    cx: Arc<UploadContext>,
    flags: Arc<PartitionFlags>,
    queue: VecDeque<InFlight>,
    /// The partition's seals; `None` while its start is being settled.
    index: Option<PartitionIndex>,
    /// The epoch whose first object passed the check against the archive.
    placed: Option<u64>,
    /// A limit this sequencer set: (the epoch it began, the offset objects end before).
    limit: Option<(u64, i64)>,
    /// Seals that could not be removed (the store was down): removed after the next success.
    stale: Vec<String>,
    /// Seals of uploads whose finish failed without telling whether the object was stored:
    /// (first offset, seal key, tag). Kept until the key is known to be another upload's.
    unresolved: Vec<(i64, String, String)>,
    /// Records were read and are not stored: a failure rewound the partition and nothing was
    /// stored (or adopted) since. A sequencer that ends so (not revoked) leaves its records for
    /// the next run.
    behind: bool,
}

impl Sequencer {
    /// The partition was moved to epoch `e`: what is queued belongs to the old position.
    fn moved(&mut self, e: u64) {
        self.epoch = e;
        abort_all(&mut self.queue, &self.flags);
    }

    /// Checks the object starting at `first` against the archive; a failure leaves the check
    /// to the object's finish.
    async fn check_place(&mut self, first: i64) {
        match self.place(first).await {
            Ok(Some(e)) => self.moved(e),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(task = %self.cx.task, topic = %self.tp.topic, partition = self.tp.partition, error = %e, "checking an object against the archive failed; checked again before it is made visible")
            }
        }
    }

    /// Where an object starting at `first` may go, given what the archive holds. `Some(e)`:
    /// the partition was moved (to after a stored object, or to end objects before an archived
    /// one) and is at epoch `e`.
    async fn place(&mut self, first: i64) -> Result<Option<u64>, StoreError> {
        let Some(index) = self.index.as_mut() else {
            return Ok(None);
        };
        let (cx, tp) = (&self.cx, &self.tp);
        match index.place(cx.store.as_ref(), first).await? {
            Place::Clear => {
                self.placed = Some(self.epoch);
                Ok(None)
            }
            Place::Limit { before } if self.limit == Some((self.epoch, before)) => {
                self.placed = Some(self.epoch);
                Ok(None)
            }
            Place::Limit { before } => {
                tracing::info!(task = %cx.task, topic = %tp.topic, partition = tp.partition, first, archived_from = before, "the archive already holds this partition's offsets from a later one on (the group's offsets went back over it): objects end before it");
                let e = rewind_until_done(
                    cx,
                    tp,
                    Seek {
                        limit: Some(before),
                        ..Seek::to(first)
                    },
                    &self.flags,
                )
                .await;
                if let Some(e) = e {
                    self.limit = Some((e, before));
                }
                Ok(e)
            }
            Place::Adopt { next, key } => {
                tracing::info!(task = %cx.task, object = %cx.store.location(&key), next_offset = next, "these records are archived already (a restart, another member, or a group whose offsets went back): adopting the object and going on after it");
                cx.metrics.adopted.increment(1);
                self.flags.stored.fetch_add(1, Ordering::Relaxed);
                self.behind = false;
                Ok(rewind_until_done(cx, tp, Seek::to(next).committing(), &self.flags).await)
            }
        }
    }

    /// Removes a seal that explains nothing (now, or after the next success).
    async fn remove(&mut self, key: String) {
        if self.cx.store.delete(&key).await.is_err() {
            self.stale.push(key);
        }
    }

    /// The object under `key` (starting at `first`) is known now to be the upload `winner`'s:
    /// the seals of other attempts at it (this sequencer's whose finish failed, a crashed
    /// predecessor's, a zombie's) can never explain a visible object and go.
    async fn bury(&mut self, first: i64, key: &str, winner: &str) {
        let (at, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.unresolved)
            .into_iter()
            .partition(|(f, _, _)| *f == first);
        self.unresolved = rest;
        for (_, seal, tag) in at {
            if tag != winner {
                self.remove(seal).await;
            }
        }
        let listed = self
            .index
            .as_ref()
            .map(|ix| ix.others_at(first, winner))
            .unwrap_or_default();
        for seal in listed {
            if let Ok(true) = index::attempt_at(self.cx.store.as_ref(), &seal, key).await {
                self.remove(seal.clone()).await;
                if let Some(ix) = self.index.as_mut() {
                    ix.removed(&seal);
                }
            }
        }
    }

    /// Makes the head object visible and commits it, or adopts what holds its key. `Ok(Some(e))`:
    /// the partition was rewound and is at epoch `e` now. Transient failures come back as `Err`
    /// for a retry; the caller tells fatal ones apart.
    async fn finish_head(
        &mut self,
        head: &InFlight,
        outcome: Outcome,
    ) -> Result<Option<u64>, StoreError> {
        let (upload, crc32c, end, took) = match outcome {
            Outcome::Discarded => return Ok(None),
            Outcome::Failed(e) => return Err(e),
            Outcome::Bundle {
                uploads,
                state,
                state_prefix,
                end,
                took,
                ..
            } => {
                return self
                    .finish_bundle(head, uploads, (state, state_prefix), end, took)
                    .await
            }
            Outcome::Ready {
                upload,
                crc32c,
                end,
                took,
                ..
            } => (upload, crc32c, end, took),
        };
        // Nothing is made visible before it was checked against the archive.
        if self.placed != Some(self.epoch) {
            if let Some(e) = self.place(head.first).await? {
                return Ok(Some(e));
            }
        }
        let store = self.cx.store.clone();
        let (cx, tp) = (self.cx.clone(), self.tp.clone());
        let own_tag = upload.tag().to_string();
        let own_seal = index::seal_key(&cx.dir, &tp, head.first, &own_tag);
        let seal = Seal {
            key: head.key.clone(),
            last_offset: end.last_offset,
            next_offset: end.last_offset + 1,
            records: end.records,
            bytes: end.bytes,
            files: Vec::new(),
            crc32c: vec![crc32c],
            times: end.times,
        };
        // The seal first: an object that exists always has one.
        store.put(&own_seal, Bytes::from(seal.to_json())).await?;
        let finished = match upload.finish(Finish::CreateNew).await {
            Ok(f) => f,
            // The answer may have been lost on the way while the object was stored: the key
            // tells. The seal goes only once the key is known to be another's (or absent).
            Err(e) => match store.tag_of(&head.key).await {
                Ok(Some(t)) if t == own_tag => Finished::Stored,
                Ok(_) => {
                    self.remove(own_seal).await;
                    return Err(e);
                }
                Err(t) if t.kind == ErrorKind::NotFound => {
                    self.remove(own_seal).await;
                    return Err(e);
                }
                Err(_) => {
                    self.unresolved.push((head.first, own_seal, own_tag));
                    return Err(e);
                }
            },
        };
        let (own, found) = match finished {
            Finished::Stored => (true, None),
            Finished::Exists => {
                // A retry of a request whose answer was lost finds the key taken by itself.
                let winner = store.tag_of(&head.key).await?;
                if winner.as_deref() == Some(own_tag.as_str()) {
                    (true, None)
                } else {
                    self.remove(own_seal.clone()).await;
                    let found = match &winner {
                        Some(w) => {
                            index::find_seal(store.as_ref(), &cx.dir, &tp, head.first, &head.key, w)
                                .await?
                                .map(|s| (s, w.clone()))
                        }
                        None => None,
                    };
                    (false, found)
                }
            }
        };
        match decide(
            head.first,
            end.last_offset,
            finished,
            own,
            found.as_ref().map(|(s, _)| s),
        ) {
            Step::Commit(next) => {
                if !commit_until_done(&cx, &tp, next, &self.flags).await {
                    // Revoked before the commit: the seal explains the stored object to the
                    // partition's new owner, who adopts it instead of writing it again.
                    tracing::info!(task = %cx.task, object = %store.location(&head.key), "stored, but the partition was revoked before its offsets were committed; its new owner adopts the object");
                    return Ok(None);
                }
                if let Some(ix) = self.index.as_mut() {
                    ix.stored(head.first, &own_tag, &seal);
                }
                self.bury(head.first, &head.key, &own_tag).await;
                count_stored(&cx, &self.flags, &end, took, 1);
                tracing::info!(task = %cx.task, object = %store.location(&head.key), records = end.records, bytes = end.bytes, ms = took.as_millis() as u64, reason = end.reason.as_str(), "stored");
                Ok(None)
            }
            Step::Adopt(next) => {
                tracing::info!(task = %cx.task, object = %store.location(&head.key), next_offset = next, "the object was already stored (a restart, another member, or a group whose offsets went back): adopting it and going on after it");
                cx.metrics.adopted.increment(1);
                self.flags.stored.fetch_add(1, Ordering::Relaxed);
                self.behind = false;
                if let Some((s, winner)) = &found {
                    if let Some(ix) = self.index.as_mut() {
                        ix.stored(head.first, winner, s);
                    }
                    self.bury(head.first, &head.key, winner).await;
                }
                Ok(rewind_until_done(&cx, &tp, Seek::to(next).committing(), &self.flags).await)
            }
            Step::Unexplained => {
                // Another member moved the group past this object (this position is stale),
                // or the group went back over an object nothing explains: the one the writer
                // would build again and again.
                let Some(f) = facts_until_done(&cx, &tp, &self.flags).await else {
                    return Ok(None);
                };
                match f.committed {
                    Some(c) if c > head.first => {
                        self.behind = false;
                        tracing::warn!(task = %cx.task, object = %store.location(&head.key), committed = c, "the object was stored and committed by another member: this partition's position is stale; going on from the group's committed offset");
                        Ok(rewind_until_done(&cx, &tp, Seek::to(c), &self.flags).await)
                    }
                    committed => {
                        cx.fatal.set(DumpError::Unexplained {
                            task: cx.task.clone(),
                            object: store.location(&head.key),
                            topic: tp.topic.to_string(),
                            partition: tp.partition,
                            first: head.first,
                            committed: committed.map_or_else(|| "none".into(), |c| c.to_string()),
                        });
                        Ok(None)
                    }
                }
            }
        }
    }

    /// Makes a bundle (a CDC task's files of one offset range) visible and commits it as one. Every file is created only if its
    /// key is free; a key already taken is fine only when this upload (its answer lost) or an
    /// unfinished attempt at the same range (a seal with the same end) made it, since that
    /// attempt wrote the same contents. An earlier attempt that ended elsewhere and made some
    /// file visible makes this one start over and end where that one did. The seals of
    /// attempts at the same range stay: they are the index of the files they made visible.
    async fn finish_bundle(
        &mut self,
        head: &InFlight,
        uploads: Vec<(String, Box<dyn MultipartUpload>, u32)>,
        (state, state_prefix): ((String, Vec<u8>), String),
        end: ObjectEnd,
        took: Duration,
    ) -> Result<Option<u64>, StoreError> {
        if self.placed != Some(self.epoch) {
            if let Some(e) = self.place(head.first).await? {
                return Ok(Some(e));
            }
        }
        let (cx, tp) = (self.cx.clone(), self.tp.clone());
        let store = cx.store.clone();
        let first = head.first;
        let mut explained: std::collections::HashSet<(String, String)> = Default::default();
        let mut litter = Vec::new();
        let mut earlier = store.list(&index::seal_dir(&cx.dir, &tp, first)).await?;
        let legacy = index::legacy_seal_key(&cx.dir, &tp, first, "");
        earlier.extend(store.list(&legacy).await?);
        for o in earlier {
            let raw = match store.get(&o.key).await {
                Ok(r) => r,
                Err(e) if e.kind == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let Ok(seal) = serde_json::from_slice::<Seal>(&raw) else {
                litter.push(o.key);
                continue;
            };
            if seal.last_offset == end.last_offset {
                explained.extend(seal.files.iter().cloned());
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
                litter.push(o.key);
                continue;
            }
            tracing::info!(task = %cx.task, topic = %tp.topic, partition = tp.partition, first, end = seal.last_offset, "an earlier attempt at this bundle ended elsewhere and left files: writing it again to end where that one did");
            drop(uploads);
            return Ok(rewind_until_done(
                &cx,
                &tp,
                Seek {
                    cut: Some(seal.last_offset),
                    ..Seek::to(first)
                },
                &self.flags,
            )
            .await);
        }
        store.put(&state.0, Bytes::from(state.1)).await?;
        let files: Vec<(String, String)> = uploads
            .iter()
            .map(|(k, u, _)| (k.clone(), u.tag().to_string()))
            .collect();
        let crc32c = uploads.iter().map(|(_, _, c)| *c).collect();
        let tag = files.first().map(|(_, t)| t.clone()).unwrap_or_default();
        let own_seal = index::seal_key(&cx.dir, &tp, first, &tag);
        let seal = Seal {
            key: head.key.clone(),
            last_offset: end.last_offset,
            next_offset: end.last_offset + 1,
            records: end.records,
            bytes: end.bytes,
            files,
            crc32c,
            times: end.times,
        };
        store.put(&own_seal, Bytes::from(seal.to_json())).await?;
        let count = uploads.len() as u64;
        for (key, u, _) in uploads {
            let own = u.tag().to_string();
            if u.finish(Finish::CreateNew).await? == Finished::Exists {
                let t = store.tag_of(&key).await?;
                let fine = t
                    .as_ref()
                    .is_some_and(|t| *t == own || explained.contains(&(key.clone(), t.clone())));
                if !fine {
                    return Err(StoreError::new(
                        ErrorKind::Service,
                        store.location(&key),
                        "exists, and no unfinished attempt at this bundle made it (another member may have stored this range; if not, the directory holds a foreign object: move it away); retrying from the bundle's first offset",
                    ));
                }
            }
        }
        if !commit_until_done(&cx, &tp, end.last_offset + 1, &self.flags).await {
            tracing::info!(task = %cx.task, topic = %tp.topic, partition = tp.partition, first, "bundle stored, but the partition was revoked before its offsets were committed; its new owner writes it again with the same contents");
            return Ok(None);
        }
        for k in litter {
            self.remove(k).await;
        }
        if let Some(ix) = self.index.as_mut() {
            ix.stored(first, &tag, &seal);
        }
        // States of other positions are no longer needed (the committed one is kept).
        if let Ok(states) = store.list(&state_prefix).await {
            for s in states.into_iter().filter(|s| s.key != state.0) {
                self.remove(s.key).await;
            }
        }
        count_stored(&cx, &self.flags, &end, took, count);
        let c = end.cdc.unwrap_or_default();
        tracing::info!(task = %cx.task, bundle = %store.location(&head.key), files = count, messages = end.records, changes = c.changes, repeats = c.repeats, malformed = c.malformed, bytes = end.bytes, ms = took.as_millis() as u64, reason = end.reason.as_str(), "stored");
        Ok(None)
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
            s.cdc += c;
        }
    }
    flags.stored.fetch_add(1, Ordering::Relaxed);
}

/// Answers a writer's request for the state its bundle goes on from: the stored one the
/// request picks, as bytes (none: the bundle starts without). Retries while the store fails,
/// until the writer no longer waits or the partition is revoked.
async fn load_state(cx: Arc<UploadContext>, tp: Tp, req: StateRequest, flags: Arc<PartitionFlags>) {
    let mut pause = None;
    loop {
        let found = async {
            let listed = cx.store.list(&req.prefix).await?;
            let keys: Vec<String> = listed.into_iter().map(|o| o.key).collect();
            let Some(key) = (req.pick)(&keys, req.first_offset) else {
                return Ok::<_, StoreError>(None);
            };
            let raw = cx.store.get(key).await?;
            Ok(Some((cx.store.location(key), raw)))
        }
        .await;
        match found {
            Ok(state) => {
                let _ = req.reply.send(state);
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
                tracing::warn!(task = %cx.task, topic = %tp.topic, partition = tp.partition, error = %e, "reading a bundle's stored state failed; retrying");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn seal(next: i64) -> Seal {
        Seal {
            key: "k".into(),
            last_offset: next - 1,
            next_offset: next,
            records: 1,
            bytes: 10,
            files: Vec::new(),
            crc32c: Vec::new(),
            times: None,
        }
    }

    #[test]
    fn decisions_after_an_object_finished() {
        assert_eq!(
            decide(100, 199, Finished::Stored, true, None),
            Step::Commit(200)
        );
        // The key is taken by this very upload: a retried request whose answer was lost.
        assert_eq!(
            decide(100, 199, Finished::Exists, true, None),
            Step::Commit(200)
        );
        // Taken by a longer or shorter object: commit past that one, rewind to right after it.
        assert_eq!(
            decide(100, 199, Finished::Exists, false, Some(&seal(250))),
            Step::Adopt(250)
        );
        assert_eq!(
            decide(100, 199, Finished::Exists, false, Some(&seal(150))),
            Step::Adopt(150)
        );
        // Taken, and nothing says where it ends.
        assert_eq!(
            decide(100, 199, Finished::Exists, false, None),
            Step::Unexplained
        );
        assert_eq!(
            decide(100, 199, Finished::Exists, false, Some(&seal(100))),
            Step::Unexplained
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
