"""Logdirs in object storage: ``gs://``, ``s3://`` and any other fsspec URL, as TensorBoard
reads them.

The runs under the URL are listed (one listing, with sizes); the run and host are chosen
as for a local logdir (`locate.choose`); then only the files the analysis reads (that
run's host files, or the one asked for, and what `tftune profile` wrote beside them) are
copied, each once, into a temporary local logdir, which the analysis reads as any other.
Its JSON names the URL, not the copy (`Analysis.origin`).

fsspec and the storage's own package (gcsfs, s3fs) are the ``remote`` extra: without
them, a URL is one line saying what to install. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeGuard

from tftune.core.errors import TraceError
from tftune.probes.callsites import SITES_FILE
from tftune.probes.locate import SUFFIX, HostFile, RunInfo, choose
from tftune.probes.trace import host_name_of
from tftune.probes.training_record import CLOCK_FILE

URL_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
EXTRA = "pip install 'tftune[remote]'"
# What `tftune profile` writes beside a trace: read with the run where it exists.
SIDECARS = (SITES_FILE, CLOCK_FILE)


def is_url(path: object) -> TypeGuard[str]:
    return isinstance(path, str) and URL_RE.match(path) is not None


def url_of(url: str, key: object) -> str:
    """The whole URL of `key`, a path inside the filesystem of `url` (fsspec drops the
    scheme: ``bucket/logs/...``)."""
    return f"{url.split('://', 1)[0]}://{key}"


def _filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of `url` and the path in it; one line where the extra is
    missing."""
    scheme = url.split("://", 1)[0]
    try:
        import fsspec
    except ImportError:
        raise TraceError(f"{url}: reading {scheme}:// logdirs needs fsspec: {EXTRA}") from None
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise TraceError(f"{url}: reading {scheme}:// needs {_missing(exc)}: {EXTRA}") from None
    except ValueError as exc:
        raise TraceError(f"{url}: {exc}") from None
    return fs, str(path).rstrip("/")


def _missing(exc: ImportError) -> str:
    name = getattr(exc, "name", None)
    return f"the {name} package" if name else "a package fsspec names in its error"


def list_runs(url: str) -> tuple[Any, tuple[RunInfo, ...]]:
    """The filesystem and every run under `url`, oldest first, with their host files
    (paths inside the filesystem, no scheme)."""
    fs, root = _filesystem(url)
    try:
        found = {root: fs.info(root)} if fs.isfile(root) else fs.find(root, detail=True)
    except FileNotFoundError:
        raise TraceError(f"{url}: no such bucket or folder") from None
    except PermissionError as exc:
        raise TraceError(f"{url}: access denied ({_first_line(exc)})") from None
    except Exception as exc:  # credentials, network: the storage's own words, on one line
        raise TraceError(f"{url}: cannot list: {type(exc).__name__}: {_first_line(exc)}") from None
    by_run: dict[str, list[HostFile]] = {}
    for key, info in sorted(found.items()):
        if key.endswith(SUFFIX) and info.get("type", "file") == "file":
            p = Path(key)
            by_run.setdefault(str(p.parent), []).append(
                HostFile(host_name_of(p), p, int(info.get("size") or 0))
            )
    if not by_run:
        raise TraceError(
            f"{url}: no profiler runs found (expected plugins/profile/<run>/<host>{SUFFIX})"
        )
    # Named as locally: the run folder's name, with the path to its plugins/profile
    # folder in front where the URL holds several (Keras' train/ and validation/).
    roots = {str(Path(d).parent) for d in by_run}
    runs = []
    for d, hosts in by_run.items():
        run_dir = Path(d)
        above = run_dir.parent.parent.parent  # <above>/plugins/profile/<run>
        prefix = ""
        if len(roots) > 1 and str(above).startswith(root):
            prefix = str(above)[len(root) :].strip("/") + "/"
        runs.append(RunInfo(prefix + run_dir.name, run_dir, tuple(hosts)))
    return fs, tuple(sorted(runs, key=lambda r: (r.name.split("/")[-1], r.name)))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


@contextlib.contextmanager
def fetched(
    url: str, run: str | None = None, host: str | None = None
) -> Iterator[tuple[Path, tuple[tuple[str, str], ...]]]:
    """A local logdir holding the one run of `url` the analysis reads (module
    docstring), removed afterwards, and each copied file's URL by its name."""
    fs, runs = list_runs(url)
    chosen = choose(runs, run, host, url)
    with tempfile.TemporaryDirectory(prefix="tftune-remote-") as tmp:
        local = Path(tmp) / "plugins" / "profile" / chosen.name.split("/")[-1]
        local.mkdir(parents=True)
        wanted = [str(h.path) for h in chosen.hosts]
        wanted += [s for s in (str(chosen.path / n) for n in SIDECARS) if fs.exists(s)]
        for key in wanted:
            try:
                fs.get_file(key, str(local / Path(key).name))
            except Exception as exc:
                raise TraceError(f"{url}: cannot read {key}: {_first_line(exc)}") from None
        yield Path(tmp), tuple((Path(k).name, url_of(url, k)) for k in wanted)


def read_json_url(url: str) -> Any:
    """A saved analysis or tuning JSON at `url`, parsed; one line naming it on failure."""
    import json

    fs, path = _filesystem(url)
    try:
        with fs.open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise TraceError(f"{url}: no such file") from None
    except Exception as exc:
        raise TraceError(f"{url}: cannot read: {_first_line(exc)}") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise TraceError(f"{url}: not a JSON file (binary content)") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"{url}: not valid JSON (line {exc.lineno}, column {exc.colno})") from None
