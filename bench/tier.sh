#!/usr/bin/env bash
# Tier mode benchmark: see bench/tier.py (this runs it with the tools virtualenv of ./dev,
# which has boto3 for copying the tiered objects into LocalStack).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
eval "$("$ROOT/dev" env)"
PYTHON="${STRATA_TEST_PYTHON:-}"
[[ -x "$PYTHON" ]] || { echo "[bench/tier] error: no tools virtualenv; run ./dev setup" >&2; exit 1; }
exec "$PYTHON" "$ROOT/bench/tier.py" "$@"
