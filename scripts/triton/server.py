"""Start, check and stop a real ``tritonserver`` (the ``launch_triton_server`` of this tutorial).

Why it is built this way, and the sources: docs/design/triton.md.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from scripts import envcheck
from scripts.triton import crashes
from scripts.procs.managed import ManagedServer
from scripts.procs.process_guard import rpc_dir, shm_segments
from scripts.procs.connections import end_own_connections, established_to
from scripts.procs.ports import free_port
from scripts.triton.backend_dir import prepare_backend_dir
from scripts.paths import triton_backend_dir, triton_log_path


def unprivileged_home(user: str | None) -> Path | None:
    """A HOME that ``user`` owns, under the build directory, for a server started with ``run_as``."""
    if user is None:
        return None
    if os.geteuid() != 0:
        raise PermissionError(f"running tritonserver as {user!r} needs root (setpriv changes the user): "
                              "run as root, or start the server as that user yourself")
    entry = user_entry(user)
    home = triton_backend_dir().parent / f"home-{user}"
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    return home


def user_entry(user: str):
    """``user``'s password entry (uid, primary gid); KeyError naming the user if there is none."""
    import pwd  # noqa: PLC0415

    try:
        return pwd.getpwnam(user)
    except KeyError:
        raise KeyError(f"no user {user!r} on this machine: give an existing unprivileged user, e.g. nobody") from None


class TritonStartError(RuntimeError):
    """The server exited or did not become ready; the message ends with its log tail. ``stalled``:
    the models whose load stalled after their initialize() returned (``crashes.stalled_loads``)."""

    def __init__(self, message: str, stalled: tuple[str, ...] = ()):
        super().__init__(message)
        self.stalled = stalled


#: How long a load may stay unfinished after the model's initialize() returned. It takes milliseconds: over
#: 152 loads of Python models in four fresh clones' make test and make run (two nbval lanes on two cores,
#: AMD EPYC, 2026-12-07) tritonserver logged "successfully loaded" at most 0.03 s after the model's
#: "initialize() ... returned" line. A stalled load never finishes; each second waited here is a second of
#: every stalled start (one in about three make test runs on that machine): 15 s, 500 times the worst seen.
STALLED_AFTER_S = 15


