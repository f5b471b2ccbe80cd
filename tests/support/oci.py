"""CNCF Distribution as Debian ships it (``docker-registry`` 2.8), started for tests.

:class:`DockerRegistry` writes a config (filesystem storage in a temporary folder, TLS with
the tests' throwaway CA, htpasswd auth unless ``auth=False``, or proxy mode in front of
another registry), starts ``docker-registry serve CONFIG`` on a free loopback port, waits
for its "listening on" log line (no polling, no sleeps) and stops it. Tests that need it are
skipped with the reason when the binary (or ``htpasswd`` for the password file) is missing;
``.ci/run`` installs both with apt-get.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import threading
from pathlib import Path
from types import TracebackType

from .tls import TLSFiles

__all__ = ["PASSWORD", "USER", "DockerRegistry", "docker_config", "missing_tools"]

USER, PASSWORD = "fleet", "fleet-secret-1"


def missing_tools() -> str | None:
    """Why the real registry cannot run here, or None."""
    for tool, package in (("docker-registry", "docker-registry"), ("htpasswd", "apache2-utils")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {package})"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def docker_config(folder: Path, registries: dict[str, tuple[str, str]]) -> Path:
    """A ``DOCKER_CONFIG`` folder as ``docker login`` leaves it, for ``registries``."""
    folder.mkdir(parents=True, exist_ok=True)
    auths = {host: {"auth": base64.b64encode(f"{u}:{p}".encode()).decode()}
             for host, (u, p) in registries.items()}
    (folder / "config.json").write_text(json.dumps({"auths": auths}))
    return folder


class DockerRegistry:
    """One ``docker-registry serve`` process (see the module docstring)."""

    def __init__(self, root: Path, tls: TLSFiles, *, auth: bool = True,
                 proxy_of: DockerRegistry | None = None, plain: bool = False) -> None:
        self.root, self.tls, self.auth, self.proxy_of = root, tls, auth, proxy_of
        self.plain = plain  # no TLS (and then no auth: htpasswd needs TLS)
        self.port = 0
        self.log: list[str] = []
        self._proc: subprocess.Popen[str] | None = None

    @property
    def host(self) -> str:
        """``host:port`` as a client names it."""
        return f"127.0.0.1:{self.port}"

    def _config(self) -> str:
        lines = ["version: 0.1", "log:", "  level: info", "  accesslog:", "    disabled: false",
                 "storage:", "  filesystem:", f"    rootdirectory: {self.root / 'data'}",
                 "  delete:", "    enabled: true", "http:", f"  addr: 127.0.0.1:{self.port}"]
        if not self.plain:
            lines += ["  tls:", f"    certificate: {self.tls.server_cert}",
                      f"    key: {self.tls.server_key}"]
        if self.auth and not self.plain:
            htpasswd = subprocess.run(["htpasswd", "-nbB", USER, PASSWORD], check=True,
                                      capture_output=True, text=True).stdout
            (self.root / "htpasswd").write_text(htpasswd)
            lines += ["auth:", "  htpasswd:", "    realm: safehub-tests",
                      f"    path: {self.root / 'htpasswd'}"]
        if self.proxy_of is not None:
            lines += ["proxy:", f"  remoteurl: https://{self.proxy_of.host}"]
            if self.proxy_of.auth:
                lines += [f"  username: {USER}", f"  password: {PASSWORD}"]
        return "\n".join(lines) + "\n"

    def start(self, env: dict[str, str] | None = None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        config = self.root / "config.yml"
        config.write_text(self._config())
        self._proc = subprocess.Popen(["docker-registry", "serve", str(config)], text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        ready = threading.Event()

        def read() -> None:
            assert self._proc is not None and self._proc.stdout is not None
            for line in self._proc.stdout:
                self.log.append(line)
                if "listening on" in line:
                    ready.set()
            ready.set()  # ended: start() reports it

        threading.Thread(target=read, daemon=True).start()
        ready.wait(60)
        if self._proc.poll() is not None or not any("listening on" in x for x in self.log):
            self.stop()
            raise RuntimeError("docker-registry did not start:\n" + "".join(self.log[-20:]))

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def blob_gets(self) -> int:
        """How many blob GETs it logged (its access log)."""
        return sum('"GET /v2/' in line and "/blobs/sha256:" in line for line in self.log)

    def __enter__(self) -> DockerRegistry:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
