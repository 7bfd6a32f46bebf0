"""``CommandPolicy``: decide, before anything runs, whether a command may run.

``check(command)`` returns a ``PolicyVerdict``: ``allow``, ``sandbox`` (what it does is
decided at run time, so it runs only inside the sandbox, or with approval), ``confirm``
(risky: ask a human) or ``deny`` (destructive: never), naming the rule that decided, plus
``needs``: what the command requires beyond the default sandbox (``network``, ``host``).
The line is read by ``tether.tools._shell`` (every simple command, through ``&&``, ``;``,
pipes, ``$( )``, ``sh -c``, ``sudo``, ``ssh host CMD``...), then each command goes through
the rules below. The most severe verdict wins. Judging is linear in the line's length;
lines longer than ``max_line_chars`` are not read at all and need confirmation.

Sandbox (rule ``dynamic``): a command name computed by a substitution or an unknown
variable, ``eval`` of computed text, data piped into a shell or an interpreter, inline
code (``python -c``, ``perl -e``, ``node -e``), ``awk`` calling ``system()``, aliases,
``xargs``/``find -exec`` feeding a shell, a script written by the same line then run.

Network, secrets, configuration and the host (``tether.tools._risks``): ``curl``, ``nc``,
``ssh``... to a host outside ``allow_hosts`` need confirmation; reading ``~/.ssh``,
``~/.aws`` and other credentials needs confirmation; writing shell rc files, ``pip.conf``,
``~/.npmrc`` or setting ``git config core.hooksPath`` needs confirmation; services,
system packages, the container engine, ``sudo`` and writes outside the working directory
need the host (``needs={"host"}``), which the sandboxed mode escalates.

Deny: deleting ``/``, ``~`` or a system directory; ``--no-preserve-root``; ``mkfs``, ``dd``,
``wipefs`` or redirections onto a block device; fork bombs; shutdown, reboot, halt,
poweroff, ``init 0/6``; killing PID 1; recursive ``chmod``/``chown`` on system
directories; moving a system directory; writing ``/proc/sysrq-trigger``; stopping sshd.

Confirm: recursive deletes outside the working directory (and ``/tmp``); commands piping
a download into a shell; ``systemctl stop/disable/mask``; ``docker system/volume prune``,
``docker volume rm``, ``compose down -v``; ``kill -1``; package removal; user, firewall and
crontab removal; ``git push --force``; partitioning; writing ``/etc/passwd`` and friends;
lines that cannot be parsed; and, with ``confirm_sudo``, anything under ``sudo``.

Configuration: extra ``deny``/``confirm`` regexes (searched in each simple command's
normalised text, ``program arg ...``, and in the raw line), ``allow`` regexes that exempt a
matching simple command from the built-in rules (not from your own deny list), and
``disabled`` rule names.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from tether.errors import ConfigError
from tether.tools._risks import LOOPBACK_HOSTS, RISK_RULES, Where
from tether.tools._shell import INTERPRETERS, Line, SimpleCommand, parse_line

__all__ = [
    "BUILTIN_RULES",
    "LOOPBACK_HOSTS",
    "MAX_LINE_CHARS",
    "Action",
    "CommandPolicy",
    "PolicyVerdict",
    "Rule",
]

Action = Literal["allow", "sandbox", "confirm", "deny"]
_SEVERITY: dict[str, int] = {"allow": 0, "sandbox": 1, "confirm": 2, "deny": 3}
MAX_LINE_CHARS = 65_536
"""Longer lines are not read (the cost must stay bounded): they need confirmation."""

SYSTEM_DIRS = frozenset(
    {
        "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
        "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys",
        "/tmp", "/usr", "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib64", "/usr/local",
        "/usr/local/bin", "/usr/sbin", "/usr/share", "/var", "/var/lib", "/var/log", "/var/tmp",
    }
)  # fmt: skip
"""Directories whose recursive deletion or permission change is refused outright."""

CRITICAL_FILES = frozenset(
    {"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/sudoers", "/etc/fstab"}
)
_CRITICAL_PREFIXES = ("/etc/", "/bin/", "/sbin/", "/lib", "/boot/", "/usr/bin/", "/usr/sbin/", "/usr/lib")
_BLOCK_DEVICE = re.compile(
    r"^/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|md\d|dm-\d|loop\d|sr\d|disk/|mapper/)"
)
_DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c"})
_INTERPRETERS = INTERPRETERS
_HOME = re.compile(r"^(?:~|\$HOME|\$\{HOME\})(?=/|$)")
_GLOB = re.compile(r"[*?\[]")
_FORK_BOMBS = (  # each starts at a word boundary and stops at "}": linear in the line
    re.compile(r"(?<![\w:.\-])(?P<n>[\w:.\-]+)\s*\(\s*\)\s*\{[^}]*?(?P=n)\s*\|\s*(?P=n)\s*&"),
    re.compile(r"\bfunction\s+(?P<n>[\w:.\-]+)\s*(?:\(\s*\))?\s*\{[^}]*?(?P=n)\s*\|\s*(?P=n)\s*&"),
    re.compile(r"\bfork\s+while\s+fork\b"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyVerdict:
    """The decision about one command line."""

    action: Action
    """``allow``, ``confirm`` (ask first) or ``deny``."""
    reason: str
    """Why, in words an operator (and the model) can act on."""
    rule: str | None = None
    """The rule that decided (``None`` when nothing objected)."""
    segment: str = ""
    """The simple command that triggered the rule, normalised (``rm -rf /``)."""
    needs: frozenset[str] = frozenset()
    """What the line needs beyond the default sandbox: ``network``, ``host``."""

    @property
    def allowed(self) -> bool:
        return self.action == "allow"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """A custom rule: a regex searched in each simple command's text and in the raw line."""

    name: str
    pattern: str
    action: Action
    reason: str = ""

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ConfigError(f"policy rule {self.name!r}: invalid regex {self.pattern!r}: {exc}") from exc


