"""Held-out real hub repos with their pretrained weights, replayed on loopback (issue 31).

    python bench/real_repos.py --clone timm=PATH --clone dinov2=PATH [--fresh 5] [--json F]

Nothing is fetched and no fetched code is part of safehub: each ``--clone KEY=PATH`` is a
local clone of a real hub repo that you supply (bench/README.md says how to get them),
served by the loopback GitHub stand-in (tests/support) under the real repo's name. Its
pretrained weights cannot be downloaded here, so they are made here with the repo's own
model classes (random init, the real state dict's keys and shapes) in the file format and
under the file name the repo's code asks for, and served where the code asks for them:

- a Hugging Face Hub file (timm's ``hf_hub_download``): by the Hub stand-in
  (tests/support/hfhub.py) through ``HF_ENDPOINT``;
- a hard-coded URL (dinov2's ``load_state_dict_from_url`` from ``dl.fbaipublicfiles.com``):
  unchanged, through ``HTTPS_PROXY``: a CONNECT proxy here that tunnels every host to the
  stand-in's static host, which presents a certificate for that name from a private CA
  (``REQUESTS_CA_BUNDLE``, ``SSL_CERT_FILE``). No URL in the repo is rewritten.

For each repo, with the CLI in child processes, each "machine" a fresh HOME, torch hub dir,
Hub cache and safehub cache (the lockfile is the one thing they share):

1. ``safehub lock SPEC --entrypoint NAME --kwargs JSON --trust``: the files pinned;
2. ``safehub load --locked`` on a cold machine, then offline (``SAFEHUB_OFFLINE=1``) warm on
   it, with the requests each made; the drop-in API (``safehub.load``, ``SAFEHUB_LOCKED=1``);
3. another entrypoint whose file is not pinned, ``--locked``: a ``PinError`` before any
   request for it;
4. ``safehub prefetch --oci`` to Debian's ``docker-registry`` on loopback, then a node with
   ``SAFEHUB_OCI`` loads code and weights: its requests to any other host;
5. the weight file swapped on the server (same URL or Hub revision, other bytes): a cold
   locked load is an ``IntegrityError`` and nothing is left in torch's checkpoint folder or
   the Hub cache;
6. a fresh process, warm caches: ``safehub.load`` beside ``torch.hub.load`` (CPU from
   ``wait4``, medians of ``--fresh``, alternating who goes first).

Run it with a Python that has torch, torchvision and what the repos import (timm's clone
needs ``huggingface_hub`` and ``safetensors``), and safehub installed (``pip install -e .``):
see bench/README.md. It is not run by CI.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _loopback import env_for, home_env  # noqa: E402
from bench_load import _spawn_timed, compile_bytecode  # noqa: E402

from safehub._internal.fsutil import rmtree  # noqa: E402
from safehub.store.lockfile import Lockfile  # noqa: E402


@dataclass(frozen=True)
class Real:
    """A real hub repo: where it lives on GitHub, what to load, how its weights are made."""

    owner: str
    name: str
    entrypoint: str
    kwargs: dict[str, Any]
    unpinned: str
    """Another entrypoint, whose weight file the lock does not pin (refused when locked)."""
    make: str
    """Python run in a child (argv: clone, out dir, seed): writes the weight files the
    entrypoint fetches and prints them as JSON: ``[{"file", "url"}]`` or
    ``[{"file", "hf", "path"}]``."""
    note: str = ""


#: The entrypoint run with torch.hub's ``load_state_dict_from_url`` answering {} and
#: ``Module.load_state_dict`` of an empty dict keeping the model: the URL the real code asks
#: for, and the real model's state dict (random init) saved under its file name.
MAKE_URL = """
import json, os, sys, torch, torch.hub
clone, out, seed, entry, kwargs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], \
    json.loads(sys.argv[5])
asked, models = [], []
def fake(url, *a, **k):
    asked.append(url)
    return {}
