//! `[store]`: the archive URL, S3 connection settings and credentials.

use super::*;

pub(super) fn bucket_name_problem(b: &str) -> Option<String> {
    let ok_chars = b
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ok_ends = b.starts_with(|c: char| c.is_ascii_alphanumeric())
        && b.ends_with(|c: char| c.is_ascii_alphanumeric());
    if (3..=63).contains(&b.len()) && ok_chars && ok_ends {
        None
    } else {
        Some(format!("bucket name {b:?} must be 3-63 characters of lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"))
    }
}

/// Parses `s3://bucket/prefix` or `file:///path` (also `file://./relative`).
pub(super) fn parse_store_url(s: &str) -> Result<StoreUrl, String> {
    if let Some(rest) = s.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if let Some(p) = bucket_name_problem(bucket) {
            return Err(p);
        }
        let prefix =
            crate::layout::DumpDir::parse(prefix).map_err(|e| format!("key prefix {e}"))?;
        Ok(StoreUrl::S3 {
            bucket: bucket.to_string(),
            prefix: prefix.as_str().to_string(),
        })
    } else if let Some(rest) = s.strip_prefix("file://") {
        if rest.is_empty() {
            return Err("file:// needs a path, e.g. \"file:///var/lib/strata\"".into());
        }
        Ok(StoreUrl::File {
            root: PathBuf::from(rest),
        })
    } else {
        Err(format!(
            "{s:?} is neither \"s3://bucket/prefix\" nor \"file:///path\""
        ))
    }
}

pub(super) fn store(cx: &mut Ctx<'_>, raw: RawStore) -> StoreConfig {
    cx.unknown("store", &raw.unknown, STORE_KEYS);
    let url_text = cx
        .text("store.url", &raw.url)
        .unwrap_or_else(|| defaults::STORE_URL.to_string());
    let url = parse_store_url(&url_text).unwrap_or_else(|m| {
        cx.push("store.url", m);
        StoreUrl::File {
            root: PathBuf::from("./strata-archive"),
        }
    });
    let access_key = cx.secret("store.access_key", &raw.access_key);
    let secret_key = cx.secret("store.secret_key", &raw.secret_key);
    let credentials = match (access_key, secret_key) {
        (Some(access_key), Some(secret_key)) => Credentials::Static {
            access_key,
            secret_key,
        },
        (None, None) => Credentials::DefaultChain,
        (Some(_), None) => {
            cx.push("store.secret_key", "is missing while store.access_key is set; set both, or neither to use the AWS default credential chain");
            Credentials::DefaultChain
        }
        (None, Some(_)) => {
            cx.push("store.access_key", "is missing while store.secret_key is set; set both, or neither to use the AWS default credential chain");
            Credentials::DefaultChain
        }
    };
    let endpoint = cx.text("store.endpoint", &raw.endpoint);
    if let Some(e) = &endpoint {
        if !(e.starts_with("http://") || e.starts_with("https://")) {
            cx.push(
                "store.endpoint",
                format!("{e:?} must start with http:// or https://"),
            );
        }
    }
    let part_size = cx.size("store.part_size", &raw.part_size, defaults::PART_SIZE);
    if part_size < ByteSize::mib(5) || part_size > ByteSize(5 << 30) {
        cx.push(
            "store.part_size",
            format!("{part_size} is outside S3's multipart limits; use 5MiB to 5GiB"),
        );
    }
    let region = cx.text("store.region", &raw.region);
    if let Some(r) = &region {
        if r.is_empty() || r.contains(char::is_whitespace) {
            cx.push(
                "store.region",
                format!("{r:?} is not a region name such as \"eu-west-1\"; leave it out to take the AWS environment's"),
            );
        }
    }
    let max_attempts = raw.max_attempts.unwrap_or(defaults::MAX_ATTEMPTS);
    if max_attempts == 0 {
        cx.push("store.max_attempts", "must be at least 1");
    }
    StoreConfig {
        url,
        s3: S3Settings {
            region,
            path_style: raw.path_style.unwrap_or(endpoint.is_some()),
            endpoint,
            credentials,
            create_bucket: raw.create_bucket.unwrap_or(false),
            part_size,
            max_attempts: max_attempts.max(1),
        },
    }
}
