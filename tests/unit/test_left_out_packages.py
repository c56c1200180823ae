"""env/setup_env.sh removes packages that other packages pull in but that break or slow this stack
(torchvision and friends break `import vllm`; rfc3987-syntax adds about 2 s to every `import ray`).
The lock leaves them out, env/lock.sh drops them when it re-freezes, and the environment that runs
these tests has none of them."""
import importlib.metadata as md
import re

from scripts.paths import REPO_ROOT

ENV = REPO_ROOT / "env"


def left_out() -> set[str]:
    names = set()
    for line in (ENV / "setup_env.sh").read_text().splitlines():
        match = re.match(r"\$pip uninstall -q -y ([\w\- ]+?) 2>/dev/null", line)
        if match:
            names |= set(match.group(1).split())
    return names


def test_setup_lock_and_lock_script_agree_on_what_is_left_out():
    names = left_out()
    assert {"torchvision", "torchaudio", "torchcodec", "rfc3987-syntax"} <= names
    locked = {line.split("==")[0].lower() for line in (ENV / "requirements-cpu.lock").read_text().splitlines()
              if "==" in line and not line.startswith("#")}
    assert not names & locked
    (dropped,) = re.findall(r"grep -viE '\^\(([^)]*)\)=='", (ENV / "lock.sh").read_text())
    assert set(dropped.split("|")) == names


def test_the_environment_has_none_of_them():
    installed = set()
    for name in left_out():
        try:
            md.version(name)
            installed.add(name)
        except md.PackageNotFoundError:
            pass
    assert not installed, f"installed, though env/setup_env.sh removes them (it says why): {sorted(installed)}"
