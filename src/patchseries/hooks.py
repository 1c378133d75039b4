"""Upstream checkout mode's pre-commit gate: each hook of the tree's ``.pre-commit-config.yaml`` that is on PyPI.

pre-commit itself clones each hook's repository (from GitHub) to learn the hook's command and file types and to
install it; this tool reaches PyPI only. So each hook repository that is a PyPI package is installed at the version its
``rev`` pins, with the hook's ``additional_dependencies``, into a cached environment of its own under the work
directory (``hook-envs/``), and the hook's definition (``entry``, ``types``, ``args`` of the repository's
``.pre-commit-hooks.yaml`` at that rev) is encoded below. Upstream's ``args``, ``files``, ``exclude`` and ``types``
in the config override it, as in pre-commit. A hook of another language (prettier is an npm package) is reported as
not run, with the reason.

Hooks run on the files the series adds or changes, in a scratch clone (fixers never touch the tree): first on the
base's version of each file, then on the series' version (staged, as ``pre-commit run`` sees a commit). A hook
*finds* something when it exits non-zero (its output lines that name a file, line numbers left out) or changes a file
(each line it would rewrite, by content). Only what the base does not have fails, counted: a second copy of a problem
the base has once, or a new problem in a file that already had one, is new.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from identify.identify import tags_from_path

from patchseries.environment import build_venv, find_uv, is_ready
from patchseries.errors import SeriesError
from patchseries.gitcmd import git, out
from patchseries.paths import Workspace
from patchseries.progress import Log
from patchseries.trees import BASE_REF
from patchseries.upstream import Comparison

CONFIG = ".pre-commit-config.yaml"


@dataclass(frozen=True)
class HookDefinition:
    """A hook as its repository's ``.pre-commit-hooks.yaml`` defines it."""

    entry: tuple[str, ...]
    types: tuple[str, ...] = ("file",)
    types_or: tuple[str, ...] = ()
    files: str = ""
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class HookRepository:
    """A hook repository that is also a PyPI package, released under the version its tags name."""

    package: str
    hooks: dict[str, HookDefinition]


def _hooks(entries: dict[str, tuple[str, ...]]) -> dict[str, HookDefinition]:
    """``{id: (entry, *types)}`` -> definitions (pre-commit's default type is ``file``)."""
    return {hook: HookDefinition(entry=(entry[0],), types=entry[1:] or ("file",)) for hook, entry in entries.items()}


