#!/usr/bin/env bash
# The whole test suite: typecheck, lint, format check, then vitest against a real Temporal dev server and a real PostgreSQL
# (started by test/support/global-setup.ts in a temp dir; nothing of a running `dev up` stack is touched).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install.sh --with-chromium --with-promtool
echo "==> tsc --noEmit"
npx tsc --noEmit
echo "==> eslint (npm run lint)"
npm run --silent lint
echo "==> prettier --check (npm run format:check)"
npm run --silent format:check
echo "==> vitest run"
npx vitest run "$@"
