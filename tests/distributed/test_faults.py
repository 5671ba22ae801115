"""Distributed faults named within the bound (issue 42 item 3): another program on MASTER_PORT."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest


@pytest.mark.slow  # a subprocess that waits for its bound
def test_a_foreign_program_on_master_port_is_named_instead_of_waiting_forever():
    # A server that accepts connections and never answers, as an HTTP server or a stale job would:
    # torch's store client waits in its handshake with no timeout (over 400 s measured).
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    port = server.getsockname()[1]
    env = {**os.environ, "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
    env.pop("FL_DEVICE", None)
    code = "import torch, torch_fl; torch.fl.distributed.init_process_group(preflight_timeout=10)"
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=150)
    finally:
        server.close()
    assert done.returncode != 0
    assert (f"rank 1: a program at 127.0.0.1:{port} (MASTER_ADDR:MASTER_PORT) accepted the connection but did "
            "not answer as torch's rendezvous store") in done.stderr
    assert "another program holds MASTER_PORT" in done.stderr and "--master-port" in done.stderr
