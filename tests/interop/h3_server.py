"""An HTTP/3 server on aioquic (PyPI) for switchyard's interop tests.

Usage: h3_server.py CERT_PEM KEY_PEM [PORT]. Binds 127.0.0.1 (port 0 picks
one), prints "ready PORT" once listening, and answers on every request stream:

  GET /bytes/N        N bytes of 'x' (content-length N)
  POST /echo          the request body back, with x-received: its length
  GET /status/N       status N, empty body
  GET /close          200, then the connection closed (H3_NO_ERROR)
  HEAD /bad/...       content on a HEAD answer (malformed: the client must refuse it)
  GET /goaway         GOAWAY naming the stream after this one (it and every later
                      stream go unanswered), then 200 "last"
  anything else       200 "hello" with alt-svc and x-path headers
"""

import asyncio
import sys

from aioquic.asyncio import serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import H3_ALPN, FrameType, H3Connection, encode_frame
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ProtocolNegotiated


class Handler(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = None
        self.requests = {}
        self.goaway = None  # streams from this id on are not processed

    def quic_event_received(self, event):
        if isinstance(event, ProtocolNegotiated) and event.alpn_protocol in H3_ALPN:
            self.h3 = H3Connection(self._quic)
        if self.h3 is None:
            return
        for ev in self.h3.handle_event(event):
            if isinstance(ev, HeadersReceived):
                self.requests[ev.stream_id] = (dict(ev.headers), bytearray())
                if ev.stream_ended:
                    self.answer(ev.stream_id)
            elif isinstance(ev, DataReceived) and ev.stream_id in self.requests:
                self.requests[ev.stream_id][1].extend(ev.data)
                if ev.stream_ended:
                    self.answer(ev.stream_id)

    def answer(self, stream_id):
        headers, body = self.requests.pop(stream_id)
        if self.goaway is not None and stream_id >= self.goaway:
            return  # not processed: the client must retry it elsewhere
        path = headers.get(b":path", b"/").decode()
        if path == "/goaway":
            self.goaway = stream_id + 4
            control = self.h3._local_control_stream_id
            self._quic.send_stream_data(control, encode_frame(FrameType.GOAWAY, encode_uint_var(self.goaway)))
            self.h3.send_headers(stream_id, [(b":status", b"200"), (b"content-length", b"4")])
            self.h3.send_data(stream_id, b"last", end_stream=True)
            self.transmit()
            return
        status, extra, out = 200, [], b"hello"
        if path.startswith("/bytes/"):
            out = b"x" * int(path[len("/bytes/"):])
        elif path == "/echo":
            out, extra = bytes(body), [(b"x-received", str(len(body)).encode())]
        elif path.startswith("/status/"):
            status, out = int(path[len("/status/"):]), b""
        else:
            extra = [(b"alt-svc", b'h3=":443"; ma=60'), (b"x-path", path.encode())]
        self.h3.send_headers(
            stream_id,
            [(b":status", str(status).encode()), (b"content-length", str(len(out)).encode())] + extra,
        )
        method = headers.get(b":method", b"GET")
        if method == b"HEAD" and not path.startswith("/bad/"):
            out = b""  # a HEAD answer carries the length a GET would get, not the content
        self.h3.send_data(stream_id, out, end_stream=True)
        if path == "/close":
            self._quic.close(error_code=0x100, reason_phrase="close asked")
        self.transmit()


async def main():
    cert, key = sys.argv[1], sys.argv[2]
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    config = QuicConfiguration(alpn_protocols=H3_ALPN, is_client=False, max_datagram_frame_size=65536)
    config.load_cert_chain(cert, key)
    server = await serve("127.0.0.1", port, configuration=config, create_protocol=Handler)
    print("ready", server._transport.get_extra_info("sockname")[1], flush=True)
    await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main())
