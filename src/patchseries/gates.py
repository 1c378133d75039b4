"""Upstream checkout mode's gates: Lightning's tests, mypy, Sphinx and pre-commit hooks on the base and the series in a
scratch worktree; only what the base lacks fails, counted, and a check that fails naming no file (a crash) fails too."""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from identify.identify import tags_from_path

from patchseries.errors import SeriesError
from patchseries.gitcmd import git, out
from patchseries.paths import Workspace
from patchseries.progress import Log
from patchseries.runner import Environment, TestOutcome, build_venv, find_uv, is_ready, junit_cases, run_tests
from patchseries.trees import BASE_REF, base_worktree

# What exercises the code the series changes: the LightningModule, its optimizers, loops, strategies, precision, Fabric
UPSTREAM_MODULES = ("tests/tests_pytorch/core", "tests/tests_pytorch/trainer/optimization", "tests/tests_pytorch/loops",
                    "tests/tests_pytorch/strategies", "tests/tests_pytorch/plugins/precision",
                    "tests/tests_pytorch/models/test_hooks.py", "tests/tests_pytorch/utilities/test_compile.py",
                    "tests/tests_fabric/test_wrappers.py", "tests/tests_fabric/test_fabric.py")  # fmt: skip
UPSTREAM_REQUIREMENTS = ("requirements/pytorch/test.txt", "requirements/fabric/test.txt", "requirements/typing.txt")
# Sphinx and the extensions the pages' directives need, in the releases upstream's requirements/docs.txt allows
DOCS_REQUIREMENTS = ("sphinx>5.0,<6.0", "sphinx-toolbox==4.1.2", "docutils>=0.18.1,<0.20")
_ROOT = "patchseries-pages"  # the docs build's root document; not a name a docs page has
_SPHINX_CONF = f"""root_doc = {_ROOT!r}\nautosummary_generate = True\nexclude_patterns = ['_*', '.*']\nextensions = [
'sphinx.ext.autodoc', 'sphinx.ext.autosummary', 'sphinx.ext.doctest', 'sphinx.ext.napoleon', 'sphinx_toolbox.collapse']
"""  # and templates_path, the docs' own
_RUFF = "|python pyi jupyter|ruff"
# Per PyPI hook repository: its package, and "types|types_or|entry" of each hook upstream uses, at the rev it pins
KNOWN_HOOKS: dict[str, tuple[str, dict[str, str]]] = {
    "pre-commit/pre-commit-hooks": ("pre-commit-hooks", {
        "check-added-large-files": "", "check-case-conflict": "", "check-docstring-first": "python",
        "check-executables-have-shebangs": "text executable", "check-json": "json", "check-toml": "toml",
        "check-yaml": "yaml", "detect-private-key": "text", "end-of-file-fixer": "text",
        "trailing-whitespace": "text||trailing-whitespace-fixer"}),
    "codespell-project/codespell": ("codespell", {"codespell": "text"}),
    "PyCQA/docformatter": ("docformatter", {"docformatter": "python||docformatter -i"}),
    "sphinx-contrib/sphinx-lint": ("sphinx-lint", {"sphinx-lint": "rst"}),
    "astral-sh/ruff-pre-commit": ("ruff", {"ruff": f"{_RUFF} check --force-exclude",
        "ruff-check": f"{_RUFF} check --force-exclude", "ruff-format": f"{_RUFF} format --force-exclude"}),
    "executablebooks/mdformat": ("mdformat", {"mdformat": "markdown"}),
}  # fmt: skip
# "path:12:3: message" -> "path: message", "line 12" -> "line N": line numbers move when the series adds lines
_LOCATION = re.compile(r"^(?P<path>[^:\s]+):\d+(?::\d+)?:?\s*")
_NUMBERED = re.compile(r"\b(line|lines|column|col|char)\s+\d+", re.IGNORECASE)
_CRASH = "exit status "  # how a failure that names no file is reported
Findings = dict[str, tuple[int, Counter[str]]]  # per check: how many files it saw, what it found
Check = Callable[[Path, list[str]], Findings]  # a check on a tree's files


