"""An HTTP/3 client for the end-to-end tests (tests/tests/http3.rs), on aioquic from PyPI.

    client.py HOST PORT CA_PEM SNI PLAN_JSON

PLAN_JSON is an object:
  {"requests": [{"method", "path", "headers": {..}, "body_bytes": N | "body": "text"}, ...],
   "then_wait": seconds, "requests_after": [...], "early_data": bool}
With "early_data", a first connection takes a session ticket and `requests` go in the first
flight (0-RTT) of a second; the report says whether the server accepted the early data.
Every request of `requests` goes at once, each on its own stream of one connection; after
`then_wait` seconds of silence, `requests_after` go on the same connection. Prints one JSON
object: per request its status, headers, body length, SHA-256, text (when short), the seconds
from sending to the first and the last byte of the body, or the error that ended it; and
whether and when the connection was closed by the server.
"""

import asyncio
import hashlib
import json
import ssl
import sys
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset


class Exchange:
    def __init__(self):
        self.started = time.monotonic()
        self.status = None
        self.headers = []
        self.body = bytearray()
        self.first = None
        self.last = None
        self.error = None
        self.done = asyncio.get_running_loop().create_future()

    def finish(self, error=None):
        if error is not None and self.error is None:
            self.error = error
        if not self.done.done():
            self.done.set_result(None)

    def report(self):
        text = None
        if len(self.body) <= 65536:
            text = self.body.decode("utf-8", "replace")
        echo_sha256 = None
        try:
            echo_sha256 = hashlib.sha256(json.loads(bytes(self.body))["body"].encode()).hexdigest()
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        return {
            "echo_body_sha256": echo_sha256,
            "status": self.status,
            "headers": self.headers,
            "body_len": len(self.body),
            "body_sha256": hashlib.sha256(self.body).hexdigest(),
            "text": text,
            "first_byte_s": None if self.first is None else self.first - self.started,
            "last_byte_s": None if self.last is None else self.last - self.started,
            "error": self.error,
        }


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.exchanges = {}
        self.terminated = None
        self.opened = time.monotonic()

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.terminated = {
                "after_s": time.monotonic() - self.opened,
                "error_code": event.error_code,
                "reason": event.reason_phrase,
            }
            for exchange in self.exchanges.values():
                exchange.finish("connection terminated")
        if isinstance(event, StreamReset) and event.stream_id in self.exchanges:
            self.exchanges[event.stream_id].finish(f"stream reset {event.error_code}")
        for h3_event in self.h3.handle_event(event):
            exchange = self.exchanges.get(getattr(h3_event, "stream_id", None))
            if exchange is None:
                continue
            if isinstance(h3_event, HeadersReceived):
                if exchange.status is None:
                    fields = [(k.decode(), v.decode()) for k, v in h3_event.headers]
                    exchange.status = int(dict(fields)[":status"])
                    exchange.headers = [[k, v] for k, v in fields if not k.startswith(":")]
                if h3_event.stream_ended:
                    exchange.finish()
            elif isinstance(h3_event, DataReceived):
                if h3_event.data:
                    now = time.monotonic()
                    exchange.first = exchange.first or now
                    exchange.last = now
                    exchange.body.extend(h3_event.data)
                if h3_event.stream_ended:
                    exchange.finish()

    def send(self, spec, authority):
        exchange = Exchange()
        stream_id = self._quic.get_next_available_stream_id()
        self.exchanges[stream_id] = exchange
        body = spec.get("body", "").encode()
        if "body_bytes" in spec:
            # Printable, and not one byte repeated, so a reordering would show.
            body = bytes(33 + (i * 7 + i // 251) % 90 for i in range(spec["body_bytes"]))
        headers = [
            (b":method", spec.get("method", "GET").encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", spec["path"].encode()),
        ]
        for name, value in spec.get("headers", {}).items():
            headers.append((name.lower().encode(), value.encode()))
        if body:
            headers.append((b"content-length", str(len(body)).encode()))
        exchange.sent_sha256 = hashlib.sha256(body).hexdigest()
        self.h3.send_headers(stream_id, headers, end_stream=not body)
        if body:
            self.h3.send_data(stream_id, body, end_stream=True)
        self.transmit()
        return exchange


async def run_all(client, specs, authority, limit):
    exchanges = [client.send(spec, authority) for spec in specs]
    try:
        await asyncio.wait_for(asyncio.gather(*(e.done for e in exchanges)), limit)
    except asyncio.TimeoutError:
        for exchange in exchanges:
            exchange.finish("timed out")
    reports = []
    for exchange in exchanges:
        report = exchange.report()
        report["sent_sha256"] = exchange.sent_sha256
        reports.append(report)
    return reports


async def main():
    host, port, ca, sni, plan = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
    configuration = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=sni)
    configuration.load_verify_locations(ca)
    configuration.verify_mode = ssl.CERT_REQUIRED
    configuration.idle_timeout = plan.get("client_idle_timeout", 60.0)
    configuration.max_data = 64 * 1024 * 1024
    configuration.max_stream_data = 16 * 1024 * 1024
    limit = plan.get("limit", 30.0)
    out = {}
    if plan.get("early_data"):
        # A first connection for a session ticket, then a second that sends `requests`
        # in its first flight (0-RTT), before the handshake completes.
        tickets = []
        async with connect(
            host, port, configuration=configuration, create_protocol=Client, session_ticket_handler=tickets.append
        ) as client:
            await run_all(client, [{"path": plan.get("ticket_path", "/")}], sni, limit)
            await asyncio.sleep(0.2)
        out["ticket"] = bool(tickets)
        out["ticket_allows_early_data"] = bool(tickets) and tickets[-1].max_early_data_size is not None
        if tickets:
            configuration.session_ticket = tickets[-1]
        async with connect(
            host, port, configuration=configuration, create_protocol=Client, wait_connected=False
        ) as client:
            out["results"] = await run_all(client, plan.get("requests", []), sni, limit)
            out["session_resumed"] = client._quic.tls.session_resumed
            out["early_data_accepted"] = client._quic.tls.early_data_accepted
        print(json.dumps(out))
        return
    async with connect(host, port, configuration=configuration, create_protocol=Client) as client:
        out["alpn"] = client._quic.tls.alpn_negotiated
        out["results"] = await run_all(client, plan.get("requests", []), sni, limit)
        if "then_wait" in plan:
            await asyncio.sleep(plan["then_wait"])
            out["terminated_before_after"] = client.terminated
            out["results_after"] = await run_all(client, plan.get("requests_after", []), sni, plan.get("limit_after", 5.0))
        out["terminated"] = client.terminated
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
