"""Warm spares: the next child already started, its TensorFlow already imported.

Every run of the user's script pays a fresh interpreter and ``import tensorflow`` (3-5 s
on 2 cores; more with Keras) before its first line. A `SparePool` keeps one child
started ahead: the bootstrap imports the modules named in `PRELOAD_ENV`, says so
(`READY_ENV`'s file), and waits for its spec file (`launch.SPEC_ENV`) to appear. The next
run takes it (`take`) and writes its spec there; the pool starts the following spare at
once, so its import overlaps the run's own start-up and warm-up, not its measured
windows: a measured trial starts its first window only once the pool is `settled`.

Where it is not safe, there is no pool (`spares_safe`): a script (or a module of its
own folder) that touches the environment (``os.environ``, ``putenv``) may set what
TensorFlow reads when it is imported, which a spare imported before the script ran. A
fork server is not used either: TensorFlow runs threads from its import on, and a
fork of a threaded process is not safe.

A spare is launched like any child (`launch.child_argv`, the runner's launcher, so a
worker slot's GPUs and CPUs apply), in its own folder with its own output files, and is
stopped by `close` (the optimize run's end) or by its own parent watch when tftune dies.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tftune.tuner.child.bootstrap import PRELOAD_ENV, READY_ENV
from tftune.tuner.trial.launch import (
    ChildProcess,
    Launcher,
    child_argv,
    child_env,
    stop_group,
)
from tftune.tuner.trial.script_text import local_modules, names_in, parse_module

# A run never waits longer than this for the next spare to settle before it measures.
SETTLE_LIMIT_S = 30.0
# Names that touch the process environment from Python.
ENVIRONMENT_NAMES = frozenset({"environ", "putenv", "unsetenv", "environb"})


@dataclass(frozen=True, slots=True)
class Spare:
    """One started child, waiting for its spec."""

    proc: ChildProcess
    folder: Path
    spec_file: Path
    stdout: Path
    stderr: Path
    ready_file: Path

    def ready(self) -> bool:
        """Its imports are done (or it has already ended, for whatever reason)."""
        return self.ready_file.exists() or self.proc.poll() is not None

    def hand_over(self, spec_json: str) -> None:
        """Write the spec where the spare waits for it, whole: a temporary name, then an
        atomic rename, so it never reads half a file."""
        tmp = self.folder / "spec.json.tmp"
        tmp.write_text(spec_json, encoding="utf-8")
        os.replace(tmp, self.spec_file)

    def discard(self) -> None:
        """The run that took it is over (its process group stopped): its folder goes."""
        shutil.rmtree(self.folder, ignore_errors=True)


class SparePool:
    """One spare ahead for the runs of one script from one working folder."""

    def __init__(
        self, launcher: Launcher, python: str, cwd: str, preload: Sequence[str] = ("tensorflow",)
    ) -> None:
        self.launcher, self.python, self.cwd = launcher, python, cwd
        self.preload = tuple(preload)
        self._next: Spare | None = None
        self.taken = 0  # runs that started from a spare

    def take(self, cwd: str, start_next: bool = True) -> Spare | None:
        """A started spare for a run in `cwd` (None for another folder), and the next one
        started behind it. Without `start_next`: the spare waiting (None when there is
        none: the run starts cold) and none behind it, so the run has the machine to
        itself from its start; the run after it starts cold."""
        if cwd != self.cwd:
            return None
        if not start_next:
            spare, self._next = self._next, None
            self.taken += spare is not None
            return spare
        spare = self._next if self._next is not None else self._start()
        self._next = self._start()
        self.taken += 1
        return spare

    @property
    def waiting(self) -> Spare | None:
        """The spare started for the next run, if any."""
        return self._next

    def settled(self) -> bool:
        """No spare is importing: the machine is the measured run's alone."""
        return self._next is None or self._next.ready()

    def close(self) -> None:
        """Stop the waiting spare and remove its folder."""
        spare, self._next = self._next, None
        if spare is not None:
            stop_group(spare.proc, 1.0)
            spare.discard()

    def _start(self) -> Spare:
        folder = Path(tempfile.mkdtemp(prefix="tftune-spare-"))
        spec_file, ready_file = folder / "spec.json", folder / "ready"
        stdout, stderr = folder / "stdout.txt", folder / "stderr.txt"
        env = child_env(str(spec_file))
        env[PRELOAD_ENV] = ",".join(self.preload)
        env[READY_ENV] = str(ready_file)
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            proc = self.launcher(child_argv(self.python), self.cwd, env, out, err)
        return Spare(proc, folder, spec_file, stdout, stderr, ready_file)


@dataclass(frozen=True, slots=True)
class LastSpare:
    """The pool's waiting spare for one run that measures from its start (the pipeline
    screen drains as soon as the script reaches its dataset), with no next spare
    importing beside it. The pool's one-spare-ahead order resumes with the run after:
    that one starts cold, its import beside the next spare's, and it measures only
    once both are done, as a warm run measures only once the next spare is."""

    pool: SparePool

    def take(self, cwd: str) -> Spare | None:
        return self.pool.take(cwd, start_next=False)

    def settled(self) -> bool:
        return self.pool.settled()


def spares_safe(script: Path) -> str | None:
    """None when runs of `script` may start from a spare; else why not, in words: the
    script or a module of its own folder touches the environment, which TensorFlow may
    read when it is imported (a spare imports it before the script runs)."""

    for path in local_modules(script):
        tree = parse_module(path)
        if tree is None:
            return f"{path.name} could not be read"
        touched = sorted(ENVIRONMENT_NAMES & names_in(tree))
        if touched:
            return f"{path.name} touches the environment ({touched[0]})"
    return None
