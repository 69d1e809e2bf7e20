//! `sasl_mechanism = "AWS_MSK_IAM"`: Amazon MSK's IAM login is SASL/OAUTHBEARER whose token is
//! a SigV4-presigned `kafka-cluster:Connect` request, base64url-encoded. Tokens are signed here
//! with the AWS default credential chain (or a role assumed with it), cached per settings and
//! renewed once half their life is gone; every client context hands them to librdkafka through
//! [`oauth_token_hook`], and [`prime`] sets one on a client that blocks before it polls.

use crate::config::MskIam;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use base64::Engine;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// How long a token is valid: MSK accepts presigned requests of up to 15 minutes.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(900);

/// A token is signed anew when less than this share of its lifetime remains. librdkafka asks
/// for a new token at 80% of the one it has, so every such refresh gets a fresh one, and a
/// client created later starts with at least half a lifetime.
const REUSE_WHILE_REMAINING: f64 = 0.5;

/// How long one credential lookup (or the set-up of the chain) may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The service name MSK's tokens are signed for, and the action they presign.
const SERVICE: &str = "kafka-cluster";
const ACTION: &str = "kafka-cluster:Connect";

/// What the `sasl.oauthbearer.config` of strata's MSK IAM clients starts with.
const CONFIG_PREFIX: &str = "strata-aws-msk-iam";

/// Query values as SigV4 encodes them: everything but RFC 3986's unreserved characters.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Why there is no MSK IAM token; never holds a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MskIamError {
    #[error("no AWS region: kafka.aws_region is not set and the AWS environment names none (AWS_REGION, AWS_DEFAULT_REGION, the profile's region, EC2 instance metadata); set kafka.aws_region to the cluster's region")]
    NoRegion,
    #[error("no AWS credentials to sign the MSK IAM login with ({0}); strata uses the AWS default credential chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the profile (AWS_PROFILE), web identity (EKS), ECS task role, EC2 instance role")]
    Credentials(String),
    #[error("the AWS credentials expired at {0} s after the epoch; the credential source did not renew them")]
    Expired(u64),
    #[error("signing the MSK IAM token failed: {0}")]
    Signing(String),
    #[error("the AWS credential lookup did not finish within {} s", LOOKUP_TIMEOUT.as_secs())]
    Timeout,
}

/// A signed token and when it stops being valid.
#[derive(Clone, PartialEq, Eq)]
pub struct MskToken {
    /// base64url (no padding) of the presigned URL.
    pub value: String,
    pub signed_at: SystemTime,
    pub expires_at: SystemTime,
}

impl std::fmt::Debug for MskToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MskToken")
            .field("signed_at", &self.signed_at)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

impl MskToken {
    /// Whether to hand this token out at `now` rather than sign a new one.
    pub fn reusable_at(&self, now: SystemTime) -> bool {
        let life = self
            .expires_at
            .duration_since(self.signed_at)
            .unwrap_or_default();
        let left = self.expires_at.duration_since(now).unwrap_or_default();
        left.as_secs_f64() > life.as_secs_f64() * REUSE_WHILE_REMAINING
    }

    /// The expiry in milliseconds since the epoch, as librdkafka takes it.
    pub fn expires_ms(&self) -> i64 {
        millis(self.expires_at)
    }
}

fn millis(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Signs the token for a cluster in `region` with `creds` at `now`: the presigned URL of
/// `GET https://kafka.<region>.amazonaws.com/?Action=kafka-cluster:Connect`, valid for
/// [`TOKEN_LIFETIME`] or until the credentials expire, whichever comes first.
pub fn sign(region: &str, creds: &Credentials, now: SystemTime) -> Result<MskToken, MskIamError> {
    use aws_sigv4::http_request::{
        sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
    };
    let mut expires_at = now + TOKEN_LIFETIME;
    if let Some(at) = creds.expiry() {
        if at <= now {
            return Err(MskIamError::Expired(millis(at) as u64 / 1000));
        }
        expires_at = expires_at.min(at);
    }
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(TOKEN_LIFETIME);
    let identity = creds.clone().into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| MskIamError::Signing(e.to_string()))?;
    let mut url = format!(
        "https://kafka.{region}.amazonaws.com/?Action={}",
        encode(ACTION)
    );
    let request = SignableRequest::new("GET", &url, std::iter::empty(), SignableBody::Bytes(&[]))
        .map_err(|e| MskIamError::Signing(e.to_string()))?;
    let (instructions, _) = sign(request, &params.into())
        .map_err(|e| MskIamError::Signing(e.to_string()))?
        .into_parts();
    for (name, value) in instructions.params() {
        url.push_str(&format!("&{}={}", encode(name), encode(value)));
    }
    // Not signed: what MSK's logs show as the client.
    url.push_str(&format!(
        "&User-Agent={}",
        encode(concat!("strata/", env!("CARGO_PKG_VERSION")))
    ));
    Ok(MskToken {
        value: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url.as_bytes()),
        signed_at: now,
        expires_at,
    })
}

fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, QUERY_VALUE).to_string()
}

/// The newest token of one set of settings: reused while [`MskToken::reusable_at`], else
/// signed anew by `sign` (which is asked for credentials only then).
#[derive(Debug, Default)]
pub struct TokenCache {
    current: Option<MskToken>,
}

impl TokenCache {
    pub fn token(
        &mut self,
        now: SystemTime,
        sign: impl FnOnce(SystemTime) -> Result<MskToken, MskIamError>,
    ) -> Result<MskToken, MskIamError> {
        if let Some(t) = self.current.as_ref().filter(|t| t.reusable_at(now)) {
            return Ok(t.clone());
        }
        let t = sign(now)?;
        self.current = Some(t.clone());
        Ok(t)
    }
}

/// The `sasl.oauthbearer.config` of a client with these settings: how the refresh hook finds
/// their [`Signer`] (librdkafka passes it back on every refresh).
pub fn oauthbearer_config(m: &MskIam) -> String {
    format!(
        "{CONFIG_PREFIX} region={} role={}",
        m.region.as_deref().unwrap_or("-"),
        m.role.as_ref().map_or("-", |r| r.role_arn.as_str())
    )
}

/// [`oauthbearer_config`] read back; `None` for any other text.
fn settings_of(config: &str) -> Option<MskIam> {
    let mut words = config.split(' ');
    if words.next()? != CONFIG_PREFIX {
        return None;
    }
    let value = |w: Option<&str>, name: &str| -> Option<Option<String>> {
        let v = w?.strip_prefix(name)?.strip_prefix('=')?;
        Some((v != "-").then(|| v.to_string()))
    };
    let region = value(words.next(), "region")?;
    let role = value(words.next(), "role")?;
    Some(MskIam {
        region,
        role: role.map(|role_arn| crate::config::AssumeRole {
            role_arn,
            external_id: None,
            session_name: crate::config::AssumeRole::DEFAULT_SESSION_NAME.to_string(),
            sts_endpoint: None,
        }),
    })
}

/// Signs tokens for one set of settings: its region, its credentials provider, its cache.
struct Signer {
    region: String,
    credentials: SharedCredentialsProvider,
    cache: Mutex<TokenCache>,
}

impl Signer {
    fn token(&self) -> Result<MskToken, MskIamError> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.token(SystemTime::now(), |now| {
            let provider = self.credentials.clone();
            let creds = on_runtime(async move {
                provider
                    .provide_credentials()
                    .await
                    .map_err(|e| MskIamError::Credentials(crate::store::error_chain(&e)))
            })??;
            sign(&self.region, &creds, now)
        })
    }
}

/// The runtime the AWS SDK's lookups run on: its own thread, so that librdkafka's threads and
/// strata's (inside a runtime or not) can wait for them alike. Never dropped.
fn runtime() -> Result<&'static tokio::runtime::Runtime, MskIamError> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("strata-aws-auth")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| MskIamError::Signing(format!("cannot start the AWS lookup thread: {e}")))
}

/// Runs `f` on [`runtime`] and waits for it, at most [`LOOKUP_TIMEOUT`].
fn on_runtime<T: Send + 'static>(
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, MskIamError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime()?.spawn(async move {
        if let Ok(v) = tokio::time::timeout(LOOKUP_TIMEOUT, f).await {
            let _ = tx.send(v);
        }
    });
    rx.recv_timeout(LOOKUP_TIMEOUT + Duration::from_secs(1))
        .map_err(|_| MskIamError::Timeout)
}