real = torch.nn.Module.load_state_dict
def keep(self, state, *a, **k):
    if not state:
        models.append(self)
        return None
    return real(self, state, *a, **k)
torch.hub.load_state_dict_from_url = fake
torch.nn.Module.load_state_dict = keep
torch.manual_seed(seed)
torch.hub.load(clone, entry, source="local", trust_repo=True, verbose=False, **kwargs)
files = []
for url, model in zip(asked, models, strict=True):
    path = os.path.join(out, os.path.basename(url))
    torch.save(model.state_dict(), path)
    files.append({"file": path, "url": url})
print(json.dumps(files))
"""

#: timm: the model built by the clone's own ``create_model`` (no weights), saved as the
#: ``model.safetensors`` of the Hub repo its pretrained config names.
MAKE_TIMM = """
import json, os, sys, torch
sys.path.insert(0, sys.argv[1])
import timm
from safetensors.torch import save_file
out, seed, entry = sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.manual_seed(seed)
model = timm.create_model(entry, pretrained=False)
repo = model.pretrained_cfg["hf_hub_id"]
path = os.path.join(out, "model.safetensors")
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
print(json.dumps([{"file": path, "hf": repo, "path": "model.safetensors"}]))
"""

#: yolov5: the model built by the clone's own ``DetectionModel`` from its yaml, pickled whole
#: (half precision) in the checkpoint dict its ``train.py`` writes, under the release URL
#: ``attempt_download`` builds; the release's API answer is served too (the repo's code asks
#: ``api.github.com`` itself, with ``requests``).
MAKE_YOLO = """
import json, os, sys, torch
sys.path.insert(0, sys.argv[1])
os.chdir(sys.argv[1])
from models.yolo import DetectionModel
out, seed, entry = sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.manual_seed(seed)
model = DetectionModel(f"models/{entry}.yaml").half()
path = os.path.join(out, f"{entry}.pt")
torch.save({"epoch": -1, "best_fitness": None, "model": model, "ema": None, "updates": None,
            "optimizer": None, "opt": None, "git": None, "date": None}, path)
release = "https://github.com/ultralytics/yolov5/releases/download/v7.0"
print(json.dumps([{"file": path, "url": f"{release}/{entry}.pt", "static": {
    "/repos/ultralytics/yolov5/releases/tags/v7.0": {"tag_name": "v7.0", "assets": [
        {"name": f"yolov5{s}.pt"} for s in "nsmlx"]}}}]))
