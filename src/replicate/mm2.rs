//! MirrorMaker 2's bookkeeping records, byte for byte, so that MirrorMaker 2's own tools
//! (`RemoteClusterUtils.translateOffsets`) read what strata writes: offset syncs (where a source
//! record landed in the target) and checkpoints (a consumer group's position translated to the
//! target). Also the translation itself (MirrorMaker 2's rule: never past a record not yet
//! replicated). Pure; the layouts are Kafka's `Struct` encoding: big-endian integers, strings as
//! an int16 length and UTF-8, fields in schema order, no framing.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// Why a record is not an offset sync or checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a MirrorMaker 2 {what}: {why}")]
pub struct FormatError {
    what: &'static str,
    why: String,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Kafka topic names and group ids are far below i16::MAX bytes.
    let len = s.len().min(i16::MAX as usize);
    out.extend_from_slice(&(len as i16).to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..len]);
}

struct Reader<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if self.b.len() < n {
            return Err(FormatError {
                what: self.what,
                why: format!("{} bytes left where {n} are needed", self.b.len()),
            });
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16, FormatError> {
        Ok(i16::from_be_bytes(
            self.take(2)?.try_into().unwrap_or_default(),
        ))
    }

    fn i32(&mut self) -> Result<i32, FormatError> {
        Ok(i32::from_be_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }

    fn i64(&mut self) -> Result<i64, FormatError> {
        Ok(i64::from_be_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }

    fn string(&mut self) -> Result<String, FormatError> {
        let n = self.i16()?;
        if n < 0 {
            return Err(FormatError {
                what: self.what,
                why: "a null string".into(),
            });
        }
        let raw = self.take(n as usize)?;
        String::from_utf8(raw.to_vec()).map_err(|e| FormatError {
            what: self.what,
            why: e.to_string(),
        })
    }
}

/// Where a source record landed: written to `mm2-offset-syncs.<alias>.internal`, partition 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetSync {
    /// The source topic (not renamed) and partition.
    pub topic: String,
    pub partition: i32,
    pub upstream: i64,
    pub downstream: i64,
}

impl OffsetSync {
    pub fn key(&self) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.topic.len() + 6);
        put_str(&mut k, &self.topic);
        k.extend_from_slice(&self.partition.to_be_bytes());
        k
    }

    pub fn value(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16);
        v.extend_from_slice(&self.upstream.to_be_bytes());
        v.extend_from_slice(&self.downstream.to_be_bytes());
        v
    }

    pub fn parse(key: &[u8], value: &[u8]) -> Result<Self, FormatError> {
        let mut k = Reader {
            b: key,
            what: "offset sync key",
        };
        let (topic, partition) = (k.string()?, k.i32()?);
        let mut v = Reader {
            b: value,
            what: "offset sync value",
        };
        Ok(Self {
            topic,
            partition,
            upstream: v.i64()?,
            downstream: v.i64()?,
        })
    }
}

/// A consumer group's position, translated: written to `<source alias>.checkpoints.internal` on
/// the target, partition 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub group: String,
    /// The target topic (renamed as replicated) and partition.
    pub topic: String,
    pub partition: i32,
    pub upstream: i64,
    /// Never negative: Kafka's reader refuses it.
    pub downstream: i64,
    pub metadata: String,
}

/// The checkpoint value format version MirrorMaker 2 writes and reads.
const CHECKPOINT_VERSION: i16 = 0;

impl Checkpoint {
    pub fn key(&self) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.group.len() + self.topic.len() + 8);
        put_str(&mut k, &self.group);
        put_str(&mut k, &self.topic);
        k.extend_from_slice(&self.partition.to_be_bytes());
        k
    }

    pub fn value(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(20 + self.metadata.len());
        v.extend_from_slice(&CHECKPOINT_VERSION.to_be_bytes());
        v.extend_from_slice(&self.upstream.to_be_bytes());
        v.extend_from_slice(&self.downstream.to_be_bytes());
        put_str(&mut v, &self.metadata);
        v
    }

    pub fn parse(key: &[u8], value: &[u8]) -> Result<Self, FormatError> {
        let mut k = Reader {
            b: key,
            what: "checkpoint key",
        };
        let (group, topic, partition) = (k.string()?, k.string()?, k.i32()?);
        let mut v = Reader {
            b: value,
            what: "checkpoint value",
        };
        let version = v.i16()?;
        if version != CHECKPOINT_VERSION {
            return Err(FormatError {
                what: "checkpoint value",
                why: format!("version {version}"),
            });
        }
        Ok(Self {
            group,
            topic,
            partition,
            upstream: v.i64()?,
            downstream: v.i64()?,
            metadata: v.string()?,
        })
    }
}

/// Syncs kept per partition older than every group's position: the newest, and older ones
/// thinned out so that their upstream offsets stay spread over the partition's history (a
/// group far behind still translates).
const KEPT: usize = 64;

