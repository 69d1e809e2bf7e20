#!/usr/bin/env bash
# The strata demo, run by `./dev demo` once Kafka is up and the debug binary is built (the
# demo needs neither LocalStack nor anything else of the test suite). It:
#   1. creates the topic demo.cdc.orders (3 partitions) unless it exists,
#   2. produces ~2000 change-data-capture records into it (JSON arrays of row changes keyed by
#      the primary key, with a few at-least-once duplicates and tombstones) with kcat,
#   3. runs `strata dump --once --config config/demo.toml` (three tasks: jsonl, gzip'd text and
#      CDC tables in Parquet),
#   4. prints the objects written, the first records of one jsonl object, a few text lines,
#   5. queries the CDC tables with DuckDB (when it is installed), and prints a summary.
# Running it again produces new records; the dump resumes from the offsets it committed, so only
# the new records are archived. State: the archive in .dev/demo-archive, the generator's counters
# in .dev/demo, the dump log in .dev/logs/demo-dump.log.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BOOTSTRAP="${STRATA_TEST_BOOTSTRAP:-127.0.0.1:9092}"
TOPIC="demo.cdc.orders"
PARTITIONS=3
RECORDS="${STRATA_DEMO_RECORDS:-2000}"
CONFIG="config/demo.toml"
ARCHIVE=".dev/demo-archive"          # must match store.url in config/demo.toml
STATE=".dev/demo"
LOG=".dev/logs/demo-dump.log"
STRATA="${STRATA_DEMO_BIN:-target/debug/strata}"   # ./dev demo says where cargo built it
# DuckDB's venv from ./dev demo; the generator itself needs only the standard library.
PY="${STRATA_DEMO_PYTHON:-.dev/venv-demo/bin/python}"
[[ -x "$PY" ]] || PY="$(command -v python3)"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { printf 'demo: error: %s\n' "$*" >&2; exit 1; }

for tool in kcat jq find gzip; do
  command -v "$tool" >/dev/null || die "$tool is missing; run ./dev setup"
done
[[ -x "$STRATA" ]] || die "$STRATA is missing; run cargo build (./dev demo does)"
mkdir -p "$STATE" "$(dirname "$LOG")"

# partition_count: partitions of $TOPIC the broker reports (0 when the topic does not exist).
partition_count() {
  kcat -L -J -b "$BOOTSTRAP" -t "$TOPIC" 2>/dev/null |
    jq -r --arg t "$TOPIC" '[.topics[] | select(.topic == $t and .error == null) | .partitions[]] | length'
}

# end_offsets: the high watermark of each partition, one per line ("partition offset").
end_offsets() {
  local args=() p
  for ((p = 0; p < PARTITIONS; p++)); do args+=(-t "$TOPIC:$p:-1"); done
  kcat -Q -J -b "$BOOTSTRAP" "${args[@]}" |
    jq -r --arg t "$TOPIC" '.[$t] | to_entries[] | select(.value | type == "object") | "\(.value.partition) \(.value.offset)"' |
    sort -n
}

sum_offsets() { awk '{ s += $2 } END { print s + 0 }'; }

# --- 1. the topic -------------------------------------------------------------------------------
say "1. topic $TOPIC on $BOOTSTRAP"
have="$(partition_count)"
if [[ "$have" -eq 0 ]]; then
  echo "creating it with $PARTITIONS partitions (the broker does not auto-create topics)"
  ./dev kafka-class org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" \
    --create --if-not-exists --topic "$TOPIC" --partitions "$PARTITIONS" --replication-factor 1 >/dev/null
  for _ in $(seq 60); do [[ "$(partition_count)" -eq "$PARTITIONS" ]] && break; sleep 0.5; done
  [[ "$(partition_count)" -eq "$PARTITIONS" ]] || die "topic $TOPIC did not appear"
  # A new topic (first run, or after ./dev reset) restarts at offset 0: an archive of an older
  # topic of the same name would mix with it, and its generator counters no longer apply.
  if [[ -d "$ARCHIVE" || -f "$STATE/counters.json" ]]; then
    echo "the topic is new: removing the archive and counters of its previous incarnation"
    rm -rf "$ARCHIVE" "$STATE/counters.json"
  fi
else
  [[ "$have" -eq "$PARTITIONS" ]] || die "$TOPIC exists with $have partitions, the demo expects $PARTITIONS; ./dev reset wipes Kafka"
  echo "exists with $have partitions"
fi

