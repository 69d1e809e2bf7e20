use super::*;
use proptest::prelude::*;

/// Decode limit of tests that are not about it: far above any sample.
const LIMIT: u64 = 1 << 30;

struct Encoded {
    data: Bytes,
    records: u64,
    ambiguous: u64,
}

fn encode_all(spec: &FormatSpec, topic: &str, records: &[Record]) -> Encoded {
    let mut e = Encoder::in_memory(spec, topic).unwrap();
    for r in records {
        r.with_view(|v| e.append(v)).unwrap();
    }
    let size = e.output_bytes();
    let f = e.finish().unwrap();
    if spec.kind != FormatKind::Parquet && spec.compression == Compression::None {
        assert_eq!(
            size,
            f.out.len() as u64,
            "output_bytes counts what was written"
        );
    }
    Encoded {
        data: Bytes::from(f.out),
        records: f.records,
        ambiguous: f.ambiguous,
    }
}

fn spec(kind: FormatKind, c: Compression) -> FormatSpec {
    FormatSpec::new(kind, c, TextOptions::default()).unwrap()
}

fn sample() -> Vec<Record> {
    vec![
        Record {
            topic: "cdc.orders".into(),
            partition: Some(3),
            offset: Some(10),
            timestamp: Some(1_764_400_000_123),
            timestamp_type: TimestampType::CreateTime,
            key: Some(b"order-1".to_vec()),
            value: Some(br#"[{"TYPE":"I","GLOBAL_ID":"g1"}]"#.to_vec()),
            headers: vec![
                Header {
                    key: "trace".into(),
                    value: Some(b"abc".to_vec()),
                },
                Header {
                    key: "trace".into(),
                    value: None,
                },
                Header {
                    key: "bin".into(),
                    value: Some(vec![0xff, 0x00, 0xfe]),
                },
            ],
        },
        Record {
            topic: "cdc.orders".into(),
            partition: Some(3),
            offset: Some(12),
            timestamp: None,
            timestamp_type: TimestampType::NotAvailable,
            key: None,
            value: None,
            headers: vec![],
        },
        Record {
            topic: "cdc.orders".into(),
            partition: Some(3),
            offset: Some(13),
            timestamp: Some(0),
            timestamp_type: TimestampType::LogAppendTime,
            key: Some(vec![0x80, 0x81]),
            value: Some(vec![]),
            headers: vec![Header {
                key: "".into(),
                value: Some(vec![]),
            }],
        },
    ]
}

#[test]
fn lossless_formats_round_trip_the_sample() {
    for (kind, c) in [
        (FormatKind::Jsonl, Compression::None),
        (FormatKind::Jsonl, Compression::Gzip),
        (FormatKind::Jsonl, Compression::Zstd),
        (FormatKind::Parquet, Compression::Zstd),
        (FormatKind::Parquet, Compression::Snappy),
        (FormatKind::Parquet, Compression::None),
    ] {
        let s = spec(kind, c);
        let enc = encode_all(&s, "cdc.orders", &sample());
        assert_eq!(enc.records, 3);
        let back = decode(&s, "cdc.orders", enc.data, LIMIT).unwrap();
        assert_eq!(back, sample(), "{kind:?}/{c:?}");
    }
}

#[test]
fn jsonl_keeps_text_readable_and_binary_in_b64() {
    let enc = encode_all(
        &spec(FormatKind::Jsonl, Compression::None),
        "cdc.orders",
        &sample(),
    );
    let text = String::from_utf8(enc.data.to_vec()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(first["key"], "order-1");
    assert_eq!(first["timestamp_type"], "create");
    assert_eq!(first["headers"][2]["value_b64"], "/wD+");
    let third: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(third["key_b64"], "gIE=");
    assert!(third["key"].is_null());
    assert_eq!(third["value"], "");
}

#[test]
fn text_writes_values_and_optional_keys() {
    let records = sample();
    let plain = encode_all(&spec(FormatKind::Text, Compression::None), "t", &records);
    let mut want = br#"[{"TYPE":"I","GLOBAL_ID":"g1"}]"#.to_vec();
    want.extend_from_slice(b"\n\n\n");
    assert_eq!(plain.data.as_ref(), want.as_slice());

    let keyed = FormatSpec::new(
        FormatKind::Text,
        Compression::None,
        TextOptions {
            delimiter: Delimiter::Pipe,
            key_separator: Some(b"=".to_vec()),
        },
    )
    .unwrap();
    let e = encode_all(&keyed, "t", &records[..2]);
    assert_eq!(
        e.data.as_ref(),
        br#"order-1=[{"TYPE":"I","GLOBAL_ID":"g1"}]|=|"#.as_slice()
    );
    let back = decode(&keyed, "t", e.data, LIMIT).unwrap();
    assert_eq!(back[0].key.as_deref(), Some(b"order-1".as_slice()));
    assert_eq!(back[0].value, records[0].value);
    assert_eq!(back[1].key.as_deref(), Some(b"".as_slice()));
    assert_eq!(back[1].value.as_deref(), Some(b"".as_slice()));
    assert_eq!(back[1].partition, None);
}

#[test]
fn text_counts_records_restore_cannot_split() {
    let s = FormatSpec::new(
        FormatKind::Text,
        Compression::None,
        TextOptions {
            delimiter: Delimiter::Comma,
            key_separator: Some(b":".to_vec()),
        },
    )
    .unwrap();
    let mk = |k: &[u8], v: &[u8]| Record {
        key: Some(k.to_vec()),
        value: Some(v.to_vec()),
        ..Record::default()
    };
    let recs = vec![
        mk(b"a", b"1"),
        mk(b"b", b"x,y"),
        mk(b"c:d", b"2"),
        mk(b"e", b"3"),
    ];
    assert_eq!(encode_all(&s, "t", &recs).ambiguous, 2);
}

#[test]
fn text_with_every_delimiter_and_compression_round_trips_values() {
    let values: Vec<Record> = (0..50)
        .map(|i| Record {
            value: Some(format!("v{i}").into_bytes()),
            ..Record::default()
        })
        .collect();
    for d in [
        Delimiter::Comma,
        Delimiter::Semicolon,
        Delimiter::Pipe,
        Delimiter::Newline,
    ] {
        for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let s = FormatSpec::new(
                FormatKind::Text,
                c,
                TextOptions {
                    delimiter: d,
                    key_separator: None,
                },
            )
            .unwrap();
            let back = decode(&s, "t", encode_all(&s, "t", &values).data, LIMIT).unwrap();
            let got: Vec<_> = back.iter().map(|r| r.value.clone()).collect();
            let want: Vec<_> = values.iter().map(|r| r.value.clone()).collect();
            assert_eq!(got, want, "{d:?} {c:?}");
            assert!(back.iter().all(|r| r.topic == "t"));
        }
    }
}

#[test]
fn text_without_delimiter_concatenates_and_refuses_to_split() {
    let s = FormatSpec::new(
        FormatKind::Text,
        Compression::None,
        TextOptions {
            delimiter: Delimiter::None,
            key_separator: None,
        },
    )
    .unwrap();
    let recs = vec![
        Record {
            value: Some(b"ab".to_vec()),
            ..Record::default()
        },
        Record {
            value: Some(b"cd".to_vec()),
            ..Record::default()
        },
    ];
    let e = encode_all(&s, "t", &recs);
    assert_eq!(e.data.as_ref(), b"abcd");
    let err = decode(&s, "t", e.data, LIMIT).unwrap_err();
    assert!(err.message.contains("record_delimiter = \"none\""), "{err}");
}

#[test]
fn decode_errors_say_where() {
    let s = spec(FormatKind::Jsonl, Compression::None);
    let good = encode_all(&s, "t", &sample()[..1]).data;
    let mut data = good.to_vec();
    let at = data.len();
    data.extend_from_slice(b"{\"topic\":\"t\",\"partition\":1}\n");
    let err = decode(&s, "t", Bytes::from(data), LIMIT).unwrap_err();
    assert_eq!(err.at, Some(at as u64));
    assert!(
        err.to_string()
            .starts_with(&format!("at byte {at}: invalid jsonl record")),
        "{err}"
    );

    let gz = spec(FormatKind::Jsonl, Compression::Gzip);
    let err = decode(&gz, "t", Bytes::from_static(b"not gzip"), LIMIT).unwrap_err();
    assert!(err.message.contains("gzip"), "{err}");

    let pq = spec(FormatKind::Parquet, Compression::Zstd);
    let err = decode(&pq, "t", Bytes::from_static(b"PAR1garbagePAR1"), LIMIT).unwrap_err();
    assert!(err.message.contains("parquet"), "{err}");

    let both = Bytes::from_static(
        b"{\"topic\":\"t\",\"partition\":1,\"offset\":2,\"value\":\"a\",\"value_b64\":\"YQ==\"}\n",
    );
    let err = decode(&s, "t", both, LIMIT).unwrap_err();
    assert!(
        err.message.contains("both \"value\" and \"value_b64\""),
        "{err}"
    );

    let txt = FormatSpec::new(FormatKind::Text, Compression::None, TextOptions::default()).unwrap();
    let err = decode(&txt, "t", Bytes::from_static(b"a\nb"), LIMIT).unwrap_err();
    assert_eq!(err.at, Some(3));
}

#[test]
fn extensions_map_both_ways() {
    for kind in [FormatKind::Text, FormatKind::Jsonl] {
        for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let s = spec(kind, c);
            let back = FormatSpec::from_extension(s.extension(), TextOptions::default()).unwrap();
            assert_eq!((back.kind, back.compression), (kind, c));
        }
    }
    assert_eq!(
        spec(FormatKind::Parquet, Compression::Snappy).extension(),
        "parquet"
    );
    assert!(FormatSpec::from_extension("csv", TextOptions::default()).is_none());
}

