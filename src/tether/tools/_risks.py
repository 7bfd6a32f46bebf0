"""Rules about what a command reaches rather than what it destroys.

Network (``curl``, ``nc``, ``ssh``... to a host the run did not allow), secrets (reading
``~/.ssh``, ``~/.aws``, ``/etc/shadow``, a ``.env`` outside the working directory),
configuration outside the working directory (shell rc files, ``pip.conf``, ``~/.npmrc``,
``git config core.hooksPath``), and what needs the host itself (services, system packages,
the container engine, ``sudo``, writes outside the working directory): the sandbox cannot
run those, so they are escalated.

Each rule takes one simple command and a ``Where`` and returns ``(action, reason, needs)``
or ``None``; ``needs`` names what the command requires beyond the default sandbox
(``network``, ``host``).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass

from tether.tools._shell import SimpleCommand

__all__ = ["LOOPBACK_HOSTS", "RISK_RULES", "Where"]

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "127.*", "*.localhost")
"""Hosts every run may reach unless the policy says otherwise."""

Found = tuple[str, str, frozenset[str]]
_NET = frozenset({"network"})
_HOST = frozenset({"host"})
_NONE: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Where:
    """What a rule needs to know about the place a command runs."""

    cwd: str | None
    zones: tuple[str, ...]
    """Directories the command may write: the working directory and the safe paths."""
    allow_hosts: tuple[str, ...]
    registries: bool
    """Package managers may reach their registries without asking."""
    resolve: object
    """``resolve(word) -> str | None``: the absolute (or ``~/``) path a word names."""

    def path(self, word: str) -> str | None:
        return self.resolve(word)  # type: ignore[operator, no-any-return]

    def inside(self, path: str) -> bool:
        return any(path == z or path.startswith(z.rstrip("/") + "/") for z in self.zones)

    def host_allowed(self, host: str) -> bool:
        host = host.lower().strip("[]")
        return any(fnmatch.fnmatchcase(host, pattern.lower()) for pattern in self.allow_hosts)


# -- network ------------------------------------------------------------------------------

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://(?:[^@/\s]*@)?(\[[^\]]+\]|[^:/?#\s]+)")
_HOSTLIKE = re.compile(
    r"^(?:[A-Za-z0-9\-_]+\.)+[A-Za-z]{2,}(?::\d+)?(?:/|$)|^\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?(?:/|$)"
    r"|^localhost(?::\d+)?(?:/|$)|^\[[0-9a-fA-F:]+\](?::\d+)?(?:/|$)"
)
_URL_TOOLS = frozenset({"curl", "wget", "aria2c", "http", "https", "xh", "lynx", "links", "w3m"})
_HOST_TOOLS = frozenset(
    {
        "nc",
        "ncat",
        "netcat",
        "telnet",
        "ping",
        "ping6",
        "dig",
        "nslookup",
        "host",
        "ftp",
        "tftp",
        "lftp",
        "smbclient",
        "mosh",
        "traceroute",
        "whois",
    }
)
_SSH_TOOLS = frozenset({"ssh", "scp", "sftp", "autossh", "sshpass", "rsync"})
_VALUED = {
    "curl": frozenset(
        {
            "-o",
            "-d",
            "-H",
            "-u",
            "-X",
            "-F",
            "-A",
            "-e",
            "-T",
            "-x",
            "-b",
            "-c",
            "-w",
            "-m",
            "-K",
            "--data",
            "--data-binary",
            "--data-raw",
            "--header",
            "--user",
            "--request",
            "--output",
            "--form",
            "--proxy",
            "--upload-file",
            "--max-time",
            "--connect-timeout",
            "--retry",
        }
    ),
    "wget": frozenset(
        {"-O", "-o", "-P", "-U", "-e", "--header", "--post-data", "--post-file", "--output-document"}
    ),
    "nc": frozenset({"-p", "-s", "-w", "-i", "-q", "-X", "-x", "-e", "-c"}),
    "ping": frozenset({"-c", "-i", "-W", "-w", "-s", "-p", "-I", "-t"}),
    "ssh": frozenset({f"-{c}" for c in "BbcDEeFIiJLlmOoPpQRSWw"}),
}
_UPLOADS = {
    "npm": {"publish"},
    "yarn": {"publish"},
    "pnpm": {"publish"},
    "twine": {"upload"},
    "cargo": {"publish"},
    "gem": {"push"},
    "docker": {"push"},
    "podman": {"push"},
    "poetry": {"publish"},
    "uv": {"publish"},
}
_REGISTRY_VERBS = {
    "pip": {"install", "download", "wheel"},
    "pip3": {"install", "download", "wheel"},
    "uv": {"pip", "sync", "add", "lock", "run", "tool"},
    "poetry": {"install", "add", "update", "lock"},
    "pipenv": {"install", "sync", "update"},
    "npm": {"install", "i", "ci", "add", "update", "exec", "audit", "outdated"},
    "npx": None,
    "pnpm": {"install", "i", "add", "update", "dlx"},
    "yarn": {"install", "add", "upgrade", "dlx"},
    "bun": {"install", "add", "x"},
    "cargo": {"build", "install", "fetch", "update", "run", "test"},
    "go": {"get", "install", "mod", "build", "run", "test"},
    "gem": {"install", "update"},
    "bundle": {"install", "update"},
    "composer": {"install", "require", "update"},
    "mvn": None,
    "gradle": None,
    "gradlew": None,
    "conda": {"install", "create", "update"},
    "mamba": {"install", "create", "update"},
}
_GIT_REMOTE = frozenset({"clone", "fetch", "pull", "push", "ls-remote", "submodule"})


def _operands(cmd: SimpleCommand) -> list[str]:
    valued = _VALUED.get(cmd.program, _VALUED["ssh"] if cmd.program in _SSH_TOOLS else frozenset())
    out: list[str] = []
    skip = False
    for arg in cmd.args:
        if skip:
            skip = False
        elif arg.startswith("-") and len(arg) > 1:
            skip = arg in valued
        else:
            out.append(arg)
    return out


def _hosts(cmd: SimpleCommand) -> list[str | None]:
    """Destinations a network command names; ``None`` for one computed at run time."""
    prog = cmd.program
    hosts: list[str | None] = []
    if prog in _URL_TOOLS:
        for arg in cmd.args:
            m = _URL.match(arg)
            if m:
                hosts.append(None if "$" in m.group(1) else m.group(1))
        if not hosts:
            for arg in _operands(cmd):
                if "$" in arg:
                    hosts.append(None)
                elif _HOSTLIKE.match(arg):
                    hosts.append(re.split(r"[:/]", arg, maxsplit=1)[0])
    elif prog in _HOST_TOOLS:
        ops = _operands(cmd)
        if not ops or "$" in ops[0]:
            hosts.append(None)
        else:
            url = _URL.match(ops[0])
            hosts.append(url.group(1) if url else ops[0].rpartition("@")[2])
    elif prog == "socat":
        for arg in cmd.args:
            m = re.match(r"^(?:TCP|TCP4|TCP6|UDP|UDP4|UDP6|OPENSSL|SSL|PROXY)[^:]*:([^:,]+)", arg, re.I)
            if m:
                hosts.append(None if "$" in m.group(1) else m.group(1))
    elif prog in _SSH_TOOLS:
        ops = _operands(cmd)
        remote = [
            o for o in ops if "@" in o or (":" in o and not o.startswith("/")) or o.startswith("rsync://")
        ]
        if prog in ("ssh", "autossh", "sshpass") and ops and not remote:
            remote = [ops[0]] if prog != "sshpass" else []
        for op in remote:
            m = _URL.match(op)
            host = m.group(1) if m else op.split("@", 1)[-1].split(":", 1)[0]
            hosts.append(None if "$" in host else host)
    return hosts


def _network(cmd: SimpleCommand, where: Where) -> Found | None:
    prog, args = cmd.program, cmd.args
    for _op, target in cmd.redirects:
        if target.startswith(("/dev/tcp/", "/dev/udp/")):
            host = target.split("/")[3] if target.count("/") >= 3 else ""
            if "$" in host or not where.host_allowed(host):
                return "confirm", f"opens a raw connection to {host or 'a computed host'}", _NET
    if prog == "git" and (_GIT_REMOTE | {"remote"}) & set(args):
        urls = [a for a in args if "://" in a or re.match(r"^[\w.\-]+@[\w.\-]+:", a)]
        sending = bool({"push", "remote"} & set(args))  # a new remote is where a later push goes
        for url in urls:
            m = _URL.match(url)
            host = m.group(1) if m else url.split("@", 1)[1].split(":", 1)[0]
            if "$" in host or not (where.host_allowed(host) or (where.registries and not sending)):
                return "confirm", f"git sends to {host}, which the run does not allow", _NET
        return ("allow", "git reaches its remote", _NET) if _GIT_REMOTE & set(args) else None
    verbs = _UPLOADS.get(prog)
    if verbs and verbs & set(args):
        return "confirm", f"{prog} publishes to a registry", _NET
    if prog in _REGISTRY_VERBS:
        wanted = _REGISTRY_VERBS[prog]
        if wanted is None or wanted & set(args[:2]) or (prog in ("yarn", "bun") and not args):
            for index in _index_hosts(args):  # pip install -i http://elsewhere/simple: not the registry
                known = where.registries and index in _REGISTRY_HOSTS
                if index is None or not (known or where.host_allowed(index)):
                    return (
                        "confirm",
                        f"{prog} installs from {index or 'a computed index'}, not its registry",
                        _NET,
                    )
            if where.registries:
                return "allow", f"{prog} reaches its package registry", _NET
            return "confirm", f"{prog} reaches its package registry", _NET
        return None
    if prog not in _URL_TOOLS | _HOST_TOOLS | _SSH_TOOLS | {"socat"}:
        return None
    hosts = _hosts(cmd)
    if prog == "rsync" and not hosts:
        return None  # a local copy
    if not hosts:
        return "confirm", f"{prog} reaches a destination that cannot be read from the command", _NET
    for named in hosts:
        if named is None:
            return "confirm", f"{prog} sends to a host computed at run time", _NET
        if not where.host_allowed(named):
            return "confirm", f"{prog} reaches {named}, which the run does not allow", _NET
    return "allow", f"{prog} reaches allowed hosts", _NET


_REGISTRY_HOSTS = frozenset(
    {"pypi.org", "test.pypi.org", "files.pythonhosted.org", "pypi.python.org", "registry.npmjs.org",
     "registry.yarnpkg.com", "crates.io", "index.crates.io", "proxy.golang.org", "rubygems.org",
     "repo.maven.apache.org", "repo1.maven.org", "conda.anaconda.org"}
)  # fmt: skip
"""The public registries package managers reach on their own: naming one is no change."""
_INDEX_OPTIONS = (
    "--index-url",
    "--extra-index-url",
    "--find-links",
    "--registry",
    "--default-index",
    "--index",
)
_INDEX_SHORT = ("-i", "-f")


def _index_hosts(args: list[str]) -> list[str | None]:
    """Hosts of package indexes named on the line (``pip -i URL``, ``npm --registry URL``)."""
    values: list[str] = []
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in _INDEX_OPTIONS:
            values.append(value if eq else args[i + 1] if i + 1 < len(args) else "")
        elif arg in _INDEX_SHORT and i + 1 < len(args):
            values.append(args[i + 1])
    hosts: list[str | None] = []
    for value in values:
        m = _URL.match(value)
        if m:
            hosts.append(None if "$" in m.group(1) else m.group(1))
    return hosts


# -- secrets ------------------------------------------------------------------------------

_SECRET_PATH = re.compile(
    r"(?:^|/)(?:\.ssh(?:/|$)|\.aws(?:/|$)|\.gnupg(?:/|$)|\.kube/config$|\.docker/config\.json$|\.netrc$"
    r"|\.git-credentials$|\.npmrc$|\.pypirc$|\.vault-token$|\.password-store(?:/|$)|\.config/gcloud(?:/|$)"
    r"|\.azure(?:/|$)|\.config/gh/hosts\.yml$|\.pgpass$|\.my\.cnf$|id_(?:rsa|dsa|ecdsa|ed25519)(?:\.pub)?$)"
    r"|^/etc/(?:shadow|gshadow|sudoers|ssh/ssh_host_)|^/proc/[^/]+/environ$|^/run/secrets(?:/|$)"
    r"|^/var/run/secrets(?:/|$)"
)


def _words_to_paths(cmd: SimpleCommand) -> list[str]:
    out = [t for _op, t in cmd.redirects if t]
    for arg in cmd.args:
        out.append(arg.lstrip("@<"))
        if "=" in arg:
            out.append(arg.split("=", 1)[1].lstrip("@<"))
    return out


def _secrets(cmd: SimpleCommand, where: Where) -> Found | None:
    if cmd.program in ("echo", "printf", "ssh-keygen", "ssh-keyscan", "mkdir", "chmod"):
        return None  # naming a path is not reading it (chmod 600 ~/.ssh/id_rsa is hygiene)
    for word in _words_to_paths(cmd):
        if "/" not in word and not word.startswith((".env", "id_", "~")):
            continue
        path = where.path(word)
        if path is None:
            continue
        if _SECRET_PATH.search(path):
            return "confirm", f"reads or touches credentials ({word})", _NONE
        base = posixpath.basename(path)
        if base.startswith(".env") and (
            path.startswith("~") or (path.startswith("/") and not where.inside(path))
        ):
            return "confirm", f"reads {word}, an environment file outside the working directory", _NONE
    return None


# -- configuration and the host -----------------------------------------------------------

_CONFIG_PATH = re.compile(
    r"^(?:~|/root|/home/[^/]+)/(?:\.bashrc|\.bash_profile|\.bash_login|\.bash_logout|\.profile|\.zshrc|\.zshenv|\.zprofile"
    r"|\.zlogin|\.kshrc|\.cshrc|\.tcshrc|\.inputrc|\.npmrc|\.yarnrc(?:\.yml)?|\.pip/pip\.conf|\.config/pip/"
    r"|\.pydistutils\.cfg|\.gitconfig|\.config/git/|\.ssh/|\.config/autostart/|\.config/systemd/"
    r"|\.local/bin/|\.bundle/config|\.gemrc|\.cargo/config|\.m2/settings\.xml|\.docker/config\.json"
    r"|\.condarc|\.curlrc|\.wgetrc|\.netrc)"
    r"|^/etc/(?:profile|bash\.bashrc|environment|pip\.conf|npmrc|cron|sudoers|ld\.so\.|hosts$|resolv\.conf"
    r"|ssh/|systemd/|apt/sources|yum\.repos\.d|pam\.d|security/|passwd|shadow|group)"
    r"|^/var/spool/cron"
)
_GIT_CONFIG_RUNS = re.compile(
    r"^(?:core\.(?:hookspath|sshcommand|fsmonitor|pager|editor|askpass|gitproxy)|alias\.|credential\."
    r"|url\..*\.insteadof|http\.proxy|https\.proxy|diff\..*\.command|filter\.|merge\..*\.driver|include\.)",
    re.I,
)
_PKG_CONFIG = {
    "npm": "config",
    "pnpm": "config",
    "yarn": "config",
    "pip": "config",
    "pip3": "config",
    "conda": "config",
}
_SERVICE_QUERIES = frozenset(
    {
        "status",
        "show",
        "cat",
        "is-active",
        "is-enabled",
        "is-failed",
        "list-units",
        "list-unit-files",
        "list-timers",
        "list-dependencies",
        "--version",
        "help",
    }
)
_PACKAGE_MANAGERS = frozenset(
    {"apt", "apt-get", "aptitude", "yum", "dnf", "microdnf", "zypper", "apk", "pacman", "snap"}
)
_HOST_TOOLS_ALWAYS = frozenset(
    {
        "useradd",
        "usermod",
        "groupadd",
        "adduser",
        "addgroup",
        "ufw",
        "iptables",
        "ip6tables",
        "nft",
        "sysctl",
        "modprobe",
        "rmmod",
        "insmod",
        "mount",
        "umount",
        "swapon",
        "swapoff",
        "hostnamectl",
        "timedatectl",
        "update-alternatives",
        "ldconfig",
        "a2ensite",
        "a2dissite",
        "a2enmod",
        "certbot",
        "crontab",
        "systemd-run",
        "loginctl",
        "setcap",
        "apachectl",
        "update-rc.d",
        "chkconfig",
        "launchctl",
        "dpkg",
        "rpm",
        "podman",
        "docker",
        "docker-compose",
        "nerdctl",
        "kubectl",
        "helm",
        "k3s",
        "minikube",
        "kind",
        "lxc",
        "virsh",
    }
)
_QUIET_DOCKER = frozenset({"--version", "version", "help", "--help"})


def _writes(cmd: SimpleCommand) -> list[str]:
    """Files and directories the command writes, as written on the line."""
    out = [t for op, t in cmd.redirects if ">" in op and t and not t.isdigit() and t != "-"]
    prog, args = cmd.program, cmd.args
    ops = [a for a in args if not a.startswith("-")]
    if prog == "tee":
        out += ops
    elif prog in ("cp", "mv", "install", "ln", "rsync") and len(ops) >= 2:
        target = next(
            (args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-t", "--target-directory")), None
        )
        out.append(target or ops[-1])
    elif prog in ("mkdir", "touch", "truncate", "rmdir", "chmod", "chown", "chgrp", "shred", "unlink"):
        out += ops[1:] if prog in ("chmod", "chown", "chgrp") else ops
    elif prog == "sed" and any(a.startswith("-i") or a == "--in-place" for a in args):
        out += ops[1:]
    elif prog == "dd":
        out += [a[3:] for a in args if a.startswith("of=")]
    elif prog in ("curl", "wget"):
        out += [
            args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-o", "-O", "--output", "--output-document")
        ]
    return out


def _config(cmd: SimpleCommand, where: Where) -> Found | None:
    prog, args = cmd.program, cmd.args
    if prog == "git" and "config" in args:
        rest = args[args.index("config") + 1 :]
        keys = [a for a in rest if not a.startswith("-")]
        if keys and _GIT_CONFIG_RUNS.match(keys[0]) and len(keys) > 1:
            return "confirm", f"git config {keys[0]} makes git run a command or change credentials", _NONE
        if {"--global", "--system"} & set(rest) and len(keys) > 1:
            return "confirm", "git config --global changes configuration outside the working directory", _NONE
        return None
    if _PKG_CONFIG.get(prog) in args[:1] and {"set", "edit", "delete"} & set(args[1:2]):
        return "confirm", f"{prog} config changes configuration outside the working directory", _NONE
    if prog in ("npm", "pnpm", "yarn") and args[:1] == ["set"]:
        return "confirm", f"{prog} set changes configuration outside the working directory", _NONE
    for target in _writes(cmd):
        if _ENV_FILE.search(target) and not _plain_env_edit(cmd, target):
            return (
                "confirm",
                f"writes {target} with content not shown on the line or with TETHER_ settings: an env "
                "file holds settings (store, tokens, keys) that tether and other tools read",
                _NONE,
            )
        path = where.path(target)
        if path is not None and _CONFIG_PATH.search(path) and not where.inside(path):
            return "confirm", f"changes {target}, configuration outside the working directory", _HOST
    return None


def _plain_env_edit(cmd: SimpleCommand, target: str) -> bool:
    """An edit of an env file whose content is on the line and sets no ``TETHER_*`` variable:
    ``echo PORT=8080 >> .env``, ``sed -i 's/DEBUG=true/DEBUG=false/' .env``, or a copy of the
    project's own template (``cp .env.example .env``). Content from elsewhere (a download, a
    file in /tmp, standard input) is not shown, so it is asked about."""
    if "TETHER_" in cmd.text.upper():
        return False
    prog = cmd.program
    if prog in ("echo", "printf") or (prog == "sed" and target in cmd.args):
        return not any(op in ("<", "<<<", "<>") for op, _t in cmd.redirects)
    if prog in ("cp", "install"):
        sources = [a for a in cmd.args if not a.startswith("-")][:-1]
        return bool(sources) and all(
            not s.startswith(("/", "~", "$", "..")) and "/../" not in s for s in sources
        )
    return False


_ENV_FILE = re.compile(r"(?:^|/)(?:\.env(?:\.[^/]*)?|[^/]*\.env)$")
"""``.env``, ``.env.local``, ``prod.env``: files of settings read by tools and frameworks."""


def _host(cmd: SimpleCommand, where: Where) -> Found | None:
    prog, args = cmd.program, cmd.args
    if {"sudo", "doas", "pkexec", "runuser", "chroot", "nsenter"} & set(cmd.wrappers) or prog == "su":
        return "allow", "runs as another user", _HOST
    if prog in ("systemctl", "service", "rc-service", "initctl"):
        if _SERVICE_QUERIES & set(args) or not args:
            return None
        return "allow", f"{prog} manages the host's services", _HOST
    if prog in _PACKAGE_MANAGERS and not {"list", "show", "search", "info", "policy", "--version"} & set(
        args[:2]
    ):
        return "allow", f"{prog} changes the host's packages", _HOST
    if prog in _HOST_TOOLS_ALWAYS and not (_QUIET_DOCKER & set(args[:1])):
        return "allow", f"{prog} changes the host or talks to its daemons", _HOST
    if prog in ("npm", "pnpm", "yarn") and {"-g", "--global", "global"} & set(args):
        return "allow", f"{prog} installs globally", _HOST
    if prog in ("pip", "pip3") and "--user" in args:
        return "allow", "pip --user installs outside the working directory", _HOST
    if prog in ("nginx", "apache2") and "-s" in args:
        return "allow", f"{prog} signals the running server", _HOST
    for target in _writes(cmd):
        path = where.path(target)
        if path is None or path.startswith(("/dev/null", "/dev/std", "/dev/fd/", "/proc/self/fd/")):
            continue
        if path.startswith(("/", "~")) and not where.inside(path):
            return "allow", f"writes {target}, outside the working directory", _HOST
    return None


RISK_RULES = {"network": _network, "secret-read": _secrets, "config-write": _config, "host-change": _host}
