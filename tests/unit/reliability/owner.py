"""A process that owns a real tritonserver, as a Serve replica does: it starts one on the model
repository given, prints what it started as one JSON line, and waits to be killed.

    python tests/unit/reliability/owner.py REPOSITORY
"""
import json
import signal
import sys
import time

from scripts.procs.process_guard import live_group_members, shm_files_of
from scripts.triton.server import TritonServer

if __name__ == "__main__":
    server = TritonServer(sys.argv[1], extra_args=("--model-control-mode=explicit", "--load-model=ensemble"))
    server.start(timeout_s=300, retries=1)
    signal.signal(signal.SIGTERM, lambda *_: (server.stop(), sys.exit(0)))
    members = live_group_members(server.pid)
    print(json.dumps({"pid": server.pid, "http_url": server.http_url, "grpc_url": server.grpc_url,
                      "metrics_url": server.metrics_url, "shm_prefix": server.command.shm_prefix, "log": str(server.log_path),
                      "members": members}), flush=True)
    while True:
        time.sleep(60)
