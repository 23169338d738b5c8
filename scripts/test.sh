#!/usr/bin/env bash
# The whole test suite: typecheck, lint, format check, then vitest against a real Temporal dev server and a real PostgreSQL
# (started by test/support/global-setup.ts in a temp dir; nothing of a running `dev up` stack is touched), then the
# scheduling tests (one run per slot, backfill, missed slots) again against the Temporal server on PostgreSQL
# (`dev up --temporal server`). Arguments go to the first vitest run only, and skip the second.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install.sh --with-chromium --with-promtool --with-temporal-server
echo "==> tsc --noEmit"
npx tsc --noEmit
echo "==> eslint (npm run lint)"
npm run --silent lint
echo "==> prettier --check (npm run format:check)"
npm run --silent format:check
echo "==> vitest run"
npx vitest run "$@"
if [ $# -eq 0 ]; then
  echo "==> vitest run, scheduling tests on the Temporal server (CRONLEDGER_TEST_TEMPORAL=server)"
  CRONLEDGER_TEST_TEMPORAL=server npx vitest run test/exactly-once.test.ts test/backfill.test.ts test/missed-slots.test.ts
fi
