//! The archive's index: a seal per stored object, written before the object is made visible and
//! kept with it. A seal says where its object ends, so a writer that finds a key taken (its own
//! crashed predecessor's, a zombie's, or that of a run whose group offsets went back) goes on
//! after it, and a partition's seals say where its archive ends and which offsets it holds.
//!
//! Seals live at `<dir>.strata/index/<topic>/<partition>/<R>/<tag>`, R being the 19 digits of
//! `i64::MAX - first offset`, so that a listing returns a partition's newest objects first.

use super::Tp;
use crate::layout::DumpDir;
use crate::store::{ErrorKind, ObjectStore, StoreError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Where a stored object ends, written before the object is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Seal {
    pub key: String,
    pub last_offset: i64,
    pub next_offset: i64,
    pub records: u64,
    /// The object's stored size (0 in seals of strata versions before the index was kept).
    #[serde(default)]
    pub bytes: u64,
    /// A CDC bundle's files and the tag of each one's upload (empty for a single object).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<(String, String)>,
    /// CRC-32C (Castagnoli) of the object's stored bytes, or of each file of a bundle in the
    /// order of `files`: what `strata archive verify` checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crc32c: Vec<u32>,
    /// The earliest and latest record timestamps (ms since the epoch) in the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<(i64, i64)>,
}

impl Seal {
    pub fn to_json(&self) -> Vec<u8> {
        // Plain structs serialize to JSON without failing.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Seals per page when the newest few are what is wanted (the archive's end).
const FIRST_PAGE: usize = 16;
/// Seals per page when going further back.
const PAGE: usize = 1000;

/// A partition's seals: `<dir>.strata/index/<topic>/<partition>/`.
pub(crate) fn partition_prefix(dir: &DumpDir, tp: &Tp) -> String {
    format!(
        "{}.strata/index/{}/{}/",
        dir.prefix(),
        tp.topic,
        tp.partition
    )
}

/// The level of the seals of the objects (or bundles) starting at `first`.
fn rev(first: i64) -> String {
    format!("{:019}", i64::MAX - first.max(0))
}

/// Where the seals of the objects (or bundles) starting at `first` live.
pub(crate) fn seal_dir(dir: &DumpDir, tp: &Tp, first: i64) -> String {
    format!("{}{}/", partition_prefix(dir, tp), rev(first))
}

/// The seal of the object starting at `first` written by the upload `tag`.
pub(crate) fn seal_key(dir: &DumpDir, tp: &Tp, first: i64, tag: &str) -> String {
    format!("{}{tag}", seal_dir(dir, tp, first))
}

/// The first offset and upload tag a seal's key (under `prefix`, a partition's) names.
pub(crate) fn parse_seal_key(prefix: &str, key: &str) -> Option<(i64, String)> {
    let rest = key.strip_prefix(prefix)?;
    let (r, tag) = rest.split_once('/')?;
    if r.len() != 19 || !r.bytes().all(|b| b.is_ascii_digit()) || tag.is_empty() {
        return None;
    }
    if tag.contains('/') {
        return None;
    }
    let n: i64 = r.parse().ok()?;
    Some((i64::MAX - n, tag.to_string()))
}

/// Where strata versions before the kept index wrote their seals (removed once committed):
/// `<dir>.strata/seals/<topic>/<partition>/<first, 20 digits>/<tag>`.
pub(crate) fn legacy_seal_key(dir: &DumpDir, tp: &Tp, first: i64, tag: &str) -> String {
    format!(
        "{}{first:020}/{tag}",
        legacy_partition_prefix(dir, &tp.topic, tp.partition)
    )
}

fn legacy_partition_prefix(dir: &DumpDir, topic: &str, partition: i32) -> String {
    format!("{}.strata/seals/{topic}/{partition}/", dir.prefix())
}

/// The prefix of every legacy seal of a directory.
pub(crate) fn legacy_prefix(dir: &DumpDir) -> String {
    format!("{}.strata/seals/", dir.prefix())
}

/// The partition, first offset and upload tag a legacy seal's key names.
pub(crate) fn parse_legacy_seal_key(dir: &DumpDir, key: &str) -> Option<(Tp, i64, String)> {
    let rest = key.strip_prefix(&legacy_prefix(dir))?;
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

/// Whether a legacy seal a crash left may go: its object was never made visible by that upload
/// (`object_tag` is another's or none), or the group committed past it. A seal of a stored
/// object whose offsets are not committed stays: it lets the partition's next owner adopt it.
pub(crate) fn legacy_seal_is_litter(
    seal: &Seal,
    seal_tag: &str,
    object_tag: Option<&str>,
    committed: Option<i64>,
) -> bool {
    object_tag != Some(seal_tag) || committed.is_some_and(|c| c >= seal.next_offset)
}

/// Whether the object (or one file of the bundle) a seal describes is stored by the seal's
/// upload: the seal is then the object's; otherwise the upload never made it visible (a crash
/// between the seal and the object, or another upload won the key) and the seal is litter.
pub(crate) async fn seal_visible(
    store: &dyn ObjectStore,
    seal: &Seal,
    tag: &str,
) -> Result<bool, StoreError> {
    let files: Vec<(&str, &str)> = if seal.files.is_empty() {
        vec![(seal.key.as_str(), tag)]
    } else {
        seal.files
            .iter()
            .map(|(f, t)| (f.as_str(), t.as_str()))
            .collect()
    };
    for (file, t) in files {
        match store.tag_of(file).await {
            Ok(Some(found)) if found == t => return Ok(true),
            Ok(_) => {}
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// What a seal, once read, says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Detail {
    /// `None`: the seal is gone or unreadable.
    next: Option<i64>,
    object: String,
    visible: bool,
}

/// A listed seal.
#[derive(Debug, Clone)]
struct Listed {
    first: i64,
    key: String,
    tag: String,
    modified: Option<DateTime<Utc>>,
    detail: Option<Detail>,
}

/// Where the partition's next object may go, given what its archive already holds (pure
/// outcome of [`PartitionIndex::place`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// Nothing archived at or after the object's first offset.
    Clear,
    /// A stored object (`key`) holds the first offset: go on after it, at `next`.
    Adopt { next: i64, key: String },
    /// Objects are archived from offset `before` on (the group went back over an archive with
    /// a hole, or started before it): the object must end before that offset.
    Limit { before: i64 },
}

/// What a decision still needs from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// The seal at this position of the listing, read.
    Detail(usize),
    /// The next page of the listing.
    More,
}

/// Where an object starting at `first` may go (pure). `listed` is sorted by key (newest
/// first); `listed_to` is the last key the listing reached (`None`: it reached the end):
/// seals beyond it are not trusted as a boundary until the listing got there. The newest
/// visible seal at or before `first` adopts the object when it ends after `first`; otherwise
/// the oldest seal after `first` limits it. Seals that never became visible are passed over (a
/// seal that limits needs no proof: a shorter object costs nothing).
fn decide_place(first: i64, listed: &[Listed], listed_to: Option<&str>) -> Result<Place, Need> {
    let mut after = None;
    for (i, s) in listed.iter().enumerate() {
        if listed_to.is_some_and(|to| s.key.as_str() > to) {
            return Err(Need::More);
        }
        if s.first > first {
            after = Some(s.first);
            continue;
        }
        let Some(d) = &s.detail else {
            return Err(Need::Detail(i));
        };
        let Some(next) = d.next.filter(|_| d.visible) else {
            continue;
        };
        if next > first {
            return Ok(Place::Adopt {
                next,
                key: d.object.clone(),
            });
        }
        // Objects never overlap: older ones end before this one starts.
        return Ok(after.map_or(Place::Clear, |before| Place::Limit { before }));
    }
    match listed_to {
        None => Ok(after.map_or(Place::Clear, |before| Place::Limit { before })),
        Some(_) => Err(Need::More),
    }
}

/// The offset after the newest visible object (pure): where the partition's archive ends.
fn decide_end(listed: &[Listed], listed_to: Option<&str>) -> Result<Option<i64>, Need> {
    for (i, s) in listed.iter().enumerate() {
        if listed_to.is_some_and(|to| s.key.as_str() > to) {
            return Err(Need::More);
        }
        let Some(d) = &s.detail else {
            return Err(Need::Detail(i));
        };
        if let Some(next) = d.next.filter(|_| d.visible) {
            return Ok(Some(next));
        }
    }
    match listed_to {
        None => Ok(None),
        Some(_) => Err(Need::More),
    }
}

/// How far a partition's listing got.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reached {
    /// Nothing listed yet.
    Start,
    /// Listed up to this key.
    Key(String),
    /// Listed to the end.
    End,
}

/// A partition's seals, read newest first as far as a question needs, and kept while the
/// partition is assigned (its owner adds the seals of the objects it stores and forgets the
/// older ones).
pub(crate) struct PartitionIndex {
    prefix: String,
    /// Sorted by key: newest first.
    listed: Vec<Listed>,
    reached: Reached,
    /// Seals older than this that never became visible are removed when met.
    litter_age: Duration,
}

impl PartitionIndex {
    pub fn new(dir: &DumpDir, tp: &Tp, litter_age: Duration) -> Self {
        Self {
            prefix: partition_prefix(dir, tp),
            listed: Vec::new(),
            reached: Reached::Start,
            litter_age,
        }
    }

    /// The last key listed, for the pure decisions (`None`: listed to the end).
    fn listed_to(&self) -> Option<&str> {
        match &self.reached {
            Reached::Start => Some(""),
            Reached::Key(k) => Some(k),
            Reached::End => None,
        }
    }

    /// Where an object starting at `first` may go.
    pub async fn place(
        &mut self,
        store: &dyn ObjectStore,
        first: i64,
    ) -> Result<Place, StoreError> {
        loop {
            match decide_place(first, &self.listed, self.listed_to()) {
                Ok(p) => return Ok(p),
                Err(need) => self.fetch(store, need).await?,
            }
        }
    }

    /// The offset after the partition's newest stored object (`None`: nothing archived).
    pub async fn end(&mut self, store: &dyn ObjectStore) -> Result<Option<i64>, StoreError> {
        loop {
            match decide_end(&self.listed, self.listed_to()) {
                Ok(e) => return Ok(e),
                Err(need) => self.fetch(store, need).await?,
            }
        }
    }

    /// The end known without asking the store: the newest visible seal read so far.
    pub fn known_end(&self) -> Option<i64> {
        self.listed
            .iter()
            .filter_map(|s| s.detail.as_ref())
            .find_map(|d| d.next.filter(|_| d.visible))
    }

    /// Notes a seal whose object this partition's owner just stored, and forgets the older
    /// ones (the partition goes on after it), so that a long run keeps only the seals ahead.
    pub fn stored(&mut self, first: i64, tag: &str, seal: &Seal) {
        self.forget_below(first);
        let key = format!("{}{}/{tag}", self.prefix, rev(first));
        let entry = Listed {
            first,
            key,
            tag: tag.to_string(),
            modified: None,
            detail: Some(Detail {
                next: Some(seal.next_offset),
                object: seal.key.clone(),
                visible: true,
            }),
        };
        match self.listed.binary_search_by(|s| s.key.cmp(&entry.key)) {
            Ok(i) => self.listed[i] = entry,
            Err(i) => self.listed.insert(i, entry),
        }
    }

    /// Seals listed for objects starting at `first` other than the upload `tag`'s: earlier
    /// attempts at that object (litter once the key is known to be `tag`'s), or attempts at
    /// another key starting there (another time directory).
    pub fn others_at(&self, first: i64, tag: &str) -> Vec<String> {
        self.listed
            .iter()
            .filter(|s| s.first == first && s.tag != tag)
            .map(|s| s.key.clone())
            .collect()
    }

    /// Forgets a seal that was removed.
    pub fn removed(&mut self, key: &str) {
        self.listed.retain(|s| s.key != key);
    }

    fn forget_below(&mut self, offset: i64) {
        let before = self.listed.len();
        self.listed.retain(|s| s.first >= offset);
        if self.listed.len() == before {
            return;
        }
        // Every key of a first offset at or above `offset` sorts before this one.
        let bound = format!("{}{}0", self.prefix, rev(offset));
        let past = match &self.reached {
            Reached::Start => false,
            Reached::Key(k) => *k > bound,
            Reached::End => true,
        };
        if past {
            // What lies below is listed again if a question needs it.
            self.reached = Reached::Key(bound);
        }
    }

    async fn fetch(&mut self, store: &dyn ObjectStore, need: Need) -> Result<(), StoreError> {
        match need {
            Need::More => self.more(store).await,
            Need::Detail(i) => self.detail(store, i).await,
        }
    }

    async fn more(&mut self, store: &dyn ObjectStore) -> Result<(), StoreError> {
        let (after, max) = match &self.reached {
            Reached::Start => (None, FIRST_PAGE),
            Reached::Key(k) => (Some(k.clone()), PAGE),
            Reached::End => return Ok(()),
        };
        let page = store.list_page(&self.prefix, after.as_deref(), max).await?;
        self.reached = match page.last() {
            Some(last) if page.len() >= max => Reached::Key(last.key.clone()),
            _ => Reached::End,
        };
        for o in page {
            let Some((first, tag)) = parse_seal_key(&self.prefix, &o.key) else {
                continue;
            };
            if let Err(i) = self.listed.binary_search_by(|s| s.key.cmp(&o.key)) {
                self.listed.insert(
                    i,
                    Listed {
                        first,
                        key: o.key,
                        tag,
                        modified: o.last_modified,
                        detail: None,
                    },
                );
            }
        }
        Ok(())
    }

    async fn detail(&mut self, store: &dyn ObjectStore, i: usize) -> Result<(), StoreError> {
        let Some(s) = self.listed.get(i) else {
            return Ok(());
        };
        let seal = match store.get(&s.key).await {
            Ok(raw) => serde_json::from_slice::<Seal>(&raw).ok(),
            Err(e) if e.kind == ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let visible = match &seal {
            Some(seal) => seal_visible(store, seal, &s.tag).await?,
            None => false,
        };
        let old = s.modified.is_some_and(|m| {
            Utc::now() - m > chrono::Duration::from_std(self.litter_age).unwrap_or_default()
        });
        if !visible && old {
            // An upload that never made its object visible and is long over: litter.
            let _ = store.delete(&s.key).await;
        }
        let detail = Detail {
            next: seal.as_ref().map(|s| s.next_offset),
            object: seal.map(|s| s.key).unwrap_or_default(),
            visible,
        };
        if let Some(s) = self.listed.get_mut(i) {
            s.detail = Some(detail);
        }
        Ok(())
    }
}

/// The seal of the object under `key` starting at `first`, written by the upload `tag` (the
/// tag the stored object carries). A seal strata versions before the kept index left (a crash
/// between store and commit) is moved into the index.
pub(crate) async fn find_seal(
    store: &dyn ObjectStore,
    dir: &DumpDir,
    tp: &Tp,
    first: i64,
    key: &str,
    tag: &str,
) -> Result<Option<Seal>, StoreError> {
    let kept = seal_key(dir, tp, first, tag);
    let legacy = legacy_seal_key(dir, tp, first, tag);
    for k in [&kept, &legacy] {
        let raw = match store.get(k).await {
            Ok(raw) => raw,
            Err(e) if e.kind == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let Some(s) = serde_json::from_slice::<Seal>(&raw)
            .ok()
            .filter(|s| s.key == key)
        else {
            continue;
        };
        if *k == legacy {
            store.put(&kept, raw).await?;
            store.delete(&legacy).await?;
        }
        return Ok(Some(s));
    }
    Ok(None)
}

/// Whether the seal under `seal_key` is another attempt at the object under `key` (then,
/// once the key is known to be another upload's, it is litter).
pub(crate) async fn attempt_at(
    store: &dyn ObjectStore,
    seal_key: &str,
    key: &str,
) -> Result<bool, StoreError> {
    match store.get(seal_key).await {
        Ok(raw) => Ok(serde_json::from_slice::<Seal>(&raw).is_ok_and(|s| s.key == key)),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
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
            crc32c: vec![7],
            times: Some((1, 2)),
        }
    }

    fn listed(first: i64, next: Option<i64>, visible: bool) -> Listed {
        Listed {
            first,
            key: format!("d/.strata/index/t/0/{}/t{first}", rev(first)),
            tag: format!("t{first}"),
            modified: None,
            detail: Some(Detail {
                next,
                object: format!("o{first}"),
                visible,
            }),
        }
    }

    /// A listing that has more to give.
    const MORE: Option<&str> = Some("~");

    fn unread(first: i64) -> Listed {
        Listed {
            detail: None,
            ..listed(first, None, false)
        }
    }

    #[test]
    fn seal_keys_sort_newest_first_and_parse_back() {
        let dir = DumpDir::parse("backups/orders").unwrap();
        let tp = Tp::new("orders", 3);
        let k = seal_key(&dir, &tp, 42, "ino-77");
        assert_eq!(
            k,
            "backups/orders/.strata/index/orders/3/9223372036854775765/ino-77"
        );
        let prefix = partition_prefix(&dir, &tp);
        assert_eq!(parse_seal_key(&prefix, &k), Some((42, "ino-77".into())));
        let mut keys: Vec<String> = [0, 7, 1000, 999_999_999_999]
            .iter()
            .map(|f| seal_key(&dir, &tp, *f, "t"))
            .collect();
        keys.sort();
        let firsts: Vec<i64> = keys
            .iter()
            .filter_map(|k| parse_seal_key(&prefix, k).map(|(f, _)| f))
            .collect();
        assert_eq!(firsts, vec![999_999_999_999, 1000, 7, 0]);
        for bad in [
            format!("{prefix}123/t"),
            format!("{prefix}9223372036854775765"),
            format!("{prefix}9223372036854775765/"),
            format!("{prefix}9223372036854775765/t/more"),
            format!("{prefix}92233720368547757x5/t"),
            "other/9223372036854775765/t".to_string(),
        ] {
            assert_eq!(parse_seal_key(&prefix, &bad), None, "{bad}");
        }
        let file = k.rsplit('/').next().unwrap();
        assert!(crate::layout::ObjectName::parse(file).is_none());
        let s = seal(10);
        assert_eq!(serde_json::from_slice::<Seal>(&s.to_json()).unwrap(), s);
    }

    #[test]
    fn legacy_seal_keys_parse_back() {
        let dir = DumpDir::parse("backups/orders").unwrap();
        let tp = Tp::new("orders", 3);
        let k = legacy_seal_key(&dir, &tp, 42, "ino-77");
        assert_eq!(
            k,
            "backups/orders/.strata/seals/orders/3/00000000000000000042/ino-77"
        );
        assert_eq!(
            parse_legacy_seal_key(&dir, &k),
            Some((tp, 42, "ino-77".into()))
        );
        for bad in [
            "backups/orders/2026/12/02/orders+3+00000000000000000042.jsonl",
            "backups/orders/.strata/seals/orders/x/00000000000000000042/t",
            "backups/orders/.strata/seals/orders/3/00000000000000000042",
            "backups/orders/.strata/seals/orders/3/00000000000000000042/t/more",
            "other/.strata/seals/orders/3/00000000000000000042/t",
        ] {
            assert_eq!(parse_legacy_seal_key(&dir, bad), None, "{bad}");
        }
        // A seal written before the index kept sizes still reads.
        let old = br#"{"key":"k","last_offset":9,"next_offset":10,"records":3}"#;
        assert_eq!(serde_json::from_slice::<Seal>(old).unwrap().bytes, 0);
    }

    #[test]
    fn a_legacy_crash_seal_stays_while_its_stored_object_is_not_committed() {
        let s = seal(200);
        assert!(legacy_seal_is_litter(&s, "t1", None, None));
        assert!(legacy_seal_is_litter(&s, "t1", Some("t2"), Some(100)));
        assert!(!legacy_seal_is_litter(&s, "t1", Some("t1"), None));
        assert!(!legacy_seal_is_litter(&s, "t1", Some("t1"), Some(199)));
        assert!(legacy_seal_is_litter(&s, "t1", Some("t1"), Some(200)));
    }

    #[test]
    fn an_object_after_the_archive_is_clear() {
        // The partition's own last object ends where the next one starts.
        let l = [listed(500, Some(1000), true), listed(0, Some(500), true)];
        assert_eq!(decide_place(1000, &l, MORE), Ok(Place::Clear));
        assert_eq!(decide_place(1200, &l, MORE), Ok(Place::Clear));
        // Nothing archived at all.
        assert_eq!(decide_place(0, &[], None), Ok(Place::Clear));
    }

    #[test]
    fn an_object_inside_a_stored_one_adopts_it() {
        let l = [listed(500, Some(1000), true), listed(0, Some(500), true)];
        // Same first offset (a crash before the commit, a group reset to an object's start).
        assert_eq!(
            decide_place(500, &l, MORE),
            Ok(Place::Adopt {
                next: 1000,
                key: "o500".into()
            })
        );
        // Inside it (the group's offsets went back into the middle of an object).
        assert_eq!(
            decide_place(700, &l, MORE),
            Ok(Place::Adopt {
                next: 1000,
                key: "o500".into()
            })
        );
        assert_eq!(
            decide_place(0, &l, None),
            Ok(Place::Adopt {
                next: 500,
                key: "o0".into()
            })
        );
    }

    #[test]
    fn an_object_before_a_stored_one_must_end_before_it() {
        // A hole from 500 to 700 (the group had been moved forward once), reset to 0.
        let l = [listed(700, Some(1000), true), listed(0, Some(500), true)];
        assert_eq!(
            decide_place(520, &l, MORE),
            Ok(Place::Limit { before: 700 })
        );
        // The archive starts later than the object (a group that began at `latest`).
        let l = [listed(700, Some(1000), true), listed(650, Some(700), true)];
        assert_eq!(decide_place(10, &l, None), Ok(Place::Limit { before: 650 }));
    }

    #[test]
    fn seals_that_never_became_visible_are_passed_over() {
        // A crashed attempt at 600 under the stored object 0..1000: the stored one adopts.
        let l = [listed(600, Some(650), false), listed(0, Some(1000), true)];
        assert_eq!(
            decide_place(700, &l, None),
            Ok(Place::Adopt {
                next: 1000,
                key: "o0".into()
            })
        );
        // Only litter: clear.
        let l = [listed(600, Some(900), false)];
        assert_eq!(decide_place(700, &l, None), Ok(Place::Clear));
        assert_eq!(decide_end(&l, None), Ok(None));
        // An unreadable seal counts as litter.
        let l = [listed(600, None, true), listed(0, Some(500), true)];
        assert_eq!(decide_place(700, &l, None), Ok(Place::Clear));
        assert_eq!(decide_end(&l, None), Ok(Some(500)));
    }

    #[test]
    fn decisions_ask_for_what_they_lack() {
        assert_eq!(decide_place(700, &[], MORE), Err(Need::More));
        let l = [listed(800, Some(900), true), unread(600)];
        assert_eq!(decide_place(700, &l, None), Err(Need::Detail(1)));
        // Seals after the object need no reading: they only limit it.
        let l = [unread(800)];
        assert_eq!(decide_place(700, &l, MORE), Err(Need::More));
        assert_eq!(
            decide_place(700, &l, None),
            Ok(Place::Limit { before: 800 })
        );
        assert_eq!(decide_end(&l, None), Err(Need::Detail(0)));
        assert_eq!(decide_end(&[], MORE), Err(Need::More));
    }

    #[test]
    fn the_owner_notes_its_stored_objects_and_forgets_what_it_passed() {
        let dir = DumpDir::parse("d").unwrap();
        let tp = Tp::new("t", 0);
        let mut ix = PartitionIndex::new(&dir, &tp, Duration::from_secs(60));
        ix.listed = vec![listed(0, Some(500), true)];
        ix.reached = Reached::End;
        ix.stored(500, "b", &seal(900));
        assert_eq!(ix.known_end(), Some(900));
        assert_eq!(ix.listed.len(), 1, "only the newest of its own is kept");
        assert_eq!(
            ix.reached,
            Reached::Key("d/.strata/index/t/0/92233720368547753070".into()),
            "what lies below is listed again when asked"
        );
        assert_eq!(
            decide_place(900, &ix.listed, ix.listed_to()),
            Ok(Place::Clear)
        );
        // Seals ahead of it (an archive the group went back over) stay.
        let mut ix = PartitionIndex::new(&dir, &tp, Duration::from_secs(60));
        ix.listed = vec![listed(700, Some(1000), true)];
        ix.reached = Reached::End;
        ix.stored(0, "a", &seal(500));
        assert_eq!(ix.listed.len(), 2);
        assert_eq!(ix.reached, Reached::End);
        assert_eq!(
            decide_place(500, &ix.listed, ix.listed_to()),
            Ok(Place::Limit { before: 700 })
        );
    }

    #[test]
    fn seals_beyond_the_listing_are_no_boundary_yet() {
        // Listed down to 9985 only: an own seal at 0 must not hide what lies between.
        let l = [listed(9985, Some(9990), true), listed(0, Some(500), true)];
        let to = l[0].key.clone();
        assert_eq!(decide_place(500, &l, Some(&to)), Err(Need::More));
        assert_eq!(decide_place(500, &l, Some("")), Err(Need::More));
    }
}
