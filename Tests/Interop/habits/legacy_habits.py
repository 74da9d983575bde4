#!/usr/bin/env python3
"""Habits of real legacy clients, reproduced with CPython's ssl module (the project's own code).

Each command prints one JSON object on standard output.

  resume HOST PORT CERT KEY CA PORT2 FRAMES1 FRAMES2
      Two connections, the second resuming the first one's TLS session (as Java's JSSE and
      .NET's SslStream do on every reconnect). The first goes to PORT, the second to PORT2
      (the same port, or the other listener: both share one TLS context). On each, FRAMES
      (a file of legacy frames, or "-" for none, as a poller) is written and everything the
      server sends is read until it closes.
  naive-feedback HOST PORT CERT KEY CA
      Reads the feedback list one 38-byte recv() per tuple, with no buffering, as both Go
      libraries do: a tuple that straddles two TLS records comes back short.
  write-only HOST PORT CERT KEY CA FIRST NEXT PACE_MS LIMIT
      Writes the file FIRST, then the file NEXT every PACE_MS milliseconds (at most LIMIT
      times) and never reads, as grocer and houston's persistent connections do: how long
      after FIRST a write failed, and how many writes went out before.
"""
import json
import socket
import ssl
import struct
import sys
import time


def context(cert, key, ca):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_cert_chain(cert, key)
    ctx.load_verify_locations(ca)
    ctx.check_hostname = False
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def connect(ctx, host, port, session=None):
    raw = socket.create_connection((host, port), timeout=30)
    return ctx.wrap_socket(raw, server_hostname="localhost", session=session)


def read_until_close(conn):
    received = b""
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            received += chunk
    except (ConnectionError, ssl.SSLError, socket.timeout):
        pass
    return received


def resume(host, port, cert, key, ca, port2, frames1, frames2):
    ctx = context(cert, key, ca)
    results = []
    session = None
    for target, frames in ((int(port), frames1), (int(port2), frames2)):
        conn = connect(ctx, host, target, session)
        reused = conn.session_reused
        if frames != "-":
            with open(frames, "rb") as f:
                conn.sendall(f.read())
        received = read_until_close(conn)
        session = conn.session
        conn.close()
        results.append({"reused": reused, "received": received.hex()})
    print(json.dumps(results))


def naive_feedback(host, port, cert, key, ca):
    conn = connect(context(cert, key, ca), host, int(port))
    tuples, short_reads, tokens = 0, 0, []
    while True:
        chunk = conn.recv(38)
        if not chunk:
            break
        if len(chunk) != 38:
            short_reads += 1
            break  # out of sync, as the Go readers are: what follows is garbage
        _, length = struct.unpack(">IH", chunk[:6])
        if length != 32:
            short_reads += 1
            break
        tokens.append(chunk[6:].hex())
        tuples += 1
    conn.close()
    print(json.dumps({"tuples": tuples, "short_reads": short_reads, "distinct": len(set(tokens))}))


def write_only(host, port, cert, key, ca, first, next_frame, pace_ms, limit):
    conn = connect(context(cert, key, ca), host, int(port))
    with open(first, "rb") as f:
        first_bytes = f.read()
    with open(next_frame, "rb") as f:
        next_bytes = f.read()
    start = time.monotonic()
    conn.sendall(first_bytes)
    writes, failed_after = 0, None
    for _ in range(int(limit)):
        time.sleep(int(pace_ms) / 1000)
        try:
            conn.sendall(next_bytes)
        except (OSError, ssl.SSLError):
            failed_after = time.monotonic() - start
            break
        writes += 1
    conn.close()
    print(json.dumps({"writes": writes, "failed_after_seconds": failed_after}))


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    {"resume": resume, "naive-feedback": naive_feedback, "write-only": write_only}[command](*arguments)
