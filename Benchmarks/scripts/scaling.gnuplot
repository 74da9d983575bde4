# Throughput (as fast as possible) and p99 latency (at a fixed 2,000/s) against legacy
# connections (datafile: connections, throughput, p99 in ms). Called by run-e2e.sh with
# -e "datafile='…'; output='…'".
set terminal pngcairo size 900,520 font "sans,11"
set output output
set title "apns-bridge: notifications through the bridge (MockAPNs upstream, 2 cores)"
set logscale x 10
set xlabel "legacy provider connections"
set ylabel "delivered notifications / s"
set y2label "p99 latency at 2,000/s, frame write → upstream (ms)"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set grid
set key left top
plot datafile using 1:2 with linespoints lw 2 pt 7 title "delivered/s, as fast as possible", \
     datafile using 1:3 axes x1y2 with linespoints lw 2 pt 5 dt 2 title "p99 at a fixed 2,000/s"
