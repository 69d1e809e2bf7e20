//! The offset arithmetic of an archived partition (pure): what every offset from the archive's
//! lowest to its highest is (archived, deleted, retention gap, pruned, pending or unexplained),
//! and which offsets of a cluster's `[low, high)` the archive lacks.

use serde::Serialize;

/// What a stretch of a partition's offsets is, strongest first: where spans overlap, the
/// stronger kind names the offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Held by a stored object.
    Archived,
    /// Described by a seal whose object is gone.
    Deleted,
    /// Described by a seal whose upload has not finished (younger than `limits.leftover_age`).
    Pending,
    /// Deleted by the topic's retention before a dump got to them (a recorded gap).
    Retention,
    /// Removed by `strata archive prune`.
    Pruned,
    /// Between two stretches, and nothing says why: offsets without records (transaction
    /// markers, compaction) or objects removed together with their seals.
    Unexplained,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Archived,
        Kind::Deleted,
        Kind::Pending,
        Kind::Retention,
        Kind::Pruned,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Archived => "archived",
            Kind::Deleted => "deleted",
            Kind::Pending => "pending",
            Kind::Retention => "retention",
            Kind::Pruned => "pruned",
            Kind::Unexplained => "unexplained",
        }
    }
}

/// Offsets `from..to` (end exclusive) of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub from: i64,
    pub to: i64,
    pub kind: Kind,
}

impl Span {
    pub fn new(from: i64, to: i64, kind: Kind) -> Self {
        Self { from, to, kind }
    }
}

/// Names every offset from the lowest `from` to the highest `to` of `spans` by the strongest
/// kind covering it ([`Kind::Unexplained`] where none does), neighbours of one kind merged.
/// Empty spans are ignored. O(n log n) in the number of spans.
pub fn sweep(spans: &[Span]) -> Vec<Span> {
    let mut events: Vec<(i64, usize, i32)> = Vec::with_capacity(spans.len() * 2);
    for s in spans.iter().filter(|s| s.to > s.from) {
        // Unexplained is what no span covers: as a span it adds nothing.
        let Some(k) = Kind::ALL.iter().position(|k| *k == s.kind) else {
            continue;
        };
        events.push((s.from, k, 1));
        events.push((s.to, k, -1));
    }
    events.sort_unstable();
    let mut open = [0i32; Kind::ALL.len()];
    let mut out: Vec<Span> = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let at = events[i].0;
        while i < events.len() && events[i].0 == at {
            open[events[i].1] += events[i].2;
            i += 1;
        }
        let Some(&(next, _, _)) = events.get(i) else {
            break;
        };
        let kind = open
            .iter()
            .position(|n| *n > 0)
            .map_or(Kind::Unexplained, |k| Kind::ALL[k]);
        match out.last_mut() {
            Some(last) if last.kind == kind && last.to == at => last.to = next,
            _ => out.push(Span::new(at, next, kind)),
        }
    }
    out
}

/// Where offsets an archive lacks lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// Before the archive's first archived offset (or no offset archived at all).
    Head,
    /// Between archived stretches, and nothing says why.
    Inside,
    /// After the archive's last archived offset.
    Tail,
    /// Offsets of objects whose seals remain but which are gone.
    Deleted,
    /// Offsets of an upload that has not finished yet.
    Pending,
}

/// Offsets `from..to` a cluster had that the archive lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uncovered {
    pub from: i64,
    pub to: i64,
    pub place: Place,
}

