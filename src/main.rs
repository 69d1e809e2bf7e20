//! The `strata` command line: parse arguments, load the config, run a mode, map the outcome to
//! an exit code (0 success, 1 failure, 2 bad configuration or usage).

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use strata::config::{Config, LogFormat};

/// jemalloc for Rust and, through the overridden `malloc`, for librdkafka too: librdkafka
/// allocates on its broker thread what the worker frees, once per message, and glibc's arenas
/// make that cross-thread pattern the largest user-space cost of a text dump (bench/README.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's built-in options (`MALLOC_CONF` in the environment still overrides them): big
/// buffers (librdkafka fetches, Parquet row groups) stay in the normal arenas, reused after a
/// free, instead of going to the oversize arena that unmaps them at once and faults them in
/// again for the next fetch; freed pages go back to the system after about 3 s (jemalloc's 10 s
/// kept a restore's decoded objects around), returned by jemalloc's own thread: purged inline,
/// on allocator calls, about one 1 GiB dump in five gave back the fetch buffers as fast as they
/// were freed and faulted every received byte in again (bench/README.md has the figures: Restore,
/// and "Allocator purging and unsigned payloads").
#[unsafe(export_name = "malloc_conf")]
static MALLOC_CONF: &[u8; 64] =
    b"oversize_threshold:0,dirty_decay_ms:3000,background_thread:true\0";

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "Moves Apache Kafka data into object storage and back"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format; overrides telemetry.log_format.
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormatArg>,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormatArg {
    Human,
    Json,
}

/// `strata replicate --reset`: see docs/replicate.md, "Lost bookkeeping".
#[derive(Clone, Copy, ValueEnum)]
enum ResetArg {
    /// Keep the target as it is: partitions without a stored position start at the source's
    /// end; partitions whose target was recreated resume at their stored position.
    TargetEnd,
    /// Copy the refused partitions again from the source's first record (their targets must
    /// hold no record).
    SourceStart,
}

