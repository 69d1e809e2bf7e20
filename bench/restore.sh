#!/usr/bin/env bash
# Restore throughput: `strata restore` from a file:// jsonl archive into a fresh topic, against
# Kafka's own producer benchmark (org.apache.kafka.tools.ProducerPerformance, the class behind
# kafka-producer-perf-test, from the broker's jars) with the same record count, record size,
# partitions and acks=all, into another fresh topic. Median of REPEAT rounds; the two alternate.
#
#   bench/restore.sh [SIZE_MIB]        default 256 MiB of 1 KiB records; 1024 for the 1 GiB figure
#
# Environment (all optional):
#   REPEAT=3             rounds
#   RECORD_SIZE=1024     value size in bytes (BENCH_RECORD_SIZE from bench/run wins)
#   PARTITIONS=8         source and target partitions (BENCH_PARTITIONS wins)
#   STRATA_BIN=target/release/strata
#   BENCH_TOPIC          an existing topic holding the data set (bench/run sets it, with
#                        BENCH_RECORDS); without it the script fills its own source topic with
#                        ProducerPerformance
#   OUT                  also write the markdown result to this file
#
# The archive is dumped once per data set with `strata dump --once` (jsonl, no compression,
# 64 MiB files) under .dev/bench/restore/ and reused while complete. Markdown goes to stdout,
# progress to stderr. Needs the dev environment (./dev up).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[restore-bench] %s\n' "$*" >&2; }
die() { printf '[restore-bench] error: %s\n' "$*" >&2; exit 1; }

SIZE_MIB="${1:-256}"
REPEAT="${REPEAT:-3}"
RECORD_SIZE="${BENCH_RECORD_SIZE:-${RECORD_SIZE:-1024}}"
PARTITIONS="${BENCH_PARTITIONS:-${PARTITIONS:-8}}"
STRATA="${STRATA_BIN:-$ROOT/target/release/strata}"
BOOT="${STRATA_TEST_BOOTSTRAP:-127.0.0.1:9092}"
WORK="$ROOT/.dev/bench/restore"
mkdir -p "$WORK"

[[ -x "$STRATA" ]] || die "$STRATA is missing; run cargo build --release"
[[ "$SIZE_MIB" =~ ^[0-9]+$ && "$SIZE_MIB" -gt 0 ]] || die "SIZE_MIB must be a positive integer"

kclass() { "$ROOT/dev" kafka-class "$@"; }
topic_create() {
  kclass org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --create \
    --topic "$1" --partitions "$PARTITIONS" --replication-factor 1 >/dev/null
}
topic_delete() {
  kclass org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --delete \
    --topic "$1" >/dev/null 2>&1 || true
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# Kafka's producer benchmark; prints "<records/s> <MB/s>" of its final line. Extra arguments
# are more producer properties.
perf_test() {
  local topic="$1" records="$2"
  shift 2
  local out
  out="$(kclass org.apache.kafka.tools.ProducerPerformance --topic "$topic" \
    --num-records "$records" --record-size "$RECORD_SIZE" --throughput -1 \
    --producer-props bootstrap.servers="$BOOT" acks=all "$@" 2>&1 | tail -1)"
  log "perf-test: $out"
  sed -E 's/.* records sent, ([0-9.]+) records\/sec \(([0-9.]+) MB\/sec\).*/\1 \2/' <<<"$out"
}

# --- the source data set ---------------------------------------------------------------------
if [[ -n "${BENCH_TOPIC:-}" ]]; then
  SOURCE="$BENCH_TOPIC"
  RECORDS="${BENCH_RECORDS:?BENCH_RECORDS must come with BENCH_TOPIC}"
  log "source: the harness's data set $SOURCE ($RECORDS records)"
else
  RECORDS=$((SIZE_MIB * 1048576 / RECORD_SIZE))
  SOURCE="strata-bench-restore-src-n${RECORDS}-s${RECORD_SIZE}-p${PARTITIONS}"
  if [[ ! -f "$WORK/$SOURCE.produced" ]]; then
    log "source: producing $RECORDS records of $RECORD_SIZE B into $SOURCE (ProducerPerformance)"
    topic_delete "$SOURCE"
    sleep 2
    topic_create "$SOURCE"
    perf_test "$SOURCE" "$RECORDS" >/dev/null
    touch "$WORK/$SOURCE.produced"
  fi
fi

# --- the archive: strata dump --once to file:// jsonl ----------------------------------------
ARCHIVE="$WORK/archive-$SOURCE"
if [[ ! -f "$ARCHIVE.complete" ]]; then
  log "archive: strata dump --once of $SOURCE into file://$ARCHIVE (jsonl)"
  rm -rf "$ARCHIVE"
  mkdir -p "$ARCHIVE"
  cat >"$WORK/dump.toml" <<EOF
[kafka]
bootstrap_servers = "$BOOT"
[store]
url = "file://$ARCHIVE"
[limits]
buffer_memory = "1GiB"
[[tasks]]
name = "bench-restore-$(date +%s)"
topics = ["$SOURCE"]
format = "jsonl"
compression = "none"
time_directory = "yyyy"
max_file_size = "64MiB"
EOF
  "$STRATA" dump --config "$WORK/dump.toml" --once >&2
  touch "$ARCHIVE.complete"
fi
ARCHIVE_BYTES="$(du -sb "$ARCHIVE" | cut -f1)"
OBJECTS="$(find "$ARCHIVE" -type f -name '*.jsonl' | wc -l)"
log "archive: $OBJECTS objects, $ARCHIVE_BYTES bytes"

cat >"$WORK/restore.toml" <<EOF
[kafka]
bootstrap_servers = "$BOOT"
[store]
url = "file://$ARCHIVE"
[restore]
time_directory = "yyyy"
topics = ["$SOURCE"]
EOF

# --- rounds -------------------------------------------------------------------------------------
value_mib=$(awk -v n="$RECORDS" -v s="$RECORD_SIZE" 'BEGIN {printf "%.1f", n*s/1048576}')
: >"$WORK/strata.tsv"
: >"$WORK/perf.tsv"
: >"$WORK/tuned.tsv"
for round in $(seq 1 "$REPEAT"); do
  stamp="$(date +%s%N)"
  order="strata perf tuned"
  # Rotate who goes first, so no one always gets the warmest page cache and broker.
  case $((round % 3)) in
    2) order="perf tuned strata" ;;
    0) order="tuned strata perf" ;;
  esac
  for who in $order; do
    target="strata-bench-restore-$who-$stamp"
    if [[ $who == strata ]]; then
      cp="$WORK/checkpoint-$stamp.json"
      t0=$(date +%s.%N)
      out="$("$STRATA" --log-format json restore --config "$WORK/restore.toml" \
        --topic-map "$SOURCE=$target" --checkpoint "$cp" 2>"$WORK/restore-$round.log")" ||
        { cat "$WORK/restore-$round.log" >&2; die "strata restore failed"; }
      t1=$(date +%s.%N)
      log "strata: $(head -1 <<<"$out")"
      # "restored N object(s), R record(s), X MiB in S s (...)": internal duration, as the
      # perf tool's own figure excludes its JVM start too.
      secs="$(sed -nE 's/^restored .* in ([0-9.]+)s .*/\1/p' <<<"$out")"
      recs="$(sed -nE 's/^restored [0-9]+ object\(s\), ([0-9]+) record.*/\1/p' <<<"$out")"
      [[ "$recs" == "$RECORDS" ]] || die "strata restored $recs records, expected $RECORDS"
      awk -v n="$RECORDS" -v s="$RECORD_SIZE" -v t="$secs" -v t0="$t0" -v t1="$t1" \
        'BEGIN {printf "%.1f\t%.2f\t%.2f\t%.2f\n", n/t, n*s/t/1048576, t, t1 - t0}' >>"$WORK/strata.tsv"
      rm -f "$cp"
    elif [[ $who == perf ]]; then
      topic_create "$target"
      read -r rps mbs < <(perf_test "$target" "$RECORDS")
      printf '%s\t%s\n' "$rps" "$mbs" >>"$WORK/perf.tsv"
    else
      # The same tool with strata's batching (librdkafka-like batch.size and linger.ms).
      topic_create "$target"
      read -r rps mbs < <(perf_test "$target" "$RECORDS" batch.size=1000000 linger.ms=10)
      printf '%s\t%s\n' "$rps" "$mbs" >>"$WORK/tuned.tsv"
    fi
    topic_delete "$target"
  done
