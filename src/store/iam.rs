//! The IAM permissions each S3 request strata sends needs. S3 answers `AccessDenied` without
//! saying which action was refused, so the store names them (actions and resources) from the
//! request it made. Pure; the policies in docs/operations.md#iam-policy list the same actions.

use crate::config::{ObjectOptions, Sse};

/// An S3 request strata makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Get,
    RangedGet,
    Head,
    Put,
    StartMultipart,
    UploadPart,
    CompleteMultipart,
    AbortMultipart,
    ListMultipart,
    List,
    Delete,
    HeadBucket,
    CreateBucket,
}

impl Op {
    /// What the operation is called in messages ("put failed: ...").
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::RangedGet => "ranged get",
            Op::Head => "head",
            Op::Put => "put",
            Op::StartMultipart => "start multipart upload",
            Op::UploadPart => "upload part",
            Op::CompleteMultipart => "complete multipart upload",
            Op::AbortMultipart => "abort multipart upload",
            Op::ListMultipart => "list multipart uploads",
            Op::List => "list",
            Op::Delete => "delete",
            Op::HeadBucket => "head bucket",
            Op::CreateBucket => "create bucket",
        }
    }

    /// Whether the request creates an object, and so carries [`ObjectOptions`].
    pub(crate) fn creates(self) -> bool {
        matches!(self, Op::Put | Op::StartMultipart)
    }

    fn multipart(self) -> bool {
        matches!(
            self,
            Op::StartMultipart | Op::UploadPart | Op::CompleteMultipart
        )
    }

    fn reads(self) -> bool {
        matches!(self, Op::Get | Op::RangedGet | Op::Head)
    }

    /// Whether the IAM resource is the bucket rather than an object.
    fn on_bucket(self) -> bool {
        matches!(
            self,
            Op::List | Op::ListMultipart | Op::HeadBucket | Op::CreateBucket
        )
    }

    /// The S3 actions the request needs. Tags and a canned ACL on a new object need their own
    /// actions besides `s3:PutObject`.
    pub(crate) fn s3_actions(self, o: &ObjectOptions) -> Vec<&'static str> {
        let mut a = vec![match self {
            Op::Get | Op::RangedGet | Op::Head => "s3:GetObject",
            Op::Put | Op::StartMultipart | Op::UploadPart | Op::CompleteMultipart => "s3:PutObject",
            Op::AbortMultipart => "s3:AbortMultipartUpload",
            Op::ListMultipart => "s3:ListBucketMultipartUploads",
            Op::List | Op::HeadBucket => "s3:ListBucket",
            Op::Delete => "s3:DeleteObject",
            Op::CreateBucket => "s3:CreateBucket",
        }];
        if self.creates() {
            if !o.tags.is_empty() {
                a.push("s3:PutObjectTagging");
            }
            if o.acl.is_some() {
                a.push("s3:PutObjectAcl");
            }
        }
        a
    }

    /// The KMS actions on the configured key: a new SSE-KMS object needs a data key, and a
    /// multipart upload also decrypts it to join the parts.
    pub(crate) fn kms_actions(self, o: &ObjectOptions) -> Vec<&'static str> {
        let kms = matches!(o.sse, Some(Sse::Kms { .. }));
        match self {
            _ if !kms => vec![],
            Op::Put => vec!["kms:GenerateDataKey"],
            _ if self.multipart() => vec!["kms:GenerateDataKey", "kms:Decrypt"],
            Op::Get | Op::RangedGet => vec!["kms:Decrypt"],
            _ => vec![],
        }
    }
}

/// The AWS partition of a region: the first part of every ARN in it.
pub(crate) fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else if region.starts_with("us-isob-") {
        "aws-iso-b"
    } else if region.starts_with("us-iso-") {
        "aws-iso"
    } else {
        "aws"
    }
}

/// Where a refused request went.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub bucket: &'a str,
    /// The object's full key, or the listing's full prefix.
    pub key: &'a str,
    pub region: &'a str,
}

