//! The `strata` command line: parse arguments, load the config, run a mode, map the outcome to
//! an exit code (0 success, 1 failure, 2 bad configuration or usage).

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use strata::config::{Config, LogFormat};

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

#[derive(Subcommand)]
enum Command {
    /// Check a config file and print what it means (secrets redacted).
    Validate {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Archive topics into time-partitioned objects, exactly once.
    Dump {
        #[arg(long, short)]
        config: PathBuf,
        /// Read up to the high watermarks noted at start, store, commit and exit (for cron).
        #[arg(long)]
        once: bool,
    },
    /// Replay archived objects back into Kafka.
    Restore {
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Serve the Kafka tiered-storage bridge (RemoteStorageManager) on this host.
    Tier {
        #[arg(long, short)]
        config: PathBuf,
    },
}

fn load(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
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
                tracing::info!("stopping: flushing buffered data, storing it and committing (signal again to abort)");
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
            print!(
                "{}",
                strata::config::render_report(&config.display().to_string(), &cfg)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Dump { config, once } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return Ok(code),
            };
            start_logging(&cfg, cli.log_format)?;
            strata::telemetry::install_metrics(&cfg.telemetry).await?;
            let stop = Arc::new(AtomicBool::new(false));
            stop_on_signals(stop.clone());
            let summaries = strata::dump::run(&cfg, strata::dump::DumpOptions { once }, stop)
                .await
                .context("dump failed")?;
            for s in summaries {
                tracing::info!(task = %s.task, objects = s.objects, records = s.records, bytes = s.bytes, "done");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Restore { config } => {
            let cfg = match config {
                Some(path) => match load(&path) {
                    Ok(c) => c,
                    Err(code) => return Ok(code),
                },
                None => Config::embedded_default(),
            };
            start_logging(&cfg, cli.log_format)?;
            let Some(restore) = cfg.restore.as_ref() else {
                eprintln!("error: the config has no [restore] section; see config/example.toml");
                return Ok(ExitCode::from(2));
            };
            strata::restore::run(restore, strata::restore::RestoreOptions::default())
                .await
                .context("restore failed")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tier { config } => {
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return Ok(code),
            };
            start_logging(&cfg, cli.log_format)?;
            strata::telemetry::install_metrics(&cfg.telemetry).await?;
            let stop = Arc::new(AtomicBool::new(false));
            stop_on_signals(stop.clone());
            strata::tier::serve(&cfg, stop)
                .await
                .context("tier failed")?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
