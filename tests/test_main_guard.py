"""A script without ``if __name__ == "__main__":`` under ``spawn`` or ``forkserver`` (the default
on Windows and macOS, and on Linux from Python 3.14): vecenv's error names the line and the fix,
before any worker starts, instead of multiprocessing's bootstrapping traceback."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap

import pytest

from helpers import needs_processes

pytestmark = needs_processes

EXEC_METHODS = [m for m in ("spawn", "forkserver") if m in multiprocessing.get_all_start_methods()]
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def _run(tmp_path, body: str, timeout: float = 90) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", EXEC_METHODS)
def test_an_unguarded_script_gets_an_error_naming_the_line_and_the_fix(tmp_path, method):
    done = _run(tmp_path, f"""\
        import vecenv

        envs = vecenv.make("CartPole-v1", 4, backend="process", context={method!r})
        print("built")
    """)
    assert done.returncode != 0 and "built" not in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("vecenv.errors.MainGuardError: "), done.stderr[-2000:]
    assert "train.py, line 3" in last and 'if __name__ == "__main__":' in last
    assert repr(method) in last
    assert "bootstrapping" not in done.stderr  # multiprocessing's own error never came


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", EXEC_METHODS)
def test_a_guarded_script_and_a_function_called_from_the_guard_run(tmp_path, method):
    done = _run(tmp_path, f"""\
        import numpy as np
        import vecenv

        def main():
            with vecenv.make("CartPole-v1", 4, backend="process", context={method!r}) as envs:
                envs.reset(seed=0)
                envs.step(np.zeros(4, dtype=np.int64))
            print("stepped")

        if __name__ == "__main__":
            main()
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "stepped"


@pytest.mark.timeout(120)
@pytest.mark.skipif("spawn" not in EXEC_METHODS, reason="needs the spawn start method")
def test_a_function_called_from_the_unguarded_top_level_is_refused_too(tmp_path):
    done = _run(tmp_path, """\
        import vecenv

        def main():
            return vecenv.make("CartPole-v1", 2, backend="process", context="spawn")

        main()
    """)
    assert "MainGuardError" in done.stderr and "train.py, line 6" in done.stderr, done.stderr[-2000:]


@pytest.mark.timeout(120)
@pytest.mark.skipif("spawn" not in EXEC_METHODS, reason="needs the spawn start method")
def test_auto_steps_serially_where_workers_would_run_the_script_again(tmp_path):
    done = _run(tmp_path, """\
        import multiprocessing
        import numpy as np
        import vecenv

        multiprocessing.set_start_method("spawn")
        envs = vecenv.make("CartPole-v1", 4)
        envs.reset(seed=0)
        envs.step(np.zeros(4, dtype=np.int64))
        print(envs.layout.backend)
        print(envs.layout.reason)
        envs.close()
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    backend, reason = done.stdout.strip().splitlines()
    assert backend == "serial" and '__name__ == "__main__"' in reason


@pytest.mark.timeout(120)
@pytest.mark.skipif("spawn" not in EXEC_METHODS, reason="needs the spawn start method")
def test_a_worker_that_runs_the_script_again_says_why_it_stopped(tmp_path):
    """A guard the caller cannot read as one (it lets the workers in too): the worker itself
    refuses, with the same fix, and the caller reports the worker's death."""
    done = _run(tmp_path, """\
        import vecenv

        if __name__ in ("__main__", "__mp_main__"):
            envs = vecenv.make("CartPole-v1", 2, backend="process", context="spawn", num_workers=1)
    """)
    assert "WorkerDiedError" in done.stderr, done.stderr[-2000:]
    assert "MainGuardError: a vecenv process backend was started while a new process was importing" \
        in done.stderr


def test_the_check_reads_the_calling_line_of_the_main_script(tmp_path, monkeypatch):
    from vecenv.transports.process import mainguard

    script = tmp_path / "script.py"
    script.write_text("import os\nx = 1\nif __name__ == '__main__':\n    y = 2\n")
    main = type(sys)("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)

    def frame_at(line: int):
        code = compile("\n" * (line - 1) + "import sys; f = sys._getframe()", str(script), "exec")
        scope = main.__dict__
        exec(code, scope)
        return scope["f"]

    assert mainguard.unguarded_main_line(frame_at(2)) == 2
    assert mainguard.unguarded_main_line(frame_at(4)) is None  # inside the guard
    assert mainguard.script_rerun_line("fork") is None  # a forked worker runs no script
    main.__file__ = None
    assert mainguard.unguarded_main_line(frame_at(2)) is None  # no script: an interactive session
