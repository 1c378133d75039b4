"""The tool environment is locked: requirements/tool.lock pins, with hashes, everything pyproject asks for."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from patchseries.paths import PROJECT_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LOCK = PROJECT_ROOT / "requirements" / "tool.lock"
# the oldest zizmor whose default and auditor personas the workflow audit test has been run with
ZIZMOR_FLOOR = Version("1.24")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


@dataclass
class Pin:
    version: str
    marker: str | None
    hashes: int = 0


def _pins() -> dict[str, list[Pin]]:
    """Canonical name -> each ``name==version`` line of the lock (one per marker fork), with its hash count."""
    pins: dict[str, list[Pin]] = {}
    current: Pin | None = None
    for line in LOCK.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            current = Pin(match.group(2), match.group(3))
            pins.setdefault(canonicalize_name(match.group(1)), []).append(current)
        elif current is not None and line.strip().startswith("--hash=sha256:"):
            current.hashes += 1
    return pins


def _project() -> dict[str, Any]:
    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]


def test_lock_pins_every_dependency_and_dev_dependency_with_hashes():
    project = _project()
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    pins = _pins()
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is in pyproject.toml but not in the lock: run scripts/update_lock.sh"
        for pin in pins[name]:
            assert requirement.specifier.contains(pin.version, prereleases=True), f"{name}=={pin.version}: {text}?"
            assert pin.hashes > 0, f"{name}=={pin.version} has no hash"


def test_lock_has_one_version_of_each_package_for_every_python():
    several = {name: [pin.version for pin in pins] for name, pins in _pins().items() if len(pins) > 1}
    assert several == {}


def test_build_backend_is_locked_and_fits_the_build_requirement():
    build = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    pins = _pins()
    for text in build:
        requirement = Requirement(text)
        assert requirement.specifier.contains(pins[canonicalize_name(requirement.name)][0].version)


def test_zizmor_is_pinned_to_a_release_the_audit_test_passes_with():
    version = _pins()["zizmor"][0].version
    assert Version(version) >= ZIZMOR_FLOOR
    # the audit test runs the tool environment's zizmor: it is the pinned one
    assert metadata.version("zizmor") == version


def test_tool_environment_has_exactly_the_locked_versions():
    """What the bootstrap installed is what the lock says (a stale environment would be remade by the bootstrap)."""
    for name, pins in _pins().items():
        for pin in pins:
            if pin.marker and not Marker(pin.marker).evaluate():
                continue
            try:
                installed = metadata.version(name)
            except metadata.PackageNotFoundError:
                pytest.fail(f"{name}=={pin.version} is locked but not installed in {sys.prefix}")
            assert Version(installed) == Version(pin.version), name


def test_bootstrap_installs_from_the_lock_and_remakes_the_environment_when_it_changes():
    script = (PROJECT_ROOT / "scripts" / "_bootstrap.sh").read_text()
    stamp = next(line for line in script.splitlines() if line.strip().startswith("stamp="))
    assert "$TOOL_LOCK" in stamp
    assert "pyproject.toml" in stamp
    assert '--require-hashes --no-deps -r "$TOOL_LOCK"' in script
    assert "--no-deps --no-build-isolation -e" in script
    assert Path(PROJECT_ROOT / "scripts" / "update_lock.sh").stat().st_mode & 0o111