#[test]
fn unsupported_pairs_are_refused() {
    let e = FormatSpec::new(
        FormatKind::Parquet,
        Compression::Gzip,
        TextOptions::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("\"zstd\", \"snappy\" or \"none\""),
        "{e}"
    );
    assert!(FormatSpec::new(
        FormatKind::Text,
        Compression::Snappy,
        TextOptions::default()
    )
    .is_err());
}

#[test]
fn parquet_spans_several_batches_and_row_groups() {
    let s = spec(FormatKind::Parquet, Compression::Snappy);
    let big = vec![7u8; 3000];
    let records: Vec<Record> = (0..40_000i64)
        .map(|i| Record {
            topic: "t".into(),
            partition: Some(1),
            offset: Some(i),
            timestamp: Some(i * 1000),
            timestamp_type: TimestampType::CreateTime,
            key: Some(i.to_be_bytes().to_vec()),
            value: Some(big.clone()),
            headers: vec![Header {
                key: "i".into(),
                value: Some(i.to_le_bytes().to_vec()),
            }],
        })
        .collect();
    let back = decode(&s, "t", encode_all(&s, "t", &records).data, LIMIT).unwrap();
    assert_eq!(back.len(), records.len());
    assert!(back == records);
}

#[test]
fn parquet_memory_counts_builder_capacity_kept_between_batches() {
    // Values that compress to nothing, so what the writer holds is small.
    let s = spec(FormatKind::Parquet, Compression::Zstd);
    let mut e = Encoder::in_memory(&s, "t").unwrap();
    let value = vec![1u8; 100_000];
    let mut low = usize::MAX;
    // 30 records of 100 kB: the 11th crosses the 1 MiB batch size and hands rows to the writer.
    for i in 0..30i64 {
        let r = Record {
            topic: "t".into(),
            partition: Some(0),
            offset: Some(i),
            timestamp: Some(i),
            timestamp_type: TimestampType::CreateTime,
            key: None,
            value: Some(value.clone()),
            headers: vec![],
        };
        r.with_view(|v| e.append(v)).unwrap();
        if i >= 10 {
            low = low.min(e.memory_bytes());
        }
    }
    // Right after a batch no row is pending, yet the builders keep a batch's capacity: the
    // budget must see it (about 1.1 MB here), not only the rows still to write.
    assert!(low >= 1_000_000, "lowest memory_bytes seen: {low}");
}

