"""What a failed trial's stderr says, and whether the script crashes on its own.

- `summarize_crash(stderr_tail, returncode)` → `CrashSummary | None`
  (`tftune.core.failures`, its kind one of the one `FailureKind`'s): the signal that
  killed the script, Python's "Fatal Python error" line (faulthandler, enabled in the
  trial child), the native runtime's own message (glibc's heap checks, a C++ terminate, a
  TensorFlow/absl fatal log line, the shell's "Segmentation fault"), the last Python
  exception, and the first frames of the crashing thread's stack; its `headline` and
  `key_lines` (the short form every display shows) are worded here (`crash_summary`).
- `find_instability(runs)` → `Instability | None` (the tuning document's own type,
  `tftune.core.tuning_trials`): the script crashes whatever the config when the script as
  written crashed too, or when one crash shows in configs that share no knob value.
  Such crashes are nobody's knob (`tuner.study.records.dead_values`).
- `bounded_tail(text)`: the end of stderr, small enough to store with every failed trial.

Pure text work on what the runner captured: no process, no TensorFlow, no Optuna.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tftune.core.failures import CrashSummary, FailureKind
from tftune.core.tuning_trials import Instability

# Stored with every failed trial (Optuna user attrs, the tuning JSON): the last lines of
# stderr, at most this many lines and characters.
STORED_TAIL_LINES = 40
STORED_TAIL_CHARS = 4096
# The crashing thread's frames kept (most recent call first), and those shown: the
# innermost ones, the last of them replaced by the script's own innermost frame where
# that is deeper down (a crash inside TensorFlow is called from a line of the script).
MAX_FRAMES = 8
SHOWN_FRAMES = 3
# Frames in installed packages and the standard library are not the script's own.
_PACKAGES_PREFIX = re.compile(r"^.*/((?:site|dist)-packages)/")
_LIBRARY_FRAME = re.compile(r"/(?:site|dist)-packages/|/lib/python\d+\.\d+/|^<frozen ")
# The trial child's launcher (runpy under tftune's bootstrap) calls the script: its frames,
# the outermost, are not the script's and are dropped.
_LAUNCHER_FRAME = re.compile(r"^<frozen runpy>:|/runpy\.py:|/tuner/child/bootstrap\.py:|^<string>:")
# One line of a summary is cut at this length (an exception message can be a page long).
MAX_LINE_CHARS = 240
# Signals that mean the process crashed in native code (not stopped from outside:
# SIGKILL is the OOM killer or tftune's own cleanup, SIGTERM/SIGINT a stop).
CRASH_SIGNALS = frozenset(
    s.name for s in (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)
)
# How faulthandler and the shell name those signals.
SIGNAL_WORDS = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Illegal instruction": "SIGILL",
    "Floating point exception": "SIGFPE",
}
# glibc's malloc checks (malloc_printerr), old ("*** Error in `python': ...: 0x... ***")
# and new (the bare message) formats, and its fortify checks.
_GLIBC = re.compile(
    r"^(?:\*\*\* Error in `[^`']*'?: )?"
    r"(?P<msg>(?:corrupted double-linked list|corrupted size vs\. prev_size|corrupted top size"
    r"|double free or corruption|(?:free|malloc|realloc|calloc|munmap_chunk|malloc_consolidate"
    r"|_int_free|_int_malloc|_int_realloc|tcache_thread_shutdown)\(\): )[^*]*?)"
    r"(?:: 0x[0-9a-fA-F]+)?(?: \*\*\*)?$"
)
_FORTIFY = re.compile(r"^(?P<msg>\*\*\* (?:stack smashing|buffer overflow) detected \*\*\*.*)$")
_GLIBC_FATAL = re.compile(r"^(?P<msg>Fatal glibc error: .*)$")
_TERMINATE = re.compile(r"^(?P<msg>terminate called (?:after throwing|without) .*)$")
_WHAT = re.compile(r"^\s+what\(\):\s+(?P<msg>.*)$")
# TensorFlow's LOG(FATAL) / CHECK: "2024-05-01 12:00:00.000000: F path.cc:12] Check failed"
# (TSL), "F0501 12:00:00.000000  1234 path.cc:12] Check failed" (absl).
_TF_FATAL = re.compile(
    r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: F |F\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ )"
    r"(?P<msg>\S+:\d+\] .*)$"
)
# absl's failure signal handler (TensorFlow installs it): "*** SIGSEGV received at time=".
_ABSL_SIGNAL = re.compile(r"^\*\*\* (?P<sig>SIG[A-Z]+) received at time=")
# The shell's report of a child's death: "Segmentation fault (core dumped)", or in a job
# line "bash: line 3:  4907 Aborted   python train.py" (without "line 3:" from bash -c).
_WORDS = "|".join(SIGNAL_WORDS)
_SHELL = re.compile(
    rf"^(?:(?P<word>{_WORDS})(?: \(core dumped\))?"
    rf"|\S+:(?: line \d+:)? +\d+ (?P<job>{_WORDS})(?: \(core dumped\))?(?: +\S.*)?)$"
)
_FATAL_PYTHON = re.compile(r"^Fatal Python error: (?P<what>.*)$")
_STACK_HEAD = re.compile(
    r"^(?:Current thread(?: 0x[0-9a-fA-F]+)?|Stack)\b.*\(most recent call first\):$"
)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<fn>.+)$')
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::.*)?$")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def headline(
    signal_name: str | None,
    fatal_error: str | None,
    native_message: str | None,
    exception: str | None,
) -> str:
    """The one line that says the most: the runtime's own message first."""
    for line in (native_message, fatal_error, exception):
        if line:
            return line
    return f"killed by {signal_name}" if signal_name else "crashed"


