"""A conservative reader of shell lines for the command policy (not a shell).

It finds every simple command a line would run: across ``;``, ``&&``, ``||``, ``|``,
``&`` and newlines, inside ``$( )``, backticks, ``<( )``, ``sh -c '...'``, ``eval``,
``su -c``, ``ssh host CMD``, ``find -exec``, ``script -c``, ``flock -c``, aliases and
heredocs or literal text fed to a shell, behind ``sudo``, ``env``, ``nohup``, ``timeout``,
``xargs`` and other wrappers, after ``VAR=value`` prefixes and shell keywords.

What can be worked out without running anything is expanded: variables assigned a literal
earlier in the line (``X=rm; $X -rf /``), ``${IFS}``, ``$'\\x72m'``, brace lists
(``{rm,-rf,/}``). What cannot (a command name computed by a substitution or an unknown
variable, ``eval`` of computed text, data piped into a shell or an interpreter, inline code
of ``python -c``/``perl -e``/``node -e``, ``awk`` calling ``system()``, a script written
by the same line and then run) is reported in ``Line.dynamic``: the policy cannot know
what it does. When in doubt it reads more, not less: a false alarm costs a confirmation,
a miss costs a host.

Tokens are matched by one regular expression and substitutions are found by jumping
between special characters, so the cost is linear in the length of the line.
"""

from __future__ import annotations

import codecs
import posixpath
import re
from dataclasses import dataclass, field

from tether.tools._options import PLAIN_HELPERS, exec_values, skeleton, write_targets

__all__ = ["INTERPRETERS", "SHELLS", "Line", "SimpleCommand", "parse_line"]

SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "fish", "busybox", "rbash", "tcsh", "csh"}
)
INTERPRETERS = SHELLS | {
    "python", "python2", "python3", "pypy", "pypy3", "perl", "ruby", "node", "nodejs", "deno", "bun",
    "php", "lua", "luajit", "tclsh", "wish", "Rscript", "osascript", "pwsh", "powershell", "expect", "irb",
    "jshell", "groovy", "scala", "julia", "guile", "racket", "sbcl", "ghci",
}  # fmt: skip
"""Programs that run code given to them as text: their input and inline code are unknown."""

