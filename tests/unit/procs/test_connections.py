import socket

from scripts.procs.connections import established_to


def test_counts_the_accepted_connections_of_a_port_only():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        assert established_to(port) == 0  # listening is not a connection
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        try:
            assert established_to(port) == 1  # the client's own socket has this port as its remote end
            assert established_to(client.getsockname()[1]) == 1  # ... and is the one counted for its own port
        finally:
            client.close()
            accepted.close()
        assert established_to(port) == 0


def test_reads_both_tables_and_skips_a_missing_one(tmp_path):
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    v4 = tmp_path / "tcp"
    v4.write_text(header + "   0: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  0 0 1\n"
                           "   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 2\n")
    v6 = tmp_path / "tcp6"
    v6.write_text(header + "   0: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:C351 01 0 0 0 0 0 3\n")
    assert established_to(8080, (v4, v6, tmp_path / "absent")) == 2
