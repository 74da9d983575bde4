"""A legacy provider, as PyAPNs users wrote them: enhanced mode, one notification per call.

usage: send_notifications.py APNS_DIR HOST PORT CERT KEY COUNT BAD_INDEX
Sends COUNT notifications with identifiers 1..COUNT to tokens derived from the identifier;
notification BAD_INDEX goes to a token the upstream rejects. PyAPNs reads error-responses on
its own thread and resends what followed a failed notification on a new connection. Prints
one JSON line: the error-responses PyAPNs reported to its listener.
"""
import json
import logging
import sys
import time

sys.path.insert(0, sys.argv[1])
import apns  # the ported PyAPNs

host, port, cert, key = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
count, bad_index = int(sys.argv[6]), int(sys.argv[7])
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def token(identifier):
    # 32 bytes: the identifier, big-endian, then a fixed filler (the test derives the same).
    return "%08x" % identifier + "ab" * 28


errors = []
connection = apns.GatewayConnection(cert_file=cert, key_file=key, enhanced=True)
connection.server, connection.port = host, port  # instead of gateway.push.apple.com:2195
connection.register_response_listener(errors.append)
payload = apns.Payload(alert="PyAPNs through apns-bridge", sound="default", badge=1)
for identifier in range(1, count + 1):
    connection.send_notification(token(identifier), payload, identifier=identifier)

# PyAPNs has no "flush and wait": give its reader thread time to see an error-response and
# resend, then stop it.
deadline = time.time() + 20
while time.time() < deadline and not errors:
    time.sleep(0.1)
time.sleep(3)
connection.force_close()
print(json.dumps(errors))
