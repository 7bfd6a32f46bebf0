"""Options of everyday tools that run a program, write a file, or hide a command's name.

``git log`` or ``rg`` look harmless, but ``git -c core.pager='sh -c …' log``,
``rg --pre=./x.sh``, ``tar --to-command=…``, ``find -fprint FILE`` or ``sed 's/x/y/e'`` run
a program or write a file that the policy would judge if it were written out plainly. The
reader (``tether.tools._shell``) asks this module, for each simple command:

- ``exec_values(cmd)``: the command lines such options run, each judged like a line of its
  own (``git -c core.pager='rm -rf ~' log`` is judged as ``rm -rf ~``). Unless the value is
  one plain helper (``tar -I zstd``, ``rsync -e ssh``), the command is also reported as
  decided at run time: it runs only in the sandbox or with approval.
- ``write_targets(cmd)``: files the options write, judged as ``> FILE`` redirections
  (``git log --output=~/.bashrc`` is a configuration write outside the working directory).
- ``skeleton(name)``: a command name with look-alike letters folded to ASCII
  (``rｍ``, Cyrillic ``rм`` and ``rⅿ`` all read ``rm``), so the policy judges the command it
  imitates and asks about the disguise.
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tether.tools._shell import SimpleCommand

__all__ = ["PLAIN_HELPERS", "exec_values", "skeleton", "write_targets"]

PLAIN_HELPERS = frozenset(
    {
        "gzip", "gunzip", "zstd", "unzstd", "xz", "unxz", "bzip2", "bunzip2", "pigz", "pbzip2", "lz4",
        "lzip", "lzma", "brotli", "ssh", "less", "more", "cat", "most", "bat", "delta", "diff-so-fancy",
        "vim", "vi", "nvim", "nano", "emacs", "code", "true",
    }
)  # fmt: skip
"""Helpers a tool is commonly told to run (a compressor, a pager, ssh, an editor): a value
that is only one of these (with plain options) is judged, not treated as unknown code."""

_GIT_RUNS = re.compile(
    r"^(?:alias\.[^=]+|core\.(?:sshcommand|pager|editor|fsmonitor|askpass|hookspath)|diff\.external"
    r"|diff\.[^.=]+\.textconv|filter\.[^.=]+\.(?:clean|smudge|process)|credential\.helper"
    r"|sequence\.editor|pager\.[^=]+|gpg\.program|merge\.[^.=]+\.driver|uploadpack\.packobjectshook)=",
    re.I,
)
_GIT_VALUED_EXEC = ("--upload-pack", "--receive-pack", "--exec", "--open-files-in-pager", "--extcmd")
_TAR_EXEC = (
    "--to-command",
    "--use-compress-program",
    "--rsh-command",
    "--info-script",
    "--new-volume-script",
)
_SED_EXEC = re.compile(
    r"(?:^|[;\n{}]|\d|\$|/)\s*e\s+(.+?)\s*(?:$|;|\n)|s(.)(?:(?!\2).)*\2(?:(?!\2).)*\2[gpiImM0-9w]*e"
)
_CONFUSABLES = str.maketrans(
    {
        "а": "a", "в": "b", "с": "c", "ԁ": "d", "е": "e", "һ": "h", "н": "h", "і": "i", "ј": "j", "к": "k",
        "м": "m", "о": "o", "р": "p", "ԛ": "q", "ѕ": "s", "т": "t", "у": "y", "х": "x", "ԝ": "w", "ɡ": "g",
        "α": "a", "β": "b", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u",
        "χ": "x", "ɑ": "a", "ı": "i", "ℓ": "l",
    }
)  # fmt: skip


def skeleton(name: str) -> str:
    """``name`` with compatibility forms (fullwidth, roman numerals) and Cyrillic or Greek
    look-alikes folded to ASCII letters; zero-width characters dropped."""
    folded = unicodedata.normalize("NFKC", name).lower().translate(_CONFUSABLES)
    return "".join(c for c in folded if unicodedata.category(c) not in ("Cf", "Mn"))


def _valued(args: list[str], names: tuple[str, ...], short: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """``(option, value)`` for ``--name=value``, ``--name value`` and ``-X value`` / ``-Xvalue``."""
    out: list[tuple[str, str]] = []
    for i, arg in enumerate(args):
        for name in names:
            if arg.startswith(name + "="):
                out.append((name, arg[len(name) + 1 :]))
            elif arg == name and i + 1 < len(args):
                out.append((name, args[i + 1]))
        for flag in short:
            if arg == flag and i + 1 < len(args):
                out.append((flag, args[i + 1]))
            elif arg.startswith(flag) and len(arg) > len(flag) and not arg.startswith("--"):
                out.append((flag, arg[len(flag) :]))
    return out


def exec_values(cmd: SimpleCommand) -> list[tuple[str, str]]:
    """``(option, command line)`` for every option of ``cmd`` that makes it run a program."""
    prog, args = cmd.program, cmd.args
    found: list[tuple[str, str]] = []
    if prog == "git":
        for i, arg in enumerate(args):
            setting = (
                args[i + 1] if arg == "-c" and i + 1 < len(args) else arg[2:] if arg.startswith("-c") else ""
            )
            if setting and _GIT_RUNS.match(setting):
                value = setting.split("=", 1)[1]
                found.append((f"-c {setting.split('=', 1)[0]}", value.removeprefix("!")))
            if arg.startswith("--config-env"):
                found.append(("--config-env", "$__tether_env_value"))  # the value is read at run time
        found += _valued(args, _GIT_VALUED_EXEC, ("-O",) if "grep" in args else ())
    elif prog in ("rg", "ripgrep"):
        found += _valued(args, ("--pre",))
    elif prog in ("tar", "gtar", "bsdtar"):
        found += _valued(args, _TAR_EXEC, ("-I", "-F"))
        for arg in args:
            action = arg.partition("=")[2] if arg.startswith("--checkpoint-action=") else ""
            if action.startswith("exec="):
                found.append(("--checkpoint-action", action[5:]))
    elif prog == "zip":
        found += _valued(args, ("--unzip-command",), ("-TT",))
    elif prog in ("rsync",):
        found += _valued(args, ("--rsh", "--rsync-path"), ("-e",))
    elif prog in ("ssh", "scp", "sftp", "autossh", "sshfs"):
        for _opt, value in _valued(args, (), ("-o",)):
            key, sep, rest = value.replace(" ", "=", 1).partition("=")
            if sep and key.lower() in ("proxycommand", "localcommand", "knownhostscommand", "remotecommand"):
                found.append((f"-o {key}", rest))
        if prog == "sftp":
            found += _valued(args, (), ("-S",))
    elif prog == "man":
        found += _valued(args, ("--pager", "--html"), ("-P", "-H"))
    elif prog in ("sed", "gsed"):
        scripts = [v for _o, v in _valued(args, ("--expression",), ("-e",))]
        if not scripts:
            scripts = [next((a for a in args if not a.startswith("-")), "")]
        for script in scripts:
            m = _SED_EXEC.search(script)
            if m:
                found.append(("e", m.group(1) or "$__tether_pattern_space"))
    elif prog in ("vim", "vi", "nvim", "ex", "view", "vimdiff", "less", "more"):
        for i, arg in enumerate(args):
            text = (
                args[i + 1]
                if arg in ("-c", "--cmd") and i + 1 < len(args)
                else arg[1:]
                if arg.startswith("+")
                else ""
            )
            if "!" in text:
                found.append((arg if arg in ("-c", "--cmd") else "+", text.split("!", 1)[1]))
    return found


def write_targets(cmd: SimpleCommand) -> list[str]:
    """Files that options of ``cmd`` write (besides redirections)."""
    prog, args = cmd.program, cmd.args
    if prog == "git":
        return [v for _o, v in _valued(args, ("--output",))]
    if prog == "find":
        return [
            args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-fprint", "-fprint0", "-fprintf", "-fls")
        ]
    if prog in ("sort",):
        return [v for _o, v in _valued(args, ("--output",), ("-o",))]
    return []
