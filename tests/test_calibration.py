"""The machine calibration behind ``backend="auto"``: the load reading, what is (never) saved, the
cheap check of a cached calibration, and where the calibration is shown. Measurements are
injected (no real load, no speed asserted) except in one test that measures for real."""

from __future__ import annotations

import json
import math
import time

import pytest

from helpers import needs_processes
from vecenv import layout as L
from vecenv.cli import main
from vecenv.layout import EnvProbe, MachineCosts, choose, contended, describe_costs
from vecenv.layout import machine as M

DAY = 86400.0


# ==================================================================== others_busy and contended
def _loadavg(monkeypatch, texts, cores=(2, 2)):
    """Serve ``texts`` as successive /proc/loadavg readings on a fake clock (1 ms a reading)."""
    feed = iter(texts)
    now = [0.0]

    def clock():
        now[0] += 0.001
        return now[0]

    monkeypatch.setattr(M, "_read_loadavg", lambda: next(feed))
    monkeypatch.setattr(M, "_clock", clock)
    monkeypatch.setattr(M, "_sleep", lambda s: None)
    monkeypatch.setattr(M, "_cores", lambda: cores)


def _text(running: int) -> str:
    return f"0.52 0.33 0.15 {running}/91 6204\n"


def test_others_busy_averages_the_runnable_tasks_but_the_reader(monkeypatch):
    _loadavg(monkeypatch, [_text(1)] * 100)
    assert M.others_busy(0.01) == 0.0  # only the reader runs
    _loadavg(monkeypatch, [_text(2)] * 100)
    assert M.others_busy(0.01) == 1.0  # one hog
    _loadavg(monkeypatch, [_text(r) for r in (1, 3, 1, 3)] * 25)
    assert M.others_busy(0.01) == pytest.approx(1.0)  # two hogs half the time
    _loadavg(monkeypatch, [_text(0)] * 100)
    assert M.others_busy(0.01) == 0.0


def test_others_busy_reads_about_every_sample_over_its_duration(monkeypatch):
    _loadavg(monkeypatch, [_text(2)] * 1000)
    reads = []
    read = M._read_loadavg
    monkeypatch.setattr(M, "_read_loadavg", lambda: reads.append(1) or read())
    M.others_busy(0.02)
    assert 15 <= len(reads) <= 25  # the fake clock moves 1 ms a reading


def test_others_busy_scales_a_machine_wide_count_to_this_process_cores(monkeypatch):
    _loadavg(monkeypatch, [_text(9)] * 100, cores=(2, 16))
    assert M.others_busy(0.01) == pytest.approx(8 * 2 / 16)


@pytest.mark.parametrize("text", ["", "garbage", "0.1 0.2 0.3 x/91 6204"])
def test_others_busy_is_none_without_a_readable_loadavg(monkeypatch, text):
    _loadavg(monkeypatch, [text] * 10)
    assert M.others_busy(0.01) is None

    def missing():
        raise FileNotFoundError(M.LOADAVG)

    monkeypatch.setattr(M, "_read_loadavg", missing)
    assert M.others_busy(0.01) is None


def test_others_busy_reads_this_machine():
    got = M.others_busy(0.005)
    assert got is None or got >= 0.0


@pytest.mark.parametrize(
    ("others", "expected"), [(None, False), (0.0, False), (0.3, False), (0.5, True), (1.0, True)]
)
def test_contended_from_half_a_core(others, expected):
    assert contended(2, others) is expected
    assert contended(64, others) is expected


# ==================================================================== what is saved, and the check
#: µs per batched step of the no-op envs on a quiet 2-core machine: serial 1 and 8 envs, process
#: with 1 and 2 groups, inline with 2 (per env 1.0, so the process crossing is 9.0 µs)
QUIET = {("serial", 1): 6.0, ("serial", 8): 13.0, ("process", 1): 10.0, ("process", 2): 29.0, ("inline", 2): 40.0}
GOOD = MachineCosts(5.0, 1.0, (9.0, 19.0), (39.0, 0.0), 2)


