"""Process transport: one env group per worker process, results in shared memory.

One step, from the caller's ``step()`` to a worker and back::

    caller (engine)                       shared memory                   worker process (child.py)
    ---------------                       -------------                   -------------------------
    VectorEnv.step(actions)
      InFlight.check_and_write_actions --> actions rows (StepBuffers)
      InFlight.send_steps -> InFlight.send -> ProcessTransport.send(round):
        ControlBlock.post(w, Op.STEP) --> row[w].CMD += 1 -------------> Child.wait_command: spin,
        then, once for all workers, if                                    yield, then sleep on the
        one declared it sleeps           --> bell word += 1, one -------> bell (or socket) until
        (control.Bell.ring)                  futex wake for all           CMD moves
        inline=True: EnvGroup.step of the                                 EnvGroup.step(): envs write
        last group here, as a worker's   observation/reward/flag rows <- their results in place
                                          info rows <------------------- InfoWriter.write: each
                                                                            info packed by schema
                                          row[w].DONE = CMD <------------ ControlBlock.finish (+ a
      FullBatch.collect -> InFlight.receive                                 pickled message on the
      ProcessTransport.ready(workers, every=True):                          socket only for new
        spin, yield, then sleep on the                                      schemas, infos that do
        caller's bell (or the sockets and <--- caller's bell word += 1 ---  not fit, or objects);
        process sentinels)                     and a futex wake (or "K"     the last to finish
      ProcessTransport.fetch(w): StepReply     on the socket)               rings if the caller
                                                                            sleeps for them all
        (InfoReader.take: infos from the info rows; the socket only for a message)
      FullBatch.collect: batch the infos (by column when they allow), return the rows (large
      observations lent as views of their slot, vecenv.spaces.slots)

Each module holds one concern: the table in docs/process.md ("How it works") says which, beside
:mod:`.mechanism` (the seam with the operating system: a channel, a shared block, a poller, in
a POSIX and a portable mechanism), :mod:`.envfns` (the env_fns on their way to a worker) and
:mod:`.mainguard` (refusing to start workers that would run the caller's script again).

Commands other than a step (reset, calls, close) travel as pickled
:mod:`~vecenv.worker.commands` on the socket, posted through the same counter. Posting a message
and writing it, or reading a reply's message and marking it taken, happen with signal handlers
deferred (:mod:`vecenv.transports.signals`), so an interrupt never leaves half a message behind.
SIGINT is held wherever the kernel delivers it; the raising handler of another signal that went
to another thread still runs, and can cut a reply's read short; the next read of that socket then
stalls, and after ``FRAME_TIMEOUT`` the worker is ended and reported.
"""

from vecenv.transports.process.control import default_spin, default_workers, spins
from vecenv.transports.process.envfns import EnvFnPicklingError
from vecenv.transports.process.mainguard import script_rerun_line
from vecenv.transports.process.mechanism import unavailable
from vecenv.transports.process.transport import ProcessTransport

__all__ = ["EnvFnPicklingError", "ProcessTransport", "default_spin", "default_workers", "script_rerun_line",
           "spins", "unavailable"]
