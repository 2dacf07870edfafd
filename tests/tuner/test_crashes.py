"""Reading a failed trial's stderr (`tuner.trial.crashes`): realistic samples, no process."""

from __future__ import annotations

import pytest
from stderr_samples import GLIBC_ABORT, TF_NOISE

from tftune.core.errors import UserError
from tftune.core.failures import CRASH_KINDS, CrashSummary, FailureKind
from tftune.tuner.trial.crashes import (
    MAX_FRAMES,
    MAX_LINE_CHARS,
    STORED_TAIL_CHARS,
    STORED_TAIL_LINES,
    Run,
    bounded_tail,
    find_instability,
    summarize_crash,
)

SEGFAULT = (
    "Fatal Python error: Segmentation fault\n"
    "\n"
    "Current thread 0x00007fe05a3e9b80 (most recent call first):\n"
    '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n'
    '  File "/home/u/train.py", line 13 in train_step\n'
    '  File "/home/u/train.py", line 17 in fit\n'
    '  File "/home/u/train.py", line 19 in <module>\n'
)

TRACEBACK = (
    TF_NOISE
    + "Traceback (most recent call last):\n"
    + '  File "/home/u/train.py", line 60, in <module>\n'
    + "    model.fit(ds, epochs=3)\n"
    + '  File "/venv/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", '
    + "line 122, in error_handler\n"
    + "    raise e.with_traceback(filtered_tb) from None\n"
    + '  File "/home/u/train.py", line 33, in loss_fn\n'
    + '    raise ValueError("loss became NaN under mixed_float16")\n'
    + "ValueError: loss became NaN under mixed_float16\n"
)


def test_a_glibc_abort_gives_the_message_the_fatal_error_and_the_crashing_thread() -> None:
    s = summarize_crash(GLIBC_ABORT, -6)
    assert s is not None and s.kind is FailureKind.NATIVE and s.native
    assert s.signal == "SIGABRT" and s.returncode == -6
    assert s.headline == "corrupted double-linked list"
    assert s.fatal_error == "Fatal Python error: Aborted"
    # The crashing thread, not the first one dumped; most recent call first.
    assert s.stack[0] == "…/site-packages/tensorflow/python/eager/execute.py:53 in quick_execute"
    assert s.stack[2:] == ("/home/u/train.py:41 in train", "/home/u/train.py:60 in <module>")
    lines = s.key_lines
    assert lines[:2] == ("corrupted double-linked list", "Fatal Python error: Aborted")
    assert lines[2].startswith("at ") and "quick_execute" in lines[2]
    assert not any("threading.py" in line for line in lines)


def test_a_deep_library_stack_shows_the_scripts_own_frame() -> None:
    lib = "/venv/lib/python3.11/site-packages/tensorflow/python"
    frames = "".join(f'  File "{lib}/m{i}.py", line {i} in f{i}\n' for i in range(5))
    text = (
        "Fatal Python error: Segmentation fault\n\n"
        "Current thread 0x00007f0000000001 (most recent call first):\n"
        + frames
        + '  File "/home/u/train.py", line 41 in train\n'
    )
    s = summarize_crash(text, -11)
    assert s is not None
    # An installed package's frame is shown from its site-packages on.
    assert s.key_lines[1:] == (
        "at …/site-packages/tensorflow/python/m0.py:0 in f0",
        "at …/site-packages/tensorflow/python/m1.py:1 in f1",
        "called from /home/u/train.py:41 in train",
    )


def test_the_launchers_frames_are_dropped_and_a_deep_scripts_frame_is_kept() -> None:
    # As a trial child prints it: the script runs under runpy, under tftune's bootstrap.
    lib = "/venv/lib/python3.11/site-packages/keras/src"
    deep = "".join(f'  File "{lib}/k{i}.py", line {i} in k{i}\n' for i in range(20))
    text = (
        "free(): double free detected in tcache 2\n"
        "Fatal Python error: Aborted\n\n"
        "Current thread 0x00007fe0a1fecb80 (most recent call first):\n"
        + deep
        + '  File "/tmp/e2e/crash.py", line 9 in train_step\n'
        '  File "/tmp/e2e/crash.py", line 12 in <module>\n'
        '  File "<frozen runpy>", line 88 in _run_code\n'
        '  File "<frozen runpy>", line 291 in run_path\n'
        '  File "/venv/lib/python3.11/site-packages/tftune/tuner/child/bootstrap.py", '
        "line 248 in main\n"
        '  File "<string>", line 1 in <module>\n'
    )
    s = summarize_crash(text, -6)
    assert s is not None and len(s.stack) == MAX_FRAMES
    assert s.stack[-1] == "/tmp/e2e/crash.py:9 in train_step"
    assert not any("runpy" in f or "bootstrap.py" in f for f in s.stack)
    assert s.key_lines[-1] == "called from /tmp/e2e/crash.py:9 in train_step"
    shallow = summarize_crash(text.replace(deep, ""), -6)
    assert shallow is not None
    assert shallow.stack == (
        "/tmp/e2e/crash.py:9 in train_step",
        "/tmp/e2e/crash.py:12 in <module>",
    )


