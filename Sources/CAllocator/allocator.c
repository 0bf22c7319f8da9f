#include "allocator.h"

#include <malloc.h>
#include <stdlib.h>

int ss_tune_allocator(int arenas, int threshold) {
    if (getenv("GLIBC_TUNABLES") != NULL) return 0;
    int ok = mallopt(M_ARENA_MAX, arenas) && mallopt(M_MMAP_THRESHOLD, threshold) && mallopt(M_TRIM_THRESHOLD, threshold);
    return ok ? 1 : -1;
}

void ss_release_free_memory(void) {
    malloc_trim(0);
}
