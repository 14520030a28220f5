/* Every heap allocation in graphc goes through these wrappers, so that a test can
 * make the N-th allocation fail and check that the caller reports it cleanly.
 *
 * Ownership rule: whoever calls gc_alloc* frees with gc_free.  Compiler data that
 * lives as long as one compilation goes into an Arena and is freed at once. */
#ifndef GRAPHC_MEM_H
#define GRAPHC_MEM_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

void *gc_malloc(size_t n);            /* NULL on failure (or injected failure) */
/* n bytes at an address that is a multiple of align (a power of two, at least
 * sizeof(void *)): tensors for the vector kernels, whose 64-byte loads split across
 * cache lines otherwise.  Freed with gc_free. */
void *gc_malloc_aligned(size_t n, size_t align);
/* As gc_malloc_aligned, and from 8 MiB on 2 MiB-aligned in pages advised huge
 * (util/mem.c says which buffers and why).  gc_aligned_pages is the same without the
 * test hook below: the compiled plan's arena, whose size is checked apart
 * (exec_fits_memory) and whose failure has its own message. */
void *gc_malloc_pages(size_t n, size_t align);
void *gc_aligned_pages(size_t n, size_t align);
void *gc_calloc(size_t count, size_t size); /* NULL on overflow or failure */
void *gc_realloc(void *p, size_t n);
char *gc_strdup(const char *s);
char *gc_strndup(const char *s, size_t n);
void gc_free(void *p);

/* Test hook: after `n` more successful allocations, fail every one.  -1 disables. */
void gc_mem_fail_after(long n);

/* Checked size arithmetic: false when the result would not fit. */
bool gc_mul_size(size_t a, size_t b, size_t *out);
bool gc_add_size(size_t a, size_t b, size_t *out);
bool gc_mul_i64(int64_t a, int64_t b, int64_t *out);

/* A bump allocator for data that lives as long as one compilation. */
typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
    ArenaBlock *head;   /* newest block first */
    size_t used;        /* bytes handed out from head */
    size_t cap;         /* usable bytes of head */
    bool failed;        /* an allocation failed; results are not to be trusted */
} Arena;

void arena_init(Arena *a);
void *arena_alloc(Arena *a, size_t n);          /* zeroed, 16-byte aligned; NULL on failure */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
void arena_free(Arena *a);

#endif
