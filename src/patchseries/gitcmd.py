"""The single place that runs git: it raises with git's own stderr instead of a traceback."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchseries.errors import SeriesError

# Every commit the tool makes has this identity: the same inputs give the same commit ids on any machine
_TOOL = {"NAME": "patchseries", "EMAIL": "patchseries@invalid"}
TOOL_IDENTITY = {f"GIT_{role}_{key}": value for role in ("AUTHOR", "COMMITTER") for key, value in _TOOL.items()}
ENCODING_ERRORS = "surrogateescape"  # text not UTF-8 (a Latin-1 patch or message) read and written back byte for byte
STABLE_CONFIG = (  # what a repository's own configuration could change in the tool's output
    *("core.autocrlf=false", "core.fileMode=true", "core.quotePath=true", "commit.gpgSign=false"),
    *("diff.noprefix=false", "diff.mnemonicPrefix=false", "diff.relative=false", "diff.renames=false"),
    *("am.threeWay=false", "am.keepcr=false", "am.messageId=false", "mailinfo.scissors=false", "merge.renames=1"),
    *("init.defaultBranch=main", "i18n.logOutputEncoding=UTF-8", "i18n.commitEncoding=UTF-8"),
    *("core.attributesFile=/dev/null", "core.bigFileThreshold=512m", "log.showSignature=false"),
)
# the person's ~/.gitconfig and /etc/gitconfig are not read (`format.signOff`, `diff.context`), but `safe.directory`
NEUTRAL_CONFIG = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_ATTR_NOSYSTEM": "1"}
# the caller's GIT_* variables the tool keeps; any other (GIT_DIR, GIT_INDEX_FILE, GIT_TEMPLATE_DIR, GIT_DIFF_OPTS,
# ...) would pick another repository or change its output
_KEPT = (
    *("GIT_SSH", "GIT_PROXY_COMMAND", "GIT_ASKPASS", "GIT_SSL_", "GIT_HTTP_", "GIT_CURL_", "GIT_EXEC_PATH"),  # a remote
    *("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM"),  # the person's configuration
)


def git(*args: str | Path, cwd: Path | None = None, env: Mapping[str, str] | None = None, check: bool = True,
        stdin: str | None = None, user_config: bool = False) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run ``git`` with stable configuration (``user_config``: the person's, as their git: a proxy); raise its cause."""
    settings = [word for s in (*(() if user_config else STABLE_CONFIG), *_safe_directories()) for word in ("-c", s)]
    command = ["git", *settings, *(str(a) for a in args)]
    full_env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_") or key.startswith(_KEPT)}
    full_env.update({} if user_config else NEUTRAL_CONFIG)
    # GIT_OPTIONAL_LOCKS=0: `git status` never rewrites a person's index; GIT_TEMPLATE_DIR="": no template's hooks
    full_env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C", GIT_TEMPLATE_DIR="", **(env or {}))
    if cwd is not None:
        # a tree whose `.git` is broken must not make git find the repository around it (the project's checkout)
        full_env["GIT_CEILING_DIRECTORIES"] = str(Path(cwd).resolve().parent)
    data = None if stdin is None else stdin.encode(errors=ENCODING_ERRORS)  # bytes both ways, no universal newlines:
    done = subprocess.run(command, cwd=cwd, env=full_env, input=data, capture_output=True, check=False)  # a CR is kept
    text = [stream.decode(errors=ENCODING_ERRORS) for stream in (done.stdout, done.stderr)]
    proc = subprocess.CompletedProcess(command, done.returncode, *text)
    if check and proc.returncode != 0:
        named = re.sub(r"^(-c \S+ )+", "", " ".join(map(str, args))).split(" ")[:3]  # its subcommand, two arguments
        raise SeriesError(f"git {' '.join(named)} failed: {failure_cause(proc)}")
    return proc


@functools.cache
def _safe_directories() -> tuple[str, ...]:
    """The person's ``safe.directory`` entries: without them git refuses a checkout another user owns (in CI)."""
    lines = []
    for scope in ("--global", "--system"):
        config = ["git", "config", scope, "--get-all", "safe.directory"]
        lines += subprocess.run(config, capture_output=True, text=True, check=False).stdout.splitlines()
    return tuple(f"safe.directory={line}" for line in lines if line)


def failure_cause(proc: subprocess.CompletedProcess[str]) -> str:
    """The line of a failed git command's output that says why (its last line may be a usage reminder or a hint)."""
    detail = [line.strip() for line in (proc.stderr.strip() or proc.stdout.strip()).splitlines() if line.strip()]
    causes = [line for line in detail if line.startswith(("fatal:", "error:"))]
    return (causes or [x for x in detail if not x.startswith("hint:")] or [f"exit status {proc.returncode}"])[-1]


def out(*args: str | Path, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    return git(*args, cwd=cwd, env=env).stdout.strip()


def uncommitted_files(repo: Path, own_ignores_only: bool = False, user_config: bool = False) -> list[str]:
    """Staged, unstaged and untracked paths; ``own_ignores_only``: a global gitignore hides none of the person's."""
    config = ["-c", "core.excludesFile=/dev/null"] if own_ignores_only else []
    status = git(*config, "status", "--porcelain", "--untracked-files=all", cwd=repo, user_config=user_config)
    return [line[3:] for line in status.stdout.split("\n") if line.strip()]  # "\n" alone ends git's lines


def worktrees(repo: Path) -> list[Path]:
    listing = git("worktree", "list", "--porcelain", cwd=repo, check=False).stdout
    paths = [Path(line[len("worktree ") :]) for line in listing.split("\n") if line.startswith("worktree ")]
    if gone := next((path for path in paths if not path.exists()), None):  # its commits, its checkout: unseen
        prune = shlex.join(["git", "-C", str(repo), "worktree", "prune"])
        raise SeriesError(f"{repo} has a worktree git cannot find at {gone}: if you moved it, `git worktree repair` in "
                          f"it; if you deleted it, `{prune}`; then re-run")  # fmt: skip
    return [path.resolve() for path in paths] or [repo.resolve()]


def commit_of(repo: Path, revision: str) -> str:  # the commit ``revision`` names in ``repo``, or ""
    return git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}", cwd=repo, check=False).stdout.strip()


def has_path(repo: Path, path: str, ref: str = "HEAD") -> bool:
    return git("cat-file", "-e", f"{ref}:{path}", cwd=repo, check=False).returncode == 0


def git_path(repo: Path, name: str) -> Path:  # the absolute path of .git/<name>, wherever the git directory is
    path = Path(out("rev-parse", "--git-path", name, cwd=repo))
    return path if path.is_absolute() else repo / path


def add_excludes(repo: Path, patterns: Sequence[str], drop: Sequence[str] = ()) -> None:
    """Add ``patterns`` to ``.git/info/exclude`` (once each), less ``drop``: ignored locally, never committed."""
    exclude = git_path(repo, "info/exclude")
    lines = exclude.read_text().splitlines() if exclude.is_file() else []
    if (wanted := [line for line in [*lines, *(p for p in patterns if p not in lines)] if line not in drop]) != lines:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text("".join(f"{line}\n" for line in wanted))
