"""Engine layer: the one gymnasium-API vector env core every backend shares, and the transport
contract it drives.

Glossary (one meaning per word, in the engine and the transports):

- **env**: one sub-environment, numbered ``0 .. num_envs - 1`` (its global id).
- **group**: the envs one worker holds and steps in a loop, a contiguous range
  (:class:`~vecenv.worker.EnvGroup`; :mod:`.partition` says which envs, and their ids within it).
- **worker**: what runs one group (a process, a thread, a Ray actor, or your own thread),
  numbered ``0 .. num_workers - 1``; it runs one command at a time.
- **transport**: how commands reach the workers and replies come back
  (:class:`~vecenv.engine.transport.Transport`: serial, thread, process, ray).
- **command**: what one worker is told to do (:mod:`vecenv.worker.commands`: a step, a reset, a
  call on its envs).
- **reply**: what a worker returns for a command besides the rows it wrote in the buffers
  (:class:`~vecenv.infos.StepReply`: info entries, object leaves), or a call's values.
- **batch**: the results a step or reset returns to the caller: every env's (full batch), or the
  first ``batch_size`` envs ready (async batches, ``recv()``).
- **control row**: a worker's row of the process transport's control block in shared memory
  (its command and reply counters, named by ``Field``).
- **slot**: an observation slot, one of the buffers a step's observations are written to and
  lent from (:mod:`vecenv.spaces.slots`; the ``slots`` of a
  :class:`~vecenv.spaces.buffers.StepBuffers`, ``choose_slot``).
- **caller**: the thread that calls the vector env's API, one at a time: the one inside it now
  is the **holder** of the vector env's :class:`~vecenv.engine.caller.CallerGuard`.
- **owner**: the process that made a vector env, the only one that may use it (:mod:`.owner`).
- **fork**: a process forked from another, which inherits what that one holds and lets go of it:
  a fork of the owner (a forked caller), or a process an env forks from a worker
  (``Child.leave_if_fork``); never the process it came from.
- **stepper**: in the thread transport, the thread that steps a group (yours, or a helper
  numbered from 1).
- **copy**: data copied, above all the ``copy`` option (observations copied out of the buffers,
  as gymnasium's); never a process (that is a fork).

Verbs, from the caller to a worker and back:

- **check**: refuse bad input before anything reaches a worker
  (:meth:`~.flight.InFlight.check_and_write_actions` also writes the actions it checked into
  the shared action buffer).
- **send**: give commands to the workers, one round at a time (``send_steps``, ``send_reset``,
  ``send_call`` build the round; :meth:`.flight.InFlight.send` records it as in flight and
  :meth:`Transport.send <vecenv.engine.transport.Transport.send>` delivers it).
- **wait**: block until some worker has a reply; a worker with one is **ready**
  (:meth:`Transport.ready <vecenv.engine.transport.Transport.ready>`, the blocking call, says
  which); **fetch**: take one worker's reply off the transport; **receive**: wait, then fetch
  every reply there (:meth:`.flight.InFlight.receive`).
- **collect**: receive until a batch is complete and return it (the :class:`.collect.Collect`
  strategies, and :class:`.calls.Calls` for calls); envs whose results have **arrived** wait
  there until a batch returns them.
- **drop**: discard work that will never be returned (``drop_in_flight`` after a failure,
  ``drop_all`` after an interruption, ``drop_held``; a transport's ``drop_outstanding``
  lets one worker finish and discards its reply); **interrupted**: a call cut short by an
  exception part-way (:mod:`.state` says what it leaves).
"""

from vecenv.engine.checks import SpaceMismatchError
from vecenv.engine.core import VectorEnv
from vecenv.engine.modes import parse_autoreset_mode
from vecenv.engine.partition import split_envs
from vecenv.engine.state import CallState
from vecenv.engine.transport import Transport

__all__ = [
    "CallState",
    "SpaceMismatchError",
    "Transport",
    "VectorEnv",
    "parse_autoreset_mode",
    "split_envs",
]
