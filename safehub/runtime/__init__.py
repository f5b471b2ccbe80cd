"""The runtime guard: hold what a trusted repo's code does while it loads to the policy.

While safehub imports a repo's ``hubconf.py`` and runs its entrypoint, a
:class:`RuntimeGuard` built from the merged :class:`RuntimeRules` watches Python's audit
events (PEP 578) in that thread and the threads it starts: connections and lookups,
process starts, writes, native code. It refuses what the rules forbid with
:class:`~safehub.errors.RuntimeGuardError` where it happens, records everything in a
:class:`RuntimeReport`, and fails the load with the first refusal even if the repo's code
caught it. A tripwire and a record, not a sandbox (docs/runtime.md).

Typical use by the load pipeline::

    guard = RuntimeGuard(rules, repo="org/repo", tree=verified_dir)
    with guard.active() as report:
        model = call_entrypoint(verified_dir, "model", args, kwargs)
    audit(report.to_json())

and, around safehub's own work inside a guarded load (a nested load's fetch)::

    with suspended():
        ...
"""

from safehub.runtime._hook import routed, suspended
from safehub.runtime.guard import OwnWork, RuntimeGuard
from safehub.runtime.hygiene import Shadow, leftovers, shadowing
from safehub.runtime.report import RuntimeReport
from safehub.runtime.rules import RuntimeRules, hosts_of_urls

__all__ = [
    "OwnWork", "RuntimeGuard", "RuntimeReport", "RuntimeRules", "Shadow", "hosts_of_urls",
    "leftovers", "routed", "shadowing", "suspended",
]
