"""The single place that runs git: it raises with git's own stderr instead of a traceback."""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchseries.errors import SeriesError

# Identity and dates used for every commit the tool makes, so that the same inputs give the same commit ids on any
# machine. The person's global and system git configuration is never read (NEUTRAL_CONFIG), and STABLE_CONFIG sets
# what a repository's own configuration could change.
TOOL_IDENTITY = {
    "GIT_AUTHOR_NAME": "patchseries",
    "GIT_AUTHOR_EMAIL": "patchseries@invalid",
    "GIT_COMMITTER_NAME": "patchseries",
    "GIT_COMMITTER_EMAIL": "patchseries@invalid",
}
# How text that is not UTF-8 is read and written: each byte that is not UTF-8 is kept as it is, so that a patch or a
# commit message in Latin-1 goes through export, apply and check unchanged instead of ending in a UnicodeDecodeError
ENCODING_ERRORS = "surrogateescape"
STABLE_CONFIG = (
    "core.autocrlf=false",
    "core.fileMode=true",
    "core.quotePath=true",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.relative=false",
    "diff.renames=false",
    "commit.gpgSign=false",
    "am.threeWay=false",
    "am.keepcr=false",
    "init.defaultBranch=main",
    "mailinfo.scissors=false",
    "am.messageId=false",
)
# what a person's ~/.gitconfig or /etc/gitconfig would otherwise change in the tool's output (`format.signOff`,
# `diff.context`: the same patch bytes on every machine); `safe.directory` alone is kept (see _safe_directories)
NEUTRAL_CONFIG = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


# The caller's git variables the tool keeps: how to reach a remote (a clone over the network), and, for the person's
# own configuration where a command reads it (``user_config``), where that is. Every other GIT_* variable would choose
# another repository, work tree or index (GIT_DIR, GIT_INDEX_FILE), or change what git writes: GIT_TEMPLATE_DIR (hooks
# and configuration in every repository the tool makes), GIT_DEFAULT_HASH, GIT_DIFF_OPTS (the patches' context lines)
# the tool names the repository by `cwd` only
_KEPT_VARIABLES = (
    "GIT_SSH", "GIT_PROXY_COMMAND", "GIT_ASKPASS", "GIT_SSL_", "GIT_HTTP_", "GIT_CURL_", "GIT_EXEC_PATH",
    "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM",
)  # fmt: skip


