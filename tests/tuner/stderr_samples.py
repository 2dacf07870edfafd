"""Crash outputs as scripts print them, for the tests of crash reading: TensorFlow's log
noise, and glibc's heap-check abort with faulthandler's thread dump."""

from __future__ import annotations

TF_NOISE = (
    "2026-01-12 10:00:01.123456: I tensorflow/core/util/port.cc:153] oneDNN custom operations "
    "are on.\n"
    "2026-01-12 10:00:02.000001: W tensorflow/core/framework/local_rendezvous.cc:404] Local "
    "rendezvous is aborting with status: OUT_OF_RANGE: End of sequence\n"
)

# glibc's heap check aborts; faulthandler (enabled in the trial child) then dumps every
# Python thread, the crashing one labelled "Current thread", then (Python 3.12+) the
# extension modules.
GLIBC_ABORT = (
    TF_NOISE
    + "Epoch 3/10\n"
    + "corrupted double-linked list\n"
    + "Fatal Python error: Aborted\n"
    + "\n"
    + "Thread 0x00007f3a8cff9640 (most recent call first):\n"
    + '  File "/usr/lib/python3.11/threading.py", line 324 in wait\n'
    + '  File "/usr/lib/python3.11/threading.py", line 622 in wait\n'
    + '  File "/usr/lib/python3.11/threading.py", line 1045 in _bootstrap_inner\n'
    + "\n"
    + "Current thread 0x00007f3b1a2c4740 (most recent call first):\n"
    + '  File "/venv/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", '
    + "line 53 in quick_execute\n"
    + '  File "/venv/lib/python3.11/site-packages/keras/src/backend/tensorflow/trainer.py", '
    + "line 219 in function\n"
    + '  File "/home/u/train.py", line 41 in train\n'
    + '  File "/home/u/train.py", line 60 in <module>\n'
    + "\n"
    + "Extension modules: numpy.core._multiarray_umath, google._upb._message, h5py._errors "
    + "(total: 57)\n"
)