@dataclass
class Comparison:  # failures (tests or findings) with the series, split by whether the base has them too
    name: str
    checked: int = 0
    new: list[str] = field(default_factory=list)
    pre_existing: list[str] = field(default_factory=list)
    note: str = ""  # instead of the counts: why the check was not run ("not run: ...")

    def line(self) -> str:
        new = f"{len(self.new)} NEW: " + "; ".join(self.new[:5]) if self.new else "no new failure"
        return f"{self.name}: " + (self.note or f"{self.checked} checked, {new}, {len(self.pre_existing)} pre-existing")


def compare(name: str, checked: int, after: Counter[str], before: Counter[str]) -> Comparison:
    crashed = Counter({finding: n for finding, n in after.items() if finding.startswith(_CRASH)})
    new, old = (after - before) | crashed, after & (before - crashed)
    return Comparison(name, checked, sorted(new.elements()), sorted(old.elements()))


def changed_files(tree: Path) -> list[str]:
    """The files the series adds or changes (the tool's tree has its commits only: any other file is refused)."""
    names = out("diff", "--name-only", "-z", "--no-renames", "--diff-filter=AM", BASE_REF, "HEAD", cwd=tree).split("\0")
    return sorted(name for name in names if name and (tree / name).is_file())


def changed_pages(tree: Path) -> list[str]:
    return [path for path in changed_files(tree) if path.startswith("docs/") and path.endswith(".rst")]


def before_after(ws: Workspace, tree: Path, paths: list[str], check: Check) -> list[Comparison]:
    """``check`` on the base's ``paths``, then on the series' (what a check wrote on the base is thrown away)."""
    root = base_worktree(ws, tree, "gates")
    before = check(root, [path for path in paths if (root / path).is_file()])
    git("checkout", "--quiet", "--force", "--detach", out("rev-parse", "HEAD", cwd=tree), cwd=root)
    return [compare(name, checked, found, before[name][1]) for name, (checked, found) in check(root, paths).items()]


