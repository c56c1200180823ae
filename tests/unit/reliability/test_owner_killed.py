"""The owner of a real Triton (the cpu ensemble with vLLM) is killed with SIGKILL: within 10 s
nothing of its Triton is left, neither the server, its stubs and vLLM's engine processes, nor a
``/dev/shm`` file they used (Triton's regions, vLLM's ``psm_*`` buffers, ``sem.mp-*`` semaphores).
It runs after the bad-input tests of this folder, which share the same Triton."""
import os
import signal
import time

from scripts.procs.process_guard import is_running, rpc_dir, shm_files_of


def test_sigkill_of_the_owner_leaves_no_process_and_no_shared_memory(owned_triton):
    assert owned_triton.alive(), "the owner of the test's Triton died before this test"
    members = owned_triton.info["members"]
    shm = shm_files_of(members)
    assert len(members) >= 5 and any(p.name.startswith(owned_triton.info["shm_prefix"]) for p in shm), (members, shm)
    start = time.monotonic()
    os.kill(owned_triton.owner.pid, signal.SIGKILL)
    owned_triton.owner.wait()
    while time.monotonic() - start < 10 and ([p for p in members if is_running(p)] or [f for f in shm if f.exists()]):
        time.sleep(0.1)
    left = [p for p in members if is_running(p)]
    print(f"{len(members)} processes and {len(shm)} /dev/shm files of Triton gone {time.monotonic() - start:.1f} s after "
          "its owner's SIGKILL")
    assert not left, f"still running 10 s after the owner's SIGKILL: {left}"
    assert not [f for f in shm if f.exists()], "shared memory left behind"
    assert not rpc_dir(owned_triton.info["shm_prefix"]).exists(), "the engines' socket folder left behind"