/// Syncs kept per partition at or above the slowest group's position: all of them up to this
/// many (16 bytes each), so a group between its position and the head translates to within
/// one sync interval; beyond it, thinned as history is, but never the sync a group needs now.
const DENSE: usize = 1024;

/// The offset syncs of a flow as read from its syncs topic, and the translation of group
/// positions through them.
#[derive(Debug, Default)]
pub struct SyncStore {
    by_partition: BTreeMap<(String, i32), Partition>,
}

#[derive(Debug, Default)]
struct Partition {
    /// (upstream, downstream), upstream ascending.
    syncs: VecDeque<(i64, i64)>,
    /// The groups' positions on the source (sorted), as last read.
    pins: Vec<i64>,
}

/// Drops every other sync of the older half of `q[from..]`, except those `keep` names by their
/// upstream offset.
fn thin(q: &mut VecDeque<(i64, i64)>, from: usize, to: usize, keep: &[i64]) {
    let older = (to - from) / 2;
    let mut i = 0;
    q.retain(|(u, _)| {
        let at = i;
        i += 1;
        at < from || at >= from + older || (at - from).is_multiple_of(2) || keep.contains(u)
    });
}

impl Partition {
    /// The upstream offsets of the syncs groups translate through now: the newest at or below
    /// each group's position.
    fn needed(&self) -> Vec<i64> {
        let mut out: Vec<i64> = self
            .pins
            .iter()
            .filter_map(|&p| self.syncs.iter().rev().find(|(u, _)| *u <= p).map(|s| s.0))
            .collect();
        out.dedup();
        out
    }

    fn bound(&mut self) {
        let floor = self.pins.first().copied().unwrap_or(i64::MAX);
        let split = self.syncs.partition_point(|(u, _)| *u < floor);
        if split > KEPT {
            // The newest of history is in its newer half, which stays: the slowest group's.
            thin(&mut self.syncs, 0, split, &[]);
        }
        let split = self.syncs.partition_point(|(u, _)| *u < floor);
        if self.syncs.len() - split > DENSE {
            let keep = self.needed();
            let len = self.syncs.len();
            thin(&mut self.syncs, split, len, &keep);
        }
    }
}

impl SyncStore {
    /// Takes a sync read from the topic (in order).
    pub fn add(&mut self, s: &OffsetSync) {
        let p = self
            .by_partition
            .entry((s.topic.clone(), s.partition))
            .or_default();
        // A sync below the newest means the source was rewound: older syncs are void.
        if p.syncs.back().is_some_and(|(u, _)| s.upstream < *u) {
            p.syncs.clear();
        }
        p.syncs.push_back((s.upstream, s.downstream));
        p.bound();
    }

    /// Sets the groups' current positions on the source (replacing the earlier ones): syncs
    /// from the slowest group of a partition on are kept densely, so translation stays within
    /// one sync interval as the groups move on.
    pub fn pin(&mut self, positions: HashMap<(String, i32), Vec<i64>>) {
        for p in self.by_partition.values_mut() {
            p.pins.clear();
        }
        for (tp, mut at) in positions {
            at.sort_unstable();
            at.dedup();
            self.by_partition.entry(tp).or_default().pins = at;
        }
    }

