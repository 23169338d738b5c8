#!/usr/bin/env bash
# The whole test suite: typecheck, lint, format check, then every vitest project in one run (vitest.config.ts): unit,
# integration against a real Temporal dev server and a real PostgreSQL (started by test/support/global-setup.ts in a
# temp dir; nothing of a running `dev up` stack is touched), the fault scenarios on the same stack, and the scheduling
# tests (one run per slot, backfill, missed slots) again on the Temporal server on PostgreSQL (`dev up --temporal
# server`). Arguments go to vitest (e.g. `--project unit`, or a file).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install.sh --with-chromium --with-promtool --with-temporal-server
echo "==> tsc --noEmit"
npx tsc --noEmit
echo "==> eslint (npm run lint)"
npm run --silent lint
echo "==> prettier --check (npm run format:check)"
npm run --silent format:check
echo "==> vitest run (projects unit, integration, fault, temporal-server)"
npx vitest run "$@"
