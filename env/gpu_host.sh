#!/usr/bin/env bash
# Run the notebooks of a pip-installable GPU profile on a GPU host that has no package registry, as the
# committed copies under docs/gpu-runs/ were made. The wheels come from `env/wheelhouse.py build` (made on
# a connected machine) and are copied to the host in parts.
#
#   env/gpu_host.sh start PROFILE PARTS_DIR WORK NOTEBOOK... [-- run_notebooks options]
#       copies this checkout to WORK/src, installs the wheels into WORK/site + WORK/venv, and runs the
#       notebooks one by one in the background (setsid: the run outlives the shell that starts it),
#       each with its own log under WORK/logs; a notebook that fails does not stop the next one.
#   env/gpu_host.sh rerun PROFILE WORK NOTEBOOK... [-- run_notebooks options]
#       runs notebooks again on what start installed and built (a notebook that failed, once its cause
#       is fixed or to see whether it was the timing), in the background as start does; an earlier
#       copy and log of a notebook are kept beside the new ones, numbered (06.1.log, executed/1/...).
#   env/gpu_host.sh bench WORK MODULE [ARGS...]
#       runs `python -m scripts.bench.MODULE ARGS` on what start installed and built, in the foreground with
#       the run's environment, its output in WORK/logs/bench-MODULE.log (numbered as rerun numbers) and a line
#       in the summary; chain it after a run: until grep -q '^done' WORK/logs/summary; do sleep 5; done; ...
#   env/gpu_host.sh wait WORK
#       blocks until the latest start or rerun has written `done` (or its install failed), printing the
#       summary's lines as they come; exits 1 when the install or any notebook failed (rc not 0) or the run
#       stopped without `done`. For CI and any session that outlasts the run; short sessions use collect.
#   env/gpu_host.sh check WORK [PYTEST_ARGS...]
#       pytest tests/notebooks/test_recorded.py on what the run recorded (TUTORIAL_BUILD_DIR=WORK/build), in the
#       foreground with the run's environment; its output also in WORK/logs/check.log and a line in the summary.
#   env/gpu_host.sh collect WORK DEST
#       packs what the run has made so far (executed notebooks, logs, build/ without weights) into
#       DEST/run.tgz, and prints the progress.
#
# Every executed copy records the commit it ran (scripts/lab/provenance.py), but WORK/src is copied without
# .git: start takes the commit here, `git rev-parse HEAD` and whether tracked files differ from it, when this
# checkout is a git repository of its own, and otherwise from the caller, who knows it (a tree sent to a lent
# machine has no .git either):
#   TUTORIAL_COMMIT=<sha> TUTORIAL_DIRTY=0|1 env/gpu_host.sh start ...
# (start refuses to run without one). It keeps them in WORK/provenance and gives them to the background run;
# rerun gives the same ones, unless the caller sets TUTORIAL_COMMIT or TUTORIAL_DIRTY (TUTORIAL_DIRTY=1 after
# changing WORK/src by hand).
set -u
cmd=${1:?usage: env/gpu_host.sh start|rerun|wait|check|bench|collect ...}
shift

# The notebooks, one by one, each with its own log, in the background (setsid: the run outlives the shell
# that starts it). Arguments: WORK PROFILE NOTEBOOK... -- OPTIONS; with INSTALL_FROM set, the wheels first.
# The environment the notebooks and benches of a run see (WORK as the argument): the run's venv first on
# PATH, a UTF-8 locale, unbuffered output, build/ under WORK. Exported for the background run's own bash.
run_environment() {
    export PATH="$1/venv/bin:$PATH" LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1 TUTORIAL_BUILD_DIR="$1/build"
}
export -f run_environment