"""

REPOS = {
    "timm": Real("huggingface", "pytorch-image-models", "resnet18", {"pretrained": True},
                 "resnet34", MAKE_TIMM,
                 "hubconf imports the clone's timm; weights through hf_hub_download"),
    "dinov2": Real("facebookresearch", "dinov2", "dinov2_vits14", {}, "dinov2_vitb14",
                   MAKE_URL, "load_state_dict_from_url from dl.fbaipublicfiles.com"),
    "yolov5": Real("ultralytics", "yolov5", "yolov5s", {}, "yolov5m", MAKE_YOLO,
                   "download_url_to_file from a GitHub release into the working directory, "
                   "a whole pickled model"),
}


class ConnectProxy:
    """An HTTP proxy that answers ``CONNECT host:port`` for any host with a tunnel to one
    loopback address (``HTTPS_PROXY`` for clients): the host names stay the real ones, the
    server behind presents a certificate for them from the private CA. ``hosts`` logs every
    CONNECT; anything else is answered 405."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.hosts: list[str] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):  # a peer that reset (a client giving up)
            self._relay(conn)

    def _relay(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            words = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(words) < 2 or words[0] != "CONNECT":
                conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            self.hosts.append(words[1])
            with socket.create_connection(self.target) as up:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                rest = head.split(b"\r\n\r\n", 1)[1]
                if rest:
                    up.sendall(rest)
                while True:
                    ready, _, _ = select.select([conn, up], [], [], 120)
                    if not ready:
                        return
                    for src in ready:
                        data = src.recv(1 << 16)
                        if not data:
                            return
                        (up if src is conn else conn).sendall(data)

    def stop(self) -> None:
        self._sock.close()


@dataclass
class Servers:
    """Every loopback server of a run, and the environment that points clients at them."""

    github: Any
    hub: Any
    proxy: ConnectProxy
    registry: Any
    env: dict[str, str] = field(default_factory=dict)

    def clear(self) -> None:
        self.github.clear_log()
        with self.hub._lock:
            self.hub.log.clear()
        self.proxy.hosts.clear()

    def requests(self) -> dict[str, int]:
        """Requests since :meth:`clear`: GitHub's hosts (code), the weights hosts (through
        the proxy), the Hub (endpoint and CDN)."""
        log = self.github.requests_log
        weights = [r for r in log if r.role == "mirror"]
        return {"github": len(log) - len(weights), "weights": len(self.proxy.hosts),
                "hub": len(self.hub.log)}

    def weights_paths(self) -> list[str]:
        """What the weights hosts were asked since :meth:`clear` (method, host, path, agent)."""
        return [f"CONNECT {h}" for h in self.proxy.hosts] + [
            f"{r.method} {r.host}{r.path} ({(r.user_agent or '').split('/')[0]})"
            for r in self.github.requests_log if r.role == "mirror"]


def make_weights(real: Real, clone: Path, out: Path, seed: int) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", real.make, str(clone), str(out), str(seed),
                           real.entrypoint, json.dumps(real.kwargs)],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if done.returncode:
        raise RuntimeError(f"making the weights of {real.name} failed:\n{done.stderr[-3000:]}")
    files: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    for f in files:
        f["sha256"] = hashlib.sha256(Path(f["file"]).read_bytes()).hexdigest()
    return files


def serve_weights(servers: Servers, files: list[dict[str, Any]], repo_commit: dict[str, str]
                  ) -> None:
    for f in files:
        data = Path(f["file"]).read_bytes()
        if "url" in f:
            servers.github.add_static(urlsplit(f["url"]).path, data)
            for path, answer in f.get("static", {}).items():
                servers.github.add_static(path, json.dumps(answer).encode())
        else:
            repo_commit[f["hf"]] = servers.hub.commit(f["hf"], {f["path"]: data,
                                                                 "config.json": b"{}\n"})


def rewrite_hub_file(hub: Any, repo: str, commit: str, path: str, data: bytes) -> None:
    """The Hub serves ``data`` for ``path`` at ``commit`` (its LFS oid too)."""
    with hub._lock:
        hub.repos[repo].commits[commit][path] = data
        hub.blobs[hashlib.sha256(data).hexdigest()] = data


def machine(work: Path, name: str, servers: Servers, **extra: str) -> dict[str, str]:
    """The environment of a fresh machine: its own HOME, caches, Hub cache and working
    folder (``BENCH_CWD``: yolov5 keeps its weights there), the project's lockfile."""
    home = work / name
    (home / "cwd").mkdir(parents=True, exist_ok=True)
    env = dict(servers.env)
    env.update(home_env(home))
    env.update({"SAFEHUB_CACHE_DIR": str(home / "safehub-cache"), "HF_HOME": str(home / "hf"),
                "DOCKER_CONFIG": str(home / "docker"), "BENCH_CWD": str(home / "cwd"),
                "SAFEHUB_LOCKFILE": str(work / "project" / "safehub.lock"), **extra})
    # lock --entrypoint runs its child confined: the loopback servers' ports are granted
    # (its default is 443 only), in the user's own policy (a project file only narrows).
    ports = sorted({urlsplit(v).port or 443 for k, v in servers.env.items()
                    if k in ("HF_ENDPOINT", "HTTPS_PROXY", "SAFEHUB_GITHUB_API_URL",
                             "SAFEHUB_GITHUB_URL")})
    user = home / "config" / "safehub" / "policy.toml"
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(f"[confine]\nconnect_ports = {ports}\n")
    return env


