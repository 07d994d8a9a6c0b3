# SPDX-License-Identifier: Apache-2.0
"""The proxy workloads' backend (users.py): a small asyncio HTTP/1.1
server on 127.0.0.1:PORT that answers every GET after a delay drawn
uniformly from DELAY_MS, keep-alive unless the request says
Connection: close. `python3 -m bucketbench.slow_backend PORT PROCESSES`:
PROCESSES processes share the port through SO_REUSEPORT, so that the
backend is not held to one core.

It parses only what the proxies send: a request line, headers, no body."""

import asyncio
import os
import random
import socket
import sys

DELAY_MS = (10, 50)
BODY = b"backend answered\n"
RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
            b"Content-Length: " + str(len(BODY)).encode() + b"\r\n")


class _Connection(asyncio.Protocol):
    def __init__(self):
        self.transport = None
        self.buffer = b""
        self.closing = False

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            close = b"connection: close" in head.lower()
            delay = random.uniform(*DELAY_MS) / 1000
            asyncio.get_running_loop().call_later(delay, self._answer,
                                                  close)

    def _answer(self, close):
        if self.transport.is_closing():
            return
        self.transport.write(RESPONSE + (b"Connection: close\r\n\r\n"
                                         if close else b"\r\n") + BODY)
        if close:
            self.transport.close()


async def _serve(port):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(4096)
    server = await asyncio.get_running_loop().create_server(
        _Connection, sock=listener)
    async with server:
        await server.serve_forever()


def main(argv):
    port, processes = int(argv[0]), int(argv[1])
    for _ in range(processes - 1):
        if os.fork() == 0:
            break
    asyncio.run(_serve(port))


if __name__ == "__main__":
    main(sys.argv[1:])
