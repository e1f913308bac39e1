"""The sleep/wake handshake (vecenv.transports.process.handshake): the waiter's decisions from
injected observations, the spin loop on a fake clock, the declared sleep and the wake-up."""

from __future__ import annotations

import select
import socket

import pytest

from helpers import needs_processes
from vecenv.transports.process import handshake
from vecenv.transports.process.handshake import (
    MAX_PREEMPTED,
    MIN_HIT,
    PREEMPT_S,
    PROBE_EVERY,
    Waiter,
    notify,
    sleep,
    spin_then_yield,
)

pytestmark = needs_processes


class FakeClock:
    """A clock that moves by ``step`` at each reading, or by a scripted jump."""

    def __init__(self, step: float = 1e-6) -> None:
        self.now, self.step, self.jumps = 0.0, step, {}

    def __call__(self) -> float:
        self.now += self.jumps.pop(round(self.now, 9), self.step)
        return self.now


def spinning_waits(waiter: Waiter, count: int) -> int:
    return sum(waiter.spins_now() for _ in range(count))


def test_a_waiter_whose_spins_find_the_peer_done_keeps_spinning():
    waiter = Waiter(50e-6, 500e-6)
    for _ in range(200):
        waiter.observe(done=True, preempted=False)
    assert spinning_waits(waiter, 64) == 64


def test_spins_that_lose_their_cpu_make_the_waiter_block_but_probe():
    waiter = Waiter(50e-6, 500e-6)
    for _ in range(20):
        waiter.observe(done=True, preempted=True)
    assert waiter.preempted > MAX_PREEMPTED
    assert spinning_waits(waiter, 4 * PROBE_EVERY) == 4  # one probe in PROBE_EVERY waits


def test_one_lost_cpu_on_an_idle_machine_costs_only_a_few_probes():
    waiter = Waiter(50e-6, 500e-6)
    waiter.observe(done=True, preempted=True)
    assert not waiter.spins_now() or waiter.waits % PROBE_EVERY == 0
    probes = 0
    while waiter.preempted > MAX_PREEMPTED:
        waiter.observe(done=True, preempted=False)
        probes += 1
    assert probes <= 4
    assert spinning_waits(waiter, 8) == 8


def test_spins_that_run_out_make_the_waiter_block_at_once():
    waiter = Waiter(50e-6, 500e-6)
    for _ in range(40):
        waiter.observe(done=False, preempted=False)
    assert waiter.hit_rate < MIN_HIT
    assert spinning_waits(waiter, 2 * PROBE_EVERY) == 2
    for _ in range(40):  # the peer got quick again: the probes see it
        waiter.observe(done=True, preempted=False)
    assert spinning_waits(waiter, 8) == 8


def test_zero_budgets_never_spin():
    waiter = Waiter(0.0, 0.0)
    assert spinning_waits(waiter, PROBE_EVERY * 2) == 0
    calls = []
    assert waiter.spin(lambda: calls.append(1)) is False
    assert calls == []  # no look: the caller sleeps, and its sleep looks first


def test_waiter_spin_records_what_the_loop_saw():
    clock = FakeClock()
    waiter = Waiter(10e-6, 0.0, clock=clock)
    looks = iter([False, False, True])
    assert waiter.spin(lambda: next(looks)) is True
    assert waiter.hit_rate == 1.0 and waiter.preempted == 0.0
    assert waiter.spin(lambda: False) is False  # ran out of its 10 µs
    assert waiter.hit_rate < 1.0 and waiter.preempted == 0.0


def test_spin_loop_stops_at_a_lost_cpu():
    clock = FakeClock()
    clock.jumps[round(3e-6, 9)] = 5 * PREEMPT_S  # the third reading comes after another task ran
    looks = []
    done, preempted = spin_then_yield(lambda: looks.append(1) and False, 1.0, 0.0, clock)
    assert (done, preempted) == (False, True)
    assert len(looks) < 10  # it did not spin on for its whole (1 s) budget


def test_spin_loop_runs_out_and_yields_after_its_spin(monkeypatch):
    yields = []
    monkeypatch.setattr(handshake, "_yield", lambda: yields.append(1))
    clock = FakeClock(step=1e-6)
    done, preempted = spin_then_yield(lambda: False, 5e-6, 10e-6, clock)
    assert (done, preempted) == (False, False)
    assert 0 < len(yields) <= 12  # yields only in the second phase


def test_spin_loop_reports_a_peer_done():
    assert spin_then_yield(lambda: True, 0.0, 0.0) == (True, False)


class FakePoller:
    def __init__(self, script):
        self.script, self.timeouts = list(script), []

    def poll(self, timeout):
        self.timeouts.append(timeout)
        return self.script.pop(0) if self.script else []


def test_sleep_declares_rechecks_and_withdraws():
    flags, events = [], []
    results = iter([[], [], [3]])
    poller = FakePoller([[(7, select.POLLIN)], []])
    got = sleep(lambda: next(results), flags.append, poller, events.append)
    assert got == [3]
    assert flags == [1, 0]
    assert events == [7]
    assert poller.timeouts[0] == 1 and poller.timeouts[1] == 1  # an event keeps the nap short


