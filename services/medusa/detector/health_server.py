"""The detector's small HTTP face: ``/health`` for start-up ordering, ``/nodes`` for people."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from medusa.detector.service import FailureDetector


def view(detector: FailureDetector) -> dict[str, Any]:
    now = time.monotonic()
    return {
        "policy": detector.config.policy,
        "acceptable_pause_s": detector.config.acceptable_pause_s,
        "heartbeat_interval_s": detector.config.interval_s,
        "watched": {name: {"incarnation": w.incarnation, "health": w.health.value,
                           "suspicion": round(w.policy.suspicion(now), 3),
                           "heartbeats": w.heartbeats, "gaps": w.gaps.summary()}
                    for name, w in list(detector.watched.items())},
        "failed": dict(detector.failed),
        "false_suspicions": detector.state.false_suspicions,
        "local_pauses": detector.state.local_pauses,
    }


def serve(detector: FailureDetector, host: str, port: int) -> ThreadingHTTPServer:
    """Answers on a daemon thread until the process ends."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                body: dict[str, Any] = {"status": "ok", "watched": len(detector.watched)}
            elif self.path == "/nodes":
                body = view(detector)
            else:
                self.send_error(404, "try /health or /nodes")
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:  # health probes would flood the log
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="detector-http", daemon=True).start()
    return server