_RUFF = HookDefinition(entry=("ruff", "check", "--force-exclude"), types_or=("python", "pyi", "jupyter"))
# Each repository's .pre-commit-hooks.yaml at the rev upstream pins (checked against pre-commit-hooks v6.0.0,
# codespell v2.4.1, docformatter v1.7.7, sphinx-lint v1.0.2, ruff-pre-commit v0.14.10; mdformat's, unchanged since
# 0.7.15, at 0.7.21). Only the hooks a Lightning config uses are listed; another is reported as not run.
KNOWN_REPOSITORIES: dict[str, HookRepository] = {
    "https://github.com/pre-commit/pre-commit-hooks": HookRepository(
        "pre-commit-hooks",
        _hooks(
            {
                "check-added-large-files": ("check-added-large-files",),
                "check-ast": ("check-ast", "python"),
                "check-case-conflict": ("check-case-conflict",),
                "check-docstring-first": ("check-docstring-first", "python"),
                "check-executables-have-shebangs": ("check-executables-have-shebangs", "text", "executable"),
                "check-json": ("check-json", "json"),
                "check-merge-conflict": ("check-merge-conflict", "text"),
                "check-toml": ("check-toml", "toml"),
                "check-yaml": ("check-yaml", "yaml"),
                "debug-statements": ("debug-statement-hook", "python"),
                "detect-private-key": ("detect-private-key", "text"),
                "end-of-file-fixer": ("end-of-file-fixer", "text"),
                "mixed-line-ending": ("mixed-line-ending", "text"),
                "trailing-whitespace": ("trailing-whitespace-fixer", "text"),
            }
        ),
    ),  # fmt: skip
    "https://github.com/codespell-project/codespell": HookRepository(
        "codespell", {"codespell": HookDefinition(entry=("codespell",), types=("text",))}
    ),
    "https://github.com/PyCQA/docformatter": HookRepository(
        "docformatter", {"docformatter": HookDefinition(entry=("docformatter",), types=("python",), args=("-i",))}
    ),
    "https://github.com/sphinx-contrib/sphinx-lint": HookRepository(
        "sphinx-lint", {"sphinx-lint": HookDefinition(entry=("sphinx-lint",), types=("rst",))}
    ),
    "https://github.com/astral-sh/ruff-pre-commit": HookRepository(
        "ruff",
        {
            "ruff": _RUFF,
            "ruff-check": _RUFF,
            "ruff-format": HookDefinition(
                entry=("ruff", "format", "--force-exclude"), types_or=("python", "pyi", "jupyter")
            ),
        },
    ),
    "https://github.com/executablebooks/mdformat": HookRepository(
        "mdformat", {"mdformat": HookDefinition(entry=("mdformat",), types=("markdown",))}
    ),
}
# Hook repositories whose tool is not on PyPI, and why they are not run
NOT_ON_PYPI = {
    "https://github.com/JoC0de/pre-commit-prettier": "prettier is an npm package (language: node), not on PyPI",
    "https://github.com/pre-commit/mirrors-prettier": "prettier is an npm package (language: node), not on PyPI",
}
# "path:12:3: message" -> "path: message"; "line 12" -> "line N": line numbers move when the series adds lines
_LOCATION = re.compile(r"^(?P<path>[^:\s]+):\d+(?::\d+)?:?\s*")
_NUMBERED = re.compile(r"\b(line|lines|column|col|char)\s+\d+", re.IGNORECASE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CRASH = "exit status "  # how a failure that names no file is reported


@dataclass
class Hook:
    """One hook of the config, with the config's overrides applied."""

    repo: str
    rev: str
    id: str
    label: str
    definition: HookDefinition | None
    args: tuple[str, ...] = ()
    files: str = ""
    exclude: str = "^$"
    types: tuple[str, ...] = ("file",)
    types_or: tuple[str, ...] = ()
    exclude_types: tuple[str, ...] = ()
    additional_dependencies: tuple[str, ...] = ()
    language_version: str = ""
    not_run: str = ""  # why the hook is not run, if it is not
    requirements: tuple[str, ...] = ()  # the PyPI package at the rev, and the additional dependencies

    def selects(self, path: str, tags: set[str], top_files: str, top_exclude: str) -> bool:
        """Whether pre-commit would pass ``path`` (with identify's ``tags``) to this hook."""
        return (
            bool(re.search(top_files, path))
            and not re.search(top_exclude, path)
            and bool(re.search(self.files, path))
            and not re.search(self.exclude, path)
            and set(self.types) <= tags
            and (not self.types_or or bool(tags & set(self.types_or)))
            and not tags & set(self.exclude_types)
        )


@dataclass(frozen=True)
class Config:
    hooks: list[Hook]
    files: str = ""
    exclude: str = "^$"


def read_config(path: Path) -> Config:
    """The hooks of a ``.pre-commit-config.yaml``, each with its definition if it is a PyPI hook this tool knows."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SeriesError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("repos"), list):
        raise SeriesError(f"{path} has no list of repos, as pre-commit expects")
    hooks: list[Hook] = []
    for repo in data["repos"]:
        url, rev = str(repo.get("repo", "")), str(repo.get("rev", ""))
        for item in repo.get("hooks") or []:
            hooks.append(_configured(url, rev, item))
    seen = Counter(hook.id for hook in hooks)
    for hook in hooks:  # a hook listed twice (upstream's two ruff runs) is told apart by its arguments
        if seen[hook.id] > 1 and hook.args:
            hook.label = f"{hook.label} ({' '.join(hook.args)})"
    return Config(hooks, str(data.get("files", "")), str(data.get("exclude", "^$")))


def _configured(url: str, rev: str, item: dict[str, Any]) -> Hook:
    hook_id = str(item.get("id", "?"))
    known = KNOWN_REPOSITORIES.get(url.removesuffix(".git").rstrip("/"))
    definition = known.hooks.get(hook_id) if known else None
    hook = Hook(repo=url, rev=rev, id=hook_id, label=f"pre-commit {hook_id}", definition=definition)
    if url in ("local", "meta"):
        hook.not_run = f"a {url} hook, not from PyPI"
    elif url in NOT_ON_PYPI:
        hook.not_run = NOT_ON_PYPI[url]
    elif known is None:
        hook.not_run = f"{url} is not a hook repository patchseries knows to be on PyPI"
    elif definition is None:
        hook.not_run = f"patchseries does not know the hook {hook_id} of {url}"
    stages = [str(stage) for stage in item.get("stages") or []]
    if stages and not {"pre-commit", "commit"} & set(stages):
        hook.not_run = f"runs only at stages {', '.join(stages)}"
    base = definition or HookDefinition(entry=())
    hook.args = tuple(str(a) for a in item.get("args", base.args))
    hook.files = str(item.get("files", base.files))
    hook.exclude = str(item.get("exclude", "^$"))
    hook.types = tuple(str(t) for t in item.get("types", base.types))
    hook.types_or = tuple(str(t) for t in item.get("types_or", base.types_or))
    hook.exclude_types = tuple(str(t) for t in item.get("exclude_types", ()))
    hook.additional_dependencies = tuple(str(d) for d in item.get("additional_dependencies", ()))
    hook.language_version = str(item.get("language_version", ""))
    if known is not None:
        hook.requirements = (f"{known.package}=={rev.removeprefix('v')}", *hook.additional_dependencies)
    return hook


def run_hooks(ws: Workspace, tree: Path, log: Log) -> list[Comparison]:
    """One comparison per hook of the tree's config (not-run hooks say why), on the files the series changes."""
    config_file = tree / CONFIG
    changed = out("diff", "--name-only", "-z", "--diff-filter=AM", BASE_REF, cwd=tree).split("\0")
    changed = sorted({path for path in changed if path and (tree / path).is_file()})
    if not config_file.is_file() or not changed:
        return []
    config = read_config(config_file)
    comparisons = []
    runnable = [hook for hook in config.hooks if not hook.not_run]
    with tempfile.TemporaryDirectory(prefix="patchseries-hooks-") as tmp:
        scratch = Path(tmp) / "tree"
        git("clone", "--quiet", "--shared", "--no-checkout", tree, scratch)
        git("checkout", "--quiet", "--detach", out("rev-parse", BASE_REF, cwd=tree), cwd=scratch)
        in_base = [path for path in changed if (scratch / path).is_file()]
        log(f"pre-commit: {len(runnable)} of upstream's hooks on {len(changed)} changed files, base and series")
        venvs: dict[int, Path] = {}
        failed: dict[int, str] = {}
        for hook in runnable:
            try:
                venvs[id(hook)] = hook_environment(ws, hook, log)
            except SeriesError as exc:  # a gate that cannot run fails, it does not pass
                failed[id(hook)] = str(exc)
        before = {
            key: _run_on(hook, config, scratch, in_base, venvs[key]) for hook in runnable if (key := id(hook)) in venvs
        }
        for path in changed:  # the series' version, staged: what `pre-commit run` sees of a commit
            target = scratch / path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / path, target)
        git("add", "--force", "--", *changed, cwd=scratch)
        for hook in config.hooks:
            if hook.not_run:
                comparisons.append(Comparison(hook.label, note=f"not run: {hook.not_run}"))
                continue
            if id(hook) in failed:
                comparisons.append(Comparison(hook.label, new=[failed[id(hook)]]))
                continue
            after = _run_on(hook, config, scratch, changed, venvs[id(hook)])
            comparison = Comparison(hook.label, checked=len(_selected(hook, config, scratch, changed)))
            # a hook that fails without naming a file (it crashed, e.g. on this Python) fails even if it did on the base
            crashed = Counter({finding: n for finding, n in after.items() if finding.startswith(_CRASH)})
            comparison.new = sorted((after - before[id(hook)] | crashed).elements())
            comparison.pre_existing = sorted((after & before[id(hook)] - crashed).elements())
            comparisons.append(comparison)
    return comparisons