impl From<ResetArg> for strata::replicate::Reset {
    fn from(r: ResetArg) -> Self {
        match r {
            ResetArg::TargetEnd => Self::TargetEnd,
            ResetArg::SourceStart => Self::SourceStart,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Check a config file and print what it means (secrets redacted).
    Validate {
        #[arg(long, short, env = "STRATA_CONFIG")]
        config: PathBuf,
    },
    /// Archive topics into time-partitioned objects, exactly once.
    Dump {
        #[arg(long, short, env = "STRATA_CONFIG")]
        config: PathBuf,
        /// Read up to the high watermarks noted at start, store, commit and exit (for cron):
        /// exit 0 only once every partition is archived that far, by this run or by another
        /// member of the task's group.
        #[arg(long)]
        once: bool,
        /// With --once: give up after this many seconds with exit code 3, naming the partitions
        /// not covered.
        #[arg(long, value_name = "SECS", default_value_t = 600, requires = "once")]
        once_deadline: u64,
        /// Write the run's metrics to this file at its end, in the Prometheus text format (the
        /// node exporter's textfile collector), with strata_dump_last_success_timestamp_seconds
        /// per task kept across failed runs.
        #[arg(long, value_name = "PATH")]
        metrics_file: Option<PathBuf>,
    },
    /// Copy topics between the local cluster and a peer cluster (type = "replicate" tasks),
    /// exactly once, with MirrorMaker 2's offset syncs and checkpoints.
    Replicate {
        #[arg(long, short, env = "STRATA_CONFIG")]
        config: PathBuf,
        /// Copy up to the source high watermarks noted at start, then exit (migrations): exit
        /// 0 only once the target holds every partition that far.
        #[arg(long)]
        once: bool,
        /// With --once: give up after this many seconds with exit code 3.
        #[arg(long, value_name = "SECS", default_value_t = 600, requires = "once")]
        once_deadline: u64,
        /// Go on once past a refused start whose bookkeeping was lost (no stored position for
        /// a target that holds records, or a recreated target topic): record fresh positions
        /// for the refused partitions only, then run normally. Stop every other process of the
        /// task first.
        #[arg(long, value_enum, value_name = "MODE")]
        reset: Option<ResetArg>,
    },
    /// Connect to both clusters of every replicate task and report bootstrap, authentication,
    /// authorization and topic-creation rights, without starting anything.
    ReplicateCheck {
        #[arg(long, short, env = "STRATA_CONFIG")]
        config: PathBuf,
    },
    /// Replay archived objects back into Kafka (flags override the config file).
    Restore(Box<RestoreArgs>),
    /// List, verify or prune what dump archived (S3 or file://).
    #[command(subcommand)]
    Archive(ArchiveCommand),
    /// Serve the Kafka tiered-storage bridge (RemoteStorageManager) on this host.
    Tier {
        #[arg(long, short, env = "STRATA_CONFIG")]
        config: PathBuf,
    },
    /// Write a new secret for the tier API to FILE (mode 0600; an existing file is kept):
    /// name it in tier.secret_file and in the broker's rsm.config.strata.secret.file.
    TierSecret {
        /// Where to write the secret.
        file: PathBuf,
    },
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: strata::clidoc::Shell,
    },
    /// Print the man page strata(1), or write every page (strata.1, strata-dump.1, ...) into DIR.
    Man {
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// `strata restore` flags; each overrides the `[restore]` (or `[store]`/`[kafka]`) setting named.
#[derive(clap::Args)]
struct RestoreArgs {
    /// Config file; without it, local Kafka and `file://./strata-archive` unless flags say otherwise.
    #[arg(long, short, env = "STRATA_CONFIG")]
    config: Option<PathBuf>,
    /// Take the archive's bucket, directory, time layout and text options from this dump task
    /// of the config file (a file with one dump task uses it without this flag).
    #[arg(long, value_name = "NAME")]
    task: Option<String>,
    /// Archive location: `s3://bucket/prefix` or `file:///path` (store.url; S3 settings stay from [store]).
    #[arg(long, value_name = "URL")]
    source: Option<String>,
    /// Dump directory inside the archive location (restore.directory).
    #[arg(long, value_name = "DIR")]
    directory: Option<String>,
    /// Archived topics to restore, comma separated (restore.topics); default: all.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "A,B",
        conflicts_with = "topic_regex"
    )]
    topics: Option<Vec<String>>,
    /// Archived topics to restore, as one regular expression (restore.topic_regex).
    #[arg(long, value_name = "RE")]
    topic_regex: Option<String>,
    /// Restore records with timestamps at or after this RFC 3339 time (restore.from).
    #[arg(long, value_name = "RFC3339")]
    from: Option<String>,
    /// Restore records with timestamps before this RFC 3339 time (restore.to).
    #[arg(long, value_name = "RFC3339")]
    to: Option<String>,
    /// Target topic = prefix + archived topic, e.g. `restored.` (restore.target_prefix).
    #[arg(long, value_name = "P")]
    target_prefix: Option<String>,
    /// Explicit target for one archived topic; repeatable (restore.topic_map).
    #[arg(long, value_name = "SOURCE=TARGET")]
    topic_map: Vec<String>,
    /// `original` (archived partition when the target has it, else key hash) or `key-hash`.
    #[arg(long, value_name = "MODE")]
    partitioning: Option<String>,
    /// Target cluster (restore.kafka.bootstrap_servers, else kafka.bootstrap_servers).
    #[arg(long, value_name = "HOST:PORT,...")]
    bootstrap_servers: Option<String>,
    /// Limit the restore to this many MiB of record bytes per second.
    #[arg(long, value_name = "MIB")]
    rate_limit_mib_per_sec: Option<f64>,
    /// List the objects that would be read, with record counts and time spans; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Skip objects that fail to decode (counted in the summary) instead of stopping.
    #[arg(long)]
    skip_corrupt: bool,
    /// Checkpoint file (default: ./strata-restore-<settings fingerprint>.json).
    #[arg(long, value_name = "PATH")]
    checkpoint: Option<String>,
    /// Exactly once: one Kafka transaction per object, progress markers in the target cluster.
    #[arg(long)]
    exactly_once: bool,
    /// Restore the positions of the consumer groups whose whole name matches RE, from the
    /// dump's state snapshot at or before --to, onto the restored topics (needs partitioning
    /// original; groups must have no active member in the target).
    #[arg(long, value_name = "RE")]
    groups: Option<String>,
    /// Create missing target topics without the configs the archived topic had.
    #[arg(long)]
    no_topic_configs: bool,
}

/// `strata archive` commands.
#[derive(Subcommand)]
enum ArchiveCommand {
    /// Per topic and partition: archived offset ranges, what lies between them and why, objects,
    /// records, bytes and record times; the state snapshots. Reads no archive object.
    Ls {
        #[command(flatten)]
        at: ArchiveAt,
        /// Also one line per object.
        #[arg(long)]
        objects: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Read every object (or a sample) end to end: size and CRC-32C against its seal, every
    /// record decoded; coverage against the state snapshots. Exit 1 naming each problem.
    Verify {
        #[command(flatten)]
        at: ArchiveAt,
        /// Read only this share of the objects (0-100), the same ones every run.
        #[arg(long, value_name = "PERCENT", value_parser = percent)]
        sample: Option<f64>,
        /// Check coverage against every snapshot, not only each task's newest.
        #[arg(long)]
        all_snapshots: bool,
        /// Objects read at once.
        #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
        concurrency: u16,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Remove, per partition, the oldest objects whose records are all older than TIME, their
    /// seals, and the snapshots no longer needed. A dry run unless --apply.
    Prune {
        #[command(flatten)]
        at: ArchiveAt,
        /// RFC 3339 time, a date (midnight UTC), or an age such as 90d, 36h, 30m.
        #[arg(long, value_name = "TIME")]
        before: String,
        /// Remove what is listed (default: only list it).
        #[arg(long)]
        apply: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Where the archive is: a dump task of a config file, or a URL and a directory (as restore).
#[derive(clap::Args)]
struct ArchiveAt {
    /// Config file; without it, `file://./strata-archive` unless --source says otherwise.
    #[arg(long, short, env = "STRATA_CONFIG")]
    config: Option<PathBuf>,
    /// The dump task of the config file whose bucket and directory to read (a file with one
    /// dump task uses it without this flag); prune checks its group's committed offsets.
    #[arg(long, value_name = "NAME")]
    task: Option<String>,
    /// Archive location: `s3://bucket/prefix` or `file:///path` (S3 settings stay from [store]).
    #[arg(long, value_name = "URL")]
    source: Option<String>,
    /// Dump directory inside the archive location.
    #[arg(long, value_name = "DIR")]
    directory: Option<String>,
    /// Only these topics, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "A,B",
        conflicts_with = "topic_regex"
    )]
    topics: Option<Vec<String>>,
    /// Only topics matching this regular expression.
    #[arg(long, value_name = "RE")]
    topic_regex: Option<String>,
}

impl ArchiveAt {
    fn args(&self) -> strata::archive::LocationArgs {
        strata::archive::LocationArgs {
            task: self.task.clone(),
            source: self.source.clone(),
            directory: self.directory.clone(),
            topics: self.topics.clone(),
            topic_regex: self.topic_regex.clone(),
        }
    }
}

fn percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a percentage from 0 to 100")),
    }
}

impl RestoreArgs {
    fn overrides(&self) -> strata::config::RestoreOverrides {
        strata::config::RestoreOverrides {
            task: self.task.clone(),
            source: self.source.clone(),
            directory: self.directory.clone(),
            topics: self.topics.clone(),
            topic_regex: self.topic_regex.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            target_prefix: self.target_prefix.clone(),
            topic_map: self.topic_map.clone(),
            partitioning: self.partitioning.clone(),
            bootstrap_servers: self.bootstrap_servers.clone(),
            rate_limit_mib_per_sec: self.rate_limit_mib_per_sec,
            checkpoint: self.checkpoint.clone(),
            skip_corrupt: self.skip_corrupt,
            exactly_once: self.exactly_once,
        }
    }
}

fn load(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|e| fatal(&e.to_string(), 2))
}

