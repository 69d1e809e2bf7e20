//! What the S3 backend takes from the AWS environment when the config leaves it out: the
//! region (`AWS_REGION`, `AWS_DEFAULT_REGION`, the profile of the AWS config files, the EC2
//! instance metadata), and the credential sources the SDK's chain tries, for the error that
//! says none had credentials. Lookups take the environment as a function, so tests pass their
//! own instead of changing the process's.

use crate::config::{RegionSource, S3Region, S3Settings};
use aws_config::meta::region::ProvideRegion;
use aws_runtime::env_config::file::{EnvConfigFileKind, EnvConfigFiles};
use std::path::PathBuf;
use std::time::Duration;

/// A variable of the environment the lookups read.
pub(crate) type Env<'a> = &'a (dyn Fn(&str) -> Option<String> + Sync);

/// The variables the SDK reads a region from, in its order.
const REGION_VARS: [&str; 2] = ["AWS_REGION", "AWS_DEFAULT_REGION"];

/// The region the endpoint default stands for.
const ENDPOINT_DEFAULT: &str = "us-east-1";

/// The process's environment.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The region of `s` in the process's environment (see [`find_region`]); the error says what
/// was tried and what to set.
pub async fn resolve_region(s: &S3Settings) -> Result<S3Region, String> {
    // One quick try: off EC2 the service does not answer, and the SDK's default (four tries
    // with backoff) would hold up every start for seconds.
    let client = aws_config::imds::Client::builder()
        .max_attempts(1)
        .connect_timeout(Duration::from_secs(1))
        .read_timeout(Duration::from_secs(1))
        .build();
    let imds = aws_config::imds::region::ImdsRegionProvider::builder()
        .imds_client(client)
        .build();
    find_region(
        s.region.as_deref(),
        s.endpoint.as_deref(),
        &process_env,
        &imds,
    )
    .await
}

/// The region requests are signed for: `store.region`, else the first of `AWS_REGION`,
/// `AWS_DEFAULT_REGION`, the selected profile of the AWS config files and (without a custom
/// endpoint: an instance's region says nothing about another store) `imds`, the instance
/// metadata; else `us-east-1` with a custom endpoint. Otherwise an error naming what was
/// tried.
pub(crate) async fn find_region(
    configured: Option<&str>,
    endpoint: Option<&str>,
    env: Env<'_>,
    imds: &dyn ProvideRegion,
) -> Result<S3Region, String> {
    let found = |name: String, source| Ok(S3Region { name, source });
    if let Some(r) = configured {
        return found(r.to_string(), RegionSource::Config);
    }
    for var in REGION_VARS {
        if let Some(r) = env(var).filter(|r| !r.trim().is_empty()) {
            return found(r.trim().to_string(), RegionSource::Env(var));
        }
    }
    let profile = profile_name(env);
    let files = profile_files(env);
    if let Some(r) = profile_region(&files, &profile).await {
        return found(r, RegionSource::Profile(profile));
    }
    let metadata_off = metadata_disabled(env);
    if endpoint.is_none() && !metadata_off {
        if let Some(r) = imds.region().await {
            return found(r.to_string(), RegionSource::InstanceMetadata);
        }
    }
    if endpoint.is_some() {
        return found(ENDPOINT_DEFAULT.to_string(), RegionSource::EndpointDefault);
    }
    Err(format!(
        "store.region is not set, and the AWS environment names no region (tried {}, {}, {}); set \
         store.region to the bucket's region, e.g. \"eu-west-1\"",
        REGION_VARS.join(", "),
        describe_profile(&profile, &files),
        if metadata_off {
            "EC2 instance metadata: off by AWS_EC2_METADATA_DISABLED"
        } else {
            "EC2 instance metadata"
        }
    ))
}

/// The selected profile: `AWS_PROFILE`, else `default`.
fn profile_name(env: Env<'_>) -> String {
    env("AWS_PROFILE")
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| "default".to_string())
}