_Finding = tuple[Action, str, str]  # action, rule, reason
_NO_NEEDS: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class _Ctx:
    cwd: str | None
    zones: tuple[str, ...]
    """Directories where deleting is routine: the working directory and the safe paths."""
    allow_hosts: tuple[str, ...] = ()
    registries: bool = True


class CommandPolicy:
    """Classifies command lines as allow / confirm / deny (see the module docstring).

    Args:
        deny, confirm: extra regexes (or ``Rule``s) that refuse / ask.
        allow: regexes that exempt a matching simple command from the built-in rules.
        disabled: names of built-in rules to switch off (``BUILTIN_RULES`` lists them).
        workdir: the deployment directory; deleting inside it needs no confirmation.
        safe_paths: more directories where deleting is routine.
        confirm_sudo: ask before any command run through ``sudo``/``doas``.
        allow_hosts: hosts (``fnmatch`` patterns) that network commands may reach without
            asking; loopback by default.
        allow_package_registries: package managers (pip, npm, cargo...) may reach their
            registries without asking (they still need the network).
        max_line_chars: longer lines are not read and need confirmation.
        mode: the safety mode a ``GuardedSession`` applies with this policy (``sandboxed``,
            ``ask`` or ``trusted``; default: ``sandboxed`` when the session has a sandbox,
            else ``ask``). See ``tether.tools.guard``.
    """

    def __init__(
        self,
        *,
        deny: Iterable[str | Rule] = (),
        confirm: Iterable[str | Rule] = (),
        allow: Iterable[str | Rule] = (),
        disabled: Iterable[str] = (),
        workdir: str | None = None,
        safe_paths: Iterable[str] = ("/tmp", "/var/tmp"),
        confirm_sudo: bool = False,
        allow_hosts: Iterable[str] = LOOPBACK_HOSTS,
        allow_package_registries: bool = True,
        max_line_chars: int = MAX_LINE_CHARS,
        mode: Literal["sandboxed", "ask", "trusted"] | None = None,
    ) -> None:
        self._deny = [_rule(r, "deny", "custom-deny") for r in deny]
        self._confirm = [_rule(r, "confirm", "custom-confirm") for r in confirm]
        self._allow = [_rule(r, "allow", "custom-allow") for r in allow]
        self.disabled = frozenset(disabled)
        unknown = self.disabled - set(BUILTIN_RULES) - set(LINE_RULES)
        if unknown:
            raise ConfigError(f"unknown policy rules {sorted(unknown)}; known: {sorted(BUILTIN_RULES)}")
        self.workdir = _normalise_dir(workdir) if workdir else None
        self.safe_paths = tuple(_normalise_dir(p) for p in safe_paths)
        self.confirm_sudo = confirm_sudo
        self.allow_hosts = tuple(allow_hosts)
        self.allow_package_registries = allow_package_registries
        self.max_line_chars = max_line_chars
        if mode not in (None, "sandboxed", "ask", "trusted"):
            raise ConfigError(f"unknown safety mode {mode!r}; use sandboxed, ask or trusted")
        self.mode = mode
        self._builtin = [(n, f) for n, f in BUILTIN_RULES.items() if n not in self.disabled]
        self._risks = [(n, f) for n, f in RISK_RULES.items() if n not in self.disabled]

    def check(self, command: str, *, cwd: str | None = None, workdir: str | None = None) -> PolicyVerdict:
        """Judge ``command``; ``cwd`` resolves relative paths, ``workdir`` overrides the policy's."""
        home = _normalise_dir(workdir) if workdir else self.workdir
        zones = tuple(z for z in (home, *self.safe_paths) if z)
        ctx = _Ctx(
            _normalise_dir(cwd) if cwd else None, zones, self.allow_hosts, self.allow_package_registries
        )
        if len(command) > self.max_line_chars:
            return PolicyVerdict(
                action="confirm",
                rule="too-long",
                reason=f"{len(command)} characters is too long to judge (limit {self.max_line_chars}): "
                "write the content to a file with a short command, or split the line",
                segment=command[:80],
            )
        findings: list[tuple[_Finding, str]] = []
        needs: set[str] = set()
        host: list[tuple[str, str]] = []
        flat = " ".join(command.split())
        for rule in self._deny + self._confirm:
            if re.search(rule.pattern, command) or re.search(rule.pattern, flat):
                findings.append(((rule.action, rule.name, rule.reason or f"matches {rule.pattern!r}"), flat))
        if "fork-bomb" not in self.disabled and any(p.search(flat) for p in _FORK_BOMBS):
            findings.append((("deny", "fork-bomb", "a fork bomb exhausts the host's processes"), flat))
        line = parse_line(command)
        if line.errors and "unparsable" not in self.disabled:
            reason = f"cannot be read reliably ({line.errors[0]})"
            findings.append((("confirm", "unparsable", reason), flat))
        if "pipe-to-shell" not in self.disabled:
            findings += _pipe_to_shell(line)
        if "dynamic" not in self.disabled:
            findings += [(("sandbox", "dynamic", reason), segment) for segment, reason in line.dynamic]
        if "tether-setting" not in self.disabled:
            for var, segment in line.assigned:
                if var.startswith("TETHER_"):
                    reason = (
                        f"sets {var}: tether's settings (store, tokens, keys) are not an agent's to choose"
                    )
                    findings.append((("confirm", "tether-setting", reason), segment))
        for cmd in line.commands:
            if cmd.disguised and "lookalike" not in self.disabled:
                reason = (
                    f"the command name {cmd.disguised!r} imitates {cmd.program!r} with look-alike "
                    "Unicode letters"
                )
                findings.append((("confirm", "lookalike", reason), cmd.text))
            findings += self._judge(cmd, ctx, needs, host)
            if cmd.program == "cd":  # `cd / && rm -rf *` deletes in /
                ctx = _Ctx(_cd(ctx.cwd, cmd.args), ctx.zones, ctx.allow_hosts, ctx.registries)
        verdict = _worst(findings, frozenset(needs))
        if verdict.action == "allow" and host:
            reason, segment = host[0]
            return PolicyVerdict(
                action="allow", reason=reason, rule="host-change", segment=segment, needs=verdict.needs
            )
        return verdict

    def _judge(
        self, cmd: SimpleCommand, ctx: _Ctx, needs: set[str], host: list[tuple[str, str]]
    ) -> list[tuple[_Finding, str]]:
        text = cmd.text
        out: list[tuple[_Finding, str]] = []
        for rule in self._deny:
            if re.search(rule.pattern, text):
                out.append(((rule.action, rule.name, rule.reason or f"matches {rule.pattern!r}"), text))
        if any(re.search(rule.pattern, text) for rule in self._allow):
            return out
        for name, check in self._builtin:
            found = check(cmd, ctx)
            if found is not None:
                out.append(((found[0], name, found[1]), text))
        where = Where(ctx.cwd, ctx.zones, ctx.allow_hosts, ctx.registries, lambda w: _resolve(w, ctx))
        for name, risk in self._risks:
            hit = risk(cmd, where)
            if hit is not None:
                needs.update(hit[2])
                if hit[0] != "allow":
                    out.append(((hit[0], name, hit[1]), text))  # type: ignore[arg-type]
                elif "host" in hit[2] and not host:
                    host.append((hit[1], text))
        if self.confirm_sudo and "sudo" not in self.disabled and {"sudo", "doas"} & set(cmd.wrappers):
            out.append((("confirm", "sudo", "runs as root"), text))
        for rule in self._confirm:
            if re.search(rule.pattern, text):
                out.append(((rule.action, rule.name, rule.reason or f"matches {rule.pattern!r}"), text))
        return out


