//! Logs (tracing: human or JSON lines, `RUST_LOG` overrides the configured level) and the
//! Prometheus endpoint (`GET /metrics`). Metric names start with `strata_`; no label or value
//! ever carries a secret.

use crate::config::{LogFormat, TelemetryConfig};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::time::Duration;
use tracing_subscriber::EnvFilter;

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("telemetry.log_level {0:?} is not a valid filter")]
    Filter(String),
    #[error("telemetry.metrics_listen {addr}: cannot listen: {source}; pick a free port")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("metrics recorder: {0}")]
    Recorder(String),
}

/// The AWS SDK's credential chain warns, with a dump of its debug structures, about each
/// source that failed; the store's error says the same in one line (the sources tried and the
/// last answer). `RUST_LOG` still shows them.
const QUIET_CREDENTIAL_CHAIN: &str = "aws_config::meta::credentials::chain=error";

/// Starts logging to stderr. Safe to call once per process; later calls are ignored.
pub fn init_logging(format: LogFormat, level: &str) -> Result<(), TelemetryError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(f) if !f.is_empty() => EnvFilter::try_new(&f).map_err(|_| TelemetryError::Filter(f))?,
        _ => EnvFilter::try_new(level)
            .map_err(|_| TelemetryError::Filter(level.to_string()))?
            .add_directive(
                QUIET_CREDENTIAL_CHAIN
                    .parse()
                    .map_err(|_| TelemetryError::Filter(QUIET_CREDENTIAL_CHAIN.to_string()))?,
            ),
    };
    // Colours only for a person at a terminal: log files and collectors get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Human => builder.with_target(false).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    Ok(())
}

/// The recorder's handle, once installed: what `/metrics` and a metrics file render.
static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();

/// The gauge a scheduled run sets when it succeeds, per task; a metrics file keeps a task's
/// last value through failed runs, so an alert on its age fires when backups stop.
pub const LAST_SUCCESS: &str = "strata_dump_last_success_timestamp_seconds";

/// Writes the process's metrics in the Prometheus text format to `path`, for the node
/// exporter's textfile collector: to a temporary file beside it, then renamed over it, so the
/// collector never reads half a file. Values of [`LAST_SUCCESS`] that the previous file held for
/// tasks this run did not set are kept.
pub fn write_metrics_file(path: &std::path::Path) -> std::io::Result<()> {
    let Some(handle) = HANDLE.get() else {
        return Err(std::io::Error::other("no metrics recorder is installed"));
    };
    let now = handle.render();
    let kept = std::fs::read_to_string(path)
        .map(|old| carried(&old, &now))
        .unwrap_or_default();
    let mut text = now;
    if !kept.is_empty() {
        if !text.contains(&format!("# TYPE {LAST_SUCCESS} ")) {
            text.push_str(&format!("# TYPE {LAST_SUCCESS} gauge\n"));
        }
        text.push_str(&kept);
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("metrics"),
        std::process::id()
    ));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The [`LAST_SUCCESS`] lines of an older file whose labels the new text lacks (pure).
fn carried(old: &str, new: &str) -> String {
    old.lines()
        .filter(|l| l.starts_with(&format!("{LAST_SUCCESS}{{")))
        .filter(|l| {
            let labels = l.split_once('}').map(|(a, _)| a).unwrap_or(l);
            !new.lines().any(|n| n.starts_with(labels))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Latency buckets (seconds) shared by upload and fetch histograms.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Installs the Prometheus recorder and, when an address is configured, serves `/metrics`.
pub async fn install_metrics(cfg: &TelemetryConfig) -> Result<Option<SocketAddr>, TelemetryError> {
    let recorder = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| TelemetryError::Recorder(e.to_string()))?
        .build_recorder();
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_err() {
        return Ok(None);
    }
    let _ = HANDLE.set(handle.clone());
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    let Some(addr) = cfg.metrics_listen else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| TelemetryError::Listen { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| TelemetryError::Listen { addr, source })?;
    tokio::spawn(serve(listener, handle));
    tracing::info!(%bound, "metrics at http://{bound}/metrics");
    Ok(Some(bound))
}

/// Read-only: `/metrics` and nothing else, with the bounds of [`crate::listen`]. Metric labels
/// carry task, topic and operation names, never paths, keys or secrets.
async fn serve(listener: tokio::net::TcpListener, handle: PrometheusHandle) {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let h = handle.clone();
            async move { h.render() }
        }),
    );
    let limits = crate::listen::Limits {
        max_connections: 16,
        ..crate::listen::Limits::default()
    };
    crate::listen::serve(
        "metrics",
        listener,
        None,
        limits,
        move |_| app.clone(),
        std::future::pending(),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metrics_file_keeps_the_last_success_of_tasks_that_failed_since() {
        let old = format!(
            "# TYPE {LAST_SUCCESS} gauge\n{LAST_SUCCESS}{{task=\"a\"}} 100\n{LAST_SUCCESS}{{task=\"b\"}} 200\nother_metric 1\n"
        );
        // This run: task a succeeded again, b failed.
        let new = format!("{LAST_SUCCESS}{{task=\"a\"}} 300\n");
        assert_eq!(
            carried(&old, &new),
            format!("{LAST_SUCCESS}{{task=\"b\"}} 200\n")
        );
        assert_eq!(carried("", &new), "");
    }
}
