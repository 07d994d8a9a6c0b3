# SPDX-License-Identifier: Apache-2.0
"""An HTTP/2 client that counts what it loses (the h2 package, Debian's
python3-h2), for tests and workloads that restart or move a server's
children under HTTP/2 load.

h2load cannot tell a lost request from one the server never took: it
never reconnects after a GOAWAY, and counts as failed every stream the
server refused, above the GOAWAY's last-stream-id or reset with
REFUSED_STREAM. RFC 9113 (6.8, 8.7) says such a stream was not processed
and may be sent again. This client does what a browser does: it sends
them again on a new connection, and counts as lost only a stream the
server took (at or below the last-stream-id, or with no GOAWAY at all)
and did not answer in full."""

import socket
import ssl
import threading
import time

import h2.config
import h2.connection
from h2.connection import ConnectionState
import h2.errors
import h2.events
import h2.exceptions

from .clients import ClientThreads, wall_clock
from .net import HTTP_TIMEOUT, LOOPBACK

# The highest stream id: a GOAWAY naming it is a shutdown notice (RFC
# 9113 6.8), the final one follows.
NOTICE_LAST_STREAM = 2 ** 31 - 1


def tls_context():
    """A client context offering only h2 (ALPN), trusting any
    certificate: the servers under test have self-signed ones."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    return context


class H2StreamClients(ClientThreads):
    """`threads` connections, each keeping `streams` GETs of get = (path,
    expected body) in flight, until stop() or `seconds` pass; over TLS
    with context (tls_context()), else h2c with prior knowledge.

    Counted: `sent` streams, `answered` (200 and the body), `refused`
    (not taken by the server, sent again), `lost` (taken and not
    answered: a reset other than REFUSED_STREAM, or the connection closed
    under it), `goaways` received, `connections` opened. Each lost stream
    is also a failure in `result`, with the time of day, and counted in
    `lost_from` under the client port of its connection, which the
    server's error log names."""

    def __init__(self, ports, get, threads=4, streams=10, seconds=60,
                 context=None):
        super().__init__(ports, count=10 ** 9, threads=threads,
                         seconds=seconds)
        self.get = get
        self.streams = streams
        self.context = context
        self._lock = threading.Lock()
        self.sent = self.answered = self.refused = self.lost = 0
        self.goaways = self.connections = 0
        self.lost_from = {}

    def counts(self):
        with self._lock:
            return {"sent": self.sent, "answered": self.answered,
                    "refused": self.refused, "lost": self.lost,
                    "goaways": self.goaways,
                    "connections": self.connections,
                    "lost_from": dict(self.lost_from),
                    "first_errors": list(self.result.errors)}

    def _add(self, name, n=1):
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def _lose(self, port, client_port, stream_ids, why):
        with self._lock:
            self.lost += len(stream_ids)
            if stream_ids:
                self.lost_from[client_port] = (
                    self.lost_from.get(client_port, 0) + len(stream_ids))
        for stream_id in stream_ids:
            self.result.record(f"{wall_clock()} port {port} from "
                               f"{client_port}: stream {stream_id} {why}")

    def _connect(self, port):
        sock = socket.create_connection((LOOPBACK, port),
                                        timeout=HTTP_TIMEOUT)
        if self.context is not None:
            sock = self.context.wrap_socket(sock, server_hostname="localhost")
            if sock.selected_alpn_protocol() != "h2":
                sock.close()
                raise AssertionError("the server did not negotiate h2")
        self._add("connections")
        return sock

    def _work(self, deadline):
        port = self.ports[next(self._tickets) % len(self.ports)]
        while time.monotonic() < deadline and not self._stop.is_set():
            try:
                sock = self._connect(port)
            except OSError as e:
                self.result.record(f"{wall_clock()} port {port}: connect: "
                                   f"{e!r}")
                continue
            try:
                _Connection(self, sock, port, deadline).run()
            finally:
                sock.close()