def _rule(spec: str | Rule, action: Action, name: str) -> Rule:
    if isinstance(spec, Rule):
        return spec
    return Rule(name=name, pattern=spec, action=action)


def _worst(findings: list[tuple[_Finding, str]], needs: frozenset[str] = _NO_NEEDS) -> PolicyVerdict:
    if not findings:
        return PolicyVerdict(action="allow", reason="no rule objected", needs=needs)
    (action, rule, reason), segment = max(findings, key=lambda f: _SEVERITY[f[0][0]])
    return PolicyVerdict(action=action, reason=reason, rule=rule, segment=segment, needs=needs)


def _pipe_to_shell(line: Line) -> list[tuple[_Finding, str]]:
    found: list[tuple[_Finding, str]] = []
    reason = "runs a script downloaded from the network without showing it"
    for pipeline in line.pipelines:
        for i, cmd in enumerate(pipeline):
            if cmd.program in _DOWNLOADERS and any(_reads_stdin(c) for c in pipeline[i + 1 :]):
                found.append((("confirm", "pipe-to-shell", reason), " | ".join(c.text for c in pipeline)))
    for owner, sub in line.substituted:
        runs = owner.program in _INTERPRETERS or owner.program in ("eval", "source", ".")
        runs = runs or owner.program.startswith("$__tether_subst")  # $(curl ...) as the command
        if runs and any(c.program in _DOWNLOADERS for c in sub.commands):
            found.append((("confirm", "pipe-to-shell", reason), owner.text))
    return found