before="$(end_offsets)"
before_total="$(sum_offsets <<<"$before")"
run=$(( $(cat "$STATE/runs" 2>/dev/null || echo 0) + 1 ))
[[ "$before_total" -eq 0 ]] && run=1

# --- 2. sample change-data-capture records --------------------------------------------------------
say "2. producing $RECORDS CDC records"
"$PY" - "$STATE/counters.json" "$RECORDS" >"$STATE/records.tsv" 2>"$STATE/generator.txt" <<'PYEOF'
# Writes "key<TAB>value" lines: row changes of shop.public.orders and shop.public.payments as a
# CDC service delivers them (../shared/spec/cdc-format.md): a JSON array of changes per message,
# TIME as yyyyMMddHHmmss, every value a string, OLD_VALUES absent for inserts and NEW_VALUES for
# deletes, keys sorted (canonical JSON, so restore gives the bytes back).
import json, os, random, sys, time
from datetime import datetime, timezone

counters_path, total = sys.argv[1], int(sys.argv[2])
c = {"global_id": 7_300_000_000, "clock": 1_000_000, "lsn": 0x16B3748, "order_id": 100_000}
if os.path.exists(counters_path):
    c.update(json.load(open(counters_path)))
rnd = random.Random(c["order_id"])
now_ms = int(time.time() * 1000)
t_ms = now_ms - 120_000                       # the source transactions of the last two minutes
customers = [f"C{n:05d}" for n in range(1, 400)]
products = ["SKU-1001", "SKU-1002", "SKU-2040", "SKU-3300", "SKU-4711", "SKU-5150"]
NEXT = {"NEW": "PAID", "PAID": "SHIPPED", "SHIPPED": "DELIVERED"}

def ts(ms):
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")

def cdc_time(ms):
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y%m%d%H%M%S")

def text(row):
    return {k: str(v) for k, v in row.items()}

def change(kind, old, new, table="orders"):
    c["global_id"] += 1
    c["clock"] += 1
    out = {
        "TIME": cdc_time(t_ms), "GLOBAL_ID": str(c["global_id"]), "DATABASE": "shop",
        "SCHEMA": "public", "TABLE": table, "TYPE": kind,
        "LOGICAL_CLOCK": str(1_617_327_447_310_000_000 + c["clock"]),
    }
    if old is not None:
        out["OLD_VALUES"] = text(old)
    if new is not None:
        out["NEW_VALUES"] = text(new)
    return out

def paid(row):
    c["lsn"] += 1
    return change("I", None, {"payment_id": c["lsn"], "order_id": row["order_id"],
                              "amount": row["amount"], "method": rnd.choice(["card", "sepa", "paypal"]),
                              "paid_at": row["updated_at"]}, table="payments")

messages, live = [], {}            # live: order_id -> current row
dups = tombstones = 0
while len(messages) < total:
    t_ms += rnd.randint(5, 90)
    key = None
    roll = rnd.random()
    if roll < 0.35 or len(live) < 20:                  # a new order
        c["order_id"] += 1
        oid = c["order_id"]
        qty = rnd.randint(1, 4)
        row = {"order_id": oid, "customer_id": rnd.choice(customers), "product": rnd.choice(products),
               "quantity": qty, "amount": f"{qty * rnd.randint(900, 25000) / 100:.2f}",
               "currency": "EUR", "status": "NEW", "updated_at": ts(t_ms)}
        tx = [change("I", None, row)]
        if rnd.random() < 0.08:                        # paid in the same transaction
            new = dict(row, status="PAID", updated_at=ts(t_ms))
            tx.append(change("U", row, new))
            tx.append(paid(new))
            row = new
        live[oid] = row
        key = oid
    elif roll < 0.93:                                  # an order moves on
        oid = rnd.choice(list(live))
        row = live[oid]
        status = "CANCELLED" if row["status"] in ("NEW", "PAID") and rnd.random() < 0.1 else NEXT.get(row["status"])
        if status is None:                             # delivered: archived and deleted later
            continue
        new = dict(row, status=status, updated_at=ts(t_ms))
        tx = [change("U", row, new)]
        if status == "PAID":                           # a payment row in the same transaction
            tx.append(paid(new))
        live[oid] = new
        key = oid
    else:                                              # cancelled or delivered orders are purged
        done = [o for o, r in live.items() if r["status"] in ("CANCELLED", "DELIVERED")]
        if not done:
            continue
        oid = rnd.choice(done)
        tx = [change("D", live.pop(oid), None)]
        key = oid
    line = json.dumps({"order_id": key}, separators=(",", ":")) + "\t" + json.dumps(tx, separators=(",", ":"), sort_keys=True)
    messages.append(line)
    if tx[-1]["TYPE"] == "D" and rnd.random() < 0.5 and len(messages) < total:
        messages.append(json.dumps({"order_id": key}, separators=(",", ":")) + "\t")   # tombstone
        tombstones += 1
    # At-least-once delivery: now and then the CDC task restarts and re-sends its last few messages.
    if rnd.random() < 0.006 and len(messages) > 10:
        k = min(rnd.randint(2, 6), total - len(messages))
        messages.extend(messages[-k:])
        dups += k