class Rig:
    """Injected measurements: the trials per (kind, n), the load readings, the process clock."""

    def __init__(self, monkeypatch, tmp_path):
        self.figures = dict(QUIET)
        self.trials_of: dict = {}  # (kind, n) -> trials, instead of TRIALS equal ones
        self.others: list = [0.0]  # successive others_busy readings; the last one repeats
        self.calls: list = []  # (kind, n, steps) of every measurement
        self.now = 1000.0
        self.dir = tmp_path
        monkeypatch.setenv("VECENV_CACHE_DIR", str(tmp_path))
        monkeypatch.setattr(M, "_COSTS", {})
        monkeypatch.setattr(M, "usable_cores", lambda: 2)
        monkeypatch.setattr(M, "_measure_trials", self.trials)
        monkeypatch.setattr(M, "gil_enabled", lambda: True)  # no thread figures (test_free_threading's)
        monkeypatch.setattr(M, "_monotonic", lambda: self.now)
        monkeypatch.setattr(M, "others_busy", self.busy)

    def trials(self, kind, n, steps=M.TRIAL_STEPS, warmup=50):
        self.calls.append((kind, n, steps))
        return list(self.trials_of.get((kind, n), [self.figures[(kind, n)]] * M.TRIALS))

    def busy(self, duration_s=0.02):
        return self.others.pop(0) if len(self.others) > 1 else self.others[0]

    def saved(self) -> dict | None:
        files = list(self.dir.glob("machine-*.json"))
        return json.loads(files[0].read_text()) if files else None

    def cache(self, costs: MachineCosts) -> str:
        """Write ``costs`` as the cache file; its path."""
        M._save(M._machine_file(2), costs)
        return M._machine_file(2)

    def full(self) -> int:
        return sum(1 for c in self.calls if c[:2] == ("serial", 1))

    def checks(self) -> int:
        return sum(1 for c in self.calls if c[2] == M.CHECK_STEPS)


@pytest.fixture
def rig(monkeypatch, tmp_path):
    return Rig(monkeypatch, tmp_path)


