#!/bin/sh
# Generates the secret files docker-compose.yml mounts under /run/secrets (its `secrets:`), into ./secrets (or $1):
# random passwords for each database role and the admin page's token, and the database URLs built from them. Keeps
# every file that exists already, so rerunning it never changes a password a database was created with.
#   ./scripts/compose-secrets.sh && docker compose up -d --build
# For a real model provider, put its key in secrets/openai_api_key or secrets/anthropic_api_key (left empty here: the
# mock provider needs none) and set MODEL_PROVIDER (openai, anthropic or openai,anthropic); with
# REPORT_WEBHOOK_URL set, its signing secret (whsec_...) goes in secrets/report_webhook_secret.
set -eu
dir=${1:-secrets}
umask 077
mkdir -p "$dir"
chmod 700 "$dir" # nobody else on this machine enters the folder

password() { [ -s "$dir/$1" ] || openssl rand -hex 24 >"$dir/$1"; }
for name in temporal_postgres_password temporal_db_password ledger_postgres_password \
  cronledger_owner_password cronledger_worker_password cronledger_operator_password cronledger_readonly_password; do
  password "$name"
done
[ -s "$dir/admin_token" ] || openssl rand -hex 32 >"$dir/admin_token"
# The payload encryption key (docs/security.md, "Payloads encrypted"): to rotate, put a new k2=... line first.
[ -s "$dir/payload_keys" ] || echo "k1=$(openssl rand -base64 32)" >"$dir/payload_keys"
[ -e "$dir/openai_api_key" ] || : >"$dir/openai_api_key"
[ -e "$dir/anthropic_api_key" ] || : >"$dir/anthropic_api_key"
[ -e "$dir/report_webhook_secret" ] || : >"$dir/report_webhook_secret"

# The ledger's URLs, one per role, written again from the passwords each time (they hold nothing else).
url() { printf 'postgres://%s:%s@ledger-postgres:5432/%s\n' "$1" "$(cat "$dir/$2")" "$3" >"$dir/$4"; }
url postgres ledger_postgres_password postgres ledger_superuser_url
url cronledger_owner cronledger_owner_password cronledger ledger_owner_url
url cronledger_worker cronledger_worker_password cronledger ledger_worker_url
url cronledger_operator cronledger_operator_password cronledger ledger_operator_url
url cronledger_readonly cronledger_readonly_password cronledger ledger_readonly_url

# Compose bind-mounts each file as it is: the containers' users (node, postgres, temporal, nobody) must read them.
chmod 644 "$dir"/*
echo "secrets in $dir: $(ls "$dir" | tr '\n' ' ')"
