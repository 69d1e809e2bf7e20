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
