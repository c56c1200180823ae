"""env/gpu_host.sh: the background run of a GPU profile's notebooks and the packing of what it made.

The script runs in a stand-in checkout whose wheelhouse install and notebook runner only record how
they were called, so the test sees the control flow (order, arguments, a failing notebook not
stopping the next, a failed install stopping all) without a GPU host.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from scripts.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "env" / "gpu_host.sh"

FAKE_INSTALL = """import os, sys
a = sys.argv
if not any(os.listdir(p) for p in a[a.index("--from") + 1:a.index("--target")]):
    sys.exit("no wheels")
venv = a[a.index("--venv") + 1]
os.makedirs(venv + "/bin", exist_ok=True)
os.symlink(sys.executable, venv + "/bin/python")
"""
FAKE_RUNNER = """import os, sys
print(sys.argv[1:])
print(os.environ.get("TUTORIAL_COMMIT"), os.environ.get("TUTORIAL_DIRTY"))
sys.exit(3 if "01" in sys.argv else 0)
"""
#: what a caller whose tree has no .git says it is (the stand-in checkout below has none)
GIVEN = {"TUTORIAL_COMMIT": "a" * 40, "TUTORIAL_DIRTY": "0"}


def gpu_host(*args, cwd=None, env=None, **kwargs):
    """env/gpu_host.sh ARGS with this environment plus ``env``, TUTORIAL_COMMIT/DIRTY unset unless given."""
    base = {k: v for k, v in os.environ.items() if k not in {"TUTORIAL_COMMIT", "TUTORIAL_DIRTY"}}
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], cwd=cwd, env=base | (env or {}), timeout=30,
                          **kwargs)


def argv_line(log: Path) -> str:
    return log.read_text().splitlines()[0]


def provenance_line(log: Path) -> str:
    return log.read_text().splitlines()[1]


def checkout(tmp_path: Path) -> Path:
    src = tmp_path / "checkout"
    (src / "env").mkdir(parents=True)
    (src / "scripts" / "lab").mkdir(parents=True)
    (src / "env" / "wheelhouse.py").write_text(FAKE_INSTALL)
    (src / "scripts" / "lab" / "run_notebooks.py").write_text(FAKE_RUNNER)
    for package in ("scripts", "scripts/lab"):  # regular packages: they win over another `scripts` on the path
        (src / package / "__init__.py").write_text("")
    (src / ".whl-parts").mkdir()
    return src


def summary_when_done(work: Path, timeout: float = 30) -> str:
    path = work / "logs" / "summary"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.is_file() else ""
        if "done" in text or "install failed" in text:
            return text
        time.sleep(0.1)
    raise AssertionError(f"the background run did not finish: {path}")


def test_start_runs_each_notebook_with_the_options_and_goes_on_past_a_failure(tmp_path):
    src, parts, work = checkout(tmp_path), tmp_path / "parts", tmp_path / "work"
    (parts / "part1").mkdir(parents=True)
    (parts / "part1" / "a.whl").write_text("")
    gpu_host("start", "gpu-vllm", parts, work, "00", "01", "07", "--", "--full", "-p", "CONCURRENCY", "[1, 32]",
             cwd=src, env=GIVEN, check=True)
    text = summary_when_done(work)
    assert "00 rc=0" in text and "01 rc=3" in text and "07 rc=0" in text
    assert text.index("00 rc") < text.index("01 rc") < text.index("07 rc")
    assert argv_line(work / "logs" / "07.log") == str(
        ["--profile", "gpu-vllm", "--only", "07", "--out", str(work / "executed"), "--full", "-p", "CONCURRENCY", "[1, 32]"])
    assert provenance_line(work / "logs" / "07.log") == f"{'a' * 40} 0"  # each notebook's run gets the commit
    assert not (work / "src" / ".whl-parts").exists()  # the wheels are not copied with the checkout


def test_a_failed_install_runs_no_notebook(tmp_path):
    src, parts, work = checkout(tmp_path), tmp_path / "parts", tmp_path / "work"
    (parts / "part1").mkdir(parents=True)
    gpu_host("start", "gpu-vllm", parts, work, "00", cwd=src, env=GIVEN, check=True)
    assert "install failed" in summary_when_done(work)
    assert not (work / "logs" / "00.log").exists()


def test_collect_packs_notebooks_logs_and_build_without_weights(tmp_path):
    work, dest = tmp_path / "work", tmp_path / "out"
    for name in ("logs/summary", "executed/07_benchmark_and_monitor.ipynb", "build/results/07.json",
                 "build/models/m/model.safetensors", "build/models/m/config.json"):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text("x")
    subprocess.run(["bash", str(SCRIPT), "collect", str(work), str(dest)], check=True, timeout=30, capture_output=True)
    with tarfile.open(dest / "run.tgz") as tar:
        names = sorted(tar.getnames())
    assert names == ["build/models/m/config.json", "build/results/07.json", "executed/07_benchmark_and_monitor.ipynb",
                     "logs/summary"]


def test_rerun_runs_notebooks_again_on_the_installed_run_and_keeps_the_earlier_copy(tmp_path):
    src, parts, work = checkout(tmp_path), tmp_path / "parts", tmp_path / "work"
    (parts / "part1").mkdir(parents=True)
    (parts / "part1" / "a.whl").write_text("")
    gpu_host("start", "gpu-vllm", parts, work, "00", "06", cwd=src, env=GIVEN, check=True)
    summary_when_done(work)
    (work / "executed").mkdir(exist_ok=True)
    (work / "executed" / "06_troubleshoot_gpu_resources.ipynb").write_text("the first try")
    (work / "logs" / "summary").write_text("")
    gpu_host("rerun", "gpu-vllm", work, "06", "--", "-p", "06:INSTANCE_COUNT", "2", check=True)
    text = summary_when_done(work)
    assert "06 rc=0" in text and "install" not in text  # nothing installed again
    assert argv_line(work / "logs" / "06.log") == str(
        ["--profile", "gpu-vllm", "--only", "06", "--out", str(work / "executed"), "-p", "06:INSTANCE_COUNT", "2"])
    assert provenance_line(work / "logs" / "06.log") == f"{'a' * 40} 0"  # the commit start recorded
    assert argv_line(work / "logs" / "06.1.log").startswith("['--profile', 'gpu-vllm', '--only', '06'")
    assert (work / "executed" / "1" / "06_troubleshoot_gpu_resources.ipynb").read_text() == "the first try"
    # WORK/src changed by hand before a rerun: the caller says so, and the copies record it
    (work / "logs" / "summary").write_text("")
    gpu_host("rerun", "gpu-vllm", work, "06", env={"TUTORIAL_DIRTY": "1"}, check=True)
    summary_when_done(work)
    assert provenance_line(work / "logs" / "06.log") == f"{'a' * 40} 1"


def test_start_without_git_needs_the_commit_from_the_caller_and_starts_nothing_without_it(tmp_path):
    src, parts, work = checkout(tmp_path), tmp_path / "parts", tmp_path / "work"
    (parts / "part1").mkdir(parents=True)
    (parts / "part1" / "a.whl").write_text("")
    done = gpu_host("start", "gpu-vllm", parts, work, "00", cwd=src, capture_output=True, text=True)
    assert done.returncode == 2 and "TUTORIAL_COMMIT=<sha> TUTORIAL_DIRTY=0|1 env/gpu_host.sh start" in done.stderr
    assert not (work / "src").exists() and not (work / "logs" / "summary").exists()


def git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_start_in_a_git_checkout_records_its_head_and_whether_a_tracked_file_changed(tmp_path):
    src, parts, work = checkout(tmp_path), tmp_path / "parts", tmp_path / "work"
    (parts / "part1").mkdir(parents=True)
    (parts / "part1" / "a.whl").write_text("")
    git(src, "init", "-q")
    git(src, "add", "env", "scripts")
    git(src, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "checkout")
    head = git(src, "rev-parse", "HEAD")
    (src / "notes.txt").write_text("untracked: not a change of the commit's files")
    gpu_host("start", "gpu-vllm", parts, work, "00", cwd=src, check=True)
    summary_when_done(work)
    assert provenance_line(work / "logs" / "00.log") == f"{head} 0"
    assert not (work / "src" / ".git").exists()
    (src / "env" / "wheelhouse.py").write_text(FAKE_INSTALL + "# changed\n")
    gpu_host("start", "gpu-vllm", parts, tmp_path / "work2", "00", cwd=src, check=True)
    summary_when_done(tmp_path / "work2")
    assert provenance_line(tmp_path / "work2" / "logs" / "00.log") == f"{head} 1"
    contradicting = gpu_host("start", "gpu-vllm", parts, tmp_path / "work3", "00", cwd=src,
                             env={"TUTORIAL_COMMIT": "0" * 40}, capture_output=True, text=True)
    assert contradicting.returncode == 2 and f"this checkout is at {head}" in contradicting.stderr
    assert not (tmp_path / "work3" / "src").exists()


def test_rerun_needs_an_installed_run(tmp_path):
    done = gpu_host("rerun", "gpu-vllm", tmp_path / "nothing", "06", capture_output=True, text=True)
    assert done.returncode == 2 and "env/gpu_host.sh start first" in done.stderr


def test_bench_runs_a_bench_module_on_the_installed_run_with_its_environment(tmp_path):
    src, parts, work = checkout(tmp_path), tmp_path / "parts", tmp_path / "work"
    (parts / "part1").mkdir(parents=True)
    (parts / "part1" / "a.whl").write_text("")
    (src / "scripts" / "bench").mkdir(parents=True)
    (src / "scripts" / "bench" / "__init__.py").write_text("")
    (src / "scripts" / "bench" / "probe.py").write_text(
        "import os, sys\nprint(sys.argv[1:], os.environ['TUTORIAL_BUILD_DIR'], os.environ['LC_ALL'])\n"
        "sys.exit(4 if '--fail' in sys.argv else 0)\n")
    gpu_host("start", "gpu-vllm", parts, work, "00", cwd=src, env=GIVEN, check=True)
    summary_when_done(work)
    ran = subprocess.run(["bash", str(SCRIPT), "bench", str(work), "probe", "--concurrency", "32", "256"], timeout=30)
    failed = subprocess.run(["bash", str(SCRIPT), "bench", str(work), "probe", "--fail"], timeout=30)
    assert ran.returncode == 0 and failed.returncode == 4
    assert (work / "logs" / "bench-probe.1.log").read_text().strip() == str(["--concurrency", "32", "256"]) + \
        f" {work / 'build'} C.UTF-8"
    summary = (work / "logs" / "summary").read_text()
    assert "bench probe rc=0" in summary and "bench probe rc=4" in summary


def wait(work: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "wait", str(work)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GPU_HOST_POLL_S": "0.2"})


def start(src: Path, parts: Path, work: Path, *notebooks: str) -> None:
    gpu_host("start", "gpu-vllm", parts, work, *notebooks, cwd=src, env=GIVEN, check=True)


def staged(tmp_path: Path) -> tuple[Path, Path, Path]:
    src, parts, work = checkout(tmp_path), tmp_path / "parts", tmp_path / "work"
    (parts / "part1").mkdir(parents=True)
    (parts / "part1" / "a.whl").write_text("")
    return src, parts, work


def test_wait_blocks_until_done_and_fails_when_a_notebook_failed(tmp_path):
    src, parts, work = staged(tmp_path)
    start(src, parts, work, "00", "07")
    done = wait(work)  # right after start, while the run goes on
    assert done.returncode == 0, done.stderr
    assert "00 rc=0" in done.stdout and "07 rc=0" in done.stdout and done.stdout.rstrip().endswith("rc=0")
    assert "start gpu-vllm 00 07 at" in (work / "logs" / "summary").read_text()
    shutil.rmtree(work)
    start(src, parts, work, "00", "01", "07")
    done = wait(work)
    assert done.returncode == 1 and "failed: 01 rc=3 " in done.stderr and "07 rc=0" in done.stdout


def test_wait_reads_only_the_latest_run_and_fails_on_a_failed_install(tmp_path):
    src, parts, work = staged(tmp_path)
    start(src, parts, work, "01")
    assert wait(work).returncode == 1
    gpu_host("rerun", "gpu-vllm", work, "00", check=True)
    done = wait(work)
    assert done.returncode == 0 and "01 rc=3" not in done.stdout, done.stdout
    (parts / "part1" / "a.whl").unlink()
    shutil.rmtree(work)
    start(src, parts, work, "00")
    done = wait(work)
    assert done.returncode == 1 and "the install failed" in done.stderr
    assert wait(tmp_path / "nothing").returncode == 2


def test_wait_fails_when_the_run_stops_without_done(tmp_path):
    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)
    (work / "logs" / "summary").write_text("start gpu-vllm 00 at 00:00:00\n00 running since 00:00:00\n")
    dead = subprocess.Popen(["true"])
    dead.wait()
    (work / "logs" / "run.pid").write_text(f"{dead.pid}\n")
    done = wait(work)
    assert done.returncode == 1 and "the run stopped without writing done" in done.stderr


def test_check_runs_the_recorded_values_tests_with_the_runs_build_dir(tmp_path):
    src, parts, work = staged(tmp_path)
    # a stand-in for pytest: `python -m pytest` in WORK/src imports this module first
    (src / "pytest.py").write_text("import os, sys\nprint(sys.argv[1:], os.environ['TUTORIAL_BUILD_DIR'])\n"
                                   "sys.exit(1 if '--fail' in sys.argv else 0)\n")
    start(src, parts, work, "00")
    assert wait(work).returncode == 0
    ok = subprocess.run(["bash", str(SCRIPT), "check", str(work)], capture_output=True, text=True, timeout=60)
    failed = subprocess.run(["bash", str(SCRIPT), "check", str(work), "--fail"], capture_output=True, text=True,
                            timeout=60)
    assert ok.returncode == 0 and failed.returncode == 1
    assert ok.stdout.strip() == str(["-q", "tests/notebooks/test_recorded.py"]) + f" {work / 'build'}"
    assert (work / "logs" / "check.1.log").read_text() == ok.stdout  # the earlier log is kept, numbered
    assert "check rc=0" in (work / "logs" / "summary").read_text() and "check rc=1" in (work / "logs" / "summary").read_text()
