#!/usr/bin/env bash
# Installs what cronledger needs on a Debian machine with Node 20 and Go, skipping whatever is already there:
#   Debian packages: postgresql (and chromium with --with-chromium, for the report tests; prometheus with
#                    --with-promtool, for its promtool, which checks the compose stack's scrape config in a test)
#   npm packages:    npm ci, when node_modules is missing or older than package-lock.json
#   temporal CLI:    the same resolution `dev up` uses (CRONLEDGER_TEMPORAL_CLI, PATH, ~/.cache/cronledger, else go install)
#   with --with-temporal-server: the Temporal server, its schema tool and the Web UI server that
#                    `dev up --temporal server` runs (CRONLEDGER_TEMPORAL_SERVER / _SQL_TOOL / _UI_SERVER, the cache, else go install)
set -euo pipefail
cd "$(dirname "$0")/.."

with_chromium=false
dev_install_args=()
with_promtool=false
for arg in "$@"; do
  case "$arg" in
    --with-chromium) with_chromium=true ;;
    --with-temporal-server) dev_install_args+=(--temporal-server) ;;
    --with-promtool) with_promtool=true ;;
    *) echo "install.sh: unknown option $arg (known: --with-chromium, --with-temporal-server, --with-promtool)" >&2; exit 2 ;;
  esac
done

node_ok=$(node -e 'const [a, b] = process.versions.node.split(".").map(Number); console.log(a > 20 || (a === 20 && b >= 19))' 2>/dev/null || echo false)
if [ "$node_ok" != true ]; then
  echo "install.sh: Node.js >= 20.19 is required (found $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi

missing=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null || missing+=(postgresql)
if $with_chromium && ! command -v chromium >/dev/null; then missing+=(chromium); fi
if $with_promtool && ! command -v promtool >/dev/null; then missing+=(prometheus); fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
    echo "install.sh: missing Debian packages: ${missing[*]}; install them as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "==> apt-get install ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# No dependency needs its install script (esbuild and @swc/core take their binaries from optional platform
# packages; protobufjs's only prints a version hint), so none run: installs behave the same whether or not
# this npm version blocks unreviewed scripts. A node_modules that is a symlink (a git worktree sharing another
# checkout's) is left alone: npm ci through it would empty the other checkout's node_modules.
if [ -L node_modules ]; then
  echo "==> node_modules links to $(readlink node_modules): not reinstalled here"
elif [ -f package-lock.json ]; then
  if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ] || [ package.json -nt node_modules/.package-lock.json ]; then
    echo "==> npm ci"
    npm ci --ignore-scripts --no-audit --no-fund
  fi
elif [ ! -d node_modules ]; then
  echo "==> npm install (no package-lock.json)"
  npm install --ignore-scripts --no-audit --no-fund
fi

# Builds the temporal CLI (and with --with-temporal-server the server's binaries) into ~/.cache/cronledger on first
# use (minutes, with progress); instant afterwards.
node bin/cronledger.js dev install "${dev_install_args[@]}"
