//! The catalog side of an Iceberg task: opens the configured catalog over the task's store,
//! finds or creates each topic's table, reads the offsets it holds and commits data files with
//! their offsets so that a commit lands only where the offsets rule (`offsets::check`) holds.

use super::offsets::{self, Advance, Offsets, TableOf};
use super::storage::{root_of, StoreStorage, StoreStorageFactory};
use super::IcebergError;
use crate::config::{IcebergCatalog, IcebergOptions};
use crate::layout::DumpDir;
use crate::store::ObjectStore;
use async_trait::async_trait;
use iceberg::spec::{
    DataFile, ListType, NestedField, PrimitiveType, Schema, StructType, Transform, Type,
    UnboundPartitionField, UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::transaction::AddColumn;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{
    Catalog, CatalogBuilder, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Commits retried after another writer's commit landed first (each retry re-checks the rule).
const COMMIT_ATTEMPTS: u32 = 20;
/// How long a commit is retried while the catalog (or the store under it) fails.
const TRANSIENT_FOR: Duration = Duration::from_secs(120);

/// An open catalog and where the task's tables are.
pub struct Tables {
    catalog: Arc<dyn Catalog>,
    namespace: NamespaceIdent,
    /// `<warehouse>/<namespace>`: where the SQL catalog places new tables.
    location: Option<String>,
    task: String,
    /// The URL prefix of the store's keys.
    root: String,
}

/// Opens the catalog of a task whose store is `store` and whose directory is `dir`.
pub async fn open(
    task: &str,
    opts: &IcebergOptions,
    store: Arc<dyn ObjectStore>,
    dir: &DumpDir,
) -> Result<Tables, IcebergError> {
    let warehouse = match &opts.warehouse {
        Some(w) => w.trim_end_matches('/').to_string(),
        None => format!("{}{}", root_of(store.as_ref()), dir.as_str())
            .trim_end_matches('/')
            .to_string(),
    };
    let root = root_of(store.as_ref());
    let factory = Arc::new(StoreStorageFactory {
        storage: StoreStorage::new(store),
    });
    let catalog_err = |e: iceberg::Error| IcebergError::Catalog {
        catalog: opts.catalog.as_str(),
        detail: e.to_string(),
    };
    let catalog: Arc<dyn Catalog> = match &opts.catalog {
        IcebergCatalog::Sql { file } => {
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent).map_err(|e| IcebergError::Catalog {
                    catalog: "sql",
                    detail: format!("cannot create {}: {e}", parent.display()),
                })?;
            }
            let uri = format!("sqlite:{}?mode=rwc", file.display());
            let c = iceberg_catalog_sql::SqlCatalogBuilder::default()
                .with_storage_factory(factory)
                .load(
                    &opts.catalog_name,
                    HashMap::from([
                        (iceberg_catalog_sql::SQL_CATALOG_PROP_URI.to_string(), uri),
                        (
                            iceberg_catalog_sql::SQL_CATALOG_PROP_WAREHOUSE.to_string(),
                            warehouse.clone(),
                        ),
                        (
                            iceberg_catalog_sql::SQL_CATALOG_PROP_BIND_STYLE.to_string(),
                            iceberg_catalog_sql::SqlBindStyle::QMark.to_string(),
                        ),
                    ]),
                )
                .await
                .map_err(|e| IcebergError::Catalog {
                    catalog: "sql",
                    detail: format!("{} (catalog_file {})", e, file.display()),
                })?;
            Arc::new(c)
        }
        IcebergCatalog::Rest {
            uri,
            token,
            credential,
        } => {
            let mut props = HashMap::from([
                (
                    iceberg_catalog_rest::REST_CATALOG_PROP_URI.to_string(),
                    uri.clone(),
                ),
                (
                    iceberg_catalog_rest::REST_CATALOG_PROP_WAREHOUSE.to_string(),
                    warehouse.clone(),
                ),
            ]);
            if let Some(t) = token {
                props.insert("token".into(), t.expose().to_string());
            }
            if let Some(c) = credential {
                props.insert("credential".into(), c.expose().to_string());
            }
            // The HTTP client takes TLS from the process's default provider: strata's own
            // (aws-lc-rs), unless something installed one already.
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            let c = iceberg_catalog_rest::RestCatalogBuilder::default()
                .with_storage_factory(factory)
                .load(&opts.catalog_name, props)
                .await
                .map_err(catalog_err)?;
            Arc::new(c)
        }
        #[cfg(feature = "iceberg-glue")]
        IcebergCatalog::Glue => {
            let c = iceberg_catalog_glue::GlueCatalogBuilder::default()
                .with_storage_factory(factory)
                .load(
                    &opts.catalog_name,
                    HashMap::from([(
                        iceberg_catalog_glue::GLUE_CATALOG_PROP_WAREHOUSE.to_string(),
                        warehouse.clone(),
                    )]),
                )
                .await
                .map_err(catalog_err)?;
            Arc::new(c)
        }
        #[cfg(not(feature = "iceberg-glue"))]
        IcebergCatalog::Glue => {
            return Err(IcebergError::Catalog {
                catalog: "glue",
                detail: "this strata was built without the cargo feature iceberg-glue".into(),
            })
        }
    };
    let namespace = NamespaceIdent::new(opts.namespace.clone());
    match catalog.namespace_exists(&namespace).await {
        Ok(true) => {}
        Ok(false) => match catalog.create_namespace(&namespace, HashMap::new()).await {
            Ok(Namespace { .. }) => {}
            // Another member created it first.
            Err(e) if e.kind() == iceberg::ErrorKind::NamespaceAlreadyExists => {}
            Err(e) => return Err(catalog_err(e)),
        },
        Err(e) => return Err(catalog_err(e)),
    }
    let location = matches!(opts.catalog, IcebergCatalog::Sql { .. })
        .then(|| format!("{warehouse}/{}", opts.namespace));
    Ok(Tables {
        catalog,
        namespace,
        location,
        task: task.to_string(),
        root,
    })
}

