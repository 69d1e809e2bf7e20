#!/usr/bin/env bash
# Tier mode benchmark. Consumes a fully tiered topic from the beginning through the broker
# (Kafka reads it from the bucket via the bridge and `strata tier`), once with a cold chunk
# cache (strata tier restarted on an empty cache before each run) and once warm, against the
# same bytes consumed from the broker's local disk (a topic without remote storage). Reports
# MiB/s, the ratios, the chunk size, and strata tier's peak RSS while copying and serving.
# Optionally (COPY_MIB > 0) it also copies one synthetic segment of that size through the API
# and reports strata tier's peak RSS during that copy.
#
# usage: bench/tier.sh [SIZE_MIB=256] [CHUNK=4MiB]
# env:   REPEAT=3 (runs per case, median reported)  SEGMENT_MIB=64 (topic segment.bytes)
#        CACHE=disk|memory  PREFETCH=2  COMPRESSION=none|zstd  COPY_MIB=0
#        FETCH_SIZES="default 8388608" (consumer max.partition.fetch.bytes per configuration
#        measured; "default" = librdkafka's 1 MiB)  BENCH_SMOKE=1 (one run, default only)
#        STRATA_BIN (default target/release/strata, built when missing)  OUT (markdown file)
# needs: ./dev up (Kafka with tiered storage on, LocalStack), kcat, curl; port 9190 free.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SIZE_MIB="${1:-256}"
CHUNK="${2:-4MiB}"
REPEAT="${REPEAT:-3}"
SEGMENT_MIB="${SEGMENT_MIB:-64}"
CACHE="${CACHE:-disk}"
PREFETCH="${PREFETCH:-2}"
COMPRESSION="${COMPRESSION:-none}"
COPY_MIB="${COPY_MIB:-0}"
FETCH_SIZES="${FETCH_SIZES:-default 8388608}"
if [[ "${BENCH_SMOKE:-0}" == "1" ]]; then REPEAT=1; FETCH_SIZES="default"; fi
BIN="${STRATA_BIN:-$ROOT/target/release/strata}"

log() { printf '[bench/tier] %s\n' "$*" >&2; }
die() { printf '[bench/tier] error: %s\n' "$*" >&2; exit 1; }

eval "$("$ROOT/dev" env)"
BOOT="$STRATA_TEST_BOOTSTRAP"
TIER_ADDR="$STRATA_TEST_TIER_ADDR"
TIER_PORT="${TIER_ADDR##*:}"
command -v kcat >/dev/null || die "kcat is missing (./dev setup installs it)"
[[ -d "$STRATA_TEST_KAFKA_LOG_DIR" ]] || die "no broker data in $STRATA_TEST_KAFKA_LOG_DIR: run bench/tier.sh of the checkout whose ./dev started Kafka"
PYTHON="${STRATA_TEST_PYTHON:-}"
[[ -x "$PYTHON" ]] || PYTHON=python3
(exec 3<>"/dev/tcp/127.0.0.1/${BOOT##*:}") 2>/dev/null || die "Kafka is not up on $BOOT: run ./dev up"
if (exec 3<>"/dev/tcp/127.0.0.1/$TIER_PORT") 2>/dev/null; then
  die "something already listens on $TIER_ADDR (another strata tier?); stop it first"
fi
if [[ ! -x "$BIN" ]]; then
  log "building $BIN"
  (cd "$ROOT" && cargo build --release --bin strata)
fi

WORK="$(mktemp -d /tmp/strata-bench-tier.XXXXXX)"
RUN_ID="$(date +%s)-$$"
PREFIX="bench-tier-$RUN_ID"
T_LOCAL="bench-local-$RUN_ID"
T_TIER="bench-tier-$RUN_ID"
TIER_PID=""

stop_tier() {
  if [[ -n "$TIER_PID" ]]; then
    kill "$TIER_PID" 2>/dev/null || true
    wait "$TIER_PID" 2>/dev/null || true
    TIER_PID=""
  fi
}

topic_cmd() {
  "$ROOT/dev" kafka-class org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" "$@" >/dev/null 2>&1
}

