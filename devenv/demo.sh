#!/usr/bin/env bash
# Called by `./dev demo` after the services are up and the debug binary is built.
set -euo pipefail
echo "demo body not written yet"
exit 0
