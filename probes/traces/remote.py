"""Logdirs in object storage: ``gs://``, ``s3://`` and any other fsspec URL, as TensorBoard
reads them.

The runs under the URL are listed (one listing, with sizes); the run and host are chosen
as for a local logdir (`locate.choose`); then only the files the analysis reads (that
run's host files, or the one asked for, and what `tftune profile` wrote beside them) are
copied, each once, into a temporary local logdir, which the analysis reads as any other.
Its JSON names the URL, not the copy (`Analysis.origin`).

fsspec and the storage's own package (gcsfs, s3fs) are the ``remote`` extra: without
them, a URL is one line saying what to install. Nothing here imports TensorFlow.

Before the listing, GCS and S3 are checked in a few seconds (`_check_access`): gcsfs and
s3fs retry a storage that does not answer for a minute or more, and gcsfs, finding no
credentials, asks GCE's metadata server for 15 s, then reads anonymously. Credentials
not found, or an endpoint that accepts no connection within `REACH_TIMEOUT_S`, is one
line naming them.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import tempfile
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeGuard

from tftune.core.errors import TraceError
from tftune.probes.live.training_record import CLOCK_FILE
from tftune.probes.traces.callsites import SITES_FILE
from tftune.probes.traces.locate import SUFFIX, HostFile, RunInfo, choose
from tftune.probes.traces.trace import host_name_of

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
    missing, or the storage cannot answer (`_check_access`, before the filesystem is
    made: gcsfs' own search for credentials asks GCE's metadata server for 15 s)."""
    scheme = url.split("://", 1)[0]
    try:
        import fsspec
        import fsspec.config
        from fsspec.registry import get_filesystem_class
    except ImportError:
        raise TraceError(f"{url}: reading {scheme}:// logdirs needs fsspec: {EXTRA}") from None
    try:
        cls = get_filesystem_class(scheme)
        options = fsspec.config.apply_config(cls, {})
        _check_access(url, cls, options)
        fs, path = _plain_gcs(url, cls, options) or fsspec.core.url_to_fs(url)
    except ImportError as exc:
        raise TraceError(f"{url}: reading {scheme}:// needs {_missing(exc)}: {EXTRA}") from None
    except ValueError as exc:
        raise TraceError(f"{url}: {exc}") from None
    return fs, str(path).rstrip("/")


def _plain_gcs(url: str, cls: type, options: dict[str, Any]) -> tuple[Any, str] | None:
    """GCS through an emulator or anonymously: gcsfs' JSON API alone. Its default
    filesystem first asks Storage Control's gRPC API for each bucket's layout, which an
    emulator does not speak and an anonymous caller may not ask: retried for minutes,
    with a warning and gRPC's own lines on every operation."""
    if not _is_gcs(cls):
        return None
    if _gcs_endpoint(options)[1] == "default" and options.get("token") != "anon":
        return None
    from gcsfs.core import GCSFileSystem

    fs = GCSFileSystem(**options)
    return fs, str(fs._strip_protocol(url))


def _is_gcs(cls: type) -> bool:
    names = getattr(cls, "protocol", ())
    return bool({"gs", "gcs"} & (set(names) if isinstance(names, (tuple, list)) else {names}))


# --------------------------------------------------------------- access, checked at once

