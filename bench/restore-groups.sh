#!/usr/bin/env bash
# What the exact offset map and --groups cost a restore, and how large the map is.
#
#   bench/restore-groups.sh
#
# 1. Speed: `strata restore` of the 256 MiB data set (the topic strata-bench-g2-n262144-s1024-p8-
#    seed42 that `bench/run --records 262144` leaves on the dev broker) from a file:// jsonl
#    archive into a fresh topic, without and with `--groups` (one group, committed in the middle
#    of every partition before the dump), and, when BASE_BIN names a strata built without the
#    offset map, that build too. Rounds rotate the order; medians of REPEAT rounds of strata's
#    own summary time and of the process's CPU time, and the median of each round's ratio to
#    the run without --groups of that round (the machine's load drifts between rounds).
# 2. Size: the offset map of the --groups run's checkpoint per partition (a contiguous restore),
#    and of a restore of a compacted topic (keyed records, compacted by the broker before the
#    dump: survivors are scattered, each gap starts a range).
# 3. What --groups adds alone: the last --groups restore run again with and without --groups
#    (every object is restored already, so only the listing, the snapshots and the groups work
#    remain), process wall time.
#
# Environment (all optional):
#   REPEAT=5                 rounds
#   STRATA_BIN=target/release/strata
#   BASE_BIN                 a strata without the offset map (e.g. built from the commit before it)
#   BENCH_TOPIC, BENCH_RECORDS   another data set (default the 256 MiB one, 262144 records)
#   COMPACT_RECORDS=200000   records produced into the compacted topic (4 partitions)
#   COMPACT_KEYS=20000       distinct keys among them
#   OUT                      also write the markdown result to this file
#
# The archives are dumped once under .dev/bench/restore-groups/ and reused. Markdown on stdout,
# progress on stderr. Needs the dev environment (./dev up), kcat and /usr/bin/time; Kafka's tools
# run through $STRATA_DEV (`./dev env` sets it) or this checkout's ./dev.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '[restore-groups] %s\n' "$*" >&2; }
die() { printf '[restore-groups] error: %s\n' "$*" >&2; exit 1; }

REPEAT="${REPEAT:-5}"
STRATA="${STRATA_BIN:-$ROOT/target/release/strata}"
BASE="${BASE_BIN:-}"
BOOT="${STRATA_TEST_BOOTSTRAP:-127.0.0.1:9092}"
SOURCE="${BENCH_TOPIC:-strata-bench-g2-n262144-s1024-p8-seed42}"
RECORDS="${BENCH_RECORDS:-262144}"
COMPACT_RECORDS="${COMPACT_RECORDS:-200000}"
COMPACT_KEYS="${COMPACT_KEYS:-20000}"
GROUP="strata-bench-readers"
WORK="$ROOT/.dev/bench/restore-groups"
mkdir -p "$WORK"

[[ -x "$STRATA" ]] || die "$STRATA is missing; run cargo build --release"
[[ -z "$BASE" || -x "$BASE" ]] || die "BASE_BIN $BASE is not executable"
command -v kcat >/dev/null || die "kcat is missing (./dev setup installs it)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time is missing (apt-get install time)"

