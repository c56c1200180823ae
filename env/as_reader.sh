#!/usr/bin/env bash
# Run `make TARGET...` as a reader who is not root would: as an ordinary user, in a clone of this
# repository's committed HEAD that the user owns, with its own .venv. CI (.ci/run) runs the JupyterLab
# tests this way: `env/as_reader.sh test-render`.
#
# As root: Debian's chromium is installed first when a target needs it (`make chromium`, which needs
# root), the user READER_USER (default `reader`) is created when missing, HEAD is cloned into a new
# folder of its home, and the targets run there through `su`. As any other user: the targets run here.
# The clone is left in place (its build/screenshots are the run's artefacts); its path is printed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
[ $# -gt 0 ] || { echo "usage: env/as_reader.sh TARGET... (e.g. test-render)"; exit 2; }
if [ "$(id -u)" != 0 ]; then
  exec make -C "$repo" "$@"
fi
case " $* " in *" test-render "*) make -C "$repo" chromium ;; esac
user=${READER_USER:-reader}
id "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
home=$(getent passwd "$user" | cut -d: -f6)
clone=$(mktemp -d "$home/tutorial.XXXXXX")
git clone -q "$repo" "$clone"
chown -R "$user:" "$clone"
echo "as_reader: make $* as $user (uid $(id -u "$user")) in $clone"
# A login shell's environment (su -): what the reader's terminal has, not root's, except this machine's
# package and TLS settings (PIP_*: where it keeps its wheels, e.g. PIP_FIND_LINKS for the CPU build of torch
# the lock pins; SSL_CERT_FILE/SSL_CERT_DIR: the certificates its registry proxy needs), which a reader's
# machine would have configured for every user.
pip_settings=()
while IFS= read -r setting; do pip_settings+=("$setting"); done < <(env | grep -E '^(PIP_[A-Z_]+|SSL_CERT_FILE|SSL_CERT_DIR)=' || true)
command="cd $(printf '%q' "$clone") && env ${pip_settings[*]+$(printf '%q ' "${pip_settings[@]}")}make $(printf '%q ' "$@")"
exec su - "$user" -c "$command"
