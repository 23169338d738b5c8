#!/usr/bin/env bash
# The local stack with three workers, the standard prices and the example tasks, then the URLs to open.
# Safe to rerun: every step leaves what is already there alone.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install.sh
npx cronledger dev up --workers 3
npx cronledger prices apply prices/standard.json
npx cronledger tasks apply examples/tasks.json

status=$(npx cronledger dev status --json)
field() { node -e 'let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => console.log(JSON.parse(s)[process.argv[1]]))' "$1" <<<"$status"; }
ui=$(field uiUrl)
admin=$(field adminUrl)
cat <<MSG

Open:
  ${ui}/namespaces/default/schedules   one Temporal Schedule per task (cron-<taskId>)
  ${ui}/namespaces/default/workflows   the runs, one per scheduled minute
  ${admin}                              the admin page: spend, cost per run, budgets, runs (read-only)

Then:
  npx cronledger tasks list                      next fire times and last runs
  npx cronledger runs                            runs with status and Web UI links
  npx cronledger report --month $(date -u +%Y-%m)          usage and cost by user, day and model
  npx cronledger dev down                        stop everything (data is kept)
MSG
