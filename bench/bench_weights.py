"""A large checkpoint downloaded by a hub repo's code: safehub's weights guard beside
torch.hub's own ``download_url_to_file``, in one run (issue 32, item 3).

    python bench/bench_weights.py                # a 256 MiB checkpoint, 3 rounds
    python bench/bench_weights.py --gib          # 1 GiB, as the issue measures
    python bench/bench_weights.py --mb 64 --rounds 5 --dir /dev/shm --json out.json
    python bench/bench_weights.py --rate 625     # the server paced to 625 MB/s (5 Gbit/s)

The checkpoint (random bytes after a zip's magic, as torch.save's files begin) is served
over HTTPS by a plain threaded server in a child process on loopback (so serving does not
compete with the measured download for this interpreter's lock), with a throwaway CA both
clients trust. ``--rate MBPS``: the server sends at most that many MB (10^6 bytes) a second,
as a link of that speed would (a token bucket in its write path: the file sent in 256 KiB
pieces, the server sleeping until each piece's tokens are there, the bucket 1 MiB deep so
that a late wake-up is made up for); unpaced, it is as fast as the server's own CPU (it
shares this machine's cores with the client). Measured, the three in turn (who goes first
rotates from round to round), the target file removed before each download:

  * torch.hub's ``download_url_to_file`` (what ``load_state_dict_from_url`` calls on a
    miss; torch checks no digest unless the file name carries a prefix): wall and CPU; and
    the same with its hash check (``check_hash=True``, as torchvision asks for its
    weights: SHA-256 of every byte, compared with the name's 8-hex prefix);
  * safehub's: the held path a repo's call is routed to (``WeightsGuard``, through
    safehub's transport: urllib3, the body read straight into two reused buffers in turn),
    which hashes every byte with SHA-256 in the same pass, in a thread of its own while the
    next piece is read, checks the format (a header read), checks the lockfile's pin and
    records the file's identity;
    wall and CPU, and the ratio to torch's (``--first-use``: a URL no pin holds, pinned on
    first use in a record synced to disk, which on ext4 flushes the checkpoint written
    just before too);
  * hashing alone, on the same file in the page cache: safehub's SHA-256 beside
    ``sha256sum`` (throughput, MB/s);
  * the warm check: a checkpoint already in the folder, its stat identity the recorded
    one, checked as a warm load checks it (no byte read): microseconds per check;
  * the CPU budget of each download: the client's user and system CPU (``getrusage``; its
    calling thread's own CPU apart, ``time.thread_time``), the server process's
    (``/proc/PID/stat``, utime + stime, before and after: 10 ms ticks), their sum in
    core-seconds, and the least wall those allow on this machine's cores: the largest of
    core-seconds / cores, the busiest single thread's CPU (a download is a pipeline of
    threads: the server's, the client's reading one, safehub's one that hashes and writes
    the file) and, paced, the link's time; and "cores busy", core-seconds / wall (near 1.0:
    client and server shared one core, as when another job holds the other). Where that
    least wall is over 1.1x torch's, the target cannot be met on this machine, however the
    client is written.

The ``torch.load`` that follows a download is the same for both and is not timed. Targets:
safehub's download at most 1.1x torch's wall; its hashing at least 90% of sha256sum's.
Timings on a shared machine vary with its load: run it a few times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

SERVER = """
import http.server, functools, ssl, sys, time
folder, cert, key = sys.argv[1:4]
rate = float(sys.argv[4]) * 1e6  # bytes a second; 0: unpaced
PIECE = 256 * 1024  # a piece sent at once
DEPTH = 4 * PIECE  # the bucket's depth: what is sent ahead of the rate after a late wake-up