done

s_rps=$(cut -f1 "$WORK/strata.tsv" | median)
s_mbs=$(cut -f2 "$WORK/strata.tsv" | median)
s_secs=$(cut -f3 "$WORK/strata.tsv" | median)
s_wall=$(cut -f4 "$WORK/strata.tsv" | median)
p_rps=$(cut -f1 "$WORK/perf.tsv" | median)
p_mbs=$(cut -f2 "$WORK/perf.tsv" | median)
t_rps=$(cut -f1 "$WORK/tuned.tsv" | median)
t_mbs=$(cut -f2 "$WORK/tuned.tsv" | median)
ratio=$(awk -v a="$s_mbs" -v b="$p_mbs" 'BEGIN {printf "%.2f", a/b}')
ratio_tuned=$(awk -v a="$s_mbs" -v b="$t_mbs" 'BEGIN {printf "%.2f", a/b}')
verdict=$(awk -v r="$ratio" 'BEGIN {print (r >= 0.70) ? "pass" : "FAIL"}')
all_s=$(cut -f2 "$WORK/strata.tsv" | paste -sd' ')
all_p=$(cut -f2 "$WORK/perf.tsv" | paste -sd' ')
all_t=$(cut -f2 "$WORK/tuned.tsv" | paste -sd' ')

md="$(cat <<EOF
Restoring $RECORDS records of $RECORD_SIZE B ($value_mib MiB of values) over $PARTITIONS partitions
from a file:// jsonl archive ($OBJECTS objects, $((ARCHIVE_BYTES / 1048576)) MiB) into a fresh topic,
against Kafka's ProducerPerformance (kafka-producer-perf-test) with the same records into another
fresh topic; acks=all for both, one local broker; median of $REPEAT rounds (MB = MiB of values).

| contender | records/s | MB/s | per round (MB/s) |
|---|---:|---:|---|
| strata restore (idempotent, acks=all) | $s_rps | $s_mbs | $all_s |
| ProducerPerformance (acks=all, its defaults) | $p_rps | $p_mbs | $all_p |
| ProducerPerformance (acks=all, batch.size=1000000 linger.ms=10) | $t_rps | $t_mbs | $all_t |

strata / ProducerPerformance: **$ratio** (target at least 0.70: $verdict); against the tool given
strata's batching: $ratio_tuned. strata's time is its
own summary's (listing, topic creation, reading, decoding and producing until every record is
acknowledged: median $s_secs s); with process start and exit it was $s_wall s.
EOF
)"
printf '%s\n' "$md"
if [[ -n "${OUT:-}" ]]; then printf '%s\n' "$md" >"$OUT"; fi
