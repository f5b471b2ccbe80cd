"""Fleet scale: many processes warm-loading from one shared, read-only cache, and what a
locked cold load costs in requests.

    python bench/bench_fleet.py [--procs 64] [--oci-only] [--big-mb 100]

1. `safehub lock` + `safehub prefetch --cache-dir SHARED --read-only` (sealed for sharing).
2. One process loads alone (5 times): the baseline load time.
3. N processes (torch already imported) are released together and each times its own
   `safehub.load` with SAFEHUB_OFFLINE=1: median and p95 against the baseline.
4. A locked cold load against the GitHub stand-in, and against a static mirror written by
   `safehub prefetch --mirror`: API calls and HTTP requests.
5. OCI (issue 19; needs Debian's docker-registry): 3 specs pushed with `safehub prefetch
   --oci` to a registry; N node processes, each with its own empty cache, released together,
   cold-load (the whole pipeline, `Hub.prepare`) all 3 from the registry, then again
   through a second docker-registry in proxy mode (a pull-through cache), cold and then
   filled: successes, GitHub requests, the origin's blob GETs, times. Then a ``--big-mb``
   snapshot: push, pull (verified load) and `skopeo copy` of the same artifact.
6. Weights (issue 31): a repo whose entrypoint fetches a ``--weights-mb`` checkpoint with
   ``torch.hub.download_url_to_file`` from a loopback weights host; `safehub lock
   --entrypoint` pins it and `safehub prefetch --oci` pushes it as a layer. N nodes
   (``--procs``), each with its own empty cache and torch dir, released together: code and
   checkpoint from the registry (SAFEHUB_OCI), against plain torch.hub.load with the code
   from the GitHub stand-in and the checkpoint from the weights host. ``--weights-only``
   runs only this part.
"""

from __future__ import annotations

import argparse
import contextlib
import io
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
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _loopback import env_for, home_env, make_big_repo, start_server  # noqa: E402

CHILD = """
import sys, time
import torch, safehub
print("ready", flush=True)
sys.stdin.readline()
t, c = time.perf_counter(), time.process_time()
safehub.load(sys.argv[1], "tiny", verbose=False)
wall, cpu = (time.perf_counter() - t) * 1e3, (time.process_time() - c) * 1e3
t = time.perf_counter()
safehub.load(sys.argv[1], "tiny", verbose=False)
print(f"{wall:.3f} {cpu:.3f} {(time.perf_counter() - t) * 1e3:.3f}", flush=True)
"""


def _release(procs: list[subprocess.Popen[str]]) -> None:
    """Wait until every child says it is ready, then let them all go at once."""
    for p in procs:
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(p.communicate()[1])
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()


