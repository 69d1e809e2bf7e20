//! The `strata validate` report: what the configuration means, with every secret redacted.

use super::*;
use std::fmt::Write;

fn secret(s: &Secret) -> String {
    format!("<set, {}>", s.origin())
}

/// What every written object carries, as `, SSE-KMS with key K, storage class C, ...`.
fn object_options(o: &mut String, w: &ObjectOptions) {
    match &w.sse {
        Some(Sse::S3) => o.push_str(", SSE-S3 (AES256)"),
        Some(Sse::Kms { key_id: Some(k) }) => {
            let _ = write!(o, ", SSE-KMS with key {k}");
        }
        Some(Sse::Kms { key_id: None }) => o.push_str(", SSE-KMS with S3's aws/s3 key"),
        None => {}
    }
    if let Some(c) = w.storage_class {
        let _ = write!(o, ", storage class {}", c.as_str());
    }
    if !w.tags.is_empty() {
        let tags: Vec<String> = w.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = write!(o, ", tags {}", tags.join(","));
    }
    if let Some(a) = w.acl {
        let _ = write!(o, ", ACL {}", a.as_str());
    }
}

/// The SASL login, as `, SASL <mechanism> ...`: who logs in and how, secrets redacted.
fn sasl(o: &mut String, s: &Sasl) {
    match s {
        Sasl::Password {
            mechanism,
            username,
            password,
        } => {
            let _ = write!(
                o,
                ", SASL {} as {username:?}, password {}",
                mechanism.as_str(),
                secret(password)
            );
        }
        Sasl::OAuthBearer(c) => {
            let _ = write!(
                o,
                ", SASL OAUTHBEARER (OIDC client credentials) as client {:?} of {}, client secret {}",
                c.client_id,
                c.token_endpoint,
                secret(&c.client_secret)
            );
            if let Some(scope) = &c.scope {
                let _ = write!(o, ", scope {scope:?}");
            }
            if !c.extensions.is_empty() {
                let e: Vec<String> = c
                    .extensions
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let _ = write!(o, ", extensions {}", e.join(","));
            }
        }
        Sasl::AwsMskIam(m) => {
            let _ = write!(
                o,
                ", SASL AWS_MSK_IAM (tokens signed for region {}, credentials from the AWS default chain",
                m.region.as_deref().unwrap_or("of the AWS environment")
            );
            if let Some(r) = &m.role {
                let _ = write!(o, ", assuming {r}");
            }
            o.push(')');
        }
    }
}

