// What the C library's allocator holds, and a way to give its free pages back: glibc's
// mallinfo2() and malloc_trim(), which Swift's Glibc module does not export. Elsewhere (another C
// library) the functions report "not available" and do nothing.
#ifndef C_MALLOC_STATISTICS_H
#define C_MALLOC_STATISTICS_H

#include <stddef.h>

typedef struct {
    /// 1 when the figures below are the allocator's; 0 when this C library has no such report.
    int available;
    /// Bytes the arenas took from the system with brk/mmap (not counting large blocks).
    size_t arena_bytes;
    /// Bytes in large blocks mapped one by one (freed straight back to the system).
    size_t mmapped_bytes;
    /// Bytes allocated and not freed.
    size_t in_use_bytes;
    /// Bytes freed but still held by the arenas: what a trim may give back.
    size_t free_bytes;
} apns_bridge_malloc_statistics;

apns_bridge_malloc_statistics apns_bridge_malloc_statistics_read(void);

/// Returns free memory at the top and inside every arena to the system (madvise). 1 if some was
/// released, 0 if none or unavailable.
int apns_bridge_malloc_trim(void);

#endif
