// libnghttp2 from the system (Debian: libnghttp2-dev), for the NGHTTP2Engine trait. Only the
// 1.52 API is used, so that newer distributions build too.
#include <nghttp2/nghttp2.h>