/// What to grant after S3 refused `op` on `t` to `who` (e.g. "role arn:... (assumed)"):
/// the actions and resources, the KMS key's actions, and the bucket-policy cause users meet
/// most (a policy that denies `PutObject` without server-side encryption).
pub(crate) fn access_denied_hint(op: Op, o: &ObjectOptions, t: Target<'_>, who: &str) -> String {
    let p = partition(t.region);
    let bucket_arn = format!("arn:{p}:s3:::{}", t.bucket);
    let resource = match op {
        Op::List | Op::ListMultipart if !t.key.is_empty() => {
            format!("{bucket_arn} (prefix {:?})", t.key)
        }
        _ if op.on_bucket() => bucket_arn.clone(),
        _ => format!("{bucket_arn}/{}", t.key),
    };
    let mut m = format!(
        "access denied: {who} needs {} on {resource}",
        and_list(&op.s3_actions(o))
    );
    let key = kms_key(o);
    let kms = op.kms_actions(o);
    if !kms.is_empty() {
        m.push_str(&format!(", and {} on {key}", and_list(&kms)));
    } else if matches!(op, Op::Get | Op::RangedGet) {
        m.push_str(", and kms:Decrypt on the object's KMS key if it is encrypted with SSE-KMS");
    }
    if op.reads() {
        m.push_str(&format!(
            " (S3 also answers 403 instead of 404 for a missing object when s3:ListBucket on \
             {bucket_arn} is not granted)"
        ));
    }
    m.push_str(
        "; grant them in its IAM policy, and check that the bucket policy (and a KMS key \
         policy) allows them: docs/operations.md#iam-policy",
    );
    if op.creates() && o.sse.is_none() {
        m.push_str(
            "; a bucket policy that refuses writes without server-side encryption refuses \
             this one: set store.sse (\"AES256\" or \"aws:kms\")",
        );
    }
    m
}

/// The KMS key as a policy names it.
fn kms_key(o: &ObjectOptions) -> String {
    match o.sse.as_ref().and_then(Sse::kms_key_id) {
        Some(k) if k.starts_with("arn:") => k.to_string(),
        Some(k) => format!("the KMS key {k} (its key ARN in the policy)"),
        None => "S3's aws/s3 KMS key".to_string(),
    }
}

