"""The rule behind ``backend="auto"``: predicted µs per batched step for each layout, from an
:class:`EnvProbe` and this machine's :class:`MachineCosts`; and the limits the user's arguments and
``VECENV_BACKEND`` put on it. Nothing here measures anything."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vecenv.system import gil_enabled, usable_cores
from vecenv.transports.process import default_workers, spins
from vecenv.transports.process import unavailable as processes_unavailable

#: environment variable that forces auto's choice
FORCE_VAR = "VECENV_BACKEND"
#: an env whose step spends less than this share of its time on a CPU waits (sleep, I/O)
WAITING_SHARE = 0.5
#: a simpler layout within this fraction of the fastest wins
TIE = 0.05
#: most worker processes auto starts for an env that waits
MAX_WAITING_WORKERS = 64
#: on a contended machine, a layout with workers must be predicted this much faster than serial
CONTENDED_MARGIN = 0.2
#: µs a blocking wait's wake-up adds, each way, when waits cannot spin (a contended machine, or
#: more processes than cores)
WAKE_US = 100.0
#: the calibration measures crossings at up to this many groups (:func:`~vecenv.layout.machine.measure_machine`)
CALIBRATED_GROUPS = 8
#: µs one worker's reply costs when it travels as a message (a frame written, read and its wake-up)
MESSAGE_US = 30.0
#: the layouts from simplest to least simple: the first within TIE of the fastest wins
_ORDER = ("serial", "thread", "process", "inline")
#: backend_kwargs only the process backend takes
_PROCESS_ONLY = {"context", "daemon", "spin_us", "yield_us", "start_timeout", "shared_memory", "mechanism"}
#: other work of at least this many cores' worth makes the machine contended
BUSY_CORES = 0.5


def contended(cores: int, others: float | None) -> bool:
    """Whether other work (``others`` cores' worth, from :func:`~vecenv.layout.others_busy`) takes
    :data:`BUSY_CORES` or more, however many ``cores``: a layout spreads over every usable core,
    so one shared core already stretches its crossings many times (docs/auto.md). An idle machine
    reads 0.0–0.1, one CPU hog about 1.0; unknown (None) is not contended."""
    return others is not None and cores > 0 and others >= BUSY_CORES


# ==================================================================== what is measured
@dataclass(frozen=True)
class EnvProbe:
    """One env, measured: µs per step, the CPU share of that time, observation size."""

    step_us: float
    cpu_share: float = 1.0
    obs_bytes: int = 0
    #: µs to pickle and unpickle one observation, when it must travel as a message
    pickle_us: float = 0.0
    build_s: float = 0.0
    #: µs to send one step's infos (through shared memory when ``info_shared``, else pickled)
    info_us: float = 0.0
    info_shared: bool = False


@dataclass(frozen=True)
class MachineCosts:
    """vecenv's own costs on this machine, from a no-op env (µs per batched step)."""

    #: serial: fixed cost per batched step, and cost per env
    fixed_us: float
    per_env_us: float
    #: crossings ``a + b·(W - 1)`` for ``W`` groups, as ``(a, b)``
    process_us: tuple[float, float]
    inline_us: tuple[float, float]
    cores: int = 1
    measured_at: float = field(default_factory=time.time)
    #: measured beside other work or with trials that disagreed (never saved)
    contended: bool = False
    #: "measured" (now), "cache" (read back, not checked) or "verified" (checked cheaply)
    source: str = "measured"
    others_busy: float | None = None
    #: when the cheap check confirmed a cached calibration, and the crossing it measured (µs)
    checked_at: float | None = None
    check_us: float | None = None
    #: why the figures are what they are, when it is not plain (busy, replaced, kept)
    note: str = ""
    #: thread crossings, on a free-threaded Python with the GIL off only (else None)
    thread_us: tuple[float, float] | None = None

    def crossing(self, layout: str, groups: int) -> float:
        pairs = {"process": self.process_us, "inline": self.inline_us, "thread": self.thread_us}
        a, b = pairs[layout] or (0.0, 0.0)
        return a + b * (groups - 1)


@dataclass(frozen=True)
class Layout:
    """What auto chose: a backend, its groups, and why (with each candidate's predicted µs)."""

    backend: str
    num_workers: int = 1
    inline: bool = False
    reason: str = ""
    predicted_us: Mapping[str, float] = field(default_factory=dict)
    #: the machine calibration the choice used, in words (empty when nothing was measured)
    calibration: str = ""

    @property
    def name(self) -> str:
        """``serial``, ``process`` or ``inline`` (and the others when forced)."""
        return "inline" if self.inline else self.backend

    def kwargs(self) -> dict[str, Any]:
        """The backend keyword arguments that build this layout."""
        if self.backend == "process":
            return {"num_workers": self.num_workers, "inline": self.inline}
        if self.backend in ("thread", "ray"):
            return {"num_workers": self.num_workers}
        return {}

    def __str__(self) -> str:
        groups = f", {self.num_workers} groups" if self.backend != "serial" else ""
        calibration = f" [{self.calibration}]" if self.calibration else ""
        return f"{self.name}{groups}: {self.reason}{calibration}"


# ==================================================================== the rule
def decide(probe: EnvProbe, costs: MachineCosts, num_envs: int, cores: int, *,
           allowed: Sequence[str] = ("serial", "process", "inline"), num_workers: int | None = None,
           others: float | None = 0.0, batch_size: int | None = None) -> Layout:
    """The fastest of the ``allowed`` layouts for ``num_envs`` copies of the probed env.

    ``num_workers`` fixes the groups of process and inline layouts; ``others`` is
    :func:`vecenv.layout.others_busy` (docs/auto.md gives the contended rule); ``batch_size``
    below ``num_envs`` asks for async batches, whose caller computes while the workers step
    (:func:`default_workers`).

    Examples:
        With made-up machine costs: a cheap step stays in the calling process, an expensive
        one is spread over the cores.

        >>> from vecenv.layout import EnvProbe, MachineCosts, decide
        >>> costs = MachineCosts(fixed_us=10.0, per_env_us=2.0, process_us=(40.0, 10.0),
        ...                      inline_us=(30.0, 10.0), cores=4)
        >>> cheap = decide(EnvProbe(step_us=5.0), costs, num_envs=8, cores=4)
        >>> cheap.backend, cheap.kwargs(), cheap.predicted_us["serial"]
        ('serial', {}, 66.0)
        >>> costly = decide(EnvProbe(step_us=1000.0), costs, num_envs=8, cores=4)
        >>> costly.name, costly.kwargs()
        ('process', {'num_workers': 4, 'inline': False})
        >>> print(costly)  # doctest: +ELLIPSIS
        process, 4 groups: a step costs 1,000.0 µs, enough for 4 worker processes to pay off ...

        Beside three busy cores, a middling step stays serial:

        >>> decide(EnvProbe(step_us=60.0), costs, num_envs=8, cores=4, others=3.0).backend
        'serial'
    """
    busy = others if others is not None and contended(cores, others) else 0.0
    predicted = _predict(probe, costs, num_envs, cores, allowed, num_workers, busy, batch_size)
    if not predicted:
        return fixed(allowed[0], num_envs, num_workers, cores, "the only layout the arguments allow",
                     batch_size=batch_size)
    # the simplest layout within TIE of the fastest; on a busy machine, serial unless one with
    # workers beats it by CONTENDED_MARGIN
    best, serial = min(predicted.values()), predicted.get("serial")
    if busy and serial is not None and best * (1 + CONTENDED_MARGIN) > serial:
        kind, w = "serial", 1
    else:
        key = min((k for k in predicted if predicted[k] <= best * (1 + TIE)),
                  key=lambda k: (_ORDER.index(_shape(k)[0]), predicted[k]))
        kind, w = _shape(key)
    return fixed(kind, num_envs, w, cores, _reason(kind, w, probe, predicted, cores, busy), predicted, batch_size)


def _predict(probe: EnvProbe, costs: MachineCosts, n: int, cores: int, allowed: Sequence[str],
             num_workers: int | None, busy: float, batch_size: int | None = None) -> dict[str, float]:
    """Predicted µs per batched step of each candidate (``serial``, ``process×W``, ...)."""
    work = probe.step_us + costs.per_env_us
    # the busy programs keep their cores: this run shares what is left (at least a fair share)
    left = max(cores - busy, cores / (1.0 + busy)) if busy else math.inf

    # the share of a core each of this run's busy processes gets (1 on an idle machine, where
    # left is unbounded); a sync step waits whenever one of them falls behind
    def share(processes: int) -> float:
        return min(1.0, left / max(1.0, processes * probe.cpu_share))

    def widths(kind: str) -> list[int]:
        """The group counts tried: the user's, else the default (:func:`default_workers`, the
        one an explicit backend gets), and more for an env that waits."""
        if num_workers is not None:
            return [min(num_workers, n)]
        base = default_workers(n, cores, caller_steps=kind != "process", batch_size=batch_size)
        if probe.cpu_share < WAITING_SHARE:  # the cores are not the limit: as many as the waiting allows
            most = max(cores, int(cores / max(probe.cpu_share, 1e-3)))
            return sorted({base, min(n, MAX_WAITING_WORKERS, most)})
        return [base]

    predicted: dict[str, float] = {}
    if "serial" in allowed and (num_workers in (None, 1)):
        predicted["serial"] = (costs.fixed_us + n * work) / share(1)
    if "thread" in allowed and costs.thread_us is not None:
        for t in [t for t in widths("thread") if t > 1]:  # one thread is the serial layout with a hand-off
            # beside busy programs threads share what is left too; none waits for a slower one
            predicted[f"thread×{t}"] = costs.crossing("thread", t) + n * work / min(float(t), left)
    for kind in ("process", "inline"):
        for w in widths(kind) if kind in allowed else ():
            if (kind == "inline" and w < 2) or (kind == "process" and w < 2 and "serial" in predicted):
                continue  # one worker only adds a crossing to serial
            wakes = 2 * WAKE_US if busy or _crowded(kind, w, cores) else 0.0
            crossing = costs.crossing(kind, w) + n * probe.pickle_us + wakes
            if probe.info_us:  # the inline group's infos do not cross
                remote = w - 1 if kind == "inline" else w
                # workers write in parallel; the caller reads every remote env's infos, from
                # shared memory or from a message per worker
                message = 0.0 if probe.info_shared else MESSAGE_US
                crossing += remote * (message + math.ceil(n / w) * probe.info_us / 2)
            predicted[f"{kind}×{w}"] = crossing + math.ceil(n / w) * work / share(w)
    return predicted


def _crowded(kind: str, w: int, cores: int) -> bool:
    """Whether ``w`` groups' waits cannot spin (:func:`~vecenv.transports.process.spins`: the
    inline group steps in the caller, so it has ``w - 1`` workers) where the calibration, at up to
    :data:`CALIBRATED_GROUPS` groups, always spun: then every wait blocks and pays a wake-up each
    way (docs/auto.md)."""
    return cores > CALIBRATED_GROUPS and not spins(w - (kind == "inline"), cores)


def _shape(key: str) -> tuple[str, int]:
    """``("process", 4)`` for ``"process×4"``; ``("serial", 1)`` for ``"serial"``."""
    kind, _, w = key.partition("×")
    return kind, int(w or 1)


def fixed(kind: str, n: int, workers: int | None, cores: int, reason: str,
          predicted: Mapping[str, float] | None = None, batch_size: int | None = None) -> Layout:
    """The ``kind`` layout with ``workers`` groups (default: :func:`default_workers`, as the
    explicit backend's); ``inline`` is the process backend's."""
    groups = workers or default_workers(n, cores, caller_steps=kind != "process", batch_size=batch_size)
    w = 1 if kind == "serial" else max(1, min(n, groups))
    return Layout("process" if kind == "inline" else kind, w, kind == "inline", reason, predicted or {})


def _reason(kind: str, w: int, probe: EnvProbe, predicted: dict[str, float], cores: int, busy: float) -> str:
    step = f"a step costs {probe.step_us:,.1f} µs"
    if probe.cpu_share < WAITING_SHARE:
        step += f" ({probe.cpu_share:.0%} of it on a CPU)"
    others = ", ".join(f"{k} {t:,.0f}" for k, t in sorted(predicted.items(), key=lambda kv: kv[1]))
    why = {
        "serial": "less than a crossing to a worker saves",
        "process": f"enough for {w} worker processes to pay off on {cores} usable cores",
        "inline": f"enough to spread over {w - 1} worker process(es) and this process",
        "thread": f"enough for {w} threads of this free-threaded Python (no GIL) to pay off on {cores} usable cores",
    }[kind]
    if busy:
        why += f", with other programs busy on {busy:.1f} of the {cores} cores"
    return f"{step}, {why} (predicted µs per batched step: {others})"


# ==================================================================== constraints and override
def allowed_layouts(backend_kwargs: Mapping[str, Any], num_envs: int, cores: int) -> tuple[list[str], str]:
    """The layouts the user's backend keyword arguments allow, and why when they narrow it."""
    if cores <= 1:
        if backend_kwargs.keys() & _PROCESS_ONLY or backend_kwargs.get("step_timeout") is not None:
            return ["process"], "the arguments need worker processes"
        return ["serial"], "only one core is usable"
    threads = [] if gil_enabled() else ["thread"]  # a step holds the GIL: threads cannot pay off
    if backend_kwargs.get("batch_size") not in (None, num_envs):
        return [*threads, "process"], "async batches need workers that finish independently"
    if backend_kwargs.get("step_timeout") is not None:
        return ["process"], "step_timeout needs every env in a worker process"
    inline = backend_kwargs.get("inline")
    if inline is True:
        return ["inline"], "inline=True"
    if inline is False or backend_kwargs.keys() & _PROCESS_ONLY:
        return ["process"], "the arguments are the process backend's"
    if backend_kwargs.get("num_workers") not in (None, 1):
        return [*threads, "process", "inline"], "num_workers > 1"
    if processes_unavailable():
        return ["serial", *threads], "worker processes cannot run on this platform"
    return ["serial", *threads, "process", "inline"], ""


def forced(num_envs: int, backend_kwargs: Mapping[str, Any]) -> Layout | None:
    """The layout ``VECENV_BACKEND`` forces, or None."""
    value = os.environ.get(FORCE_VAR, "").strip().lower()
    if not value or value == "auto":
        return None
    choices = ("serial", "thread", "process", "inline", "ray")
    if value not in choices:
        raise ValueError(f"{FORCE_VAR}={value!r}: expected one of {list(choices)} or 'auto'")
    return fixed(value, num_envs, backend_kwargs.get("num_workers"), usable_cores(), f"forced by {FORCE_VAR}",
                 batch_size=backend_kwargs.get("batch_size"))