fn arb_bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        Just(None),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Some),
        "[a-z\\u{e9}\\u{1F600}\"\\\\\n]{0,20}".prop_map(|s| Some(s.into_bytes())),
    ]
}

fn arb_record() -> impl Strategy<Value = Record> {
    (
        0i32..1000,
        0i64..i64::MAX,
        proptest::option::of(-1_000_000_000_000i64..4_000_000_000_000),
        arb_bytes(),
        arb_bytes(),
        proptest::collection::vec(("[ -~\\u{e9}]{0,8}", arb_bytes()), 0..4),
    )
        .prop_map(|(p, o, ts, key, value, hs)| Record {
            topic: "prop.topic".into(),
            partition: Some(p),
            offset: Some(o),
            timestamp: ts,
            timestamp_type: if ts.is_some() {
                TimestampType::CreateTime
            } else {
                TimestampType::NotAvailable
            },
            key,
            value,
            headers: hs
                .into_iter()
                .map(|(key, value)| Header { key, value })
                .collect(),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_records_round_trip_through_lossless_formats(records in proptest::collection::vec(arb_record(), 1..30)) {
        for (kind, c) in [(FormatKind::Jsonl, Compression::Zstd), (FormatKind::Parquet, Compression::Zstd)] {
            let s = spec(kind, c);
            let back = decode(&s, "prop.topic", encode_all(&s, "prop.topic", &records).data, LIMIT).unwrap();
            prop_assert_eq!(&back, &records);
        }
    }

    #[test]
    fn text_round_trips_values_without_the_delimiter(values in proptest::collection::vec("[a-z0-9 ]{0,30}", 1..30)) {
        let s = spec(FormatKind::Text, Compression::Gzip);
        let records: Vec<Record> = values.iter().map(|v| Record { value: Some(v.clone().into_bytes()), ..Record::default() }).collect();
        let enc = encode_all(&s, "t", &records);
        prop_assert_eq!(enc.ambiguous, 0);
        let back = decode(&s, "t", enc.data, LIMIT).unwrap();
        let got: Vec<Vec<u8>> = back.into_iter().map(|r| r.value.unwrap()).collect();
        let want: Vec<Vec<u8>> = values.into_iter().map(String::into_bytes).collect();
        prop_assert_eq!(got, want);
    }
}

/// Frames of zeros, concatenated: a few KB that decode to far more than the limit.
fn bomb(c: Compression, frames: usize) -> Vec<u8> {
    let zeros = vec![0u8; 16 << 20];
    let frame = match c {
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            std::io::Write::write_all(&mut e, &zeros).unwrap();
            e.finish().unwrap()
        }
        Compression::Zstd => zstd::encode_all(&zeros[..], 19).unwrap(),
        other => panic!("no bomb for {other:?}"),
    };
    frame.repeat(frames)
}

#[test]
fn decompression_stops_at_the_limit() {
    for c in [Compression::Gzip, Compression::Zstd] {
        // 100 frames of 16 MiB: 1.6 GB from a small object; the limit is 64 MiB.
        let data = bomb(c, 100);
        assert!(data.len() < 2 << 20, "{c:?}: {} bytes", data.len());
        for kind in [FormatKind::Jsonl, FormatKind::Text] {
            let err = decode(&spec(kind, c), "t", Bytes::from(data.clone()), 64 << 20).unwrap_err();
            assert!(
                err.message.contains("decodes to more than 64MiB")
                    && err.message.contains("limits.buffer_memory"),
                "{kind:?}/{c:?}: {err}"
            );
        }
    }
    // Uncompressed and Parquet objects are held to the same limit.
    let records: Vec<Record> = (0..200).flat_map(|_| sample()).collect();
    for (kind, c) in [
        (FormatKind::Jsonl, Compression::None),
        (FormatKind::Parquet, Compression::Zstd),
        (FormatKind::Parquet, Compression::None),
    ] {
        let s = spec(kind, c);
        let data = encode_all(&s, "t", &records).data;
        let decoded: u64 = decode(&s, "t", data.clone(), LIMIT)
            .unwrap()
            .iter()
            .map(Record::heap_bytes)
            .sum();
        let err = decode(&s, "t", data.clone(), decoded / 2).unwrap_err();
        assert!(
            err.message.contains("decodes to more than"),
            "{kind:?}/{c:?}: {err}"
        );
        assert!(
            decode(&s, "t", data, decoded * 2).is_ok(),
            "{kind:?}/{c:?} within the limit"
        );
    }
}

#[test]
fn mutated_objects_give_errors_never_panics() {
    let records: Vec<Record> = (0..20).flat_map(|_| sample()).collect();
    let keyed = TextOptions {
        key_separator: Some(b":".to_vec()),
        ..TextOptions::default()
    };
    let mut specs = Vec::new();
    for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
        specs.push(spec(FormatKind::Jsonl, c));
        specs.push(FormatSpec::new(FormatKind::Text, c, keyed.clone()).unwrap());
    }
    for c in [Compression::None, Compression::Snappy, Compression::Zstd] {
        specs.push(spec(FormatKind::Parquet, c));
    }
    let mut cases = 0;
    for s in &specs {
        let good = encode_all(s, "t", &records).data.to_vec();
        let n = good.len();
        let compressed = s.kind == FormatKind::Parquet || s.compression != Compression::None;
        // Truncations: a compressed stream or a Parquet footer that is cut must be refused.
        for cut in [1, 7, n / 3, n / 2, n - 9, n - 1] {
            let r = std::panic::catch_unwind(|| {
                decode(s, "t", Bytes::from(good[..cut].to_vec()), 1 << 26)
            });
            let r = r.unwrap_or_else(|_| panic!("{s:?}: truncated to {cut} panicked"));
            if compressed {
                assert!(r.is_err(), "{s:?}: truncated to {cut} of {n} decoded");
            }
            cases += 1;
        }
        // Byte flips and overwritten runs all over the object.
        for i in 0..24 {
            let mut bad = good.clone();
            let at = (i * 7919 + 13) % n;
            bad[at] ^= 0x5a;
            if i % 3 == 0 {
                let end = (at + 16).min(n);
                bad[at..end].fill(0xff);
            }
            let r = std::panic::catch_unwind(|| decode(s, "t", Bytes::from(bad), 1 << 26));
            let r = r.unwrap_or_else(|_| panic!("{s:?}: mutation {i} at byte {at} panicked"));
            if let Ok(back) = r {
                assert!(
                    back.len() <= 2 * records.len(),
                    "{s:?}: mutation {i} made records up"
                );
            }
            cases += 1;
        }
    }
    assert_eq!(cases, specs.len() * 30);
}

#[test]
fn pieces_are_cut_at_the_piece_size_and_keep_every_byte_in_order() {
    use std::io::Write;
    let mut p = Pieces::default();
    let data: Vec<u8> = (0..PIECE * 2 + 1000).map(|i| (i % 251) as u8).collect();
    // Writes of uneven sizes that straddle piece boundaries.
    for chunk in data.chunks(7919) {
        p.write_all(chunk).unwrap();
    }
    assert_eq!(p.len(), data.len());
    assert_eq!(p.to_bytes(), data);
    assert!(p.memory_bytes() <= 3 * PIECE);
    let pieces = p.into_pieces();
    let sizes: Vec<usize> = pieces.iter().map(Bytes::len).collect();
    assert_eq!(sizes, [PIECE, PIECE, 1000]);
    assert_eq!(pieces.concat(), data);
    assert!(Pieces::default().into_pieces().is_empty());
}
