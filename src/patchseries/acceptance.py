"""The acceptance suite: the project's own proof of the series, copied into the tree's ``tests/`` for every run.

``acceptance/`` (at the project root, beside ``patches/``) mirrors upstream's ``tests/`` layout
(``acceptance/tests_pytorch/core/test_*.py`` becomes ``tests/tests_pytorch/core/test_*.py``), so that its modules run
under upstream's ``conftest.py`` on an upstream tree and under the RunIf harness on the sdist, and import their shared
helpers as ``tests_pytorch.helpers.<name>``. The copies are untracked and git-ignored (``.git/info/exclude``), like the
harness, so they never count as local changes and never enter an exported patch.

A manifest in the tree's git directory records each file the tool wrote and its sha256. A later run rewrites only
those, removes those whose source is gone, and refuses (before writing anything) to overwrite a file the tree tracks or
one it did not write.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from patchseries.errors import SeriesError
from patchseries.gitcmd import add_excludes, git, git_path, remove_excludes
from patchseries.paths import ACCEPTANCE_DIR, partial_path
from patchseries.series import Patch
from patchseries.testrun import junit_cases

_MANIFEST = "patchseries-acceptance.json"
_SUITES = ("tests_pytorch", "tests_fabric")
_MARKER_TEXT = b'"""Package marker written by patchseries for the acceptance suite."""\n'


@dataclass(frozen=True)
class Installed:
    """What :func:`install` left in the tree: the suite's test modules (``tests/...`` paths), and what it removed."""

    modules: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def source_files(source: Path) -> list[str]:
    """The files of the acceptance suite's ``tests_*`` folders, relative to ``source``; caches, hidden files and the
    files beside those folders (its README, its ruff configuration) are not copied."""
    if not source.is_dir():
        return []
    files = []
    for path in sorted(source.glob("tests_*/**/*")):
        relative = path.relative_to(source)
        if not path.is_file() or any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
            continue
        if path.suffix in (".pyc", ".pyo"):
            continue
        files.append(relative.as_posix())
    return files


