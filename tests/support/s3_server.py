"""A real S3 API on loopback: moto's standalone server, started as its own process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import requests

from support.registry_server import free_port

# Fake credentials: the server accepts any, and they make the AWS chain resolve offline.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "sealift-test",
    "AWS_SECRET_ACCESS_KEY": "sealift-test-secret",
    "AWS_REGION": "us-east-1",
}


def moto_server_binary() -> str | None:
    """The moto_server next to the test interpreter, if installed."""
    candidate = Path(sys.executable).with_name("moto_server")
    return str(candidate) if candidate.exists() else shutil.which("moto_server")


class S3Server:
    """moto_server on 127.0.0.1:<free port>; ``endpoint`` is its URL."""

    def __init__(self) -> None:
        binary = moto_server_binary()
        if binary is None:
            raise RuntimeError("moto_server is not installed (pip install 'moto[server]')")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **CREDENTIALS}
        self._process = subprocess.Popen(
            [binary, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                requests.get(self.endpoint, timeout=1, proxies={"http": ""})
                return
            except requests.ConnectionError:
                time.sleep(0.1)
        self.close()
        raise RuntimeError("moto_server did not start")

    def client(self):  # type: ignore[no-untyped-def]
        """A boto3 client for tests to look at what sealift wrote."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def close(self) -> None:
        """Stop the server."""
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()

    def __enter__(self) -> S3Server:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
