"""run_shared.py's tables (stdout) and JSON (every round, the machine, the versions)."""

from __future__ import annotations

import importlib.metadata
import statistics
from pathlib import Path
from typing import Any

from shared_bench.targets import Target

BASELINE = "gym-sync"
PACKAGES = ("vecenv", "gymnasium", "numpy", "envpool", "ale-py", "mujoco", "torch",
            "stable-baselines3", "opencv-python", "opencv-python-headless", "pufferlib-core", "psutil")


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages the numbers depend on (None when missing)."""
    out: dict[str, str | None] = {}
    for dist in PACKAGES:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _median(rounds: list[dict[str, Any]]) -> float | None:
    rates = [r["steps_per_s"] for r in rounds if "steps_per_s" in r]
    return statistics.median(rates) if rates else None


def table(scenario: str, t: Target, rows: dict[str, dict[str, Any]], num_envs: int,
          skipped: str | None = None) -> dict[str, Any]:
    """The JSON table of one scenario and target: every round, medians and ratios to gym-sync."""
    medians = {name: _median(row["rounds"]) for name, row in rows.items()}
    base = medians.get(BASELINE)
    out_rows = []
    for name, row in rows.items():
        med = medians[name]
        rates = [r["steps_per_s"] for r in row["rounds"] if "steps_per_s" in r]
        out_rows.append({
            **row,
            "steps_per_s": rates,
            "median_steps_per_s": med,
            "vs": {BASELINE: med / base} if med is not None and base else {},
            "layouts": _layouts(row["rounds"]),
            "errors": [r["error"] for r in row["rounds"] if "error" in r],
        })
    return {"title": f"{scenario}: {t.name}, N={num_envs}", "scenario": scenario, "env": t.name,
            "num_envs": num_envs, "unit": "env steps/s", "baselines": [BASELINE],
            "skipped": skipped, "rows": out_rows}


def _layouts(rounds: list[dict[str, Any]]) -> list[str]:
    """The ``layout`` vecenv-default built in each round (each child's, for two-runs)."""
    out = []
    for r in rounds:
        for built in r.get("children", [r]):
            if built.get("layout") is not None:
                out.append(built["layout"])
    return out


def _short_layout(layouts: list[str]) -> str:
    """``inline, 2 groups`` from the layouts' descriptions (the words before the colon)."""
    short = list(dict.fromkeys(lay.split(":", 1)[0] for lay in layouts))
    return "layout: " + " / ".join(short) if short else ""


def print_table(tab: dict[str, Any], description: str, idle: dict[str, float] | None) -> None:
    """One markdown table: contender, median steps/s, x gym-sync (and x the idle run)."""
    print(f"\n### {tab['title']} ({description})")
    if tab["skipped"]:
        print(f"skipped: {tab['skipped']}")
        return
    with_idle = bool(idle) and tab["scenario"] != "idle"
    head = "| contender | steps/s | × gym-sync |" + (" × idle |" if with_idle else "") + " note |"
    print(head + "\n|---|---:|---:|" + ("---:|" if with_idle else "") + "---|")
    for row in tab["rows"]:
        med, ratio = row["median_steps_per_s"], row["vs"].get(BASELINE)
        cells = [row["contender"], "–" if med is None else f"{med:,.0f}",
                 "–" if ratio is None else f"{ratio:.2f}×"]
        if with_idle:
            base = (idle or {}).get(row["contender"])
            cells.append(f"{med / base:.2f}×" if med is not None and base else "–")
        note = row["skipped"] and f"skipped: {row['skipped']}"
        note = note or (row["errors"] and f"failed: {row['errors'][0]}") or ""
        if row["layouts"]:
            note = (note + " " + _short_layout(row["layouts"])).strip()
        if row["rounds"] and "parts" in row["rounds"][0]:
            parts = [f"{p:,.0f}" for r in row["rounds"] if "parts" in r for p in r["parts"]]
            note = (note + " parts: " + ", ".join(parts)).strip()
        cells.append(note)
        print("| " + " | ".join(cells) + " |")


def idle_medians(tables: list[dict[str, Any]], env: str) -> dict[str, float]:
    """The idle scenario's median of each contender on ``env`` (empty when idle did not run)."""
    for tab in tables:
        if tab["scenario"] == "idle" and tab["env"] == env:
            return {r["contender"]: r["median_steps_per_s"] for r in tab["rows"]
                    if r["median_steps_per_s"]}
    return {}


def write(path: Path, settings: dict[str, Any], tables: list[dict[str, Any]]) -> None:
    """Every round of every table, the settings, the machine, the date and the versions."""
    from _common import write_json

    from vecenv.make import usable_cores

    write_json(path, "run_shared.py", settings, tables, {"cores": usable_cores(), "packages": package_versions()})
