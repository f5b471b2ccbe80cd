"""Signature verification cost on a 1,000-file hub repo, and the warm signed load.

    python bench/bench_sign.py

* cold verification of a key-signed 1,000-file repo in a fresh process (imports included);
* the keyless path: a real Sigstore OMS bundle (tests/fixtures) verified in a fresh process;
* a warm signed load (verdict cached) against torch.hub's warm load on the same server.
"""

from __future__ import annotations

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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _loopback import env_for, home_env, make_big_repo, point_torch_hub_at, start_server  # noqa: E402

VERIFY_KEY = """
import sys, time
t = time.perf_counter()
from pathlib import Path
from safehub.verify.signatures import KeySigner, SignerSet, Verifier
tree, pub = Path(sys.argv[1]), Path(sys.argv[2])
r = Verifier([SignerSet("bench", (), (KeySigner(pub),))]).verify_tree(
    tree, (tree / "model.sig").read_bytes())
print(len(r.files), time.perf_counter() - t)
"""

VERIFY_KEYLESS = """
import sys, time
t = time.perf_counter()
from pathlib import Path
from safehub.verify.signatures import Signer, SignerSet, Verifier
oms = Path(sys.argv[1])
s = SignerSet("bench", (Signer("https://sigstore.verify.ibm.com/oauth2", "stefanb@us.ibm.com"),),
              (), oms / "trust_config.production.sigstore-python-4.5.1.json")
d = oms / "v1.1.0-sigstore"
Verifier([s]).verify_tree(d, (d / "model.sig").read_bytes())
print(time.perf_counter() - t)
"""


def fresh(code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="safehub-bench-sign-"))
    home = work / "home"
    os.environ.update(home_env(home))
    server = start_server(work)
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        from safehub.verify.signatures import sign_directory
        from tests.support import commit_files, git

        key = ec.generate_private_key(ec.SECP256R1())
        (work / "k.pem").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        pub = work / "k.pub"
        pub.write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        make_big_repo(work / "repo", 1000)
        t = time.perf_counter()
        sign_directory(work / "repo", work / "k.pem")
        sign_time = time.perf_counter() - t
        commit_files(work / "repo", {}, "sign")
        git(work / "repo", "tag", "v1.0")
        server.add_repo("bench", "hub", work / "repo")
        os.environ.update(env_for(server))
        site = home / "site/safehub/policy.toml"
        site.parent.mkdir(parents=True)
        site.write_text(f"[[allow]]\nrepo = 'bench/*'\nsignature = 'required'\nkeys = ['{pub}']\n")

        import torch.hub

        import safehub

        point_torch_hub_at(server.api_url, server.web_url, str(server.ca_cert))
        sink = io.StringIO()

        def forget() -> None:
            for name in [m for m in sys.modules if m.startswith("pkg") or m == "hubconf"]:
                del sys.modules[name]

        def load(which: str) -> float:
            t0 = time.perf_counter()
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                if which == "torch":
                    torch.hub.load("bench/hub:v1.0", "tiny", trust_repo=True, verbose=False)
                else:
                    safehub.load("bench/hub:v1.0", "tiny", verbose=False)
            forget()
            return (time.perf_counter() - t0) * 1e3

        cold_signed = load("safehub")  # fetch + verify archive + verify signature
        entry = safehub.Hub().cache.lookup(git(work / "repo", "rev-parse", "HEAD"))
        assert entry is not None
        cold_key = [float(fresh(VERIFY_KEY, str(entry.path), str(pub)).split()[1])
                    for _ in range(3)]
        keyless = [float(fresh(VERIFY_KEYLESS, str(ROOT / "tests/fixtures/oms")))
                   for _ in range(3)]
        load("torch")
        warm_t = statistics.median(load("torch") for _ in range(50))
        warm_s = statistics.median(load("safehub") for _ in range(50))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    print("1,000-file hub repo signed with an EC P-256 key (OpenSSF Model Signing)")
    print(f"  signing (safehub sign)                          {sign_time * 1e3:8.0f} ms")
    print(f"  cold verification, fresh process, median of 3   "
          f"{statistics.median(cold_key) * 1e3:8.0f} ms   (budget 1,500 ms)")
    print(f"  keyless bundle (real Sigstore OMS fixture), fresh process "
          f"{statistics.median(keyless) * 1e3:6.0f} ms")
    print(f"  first signed load in-process (fetch + all checks) {cold_signed:6.0f} ms")
    print(f"warm signed load (verdict cached), median of 50: torch.hub {warm_t:.2f} ms, "
          f"safehub {warm_s:.2f} ms (+{warm_s - warm_t:.2f} ms, {warm_s / warm_t:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
