#!/usr/bin/env bash
# Replicate mode benchmark: copies one data set from the dev broker (127.0.0.1:9092, the source)
# to the dev peer cluster (127.0.0.1:9094, SASL_PLAINTEXT + SCRAM-SHA-512 as user strata, the
# target) with MirrorMaker 2's dedicated driver (org.apache.kafka.connect.mirror.MirrorMaker
# 4.3.1, tasks.max=2) and with `strata replicate --once`, each once with exactly-once off and
# once with it on, each run from fresh aliases / target topics. Per run: wall time until the
# target topic holds every record (its end offsets polled every second, then the last record of
# every partition checked with a read_committed consumer), the contender's CPU seconds
# (/proc/<pid>/stat user+sys of all its threads, plus its children), peak RSS (VmHWM), MB/s and
# CPU s per GiB; after each run the target is counted record by record (read_committed).
# Markdown table on stdout, raw numbers in .dev/bench/replicate-<stamp>.json, logs under
# .dev/bench/work/replicate-<stamp>/.
#
# usage: bench/replicate.sh [SIZE_MIB=1024]     (SIZE_MIB MiB of 1 KiB values over 8 partitions:
#                                                 SIZE_MIB*1024 records; 1024 reuses bench/run's
#                                                 1 GiB topic; e.g. 8 for a smoke run)
# env:   STRATA_BIN (default target/release/strata; built when missing)
#        CONTENDERS="mm2 strata"  EOS="off on"  (what to run)
#        TIMEOUT_S (per run; default max(300, 60 s per 100 MB))  WAIT_LOAD=0 (wait until the
#        1-minute load stays below this for a minute before measuring; 0 = do not wait)
#        MM2_HEAP="-Xms256m -Xmx2g" (as bin/connect-mirror-maker.sh)  MM2_LOG_LEVEL=info
#        VERIFY=1 (count the target's records after each run; 0 = only the completion check)
#        KEEP_TOPICS=1 (leave the target and internal topics of the runs in place)
#        TRANSLATE=1 (instead: offset-translation lag of groups at 25/50/100 % of the topic,
#        through each contender's checkpoints; bench/mm2/translate.py; WAIT_S=125 for MM2)
#        LATENCY_S=60 (instead: end-to-end latency at a steady RATE_MIB=20 MiB/s for that long,
#        p50/p99 from produce to visible to a read_committed target consumer; bench/mm2/latency.py)
# needs: ./dev up (the broker and the peer), kcat, java, mvn (resolves bench/mm2/pom.xml into
#        .dev/bench/mm2-libs once).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '[bench/replicate] %s\n' "$*" >&2; }
die() { printf '[bench/replicate] error: %s\n' "$*" >&2; exit 1; }

SIZE_MIB="${1:-1024}"
[[ "$SIZE_MIB" =~ ^[1-9][0-9]*$ ]] || die "SIZE_MIB must be a positive integer (got '$SIZE_MIB')"

eval "$("$ROOT/dev" env)"
command -v kcat >/dev/null || die "kcat is missing (./dev setup installs it)"
command -v java >/dev/null || die "java is missing (./dev setup installs it)"
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port_open "${STRATA_TEST_BOOTSTRAP##*:}" || die "the dev broker is not up on $STRATA_TEST_BOOTSTRAP: run ./dev up"
[[ -n "${STRATA_TEST_PEER_BOOTSTRAP:-}" ]] || die "./dev env has no peer (STRATA_TEST_PEER_BOOTSTRAP): update ./dev"
port_open "${STRATA_TEST_PEER_BOOTSTRAP##*:}" || die "the dev peer is not up on $STRATA_TEST_PEER_BOOTSTRAP: run ./dev up"
[[ -s "$STRATA_TEST_PEER_PASSWORD_FILE" ]] || die "no peer password in $STRATA_TEST_PEER_PASSWORD_FILE: run ./dev up"

# MirrorMaker 2's jars (bench/mm2/pom.xml), re-resolved when that file changes.
MM2_LIBS="$ROOT/.dev/bench/mm2-libs"
MM2_STAMP="$ROOT/.dev/bench/mm2-libs.sha256"
mm2_hash="$(sha256sum bench/mm2/pom.xml | cut -d' ' -f1)"
if [[ ! -f "$MM2_STAMP" || "$(cat "$MM2_STAMP")" != "$mm2_hash" ]] || ! ls "$MM2_LIBS"/connect-mirror-[0-9]*.jar >/dev/null 2>&1; then
  log "mm2: resolving the jars of bench/mm2/pom.xml into $MM2_LIBS"
  mkdir -p "$ROOT/.dev/bench"
  rm -rf "$MM2_LIBS.tmp"
  mvn -q -B -f bench/mm2/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$MM2_LIBS.tmp" 2>&1 | sed -u 's/\x1b\[0m//g' >&2 ||
    die "maven could not resolve bench/mm2/pom.xml"
  rm -rf "$MM2_LIBS"
  mv "$MM2_LIBS.tmp" "$MM2_LIBS"
  printf '%s\n' "$mm2_hash" >"$MM2_STAMP"
fi

BIN="${STRATA_BIN:-$ROOT/target/release/strata}"
if [[ " ${CONTENDERS:-mm2 strata} " == *" strata "* && ! -x "$BIN" && -z "${STRATA_BIN:-}" ]]; then
  log "building $BIN"
  cargo build --release --bin strata >&2
fi
export STRATA_BIN="$BIN" MM2_LIBS

PY="${STRATA_TEST_PYTHON:-}"
[[ -x "$PY" ]] || PY=python3
if [[ "${TRANSLATE:-0}" == 1 ]]; then
  # Offset-translation lag instead (bench/mm2/translate.py): groups at 25/50/100 % of the topic.
  exec "$PY" "$ROOT/bench/mm2/translate.py" "$SIZE_MIB"
fi
if [[ -n "${LATENCY_S:-}" ]]; then
  # Latency at a steady rate instead (bench/mm2/latency.py): RATE_MIB (20) for LATENCY_S seconds.
  exec "$PY" "$ROOT/bench/mm2/latency.py"
fi
exec "$PY" "$ROOT/bench/mm2/replicate.py" --size-mib "$SIZE_MIB"