cleanup() {
  stop_tier
  topic_cmd --delete --topic "$T_LOCAL" || true
  if [[ -n "${KEEP_TIER_TOPIC:-}" ]]; then return; fi
  # Deleting the tiered topic makes the broker delete its remote segments: strata tier must run.
  start_tier "$WORK/cache-cleanup" >/dev/null 2>&1 || true
  topic_cmd --delete --topic "$T_TIER" || true
  sleep 5
  stop_tier
  rm -rf "$WORK"
}
trap cleanup EXIT

# start_tier CACHE_DIR: strata tier on TIER_ADDR with an empty cache there.
start_tier() {
  local cache_line
  if [[ "$CACHE" == "memory" ]]; then cache_line=""; else cache_line="cache_dir = \"$1\""; fi
  cat >"$WORK/tier.toml" <<EOF
[kafka]
bootstrap_servers = "$BOOT"
[store]
url = "s3://strata-bench/$PREFIX"
endpoint = "$STRATA_TEST_S3_ENDPOINT"
access_key = "test"
secret_key = "test"
create_bucket = true
[tier]
listen = "$TIER_ADDR"
secret_file = "$STRATA_TEST_TIER_SECRET"
log_dirs = ["$STRATA_TEST_KAFKA_LOG_DIR"]
socket_dir = "$STRATA_TEST_TIER_SOCKET_DIR"
chunk_size = "$CHUNK"
compression = "$COMPRESSION"
prefetch_chunks = $PREFETCH
cache_size = "$(( SIZE_MIB * 2 + 64 ))MiB"
$cache_line
EOF
  rm -rf "$1"
  local before
  before=$(wc -l <"$WORK/tier.log" 2>/dev/null || echo 0)
  "$BIN" --log-format human tier --config "$WORK/tier.toml" >>"$WORK/tier.log" 2>&1 &
  TIER_PID=$!
  for _ in $(seq 1 300); do
    # The API answers only the bridge (authenticated); the start-up line says it is serving.
    if tail -n "+$((before + 1))" "$WORK/tier.log" 2>/dev/null | grep -q "strata tier serving the broker bridge" &&
      (exec 3<>"/dev/tcp/${TIER_ADDR%:*}/${TIER_ADDR##*:}") 2>/dev/null; then return 0; fi
    kill -0 "$TIER_PID" 2>/dev/null || { tail -20 "$WORK/tier.log" >&2; die "strata tier exited"; }
    sleep 0.1
  done
  die "strata tier did not come up"
}