def _reads_stdin(cmd: SimpleCommand) -> bool:
    """An interpreter with no script operand (``sh``, ``bash -s``, ``python3 -``)."""
    if cmd.program not in _INTERPRETERS:
        return False
    operands = [a for a in cmd.args if not a.startswith("-") or a == "-"]
    return not operands or operands[0] == "-"


# -- paths ------------------------------------------------------------------------------


def _normalise_dir(path: str) -> str:
    return _clean(path) if path.startswith("/") else path


def _clean(path: str) -> str:
    path = re.sub(r"^/+", "/", path)
    return posixpath.normpath(path) if path != "/" else "/"


def _resolve(target: str, ctx: _Ctx) -> str | None:
    """An absolute, normalised path; ``~/..`` for home paths; ``None`` if it depends on a variable."""
    home = _HOME.match(target)
    if home:
        rest = target[home.end() :].lstrip("/")
        return "~" if rest in ("", ".", "*", ".*") else "~/" + rest
    if "$" in target:
        return None
    if target.startswith("/"):
        return _clean(target)
    if ctx.cwd and ctx.cwd.startswith("/"):
        return _clean(posixpath.join(ctx.cwd, target))
    if ctx.cwd and ctx.cwd.startswith("~"):
        return _resolve(posixpath.normpath(posixpath.join(ctx.cwd, target)), _Ctx(None, ctx.zones))
    return target


def _cd(cwd: str | None, args: list[str]) -> str | None:
    operands = [a for a in args if not a.startswith("-")]
    if not operands or _HOME.match(operands[0]):
        rest = operands[0] if operands else "~"
        return "~" + rest[_HOME.match(rest).end() :] if _HOME.match(rest) else "~"  # type: ignore[union-attr]
    target = operands[0]
    if "$" in target:
        return None
    if target.startswith("/"):
        return _clean(target)
    if cwd is None:
        return None
    return _clean(posixpath.join(cwd, target)) if cwd.startswith("/") else posixpath.join(cwd, target)


