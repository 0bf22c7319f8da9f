#ifndef STATESERVER_ALLOCATOR_H
#define STATESERVER_ALLOCATOR_H

/// Tunes glibc's allocator for a server whose states come and go in large pieces (a store loaded
/// from storage parses, patches and decodes several transient copies of its state):
/// - at most `arenas` malloc arenas (glibc's default, 8 per core, lets each new thread touch a
///   fresh arena, whose pages stay resident);
/// - blocks of `threshold` bytes or more are mapped on their own and given back when freed,
///   and free memory past `threshold` at the top of a heap is returned (a fixed threshold also
///   turns off glibc's dynamic one, which after the first large free keeps every later large
///   block in the heap for good).
/// Leaves everything as it is when the environment sets GLIBC_TUNABLES (an operator's choice
/// wins). Returns 1 when the settings were applied, 0 when left alone, -1 on a refusal.
int ss_tune_allocator(int arenas, int threshold);

/// Gives free memory inside the allocator's heaps back to the system (malloc_trim): whole free
/// pages anywhere in every arena, not only at the top. Costs a walk over the heaps: call it
/// after rare large frees, not per request.
void ss_release_free_memory(void);

#endif