def findings(command: list[str], root: Path, files: list[str]) -> Counter[str]:
    """What ``command`` finds in ``files``: lines it rewrites, output lines naming a file, else a failure's status."""
    if not files:
        return Counter()
    old = {path: (root / path).read_bytes() for path in files}
    # its own bin/ first (an entry may call its package's other scripts); ruff's findings one a line, no colours
    env = {**{key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "PATH": f"{Path(command[0]).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "RUFF_OUTPUT_FORMAT": "concise", "NO_COLOR": "1"}  # fmt: skip
    proc = subprocess.run([*command, *files], cwd=root, env=env, capture_output=True, text=True, check=False)
    rewritten = {path for path, before in old.items() if (root / path).read_bytes() != before}
    found: Counter[str] = Counter()
    for path in rewritten:  # each line removed (-) or written (+), by content: a moved line's problem is the same
        was, now = (text.decode(errors="replace").splitlines(True) for text in (old[path], (root / path).read_bytes()))
        diff = list(difflib.unified_diff(was, now, n=0))[2:]  # without the two header lines
        found.update(f"{path}: {line[0]}{line[1:].rstrip(chr(10))!r}" for line in diff if line[0] in "+-")
        (root / path).write_bytes(old[path])
    output = _NUMBERED.sub(r"\1 N", f"{proc.stdout}\n{proc.stderr}".replace(f"{root}{os.sep}", "")).splitlines()
    longest = sorted(files, key=len, reverse=True)  # the longest name that a line holds is the one it names
    named = [(line, name) for line in output if (name := next((p for p in longest if p in line), None))]
    found.update(_LOCATION.sub(r"\g<path>: ", line.strip()) for line, name in named if name not in rewritten)
    if proc.returncode and not named and not rewritten:  # a fixer's exit status says only that it rewrote
        last = next((line.strip() for line in reversed(output) if line.strip()), "no output")
        found[f"{_CRASH}{proc.returncode}: {last}"] += 1
    return found


def requirement_args(ws: Workspace, tree: Path) -> tuple[str, ...]:
    """``-r FILE`` per upstream requirement file, its torch pin dropped (in a copy): the job's torch wins."""
    args: list[str] = []
    for path in (tree / name for name in UPSTREAM_REQUIREMENTS if (tree / name).is_file()):
        lines = path.read_text().splitlines()
        if (kept := [x for x in lines if not re.match(r"^\s*torch\s*(==|>=|<=|~=|<|>|;|$)", x)]) != lines:
            path = ws.reports / "requirements" / f"{path.parent.name}-{path.name}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(kept) + "\n")
        args += ["-r", str(path)]
    return tuple(args)


def run_upstream_tests(ws: Workspace, env: Environment, tree: Path, log: Log,
                       not_upstream: tuple[str, ...] = ()) -> Comparison:  # fmt: skip
    """:data:`UPSTREAM_MODULES` (but ``not_upstream``) on the series, the failures' modules again on the base."""
    if not (modules := [module for module in UPSTREAM_MODULES if (tree / module).exists()]):
        return Comparison("upstream tests")
    log(f"upstream: running {len(modules)} upstream test modules and folders on the series")
    reports = ws.reports / f"upstream-{env.torch}"
    args = ("-q", *(f"--ignore={path.removeprefix('tests/')}" for path in not_upstream))
    after = run_tests(env, tree, modules, [], reports / "series", args)
    failing, failing_before = _failed(after), Counter[str]()
    if rerun := sorted({_module_of(tree, case) for case in failing} - {""}):
        log(f"upstream: {sum(failing.values())} failures; running their {len(rerun)} modules on the base")
        base = base_worktree(ws, tree, "gates")
        if rerun := [module for module in rerun if (base / module).is_file()]:  # a new module's are all new
            failing_before = _failed(run_tests(env, base, rerun, [], reports / "base", args, base / "src"))
    return compare("upstream tests", after.passed + after.failed, failing, failing_before)


def _failed(outcome: TestOutcome) -> Counter[str]:
    if not outcome.junit.exists():
        return Counter({f"{_CRASH}{outcome.returncode}: pytest wrote no report": 1})
    return Counter(f"{case.classname}::{case.name}" for case in junit_cases(outcome.junit) if case.outcome == "failed")


def _module_of(tree: Path, case: str) -> str:
    """The module under ``tests/`` of a JUnit ``classname::name`` (one that failed to import: ``::dotted.path``)."""
    parts = (case.partition("::")[0] or case.partition("::")[2]).split(".")  # classname, else name
    paths = ("/".join(parts[:end]) + ".py" for end in range(len(parts), 0, -1))
    modules = (module for path in paths for module in (path, f"tests/{path}") if module.startswith("tests/"))
    return next((module for module in modules if (tree / module).is_file()), "")


def run_static_gates(ws: Workspace, env: Environment, tree: Path, log: Log) -> list[Comparison]:
    """mypy with the tree's configuration on the changed files under ``src/`` (ruff runs as a pre-commit hook)."""
    if not (sources := [path for path in changed_files(tree) if path.startswith("src/") and path.endswith(".py")]):
        return []
    log(f"static gates: mypy on {len(sources)} changed files")
    # never install stubs into the job's environment (upstream's config says install_types, non_interactive)
    mypy = [str(env.python), "-m", "mypy", "--follow-imports=silent", "--no-incremental", "--no-install-types",
            "--interactive"]  # fmt: skip
    return before_after(ws, tree, sources, lambda root, files: {"mypy": (len(files), findings(mypy, root, files))})


def run_docs_gate(ws: Workspace, env: Environment, tree: Path, log: Log) -> Comparison | None:
    """Sphinx on each docs project's changed pages, the others stubs (upstream's build needs its theme and network)."""
    if not (pages := changed_pages(tree)):
        return None
    log(f"docs: Sphinx on the {len(pages)} changed pages, base and series")

    def check(root: Path, present: list[str]) -> Findings:
        projects: dict[Path, list[str]] = {}
        for page in present:
            if project := next((d for d in Path(page).parents if (root / d / "conf.py").is_file()), None):
                projects.setdefault(project, []).append(page)
        found: Counter[str] = Counter()
        for project, own in projects.items():
            source, conf = root / project, root.parent  # conf.py beside the clone, not in it
            for path in source.rglob("*.rst"):
                if str(path.relative_to(root)) not in pages and path.relative_to(source).parts[0][0] not in "_.":
                    labels = re.findall(r"^\.\. _([^:`]+):\s*$", path.read_text(errors="replace"), re.MULTILINE)
                    path.write_text("".join(f".. _{label}:\n\n" for label in labels) + "Stub\n====\n")
            (conf / "conf.py").write_text(f"{_SPHINX_CONF}templates_path = [{str(source / '_templates')!r}]\n")
            toctree = "".join(f"   {Path(page).relative_to(project).with_suffix('')}\n" for page in own)
            (source / f"{_ROOT}.rst").write_text(f"Pages\n=====\n\n.. toctree::\n\n{toctree}")
            sphinx = [str(env.python), "-m", "sphinx", "-b", "html", "-q", "-E", "-c", str(conf), str(source)]
            found += findings([*sphinx, str(root.parent / "html")], root, own)  # every page read, these written
        return {"docs (sphinx)": (sum(map(len, projects.values())), found)}

    return before_after(ws, tree, pages, check)[0]


@dataclass(frozen=True)
class Hook:  # one hook of upstream's config as pre-commit would run it (its config's overrides applied), or why not
    label: str
    not_run: str = ""
    entry: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()  # its PyPI package at the rev, and its additional dependencies
    selects: Callable[[str, set[str]], bool] = lambda path, tags: False  # a path, with identify's tags


def read_config(path: Path) -> list[Hook]:
    try:
        data = yaml.safe_load(path.read_text())
        return [_hook(data, repo, item) for repo in data["repos"] for item in repo.get("hooks") or []]
    except (yaml.YAMLError, TypeError, KeyError, AttributeError) as exc:
        raise SeriesError(f"{path} is not a pre-commit configuration: {exc!r}") from None


def _hook(config: dict[str, Any], repo: dict[str, Any], item: dict[str, Any]) -> Hook:
    url, rev, args = str(repo.get("repo", "")), str(repo.get("rev", "")), tuple(map(str, item.get("args", [])))
    package, known = KNOWN_HOOKS.get(url.removeprefix("https://github.com/").removesuffix(".git"), ("", {}))
    label = f"pre-commit {item['id']}" + (f" ({' '.join(args)})" if args else "")  # upstream runs ruff twice
    if (spec := known.get(str(item["id"]))) is None:
        return Hook(label, not_run=f"not a hook patchseries installs from PyPI ({url})")
    types, types_or, entry = (spec.split("|") + ["", ""])[:3]
    only, whole, no = (set(map(str, item.get(key, default.split()))) for key, default in
                       (("types", types or "file"), ("types_or", types_or), ("exclude_types", "")))  # fmt: skip
    files, exclude = ((str(config.get(k, d)), str(item.get(k, d))) for k, d in (("files", ""), ("exclude", "^$")))
    requirements = (f"{package}=={rev.removeprefix('v')}", *map(str, item.get("additional_dependencies", [])))
    return Hook(label, "", (*(entry or str(item["id"])).split(), *args), requirements, lambda path, tags: (
        all(re.search(p, path) for p in files) and not any(re.search(p, path) for p in exclude)
        and only <= tags and (not whole or bool(tags & whole)) and not tags & no))  # fmt: skip


def run_hooks(ws: Workspace, tree: Path, log: Log) -> list[Comparison]:
    if not (config := tree / ".pre-commit-config.yaml").is_file() or not (changed := changed_files(tree)):
        return []
    hooks = read_config(config)
    venvs = {hook.label: hook_environment(ws, hook, log) for hook in hooks if not hook.not_run}
    log(f"pre-commit: {len(venvs)} of upstream's hooks on {len(changed)} changed files, base and series")

    def check(root: Path, files: list[str]) -> Findings:
        found: Findings = {}
        for hook in (hook for hook in hooks if not hook.not_run):
            selected = [path for path in files if hook.selects(path, tags_from_path(str(root / path)))]
            command = [str(venvs[hook.label] / "bin" / hook.entry[0]), *hook.entry[1:]]
            found[hook.label] = (len(selected), findings(command, root, selected))
        return found

    ran = {comparison.name: comparison for comparison in before_after(ws, tree, changed, check)}
    return [ran.get(hook.label) or Comparison(hook.label, note=f"not run: {hook.not_run}") for hook in hooks]


def hook_environment(ws: Workspace, hook: Hook, log: Log) -> Path:
    recipe = "\n".join([*hook.requirements, sys.executable]) + "\n"
    venv = ws.workdir / "hook-envs" / hashlib.sha256(recipe.encode()).hexdigest()[:16]
    if not is_ready(venv, recipe):
        log(f"pre-commit: installing {' '.join(hook.requirements)} into {venv}")
        cannot = f"cannot install {' '.join(hook.requirements)} for upstream's pre-commit hooks"
        build_venv(venv, sys.executable, find_uv(), list(hook.requirements), cannot, log, recipe)
    return venv
