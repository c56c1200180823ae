"""Client connections a local server still has open, read from the kernel's socket tables.

Why it matters for tritonserver: on SIGTERM its HTTP endpoint stops accepting and then waits, one
second at a time, until every client connection has closed or ``--exit-timeout-secs`` has run out.
The seconds it waits are taken from the same budget the server then has for unloading its models
(Triton v2.51.0 ``src/http_server.cc`` ``HTTPServer::Stop``; ``src/main.cc`` passes what is left to
``TRITONSERVER_ServerSetExitTimeout``). A client that keeps an idle keep-alive connection (an open
``tritonclient.http`` client, a ``requests.Session``) therefore costs the whole exit timeout and the
models' orderly unload. Triton's gRPC endpoint has no such wait in 2.51.

Nor does closing the client help where the connection hides: a ``requests.post`` answer kept in a
variable (``r = requests.post(...)``) holds its connection until the answer is garbage-collected.
``TritonServer.stop`` therefore ends this process's own connections to the server it stops (they
are of no use afterwards) and names those of other processes.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

ESTABLISHED, CLOSE_WAIT = "01", "08"  # include/net/tcp_states.h: TCP_ESTABLISHED, TCP_CLOSE_WAIT
TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def _connections(tables: tuple[Path, ...], state: str = ESTABLISHED) -> list[tuple[int, int, str]]:
    """(local port, remote port, socket inode) of every connection in ``state`` in the tables."""
    rows = []
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except FileNotFoundError:  # no IPv6 in this kernel
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == state:
                rows.append((int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16), fields[9]))
    return rows


def established_to(port: int, tables: tuple[Path, ...] = TABLES) -> int:
    """Established TCP connections whose local end is ``port``: a server's accepted connections
    (a client's own sockets have the server's port as their remote end, and are not counted)."""
    return sum(local == port for local, _, _ in _connections(tables))


def own_connections(port: int) -> list[int]:
    """This process's file descriptors of established connections to ``port`` (its client sockets)."""
    inodes = {inode for _, remote, inode in _connections(TABLES) if remote == port}
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since the listing (the listing's own descriptor, too)
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            fds.append(int(fd))
    return fds


def end_own_connections(port: int, wait_s: float = 2.0) -> int:
    """Shut down this process's connections to ``port``, and wait (at most ``wait_s``) until the server
    has closed its ends; returns how many. Each is shut down through a duplicate of its descriptor, so
    the object that owns it (a connection pool, an answer) keeps a valid descriptor and finds the
    connection closed the next time it uses it."""
    ended = 0
    for fd in own_connections(port):
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
            ended += 1
        except OSError:  # closed meanwhile by its owner
            continue
    deadline = time.monotonic() + wait_s
    # the server's end waits in CLOSE_WAIT until the server has seen the close and closed it too
    while ended and time.monotonic() < deadline and any(local == port for local, _, _ in _connections(TABLES, CLOSE_WAIT)):
        time.sleep(0.02)
    return ended
