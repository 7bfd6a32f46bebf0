"""Secrets planted in the environment never reach the console of ``tether --debug``.

A subprocess wires logging exactly as the ``tether`` command does with ``--debug`` (the
command's own callback: redaction first, then ``basicConfig`` at DEBUG, then a filter on the
root handlers), then makes libraries log at DEBUG with a planted secret in URLs, headers,
bodies, cookies, bytes, a record built by hand, a warning and an exception: none of it may
appear on stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SECRET = "sk-live-PLANTED0123456789abcdef0123"
SCRIPT = r"""
import asyncio, http.server, logging, socketserver, sys, threading, urllib.request, warnings
SECRET = sys.argv[1]
from tether.cli.app import app
app(["--debug", "keygen"], standalone_mode=False)   # the command's own logging wiring
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200); self.send_header("Set-Cookie", "s=" + SECRET); self.end_headers()
        self.wfile.write(SECRET.encode())
    def log_message(self, fmt, *args):
        logging.getLogger("planted.server").debug("request %s %s", self.requestline, dict(self.headers))
srv = socketserver.TCPServer(("127.0.0.1", 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
base = "http://127.0.0.1:%d" % srv.server_address[1]
import httpx
httpx.post(base + "/a?key=" + SECRET, headers={"Authorization": "Bearer " + SECRET}, json={"k": SECRET})
async def go():
    async with httpx.AsyncClient() as c:
        await c.post(base + "/b?api_key=" + SECRET, headers={"x-api-key": SECRET})
asyncio.run(go())
urllib.request.urlopen(urllib.request.Request(base + "/c?token=" + SECRET, data=b"{}")).read()
log = logging.getLogger("planted")
log.debug("headers %r", {"Authorization": "Bearer " + SECRET})
log.debug("bytes %r", SECRET.encode())
log.info("inline " + SECRET)
logging.getLogger("planted.direct").handle(
    logging.LogRecord("planted.direct", logging.DEBUG, "x.py", 1, "by hand %s", (SECRET,), None)
)
logging.captureWarnings(True)
warnings.warn("warned " + SECRET)
try:
    raise RuntimeError("failed with " + SECRET)
except RuntimeError:
    log.exception("exception")
print("done")
"""


def test_no_planted_secret_reaches_the_debug_console(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["OPENAI_API_KEY"] = SECRET  # a secret the process knows from its environment
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, SECRET],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("done")
    logged = out.stderr
    assert logged.count("DEBUG") >= 8, logged[:2000]  # the libraries did log at DEBUG
    assert "planted.direct" in logged and "RuntimeError" in logged
    leaks = [line for line in logged.splitlines() if SECRET in line or SECRET[8:24] in line]
    assert leaks == []