kclass() { "${STRATA_DEV:-$ROOT/dev}" kafka-class "$@"; }
# Deletes the topics whose whole name matches the regular expression $1.
topic_delete() {
  kclass org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --delete \
    --topic "$1" >/dev/null 2>&1 || true
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
partitions_of() {
  kclass org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --describe --topic "$1" |
    sed -nE 's/.*PartitionCount: ([0-9]+).*/\1/p'
}

# Dumps topic $1 once into file://$2 (jsonl, no compression, 64 MiB files).
dump_once() {
  local topic="$1" archive="$2"
  [[ -f "$archive.complete" ]] && return
  log "archive: strata dump --once of $topic into file://$archive"
  rm -rf "$archive"
  mkdir -p "$archive"
  cat >"$WORK/dump.toml" <<EOF
[kafka]
bootstrap_servers = "$BOOT"
[store]
url = "file://$archive"
[limits]
buffer_memory = "1GiB"
[[tasks]]
name = "bench-restore-groups-$(date +%s)"
topics = ["$topic"]
format = "jsonl"
compression = "none"
time_directory = "yyyy"
max_file_size = "64MiB"
EOF
  "$STRATA" dump --config "$WORK/dump.toml" --once >&2
  touch "$archive.complete"
}

restore_toml() {
  cat >"$2" <<EOF
[kafka]
bootstrap_servers = "$BOOT"
[store]
url = "file://$1"
[restore]
time_directory = "yyyy"
EOF
}

# "<ranges> <bytes>" of each partition's map in a checkpoint, one partition per line.
map_sizes() {
  python3 - "$1" <<'EOF'
import json, sys
body = json.load(open(sys.argv[1]))
for key, m in sorted(body.get("offset_maps", {}).items()):
    ranges = m["ranges"]
    print(key, len(ranges), len(json.dumps(ranges, separators=(",", ":"))), sum(r[2] for r in ranges))
EOF
}

# --- 1. speed ----------------------------------------------------------------------------------
PARTS="$(partitions_of "$SOURCE")"
[[ -n "$PARTS" ]] || die "topic $SOURCE is missing: run bench/run --records $RECORDS --only dump first"
ARCHIVE="$WORK/archive-$SOURCE"
if [[ ! -f "$ARCHIVE.complete" ]]; then
  # The group the --groups runs restore: in the middle of every partition, before the dump, so
  # the dump's state snapshot records it.
  log "group $GROUP: committed at offset $((RECORDS / PARTS / 2)) of every partition of $SOURCE"
  kclass org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server "$BOOT" \
    --group "$GROUP" --topic "$SOURCE" --reset-offsets --to-offset $((RECORDS / PARTS / 2)) \
    --execute >/dev/null
fi
dump_once "$SOURCE" "$ARCHIVE"
restore_toml "$ARCHIVE" "$WORK/restore.toml"
OBJECTS="$(find "$ARCHIVE" -type f -name '*.jsonl' | wc -l)"

contenders="plain groups"
[[ -n "$BASE" ]] && contenders="$contenders base"
for who in $contenders; do : >"$WORK/$who.tsv"; : >"$WORK/$who-cpu.tsv"; done
for round in $(seq 1 "$REPEAT"); do
  stamp="$(date +%s%N)"
  order="$contenders"
  for _ in $(seq 1 $((round % $(wc -w <<<"$contenders")))); do
    order="$(awk '{for (i = 2; i <= NF; i++) printf "%s ", $i; print $1}' <<<"$order")"
  done
  for who in $order; do
    target="strata-bench-rg-$who-$stamp"
    cp="$WORK/checkpoint-$who-$stamp.json"
    bin="$STRATA"
    args=()
    [[ $who == base ]] && bin="$BASE"
    [[ $who == groups ]] && args=(--groups "$GROUP")
    out="$(/usr/bin/time -o "$WORK/cpu-$who.txt" -f '%U %S' "$bin" --log-format json restore \
      --config "$WORK/restore.toml" --topics "$SOURCE" --topic-map "$SOURCE=$target" \
      --checkpoint "$cp" "${args[@]}" 2>"$WORK/restore-$who.log")" ||
      { tail -5 "$WORK/restore-$who.log" >&2; die "$who: strata restore failed"; }
    secs="$(sed -nE 's/^restored .* in ([0-9.]+)s .*/\1/p' <<<"$out")"
    cpu="$(awk '{printf "%.2f", $1 + $2}' "$WORK/cpu-$who.txt")"
    recs="$(sed -nE 's/^restored [0-9]+ object\(s\), ([0-9]+) record.*/\1/p' <<<"$out")"
    [[ "$recs" == "$RECORDS" ]] || die "$who restored $recs records, expected $RECORDS"
    if [[ $who == groups ]]; then
      grep -q "positions committed" <<<"$out" || die "groups: no positions committed: $out"
      map_sizes "$cp" >"$WORK/map-contiguous.txt"
    fi
    log "round $round $who: $secs s, $cpu CPU s"
    printf '%s\n' "$secs" >>"$WORK/$who.tsv"
    printf '%s\n' "$cpu" >>"$WORK/$who-cpu.tsv"
    if [[ $who == groups ]]; then
      # The last --groups restore is kept for part 3.
      rm -f "$WORK/checkpoint-kept.json"
      mv "$cp" "$WORK/checkpoint-kept.json"
      kept_target="$target"
    else
      rm -f "$cp"
    fi
  done
  [[ $round == "$REPEAT" ]] || topic_delete "strata-bench-rg-.*-$stamp"
done

# --- 3. what --groups adds to a restore, alone ------------------------------------------------------
# Running the last --groups restore again finds every object restored: with --groups it lists,
# reads the snapshots, checks the target topic and that the group has no active member, and
# commits the group; without, it stops after listing and reading the snapshots. Wall time of
# the whole process (start and exit included), alternating, REPEAT times each.
for who in plain groups; do : >"$WORK/rerun-$who.tsv"; done
for _ in $(seq 1 "$REPEAT"); do
  for who in plain groups; do
    args=()
    [[ $who == groups ]] && args=(--groups "$GROUP")
    /usr/bin/time -o "$WORK/wall.txt" -f '%e' "$STRATA" --log-format json restore \
      --config "$WORK/restore.toml" --topics "$SOURCE" --topic-map "$SOURCE=$kept_target" \
      --checkpoint "$WORK/checkpoint-kept.json" "${args[@]}" >"$WORK/rerun.out" \
      2>"$WORK/rerun-$who.log" || { tail -5 "$WORK/rerun-$who.log" >&2; die "$who rerun failed"; }
    [[ $who == plain ]] || grep -q "positions committed" "$WORK/rerun.out" ||
      die "groups rerun: no positions committed: $(cat "$WORK/rerun.out")"
    cat "$WORK/wall.txt" >>"$WORK/rerun-$who.tsv"
  done
done
rm -f "$WORK/checkpoint-kept.json"
topic_delete "strata-bench-rg-.*-$stamp"

# --- 2. the map of a compacted topic --------------------------------------------------------------
COMPACTED="strata-bench-rg-compacted-n$COMPACT_RECORDS-k$COMPACT_KEYS"
CARCHIVE="$WORK/archive-$COMPACTED"
if [[ ! -f "$CARCHIVE.complete" ]]; then
  topic_delete "$COMPACTED"
  sleep 2
  kclass org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOT" --create --topic "$COMPACTED" \
    --partitions 4 --replication-factor 1 --config cleanup.policy=compact --config segment.ms=100 \
    --config min.cleanable.dirty.ratio=0.01 >/dev/null
  log "compacted: $COMPACT_RECORDS records over $COMPACT_KEYS keys into $COMPACTED"
  # Ten rounds a second apart, so that segments roll (segment.ms goes by record time).
  per=$((COMPACT_RECORDS / 10))
  for r in $(seq 0 9); do
    awk -v r="$r" -v n="$per" -v k="$COMPACT_KEYS" -v seed=$((r + 1)) \
      'BEGIN {srand(seed); for (i = 0; i < n; i++) printf "key-%d:value-%d-%d\n", int(rand() * k), r, i}' |
      kcat -P -b "$BOOT" -t "$COMPACTED" -K: -z lz4
    sleep 1
  done
  log "compacted: waiting for the broker's cleaner"
  for _ in $(seq 1 120); do
    left="$(kcat -C -b "$BOOT" -t "$COMPACTED" -e -q -f '.\n' 2>/dev/null | wc -l)"
    (( left < COMPACT_RECORDS / 3 )) && break
    sleep 2
  done
  log "compacted: $left of $COMPACT_RECORDS records left"
  kclass org.apache.kafka.tools.ConfigCommand --bootstrap-server "$BOOT" --alter --entity-type topics \
    --entity-name "$COMPACTED" --delete-config segment.ms,min.cleanable.dirty.ratio >/dev/null
  dump_once "$COMPACTED" "$CARCHIVE"
  topic_delete "$COMPACTED" # the archive is what the runs reuse
fi
restore_toml "$CARCHIVE" "$WORK/restore-compacted.toml"
target="strata-bench-rg-compacted-restored-$(date +%s%N)"
cp="$WORK/checkpoint-compacted.json"
rm -f "$cp"
"$STRATA" --log-format json restore --config "$WORK/restore-compacted.toml" \
  --topic-map "$COMPACTED=$target" --checkpoint "$cp" --no-topic-configs \
  >"$WORK/restore-compacted.out" 2>"$WORK/restore-compacted.log" ||
  { tail -5 "$WORK/restore-compacted.log" >&2; die "compacted restore failed"; }
map_sizes "$cp" >"$WORK/map-compacted.txt"
topic_delete "$target"

# --- report --------------------------------------------------------------------------------------
# The median over rounds of (this contender / the plain run of the same round) - 1: the rounds
# ran back to back, so the ratio leaves out the machine's load drifting between rounds.
paired() {
  paste "$WORK/$1" "$WORK/$2" | awk '{print $1 / $2}' | median |
    awk '{printf "%+.1f %%", ($1 - 1) * 100}'
}
row() {
  local w c
  w="$(median <"$WORK/$2.tsv")"
  c="$(median <"$WORK/$2-cpu.tsv")"
  printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$w" "$(paste -sd' ' "$WORK/$2.tsv")" "$c" \
    "$(paired "$2.tsv" plain.tsv)" "$(paired "$2-cpu.tsv" plain-cpu.tsv)"
}
table_of() {
  awk -v what="$2" '{printf "| %s | %s | %s | %d | %d | %.1f |\n", what, $1, $4, $2, $3, $3 / $2}' "$1"
}
md="$(cat <<EOF
Restore of $RECORDS records ($SOURCE, $PARTS partitions) from a file:// jsonl archive
($OBJECTS objects) into a fresh topic on one local broker: strata's own summary time and the
process's CPU time (user + system), medians of $REPEAT rounds in rotating order; the last two
columns are the median over rounds of each run against the run without --groups of its round.

| restore | seconds | per round | CPU s | seconds against without --groups | CPU s against without --groups |
|---|---:|---|---:|---:|---:|
$(row "without --groups (offset map recorded)" plain)
$(row "with --groups $GROUP (map, snapshot, group committed)" groups)
$( [[ -n "$BASE" ]] && row "a strata without the offset map ($(basename "$BASE"))" base)

What --groups adds alone: the last --groups restore run again (every object restored already),
with and without --groups; process wall time, medians of $REPEAT runs each.

| rerun of a finished restore | seconds | per run |
|---|---:|---|
| without --groups (lists, reads the snapshots, stops) | $(median <"$WORK/rerun-plain.tsv") | $(paste -sd' ' "$WORK/rerun-plain.tsv") |
| with --groups (also checks topic and group, commits the group) | $(median <"$WORK/rerun-groups.tsv") | $(paste -sd' ' "$WORK/rerun-groups.tsv") |

--groups adds $(awk -v g="$(median <"$WORK/rerun-groups.tsv")" -v p="$(median <"$WORK/rerun-plain.tsv")" -v r="$(median <"$WORK/plain.tsv")" 'BEGIN {printf "%.2f s, %.1f %% of the median restore without --groups (%s s)", g - p, (g - p) / r * 100, r}').

The offset map per partition: its ranges, and the bytes of their JSON in the checkpoint.

| restore | partition | records | ranges | bytes | bytes per range |
|---|---|---:|---:|---:|---:|
$(table_of "$WORK/map-contiguous.txt" contiguous)
$(table_of "$WORK/map-compacted.txt" compacted)
EOF
)"
printf '%s\n' "$md"
if [[ -n "${OUT:-}" ]]; then printf '%s\n' "$md" >"$OUT"; fi