def cli(args: list[str], env: dict[str, str]) -> tuple[int, dict[str, Any], str]:
    """``safehub ARGS --json`` in a child: exit code, its JSON answer, its stderr."""
    done = subprocess.run([sys.executable, "-m", "safehub", *args, "--json"], env=env,
                          cwd=env["BENCH_CWD"], capture_output=True, text=True, check=False)
    try:
        answer = json.loads(done.stdout) if done.stdout.strip() else {}
    except ValueError:
        answer = {"stdout": done.stdout[-2000:]}
    return done.returncode, answer, done.stderr


def lock_check(env: dict[str, str]) -> list[str]:
    """``safehub lock --check``: each pinned file's state and how it was asked."""
    _, answer, err = cli(["lock", "--check"], env)
    weights = answer.get("weights")
    if not isinstance(weights, list):
        return [f"no weights in the answer: {answer or err[-500:]}"]
    return [f"{w.get('state')} by {w.get('how')}" for w in weights]


def hub_and_torch_files(env: dict[str, str]) -> list[str]:
    """Every file under torch's checkpoint folder and the Hub cache of a machine."""
    found = []
    for root in (Path(env["TORCH_HOME"]) / "hub" / "checkpoints", Path(env["HF_HOME"]),
                 Path(env["BENCH_CWD"])):
        if root.is_dir():
            found += [str(p) for p in root.rglob("*") if p.is_file() or p.is_symlink()]
    return [f for f in found if not f.endswith((".lock", "/token"))]


LOAD = """
import json, os, sys
sys.path.insert(0, os.environ["BENCH_DIR"])
import torch
which, spec, entry, kwargs = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
if which == "torch":  # torch.hub's GitHub requests to the stand-in; a release asset (what
    import torch.hub, _loopback  # the repo's code downloads) goes the way safehub's does
    _loopback.point_torch_hub_from_env()
    rewritten = torch.hub.urlopen
    def urlopen(req, *a, **k):
        url = req.full_url if hasattr(req, "full_url") else req
        if "/releases/download/" in url:
            import ssl, urllib.request
            k.setdefault("context", ssl.create_default_context())
            return urllib.request.urlopen(req, *a, **k)
        return rewritten(req, *a, **k)
    torch.hub.urlopen = urlopen
    model = torch.hub.load(spec, entry, trust_repo=True, verbose=False, **kwargs)
else:
    import safehub
    model = safehub.load(spec, entry, trust_repo=True, verbose=False, **kwargs)
print(type(model).__name__, sum(p.numel() for p in model.parameters()))
"""