/// `--log-format json` was given: errors before logging starts are JSON lines too.
static JSON_FLAG: AtomicBool = AtomicBool::new(false);

/// Whether errors are written as JSON log lines.
fn json_logs() -> bool {
    match strata::telemetry::log_format() {
        Some(f) => f == LogFormat::Json,
        None => JSON_FLAG.load(Ordering::Relaxed),
    }
}

/// A command's final error, and its exit code: `error: <message>` on stderr for people; with
/// JSON logs one log line instead (level ERROR, the message, `exit_code`), which collectors
/// parse like every other line.
fn fatal(message: &str, exit_code: u8) -> ExitCode {
    if json_logs() {
        if strata::telemetry::log_format().is_none() {
            let _ = strata::telemetry::init_logging(LogFormat::Json, "error");
        }
        tracing::error!(exit_code, "{message}");
    } else {
        eprintln!("error: {message}");
    }
    ExitCode::from(exit_code)
}

/// [`fatal`] for an error that human logs also show as a log line.
fn fatal_logged(message: &str, exit_code: u8) -> ExitCode {
    if !json_logs() {
        tracing::error!("{message}");
    }
    fatal(message, exit_code)
}

fn start_logging(cfg: &Config, arg: Option<LogFormatArg>) -> anyhow::Result<()> {
    let format = match arg {
        Some(LogFormatArg::Json) => LogFormat::Json,
        Some(LogFormatArg::Human) => LogFormat::Human,
        None => cfg.telemetry.log_format,
    };
    strata::telemetry::init_logging(format, &cfg.telemetry.log_level)?;
    Ok(())
}