class _Connection:
    """One connection of H2StreamClients: streams sent, answers read,
    until the server ends it or the clients stop."""

    def __init__(self, clients, sock, port, deadline):
        self.clients = clients
        self.sock = sock
        self.port = port
        self.client_port = sock.getsockname()[1]
        self.deadline = deadline
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        self.open = {}            # stream id -> [status, body]
        self.last_stream = None   # the last GOAWAY's last-stream-id
        self.unread = b""         # received, not yet a whole frame
        path = clients.get[0]
        self.headers = [(":method", "GET"), (":path", path),
                        (":scheme", "https" if clients.context else "http"),
                        (":authority", "localhost")]

    def _may_send(self):
        return (self.last_stream is None and not self.clients._stop.is_set()
                and time.monotonic() < self.deadline)

    def _flush(self):
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def run(self):
        self.h2.initiate_connection()
        try:
            while True:
                while self._may_send() and len(self.open) < self.clients.streams:
                    stream_id = self.h2.get_next_available_stream_id()
                    self.h2.send_headers(stream_id, self.headers,
                                         end_stream=True)
                    self.open[stream_id] = [None, b""]
                    self.clients._add("sent")
                self._flush()
                if not self.open and not self._may_send():
                    return
                data = self.sock.recv(65536)
                if not data:
                    self._closed("closed by the server")
                    return
                self._receive(data)
                self._flush()
        except (OSError, h2.exceptions.ProtocolError) as e:
            self._closed(f"connection failed: {e!r}")

    def _receive(self, data):
        """Hands h2 one whole frame at a time. h2 closes its side on a
        GOAWAY and then refuses every frame, though the server still
        answers the streams at or below the last-stream-id (RFC 9113
        6.8): after one, its state is set back to open, and this client
        starts no stream on it."""
        self.unread += data
        while len(self.unread) >= 9:
            size = 9 + int.from_bytes(self.unread[:3], "big")
            if len(self.unread) < size:
                return
            frame, self.unread = self.unread[:size], self.unread[size:]
            for event in self.h2.receive_data(frame):
                self._on(event)
            if self.last_stream is not None:
                self.h2.state_machine.state = ConnectionState.CLIENT_OPEN

    def _on(self, event):
        if isinstance(event, h2.events.ResponseReceived):
            self.open[event.stream_id][0] = dict(event.headers).get(":status")
        elif isinstance(event, h2.events.DataReceived):
            self.open[event.stream_id][1] += event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length,
                                              event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            status, body = self.open.pop(event.stream_id)
            if status == "200" and body == self.clients.get[1]:
                self.clients._add("answered")
            else:
                self._lose([event.stream_id],
                           f"answered {status}, {body[:80]!r}")
        elif isinstance(event, h2.events.StreamReset):
            self.open.pop(event.stream_id, None)
            if event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM:
                self.clients._add("refused")
            else:
                self._lose([event.stream_id],
                           f"reset ({event.error_code!r})")
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.clients._add("goaways")
            self.last_stream = event.last_stream_id
            self._refuse_above(event.last_stream_id)

    def _lose(self, stream_ids, why):
        self.clients._lose(self.port, self.client_port, stream_ids, why)

    def _refuse_above(self, last_stream):
        """Streams above a GOAWAY's last-stream-id were not processed."""
        for stream_id in [s for s in self.open if s > last_stream]:
            del self.open[stream_id]
            self.clients._add("refused")

    def _closed(self, why):
        """The connection ended: a stream still open was taken by the
        server (at or below the last-stream-id, or no GOAWAY) and lost."""
        if self.last_stream is not None:
            self._refuse_above(self.last_stream)
        self._lose(sorted(self.open),
                   why + (f" after GOAWAY (last stream {self.last_stream})"
                          if self.last_stream is not None
                          else " without GOAWAY"))
        self.open.clear()