def _selected(hook: Hook, config: Config, root: Path, paths: list[str]) -> list[str]:
    tags = {path: tags_from_path(str(root / path)) for path in paths}
    return [path for path in paths if hook.selects(path, tags[path], config.files, config.exclude)]


def _run_on(hook: Hook, config: Config, root: Path, paths: list[str], venv: Path) -> Counter[str]:
    """What ``hook`` (installed in ``venv``) finds in ``paths`` of ``root``; the files are restored afterwards (fixers
    rewrite them)."""
    files = _selected(hook, config, root, paths)
    if not files:
        return Counter()
    before = {path: (root / path).read_bytes() for path in files}
    command = [str(venv / "bin" / hook.definition.entry[0]), *hook.definition.entry[1:]] if hook.definition else []
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # ruff's one-line findings (its default output spreads one over several lines); no colour codes
    env.update({"PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "RUFF_OUTPUT_FORMAT": "concise",
                "NO_COLOR": "1", "PY_COLORS": "0"})  # fmt: skip
    proc = subprocess.run(
        [*command, *hook.args, *files], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    findings: Counter[str] = Counter()
    rewritten = set()
    for path, old in before.items():
        new = (root / path).read_bytes()
        if new != old:
            rewritten.add(path)
            findings.update(rewritten_lines(path, old, new))
            (root / path).write_bytes(old)
    if proc.returncode != 0:
        findings.update(output_findings(proc.stdout + "\n" + proc.stderr, files, rewritten, proc.returncode))
    return findings


def rewritten_lines(path: str, old: bytes, new: bytes) -> list[str]:
    """``path: rewrites '<line>'`` for each line a fixer changed or removed, ``path: inserts after '<line>'`` for lines
    it added: by content, so that the same problem on a moved line is the same finding."""
    before = old.decode(errors="replace").splitlines(keepends=True)
    after = new.decode(errors="replace").splitlines(keepends=True)
    found = []
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            found += [f"{path}: rewrites {line.rstrip(chr(10))!r}" for line in before[i1:i2]]
        elif tag == "insert":
            found.append(f"{path}: inserts after {before[i1 - 1].rstrip(chr(10)) if i1 else ''!r}")
    return found


def output_findings(output: str, files: list[str], rewritten: set[str], returncode: int) -> list[str]:
    """The output lines of a failed hook that name one of ``files`` (a rewritten file's lines are reported by
    :func:`rewritten_lines`), without line numbers; the exit status when no line names a file."""
    by_length = sorted(files, key=len, reverse=True)
    found, named = [], False
    for raw in output.splitlines():
        line = _ANSI.sub("", raw).strip()
        path = next((p for p in by_length if p in line), None)
        if path is None:
            continue
        named = True
        if path in rewritten:
            continue
        line = _NUMBERED.sub(lambda m: f"{m.group(1)} N", _LOCATION.sub(r"\g<path>: ", line))
        found.append(line)
    if not named and not rewritten:  # a fixer's exit status says it rewrote files, which are reported line by line
        last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "no output")
        found.append(f"{_CRASH}{returncode}: {_NUMBERED.sub(lambda m: f'{m.group(1)} N', _ANSI.sub('', last))}")
    return found


def hook_environment(ws: Workspace, hook: Hook, log: Log) -> Path:
    """A cached virtual environment with the hook's package at its rev and its additional dependencies."""
    recipe = "\n".join([hook.repo, *hook.requirements, _interpreter(hook.language_version)]) + "\n"
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    name = hook.requirements[0].replace("==", "-")
    venv = ws.workdir / "hook-envs" / f"{name}-{digest}"
    if is_ready(venv, recipe):
        return venv
    log(f"pre-commit: installing {' '.join(hook.requirements)} into {venv.name}")
    cannot = f"cannot install {' '.join(hook.requirements)}"
    build_venv(venv, _interpreter(hook.language_version), find_uv(), list(hook.requirements), cannot, log, recipe)
    return venv


def _interpreter(language_version: str) -> str:
    """The hook's ``language_version`` (docformatter pins python3.12) where this machine has it, else the tool's."""
    if language_version.startswith("python") and language_version != "python3":
        found = shutil.which(language_version)
        # a pyenv shim may name a version that is not installed: only an interpreter that starts counts
        if found and subprocess.run([found, "-c", ""], capture_output=True, check=False).returncode == 0:
            return found
    return sys.executable
