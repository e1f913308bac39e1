"""The backend ``vecenv check`` recommends: :func:`vecenv.layout.decide` on the measured step
cost (the rule ``backend="auto"`` follows), cross-checked with the throughput each backend
reached here."""

from __future__ import annotations

from vecenv.check.report import CheckReport
from vecenv.check.values import size_text
from vecenv.layout import EnvProbe, decide, machine_costs
from vecenv.make import usable_cores

#: a threaded run this much faster than serial means the step releases the GIL
THREAD_SPEEDUP = 1.3
#: a measured backend this much faster than the rule's choice overrides the rule
MEASURED_LEAD = 1.5


def recommend_backend(report: CheckReport) -> None:
    """Set ``report.recommendation`` and ``report.reason`` from the step cost and the backends."""
    ran = {b: e["steps_per_s"] for b, e in report.backends.items() if e["steps_per_s"]}
    if not ran:
        report.recommendation, report.reason = None, "no backend ran the env"
        return
    cores = usable_cores()
    measured = " (measured here: " + ", ".join(f"{b} {r:,.0f}" for b, r in ran.items()) + " env steps/s)"
    serial, thread = ran.get("serial"), ran.get("thread")
    if serial and thread and thread > THREAD_SPEEDUP * serial:
        report.recommendation = "thread"
        report.reason = (
            f"threads ran {thread / serial:.1f}× faster than serial, so the step releases the "
            f"GIL; threads share the cores without copying observations between processes{measured}"
        )
        return
    if report.step_us is None:
        best = max(ran, key=ran.__getitem__)
        report.recommendation, report.reason = best, f"it ran fastest here{measured}"
        return
    probe = EnvProbe(report.step_us, 1.0, report.obs_bytes or 0)
    layout = decide(probe, machine_costs(), report.num_envs, cores)
    choice = layout.backend
    best = max(ran, key=ran.__getitem__)
    if choice in ran and best != choice and ran[best] > MEASURED_LEAD * ran[choice]:
        report.recommendation = best
        report.reason = (
            f"the rule picks {layout.name} ({layout.reason}), but {best} ran "
            f"{ran[best] / ran[choice]:.1f}× faster here{measured}"
        )
        return
    report.recommendation = choice
    options = ", ".join(f"{k}={v!r}" for k, v in layout.kwargs().items())
    how = f"backend={choice!r}" + (f", {options}" if options else "")
    obs = size_text(report.obs_bytes or 0)
    report.reason = f"{how} — {layout.reason}; observation {obs}; the rule vecenv.make's backend='auto' follows{measured}"
