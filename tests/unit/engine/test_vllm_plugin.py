import os
import subprocess
import sys
from importlib.metadata import entry_points

from scripts.engine import vllm_plugin


def test_the_plugin_is_registered_for_vllm():
    plugins = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert plugins.get("request_amx") == "scripts.engine.vllm_plugin:request_amx", plugins


def test_request_amx_asks_only_where_the_cpu_has_amx(monkeypatch):
    import torch

    calls = []
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch._C._cpu, "_init_amx", lambda: calls.append(1) or True)
    assert vllm_plugin.request_amx() is False and not calls
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert vllm_plugin.request_amx() is True and calls == [1]


def test_vllm_loads_the_plugin_in_a_fresh_process():
    code = ("import vllm.plugins, scripts.engine.vllm_plugin as p\n"
            "seen = []\n"
            "real = p.request_amx\n"
            "p.request_amx = lambda: seen.append(real()) or seen[-1]\n"
            "vllm.plugins.load_general_plugins()\n"
            "print(seen)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=os.environ | {"VLLM_LOGGING_LEVEL": "ERROR"})
    assert out.returncode == 0, out.stderr[-2000:]
    import torch

    assert out.stdout.split()[-1] == f"[{torch.cpu._is_amx_tile_supported()}]"
