#!/usr/bin/env bash
# Counts the Swift runtime's reference counting and the allocator's calls per notification in a
# running bridge, with uprobes: retains, releases, object allocations, malloc and free, divided by
# the calls of `APNsClient.send(_:on:completion:)` (once per notification) over the same window.
# Unlike CPU time, the counts do not depend on what else the machine is doing, so a step of a few
# percent shows in one run (docs/performance.md, "Copies of a request and of its answer").
#
# usage: Benchmarks/scripts/runtime-calls.sh BRIDGE_BINARY LABEL [ENGINE]
#   BRIDGE_BINARY  a release build of apns-bridge (copy it: the probes name the file)
#   LABEL          a name for the probe and the output files in /tmp (letters, digits, _)
#   ENGINE         upstream.http2Engine: nghttp2 (default; the binary needs the NGHTTP2Engine
#                  trait) or nio
#
# Needs root (uprobes), perf, curl, nghttpd, and the load generator built with the same trait:
#   swift build -c release --traits NGHTTP2Engine --scratch-path .build-trait --product apns-bridge
#   swift build -c release --traits NGHTTP2Engine --scratch-path .build-trait --product apns-bridge-load
# (one --product per build: swift build builds only the last one given)
# The load generator sends 1,000,000 notifications through 4 legacy connections to nghttpd; the
# count covers 4 s in the middle of the run, a few thousand notifications (the probes slow the
# bridge about tenfold while they count).
set -euo pipefail
cd "$(dirname "$0")/../.."
bridge=$1
label=$2
engine=${3:-nghttp2}
load=${APNS_BRIDGE_LOAD:-.build-trait/release/apns-bridge-load}
swift_core=$(ldd "$bridge" | awk '/libswiftCore.so/ {print $3}')
libc=$(ldd "$bridge" | awk '/libc.so.6/ {print $3}')

# The probes (perf probe keeps them until `perf probe -d`; adding one twice is an error).
for function in swift_retain swift_release swift_allocObject; do
    perf probe -q -x "$swift_core" -a "$function" 2>/dev/null || true
done
for function in malloc free; do
    perf probe -q -x "$libc" -a "$function" 2>/dev/null || true
done
send='$s12UpstreamAPNs0B6ClientC4send_2on10completionyAA0B7RequestV_7NIOCore9EventLoop_pyAA0B10SendResultOYbctF'
perf probe -q -d "*:send_$label" 2>/dev/null || true
perf probe -q -x "$bridge" -a "send_$label=$send"
# (awk reads the whole list: exiting at the first match would kill perf with SIGPIPE, and
# pipefail would end the script once the list of probes is long)
send_event=$(perf probe -l 2>/dev/null | awk -v l="send_$label" '$1 ~ ":" l "$" && !found {print $1; found = 1}')

APNS_BRIDGE_BINARY=$bridge "$load" bridge --upstream nghttpd --connections 4 --notifications 1000000 \
    --set upstream.http2Engine="$engine" --label "$label" > "/tmp/runtime-calls-$label.json" 2> /dev/null &
load_pid=$!
pid=""
for _ in $(seq 1 1000); do
    pid=$(pgrep -f -n "^$bridge serve" || true)
    [[ -n "$pid" ]] && break
    sleep 0.01
done
[[ -n "$pid" ]] || { echo "the bridge did not start" >&2; exit 1; }
sleep 2  # the connections are up and notifications flow
events="$send_event,probe_libswiftCore:swift_retain,probe_libswiftCore:swift_release"
events+=",probe_libswiftCore:swift_allocObject,probe_libc:malloc,probe_libc:free"
perf stat -x, -e "$events" -p "$pid" -o "/tmp/runtime-calls-$label.stat" -- sleep 4
wait "$load_pid"
python3 - "$label" "/tmp/runtime-calls-$label.stat" <<'PY'
import sys
label, path = sys.argv[1], sys.argv[2]
counts = {}
for line in open(path):
    fields = line.strip().split(",")
    if len(fields) > 3 and ":" in fields[2] and fields[0].isdigit():
        counts[fields[2].split(":")[1]] = int(fields[0])
sends = counts.pop("send_" + label)
print(f"{label}: {sends} notifications; per notification: "
      + ", ".join(f"{name.removeprefix('swift_')} {value / sends:.1f}" for name, value in counts.items()))
PY
