"""Rank functions for tests/distributed/test_launch.py (spawned ranks import them by name)."""

from __future__ import annotations

import os
import time


def report() -> dict:
    return {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]),
            "master": os.environ["MASTER_ADDR"]}


def one_rank_fails() -> None:
    if os.environ["RANK"] == "1":
        raise ValueError("ranks disagree:\n  rank 1: torch 2.4")
    time.sleep(120)  # waits for rank 1 the way a collective would


def hangs() -> None:
    time.sleep(120)