/// "a", "a and b", "a, b and c".
fn and_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CannedAcl;

    const ALL: [Op; 13] = [
        Op::Get,
        Op::RangedGet,
        Op::Head,
        Op::Put,
        Op::StartMultipart,
        Op::UploadPart,
        Op::CompleteMultipart,
        Op::AbortMultipart,
        Op::ListMultipart,
        Op::List,
        Op::Delete,
        Op::HeadBucket,
        Op::CreateBucket,
    ];

    fn kms_with_tags_and_acl() -> ObjectOptions {
        ObjectOptions {
            sse: Some(Sse::Kms {
                key_id: Some("arn:aws:kms:eu-west-1:123456789012:key/k-1".into()),
            }),
            storage_class: None,
            tags: [("team".to_string(), "data".to_string())].into(),
            acl: Some(CannedAcl::BucketOwnerFullControl),
        }
    }

    #[test]
    fn every_request_maps_to_the_iam_action_s3_checks() {
        let plain = ObjectOptions::default();
        let want = [
            (Op::Get, "s3:GetObject"),
            (Op::RangedGet, "s3:GetObject"),
            (Op::Head, "s3:GetObject"),
            (Op::Put, "s3:PutObject"),
            (Op::StartMultipart, "s3:PutObject"),
            (Op::UploadPart, "s3:PutObject"),
            (Op::CompleteMultipart, "s3:PutObject"),
            (Op::AbortMultipart, "s3:AbortMultipartUpload"),
            (Op::ListMultipart, "s3:ListBucketMultipartUploads"),
            (Op::List, "s3:ListBucket"),
            (Op::Delete, "s3:DeleteObject"),
            (Op::HeadBucket, "s3:ListBucket"),
            (Op::CreateBucket, "s3:CreateBucket"),
        ];
        for (op, action) in want {
            assert_eq!(op.s3_actions(&plain), vec![action], "{op:?}");
            assert!(op.kms_actions(&plain).is_empty(), "{op:?}");
        }
    }

    #[test]
    fn tags_acl_and_kms_add_their_actions_to_the_writes_only() {
        let o = kms_with_tags_and_acl();
        for op in ALL {
            let s3 = op.s3_actions(&o);
            let kms = op.kms_actions(&o);
            match op {
                Op::Put => {
                    assert_eq!(
                        s3,
                        ["s3:PutObject", "s3:PutObjectTagging", "s3:PutObjectAcl"]
                    );
                    assert_eq!(kms, ["kms:GenerateDataKey"]);
                }
                Op::StartMultipart => {
                    assert_eq!(
                        s3,
                        ["s3:PutObject", "s3:PutObjectTagging", "s3:PutObjectAcl"]
                    );
                    assert_eq!(kms, ["kms:GenerateDataKey", "kms:Decrypt"]);
                }
                Op::UploadPart | Op::CompleteMultipart => {
                    assert_eq!(s3, ["s3:PutObject"]);
                    assert_eq!(kms, ["kms:GenerateDataKey", "kms:Decrypt"]);
                }
                Op::Get | Op::RangedGet => assert_eq!(kms, ["kms:Decrypt"]),
                _ => {
                    assert_eq!(s3.len(), 1, "{op:?}");
                    assert!(kms.is_empty(), "{op:?}");
                }
            }
        }
        let s3_only = ObjectOptions {
            sse: Some(Sse::S3),
            ..ObjectOptions::default()
        };
        assert!(ALL.iter().all(|op| op.kms_actions(&s3_only).is_empty()));
    }

    #[test]
    fn the_hint_names_who_what_and_where() {
        let t = Target {
            bucket: "logs",
            key: "prod/t/2026/t+0+00000000000000000000.jsonl",
            region: "eu-west-1",
        };
        let m = access_denied_hint(Op::Put, &kms_with_tags_and_acl(), t, "role R (assumed)");
        assert_eq!(
            m,
            "access denied: role R (assumed) needs s3:PutObject, s3:PutObjectTagging and \
             s3:PutObjectAcl on arn:aws:s3:::logs/prod/t/2026/t+0+00000000000000000000.jsonl, \
             and kms:GenerateDataKey on arn:aws:kms:eu-west-1:123456789012:key/k-1; grant them \
             in its IAM policy, and check that the bucket policy (and a KMS key policy) allows \
             them: docs/operations.md#iam-policy"
        );
        // Without store.sse a write may be refused by a bucket policy demanding encryption.
        let plain = ObjectOptions::default();
        let m = access_denied_hint(Op::StartMultipart, &plain, t, "W");
        assert!(
            m.contains("needs s3:PutObject on arn:aws:s3:::logs/prod/"),
            "{m}"
        );
        assert!(m.contains("set store.sse"), "{m}");
        let m = access_denied_hint(Op::Delete, &plain, t, "W");
        assert!(
            m.contains("s3:DeleteObject") && !m.contains("store.sse"),
            "{m}"
        );
        // Listings name the bucket and the prefix.
        let list = Target {
            key: "prod/t/",
            ..t
        };
        let m = access_denied_hint(Op::List, &plain, list, "W");
        assert!(
            m.contains("needs s3:ListBucket on arn:aws:s3:::logs (prefix \"prod/t/\")"),
            "{m}"
        );
        let m = access_denied_hint(Op::ListMultipart, &plain, list, "W");
        assert!(m.contains("s3:ListBucketMultipartUploads on arn:aws:s3:::logs"));
        let m = access_denied_hint(Op::HeadBucket, &plain, Target { key: "", ..t }, "W");
        assert!(
            m.contains("needs s3:ListBucket on arn:aws:s3:::logs;"),
            "{m}"
        );
        // Reads: KMS only if the object is encrypted, and the 403-for-missing trap.
        let m = access_denied_hint(Op::Get, &plain, t, "W");
        assert!(m.contains("kms:Decrypt on the object's KMS key if"), "{m}");
        assert!(m.contains("403 instead of 404"), "{m}");
        // An alias or key id is named as written; aws/s3 when none is set.
        let alias = ObjectOptions {
            sse: Some(Sse::Kms {
                key_id: Some("alias/strata".into()),
            }),
            ..ObjectOptions::default()
        };
        let m = access_denied_hint(Op::Put, &alias, t, "W");
        assert!(
            m.contains("kms:GenerateDataKey on the KMS key alias/strata"),
            "{m}"
        );
        let managed = ObjectOptions {
            sse: Some(Sse::Kms { key_id: None }),
            ..ObjectOptions::default()
        };
        let m = access_denied_hint(Op::Put, &managed, t, "W");
        assert!(m.contains("on S3's aws/s3 KMS key"), "{m}");
    }

    #[test]
    fn arns_use_the_regions_partition() {
        assert_eq!(partition("eu-west-1"), "aws");
        assert_eq!(partition("cn-north-1"), "aws-cn");
        assert_eq!(partition("us-gov-west-1"), "aws-us-gov");
        assert_eq!(partition("us-iso-east-1"), "aws-iso");
        assert_eq!(partition("us-isob-east-1"), "aws-iso-b");
        let t = Target {
            bucket: "b",
            key: "k",
            region: "cn-north-1",
        };
        let m = access_denied_hint(Op::Delete, &ObjectOptions::default(), t, "W");
        assert!(m.contains("on arn:aws-cn:s3:::b/k;"), "{m}");
    }
}
