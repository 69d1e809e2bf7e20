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
    let session_token = cx.secret("store.session_token", &raw.session_token);
    if raw.session_token.is_some() && (raw.access_key.is_none() || raw.secret_key.is_none()) {
        cx.push(
            "store.session_token",
            "belongs to temporary keys: set store.access_key and store.secret_key with it (or \
             leave all three out for the AWS default credential chain, which reads \
             AWS_SESSION_TOKEN)",
        );
    }
    let credentials = match (access_key, secret_key) {
        (Some(access_key), Some(secret_key)) => Credentials::Static {
            access_key,
            secret_key,
            session_token,
        },
        (None, None) => Credentials::DefaultChain,
        // A key that is written but could not be expanded has its own issue already.
        (Some(_), None) if raw.secret_key.is_some() => Credentials::DefaultChain,
        (None, Some(_)) if raw.access_key.is_some() => Credentials::DefaultChain,
        (Some(_), None) => {
            cx.push("store.secret_key", "is missing while store.access_key is set; set both, or neither to use the AWS default credential chain");
            Credentials::DefaultChain
        }
        (None, Some(_)) => {
            cx.push("store.access_key", "is missing while store.secret_key is set; set both, or neither to use the AWS default credential chain");
            Credentials::DefaultChain
        }
    };
    let endpoint = endpoint_url(cx, "store.endpoint", &raw.endpoint);
    let role = role(cx, &raw);
    let objects = object_options(cx, &raw);
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
            role,
            objects,
            create_bucket: raw.create_bucket.unwrap_or(false),
            part_size,
            max_attempts: max_attempts.max(1),
        },
    }
}

/// An `http://` or `https://` URL.
fn endpoint_url(cx: &mut Ctx<'_>, key: &str, v: &Option<String>) -> Option<String> {
    let e = cx.text(key, v)?;
    if !(e.starts_with("http://") || e.starts_with("https://")) {
        cx.push(key, format!("{e:?} must start with http:// or https://"));
    }
    Some(e)
}

/// `store.role_arn` and the keys that only go with it.
fn role(cx: &mut Ctx<'_>, raw: &RawStore) -> Option<AssumeRole> {
    let arn = cx.text("store.role_arn", &raw.role_arn);
    let external_id = cx.text("store.external_id", &raw.external_id);
    let session_name = cx.text("store.role_session_name", &raw.role_session_name);
    let sts_endpoint = endpoint_url(cx, "store.sts_endpoint", &raw.sts_endpoint);
    let Some(role_arn) = arn else {
        for (key, set) in [
            ("store.external_id", external_id.is_some()),
            ("store.role_session_name", session_name.is_some()),
            ("store.sts_endpoint", sts_endpoint.is_some()),
        ] {
            if set {
                cx.push(
                    key,
                    "only applies to an assumed role: set store.role_arn, or leave this out",
                );
            }
        }
        return None;
    };
    if let Some(p) = role_arn_problem(&role_arn) {
        cx.push("store.role_arn", p);
    }
    if let Some(p) = external_id.as_deref().and_then(external_id_problem) {
        cx.push("store.external_id", p);
    }
    if let Some(p) = session_name.as_deref().and_then(session_name_problem) {
        cx.push("store.role_session_name", p);
    }
    Some(AssumeRole {
        role_arn,
        external_id,
        session_name: session_name.unwrap_or_else(|| AssumeRole::DEFAULT_SESSION_NAME.into()),
        sts_endpoint,
    })
}

/// `arn:<partition>:iam::<12-digit account>:role/<path and name>`.
pub(super) fn role_arn_problem(arn: &str) -> Option<String> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let ok = matches!(parts.as_slice(), ["arn", partition, "iam", "", account, resource]
        if !partition.is_empty()
            && account.len() == 12
            && account.chars().all(|c| c.is_ascii_digit())
            && resource.strip_prefix("role/").is_some_and(|n| !n.is_empty() && !n.ends_with('/')));
    (!ok).then(|| {
        format!(
            "{arn:?} is not an IAM role ARN such as \"arn:aws:iam::123456789012:role/strata-writer\""
        )
    })
}

/// Characters STS takes in a session name, and with `:` and `/` in an external id.
fn sts_chars(s: &str, extra: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c) || extra.contains(c))
}

pub(super) fn external_id_problem(id: &str) -> Option<String> {
    let ok = (2..=1224).contains(&id.chars().count()) && sts_chars(id, ":/");
    (!ok).then(|| {
        "must be 2-1224 characters of letters, digits and _+=,.@:/- (as the role's trust policy \
         names it)"
            .to_string()
    })
}