def run_loaders(n: int, spec: str, env: dict[str, str],
                cwd: Path) -> list[tuple[float, ...]]:
    """N processes loading ``spec`` (CHILD): (wall, CPU, second load) of each."""
    return _nodes(n, CHILD, [spec], [env] * n, cwd)


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--oci-only", action="store_true", help="only part 5 (OCI)")
    ap.add_argument("--big-mb", type=int, default=100, help="size of part 5's big snapshot")
    ap.add_argument("--profile", action="store_true",
                    help="part 5 only: one node under cProfile and -X importtime, unsigned "
                    "and with the fleet signature required, then stop")
    ap.add_argument("--weights-mb", type=int, default=100, help="part 6's checkpoint size")
    ap.add_argument("--weights-only", action="store_true", help="only part 6 (weights)")
    ap.add_argument("--alone", type=int, default=0, metavar="ROUNDS",
                    help="part 5 only: one node at a time beside torch.hub's, in ROUNDS "
                    "rounds (unsigned and with the fleet signature), then stop")
    args = ap.parse_args(argv)
    # Measured as users run it: bytecode compiled (pip compiles on install), for the
    # children too (this environment sets PYTHONDONTWRITEBYTECODE).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "safehub"),
                    str(HERE / "_loopback.py")], check=True)
    if args.weights_only:
        return oci_bench(args.procs, args.big_mb, args.weights_mb, weights_only=True)
    if args.oci_only or args.profile or args.alone:
        return oci_bench(args.procs, args.big_mb, args.weights_mb, profile=args.profile,
                         alone_rounds=args.alone)

    work = Path(tempfile.mkdtemp(prefix="safehub-bench-fleet-"))
    home = work / "home"
    project = work / "project"
    project.mkdir(parents=True)
    os.environ.update(home_env(home))
    os.chdir(project)
    server = start_server(work)
    shared = work / "shared-cache"
    try:
        from safehub.cli import main as cli
        from tests.support import git

        make_big_repo(work / "repo", args.files)
        git(work / "repo", "tag", "v1.0")
        server.add_repo("bench", "hub", work / "repo")
        os.environ.update(env_for(server))
        spec = "bench/hub:v1.0"
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            assert cli(["lock", spec]) == 0
            assert cli(["prefetch", "--cache-dir", str(shared), "--read-only"]) == 0
            assert cli(["trust", spec]) == 0  # consent for this content, in the user data dir
            assert cli(["prefetch", "--cache-dir", str(work / "unused"), "--mirror",
                        str(work / "mirror")]) == 0

        env = {**os.environ, "SAFEHUB_CACHE_DIR": str(shared), "SAFEHUB_OFFLINE": "1",
               "PYTHONPATH": str(ROOT)}
        single = [run_loaders(1, spec, env, project)[0] for _ in range(5)]
        many = run_loaders(args.procs, spec, env, project)

        # A locked cold load: from the stand-in, then from the static mirror.
        import safehub

        cold = {}
        mirror = server.serve_directory(work / "mirror")  # served as is, case-sensitive
        for label, web in (("GitHub stand-in", server.web_url), ("static mirror", mirror)):
            os.environ["SAFEHUB_GITHUB_URL"] = web
            os.environ["SAFEHUB_CACHE_DIR"] = str(work / f"cold-{len(cold)}")
            server.clear_log()
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                safehub.load(spec, "tiny", verbose=False)
            cold[label] = (server.count(server.api_url), server.count())
    finally:
        server.stop()
        subprocess.run(["chmod", "-R", "u+w", str(shared)], check=False)
        shutil.rmtree(work, ignore_errors=True)

    def col(rows: list[tuple[float, float, float]], i: int) -> list[float]:
        return [r[i] for r in rows]

    base, base_cpu = statistics.median(col(single, 0)), statistics.median(col(single, 1))
    walls, cpus = col(many, 0), col(many, 1)
    n = args.procs
    print(f"shared read-only cache, {args.files}-file repo, SAFEHUB_OFFLINE=1, locked spec, "
          f"{os.cpu_count()} CPUs")
    print("first load in a fresh process (torch already imported), wall / CPU time:")
    print(f"  one process alone (median of 5)   {base:9.1f} ms / {base_cpu:7.1f} ms")
    print(f"  {n} at once, median                {statistics.median(walls):9.1f} ms / "
          f"{statistics.median(cpus):7.1f} ms   ({statistics.median(walls) / base:.1f}x wall)")
    print(f"  {n} at once, p95                   {p95(walls):9.1f} ms / {p95(cpus):7.1f} ms"
          f"   ({p95(walls) / base:.1f}x wall)")
    print(f"second load in the same process: alone {statistics.median(col(single, 2)):.1f} ms,"
          f" {n} at once median {statistics.median(col(many, 2)):.1f} ms")
    print(f"  {n}/{n} succeeded; the read-only cache was not written")
    for label, (api, total) in cold.items():
        print(f"locked cold load via {label}: {api} API calls, {total} HTTP requests")
    return oci_bench(args.procs, args.big_mb, args.weights_mb)