def _text_of(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_a_quiet_steady_calibration_is_saved(rig):
    got = L.machine_costs()
    assert (got.fixed_us, got.per_env_us, got.process_us, got.inline_us) == (5.0, 1.0, (9.0, 19.0), (39.0, 0.0))
    assert got.source == "measured" and not got.contended and got.others_busy == 0.0
    saved = rig.saved()
    assert saved["process_us"] == [9.0, 19.0] and saved["measured_at"] == got.measured_at
    assert "source" not in saved and "contended" not in saved  # provenance is the process's own


def test_a_calibration_beside_a_busy_core_is_used_but_not_saved(rig):
    rig.others = [1.0]
    rig.figures[("process", 1)] = 114.0  # a worker waiting for its core: steady, and slow
    got = L.machine_costs()
    assert got.contended and got.process_us[0] == 113.0 and got.others_busy == 1.0
    assert "1.0 cores' worth of other work" in got.note
    assert rig.saved() is None
    text = describe_costs(got)
    assert text.startswith("machine costs measured now while the machine was busy (1.0 cores'")
    assert text.endswith("used by this process only, not saved")


def test_trials_that_disagree_are_contended_and_not_saved(rig):
    rig.trials_of[("process", 1)] = [6.0, 6.0, 114.0]  # a program started during the trials
    got = L.machine_costs()
    assert got.contended and "trials disagreed: process×1 6.0–114.0 µs" in got.note
    assert rig.saved() is None
    # the load read quiet: a noisy machine, not a busy one; measuring again at every call would
    # cost each make 0.15 s, so it waits the ten minutes
    rig.now += 1
    assert L.machine_costs() is got and rig.full() == 1
    rig.now += M.RECHECK_S
    L.machine_costs()
    assert rig.full() == 2


def test_a_contended_calibration_serves_while_the_machine_stays_busy_and_is_measured_again_once_quiet(rig):
    rig.others = [1.0]
    busy = L.machine_costs()
    assert L.machine_costs() is busy and rig.full() == 1  # still busy: the one in memory
    rig.now += 1
    rig.others = [0.0]
    quiet = L.machine_costs()
    assert rig.full() == 2 and not quiet.contended and quiet.process_us[0] == 9.0
    assert rig.saved() is not None and L.machine_costs() is quiet and rig.full() == 2


def test_a_poisoned_cache_is_replaced_when_a_quiet_check_measures_less(rig):
    path = rig.cache(MachineCosts(5.0, 1.0, (113.0, 19.0), (39.0, 0.0), 2, time.time() - 3 * DAY))
    got = L.machine_costs()
    assert rig.checks() == 1 and rig.full() == 1
    assert got.source == "measured" and got.process_us[0] == 9.0
    assert "replaces a cache that said a crossing costs 113.0 µs; a check measured 9.0 µs" in got.note
    assert json.loads(_text_of(path))["process_us"][0] == 9.0


def test_a_good_cache_is_kept_and_not_rewritten_when_the_machine_is_busy_at_the_check(rig):
    path = rig.cache(MachineCosts(5.0, 1.0, (9.0, 19.0), (39.0, 0.0), 2, time.time() - 3 * DAY))
    before = _text_of(path)
    rig.others = [1.0]
    rig.figures[("process", 1)] = 114.0
    got = L.machine_costs()
    assert rig.checks() == 1 and rig.full() == 0 and _text_of(path) == before
    assert got.source == "cache" and not got.contended and got.process_us[0] == 9.0
    assert describe_costs(got) == (
        "machine costs measured 3 days ago, from the cache; "
        "not checked: the machine is busy now (1.0 cores' worth of other work)"
    )


def test_a_check_with_trials_that_disagree_leaves_the_cache_unchecked(rig):
    path = rig.cache(MachineCosts(5.0, 1.0, (9.0, 19.0), (39.0, 0.0), 2, time.time() - DAY))
    before = _text_of(path)
    rig.trials_of[("process", 1)] = [10.0, 10.0, 114.0]
    got = L.machine_costs()
    assert got.source == "cache" and rig.full() == 0 and _text_of(path) == before
    assert "not checked: the machine is busy now (trials disagreed" in got.note


def test_a_quiet_check_that_agrees_verifies_the_cache(rig):
    path = rig.cache(MachineCosts(5.0, 1.0, (9.0, 19.0), (39.0, 0.0), 2, time.time() - 3 * DAY))
    before = _text_of(path)
    rig.figures[("process", 1)] = 12.0  # 11 µs: within CHECK_TOLERANCE of 9
    got = L.machine_costs()
    assert rig.calls == [("process", 1, M.CHECK_STEPS)] and _text_of(path) == before
    assert got.source == "verified" and got.check_us == 11.0 and got.process_us[0] == 9.0
    assert describe_costs(got) == "machine costs measured 3 days ago, verified now (a check crossed in 11.0 µs)"


def test_a_measurement_disturbed_after_a_quiet_check_keeps_the_cache(rig):
    path = rig.cache(MachineCosts(5.0, 1.0, (113.0, 19.0), (39.0, 0.0), 2, time.time() - DAY))
    before = _text_of(path)
    rig.others = [0.0, 0.0, 1.0]  # quiet around the check, busy around the full measurement
    got = L.machine_costs()
    assert rig.full() == 1 and _text_of(path) == before
    assert got.source == "cache" and not got.contended and got.process_us[0] == 113.0
    assert got.note.startswith("kept: measuring again now was disturbed (1.0 cores' worth")


def test_the_calibration_is_reused_in_memory_and_checked_again_after_ten_minutes(rig):
    first = L.machine_costs()
    assert rig.full() == 1 and rig.checks() == 0
    rig.now += M.RECHECK_S - 1
    assert L.machine_costs() is first and len(rig.calls) == 5
    rig.now += 2
    again = L.machine_costs()
    assert rig.full() == 1 and rig.checks() == 1 and again.source == "verified"
    assert L.machine_costs() is again and rig.checks() == 1


def test_refresh_measures_again_and_saves_only_when_quiet(rig):
    path = rig.cache(MachineCosts(5.0, 1.0, (9.0, 19.0), (39.0, 0.0), 2, time.time() - DAY))
    before = _text_of(path)
    rig.others = [1.0]
    rig.figures[("process", 1)] = 114.0
    kept = L.machine_costs(refresh=True)
    assert rig.full() == 1 and rig.checks() == 0 and _text_of(path) == before
    assert kept.process_us[0] == 9.0 and kept.note.startswith("kept: measuring again now was disturbed")
    rig.others = [0.0]
    rig.figures[("process", 1)] = 11.0
    fresh = L.machine_costs(refresh=True)
    assert rig.full() == 2 and fresh.source == "measured" and rig.saved()["process_us"][0] == 10.0


# ==================================================================== where the calibration shows
@pytest.mark.parametrize(
    ("age_s", "text"),
    [(0, "now"), (59, "now"), (120, "2 min ago"), (7200, "2 h ago"), (30 * 3600, "30 h ago"), (3 * DAY, "3 days ago")],
)
def test_describe_costs_says_the_age(age_s, text):
    costs = MachineCosts(5.0, 1.0, (9.0, 0.0), (39.0, 0.0), 2, measured_at=1e9)
    assert describe_costs(costs, now=1e9 + age_s) == f"machine costs measured {text}"


def test_describe_costs_says_when_it_was_verified():
    costs = MachineCosts(5.0, 1.0, (9.0, 0.0), (39.0, 0.0), 2, 1e9, source="verified", checked_at=1e9 + 2 * DAY)
    assert describe_costs(costs, now=1e9 + 2 * DAY + 300) == "machine costs measured 2 days ago, verified 5 min ago"


@needs_processes
def test_choose_says_which_calibration_it_used(monkeypatch):
    costs = MachineCosts(20.0, 3.0, (80.0, 8.0), (37.0, 8.0), 2, time.time() - 3 * DAY,
                         source="verified", checked_at=time.time(), check_us=79.0)
    monkeypatch.setattr(L, "usable_cores", lambda: 2)
    monkeypatch.setattr(L, "cached_probe", lambda fn: EnvProbe(step_us=8.0))
    monkeypatch.setattr(L, "machine_costs", lambda refresh=False: costs)
    got = choose([object] * 8, {})
    assert got.calibration == "machine costs measured 3 days ago, verified now (a check crossed in 79.0 µs)"
    assert str(got).endswith(f" [{got.calibration}]")
    monkeypatch.setenv("VECENV_BACKEND", "serial")
    assert choose([object] * 8, {}).calibration == ""  # forced: nothing measured


def test_check_warns_about_a_contended_calibration(monkeypatch):
    import vecenv.check as check_calibration
    from vecenv.check import CheckReport

    busy = MachineCosts(5.0, 1.0, (113.0, 0.0), (120.0, 0.0), 2, contended=True, note="1.0 cores' worth of other work")
    monkeypatch.setattr(check_calibration, "machine_costs", lambda refresh=False: busy)
    report = CheckReport("env", 2, 10)
    check_calibration.check_calibration(report)
    info, warning = report.findings
    assert info.level == "info" and info.message.startswith("machine calibration: crossing 113.0 µs (process)")
    assert "while the machine was busy (1.0 cores' worth of other work)" in info.message
    assert warning.level == "warning" and "--recalibrate" in warning.message
    quiet = MachineCosts(5.0, 1.0, (9.0, 0.0), (39.0, 0.0), 2, time.time() - 2 * DAY, source="verified", checked_at=time.time())
    monkeypatch.setattr(check_calibration, "machine_costs", lambda refresh=False: quiet)
    report = CheckReport("env", 2, 10)
    check_calibration.check_calibration(report)
    (info,) = report.findings
    assert info.message == (
        "machine calibration: crossing 9.0 µs (process), 39.0 µs (inline, 2 groups); "
        "machine costs measured 2 days ago, verified now"
    )


@pytest.mark.timeout(120)
def test_vecenv_check_recalibrate_measures_again(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("VECENV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(M, "_COSTS", {})
    measured = []
    real = M.measure_machine
    monkeypatch.setattr(M, "measure_machine", lambda cores=None: measured.append(cores) or real(cores))
    code = main(["check", "CartPole-v1", "--num-envs", "2", "--steps", "20", "--no-spawn",
                 "--backends", "serial", "--recalibrate"])
    out = capsys.readouterr().out
    assert code == 0, out
    # a contended result is measured again by the first later call that finds the machine quiet
    assert measured and "machine calibration: crossing" in out and "machine costs measured now" in out
    assert "recommended backend:" in out


# ==================================================================== for real (nothing timed)
@pytest.mark.timeout(120)
def test_a_real_calibration_gives_finite_positive_figures_and_checks_itself(monkeypatch, tmp_path):
    monkeypatch.setenv("VECENV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(M, "_COSTS", {})
    costs = L.machine_costs(refresh=True)
    figures = (costs.fixed_us, costs.per_env_us, *costs.process_us, *costs.inline_us)
    assert all(math.isfinite(x) and x >= 0 for x in figures)
    assert costs.per_env_us > 0 and costs.process_us[0] > 0 and costs.inline_us[0] > 0
    assert costs.source == "measured" and (costs.others_busy is None or costs.others_busy >= 0)
    assert len(list(tmp_path.iterdir())) == (0 if costs.contended else 1)  # a contended one: not saved
    monkeypatch.setattr(M, "_COSTS", {})
    again = L.machine_costs()  # the cheap check (or a new measurement where nothing was saved)
    assert again.source in ("verified", "cache", "measured") and again.process_us[0] > 0