MAX_DEPTH = 6
MAX_WORDS = 2_000
"""A line with more words is not read (the caller decides conservatively): it bounds the cost."""
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_KEYWORDS = frozenset(
    {"{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "case", "esac",
     "[[", "]]", "for", "in", "select", "function", "coproc"}
)  # fmt: skip
_DECLARERS = frozenset({"export", "declare", "typeset", "local", "readonly"})
_HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*(['\"]?)([A-Za-z0-9_.\-]+)\1")
_SPECIAL = re.compile(r"[\\'\"`$<>]")
_PAREN_SPECIAL = re.compile(r"[()'\"\\]")
_TOKEN = re.compile(
    r"""
      (?P<sp>[ \t\r]+|\\\n)
    | (?P<op>&&|\|\||;;&?|;&|\|&|&>>|&>|>>|<<<|<<-|<<|<>|>&|<&|>\||[;&|()<>\n])
    | (?P<word>(?:[^\s;&|()<>'"\\]+|\\.|'[^']*'|\$'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")+)
    | (?P<bad>['"\\])
    """,
    re.X | re.S,
)
_PIECE = re.compile(r"""'([^']*)'|\$'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|\\(.)|([^'"\\]+)""", re.S)
_DQ_ESCAPE = re.compile(r"\\([$`\"\\\n])")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_BRACE = re.compile(r"^([^{}]*)\{([^{}]*,[^{}]*)\}([^{}]*)$")
_GLOB = re.compile(r"[*?\[]")
_SPLIT = "\x00"
"""Marks where an unquoted ``$IFS`` splits a word."""

# wrapper -> (options that take a value, how many operands precede the command)
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "sudo": (frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group"}), 0),
    "doas": (frozenset({"-u", "-C"}), 0),
    "pkexec": (frozenset({"--user"}), 0),
    "env": (frozenset({"-u", "-C", "--unset", "--chdir"}), 0),
    "nohup": (frozenset(), 0),
    "time": (frozenset({"-f", "-o"}), 0),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u"}), 0),
    "chrt": (frozenset(), 1),
    "taskset": (frozenset(), 1),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "setsid": (frozenset(), 0),
    "timeout": (frozenset({"-s", "-k", "--signal", "--kill-after"}), 1),
    "xargs": (frozenset({"-I", "-i", "-n", "-P", "-d", "-a", "-E", "-e", "-L", "-l", "-s", "--max-args"}), 0),
    "parallel": (frozenset({"-j", "-S", "--jobs", "-a"}), 0),
    "watch": (frozenset({"-n", "-d", "--interval"}), 0),
    "chroot": (frozenset({"--userspec", "--groups"}), 1),
    "runuser": (frozenset({"-u", "-g", "-G", "--user", "--group"}), 0),
    "flock": (frozenset({"-w", "-E", "--timeout"}), 1),
    "unbuffer": (frozenset(), 0),
    "strace": (frozenset({"-o", "-e", "-p", "-s", "-u"}), 0),
    "ltrace": (frozenset({"-o", "-e", "-p", "-s", "-u"}), 0),
    "unshare": (frozenset(), 0),
    "nsenter": (frozenset({"-t", "--target"}), 0),
    "firejail": (frozenset(), 0),
    "catchsegv": (frozenset(), 0),
}
_INPUT_WRAPPERS = frozenset({"xargs", "parallel", "find"})
"""Wrappers that append data read at run time to the command's arguments."""
_INLINE_FLAGS: dict[str, frozenset[str]] = {
    **dict.fromkeys(("python", "python2", "python3", "pypy", "pypy3"), frozenset({"-c"})),
    **dict.fromkeys(("perl", "ruby", "lua", "luajit", "Rscript", "osascript"), frozenset({"-e", "-E"})),
    **dict.fromkeys(("node", "nodejs", "bun"), frozenset({"-e", "-p", "--eval", "--print"})),
    "deno": frozenset({"eval"}),
    "php": frozenset({"-r", "-B", "-R", "-E"}),
    "expect": frozenset({"-c"}),
    **dict.fromkeys(
        ("pwsh", "powershell"), frozenset({"-c", "-command", "-Command", "-EncodedCommand", "-e"})
    ),
}
_AWKS = frozenset({"awk", "gawk", "mawk", "nawk"})
_AWK_RUNS = re.compile(r"system\s*\(|\|\s*getline|\|\s*&|print[^;}]*\||\bclose\s*\(")
_SSH_VALUED = frozenset("BbcDEeFIiJLlmOoPpQRSWw")


@dataclass(slots=True)
class SimpleCommand:
    """One command with its arguments, wrappers peeled off."""

    argv: list[str]
    """Program and arguments (quotes removed, wrappers and ``VAR=`` prefixes dropped)."""
    redirects: list[tuple[str, str]] = field(default_factory=list)
    """``(operator, target)`` pairs such as ``(">", "/dev/sda")``."""
    wrappers: list[str] = field(default_factory=list)
    """Wrappers peeled off, in order (``sudo``, ``env``, ``xargs``, ``ssh``...)."""
    program: str = field(init=False)
    """The program's base name (``rm`` for ``/bin/rm``; ``rm`` for a look-alike ``rｍ`` too)."""
    args: list[str] = field(init=False)
    disguised: str = field(init=False, default="")
    """The name as written when it has non-ASCII letters (``program`` is then its skeleton)."""

    def __post_init__(self) -> None:  # every rule reads these: computed once (a hot path)
        self.program = self.argv[0].rpartition("/")[2] if self.argv else ""
        self.args = self.argv[1:]
        if not self.program.isascii():
            self.disguised, self.program = self.program, skeleton(self.program)

    @property
    def text(self) -> str:
        """Program and arguments joined by single spaces: what custom patterns match."""
        return " ".join([self.program, *self.args]) if self.argv else ""

    @property
    def from_input(self) -> bool:
        """Arguments are appended at run time from input (``xargs``, ``find -exec``)."""
        return bool(_INPUT_WRAPPERS & set(self.wrappers))


@dataclass(slots=True)
class Line:
    """Everything a shell line would run."""

    commands: list[SimpleCommand] = field(default_factory=list)
    pipelines: list[list[SimpleCommand]] = field(default_factory=list)
    """Commands connected by ``|``, for rules about what feeds what (``curl | sh``)."""
    substituted: list[tuple[SimpleCommand, Line]] = field(default_factory=list)
    """Command substitutions and the command whose arguments they fill."""
    dynamic: list[tuple[str, str]] = field(default_factory=list)
    """``(segment, reason)``: parts whose effect is decided at run time and cannot be judged."""
    errors: list[str] = field(default_factory=list)
    """Parts that could not be read (unbalanced quotes, nesting too deep)."""
    assigned: list[tuple[str, str]] = field(default_factory=list)
    """``(variable, segment)`` for every variable the line sets (``X=1 cmd``, ``export X=1``,
    ``env X=1 cmd``): settings such as ``TETHER_STORE_URL`` change what later commands do."""

    def extend(self, other: Line) -> None:
        self.commands += other.commands
        self.pipelines += other.pipelines
        self.substituted += other.substituted
        self.dynamic += other.dynamic
        self.errors += other.errors
        self.assigned += other.assigned


@dataclass(slots=True)
class _State:
    """What earlier commands of the line established, for static expansion."""

    variables: dict[str, str | None] = field(default_factory=dict)
    """Literal values assigned so far; ``None`` when the value is only known at run time."""
    aliases: dict[str, str] = field(default_factory=dict)
    written: set[str] = field(default_factory=set)
    """Files the line writes (redirects, ``tee``, ``cp``, downloads): running one is unknown code."""


def parse_line(text: str, depth: int = 0, state: _State | None = None) -> Line:
    """Every simple command that ``text`` would run, as far as can be told without running it."""
    line = Line()
    if depth > MAX_DEPTH:
        line.errors.append("nested too deep")
        return line
    st = state if state is not None else _State()
    text, heredocs = _split_heredocs(text)
    text, substitutions = _extract_substitutions(text)
    try:
        tokens = _tokens(text)
    except ValueError as exc:
        line.errors.append(str(exc))
        return line
    if len(tokens) > MAX_WORDS:
        line.errors.append(f"more than {MAX_WORDS} words: too long to judge, split the line")
        return line
    own: list[SimpleCommand] = []
    for pipeline in _pipelines(tokens):
        cmds: list[SimpleCommand] = []
        for k, (words, redirects) in enumerate(pipeline):
            cmd, nested = _command(words, redirects, depth, st)
            line.extend(nested)
            if k > 0 and cmd.argv and _reads_code_from_stdin(cmd):
                line.extend(_fed_code(pipeline[k - 1][0], cmd, depth, st))
            if cmd.argv or cmd.redirects:
                cmds.append(cmd)
                _note_writes(cmd, st)
        own += cmds
        line.commands += cmds
        if cmds:
            line.pipelines.append(cmds)
    for k, inner in enumerate(substitutions):
        sub = parse_line(inner, depth + 1, _State(dict(st.variables), dict(st.aliases), st.written))
        line.extend(sub)
        tag = _placeholder(k)
        owner = next((c for c in own if any(tag in w for w in c.argv)), SimpleCommand([]))
        line.substituted.append((owner, sub))
    for head, body in heredocs:
        readers = [c for c in parse_line(head, depth + 1).commands if _reads_code_from_stdin(c)]
        if any(c.program in SHELLS for c in readers):
            line.extend(parse_line(body, depth + 1))
        elif readers:
            line.dynamic.append((readers[0].text, f"{readers[0].program} runs code from a heredoc"))
    return line


# -- lexing ------------------------------------------------------------------------------


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
        if "<<" not in current:
            continue
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
    i, n, dquote = 0, len(text), False
    while i < n:
        m = _SPECIAL.search(text, i)
        if m is None:
            out.append(text[i:])
            break
        j = m.start()
        out.append(text[i:j])
        c = text[j]
        if c == "'" and not dquote:
            end = text.find("'", j + 1)
            end = n - 1 if end < 0 else end
            out.append(text[j : end + 1])
            i = end + 1
        elif c == "\\":
            out.append(text[j : j + 2])
            i = j + 2
        elif c == '"':
            dquote = not dquote
            out.append(c)
            i = j + 1
        elif c == "`":
            end = text.find("`", j + 1)
            end = n if end < 0 else end
            out.append("$" + _placeholder(len(found)))
            found.append(text[j + 1 : end])
            i = end + 1
        elif text.startswith("(", j + 1) and (c == "$" or not dquote):
            end = _closing_paren(text, j + 1)
            inner = text[j + 2 : end]
            if c == "$" and inner.startswith("("):  # $(( arithmetic ))
                out.append("0")
            else:
                out.append(("$" if c == "$" else "/dev/fd/") + _placeholder(len(found)))
                found.append(inner)
            i = end + 1
        elif c == "$" and text.startswith("'", j + 1) and not dquote:  # $'...': copy, lexed later
            ansi = re.compile(r"\$'(?:[^'\\]|\\.)*'?", re.S).match(text, j)
            end = ansi.end() if ansi else j + 1
            out.append(text[j:end])
            i = end
        else:
            out.append(c)
            i = j + 1
    return "".join(out), found


def _placeholder(k: int) -> str:
    return f"__tether_subst_{k}__"


def _closing_paren(text: str, start: int) -> int:
    depth, i, n = 0, start, len(text)
    while i < n:
        m = _PAREN_SPECIAL.search(text, i)
        if m is None:
            return n
        i = m.start()
        c = text[i]
        if c == "'":
            end = text.find("'", i + 1)
            i = n if end < 0 else end + 1
            continue
        if c == '"':
            close = re.compile(r'"(?:[^"\\]|\\.)*"?', re.S).match(text, i)
            i = close.end() if close else i + 1
            continue
        if c == "\\":
            i += 2
            continue
        depth += 1 if c == "(" else -1
        if depth == 0:
            return i
        i += 1
    return n


_Token = tuple[str, bool]  # text, is an operator


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None or m.lastgroup == "bad":
            what = {"'": "a single quote", '"': "a double quote", "\\": "a backslash"}.get(
                text[pos], text[pos]
            )
            raise ValueError(f"unbalanced {what} at character {pos}")
        kind = m.lastgroup
        if kind == "word":
            word = m.group()
            if word.startswith("#") and (pos == 0 or text[pos - 1] in " \t\r\n;&|()"):
                end = text.find("\n", pos)
                pos = n if end < 0 else end
                continue
            out.append((word, False))
        elif kind == "op":
            out.append((m.group(), True))
        pos = m.end()
        if len(out) > MAX_WORDS:
            break  # the caller refuses to judge; stop paying for it
    return out


def _expand(raw: str, st: _State) -> list[str]:
    """Quote removal plus the expansions a reader can do safely: known variables, IFS, braces."""
    parts: list[str] = []
    plain_only = True
    for m in _PIECE.finditer(raw):
        single, ansi, double, escaped, plain = m.groups()
        if single is not None:
            parts.append(single)
            plain_only = False
        elif ansi is not None:
            parts.append(_ansi_c(ansi))
            plain_only = False
        elif double is not None:
            parts.append(_DQ_ESCAPE.sub(r"\1", _variables(double, st, split=False)))
            plain_only = False
        elif escaped is not None:
            parts.append("" if escaped == "\n" else escaped)
            plain_only = False
        else:
            parts.append(_variables(plain, st, split=True))
    word = "".join(parts)
    words = [w for w in word.split(_SPLIT) if w] if _SPLIT in word else [word]
    if plain_only and len(words) == 1 and "{" in word:
        brace = _BRACE.match(word)
        if brace:
            head, alts, tail = brace.groups()
            return [head + alt + tail for alt in alts.split(",")]
    return words


def _variables(text: str, st: _State, *, split: bool) -> str:
    if "$" not in text:
        return text

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name == "IFS" and "IFS" not in st.variables:
            return _SPLIT if split else " "
        known = st.variables.get(name)
        if known is None:
            return m.group()
        return known.replace(" ", _SPLIT) if split else known

    return _VAR.sub(value, text)


def _ansi_c(body: str) -> str:
    try:
        return codecs.decode(body.encode("latin-1", "backslashreplace"), "unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return body


def _is_redirect(op: str) -> bool:
    return op[0] in "<>" or op in ("&>", "&>>")


_Words = tuple[list[str], list[tuple[str, str]]]


def _pipelines(tokens: list[_Token]) -> list[list[tuple[list[str], list[tuple[str, str]]]]]:
    """Group raw words and redirects into simple commands and pipelines (words still quoted)."""
    pipelines: list[list[_Words]] = []
    current: list[_Words] = []
    words: list[str] = []
    redirects: list[tuple[str, str]] = []
    i, n = 0, len(tokens)
    while i < n:
        tok, is_op = tokens[i]
        if is_op and _is_redirect(tok):
            target = tokens[i + 1][0] if i + 1 < n and not tokens[i + 1][1] else ""
            if words and words[-1].isdigit():  # the fd of 2>file
                words.pop()
            redirects.append((tok, target))
            i += 2 if target else 1
            continue
        if is_op:
            current.append((words, redirects))
            words, redirects = [], []
            if tok not in ("|", "|&"):
                pipelines.append(current)
                current = []
        else:
            words.append(tok)
        i += 1
    current.append((words, redirects))
    pipelines.append(current)
    return [[w for w in p if w[0] or w[1]] for p in pipelines if any(w[0] or w[1] for w in p)]


# -- commands ----------------------------------------------------------------------------


def _command(
    raw: list[str], raw_redirects: list[tuple[str, str]], depth: int, st: _State
) -> tuple[SimpleCommand, Line]:
    """Expand the words, peel keywords, assignments and wrappers, and read nested scripts."""
    nested = Line()
    redirects = [(op, " ".join(_expand(t, st))) for op, t in raw_redirects]
    words: list[str] = []
    for w in raw:
        words += _expand(w, st)
    wrappers: list[str] = []
    rest = words
    assigned: list[tuple[str, str]] = []
    while rest:
        head = rest[0]
        name = posixpath.basename(head)
        assign = _ASSIGNMENT.match(head)
        if head in _KEYWORDS:
            rest = rest[1:]
        elif assign:
            assigned.append((assign.group(1), head[assign.end() :]))
            rest = rest[1:]
        elif name in _DECLARERS:
            for arg in rest[1:]:
                decl = _ASSIGNMENT.match(arg)
                if decl:
                    assigned.append((decl.group(1), arg[decl.end() :]))
            rest = []
        elif name in st.aliases and depth < MAX_DEPTH:
            nested.extend(parse_line(" ".join([st.aliases[name], *rest[1:]]), depth + 1, st))
            return SimpleCommand([]), nested
        elif name in _WRAPPERS:
            if name in ("command", "builtin") and len(rest) > 1 and rest[1] in ("-v", "-V"):
                break  # a lookup, not a run
            wrappers.append(name)
            rest = _skip_wrapper(name, rest[1:], nested, depth, st)
        elif name == "busybox" and len(rest) > 1 and posixpath.basename(rest[1]) not in SHELLS:
            wrappers.append(name)
            rest = rest[1:]
        else:
            break
    if not rest:  # only assignments: they change the line's variables
        for var, value in assigned:
            st.variables[var] = None if ("$" in value or "`" in value) else value
    segment = " ".join(words)
    nested.assigned += [(var, segment) for var, _value in assigned]
    cmd = SimpleCommand(rest, redirects, wrappers)
    if cmd.argv:
        cmd.redirects += [(">", target) for target in write_targets(cmd)]  # git log --output=F
        nested.extend(_inspect(cmd, depth, st))
        fed = [(op, t) for op, t in redirects if op in ("<<<", "<", "<>")]
        if fed and _reads_code_from_stdin(cmd):
            op, target = fed[0]
            if op == "<<<" and cmd.program in SHELLS and "$" not in target:
                nested.extend(parse_line(target, depth + 1, st))
            else:
                nested.dynamic.append(
                    (cmd.text, f"{cmd.program} runs code read from {target or 'its input'}")
                )
    return cmd, nested


def _skip_wrapper(name: str, args: list[str], nested: Line, depth: int, st: _State) -> list[str]:
    takes_value, operands = _WRAPPERS[name]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if name == "env" and (assign := _ASSIGNMENT.match(arg)):
            nested.assigned.append((assign.group(1), " ".join([name, *args])))
            i += 1
        elif name == "env" and arg in ("-S", "--split-string") and i + 1 < len(args):
            nested.extend(parse_line(args[i + 1], depth + 1, st))
            return []
        elif arg.startswith("-") and len(arg) > 1:
            i += 2 if arg in takes_value else 1
        else:
            break
    rest = args[i + operands :]
    if name == "flock" and rest[:1] and rest[0] in ("-c", "--command"):
        if len(rest) > 1:
            nested.extend(_script(rest[1], f"flock -c {rest[1]}", depth, st))
        return []
    return rest


def _script(script: str, segment: str, depth: int, st: _State) -> Line:
    """A script given as text (``sh -c``, ``eval``, ``ssh host CMD``): parsed, and unknown if computed."""
    inner = parse_line(script, depth + 1, st)
    if "$" in script or "`" in script:
        computed = "__tether_subst_" in script or any(
            _VAR.search(w) for c in inner.commands for w in c.argv[:1]
        )
        if computed:
            inner.dynamic.append((segment, "runs a script whose text is computed at run time"))
    return inner


def _inspect(cmd: SimpleCommand, depth: int, st: _State) -> Line:
    """Nested scripts a command runs, and what about it can only be known at run time."""
    out = Line()
    prog, args, text = cmd.program, cmd.args, cmd.text
    head = cmd.argv[0]
    if "$" in head or "`" in head:
        out.dynamic.append((text, f"the command to run ({head}) is computed at run time"))
    elif _GLOB.search(head):
        out.dynamic.append((text, f"the command to run ({head}) is a file-name pattern"))
    elif head in st.written or (("/" in head) and posixpath.normpath(head) in st.written):
        out.dynamic.append((text, f"runs {head}, which this same line writes"))
    if prog == "eval":
        out.extend(_script(" ".join(args), text, depth, st))
    elif prog == "alias":
        for arg in args:
            name, eq, value = arg.partition("=")
            if eq:
                st.aliases[name] = value
                out.extend(parse_line(value, depth + 1, st))
                out.dynamic.append((text, f"defines the alias {name}: a later command may run {value!r}"))
    elif prog in SHELLS or prog == "su":
        script = _dash_c(args)
        if script is not None:
            out.extend(_script(script, text, depth, st))
        elif prog in SHELLS:
            operand = next((a for a in args if not a.startswith(("-", "+"))), None)
            if operand is not None and (operand in st.written or posixpath.normpath(operand) in st.written):
                out.dynamic.append((text, f"runs {operand}, which this same line writes"))
    elif prog in ("source", "."):
        if args and (args[0] in st.written or "$" in args[0]):
            out.dynamic.append((text, f"sources {args[0]}, which is written or computed by this line"))
    elif prog in _INLINE_FLAGS and any(a in _INLINE_FLAGS[prog] or _joined_flag(a, prog) for a in args):
        out.dynamic.append((text, f"{prog} runs inline code that cannot be judged"))
    elif prog in _AWKS:
        program = next((a for a in args if not a.startswith("-")), "")
        if _AWK_RUNS.search(program) or "-f" in args:
            out.dynamic.append((text, f"{prog} runs commands from its program (system, pipes)"))
    elif prog == "find":
        out.extend(_find_exec(cmd, depth, st))
    elif prog == "script":
        script = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-c", "--command", "-qc")), None)
        if script is not None:
            out.extend(_script(script, text, depth, st))
    elif prog in ("ssh", "autossh"):
        remote = _ssh_command(args)
        if remote:
            out.extend(_script(remote, text, depth, st))
    elif prog in ("at", "batch"):
        out.dynamic.append((text, f"{prog} schedules commands read from its input"))
    elif prog == "git" and any(a.startswith(("alias.", "core.sshCommand", "core.hooksPath", "core.fsmonitor",
                                              "core.pager", "core.editor", "diff.external")) and "=" in a
                               for a in args):  # fmt: skip
        out.dynamic.append((text, "git -c sets a configuration that runs a command"))
    for option, value in exec_values(cmd):  # rg --pre=X, tar --to-command=X, git -c core.pager=X
        inner = _script(value, text, depth, st)
        plain = len(inner.commands) == 1 and inner.commands[0].program in PLAIN_HELPERS and not inner.dynamic
        if not plain:  # a plain helper (zstd, ssh, less) gets its operands from the tool: not judged alone
            out.extend(inner)
            out.dynamic.append((text, f"{prog} {option} runs the program {value[:80]!r}"))
    if cmd.from_input and (prog in INTERPRETERS or "sh" in cmd.wrappers):
        out.dynamic.append(
            (text, f"{'/'.join(w for w in cmd.wrappers if w in _INPUT_WRAPPERS)} feeds input to {prog}")
        )
    return out


def _joined_flag(arg: str, prog: str) -> bool:
    """``-c'print(1)'`` or ``-ec``: an inline-code flag joined with others."""
    if not arg.startswith("-") or arg.startswith("--") or len(arg) < 3:
        return False
    return any(f[1] in arg[1:] for f in _INLINE_FLAGS[prog] if len(f) == 2) and prog not in (
        "pwsh",
        "powershell",
    )


def _dash_c(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        is_c = arg == "--command" or (arg.startswith("-") and not arg.startswith("--") and "c" in arg)
        if is_c and i + 1 < len(args):
            return args[i + 1]
    return None


def _ssh_command(args: list[str]) -> str:
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and len(arg) > 1:
            i += 2 if arg[-1] in _SSH_VALUED and len(arg) == 2 else 1
            continue
        return " ".join(args[i + 1 :])
    return ""


def _find_exec(cmd: SimpleCommand, depth: int, st: _State) -> Line:
    out = Line()
    args = cmd.args
    roots = []
    for arg in args:
        if arg.startswith(("-", "(", "!")):
            break
        roots.append(arg)
    found = posixpath.join(roots[0] if len(roots) == 1 else "$FOUND", "__tether_found__")
    for i, arg in enumerate(args):
        if arg in ("-exec", "-execdir", "-ok", "-okdir"):
            end = next((j for j in range(i + 1, len(args)) if args[j] in (";", "+")), len(args))
            inner = [w.replace("{}", found) if arg in ("-exec", "-ok") else w for w in args[i + 1 : end]]
            if inner:
                sub, nested = _command(
                    [_quote(w) for w in inner], [], depth + 1, st
                )  # words are already expanded: quote them back so they stay literal
                sub.wrappers.insert(0, "find")
                out.extend(nested)
                if sub.argv:
                    out.commands.append(sub)
                    if sub.program in INTERPRETERS:
                        out.dynamic.append((sub.text, f"find -exec runs {sub.program} on what it finds"))
    return out


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def _reads_code_from_stdin(cmd: SimpleCommand) -> bool:
    """An interpreter with no script operand (``sh``, ``bash -s``, ``python3 -``)."""
    if cmd.program not in INTERPRETERS:
        return False
    if cmd.program in _INLINE_FLAGS and any(a in _INLINE_FLAGS[cmd.program] for a in cmd.args):
        return False
    if cmd.program in SHELLS and _dash_c(cmd.args) is not None:
        return False
    operands = [a for a in cmd.args if not a.startswith("-") or a == "-"]
    return not operands or operands[0] == "-"


def _fed_code(producer: list[str], consumer: SimpleCommand, depth: int, st: _State) -> Line:
    """What ``echo 'rm -rf /' | sh`` runs: literal text is judged; anything else is unknown."""
    words: list[str] = []
    for w in producer:
        words += _expand(w, st)
    prog = posixpath.basename(words[0]) if words else ""
    text = " ".join(words[1:])
    literal = (prog == "echo" and not any(c in text for c in "\\$`")) or (
        prog == "printf" and len(words) == 2 and not any(c in text for c in "\\%$`")
    )
    if literal and consumer.program in SHELLS:
        return parse_line(" ".join(w for w in words[1:] if w not in ("-n", "-e", "-E")), depth + 1, st)
    out = Line()
    out.dynamic.append((consumer.text, f"{consumer.program} runs code piped into it at run time"))
    return out


def _note_writes(cmd: SimpleCommand, st: _State) -> None:
    for op, target in cmd.redirects:
        if ">" in op and target and not target.isdigit() and target != "-":
            st.written.add(posixpath.normpath(target))
    prog, args = cmd.program, cmd.args
    operands = [a for a in args if not a.startswith("-")]
    if prog == "tee":
        st.written.update(posixpath.normpath(a) for a in operands)
    elif prog in ("cp", "mv", "install", "ln") and len(operands) >= 2:
        st.written.add(posixpath.normpath(operands[-1]))
    elif prog in ("curl", "wget"):
        for i, arg in enumerate(args[:-1]):
            if arg in ("-o", "-O", "--output", "--output-document"):
                st.written.add(posixpath.normpath(args[i + 1]))
