#!/usr/bin/env bash
# Cluster state snapshot benchmark: makes (once) a cluster of TOPICS topics x PARTITIONS
# partitions and GROUPS consumer groups (each with offsets on ten topics) on the dev broker and
# times strata's snapshot of all of it (`dump::snapshot::capture`) over ROUNDS rounds. Prints a
# table row; the per-stage times (metadata, configs, watermarks, group offsets) with
# RUST_LOG=strata=debug. Delete the topics afterwards with:
#   ./dev kafka-class org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:9092 --delete --topic 'snapbench.*'
#
# usage: bench/state.sh [TOPICS=1000] [PARTITIONS=10] [GROUPS=200] [ROUNDS=3]
# env:   PROFILE=release (or debug: the build the figures in bench/README.md used)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
eval "$(./dev env)"
profile="${PROFILE:-release}"
flag=(); [[ "$profile" == release ]] && flag=(--release)
cargo build "${flag[@]}" --example snapshot_bench >&2
exec "target/$profile/examples/snapshot_bench" "${1:-1000}" "${2:-10}" "${3:-200}" "${4:-3}"