def git(
    *args: str | Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    stdin: str | None = None,
    user_config: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``git`` with stable configuration; raise :class:`SeriesError` with git's stderr when ``check`` fails.

    ``user_config``: read the person's global configuration too (a clone over the network needs their proxy or
    ``url.insteadOf``); nothing else the tool runs does.
    """
    command: list[str] = ["git"]
    for item in (*STABLE_CONFIG, *_safe_directories()):
        command += ["-c", item]
    command += [str(a) for a in args]
    # GIT_OPTIONAL_LOCKS=0: reading (``git status``) never rewrites the index, so a user's checkout stays byte for byte
    inherited = {
        key: value for key, value in os.environ.items() if not key.startswith("GIT_") or key.startswith(_KEPT_VARIABLES)
    }
    neutral = {} if user_config else NEUTRAL_CONFIG
    # GIT_TEMPLATE_DIR="": a repository the tool makes or clones gets no hooks or configuration from any template
    full_env = {
        **inherited, **neutral, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C",
        "GIT_TEMPLATE_DIR": "", **(env or {}),
    }  # fmt: skip
    if cwd is not None:
        # git runs on the repository at `cwd` or on none: one whose `.git` is broken or moved must not make git find
        # the repository around it (the project's own checkout) and rewrite that instead
        full_env["GIT_CEILING_DIRECTORIES"] = str(Path(cwd).resolve().parent)
    # surrogateescape: a commit message or a file that is not UTF-8 (Latin-1) is read, and written back, byte for byte
    proc = subprocess.run(
        command, cwd=cwd, env=full_env, input=stdin, capture_output=True, text=True, errors=ENCODING_ERRORS, check=False
    )
    if check and proc.returncode != 0:
        raise SeriesError(f"git {_short(args)} failed: {failure_cause(proc)}")
    return proc


@functools.cache
def _safe_directories() -> tuple[str, ...]:
    """The person's ``safe.directory`` entries, as ``-c`` values: the one setting of theirs the tool keeps, without
    which git refuses a checkout another user owns (a CI container's)."""
    proc = subprocess.run(
        ["git", "config", "--global", "--get-all", "safe.directory"], capture_output=True, text=True, check=False
    )
    system = subprocess.run(
        ["git", "config", "--system", "--get-all", "safe.directory"], capture_output=True, text=True, check=False
    )
    return tuple(f"safe.directory={line}" for line in (proc.stdout + system.stdout).splitlines() if line)


def failure_cause(proc: subprocess.CompletedProcess[str]) -> str:
    """The line of a failed git command's output that says why: its last ``fatal:`` or ``error:`` line.

    git's last line is often not the cause: a usage reminder (``'git <command> [<revision>...] -- [<file>...]'``
    after an unknown revision) or a hint.
    """
    detail = [line.strip() for line in (proc.stderr.strip() or proc.stdout.strip()).splitlines() if line.strip()]
    causes = [line for line in detail if line.startswith(("fatal:", "error:"))]
    others = [line for line in detail if not line.startswith("hint:")]
    return (causes or others or [f"exit status {proc.returncode}"])[-1]


def out(*args: str | Path, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    """Run git and return its stripped stdout."""
    return git(*args, cwd=cwd, env=env).stdout.strip()


def is_clean(repo: Path) -> bool:
    """Whether ``repo`` has no staged, unstaged or untracked (non-ignored) changes."""
    return not uncommitted_files(repo)


def uncommitted_files(repo: Path, own_ignores_only: bool = False, user_config: bool = False) -> list[str]:
    """Staged, unstaged and untracked (not ignored) paths; reading them never rewrites the index.

    ``own_ignores_only``: only the repository's own ignore rules count, not the person's global gitignore
    (``core.excludesFile``, ``~/.config/git/ignore``), which would hide their ``notes.local`` in a tree of the tool's.
    ``user_config``: the person's global configuration counts (their ``core.excludesFile``, in a tree of theirs).
    """
    config = ["-c", "core.excludesFile=/dev/null"] if own_ignores_only else []
    status = git(*config, "status", "--porcelain", "--untracked-files=all", cwd=repo, user_config=user_config)
    lines = status.stdout.splitlines()
    return [line[3:] for line in lines if line.strip()]


def worktrees(repo: Path) -> list[Path]:
    """Every worktree of ``repo``'s repository that exists, the main one first: a state of the repository (an edit,
    a rebase stopped) may be in any of them."""
    listing = git("worktree", "list", "--porcelain", cwd=repo, check=False).stdout
    paths = [Path(line[len("worktree ") :]) for line in listing.splitlines() if line.startswith("worktree ")]
    return [path.resolve() for path in paths if path.exists()] or [repo.resolve()]


def hidden_files(repo: Path) -> list[str]:
    """Tracked files whose edits ``git status`` is told not to show: marked ``git update-index --assume-unchanged``
    (``git ls-files -v`` tags them in lower case) or ``--skip-worktree`` (``S``, a sparse checkout too)."""
    entries = git("ls-files", "-v", "-z", cwd=repo).stdout.split("\0")
    return [entry[2:] for entry in entries if entry and (entry[0].islower() or entry[0] == "S")]


def has_path(repo: Path, path: str, ref: str = "HEAD") -> bool:
    """Whether ``ref`` of ``repo`` has a file or directory at ``path``."""
    return git("cat-file", "-e", f"{ref}:{path}", cwd=repo, check=False).returncode == 0


def _short(args: Sequence[str | Path]) -> str:
    """The git command of ``args`` and its first two arguments, without the ``-c NAME=VALUE`` settings before it (a
    failure named ``git -c format.useAutoBase=false -c`` does not say which command failed)."""
    words = [str(a) for a in args]
    while words[:1] == ["-c"]:
        words = words[2:]
    return " ".join(words[:3])


def patch_ids(repo: Path, *revisions: str, paths: Sequence[str] = (), check: bool = True) -> list[tuple[str, str]]:
    """``(patch id, commit)`` of each non-merge commit ``git log`` lists for ``revisions``, its diff limited to
    ``paths`` if given (``git patch-id --stable``); with ``check`` false, none where git cannot list them."""
    log = git("log", "-p", "--no-merges", *revisions, "--", *paths, cwd=repo, check=check)
    if log.returncode != 0:
        return []
    ids = git("patch-id", "--stable", stdin=log.stdout).stdout
    return [(line.split()[0], line.split()[1]) for line in ids.splitlines() if len(line.split()) == 2]


def patch_id_of_file(path: Path) -> str:
    """The ``git patch-id --stable`` of a patch file ("" for a file without a diff)."""
    ids = git("patch-id", "--stable", stdin=path.read_bytes().decode(errors=ENCODING_ERRORS)).stdout.split()
    return ids[0] if ids else ""


def git_path(repo: Path, name: str) -> Path:
    """The absolute path of ``name`` inside the repository's git directory (``.git/<name>``)."""
    path = Path(out("rev-parse", "--git-path", name, cwd=repo))
    return path if path.is_absolute() else repo / path


def add_excludes(repo: Path, patterns: Sequence[str]) -> None:
    """Append patterns to ``.git/info/exclude`` (once each): ignored locally, never committed."""
    exclude = git_path(repo, "info/exclude")
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    missing = [p for p in patterns if p not in lines]
    if missing:
        exclude.write_text("\n".join([*lines, *missing]) + "\n")


def remove_excludes(repo: Path, patterns: Sequence[str]) -> None:
    """Drop patterns from ``.git/info/exclude`` (those :func:`add_excludes` added for files that are gone)."""
    exclude = git_path(repo, "info/exclude")
    if not patterns or not exclude.is_file():
        return
    lines = exclude.read_text().splitlines()
    kept = [line for line in lines if line not in patterns]
    if kept != lines:
        exclude.write_text("\n".join(kept) + ("\n" if kept else ""))
