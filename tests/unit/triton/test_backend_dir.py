"""scripts.triton.backend_dir: the backend directory the wheel's tritonserver runs with."""
import subprocess

from scripts.triton.backend_dir import prepare_backend_dir


def test_backend_dir_has_stub_and_vllm_backend(tmp_path):
    d = prepare_backend_dir(tmp_path / "backends")
    assert (d / "python" / "triton_python_backend_stub").is_file()
    assert (d / "python" / "libtriton_python.so").is_file()
    assert (d / "vllm" / "model.py").read_text().count("TritonPythonModel")


def test_backend_dir_can_be_prepared_while_a_stub_runs(tmp_path):
    d = prepare_backend_dir(tmp_path / "backends")
    stub = d / "python" / "triton_python_backend_stub"
    inode = stub.stat().st_ino
    running = subprocess.Popen([str(stub)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        prepare_backend_dir(tmp_path / "backends")  # no "Text file busy"
        assert stub.is_file()
        # unchanged, the stub stays the same file: a running stub's executable does not become "(deleted)"
        assert stub.stat().st_ino == inode
    finally:
        running.kill()
        running.wait()
