#!/usr/bin/env python3
"""Records what an HTTP/2 server sends to an APNs client, as seeds for UpstreamEngineFuzzer.

Connects over TLS (ALPN h2) to HOST:PORT, sends N APNs-shaped POSTs (/3/device/<token>, the
apns-* headers, a JSON body, a provider token when --signing-key is given) on streams 1, 3, 5,
…, reads until every stream ended (or the server closed, or 5 s passed) and writes everything
the server sent, behind the fuzz run's two-byte prefix (requests - 1, read size - 1), to OUTPUT.

Needs the Python packages h2 (PyPI) and cryptography, only to record: the seeds are committed.

  python3 record-seeds.py --host 127.0.0.1 --port 2197 --ca mock-ca.pem \
      --signing-key ABC123DEFG:TEAM123456:AuthKey.p8 --requests 4 seeds/mockapns-200
"""
import argparse
import base64
import json
import socket
import ssl
import time

import h2.config
import h2.connection
import h2.events


def provider_token(key_id, team_id, key_path):
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    def b64(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    key = serialization.load_pem_private_key(open(key_path, "rb").read(), password=None)
    header = b64(json.dumps({"alg": "ES256", "kid": key_id}).encode())
    claims = b64(json.dumps({"iss": team_id, "iat": int(time.time())}).encode())
    signing_input = header + b"." + claims
    r, s = decode_dss_signature(key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
    return (signing_input + b"." + b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))).decode()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca", help="CA certificate (PEM) to trust; none: no verification")
    parser.add_argument("--signing-key", help="KEYID:TEAMID:PATH of a .p8 key")
    parser.add_argument("--topic", default="com.example.app")
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--read-size", type=int, default=64)
    parser.add_argument("--token", action="append", default=[], help="device token (hex) of a request, in order")
    parser.add_argument("output")
    arguments = parser.parse_args()

    context = ssl.create_default_context(cafile=arguments.ca) if arguments.ca else ssl._create_unverified_context()
    context.set_alpn_protocols(["h2"])
    context.check_hostname = False
    raw = socket.create_connection((arguments.host, arguments.port))
    sock = context.wrap_socket(raw, server_hostname="localhost")
    assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
    connection = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    authorization = None
    if arguments.signing_key:
        key_id, team_id, path = arguments.signing_key.split(":", 2)
        authorization = "bearer " + provider_token(key_id, team_id, path)
    open_streams = set()
    for index in range(arguments.requests):
        stream = connection.get_next_available_stream_id()
        token = arguments.token[index] if index < len(arguments.token) else "%064x" % (0xAB00 + index)
        body = json.dumps({"aps": {"alert": "seed %d" % index}}).encode()
        headers = [
            (":method", "POST"), (":scheme", "https"), (":path", "/3/device/" + token),
            (":authority", "api.sandbox.push.apple.com"),
            ("apns-id", "00000000-0000-4000-8000-%012d" % stream), ("apns-expiration", "0"),
            ("apns-priority", "10"), ("apns-topic", arguments.topic), ("apns-push-type", "alert"),
            ("content-length", str(len(body))),
        ]
        if authorization:
            headers.insert(4, ("authorization", authorization))
        connection.send_headers(stream, headers)
        connection.send_data(stream, body, end_stream=True)
        open_streams.add(stream)
    sock.sendall(connection.data_to_send())

    received = bytearray()
    sock.settimeout(5)
    deadline = time.time() + 5
    while open_streams and time.time() < deadline:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            break
        if not data:
            break
        received += data
        for event in connection.receive_data(data):
            if isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                open_streams.discard(event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                open_streams.clear()
        sock.sendall(connection.data_to_send())
    sock.close()
    with open(arguments.output, "wb") as output:
        output.write(bytes([(arguments.requests - 1) % 256, (arguments.read_size - 1) % 256]) + bytes(received))
    print("%s: %d bytes from the server" % (arguments.output, len(received)))


if __name__ == "__main__":
    main()