# A node: torch imported first, as torch.hub's node has it (both pay it, outside the
# window), then the drop-in load of each spec's entrypoint, as torch.hub's node calls it.
OCI_CHILD = """
import sys, time
import torch, safehub
print("ready", flush=True)
sys.stdin.readline()
t, c = time.perf_counter(), time.process_time()
for spec in sys.argv[1:]:
    safehub.load(spec, "tiny", trust_repo=True, verbose=False)
print(f"{(time.perf_counter() - t) * 1e3:.3f} {(time.process_time() - c) * 1e3:.3f}",
      flush=True)
"""


def oci_nodes(n: int, specs: list[str], env: dict[str, str], cwd: Path, root: Path
              ) -> list[tuple[float, ...]]:
    """N processes, each its own empty cache and data dir, released together."""
    return _nodes(n, OCI_CHILD, specs, [{**env, "SAFEHUB_CACHE_DIR": str(root / f"n{i}/cache"),
                                         "XDG_DATA_HOME": str(root / f"n{i}/data")}
                                        for i in range(n)], cwd)


def _summary(times: list[tuple[float, ...]]) -> str:
    """Median and p95 of wall time, and the median CPU time of one node's window."""
    walls, cpus = [t[0] for t in times], [t[1] for t in times]
    return (f"wall median {statistics.median(walls):.0f} ms, p95 {p95(walls):.0f} ms; CPU "
            f"median {statistics.median(cpus):.0f} ms")


