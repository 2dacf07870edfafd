"""A child dies with the tftune process that started it (`bootstrap._die_with_parent`),
even one that was gone before the child's first line ran: a warm spare started just
before its parent was killed with -9 had waited for its spec forever."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap

from tftune.tuner.child.bootstrap import PARENT_ENV

# The bootstrap's first step, then a wait that only a kill ends early.
CHILD = textwrap.dedent(
    """
    import time
    from tftune.tuner.child.bootstrap import _die_with_parent
    _die_with_parent(0.05)
    time.sleep(30)
    """
)


def _gone_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def _child(starter: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, **{PARENT_ENV: str(starter)})
    return subprocess.Popen([sys.executable, "-c", CHILD], env=env, start_new_session=True)


def test_a_child_whose_starter_is_already_gone_kills_itself() -> None:
    child = _child(_gone_pid())
    try:
        assert child.wait(timeout=20) == -9
    finally:
        child.kill()


def test_a_child_whose_starter_lives_keeps_running() -> None:
    child = _child(os.getpid())
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=3)
        assert child.returncode is None
    finally:
        child.kill()
        child.wait()
