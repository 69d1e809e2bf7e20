//! `[[tasks]]`: every entry checked by its type (`dump.rs`, `replicate.rs`), with the keys of
//! another type refused as such; then what holds across entries: how many, unique names.

use super::*;

/// Validated tasks of a file, by type.
pub(super) struct Tasks {
    pub dump: Vec<DumpTask>,
    pub replicate: Vec<ReplicateTask>,
}

pub(super) fn tasks(
    cx: &mut Ctx<'_>,
    raw: &[RawTask],
    store: &StoreConfig,
    limits: &Limits,
) -> Tasks {
    if raw.len() > limits.max_tasks as usize {
        cx.push(
            "tasks",
            format!(
                "{} tasks, but at most {} are allowed per file (limits.max_tasks); split them over several files or processes",
                raw.len(),
                limits.max_tasks
            ),
        );
    }
    let mut out = Tasks {
        dump: Vec::new(),
        replicate: Vec::new(),
    };
    for (i, t) in raw.iter().enumerate() {
        let k = format!("tasks[{i}]");
        match t {
            RawTask::Dump(d) => {
                keys(cx, &k, t.kind(), &d.unknown);
                out.dump.extend(dump::task(cx, &k, d, store));
            }
            RawTask::Replicate(r) => {
                keys(cx, &k, t.kind(), &r.unknown);
                out.replicate.extend(replicate::task(cx, &k, r));
            }
            RawTask::Other(kind) => cx.push(
                format!("{k}.type"),
                format!("{kind:?} is not a task type; use {}", type_names()),
            ),
        }
    }
    dump::check_overlaps(cx, &out.dump);
    let names = out.dump.iter().map(|t| &t.name);
    unique_names(cx, names.chain(out.replicate.iter().map(|t| &t.name)));
    out
}

/// `"dump" or "replicate"`.
fn type_names() -> String {
    let names: Vec<String> = TASK_TYPES.iter().map(|(t, _)| format!("{t:?}")).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// The keys a task of type `kind` may have: `type` and its struct's.
pub(in crate::config) fn keys_of(kind: &str) -> Vec<&'static str> {
    let own = TASK_TYPES
        .iter()
        .find(|(t, _)| *t == kind)
        .map_or(&[][..], |(_, keys)| keys);
    [&["type"][..], own].concat()
}

/// A task's keys its type does not know: another type's are refused as such, the rest get a
/// "did you mean" among its own.
fn keys(cx: &mut Ctx<'_>, k: &str, kind: &str, unknown: &Unknown) {
    let mut rest = Unknown::new();
    for (key, value) in unknown {
        let other = TASK_TYPES
            .iter()
            .find(|(t, keys)| *t != kind && keys.contains(&key.as_str()));
        match other {
            Some((other, _)) => cx.push(
                format!("{k}.{key}"),
                format!("applies to type = \"{other}\" tasks; this is a {kind} task: remove it"),
            ),
            None => {
                rest.insert(key.clone(), value.clone());
            }
        }
    }
    cx.unknown(k, &rest, &keys_of(kind));
}

/// Each task's name names its consumer groups, so no two may share one.
fn unique_names<'a>(cx: &mut Ctx<'_>, names: impl Iterator<Item = &'a TaskName>) {
    let mut names: Vec<&str> = names.map(TaskName::as_str).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        cx.push(
            "tasks",
            format!(
                "two tasks are named {:?}; names must be unique (each names its consumer groups)",
                w[0]
            ),
        );
    }
}

/// `name`, which every task type has.
pub(super) fn name(cx: &mut Ctx<'_>, k: &str, raw: &Option<String>) -> Option<TaskName> {
    let key = format!("{k}.name");
    match cx.text(&key, raw) {
        None => {
            cx.push(
                key,
                "is missing; every task needs a name (it also names the consumer group)",
            );
            None
        }
        Some(n) => TaskName::parse(&n).map_err(|m| cx.push(key, m)).ok(),
    }
}

/// `topic_refresh_secs`: how often a task looks for new topics.
pub(super) fn topic_refresh(cx: &mut Ctx<'_>, k: &str, raw: Option<u64>) -> Duration {
    let secs = raw.unwrap_or(defaults::TOPIC_REFRESH_SECS);
    if secs == 0 {
        cx.push(format!("{k}.topic_refresh_secs"), "must be at least 1");
    }
    Duration::from_secs(secs.max(1))
}
