"""What a measurement was taken on: the record that makes a tuning result reproducible.

`collect()` reads the machine and the Python that runs the user's script: TensorFlow,
CUDA and cuDNN versions (from TensorFlow's build info, in that Python), GPU model and
driver (NVML, read-only), CPU model and cores, Python version, a `pip freeze` snapshot.
`differences()` compares a saved record with the current machine and names what differs
in a way that matters for the tuned values (GPU model, TensorFlow minor version, fewer
cores), so `tftune run --config` can warn.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tftune.core.run_record import Environment, Gpu

TF_PROBE_TIMEOUT_S = 120.0
PIP_FREEZE_TIMEOUT_S = 60.0

# Run in the user's Python: TensorFlow's own report of its version and build.
_TF_PROBE = (
    "import json, os\n"
    "os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')\n"
    "import tensorflow as tf\n"
    "info = dict(tf.sysconfig.get_build_info())\n"
    "print(json.dumps({'version': tf.__version__, 'cuda': info.get('cuda_version'),\n"
    "                  'cudnn': info.get('cudnn_version')}, default=str))\n"
)


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def usable_cores() -> int:
    """The cores this process may run on (its affinity), as a trial's child sees them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def nvml_gpus() -> tuple[tuple[Gpu, ...], str | None]:
    """GPUs through NVML, read-only. Returns (gpus, why none) — never guesses."""
    try:
        import pynvml
    except ImportError:
        return (), "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return (), f"NVML unavailable ({exc})"
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append(
                Gpu(i, str(pynvml.nvmlDeviceGetName(h)), str(driver), int(mem.total) // 2**20)
            )
        return tuple(gpus), None if gpus else "NVML found no GPU"
    finally:
        pynvml.nvmlShutdown()


def tensorflow_info(python: str) -> dict[str, Any]:
    """TensorFlow's version and build (CUDA, cuDNN) as seen by `python`; {} if absent."""
    try:
        out = subprocess.run(
            [python, "-c", _TF_PROBE], capture_output=True, text=True, timeout=TF_PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    try:
        data = json.loads(out.stdout.strip().splitlines()[-1])
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def pip_freeze(python: str) -> tuple[str, ...]:
    try:
        out = subprocess.run(
            [python, "-m", "pip", "freeze", "--all"],
            capture_output=True,
            text=True,
            timeout=PIP_FREEZE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(ln for ln in out.stdout.splitlines() if ln.strip()) if out.returncode == 0 else ()


def collect(
    python: str,
    *,
    tf_info: Callable[[str], Mapping[str, Any]] = tensorflow_info,
    gpus: Callable[[], tuple[tuple[Gpu, ...], str | None]] = nvml_gpus,
    freeze: Callable[[str], Sequence[str]] = pip_freeze,
    now: Callable[[], _dt.datetime] = lambda: _dt.datetime.now(_dt.timezone.utc),
) -> Environment:
    tf = tf_info(python)
    found, note = gpus()
    version = (
        subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        or platform.python_version()
    )
    return Environment(
        date=now().isoformat(timespec="seconds"),
        python=version,
        python_executable=python,
        platform=platform.platform(),
        cpu_model=cpu_model(),
        cores=usable_cores(),
        tensorflow=tf.get("version"),
        cuda=tf.get("cuda") or None,
        cudnn=tf.get("cudnn") or None,
        gpus=found,
        gpu_note=note,
        pip_freeze=tuple(freeze(python)),
    )


def _minor(version: str | None) -> str | None:
    return ".".join(version.split(".")[:2]) if version else None


def differences(recorded: Mapping[str, Any], current: Environment) -> list[str]:
    """What differs between the machine a config was tuned on and this one, in ways that
    change the best values: the GPU model, TensorFlow's minor version, fewer cores."""
    diffs = []
    old_gpus = sorted(
        {str(g.get("name")) for g in recorded.get("gpus") or [] if isinstance(g, Mapping)}
    )
    new_gpus = sorted({g.name for g in current.gpus})
    if old_gpus != new_gpus:
        diffs.append(
            f"GPU model: tuned on {', '.join(old_gpus) or 'no GPU'}, "
            f"now {', '.join(new_gpus) or 'no GPU'}"
        )
    old_tf, new_tf = _minor(recorded.get("tensorflow")), _minor(current.tensorflow)
    if old_tf and new_tf and old_tf != new_tf:
        diffs.append(f"TensorFlow: tuned on {recorded.get('tensorflow')}, now {current.tensorflow}")
    old_cores = recorded.get("cores")
    if isinstance(old_cores, int) and current.cores < old_cores:
        diffs.append(
            f"CPU cores: tuned with {old_cores}, now {current.cores} "
            "(thread pools and parallelism were sized for more)"
        )
    return diffs