/// What every long-running mode starts with: logs, metrics, and a stop flag set by signals.
/// Runs the dump tasks and reports their end; the exit code.
async fn dump(cfg: &Config, opts: strata::dump::DumpOptions, stop: Arc<AtomicBool>) -> u8 {
    let summaries = match strata::dump::run(cfg, opts, stop).await {
        Ok(s) => s,
        Err(e) => {
            fatal_logged(&format!("dump failed: {e}"), e.exit_code());
            return e.exit_code();
        }
    };
    for s in &summaries {
        tracing::info!(task = %s.task, objects = s.objects, records = s.records, bytes = s.bytes, "done");
        if s.cdc.messages > 0 {
            let c = &s.cdc;
            tracing::info!(task = %s.task, messages = c.messages, changes = c.changes, repeats = c.repeats, malformed = c.malformed, verbatim = c.verbatim, "CDC tables");
        }
        for p in &s.partitions {
            tracing::info!(task = %s.task, topic = %p.topic, partition = p.partition, from = p.from, to = p.to, covered_by = p.coverage.as_str(), "partition");
        }
        for g in &s.gaps {
            tracing::warn!(task = %s.task, topic = %g.topic, partition = g.partition, from = g.from, to = g.to - 1, "offsets deleted by retention before they were archived");
        }
        if opts.once && json_logs() {
            // JSON logs stay one JSON object a line (the demo and log shippers parse them).
            tracing::info!(task = %s.task, summary = %s.line(), "run summary");
        } else if opts.once {
            eprintln!("{}", s.line());
        }
    }
    if let Err(e) = strata::dump::check_gaps(cfg, opts, &summaries) {
        if !json_logs() {
            tracing::error!("dump incomplete: {e}");
        }
        fatal(&e.to_string(), e.exit_code());
        return e.exit_code();
    }
    0
}

async fn start_mode(
    cfg: &Config,
    log_format: Option<LogFormatArg>,
) -> anyhow::Result<Arc<AtomicBool>> {
    start_logging(cfg, log_format)?;
    strata::telemetry::install_metrics(&cfg.telemetry).await?;
    let stop = Arc::new(AtomicBool::new(false));
    stop_on_signals(stop.clone());
    Ok(stop)
}