/// The chain's region and credentials provider for `m` (a role assumed when it names one).
async fn load(m: MskIam) -> Result<Signer, MskIamError> {
    use aws_config::meta::region::RegionProviderChain;
    use aws_config::Region;
    // One quick try of the instance metadata: off EC2 nothing answers, and the SDK's default
    // (several tries with backoff) would hold up every start.
    let imds = aws_config::imds::Client::builder()
        .max_attempts(1)
        .connect_timeout(Duration::from_secs(1))
        .read_timeout(Duration::from_secs(1))
        .build();
    let region = RegionProviderChain::first_try(m.region.clone().map(Region::new))
        .or_else(aws_config::environment::EnvironmentVariableRegionProvider::new())
        .or_else(aws_config::profile::ProfileFileRegionProvider::new())
        .or_else(
            aws_config::imds::region::ImdsRegionProvider::builder()
                .imds_client(imds)
                .build(),
        );
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(region)
        .load()
        .await;
    let region = conf.region().ok_or(MskIamError::NoRegion)?.to_string();
    let chain = conf
        .credentials_provider()
        .ok_or_else(|| MskIamError::Credentials("the AWS SDK set up no credential chain".into()))?;
    let credentials = match &m.role {
        None => chain,
        Some(role) => SharedCredentialsProvider::new(
            aws_config::sts::AssumeRoleProvider::builder(&role.role_arn)
                .session_name(&role.session_name)
                .configure(&conf)
                .build()
                .await,
        ),
    };
    Ok(Signer {
        region,
        credentials,
        cache: Mutex::new(TokenCache::default()),
    })
}

/// The signer of `config` (an [`oauthbearer_config`]), set up at its first use.
fn signer(config: &str) -> Result<Arc<Signer>, MskIamError> {
    static SIGNERS: OnceLock<Mutex<HashMap<String, Arc<Signer>>>> = OnceLock::new();
    let settings = settings_of(config)
        .ok_or_else(|| MskIamError::Signing(format!("unknown token settings {config:?}")))?;
    let all = SIGNERS.get_or_init(Default::default);
    // Held across the set-up, so that concurrent first uses share one.
    let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = all.get(config) {
        return Ok(s.clone());
    }
    let s = Arc::new(on_runtime(load(settings))??);
    all.insert(config.to_string(), s.clone());
    Ok(s)
}

/// A token for the client whose `sasl.oauthbearer.config` is `config`.
pub fn token_for(config: &str) -> Result<MskToken, MskIamError> {
    signer(config)?.token()
}

/// What librdkafka calls the principal of a token it is handed (MSK takes the identity from
/// the signature; this only shows in librdkafka's debug logs).
const PRINCIPAL: &str = "strata-aws-msk-iam";

/// [`rdkafka::client::ClientContext::generate_oauth_token`] of every strata context.
pub fn generate(
    config: Option<&str>,
) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
    let Some(config) = config.filter(|c| c.starts_with(CONFIG_PREFIX)) else {
        return Err("this client has no token source (sasl_mechanism is not AWS_MSK_IAM)".into());
    };
    let t = token_for(config)?;
    Ok(rdkafka::client::OAuthToken {
        lifetime_ms: t.expires_ms(),
        token: t.value,
        principal_name: PRINCIPAL.to_string(),
    })
}

/// The OAUTHBEARER refresh hook of a client context (inside its `impl ClientContext`):
/// AWS_MSK_IAM clients get signed tokens; no other client asks (librdkafka refreshes OIDC
/// tokens itself, with no event).
macro_rules! oauth_token_hook {
    () => {
        const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;
        fn generate_oauth_token(
            &self,
            config: Option<&str>,
        ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
            $crate::kafka::msk_iam::generate(config)
        }
    };
}
pub(crate) use oauth_token_hook;

/// Sets a token on `client` now when its settings `c` log in with AWS_MSK_IAM. librdkafka
/// asks for tokens through the client's event queue, which only its polls serve: a client that
/// makes a blocking call first (metadata, watermarks, committed offsets) or is never polled
/// (the admin client) would wait for a token until it times out. Called again before later
/// calls of a long-lived client, it keeps the token current.
pub fn prime<C: rdkafka::client::ClientContext>(
    client: &rdkafka::client::Client<C>,
    c: &rdkafka::ClientConfig,
) -> Result<(), MskIamError> {
    match token_of(c)? {
        Some(t) => set(client, &t),
        None => Ok(()),
    }
}

/// The current token of clients with settings `c`; `None` unless they use AWS_MSK_IAM.
pub fn token_of(c: &rdkafka::ClientConfig) -> Result<Option<MskToken>, MskIamError> {
    match c
        .get("sasl.oauthbearer.config")
        .filter(|v| v.starts_with(CONFIG_PREFIX))
    {
        Some(config) => token_for(config).map(Some),
        None => Ok(None),
    }
}

/// Hands `t` to `client`.
pub fn set<C: rdkafka::client::ClientContext>(
    client: &rdkafka::client::Client<C>,
    t: &MskToken,
) -> Result<(), MskIamError> {
    set_token(client.native_ptr(), t).map_err(MskIamError::Signing)
}

