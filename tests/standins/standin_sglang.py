"""Stand-in for `python -m sglang.launch_server` in process-control tests (no SGLang, no GPU).

Accepts SGLang's argv (only --host/--port are read) and behaves per STANDIN_MODE:
  healthy    SGLang-like startup log lines, then /health answers 200
  crash      a few log lines and a traceback, then exit 3 (a bad model, an OOM...)
  never      HTTP up, /health answers 503 forever
  child      like healthy, plus a grandchild process in the same group (SGLang's schedulers)
  stubborn   like child, but every process ignores SIGTERM (SIGKILL must end it)
  no_health  /health is 404 (an old or odd release); /v1/models answers 200
STANDIN_PIDFILE, if set, receives "pid child_pid" once started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler

from httpd import Httpd  # this folder: the script is run as a file


def arg(name: str, default: str) -> str:
    argv = sys.argv[1:]
    return argv[argv.index(name) + 1] if name in argv else default


MODE = os.environ.get("STANDIN_MODE", "healthy")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        if self.path == "/health":
            code = {"never": 503, "no_health": 404}.get(MODE, 200)
        elif self.path == "/v1/models":
            code = 200 if MODE != "never" else 503
        else:
            code = 404
        self.send_response(code)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args) -> None:
        pass


def say(line: str) -> None:
    print(line, flush=True)


def main() -> int:
    host, port = arg("--host", "127.0.0.1"), int(arg("--port", "30000"))
    say(f"[standin] argv: {' '.join(sys.argv[1:])}")
    say("Init torch distributed begin.")
    say("Load weight begin. avail mem=10.00 GB")
    time.sleep(0.2)
    if MODE == "crash":
        say("Traceback (most recent call last):")
        say('  File "model_runner.py", line 1, in load_model')
        say("RuntimeError: standin crash while loading weights")
        return 3
    if MODE == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = None
    if MODE in ("child", "stubborn"):
        code = ("import signal, time\n"
                + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if MODE == "stubborn" else "")
                + "time.sleep(600)\n")
        child = subprocess.Popen([sys.executable, "-c", code])
    say("Load weight end. type=LlamaForCausalLM")
    say("KV Cache is allocated. #tokens: 2048")
    say("Capture cuda graph begin. This can take up to several minutes.")
    say("Capture cuda graph end. Time elapsed: 0.01 s.")
    httpd = Httpd((host, port), Handler)
    if os.environ.get("STANDIN_PIDFILE"):
        with open(os.environ["STANDIN_PIDFILE"], "w") as f:
            f.write(f"{os.getpid()} {child.pid if child else 0}\n")
    say(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    say("The server is fired up and ready to roll!")
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
