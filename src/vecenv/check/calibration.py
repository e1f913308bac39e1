"""The machine calibration ``vecenv check`` (and ``backend="auto"``) uses: which one it is, how
old, whether it was checked, and a warning when it was measured on a busy machine."""

from __future__ import annotations

from vecenv.check.report import CheckReport
from vecenv.layout.machine import describe_costs, machine_costs


def check_calibration(report: CheckReport, refresh: bool = False) -> None:
    """Add the calibration as an ``info`` finding (a ``warning`` too when it is contended);
    ``refresh`` measures the machine again first (``vecenv check --recalibrate``)."""
    try:
        costs = machine_costs(refresh=refresh)
    except Exception as exc:  # the check goes on; the recommendation reports its own failure
        report.add("warning", "calibration", f"the machine could not be calibrated ({type(exc).__name__}: {exc})")
        return
    report.add(
        "info", "calibration",
        f"machine calibration: crossing {costs.process_us[0]:.1f} µs (process), "
        f"{costs.inline_us[0]:.1f} µs (inline, 2 groups); {describe_costs(costs)}",
    )
    if costs.contended:
        report.add(
            "warning", "calibration",
            "the machine calibration was measured while other work ran or its trials disagreed, "
            "so its crossings may read slow and the recommendation lean to serial; it is not saved: "
            "the next run measures again (or run with --recalibrate on a quiet machine)",
        )
