"""The `docker run` line for the gpu-trtllm container: the same in the Dockerfile and in
docs/run-on-your-gpu.md, with every flag the container needs; and no time field named in the wrong unit."""
import re
import shlex

import pytest

from scripts.paths import REPO_ROOT
from scripts.profiles import load_profile

DOCS = REPO_ROOT / "docs" / "run-on-your-gpu.md"


def docker_run_in(text: str, comment: str = "") -> list[str]:
    """The words of the one `docker run ... llm-tutorial-gpu` command in ``text``."""
    lines = [line.strip()[len(comment):].strip() if comment else line.strip() for line in text.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("docker run"))
    command = []
    for line in lines[start:]:
        command.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return shlex.split(" ".join(command))


@pytest.fixture(scope="module")
def commands():
    return {"Dockerfile": docker_run_in((REPO_ROOT / "Dockerfile").read_text(), comment="#"),
            "docs": docker_run_in(DOCS.read_text()),
            "README": docker_run_in((REPO_ROOT / "README.md").read_text())}


def has(words, *flag):
    return any(words[i:i + len(flag)] == list(flag) for i in range(len(words)))


def test_dockerfile_readme_and_docs_give_the_same_command(commands):
    assert commands["Dockerfile"] == commands["docs"] == commands["README"]


def test_the_command_has_what_the_container_needs(commands):
    """--ulimit memlock=-1 --ulimit stack=67108864: tensorrtllm_backend@v0.17.0:README.md
    ("Launch Triton TensorRT-LLM container")."""
    words = commands["docs"]
    assert has(words, "--gpus", "all") and has(words, "--ipc=host")
    assert has(words, "--ulimit", "memlock=-1") and has(words, "--ulimit", "stack=67108864")
    assert has(words, "-e", "TUTORIAL_BIND_HOST=0.0.0.0")
    published = {w.rsplit(":", 1)[-1] for i, w in enumerate(words) if i and words[i - 1] == "-p"}
    assert published == {"8888", "8000", "8265"}
    assert all(words[i + 1].startswith("127.0.0.1:") for i, w in enumerate(words) if w == "-p")
    assert words[-1] == "llm-tutorial-gpu"


def test_the_model_is_mounted_at_the_profiles_model_dir(commands):
    profile = load_profile("gpu-trtllm")
    model_dir, env = str(profile["model_dir"]), profile["model_dir_env"]
    words = commands["docs"]
    assert env == "LLAMA_MODEL_DIR"
    assert has(words, "-e", f"{env}={model_dir}") and has(words, "-v", f"${env}:{model_dir}:ro")


def test_docs_name_the_driver_toolkit_and_the_bind_host_default():
    text = DOCS.read_text()
    assert "NVIDIA Container Toolkit" in text and "driver" in text
    assert "TUTORIAL_BIND_HOST" in text and "127.0.0.1" in text


def test_no_microsecond_field_is_named_in_milliseconds():
    """Triton's max_queue_delay_microseconds is in microseconds: no variable calls it *_MS."""
    wrong = re.compile(r"queue_delay_(ms|millis)\b", re.I)
    roots = [REPO_ROOT / d for d in ("scripts", "docs", "notebooks", "env", "model_repository", ".github")]
    files = [REPO_ROOT / "README.md", REPO_ROOT / "Dockerfile", *(p for r in roots if r.is_dir()
                                                                 for p in r.rglob("*") if p.is_file())]
    hits = [f"{p.relative_to(REPO_ROOT)}:{m.group(0)}" for p in files if p.suffix not in (".pyc",)
            for m in wrong.finditer(p.read_text(errors="ignore"))]
    assert hits == []


def test_the_published_dashboard_port_reaches_a_dashboard_listening_beyond_loopback(commands):
    """Ray's `ray start` binds its dashboard to localhost unless --dashboard-host says otherwise
    (ray 2.60 scripts.py); inside the container the published port needs it on every interface."""
    from ray._private.ray_constants import DEFAULT_DASHBOARD_PORT
    from ray.scripts.scripts import start

    default_host = next(p.default for p in start.params if p.name == "dashboard_host")
    default_host = default_host() if callable(default_host) else default_host
    assert default_host in ("127.0.0.1", "localhost", "::1")  # why the flag is needed at all
    starts = [shlex.split(line.split("#")[0]) for line in DOCS.read_text().splitlines()
              if line.strip().startswith("ray start")]
    assert starts, "the docs show no `ray start` for the published dashboard port"
    published = {w.rsplit(":", 1)[-1] for i, w in enumerate(commands["docs"]) if i and commands["docs"][i - 1] == "-p"}
    for words in starts:
        assert "--dashboard-host" in words, words
        assert words[words.index("--dashboard-host") + 1] in ("0.0.0.0", "$TUTORIAL_BIND_HOST"), words
        port = words[words.index("--dashboard-port") + 1] if "--dashboard-port" in words else str(DEFAULT_DASHBOARD_PORT)
        assert port in published
