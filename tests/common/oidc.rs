//! A stand-in OIDC provider for the OAUTHBEARER tests: an HTTP token endpoint (client
//! credentials grant, RFC 6749 4.4) that signs ES256 JWTs with the dev broker's OAuth key, and
//! the matching JWKS. The broker trusts the same key through its JWKS file (see `./dev`,
//! KAFKA_OAUTH_DIR), so a token from here logs in as `STRATA_TEST_OAUTH_SUBJECT`.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// How long the tokens are valid (librdkafka refreshes them at 80% of that).
const TOKEN_SECS: u64 = 300;

struct Inner {
    key: EcdsaKeyPair,
    client_id: String,
    client_secret: String,
    /// Token requests answered with a token.
    issued: AtomicUsize,
    /// Token requests refused (wrong client or grant).
    refused: AtomicUsize,
}

/// A running provider; stops with the test's runtime.
pub struct Provider {
    addr: std::net::SocketAddr,
    inner: Arc<Inner>,
}

impl Provider {
    /// Starts a provider on a free port that accepts one client.
    pub async fn start(client_id: &str, client_secret: &str) -> Self {
        let der = std::fs::read(env("STRATA_TEST_OAUTH_KEY")).expect("the dev OAuth signing key");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der)
            .expect("a PKCS#8 P-256 key");
        let inner = Arc::new(Inner {
            key,
            client_id: client_id.to_string(),
            client_secret: client_secret.to_string(),
            issued: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .route("/token", post(token))
            .route("/jwks", get(jwks))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, inner }
    }

    /// The URL for `oauth_token_endpoint`.
    pub fn token_endpoint(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    /// The URL of the JWKS (the keys the broker checks tokens with).
    pub fn jwks_url(&self) -> String {
        format!("http://{}/jwks", self.addr)
    }

    pub fn issued(&self) -> usize {
        self.inner.issued.load(Ordering::SeqCst)
    }

    pub fn refused(&self) -> usize {
        self.inner.refused.load(Ordering::SeqCst)
    }
}

/// `application/x-www-form-urlencoded` fields (only what a token request needs).
fn form(body: &str) -> Vec<(String, String)> {
    body.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            let dec = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (dec(k), dec(v))
        })
        .collect()
}

/// The client of a request: HTTP Basic (what librdkafka sends) or form fields.
fn client_of(headers: &HeaderMap, fields: &[(String, String)]) -> Option<(String, String)> {
    if let Some(basic) = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
    {
        let text = String::from_utf8(STANDARD.decode(basic.trim()).ok()?).ok()?;
        let (id, secret) = text.split_once(':')?;
        return Some((id.to_string(), secret.to_string()));
    }
    let field = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    Some((field("client_id")?, field("client_secret")?))
}

async fn token(
    State(p): State<Arc<Inner>>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, axum::Json<serde_json::Value>) {
    let fields = form(&body);
    let grant = fields
        .iter()
        .any(|(k, v)| k == "grant_type" && v == "client_credentials");
    let client = client_of(&headers, &fields);
    if !grant || client != Some((p.client_id.clone(), p.client_secret.clone())) {
        p.refused.fetch_add(1, Ordering::SeqCst);
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(serde_json::json!({"error": "invalid_client"})),
        );
    }
    let scope = fields
        .iter()
        .find(|(k, _)| k == "scope")
        .map_or("kafka", |(_, v)| v.as_str());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header =
        serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": env("STRATA_TEST_OAUTH_KID")});
    let claims = serde_json::json!({
        "iss": env("STRATA_TEST_OAUTH_ISSUER"),
        "aud": env("STRATA_TEST_OAUTH_AUDIENCE"),
        "sub": env("STRATA_TEST_OAUTH_SUBJECT"),
        "azp": p.client_id,
        "scope": scope,
        "iat": now,
        "exp": now + TOKEN_SECS,
    });
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let sig = p
        .key
        .sign(&SystemRandom::new(), signing_input.as_bytes())
        .unwrap();
    p.issued.fetch_add(1, Ordering::SeqCst);
    (
        StatusCode::OK,
        axum::Json(serde_json::json!({
            "access_token": format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref())),
            "token_type": "Bearer",
            "expires_in": TOKEN_SECS,
        })),
    )
}

/// The public key as a JWKS: x and y of the uncompressed point (0x04 || x || y).
async fn jwks(State(p): State<Arc<Inner>>) -> axum::Json<serde_json::Value> {
    let point = p.key.public_key().as_ref();
    axum::Json(serde_json::json!({"keys": [{
        "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256",
        "kid": env("STRATA_TEST_OAUTH_KID"),
        "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
    }]}))
}

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run the tests with `./dev test`"))
}
