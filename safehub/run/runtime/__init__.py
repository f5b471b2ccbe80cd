"""The runtime guard: a record of what a trusted repo's code does while it loads, and a
seatbelt that holds code which is not hiding to the policy.

While safehub imports a repo's ``hubconf.py`` and runs its entrypoint, a
:class:`RuntimeGuard` built from the merged :class:`RuntimeRules` watches Python's audit
events (PEP 578) in that thread and the threads it starts: connections and lookups,
process starts, writes, native code. It refuses what the rules forbid with
:class:`~safehub.errors.RuntimeGuardError` where it happens, records everything in a
:class:`RuntimeReport`, and fails the load with the first refusal even if the repo's code
caught it. Code that wants to get past an audit hook can: ``safehub run --confine`` holds
a job to its policy with the kernel's Landlock (docs/runtime.md).

Typical use by the load pipeline::

    guard = RuntimeGuard(rules, repo="org/repo", tree=verified_dir, own=own_work_list)
    with guard.active() as report:
        model = call_entrypoint(verified_dir, "model", args, kwargs)
    audit(report.to_json())

and, around safehub's own work inside a guarded load (a nested load's fetch)::

    with own_work():
        ...
"""

from safehub.run.hygiene import Shadow, leftovers, shadowing
from safehub.run.runtime._hook import own_work
from safehub.run.runtime.guard import RuntimeGuard
from safehub.run.runtime.report import RuntimeReport
from safehub.run.runtime.rules import OwnWork, RuntimeRules

__all__ = [
    "OwnWork", "RuntimeGuard", "RuntimeReport", "RuntimeRules", "Shadow",
    "leftovers", "own_work", "shadowing",
]
