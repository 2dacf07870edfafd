"""Why a run of the script failed: one taxonomy (`FailureKind`) and what its stderr said
(`CrashSummary`).

The trial runner classifies a failed run (`tftune.tuner.trial.failure`: an exception, an
exit, out of memory, a stall, a NaN, no steps, a timeout); the end of its stderr says how
the script ended (`tftune.tuner.trial.crashes.summarize_crash`: in native code, with a Python
exception, or killed from outside). Both are kinds of one failure, so they are one enum,
and a `CrashSummary` names one of its `CRASH_KINDS`. The summary travels from the runner
to the study's storage (Optuna user attributes), the tuning JSON (``trials_detail[].crash``)
and the reports: `to_json` writes what the producer stored (its headline and key lines
included) and `from_json` reads it back strictly.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import Reader, object_reader


class FailureKind(str, enum.Enum):
    """Why a run failed."""

    EXCEPTION = "exception"  # a Python exception
    EXIT = "exit"  # a non-zero exit status, or a signal the runner names no better
    OOM = "oom"
    STALL = "stall"  # no further training step within the deadline
    NAN = "nan"
    NO_STEPS = "no_steps"
    TIMEOUT = "timeout"
    NATIVE = "native"  # a crash in native code: a crash signal, a fatal error, a heap check
    KILLED = "killed"  # a signal from outside (the OOM killer, a stop)


# What a crash summary says of how the script ended (its stderr's kinds of failure).
CRASH_KINDS = (FailureKind.NATIVE, FailureKind.EXCEPTION, FailureKind.KILLED)


@dataclass(frozen=True, slots=True)
class CrashSummary:
    """The lines of a failed run's stderr that say why it ended. None is "not in the
    tail"; `stack` is the crashing thread's frames, most recent call first, as
    ``path:line in function``. `headline` (the line that says the most) and `key_lines`
    (the short form every display shows) are the producer's (`tftune.tuner.trial.crashes`)."""

    kind: FailureKind  # one of `CRASH_KINDS`
    headline: str
    key_lines: tuple[str, ...]
    signal: str | None = None  # "SIGABRT"
    returncode: int | None = None
    fatal_error: str | None = None  # "Fatal Python error: Aborted"
    native_message: str | None = None  # "corrupted double-linked list"
    exception: str | None = None  # "ValueError: ..."
    stack: tuple[str, ...] = ()

    @property
    def native(self) -> bool:
        return self.kind is FailureKind.NATIVE

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "signal": self.signal,
            "returncode": self.returncode,
            "headline": self.headline,
            "fatal_error": self.fatal_error,
            "native_message": self.native_message,
            "exception": self.exception,
            "stack": list(self.stack),
            "key_lines": list(self.key_lines),
        }

    @classmethod
    def from_reader(cls, r: Reader) -> CrashSummary:
        word = r.required_string("kind")
        kinds = {k.value: k for k in CRASH_KINDS}
        if word not in kinds:
            raise r.error("kind", f"must be one of {', '.join(kinds)}, got {word!r}")
        return cls(
            kind=kinds[word],
            headline=r.required_string("headline"),
            key_lines=r.strings("key_lines"),
            signal=r.string("signal"),
            returncode=r.integer("returncode"),
            fatal_error=r.string("fatal_error"),
            native_message=r.string("native_message"),
            exception=r.string("exception"),
            stack=r.strings("stack"),
        )

    @classmethod
    def from_json(cls, data: object, *, source: str = "crash JSON") -> CrashSummary:
        """Read back `to_json` (from storage); a malformed one is one `UserError` line."""
        return cls.from_reader(object_reader(data, source=source))
