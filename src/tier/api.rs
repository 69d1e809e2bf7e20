//! The bridge's HTTP API (`bridge/kafka-rsm/README.md`): JSON in, bytes or JSON out; errors as
//! short text with a status the bridge maps to Kafka's exceptions (404 = not found, 400 = a
//! request field is wrong, 401 = not authenticated, 503 = busy, 5xx = strata or the store
//! failed).
//!
//! Every connection starts with a hello in which strata proves it knows the shared secret;
//! every later request must carry the connection's next sequence number and a MAC over it, and
//! every answer is signed the same way ([`authenticate`]). Bodies are read under a size and a
//! time bound before anything else looks at them; until its first MAC checked, a connection
//! also lives under the listener's unauthenticated cap and deadline ([`crate::listen`]).

use super::auth::{self, SessionKey};
use super::copy::file_source;
use super::error::TierError;
use super::fetch;
use super::files::MAX_INDEX_BYTES;
use super::protocol::{
    CopyRequest, CopyResponse, DeleteRequest, FetchIndexRequest, FetchRequest, UploadHeader,
    UploadSizes,
};
use super::stats;
use super::upload::{upload_source, BodyReader};
use super::Tier;
use crate::listen::{Admission, AdmissionError, WARN_INTERVAL};
use crate::throttle::Throttle;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Request and response header carrying the MACs.
pub const AUTH_HEADER: &str = "strata-auth";
/// Largest JSON request body (a copy request with long paths and many leader epochs is a few
/// KiB).
pub const MAX_JSON: usize = 1 << 20;
/// Largest hello body: a version and a nonce, read before the caller proved anything.
pub const MAX_HELLO: usize = 4 << 10;
/// Longest gap between two pieces of a request body.
pub const BODY_IDLE: Duration = Duration::from_secs(10);
/// How long a fetch, fetch-index, delete or health request may wait for one of the
/// `tier.max_requests` slots before it is answered "busy".
const REQUEST_WAIT: Duration = Duration::from_secs(2);

const JSON: &str = "application/json";
const UPLOAD: &str = "application/vnd.strata.segment-upload";
/// The type of a fetch answered with cache files instead of bytes ([`super::protocol::Handoff`]).
pub const HANDOFF: &str = "application/vnd.strata.handoff+json";

/// The listener a connection came in on. Fetches are handed off over the Unix socket only: a
/// peer on it shares this host, so the files an answer names are the ones it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Unix,
}

/// Per connection: the session key once the hello is done, and the next request's number.
#[derive(Default)]
pub struct Session {
    state: Mutex<SessionState>,
}

#[derive(Default)]
struct SessionState {
    key: Option<SessionKey>,
    next_seq: u64,
}

