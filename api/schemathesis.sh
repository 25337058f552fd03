#!/usr/bin/env bash
# Runs schemathesis (from PyPI, cached in a venv) against a live `seckill dev` built from this
# checkout: every operation of api/openapi.yaml, positive and negative data. It fails on any
# 5xx, any status, header, content type or body the spec does not document, and on a request
# the spec calls invalid that the server accepts. Used by `make test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

version=4.32.5
venv="${XDG_CACHE_HOME:-$HOME/.cache}/seckill/schemathesis-$version"
if [[ ! -x $venv/bin/schemathesis ]]; then
  echo "schemathesis: installing $version into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi

tmp=$(mktemp -d)
server=""
cleanup() {
  if [[ -n $server ]]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

${GO:-go} build -o "$tmp/seckill" .
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
admin="schemathesis-admin-token-of-32-bytes"
# The rates are off: schemathesis sends far faster than a buyer, and 429 would hide the answers.
"$tmp/seckill" dev --addr "127.0.0.1:$port" --data-dir "$tmp/data" --admin-token "$admin" \
  --user-rate 0 --ip-rate 0 >"$tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do
  curl -fsS "$base/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done
if ! curl -fsS "$base/readyz" >/dev/null; then
  echo "schemathesis: seckill dev did not become ready:" >&2
  cat "$tmp/server.log" >&2
  exit 1
fi
# The campaign of the spec's examples, so the example phase reaches a real sale.
curl -fsS -X POST "$base/v1/campaigns" -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
  -d '{"id": "summer-sale_1", "name": "Summer sale", "stock": 1000000, "per_user_limit": 1000000}' >/dev/null

status=0
# The console's stream goes on until the client leaves: every call would time out. Its answers
# are checked against the spec by api/console_test.go instead.
# X-User-ID wins over the bearer token on buyer routes in dev, so both headers go everywhere.
# It runs in $tmp, where it keeps its state (.hypothesis, .schemathesis).
(cd "$tmp" && "$venv/bin/schemathesis" run "$root/api/openapi.yaml" --url "$base" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,negative_data_rejection \
  --phases examples,coverage,fuzzing --max-examples "${SCHEMATHESIS_EXAMPLES:-150}" --seed 1 \
  --request-timeout 10 --warnings off \
  --exclude-operation-id streamConsole \
  -H "Authorization: Bearer $admin" -H "X-User-ID: schemathesis") || status=$?
if ((status != 0)); then
  echo "schemathesis: failed; the server's log:" >&2
  tail -n 50 "$tmp/server.log" >&2
fi
exit "$status"