def oci_bench(n: int, big_mb: int, weights_mb: int = 100, *, weights_only: bool = False,
              profile: bool = False, alone_rounds: int = 0) -> int:
    """Part 5 (see the module docstring); prints its table."""
    import time

    from tests.support.oci import DockerRegistry, missing_tools

    if missing_tools():
        print(f"OCI part skipped: {missing_tools()}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="safehub-bench-oci-"))
    project = work / "project"
    project.mkdir(parents=True)
    os.environ.update(home_env(work / "home"))
    os.environ["DOCKER_CONFIG"] = str(work / "docker")  # anonymous registries
    os.chdir(project)
    server = start_server(work)
    rows: list[str] = []
    try:
        from safehub.cli import main as cli
        from tests.support import git, make_repo

        os.environ.update(env_for(server))
        specs = []
        for i in range(3):
            path = work / f"repo{i}"
            make_repo(path, {"hubconf.py": "dependencies = []\ndef tiny():\n    return 1\n",
                             "README.md": f"repo {i}\n", "data.txt": "x" * (i * 1000)})
            git(path, "tag", "v1.0")
            server.add_repo("bench", f"hub{i}", path)
            specs.append(f"bench/hub{i}:v1.0")
        tls = server._tls
        env = {**os.environ, "SSL_CERT_FILE": str(tls.ca_cert)}
        node_env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "true",
                    "SAFEHUB_LOCKFILE": str(project / "safehub.lock"),
                    "SAFEHUB_GITHUB_API_URL": "https://127.0.0.1:9/no-github",
                    "SAFEHUB_GITHUB_URL": "https://127.0.0.1:9/no-github"}
        if weights_only:
            with DockerRegistry(work / "origin", tls, auth=False) as origin:
                rows += weights_rows(n, weights_mb, work, project, origin, server, node_env)
            print("\n".join(["OCI (CNCF Distribution 2.8 as Debian ships it, TLS, loopback):",
                             *rows]))
            return 0
        with DockerRegistry(work / "origin", tls, auth=False) as origin, \
                contextlib.ExitStack() as stack:
            proxy = DockerRegistry(work / "proxy", tls, auth=False, proxy_of=origin)
            proxy.start(env)
            stack.callback(proxy.stop)  # on every way out (--profile, --alone return early)
            quiet = io.StringIO()
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                t = time.perf_counter()
                assert cli(["prefetch", "--oci", f"{origin.host}/bench/hub", *specs]) == 0
                push_ms = (time.perf_counter() - t) * 1e3
            rows.append(f"push of 3 snapshots (prefetch --oci, whole pipeline): {push_ms:.0f} ms")
            if profile and os.environ.get("BENCH_HOLD"):  # keep it up for hand-run nodes
                import json
                Path(os.environ["BENCH_HOLD"]).write_text(json.dumps(
                    {"env": {**node_env, "SAFEHUB_OCI": f"{origin.host}/bench/hub"},
                     "specs": specs, "cwd": str(project), "work": str(work)}))
                sys.stdin.readline()
            if profile:
                profile_node(specs, {**node_env, "SAFEHUB_OCI": f"{origin.host}/bench/hub",
                                     "SAFEHUB_CACHE_DIR": str(work / "prof/cache"),
                                     "XDG_DATA_HOME": str(work / "prof/data")}, project)
                print("\n-- the same node, the fleet signature required --")
                policy = sign_snapshots(work, origin.host, specs)
                profile_node(specs, {**node_env, "SAFEHUB_OCI": f"{origin.host}/bench/signed",
                                     "SAFEHUB_POLICY": str(policy),
                                     "SAFEHUB_CACHE_DIR": str(work / "prof-signed/cache"),
                                     "XDG_DATA_HOME": str(work / "prof-signed/data")},
                             project)
                return 0
            if alone_rounds:
                sign_snapshots(work, origin.host, specs)
                cases = node_cases(work, origin.host, node_env)
                rows += alone(cases[0], cases[2], node_env, origin.host, specs, work, project,
                              server, rounds=alone_rounds)
                print("\n".join(["OCI (CNCF Distribution 2.8 as Debian ships it, TLS, "
                                 "loopback):", *rows]))
                return 0
            for label, host in (("registry", origin.host), ("pull-through cache", proxy.host),
                                ("filled pull-through cache", proxy.host)):
                server.clear_log()
                before = origin.blob_gets()
                times = oci_nodes(n, specs, {**node_env, "SAFEHUB_OCI": f"{host}/bench/hub"},
                                  project, work / label.replace(" ", "-"))
                rows.append(f"{n} nodes x 3 specs cold from the {label}: {len(times)}/{n} "
                            f"succeeded, {_summary(times)}; GitHub requests "
                            f"{server.count()}; origin blob GETs "
                            f"{origin.blob_gets() - before} (6 blobs)")
            proxy.stop()
            rows += beside(n, specs, work, project, origin.host, node_env, server)
            rows += big_snapshot(big_mb, work, origin, server, node_env, tls)
            rows += weights_rows(n, weights_mb, work, project, origin, server, node_env)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(["OCI (CNCF Distribution 2.8 as Debian ships it, TLS, loopback):", *rows]))
    return 0


PROFILE_CHILD = """
import cProfile, pstats, sys
import torch, safehub
prof = cProfile.Profile()
prof.enable()
for spec in sys.argv[1:]:
    safehub.load(spec, "tiny", trust_repo=True, verbose=False)
prof.disable()
stats = pstats.Stats(prof, stream=sys.stdout)
stats.sort_stats("cumulative").print_stats(45)
stats.sort_stats("tottime").print_stats(25)
"""