fn metadata_disabled(env: Env<'_>) -> bool {
    env("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The AWS config and credentials files, where the SDK looks for them: `AWS_CONFIG_FILE` and
/// `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/config` and `~/.aws/credentials`.
fn profile_files(env: Env<'_>) -> Vec<(EnvConfigFileKind, PathBuf)> {
    let home = env("HOME").filter(|h| !h.is_empty());
    let path = |var: &str, default: &str| -> Option<PathBuf> {
        match env(var).filter(|p| !p.is_empty()) {
            Some(p) => match (p.strip_prefix("~/"), &home) {
                (Some(rest), Some(h)) => Some(PathBuf::from(h).join(rest)),
                _ => Some(PathBuf::from(p)),
            },
            None => home.as_ref().map(|h| PathBuf::from(h).join(default)),
        }
    };
    [
        (EnvConfigFileKind::Config, "AWS_CONFIG_FILE", ".aws/config"),
        (
            EnvConfigFileKind::Credentials,
            "AWS_SHARED_CREDENTIALS_FILE",
            ".aws/credentials",
        ),
    ]
    .into_iter()
    .filter_map(|(kind, var, default)| path(var, default).map(|p| (kind, p)))
    .collect()
}

fn describe_profile(profile: &str, files: &[(EnvConfigFileKind, PathBuf)]) -> String {
    let paths: Vec<String> = files.iter().map(|(_, p)| p.display().to_string()).collect();
    if paths.is_empty() {
        format!("profile {profile:?}: no AWS config files (HOME is not set)")
    } else {
        format!("profile {profile:?} in {}", paths.join(" and "))
    }
}

/// The region of `profile` in `files` (following `source_profile` as the SDK does); missing
/// or unreadable files count as empty.
async fn profile_region(files: &[(EnvConfigFileKind, PathBuf)], profile: &str) -> Option<String> {
    let mut set = EnvConfigFiles::builder();
    let mut any = false;
    for (kind, path) in files {
        if let Ok(text) = std::fs::read_to_string(path) {
            set = set.with_contents(*kind, text);
            any = true;
        }
    }
    if !any {
        return None;
    }
    aws_config::profile::ProfileFileRegionProvider::builder()
        .profile_files(set.build())
        .profile_name(profile)
        .build()
        .region()
        .await
        .map(|r| r.to_string())
}

/// The sources the SDK's default chain looks for credentials in, for the error that none had
/// any.
pub(crate) fn credential_sources(env: Env<'_>) -> String {
    let profile = profile_name(env);
    let files = profile_files(env);
    format!(
        "store.access_key and store.secret_key (not set), AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY, {}, web identity (AWS_WEB_IDENTITY_TOKEN_FILE and \
         AWS_ROLE_ARN), ECS container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or \
         AWS_CONTAINER_CREDENTIALS_FULL_URI), {}",
        describe_profile(&profile, &files),
        if metadata_disabled(env) {
            "EC2 instance metadata (off by AWS_EC2_METADATA_DISABLED)"
        } else {
            "EC2 instance metadata"
        }
    )
}

/// [`credential_sources`] of the process's environment.
pub(crate) fn process_credential_sources() -> String {
    credential_sources(&process_env)
}

/// The messages of an error and its sources, joined: what each layer says, without the debug
/// dump of the SDK's structures (`DisplayErrorContext` appends one).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if !text.is_empty() && !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_s3::config::Region;
    use std::collections::HashMap;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + Sync {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    /// An instance metadata service that knows no region (off EC2).
    const NO_IMDS: Option<Region> = None;

    async fn find(
        configured: Option<&str>,
        endpoint: Option<&str>,
        vars: &[(&str, &str)],
        imds: &dyn ProvideRegion,
    ) -> Result<S3Region, String> {
        find_region(configured, endpoint, &env_of(vars), imds).await
    }

    fn region(name: &str, source: RegionSource) -> Result<S3Region, String> {
        Ok(S3Region {
            name: name.to_string(),
            source,
        })
    }

    #[tokio::test]
    async fn the_region_comes_from_the_config_then_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().to_str().unwrap();
        let both = [
            ("HOME", home),
            ("AWS_REGION", "eu-west-1"),
            ("AWS_DEFAULT_REGION", "eu-central-1"),
        ];
        assert_eq!(
            find(Some("ap-south-1"), None, &both, &NO_IMDS).await,
            region("ap-south-1", RegionSource::Config)
        );
        assert_eq!(
            find(None, None, &both, &NO_IMDS).await,
            region("eu-west-1", RegionSource::Env("AWS_REGION"))
        );
        assert_eq!(
            find(None, None, &both[..1], &NO_IMDS).await.unwrap_err(),
            find(None, None, &[("HOME", home), ("AWS_REGION", " ")], &NO_IMDS)
                .await
                .unwrap_err(),
            "a blank variable counts as unset"
        );
        assert_eq!(
            find(None, None, &[both[0], both[2]], &NO_IMDS).await,
            region("eu-central-1", RegionSource::Env("AWS_DEFAULT_REGION"))
        );
    }

    #[tokio::test]
    async fn the_region_comes_from_the_selected_profile_of_the_config_files() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("aws-config");
        std::fs::write(
            &config,
            "[default]\nregion = us-west-2\n\n[profile prod]\nsource_profile = base\n\n[profile base]\nregion = ap-northeast-1\n",
        )
        .unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(home.join(".aws/config"), "[default]\nregion = sa-east-1\n").unwrap();
        let (config, home) = (config.to_str().unwrap(), home.to_str().unwrap());
        // ~/.aws/config by default; AWS_CONFIG_FILE instead when set; AWS_PROFILE selects.
        assert_eq!(
            find(None, None, &[("HOME", home)], &NO_IMDS).await,
            region("sa-east-1", RegionSource::Profile("default".into()))
        );
        let with_file = [("HOME", home), ("AWS_CONFIG_FILE", config)];
        assert_eq!(
            find(None, None, &with_file, &NO_IMDS).await,
            region("us-west-2", RegionSource::Profile("default".into()))
        );
        let prod = [with_file[0], with_file[1], ("AWS_PROFILE", "prod")];
        assert_eq!(
            find(None, None, &prod, &NO_IMDS).await,
            region("ap-northeast-1", RegionSource::Profile("prod".into())),
            "source_profile is followed"
        );
        // The environment wins over the profile.
        let env_too = [prod[0], prod[1], prod[2], ("AWS_REGION", "eu-north-1")];
        assert_eq!(
            find(None, None, &env_too, &NO_IMDS).await,
            region("eu-north-1", RegionSource::Env("AWS_REGION"))
        );
        // A profile without a region falls through.
        let other = [with_file[0], with_file[1], ("AWS_PROFILE", "nosuch")];
        assert!(find(None, None, &other, &NO_IMDS).await.is_err());
    }

    #[tokio::test]
    async fn instance_metadata_then_the_endpoint_default_then_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let home = [("HOME", dir.path().to_str().unwrap())];
        let ec2 = Region::new("eu-south-1");
        assert_eq!(
            find(None, None, &home, &ec2).await,
            region("eu-south-1", RegionSource::InstanceMetadata)
        );
        // With a custom endpoint the instance's region is not asked: the store's own is
        // unknown, and us-east-1 is what S3-compatible stores take.
        let minio = Some("http://minio:9000");
        assert_eq!(
            find(None, minio, &home, &ec2).await,
            region("us-east-1", RegionSource::EndpointDefault)
        );
        assert_eq!(
            find(None, minio, &[home[0], ("AWS_REGION", "eu-west-3")], &ec2).await,
            region("eu-west-3", RegionSource::Env("AWS_REGION"))
        );
        let off = [home[0], ("AWS_EC2_METADATA_DISABLED", "true")];
        let err = find(None, None, &off, &ec2).await.unwrap_err();
        for part in [
            "is not set",
            "AWS_REGION, AWS_DEFAULT_REGION",
            "profile \"default\" in ",
            ".aws/config and ",
            "EC2 instance metadata: off by AWS_EC2_METADATA_DISABLED",
            "set store.region",
        ] {
            assert!(err.contains(part), "{part:?} in {err}");
        }
        assert!(find(None, None, &home, &NO_IMDS).await.is_err());
    }

    #[test]
    fn credential_sources_name_every_source_the_chain_tries() {
        let s = credential_sources(&env_of(&[
            ("HOME", "/home/op"),
            ("AWS_PROFILE", "ops"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]));
        for part in [
            "store.access_key and store.secret_key",
            "AWS_ACCESS_KEY_ID",
            "profile \"ops\" in /home/op/.aws/config and /home/op/.aws/credentials",
            "web identity",
            "ECS container",
            "EC2 instance metadata (off by AWS_EC2_METADATA_DISABLED)",
        ] {
            assert!(s.contains(part), "{part:?} in {s}");
        }
    }
}
