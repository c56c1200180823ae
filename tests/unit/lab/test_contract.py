"""scripts.lab.contract: the contract file's pins and tests, the overlay and what it imports."""
import pytest

from scripts.lab import contract as c


def test_the_gpu_trtllm_contract_names_existing_tests_and_pins_transformers_4_47():
    gpu = c.read_contract("gpu-trtllm")
    assert gpu.pins["transformers"].startswith("4.47.") and "tests/contract" in gpu.tests
    assert len(gpu.tests) == len(set(gpu.tests)) > 5


def test_bad_contract_files_are_refused_with_the_line(tmp_path):
    (tmp_path / "p.txt").write_text("transformers>=4.47\n# test: tests/contract\n")
    with pytest.raises(ValueError, match=r"p.txt:1: 'transformers>=4.47' is not a pin"):
        c.read_contract("p", tmp_path)
    (tmp_path / "p.txt").write_text("transformers==4.47.1\n# test: tests/nowhere\n")
    with pytest.raises(ValueError, match="p.txt:2: the test 'tests/nowhere' does not exist"):
        c.read_contract("p", tmp_path)
    (tmp_path / "p.txt").write_text("transformers==4.47.1\n")
    with pytest.raises(ValueError, match="no pin or no test"):
        c.read_contract("p", tmp_path)
    with pytest.raises(FileNotFoundError, match="no contract for profile 'q'.*'p'"):
        c.read_contract("q", tmp_path)


def test_an_overlay_comes_first_for_the_tests(tmp_path, monkeypatch, build_root):
    """A site holding a package's dist-info is what the tests' interpreter finds (a tiny stand-in
    distribution, so that no download is needed here; `make test-contract` installs the real pins)."""
    contract = c.Contract("demo", {"contract-demo-pkg": "1.2.3"}, ("tests/contract",))
    assert c.missing_pins(contract) == {"contract-demo-pkg": "1.2.3"}
    info = contract.site / "contract_demo_pkg-1.2.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: contract-demo-pkg\nVersion: 1.2.3\n")
    assert c.missing_pins(contract) == {} and c.installed(contract.site) == {"contract-demo-pkg": "1.2.3"}
    assert c.in_effect(contract) == {"contract-demo-pkg": "1.2.3"}
    env = c.environment(contract, {"PYTHONPATH": "/x"})
    assert env["PYTHONPATH"].split(":") == [str(contract.site), "/x"] and env[c.CONTRACT_ENV] == "demo"