class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def copyfile(self, source, outputfile):
        if not rate:
            return super().copyfile(source, outputfile)
        buf = memoryview(bytearray(PIECE))
        due = time.perf_counter()  # when the bytes sent so far are all due on the link
        while n := source.readinto(buf):
            now = time.perf_counter()
            due = max(due, now - DEPTH / rate) + n / rate  # unused tokens: DEPTH at most
            if due > now:  # this piece's tokens are not all there yet: wait for them
                time.sleep(due - now)
            outputfile.write(buf[:n])


handler = functools.partial(Handler, directory=folder)
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def _write_checkpoint(path: Path, size: int) -> None:
    # Random bytes after a zip's magic, as torch.save's files begin: random bytes alone
    # have a '{' for their ninth byte once in 256 draws, and safehub then reads them as a
    # safetensors header (safehub.verify.checkpoint.read_kind) and refuses the file.
    block = b"PK\x03\x04" + os.urandom(16 * 1024 * 1024 - 4)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n


def _timed(run: Any) -> tuple[float, float]:
    """(wall, CPU of this process) in seconds."""
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def _server_cpu(pid: int) -> float:
    """The CPU (user + system, every thread) process ``pid`` has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _budget(run: Any, server: int) -> dict[str, float]:
    """One download: its wall, the client's user and system CPU, the CPU of the thread
    that called (the rest is the client's other threads'), and the server's CPU."""
    import resource

    before, main = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    srv, wall = _server_cpu(server), time.perf_counter()
    run()
    wall, srv = time.perf_counter() - wall, _server_cpu(server) - srv
    after, main = resource.getrusage(resource.RUSAGE_SELF), time.thread_time() - main
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {"wall": wall, "user": user, "sys": system, "main": main,
            "others": max(user + system - main, 0.0), "server": srv,
            "total": user + system + srv, "cores_busy": (user + system + srv) / wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=256, help="checkpoint size in MiB (default 256)")
    ap.add_argument("--gib", action="store_true", help="a 1 GiB checkpoint")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", help="where the files go (default: a temp dir)")
    ap.add_argument("--first-use", action="store_true",
                    help="the URL is new each round (pinned on first use, the record synced "
                    "to disk) instead of pinned in the lockfile")
    ap.add_argument("--rate", type=float, default=0.0, metavar="MBPS",
                    help="the server sends at most MBPS MB (10^6 bytes) a second, as a link "
                    "would (1250: 10 Gbit/s, 625: 5 Gbit/s, 117: 1 Gbit/s; default unpaced)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    size = (1024 if args.gib else args.mb) * 1024 * 1024
    import torch.hub
    from _loopback import home_env

    from tests.support import make_tls

    work = Path(tempfile.mkdtemp(prefix="bench-weights-", dir=args.dir))
    try:
        os.environ.update(home_env(work / "home"))
        tls = make_tls(work / "tls")
        os.environ["REQUESTS_CA_BUNDLE"] = str(tls.ca_cert)
        served = work / "served"
        served.mkdir()
        _write_checkpoint(served / "ckpt.pth", size)
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(served),
                                   str(tls.server_cert), str(tls.server_key),
                                   str(args.rate)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            url = f"https://127.0.0.1:{server.stdout.readline().strip()}/ckpt.pth"
            results = _measure(url, work, served / "ckpt.pth", size, args.rounds, tls.ca_cert,
                               torch.hub, locked=not args.first_use, server=server.pid)
            results["rate_mbps"] = args.rate
        finally:
            server.terminate()
            server.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _show(results, size)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def _measure(url: str, work: Path, source: Path, size: int, rounds: int, ca: Path,
             hub: Any, locked: bool = True, server: int = 0) -> dict[str, Any]:
    import ssl
    import urllib.request

    from safehub.config import Settings
    from safehub.run.weightfile import sha256_of
    from safehub.run.weights import WeightsGuard
    from safehub.store.records import WeightPins

    context = ssl.create_default_context(cafile=str(ca))
    real_urlopen = urllib.request.urlopen
    hub.urlopen = lambda req, *a, **k: real_urlopen(req, *a, **{"context": context, **k})
    settings = Settings.from_env()
    out = work / "out"
    out.mkdir()
    data = work / "data"

    pinned = {url: sha256_of(source)} if locked else {}

    def guard() -> WeightsGuard:
        return WeightsGuard(repo="bench/weights", records=WeightPins(data),
                            repo_key="bench/weights", locked=pinned,
                            transport=lambda: settings.transport(weights=True))

    def torch_download() -> None:
        hub.download_url_to_file(url, str(out / "torch.pth"), None, False)

    prefix = pinned[url][:8] if pinned else sha256_of(source)[:8]

    def torch_hashed() -> None:  # torchvision's check_hash=True: the name's 8-hex prefix
        hub.download_url_to_file(url, str(out / "torch.pth"), prefix, False)

    def safehub_download() -> None:
        guard().download_url_to_file(url, str(out / "safehub.pth"), None, False)

    safehub_download()  # the first request of a process imports the transport: not timed
    runs: dict[str, list[dict[str, float]]] = {"torch": [], "torch, hashed": [],
                                               "safehub": []}
    load_before = os.getloadavg()
    for i in range(rounds):
        order = [("torch", torch_download), ("torch, hashed", torch_hashed),
                 ("safehub", safehub_download)]
        for name, run in order[i % 3:] + order[:i % 3]:  # each goes first in turn
            for f in out.iterdir():
                f.unlink()
            if not locked:
                shutil.rmtree(data, ignore_errors=True)  # a new URL: pinned on first use
            runs[name].append(_budget(run, server))
    hashing: dict[str, list[float]] = {"sha256sum": [], "safehub": []}
    sha256sum = shutil.which("sha256sum")
    for _ in range(rounds):
        if sha256sum:
            hashing["sha256sum"].append(_timed(lambda: subprocess.run(
                [sha256sum, str(source)], check=True, capture_output=True))[0])
        hashing["safehub"].append(_timed(lambda: sha256_of(source))[0])
    # the warm check: the file found in the folder, its stat identity the recorded one
    held = guard()
    target = out / "safehub.pth"
    if not target.exists():
        safehub_download()
    held.check_file(url, target)
    checks = [_timed(lambda: held.check_file(url, target))[0] for _ in range(50)]

    def med(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    return {
        "bytes": size, "rounds": rounds, "loadavg": os.getloadavg(),
        "loadavg_before": load_before, "cores": len(os.sched_getaffinity(0)),
        "download_wall_s": {k: med([r["wall"] for r in v]) for k, v in runs.items()},
        "download_cpu_s": {k: med([r["user"] + r["sys"] for r in v]) for k, v in runs.items()},
        "download_budget_s": {k: {part: med([r[part] for r in v]) for part in v[0]}
                              for k, v in runs.items()},
        "download_all_wall_s": {k: [round(r["wall"], 3) for r in v] for k, v in runs.items()},
        "download_all_budget_s": {k: [{part: round(x, 4) for part, x in r.items()} for r in v]
                                  for k, v in runs.items()},
        "paired_ratio": {k: med([a["wall"] / b["wall"]
                                 for a, b in zip(runs["safehub"], v, strict=True)])
                         for k, v in runs.items() if k != "safehub"},
        "hash_wall_s": {k: med(v) for k, v in hashing.items()},
        "warm_check_us": med(checks) * 1e6,
    }


def _show(r: dict[str, Any], size: int) -> None:
    mb = size / 1e6
    w, c, h = r["download_wall_s"], r["download_cpu_s"], r["hash_wall_s"]
    rate = r.get("rate_mbps") or 0.0
    print(f"a {size / 2**20:,.0f} MiB checkpoint from a loopback HTTPS host"
          f"{f' paced to {rate:g} MB/s' if rate else ' (unpaced)'}, median of {r['rounds']} "
          f"(load average {', '.join(f'{x:.1f}' for x in r['loadavg_before'])} before, "
          f"{', '.join(f'{x:.1f}' for x in r['loadavg'])} after)")
    print(f"{'':44}{'torch.hub':>12}{'safehub':>12}{'ratio':>9}")
    for torch_kind, label in (("torch", "torch.hub as it is (no hash)"),
                              ("torch, hashed", "torch.hub with its hash check")):
        print(label)
        print(f"{'  download wall (s)':44}{w[torch_kind]:12.3f}{w['safehub']:12.3f}"
              f"{w['safehub'] / w[torch_kind]:9.2f}x")
        print(f"{'    throughput (MB/s)':44}{mb / w[torch_kind]:12.0f}{mb / w['safehub']:12.0f}")
        print(f"{'  download CPU of this process (s)':44}{c[torch_kind]:12.3f}"
              f"{c['safehub']:12.3f}{c['safehub'] / max(c[torch_kind], 1e-9):9.2f}x")
    paired = r["paired_ratio"]
    label = "median of each round's ratio (wall)"
    print(f"{label:44}{'':24}{paired['torch']:9.2f}x "
          f"(hash checked {paired['torch, hashed']:.2f}x)")
    every = r["download_all_wall_s"]
    print(f"{'every run, wall (s)':44}   torch {every['torch']}, hashed "
          f"{every['torch, hashed']}, safehub {every['safehub']}")
    print(f"{'':44}{'sha256sum':>12}{'safehub':>12}{'share':>9}")
    print(f"{'SHA-256 of the file, page-cached (MB/s)':44}{mb / h['sha256sum']:12.0f}"
          f"{mb / h['safehub']:12.0f}{h['sha256sum'] / h['safehub']:9.0%}")
    print(f"{'warm check, stat identity matches (us)':44}{'':12}{r['warm_check_us']:12.0f}")
    _show_budget(r, size)


def _show_budget(r: dict[str, Any], size: int) -> None:
    """The CPU each download needs, client and server, and the least wall it allows."""
    b, cores, rate = r["download_budget_s"], r["cores"], r.get("rate_mbps") or 0.0
    link = size / (rate * 1e6) if rate else 0.0
    print(f"{'CPU per download, median (s)':28}{'user':>8}{'sys':>8}{'caller':>8}{'others':>8}"
          f"{'server':>8}{'core-s':>8}{'least wall':>12}{'cores busy':>12}")
    least = {}
    for kind, label in (("torch", "torch.hub"), ("torch, hashed", "torch.hub, hash checked"),
                        ("safehub", "safehub")):
        p = b[kind]
        least[kind] = max(p["total"] / cores, p["main"], p["others"], p["server"], link)
        print(f"{label:28}{p['user']:8.3f}{p['sys']:8.3f}{p['main']:8.3f}{p['others']:8.3f}"
              f"{p['server']:8.3f}{p['total']:8.3f}{least[kind]:12.3f}{p['cores_busy']:12.2f}")
    t, th, s = b["torch"]["total"], b["torch, hashed"]["total"], b["safehub"]["total"]
    least_s, least_t, least_th = least["safehub"], least["torch"], least["torch, hashed"]
    print(f"core-seconds needed: safehub {s:.2f}, torch {t:.2f} (hash checked {th:.2f}); on "
          f"{cores} cores the least wall is safehub {least_s:.3f} s, torch {least_t:.3f} s "
          f"(hash checked {least_th:.3f} s): safehub at best {least_s / least_t:.2f}x "
          f"torch's ({least_s / least_th:.2f}x hash checked)")
    print(f"  (least wall: the largest of core-seconds / {cores} cores, the busiest thread "
          "(the server's; the client's calling thread, which reads; its others: safehub's "
          "hashing thread)" + (f" and the link's {link:.3f} s at {rate:g} MB/s" if rate else "")
          + "; server CPU in 10 ms ticks; cores busy: core-seconds / wall, near 1.0 where the "
          "two processes shared one core, as when another job holds the other)")


if __name__ == "__main__":
    sys.exit(main())
