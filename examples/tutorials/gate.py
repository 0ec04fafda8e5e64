"""The readiness endpoint of the workflow tutorial (docs/tutorials/workflow.md).

``python gate.py`` serves http://127.0.0.1:8765/ready: ``200 open`` while a file named
``shop-open`` exists in the current directory, ``503 closed`` otherwise. ``touch
shop-open`` opens the gate, ``rm shop-open`` closes it.
"""

from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

FLAG = Path("shop-open")


class Ready(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, text = (200, b"open") if FLAG.exists() else (503, b"closed")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)


if __name__ == "__main__":
    HTTPServer(("127.0.0.1", 8765), Ready).serve_forever()
