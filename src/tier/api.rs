//! The bridge's HTTP API (`bridge/kafka-rsm/README.md`): JSON in, bytes or JSON out; errors as
//! short text with a status the bridge maps to Kafka's exceptions (404 = not found, 400 = a
//! request field is wrong, 5xx = strata or the store failed).

use super::error::TierError;
use super::protocol::{CopyRequest, CopyResponse, DeleteRequest, FetchIndexRequest, FetchRequest};
use super::stats;
use super::Tier;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// Response header naming the Unix domain socket this service also listens on.
pub const SOCKET_HEADER: &str = "strata-socket";

/// The API; with `socket`, every response names it in [`SOCKET_HEADER`], so that a bridge on the
/// same host can move its next connections there (see `super::unix_socket_path`).
pub fn router(tier: Arc<Tier>, socket: Option<&std::path::Path>) -> Router {
    let router = Router::new()
        .route("/v1/copy", post(copy))
        .route("/v1/fetch", post(fetch))
        .route("/v1/fetch-index", post(fetch_index))
        .route("/v1/delete", post(delete))
        .route("/v1/health", get(health))
        .with_state(tier);
    let Some(value) = socket.and_then(|p| header::HeaderValue::from_str(p.to_str()?).ok()) else {
        return router;
    };
    router.layer(axum::middleware::map_response(move |mut r: Response| {
        let value = value.clone();
        async move {
            r.headers_mut().insert(SOCKET_HEADER, value);
            r
        }
    }))
}

/// A failed request: logged once, counted, answered as text.
struct Failure {
    op: &'static str,
    error: TierError,
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let status = self.error.status();
        let message = self.error.to_string();
        match self.error {
            // The broker asks for transaction indexes that do not exist as a matter of course.
            TierError::IndexNotFound { .. } => {
                tracing::debug!(op = self.op, %message, "not found")
            }
            TierError::SegmentNotFound { .. } => {
                stats::error(self.op);
                tracing::warn!(op = self.op, %message, "not found");
            }
            _ if status.is_client_error() => {
                stats::error(self.op);
                tracing::warn!(op = self.op, %message, "bad request");
            }
            _ => {
                stats::error(self.op);
                tracing::error!(op = self.op, %message, "request failed");
            }
        }
        (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            message,
        )
            .into_response()
    }
}

fn parse<T: DeserializeOwned>(op: &'static str, body: &[u8]) -> Result<T, Failure> {
    serde_json::from_slice(body).map_err(|e| Failure {
        op,
        error: TierError::BadJson {
            what: op,
            message: e.to_string(),
        },
    })
}

fn fail(op: &'static str) -> impl Fn(TierError) -> Failure {
    move |error| Failure { op, error }
}

async fn copy(State(t): State<Arc<Tier>>, body: Bytes) -> Result<Json<CopyResponse>, Failure> {
    let req: CopyRequest = parse("copy", &body)?;
    let started = std::time::Instant::now();
    let keys = t.copier.copy(&req).await.map_err(fail("copy"))?;
    t.reader.forget(&keys);
    tracing::info!(segment = %req.segment.describe(), bytes = req.segment.segment_size_bytes, ms = started.elapsed().as_millis() as u64, "segment copied");
    Ok(Json(CopyResponse {
        custom_metadata: None,
    }))
}

async fn fetch(State(t): State<Arc<Tier>>, body: Bytes) -> Result<Response, Failure> {
    let req: FetchRequest = parse("fetch", &body)?;
    let started = std::time::Instant::now();
    let (start, end) = req.check().map_err(|e| fail("fetch")(e.into()))?;
    let read = t
        .reader
        .read(&req.segment, start, end, req.max_bytes)
        .await
        .map_err(fail("fetch"))?;
    tracing::debug!(segment = %req.segment.describe(), start, ?end, max_bytes = ?req.max_bytes, len = read.len, first_byte_us = started.elapsed().as_micros() as u64, "fetch");
    // The length is known, so the body is sent with Content-Length: a body cut short by a
    // later failure cannot pass for a complete one.
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, read.len)
        .body(Body::from_stream(read.body))
        .map_err(|e| fail("fetch")(TierError::Internal(e.to_string())))
}

async fn fetch_index(State(t): State<Arc<Tier>>, body: Bytes) -> Result<Response, Failure> {
    let req: FetchIndexRequest = parse("fetch-index", &body)?;
    req.segment
        .check()
        .map_err(|e| fail("fetch-index")(e.into()))?;
    let data = t
        .reader
        .index(&req.segment, req.index)
        .await
        .map_err(fail("fetch-index"))?;
    stats::fetched(data.len() as u64);
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], data).into_response())
}

async fn delete(State(t): State<Arc<Tier>>, body: Bytes) -> Result<StatusCode, Failure> {
    let req: DeleteRequest = parse("delete", &body)?;
    req.segment.check().map_err(|e| fail("delete")(e.into()))?;
    t.delete(&req.segment).await.map_err(fail("delete"))?;
    tracing::info!(segment = %req.segment.describe(), "segment deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Names the process, so a caller can tell which `strata tier` answered.
async fn health() -> String {
    format!("ok pid={}", std::process::id())
}
