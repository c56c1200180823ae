"""Free ports of 127.0.0.1 for the servers this project starts (Triton, ``vllm serve``, Prometheus, Ray)."""
from __future__ import annotations

import collections
import random
import socket
from pathlib import Path

#: free_port looks above Ray's worker ports (10002-19999, ``ray start``'s defaults) and below the
#: kernel's ephemeral range, from which ``bind(0)`` and every outgoing connection take a local port.
LISTEN_PORT_FLOOR = 20000
_handed_out: collections.deque[int] = collections.deque(maxlen=512)
_pick = random.SystemRandom()  # a notebook's random.seed(0) must not make two processes pick alike


def ephemeral_port_range() -> tuple[int, int]:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return low, high


def free_port(host: str = "127.0.0.1") -> int:
    """A port of ``host`` that nobody listens on now, for a server this project starts next.

    A port ``bind(0)`` hands out lies in the ephemeral range, where any process's next outgoing
    connection may take it before the server binds it (Serve's proxy once failed so: "Failed to
    bind to address '127.0.0.1:36055'"). So the port is drawn at random below that range, never one
    this process handed out recently; ``bind(0)`` only if none there is free.
    """
    low, _ = ephemeral_port_range()
    candidates = [p for p in _pick.sample(range(LISTEN_PORT_FLOOR, max(low, LISTEN_PORT_FLOOR)),
                                          min(64, max(low - LISTEN_PORT_FLOOR, 0))) if p not in _handed_out]
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.append(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
