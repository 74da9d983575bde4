#!/usr/bin/env python3
"""Splits a perf profile of the bridge by module: each sample counts for the innermost frame that
names one of the modules below (retain/release, malloc and the runtime count for their caller).

  perf record -e cpu-clock -F 1999 -g -p $(pgrep -f "apns-bridge serve") -o perf.data -- sleep 8
  perf script -i perf.data -F ip,sym,dso > perf.txt
  Benchmarks/scripts/perf-split.py perf.txt MICROSECONDS_PER_NOTIFICATION
"""
import sys, re, collections
def module_of(symbol):
    """The module a Swift symbol belongs to: the first `$s<length><Name>` in its mangled name
    (a specialization of a standard-library generic made inside a module names that module
    there); `None` for a C symbol."""
    match = re.search(r"\$s(\d+)", symbol)
    if not match:
        return None
    length = int(match.group(1))
    return symbol[match.end():match.end() + length]

BRIDGE = ("BridgeCore", "BridgeServer", "BridgeForwarding", "BridgeApp", "BridgeStores", "CoreMetrics", "Prometheus")
NIO = ("NIOCore", "NIOPosix", "NIOConcurrencyHelpers", "_NIODataStructures", "NIOEmbedded")

def category(symbol, dso):
    if "libnghttp2" in dso:
        return "HTTP/2 engine: libnghttp2"
    if "BoringSSL" in symbol or "libssl" in dso or "libcrypto" in dso:
        return "TLS (NIOSSL, BoringSSL)"
    module = module_of(symbol)
    if module in ("NIOHTTP2", "NIOHPACK"):
        return "HTTP/2 engine: NIOHTTP2, NIOHPACK"
    if module == "NIOSSL":
        return "TLS (NIOSSL, BoringSSL)"
    if module == "UpstreamAPNs":
        return "UpstreamAPNs (our client, the connection handler)"
    if module == "LegacyProtocol":
        return "legacy decoder"
    if module in BRIDGE:
        return "the bridge (gateway, sessions, mapping, stores, metrics)"
    if module in NIO:
        return "NIOCore/NIOPosix (pipeline, event loop, ByteBuffer, system calls)"
    return None

counts = collections.Counter()
total = 0
stack = []
def flush():
    global total
    if not stack: return
    total += 1
    for sym, dso in stack:
        name = category(sym, dso)
        if name:
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