impl Session {
    fn lock(&self) -> std::sync::MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The request passed the check: its number, key, and (for uploads) the rest of the body.
#[derive(Clone)]
struct Verified {
    seq: u64,
    key: SessionKey,
}

/// The body of a copy upload after its header, for the handler.
struct UploadBody(Mutex<Option<(Bytes, BodyReader)>>);

/// A `200` fetch answer: its body is streamed, so its signature covers its length only.
#[derive(Clone, Copy)]
struct Streamed;

/// The API; each connection's service gets its own [`Session`] (see [`Tier::connection`]).
pub fn router(tier: Arc<Tier>) -> Router {
    Router::new()
        .route("/v1/hello", post(hello))
        .route("/v1/copy", post(copy))
        .route("/v1/copy-upload", post(copy_upload))
        .route("/v1/fetch", post(fetch))
        .route("/v1/fetch-index", post(fetch_index))
        .route("/v1/delete", post(delete))
        .route("/v1/health", get(health))
        .layer(axum::middleware::from_fn(authenticate))
        .with_state(tier)
}

impl Tier {
    /// The service for one new connection; `admission` is told when its caller authenticated.
    pub fn connection(router: &Router, transport: Transport, admission: Admission) -> Router {
        router
            .clone()
            .layer(Extension(Arc::new(Session::default())))
            .layer(Extension(transport))
            .layer(Extension(admission))
    }
}

/// Refusals are logged throttled: callers without the secret can send them by the thousand.
static REFUSALS: Mutex<Throttle> = Mutex::new(Throttle::new(WARN_INTERVAL));

fn refusals() -> std::sync::MutexGuard<'static, Throttle> {
    REFUSALS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Logs the refusals held back since the last line, if a line is due.
pub fn flush_refusal_warnings() {
    let due = refusals().flush(std::time::Instant::now());
    if let Some(count) = due {
        tracing::warn!(count, "{count} more requests refused since the last line");
    }
}

/// A refusal before the caller proved who it is: unsigned, and the connection is closed.
fn refuse(error: TierError) -> Response {
    let reason = match &error {
        TierError::Unauthorized(_) => "auth",
        TierError::ContentType { .. } => "content_type",
        TierError::TooLarge(_) => "too_large",
        TierError::SlowBody(_) => "slow_body",
        _ => "bad_request",
    };
    stats::rejected("request", reason);
    let due = refusals().event(std::time::Instant::now());
    if let Some(count) = due {
        tracing::warn!(%error, count, "request refused ({count} since the last line)");
    }
    let mut r = (
        error.status(),
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        error.to_string(),
    )
        .into_response();
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// The content type each route takes.
fn expected_type(method: &Method, path: &str) -> Option<&'static str> {
    match (method, path) {
        (&Method::GET, "/v1/health") => None,
        (_, "/v1/copy-upload") => Some(UPLOAD),
        _ => Some(JSON),
    }
}

fn content_type_ok(found: Option<&HeaderValue>, expected: &str) -> bool {
    let Some(v) = found.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mime = v.split(';').next().unwrap_or("").trim();
    mime.eq_ignore_ascii_case(expected)
}

/// Checks the caller before any handler runs and signs what it answers.
async fn authenticate(request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let method = parts.method.clone();
    if let Some(expected) = expected_type(&method, &path) {
        let found = parts.headers.get(header::CONTENT_TYPE);
        if !content_type_ok(found, expected) {
            return refuse(TierError::ContentType {
                op: op_name(&path),
                found: found
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string(),
                expected,
            });
        }
    }
    let Some(session) = parts.extensions.get::<Arc<Session>>().cloned() else {
        return refuse(TierError::Internal("no session for the connection".into()));
    };
    let Some(admission) = parts.extensions.get::<Admission>().cloned() else {
        return refuse(TierError::Internal(
            "no admission for the connection".into(),
        ));
    };
    let mut reader = BodyReader::new(body, BODY_IDLE);
    if path == "/v1/hello" {
        return match reader.all(MAX_HELLO).await {
            Ok(b) => next.run(Request::from_parts(parts, Body::from(b))).await,
            Err(e) => refuse(e),
        };
    }
    let claimed = match parts.headers.get(AUTH_HEADER).map(parse_auth) {
        Some(Ok(c)) => c,
        Some(Err(e)) => return refuse(e),
        None => {
            return refuse(TierError::Unauthorized(format!(
                "no {AUTH_HEADER} header: every request after the hello is signed"
            )))
        }
    };
    let (key, seq) = {
        let state = session.lock();
        match &state.key {
            Some(k) => (k.clone(), state.next_seq),
            None => {
                return refuse(TierError::Unauthorized(
                    "no hello on this connection yet".into(),
                ))
            }
        }
    };
    if claimed.0 != seq {
        return refuse(TierError::Unauthorized(format!(
            "request number {} where {seq} was due (a replayed or reordered request)",
            claimed.0
        )));
    }
    // What the MAC covers: the whole body, or an upload's JSON header.
    let covered = if path == "/v1/copy-upload" {
        match read_upload_header(&mut reader).await {
            Ok(h) => h,
            Err(e) => return refuse(e),
        }
    } else {
        match reader.all(MAX_JSON).await {
            Ok(b) => b,
            Err(e) => return refuse(e),
        }
    };
    let want = key.request_mac(seq, method.as_str(), &path, &auth::sha256_hex(&covered));
    if !auth::same_mac(&want, &claimed.1) {
        // The connection is closed with this answer: no second guess on it.
        session.lock().key = None;
        return refuse(TierError::Unauthorized(
            "the request's signature is wrong: the bridge's strata.secret.file holds another secret than tier.secret_file".into(),
        ));
    }
    session.lock().next_seq = seq + 1;
    if let Err(e) = admission.authenticated() {
        return refuse_authenticated(e, seq, &key).await;
    }
    parts.extensions.insert(Verified {
        seq,
        key: key.clone(),
    });
    let body = if path == "/v1/copy-upload" {
        parts
            .extensions
            .insert(Arc::new(UploadBody(Mutex::new(Some((covered, reader))))));
        Body::empty()
    } else {
        Body::from(covered)
    };
    let response = next.run(Request::from_parts(parts, body)).await;
    sign(response, seq, &key).await
}

/// A caller that proved who it is but cannot be served on this connection: signed, and the
/// connection is closed. Counted and logged by the listener.
async fn refuse_authenticated(e: AdmissionError, seq: u64, key: &SessionKey) -> Response {
    let status = match e {
        AdmissionError::Full(_) => StatusCode::SERVICE_UNAVAILABLE,
        AdmissionError::Closed => StatusCode::REQUEST_TIMEOUT,
    };
    let mut r = (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{e}; try again"),
    )
        .into_response();
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    sign(r, seq, key).await
}

/// `<seq> <mac>`.
fn parse_auth(v: &HeaderValue) -> Result<(u64, String), TierError> {
    let bad = || TierError::Unauthorized(format!("{AUTH_HEADER} is not \"<number> <mac>\""));
    let text = v.to_str().map_err(|_| bad())?;
    let (seq, mac) = text.trim().split_once(' ').ok_or_else(bad)?;
    let seq = seq.parse().map_err(|_| bad())?;
    Ok((seq, mac.trim().to_string()))
}

/// The length prefix and JSON header of an upload.
async fn read_upload_header(reader: &mut BodyReader) -> Result<Bytes, TierError> {
    let len = reader.exact(4, "header length").await?;
    let n = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if n > MAX_JSON {
        return Err(TierError::TooLarge(format!(
            "an upload header of {n} bytes; at most {MAX_JSON}"
        )));
    }
    reader.exact(n, "upload header").await
}

/// Adds the response's signature; buffered bodies are hashed, a streamed fetch body is covered
/// by its length.
async fn sign(response: Response, seq: u64, key: &SessionKey) -> Response {
    let (mut parts, body) = response.into_parts();
    let (digest, body) = if parts.extensions.get::<Streamed>().is_some() {
        let len = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        (format!("stream {len}"), body)
    } else {
        match axum::body::to_bytes(body, usize::MAX).await {
            Ok(b) => (auth::sha256_hex(&b), Body::from(b)),
            Err(e) => {
                let msg = format!("internal error: the answer could not be built: {e}");
                parts.status = StatusCode::INTERNAL_SERVER_ERROR;
                (auth::sha256_hex(msg.as_bytes()), Body::from(msg))
            }
        }
    };
    let mac = key.response_mac(seq, parts.status.as_u16(), &digest);
    if let Ok(v) = HeaderValue::from_str(&mac) {
        parts.headers.insert(AUTH_HEADER, v);
    }
    Response::from_parts(parts, body)
}

fn op_name(path: &str) -> &'static str {
    match path {
        "/v1/hello" => "hello",
        "/v1/copy" => "copy",
        "/v1/copy-upload" => "copy-upload",
        "/v1/fetch" => "fetch",
        "/v1/fetch-index" => "fetch-index",
        "/v1/delete" => "delete",
        "/v1/health" => "health",
        _ => "unknown",
    }
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
            TierError::Busy(_) => {
                stats::error(self.op);
                tracing::warn!(op = self.op, %message, "refused: at a concurrency cap");
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

#[derive(Deserialize)]
struct HelloRequest {
    version: u32,
    client_nonce: String,
}

#[derive(Serialize)]
struct HelloResponse {
    version: u32,
    server_nonce: String,
    socket: Option<String>,
    proof: String,
}

/// The handshake: strata proves it knows the secret and both sides derive the session key.
async fn hello(
    State(t): State<Arc<Tier>>,
    Extension(session): Extension<Arc<Session>>,
    body: Bytes,
) -> Response {
    let req: HelloRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return refuse(TierError::BadJson {
                what: "hello",
                message: e.to_string(),
            })
        }
    };
    if req.version != auth::VERSION || !auth::valid_nonce(&req.client_nonce) {
        return refuse(TierError::Unauthorized(format!(
            "a hello of version {} with a client_nonce of {} characters; this strata speaks version {} with 64 lowercase hex digits",
            req.version,
            req.client_nonce.len(),
            auth::VERSION
        )));
    }
    let mut state = session.lock();
    if state.key.is_some() {
        state.key = None;
        return refuse(TierError::Unauthorized(
            "a second hello on one connection".into(),
        ));
    }
    let server_nonce = auth::nonce();
    let socket = t.socket.as_ref().map(|p| p.display().to_string());
    let proof = auth::server_proof(
        &t.secret,
        &req.client_nonce,
        &server_nonce,
        socket.as_deref(),
    );
    state.key = Some(SessionKey::derive(
        &t.secret,
        &req.client_nonce,
        &server_nonce,
    ));
    state.next_seq = 1;
    Json(HelloResponse {
        version: auth::VERSION,
        server_nonce,
        socket,
        proof,
    })
    .into_response()
}

