"""An env's exception reaches the caller as its own class (and as a vecenv.EnvError), on every
backend, so ``except ValueError:`` written for gymnasium's vector envs keeps working."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from helpers import make_backend
from vecenv.errors import EnvError, add_detail, portable_error, typed_error_class
from vecenv.testing import FaultyEnv

pytestmark = pytest.mark.timeout(120)


class SimulatorError(Exception):
    """A user's exception with its own constructor and attributes."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(code, detail)
        self.code = code

    def __str__(self) -> str:
        return f"simulator error {self.code}: {self.args[1]}"


def _unloadable() -> None:
    raise RuntimeError("this class cannot be rebuilt here")


class UnloadableError(Exception):
    """Pickles, but cannot be unpickled (as a class the caller cannot import)."""

    def __reduce__(self):
        return (_unloadable, ())


class RaisesIn(FaultyEnv):
    """Raises ``error`` from ``method`` on its second call of it."""

    def __init__(self, method: str, error: BaseException) -> None:
        super().__init__()
        self.method, self.error, self.calls = method, error, 0

    def _maybe(self, method: str) -> None:
        if method == self.method:
            self.calls += 1
            if self.calls == 2:
                raise self.error

    def reset(self, *, seed=None, options=None):
        self._maybe("reset")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self._maybe("step")
        return super().step(action)


def _raising(method: str, error: BaseException):
    def make() -> gym.Env:
        return RaisesIn(method, error)

    return make


@pytest.mark.parametrize("backend_name", ["serial", "thread", "process"])
@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ValueError("Error in step"), ValueError),
        (KeyError("missing"), KeyError),
        (FileNotFoundError(2, "no such file"), FileNotFoundError),
        (SimulatorError(7, "diverged"), SimulatorError),
        (gym.error.DeprecatedEnv("old version"), gym.error.DeprecatedEnv),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
def test_a_step_error_keeps_its_class_args_and_message(backend_name, error, kind):
    with make_backend(backend_name, [FaultyEnv, _raising("step", error)]) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(2, int))
        with pytest.raises(kind) as caught:
            envs.step(np.zeros(2, int))
    err = caught.value
    assert isinstance(err, EnvError) and type(err) is typed_error_class(kind)
    assert err.args == error.args and (err.env_index, err.method) == (1, "step")
    assert str(err).startswith(str(error) + "\n(vecenv) env 1 (worker ")
    assert err.__dict__.get("code") == getattr(error, "code", None)
    if isinstance(error, OSError):
        assert (err.errno, err.strerror) == (2, "no such file")


@pytest.mark.parametrize("backend_name", ["serial", "process"])
def test_a_reset_error_matches_as_gymnasium_users_write_it(backend_name):
    with make_backend(backend_name, [FaultyEnv, _raising("reset", ValueError("Error in reset"))]) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="^Error in reset"):
            envs.reset(seed=0)


@pytest.mark.parametrize("backend_name", ["serial", "process"])
def test_an_env_fn_error_keeps_its_class(backend_name):
    def deprecated() -> gym.Env:
        return gym.make("CliffWalking-v0")

    try:  # the error gymnasium raises for this id, to compare with
        deprecated()
        pytest.skip("CliffWalking-v0 is not deprecated in this gymnasium")
    except gym.error.Error as exc:
        expected = exc
    with pytest.raises(type(expected)) as caught:
        make_backend(backend_name, [FaultyEnv, deprecated])
    assert caught.value.args == expected.args and caught.value.method == "env_fn()"


@pytest.mark.parametrize("backend_name", ["serial", "process"])
def test_a_missing_attribute_is_an_attribute_error(backend_name):
    with make_backend(backend_name, [FaultyEnv, FaultyEnv]) as envs:
        with pytest.raises(AttributeError, match="no_such_attribute"):
            envs.get_attr("no_such_attribute")


def test_a_class_the_caller_cannot_rebuild_falls_back_to_the_text():
    with make_backend("process", [FaultyEnv, _raising("step", UnloadableError("lost"))]) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(2, int))
        with pytest.raises(EnvError) as caught:
            envs.step(np.zeros(2, int))
    err = caught.value
    assert type(err) is EnvError and err.exc_type.endswith("UnloadableError")
    assert str(err).startswith("lost\n(vecenv) env 1 (worker 1) raised") and "Traceback" in str(err)


def test_exits_and_interrupts_stay_plain_env_errors():
    for kind in (SystemExit, KeyboardInterrupt, GeneratorExit):
        assert typed_error_class(kind) is EnvError
    assert typed_error_class(vecenv.StepTimeoutError) is EnvError  # vecenv's own: never doubled
    assert typed_error_class(ValueError) is typed_error_class(ValueError)  # one class per original


def _raised(exc: BaseException) -> EnvError:
    try:
        raise exc
    except BaseException as caught:
        return EnvError.from_exception(caught, 3, 1, "step")


@pytest.mark.parametrize("exc", [ValueError("v"), SimulatorError(2, "x"), SystemExit(4)], ids=repr)
def test_details_and_fields_survive_pickling(exc):
    err = _raised(exc)
    add_detail(err, "(env 3 was already restarted 3 times)")
    back = pickle.loads(pickle.dumps(portable_error(err)))
    assert type(back) is type(err) and back.args == err.args and str(back) == str(err)
    assert str(back).endswith("(env 3 was already restarted 3 times)")
    assert (back.env_index, back.worker, back.method, back.exc_type) == (3, 1, "step", err.exc_type)


def test_an_original_that_cannot_be_pickled_keeps_the_class_without_the_object():
    class Holder(ValueError):
        pass

    exc = Holder("holds a lock")
    exc.lock = __import__("threading").Lock()
    err = _raised(exc)
    back = pickle.loads(pickle.dumps(portable_error(err)))
    assert isinstance(back, Holder) and back.args == ("holds a lock",) and back.original is None
