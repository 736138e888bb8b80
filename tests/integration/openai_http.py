"""Small HTTP/1.1 clients for the OpenAI-compatible front's tests, written so that a test controls
the bytes: a blocking one over a plain socket (exact request bytes, no retries, the response parsed
here) and an asyncio one for many concurrent SSE streams. Plus the SSE framing rules
(`data: {json}\\n\\n` events, `: comment` lines, `data: [DONE]` last) and the OpenAI client factory.

Nothing here knows how the server is written; it follows RFC 9112 (HTTP/1.1 message framing) and
the WHATWG server-sent-events format.
"""

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, field

import openai_schemas

TIMEOUT_S = 60


@dataclass
class Response:
    status: int
    reason: str
    headers: dict  # lower-case name -> value (repeated headers joined with ", ")
    body: bytes
    raw_head: bytes = b""

    def json(self):
        return json.loads(self.body)

    def text(self):
        return self.body.decode("utf-8")

    @property
    def content_type(self):
        return self.headers.get("content-type", "")

    def __repr__(self):
        body = self.body[:600]
        return f"<HTTP {self.status} {self.reason} {self.headers} {body!r}>"


def split_address(address):
    host, port = address.rsplit(":", 1)
    return host, int(port)


def build_request(method, path, body=None, headers=None, host="127.0.0.1"):
    """The bytes of one HTTP/1.1 request. `body`: bytes, str, or a JSON value (dict, list)."""
    if body is not None and not isinstance(body, (bytes, bytearray)):
        body = body.encode("utf-8") if isinstance(body, str) else json.dumps(body).encode("utf-8")
    h = {"Host": host, "Connection": "close"}
    if body is not None:
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode("latin-1") + (bytes(body) if body is not None else b"")


def _parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    assert len(parts) >= 2 and parts[0].startswith("HTTP/1."), f"bad status line {lines[0]!r}"
    status = int(parts[1])
    reason = parts[2] if len(parts) > 2 else ""
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return status, reason, headers


def _dechunk(data):
    """The payload of a complete chunked body (RFC 9112 section 7.1)."""
    out = bytearray()
    pos = 0
    while True:
        end = data.index(b"\r\n", pos)
        size = int(data[pos:end].split(b";")[0], 16)
        pos = end + 2
        if size == 0:
            return bytes(out)
        out += data[pos:pos + size]
        assert data[pos + size:pos + size + 2] == b"\r\n", "chunk not followed by CRLF"
        pos += size + 2


def parse_response(data):
    """A Response from the bytes of one whole response (the server closed after it)."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    assert sep, f"no end of headers in {data[:300]!r}"
    status, reason, headers = _parse_head(head)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _dechunk(rest)
    elif "content-length" in headers:
        n = int(headers["content-length"])
        assert len(rest) >= n, f"body cut short: {len(rest)} of {n} bytes"
        body = rest[:n]
    else:
        body = rest
    return Response(status, reason, headers, body, head)


def exchange(address, data, timeout=TIMEOUT_S):
    """Sends the raw request bytes `data` and returns the Response (the request asks the server to
    close after answering). The bytes are written from a second thread while this one reads, so a
    server that answers early (413 before the whole body arrived) and closes is still heard."""
    sock = socket.create_connection(split_address(address), timeout=timeout)
    send_error = []

    def send():
        try:
            sock.sendall(data)
        except OSError as e:  # the server may close while a refused body is still being sent
            send_error.append(e)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    chunks = []
    try:
        while True:
            try:
                b = sock.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            chunks.append(b)
    finally:
        sender.join(timeout)
        sock.close()
    data = b"".join(chunks)
    assert data, f"connection closed without a response (send error: {send_error})"
    return parse_response(data)


def call(address, method, path, body=None, headers=None, timeout=TIMEOUT_S):
    return exchange(address, build_request(method, path, body, headers), timeout)


def post(address, path, body, **kw):
    return call(address, "POST", path, body, **kw)


def get(address, path, **kw):
    return call(address, "GET", path, **kw)


# ---------------------------------------------------------------------------------------------
# Server-sent events


@dataclass
class Sse:
    data: list = field(default_factory=list)  # the `data` of each event, in order
    comments: int = 0  # `:` lines (keep-alive pings)
    problems: list = field(default_factory=list)  # framing departures from `data: X\n\n`


def parse_sse(text):
    """Splits an SSE body into events; lists any departure from the `data: {json}\\n\\n` framing
    the spec promises (other fields, multi-line events, CR line ends, a missing final blank line)."""
    out = Sse()
    if "\r" in text:
        out.problems.append("CR in the stream (events must end in \\n\\n)")
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text and not text.endswith("\n\n"):
        out.problems.append(f"stream does not end with a blank line: {text[-40:]!r}")
    for block in text.split("\n\n"):
        if not block:
            continue
        data_lines = []
        for line in block.split("\n"):
            if line.startswith(":"):
                out.comments += 1
            elif line.startswith("data: "):
                data_lines.append(line[len("data: "):])
            else:
                out.problems.append(f"unexpected line {line[:80]!r}")
        if len(data_lines) > 1:
            out.problems.append(f"event with {len(data_lines)} data lines")
        if data_lines:
            out.data.append("\n".join(data_lines))
    return out


def sse_json(sse):
    """The JSON values of an SSE body's events, checking `[DONE]` comes last and only there."""
    assert not sse.problems, sse.problems
    assert sse.data and sse.data[-1] == "[DONE]", f"last event {sse.data[-1:]!r}, not [DONE]"
    assert "[DONE]" not in sse.data[:-1], "[DONE] before the end"
    return [json.loads(d) for d in sse.data[:-1]]


