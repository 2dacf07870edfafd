"""``tftune data-service``: start a tf.data service dispatcher and/or workers.

A thin wrapper of TensorFlow's own servers (``tf.data.experimental.service``
``DispatchServer`` and ``WorkerServer``): the dispatcher on ``--port`` (0: any free port),
fault tolerant when given ``--work-dir`` (its journal survives a restart), and
``--workers N`` workers in this process, each on its own port, registered with the
dispatcher started here or with ``--dispatcher-address``. Once every server runs it
prints one line per server and `READY`; SIGTERM or SIGINT (Slurm's cancel, Ctrl-C) stops
them and exits 0. Trainers read from it with ``tftune optimize --data-service`` or a
config's ``data_service`` (tftune.tuner.searchspace.service).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import click

from tftune.core.errors import ConfigError

READY = "tftune data-service: ready (stop with SIGTERM or Ctrl-C)"
DEFAULT_PORT = 5050


@click.command("data-service")
@click.option("--dispatcher", is_flag=True, help="Start a dispatcher here.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="The dispatcher's port (0: any free port).",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False),
    help="The dispatcher's journal: fault-tolerant mode (a restart resumes its jobs).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    help="Workers to start in this process [0 with --dispatcher, else 1].",
)
@click.option(
    "--worker-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="The first worker's port; the next ones count up (0: any free port).",
)
@click.option("--dispatcher-address", help="grpc://HOST:PORT of the dispatcher the workers join.")
@click.option(
    "--host", help="The name the workers give the trainers to reach them [this host's name]."
)
@click.option(
    "--worker-timeout",
    type=click.FloatRange(min=0.1),
    help="Seconds after which the dispatcher drops a silent worker [TensorFlow's default].",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the ready line.")
def data_service(quiet: bool, **opts: Any) -> None:
    """Run a tf.data service dispatcher and/or workers until SIGTERM or Ctrl-C.

    \b
    tftune data-service --dispatcher --port 5050 --work-dir /shared/tfdata-journal
    tftune data-service --workers 1 --dispatcher-address grpc://head:5050
    tftune optimize train.py --data-service grpc://head:5050
    """
    if not opts["dispatcher"] and not opts["dispatcher_address"]:
        raise ConfigError("tftune data-service: give --dispatcher, --dispatcher-address, or both")
    if opts["work_dir"] and not opts["dispatcher"]:
        raise ConfigError("--work-dir is the dispatcher's: give --dispatcher too")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    servers = _start(opts, (lambda _line: None) if quiet else click.echo)
    click.echo(READY)  # what scripts wait for: said even under --quiet
    sys.stdout.flush()
    while not stop.wait(0.5):
        pass
    for server in reversed(servers):  # workers first, then the dispatcher
        with contextlib.suppress(Exception):
            server._stop()
    if not quiet:
        click.echo("tftune data-service: stopped")


def _start(opts: dict[str, Any], say: Callable[[str], None]) -> list[Any]:
    """The servers, started, each announced on one line (`say`)."""
    import tensorflow as tf

    from tftune.tuner.searchspace.service import check_address

    svc = tf.data.experimental.service
    servers: list[Any] = []
    address = check_address(opts["dispatcher_address"]) if opts["dispatcher_address"] else None
    if opts["dispatcher"]:
        timeout = opts["worker_timeout"]
        config = svc.DispatcherConfig(
            port=opts["port"],
            work_dir=opts["work_dir"],
            fault_tolerant_mode=bool(opts["work_dir"]),
            worker_timeout_ms=int(timeout * 1000) if timeout else None,
        )
        dispatcher = svc.DispatchServer(config)
        servers.append(dispatcher)
        port = int(dispatcher.target.rsplit(":", 1)[1])
        host = opts["host"] or socket.gethostname()
        address = address or f"grpc://localhost:{port}"
        say(f"tftune data-service: dispatcher grpc://{host}:{port}")
        if opts["work_dir"]:
            say(f"tftune data-service: fault tolerant, journal in {opts['work_dir']}")
    count = opts["workers"] if opts["workers"] is not None else (0 if opts["dispatcher"] else 1)
    assert address is not None
    for i in range(count):
        port = opts["worker_port"] + i if opts["worker_port"] else 0
        host = opts["host"] or socket.gethostname()
        worker = svc.WorkerServer(
            svc.WorkerConfig(
                dispatcher_address=address.removeprefix("grpc://"),
                worker_address=f"{host}:%port%",
                port=port,
            )
        )
        servers.append(worker)
        say(f"tftune data-service: worker {host}:{worker._address.rsplit(':', 1)[1]}")
    return servers
