#!/bin/sh
# make-certs.sh <dir>: the certificates of the Temporal frontend's mutual TLS, made with openssl. One script for both
# places that run the Temporal server: `cronledger dev up --temporal server` (into <data dir>/temporal-tls) and
# docker-compose.yml's one-shot `temporal-certs` service (into the `temporal-tls` volume).
#   ca.crt                 the CA every side trusts (its key is deleted once the two certificates are signed)
#   frontend.crt/.key      the frontend's server certificate: temporal-frontend, localhost, 127.0.0.1
#   client.crt/.key        the client certificate of cronledger's workers, CLI and admin page, the Web UI server and
#                          Temporal's own worker service (the frontend requires one from every caller)
# Existing certificates are kept while each is valid for 30 more days; otherwise all five files are made afresh.
# KEY_MODE (default 0600) is the mode of the two keys: compose makes them readable to the other containers' users.
set -eu
dir=$1
umask 077
mkdir -p "$dir"
cd "$dir"

valid() { [ -s "$1.crt" ] && openssl x509 -checkend 2592000 -noout -in "$1.crt" >/dev/null 2>&1; }
if valid ca && valid frontend && valid client && [ -s frontend.key ] && [ -s client.key ]; then
  echo "Temporal TLS certificates in $dir are valid; kept"
  exit 0
fi

rm -f ca.key ca.crt frontend.key frontend.crt client.key client.crt
openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 3650 \
  -subj /CN=cronledger-temporal-ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
  2>/dev/null

# issue <name> <common name> <extensions>: a key and a certificate signed by the CA, valid for 825 days.
issue() {
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" -days 825 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
issue frontend temporal-frontend "subjectAltName=DNS:temporal-frontend,DNS:localhost,IP:127.0.0.1
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth"
issue client cronledger-client "keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
rm -f ca.key

chmod 0644 ca.crt frontend.crt client.crt
chmod "${KEY_MODE:-0600}" frontend.key client.key
echo "Temporal TLS certificates made in $dir"
