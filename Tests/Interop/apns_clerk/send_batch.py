"""A legacy provider as apns-clerk (PyPI `apns-clerk` 0.2.0) users wrote them.

usage: send_batch.py LIB_DIR HOST GATEWAY_PORT FEEDBACK_PORT CERT KEY COUNT BAD_INDEX UNREGISTERED_INDEX

apns-clerk differs from PyAPNs in what it does on the wire:
- TLS 1.0 only (`TLSv1_METHOD`): the bridge must be run with `tls.allowLegacyTLS`;
- one message to many tokens, written in 2 KB chunks, each frame's identifier its index in the
  message (0, 1, 2, ...); it peeks for an error-response between chunks and waits 3 s for one
  after the last;
- on an error-response it builds a new message from the tokens after the failed one, numbered
  from 0 again, and sends it on a new connection (docs/protocol.md#resend-records matches a resend without the
  identifier);
- it reads the feedback service with its own parser.

Token i (0-based) is 4 bytes of i, big-endian, then 28 x 0xcd. Prints one JSON object: the
tokens apns-clerk reported failed with their status, the number of sends, and the feedback
tokens it read.
"""
import json
import logging
import sys
import time

sys.path.insert(0, sys.argv[1])
import OpenSSL.SSL

# apns-clerk is from 2015. Two shims give it the OpenSSL of its time, without touching what it
# sends: TLS 1.0 needs security level 0 in today's OpenSSL, and pyOpenSSL now refuses the
# `set_timeout` apns-clerk makes on a context it already used.
_context_init = OpenSSL.SSL.Context.__init__


def _context_with_tls10(self, method):
    _context_init(self, method)
    self.set_cipher_list(b"DEFAULT:@SECLEVEL=0")


_set_timeout = OpenSSL.SSL.Context.set_timeout


def _set_timeout_once(self, timeout):
    try:
        _set_timeout(self, timeout)
    except ValueError:
        pass


OpenSSL.SSL.Context.__init__ = _context_with_tls10
OpenSSL.SSL.Context.set_timeout = _set_timeout_once

from apns_clerk import APNs, Message, Session  # noqa: E402

host = sys.argv[2]
gateway_port, feedback_port = int(sys.argv[3]), int(sys.argv[4])
cert, key = sys.argv[5], sys.argv[6]
count, bad_index, unregistered_index = int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def token(index):
    return "%08x" % index + "cd" * 28


# apns-clerk waits `read_tail_timeout` (3 s by default) after a send for an error-response. The
# bridge can only answer once the notifications before the bad one have their outcomes and the
# resend records of those after it are stored. A debug build on CI's loaded 2-core machine has
# been seen to need longer than 3 s for that, and once (2026-11-27) longer than 10 s: the client
# then returned without the packet, and the test failed on the machine's speed. The first send,
# which expects the packet, waits up to 120 s (it returns as soon as the packet arrives); the
# resend, which expects none and so waits its tail out in full, waits 10 s.
session = Session(read_tail_timeout=120)
connection = session.get_connection((host, gateway_port), cert_file=cert, key_file=key)
service = APNs(connection)
message = Message([token(i) for i in range(count)], alert="apns-clerk through apns-bridge", badge=1)
failed = {}
sends = 0
while message is not None and sends < 10:
    result = service.send(message)
    sends += 1
    for failed_token, (status, _) in result.failed.items():
        failed[failed_token] = status
    if result.errors:
        print("errors: %r" % (result.errors,), file=sys.stderr)
    message = result.retry() if result.needs_retry() else None
    session.read_tail_timeout = 10

# A cron job reads the feedback service once a day; here it is read until the unregistered
# token's entry is there (the bridge stores it when APNs' 410 arrives), 30 s at most.
tokens = []
deadline = time.time() + 30
while not tokens and time.time() < deadline:
    feedback = session.new_connection((host, feedback_port), cert_file=cert, key_file=key)
    tokens = [t.decode() if isinstance(t, bytes) else t for t, _ in APNs(feedback).feedback()]
    if not tokens:
        time.sleep(0.05)
print(json.dumps({"failed": failed, "sends": sends, "feedback": tokens}))