def check_repo(key: str, real: Real, clone: Path, work: Path, servers: Servers,
               rounds: int) -> dict[str, Any]:
    row: dict[str, Any] = {"repo": f"{real.owner}/{real.name}", "entrypoint": real.entrypoint}
    ref = subprocess.run(["git", "-C", str(clone), "rev-parse", "--abbrev-ref", "HEAD"],
                         capture_output=True, text=True, check=True).stdout.strip()
    servers.github.add_repo(real.owner, real.name, clone)
    spec = f"{real.owner}/{real.name}:{ref}"
    files = make_weights(real, clone, work / "weights", 0)
    swapped = make_weights(real, clone, work / "weights-swapped", 1)
    commits: dict[str, str] = {}
    serve_weights(servers, files, commits)
    kwargs = json.dumps(real.kwargs)
    cwd = work / "project"
    cwd.mkdir()

    # 1. lock what the entrypoint fetches
    dev = {k: v for k, v in machine(work, "dev", servers).items() if k != "SAFEHUB_LOCKFILE"}
    dev["BENCH_CWD"] = str(cwd)
    code, answer, err = cli(["lock", spec, "--entrypoint", real.entrypoint, "--kwargs",
                             kwargs, "--trust"], dev)
    if code:
        raise RuntimeError(f"lock failed: {answer or err[-3000:]}")
    entry = next(e for e in Lockfile.load(cwd / "safehub.lock").entries.values()
                 if e.spec.lower() == spec.lower())
    served = {f["sha256"] for f in files}
    row["pinned"] = [p.url for p in entry.weights]
    row["pins_match_served"] = {p.sha256 for p in entry.weights} == served
    row["files_pinned"] = f"code {entry.commit[:12]} + {len(entry.weights)} file(s)"
    row["lock_check"] = lock_check(dev)

    # 2. locked loads: cold, offline warm, the drop-in API
    cold = machine(work, "cold", servers)
    servers.clear()
    code, answer, err = cli(["load", spec, real.entrypoint, "--kwargs", kwargs, "--locked",
                             "--trust"], cold)
    row["locked_cold"] = ("ok" if code == 0 else f"exit {code}: {answer.get('message')}",
                          servers.requests())
    servers.clear()
    code, answer, _ = cli(["load", spec, real.entrypoint, "--kwargs", kwargs, "--locked",
                           "--trust"], {**cold, "SAFEHUB_OFFLINE": "1"})
    row["locked_offline_warm"] = ("ok" if code == 0 else
                                  f"exit {code}: {answer.get('message')}", servers.requests())
    servers.clear()
    done = subprocess.run([sys.executable, "-c", LOAD, "safehub", spec, real.entrypoint,
                           kwargs], env={**cold, "SAFEHUB_LOCKED": "1"}, cwd=cold["BENCH_CWD"],
                          capture_output=True, text=True, check=False)
    row["api_locked_warm"] = ("ok " + done.stdout.strip() if done.returncode == 0 else
                              done.stderr.strip().splitlines()[-1:], servers.requests())

    # 3. an entrypoint whose file is not pinned
    servers.clear()
    code, answer, _ = cli(["load", spec, real.unpinned, "--kwargs", kwargs, "--locked",
                           "--trust"], cold)
    row["unpinned_refused"] = (answer.get("error"), answer.get("message", "")[:160],
                               servers.requests(), servers.weights_paths())

    # 4. a fleet node from the registry
    target = f"{servers.registry.host}/real/{key}"
    code, answer, err = cli(["prefetch", "--oci", target, spec], dev)
    if code:
        raise RuntimeError(f"prefetch --oci failed: {answer or err[-3000:]}")
    node = machine(work, "node", servers, SAFEHUB_OCI=target)
    servers.clear()
    code, answer, err = cli(["load", spec, real.entrypoint, "--kwargs", kwargs, "--locked",
                             "--trust"], node)
    row["fleet_node"] = ("ok" if code == 0 else f"exit {code}: {answer.get('message')}",
                         servers.requests(), servers.weights_paths())

    # 5. the weight file swapped on the server
    # (a Hub file: the pinned commit's file rewritten with its LFS oid, so the Hub's own
    # metadata agrees with the new bytes and only the pin can tell)
    for f, other in zip(files, swapped, strict=True):
        data = Path(other["file"]).read_bytes()
        if "url" in f:
            servers.github.add_static(urlsplit(f["url"]).path, data)
        else:
            rewrite_hub_file(servers.hub, f["hf"], commits[f["hf"]], f["path"], data)
    swap = machine(work, "swap", servers)
    servers.clear()
    code, answer, _ = cli(["load", spec, real.entrypoint, "--kwargs", kwargs, "--locked",
                           "--trust"], swap)
    row["swap_refused"] = ("NOT REFUSED: loaded" if code == 0 else answer.get("error"),
                           answer.get("message", "")[:200], hub_and_torch_files(swap),
                           servers.weights_paths())
    row["lock_check_swapped"] = lock_check(dev)
    for f in files:
        if "url" in f:
            servers.github.add_static(urlsplit(f["url"]).path, Path(f["file"]).read_bytes())
        else:
            rewrite_hub_file(servers.hub, f["hf"], commits[f["hf"]], f["path"],
                             Path(f["file"]).read_bytes())
    if any("hf" in f for f in files):  # the branch moves on the Hub: the pin does not
        for f, other in zip(files, swapped, strict=True):
            if "hf" in f:
                servers.hub.commit(f["hf"], {f["path"]: Path(other["file"]).read_bytes(),
                                             "config.json": b"{}\n"})
        moved = machine(work, "moved", servers)
        code, answer, _ = cli(["load", spec, real.entrypoint, "--kwargs", kwargs, "--locked",
                               "--trust"], moved)
        row["branch_moved"] = "pinned commit loaded" if code == 0 else \
            f"{answer.get('error')}: {answer.get('message', '')[:200]}"

    # 6. a fresh process, warm: safehub.load beside torch.hub.load
    try:
        row.update(fresh_warm(spec, real, work, servers, rounds))
    except RuntimeError as e:
        row["fresh_failed"] = str(e)[-1500:]
    return row


