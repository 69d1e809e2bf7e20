//! "Parameters cannot change after creation": a dump task's layout (format, compression, time
//! directories, text options) is stored beside its archive at first start, and a later start
//! with other values is refused. Mixing layouts under one name would break the rule that a
//! replay overwrites instead of duplicating (a replay would write other keys).

use crate::config::DumpTask;
use crate::store::{ErrorKind, Finish, ObjectStore, StoreError};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// What a task's archive layout depends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub format: String,
    pub compression: String,
    pub time_directory: String,
    pub time_zone: String,
    pub time_source: String,
    /// Text only: the record delimiter and the key separator (`None`: keys not stored).
    pub record_delimiter: Option<String>,
    pub key_separator: Option<String>,
    /// `Some("tables")` for a CDC task (absent in layouts stored before CDC tasks existed).
    #[serde(default)]
    pub cdc: Option<String>,
}

impl Layout {
    pub fn of(task: &DumpTask) -> Self {
        let text = task.format.kind == crate::format::FormatKind::Text;
        Self {
            format: task.format.kind.as_str().to_string(),
            compression: task.format.compression.as_str().to_string(),
            time_directory: task.time_directory.to_string(),
            time_zone: task.time_zone.to_string(),
            time_source: task.time_source.as_str().to_string(),
            record_delimiter: text.then(|| task.format.text.delimiter.to_string()),
            key_separator: text
                .then(|| {
                    task.format
                        .text
                        .key_separator
                        .as_ref()
                        .map(|s| String::from_utf8_lossy(s).into_owned())
                })
                .flatten(),
            cdc: task.cdc.as_ref().map(|_| "tables".to_string()),
        }
    }

    /// The parameters by name, as messages show them.
    fn fields(&self) -> [(&'static str, String); 8] {
        let show = |v: &Option<String>| v.as_ref().map_or("none".to_string(), |s| format!("{s:?}"));
        [
            ("format", format!("{:?}", self.format)),
            ("compression", format!("{:?}", self.compression)),
            ("time_directory", format!("{:?}", self.time_directory)),
            ("time_zone", format!("{:?}", self.time_zone)),
            ("time_source", format!("{:?}", self.time_source)),
            ("record_delimiter", show(&self.record_delimiter)),
            ("store_key/key_separator", show(&self.key_separator)),
            ("cdc", show(&self.cdc)),
        ]
    }

    /// `key: stored "a", config "b"` for every parameter that differs.
    pub fn differences(&self, config: &Layout) -> Vec<String> {
        self.fields()
            .into_iter()
            .zip(config.fields())
            .filter(|((_, stored), (_, now))| stored != now)
            .map(|((key, stored), (_, now))| format!("{key}: stored {stored}, config {now}"))
            .collect()
    }
}

/// Where a task's layout is stored: `<directory>/.strata/tasks/<name>.json`.
pub fn key(task: &DumpTask) -> String {
    format!(
        "{}.strata/tasks/{}.json",
        task.directory.prefix(),
        task.name
    )
}

/// Why a task may not start with its configured layout.
#[derive(Debug, thiserror::Error)]
pub enum ParamsError {
    #[error("task {task}: its parameters cannot change after creation, and {location} records other ones ({changes}); create a new task (a new name) for the new parameters, or put the old values back")]
    Changed {
        task: String,
        location: String,
        changes: String,
    },
    #[error("task {task}: {location} is not a task parameter record ({detail}); strata writes it at a task's first start: remove it only if no archive of the task exists")]
    Unreadable {
        task: String,
        location: String,
        detail: String,
    },
    #[error("task {task}: {source}")]
    Store {
        task: String,
        #[source]
        source: StoreError,
    },
}

/// The stored layout of `task`, if any.
pub async fn stored(
    store: &dyn ObjectStore,
    task: &DumpTask,
) -> Result<Option<Layout>, ParamsError> {
    let k = key(task);
    match store.get(&k).await {
        Ok(data) => serde_json::from_slice(&data)
            .map(Some)
            .map_err(|e| ParamsError::Unreadable {
                task: task.name.to_string(),
                location: store.location(&k),
                detail: e.to_string(),
            }),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ParamsError::Store {
            task: task.name.to_string(),
            source,
        }),
    }
}