async fn copy(State(t): State<Arc<Tier>>, body: Bytes) -> Result<Json<CopyResponse>, Failure> {
    let req: CopyRequest = parse("copy", &body)?;
    let started = std::time::Instant::now();
    let epochs = req.check().map_err(|e| fail("copy")(e.into()))?;
    let seg = &req.segment;
    let files = t.log_dirs.open_all(seg, &req.files).map_err(fail("copy"))?;
    let sizes = UploadSizes {
        offset_index: files.offset_index.size,
        time_index: files.time_index.size,
        transaction_index: files.transaction_index.as_ref().map(|f| f.size),
        producer_snapshot: files.producer_snapshot.size,
        log: files.log.size,
    };
    let source = file_source(files, seg.describe(), t.chunk_size);
    let keys = t
        .copier
        .copy(seg, &sizes, Bytes::from(epochs), source)
        .await
        .map_err(fail("copy"))?;
    t.reader.forget(&keys);
    tracing::info!(segment = %seg.describe(), bytes = seg.segment_size_bytes, ms = started.elapsed().as_millis() as u64, "segment copied");
    Ok(Json(CopyResponse {
        custom_metadata: None,
    }))
}

async fn copy_upload(
    State(t): State<Arc<Tier>>,
    Extension(verified): Extension<Verified>,
    Extension(body): Extension<Arc<UploadBody>>,
) -> Result<Json<CopyResponse>, Failure> {
    let op = "copy-upload";
    let Some((header, reader)) = body.0.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return Err(fail(op)(TierError::Internal(
            "the upload body was taken twice".into(),
        )));
    };
    let started = std::time::Instant::now();
    let req: UploadHeader = parse(op, &header)?;
    let epochs = req.check(MAX_INDEX_BYTES).map_err(|e| fail(op)(e.into()))?;
    let seg = &req.segment;
    let source = upload_source(
        reader,
        req.sizes.clone(),
        verified.key.upload_tag(verified.seq),
        seg.describe(),
        t.chunk_size,
    );
    let keys = t
        .copier
        .copy(seg, &req.sizes, Bytes::from(epochs), source)
        .await
        .map_err(fail(op))?;
    t.reader.forget(&keys);
    tracing::info!(segment = %seg.describe(), bytes = seg.segment_size_bytes, ms = started.elapsed().as_millis() as u64, "segment uploaded and copied");
    Ok(Json(CopyResponse {
        custom_metadata: None,
    }))
}