def _contents_of(path: str) -> str:
    """``/etc/*`` deletes what ``/etc`` holds: judge it as ``/etc``."""
    for suffix in ("/*", "/.*", "/."):
        if path.endswith(suffix):
            return path[: -len(suffix)] or "/"
    return path


def _critical_dir(path: str) -> bool:
    """``/``, a system directory, home, or a glob in the first component (``/e*``)."""
    if path == "~":
        return True
    if not path.startswith("/"):
        return False
    path = _contents_of(path)
    first = path.split("/")[1] if path != "/" else ""
    return path in SYSTEM_DIRS or bool(_GLOB.search(first))


def _inside(path: str, zones: tuple[str, ...]) -> bool:
    return any(path == z or path.startswith(z.rstrip("/") + "/") for z in zones)


# -- rules: each returns (action, reason) or None -----------------------------------------


def _flags(args: list[str]) -> tuple[set[str], list[str]]:
    """Short flags (split), long flags, and operands of a GNU-style command line."""
    flags: set[str] = set()
    operands: list[str] = []
    done = False
    for arg in args:
        if done or not arg.startswith("-") or arg == "-":
            operands.append(arg)
        elif arg == "--":
            done = True
        elif arg.startswith("--"):
            flags.add(arg.split("=", 1)[0])
        else:
            flags.update(f"-{c}" for c in arg[1:])
    return flags, operands


def _delete_targets(targets: list[str], ctx: _Ctx, what: str) -> tuple[Action, str] | None:
    verdict: tuple[Action, str] | None = None
    for target in targets:
        path = _resolve(target, ctx)
        if path is None:
            verdict = verdict or ("confirm", f"{what} of a path built from a variable ({target})")
        elif _critical_dir(path):
            return "deny", f"{what} of {target} would wipe the system or a home directory"
        elif path.startswith("/") and not _inside(path, ctx.zones):
            verdict = verdict or ("confirm", f"{what} of {path}, outside the working directory")
        elif path.startswith("~"):
            verdict = verdict or ("confirm", f"{what} of {target} in the home directory")
        elif not path.startswith("/") and (path.split("/")[0] == ".." or path in (".", "*", "./*", ".*")):
            verdict = verdict or ("confirm", f"{what} of {target} relative to an unknown directory")
    return verdict