/// `rd_kafka_oauthbearer_set_token` on the client `rk`.
fn set_token(rk: *mut rdkafka::bindings::rd_kafka_t, t: &MskToken) -> Result<(), String> {
    use rdkafka::bindings as rd;
    use std::ffi::{CStr, CString};
    let token = CString::new(t.value.as_str()).map_err(|e| e.to_string())?;
    let principal = CString::new(PRINCIPAL).map_err(|e| e.to_string())?;
    let mut err = [0 as std::os::raw::c_char; 512];
    // SAFETY: `rk` is a live client (its owner is borrowed by the caller); the strings outlive
    // the call, which copies them; no extensions (null, 0); `err` is writable for its length.
    let code = unsafe {
        rd::rd_kafka_oauthbearer_set_token(
            rk,
            token.as_ptr(),
            t.expires_ms(),
            principal.as_ptr(),
            std::ptr::null_mut(),
            0,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Ok(());
    }
    // SAFETY: librdkafka wrote a NUL-terminated message into `err` (zeroed before).
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) };
    Err(msg.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{KeyInit, Mac};
    use sha2::{Digest, Sha256};

    /// 2024-01-02T03:04:05Z.
    fn at() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_704_164_645)
    }

    fn creds(token: Option<&str>, expiry: Option<SystemTime>) -> Credentials {
        Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            token.map(str::to_string),
            expiry,
            "test",
        )
    }

    fn url_of(t: &MskToken) -> String {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&t.value)
            .expect("base64url without padding");
        String::from_utf8(bytes).unwrap()
    }

    fn query(url: &str) -> Vec<(String, String)> {
        let q = url.split_once('?').unwrap().1;
        q.split('&')
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                let dec = |s: &str| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8_lossy()
                        .into_owned()
                };
                (dec(k), dec(v))
            })
            .collect()
    }

    fn hmac(key: &[u8], data: &str) -> Vec<u8> {
        let mut m = hmac::Hmac::<Sha256>::new_from_slice(key).unwrap();
        m.update(data.as_bytes());
        m.finalize().into_bytes().to_vec()
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// The SigV4 query signature of the token's URL, computed from the specification's steps
    /// (canonical request, string to sign, derived key), independently of the signer.
    fn expected_signature(url: &str, secret: &str, region: &str) -> String {
        let mut params: Vec<(String, String)> = query(url)
            .into_iter()
            .filter(|(k, _)| k != "X-Amz-Signature" && k != "User-Agent")
            .collect();
        params.sort();
        let canonical_query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        let host = format!("kafka.{region}.amazonaws.com");
        let canonical = format!(
            "GET\n/\n{}\nhost:{host}\n\nhost\n{}",
            canonical_query.join("&"),
            hex(&Sha256::digest(b""))
        );
        let date = params
            .iter()
            .find(|(k, _)| k == "X-Amz-Date")
            .unwrap()
            .1
            .clone();
        let day = &date[..8];
        let scope = format!("{day}/{region}/kafka-cluster/aws4_request");
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        let k = hmac(format!("AWS4{secret}").as_bytes(), day);
        let k = hmac(&k, region);
        let k = hmac(&k, "kafka-cluster");
        let k = hmac(&k, "aws4_request");
        hex(&hmac(&k, &to_sign))
    }

    #[test]
    fn the_token_is_a_presigned_connect_request_msk_accepts() {
        let c = creds(None, None);
        let t = sign("eu-west-1", &c, at()).unwrap();
        assert!(
            t.value
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_'),
            "base64url without padding: {}",
            t.value
        );
        let url = url_of(&t);
        assert!(
            url.starts_with(
                "https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect&"
            ),
            "{url}"
        );
        let q: HashMap<String, String> = query(&url).into_iter().collect();
        assert_eq!(q["Action"], "kafka-cluster:Connect");
        assert_eq!(q["X-Amz-Algorithm"], "AWS4-HMAC-SHA256");
        assert_eq!(
            q["X-Amz-Credential"],
            "AKIDEXAMPLE/20240102/eu-west-1/kafka-cluster/aws4_request"
        );
        assert_eq!(q["X-Amz-Date"], "20240102T030405Z");
        assert_eq!(q["X-Amz-Expires"], "900");
        assert_eq!(q["X-Amz-SignedHeaders"], "host");
        assert!(!q.contains_key("X-Amz-Security-Token"));
        assert_eq!(
            q["User-Agent"],
            concat!("strata/", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(
            q["X-Amz-Signature"],
            expected_signature(
                &url,
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                "eu-west-1"
            )
        );
        assert_eq!(t.signed_at, at());
        assert_eq!(t.expires_at, at() + TOKEN_LIFETIME);
        assert_eq!(t.expires_ms(), 1_704_164_645_000 + 900_000);
        assert!(!url.contains("wJalrXUtnFEMI"), "never the secret key");
        // Same inputs, same token; another second, another signature.
        assert_eq!(sign("eu-west-1", &c, at()).unwrap(), t);
        let later = sign("eu-west-1", &c, at() + Duration::from_secs(1)).unwrap();
        assert_ne!(later.value, t.value);
    }

    #[test]
    fn temporary_credentials_sign_their_session_token_and_bound_the_expiry() {
        let session = "FwoGZXIvYXdzEJr//////////wEaDH+session/token==";
        let soon = at() + Duration::from_secs(300);
        let t = sign("us-east-1", &creds(Some(session), Some(soon)), at()).unwrap();
        let url = url_of(&t);
        let q: HashMap<String, String> = query(&url).into_iter().collect();
        assert_eq!(q["X-Amz-Security-Token"], session, "{url}");
        assert_eq!(
            q["X-Amz-Signature"],
            expected_signature(
                &url,
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                "us-east-1"
            ),
            "the session token is part of what is signed"
        );
        assert_eq!(t.expires_at, soon, "never past the credentials");
        let late = at() + Duration::from_secs(3600);
        let t = sign("us-east-1", &creds(Some(session), Some(late)), at()).unwrap();
        assert_eq!(t.expires_at, at() + TOKEN_LIFETIME);
        assert_eq!(
            sign("us-east-1", &creds(Some(session), Some(at())), at()),
            Err(MskIamError::Expired(1_704_164_645))
        );
    }

    #[test]
    fn tokens_are_reused_while_half_their_life_remains_and_renewed_before_they_expire() {
        let c = creds(None, None);
        let mut cache = TokenCache::default();
        let mut signed = Vec::new();
        let mut get = |cache: &mut TokenCache, secs: u64| {
            let now = at() + Duration::from_secs(secs);
            cache
                .token(now, |now| {
                    signed.push(now);
                    sign("eu-west-1", &c, now)
                })
                .unwrap()
        };
        let first = get(&mut cache, 0);
        // A client created 5 minutes later gets the same token (10 minutes left).
        assert_eq!(get(&mut cache, 300), first);
        assert_eq!(get(&mut cache, 449), first);
        // librdkafka asks again at 80% of its token's life (12 min): a new one, valid 15 more.
        let refreshed = get(&mut cache, 720);
        assert_ne!(refreshed, first);
        assert_eq!(refreshed.signed_at, at() + Duration::from_secs(720));
        assert!(refreshed.expires_at > first.expires_at);
        assert_eq!(get(&mut cache, 900), refreshed, "the old one expires now");
        assert_eq!(
            signed,
            vec![at(), at() + Duration::from_secs(720)],
            "signed (and credentials looked up) twice only"
        );
    }

    #[test]
    fn a_failed_signing_keeps_no_token_and_is_tried_again() {
        let mut cache = TokenCache::default();
        let e = cache.token(at(), |_| Err(MskIamError::Credentials("none".into())));
        assert_eq!(e, Err(MskIamError::Credentials("none".into())));
        let t = cache
            .token(at(), |now| sign("eu-west-1", &creds(None, None), now))
            .unwrap();
        assert!(t.reusable_at(at()));
        assert!(!t.reusable_at(at() + TOKEN_LIFETIME));
    }

    #[test]
    fn the_oauthbearer_config_carries_the_settings_back_to_the_hook() {
        for m in [
            MskIam {
                region: None,
                role: None,
            },
            MskIam {
                region: Some("eu-west-1".into()),
                role: Some(crate::config::AssumeRole {
                    role_arn: "arn:aws:iam::123456789012:role/kafka-archiver".into(),
                    external_id: None,
                    session_name: crate::config::AssumeRole::DEFAULT_SESSION_NAME.into(),
                    sts_endpoint: None,
                }),
            },
        ] {
            let c = oauthbearer_config(&m);
            assert_eq!(settings_of(&c), Some(m), "{c}");
        }
        assert_eq!(settings_of("principal=admin"), None);
        assert!(generate(None).is_err());
        assert!(generate(Some("principal=admin")).is_err());
    }
}