def test_sleep_naps_grow_to_the_bound_and_the_deadline_ends_it(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(handshake.time, "monotonic", lambda: now[0])
    poller = FakePoller([])

    def empty():
        now[0] += 0.02
        return []

    assert sleep(empty, lambda f: None, poller, lambda fd: None, deadline=100.5) == []
    assert max(poller.timeouts) <= handshake.MAX_NAP_MS
    assert poller.timeouts[:3] == [1, 2, 4]


def test_sleep_ends_when_go_on_turns_false_and_withdraws_on_errors():
    flags = []
    assert sleep(lambda: [], flags.append, FakePoller([]), lambda fd: None, go_on=lambda: False) is None
    assert flags == [1, 0]

    def broken(fd):
        raise SystemExit(0)

    flags.clear()
    with pytest.raises(SystemExit):
        sleep(lambda: [], flags.append, FakePoller([[(1, select.POLLIN)]]), broken)
    assert flags == [1, 0]


class Peer:
    def __init__(self):
        self.bytes = []

    def wake(self, byte):
        self.bytes.append(byte)


@pytest.mark.skipif(not handshake.TSO, reason="without TSO every commit writes its wake-up byte")
def test_notify_wakes_only_a_declared_sleeper():
    peer, row = Peer(), [0, 0, 0]
    notify(row, 2, peer, b"W")
    assert peer.bytes == []
    row[2] = 1
    notify(row, 2, peer, b"W")
    assert peer.bytes == [b"W"]


@pytest.mark.timeout(30)
def test_a_real_wake_up_reaches_a_sleeper_on_a_socket():
    a, b = socket.socketpair()
    try:
        b.setblocking(False)
        flag = [0]
        poller = select.poll()
        poller.register(b.fileno(), select.POLLIN)
        seen = []

        def on_event(fd):
            seen.append(b.recv(16))
            flag[0] = 2  # the "counter" moved with the byte

        class SockPeer:
            def wake(self, byte):
                a.send(byte)

        notify([1], 0, SockPeer(), b"K")
        assert sleep(lambda: flag[0] == 2, lambda f: None, poller, on_event) is True
        assert seen == [b"K"]
    finally:
        a.close()
        b.close()


def test_a_thread_that_waits_for_a_cpu_blocks_until_the_delay_falls(monkeypatch):
    delays = iter([0.0, 0.015, 0.016, 0.017, 0.030])  # seconds of run delay, one per look
    monkeypatch.setattr(handshake, "run_delay", lambda: next(delays))
    clock = FakeClock(step=0.0)
    waiter = Waiter(50e-6, 500e-6, clock=clock)

    def wait_at(t):
        clock.now = t
        return waiter.spins_now()

    assert wait_at(0.0)  # the first look has nothing to compare
    assert not wait_at(0.05)  # 15 ms of 50 waiting for a CPU: 30 % > CONTENDED_DELAY
    assert not wait_at(0.06)  # no look before DELAY_CHECK_S has passed: still contended
    assert wait_at(0.11)  # 1 ms of 60: under CALM_DELAY, calm again
    assert wait_at(0.111)
    assert wait_at(0.17)  # 1 ms of 60: calm
    assert not wait_at(0.23)  # 13 ms of 60: 22 %


def test_between_the_thresholds_the_waiter_keeps_its_state():
    waiter = Waiter(50e-6, 500e-6)
    waiter.look_at_run_delay(0.0, 0.0)
    waiter.look_at_run_delay(1.0, 0.1)  # 10 %: not enough to call it contended
    assert not waiter.contended
    waiter.look_at_run_delay(2.0, 0.4)  # 30 %
    assert waiter.contended
    waiter.look_at_run_delay(3.0, 0.5)  # 10 %: not calm enough to spin again
    assert waiter.contended
    waiter.look_at_run_delay(4.0, None)  # the kernel stopped telling: judged on what it saw
    assert waiter.contended


def test_run_delay_reads_this_threads_schedstat(tmp_path, monkeypatch):
    stat = tmp_path / "schedstat"
    stat.write_text("777114 82793000 2\n")
    monkeypatch.setattr(handshake, "SCHEDSTAT", str(stat))
    assert handshake.run_delay() == pytest.approx(0.082793)
    monkeypatch.setattr(handshake, "SCHEDSTAT", str(tmp_path / "missing"))
    assert handshake.run_delay() is None


def test_without_a_busy_spin_the_run_delay_is_the_runs_own_and_is_not_read(monkeypatch):
    looks = []
    monkeypatch.setattr(handshake, "run_delay", lambda: looks.append(1) or 1e9 * len(looks))
    waiter = Waiter(0.0, 500e-6)  # more processes than cores: yields hand the core to the peer
    assert spinning_waits(waiter, 10) == 10
    assert looks == [] and not waiter.contended
