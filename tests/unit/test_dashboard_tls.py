"""``elastorm dashboard --tls-cert/--tls-key``: the page and its actions over HTTPS
(a real ``elastorm dashboard`` process on a free loopback port, a self-signed
certificate made with ``openssl``; ZooKeeper is not needed to serve)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from elastorm.dashboard.cli import tls_scheme
from elastorm.errors import UserError


def test_tls_needs_both_files_and_readable_ones(tmp_path) -> None:
    assert tls_scheme(None, None) == "http"
    with pytest.raises(UserError, match="go together"):
        tls_scheme(str(tmp_path / "cert.pem"), None)
    with pytest.raises(UserError, match="cannot be read"):
        tls_scheme(str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_with_a_certificate_actions_go_over_https(tmp_path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    port = _free_port()
    env = {**os.environ, "ELASTORM_DASHBOARD_TOKEN": "t0ken"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "elastorm.runtime.cli", "dashboard", "--topology", "wc",
         "--port", str(port), "--zookeeper", "127.0.0.1:1", "-e", "none", "--enable-actions",
         "--tls-cert", str(cert), "--tls-key", str(key)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    context = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/view", context=context, timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "the dashboard did not serve HTTPS"
                time.sleep(0.2)
        for token, body, code in (("wrong", {}, 401), ("t0ken", {"operator": "op"}, 400)):
            action = urllib.request.Request(  # answered before ZooKeeper is asked
                f"{url}/api/migrate",
                data=json.dumps(body).encode(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            with pytest.raises(urllib.error.HTTPError) as answer:
                urllib.request.urlopen(action, context=context, timeout=10)
            assert answer.value.code == code
        with pytest.raises(OSError):  # plain HTTP gets no answer (reset, or a timeout)
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/view", timeout=2).read()
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0]
    assert f"dashboard on https://127.0.0.1:{port}/" in out