def test_a_segfault_under_faulthandler() -> None:
    s = summarize_crash(SEGFAULT, -11)
    assert s is not None and s.native and s.signal == "SIGSEGV"
    assert s.headline == "Fatal Python error: Segmentation fault"
    assert s.stack[1] == "/home/u/train.py:13 in train_step"
    assert "at /home/u/train.py:13 in train_step" in s.key_lines


def test_the_signal_is_read_from_stderr_when_the_exit_status_does_not_say() -> None:
    # Through a shell wrapper the status is 128 + N, and the shell names the signal.
    shell = summarize_crash(TF_NOISE + "Segmentation fault (core dumped)\n", 139)
    assert shell is not None and shell.native and shell.signal == "SIGSEGV"
    assert shell.headline == "Segmentation fault (core dumped)"
    job = summarize_crash("bash: line 3:  4907 Aborted   python train.py\n", 134)
    assert job is not None and job.signal == "SIGABRT"
    fatal = summarize_crash(SEGFAULT, None)
    assert fatal is not None and fatal.signal == "SIGSEGV"


def test_a_python_traceback_gives_its_last_exception() -> None:
    s = summarize_crash(TRACEBACK, 1)
    assert s is not None and s.kind is FailureKind.EXCEPTION and not s.native
    assert s.exception == "ValueError: loss became NaN under mixed_float16"
    assert s.headline == s.exception
    assert s.stack[0] == "/home/u/train.py:33 in loss_fn"  # most recent call first
    assert s.signal is None


def test_a_chained_traceback_gives_the_final_exception() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "a.py", line 1, in <module>\n'
        "KeyError: 'x'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 3, in <module>\n'
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:\n"
        "\n"
        "Detected at node 'x'\n"
    )
    s = summarize_crash(text, 1)
    assert s is not None
    assert s.exception == (
        "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "2026-01-12 10:00:03.000000: F tensorflow/core/framework/tensor_shape.cc:587] "
            "Check failed: d < dims() (1 vs. 1)\n",
            "tensorflow/core/framework/tensor_shape.cc:587] Check failed: d < dims() (1 vs. 1)",
        ),
        (
            "F0112 10:00:03.000000  4242 cuda_driver.cc:1021] Check failed: status == OK\n",
            "cuda_driver.cc:1021] Check failed: status == OK",
        ),
        (
            "terminate called after throwing an instance of 'std::system_error'\n"
            "  what():  Resource temporarily unavailable\n",
            "terminate called after throwing an instance of 'std::system_error': "
            "Resource temporarily unavailable",
        ),
        (
            "*** Error in `python3': double free or corruption (fasttop): 0x00007f1c2c0 ***\n",
            "double free or corruption (fasttop)",
        ),
        ("free(): invalid pointer\n", "free(): invalid pointer"),
        (
            "*** stack smashing detected ***: terminated\n",
            "*** stack smashing detected ***: terminated",
        ),
    ],
)
def test_native_runtime_messages(text: str, message: str) -> None:
    s = summarize_crash(TF_NOISE + text, -6)
    assert s is not None and s.native and s.native_message == message
    assert s.headline == message


@pytest.mark.parametrize(
    ("text", "returncode", "kind"),
    [
        ("", None, None),  # nothing to say
        (TF_NOISE, 1, None),  # a plain exit code: the runner's reason says it
        ("", -9, FailureKind.KILLED),  # the OOM killer, or tftune's own cleanup
        (TF_NOISE, -15, FailureKind.KILLED),  # a stall or a timeout, stopped by tftune
        ("Training Aborted by the user\n", 1, None),  # not the shell's "Aborted"
        ("corrupted record at 12\n", 1, None),  # a data error, not glibc
    ],
)
def test_what_is_not_a_native_crash(
    text: str, returncode: int | None, kind: FailureKind | None
) -> None:
    s = summarize_crash(text, returncode)
    assert (s.kind if s is not None else None) is kind
    assert s is None or not s.native


