#include "CMallocStatistics.h"

// A C library header first: it defines __GLIBC__ on glibc (stddef.h is the compiler's own).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GLIBC__)
#include <malloc.h>

// The value of attribute `size` in the first element after `from` that starts with `element`.
static size_t size_after(const char *from, const char *element) {
    const char *found = strstr(from, element);
    if (found == NULL) return 0;
    const char *size = strstr(found, "size=\"");
    if (size == NULL) return 0;
    return (size_t)strtoull(size + 6, NULL, 10);
}
#endif

apns_bridge_malloc_statistics apns_bridge_malloc_statistics_read(void) {
    apns_bridge_malloc_statistics statistics = {0};
#if defined(__GLIBC__)
    // mallinfo2() reports the main arena only; the event loops' threads allocate in arenas of
    // their own. malloc_info() reports every arena, and after the last one the totals:
    // <total type="fast" .../> <total type="rest" .../> <total type="mmap" .../>
    // <system type="current" .../>.
    char *text = NULL;
    size_t length = 0;
    FILE *stream = open_memstream(&text, &length);
    if (stream == NULL) return statistics;
    int failed = malloc_info(0, stream);
    fclose(stream);
    if (failed == 0 && text != NULL) {
        const char *totals = text;
        for (const char *heap = strstr(text, "</heap>"); heap != NULL; heap = strstr(heap + 1, "</heap>")) {
            totals = heap;
        }
        size_t fast = size_after(totals, "<total type=\"fast\"");
        size_t rest = size_after(totals, "<total type=\"rest\"");
        size_t mmapped = size_after(totals, "<total type=\"mmap\"");
        size_t system = size_after(totals, "<system type=\"current\"");
        statistics.available = 1;
        statistics.arena_bytes = system;
        statistics.mmapped_bytes = mmapped;
        statistics.free_bytes = fast + rest;
        statistics.in_use_bytes = system > fast + rest ? system - fast - rest : 0;
    }
    free(text);
#endif
    return statistics;
}

int apns_bridge_malloc_trim(void) {
#if defined(__GLIBC__)
    return malloc_trim(0);
#else
    return 0;
#endif
}