# peak_rss_mib: strata tier's peak resident memory so far (VmHWM).
peak_rss_mib() { awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$TIER_PID/status"; }
rss_mib() { awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$TIER_PID/status"; }

local_logs() { ls "$STRATA_TEST_KAFKA_LOG_DIR/$T_TIER-0" | grep -c '\.log$' || true; }

now() { date +%s.%N; }

# consume TOPIC: seconds to read the topic from the beginning to its end (checks the count),
# with the consumer options in KCAT_X.
KCAT_X=()
consume() {
  local t0 t1 n
  t0=$(now)
  n=$(kcat -C -b "$BOOT" -t "$1" -o beginning -e -q "${KCAT_X[@]}" -f '%s\n' | wc -l)
  t1=$(now)
  [[ "$n" -ge "$LINES" ]] || die "read $n records from $1, expected at least $LINES"
  echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mbps() { awk -v b="$BYTES" -v s="$1" 'BEGIN {printf "%.1f", b / 1048576 / s}'; }

# --- data ---------------------------------------------------------------------------
log "generating ${SIZE_MIB} MiB of records (1 KiB each, incompressible)"
head -c $(( SIZE_MIB * 1048576 * 3 / 4 )) /dev/urandom | base64 -w 1023 >"$WORK/data"
BYTES=$(stat -c %s "$WORK/data")
LINES=$(wc -l <"$WORK/data")

start_tier "$WORK/cache-copy"
SEG_BYTES=$(( SEGMENT_MIB * 1048576 ))
topic_cmd --create --topic "$T_LOCAL" --partitions 1 --config segment.bytes=$SEG_BYTES
topic_cmd --create --topic "$T_TIER" --partitions 1 --config remote.storage.enable=true \
  --config segment.bytes=$SEG_BYTES --config local.retention.ms=1000 --config retention.ms=-1 \
  --config segment.ms=5000
log "producing to $T_LOCAL and $T_TIER"
kcat -P -b "$BOOT" -t "$T_LOCAL" -z none <"$WORK/data"
COPY_T0=$(now)
kcat -P -b "$BOOT" -t "$T_TIER" -z none <"$WORK/data"
# One more record after segment.ms rolls the last data segment, so all data gets tiered.
sleep 6
echo "end" | kcat -P -b "$BOOT" -t "$T_TIER" -z none
log "waiting until every data segment of $T_TIER is in the bucket and gone from local disk"
for i in $(seq 1 1200); do
  [[ "$(local_logs)" -le 1 ]] && break
  [[ $i -eq 1200 ]] && die "$T_TIER still has $(local_logs) local segments after 10 minutes"
  sleep 0.5
done
COPY_T1=$(now)
COPY_RSS=$(peak_rss_mib)
COPY_SECS=$(echo "$COPY_T0 $COPY_T1" | awk '{printf "%.1f", $2 - $1}')
stop_tier

# --- consume ------------------------------------------------------------------------
consume "$T_LOCAL" >/dev/null # page cache as it would be on a busy broker
start_tier "$WORK/cache-warmup"
consume "$T_TIER" >/dev/null  # the broker's remote read path warmed up (JIT, index cache)
stop_tier
SERVE_RSS=0
ROWS=""
for fetch in $FETCH_SIZES; do
  if [[ "$fetch" == "default" ]]; then
    KCAT_X=(); label="librdkafka defaults (1 MiB per partition fetch)"
  else
    KCAT_X=(-X "fetch.message.max.bytes=$fetch"); label="max.partition.fetch.bytes=$(( fetch / 1048576 )) MiB"
  fi
  log "consumer $label: local x$REPEAT, then (cold, warm) x$REPEAT through strata tier"
  : >"$WORK/local" ; : >"$WORK/cold" ; : >"$WORK/warm"
  for r in $(seq 1 "$REPEAT"); do
    consume "$T_LOCAL" >>"$WORK/local"; echo >>"$WORK/local"
    start_tier "$WORK/cache-$r"
    consume "$T_TIER" >>"$WORK/cold"; echo >>"$WORK/cold"
    consume "$T_TIER" >>"$WORK/warm"; echo >>"$WORK/warm"
    p=$(peak_rss_mib); [[ $p -gt $SERVE_RSS ]] && SERVE_RSS=$p
    END_RSS=$(rss_mib)
    stop_tier
  done
  L=$(median <"$WORK/local"); C=$(median <"$WORK/cold"); W=$(median <"$WORK/warm")
  LM=$(mbps "$L"); CM=$(mbps "$C"); WM=$(mbps "$W")
  CR=$(awk -v a="$CM" -v b="$LM" 'BEGIN {printf "%.0f", 100 * a / b}')
  WR=$(awk -v a="$WM" -v b="$LM" 'BEGIN {printf "%.0f", 100 * a / b}')
  ROWS+="| $label | local disk | $L | $LM | 100% |"$'\n'
  ROWS+="| | tiered, cold cache | $C | $CM | ${CR}% |"$'\n'
  ROWS+="| | tiered, warm cache | $W | $WM | ${WR}% |"$'\n'
done

# --- strata tier alone: whole segments read through its HTTP API ------------------------
# What strata tier itself serves, without the broker: every tiered segment of the topic read
# from start to end, once on an empty cache and once warm.
direct_read() {
  "$PYTHON" - "$STRATA_TEST_S3_ENDPOINT" "strata-bench" "$PREFIX/tiered/$T_TIER-" "$TIER_ADDR" <<'PY'
import http.client, json, re, sys, time, urllib.request
endpoint, bucket, prefix, addr = sys.argv[1:]
listing = urllib.request.urlopen(f"{endpoint}/{bucket}?list-type=2&prefix={urllib.request.quote(prefix)}").read().decode()
keys = [k for k in re.findall(r"<Key>([^<]+)</Key>", listing) if k.endswith(".manifest")]
segments = [json.loads(urllib.request.urlopen(f"{endpoint}/{bucket}/{k}").read())["segment"] for k in keys]
host, port = addr.split(":")
total, t0 = 0, time.monotonic()
for seg in segments:
    c = http.client.HTTPConnection(host, int(port))
    c.request("POST", "/v1/fetch", json.dumps({"segment": seg, "start_position": 0, "end_position": None}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        total += len(b)
    c.close()
s = time.monotonic() - t0
print(f"{s:.3f} {total / 1048576 / s:.1f} {len(segments)}")
PY
}
log "reading the tiered segments straight from strata tier (cold, then warm)"
start_tier "$WORK/cache-direct"
read -r DC_S DC_M DC_N <<<"$(direct_read)"
read -r DW_S DW_M _ <<<"$(direct_read)"
stop_tier

# --- one big segment copied through the API -------------------------------------------
COPY_LINE=""
if [[ "$COPY_MIB" -gt 0 ]]; then
  log "copying one synthetic ${COPY_MIB} MiB segment through the API"
  start_tier "$WORK/cache-big"
  head -c $(( COPY_MIB * 1048576 )) /dev/urandom >"$WORK/big.log"
  : >"$WORK/big.index"; : >"$WORK/big.timeindex"; : >"$WORK/big.snapshot"
  BEFORE=$(rss_mib)
  SEG='{"topic":"bench-big","topic_id":"AAECAwQFBgcICQoLDA0ODw","partition":0,"segment_id":"EBESExQVFhcYGRobHB0eHw","start_offset":0,"end_offset":1,"max_timestamp_ms":0,"event_timestamp_ms":0,"broker_id":1,"segment_size_bytes":'$(( COPY_MIB * 1048576 ))',"leader_epochs":[[0,0]]}'
  t0=$(now)
  curl -fsS -H 'Content-Type: application/json' "http://$TIER_ADDR/v1/copy" -d \
    '{"segment":'"$SEG"',"files":{"log":"'"$WORK"'/big.log","offset_index":"'"$WORK"'/big.index","time_index":"'"$WORK"'/big.timeindex","transaction_index":null,"producer_snapshot":"'"$WORK"'/big.snapshot"},"leader_epoch_index":""}' >/dev/null
  t1=$(now)
  BIG_PEAK=$(peak_rss_mib)
  curl -fsS -H 'Content-Type: application/json' "http://$TIER_ADDR/v1/delete" -d '{"segment":'"$SEG"'}' >/dev/null
  stop_tier
  rm -f "$WORK/big.log"
  COPY_LINE="| copy of one ${COPY_MIB} MiB segment | $(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}') s; strata tier RSS ${BEFORE} MiB before, peak ${BIG_PEAK} MiB |"
fi

# --- report -------------------------------------------------------------------------
REPORT="$(cat <<EOF
### Tier: $(date -u +%Y-%m-%d) — ${SIZE_MIB} MiB, chunk ${CHUNK}, ${CACHE} cache, compression ${COMPRESSION}

Consume from the beginning with kcat, one partition, ${SEGMENT_MIB} MiB segments, 1 KiB
records; median of ${REPEAT} runs. Local = a topic without remote storage (page cache warm).
Cold = strata tier restarted on an empty chunk cache before the run; warm = the run after.

| consumer | case | seconds | MiB/s | vs local |
| --- | --- | ---: | ---: | ---: |
${ROWS}
strata tier alone (no broker): its ${DC_N} segments read whole through the HTTP API, one
after the other: cold ${DC_M} MiB/s (${DC_S} s, chunks fetched from LocalStack), warm ${DW_M} MiB/s
(${DW_S} s).

| strata tier | |
| --- | --- |
| chunk size | $CHUNK (prefetch $PREFETCH chunks) |
| copying ${SIZE_MIB} MiB ($(( SIZE_MIB / SEGMENT_MIB + 1 )) segments) | ${COPY_SECS} s until all were tiered; peak RSS ${COPY_RSS} MiB |
| serving (cold + warm run) | peak RSS ${SERVE_RSS} MiB, RSS ${END_RSS} MiB at the end |
$COPY_LINE
EOF
)"
echo "$REPORT"
if [[ -n "${OUT:-}" ]]; then echo "$REPORT" >"$OUT"; fi
