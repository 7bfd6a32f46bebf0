"""Replay a generated session through a real shell: each program the script calls is a
small shim on the session's PATH that prints the output planted for its exact arguments
(in order, when the same command runs twice) and exits with the planted status."""

from __future__ import annotations

import hashlib
import os
import shlex
from pathlib import Path

from tether.context.sessions import GeneratedSession

SHIM = """#!/bin/sh
k=$(printf '%s\\n' "$(basename "$0")" "$@" | md5sum | cut -c1-32)
d="$REPLAY_DIR/$k"
[ -d "$d" ] || exit 0
n=$(cat "$d/next" 2>/dev/null || echo 1)
[ -f "$d/$n.out" ] || n=$(($n - 1))
echo $(($n + 1)) > "$d/next"
cat "$d/$n.out"
exit $(cat "$d/$n.rc")
"""


def _key(argv: list[str]) -> str:
    text = "".join(f"{a}\n" for a in [os.path.basename(argv[0]), *argv[1:]])
    return hashlib.md5(text.encode()).hexdigest()


def install(session: GeneratedSession, root: Path) -> dict[str, str]:
    """Write the shims and the planted outputs under ``root``; the session's environment."""
    bin_dir, data = root / "bin", root / "replay"
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "_replay"
    shim.write_text(SHIM)
    shim.chmod(0o755)
    counts: dict[str, int] = {}
    for op in session.ops:
        if op.kind != "run":
            continue
        parts = op.command.split(" && ")
        for k, part in enumerate(parts):
            argv = shlex.split(part)
            link = bin_dir / os.path.basename(argv[0])
            if not link.exists():
                link.symlink_to(shim)
            if k < len(parts) - 1:
                continue  # the output belongs to the command's last program
            key = _key(argv)
            n = counts[key] = counts.get(key, 0) + 1
            target = data / key
            target.mkdir(parents=True, exist_ok=True)
            (target / f"{n}.out").write_text(op.output + ("\n" if op.output else ""))
            (target / f"{n}.rc").write_text(str(op.exit_code))
    return {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "REPLAY_DIR": str(data)}