messages = messages[:total]
sys.stdout.write("\n".join(messages) + "\n")
json.dump(c, open(counters_path, "w"))
print(f"{len(messages)} messages, {dups} re-sent duplicates, {tombstones} tombstones, "
      f"GLOBAL_ID up to {c['global_id']}, order ids up to {c['order_id']}", file=sys.stderr)
PYEOF
produced="$(wc -l <"$STATE/records.tsv")"
# -K: key before the tab; -Z: an empty value is sent as null (a tombstone); one header on each.
kcat -P -b "$BOOTSTRAP" -t "$TOPIC" -K $'\t' -Z -H source=strata-demo -l "$STATE/records.tsv"
after="$(end_offsets)"
after_total="$(sum_offsets <<<"$after")"
cat "$STATE/generator.txt"
echo "topic now holds $after_total records (was $before_total): $(tr '\n' ' ' <<<"$after" | awk '{ for (i = 1; i < NF; i += 2) printf "p%s=%s ", $i, $(i+1) }')"
[[ $((after_total - before_total)) -eq "$produced" ]] ||
  die "produced $produced records but the end offsets grew by $((after_total - before_total))"

# --- 3. strata dump --once -----------------------------------------------------------------------
say "3. $STRATA dump --once --config $CONFIG"
rc=0
"$STRATA" --log-format json dump --once --config "$CONFIG" 2>"$LOG" || rc=$?
if [[ $rc -ne 0 ]]; then
  tail -n 30 "$LOG" >&2
  die "strata dump exited with $rc (full log: $LOG)"
fi
# Show what strata logged about each object it stored and each task it finished.
jq -r 'select(.message == "stored" and .object != null) | "stored \(.object)  (\(.records) records, \(.bytes) bytes, \(.ms) ms)"' "$LOG"
jq -r 'select(.message == "stored" and .bundle != null) | "stored a CDC bundle of \(.files) files (one per table, and the messages kept whole) for \(.bundle | split("/") | last): \(.messages) messages, \(.changes) changes, \(.repeats) repeats left out, \(.malformed) not CDC"' "$LOG"
jq -r 'select(.message == "done") | "task \(.task): \(.objects) objects, \(.records) records, \(.bytes) bytes"' "$LOG"
echo "(full log: $LOG)"
echo "$run" >"$STATE/runs"