async fn fetch(
    State(t): State<Arc<Tier>>,
    Extension(transport): Extension<Transport>,
    body: Bytes,
) -> Result<Response, Failure> {
    let req: FetchRequest = parse("fetch", &body)?;
    let started = std::time::Instant::now();
    let (start, end) = req.check().map_err(|e| fail("fetch")(e.into()))?;
    if let Some(name) = &req.damaged_file {
        t.reader.distrust(name);
    }
    let permit = t
        .request_slot("fetch", REQUEST_WAIT)
        .await
        .map_err(fail("fetch"))?;
    let handoff = (req.handoff && t.handoff && transport == Transport::Unix)
        .then_some(req.handoff_max_bytes.or(req.max_bytes));
    let read = match t
        .reader
        .read(&req.segment, start, end, req.max_bytes, handoff)
        .await
        .map_err(fail("fetch"))?
    {
        fetch::Answer::Bytes(read) => read,
        fetch::Answer::Files(h) => {
            tracing::debug!(segment = %req.segment.describe(), start, ?end, max_bytes = ?req.max_bytes, len = h.len, pieces = h.pieces.len(), us = started.elapsed().as_micros() as u64, "fetch handed off");
            return Ok(([(header::CONTENT_TYPE, HANDOFF)], Json(h)).into_response());
        }
    };
    tracing::debug!(segment = %req.segment.describe(), start, ?end, max_bytes = ?req.max_bytes, len = read.len, first_byte_us = started.elapsed().as_micros() as u64, "fetch");
    // The slot is held until the body is sent (or the bridge hangs up).
    let body = futures::StreamExt::map(read.body, move |b| {
        let _slot = &permit;
        b
    });
    // The length is known, so the body is sent with Content-Length: a body cut short by a
    // later failure cannot pass for a complete one.
    let mut r = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, read.len)
        .body(Body::from_stream(body))
        .map_err(|e| fail("fetch")(TierError::Internal(e.to_string())))?;
    r.extensions_mut().insert(Streamed);
    Ok(r)
}