/// A human summary of a validated configuration; safe to print and to paste into tickets.
/// `region`: the S3 region as the store found it (`None` when it could not be found).
pub fn render_report(origin: &str, c: &Config, region: Option<&S3Region>) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{origin}: valid");
    let k = &c.kafka;
    let _ = write!(
        o,
        "kafka: {} ({})",
        k.bootstrap_servers.join(","),
        k.security_protocol.as_str()
    );
    if let Some(s) = &k.sasl {
        sasl(&mut o, s);
    }
    if let Some(p) = &k.tls.key_password {
        let _ = write!(o, ", TLS key password {}", secret(p));
    }
    if !k.properties.is_empty() {
        let keys: Vec<&str> = k.properties.keys().map(String::as_str).collect();
        let _ = write!(
            o,
            ", extra properties: {} (values not shown)",
            keys.join(", ")
        );
    }
    o.push('\n');
    let _ = write!(o, "store: {}", c.store.url);
    if let StoreUrl::S3 { .. } = c.store.url {
        let s = &c.store.s3;
        match (region, &s.region) {
            (Some(r), _) => {
                let _ = write!(o, " (region {r}");
            }
            (None, Some(r)) => {
                let _ = write!(o, " (region {r} (store.region)");
            }
            (None, None) => o.push_str(" (region not found: see below"),
        }
        if let Some(e) = &s.endpoint {
            let _ = write!(o, ", endpoint {e}");
        }
        if s.path_style {
            o.push_str(", path-style");
        }
        match &s.credentials {
            Credentials::Static {
                access_key,
                secret_key,
                session_token,
            } => {
                let _ = write!(
                    o,
                    ", access key {}, secret key {}",
                    secret(access_key),
                    secret(secret_key)
                );
                if let Some(t) = session_token {
                    let _ = write!(o, ", session token {}", secret(t));
                }
            }
            Credentials::DefaultChain => o.push_str(", AWS default credential chain"),
        }
        if let Some(r) = &s.role {
            let _ = write!(o, ", assuming {r}");
        }
        object_options(&mut o, &s.objects);
        let _ = write!(
            o,
            ", parts of {}, {} attempts)",
            s.part_size, s.max_attempts
        );
    }
    o.push('\n');
    let _ = writeln!(
        o,
        "limits: at most {} tasks, buffer memory {}",
        c.limits.max_tasks, c.limits.buffer_memory
    );
    let _ = writeln!(
        o,
        "tasks: {} of at most {}",
        c.tasks.len() + c.replicate.len(),
        c.limits.max_tasks
    );
    for t in &c.tasks {
        let f = &t.format;
        let mut fmt = f.kind.as_str().to_string();
        if f.compression != crate::format::Compression::None {
            let _ = write!(fmt, "+{}", f.compression.as_str());
        }
        if f.kind == crate::format::FormatKind::Text {
            let _ = write!(fmt, ", delimiter \"{}\"", f.text.delimiter);
            match &f.text.key_separator {
                Some(sep) => {
                    let _ = write!(
                        fmt,
                        ", keys with separator {:?}",
                        String::from_utf8_lossy(sep)
                    );
                }
                None => fmt.push_str(", values only"),
            }
        }
        let _ = writeln!(
            o,
            "  - {}: topics {} from {} (consumer group \"{}\"), every {} s or {}, {} -> {}/{}{}/ ({}, {} time){}",
            t.name,
            t.topics,
            t.start_offset.as_str(),
            t.name,
            t.interval.as_secs(),
            t.max_file_size,
            fmt,
            t.store.url,
            t.directory.prefix(),
            t.time_directory,
            t.time_zone,
            t.time_source.as_str(),
            if t.allow_retention_gaps {
                "; --once exits 0 on retention gaps"
            } else {
                ""
            },
        );
        if let Some(i) = &t.iceberg {
            let catalog = match &i.catalog {
                crate::config::IcebergCatalog::Sql { file } => {
                    format!("embedded SQL catalog {}", file.display())
                }
                crate::config::IcebergCatalog::Rest {
                    uri,
                    token,
                    credential,
                } => format!(
                    "REST catalog {uri}{}{}",
                    token
                        .as_ref()
                        .map_or(String::new(), |s| format!(", token {}", secret(s))),
                    credential
                        .as_ref()
                        .map_or(String::new(), |s| format!(", credential {}", secret(s)))
                ),
                crate::config::IcebergCatalog::Glue => "AWS Glue catalog".to_string(),
            };
            let _ = writeln!(
                o,
                "    Iceberg tables {}.<topic> ({catalog}, catalog name \"{}\"), warehouse {}; one commit per table every {} s; time directories do not apply",
                i.namespace,
                i.catalog_name,
                i.warehouse.clone().unwrap_or_else(|| format!("{}/{}", t.store.url, t.directory.as_str())),
                t.interval.as_secs(),
            );
            continue;
        }
        let groups = t
            .state
            .groups
            .as_ref()
            .map_or("every group but strata's own".to_string(), |r| {
                format!("groups matching {}", r.as_str())
            });
        let _ = match t.state.mode {
            crate::config::StateMode::Off => writeln!(o, "    state snapshots: off"),
            m => writeln!(
                o,
                "    state snapshots ({}): at the start and end of --once runs, every {} s otherwise; {groups}",
                m.as_str(),
                t.state.interval.as_secs()
            ),
        };
    }
    for t in &c.replicate {
        let naming = match &t.naming {
            crate::config::TargetNaming::Identity => "same names".to_string(),
            crate::config::TargetNaming::Rename => "renamed <source alias>.<topic>".to_string(),
            crate::config::TargetNaming::Map(m) => format!("{} mapped", m.len()),
        };
        let _ = writeln!(
            o,
            "  - {} (replicate {}, local {:?}, peer {:?} at {} ({})): topics {} from {}, {naming}",
            t.name,
            t.direction.as_str(),
            t.local_alias.as_str(),
            t.peer_alias.as_str(),
            t.peer.bootstrap_servers.join(","),
            t.peer.security_protocol.as_str(),
            t.topics,
            t.start_offset.as_str(),
        );
    }
    if let Some(r) = &c.restore {
        let replicas = r
            .replication_factor
            .map_or("the broker's default".to_string(), |n| n.to_string());
        let _ = writeln!(
            o,
            "restore: from {}/{}{} ({}) topics {} into {} (partitioning {:?}, new topics with replication factor {replicas})",
            r.store.url,
            r.directory.prefix(),
            r.time_directory
                .as_ref()
                .map_or("<archives at any depth>".to_string(), |t| t.to_string()),
            r.time_zone,
            r.topics
                .as_ref()
                .map_or("<all>".to_string(), |t| t.to_string()),
            r.kafka.bootstrap_servers.join(","),
            r.partitioning,
        );
    }
    let t = &c.tier;
    let _ = writeln!(
        o,
        "tier: listen {}, prefix {:?}, chunks of {}{}, cache {} in {}, prefetch {}",
        t.listen,
        t.prefix.as_str(),
        t.chunk_size,
        if t.compress_chunks { " (zstd)" } else { "" },
        t.cache_size,
        t.cache_dir
            .as_ref()
            .map_or("memory".to_string(), |d| d.display().to_string()),
        t.prefetch_chunks,
    );
    let dirs: Vec<String> = t.log_dirs.iter().map(|d| d.display().to_string()).collect();
    let _ = writeln!(
        o,
        "tier access: secret file {}, copies by path from {}, Unix socket {}, TLS {}",
        t.secret_file
            .as_ref()
            .map_or("<not set: strata tier refuses to start>".to_string(), |p| p
                .display()
                .to_string()),
        if dirs.is_empty() {
            "<nowhere: uploads only>".to_string()
        } else {
            dirs.join(", ")
        },
        t.socket_dir.as_ref().map_or("off".to_string(), |d| format!(
            "{} (cache file handoff {})",
            d.join("tier.sock").display(),
            if t.handoff { "on" } else { "off" }
        )),
        t.tls
            .as_ref()
            .map_or("off".to_string(), |c| c.cert_file.display().to_string()),
    );
    o
}