/// Compares the configured layout with the stored one; records it at the first start.
pub async fn check_or_record(store: &dyn ObjectStore, task: &DumpTask) -> Result<(), ParamsError> {
    let now = Layout::of(task);
    let err = |source| ParamsError::Store {
        task: task.name.to_string(),
        source,
    };
    let stored = match stored(store, task).await? {
        Some(s) => s,
        None => {
            let body = serde_json::to_vec_pretty(&now).map_err(|e| ParamsError::Unreadable {
                task: task.name.to_string(),
                location: store.location(&key(task)),
                detail: e.to_string(),
            })?;
            let mut up = store.put_multipart(&key(task)).await.map_err(err)?;
            up.write(Bytes::from(body)).await.map_err(err)?;
            // Another member may record the same task at the same moment: first one wins, and
            // both then compare against what was stored.
            if up.finish(Finish::CreateNew).await.map_err(err)? == crate::store::Finished::Stored {
                return Ok(());
            }
            stored(store, task).await?.unwrap_or_else(|| now.clone())
        }
    };
    let changes = stored.differences(&now);
    if changes.is_empty() {
        return Ok(());
    }
    Err(ParamsError::Changed {
        task: task.name.to_string(),
        location: store.location(&key(task)),
        changes: changes.join("; "),
    })
}

/// For `strata validate`: each dump task's configured layout against the stored one, as report
/// lines, and whether any differs. A store that cannot be read within a few seconds is reported,
/// not treated as a difference.
pub async fn report(tasks: &[DumpTask]) -> (String, bool) {
    use std::fmt::Write;
    let checks = tasks.iter().map(|task| async move {
        let read = async {
            let store = crate::store::open(&task.store)
                .await
                .map_err(|source| ParamsError::Store {
                    task: task.name.to_string(),
                    source,
                })?;
            let stored = stored(store.as_ref(), task).await?;
            Ok::<_, ParamsError>((store.location(&key(task)), stored))
        };
        match tokio::time::timeout(std::time::Duration::from_secs(10), read).await {
            Err(_) => (false, "not checked: the store did not answer within 10 s".to_string()),
            Ok(Err(e)) => (false, format!("not checked: {e}")),
            Ok(Ok((_, None))) => (false, "none stored yet (recorded at the first start)".to_string()),
            Ok(Ok((location, Some(s)))) => {
                let d = s.differences(&Layout::of(task));
                if d.is_empty() {
                    (false, format!("match {location}"))
                } else {
                    (true, format!("CHANGED since creation ({location}): {}; parameters cannot change after creation: create a new task (a new name), or put the old values back", d.join("; ")))
                }
            }
        }
    });
    let mut out = String::new();
    let mut changed = false;
    for (task, (differs, line)) in tasks.iter().zip(futures::future::join_all(checks).await) {
        changed |= differs;
        let _ = writeln!(out, "  - {}: {line}", task.name);
    }
    (out, changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn task(extra: &str) -> DumpTask {
        Config::from_toml(
            &format!("[[tasks]]\nname = \"orders\"\ntopics = [\"o\"]\ndirectory = \"d\"\n{extra}"),
            "t",
            |_| None,
        )
        .unwrap()
        .tasks
        .remove(0)
    }

    #[tokio::test]
    async fn first_start_records_later_starts_compare() {
        let root = tempfile::tempdir().unwrap();
        let store = crate::store::FsStore::new(root.path().to_path_buf());
        let text = task("format = \"text\"\nstore_key = true\nkey_separator = \":\"\n");
        check_or_record(&store, &text).await.unwrap();
        assert!(root.path().join("d/.strata/tasks/orders.json").exists());
        check_or_record(&store, &text).await.unwrap();
        check_or_record(&store, &task("format = \"text\"\nstore_key = true\nkey_separator = \":\"\nmax_file_size = \"8MiB\"\n"))
            .await
            .expect("sizes and intervals may change");
        let e = check_or_record(
            &store,
            &task("format = \"jsonl\"\ntime_directory = \"yyyy/MM/dd/HH\"\n"),
        )
        .await
        .unwrap_err()
        .to_string();
        for want in [
            "format: stored \"text\", config \"jsonl\"",
            "time_directory: stored \"yyyy/MM/dd\", config \"yyyy/MM/dd/HH\"",
            "store_key/key_separator: stored \":\", config none",
            "create a new task",
            "d/.strata/tasks/orders.json",
        ] {
            assert!(e.contains(want), "{want:?} in {e}");
        }
    }

    #[tokio::test]
    async fn a_damaged_record_is_an_error_not_a_reset() {
        let root = tempfile::tempdir().unwrap();
        let store = crate::store::FsStore::new(root.path().to_path_buf());
        let t = task("");
        store
            .put(&key(&t), Bytes::from_static(b"{not json"))
            .await
            .unwrap();
        let e = check_or_record(&store, &t).await.unwrap_err();
        assert!(matches!(e, ParamsError::Unreadable { .. }), "{e}");
    }
}
