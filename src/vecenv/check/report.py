"""The findings of ``vecenv check`` and how they are shown: plain words and JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON_SCHEMA = "vecenv-check/1"


@dataclass
class Finding:
    """One line of the report."""

    level: str  # "ok" | "info" | "warning" | "problem"
    topic: str
    message: str


@dataclass
class CheckReport:
    """Everything ``vecenv check`` found about one env."""

    env: str
    num_envs: int
    steps: int
    findings: list[Finding] = field(default_factory=list)
    step_us: float | None = None
    obs_bytes: int | None = None
    #: backend -> {"steps_per_s": float | None, "num_workers": int | None, "error": str | None}
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)
    recommendation: str | None = None
    reason: str = ""

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "problem"]

    def add(self, level: str, topic: str, message: str) -> None:
        self.findings.append(Finding(level, topic, message))


_MARK = {"ok": "ok", "info": "info", "warning": "WARNING", "problem": "PROBLEM"}


def format_report(report: CheckReport) -> str:
    """The report in plain words."""
    lines = [f"vecenv check {report.env} — {report.num_envs} copies, {report.steps} steps"]
    for f in report.findings:
        lines.append(f"  {_MARK[f.level]:<8} {f.message}")
    if report.recommendation:
        lines.append(f"recommended backend: {report.recommendation} — {report.reason}")
    n = len(report.problems)
    lines.append("no problems found" if n == 0 else f"{n} problem{'s' if n > 1 else ''} found")
    return "\n".join(lines)


def report_to_json(report: CheckReport) -> dict[str, Any]:
    """The report as JSON-ready data."""
    from vecenv.bench.report import machine_info, versions

    return {
        "schema": JSON_SCHEMA,
        "env": report.env,
        "num_envs": report.num_envs,
        "steps": report.steps,
        "problems": len(report.problems),
        "findings": [f.__dict__ for f in report.findings],
        "step_us": report.step_us,
        "obs_bytes": report.obs_bytes,
        "backends": report.backends,
        "recommendation": {"backend": report.recommendation, "reason": report.reason},
        "machine": machine_info(),
        "versions": versions(),
    }