pub(super) fn session_name_problem(name: &str) -> Option<String> {
    let ok = (2..=64).contains(&name.chars().count()) && sts_chars(name, "");
    (!ok).then(|| format!("{name:?} must be 2-64 characters of letters, digits and _+=,.@-"))
}

/// `store.sse`, `store.sse_kms_key_id`, `store.storage_class`, `store.tags`, `store.acl`.
fn object_options(cx: &mut Ctx<'_>, raw: &RawStore) -> ObjectOptions {
    let key_id = cx.text("store.sse_kms_key_id", &raw.sse_kms_key_id);
    if let Some(p) = key_id.as_deref().and_then(kms_key_problem) {
        cx.push("store.sse_kms_key_id", p);
    }
    let sse_text = cx.text("store.sse", &raw.sse);
    let sse = match sse_text.as_deref() {
        None => None,
        Some("AES256") => Some(Sse::S3),
        Some("aws:kms") => Some(Sse::Kms {
            key_id: key_id.clone(),
        }),
        Some(other) => {
            cx.push(
                "store.sse",
                format!(
                    "{other:?} is not one of \"AES256\" (SSE-S3, keys S3 manages) or \"aws:kms\" \
                     (SSE-KMS, with store.sse_kms_key_id or S3's aws/s3 key)"
                ),
            );
            None
        }
    };
    // An unknown store.sse is reported already; the key only needs it when it is known.
    let sse_known = sse_text.is_none() || sse.is_some();
    if key_id.is_some() && sse_known && !matches!(sse, Some(Sse::Kms { .. })) {
        cx.push(
            "store.sse_kms_key_id",
            "names a KMS key for SSE-KMS: set store.sse = \"aws:kms\" with it",
        );
    }
    let storage_class = cx
        .text("store.storage_class", &raw.storage_class)
        .and_then(|s| match StorageClass::parse(&s) {
            Some(c) => Some(c),
            None => {
                cx.push("store.storage_class", storage_class_problem(&s));
                None
            }
        });
    let acl = cx
        .text("store.acl", &raw.acl)
        .and_then(|s| match CannedAcl::parse(&s) {
            Some(a) => Some(a),
            None => {
                cx.push("store.acl", acl_problem(&s));
                None
            }
        });
    let mut tags = BTreeMap::new();
    let raw_tags = raw.tags.clone().unwrap_or_default();
    if raw_tags.len() > ObjectOptions::MAX_TAGS {
        cx.push(
            "store.tags",
            format!(
                "has {} tags; S3 takes at most {} per object",
                raw_tags.len(),
                ObjectOptions::MAX_TAGS
            ),
        );
    }
    for (k, v) in &raw_tags {
        let key = format!("store.tags.{k}");
        let Some(value) = cx.text(&key, &Some(v.clone())) else {
            continue;
        };
        match tag_problem(k, &value) {
            Some(p) => cx.push(key, p),
            None => {
                tags.insert(k.clone(), value);
            }
        }
    }
    ObjectOptions {
        sse,
        storage_class,
        tags,
        acl,
    }
}

/// A KMS key as S3 takes it: a key id, `alias/<name>`, or a key or alias ARN.
pub(super) fn kms_key_problem(id: &str) -> Option<String> {
    let arn_ok = |a: &str| {
        let parts: Vec<&str> = a.splitn(6, ':').collect();
        matches!(parts.as_slice(), ["arn", p, "kms", region, account, res]
            if !p.is_empty() && !region.is_empty() && !account.is_empty()
                && (res.strip_prefix("key/").or_else(|| res.strip_prefix("alias/")))
                    .is_some_and(|n| !n.is_empty()))
    };
    let ok = !id.is_empty()
        && !id.contains(char::is_whitespace)
        && if id.starts_with("arn:") {
            arn_ok(id)
        } else {
            id.strip_prefix("alias/")
                .map_or(!id.contains('/'), |n| !n.is_empty())
        };
    (!ok).then(|| {
        format!(
            "{id:?} is not a KMS key id (\"1234abcd-12ab-34cd-56ef-1234567890ab\"), alias \
             (\"alias/strata\") or ARN (\"arn:aws:kms:eu-west-1:123456789012:key/...\"); a key \
             of another account needs its ARN"
        )
    })
}

fn storage_class_problem(s: &str) -> String {
    let known: Vec<&str> = StorageClass::ALL.iter().map(|c| c.as_str()).collect();
    if matches!(s, "GLACIER" | "DEEP_ARCHIVE") {
        format!(
            "{s:?} objects cannot be read without a restore request first, and strata reads \
             its own objects back (seals, parameter records, restore, tier fetches); use one of \
             {}, and a lifecycle rule to move older archives to {s}",
            known.join(", ")
        )
    } else {
        format!("{s:?} is not one of {}", known.join(", "))
    }
}

