# apns-bridge in a container (docs/operations.md):
#   docker build -t apns-bridge .
#   docker run -p 2195:2195 -p 2196:2196 -v /etc/apns-bridge:/etc/apns-bridge:ro \
#       -v apns-bridge-data:/var/lib/apns-bridge apns-bridge
# The admin port listens on 127.0.0.1 inside the container by default; set
# APNS_BRIDGE_ADMIN_LISTEN=0.0.0.0:9180 and publish 9180 to scrape it from outside.
FROM swift:6.3-noble AS build
# The upstream's HTTP/2 runs on libnghttp2 (the NGHTTP2Engine trait, docs/upstream.md).
RUN apt-get update && apt-get install -y --no-install-recommends libnghttp2-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift Package.resolved ./
COPY Sources ./Sources
COPY Tests ./Tests
RUN swift build -c release --product apns-bridge --static-swift-stdlib --traits NGHTTP2Engine --force-resolved-versions \
    && install -D .build/release/apns-bridge /out/apns-bridge

FROM ubuntu:24.04
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates tzdata libcurl4 libxml2 libnghttp2-14 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/apns-bridge apns-bridge \
    && install -d -o apns-bridge /var/lib/apns-bridge
COPY --from=build /out/apns-bridge /usr/local/bin/apns-bridge
USER apns-bridge
WORKDIR /var/lib/apns-bridge
ENV APNS_BRIDGE_CONFIG=/etc/apns-bridge/apns-bridge.yaml
EXPOSE 2195 2196
STOPSIGNAL SIGTERM
# Ready = an HTTP/2 connection to APNs is usable (GET /readyz on the admin port).
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 CMD ["/usr/local/bin/apns-bridge", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/apns-bridge"]
CMD ["serve"]
