"""Who may direct the daemon: sshd's StrictModes, for the configuration file and for every file a hook names.

The daemon runs as root: it signals whatever holds a TPU device and it runs hooks. A file that anyone else can
change - the file itself, or any directory above it, which lets them put another file in its place - must
not decide what it does. So the file and every directory above it, both as named and as symlinks resolve
it, must be owned by root (or the daemon's own uid) and not be group- or other-writable; a symlink on the
way must be owned by them too. One exception, the one sshd and most tools make: a sticky directory (/tmp,
mode 1777) owned by root is accepted above a name that exists and is itself trusted, because the sticky
bit lets others add names there but never rename or remove root's. A name that does not exist yet is judged
by the directory that would hold it, sticky or not: anyone who may write there could create it.

A hook is an argv list run without a shell. Each of its words that names a file is held to the rule
(the executable, an interpreter's script, an argument like `--config=/etc/x`; a relative word only when it
names a file that exists, so `-H "Content-Type: application/json"` is no path); a word given to a shell or
an interpreter as code (`sh -c '...'`, `python3 -c`, `env -S`) is refused outright: no file permission can
vouch for text. Here, not in surface/hooks.py, because the configuration applies it while loading.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
from collections.abc import Sequence

_SHELLS = "sh|bash|rbash|dash|ash|zsh|ksh|ksh93|mksh|pdksh|yash|fish|csh|tcsh"
# An interpreter's basename -> (the option letters that take code from the command line, the option letters
# that take a separate argument, so the scan skips it).
_INLINE_CODE: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(rf"^(?:{_SHELLS})$"), "c", "oO"),
    (re.compile(r"^python[0-9.]*$"), "c", "WX"),
    (re.compile(r"^perl[0-9.]*$"), "eE", "I"),
    (re.compile(r"^(?:ruby|node|nodejs)$"), "ep", "I"),
    (re.compile(r"^env$"), "S", "uC"),
)


def untrusted_because(
    path: str, st: os.stat_result | None = None, euid: int | None = None, *, sticky_ok: bool = False
) -> str | None:
    """Why `path` must not decide what a daemon running as `euid` does, with the fix; None when only root
    or `euid` itself can change it. `st` is os.stat(path) unless given (OSError if it cannot be read).
    `sticky_ok`: a sticky directory is accepted though others may write it (the caller checks the name
    beneath it)."""
    st = os.stat(path) if st is None else st
    euid = os.geteuid() if euid is None else euid
    wrong, fixes = [], []
    if st.st_uid not in (0, euid):
        wrong.append(f"owned by uid {st.st_uid}")
        fixes.append(f"chown {'root' if euid == 0 else euid} {shlex.quote(path)}")
    writers = [who for who, bit in (("group", stat.S_IWGRP), ("other", stat.S_IWOTH)) if st.st_mode & bit]
    if writers and not (sticky_ok and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        wrong.append("- and ".join(writers) + "-writable")
        fixes.append(f"chmod go-w {shlex.quote(path)}")
    if not wrong:
        return None
    return f"{path} is {' and '.join(wrong)} (fix: {' && '.join(fixes)})"


def _prefixes(path: str) -> list[str]:
    """/a/b/c -> ["/", "/a", "/a/b", "/a/b/c"]."""
    parts = [part for part in path.split("/") if part]
    return ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def path_refusal(path: str, *, may_be_missing: bool = False) -> str | None:
    """Why `path` must not direct the daemon (the first name from / down, as named and as resolved, that
    someone else could change), or None. A missing `path` is refused unless `may_be_missing`: then the
    directory that would hold it is judged instead. /dev/null, though anyone may write it, reads empty."""
    if os.path.realpath(path) == os.devnull:
        return None
    euid = os.geteuid()
    for chain in dict.fromkeys([os.path.abspath(path), os.path.realpath(path)]):
        names = _prefixes(chain)
        for depth, name in enumerate(names):
            try:
                st = os.lstat(name)
            except FileNotFoundError:
                if not may_be_missing:
                    return f"{path} does not exist (install it, or correct the path)"
                return untrusted_because(names[depth - 1], euid=euid)  # "/" always exists: depth >= 1
            except OSError as error:
                return f"{name} cannot be checked ({error.strerror})"
            if stat.S_ISLNK(st.st_mode):  # its own mode is always 0777; what it points to is checked below
                if st.st_uid not in (0, euid):
                    fix = f"chown -h root {shlex.quote(name)}"
                    return f"{name} is a symlink owned by uid {st.st_uid} (fix: {fix})"
                continue
            because = untrusted_because(name, st, euid, sticky_ok=depth < len(names) - 1)
            if because:
                return because
    return None


def _inline_code(argv: Sequence[str]) -> str | None:
    """The words of `argv` that hand code to a shell or an interpreter (`sh -c`), or None."""
    for position, word in enumerate(argv):
        name = os.path.basename(word)
        for pattern, code, takes_argument in _INLINE_CODE:
            if not pattern.match(name):
                continue
            rest = iter(argv[position + 1 :])
            for option in rest:
                if option == "--" or not option.startswith(("-", "+")) or option in ("-", "+"):
                    break
                if option.startswith("--"):
                    if option.startswith("--split-string") and name == "env":
                        return f"{word} {option}"
                    continue
                letters = option[1:]
                for index, letter in enumerate(letters):
                    if letter in code:
                        return f"{word} {option}"
                    if letter in takes_argument:  # the rest of the word is its argument, or the next word
                        if index == len(letters) - 1:
                            next(rest, None)
                        break
    return None


def _executable(word: str) -> str | None:
    """The file `word` runs: itself if it holds a slash, else found on the daemon's PATH (the hook's)."""
    return word if "/" in word else shutil.which(word, path=os.environ.get("PATH", os.defpath))


def hook_refusal(argv: Sequence[str]) -> str | None:
    """Why the hook `argv` must not run as root, with the fix, or None: shell strings, and every word that
    names a file by `path_refusal`: an absolute path (the directory that would hold it, if it does not
    exist), a relative one that exists (from the working directory, the hook's), the value of `--opt=PATH`."""
    code = _inline_code(argv)
    if code:
        return (
            f"`{code}` runs text as code, which no file permission can vouch for (fix: put the commands in a "
            "root-owned script that only root can write, and name the script)"
        )
    executable = _executable(argv[0])
    if executable is None:
        return f"{argv[0]} is not found on PATH (install it, or give its absolute path)"
    because = path_refusal(executable)
    if because:
        return because
    for word in argv[1:]:
        named = word.partition("=")[2] if word.startswith("-") else word
        if named.startswith("/") or (named and "://" not in named and os.path.lexists(named)):
            because = path_refusal(named, may_be_missing=True)
            if because:
                return because
    return None