def is_test_module(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_") and name.endswith(".py")


def install(tree: Path, source: Path) -> Installed:
    """Copy ``source/**`` into ``tree/tests/**`` with the package markers it needs; see the module docstring."""
    manifest = _read_manifest(tree)
    files = {f"tests/{relative}": (source / relative).read_bytes() for relative in source_files(source)}
    markers = _markers(list(files))
    tracked = _tracked(tree, [*files, *markers, *manifest])
    wanted = dict(files)
    for marker in markers:  # upstream's own, or one that exists and is not ours (the harness's), is left as it is
        if marker not in tracked and (marker in manifest or not (tree / marker).exists()):
            wanted[marker] = _MARKER_TEXT
    stale = [path for path in manifest if path not in wanted and path not in tracked]
    _refuse_conflicts(tree, wanted, manifest, stale, tracked)
    changed = {path: data for path, data in wanted.items() if _read(tree / path) != data}
    # Excluded before anything is written, so a copy is never an untracked file; the manifest allows both contents
    # while the files are written, so an interrupted run is taken up by the next one.
    add_excludes(tree, [f"/{path}" for path in wanted])
    transition = {path: [*manifest.get(path, []), _sha(data)] for path, data in changed.items()}
    _write_manifest(tree, {**manifest, **transition})
    for path, data in changed.items():
        target = tree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    # package markers last: one goes only once its folder holds nothing else
    stale.sort(key=lambda path: (path.endswith("/__init__.py"), path.count("/") * -1, path))
    removed = [path for path in stale if _remove_stale(tree, path, wanted)]
    kept = {path: [_sha(data)] for path, data in wanted.items()}
    kept.update({path: manifest[path] for path in stale if path not in removed})
    _write_manifest(tree, kept)
    remove_excludes(tree, [f"/{path}" for path in manifest if path not in kept])
    modules = sorted(path for path in files if is_test_module(path))
    return Installed(modules=modules, written=sorted(changed), removed=removed)


def patch_test_modules(patches: list[Patch], tree: Path) -> list[str]:
    """The test modules under ``tests/`` that the series adds or changes and that the tree has, in series order.

    On the sdist the changed upstream modules were left out when applying (the base lacks them), so only the
    modules the series adds remain; on an upstream tree the patches' tests in upstream's modules run too.
    """
    modules: list[str] = []
    for patch in patches:
        for change in patch.changes:
            path = change.path
            if change.kind == "deleted" or not path.startswith("tests/") or not is_test_module(path):
                continue
            if path not in modules and (tree / path).is_file():
                modules.append(path)
    return modules


def ran_per_group(junit: Path, groups: dict[str, list[str]]) -> dict[str, int]:
    """How many test cases of each group of modules (``tests/...`` paths) ran, that is passed or failed."""
    # pytest names a module by its path from the rootdir: the tree (``tests.tests_pytorch.x``), or ``tests/``
    dotted = {name: [d for path in paths for d in (_dotted(path), _dotted(path).removeprefix("tests."))] for name, paths
              in groups.items()}  # fmt: skip
    counts = dict.fromkeys(groups, 0)
    for case in junit_cases(junit):
        if case.outcome not in ("passed", "failed"):
            continue
        module = case.classname or case.name  # a module that fails to import: no class name, the module as name
        for name, modules in dotted.items():
            if any(module == m or module.startswith(m + ".") for m in modules):
                counts[name] += 1
                break
    return counts


def _dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def _markers(paths: list[str]) -> list[str]:
    """The ``__init__.py`` files of the folders of ``paths``, from ``tests/<suite>`` down (upstream has them all)."""
    markers: list[str] = []
    for path in paths:
        parts = path.split("/")
        if len(parts) < 3 or parts[1] not in _SUITES:
            continue
        for depth in range(2, len(parts)):
            marker = "/".join([*parts[:depth], "__init__.py"])
            if marker not in markers and marker not in paths:
                markers.append(marker)
    return markers


def _refuse_conflicts(
    tree: Path, wanted: dict[str, bytes], manifest: dict[str, list[str]], stale: list[str], tracked: set[str]
) -> None:
    for path in wanted:
        source = f"{ACCEPTANCE_DIR}/{path.removeprefix('tests/')}"
        if path in tracked:
            raise SeriesError(
                f"{source} would overwrite {path}, which {tree} tracks (upstream's or a patch's file); rename the "
                "acceptance file; nothing was copied"
            )
        current = _read(tree / path)
        if current is not None and current != wanted[path] and _sha(current) not in manifest.get(path, []):
            raise SeriesError(
                f"{source} would overwrite {tree / path}, which patchseries did not write (or which changed since it "
                "did); move it away, or make the change in acceptance/; nothing was copied"
            )
    for path in stale:
        current = _read(tree / path)
        if current is not None and _sha(current) not in manifest[path]:
            raise SeriesError(
                f"{tree / path} was copied from {ACCEPTANCE_DIR}/, which no longer has it, and changed since; move it "
                "away to keep it; nothing was copied"
            )


def _remove_stale(tree: Path, path: str, wanted: dict[str, bytes]) -> bool:
    """Remove an earlier copy whose source is gone; a package marker stays while its folder holds other files."""
    target = tree / path
    if target.name == "__init__.py" and any(
        p.name not in ("__init__.py", "__pycache__") or f"{path.rsplit('/', 1)[0]}/{p.name}" in wanted
        for p in target.parent.iterdir()
    ):
        return False
    target.unlink(missing_ok=True)
    folder = target.parent
    while folder != tree / "tests" and folder.is_dir() and not any(p.name != "__pycache__" for p in folder.iterdir()):
        for cache in folder.glob("__pycache__"):
            for compiled in cache.iterdir():
                compiled.unlink()
            cache.rmdir()
        folder.rmdir()
        folder = folder.parent
    return True


def _tracked(tree: Path, paths: list[str]) -> set[str]:
    if not paths:
        return set()
    proc = git("ls-files", "-z", "--cached", "--", *paths, cwd=tree, env={"GIT_LITERAL_PATHSPECS": "1"})
    return {path for path in proc.stdout.split("\0") if path}


def is_copy(tree: Path, path: str) -> bool:
    """Whether ``tree/path`` is a copy :func:`install` wrote and nobody changed since (the manifest's digest)."""
    data = _read(tree / path)
    return data is not None and _sha(data) in _read_manifest(tree).get(path, [])


def _read_manifest(tree: Path) -> dict[str, list[str]]:
    manifest = git_path(tree, _MANIFEST)
    if not manifest.is_file():
        return {}
    try:
        data = json.loads(manifest.read_text())
    except json.JSONDecodeError:
        raise SeriesError(f"{manifest} is not valid JSON; delete it and the copies under tests/ it lists") from None
    return {str(path): [str(sha) for sha in shas] for path, shas in data.items()}


def _write_manifest(tree: Path, entries: dict[str, list[str]]) -> None:
    manifest = git_path(tree, _MANIFEST)
    partial = partial_path(manifest)
    partial.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
    partial.replace(manifest)


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
