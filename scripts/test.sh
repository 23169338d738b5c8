#!/usr/bin/env bash
# The whole test suite: typecheck, then vitest against a real Temporal dev server and a real PostgreSQL
# (started by test/support/global-setup.ts in a temp dir; nothing of a running `dev up` stack is touched).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install.sh --with-chromium
echo "==> tsc --noEmit"
npx tsc --noEmit
echo "==> vitest run"
npx vitest run "$@"
