#!/usr/bin/env python3
"""Splits a perf profile of the bridge by module: each sample counts for the innermost frame that
names one of the modules below (retain/release, malloc and the runtime count for their caller).

  perf record -e cpu-clock -F 1999 -g -p $(pgrep -f "apns-bridge serve") -o perf.data -- sleep 8
  perf script -i perf.data -F ip,sym,dso > perf.txt
  Benchmarks/scripts/perf-split.py perf.txt MICROSECONDS_PER_NOTIFICATION
"""
import sys, re, collections
cats = [
    ("HTTP/2 engine: libnghttp2", lambda s, d: "libnghttp2" in d),
    ("HTTP/2 engine: NIOHPACK (the header block built as HPACKHeaders)", lambda s, d: "8NIOHPACK" in s or "NIOHPACK" in s),
    ("TLS (NIOSSL, BoringSSL)", lambda s, d: "NIOSSL" in s or "BoringSSL" in s or "CNIOBoringSSL" in s or "libssl" in d or "libcrypto" in d),
    ("UpstreamAPNs (our client, the nghttp2 handler)", lambda s, d: "12UpstreamAPNs" in s),
    ("legacy decoder", lambda s, d: "14LegacyProtocol" in s),
    ("the bridge (gateway, sessions, mapping, stores, metrics)", lambda s, d: any(m in s for m in ("10BridgeCore", "12BridgeServer", "14BridgeUpstream", "9BridgeApp", "12BridgeStores", "CoreMetrics", "Prometheus"))),
    ("NIOCore/NIOPosix (pipeline, event loop, ByteBuffer, system calls)", lambda s, d: any(m in s for m in ("7NIOCore", "8NIOPosix", "NIOConcurrencyHelpers", "NIOCore", "NIOPosix"))),
]
counts = collections.Counter()
total = 0
stack = []
def flush():
    global total
    if not stack: return
    total += 1
    for sym, dso in stack:
        for name, test in cats:
            if test(sym, dso):
                counts[name] += 1
                return
    leaf = stack[0]
    if "libc" in leaf[1]: counts["malloc, free, memmove with no module above them"] += 1
    elif "kernel" in leaf[1]: counts["kernel with no module above it"] += 1
    else: counts["other (runtime, unattributed)"] += 1
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if not line.strip():
        flush(); stack = []; continue
    m = re.match(r"\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$", line)
    if m:
        stack.append((m.group(2), m.group(3)))
flush()
us = float(sys.argv[2])
for name, n in counts.most_common():
    print("| %5.1f %% | %4.1f | %s |" % (100.0 * n / total, us * n / total, name))
print("samples", total)
