"""The backend ``vecenv check`` recommends: a rule of thumb from the step cost, cross-checked
with the throughput each backend reached."""

from __future__ import annotations

from vecenv.bench.check_report import CheckReport
from vecenv.bench.check_values import size_text
from vecenv.make import usable_cores

__all__ = ["CHEAP_STEP_US", "THREAD_SPEEDUP", "recommend"]

#: below this many µs per env step, crossing a process boundary costs more than it saves
CHEAP_STEP_US = 20.0
#: a threaded run this much faster than serial means the step releases the GIL
THREAD_SPEEDUP = 1.3


def recommend(report: CheckReport) -> None:
    """Set ``report.recommendation`` and ``report.reason`` from the step cost and the backends."""
    ran = {b: e["steps_per_s"] for b, e in report.backends.items() if e["steps_per_s"]}
    if not ran:
        report.recommendation, report.reason = None, "no backend ran the env"
        return
    step_us = report.step_us
    obs = size_text(report.obs_bytes or 0)
    cores = usable_cores()
    measured = " (measured here: " + ", ".join(f"{b} {r:,.0f}" for b, r in ran.items()) + " env steps/s)"
    serial = ran.get("serial")
    thread = ran.get("thread")
    process = ran.get("process")
    best = max(ran, key=ran.__getitem__)
    if step_us is not None and step_us < CHEAP_STEP_US and serial:
        if best != "serial" and ran[best] > 1.5 * serial:
            report.recommendation = best
            report.reason = (
                f"a step costs only {step_us:.1f} µs, but {best} ran {ran[best] / serial:.1f}× "
                f"faster than serial here{measured}"
            )
            return
        report.recommendation = "serial"
        report.reason = (
            f"a step costs only {step_us:.1f} µs (observation {obs}), less than a round trip to "
            f"a worker, so stepping every env in the calling process is fastest{measured}"
        )
        return
    if serial and thread and thread > THREAD_SPEEDUP * serial:
        report.recommendation = "thread"
        report.reason = (
            f"threads ran {thread / serial:.1f}× faster than serial, so the step releases the "
            f"GIL; threads share the cores without copying observations between processes{measured}"
        )
        return
    cost = f"{step_us:,.0f} µs" if step_us is not None else "the step"
    if process and cores > 1:
        if serial and process < 0.9 * serial:
            report.recommendation = "serial"
            report.reason = (
                f"a step costs {cost}, enough for worker processes to pay off on {cores} idle "
                f"cores, but process ran slower than serial here (are the cores busy?){measured}"
            )
            return
        report.recommendation = "process"
        report.reason = (
            f"a step costs {cost} of CPU and holds the GIL, so worker processes on the {cores} "
            f"usable cores pay off; the {obs} observation travels through shared memory{measured}"
        )
        return
    report.recommendation = "serial" if serial else best
    why = "only one core is usable" if cores <= 1 else "the process backend did not run"
    report.reason = f"{why}{measured}"