    /// The target offset a group at `upstream` (the next record it reads on the source) may
    /// resume from without missing a record: the newest sync at or before it, plus one when the
    /// group is past that record. `None` when no sync is old enough (the group is behind
    /// everything known).
    pub fn translate(&self, topic: &str, partition: i32, upstream: i64) -> Option<i64> {
        let q = &self
            .by_partition
            .get(&(topic.to_string(), partition))?
            .syncs;
        let &(u, d) = q.iter().rev().find(|(u, _)| *u <= upstream)?;
        Some(if upstream == u { d } else { d + 1 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    // Vectors checked against Kafka 4.3.1's OffsetSync and Checkpoint classes.
    #[test]
    fn offset_syncs_are_mirror_makers_bytes() {
        let s = OffsetSync {
            topic: "test".into(),
            partition: 0,
            upstream: 5,
            downstream: 3,
        };
        assert_eq!(hex(&s.key()), "00 04 74 65 73 74 00 00 00 00");
        assert_eq!(
            hex(&s.value()),
            "00 00 00 00 00 00 00 05 00 00 00 00 00 00 00 03"
        );
        assert_eq!(OffsetSync::parse(&s.key(), &s.value()).unwrap(), s);
        assert!(OffsetSync::parse(&s.key(), &s.value()[..15]).is_err());
    }

    #[test]
    fn checkpoints_are_mirror_makers_bytes() {
        let mut c = Checkpoint {
            group: "g1".into(),
            topic: "A.test".into(),
            partition: 0,
            upstream: 10,
            downstream: 7,
            metadata: String::new(),
        };
        assert_eq!(
            hex(&c.key()),
            "00 02 67 31 00 06 41 2e 74 65 73 74 00 00 00 00"
        );
        assert_eq!(
            hex(&c.value()),
            "00 00 00 00 00 00 00 00 00 0a 00 00 00 00 00 00 00 07 00 00"
        );
        c.metadata = "meta".into();
        assert!(hex(&c.value()).ends_with("00 04 6d 65 74 61"));
        assert_eq!(Checkpoint::parse(&c.key(), &c.value()).unwrap(), c);
        let mut wrong = c.value();
        wrong[1] = 1;
        assert!(Checkpoint::parse(&c.key(), &wrong).is_err());
    }

    // The table checked against Kafka 4.3.1's OffsetSyncStore.translateDownstream.
    #[test]
    fn translation_never_skips_a_record() {
        let mut st = SyncStore::default();
        for (u, d) in [(10, 0), (200, 150), (400, 320)] {
            st.add(&OffsetSync {
                topic: "t".into(),
                partition: 0,
                upstream: u,
                downstream: d,
            });
        }
        let cases = [
            (0, None),
            (9, None),
            (10, Some(0)),
            (11, Some(1)),
            (199, Some(1)),
            (200, Some(150)),
            (201, Some(151)),
            (399, Some(151)),
            (400, Some(320)),
            (401, Some(321)),
            (1000, Some(321)),
        ];
        for (g, want) in cases {
            assert_eq!(st.translate("t", 0, g), want, "group at {g}");
        }
        assert_eq!(st.translate("t", 1, 100), None);
        assert_eq!(st.translate("other", 0, 100), None);
    }

    #[test]
    fn many_syncs_keep_old_history_and_a_rewind_starts_over() {
        let mut st = SyncStore::default();
        for i in 0..1000 {
            st.add(&OffsetSync {
                topic: "t".into(),
                partition: 0,
                upstream: i * 10,
                downstream: i * 10 + 5,
            });
        }
        let q = &st.by_partition[&("t".to_string(), 0)].syncs;
        assert!(q.len() <= KEPT);
        // The newest is exact; an old position still translates (to an earlier sync).
        assert_eq!(st.translate("t", 0, 9990), Some(9995));
        let old = st.translate("t", 0, 5000).unwrap();
        assert!(old <= 5006, "never past the record: {old}");
        st.add(&OffsetSync {
            topic: "t".into(),
            partition: 0,
            upstream: 3,
            downstream: 20000,
        });
        assert_eq!(st.translate("t", 0, 5000), Some(20001));
        assert_eq!(st.translate("t", 0, 2), None);
    }

    fn pins(at: &[i64]) -> HashMap<(String, i32), Vec<i64>> {
        HashMap::from([(("t".to_string(), 0), at.to_vec())])
    }

    fn feed(st: &mut SyncStore, from: i64, to: i64, every: i64) {
        for u in (from..to).step_by(every as usize) {
            st.add(&OffsetSync {
                topic: "t".into(),
                partition: 0,
                upstream: u,
                downstream: u + 7,
            });
        }
    }

    #[test]
    fn a_group_behind_the_head_translates_within_one_sync_interval() {
        // Unpinned, a position halfway through 65,000 records of syncs every 100 lands on
        // thinned history, thousands of records back (MirrorMaker 2's behaviour).
        let mut st = SyncStore::default();
        feed(&mut st, 0, 65_000, 100);
        let far = 32_550 + 7 - st.translate("t", 0, 32_550).unwrap();
        assert!(far > 1000, "{far}");
        // Pinned before the syncs arrive, as a round reads the groups first.
        let mut st = SyncStore::default();
        st.pin(pins(&[32_550, 64_999, 10]));
        feed(&mut st, 0, 65_000, 100);
        for g in [10, 32_550, 64_999] {
            let behind = g + 7 - st.translate("t", 0, g).unwrap();
            assert!((0..100).contains(&behind), "group at {g}: {behind} behind");
        }
        // A group moving on from its pin still finds dense syncs.
        let behind = 50_050 + 7 - st.translate("t", 0, 50_050).unwrap();
        assert!((0..100).contains(&behind), "{behind}");
        // Bounded: history thinned below the slowest group, the rest at most DENSE.
        let q = &st.by_partition[&("t".to_string(), 0)].syncs;
        assert!(q.len() <= KEPT + DENSE, "{}", q.len());
    }

    #[test]
    fn beyond_the_dense_bound_the_syncs_groups_need_stay() {
        let mut st = SyncStore::default();
        st.pin(pins(&[0, 12_345, 150_001]));
        feed(&mut st, 0, 200_000, 10);
        let q = &st.by_partition[&("t".to_string(), 0)].syncs;
        assert!(q.len() <= KEPT + DENSE + 3, "{}", q.len());
        for g in [0, 12_345, 150_001, 199_995] {
            let behind = g + 7 - st.translate("t", 0, g).unwrap();
            assert!((0..10).contains(&behind), "group at {g}: {behind} behind");
        }
    }
}