def profile_node(specs: list[str], env: dict[str, str], cwd: Path) -> None:
    """One node's cold load of ``specs`` under cProfile, then the modules it imports
    beyond ``import torch, safehub`` (-X importtime, cumulative microseconds)."""
    subprocess.run([sys.executable, "-c", PROFILE_CHILD, *specs], cwd=cwd, env=env, check=True)
    shutil.rmtree(env["SAFEHUB_CACHE_DIR"], ignore_errors=True)
    code = ("import sys, torch, safehub\nprint('--after--', file=sys.stderr)\n"
            "[safehub.load(s, 'tiny', trust_repo=True, verbose=False) for s in sys.argv[1:]]")
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code, *specs], cwd=cwd,
                         env=env, check=True, capture_output=True, text=True).stderr
    if os.environ.get("BENCH_IMPORTTIME"):
        Path(os.environ["BENCH_IMPORTTIME"]).write_text(err)
    rows = []
    for line in err.split("--after--", 1)[1].splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    top = [r for r in rows if not r[1].startswith("    ")]  # imported by the load itself
    print(f"imports during the load: {len(rows)} modules, "
          f"{sum(r[0] for r in top) / 1e3:.1f} ms (top-level, cumulative)")
    for us, name in sorted(top, reverse=True)[:25]:
        print(f"  {us / 1e3:7.1f} ms  {name.strip()}")


TORCH_CHILD = """
import os, sys, time
sys.path.insert(0, os.environ["BENCH_DIR"])
import torch.hub
from _loopback import point_torch_hub_from_env
point_torch_hub_from_env()
print("ready", flush=True)
sys.stdin.readline()
t, c = time.perf_counter(), time.process_time()
for spec in sys.argv[1:]:
    torch.hub.load(spec, "tiny", trust_repo=True, verbose=False)
print(f"{(time.perf_counter() - t) * 1e3:.3f} {(time.process_time() - c) * 1e3:.3f}",
      flush=True)
"""


def _nodes(n: int, code: str, specs: list[str], envs: list[dict[str, str]], cwd: Path
           ) -> list[tuple[float, ...]]:
    procs = [subprocess.Popen([sys.executable, "-c", code, *specs], cwd=cwd,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=envs[i]) for i in range(n)]
    _release(procs)
    times = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(err)
        times.append(tuple(map(float, out.strip().splitlines()[-1].split())))
    return times