/// First SIGINT/SIGTERM asks for a graceful stop; a second one exits at once.
fn stop_on_signals(stop: Arc<AtomicBool>) {
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for SIGTERM");
                    return;
                }
            };
        let mut first = true;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            if first {
                tracing::info!(
                    "stopping gracefully: finishing the work in flight (signal again to abort)"
                );
                strata::telemetry::readiness::stopping();
                stop.store(true, Ordering::Relaxed);
                first = false;
            } else {
                tracing::warn!(
                    "second signal: exiting without flushing; uncommitted data will be read again"
                );
                std::process::exit(130);
            }
        }
    });
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate { config } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return Ok(code),
            };
            // The region the S3 store will use, and where from: a new user's first question
            // when AWS_REGION or a profile is meant to set it.
            let region = match cfg.uses_s3() {
                true => Some(strata::store::resolve_region(&cfg.store.s3).await),
                false => None,
            };
            print!(
                "{}",
                strata::config::render_report(
                    &config.display().to_string(),
                    &cfg,
                    region.as_ref().and_then(|r| r.as_ref().ok())
                )
            );
            if let Some(Err(e)) = region {
                return Ok(fatal(&e.to_string(), 2));
            }
            if cfg.tasks.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            let (lines, changed) = strata::dump::params::report(&cfg.tasks).await;
            print!("stored task parameters:\n{lines}");
            Ok(if changed {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Dump {
            config,
            once,
            once_deadline,
            metrics_file,
        } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return Ok(code),
            };
            let stop = start_mode(&cfg, cli.log_format).await?;
            let opts = strata::dump::DumpOptions {
                once,
                once_deadline: std::time::Duration::from_secs(once_deadline),
            };
            let code = dump(&cfg, opts, stop).await;
            if code == 0 {
                strata::dump::mark_success(&cfg);
            }
            if let Some(path) = metrics_file {
                if let Err(e) = strata::telemetry::write_metrics_file(&path) {
                    let message = format!("cannot write the metrics file {}: {e}", path.display());
                    return Ok(fatal(&message, code.max(1)));
                }
            }
            Ok(ExitCode::from(code))
        }
        Command::Replicate {
            config,
            once,
            once_deadline,
            reset,
        } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return Ok(code),
            };
            let stop = start_mode(&cfg, cli.log_format).await?;
            let opts = strata::replicate::ReplicateOptions {
                once,
                once_deadline: std::time::Duration::from_secs(once_deadline),
                reset: reset.map(Into::into),
            };
            match strata::replicate::run(&cfg, opts, stop).await {
                Ok(summaries) => {
                    for s in summaries {
                        tracing::info!(task = %s.task, flow = %s.flow, records = s.records, bytes = s.bytes, transactions = s.transactions, "done");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Ok(fatal_logged(
                    &format!("replicate failed: {e}"),
                    e.exit_code(),
                )),
            }
        }
        Command::ReplicateCheck { config } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return Ok(code),
            };
            if cfg.replicate.is_empty() {
                let e = strata::replicate::ReplicateError::NoTasks;
                return Ok(fatal(&e.to_string(), 2));
            }
            let report = strata::replicate::check(&cfg).await;
            print!("{report}");
            Ok(if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Restore(args) => {
            let overrides = args.overrides();
            let cfg = match Config::load_for_restore(args.config.as_deref(), &overrides) {
                Ok(c) => c,
                Err(e) => return Ok(fatal(&e.to_string(), 2)),
            };
            let Some(restore) = cfg.restore.as_ref() else {
                return Ok(fatal("no [restore] settings; see config/example.toml", 2));
            };
            let groups = match args.groups.as_deref().map(strata::restore::group_regex) {
                None => None,
                Some(Ok(re)) => Some(re),
                Some(Err(e)) => {
                    eprintln!("error: --groups: not a regular expression: {e}");
                    return Ok(ExitCode::from(2));
                }
            };
            let stop = start_mode(&cfg, cli.log_format).await?;
            let opts = strata::restore::RestoreOptions {
                dry_run: args.dry_run,
                stop,
                progress_bar: std::io::IsTerminal::is_terminal(&std::io::stderr()),
                groups,
                no_topic_configs: args.no_topic_configs,
                state_task: args.task.clone(),
            };
            let summary = strata::restore::run(restore, opts)
                .await
                .context("restore failed")?;
            print!("{summary}");
            if summary.would_fail(restore.skip_corrupt) {
                return Ok(fatal(
                    "the restore would stop at a corrupt object; fix it or pass --skip-corrupt",
                    1,
                ));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Archive(cmd) => archive(cmd, cli.log_format).await,
        Command::TierSecret { file } => {
            if let Err(e) = strata::tier::auth::write_new_secret(&file) {
                let message = format!(
                    "cannot write a new secret to {}: {e}{}",
                    file.display(),
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        " (an existing secret is never overwritten; remove it first to replace it)"
                    } else {
                        ""
                    }
                );
                return Ok(fatal(&message, 1));
            }
            println!(
                "wrote a new secret to {} (mode 0600); for a broker running as another user, chgrp the file to its group and chmod 0640",
                file.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            let script = strata::clidoc::completions(&mut Cli::command(), shell);
            std::io::Write::write_all(&mut std::io::stdout(), &script)
                .context("cannot write the completion script to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { dir: None } => {
            let pages = strata::clidoc::man_pages(Cli::command())?;
            std::io::Write::write_all(&mut std::io::stdout(), &pages[0].1)
                .context("cannot write the man page to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { dir: Some(dir) } => {
            let files = strata::clidoc::write_man_pages(Cli::command(), &dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
            for f in files {
                println!("{}", f.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Tier { config } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return Ok(code),
            };
            let stop = start_mode(&cfg, cli.log_format).await?;
            strata::tier::serve(&cfg, stop)
                .await
                .context("tier failed")?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `strata archive ls|verify|prune`: resolve the archive, run, print (exit 1 when verify found
/// problems, 2 for a bad location).
async fn archive(
    cmd: ArchiveCommand,
    log_format: Option<LogFormatArg>,
) -> anyhow::Result<ExitCode> {
    let at = match &cmd {
        ArchiveCommand::Ls { at, .. }
        | ArchiveCommand::Verify { at, .. }
        | ArchiveCommand::Prune { at, .. } => at,
    };
    let settings = match strata::archive::Settings::load(at.config.as_deref(), &at.args()) {
        Ok(s) => s,
        Err(e) => return Ok(fatal(&e.to_string(), 2)),
    };
    let format = match log_format {
        Some(LogFormatArg::Json) => LogFormat::Json,
        Some(LogFormatArg::Human) => LogFormat::Human,
        None => settings.telemetry.log_format,
    };
    strata::telemetry::init_logging(format, &settings.telemetry.log_level)?;
    let before = match &cmd {
        ArchiveCommand::Prune { before, .. } => {
            match strata::archive::parse_time(before, chrono::Utc::now()) {
                Ok(t) => Some(t),
                Err(e) => return Ok(fatal(&e.to_string(), 2)),
            }
        }
        _ => None,
    };
    let a = strata::archive::Archive::open(settings).await?;
    let print =
        |json: bool, text: String, value: serde_json::Result<String>| -> anyhow::Result<()> {
            if json {
                println!("{}", value?);
            } else {
                print!("{text}");
            }
            Ok(())
        };
    match cmd {
        ArchiveCommand::Ls { objects, json, .. } => {
            let l = strata::archive::list(&a, objects).await?;
            print(json, l.to_string(), serde_json::to_string_pretty(&l))?;
            Ok(ExitCode::SUCCESS)
        }
        ArchiveCommand::Verify {
            sample,
            all_snapshots,
            concurrency,
            json,
            ..
        } => {
            let opts = strata::archive::VerifyOptions {
                sample_percent: sample,
                all_snapshots,
                concurrency: usize::from(concurrency),
                progress_bar: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            };
            let r = strata::archive::verify(&a, opts).await?;
            print(json, r.to_string(), serde_json::to_string_pretty(&r))?;
            Ok(if r.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        ArchiveCommand::Prune { apply, json, .. } => {
            let Some(before) = before else {
                return Ok(ExitCode::from(2));
            };
            let r =
                strata::archive::prune(&a, strata::archive::PruneOptions { before, apply }).await?;
            print(json, r.to_string(), serde_json::to_string_pretty(&r))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `strata tier` runs for months and serves chunks that come and go at the pace of the traffic.
/// Its threads share one jemalloc arena whose freed pages go back after 1 s: under load a freed
/// chunk buffer is reused at once instead of being returned and faulted in again (handing pages
/// back at once was much of its CPU on cold reads: bench/README.md, Tier), and with one arena the
/// pages kept are one working set, not one per thread, so RSS stays near its cache and the
/// chunks in flight, and goes back there when idle (tests/tier.rs checks both). Called before any
/// other thread exists.
fn tier_allocator_settings() {
    use tikv_jemalloc_ctl::{Access, AsName};
    for key in [&b"arenas.dirty_decay_ms\0"[..], b"arena.0.dirty_decay_ms\0"] {
        if let Err(e) = key.name().write(1000isize) {
            eprintln!("warning: cannot set jemalloc's {:?}: {e}", key.name());
        }
    }
}

/// Puts the calling thread on arena 0 (see [`tier_allocator_settings`]).
fn use_the_shared_arena() {
    use tikv_jemalloc_ctl::{Access, AsName};
    if let Err(e) = b"thread.arena\0".name().write(0u32) {
        eprintln!("warning: cannot set jemalloc's thread.arena: {e}");
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    JSON_FLAG.store(
        matches!(cli.log_format, Some(LogFormatArg::Json)),
        Ordering::Relaxed,
    );
    let tier = matches!(cli.command, Command::Tier { .. });
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if tier {
        tier_allocator_settings();
        use_the_shared_arena();
        builder.on_thread_start(use_the_shared_arena);
    }
    let rt = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fatal(&format!("cannot start the async runtime: {e}"), 1),
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => fatal_logged(&report(&e), 1),
    }
}

/// The error and its causes, each once: strata's errors already put their cause into their
/// message, so a cause whose text is shown already is not repeated.
fn report(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("the object store is not usable: {0}")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn causes_are_reported_once() {
        let e =
            anyhow::Error::new(Outer(std::io::Error::other("disk on fire"))).context("tier failed");
        assert_eq!(
            report(&e),
            "tier failed: the object store is not usable: disk on fire"
        );
        let plain = anyhow::Error::new(std::io::Error::other("inner")).context("outer");
        assert_eq!(report(&plain), "outer: inner");
    }
}