# TUTORIAL_COMMIT and TUTORIAL_DIRTY for start, checked and written to WORK/provenance (WORK as the argument):
# git's when this checkout is a repository of its own (a TUTORIAL_COMMIT that contradicts it is an error),
# else the caller's. Returns 2 with the reason when there is none.
record_provenance() {
    local head
    if head=$(git rev-parse --verify -q HEAD 2>/dev/null) \
            && [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ]; then
        if [ -n "${TUTORIAL_COMMIT:-}" ] && [ "${head#"$TUTORIAL_COMMIT"}" = "$head" ]; then
            echo "TUTORIAL_COMMIT=$TUTORIAL_COMMIT but this checkout is at $head: unset it (git tells the commit here)" >&2
            return 2
        fi
        TUTORIAL_COMMIT=$head TUTORIAL_DIRTY=0
        [ -n "$(git status --porcelain --untracked-files=no)" ] && TUTORIAL_DIRTY=1
    elif [ -z "${TUTORIAL_COMMIT:-}" ]; then
        echo "$(pwd) is no git checkout, so the commit the copies record must come from you:" \
             "TUTORIAL_COMMIT=<sha> TUTORIAL_DIRTY=0|1 env/gpu_host.sh start ..." >&2
        return 2
    fi
    export TUTORIAL_COMMIT TUTORIAL_DIRTY=${TUTORIAL_DIRTY-}
    printf 'TUTORIAL_COMMIT=%q\nTUTORIAL_DIRTY=%q\n' "$TUTORIAL_COMMIT" "$TUTORIAL_DIRTY" >"$1/provenance"
}

# For rerun: what start recorded in WORK/provenance, where the caller sets no other value.
recorded_provenance() {
    local commit=${TUTORIAL_COMMIT-} dirty=${TUTORIAL_DIRTY-}
    [ -f "$1/provenance" ] && . "$1/provenance"
    export TUTORIAL_COMMIT=${commit:-${TUTORIAL_COMMIT-}} TUTORIAL_DIRTY=${dirty:-${TUTORIAL_DIRTY-}}
}

run_in_background() {
    rm -f "$1/logs/run.pid"  # the background run writes its own: wait tells a live run by it
    setsid bash -c '
        work=$1 profile=$2; shift 2
        echo $$ >"$work/logs/run.pid"
        cd "$work/src" || exit 1
        nb=(); while [ "$1" != "--" ]; do nb+=("$1"); shift; done; shift
        if [ -n "${INSTALL_FROM:-}" ]; then
            start=$(date +%s)
            python3 env/wheelhouse.py install --from "$INSTALL_FROM"/part* --target "$work/site" \
                --venv "$work/venv" --repo "$work/src" >"$work/logs/install.log" 2>&1 \
                || { echo "install failed: see install.log" >>"$work/logs/summary"; exit 1; }
            echo "install $(( $(date +%s) - start )) s" >>"$work/logs/summary"
        fi
        run_environment "$work"
        for n in "${nb[@]}"; do
            if [ -e "$work/logs/$n.log" ]; then  # a rerun: keep the earlier log and copy, numbered
                i=1; while [ -e "$work/logs/$n.$i.log" ]; do i=$((i + 1)); done
                mv "$work/logs/$n.log" "$work/logs/$n.$i.log"
                mkdir -p "$work/executed/$i"
                for f in "$work/executed/$n"_*.ipynb; do [ -e "$f" ] && mv "$f" "$work/executed/$i/"; done
            fi
            t=$(date +%s)
            echo "$n running since $(date -u +%T)" >>"$work/logs/summary"
            python -m scripts.lab.run_notebooks --profile "$profile" --only "$n" \
                --out "$work/executed" "$@" >"$work/logs/$n.log" 2>&1
            echo "$n rc=$? $(( $(date +%s) - t )) s" >>"$work/logs/summary"
        done
        echo "done" >>"$work/logs/summary"
    ' gpu_host "$@" </dev/null >>"$1/logs/pipeline.log" 2>&1 &
}

# A numbered earlier copy of a log (name.log -> name.1.log, name.2.log, ...): reruns keep what came before.
keep_earlier_log() {
    local log=$1 i=1
    [ -e "$log" ] || return 0
    while [ -e "${log%.log}.$i.log" ]; do i=$((i + 1)); done
    mv "$log" "${log%.log}.$i.log"
}

# The summary's lines since the latest `start` or `rerun` line.
latest_run() {
    awk '/^(start|rerun) /{n=0; delete l} {l[++n]=$0} END{for (i=1; i<=n; i++) print l[i]}' "$1/logs/summary" 2>/dev/null
}

case "$cmd" in
start)
    profile=$1 parts=$2 work=$3
    shift 3
    notebooks=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do notebooks+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    mkdir -p "$work/logs"
    record_provenance "$work" || exit 2
    rm -rf "$work/src"
    mkdir -p "$work/src"
    echo "start $profile ${notebooks[*]} at $(date -u +%T)" >>"$work/logs/summary"
    # the checkout, without the wheel parts or anything built here
    tar --exclude='./.whl*' --exclude='./build' --exclude='./.venv' --exclude='./.git' -cf - . \
        | tar -xf - -C "$work/src"
    INSTALL_FROM=$parts run_in_background "$work" "$profile" "${notebooks[@]}" -- "$@"
    echo "started: $profile at $TUTORIAL_COMMIT${TUTORIAL_DIRTY:+ (dirty=$TUTORIAL_DIRTY)}, notebooks ${notebooks[*]}; progress in $work/logs/summary"
    ;;
