"""scripts.procs.ports: free ports of 127.0.0.1 below the ephemeral range."""
import socket

from scripts.procs import ports


def test_free_ports_differ_even_after_a_seed_and_lie_below_the_ephemeral_range():
    import random

    random.seed(0)
    first = [ports.free_port() for _ in range(5)]
    random.seed(0)
    second = [ports.free_port() for _ in range(5)]
    assert len(set(first + second)) == 10
    low, _ = ports.ephemeral_port_range()
    assert all(ports.LISTEN_PORT_FLOOR <= p < low for p in first + second)


def test_free_port_skips_a_taken_port_and_falls_back_to_bind0(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # Nothing left below the ephemeral range: the kernel's choice.
        monkeypatch.setattr(ports, "ephemeral_port_range", lambda: (ports.LISTEN_PORT_FLOOR, 60999))
        assert ports.free_port() >= ports.LISTEN_PORT_FLOOR
        # The only candidate is taken: skipped, then bind(0).
        monkeypatch.setattr(ports, "LISTEN_PORT_FLOOR", port)
        monkeypatch.setattr(ports, "ephemeral_port_range", lambda: (port + 1, 60999))
        assert ports.free_port() != port
