"""Find profiler runs and host files under whatever path the user gives.

Accepted: a TensorBoard logdir (searched for `plugins/profile/<run>/` folders, also nested
ones such as Keras' `logs/train/plugins/profile`), a `plugins/profile` folder, a run
folder, or a single `.xplane.pb` file. Runs are ordered oldest first; the default is the
newest (profiler run names are timestamps, `YYYY_MM_DD_HH_MM_SS`, so they sort by time).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tftune.core.errors import TraceError
from tftune.probes.traces.trace import host_name_of

SUFFIX = ".xplane.pb"
MAX_SEARCH_DEPTH = 6  # logdir/<sub>/.../plugins/profile: deep enough for Keras' layouts


@dataclass(frozen=True, slots=True)
class HostFile:
    host: str
    path: Path
    size_bytes: int


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One profiling session: a folder holding one `.xplane.pb` per host."""

    name: str
    path: Path
    hosts: tuple[HostFile, ...]

    @property
    def size_bytes(self) -> int:
        return sum(h.size_bytes for h in self.hosts)


def _host_files(run_dir: Path) -> tuple[HostFile, ...]:
    files = sorted(p for p in run_dir.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
    return tuple(HostFile(host_name_of(p), p, p.stat().st_size) for p in files)


def _profile_roots(base: Path) -> list[Path]:
    """Every `plugins/profile` folder under `base`, at most MAX_SEARCH_DEPTH levels down."""
    roots = []
    base_depth = len(base.parts)
    for dirpath, dirnames, _ in os.walk(base):
        here = Path(dirpath)
        if len(here.parts) - base_depth >= MAX_SEARCH_DEPTH:
            dirnames[:] = []
        if here.name == "profile" and here.parent.name == "plugins":
            roots.append(here)
            dirnames[:] = []
        dirnames.sort()
    return roots


def list_runs(path: Path) -> tuple[RunInfo, ...]:
    """All runs found at `path`, oldest first. Raises `TraceError` when there are none."""
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    if path.is_file():
        if not path.name.endswith(SUFFIX):
            raise TraceError(f"{path}: not a profiler trace (expected a *{SUFFIX} file)")
        return (
            RunInfo(
                path.parent.name,
                path.parent,
                (HostFile(host_name_of(path), path, path.stat().st_size),),
            ),
        )
    try:
        direct = _host_files(path)
    except PermissionError:
        raise TraceError(f"{path}: cannot be read (permission denied)") from None
    if direct:
        return (RunInfo(path.name, path, direct),)
    roots = (
        [path] if path.name == "profile" and path.parent.name == "plugins" else _profile_roots(path)
    )
    runs: list[RunInfo] = []
    for root in roots:
        prefix = "" if len(roots) == 1 else f"{root.parent.parent.relative_to(path)}/"
        for run_dir in sorted(d for d in root.iterdir() if d.is_dir()):
            hosts = _host_files(run_dir)
            if hosts:
                runs.append(RunInfo(prefix + run_dir.name, run_dir, hosts))
            else:
                runs.append(RunInfo(prefix + run_dir.name, run_dir, ()))
    with_files = [r for r in runs if r.hosts]
    if not with_files:
        if runs:
            raise TraceError(
                f"{runs[-1].path}: profiler run has no {SUFFIX} file "
                "(the capture may have failed or is still being written)"
            )
        raise TraceError(
            f"{path}: no profiler runs found (expected plugins/profile/<run>/<host>{SUFFIX}; "
            "capture one with `tftune profile train.py --logdir LOGDIR`)"
        )
    return tuple(sorted(with_files, key=lambda r: (r.name.split("/")[-1], r.name)))


def locate(path: Path, run: str | None = None, host: str | None = None) -> RunInfo:
    """The run to analyze (newest by default), narrowed to one host if asked."""
    return choose(list_runs(path), run, host, str(path))


def choose(runs: tuple[RunInfo, ...], run: str | None, host: str | None, where: str) -> RunInfo:
    """Of `runs` (oldest first, found at `where`), the newest or the one named `run`,
    narrowed to `host` if asked: for a local logdir and one in object storage alike."""
    if run is None:
        chosen = runs[-1]
    else:
        matches = [r for r in runs if r.name == run or r.name.split("/")[-1] == run]
        if not matches:
            names = ", ".join(r.name for r in runs)
            raise TraceError(f"{where}: no run named {run!r} (runs: {names})")
        chosen = matches[-1]
    if host is None:
        return chosen
    hosts = tuple(h for h in chosen.hosts if h.host == host)
    if not hosts:
        names = ", ".join(h.host for h in chosen.hosts)
        raise TraceError(f"{chosen.path}: no host named {host!r} (hosts: {names})")
    return RunInfo(chosen.name, chosen.path, hosts)