def _rm(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    if cmd.program != "rm":
        return None
    flags, targets = _flags(cmd.args)
    if "--no-preserve-root" in flags:
        return "deny", "rm --no-preserve-root exists only to delete /"
    if not flags & {"-r", "-R", "--recursive"}:
        for target in targets:
            path = _resolve(target, ctx)
            if path and (path in CRITICAL_FILES or path.startswith(_CRITICAL_PREFIXES)):
                return "confirm", f"deletes the system file {path}"
        return None
    if {"xargs", "parallel"} & set(cmd.wrappers) or (
        cmd.from_input and "__tether_found__" not in " ".join(targets)
    ):
        return "confirm", "recursive delete of paths read at run time (xargs, find -execdir)"
    return _delete_targets(targets, ctx, "recursive delete")


def _find_delete(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    if cmd.program != "find":
        return None
    args = cmd.args
    deletes = "-delete" in args or any(
        a in ("-exec", "-execdir") and i + 1 < len(args) and posixpath.basename(args[i + 1]) == "rm"
        for i, a in enumerate(args)
    )
    if not deletes:
        return None
    roots = []
    for arg in args:
        if arg.startswith(("-", "(", "!")):
            break
        roots.append(arg)
    return _delete_targets(roots or ["."], ctx, "find -delete")


def _block_device(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    for op, target in cmd.redirects:
        if ">" in op and _BLOCK_DEVICE.match(target):
            return "deny", f"writes straight onto the disk {target}"
        if ">" in op and target == "/proc/sysrq-trigger":
            return "deny", "the sysrq trigger can reboot or crash the host"
    prog, args = cmd.program, cmd.args
    devices = [a for a in args if _BLOCK_DEVICE.match(a.split("=", 1)[-1])]
    if prog == "dd" and any(a.startswith("of=") and _BLOCK_DEVICE.match(a[3:]) for a in args):
        return "deny", "dd onto a block device destroys its data"
    if prog.startswith("mkfs") or prog in ("mke2fs", "mkswap", "wipefs", "blkdiscard", "shred"):
        if devices:
            return "deny", f"{prog} on {devices[0]} destroys the filesystem on it"
        if prog.startswith("mkfs") or prog in ("mke2fs", "wipefs", "blkdiscard"):
            return "confirm", f"{prog} formats or wipes storage"
    if prog in ("tee", "cp", "mv", "cat") and devices and (prog == "tee" or args[-1] in devices):
        return "deny", f"writes straight onto the disk {devices[-1]}"
    if prog in ("fdisk", "sfdisk", "cfdisk", "gdisk", "sgdisk", "parted") and not (
        {"-l", "--list", "print", "-p"} & set(args)
    ):
        return "confirm", f"{prog} changes disk partitions"
    return None


def _power(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    prog, args = cmd.program, cmd.args
    if prog in ("shutdown", "reboot", "halt", "poweroff"):
        return "deny", f"{prog} takes the host down"
    if prog in ("init", "telinit") and args and args[0] in ("0", "6"):
        return "deny", f"{prog} {args[0]} takes the host down"
    if prog == "systemctl" and {"poweroff", "reboot", "halt", "kexec", "rescue", "emergency"} & set(args):
        return "deny", "systemctl would take the host down"
    if prog == "kill":
        _, pids = _kill_args(args)
        if "1" in pids:
            return "deny", "killing PID 1 brings the host down"
        if "-1" in pids:
            return "confirm", "kill -1 signals every process the user can reach"
    return None


def _kill_args(args: list[str]) -> tuple[str | None, list[str]]:
    sig: str | None = None
    pids: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-s", "-n") and i + 1 < len(args):
            sig = args[i + 1]
            i += 2
            continue
        if arg == "--":
            pids += args[i + 1 :]
            break
        if sig is None and not pids and arg.startswith("-") and arg != "-1":
            sig = arg[1:]
        elif sig is None and not pids and arg == "-1" and i + 1 < len(args):
            sig = "1"  # kill -1 PID: signal 1 (HUP)
        else:
            pids.append(arg)
        i += 1
    return sig, pids


def _permissions(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    prog = cmd.program
    if prog not in ("chmod", "chown", "chgrp"):
        return None
    flags, operands = _flags(cmd.args)
    has_spec = not any(f.startswith("--reference") for f in flags)
    targets = operands[1:] if has_spec else operands
    recursive = bool(flags & {"-R", "--recursive"})
    for target in targets:
        path = _resolve(target, ctx)
        if path is None:
            continue
        if _critical_dir(path) and path != "~":
            if recursive:
                return "deny", f"recursive {prog} on {target} breaks the system"
            return "confirm", f"{prog} on the system directory {path}"
        if path in CRITICAL_FILES:
            return "confirm", f"{prog} on {path}"
    return None


def _move(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    if cmd.program != "mv":
        return None
    _, operands = _flags(cmd.args)
    for source in operands[:-1]:
        path = _resolve(source, ctx)
        if path is not None and _critical_dir(path):
            return "deny", f"moving {source} away breaks the system"
    return None


def _critical_write(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    for op, target in cmd.redirects:
        if ">" in op and (target in CRITICAL_FILES or target.startswith("/boot/")):
            return "confirm", f"overwrites {target}"
    if cmd.program == "tee" and any(a in CRITICAL_FILES for a in cmd.args):
        return "confirm", "overwrites a critical system file"
    return None


def _services(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    prog, args = cmd.program, cmd.args
    if prog == "systemctl":
        verbs = {"stop", "disable", "mask", "kill", "isolate"} & set(args)
        units = [a for a in args if not a.startswith("-") and a not in verbs]
    elif prog == "service" and len(args) >= 2 and args[1] == "stop":
        verbs, units = {"stop"}, [args[0]]
    else:
        return None
    if not verbs:
        return None
    if any(u.removesuffix(".service") in ("ssh", "sshd", "networking", "NetworkManager") for u in units):
        return "deny", "stopping SSH or networking cuts the host off"
    return "confirm", f"{prog} {'/'.join(sorted(verbs))} {' '.join(units)}".rstrip()


def _docker(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    prog, args = cmd.program, [a for a in cmd.args if a]
    if prog == "docker" and args[:1] == ["compose"]:
        prog, args = "docker-compose", args[1:]
    if prog == "docker-compose":
        if "down" in args and {"-v", "--volumes"} & set(args):
            return "confirm", "compose down -v deletes the project's volumes (its data)"
        return None
    if prog != "docker" or not args:
        return None
    words = [a for a in args if not a.startswith("-")]
    if words[:2] in (["system", "prune"], ["volume", "prune"]) or words[:2] in (["volume", "rm"],):
        return "confirm", f"docker {' '.join(words[:2])} deletes data"
    return None


def _packages(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    prog, args = cmd.program, cmd.args
    removing = (
        (prog in ("apt", "apt-get", "aptitude") and {"remove", "purge", "autoremove"} & set(args))
        or (prog in ("yum", "dnf", "microdnf", "zypper") and {"remove", "erase", "rm"} & set(args))
        or (prog == "apk" and "del" in args)
        or (prog == "pacman" and any(a.startswith("-R") for a in args))
        or (prog in ("snap", "brew") and {"remove", "uninstall"} & set(args))
        or (prog == "dpkg" and {"-r", "-P", "--remove", "--purge"} & set(args))
    )
    return ("confirm", f"{prog} removes installed packages") if removing else None


def _accounts(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    prog, args = cmd.program, cmd.args
    if prog in ("userdel", "deluser", "groupdel", "delgroup", "passwd", "chpasswd", "visudo"):
        return "confirm", f"{prog} changes accounts or credentials"
    if prog == "crontab" and "-r" in args:
        return "confirm", "crontab -r deletes every scheduled job"
    if prog in ("iptables", "ip6tables") and {"-F", "--flush", "-X", "-P"} & set(args):
        return "confirm", f"{prog} flushes or changes firewall rules"
    if prog == "ufw" and {"disable", "reset"} & set(args):
        return "confirm", "ufw disable/reset removes the firewall"
    if prog == "nft" and "flush" in args:
        return "confirm", "nft flush removes the firewall rules"
    if prog == "git" and "push" in args and {"-f", "--force", "--force-with-lease"} & set(args):
        return "confirm", "force-push rewrites remote history"
    return None


def _archive_delete(cmd: SimpleCommand, ctx: _Ctx) -> tuple[Action, str] | None:
    """``tar --remove-files`` deletes what it archives; ``rsync --delete`` empties its destination."""
    prog, args = cmd.program, cmd.args
    if prog == "tar" and "--remove-files" in args:
        skip = {args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-f", "--file", "-C")}
        sources = [a for a in args[1:] if not a.startswith("-") and a not in skip] or ["."]
        return _delete_targets(sources, ctx, "tar --remove-files") or (
            "confirm",
            "tar --remove-files deletes files",
        )
    if prog == "rsync" and any(a.startswith(("--delete", "--remove-source")) for a in args):
        _, operands = _flags(args)
        if len(operands) >= 2 and not any(":" in o for o in operands[-1:]):
            if any(a.startswith("--remove-source") for a in args):
                return _delete_targets(operands[:-1], ctx, "rsync --remove-source-files")
            return _delete_targets(operands[-1:], ctx, "rsync --delete") or _glob_dest(operands[-1], ctx)
    return None


def _glob_dest(dest: str, ctx: _Ctx) -> tuple[Action, str] | None:
    path = _resolve(dest, ctx)
    if path is not None and path.startswith("/") and _critical_dir(path):
        return "deny", f"rsync --delete onto {dest} would wipe it"
    return None


BUILTIN_RULES: dict[str, Callable[[SimpleCommand, _Ctx], tuple[Action, str] | None]] = {
    "rm-recursive": _rm,
    "archive-delete": _archive_delete,
    "find-delete": _find_delete,
    "block-device": _block_device,
    "power": _power,
    "permissions": _permissions,
    "move-system": _move,
    "critical-file": _critical_write,
    "service-stop": _services,
    "docker-data": _docker,
    "package-removal": _packages,
    "accounts": _accounts,
}
"""Built-in per-command rules by name (plus ``LINE_RULES``): pass names to
``CommandPolicy(disabled=...)``."""

LINE_RULES = (
    "fork-bomb", "pipe-to-shell", "unparsable", "sudo", "dynamic", "lookalike", "tether-setting", *RISK_RULES
)  # fmt: skip
"""Rules judged on the whole line or in ``tether.tools._risks``; they can be disabled too."""