/// The offsets of `[low, high)` that `stretches` (from [`sweep`]) do not account for:
/// anything but archived, retention and pruned offsets.
pub fn uncovered(stretches: &[Span], low: i64, high: i64) -> Vec<Uncovered> {
    let accounted = |k: Kind| matches!(k, Kind::Archived | Kind::Retention | Kind::Pruned);
    let first = stretches
        .iter()
        .find(|s| s.kind == Kind::Archived)
        .map(|s| s.from);
    let last = stretches
        .iter()
        .rev()
        .find(|s| s.kind == Kind::Archived)
        .map(|s| s.to);
    let place_of = |at: i64, kind: Kind| match kind {
        Kind::Deleted => Place::Deleted,
        Kind::Pending => Place::Pending,
        _ => match (first, last) {
            (Some(f), Some(l)) if at >= f && at < l => Place::Inside,
            (_, Some(l)) if at >= l => Place::Tail,
            _ => Place::Head,
        },
    };
    let mut out: Vec<Uncovered> = Vec::new();
    let mut push = |from: i64, to: i64, kind: Kind| {
        if to <= from {
            return;
        }
        let place = place_of(from, kind);
        match out.last_mut() {
            Some(u) if u.to == from && u.place == place => u.to = to,
            _ => out.push(Uncovered { from, to, place }),
        }
    };
    let mut at = low;
    for s in stretches {
        if s.to <= at || s.from >= high {
            continue;
        }
        // Offsets before this stretch that no stretch covers.
        if s.from > at {
            push(at, s.from.min(high), Kind::Unexplained);
            at = s.from;
        }
        let end = s.to.min(high);
        if !accounted(s.kind) {
            push(at, end, s.kind);
        }
        at = end;
        if at >= high {
            break;
        }
    }
    push(at, high, Kind::Unexplained);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use Kind::*;

    fn s(from: i64, to: i64, kind: Kind) -> Span {
        Span::new(from, to, kind)
    }

    #[test]
    fn contiguous_objects_merge_and_holes_are_unexplained() {
        let got = sweep(&[
            s(0, 100, Archived),
            s(100, 250, Archived),
            s(260, 300, Archived),
        ]);
        assert_eq!(
            got,
            vec![
                s(0, 250, Archived),
                s(250, 260, Unexplained),
                s(260, 300, Archived)
            ]
        );
        assert_eq!(sweep(&[]), vec![]);
        assert_eq!(
            sweep(&[s(5, 5, Archived)]),
            vec![],
            "empty spans count for nothing"
        );
    }

    #[test]
    fn gaps_deleted_objects_and_pruning_name_their_offsets() {
        let got = sweep(&[
            s(0, 100, Pruned),
            s(100, 200, Archived),
            s(200, 300, Deleted),
            s(300, 350, Retention),
            s(350, 400, Archived),
            s(400, 450, Pending),
        ]);
        assert_eq!(
            got.iter()
                .map(|x| (x.from, x.to, x.kind))
                .collect::<Vec<_>>(),
            vec![
                (0, 100, Pruned),
                (100, 200, Archived),
                (200, 300, Deleted),
                (300, 350, Retention),
                (350, 400, Archived),
                (400, 450, Pending)
            ]
        );
    }

    #[test]
    fn the_stronger_kind_wins_where_spans_overlap() {
        // A gap recorded over offsets a group that went back archived after all; a seal of a
        // deleted object under a stored one's (two attempts at one range).
        let got = sweep(&[
            s(0, 100, Retention),
            s(50, 150, Archived),
            s(120, 200, Deleted),
        ]);
        assert_eq!(
            got,
            vec![
                s(0, 50, Retention),
                s(50, 150, Archived),
                s(150, 200, Deleted)
            ]
        );
        // Overlapping objects (an at-least-once archive) are one stretch.
        assert_eq!(
            sweep(&[s(0, 100, Archived), s(50, 120, Archived)]),
            vec![s(0, 120, Archived)]
        );
    }

    #[test]
    fn what_the_cluster_had_and_the_archive_lacks() {
        let st = sweep(&[
            s(10, 100, Archived),
            s(100, 120, Retention),
            s(130, 200, Archived),
            s(200, 220, Deleted),
            s(220, 300, Archived),
        ]);
        let got = uncovered(&st, 0, 320);
        assert_eq!(
            got,
            vec![
                Uncovered {
                    from: 0,
                    to: 10,
                    place: Place::Head
                },
                Uncovered {
                    from: 120,
                    to: 130,
                    place: Place::Inside
                },
                Uncovered {
                    from: 200,
                    to: 220,
                    place: Place::Deleted
                },
                Uncovered {
                    from: 300,
                    to: 320,
                    place: Place::Tail
                },
            ]
        );
        // The cluster's range inside the archive: nothing lacks.
        assert_eq!(uncovered(&st, 20, 110), vec![]);
        assert_eq!(uncovered(&st, 0, 0), vec![]);
        // Clipped to the cluster's range.
        assert_eq!(
            uncovered(&st, 125, 210),
            vec![
                Uncovered {
                    from: 125,
                    to: 130,
                    place: Place::Inside
                },
                Uncovered {
                    from: 200,
                    to: 210,
                    place: Place::Deleted
                }
            ]
        );
    }

    #[test]
    fn pruned_offsets_are_accounted_for_and_an_empty_archive_lacks_everything() {
        let st = sweep(&[s(0, 500, Pruned), s(500, 600, Archived)]);
        assert_eq!(uncovered(&st, 0, 600), vec![]);
        assert_eq!(
            uncovered(&[], 5, 9),
            vec![Uncovered {
                from: 5,
                to: 9,
                place: Place::Head
            }]
        );
        // Only a pending upload: its offsets are pending, the rest head.
        let st = sweep(&[s(40, 60, Pending)]);
        assert_eq!(
            uncovered(&st, 0, 60),
            vec![
                Uncovered {
                    from: 0,
                    to: 40,
                    place: Place::Head
                },
                Uncovered {
                    from: 40,
                    to: 60,
                    place: Place::Pending
                }
            ]
        );
    }
}
