"""vecenv's own files on a machine shared with other users: the live-runs registry and the
calibration cache are kept only in directories of this user's alone, and nothing planted there
(a link, a FIFO, a huge or foreign file) is followed, blocked on, or counted."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings

import pytest

import vecenv
from vecenv import runs, system
from vecenv.runs import UnsafePathWarning

POSIX = os.name == "posix"
needs_posix = pytest.mark.skipif(not POSIX, reason="needs POSIX uids, modes, symlinks and FIFOs")


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """A fresh registry directory (not yet created) and no warnings remembered."""
    path = tmp_path / "runs"
    monkeypatch.setenv("VECENV_RUNS_DIR", str(path))
    monkeypatch.setattr(runs, "_warned", set())
    return path


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@needs_posix
def test_the_registry_is_created_private_and_an_entry_is_a_regular_file(registry):
    runs.opened()
    try:
        st = os.lstat(registry)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
        entry = registry / str(os.getpid())
        assert stat.S_ISREG(os.lstat(entry).st_mode)
        assert entry.read_text() == (system.process_start_time(os.getpid()) or "")
        assert stat.S_IMODE(os.lstat(entry).st_mode) == 0o600
    finally:
        runs.closed()
    assert not (registry / str(os.getpid())).exists()


@needs_posix
def test_a_planted_symlink_is_replaced_never_written_through(registry, tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("the user's notes")
    registry.mkdir(mode=0o700)
    (registry / str(os.getpid())).symlink_to(victim)  # where this process writes its entry
    sleeper = _sleeper()
    try:
        (registry / str(sleeper.pid)).symlink_to(victim)  # a live pid: would count as a run
        assert runs.other_runs() == 0
        assert not (registry / str(sleeper.pid)).exists() and not os.path.islink(registry / str(sleeper.pid))
        runs.opened()
        runs.closed()
    finally:
        sleeper.kill()
        sleeper.wait(10)
    assert victim.read_text() == "the user's notes"


@needs_posix
@pytest.mark.timeout(30)
def test_a_fifo_is_skipped_without_blocking(registry):
    registry.mkdir(mode=0o700)
    os.mkfifo(registry / "1")  # pid 1 is alive: a file would count
    started = time.monotonic()
    assert runs.other_runs() == 0
    assert time.monotonic() - started < 5
    assert not (registry / "1").exists()  # ours and not an entry: removed


def test_a_huge_or_garbled_entry_is_not_a_run(registry):
    registry.mkdir(mode=0o700)
    sleeper = _sleeper()
    try:
        (registry / str(sleeper.pid)).write_bytes(b"1" * (1 << 20))
        assert runs.other_runs() == 0
        (registry / str(sleeper.pid)).write_bytes(b"\x00garbage")
        assert runs.other_runs() == 0
        assert not (registry / str(sleeper.pid)).exists()
    finally:
        sleeper.kill()
        sleeper.wait(10)


@needs_posix
def test_a_directory_others_can_write_to_is_refused_once_with_a_warning(registry):
    registry.mkdir()
    os.chmod(registry, 0o777)
    sleeper = _sleeper()
    try:
        (registry / str(sleeper.pid)).write_text(system.process_start_time(sleeper.pid) or "")
        with pytest.warns(UnsafePathWarning, match="other users can write to it") as caught:
            assert runs.other_runs() == 0
        assert str(registry) in str(caught[0].message) and "live runs" in str(caught[0].message)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert runs.other_runs() == 0  # reported once, not at every look
            runs.opened()
            runs.closed()
        assert sorted(p.name for p in registry.iterdir()) == [str(sleeper.pid)]  # nothing written
    finally:
        sleeper.kill()
        sleeper.wait(10)


@needs_posix
def test_a_directory_of_another_user_or_a_link_is_refused(registry, tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    registry.symlink_to(real)
    with pytest.warns(UnsafePathWarning, match="symbolic link"):
        assert runs.other_runs() == 0
    registry.unlink()
    registry.mkdir(mode=0o700)
    monkeypatch.setattr(runs, "_uid", lambda: os.getuid() + 1)  # as if another's
    with pytest.warns(UnsafePathWarning, match="belongs to uid"):
        runs.opened()
    runs.closed()
    assert not list(registry.iterdir())


def test_the_runtime_directory_is_preferred_to_the_shared_temporary_one(tmp_path, monkeypatch):
    monkeypatch.delenv("VECENV_RUNS_DIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert runs.runs_dir() == str(tmp_path / "vecenv-runs")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert runs.runs_dir().startswith(tempfile.gettempdir())


@needs_posix
def test_the_calibration_cache_ignores_planted_and_foreign_files(tmp_path, monkeypatch):
    from vecenv.layout import machine
    from vecenv.layout.rule import MachineCosts

    monkeypatch.setattr(runs, "_warned", set())
    cache = tmp_path / "cache"
    monkeypatch.setenv("VECENV_CACHE_DIR", str(cache))
    costs = MachineCosts(20.0, 3.0, (80.0, 8.0), (37.0, 8.0), 2, measured_at=time.time())
    path = machine._machine_file(2)
    machine._save(path, costs)
    assert stat.S_IMODE(os.lstat(cache).st_mode) == 0o700
    assert machine._load(path).process_us == (80.0, 8.0)

    victim = tmp_path / "notes.txt"
    victim.write_text("the user's notes")
    os.remove(path)
    os.symlink(victim, path)
    assert machine._load(path) is None  # a link is not read
    machine._save(path, costs)  # and not written through
    assert victim.read_text() == "the user's notes" and not os.path.islink(path)

    with open(path, "w") as f:  # a huge file is not parsed
        json.dump({"pad": "x" * (1 << 20)}, f)
    assert machine._load(path) is None

    machine._save(path, costs)
    os.chmod(cache, 0o777)
    with pytest.warns(UnsafePathWarning, match="calibration cache"):
        assert machine._load(path) is None


# ------------------------------------------------------------------------------ two real users
ATTACKER = 65534  # nobody


def _attack(base: str, victim_file: str) -> str:
    """As another user: the victim's registry directory made first, mode 777, full of links to
    the victim's file under live pids, and a FIFO."""
    target = os.path.join(base, f"vecenv-runs-{os.getuid()}")
    script = textwrap.dedent(f"""
        set -e
        mkdir -m 777 {target}
        for pid in 1 2 {os.getpid()} $(seq 3 400); do ln -sf {victim_file} {target}/$pid; done
        rm -f {target}/1 && mkfifo -m 666 {target}/1
    """)
    subprocess.run(["/bin/sh", "-c", script], user=ATTACKER, group=ATTACKER, check=True, timeout=60)
    return target


