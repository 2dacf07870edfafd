"""The reproducibility record of a tuning run: how it was run (`Record`), on what machine
and Python (`Environment`, its GPUs `Gpu`), and when.

`tftune.tuner.output.repro.build_record` makes it (the environment is
`tftune.probes.live.environment.collect`'s); it is written into the tuning JSON (``record``)
and the winner's config file (``meta.record``). `to_json` only serializes; `from_reader`
reads the tuning JSON's strictly (a config file's ``meta`` stays free-form: `tftune run
--config` reads the machine it names leniently, `tftune.probes.live.environment.differences`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tftune.core.document_reading import Reader


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    name: str
    driver: str
    memory_mib: int

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "driver": self.driver,
            "memory_mib": self.memory_mib,
        }

    @classmethod
    def from_reader(cls, r: Reader) -> Gpu:
        return cls(
            index=r.required_integer("index"),
            name=r.required_string("name"),
            driver=r.string("driver") or "",
            memory_mib=r.integer("memory_mib") or 0,
        )


@dataclass(frozen=True, slots=True)
class Environment:
    """The machine and the Python a measurement was taken on."""

    date: str  # ISO 8601, UTC, to the second
    python: str
    python_executable: str
    platform: str
    cpu_model: str | None
    cores: int
    tensorflow: str | None
    cuda: str | None  # the CUDA version TensorFlow was built against (its build info)
    cudnn: str | None  # likewise cuDNN
    gpus: tuple[Gpu, ...]
    gpu_note: str | None
    pip_freeze: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "python": self.python,
            "python_executable": self.python_executable,
            "platform": self.platform,
            "cpu_model": self.cpu_model,
            "cores": self.cores,
            "tensorflow": self.tensorflow,
            "cuda": self.cuda,
            "cudnn": self.cudnn,
            "gpus": [g.to_json() for g in self.gpus],
            "gpu_note": self.gpu_note,
            "pip_freeze": list(self.pip_freeze),
        }

    @classmethod
    def from_reader(cls, r: Reader) -> Environment:
        return cls(
            date=r.required_string("date"),
            python=r.required_string("python"),
            python_executable=r.string("python_executable") or "",
            platform=r.string("platform") or "",
            cpu_model=r.string("cpu_model"),
            cores=r.required_integer("cores"),
            tensorflow=r.string("tensorflow"),
            cuda=r.string("cuda"),
            cudnn=r.string("cudnn"),
            gpus=tuple(Gpu.from_reader(g) for g in r.objects("gpus")),
            gpu_note=r.string("gpu_note"),
            pip_freeze=r.strings("pip_freeze"),
        )


@dataclass(frozen=True, slots=True)
class Record:
    """What reproduces a measurement: how it was run, on what, and when."""

    command: str  # `argv` as one line, quoted for a shell
    argv: tuple[str, ...]  # the command as typed (or the API call, as one string)
    cwd: str
    script: str  # absolute path
    script_args: tuple[str, ...]
    script_sha256: str
    seed: int
    environment: Environment  # its `date` is the record's

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "argv": list(self.argv),
            "cwd": self.cwd,
            "script": {
                "path": self.script,
                "args": list(self.script_args),
                "sha256": self.script_sha256,
            },
            "seed": self.seed,
            "date": self.environment.date,
            "environment": self.environment.to_json(),
        }

    @classmethod
    def from_reader(cls, r: Reader) -> Record:
        script = r.required_obj("script")
        return cls(
            command=r.required_string("command"),
            argv=r.strings("argv"),
            cwd=r.required_string("cwd"),
            script=script.required_string("path"),
            script_args=script.strings("args"),
            script_sha256=script.required_string("sha256"),
            seed=r.required_integer("seed"),
            environment=Environment.from_reader(r.required_obj("environment")),
        )
