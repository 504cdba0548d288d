"""Fixtures: the real metaq-server binary on free 127.0.0.1 ports.

The binaries come from $METAQ_SERVER_BIN and $METAQ_BIN (the Go test that
runs pytest, clients/python/python_test.go, passes the ones make built), or
are built here with `go build` into a temporary directory. TLS certificates
come from $METAQ_TEST_CERT_FILE, $METAQ_TEST_KEY_FILE and $METAQ_TEST_CA_FILE,
or are made with openssl."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
CLIENT = HERE.parent
REPO = CLIENT.parent.parent
sys.path.insert(0, str(CLIENT))  # the tests import metaq from the source tree

READY = re.compile(r"metaq-server ready on (\S+) data (.*)$")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="session")
def bins(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    server, cli = os.environ.get("METAQ_SERVER_BIN"), os.environ.get("METAQ_BIN")
    if server and cli:
        return {"server": server, "metaq": cli}
    out = tmp_path_factory.mktemp("bin")
    subprocess.run(["go", "build", "-o", str(out) + "/", "./cmd/metaq-server", "./cmd/metaq"], cwd=REPO,
                   check=True, timeout=600)
    return {"server": str(out / "metaq-server"), "metaq": str(out / "metaq")}


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """A CA, the broker's certificate for 127.0.0.1 and a client
    certificate with CN "bob", all PEM files."""
    names = ("METAQ_TEST_CERT_FILE", "METAQ_TEST_KEY_FILE", "METAQ_TEST_CA_FILE", "METAQ_TEST_CLIENT_CERT_FILE",
             "METAQ_TEST_CLIENT_KEY_FILE")
    vals = [os.environ.get(v) for v in names]
    if all(vals):
        return dict(zip(("cert", "key", "ca", "client_cert", "client_key"), vals))  # type: ignore[arg-type]
    d = tmp_path_factory.mktemp("certs")

    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60, cwd=d)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ossl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=metaq test CA", "-keyout", "ca-key.pem", "-out", "ca.pem")
    for name, cn, ext in (("broker", "127.0.0.1", "subjectAltName=IP:127.0.0.1"),
                          ("client", "bob", "extendedKeyUsage=clientAuth")):
        ossl("req", *ec, "-subj", f"/CN={cn}", "-keyout", f"{name}-key.pem", "-out", f"{name}.csr")
        (d / f"{name}.ext").write_text(ext + "\n")
        ossl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem")
    return {"cert": str(d / "broker.pem"), "key": str(d / "broker-key.pem"), "ca": str(d / "ca.pem"),
            "client_cert": str(d / "client.pem"), "client_key": str(d / "client-key.pem")}


def password_hash(metaq_bin: str, password: str) -> str:
    r = subprocess.run([metaq_bin, "passwd", "--cost", "4"], input=password + "\n", capture_output=True, text=True,
                       check=True, timeout=60)
    return r.stdout.strip().splitlines()[-1]


class Broker:
    """A metaq-server process with its own data directory."""

    def __init__(self, binary: str, workdir: Path, toml: str) -> None:
        self.binary, self.dir = binary, workdir
        self.config = workdir / "server.toml"
        self.config.write_text(toml)
        self.proc: Optional[subprocess.Popen] = None
        self.addr = ""
        self.port = 0
        self.log: List[str] = []

    def start(self, port: int = 0) -> "Broker":
        args = [self.binary, "--config", str(self.config)]
        if port or self.port:
            args += ["--port", str(port or self.port)]
        else:
            args += ["--port", "0"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     cwd=self.dir)
        ready = threading.Event()
        proc = self.proc

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.log.append(line.rstrip("\n"))
                m = READY.search(line)
                if m:
                    self.addr = m.group(1)
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        end = time.monotonic() + 30
        while not ready.wait(0.05):
            if proc.poll() is not None or time.monotonic() > end:
                self.kill()
                raise RuntimeError("metaq-server did not start:\n" + "\n".join(self.log[-40:]))
        self.port = int(self.addr.rsplit(":", 1)[1])
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def broker_toml(data_dir: Path, topics: Dict[str, int], extra: str = "") -> str:
    t = "".join(f'[[topic]]\nname = "{n}"\nnum_partitions = {p}\n\n' for n, p in topics.items())
    return (f'broker_id = 0\nhost = "127.0.0.1"\nport = 0\nhttp_port = 0\ndata_dir = "{data_dir}"\n'
            f'num_partitions = 4\nunflush_threshold = 0\njournal_file_size = 4194304\n'
            f'offset_store = "file"\n{extra}\n{t}')


@pytest.fixture
def make_broker(bins: Dict[str, str], tmp_path: Path):
    started: List[Broker] = []

    def make(topics: Optional[Dict[str, int]] = None, extra: str = "", top: str = "") -> Broker:
        d = tmp_path / f"broker{len(started)}"
        d.mkdir()
        b = Broker(bins["server"], d, top + broker_toml(d / "data", topics or {"t": 4}, extra))
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.kill()
        if os.environ.get("METAQ_PYTEST_KEEP_LOGS"):
            print("\n".join(b.log[-50:]))


@pytest.fixture
def broker(make_broker) -> Broker:
    return make_broker({"t": 4, "g": 4, "tx": 2})
