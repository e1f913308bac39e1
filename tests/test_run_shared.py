"""benchmarks/run_shared.py end to end, on a tiny budget: the JSON it writes, the ratios to
gym-sync, and no busy process or two-runs child left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc: the benchmark reads the machine's load there")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "run_shared.py"


def _leftovers(pid: int) -> list[list[str]]:
    """Processes started by run_shared.py ``pid`` still running: its busy processes (the
    ``while True: pass`` one) and its two-runs children (each names its parent's pid)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        busy = any("while True: pass" in a for a in argv) and "run_shared-busy" in argv
        child = "--child" in argv and "--parent-pid" in argv
        if (busy or child) and str(pid) in argv:
            found.append(argv)
    return found


def _run(tmp_path: Path, *args: str, timeout: float = 240) -> dict:
    out = tmp_path / "shared.json"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        text, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, text
    assert _leftovers(proc.pid) == [], text
    return json.loads(out.read_text())


def _rows(doc: dict, scenario: str) -> dict[str, dict]:
    (table,) = [t for t in doc["tables"] if t["scenario"] == scenario]
    assert table["env"] == "CartPole-v1" and table["num_envs"] == 8
    return {row["contender"]: row for row in table["rows"]}


def _scenario_rows(tmp_path: Path, scenario: str, names: list[str]) -> dict[str, dict]:
    """Run ``scenario`` on CartPole with contenders ``names``; its rows, in that order."""
    doc = _run(tmp_path, "--scenario", scenario, "--envs", "CartPole-v1", "--contenders", ",".join(names))
    rows = _rows(doc, scenario)
    assert list(rows) == names
    return rows


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_idle_and_busy(tmp_path: Path) -> None:
    names = ["gym-sync", "vecenv-default", "vecenv-serial"]
    doc = _run(tmp_path, "--scenario", "idle,busy", "--envs", "CartPole-v1",
               "--contenders", ",".join(names))
    assert doc["script"] == "run_shared.py"
    assert doc["settings"]["scenarios"] == ["idle", "busy"]
    assert doc["machine"]["cpu_model"] and doc["machine"]["packages"]["gymnasium"]
    for scenario in ("idle", "busy"):
        rows = _rows(doc, scenario)
        assert list(rows) == names
        for name, row in rows.items():
            assert row["median_steps_per_s"] > 0, (scenario, name, row)
            assert len(row["rounds"]) == 1 and not row["errors"]
        assert rows["gym-sync"]["vs"]["gym-sync"] == 1.0
        assert len(rows["vecenv-default"]["layouts"]) == 1  # what backend="auto" chose


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_runs(tmp_path: Path) -> None:
    rows = _scenario_rows(tmp_path, "two-runs", ["gym-sync", "vecenv-serial"])
    for name, row in rows.items():
        (record,) = row["rounds"]
        assert len(record["parts"]) == 2 and all(p > 0 for p in record["parts"]), (name, record)
        assert record["steps_per_s"] == pytest.approx(sum(record["parts"]))
        assert row["median_steps_per_s"] > 0
    assert rows["gym-sync"]["vs"]["gym-sync"] == 1.0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_after_busy_builds_once_beside_a_busy_process_then_measures_a_second_build(tmp_path: Path) -> None:
    rows = _scenario_rows(tmp_path, "after-busy", ["gym-sync", "vecenv-default"])
    (record,) = rows["vecenv-default"]["rounds"]
    assert record["steps_per_s"] > 0 and "error" not in record, record
    assert "(auto)" in record["beside_busy_built"] and record["beside_busy_layout"]
    assert record["layout"] and rows["vecenv-default"]["layouts"] == [record["layout"]]
    assert rows["gym-sync"]["vs"]["gym-sync"] == 1.0


def test_bad_options_exit_2() -> None:
    for bad in (["--contenders", "nope"], ["--scenario", "lunch"], ["--envs", "NoSuchEnv-v9"]):
        proc = subprocess.run([sys.executable, str(SCRIPT), *bad], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2, (bad, proc.stderr)
        assert bad[1] in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_real_compares_gymnasium_sb3_and_vecenv(tmp_path: Path) -> None:
    """benchmarks/run_real.py: run_shared's idle scenario with gymnasium's and SB3's vector envs
    beside vecenv's (here on CartPole, for speed); the JSON names the script that ran."""
    pytest.importorskip("stable_baselines3")
    names = ["gym-sync", "gym-async", "sb3-dummy", "sb3-subproc", "vecenv-sb3-subproc", "vecenv-process"]
    out = tmp_path / "real.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT.with_name("run_real.py")), "--quick", "--json", str(out),
         "--envs", "CartPole-v1", "--contenders", ",".join(names)],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["settings"]["scenarios"] == ["idle"]
    rows = _rows(doc, "idle")
    assert list(rows) == names
    for name, row in rows.items():
        assert row["median_steps_per_s"] > 0 and not row["errors"], (name, row)