@pytest.mark.timeout(120)
@pytest.mark.skipif(not POSIX or os.geteuid() != 0,
                    reason="needs root, to act as a second user (uid 65534) beside this one")
def test_another_user_cannot_overwrite_steer_or_hang_vecenv(tmp_path):
    base = tempfile.mkdtemp(prefix="vecenv-shared-tmp-")  # a /tmp of its own: sticky, world-writable
    os.chmod(base, 0o1777)
    try:
        victim = tmp_path / "notes.txt"
        victim.write_text("the user's notes")
        target = _attack(base, str(victim))
        assert os.stat(target).st_uid == ATTACKER
        planted = sorted(os.listdir(target))
        victim_script = textwrap.dedent("""
            import time, warnings, vecenv
            from vecenv import runs
            warnings.simplefilter("always")
            with warnings.catch_warnings(record=True) as caught:
                started = time.monotonic()
                with vecenv.make("CartPole-v1", 2) as envs:
                    envs.reset(seed=0)
                    print("seconds", time.monotonic() - started)
                    print("other_runs", runs.other_runs())
            print("warnings", sum("vecenv does not use" in str(w.message) for w in caught))
        """)
        env = {k: v for k, v in os.environ.items() if k not in ("VECENV_RUNS_DIR", "XDG_RUNTIME_DIR")}
        env["TMPDIR"] = base
        done = subprocess.run([sys.executable, "-c", victim_script], env=env, capture_output=True,
                              text=True, timeout=90)
        assert done.returncode == 0, done.stderr
        out = dict(line.split(" ", 1) for line in done.stdout.splitlines())
        assert victim.read_text() == "the user's notes"  # not overwritten
        assert int(out["other_runs"]) == 0  # no fake run counted
        assert float(out["seconds"]) < 60  # no hang on the FIFO
        assert int(out["warnings"]) == 1  # the directory was reported, once
        assert sorted(os.listdir(target)) == planted  # and left as it was
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ who is alive, on each platform
def test_a_process_is_alive_until_it_ends_and_its_start_time_names_it():
    child = _sleeper()
    try:
        assert system.process_alive(child.pid)
        assert system.process_start_time(child.pid) == system.process_start_time(child.pid)
    finally:
        child.kill()
        child.wait(10)
    assert not system.process_alive(child.pid)
    assert system.process_start_time(os.getpid()) is not None


@pytest.mark.timeout(120)
@pytest.mark.skipif(os.name != "nt", reason="needs Windows: there os.kill(pid, 0) would end the process")
def test_on_windows_no_liveness_check_sends_a_signal(tmp_path, monkeypatch):
    def no_kill(*args):
        raise AssertionError(f"os.kill{args} reached on Windows")

    monkeypatch.setattr(os, "kill", no_kill)
    monkeypatch.setenv("VECENV_RUNS_DIR", str(tmp_path))
    child = _sleeper()
    try:
        started = system.process_start_time(child.pid)
        assert started and started.isdigit()
        (tmp_path / str(child.pid)).write_text(started)
        (tmp_path / "999999").write_text("1")  # no such process
        assert runs.other_runs() == 1
        with vecenv.make("CartPole-v1", 4) as envs:  # auto reads the registry too
            envs.reset(seed=0)
    finally:
        child.kill()
        child.wait(10)
    assert runs.other_runs() == 0