# How long an endpoint may take to accept a connection (name lookup and TCP connect), and
# the search for credentials to end: together under the 10 s a failure may take.
REACH_TIMEOUT_S = 4.0
CREDENTIALS_TIMEOUT_S = 4.0
# Where each storage's endpoint comes from besides the fsspec option `endpoint_url`
# (docs/analyze.md): the variables, and the storage without them.
GCS_EMULATOR_VAR = "STORAGE_EMULATOR_HOST"
GCS_ENDPOINT = "https://storage.googleapis.com"
S3_ENDPOINT_VARS = ("FSSPEC_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
NO_GCS_CREDENTIALS = (
    "no Google Cloud credentials found (GOOGLE_APPLICATION_CREDENTIALS naming a key file, "
    "or `gcloud auth application-default login`; FSSPEC_GS_TOKEN=anon for a public bucket)"
)
NO_S3_CREDENTIALS = (
    "no AWS credentials found (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or "
    "~/.aws/credentials; FSSPEC_S3_ANON=true for a public bucket)"
)


def _check_access(url: str, cls: type, options: dict[str, Any]) -> None:
    """One line where a GCS or S3 filesystem (`cls`, made with `options`) would find no
    credentials it needs, or its endpoint does not answer; nothing for any other."""
    names = getattr(cls, "protocol", ())
    if _is_gcs(cls):
        endpoint, origin = _gcs_endpoint(options)
        # An emulator, or an explicit `token` (FSSPEC_GS_TOKEN=anon too), needs no more.
        if origin == "default" and options.get("token") is None and not _has_gcs_credentials():
            raise TraceError(f"{url}: {NO_GCS_CREDENTIALS}")
    elif {"s3", "s3a"} & (set(names) if isinstance(names, (tuple, list)) else {names}):
        endpoint, origin = _s3_endpoint(options)
        if not options.get("anon") and not _has_s3_credentials(options):
            raise TraceError(f"{url}: {NO_S3_CREDENTIALS}")
    else:
        return
    why = _unreachable(endpoint)
    if why is not None:
        where = urllib.parse.urlsplit(endpoint).netloc or endpoint
        said = "" if origin == "default" else f", from {origin}"
        raise TraceError(f"{url}: cannot reach the storage at {where} ({why}{said})")


def _gcs_endpoint(options: dict[str, Any]) -> tuple[str, str]:
    """GCS's endpoint as gcsfs finds it, and where it came from."""
    if options.get("endpoint_url"):
        return str(options["endpoint_url"]), "the endpoint_url option"
    emulator = os.environ.get(GCS_EMULATOR_VAR, "")
    if emulator not in ("", "default"):
        if not emulator.startswith(("http://", "https://")):
            emulator = f"http://{emulator}"
        return emulator, GCS_EMULATOR_VAR
    return GCS_ENDPOINT, "default"


def _s3_endpoint(options: dict[str, Any]) -> tuple[str, str]:
    """S3's endpoint as s3fs and botocore find it, and where it came from."""
    client = options.get("client_kwargs") or {}
    explicit = options.get("endpoint_url") or client.get("endpoint_url")
    if explicit:  # FSSPEC_S3_ENDPOINT_URL arrives here, through fsspec's config
        named = S3_ENDPOINT_VARS[0] if os.environ.get(S3_ENDPOINT_VARS[0]) else None
        return str(explicit), named or "the endpoint_url option"
    for var in S3_ENDPOINT_VARS[1:]:
        if os.environ.get(var):
            return os.environ[var], var
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return f"https://s3.{region}.amazonaws.com" if region else "https://s3.amazonaws.com", (
        "default"
    )


def _within(seconds: float, call: Callable[[], Any]) -> tuple[bool, Any]:
    """`call()` on a helper thread: (True, its result) where it returned in time,
    (False, None) where it had not (it goes on, alone, on a daemon thread)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()), name="tftune-remote")
    thread.daemon = True
    thread.start()
    thread.join(seconds)
    return (True, out[0]) if out else (False, None)


def _has_gcs_credentials() -> bool:
    """Whether Google's application default credentials exist (a key file, gcloud's
    login, GCE's metadata server), found within `CREDENTIALS_TIMEOUT_S`."""
    try:
        import google.auth
        import google.auth.exceptions
    except ImportError:  # gcsfs without google-auth cannot be: gcsfs will say so
        return True

    def search() -> bool:
        try:
            google.auth.default()
        except google.auth.exceptions.DefaultCredentialsError:
            return False
        except Exception:  # a broken key file: gcsfs will say it in its own words
            return True
        return True

    done, found = _within(CREDENTIALS_TIMEOUT_S, search)
    return bool(done and found)


def _has_s3_credentials(options: dict[str, Any]) -> bool:
    """Whether s3fs will sign its requests: a key in the options, or botocore's chain
    (variables, profile, files, container and instance roles) finds one in time."""
    if options.get("key") or options.get("secret") or options.get("token"):
        return True
    try:
        import botocore.session
    except ImportError:  # s3fs without botocore cannot be: s3fs will say so
        return True

    def search() -> bool:
        try:
            session = botocore.session.Session(profile=options.get("profile"))
            return session.get_credentials() is not None
        except Exception:  # a broken profile or file: s3fs will say it in its own words
            return True

    done, found = _within(CREDENTIALS_TIMEOUT_S, search)
    return bool(done and found)


def _unreachable(endpoint: str) -> str | None:
    """Why `endpoint` accepts no TCP connection within `REACH_TIMEOUT_S`, or None where it
    does. Behind a proxy, the storage's own client judges (None)."""
    parts = urllib.parse.urlsplit(endpoint)
    host = parts.hostname
    if not host:
        return None
    proxies = urllib.request.getproxies()
    if parts.scheme in proxies and not urllib.request.proxy_bypass(host):
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)

    def connect() -> str | None:  # on a helper thread: a name lookup takes no timeout
        try:
            socket.create_connection((host, port), timeout=REACH_TIMEOUT_S).close()
        except socket.gaierror:
            return "its name does not resolve"
        except ConnectionRefusedError:
            return "connection refused"
        except TimeoutError:
            return f"no answer within {REACH_TIMEOUT_S:g} s"
        except OSError as exc:
            return exc.strerror or type(exc).__name__
        return None

    done, why = _within(REACH_TIMEOUT_S, connect)
    return why if done else f"no answer within {REACH_TIMEOUT_S:g} s"


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
