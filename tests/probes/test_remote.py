"""Logdirs in object storage (`probes.traces.remote`), against real local servers the tests
start: moto's S3 server and a GCS emulator. `tftune analyze` and `tftune report` run as
a user runs them (a subprocess, the storage configured by environment variables, as
fsspec reads them)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import golden_traces
import pytest

from tftune.probes.traces.callsites import write_sites

pytestmark = pytest.mark.slow  # servers and subprocesses

pytest.importorskip("fsspec")
pytest.importorskip("s3fs")
pytest.importorskip("gcsfs")
pytest.importorskip("moto.server")
pytest.importorskip("gcp_storage_emulator")

NEW, OLD = "2026_01_02_00_00_00", "2026_01_01_00_00_00"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Store:
    scheme: str
    env: dict[str, str]  # what a user sets for the storage: fsspec's own variables
    fs: Any


@pytest.fixture(scope="module")
def s3() -> Iterator[Store]:
    import fsspec
    import fsspec.config
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "tftune",
        "AWS_SECRET_ACCESS_KEY": "tftune",
        "AWS_DEFAULT_REGION": "us-east-1",
        "FSSPEC_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    fsspec.config.set_conf_env(fsspec.config.conf)
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("bucket")
    yield Store("s3", env, fs)
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    fsspec.config.conf.pop("s3", None)
    server.stop()


@pytest.fixture(scope="module")
def gs() -> Iterator[Store]:
    from gcp_storage_emulator.server import create_server

    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="bucket")
    server.start()
    # As a user sets it; tftune reads it with gcsfs' defaults (`_plain_gcs`).
    env = {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}", "FSSPEC_GS_TOKEN": "anon"}
    # The upload, gcsfs alone: its bucket-type probe speaks gRPC, which the emulator does not.
    code = (
        "import os, sys; os.environ['GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT'] = 'false'; "
        "import fsspec; fs = fsspec.filesystem('gs', token='anon'); "
        "fs.put(sys.argv[1] + '/', 'bucket/logs/', recursive=True)"
    )
    yield Store("gs", env, code)
    server.stop()


def _logdir() -> Path:
    """Two runs; the newer with two hosts and the call sites beside them."""
    root = Path(tempfile.mkdtemp(prefix="tftune-remote-src-"))
    for run, hosts in ((OLD, ("vm",)), (NEW, ("vm", "other"))):
        run_dir = root / "plugins" / "profile" / run
        for host in hosts:
            golden_traces.cpu_pyfunc().write(run_dir, host=host)
        if run == NEW:
            write_sites(run_dir, "train.py", golden_traces.CPU_PYFUNC_SITES)
    return root


@pytest.fixture(scope="module", params=["s3", "gs"])
def store(request: pytest.FixtureRequest) -> Store:
    """A bucket holding `_logdir()` under logs/."""
    st: Store = request.getfixturevalue(request.param)
    local = _logdir()
    if st.scheme == "s3":
        st.fs.put(str(local) + "/", "bucket/logs/", recursive=True)
    else:
        env = {**os.environ, **st.env}
        subprocess.run([sys.executable, "-c", st.fs, str(local)], env=env, check=True)
    return st


def _tftune(store: Store, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **store.env, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, "-m", "tftune", *args], env=env, capture_output=True, text=True
    )


def test_analyze_reads_the_newest_run_and_names_the_url(store: Store, tmp_path: Path) -> None:
    url = f"{store.scheme}://bucket/logs"
    r = _tftune(store, "analyze", url, "--host", "vm", "--json", "-", "-q")
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(r.stdout)
    assert data["run"] == NEW and data["host"] == "vm"
    assert data["source"]["logdir"] == url
    (file,) = data["source"]["files"]
    assert file["path"] == f"{url}/plugins/profile/{NEW}/vm.xplane.pb"
    # The analysis is the local one's: the call sites beside the trace came along.
    top = data["bottlenecks"][0]
    assert data["input_bound"] is True and top["call_site"] == "train.py:18"
    listed = _tftune(store, "analyze", url, "--list")
    assert listed.returncode == 0 and OLD in listed.stdout and NEW in listed.stdout
    assert "other" in listed.stdout
    # Each run's place is its whole URL, one a user can hand back to tftune.
    places = [line.split()[-1] for line in listed.stdout.splitlines() if "MB  " in line]
    assert places == [f"{url}/plugins/profile/{run}" for run in (OLD, NEW)], listed.stdout


def test_report_renders_a_saved_json_from_a_url(store: Store, tmp_path: Path) -> None:
    url = f"{store.scheme}://bucket/logs"
    saved = _tftune(store, "analyze", url, "--json", "-", "-q")
    assert saved.returncode == 0, saved.stderr[-2000:]
    local = tmp_path / "a.json"
    local.write_text(saved.stdout)
    if store.scheme == "s3":
        store.fs.put(str(local), "bucket/reports/a.json")
        page = tmp_path / "a.html"
        r = _tftune(store, "report", "s3://bucket/reports/a.json", "-o", str(page))
        assert r.returncode == 0, r.stderr[-2000:]
        assert page.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("bucket-that-is-not/logs", "no such bucket or folder"),
        ("bucket/no-logs-here", "no profiler runs found"),
    ],
)
def test_a_missing_bucket_or_folder_is_one_line(store: Store, where: str, said: str) -> None:
    r = _tftune(store, "analyze", f"{store.scheme}://{where}")
    assert r.returncode == 1 and said in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_s3_without_credentials_is_one_line(s3: Store) -> None:
    env = {k: v for k, v in s3.env.items() if not k.startswith("AWS_")}
    bare = Store("s3", env, s3.fs)
    cleared = {
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    full = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    r = subprocess.run(
        [sys.executable, "-m", "tftune", "analyze", "s3://bucket/logs"],
        env={**full, **bare.env, **cleared},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "s3://bucket/logs" in r.stderr, r.stderr
    assert "credentials" in r.stderr.lower() and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_half_written_run_is_one_line(s3: Store, tmp_path: Path) -> None:
    whole = _logdir() / "plugins" / "profile" / NEW / "vm.xplane.pb"
    half = tmp_path / "vm.xplane.pb"
    half.write_bytes(whole.read_bytes()[: len(whole.read_bytes()) // 3])
    s3.fs.put(str(half), f"bucket/half/plugins/profile/{NEW}/vm.xplane.pb")
    r = _tftune(s3, "analyze", "s3://bucket/half")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "vm.xplane.pb" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_only_the_files_needed_are_read_each_once(
    s3: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    from tftune.probes.traces.remote import fetched

    s3.fs.put(str(_logdir()) + "/", "bucket/count/", recursive=True)
    got: list[str] = []
    original = s3fs.S3FileSystem.get_file

    def counted(self: Any, rpath: str, lpath: str, **kw: Any) -> Any:
        got.append(rpath)
        return original(self, rpath, lpath, **kw)

    monkeypatch.setattr(s3fs.S3FileSystem, "get_file", counted)
    with fetched("s3://bucket/count", host="vm") as (local, urls):
        copied = sorted(p.name for p in local.rglob("*") if p.is_file())
    run = f"bucket/count/plugins/profile/{NEW}"
    assert sorted(got) == sorted([f"{run}/vm.xplane.pb", f"{run}/tftune-sites.json"])
    assert copied == ["tftune-sites.json", "vm.xplane.pb"]
    assert dict(urls)["vm.xplane.pb"] == f"s3://{run}/vm.xplane.pb"


def test_a_missing_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from tftune.core.errors import TraceError
    from tftune.probes.traces import remote

    def missing(protocol: str) -> Any:  # as fsspec says it where gcsfs is not installed
        raise ImportError("Install gcsfs to access Google Storage", name="gcsfs")

    registry = importlib.import_module("fsspec.registry")  # `fsspec.registry` is a mapping
    monkeypatch.setattr(registry, "get_filesystem_class", missing)
    with pytest.raises(TraceError) as err:
        remote.list_runs("gs://bucket/logs")
    assert "gcsfs" in str(err.value) and "pip install 'tftune[remote]'" in str(err.value)


# ------------------------------------------------- quiet, and fast where it cannot read

THIRD_PARTY = ("Traceback", "bucket type", "gcsfs", "aiohttp", "botocore", "WARNING", "Error:")


def _bare_env(**extra: str) -> dict[str, str]:
    """The environment without any storage's settings or credentials, on any machine:
    no key files, no gcloud login, and GCE's and EC2's metadata servers at a closed port."""
    closed = f"127.0.0.1:{_free_port()}"
    kept = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "FSSPEC_", "GCSFS_", "GOOGLE_", "CLOUDSDK_", "GCE_"))
        and k not in ("STORAGE_EMULATOR_HOST", "HOME")
    }
    home = tempfile.mkdtemp(prefix="tftune-home-")
    return {
        **kept,
        "HOME": home,
        "CLOUDSDK_CONFIG": home,
        "GCE_METADATA_HOST": closed,
        "GCE_METADATA_IP": closed,
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
        "TF_CPP_MIN_LOG_LEVEL": "0",
        **extra,
    }


def _timed(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "tftune", *args], env=env, capture_output=True, text=True
    )
    return r, time.monotonic() - start


def _one_line(r: subprocess.CompletedProcess[str], *said: str) -> None:
    assert r.returncode == 1 and r.stdout == "", (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert all(s in line for s in said), line


CLOSED = "127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("url", "variable", "creds"),
    [
        ("gs://bucket/logs", "STORAGE_EMULATOR_HOST", {"FSSPEC_GS_TOKEN": "anon"}),
        ("gs://bucket/logs", "STORAGE_EMULATOR_HOST", {}),  # an emulator needs none
        ("s3://bucket/logs", "FSSPEC_S3_ENDPOINT_URL", {"FSSPEC_S3_ANON": "true"}),
        (
            "s3://bucket/logs",
            "AWS_ENDPOINT_URL",
            {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
        ),
        (
            "s3://bucket/logs",
            "AWS_ENDPOINT_URL_S3",
            {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
        ),
    ],
)
def test_an_unreachable_endpoint_is_one_line_at_once(
    url: str, variable: str, creds: dict[str, str]
) -> None:
    """gcsfs retried a closed emulator for 69 s and printed 155 lines, 6 tracebacks."""
    where = CLOSED.format(port=_free_port())
    for args in (("analyze", url), ("analyze", url, "-q"), ("report", f"{url}/a.json")):
        r, took = _timed(_bare_env(**{variable: f"http://{where}"}, **creds), *args)
        _one_line(r, url, f"cannot reach the storage at {where}", "connection refused", variable)
        assert took < 20, took  # within 10 s on a quiet machine; measured ~2 s


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("gs://bucket/logs", "no Google Cloud credentials found (GOOGLE_APPLICATION_CREDENTIALS"),
        ("s3://bucket/logs", "no AWS credentials found (AWS_ACCESS_KEY_ID"),
    ],
)
def test_no_credentials_is_one_line_at_once(url: str, said: str) -> None:
    """gcsfs, finding no credentials, asked GCE's metadata server for 15 s, then went on
    anonymously: 85 s and 107 lines, 4 tracebacks, offline."""
    for quiet in ((), ("-q",)):
        r, took = _timed(_bare_env(), "analyze", url, *quiet)
        _one_line(r, url, said)
        assert took < 20, took


def test_the_storages_own_log_stays_in_the_debug_log(gs: Store, store: Store) -> None:
    """Through the emulator with gcsfs' defaults, `analyze` logged "Could not determine
    bucket type" 13 times, under -q too, with gRPC's own lines, for minutes: gcsfs' JSON
    API alone reads it, and only --verbose shows what the storage's packages log."""
    if store.scheme != "gs":
        pytest.skip("the GCS emulator's case")
    url = "gs://bucket/logs"
    env = {**os.environ, **gs.env}
    assert "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT" not in env  # gcsfs as installed

    def tftune(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tftune", "analyze", url, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    quiet, took = _timed(env, "analyze", url, "-q")
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == "", quiet.stderr
    assert took < 60, took
    plain = tftune()
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr
    assert "input-bound" in plain.stdout.lower()
    assert not any(s in plain.stdout for s in THIRD_PARTY), plain.stdout
    verbose = tftune("-q", "--verbose", "--json", "-")
    assert verbose.returncode == 0 and json.loads(verbose.stdout)["source"]["logdir"] == url
    said = verbose.stderr.splitlines()
    assert any(line.startswith("debug: gcsfs") for line in said), verbose.stderr[-3000:]
    assert all(line.startswith(("debug: ", " ", "Traceback")) for line in said), said