def fresh_warm(spec: str, real: Real, work: Path, servers: Servers, rounds: int
               ) -> dict[str, Any]:
    envs = {w: {k: v for k, v in machine(work, f"fresh-{w}", servers).items()
                if k != "PYTHONDONTWRITEBYTECODE"} for w in ("torch", "safehub")}
    args = [spec, real.entrypoint, json.dumps(real.kwargs)]
    for which in ("torch", "safehub"):  # untimed: caches filled, bytecode written
        done = subprocess.run([sys.executable, "-c", LOAD, which, *args], env=envs[which],
                              cwd=envs[which]["BENCH_CWD"], capture_output=True, text=True,
                              check=False)
        if done.returncode:
            log = work / f"fresh-{which}.log"
            log.write_text(done.stderr)
            raise RuntimeError(f"{which} failed (its output: {log}): {done.stderr[-1000:]}")
    runs: dict[str, list[float]] = {"torch": [], "safehub": []}
    for r in range(rounds):
        for which in (("torch", "safehub") if r % 2 == 0 else ("safehub", "torch")):
            prev = os.getcwd()
            os.chdir(envs[which]["BENCH_CWD"])
            try:
                _, _, cpu, _ = _spawn_timed([sys.executable, "-c", LOAD, which, *args],
                                            envs[which])
            finally:
                os.chdir(prev)
            runs[which].append(cpu * 1e3)
    t, s = (statistics.median(runs[w]) for w in ("torch", "safehub"))
    paired = statistics.median(a / b for a, b in zip(runs["safehub"], runs["torch"],
                                                     strict=True))
    return {"cpu_ms": {"torch": round(t), "safehub": round(s)}, "cpu_ratio": round(s / t, 3),
            "cpu_ratio_paired": round(paired, 3)}