# --- 4. what is in the archive -------------------------------------------------------------------
say "4. the archive: $ARCHIVE (objects stored by this run are marked *)"
mapfile -t new_objects < <(jq -r 'select(.message == "stored" and .object != null) | .object | sub("^file://"; "") | sub("^\\./"; "")' "$LOG" | sort -u)
[[ ${#new_objects[@]} -gt 0 ]] || die "strata stored no object"
declare -A is_new=()
for o in "${new_objects[@]}"; do
  [[ -f "$o" ]] || die "strata logged $o as stored, but there is no such file"
  is_new["$o"]=1
done
mapfile -t all_objects < <(find "$ARCHIVE" -type f ! -name '.strata-tmp-*' ! -path '*/.strata/*' | sort)
shown=0
for o in "${all_objects[@]}"; do
  if [[ -n "${is_new[$o]:-}" || ${#all_objects[@]} -le 30 ]]; then
    printf '%s %8d  %s\n' "$([[ -n "${is_new[$o]:-}" ]] && echo '*' || echo ' ')" "$(stat -c %s "$o")" "$o"
    shown=$((shown + 1))
  fi
done
((shown < ${#all_objects[@]})) && echo "  ... and $(( ${#all_objects[@]} - shown )) objects of earlier runs"

jsonl_new=() text_new=()
for o in "${new_objects[@]}"; do
  case "$o" in
    *.jsonl) jsonl_new+=("$o") ;;
    *.txt.gz) text_new+=("$o") ;;
  esac
done

if ((${#jsonl_new[@]})); then
  first="${jsonl_new[0]}"
  say "from $first: its first record, an update and a tombstone (value parsed for display)"
  jq -s '
    def parsed: if (.value | type) == "string" then .value = (.value as $v | try ($v | fromjson) catch $v) else . end;
    def has_update: (.value | type) == "array" and any(.value[]; .TYPE == "U");
    map(parsed) as $r
    | [$r[0], (if ($r[0] | has_update) then null else ($r | map(select(has_update)) | first) end),
       ($r | map(select(.value == null)) | first)]
    | map(select(. != null)) | unique_by(.offset) | .[]' "$first"
fi
if ((${#text_new[@]})); then
  say "the first 2 lines of ${text_new[0]} (key<TAB>value, gunzipped)"
  # (zcat stops early on purpose here: ignore its SIGPIPE)
  { zcat "${text_new[0]}" || true; } | head -n 2 | awk '{ print (length($0) > 200 ? substr($0, 1, 200) " ..." : $0) }'
  tomb="$(zcat "${text_new[0]}" | grep -m1 $'\t$' || true)"
  [[ -z "$tomb" ]] || printf 'a tombstone is the key and an empty value (text is lossy):\n%s\n' "$tomb"
fi

# --- 5. the CDC tables, queried with DuckDB -----------------------------------------------------
TABLES="$ARCHIVE/tables"
if [[ -d "$TABLES" ]] && "$PY" -c 'import duckdb' 2>/dev/null; then
  say "5. the tables in $TABLES, as DuckDB reads them (each table directory is one table)"
  "$PY" - "$TABLES" <<'PYEOF'
import sys, duckdb
root = sys.argv[1]
def table(name):
    return f"read_parquet('{root}/{name}/**/*.parquet', union_by_name=true)"
print("-- changes per table and type (repeats are not in the tables)")
duckdb.sql(f"""
  SELECT "table", type, count(*) AS changes, min(time) AS first, max(time) AS last
  FROM (SELECT * FROM {table('shop.public.orders')} UNION ALL BY NAME
        SELECT * FROM {table('shop.public.payments')})
  GROUP BY ALL ORDER BY ALL""").show()
print("-- the current state of the five latest orders: the last change per order by LOGICAL_CLOCK")
duckdb.sql(f"""
  SELECT coalesce(new_order_id, old_order_id) AS order_id, type AS last_change, new_status AS status,
         new_amount AS amount, new_updated_at AS updated_at
  FROM {table('shop.public.orders')}
  QUALIFY row_number() OVER (PARTITION BY coalesce(new_order_id, old_order_id)
                             ORDER BY logical_clock DESC) = 1
  ORDER BY order_id DESC LIMIT 5""").show()
print("-- payments by method")
duckdb.sql(f"""
  SELECT p.new_method AS method, count(*) AS payments, sum(p.new_amount) AS total
  FROM {table('shop.public.payments')} p GROUP BY ALL ORDER BY payments DESC""").show()
PYEOF
  kept="$(find "$TABLES" -path '*/_repeats/*' -name '*.parquet' | wc -l)"
  echo "beside the tables: _repeats/ ($kept objects: messages sent again, kept whole), _errors/ (the tombstones: not CDC)"
  echo "try it yourself: $PY -c \"import duckdb; duckdb.sql(\\\"SELECT * FROM read_parquet('$TABLES/shop.public.orders/**/*.parquet', union_by_name=true) LIMIT 5\\\").show()\""
fi

# --- summary -------------------------------------------------------------------------------------
jsonl_records=0
((${#jsonl_new[@]})) && jsonl_records=$(cat "${jsonl_new[@]}" | wc -l)
text_records=0
((${#text_new[@]})) && text_records=$(zcat "${text_new[@]}" | wc -l)
total_jsonl=$(find "$ARCHIVE" -type f -name '*.jsonl' -exec cat {} + | wc -l)

say "summary"
if ((run > 1)); then
  echo "run $run: the topic already held $before_total records from earlier runs; each task resumed at the"
  echo "offsets it committed, so this run archived only the $produced new records."
else
  echo "run ./dev demo again: it produces new records, and the dump archives only those."
fi
echo "this run: ${#new_objects[@]} objects (${#jsonl_new[@]} jsonl with $jsonl_records records, ${#text_new[@]} text.gz with $text_records records) for $produced produced; archive: ${#all_objects[@]} objects, $total_jsonl jsonl records for $after_total in the topic"
if [[ "$jsonl_records" -ne "$produced" || "$text_records" -ne "$produced" ]]; then
  echo "note: the counts differ from the $produced records produced (another producer on $TOPIC, or a rewritten object)" >&2
fi