async fn fetch_index(State(t): State<Arc<Tier>>, body: Bytes) -> Result<Response, Failure> {
    let req: FetchIndexRequest = parse("fetch-index", &body)?;
    req.segment
        .check()
        .map_err(|e| fail("fetch-index")(e.into()))?;
    let _slot = t
        .request_slot("fetch-index", REQUEST_WAIT)
        .await
        .map_err(fail("fetch-index"))?;
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
    let _slot = t
        .request_slot("delete", REQUEST_WAIT)
        .await
        .map_err(fail("delete"))?;
    t.delete(&req.segment).await.map_err(fail("delete"))?;
    tracing::info!(segment = %req.segment.describe(), "segment deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Names the process, so a caller can tell which `strata tier` answered.
async fn health() -> String {
    format!("ok pid={}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_strict() {
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert!(content_type_ok(Some(&v("application/json")), JSON));
        assert!(content_type_ok(
            Some(&v("Application/JSON; charset=utf-8")),
            JSON
        ));
        assert!(!content_type_ok(Some(&v("text/plain")), JSON));
        assert!(!content_type_ok(Some(&v("application/json-seq")), JSON));
        assert!(!content_type_ok(None, JSON));
        assert_eq!(
            expected_type(&Method::POST, "/v1/copy-upload"),
            Some(UPLOAD)
        );
        assert_eq!(expected_type(&Method::GET, "/v1/health"), None);
        assert_eq!(expected_type(&Method::POST, "/v1/health"), Some(JSON));
    }

    #[test]
    fn auth_headers_parse() {
        let p = |s: &'static str| parse_auth(&HeaderValue::from_static(s));
        assert_eq!(p("7 abc").unwrap(), (7, "abc".to_string()));
        assert!(p("abc").is_err());
        assert!(p("-1 abc").is_err());
        assert!(p("x abc").is_err());
    }
}