def start(work: Path, hosts: list[str]) -> Servers:
    from tests.support import STANDIN_HOSTS, GitHubStandIn, make_tls
    from tests.support.hfhub import HubStandIn
    from tests.support.oci import DockerRegistry, missing_tools

    if missing_tools():
        raise SystemExit(f"the registry cannot run: {missing_tools()}")
    tls = make_tls(work / "tls", (*STANDIN_HOSTS, *hosts))
    github = GitHubStandIn(tls)
    github.start()
    hub = HubStandIn(tls).__enter__()
    proxy = ConnectProxy(("127.0.0.6", github.port))
    registry = DockerRegistry(work / "registry", tls, auth=False)
    registry.start()
    servers = Servers(github, hub, proxy, registry)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "PYTHONDONTWRITEBYTECODE") and not k.startswith(("SAFEHUB_", "HF_"))
           and k.lower() not in ("https_proxy", "http_proxy", "all_proxy", "no_proxy")}
    env.update(env_for(github))
    loopback = ",".join(["localhost", *(f"127.0.0.{i}" for i in range(1, 8))])
    env.update({"SSL_CERT_FILE": str(tls.ca_cert), "CURL_CA_BUNDLE": str(tls.ca_cert),
                "HF_ENDPOINT": hub.endpoint,
                "HTTPS_PROXY": proxy.url, "NO_PROXY": loopback, "no_proxy": loopback,
                "HF_HUB_DISABLE_TELEMETRY": "1", "BENCH_DIR": str(HERE),
                "SAFEHUB_NONINTERACTIVE": "1",
                "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])})
    servers.env = env
    return servers


def stop(servers: Servers) -> None:
    servers.registry.stop()
    servers.proxy.stop()
    servers.hub.__exit__(None, None, None)
    servers.github.stop()


def table(rows: list[dict[str, Any]]) -> str:
    def reqs(r: dict[str, int]) -> str:
        return f"{sum(r.values())} ({', '.join(f'{k} {v}' for k, v in r.items())})"

    lines = ["| repo | entrypoint | files pinned | `lock --check` as served / swapped | "
             "locked load: cold / offline warm / API | unpinned file refused | swap refused "
             "(files left) | fleet node (requests to other hosts) | fresh warm CPU torch.hub "
             "/ safehub |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['repo']} | {r['entrypoint']} | failed: {r['failed']} |"
                         " | | | | | |")
            continue
        cpu = (f"{r['cpu_ms']['torch']} / {r['cpu_ms']['safehub']} ms, {r['cpu_ratio']}x "
               f"(paired {r['cpu_ratio_paired']}x)" if "cpu_ms" in r else
               f"not measured: {r.get('fresh_failed', '')[-200:]}")
        lc, lo, la = r["locked_cold"], r["locked_offline_warm"], r["api_locked_warm"]
        un, sw, fl = r["unpinned_refused"], r["swap_refused"], r["fleet_node"]
        lines.append(
            f"| {r['repo']} | {r['entrypoint']} | {r['files_pinned']} | "
            f"{', '.join(r['lock_check'])} / {', '.join(r['lock_check_swapped'])} | {lc[0]} "
            f"({reqs(lc[1])}) / {lo[0]} ({sum(lo[1].values())} requests) / "
            f"{str(la[0]).split()[0]} | {un[0]} ({sum(un[2].values())} requests) | {sw[0]} "
            f"({len(sw[2])}) | {fl[0]} ({reqs(fl[1])}) | {cpu} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clone", action="append", default=[], metavar="KEY=PATH",
                    help=f"a local clone of a real repo; KEY one of {', '.join(REPOS)}")
    ap.add_argument("--fresh", type=int, default=5, help="fresh processes of each (median)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args(argv)
    clones = dict(c.split("=", 1) for c in args.clone)
    unknown = set(clones) - set(REPOS)
    if not clones or unknown:
        ap.error(f"give --clone KEY=PATH, KEY one of {', '.join(REPOS)}")
    compile_bytecode()
    work = Path(tempfile.mkdtemp(prefix="safehub-real-repos-"))
    print(f"work folder {work}; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    files = [f for key, path in clones.items()
             for f in make_weights(REPOS[key], Path(path), work / "probe" / key, 0)]
    hosts = sorted({urlsplit(f["url"]).hostname or "" for f in files if "url" in f} |
                   ({"api.github.com"} if any("static" in f for f in files) else set()))
    servers = start(work, hosts)
    rows = []
    try:
        for key, path in clones.items():
            real = REPOS[key]
            print(f"-- {real.owner}/{real.name} ({real.note})", flush=True)
            try:
                row = check_repo(key, real, Path(path).resolve(), work / key, servers,
                                 args.fresh)
            except RuntimeError as e:
                row = {"repo": f"{real.owner}/{real.name}", "entrypoint": real.entrypoint,
                       "failed": str(e)[:2000]}
            print(json.dumps(row, indent=1), flush=True)
            rows.append(row)
    finally:
        stop(servers)
        if not args.keep:
            rmtree(work)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all("failed" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
