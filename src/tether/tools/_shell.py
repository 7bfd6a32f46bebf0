"""A conservative reader of shell lines for the command policy (not a shell).

It finds every simple command a line would run: across ``;``, ``&&``, ``||``, ``|``,
``&`` and newlines, inside ``$( )``, backticks, ``<( )``, ``sh -c '...'``, ``eval``,
``su -c`` and heredocs fed to a shell, behind ``sudo``, ``env``, ``nohup``, ``timeout``,
``xargs`` and other wrappers, after ``VAR=value`` prefixes and shell keywords. When in
doubt it reads more, not less: a false alarm costs a confirmation, a miss costs a host.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field

__all__ = ["SHELLS", "Line", "SimpleCommand", "parse_line"]

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "fish", "busybox"})
MAX_DEPTH = 6
_PUNCT = "();<>|&\n"
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_KEYWORDS = frozenset(
    {"{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "case", "esac"}
)
_HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*(['\"]?)([A-Za-z0-9_.\-]+)\1")

# wrapper -> (options that take a value, whether the first operand is not the command)
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "sudo": (frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group"}), 0),
    "doas": (frozenset({"-u", "-C"}), 0),
    "env": (frozenset({"-u", "-C", "--unset", "--chdir"}), 0),
    "nohup": (frozenset(), 0),
    "time": (frozenset({"-f", "-o"}), 0),
    "command": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u"}), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "setsid": (frozenset(), 0),
    "timeout": (frozenset({"-s", "-k", "--signal", "--kill-after"}), 1),
    "xargs": (frozenset({"-I", "-i", "-n", "-P", "-d", "-a", "-E", "-e", "-L", "-l", "-s", "--max-args"}), 0),
    "watch": (frozenset({"-n", "-d", "--interval"}), 0),
    "chroot": (frozenset({"--userspec", "--groups"}), 1),
    "runuser": (frozenset({"-u", "-g", "-G", "--user", "--group"}), 0),
    "flock": (frozenset({"-w", "-E", "--timeout"}), 1),
    "unbuffer": (frozenset(), 0),
}


@dataclass(slots=True)
class SimpleCommand:
    """One command with its arguments, wrappers peeled off."""

    argv: list[str]
    """Program and arguments (quotes removed, wrappers and ``VAR=`` prefixes dropped)."""
    redirects: list[tuple[str, str]] = field(default_factory=list)
    """``(operator, target)`` pairs such as ``(">", "/dev/sda")``."""
    wrappers: list[str] = field(default_factory=list)
    """Wrappers peeled off, in order (``sudo``, ``env``, ``xargs``...)."""

    @property
    def program(self) -> str:
        return posixpath.basename(self.argv[0]) if self.argv else ""

    @property
    def args(self) -> list[str]:
        return self.argv[1:]

    @property
    def text(self) -> str:
        """Program and arguments joined by single spaces: what custom patterns match."""
        return " ".join([self.program, *self.args]) if self.argv else ""


@dataclass(slots=True)
class Line:
    """Everything a shell line would run."""

    commands: list[SimpleCommand] = field(default_factory=list)
    pipelines: list[list[SimpleCommand]] = field(default_factory=list)
    """Commands connected by ``|``, for rules about what feeds what (``curl | sh``)."""
    substituted: list[tuple[SimpleCommand, Line]] = field(default_factory=list)
    """Command substitutions and the command whose arguments they fill."""
    errors: list[str] = field(default_factory=list)
    """Parts that could not be read (unbalanced quotes, nesting too deep)."""

    def extend(self, other: Line) -> None:
        self.commands += other.commands
        self.pipelines += other.pipelines
        self.substituted += other.substituted
        self.errors += other.errors


def parse_line(text: str, depth: int = 0) -> Line:
    """Every simple command that ``text`` would run, as far as can be told without running it."""
    line = Line()
    if depth > MAX_DEPTH:
        line.errors.append("nested too deep")
        return line
    text, heredocs = _split_heredocs(text)
    text, substitutions = _extract_substitutions(text)
    try:
        tokens = _tokens(text)
    except ValueError as exc:
        line.errors.append(str(exc))
        return line
    own: list[SimpleCommand] = []
    for pipeline in _pipelines(tokens):
        cmds: list[SimpleCommand] = []
        for words, redirects in pipeline:
            cmd, nested = _unwrap(words, redirects, depth)
            line.extend(nested)
            if cmd.argv or cmd.redirects:
                cmds.append(cmd)
        own += cmds
        line.commands += cmds
        if cmds:
            line.pipelines.append(cmds)
    for k, inner in enumerate(substitutions):
        sub = parse_line(inner, depth + 1)
        line.extend(sub)
        tag = _placeholder(k)
        owner = next((c for c in own if any(tag in w for w in c.argv)), SimpleCommand([]))
        line.substituted.append((owner, sub))
    for head, body in heredocs:
        if any(c.program in SHELLS for c in parse_line(head, depth + 1).commands):
            line.extend(parse_line(body, depth + 1))
    return line


def _split_heredocs(text: str) -> tuple[str, list[tuple[str, str]]]:
    """Take heredoc bodies out of the text; keep them with the line that opened them."""
    if "<<" not in text:
        return text, []
    out: list[str] = []
    docs: list[tuple[str, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        current = lines[i]
        out.append(current)
        i += 1
        for match in _HEREDOC.finditer(current):
            delim = match.group(2)
            body: list[str] = []
            while i < len(lines) and lines[i].strip() != delim:
                body.append(lines[i])
                i += 1
            i += 1  # the delimiter line
            docs.append((current, "\n".join(body)))
    return "\n".join(out), docs


def _extract_substitutions(text: str) -> tuple[str, list[str]]:
    """Replace ``$( )``, backticks and ``<( )``/``>( )`` by placeholders; return their insides."""
    if not any(c in text for c in "$`<>"):
        return text, []
    out: list[str] = []
    found: list[str] = []
    i, n, quote = 0, len(text), ""
    while i < n:
        c = text[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\" and i + 1 < n:
            out.append(text[i : i + 2])
            i += 2
            continue
        elif c == '"':
            quote = "" if quote == '"' else '"'
        elif c == "'" and not quote:
            quote = "'"
        elif c == "`":
            end = text.find("`", i + 1)
            end = n if end < 0 else end
            out.append("$" + _placeholder(len(found)))
            found.append(text[i + 1 : end])
            i = end + 1
            continue
        elif text.startswith("(", i + 1) and (c == "$" or (c in "<>" and not quote)):
            end = _closing_paren(text, i + 1)
            inner = text[i + 2 : end]
            if c == "$" and inner.startswith("("):  # $(( arithmetic ))
                out.append("0")
            else:
                out.append(("$" if c == "$" else "/dev/fd/") + _placeholder(len(found)))
                found.append(inner)
            i = end + 1
            continue
        out.append(c)
        i += 1
    return "".join(out), found


def _placeholder(k: int) -> str:
    return f"__tether_subst_{k}__"


def _closing_paren(text: str, start: int) -> int:
    depth, quote = 0, ""
    i = start
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"':
                i += 1
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(text)


def _tokens(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=_PUNCT)
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def _is_operator(token: str) -> bool:
    return bool(token) and all(c in _PUNCT for c in token)


def _is_redirect(token: str) -> bool:
    return token[0] in "<>" or token in ("&>", "&>>")


_Words = tuple[list[str], list[tuple[str, str]]]


def _pipelines(tokens: list[str]) -> list[list[_Words]]:
    pipelines: list[list[_Words]] = []
    current: list[_Words] = []
    words: list[str] = []
    redirects: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if _is_operator(tok) and _is_redirect(tok):
            target = tokens[i + 1] if i + 1 < len(tokens) and not _is_operator(tokens[i + 1]) else ""
            if words and words[-1].isdigit():  # the fd of 2>file
                words.pop()
            redirects.append((tok, target))
            i += 2 if target else 1
            continue
        if _is_operator(tok):
            current.append((words, redirects))
            words, redirects = [], []
            if tok.strip() not in ("|", "|&"):
                pipelines.append(current)
                current = []
        else:
            words.append(tok)
        i += 1
    current.append((words, redirects))
    pipelines.append(current)
    return [[w for w in p if w[0] or w[1]] for p in pipelines if any(w[0] or w[1] for w in p)]


def _unwrap(words: list[str], redirects: list[tuple[str, str]], depth: int) -> tuple[SimpleCommand, Line]:
    """Peel keywords, assignments and wrappers; read ``sh -c``/``eval``/``su -c`` arguments."""
    nested = Line()
    wrappers: list[str] = []
    rest = list(words)
    while rest:
        head = rest[0]
        name = posixpath.basename(head)
        if head in _KEYWORDS or _ASSIGNMENT.match(head) or head in ("for", "in", "function"):
            rest = rest[1:]
        elif name in _WRAPPERS:
            if name == "command" and len(rest) > 1 and rest[1] in ("-v", "-V"):
                break  # a lookup, not a run
            wrappers.append(name)
            rest = _skip_wrapper(name, rest[1:], nested, depth)
        else:
            break
    cmd = SimpleCommand(rest, redirects, wrappers)
    script = _inline_script(cmd)
    if script is not None:
        nested.extend(parse_line(script, depth + 1))
    return cmd, nested


def _skip_wrapper(name: str, args: list[str], nested: Line, depth: int) -> list[str]:
    takes_value, operands = _WRAPPERS[name]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if name == "env" and _ASSIGNMENT.match(arg):
            i += 1
        elif name == "env" and arg in ("-S", "--split-string") and i + 1 < len(args):
            nested.extend(parse_line(args[i + 1], depth + 1))
            return []
        elif arg.startswith("-") and len(arg) > 1:
            i += 2 if arg in takes_value else 1
        else:
            break
    return args[i + operands :]


def _inline_script(cmd: SimpleCommand) -> str | None:
    """The script string of ``sh -c SCRIPT``, ``eval ARGS`` or ``su -c SCRIPT``."""
    prog, args = cmd.program, cmd.args
    if prog == "eval":
        return " ".join(args)
    if prog in SHELLS or prog == "su":
        for i, arg in enumerate(args):
            is_c = arg == "--command" or (arg.startswith("-") and not arg.startswith("--") and "c" in arg)
            if is_c and i + 1 < len(args):
                return args[i + 1]
    return None
