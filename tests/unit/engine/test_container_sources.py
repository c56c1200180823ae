"""The NGC image has no TensorRT-LLM examples/ (server@r25.02:build.py installs the TensorRT-LLM wheel
and copies only libtriton_tensorrtllm*.so and trtllmExecutorWorker): the Dockerfile clones them at the
container's version and the gpu-trtllm profile points at the clone. Nothing else is cloned: the
tutorial's own templates, fill_template and launcher replace tensorrtllm_backend's all_models/ and tools/."""
import re
import shlex

import pytest

from scripts.engine import config as engine
from scripts.paths import REPO_ROOT
from scripts.profiles import load_profile

DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()
# nvcr.io/nvidia/tritonserver:25.02-trtllm-python-py3 ships TensorRT-LLM 0.17 and tensorrtllm_backend
# v0.17.0; tensorrtllm_backend@v0.17.0:README.md asks for the backend of the same version as the
# container's TensorRT-LLM.
CONTAINER = "nvcr.io/nvidia/tritonserver:25.02-trtllm-python-py3"
VERSIONS = {"https://github.com/NVIDIA/TensorRT-LLM.git": "v0.17.0"}


def instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"^\s*#.*\n", "", DOCKERFILE, flags=re.M)
    return [line.strip() for line in text.replace("\\\n", " ").splitlines() if line.strip()]


def clones() -> dict[str, tuple[str, str]]:
    """url -> (branch, destination) of every `git clone` in a RUN."""
    found = {}
    for line in instructions():
        for m in re.finditer(r"git clone ([^&|;]+)", line):
            words = shlex.split(m.group(1))
            assert words[:2] == ["--depth", "1"] and words[2] == "--branch", f"clone not shallow and pinned: {words}"
            found[words[4]] = (words[3], words[5])
    return found


@pytest.fixture
def gpu_profile(build_root, monkeypatch):
    monkeypatch.delenv("TRTLLM_EXAMPLES_DIR", raising=False)
    return load_profile("gpu-trtllm")


def test_the_image_is_the_25_02_trtllm_container():
    assert [i for i in instructions() if i.startswith("FROM")] == [f"FROM {CONTAINER}"]


def test_both_sources_are_cloned_shallow_at_the_containers_versions():
    found = clones()
    assert {url: branch for url, (branch, _) in found.items()} == VERSIONS
    assert not any(branch == "main" for branch, _ in found.values())


def test_profile_points_at_the_clone(gpu_profile):
    trtllm = clones()["https://github.com/NVIDIA/TensorRT-LLM.git"][1]
    assert str(gpu_profile.path("trtllm_examples_dir")) == f"{trtllm}/examples"


def test_every_clone_is_read_by_the_code(gpu_profile):
    """A clone nothing reads only costs build time: each clone holds a path setting of the profile that
    scripts/ reads (``profile.path("<key>")``), and every such setting lies in a clone."""
    code = "\n".join(f.read_text() for f in (REPO_ROOT / "scripts").rglob("*.py"))
    read = {k: str(gpu_profile.path(k)) for k in gpu_profile
            if f"{k}_env" in gpu_profile and f'path("{k}")' in code}
    under = {url: [k for k, p in read.items() if p.startswith(dest + "/") or p == dest]
             for url, (_, dest) in clones().items()}
    assert all(under.values()), f"cloned but read by no code: {[u for u, keys in under.items() if not keys]}"
    unread = [k for k in gpu_profile if k.endswith("_dir") and f"{k}_env" in gpu_profile
              and str(gpu_profile[k]).startswith("/opt/src") and k not in read]
    assert not unread, f"profile settings for a clone that no code reads: {unread}"


def test_convert_checkpoint_comes_from_the_cloned_examples(gpu_profile):
    """tensorrtllm_backend@v0.17.0:docs/llama.md runs tensorrt_llm/examples/llama/convert_checkpoint.py
    (the TensorRT-LLM v0.17.0 tree; later releases moved it to examples/models/core/llama)."""
    convert, build = engine.trtllm_build_commands(gpu_profile)
    trtllm = clones()["https://github.com/NVIDIA/TensorRT-LLM.git"][1]
    assert convert[1] == f"{trtllm}/examples/llama/convert_checkpoint.py"
    assert build[0] == "trtllm-build"


def test_image_env_repeats_the_profiles_paths(gpu_profile):
    env = dict(re.findall(r"\b(TRTLLM_EXAMPLES_DIR)=(\S+)", " ".join(i for i in instructions() if i.startswith("ENV"))))
    assert env == {"TRTLLM_EXAMPLES_DIR": str(gpu_profile.path("trtllm_examples_dir"))}


def test_no_requirements_of_the_clones_are_installed():
    """`pip install -r` of TensorRT-LLM's requirements would replace the container's TensorRT-LLM and torch."""
    installs = [i for i in instructions() if "pip" in i and " install" in i]
    assert installs and all("/opt/src" not in i and "requirements.txt" not in i for i in installs), installs
    assert "Cloning `main`" in DOCKERFILE and "0.17 wheel" in DOCKERFILE
