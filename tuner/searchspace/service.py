"""The tf.data service in a config: where the trainer's pipeline is cut and how it reads.

``tftune optimize --data-service grpc://HOST:PORT`` adds these knobs to the search
(`tuner.searchspace.space`); the winner carries them in the config's ``data_service`` object, which
`tuner.child.service_read` applies inside the user's process (``distribute()`` after the
stage built at the cut's call site, the stages after it rebuilt on the trainer):

    "data_service": {"address": "grpc://dispatcher:5050", "cut": "train.py:12",
                     "processing_mode": "distributed_epoch", "compression": "AUTO",
                     "max_outstanding_requests": null, "job_name": "tftune-train"}

The trainers of one training run share one job: the config's ``job_name`` tagged with
``$TFTUNE_SERVICE_JOB`` (or the Slurm job id), the same on every host. With
``distributed_epoch`` they split each epoch among themselves, with ``parallel_epochs``
each reads whole epochs of its own. A trial's job is its own. Nothing here imports
TensorFlow.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tftune.core.errors import ConfigError

# TensorFlow's processing modes: ShardingPolicy.OFF and ShardingPolicy.DYNAMIC.
PARALLEL_EPOCHS = "parallel_epochs"
DISTRIBUTED_EPOCH = "distributed_epoch"
PROCESSING_MODES = (PARALLEL_EPOCHS, DISTRIBUTED_EPOCH)
# distribute()'s compression: "AUTO" (TF's default) or off.
COMPRESSION_AUTO = "AUTO"
COMPRESSION_OFF = "off"
COMPRESSIONS = (COMPRESSION_AUTO, COMPRESSION_OFF)
# distribute()'s max_outstanding_requests (None: TF's default).
MAX_OUTSTANDING_CHOICES: tuple[int | None, ...] = (None, 2, 8, 32)
# Transformations after which the pipeline may be cut: the expensive, stateless stages
# and the batch (the stages after the cut run on the trainer).
CUT_OPS = frozenset({"map", "interleave", "parallel_interleave", "batch", "padded_batch"})
# At most this many cut points are searched: the last ones built (nearest the batch).
MAX_CUTS = 4

# The search's parameter names (`tuner.searchspace.space`), and the fixed ones (not searched).
CUT = "service_cut"
MODE = "service_processing_mode"
COMPRESSION = "service_compression"
MAX_OUTSTANDING = "service_max_outstanding_requests"
ADDRESS = "data_service"
JOB_NAME = "service_job_name"
PARAM_NAMES = frozenset({CUT, MODE, COMPRESSION, MAX_OUTSTANDING, ADDRESS, JOB_NAME})
# Trials' job names: the config's, then this and a unique tag.
TRIAL_JOB_SEPARATOR = "-trial-"
# A training run's job name: the config's and this variable's value (the same on every
# trainer of the run); without it the Slurm job id, else the process's own tag.
RUN_TAG_ENV = "TFTUNE_SERVICE_JOB"

_ADDRESS_RE = re.compile(r"^(grpc://)?(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d+)$")


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """distribute() at a cut point: what a config asks of the tf.data service."""

    address: str  # grpc://host:port of the dispatcher
    cut: str  # the call site after whose (last) stage distribute() is applied
    processing_mode: str = PARALLEL_EPOCHS
    compression: str = COMPRESSION_AUTO
    max_outstanding_requests: int | None = None
    job_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "cut": self.cut,
            "processing_mode": self.processing_mode,
            "compression": self.compression,
            "max_outstanding_requests": self.max_outstanding_requests,
            "job_name": self.job_name,
        }

    def code(self, alias: str = "tf") -> str:
        """The ``distribute()`` call as the user would write it (the emitted diff)."""
        policy = "DYNAMIC" if self.processing_mode == DISTRIBUTED_EPOCH else "OFF"
        args = [
            f"processing_mode={alias}.data.experimental.service.ShardingPolicy.{policy}",
            f"service={self.address!r}",
        ]
        if self.job_name:
            args.append(f"job_name={self.job_name!r}")
        if self.compression == COMPRESSION_OFF:
            args.append("compression=None")
        if self.max_outstanding_requests is not None:
            args.append(f"max_outstanding_requests={self.max_outstanding_requests}")
        return f".apply({alias}.data.experimental.service.distribute({', '.join(args)}))"


def check_address(text: str, flag: str = "--data-service") -> str:
    """A dispatcher address as ``grpc://host:port``; `ConfigError` naming it otherwise."""
    m = _ADDRESS_RE.match(text.strip())
    if m is None or not 0 < int(m["port"]) < 65536:
        raise ConfigError(f"{flag} {text!r}: expected grpc://HOST:PORT (the dispatcher)")
    return f"grpc://{m['host']}:{m['port']}"


def service_from_json(raw: object, source: str) -> ServiceConfig | None:
    """The config file's ``data_service`` object (null: no service)."""
    if raw is None:
        return None
    where = f"{source}: data_service"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be an object or null")
    unknown = sorted(set(raw) - set(ServiceConfig.__slots__))  # type: ignore[attr-defined]
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}")
    address, cut = raw.get("address"), raw.get("cut")
    if not isinstance(address, str):
        raise ConfigError(f"{where}: address must be a string grpc://HOST:PORT")
    if not isinstance(cut, str) or not re.fullmatch(r".+:\d+", cut):
        raise ConfigError(f'{where}: cut must be a call site "path.py:LINE", got {cut!r}')
    values = {
        MODE: raw.get("processing_mode", PARALLEL_EPOCHS),
        COMPRESSION: raw.get("compression", COMPRESSION_AUTO),
        MAX_OUTSTANDING: raw.get("max_outstanding_requests"),
        JOB_NAME: raw.get("job_name"),
    }
    return _build(check_address(address, where + ": address"), cut, values, where)


def service_from_values(values: Mapping[str, object]) -> ServiceConfig | None:
    """The service from a trial's parameters (`PARAM_NAMES`); None when the cut is None
    (the pipeline stays local) or no dispatcher was given."""
    address, cut = values.get(ADDRESS), values.get(CUT)
    if not isinstance(address, str) or not isinstance(cut, str):
        return None
    return _build(address, cut, values, "data service")


def _build(address: str, cut: str, values: Mapping[str, object], where: str) -> ServiceConfig:
    mode = values.get(MODE) or PARALLEL_EPOCHS
    if mode not in PROCESSING_MODES:
        raise ConfigError(f"{where}: processing_mode must be one of {PROCESSING_MODES}")
    compression = values.get(COMPRESSION) or COMPRESSION_AUTO
    if compression not in COMPRESSIONS:
        raise ConfigError(f"{where}: compression must be one of {COMPRESSIONS}")
    outstanding = values.get(MAX_OUTSTANDING)
    if outstanding is not None and (
        not isinstance(outstanding, int) or isinstance(outstanding, bool) or outstanding < 1
    ):
        raise ConfigError(f"{where}: max_outstanding_requests must be a positive integer")
    job = values.get(JOB_NAME)
    if job is not None and (not isinstance(job, str) or not job):
        raise ConfigError(f"{where}: job_name must be a non-empty string or null")
    return ServiceConfig(address, cut, str(mode), str(compression), outstanding, job)


def cut_choices(sites: list[tuple[str, str]]) -> tuple[str, ...]:
    """The call sites (in the order the script built them) where the pipeline may be
    cut: `CUT_OPS`, each line once, the last `MAX_CUTS`."""
    cuts = list(dict.fromkeys(site for site, op in sites if op in CUT_OPS))
    return tuple(cuts[-MAX_CUTS:])
