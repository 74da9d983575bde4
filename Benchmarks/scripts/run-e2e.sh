#!/usr/bin/env bash
# Runs the end-to-end benchmarks of apns-bridge and regenerates docs/performance/:
#   results.jsonl   one JSON line per run (what apns-bridge-load printed)
#   results.md      the tables docs/performance.md quotes
#   scaling.png     throughput and p99 against legacy connections (gnuplot)
#
#   Benchmarks/scripts/run-e2e.sh            the full set (about 10 minutes on 2 cores, after the builds)
#   Benchmarks/scripts/run-e2e.sh --plot     only redraw results.md and scaling.png
#
# Needs: nghttpd and h2load (Debian: nghttp2-server, nghttp2-client), gnuplot (gnuplot-nox),
# python3. Everything runs on 127.0.0.1; each run is bounded by its notification count.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
out="$root/docs/performance"
mkdir -p "$out"

if [[ "${1:-}" != "--plot" ]]; then
    for tool in nghttpd h2load gnuplot python3; do
        command -v "$tool" > /dev/null || { echo "run-e2e: $tool is missing (see the comment at the top)"; exit 1; }
    done
    echo "run-e2e: building apns-bridge and apns-bridge-load (release)…"
    swift build -c release --product apns-bridge > /dev/null
    swift build -c release --product apns-bridge-load > /dev/null
    load="$root/.build/release/apns-bridge-load"
    export APNS_BRIDGE_BINARY="$root/.build/release/apns-bridge"
    results="$out/results.jsonl"
    : > "$results"
    run() { echo "run-e2e: $*" >&2; "$load" "$@" | tee -a "$results"; }

    # 1. Anchors, each beside the bridge run it is compared with (same machine, same minutes).
    for attempt in 1 2 3; do
        run h2load --upstream-connections 2 --streams 100 --notifications 300000 --label "ceiling#$attempt"
        run client --upstream nghttpd --upstream-connections 2 --notifications 100000 --label "client-direct#$attempt"
        run bridge --upstream nghttpd --connections 100 --notifications 100000 --label "bridge-nghttpd#$attempt"
    done
    run client --upstream mock --upstream-connections 2 --notifications 100000 --label "client-direct-mock"

    # 2. Scaling with legacy connections (MockAPNs upstream: latency, lost, duplicated): the
    #    maximum rate, then p99 at a fixed 2,000/s (at the maximum, latency is queueing time).
    for connections in 1 10 100 1000; do
        run bridge --upstream mock --connections "$connections" --notifications 100000 --label "connections"
        run bridge --upstream mock --connections "$connections" --notifications 20000 --rate 2000 --label "connections-paced"
    done
    # 3. Scaling with upstream connections (100 legacy connections): nghttpd for throughput (the
    #    cheap upstream), MockAPNs for p99.
    for upstreams in 1 2 4 8; do
        run bridge --upstream nghttpd --connections 100 --upstream-connections "$upstreams" --notifications 100000 --label "upstream-connections"
        run bridge --upstream mock --connections 100 --upstream-connections "$upstreams" --notifications 100000 --label "upstream-connections-mock"
    done

    # 3b. Streams per upstream connection: NIOHTTP2 looks streams up by a linear scan, so a
    #     saturated connection with 1,000 open streams (the default cap, as APNs allows) costs
    #     more per request than one with 100.
    run bridge --upstream mock --connections 100 --notifications 100000 --set upstream.maximumStreamsPerConnection=100 --label "streams-100"

    # 4. Latency at half of the maximum rate (the maximum: the 100-connection mock run above).
    max=$(python3 -c "
import json
rows=[json.loads(l) for l in open('$results') if l.strip()]
print(max(r['throughput'] for r in rows if r.get('run')=='bridge' and r.get('label')=='connections' and r['connections']==100))")
    half=$(python3 -c "print(int($max/2))")
    run bridge --upstream mock --connections 100 --notifications $((half * 10)) --rate "$half" --label "half-rate"
    quarter=$(python3 -c "print(int($max/4))")
    run bridge --upstream mock --connections 100 --notifications $((quarter * 10)) --rate "$quarter" --label "quarter-rate"

    # 5. Memory: 10,000 idle provider connections; a 1 s upstream for 20 s.
    run idle --connections 10000 --label "idle"
    run backpressure --connections 100 --duration 60 --label "backpressure"
fi

python3 "$root/Benchmarks/scripts/summarize.py" "$out/results.jsonl" "$out"
gnuplot -e "datafile='$out/connections.dat'; output='$out/scaling.png'" "$root/Benchmarks/scripts/scaling.gnuplot"
echo "run-e2e: wrote $out/results.md and $out/scaling.png"
