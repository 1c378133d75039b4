"""Isolated, cached virtual environments: one per Python, torch version and patched tree."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from patchseries.errors import SeriesError
from patchseries.paths import Workspace, remove
from patchseries.progress import Log
from patchseries.wheels import check_known, check_python

DEFAULT_TORCH = "2.13.0"
# setuptools: inductor on torch 2.1 imports it to build its C++ kernels; uv-made venvs do not ship it.
# coverage 7.10+: measures the Python subprocesses some of the series' tests start (``[run] patch = subprocess``).
TEST_REQUIREMENTS = ("pytest", "pytest-cov", "coverage>=7.10", "setuptools")
_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")
READY = ".patchseries-ready"  # in a venv: written last, once every install is done
# seconds between "still installing" lines: a cold install downloads torch and takes minutes
HEARTBEAT_S = 15.0
# An extra package index for torch, e.g. PyTorch's CPU-only wheel index on CI; unset: PyPI (and the installer's config).
TORCH_INDEX_ENV = "PATCHSERIES_TORCH_INDEX"
_INDEX_SCHEMES = ("https", "http", "file")
# installer output lines that never say why it failed
_NOT_CAUSES = ("hint:", "help:", "warning:", "WARNING:", "note:", "[notice]")
_CAUSE_MARKERS = ("cause: ", "Caused by: ")  # uv's chain of causes, one a line (older uv: "Caused by:")


@dataclass(frozen=True)
class Environment:
    path: Path
    torch: str

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def parse_torch_version(version: str) -> tuple[int, int, int]:
    """Validate a torch release number such as ``2.13.0``; anything else is refused before any download."""
    match = _RELEASE.match(version)
    if not match:
        raise SeriesError(f"unknown torch version {version!r}: expected a release number such as {DEFAULT_TORCH}")
    major, minor, patch = (int(part) if part else 0 for part in match.groups())
    if (major, minor) < (2, 1):
        raise SeriesError(f"torch {version} is older than 2.1, the oldest release Lightning 2.6.6 supports")
    return major, minor, patch


def torch_release(version: str) -> str:
    """The full release number of ``version`` (``2.13`` -> ``2.13.0``), as pip's ``torch==2.13`` means it: one
    release has one name, so it never gets a second environment beside its own."""
    return ".".join(str(part) for part in parse_torch_version(version))


def known_torch(version: str) -> str:
    """A ``--torch`` value as every subcommand takes it: its full release number (:func:`torch_release`), refused
    when it is not a release number, older than 2.1 or newer than every release this tool knows, before an
    environment is built for nothing."""
    release = torch_release(version)
    check_known(release, parse_torch_version(release))
    return release


def torch_index() -> str:
    """The extra index ``$PATCHSERIES_TORCH_INDEX`` names ('' if unset), refused unless it is an index URL."""
    index = os.environ.get(TORCH_INDEX_ENV, "").strip()
    parts = urllib.parse.urlsplit(index)
    if index and (parts.scheme not in _INDEX_SCHEMES or not (parts.netloc or parts.path)):
        raise SeriesError(
            f"{TORCH_INDEX_ENV}={index!r} is not a package index URL (such as https://download.pytorch.org/whl/cpu); "
            "correct it, or unset it to use PyPI alone"
        )
    return index


def companion_requirements(torch_version: str) -> list[str]:
    """Pins that old torch builds need next to them.

    torch < 2.3 was compiled against NumPy 1.x, and its inductor imports ``pkg_resources``, which current setuptools
    no longer ships.
    """
    return ["numpy<2", "setuptools<70"] if parse_torch_version(torch_version) < (2, 3, 0) else []


def find_uv() -> str | None:
    """The ``uv`` binary: the one installed with this package, else one on PATH, else None."""
    try:
        from uv import find_uv_bin
    except ImportError:
        return shutil.which("uv")
    try:
        return str(find_uv_bin())
    except FileNotFoundError:
        return shutil.which("uv")


def ensure_environment(
    ws: Workspace,
    tree: Path,
    torch_version: str,
    log: Log,
    python: str = sys.executable,
    extra: tuple[str, ...] = (),
    installer: str = "auto",
) -> Environment:
    """Create (or reuse) a venv with the requested torch and ``tree`` installed editable.

    A venv becomes usable only when its ready-marker is written, after every install succeeded; a venv without the
    marker is what an interrupted or failed run left, and is rebuilt from scratch.
    """
    torch_version = torch_release(torch_version)
    release = parse_torch_version(torch_version)
    py_tag = _python_tag(python)
    check_python(torch_version, release, _python_version(py_tag))
    venv = ws.venvs / f"{py_tag}-torch{torch_version}-{tree.name}"
    requirements = [f"torch=={torch_version}", *companion_requirements(torch_version), *TEST_REQUIREMENTS, *extra]
    index = torch_index()
    recipe = "\n".join([str(tree), *requirements, *([f"index: {index}"] if index else [])]) + "\n"
    if is_ready(venv, recipe):
        log(f"reusing environment {venv.name}")
        return Environment(venv, torch_version)
    uv = choose_uv(installer)
    log(f"creating environment {venv.name} with {'uv' if uv else 'venv + pip'} (torch {torch_version}; "
        "minutes when torch is not cached yet)")  # fmt: skip
    build_venv(
        venv,
        python,
        uv,
        [*index_args(uv is not None, index), *requirements, "-e", str(tree)],
        f"cannot install torch {torch_version} for {py_tag}",
        log,
        recipe,
    )
    return Environment(venv, torch_version)


def is_ready(venv: Path, recipe: str) -> bool:
    """``venv`` was built by :func:`build_venv` from ``recipe``, every install done."""
    ready = venv / READY
    return ready.is_file() and ready.read_text() == recipe


def choose_uv(installer: str) -> str | None:
    """The ``uv`` that ``--installer`` (auto, uv, pip) asks for, or None for pip; uv asked for, missing, is refused."""
    uv = find_uv() if installer in ("auto", "uv") else None
    if installer == "uv" and uv is None:
        raise SeriesError(
            "--installer uv was requested but uv is not installed; pip install uv, or use --installer pip"
        )
    return uv


def build_venv(
    venv: Path, python: str, uv: str | None, args: list[str], cannot: str, log: Log, recipe: str | None = None
) -> None:
    """The one builder of virtual environments: ``venv`` made afresh with ``python`` and ``args`` installed (uv, else
    venv and pip; ``cannot``: what a failure says), removed if anything fails; then ``recipe`` in its ready-marker
    (:func:`is_ready`). The installer's pid is kept beside it while it runs, so that a killed run's installer still
    writing into it is refused (:func:`_refuse_running_installer`) before anything is removed."""
    pid_file = venv.with_name(venv.name + ".installer")
    _refuse_running_installer(pid_file, venv)
    remove(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    venv_python = str(venv / "bin" / "python")
    if uv:
        create = [uv, "venv", "--quiet", "--python", python, str(venv)]
        install = [uv, "pip", "install", "--quiet", "--python", venv_python]
    else:
        create = [python, "-m", "venv", str(venv)]
        install = [venv_python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    try:
        run_installer(create, f"cannot create a virtual environment with {python}", log, pid_file)
        run_installer([*install, *args], cannot, log, pid_file)
    except BaseException:
        remove(venv)
        raise
    finally:
        remove(pid_file)
    if recipe is not None:
        (venv / READY).write_text(recipe)


def index_args(uv: bool, index: str) -> list[str]:
    """Installer options that add ``index`` (if any) beside PyPI, the best version of each package winning.

    torch's CPU-only builds are local versions (``2.13.0+cpu``), so for ``torch==2.13.0`` they rank above PyPI's
    build once both indexes are considered; uv considers only the first index that has a package unless told so.
    """
    if not index:
        return []
    return ["--extra-index-url", index, *(["--index-strategy", "unsafe-best-match"] if uv else [])]


def run_installer(command: list[str], what: str, log: Log, pid_file: Path | None = None) -> None:
    """Run an installer, printing a line every :data:`HEARTBEAT_S` seconds; raise with its reason if it fails.

    The installer's pid is written to ``pid_file`` while it runs, and on Linux it is ended when this process dies,
    so that a killed run leaves no installer writing into an environment that the next run rebuilds.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=_die_with_parent
    )
    try:
        if pid_file is not None:
            pid_file.write_text(f"{proc.pid}\n")
        while True:
            try:
                output, _ = proc.communicate(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                log(f"still installing ({time.monotonic() - start:.0f} s): {Path(command[0]).name} {command[1]} ...")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        raise SeriesError(f"{what}: {_reason(output) or f'exit status {proc.returncode}'}")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _refuse_running_installer(pid_file: Path, venv: Path) -> None:
    """An installer of an earlier, killed run that still writes into ``venv`` makes rebuilding it fail: say so."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, 0)
        cmdline = Path(f"/proc/{pid}/cmdline")
        alive = not cmdline.exists() or str(venv).encode() in cmdline.read_bytes()
    except (ProcessLookupError, PermissionError, FileNotFoundError):
        alive = False
    if alive:
        raise SeriesError(
            f"an installer of an earlier run (pid {pid}) is still writing to {venv}; wait for it to end "
            f"(or kill {pid}), then re-run"
        )
    remove(pid_file)


def _reason(output: str) -> str:
    """What an installer's output gives as the cause: the last line of uv's chain of causes (with the address it
    could not fetch, if any), pip's last ``ERROR:`` line, or pip's conflict report; hints and notices left out.

    uv names what it was doing first (``Failed to build `lightning @ ...```) and the cause last (``Connection
    refused``, ``No space left on device``, ``Because ... unsatisfiable``).
    """
    lines = [line.strip(" ╰─▶×│") for line in output.splitlines()]
    lines = [line for line in lines if line and not line.startswith(_NOT_CAUSES)]
    requested = [line for line in lines if line.startswith("The user requested")]
    if requested:  # pip's conflict report: what was asked for against what constrains it
        return "; ".join(requested)
    pip_errors = [line for line in lines if line.startswith("ERROR: ")]
    if pip_errors:
        return pip_errors[-1]
    if not lines:
        return ""
    cause = _unchained(lines[-1])
    fetched = [line for line in lines[:-1] if "Failed to fetch:" in line]
    return f"{cause} ({_unchained(fetched[-1])})" if fetched else cause


def _unchained(line: str) -> str:
    """A line of uv's chain of causes without its ``cause:`` marker."""
    for marker in _CAUSE_MARKERS:
        if line.startswith(marker):
            return line[len(marker) :]
    return line


def _python_version(py_tag: str) -> tuple[int, int]:
    major, minor = py_tag.removeprefix("py").split(".")
    return int(major), int(minor)


def _python_tag(python: str) -> str:
    proc = subprocess.run(
        [python, "-c", "import sys; print(f'py{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SeriesError(f"cannot run the Python interpreter {python!r}")
    return proc.stdout.strip()