def key_lines(
    head: str,
    signal_name: str | None,
    fatal_error: str | None,
    native_message: str | None,
    exception: str | None,
    stack: Sequence[str],
) -> tuple[str, ...]:
    """The short form: the headline, the other messages, the first frames."""
    lines: list[str] = []
    for line in (
        head,
        fatal_error,
        native_message,
        exception,
        f"killed by {signal_name}" if signal_name and not fatal_error else None,
    ):
        if line and line not in lines:
            lines.append(line)
    shown = [f"at {frame}" for frame in stack[:SHOWN_FRAMES]]
    own = _own(stack)
    if own is not None and own not in stack[:SHOWN_FRAMES]:
        shown[-1] = f"called from {own}"
    return tuple(lines + shown)


def crash_summary(
    kind: FailureKind,
    signal: str | None = None,
    returncode: int | None = None,
    fatal_error: str | None = None,
    native_message: str | None = None,
    exception: str | None = None,
    stack: tuple[str, ...] = (),
) -> CrashSummary:
    """A `CrashSummary` of what stderr said, with its headline and key lines."""
    head = headline(signal, fatal_error, native_message, exception)
    return CrashSummary(
        kind=kind,
        headline=head,
        key_lines=key_lines(head, signal, fatal_error, native_message, exception, stack),
        signal=signal,
        returncode=returncode,
        fatal_error=fatal_error,
        native_message=native_message,
        exception=exception,
        stack=stack,
    )


def signature(crash: CrashSummary) -> str:
    """What tells one crash from another across runs (addresses vary)."""
    return f"{crash.kind.value}|{crash.signal or ''}|{_ADDRESS.sub('0x', crash.headline)}"


def _cut(line: str) -> str:
    line = line.strip()
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def _frame(line: str) -> str | None:
    """``path:line in function``; an installed package's path from its site-packages on."""
    m = _FRAME.match(line)
    if not m:
        return None
    path = _PACKAGES_PREFIX.sub(r"…/\g<1>/", m["file"])
    return f"{path}:{m['line']} in {m['fn'].strip()}"


