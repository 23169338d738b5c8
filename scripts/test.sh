#!/usr/bin/env bash
# The whole test suite: typecheck, lint and format check (the three at once), then every vitest project in one run
# (vitest.config.ts): unit, integration against a real Temporal dev server and a real PostgreSQL (started by
# test/support/global-setup.ts in a temp dir; nothing of a running `dev up` stack is touched), the fault scenarios on
# the same stack, and the scheduling tests (one run per slot, backfill, missed slots) again on the Temporal server on
# PostgreSQL (`dev up --temporal server`). Arguments go to vitest (e.g. `--project unit`, or a file).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install.sh --with-chromium --with-promtool --with-temporal-server

# The three static checks are independent, single-threaded and each takes seconds: they run at the same time, each
# printed whole once all have finished, and any failure stops the script before vitest.
checks=$(mktemp -d)
trap 'rm -rf "$checks"' EXIT
npx tsc --noEmit >"$checks/tsc" 2>&1 & tsc=$!
npm run --silent lint >"$checks/eslint" 2>&1 & eslint=$!
npm run --silent format:check >"$checks/prettier" 2>&1 & prettier=$!
failed=()
for check in tsc eslint prettier; do
  wait "${!check}" || failed+=("$check")
  echo "==> $check"
  cat "$checks/$check"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: ${failed[*]} failed; vitest not run" >&2
  exit 1
fi
echo "==> vitest run (projects unit, integration, fault, temporal-server)"
npx vitest run "$@"