def stream_post(address, path, body, timeout=TIMEOUT_S):
    """POSTs a streaming request; returns (Response, its events' JSON values). The response must be
    a 200 event stream whose events are JSON values and end with [DONE]."""
    r = post(address, path, body, timeout=timeout)
    assert r.status == 200, r
    assert r.content_type.split(";")[0].strip() == "text/event-stream", r.headers
    return r, sse_json(parse_sse(r.text()))


def validated(values, schema):
    for v in values:
        openai_schemas.validate(v, schema)
    return values


# ---------------------------------------------------------------------------------------------
# asyncio: many concurrent streams on their own connections


class AsyncStream:
    """One request on its own connection, read incrementally: status and headers first, then the
    body's bytes as they come (chunked or not), and SSE events from those."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer
        self.status = None
        self.headers = None
        self._chunked = False
        self._remaining = None  # bytes left of a Content-Length body
        self._buf = b""
        self._eof = False
        self.events = []  # data of the events read so far
        self.comments = 0

    @classmethod
    async def open(cls, address, method, path, body=None, headers=None):
        host, port = split_address(address)
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        s = cls(reader, writer)
        writer.write(build_request(method, path, body, headers))
        await writer.drain()
        return s

    async def read_head(self):
        head = await self.reader.readuntil(b"\r\n\r\n")
        self.status, _, self.headers = _parse_head(head[:-4])
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if not self._chunked and "content-length" in self.headers:
            self._remaining = int(self.headers["content-length"])
        return self.status

    async def read_some(self):
        """Next piece of the body, or b"" at its end."""
        if self._eof:
            return b""
        if self._chunked:
            line = await self.reader.readuntil(b"\r\n")
            size = int(line.split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")  # (no trailers expected) the final CRLF
                self._eof = True
                return b""
            data = await self.reader.readexactly(size + 2)
            return data[:-2]
        if self._remaining is not None:
            if self._remaining == 0:
                self._eof = True
                return b""
            data = await self.reader.read(min(65536, self._remaining))
            if not data:
                raise ConnectionError("connection closed inside the body")
            self._remaining -= len(data)
            return data
        data = await self.reader.read(65536)
        if not data:
            self._eof = True
        return data

    async def next_event(self):
        """The next event's data (comments counted and skipped), or None at the body's end."""
        while True:
            while b"\n\n" in self._buf:
                block, self._buf = self._buf.split(b"\n\n", 1)
                data = None
                for line in block.decode("utf-8").split("\n"):
                    if line.startswith(":"):
                        self.comments += 1
                    elif line.startswith("data: "):
                        data = line[6:]
                if data is not None:
                    self.events.append(data)
                    return data
            piece = await self.read_some()
            if not piece:
                if self._buf.strip():
                    raise ConnectionError(f"body ended inside an event: {self._buf[:100]!r}")
                return None
            self._buf += piece

    async def read_all(self):
        body = self._buf
        self._buf = b""
        while True:
            piece = await self.read_some()
            if not piece:
                return body
            body += piece

    def close(self, abort=False):
        """Closes the connection: a FIN, or with abort=True a RST (SO_LINGER 0)."""
        if abort:
            self.writer.transport.abort()
        else:
            self.writer.close()


# ---------------------------------------------------------------------------------------------
# The official client


def openai_client(cluster, timeout=TIMEOUT_S):
    import openai

    return openai.OpenAI(base_url=cluster.scheduler.http_url + "/v1", api_key="unused", max_retries=0,
                         timeout=timeout)


def async_openai_client(cluster, timeout=TIMEOUT_S):
    import openai

    return openai.AsyncOpenAI(base_url=cluster.scheduler.http_url + "/v1", api_key="unused",
                              max_retries=0, timeout=timeout)


def served_model(cluster):
    """The model name the HTTP API serves: the first id GET /v1/models lists."""
    r = get(cluster.scheduler.http_address, "/v1/models")
    assert r.status == 200, r
    return r.json()["data"][0]["id"]


def scrape_metrics(cluster):
    """GET /metrics of the scheduler, read with prometheus-client's parser: (families, samples),
    samples keyed by (sample name, sorted label items)."""
    from prometheus_client.parser import text_string_to_metric_families

    r = get(cluster.scheduler.http_address, "/metrics")
    assert r.status == 200, r
    assert r.content_type.startswith("text/plain"), r.headers
    families = list(text_string_to_metric_families(r.text()))
    samples = {}
    for fam in families:
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in samples, f"sample {key} twice"
            samples[key] = s.value
    return families, samples


def metric_total(samples, name, **labels):
    """Sum of `name`'s samples whose labels include `labels` (any other labels summed over)."""
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == want for k, want in labels.items()))


def wait_until(fn, timeout, interval=0.01):
    """Like harness.wait_until, importable without the gRPC stubs."""
    start = time.monotonic()
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout} s; last value {v!r}")
        time.sleep(interval)