def sign_snapshots(work: Path, host: str, specs: list[str]) -> Path:
    """Push ``specs`` to ``host``/bench/signed signed with a new key (work/fleet.pem); the
    node policy that requires that key's fleet signature (work/require.toml)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from safehub.cli import main as cli

    key = ec.generate_private_key(ec.SECP256R1())
    (work / "fleet.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (work / "fleet.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    (work / "require.toml").write_text(
        f'[oci]\nsignature = "required"\nkeys = ["{work / "fleet.pub"}"]\n')
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        assert cli(["prefetch", "--oci", f"{host}/bench/signed", "--sign-key",
                    str(work / "fleet.pem"), *specs]) == 0
    return work / "require.toml"


def beside(n: int, specs: list[str], work: Path, project: Path, host: str,
           node_env: dict[str, str], server: object) -> list[str]:
    """The same N nodes x 3 specs: with the fleet signature required, from a shared
    read-only cache folder, and torch.hub cold from the GitHub stand-in."""
    from safehub.cli import main as cli

    sign_snapshots(work, host, specs)
    shared = work / "shared-cache"
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        assert cli(["prefetch", "--cache-dir", str(shared), "--read-only", *specs]) == 0
    rows = []
    cases = node_cases(work, host, node_env)
    for label, code, env in cases:
        server.clear_log()  # type: ignore[attr-defined]
        times = _nodes(n, code, specs, [env(i) for i in range(n)], project)
        rows.append(f"{n} nodes x 3 specs {label}: {len(times)}/{n} succeeded, "
                    f"{_summary(times)}; GitHub requests "
                    f"{server.count()}")  # type: ignore[attr-defined]
    return rows + alone(cases[0], cases[2], node_env, host, specs, work, project, server)


def node_cases(work: Path, host: str, node_env: dict[str, str]) -> tuple[Any, ...]:
    """(label, child code, env of node i): signed from the registry, from the shared
    read-only cache, torch.hub from the GitHub stand-in."""
    shared = work / "shared-cache"
    return (
        ("cold from the registry, fleet signature required", OCI_CHILD, lambda i: {
            **node_env, "SAFEHUB_OCI": f"{host}/bench/signed",
            "SAFEHUB_POLICY": str(work / "require.toml"),
            "SAFEHUB_CACHE_DIR": str(work / f"signed/n{i}/cache"),
            "XDG_DATA_HOME": str(work / f"signed/n{i}/data")}),
        ("from a shared read-only cache folder (prefetch --read-only), offline", OCI_CHILD,
         lambda i: {**node_env, "SAFEHUB_CACHE_DIR": str(shared), "SAFEHUB_OFFLINE": "1",
                    "XDG_DATA_HOME": str(work / f"shared/n{i}/data")}),
        ("torch.hub.load cold from the GitHub stand-in (each node its own hub dir)",
         TORCH_CHILD, lambda i: {**os.environ, "BENCH_DIR": str(HERE),
                                 "TORCH_HOME": str(work / f"torch/n{i}")}),
    )


def alone(signed: tuple[str, str, Any], torch_case: tuple[str, str, Any],
          node_env: dict[str, str], host: str, specs: list[str], work: Path, project: Path,
          server: object, rounds: int = 7) -> list[str]:
    """One node at a time (no contention), in rounds that run torch.hub's node right
    beside safehub's (unsigned and signed): the window's CPU (after ``import torch``), and
    the whole process's wall and CPU (``wait4``); medians, ratios to torch.hub."""
    def unsigned(i: int) -> dict[str, str]:
        return {**node_env, "SAFEHUB_OCI": f"{host}/bench/hub",
                "SAFEHUB_CACHE_DIR": str(work / f"alone/n{i}/cache"),
                "XDG_DATA_HOME": str(work / f"alone/n{i}/data")}

    kinds = {"torch.hub": (torch_case[1], torch_case[2]), "safehub": (OCI_CHILD, unsigned),
             "safehub, fleet signature": (signed[1], signed[2])}
    got: dict[str, list[tuple[float, ...]]] = {k: [] for k in kinds}
    github = {k: 0 for k in kinds}
    order = list(kinds.items())
    for r in range(rounds):  # who goes first rotates: none always follows the same one
        for kind, (code, env) in order[r % 3:] + order[:r % 3]:
            server.clear_log()  # type: ignore[attr-defined]
            got[kind].append(_whole(code, specs, env(1000 + r), project))
            github[kind] += server.count()  # type: ignore[attr-defined]
    med = {k: [statistics.median(t[i] for t in v) for i in range(4)] for k, v in got.items()}
    base = med["torch.hub"]
    rows = [f"one node at a time x 3 specs, median of {rounds} (window after import torch: "
            "wall / CPU; whole process: wall / CPU; ratio to torch.hub's; paired: the "
            "median of each round's own window CPU ratio, which a drift of the machine's "
            "speed between rounds leaves out):"]
    for kind, (w, c, ww, wc) in med.items():
        paired = statistics.median(mine[1] / theirs[1] for mine, theirs
                                   in zip(got[kind], got["torch.hub"], strict=True))
        rows.append(f"  {kind:26} window {w:6.0f} / {c:5.0f} ms ({c / base[1]:.2f}x CPU, "
                    f"paired {paired:.2f}x); whole {ww:6.0f} / {wc:5.0f} ms "
                    f"({ww / base[2]:.2f}x wall, {wc / base[3]:.2f}x CPU)")
    rows.append(f"  signature: {med['safehub, fleet signature'][1] - med['safehub'][1]:+.0f} ms "
                f"CPU over without; GitHub requests by safehub's nodes "
                f"{github['safehub'] + github['safehub, fleet signature']}, by torch.hub's "
                f"{github['torch.hub']}")
    return rows


