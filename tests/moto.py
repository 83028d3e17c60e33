"""moto's S3 server as its own process, for tests that need a real S3 endpoint to fail.

``Moto.freeze()`` / ``thaw()`` stop and continue the process (SIGSTOP / SIGCONT): connections
are still accepted by the operating system, but nothing answers, as with a hung endpoint.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import boto3
import pytest

BUCKET = "gp-ckpts"
PREFIX = "ckpts"
MOTO = str(Path(sys.executable).parent / "moto_server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Moto:
    """``moto_server`` in its own process: an in-memory S3 at ``endpoint``."""

    def __init__(self, log: Path):
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [MOTO, "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                pytest.fail(f"moto_server exited: {self.log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.endpoint, timeout=2).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("moto_server did not answer within 30 s")
        self.client().create_bucket(Bucket=BUCKET)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.thaw()  # a frozen process does not act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def served(self, needle: str) -> int:
        """How many requests moto has answered whose request line contains ``needle`` (read
        from its own log, so this works while moto is busy or frozen)."""
        return sum(needle in line for line in self.log.read_text(errors="replace").splitlines())

    def client(self):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="y",
        )

    def keys(self, prefix: str) -> dict[str, int]:
        paginator = self.client().get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=BUCKET, Prefix=prefix)
        return {o["Key"]: o["Size"] for p in pages for o in p.get("Contents", [])}

    def get(self, key: str) -> bytes:
        return self.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=BUCKET, Key=key, Body=data)
