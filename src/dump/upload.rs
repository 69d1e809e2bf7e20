//! The upload stage's streaming half: every open object streams its parts to the store in its
//! own task (many at once, bounded by the in-flight budget) and ends as an unfinished upload
//! (or a bundle's uploads) for its partition's sequencer to make visible. An upload dropped
//! without an end aborts itself.

use super::sequencer::PartitionFlags;
use super::writer::{ObjectEnd, ToObject};
use crate::store::{ErrorKind, MultipartUpload, ObjectStore, StoreError};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// An open object's upload task's result.
pub(super) enum Outcome {
    Ready {
        upload: Box<dyn MultipartUpload>,
        /// CRC-32C of the whole object, for its seal.
        crc32c: u32,
        end: ObjectEnd,
        took: Duration,
        _held: Option<super::budget::Permit>,
    },
    /// A bundle's uploads (every file written, none finished, each with its CRC-32C) and its
    /// state.
    Bundle {
        uploads: Vec<(String, Box<dyn MultipartUpload>, u32)>,
        state: (String, Vec<u8>),
        state_prefix: String,
        end: ObjectEnd,
        took: Duration,
        _held: Option<super::budget::Permit>,
    },
    /// The writer dropped the object (rewind, revocation): nothing to store.
    Discarded,
    Failed(StoreError),
}

pub(super) struct InFlight {
    pub seq: u64,
    pub key: String,
    pub first: i64,
    pub task: JoinHandle<Outcome>,
}

/// Streams one object's parts into an upload.
pub(super) async fn upload_object(
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
    let mut crc = 0u32;
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
                    crc = crc32c::crc32c_append(crc, &data);
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
                    // In pieces, as parts of a record object go (see `io::WRITE_PIECE`).
                    let mut file_crc = 0u32;
                    for piece in pieces {
                        file_crc = crc32c::crc32c_append(file_crc, &piece);
                        if let Err(e) = u.write(piece).await {
                            return Outcome::Failed(e);
                        }
                    }
                    uploads.push((file, u, file_crc));
                }
                bundle = Some((uploads, out.state, out.state_prefix));
                held = Some(permit);
            }
            ToObject::End(end) => {
                let took = started.elapsed();
                if let Some((uploads, state, state_prefix)) = bundle {
                    return Outcome::Bundle {
                        uploads,
                        state,
                        state_prefix,
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
                    crc32c: crc,
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

/// The head object's outcome, once its upload task is done.
pub(super) async fn head_outcome(queue: &mut VecDeque<InFlight>) -> Outcome {
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

pub(super) fn abort_all(queue: &mut VecDeque<InFlight>, flags: &PartitionFlags) {
    for f in queue.drain(..) {
        flags.pending.fetch_sub(1, Ordering::Relaxed);
        // Cancelling the task drops its upload, which aborts itself.
        f.task.abort();
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