rerun)
    profile=$1 work=$2
    shift 2
    notebooks=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do notebooks+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    [ -x "$work/venv/bin/python" ] || { echo "$work has no installed run: env/gpu_host.sh start first" >&2; exit 2; }
    recorded_provenance "$work"
    echo "rerun $profile ${notebooks[*]} at $(date -u +%T)" >>"$work/logs/summary"
    INSTALL_FROM='' run_in_background "$work" "$profile" "${notebooks[@]}" -- "$@"
    echo "rerun: $profile, notebooks ${notebooks[*]}; progress in $work/logs/summary"
    ;;
bench)
    work=$1 module=$2
    shift 2
    [ -x "$work/venv/bin/python" ] || { echo "$work has no installed run: env/gpu_host.sh start first" >&2; exit 2; }
    log="$work/logs/bench-$module.log"
    keep_earlier_log "$log"
    t=$(date +%s)
    echo "bench $module running since $(date -u +%T)" >>"$work/logs/summary"
    (cd "$work/src" && run_environment "$work" && python -m "scripts.bench.$module" "$@") >"$log" 2>&1
    rc=$?
    echo "bench $module rc=$rc $(( $(date +%s) - t )) s" >>"$work/logs/summary"
    exit $rc
    ;;
wait)
    work=$1
    [ -e "$work/logs/summary" ] || { echo "$work has no run: env/gpu_host.sh start first" >&2; exit 2; }
    shown=0 waited=0
    while :; do
        lines=$(latest_run "$work")
        total=$(printf '%s\n' "$lines" | grep -c .)
        [ "$total" -gt "$shown" ] && printf '%s\n' "$lines" | tail -n "+$((shown + 1))" && shown=$total
        if grep -q '^install failed' <<<"$lines"; then
            echo "the install failed: $work/logs/install.log" >&2
            tail -n 30 "$work/logs/install.log" >&2 2>/dev/null
            exit 1
        fi
        grep -qx 'done' <<<"$lines" && break
        if [ -e "$work/logs/run.pid" ]; then
            if ! kill -0 "$(cat "$work/logs/run.pid")" 2>/dev/null; then
                sleep 1  # it may have written `done` as it ended
                grep -qx 'done' <<<"$(latest_run "$work")" && continue
                echo "the run stopped without writing done: see $work/logs/pipeline.log" >&2
                exit 1
            fi
        elif [ "$((waited += 1))" -gt 30 ]; then
            echo "no run started in $work (no logs/run.pid): see $work/logs/pipeline.log" >&2
            exit 1
        fi
        sleep "${GPU_HOST_POLL_S:-10}"
    done
    failed=$(grep -E '^[0-9][0-9] rc=' <<<"$lines" | grep -v ' rc=0 ' | cut -d' ' -f1,2 | tr '\n' ' ')
    if [ -n "$failed" ]; then
        echo "failed: $failed(their logs: $work/logs/NN.log)" >&2
        exit 1
    fi
    echo "every notebook of the run finished with rc=0"
    ;;
check)
    work=$1
    shift
    [ -x "$work/venv/bin/python" ] || { echo "$work has no installed run: env/gpu_host.sh start first" >&2; exit 2; }
    log="$work/logs/check.log"
    keep_earlier_log "$log"
    (cd "$work/src" && run_environment "$work" && python -m pytest -q tests/notebooks/test_recorded.py "$@") 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    echo "check rc=$rc" >>"$work/logs/summary"
    exit "$rc"
    ;;
collect)
    work=$1 dest=$2
    mkdir -p "$dest"
    cat "$work/logs/summary" 2>/dev/null
    (cd "$work" && find logs executed build -type f -size -4M \
        ! -name '*.safetensors' ! -name '*.bin' ! -name '*.pt' ! -path '*__pycache__*' 2>/dev/null \
        | tar -czf "$dest/run.tgz" -T -)
    ls -la "$dest/run.tgz"
    ;;
*)
    echo "unknown command $cmd: start, rerun, wait, check, bench or collect" >&2
    exit 2
    ;;
esac