def test_a_long_dump_is_cut_to_a_few_frames_and_short_lines() -> None:
    frames = "".join(f'  File "/m.py", line {i} in f{i}\n' for i in range(40))
    text = "Fatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call first):\n" + frames
    s = summarize_crash(text + "x" * 5000 + "\n", -6)
    assert s is not None and len(s.stack) == MAX_FRAMES and s.stack[0] == "/m.py:0 in f0"
    long = summarize_crash("Traceback (most recent call last):\nValueError: " + "y" * 900, 1)
    assert long is not None and long.exception is not None
    assert len(long.exception) == MAX_LINE_CHARS


def test_a_summary_survives_storage_as_json() -> None:
    s = summarize_crash(GLIBC_ABORT, -6)
    assert s is not None
    data = s.to_json()
    assert data["headline"] == "corrupted double-linked list"
    assert data["key_lines"] == list(s.key_lines)
    assert CrashSummary.from_json(data) == s
    for junk, field in (
        (None, "expected a JSON object"),
        ("x", "expected a JSON object"),
        ({"kind": "nonsense"}, "field 'kind' must be one of native, exception, killed"),
        ({"kind": "oom", "headline": "h"}, "field 'kind' must be one of"),
        ({"headline": "h"}, "field 'kind' is missing"),
        ({"kind": "native"}, "field 'headline' is missing"),
    ):
        with pytest.raises(UserError, match=f"^trial 3: {field}"):
            CrashSummary.from_json(junk, source="trial 3")


def test_one_taxonomy_names_how_a_run_failed() -> None:
    """A crash's kind is one of the runner's kinds of failure (one enum, in core)."""
    assert {k.value for k in CRASH_KINDS} == {"native", "exception", "killed"}
    assert all(isinstance(k, FailureKind) for k in CRASH_KINDS)
    assert FailureKind("oom") is FailureKind.OOM and FailureKind("native") is FailureKind.NATIVE


def test_bounded_tail_keeps_the_end_within_the_limits() -> None:
    text = "\n".join(f"line {i}" for i in range(200)) + "\n"
    tail = bounded_tail(text)
    assert tail.splitlines() == [f"line {i}" for i in range(160, 200)]
    wide = "\n".join(f"{i:03d} " + "z" * 300 for i in range(60))
    cut = bounded_tail(wide)
    assert len(cut) <= STORED_TAIL_CHARS and len(cut.splitlines()) <= STORED_TAIL_LINES
    assert cut.splitlines()[-1].startswith("059 ") and cut.splitlines()[0][:3].isdigit()
    assert bounded_tail("") == ""


# --- instability --------------------------------------------------------------------

ABORT = summarize_crash(GLIBC_ABORT, -6)
NAN = summarize_crash(TRACEBACK, 1)


def run(n: int, crash: CrashSummary | None, *, aw: bool = False, **params: object) -> Run:
    return Run(n, aw, params, crash)


def test_the_script_as_written_crashing_makes_it_unstable() -> None:
    runs = [run(0, ABORT, aw=True, par=1), run(1, None, aw=True, par=1)]
    runs += [run(n, ABORT if n % 4 == 0 else None, par=n % 3) for n in range(2, 12)]
    found = find_instability(runs)
    assert found is not None
    assert (found.crashed, found.runs, found.as_written) == (3, 12, 1)
    assert found.trials == (0, 4, 8)
    assert found.sentence == (
        "the script is unstable on its own: it crashed in 3 of 12 runs, the script as "
        "written among them; its message: corrupted double-linked list"
    )
    assert found.to_json()["as_written_crashed"] == 1


def test_one_crash_in_configs_that_share_no_knob_value_makes_it_unstable() -> None:
    runs = [
        run(0, None, aw=True, par=1, pool=None),
        run(1, ABORT, par=8, pool=8),
        run(2, ABORT, par=2, pool=16),
        run(3, None, par=8, pool=16),
    ]
    found = find_instability(runs)
    assert found is not None and found.unrelated and not found.as_written
    assert "in configs that share no knob value" in found.sentence


def test_crashes_that_follow_a_knob_value_are_that_values() -> None:
    # Every crash has par=64: the value crashes, the script does not.
    runs = [run(0, None, aw=True, par=1, pool=2)]
    runs += [run(n, ABORT, par=64, pool=n) for n in range(1, 5)]
    assert find_instability(runs) is None
    # An exception, even in the script as written, is not a native crash.
    assert find_instability([run(0, NAN, aw=True, par=1), run(1, NAN, par=2)]) is None
    # Different crashes in unrelated configs are not one crash.
    seg = summarize_crash(SEGFAULT, -11)
    assert find_instability([run(1, ABORT, par=8, pool=8), run(2, seg, par=2, pool=2)]) is None