/// The Iceberg schema of a topic's table: the lossless record columns, as strata's Parquet
/// format has them, with the timestamp in microseconds (Iceberg's `timestamptz`).
pub fn record_schema() -> Result<Schema, iceberg::Error> {
    let header = StructType::new(vec![
        NestedField::required(10, "key", Type::Primitive(PrimitiveType::String)).into(),
        NestedField::optional(11, "value", Type::Primitive(PrimitiveType::Binary)).into(),
    ]);
    Schema::builder()
        .with_schema_id(0)
        .with_fields(vec![
            NestedField::required(1, "topic", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::required(2, "partition", Type::Primitive(PrimitiveType::Int)).into(),
            NestedField::required(3, "offset", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(4, "timestamp", Type::Primitive(PrimitiveType::Timestamptz))
                .into(),
            NestedField::required(5, "timestamp_type", Type::Primitive(PrimitiveType::String))
                .into(),
            NestedField::optional(6, "key", Type::Primitive(PrimitiveType::Binary)).into(),
            NestedField::optional(7, "value", Type::Primitive(PrimitiveType::Binary)).into(),
            NestedField::required(
                8,
                "headers",
                Type::List(ListType::new(
                    NestedField::list_element(9, Type::Struct(header), true).into(),
                )),
            )
            .into(),
        ])
        .build()
}

/// The day of the record time: the time directories' equivalent, hidden from queries (a
/// filter on `timestamp` prunes by it).
fn day_partitioning() -> Result<UnboundPartitionSpec, iceberg::Error> {
    // Spec and field id set: a REST catalog (Apache Iceberg's own) refuses a spec without.
    Ok(UnboundPartitionSpec::builder()
        .with_spec_id(0)
        .add_partition_fields(vec![UnboundPartitionField {
            source_id: 4,
            field_id: Some(1000),
            name: "timestamp_day".into(),
            transform: Transform::Day,
        }])?
        .build())
}

/// The table property naming the CDC source table (`db[.schema].table`) a table holds.
const CDC_TABLE: &str = "strata.cdc-table";

impl Tables {
    pub fn ident(&self, topic: &str) -> TableIdent {
        self.ident_of(&TableOf::Topic(topic.to_string()))
    }

    pub fn ident_of(&self, of: &TableOf) -> TableIdent {
        TableIdent::new(self.namespace.clone(), of.name())
    }

    /// The store key of a file of a table.
    pub fn key_of(&self, path: &str) -> Result<String, IcebergError> {
        super::storage::key_in(&self.root, path)
            .map(|k| k.into_owned())
            .ok_or_else(|| IcebergError::Outside {
                path: path.to_string(),
                root: self.root.clone(),
            })
    }

    fn err(&self, of: &TableOf, e: impl std::fmt::Display) -> IcebergError {
        IcebergError::Table {
            table: self.ident_of(of).to_string(),
            detail: e.to_string(),
        }
    }

    /// The table, when it exists; one that holds something else than `of` is an error.
    async fn load(&self, of: &TableOf) -> Result<Option<Table>, IcebergError> {
        let t = match self.catalog.load_table(&self.ident_of(of)).await {
            Ok(t) => t,
            Err(e) if e.kind() == iceberg::ErrorKind::TableNotFound => return Ok(None),
            // Some catalogs say "not found" through other kinds: creating tells for sure.
            Err(_) => return Ok(None),
        };
        let holds = t.metadata().properties().get(CDC_TABLE);
        let want = match of {
            TableOf::Topic(_) => None,
            TableOf::Cdc { level, .. } => Some(level),
        };
        if holds != want {
            return Err(self.err(
                of,
                format!(
                    "the table holds {}, not {}; give the task another namespace",
                    holds.map_or_else(
                        || "a topic's records".to_string(),
                        |l| format!("the CDC table {l}")
                    ),
                    want.map_or_else(
                        || format!("the records of topic {}", of.topic()),
                        |l| format!("the CDC table {l}")
                    ),
                ),
            ));
        }
        Ok(Some(t))
    }

    /// The table, created when missing (by whichever member comes first): a topic's with the
    /// record columns, a CDC table's with `columns` (those of its first data file).
    pub async fn table(
        &self,
        of: &TableOf,
        columns: &[(String, Type)],
    ) -> Result<Table, IcebergError> {
        if let Some(t) = self.load(of).await? {
            return Ok(t);
        }
        let ident = self.ident_of(of);
        let (schema, spec, mut props) = match of {
            TableOf::Topic(topic) => (
                record_schema().map_err(|e| self.err(of, e))?,
                day_partitioning().map_err(|e| self.err(of, e))?,
                HashMap::from([("strata.topic".to_string(), topic.clone())]),
            ),
            TableOf::Cdc { level, .. } => {
                let schema = super::schema::cdc_schema(columns).map_err(|e| self.err(of, e))?;
                let mapping = super::schema::name_mapping(
                    schema
                        .as_struct()
                        .fields()
                        .iter()
                        .map(|f| (f.id, f.name.as_str())),
                );
                (
                    schema,
                    UnboundPartitionSpec::builder().with_spec_id(0).build(),
                    HashMap::from([
                        (CDC_TABLE.to_string(), level.clone()),
                        (super::schema::NAME_MAPPING.to_string(), mapping),
                    ]),
                )
            }
        };
        props.insert("write.format.default".to_string(), "parquet".to_string());
        let mut creation = TableCreation::builder()
            .name(ident.name().to_string())
            .schema(schema)
            .partition_spec(spec)
            .properties(props)
            .build();
        if let Some(l) = &self.location {
            creation.location = Some(format!("{l}/{}", ident.name()));
        }
        match self.catalog.create_table(&self.namespace, creation).await {
            Ok(t) => {
                tracing::info!(task = %self.task, table = %ident, location = t.metadata().location(), "created an Iceberg table");
                Ok(t)
            }
            Err(e) if e.kind() == iceberg::ErrorKind::TableAlreadyExists => self
                .load(of)
                .await?
                .ok_or_else(|| self.err(of, "the table was created and is gone again")),
            Err(e) => Err(self.err(of, e)),
        }
    }

    /// The offsets a topic's table holds now (its newest strata snapshot's).
    pub async fn offsets(&self, topic: &str) -> Result<(Table, Offsets), IcebergError> {
        self.offsets_of(&TableOf::Topic(topic.to_string()), &[])
            .await
    }

    async fn offsets_of(
        &self,
        of: &TableOf,
        columns: &[(String, Type)],
    ) -> Result<(Table, Offsets), IcebergError> {
        let t = self.table(of, columns).await?;
        let o = offsets_of(&t, &of.offsets_key()).map_err(|detail| self.err(of, detail))?;
        Ok((t, o))
    }

    /// Every CDC table of the namespace that `topic` fed, with its offsets of the topic.
    pub async fn cdc_offsets(
        &self,
        topic: &str,
    ) -> Result<BTreeMap<String, Offsets>, IcebergError> {
        let of = TableOf::Topic(topic.to_string());
        let idents = self
            .catalog
            .list_tables(&self.namespace)
            .await
            .map_err(|e| self.err(&of, format!("listing the namespace's tables: {e}")))?;
        let key = TableOf::Cdc {
            level: String::new(),
            topic: topic.to_string(),
        }
        .offsets_key();
        let loads = idents.iter().map(|i| self.catalog.load_table(i));
        let mut out = BTreeMap::new();
        for t in futures::future::join_all(loads).await {
            // A table dropped meanwhile holds nothing.
            let Ok(t) = t else { continue };
            let Some(level) = t.metadata().properties().get(CDC_TABLE).cloned() else {
                continue;
            };
            let o = offsets_of(&t, &key).map_err(|detail| self.err(&of, detail))?;
            if !o.is_empty() {
                out.insert(level, o);
            }
        }
        Ok(out)
    }

    /// Appends `files` with the offsets they cover in one snapshot, on the newest snapshot for
    /// which the offsets rule holds; the table's new offsets are the answer. A CDC table's
    /// schema first gains the `columns` it lacks, in the same commit. Retried while other
    /// writers' commits land first, and while the catalog fails for up to [`TRANSIENT_FOR`];
    /// [`IcebergError::Zombie`] when the rule fails.
    pub async fn commit(
        &self,
        of: &TableOf,
        files: Vec<DataFile>,
        advance: &BTreeMap<i32, Advance>,
        columns: &[(String, Type)],
    ) -> Result<Offsets, IcebergError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        self.commit_as(&id, of, files, advance, columns).await
    }

    /// [`Tables::commit`] under the commit id `id`, which its snapshot's summary carries: a
    /// retry after an answer that never came finds its own commit landed instead of taking the
    /// offsets it moved for another writer's.
    async fn commit_as(
        &self,
        id: &str,
        of: &TableOf,
        files: Vec<DataFile>,
        advance: &BTreeMap<i32, Advance>,
        columns: &[(String, Type)],
    ) -> Result<Offsets, IcebergError> {
        let ident = self.ident_of(of);
        let key = of.offsets_key();
        let started = std::time::Instant::now();
        let mut conflicts = 0;
        let mut failures = 0u32;
        let mut last = String::new();
        loop {
            if conflicts >= COMMIT_ATTEMPTS {
                return Err(self.err(of, format!("{COMMIT_ATTEMPTS} commits in a row lost to other writers' commits; the last: {last}")));
            }
            if conflicts + failures > 0 {
                let backoff = if failures > 0 {
                    Duration::from_millis(250 << failures.min(4))
                } else {
                    Duration::from_millis(20 << conflicts.min(5))
                };
                tokio::time::sleep(backoff).await;
            }
            let transient = |e: IcebergError, last: &mut String, failures: &mut u32| {
                if started.elapsed() >= TRANSIENT_FOR {
                    return Err(e);
                }
                tracing::warn!(task = %self.task, table = %ident, error = %e, "an Iceberg commit failed; retrying");
                *last = e.to_string();
                *failures += 1;
                Ok(())
            };
            let (table, current) = match self.offsets_of(of, columns).await {
                Ok(x) => x,
                Err(e) => {
                    transient(e, &mut last, &mut failures)?;
                    continue;
                }
            };
            if failures > 0 && landed(&table, id) {
                return Ok(current);
            }
            offsets::check(&current, advance).map_err(|c| IcebergError::Zombie {
                table: ident.to_string(),
                conflict: c,
            })?;
            let mut summary = carried(&table);
            summary.extend(offsets::summary(of, &current, advance, &self.task));
            summary.insert(offsets::COMMIT.to_string(), id.to_string());
            let mut tx = Transaction::new(&table);
            let schema = table.metadata().current_schema();
            let added =
                super::schema::added_columns(schema, columns).map_err(|e| self.err(of, e))?;
            if !added.is_empty() {
                // The ids the schema change assigns: after the table's last, in order (the
                // commit is pinned to this metadata, so no other change can come between).
                let mut next = table.metadata().last_column_id();
                let mut fields: Vec<(i32, &str)> = schema
                    .as_struct()
                    .fields()
                    .iter()
                    .map(|f| (f.id, f.name.as_str()))
                    .collect();
                let mut update = tx.update_schema();
                for (name, ty) in &added {
                    next += 1;
                    fields.push((next, name));
                    update = update.add_column(AddColumn::optional(name, ty.clone()));
                }
                tx = update.apply(tx).map_err(|e| self.err(of, e))?;
                tx = tx
                    .update_table_properties()
                    .set(
                        super::schema::NAME_MAPPING.to_string(),
                        super::schema::name_mapping(fields),
                    )
                    .apply(tx)
                    .map_err(|e| self.err(of, e))?;
                tracing::info!(task = %self.task, table = %ident, columns = ?added.iter().map(|(n, _)| n).collect::<Vec<_>>(), "the table's schema gains columns");
            }
            let tx = tx
                .fast_append()
                // strata's file names are new on every write: no need to read every manifest.
                .with_check_duplicate(false)
                .add_data_files(files.clone())
                .set_snapshot_properties(summary)
                .apply(tx)
                .map_err(|e| self.err(of, e))?;
            let pinned = Pinned {
                inner: self.catalog.clone(),
                metadata: table.metadata_location().map(str::to_string),
            };
            match tx.commit(&pinned).await {
                Ok(t) => return offsets_of(&t, &key).map_err(|e| self.err(of, e)),
                Err(e) if e.kind() == iceberg::ErrorKind::CatalogCommitConflicts => {
                    // Another writer's commit came first (or an answer was lost and the retry
                    // met this commit's own snapshot: the next look finds it).
                    last = e.to_string();
                    conflicts += 1;
                    if failures > 0 {
                        failures += 1;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        iceberg::ErrorKind::DataInvalid
                            | iceberg::ErrorKind::FeatureUnsupported
                            | iceberg::ErrorKind::PreconditionFailed
                    ) =>
                {
                    return Err(self.err(of, e))
                }
                // The catalog or the store failed: the commit may or may not have landed.
                Err(e) => transient(self.err(of, e), &mut last, &mut failures)?,
            }
        }
    }
}

/// The offsets of every writer of a table (`strata.offsets*`) as its newest strata snapshot
/// has them: a commit carries them forward beside its own.
fn carried(t: &Table) -> HashMap<String, String> {
    let m = t.metadata();
    let mut at = m.current_snapshot();
    let mut n = 0;
    while let Some(s) = at {
        let found: HashMap<String, String> = s
            .summary()
            .additional_properties
            .iter()
            .filter(|(k, _)| k.starts_with(offsets::OFFSETS))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !found.is_empty() {
            return found;
        }
        n += 1;
        if n > 100_000 {
            break;
        }
        at = s.parent_snapshot_id().and_then(|p| m.snapshot_by_id(p));
    }
    HashMap::new()
}

/// Whether the commit `id` is among the table's newest snapshots (back to the previous strata
/// snapshot before it, at most a few hundred).
fn landed(t: &Table, id: &str) -> bool {
    let m = t.metadata();
    let mut at = m.current_snapshot();
    let mut n = 0;
    while let Some(s) = at {
        if s.summary()
            .additional_properties
            .get(offsets::COMMIT)
            .map(String::as_str)
            == Some(id)
        {
            return true;
        }
        n += 1;
        if n > 500 {
            return false;
        }
        at = s.parent_snapshot_id().and_then(|p| m.snapshot_by_id(p));
    }
    false
}

/// The offsets under `key` of a table's newest snapshot that has any, walking back from the
/// current one.
pub fn offsets_of(t: &Table, key: &str) -> Result<Offsets, String> {
    let m = t.metadata();
    let mut chain = Vec::new();
    let mut at = m.current_snapshot();
    while let Some(s) = at {
        chain.push(&s.summary().additional_properties);
        at = s.parent_snapshot_id().and_then(|p| m.snapshot_by_id(p));
        if chain.len() > 100_000 {
            break;
        }
    }
    offsets::newest(chain, key)
}

/// The catalog as one commit sees it: a table loaded while the commit is made must still be at
/// the metadata (snapshot, schema) whose offsets and columns the commit was checked against. The crate's commit reloads the
/// table and re-applies its actions on whatever is newest; this makes that reload fail instead
/// (as a conflict, so the caller checks the rule again on the newer snapshot). Between this
/// load and the catalog's own compare-and-swap, the commit's requirement that `main` is still
/// at that snapshot closes the gap.
#[derive(Debug)]
struct Pinned {
    inner: Arc<dyn Catalog>,
    metadata: Option<String>,
}

#[async_trait]
impl Catalog for Pinned {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }
    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        self.inner.namespace_exists(namespace).await
    }
    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        self.inner.drop_namespace(namespace).await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<Table> {
        self.inner.create_table(namespace, creation).await
    }
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        let t = self.inner.load_table(table).await?;
        let now = t.metadata_location();
        if now != self.metadata.as_deref() {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::CatalogCommitConflicts,
                format!(
                    "table {table} moved from {:?} to {now:?} while committing",
                    self.metadata
                ),
            ));
        }
        Ok(t)
    }
    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.drop_table(table).await
    }
    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.purge_table(table).await
    }
    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        self.inner.table_exists(table).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        self.inner.rename_table(src, dest).await
    }
    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> iceberg::Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }
    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        self.inner.update_table(commit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{IcebergCatalog, IcebergOptions};

    async fn member(dir: &std::path::Path) -> Tables {
        let store: Arc<dyn ObjectStore> = Arc::new(crate::store::FsStore::new(dir.join("store")));
        let opts = IcebergOptions {
            catalog: IcebergCatalog::Sql {
                file: dir.join("catalog.db"),
            },
            catalog_name: "strata".into(),
            warehouse: None,
            namespace: "kafka".into(),
        };
        open("lake", &opts, store, &DumpDir::parse("lake").unwrap())
            .await
            .unwrap()
    }

    fn adv(p: i32, base: Option<i64>, first: i64, next: i64) -> BTreeMap<i32, Advance> {
        BTreeMap::from([(
            p,
            Advance {
                base,
                first: Some(first),
                next,
            },
        )])
    }

    /// Two members of one group on one SQLite catalog: commits of disjoint partitions land on
    /// each other's snapshots with every offset carried forward, even when one was checked on
    /// a snapshot the other's commit replaced meanwhile; a commit from a base the table left
    /// (a zombie's) fails and changes nothing.
    #[tokio::test(flavor = "multi_thread")]
    async fn live_members_share_a_table_and_a_zombie_cannot_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (member(dir.path()).await, member(dir.path()).await);
        let (t, o) = a.offsets("orders").await.unwrap();
        assert!(o.is_empty());
        assert!(
            t.metadata().location().ends_with("/lake/kafka/orders"),
            "{}",
            t.metadata().location()
        );
        let orders = TableOf::Topic("orders".into());
        let now = a
            .commit(&orders, vec![], &adv(0, None, 0, 10), &[])
            .await
            .unwrap();
        assert_eq!(now, Offsets::from([(0, 10)]));
        let now = b
            .commit(&orders, vec![], &adv(1, None, 0, 7), &[])
            .await
            .unwrap();
        assert_eq!(now, Offsets::from([(0, 10), (1, 7)]), "carried forward");
        // A commit whose transaction was built on a snapshot another commit replaced: the
        // crate alone would rebase it and write its stale summary; it must be re-checked and
        // re-made on the newest snapshot instead.
        let (stale, _) = a.offsets("orders").await.unwrap();
        b.commit(&orders, vec![], &adv(1, Some(7), 7, 9), &[])
            .await
            .unwrap();
        let tx = Transaction::new(&stale);
        let tx = tx
            .fast_append()
            .set_snapshot_properties(offsets::summary(
                &orders,
                &Offsets::from([(0, 10), (1, 7)]),
                &adv(0, Some(10), 10, 12),
                "lake",
            ))
            .apply(tx)
            .unwrap();
        let pinned = Pinned {
            inner: a.catalog.clone(),
            metadata: stale.metadata_location().map(str::to_string),
        };
        let e = tx.commit(&pinned).await.unwrap_err();
        assert_eq!(e.kind(), iceberg::ErrorKind::CatalogCommitConflicts, "{e}");
        let now = a
            .commit(&orders, vec![], &adv(0, Some(10), 10, 12), &[])
            .await
            .unwrap();
        assert_eq!(now, Offsets::from([(0, 12), (1, 9)]));
        // A zombie still thinking partition 0 starts at 10 is refused.
        let before = b
            .offsets("orders")
            .await
            .unwrap()
            .0
            .metadata()
            .current_snapshot_id();
        let e = b
            .commit(&orders, vec![], &adv(0, Some(10), 10, 15), &[])
            .await
            .unwrap_err();
        assert!(
            matches!(&e, IcebergError::Zombie { conflict, .. } if conflict.table == Some(12)),
            "{e}"
        );
        let (t, o) = b.offsets("orders").await.unwrap();
        assert_eq!(
            t.metadata().current_snapshot_id(),
            before,
            "nothing committed"
        );
        assert_eq!(o, Offsets::from([(0, 12), (1, 9)]));
    }

    /// A CDC table: created with its first file's columns, it gains a later file's new column
    /// in the commit that adds the file (a new field id, the old ones kept, the name mapping
    /// following); two topics feeding it keep their offsets apart and each finds its own;
    /// the topic's table and a CDC table never pass for each other.
    #[tokio::test(flavor = "multi_thread")]
    async fn cdc_tables_evolve_their_schema_and_keep_each_topics_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let a = member(dir.path()).await;
        let s = |t: PrimitiveType| Type::Primitive(t);
        let of = |topic: &str| TableOf::Cdc {
            level: "shop.orders".into(),
            topic: topic.into(),
        };
        let first = vec![
            ("offset".to_string(), s(PrimitiveType::Long)),
            ("new_id".to_string(), s(PrimitiveType::String)),
        ];
        a.commit(&of("cdc1"), vec![], &adv(0, None, 0, 5), &first)
            .await
            .unwrap();
        let t = a.load(&of("cdc1")).await.unwrap().unwrap();
        let ids: Vec<(i32, String)> = t
            .metadata()
            .current_schema()
            .as_struct()
            .fields()
            .iter()
            .map(|f| (f.id, f.name.clone()))
            .collect();
        assert_eq!(ids, vec![(1, "offset".into()), (2, "new_id".into())]);
        let mut wider = first.clone();
        wider.insert(1, ("new_coupon".to_string(), s(PrimitiveType::String)));
        let now = a
            .commit(&of("cdc2"), vec![], &adv(0, None, 3, 9), &wider)
            .await
            .unwrap();
        assert_eq!(now, Offsets::from([(0, 9)]), "cdc2's own offsets");
        let t = a.load(&of("cdc1")).await.unwrap().unwrap();
        let m = t.metadata();
        assert_eq!(m.schemas_iter().count(), 2, "a schema change, no rewrite");
        let coupon = m.current_schema().field_by_name("new_coupon").unwrap();
        assert_eq!(coupon.id, 3);
        assert_eq!(m.current_schema().field_by_name("new_id").unwrap().id, 2);
        assert_eq!(
            m.properties()[super::super::schema::NAME_MAPPING],
            super::super::schema::name_mapping([(1, "offset"), (2, "new_id"), (3, "new_coupon")])
        );
        assert_eq!(
            offsets_of(&t, &of("cdc1").offsets_key()).unwrap(),
            Offsets::from([(0, 5)]),
            "carried forward beside cdc2's"
        );
        assert_eq!(
            a.cdc_offsets("cdc1").await.unwrap(),
            BTreeMap::from([("shop.orders".to_string(), Offsets::from([(0, 5)]))])
        );
        // A zombie of cdc1 is refused on the CDC table as on a topic's.
        let e = a
            .commit(&of("cdc1"), vec![], &adv(0, None, 0, 7), &first)
            .await
            .unwrap_err();
        assert!(matches!(e, IcebergError::Zombie { .. }), "{e}");
        // A type that changed is named, with the fix.
        let e = a
            .commit(
                &of("cdc1"),
                vec![],
                &adv(0, Some(5), 5, 7),
                &[("new_id".to_string(), s(PrimitiveType::Long))],
            )
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("\"new_id\" is string in the table"),
            "{e}"
        );
        // A topic named like the CDC table cannot take it over.
        let e = a.offsets("shop.orders").await.unwrap_err();
        assert!(
            e.to_string().contains("holds the CDC table shop.orders"),
            "{e}"
        );
    }
}
