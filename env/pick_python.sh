# Pick the system CPython for the tutorial's venv; sourced by env/setup_env.sh.
#
# Triton's Python-backend stub links libpython3.X.so.1.0 from the system library path, and the
# nvidia-pytriton wheel carries stubs for 3.8-3.13, so the venv must come from a system interpreter
# that owns its libpython and can make venvs: Debian 12 ships 3.11, Ubuntu 24.04 3.12, Debian 13 3.13.
# PY_CANDIDATES and PY_SYSTEM (the distribution's own python3) are variables so tests can fake them.

# python_problem PY: says on stdout why PY cannot host the tutorial's venv and returns 1; silent if it can.
python_problem() {
  local py=$1 ver libdir
  if [ ! -x "$py" ]; then
    ver=$(basename "$py" | sed -n 's/^python\(3\.[0-9]*\)$/\1/p')
    ver=${ver:-3.X}
    echo "$py not found. Install the system Python the Triton stub links against: sudo apt-get install python$ver python$ver-venv libpython$ver (or set TUTORIAL_PYTHON)"
    return 1
  fi
  ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")') \
    || { echo "$py does not run"; return 1; }
  libdir=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
  # grep without -q: under pipefail, grep -q quitting early would fail the pipeline through SIGPIPE.
  [ -e "$libdir/libpython$ver.so.1.0" ] || ldconfig -p 2>/dev/null | grep "libpython$ver.so.1.0" >/dev/null || {
    echo "libpython$ver.so.1.0 not found: the Triton Python-backend stub needs it. Install it: sudo apt-get install libpython$ver"
    return 1
  }
  "$py" -c 'import venv, ensurepip' 2>/dev/null || { echo "$py cannot make venvs: sudo apt-get install python$ver-venv"; return 1; }
}

# pick_python: prints TUTORIAL_PYTHON if set and usable, else the first usable of PY_CANDIDATES;
# on failure says why on stderr (with the apt command for the distribution's python3) and returns 1.
pick_python() {
  local py why dver reasons=""
  if [ -n "${TUTORIAL_PYTHON:-}" ]; then
    why=$(python_problem "$TUTORIAL_PYTHON") || { echo "setup_env: $why" >&2; return 1; }
    echo "$TUTORIAL_PYTHON"
    return 0
  fi
  for py in ${PY_CANDIDATES:-/usr/bin/python3.11 /usr/bin/python3.12 /usr/bin/python3.13}; do
    if why=$(python_problem "$py"); then
      echo "$py"
      return 0
    fi
    reasons+="  $why"$'\n'
  done
  dver=$("${PY_SYSTEM:-/usr/bin/python3}" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null) \
    || dver=3.X
  echo "setup_env: no system Python can host the Triton stub's venv:" >&2
  printf '%s' "$reasons" >&2
  echo "setup_env: install them for your distribution's python3 ($dver): sudo apt-get install python$dver-venv libpython$dver (or set TUTORIAL_PYTHON)" >&2
  return 1
}