def _signal_name(returncode: int | None) -> str | None:
    """The signal that killed the process (a negative exit status), by name."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _native_message(lines: Sequence[str]) -> tuple[str | None, str | None]:
    """(the native runtime's last message, the signal it names) in `lines`."""
    message: str | None = None
    named: str | None = None
    shell: str | None = None
    for i, line in enumerate(lines):
        for pattern in (_GLIBC, _FORTIFY, _GLIBC_FATAL, _TF_FATAL):
            m = pattern.match(line)
            if m:
                message = m["msg"].strip()
        m = _TERMINATE.match(line)
        if m:
            message = m["msg"].strip()
            what = _WHAT.match(lines[i + 1]) if i + 1 < len(lines) else None
            if what:
                message += f": {what['msg'].strip()}"
        m = _ABSL_SIGNAL.match(line)
        if m:
            named = m["sig"]
        m = _SHELL.match(line)
        if m:
            named = SIGNAL_WORDS[m["word"] or m["job"]]
            # "Segmentation fault (core dumped)" as is; of a job line, only its word.
            shell = line.strip() if m["word"] else m["job"]
    return message or shell, named


def _without_launcher(stack: tuple[str, ...]) -> tuple[str, ...]:
    """`stack` (most recent call first) up to the launcher's frames; whole when it crashed
    in the launcher itself."""
    cut = next((i for i, f in enumerate(stack) if _LAUNCHER_FRAME.search(f)), len(stack))
    return stack[:cut] or stack


def _own(stack: Sequence[str]) -> str | None:
    """The script's own innermost frame: the first outside packages and the stdlib."""
    return next((f for f in stack if not _LIBRARY_FRAME.search(f)), None)


def _kept(stack: tuple[str, ...]) -> tuple[str, ...]:
    """The innermost `MAX_FRAMES` frames, the last of them the script's own innermost
    frame where that is deeper down."""
    own = _own(stack)
    if own is None or own in stack[:MAX_FRAMES]:
        return stack[:MAX_FRAMES]
    return (*stack[: MAX_FRAMES - 1], own)


def _current_stack(lines: Sequence[str]) -> tuple[str, ...]:
    """The crashing thread's frames from faulthandler's dump ("Current thread 0x...", or
    "Stack" when it dumps one thread), most recent call first."""
    heads = [i for i, line in enumerate(lines) if _STACK_HEAD.match(line.strip())]
    if not heads:
        return ()
    frames: list[str] = []
    for line in lines[heads[-1] + 1 :]:
        frame = _frame(line)
        if frame is None:
            break
        frames.append(frame)
    return tuple(frames)


def _last_exception(lines: Sequence[str]) -> tuple[str | None, tuple[str, ...]]:
    """(the exception line of the last Python traceback, its frames most recent first)."""
    starts = [i for i, line in enumerate(lines) if line.strip() == _TRACEBACK]
    if not starts:
        return None, ()
    frames: list[str] = []
    for line in lines[starts[-1] + 1 :]:
        if not line.strip() or line[:1].isspace():
            frame = _frame(line)
            if frame is not None:
                frames.append(frame)
            continue
        if _EXCEPTION_LINE.match(line.strip()):
            return line.strip(), tuple(reversed(frames))
        break
    return None, tuple(reversed(frames))


def summarize_crash(stderr_tail: str, returncode: int | None) -> CrashSummary | None:
    """Why a failed run ended, from the end of its stderr and its exit status (negative:
    the signal that killed it); None when neither says anything.

    A crash signal, a "Fatal Python error" or a native runtime's message make it
    `FailureKind.NATIVE`; else a Python traceback makes it an exception; else a signal
    from outside (SIGKILL, SIGTERM) makes it `KILLED`."""
    lines = stderr_tail.splitlines()
    sig = _signal_name(returncode)
    fatal = next((_cut(x) for x in reversed(lines) if _FATAL_PYTHON.match(x.strip())), None)
    if fatal is not None and sig is None:
        sig = SIGNAL_WORDS.get(fatal.removeprefix("Fatal Python error: ").strip())
    message, named = _native_message(lines)
    sig = sig or named
    exception, tb_frames = _last_exception(lines)
    stack = _kept(_without_launcher(_current_stack(lines) or tb_frames))
    if sig in CRASH_SIGNALS or fatal is not None or message is not None:
        kind = FailureKind.NATIVE
    elif exception is not None:
        kind = FailureKind.EXCEPTION
    elif sig is not None:
        kind = FailureKind.KILLED
    else:
        return None
    return crash_summary(
        kind=kind,
        signal=sig,
        returncode=returncode,
        fatal_error=fatal,
        native_message=_cut(message) if message is not None else None,
        exception=_cut(exception) if exception is not None else None,
        stack=tuple(_cut(f) for f in stack),
    )


def bounded_tail(text: str) -> str:
    """The last `STORED_TAIL_LINES` lines of `text`, at most `STORED_TAIL_CHARS`
    characters (cut at a line start where one fits)."""
    tail = "\n".join(text.rstrip().splitlines()[-STORED_TAIL_LINES:])
    if len(tail) <= STORED_TAIL_CHARS:
        return tail
    tail = tail[-STORED_TAIL_CHARS:]
    newline = tail.find("\n")
    return tail[newline + 1 :] if 0 <= newline < len(tail) - 1 else tail


# --- instability --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    """One run of the script, as `find_instability` sees it."""

    number: int  # the trial (a final-round run carries the number of the trial it repeats)
    as_written: bool
    params: Mapping[str, object]
    crash: CrashSummary | None  # for a failed run; None when it did not fail or said nothing


def instability_sentence(crashed: int, runs: int, as_written: int, message: str) -> str:
    """The instability finding in words."""
    where = (
        "the script as written among them" if as_written else "in configs that share no knob value"
    )
    return (
        f"the script is unstable on its own: it crashed in {crashed} of {runs} "
        f"runs, {where}; its message: {message}"
    )


def _share_nothing(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    return bool(a) and bool(b) and all(k not in b or b[k] != v for k, v in a.items())


def find_instability(runs: Sequence[Run]) -> Instability | None:
    """Whether the script crashes on its own: some runs ended in a native crash, and
    either the script as written is among them, or one crash (its `signature`)
    showed in two configs that share no knob value. None otherwise: crashes that follow a
    knob value are that value's."""
    crashed = [r for r in runs if r.crash is not None and r.crash.native]
    if not crashed:
        return None
    by_signature: dict[str, list[Run]] = {}
    for r in crashed:
        assert r.crash is not None
        by_signature.setdefault(signature(r.crash), []).append(r)
    unrelated = [
        group
        for group in by_signature.values()
        if any(_share_nothing(a.params, b.params) for a in group for b in group)
    ]
    mine = [r for r in crashed if r.as_written]
    if not mine and not unrelated:
        return None
    telling = mine[-1] if mine else max(unrelated, key=len)[-1]
    assert telling.crash is not None
    message = telling.crash.headline
    return Instability(
        sentence=instability_sentence(len(crashed), len(runs), len(mine), message),
        trials=tuple(sorted({r.number for r in crashed})),
        crashed=len(crashed),
        runs=len(runs),
        as_written=len(mine),
        unrelated=bool(unrelated),
        message=message,
    )