fn acl_problem(s: &str) -> String {
    let known: Vec<&str> = CannedAcl::ALL.iter().map(|a| a.as_str()).collect();
    if matches!(
        s,
        "public-read" | "public-read-write" | "authenticated-read" | "aws-exec-read"
    ) {
        format!(
            "{s:?} would let others read archives of Kafka data; use one of {} and grant \
             readers access with a bucket policy",
            known.join(", ")
        )
    } else {
        format!("{s:?} is not one of {}", known.join(", "))
    }
}

/// S3's rules for an object tag: a key of 1-128 characters not starting with `aws:`, a value
/// of up to 256, both of letters, digits, spaces and `+-=._:/@`.
pub(super) fn tag_problem(key: &str, value: &str) -> Option<String> {
    let chars_ok = |s: &str| {
        s.chars()
            .all(|c| c.is_alphanumeric() || c == ' ' || "+-=._:/@".contains(c))
    };
    let key_len = key.chars().count();
    if !(1..=ObjectOptions::MAX_TAG_KEY_CHARS).contains(&key_len) {
        return Some(format!(
            "tag keys are 1-{} characters; this one has {key_len}",
            ObjectOptions::MAX_TAG_KEY_CHARS
        ));
    }
    if key.to_ascii_lowercase().starts_with("aws:") {
        return Some("tag keys starting with \"aws:\" are reserved for AWS".into());
    }
    if !chars_ok(key) {
        return Some(format!(
            "tag key {key:?} may hold letters, digits, spaces and +-=._:/@ only"
        ));
    }
    let value_len = value.chars().count();
    if value_len > ObjectOptions::MAX_TAG_VALUE_CHARS {
        return Some(format!(
            "tag values are at most {} characters; this one has {value_len}",
            ObjectOptions::MAX_TAG_VALUE_CHARS
        ));
    }
    if !chars_ok(value) {
        return Some("the tag value may hold letters, digits, spaces and +-=._:/@ only".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::config::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "S3_ACCESS_KEY" => Some("ASIAEXAMPLEKEY".into()),
            "S3_SECRET_KEY" => Some("TOPSECRETs3key".into()),
            "S3_SESSION_TOKEN" => Some("SESSIONtoken123".into()),
            "TEAM" => Some("data".into()),
            _ => None,
        }
    }

    fn load(store: &str) -> Result<Config, ConfigError> {
        let text =
            format!("[store]\nurl = \"s3://archive-bucket/prod\"\nregion = \"eu-west-1\"\n{store}");
        Config::from_toml(&text, "test.toml", env)
    }

    /// The problems of a `[store]` body, as `key: message`.
    fn problems(store: &str) -> Vec<String> {
        match load(store) {
            Err(ConfigError::Invalid { issues, .. }) => issues
                .into_iter()
                .map(|i| format!("{}: {}", i.key, i.message))
                .collect(),
            other => panic!("expected an invalid config, got {other:?}"),
        }
    }

    fn has(store: &str, key: &str, words: &str) {
        let p = problems(store);
        assert!(
            p.iter()
                .any(|m| m.starts_with(&format!("{key}: ")) && m.contains(words)),
            "{key}: ...{words}... in {p:#?}"
        );
    }

    const ALL: &str = r#"
access_key = "${S3_ACCESS_KEY}"
secret_key = "${S3_SECRET_KEY}"
session_token = "${S3_SESSION_TOKEN}"
role_arn = "arn:aws:iam::123456789012:role/strata-writer"
external_id = "acme-7"
role_session_name = "strata-prod"
sts_endpoint = "https://sts.eu-west-1.amazonaws.com"
sse = "aws:kms"
sse_kms_key_id = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
storage_class = "STANDARD_IA"
tags = { team = "${TEAM}", "cost center" = "kafka/archive" }
acl = "bucket-owner-full-control"
"#;

    #[test]
    fn every_s3_setting_parses_into_types() {
        let s = load(ALL).unwrap().store.s3;
        let Credentials::Static { session_token, .. } = &s.credentials else {
            panic!("static keys expected: {:?}", s.credentials);
        };
        assert_eq!(
            session_token.as_ref().map(Secret::expose),
            Some("SESSIONtoken123")
        );
        assert_eq!(
            s.role,
            Some(AssumeRole {
                role_arn: "arn:aws:iam::123456789012:role/strata-writer".into(),
                external_id: Some("acme-7".into()),
                session_name: "strata-prod".into(),
                sts_endpoint: Some("https://sts.eu-west-1.amazonaws.com".into()),
            })
        );
        assert_eq!(
            s.objects,
            ObjectOptions {
                sse: Some(Sse::Kms {
                    key_id: Some(
                        "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
                            .into()
                    )
                }),
                storage_class: Some(StorageClass::StandardIa),
                tags: [
                    ("cost center".to_string(), "kafka/archive".to_string()),
                    ("team".to_string(), "data".to_string()),
                ]
                .into(),
                acl: Some(CannedAcl::BucketOwnerFullControl),
            }
        );
        // A task's own bucket keeps them.
        let c = load(&format!(
            "{ALL}[[tasks]]\nname = \"orders\"\ntopics = [\"orders\"]\nbucket = \"other-bucket\"\n"
        ))
        .unwrap();
        assert_eq!(c.tasks[0].store.s3, c.store.s3);
    }

    #[test]
    fn defaults_add_nothing() {
        let s = load("").unwrap().store.s3;
        assert_eq!(s.objects, ObjectOptions::default());
        assert_eq!(s.role, None);
        let s = load("sse = \"AES256\"\nrole_arn = \"arn:aws-cn:iam::123456789012:role/a/b\"\n")
            .unwrap()
            .store
            .s3;
        assert_eq!(s.objects.sse, Some(Sse::S3));
        let role = s.role.unwrap();
        assert_eq!(role.session_name, "strata");
        assert_eq!(role.external_id, None);
        let s = load("sse = \"aws:kms\"\n").unwrap().store.s3;
        assert_eq!(s.objects.sse, Some(Sse::Kms { key_id: None }));
        for id in [
            "alias/strata",
            "1234abcd-12ab-34cd-56ef-1234567890ab",
            "mrk-1234abcd12ab34cd56ef1234567890ab",
            "arn:aws:kms:eu-west-1:123456789012:alias/strata",
        ] {
            let s = load(&format!("sse = \"aws:kms\"\nsse_kms_key_id = \"{id}\"\n")).unwrap();
            assert_eq!(s.store.s3.objects.sse.unwrap().kms_key_id(), Some(id));
        }
    }

    #[test]
    fn encryption_settings_are_checked() {
        has("sse = \"aes256\"", "store.sse", "not one of \"AES256\"");
        has("sse = \"SSE-KMS\"", "store.sse", "\"aws:kms\"");
        let p = problems("sse = \"SSE-KMS\"\nsse_kms_key_id = \"alias/strata\"");
        assert_eq!(
            p.len(),
            1,
            "the key is not blamed for the unknown sse: {p:?}"
        );
        has(
            "sse_kms_key_id = \"alias/strata\"",
            "store.sse_kms_key_id",
            "set store.sse = \"aws:kms\"",
        );
        has(
            "sse = \"AES256\"\nsse_kms_key_id = \"alias/strata\"",
            "store.sse_kms_key_id",
            "set store.sse = \"aws:kms\"",
        );
        for bad in [
            "",
            "alias/",
            "a key",
            "arn:aws:s3:::bucket",
            "arn:aws:kms:eu-west-1:1:thing/x",
            "keys/x",
        ] {
            has(
                &format!("sse = \"aws:kms\"\nsse_kms_key_id = \"{bad}\""),
                "store.sse_kms_key_id",
                "is not a KMS key id",
            );
        }
    }

    #[test]
    fn storage_classes_and_acls_are_checked() {
        has(
            "storage_class = \"GLACIER\"",
            "store.storage_class",
            "cannot be read without a restore",
        );
        has(
            "storage_class = \"DEEP_ARCHIVE\"",
            "store.storage_class",
            "lifecycle rule",
        );
        has(
            "storage_class = \"standard\"",
            "store.storage_class",
            "is not one of STANDARD, STANDARD_IA",
        );
        for c in StorageClass::ALL {
            let s = load(&format!("storage_class = \"{}\"", c.as_str())).unwrap();
            assert_eq!(s.store.s3.objects.storage_class, Some(c));
        }
        has("acl = \"public-read\"", "store.acl", "bucket policy");
        has(
            "acl = \"bucket-owner\"",
            "store.acl",
            "is not one of private, bucket-owner-read, bucket-owner-full-control",
        );
        for a in CannedAcl::ALL {
            let s = load(&format!("acl = \"{}\"", a.as_str())).unwrap();
            assert_eq!(s.store.s3.objects.acl, Some(a));
        }
    }

    #[test]
    fn tags_keep_to_s3_limits() {
        let many: Vec<String> = (0..11).map(|i| format!("t{i} = \"v\"")).collect();
        has(
            &format!("[store.tags]\n{}", many.join("\n")),
            "store.tags",
            "has 11 tags; S3 takes at most 10",
        );
        let ten: Vec<String> = (0..10).map(|i| format!("t{i} = \"v\"")).collect();
        assert_eq!(
            load(&format!("[store.tags]\n{}", ten.join("\n")))
                .unwrap()
                .store
                .s3
                .objects
                .tags
                .len(),
            10
        );
        let long_key = "k".repeat(129);
        has(
            &format!("tags = {{ {long_key} = \"v\" }}"),
            &format!("store.tags.{long_key}"),
            "1-128 characters; this one has 129",
        );
        let key_128 = "k".repeat(128);
        let value_256 = "é".repeat(256);
        assert!(
            load(&format!("tags = {{ {key_128} = \"{value_256}\" }}")).is_ok(),
            "limits count characters"
        );
        has(
            &format!("tags = {{ k = \"{}\" }}", "v".repeat(257)),
            "store.tags.k",
            "at most 256 characters; this one has 257",
        );
        has(
            "tags = { \"aws:createdBy\" = \"me\" }",
            "store.tags.aws:createdBy",
            "reserved for AWS",
        );
        has(
            "tags = { \"a&b\" = \"v\" }",
            "store.tags.a&b",
            "letters, digits, spaces and +-=._:/@ only",
        );
        has(
            "tags = { k = \"a?b\" }",
            "store.tags.k",
            "letters, digits, spaces and +-=._:/@ only",
        );
        has(
            "tags = { k = \"${UNSET_TAG}\" }",
            "store.tags.k",
            "UNSET_TAG is not set",
        );
        assert!(load("tags = { k = 5 }").is_err(), "values are strings");
    }

    #[test]
    fn credential_settings_are_checked() {
        has(
            "session_token = \"t\"",
            "store.session_token",
            "set store.access_key and store.secret_key with it",
        );
        has(
            "access_key = \"a\"\nsession_token = \"t\"",
            "store.session_token",
            "set store.access_key",
        );
        for key in [
            "external_id = \"acme-7\"",
            "role_session_name = \"s-1\"",
            "sts_endpoint = \"https://sts.amazonaws.com\"",
        ] {
            let name = format!("store.{}", key.split(' ').next().unwrap());
            has(key, &name, "set store.role_arn");
        }
        for bad in [
            "strata-writer",
            "arn:aws:iam::12345:role/x",
            "arn:aws:iam::123456789012:user/x",
            "arn:aws:sts::123456789012:role/x",
            "arn:aws:iam::123456789012:role/",
        ] {
            has(
                &format!("role_arn = \"{bad}\""),
                "store.role_arn",
                "is not an IAM role ARN",
            );
        }
        let role = "role_arn = \"arn:aws:iam::123456789012:role/w\"\n";
        has(
            &format!("{role}external_id = \"x\""),
            "store.external_id",
            "2-1224 characters",
        );
        has(
            &format!("{role}external_id = \"a b\""),
            "store.external_id",
            "2-1224 characters",
        );
        has(
            &format!("{role}role_session_name = \"a b\""),
            "store.role_session_name",
            "2-64 characters",
        );
        has(
            &format!("{role}role_session_name = \"{}\"", "s".repeat(65)),
            "store.role_session_name",
            "2-64 characters",
        );
        has(
            &format!("{role}sts_endpoint = \"sts.amazonaws.com\""),
            "store.sts_endpoint",
            "must start with http:// or https://",
        );
    }

    #[test]
    fn the_report_shows_the_settings_and_no_secret() {
        let c = load(ALL).unwrap();
        let region = S3Region {
            name: "eu-west-1".into(),
            source: RegionSource::Config,
        };
        let r = render_report("test.toml", &c, Some(&region));
        for part in [
            "session token <set, from ${S3_SESSION_TOKEN}>",
            "assuming role arn:aws:iam::123456789012:role/strata-writer (session \"strata-prod\", external id set, STS at https://sts.eu-west-1.amazonaws.com)",
            "SSE-KMS with key arn:aws:kms:eu-west-1:123456789012:key/1234abcd",
            "storage class STANDARD_IA",
            "tags cost center=kafka/archive,team=data",
            "ACL bucket-owner-full-control",
        ] {
            assert!(r.contains(part), "{part:?} in {r}");
        }
        for secret in [
            "ASIAEXAMPLEKEY",
            "TOPSECRETs3key",
            "SESSIONtoken123",
            "acme-7",
        ] {
            assert!(!r.contains(secret), "{secret} in {r}");
        }
        assert!(!format!("{:?}", c.store).contains("SESSIONtoken123"));
    }
}