def _whole(code: str, specs: list[str], env: dict[str, str], cwd: Path) -> tuple[float, ...]:
    """One node process: its window (wall, CPU) and the whole process (wall, and CPU from
    ``wait4``); its output goes to files, so no pipe can fill."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code, *specs], cwd=cwd, env=env,
                                stdin=subprocess.PIPE, stdout=out, stderr=err)
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.close()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = (time.perf_counter() - t) * 1e3
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(err.read().decode(errors="replace")[-2000:])
        window = tuple(map(float, out.read().decode().strip().splitlines()[-1].split()))
    return (*window, wall, (usage.ru_utime + usage.ru_stime) * 1e3)


def big_snapshot(megabytes: int, work: Path, origin: object, server: object,
                 node_env: dict[str, str], tls: object) -> list[str]:
    """Push and pull of one big snapshot beside skopeo copy of the same artifact."""
    import time

    from _loopback import make_real_repo

    from safehub.cli import main as cli
    from safehub.store.lockfile import Lockfile

    git_dir = work / "big.git"
    make_real_repo(git_dir, files=2000, megabytes=megabytes)
    server.add_repo("bench", "big", git_dir)  # type: ignore[attr-defined]
    host = origin.host  # type: ignore[attr-defined]
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        assert cli(["lock", "bench/big:v1.0"]) == 0
        t = time.perf_counter()
        assert cli(["prefetch", "--oci", f"{host}/bench/big", "bench/big:v1.0"]) == 0
        push = time.perf_counter() - t
    entry = Lockfile.load(Path.cwd() / "safehub.lock").entries["bench/big:v1.0"]
    env = {**node_env, "SAFEHUB_OCI": f"{host}/bench/big",
           "SAFEHUB_CACHE_DIR": str(work / "big-node"), "XDG_DATA_HOME": str(work / "bd")}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import safehub; safehub.Hub().prepare("
                    "'bench/big:v1.0', trust_repo=True, verbose=False)"], env=env, check=True)
    pull = time.perf_counter() - t
    certs = work / "certs"
    certs.mkdir(exist_ok=True)
    shutil.copy(tls.ca_cert, certs / "ca.crt")  # type: ignore[attr-defined]
    t = time.perf_counter()
    subprocess.run(["skopeo", "copy", "--quiet", "--src-cert-dir", str(certs),
                    "--dest-cert-dir", str(certs), f"docker://{host}/bench/big@{entry.oci}",
                    f"docker://{host}/bench/big-copy:v1"], check=True,
                   env={**os.environ, "HOME": str(work)})
    skopeo = time.perf_counter() - t
    size = sum(f.stat().st_size for f in (work / "origin/data").rglob("data") if f.is_file())
    return [f"{megabytes} MB-class snapshot ({size / 1e6:.0f} MB of blobs in the registry): "
            f"push (prefetch --oci, whole pipeline incl. GitHub fetch) {push:.1f} s, "
            f"pull (fresh process, verified load into a cold cache) {pull:.1f} s, "
            f"skopeo copy of the same artifact {skopeo:.1f} s"]


WEIGHTED = """\
import os

import torch

dependencies = ["torch"]


def fetch(url):
    \"\"\"Download the checkpoint at url into torch's checkpoint folder; its size.\"\"\"
    path = os.path.join(torch.hub.get_dir(), "checkpoints", "big.bin")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.exists(path):
        torch.hub.download_url_to_file(url, path, progress=False)
    return os.path.getsize(path)
"""

WEIGHTS_CHILD = """
import os, sys, time
sys.path.insert(0, os.environ["BENCH_DIR"])
import torch.hub
if sys.argv[1] == "torch":
    from _loopback import point_torch_hub_from_env
    point_torch_hub_from_env()
    load = torch.hub.load
else:
    import safehub
    load = safehub.load
print("ready", flush=True)
sys.stdin.readline()
t, c = time.perf_counter(), time.process_time()
size = load(sys.argv[2], "fetch", os.environ["BENCH_WEIGHTS_URL"], trust_repo=True,
            verbose=False)