@dataclass
class ServerCommand:
    """The command line and environment of one server; built (and unit-tested) without running it."""

    model_repo: Path
    http_port: int
    grpc_port: int
    metrics_port: int
    backend_dir: Path | None
    shm_prefix: str
    exit_timeout_s: int = 5
    world_size: int = 1
    binary: Path = field(default_factory=envcheck.triton_binary)
    log_verbose: int = 0
    extra_args: tuple[str, ...] = ()
    engine_model: str = "tensorrt_llm"  # what ranks above 0 load
    run_as: str | None = None  # a user to run the server as (setpriv; needs root), e.g. "nobody"
    home: Path | None = None  # that user's writable HOME (vLLM and torch keep caches there)

    def server_args(self, rank: int = 0) -> list[str]:
        """One rank's command line. With several ranks (``mpirun``) it follows TensorRT-LLM's launcher
        (triton-inference-server/tensorrtllm_backend@v0.17.0:scripts/launch_triton_server.py, get_cmd):
        every rank gets ``--disable-auto-complete-config`` and its own shared-memory prefix; ranks
        above 0 load only the engine model, explicitly; options for the serving side (``extra_args``,
        such as this launcher's own model control) are rank 0's alone."""
        args = [
            str(self.binary),
            f"--model-repository={self.model_repo}",
            "--http-address=127.0.0.1", f"--http-port={self.http_port}",
            "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}",
            "--metrics-address=127.0.0.1", f"--metrics-port={self.metrics_port}",
            "--allow-cpu-metrics=true",
            f"--exit-timeout-secs={self.exit_timeout_s}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}{rank}_",
            f"--log-verbose={self.log_verbose}",
        ]
        if self.backend_dir is not None:
            args.insert(2, f"--backend-directory={self.backend_dir}")
        if self.world_size > 1:
            args.append("--disable-auto-complete-config")
        if rank == 0:
            args += self.extra_args
        else:  # only rank 0 serves; the others run the engine's workers
            args += ["--model-control-mode=explicit", f"--load-model={self.engine_model}"]
        return args

    def argv(self) -> list[str]:
        # setpriv (util-linux) drops root before exec: the server then reads the repository with that
        # user's permissions, as a production server started by an unprivileged service account does.
        user = []
        if self.run_as:
            if self.world_size > 1:
                raise ValueError("run_as works for one rank only: mpirun would start the ranks as root")
            entry = user_entry(self.run_as)
            user = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
        if self.world_size == 1:
            return user + self.server_args()
        argv = ["mpirun", "--allow-run-as-root"]
        for rank in range(self.world_size):
            argv += ["-n", "1", *self.server_args(rank), ":"]
        return argv[:-1]

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """PATH starts at this interpreter's bin (the stub finds its venv there); UTF-8 locale."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env.setdefault("LC_ALL", "C.UTF-8")
        env["PYTHONUNBUFFERED"] = "1"
        env["VLLM_RPC_BASE_PATH"] = str(rpc_dir(self.shm_prefix))  # removed with the group (stop_group)
        if self.home is not None:
            env["HOME"] = str(self.home)
        if self.backend_dir is not None and "pytriton" in str(self.binary):
            # The stub finds the wheel's bundled libraries (libcudart ...) through an RPATH relative to
            # where the wheel keeps it; our copy lives elsewhere, so point the loader at them.
            libs = envcheck.pytriton_root().parents[1] / "nvidia_pytriton.libs"
            env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(libs), env.get("LD_LIBRARY_PATH", "")) if p)
        return env


class TritonServer(ManagedServer):
    """One tritonserver process group: started on free ports, polled until ready, stopped by handle."""

    name = "tritonserver"
    start_error = TritonStartError
    #: Every server made in this process (weakly held): a test harness asks them which crashed.
    started: "weakref.WeakSet[TritonServer]" = weakref.WeakSet()

    def __init__(self, model_repo: str | Path, *, backend_dir: Path | None | str = "auto", exit_timeout_s: int = 5,
                 world_size: int = 1, log_path: Path | None = None, extra_args: tuple[str, ...] = (),
                 run_as: str | None = None):
        model_repo = Path(model_repo).resolve()
        if not model_repo.is_dir():
            raise FileNotFoundError(f"model repository {model_repo} does not exist: fill it first (notebook 02)")
        binary = envcheck.triton_binary()
        if backend_dir == "auto":  # the wheel's server needs our backend directory; the container has its own
            backend_dir = prepare_backend_dir() if "pytriton" in str(binary) else None
        self.command = ServerCommand(model_repo, free_port(), free_port(), free_port(),
                                     Path(backend_dir) if backend_dir else None,
                                     f"tutorial{uuid.uuid4().hex[:8]}_", exit_timeout_s, world_size, binary,
                                     extra_args=extra_args, run_as=run_as, home=unprivileged_home(run_as))
        super().__init__(log_path or triton_log_path(self.command.http_port))
        self.stopped = False  # stop() was called: an exit after it is no crash
        TritonServer.started.add(self)

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.command.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.command.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.command.metrics_port}/metrics"

    @property
    def ready_url(self) -> str:
        return f"{self.http_url}/v2/health/ready"

    @property
    def shm_prefix(self) -> str:  # the guard and stop() remove its segments
        return self.command.shm_prefix

    @property
    def exit_timeout_s(self) -> int:  # stop() waits this long for the server's own exit, plus its grace
        return self.command.exit_timeout_s

    def argv(self) -> list[str]:
        return self.command.argv()

    def environment(self) -> dict[str, str]:
        return self.command.environment()

    def start(self, timeout_s: float = 180, retries: int = 0) -> "TritonServer":
        """Start and wait until ready. ``retries``: start again (new ports, new log) after a crash.

        On two cores under load the 2.51 Python backend has been seen to abort during model load
        (``boost::interprocess::lock_exception``); a retry is reported on stderr, never silent. A server
        that refused the repository itself (``error: creating server: ...``) is not started again, even
        when it crashed on its way out (2.51 can, exiting with models still loaded): it would fail the same.
        """
        for attempt in range(retries + 1):
            try:
                return self._start_once(timeout_s)
            except TritonStartError as exc:
                crashed = self.process is not None and self.process.returncode is not None and self.process.returncode < 0
                if attempt == retries or not (crashed or exc.stalled) or "\nerror: creating server: " in str(exc):
                    raise
                what = "crashed" if not exc.stalled else "stalled"
                print(f"tritonserver {what} during start-up, starting it again:\n{exc}", file=sys.stderr, flush=True)
                self._renew()
        raise AssertionError("unreachable")

    def _renew(self) -> None:
        """New ports and a new log for the next start (the old ones may still be held, or be read)."""
        self.command.http_port, self.command.grpc_port, self.command.metrics_port = free_port(), free_port(), free_port()
        self.log_path = self.log_path.with_name(f"tritonserver-{self.command.http_port}.log")
        self.process = None

    def _start_once(self, timeout_s: float) -> "TritonServer":
        self.stopped = False
        binary = Path(self.command.binary)
        if not binary.is_file():  # Popen's bare FileNotFoundError would not say how to get one
            explicit = " ($TRITONSERVER names it: point it at an existing tritonserver, or unset it)" \
                if os.environ.get("TRITONSERVER") == str(binary) else ""
            raise envcheck.MissingComponent(f"the tritonserver binary {binary} is missing{explicit}: "
                                            "reinstall nvidia-pytriton==0.7.0 (env/setup_env.sh)")
        sockets = rpc_dir(self.command.shm_prefix)
        sockets.mkdir(exist_ok=True)
        if self.command.run_as:  # the server's user binds its engines' sockets there
            entry = user_entry(self.command.run_as)
            os.chown(sockets, entry.pw_uid, entry.pw_gid)
        # Own process group: the stubs (and the vLLM engine processes they spawn) share the group we stop.
        self.launch(timeout_s)
        return self

    def crashed(self) -> bool:
        """True when tritonserver ended by a signal that its owner did not send (``stop()`` was not called)."""
        return (self.process is not None and not self.stopped and self.process.poll() is not None
                and self.process.returncode < 0)

    def crash_report(self) -> str:
        """How a crashed server ended: the signal, and its log's tail (Triton logs ``Signal (N) received``)."""
        signum = -self.process.returncode
        return (f"tritonserver (pid {self.process.pid}) ended with {signal.Signals(signum).name}; "
                f"log {self.log_path}:\n{self.log_tail()}")

    def restart_if_crashed(self, timeout_s: float = 300) -> bool:
        """Start again after a crash, as a supervisor would (Kubernetes, or Serve's health check in
        notebook 05): what the crashed server left is stopped first, the report goes to stderr, the
        new server gets new ports. True when it had crashed."""
        if not self.crashed():
            return False
        self.start_again("crashed", self.crash_report(), timeout_s)
        return True

    def start_again(self, what: str, report: str, timeout_s: float = 300) -> None:
        """Stop what is left of this server (a crashed one's stubs and engines, or a live one whose
        load stalled) and start it on new ports with a new log; what happened goes to stderr first. A short
        grace: nothing of a crashed or wedged server exits in order (a stub stuck in a load ignores SIGTERM)."""
        self.stop(grace_s=2)
        print(f"tritonserver {what}, starting it again:\n{report}", file=sys.stderr, flush=True)
        self._renew()
        self.start(timeout_s, retries=1)

    def stalled(self) -> list[str]:
        """The models whose load stalled after their initialize() returned (:func:`crashes.stalled_loads`)."""
        return crashes.stalled_loads(self.log_path.read_text(errors="replace"), time.time(), STALLED_AFTER_S)

    def read_tail(self, lines: int) -> str:
        """The log's last ``lines`` lines, Triton's tables left out: its option table alone fills half
        of a tail, and pushed the error lines above it (a config that does not parse) out of it."""
        return crashes.log_tail(self.log_path, lines)

    def check_starting(self) -> None:
        if stalled := self.stalled():
            raise TritonStartError(f"the load of {', '.join(stalled)} stalled: initialize() returned more than "
                                   f"{STALLED_AFTER_S} s ago and tritonserver has not taken its answer (the Python "
                                   f"backend's, under heavy CPU load); log {self.log_path}:\n{self.log_tail()}",
                                   tuple(stalled))

    def leftover_shm(self) -> list[Path]:
        return shm_segments(self.command.shm_prefix)

    def group_alive(self) -> bool:
        return bool(self.group_members())

    def before_stop(self) -> None:
        end_own_connections(self.command.http_port)  # else the server waits for them (scripts.procs.connections)
        if held := established_to(self.command.http_port):
            print(f"{held} client connection(s) of other processes to {self.http_url} still open: tritonserver "
                  f"waits up to its exit timeout ({self.command.exit_timeout_s} s) for them, then exits without "
                  "unloading its models. Close those clients first.", file=sys.stderr, flush=True)

    def stop(self, grace_s: float = 10) -> None:
        """SIGTERM, wait the exit timeout plus a grace period, then SIGKILL whatever is left of the group
        (stubs, engine processes, the guard) and remove its shared memory."""
        if self.process is not None:
            self.stopped = True
        super().stop(grace_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Launch tritonserver on a model repository (Ctrl-C stops it)")
    parser.add_argument("--model_repo", required=True)
    parser.add_argument("--world_size", type=int, default=1, help="MPI ranks (TensorRT-LLM tensor parallelism)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for readiness")
    args = parser.parse_args(argv)
    try:
        server = TritonServer(args.model_repo, world_size=args.world_size)
        start = time.monotonic()
        server.start(args.timeout)
    except (FileNotFoundError, TritonStartError, envcheck.MissingComponent) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"tritonserver ready in {time.monotonic() - start:.1f} s (pid {server.pid})\n"
          f"  HTTP    {server.http_url}\n  gRPC    {server.grpc_url}\n  metrics {server.metrics_url}\n"
          f"  log     {server.log_path}", flush=True)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    try:
        while not stop["now"] and server.process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
