"""Real OTLP/HTTP collectors for the tests, on 127.0.0.1: one that takes what it is sent
(and keeps each request's path, headers and spans), one that always answers 503, one that
accepts connections and never answers, and an address where nothing listens."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from steadystream._processes import free_port

Behaviour = Literal["takes", "unavailable", "silent", "refused"]


@dataclass(frozen=True)
class Received:
    """One export request as the collector got it."""

    path: str
    headers: dict[str, str]
    spans: int  # spans in it (traces), 0 for metrics


@dataclass
class Collector:
    """A collector at ``url`` that behaves as told; a context manager."""

    behaviour: Behaviour
    received: list[Received] = field(default_factory=list)
    url: str = ""
    _server: ThreadingHTTPServer | None = None
    _silent: socket.socket | None = None
    _held: list[socket.socket] = field(default_factory=list)

    def __enter__(self) -> Collector:
        if self.behaviour == "refused":
            self.url = f"http://127.0.0.1:{free_port()}"  # free a moment ago: nothing there
        elif self.behaviour == "silent":
            self._silent = socket.create_server(("127.0.0.1", 0))
            self.url = f"http://127.0.0.1:{self._silent.getsockname()[1]}"
            threading.Thread(target=self._hold, daemon=True).start()
        else:
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
            self._server.daemon_threads = True
            self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
            threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._silent is not None:
            self._silent.close()
        for peer in self._held:
            peer.close()

    def spans(self) -> int:
        return sum(r.spans for r in self.received)

    def _hold(self) -> None:
        assert self._silent is not None
        while True:
            try:
                peer, _ = self._silent.accept()
            except OSError:
                return
            self._held.append(peer)  # read nothing, answer nothing

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if collector.behaviour == "unavailable":
                    self._answer(503, b"")
                    return
                spans = 0
                if self.path.endswith("/v1/traces"):
                    request = ExportTraceServiceRequest.FromString(body)
                    spans = sum(
                        len(scope.spans)
                        for resource in request.resource_spans
                        for scope in resource.scope_spans
                    )
                    answer = ExportTraceServiceResponse().SerializeToString()
                else:
                    answer = ExportMetricsServiceResponse().SerializeToString()
                headers = {name.lower(): value for name, value in self.headers.items()}
                collector.received.append(Received(self.path, headers, spans))
                self._answer(200, answer)

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the tests read stderr

        return Handler