assert size == int(os.environ["BENCH_WEIGHTS_SIZE"]), size
print(f"{(time.perf_counter() - t) * 1e3:.3f} {(time.process_time() - c) * 1e3:.3f}",
      flush=True)
"""


def weights_rows(n: int, megabytes: int, work: Path, project: Path, origin: object,
                 server: object, node_env: dict[str, str]) -> list[str]:
    """Part 6: N nodes fetch one repo's code and its pinned checkpoint, from the registry
    (SAFEHUB_OCI) and as torch.hub does (GitHub stand-in, loopback weights host)."""
    import json
    import time

    from safehub.cli import main as cli
    from tests.support import git, make_repo

    path = work / "weighted"
    make_repo(path, {"hubconf.py": WEIGHTED})
    git(path, "tag", "v1.0")
    server.add_repo("bench", "weighted", path)  # type: ignore[attr-defined]
    data = os.urandom(megabytes * 1024 * 1024)
    server.add_static("/weights/big.bin", data)  # type: ignore[attr-defined]
    url = server.api_url.rsplit("/api", 1)[0] + "/weights/big.bin"  # type: ignore[attr-defined]
    spec, host = "bench/weighted:v1.0", origin.host  # type: ignore[attr-defined]
    # `lock --entrypoint` runs its child confined: the loopback weights host's port granted
    user = Path(os.environ["XDG_CONFIG_HOME"]) / "safehub" / "policy.toml"
    user.parent.mkdir(parents=True, exist_ok=True)
    with open(user, "a") as f:
        f.write(f"\n[confine]\nconnect_ports = [443, {server.port}]\n")  # type: ignore[attr-defined]
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        t = time.perf_counter()
        assert cli(["lock", spec, "--entrypoint", "fetch", "--trust", "--kwargs",
                    json.dumps({"url": url})]) == 0
        locked = time.perf_counter() - t
        t = time.perf_counter()
        assert cli(["prefetch", "--oci", f"{host}/bench/weighted", spec]) == 0
        push = time.perf_counter() - t
    env = {**node_env, "BENCH_DIR": str(HERE), "BENCH_WEIGHTS_URL": url,
           "BENCH_WEIGHTS_SIZE": str(len(data))}
    rows = [f"{megabytes} MB checkpoint: `safehub lock --entrypoint` (child load, download, "
            f"hash, pin) {locked:.1f} s; `prefetch --oci` (snapshot + checkpoint layer) "
            f"{push:.1f} s"]
    cases = (
        ("code and checkpoint from the registry (SAFEHUB_OCI)", "safehub", lambda i: {
            **env, "SAFEHUB_OCI": f"{host}/bench/weighted",
            "SAFEHUB_CACHE_DIR": str(work / f"w-oci/n{i}/cache"),
            "XDG_DATA_HOME": str(work / f"w-oci/n{i}/data"),
            "TORCH_HOME": str(work / f"w-oci/n{i}/torch")}),
        ("torch.hub.load: code from the GitHub stand-in, checkpoint from the weights host",
         "torch", lambda i: {**os.environ, **env, "TORCH_HOME": str(work / f"w-torch/n{i}")}),
    )
    for label, loader, case_env in cases:
        server.clear_log()  # type: ignore[attr-defined]
        before = origin.blob_gets()  # type: ignore[attr-defined]
        times = _nodes(n, WEIGHTS_CHILD, [loader, spec], [case_env(i) for i in range(n)],
                       project)
        rows.append(f"{n} nodes x {megabytes} MB checkpoint, {label}: {len(times)}/{n} "
                    f"succeeded, {_summary(times)}; requests to GitHub and the weights host "
                    f"{server.count()}; registry blob GETs "  # type: ignore[attr-defined]
                    f"{origin.blob_gets() - before}")  # type: ignore[attr-defined]
        shutil.rmtree(work / ("w-oci" if loader == "safehub" else "w-torch"),
                      ignore_errors=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
