#include "util/mem.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static long fail_after = -1;

void gc_mem_fail_after(long n) { fail_after = n; }

static bool should_fail(void)
{
    if (fail_after < 0) return false;
    if (fail_after == 0) return true;
    fail_after--;
    return false;
}

/* Long-lived buffers that a step streams (the compiled plan's arena, bench's input
 * batches) from HUGE_MIN on go in 2 MiB pages where Linux grants them (MADV_HUGEPAGE:
 * advice, 4 KiB pages if refused; this VM's THP is madvise-only): in 4 KiB pages each
 * page of large.net's 99.5 MB batch cost a TLB miss, and its first layer ran 8-20%
 * longer in CPU time (bench/convbench, the Xeon).  gc_malloc and gc_malloc_aligned
 * stay plain: the interpreter's per-op results come from them, and an eager engine
 * allocates as PyTorch's CPU allocator does (1.13 gives no huge-page advice).  With
 * the advice there, fresh 2 MiB pages faulted in each step moved fashion-resnet's
 * interpreted step by +4-15% CPU and large.net's by -40%: no longer the eager engine
 * docs/why-graph-mode.md measures. */
enum { HUGE_MIN = 8 << 20, HUGE_PAGE = 2 << 20 };

void *gc_malloc(size_t n)
{
    if (should_fail()) return NULL;
    return malloc(n ? n : 1);
}

/* n bytes (at least 1) at a multiple of align, the size rounded up to one (C11's
 * aligned_alloc asks it); *bytes gets that size.  NULL on overflow or failure. */
static void *alloc_aligned(size_t n, size_t align, size_t *bytes)
{
    size_t total;
    if (!gc_add_size(n ? n : 1, align - 1, &total)) return NULL;
    *bytes = total / align * align;
    return aligned_alloc(align, *bytes);
}

void *gc_aligned_pages(size_t n, size_t align)
{
    bool huge = n >= HUGE_MIN && align <= HUGE_PAGE;
    size_t bytes;
    void *p = alloc_aligned(n, huge ? HUGE_PAGE : align, &bytes);
#ifdef MADV_HUGEPAGE
    if (p && huge) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

void *gc_malloc_pages(size_t n, size_t align)
{
    return should_fail() ? NULL : gc_aligned_pages(n, align);
}

void *gc_malloc_aligned(size_t n, size_t align)
{
    size_t total, bytes;
    if (!gc_add_size(n ? n : 1, align - 1, &total) || should_fail()) return NULL;   /* no hook count on overflow */
    return alloc_aligned(n, align, &bytes);
}

void *gc_calloc(size_t count, size_t size)
{
    size_t total;
    if (!gc_mul_size(count, size, &total) || should_fail()) return NULL;
    return calloc(total ? total : 1, 1);
}

void *gc_realloc(void *p, size_t n)
{
    if (should_fail()) return NULL;
    return realloc(p, n ? n : 1);
}

char *gc_strndup(const char *s, size_t n)
{
    char *d = gc_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *gc_strdup(const char *s) { return gc_strndup(s, strlen(s)); }

void gc_free(void *p) { free(p); }

bool gc_mul_size(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
bool gc_add_size(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }
bool gc_mul_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }

struct ArenaBlock {
    ArenaBlock *next;
    size_t cap;
    _Alignas(16) unsigned char data[];
};

void arena_init(Arena *a) { memset(a, 0, sizeof *a); }

void *arena_alloc(Arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->cap - a->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        ArenaBlock *b = gc_malloc(sizeof(ArenaBlock) + cap);
        if (!b) { a->failed = true; return NULL; }
        b->next = a->head;
        b->cap = cap;
        a->head = b;
        a->cap = cap;
        a->used = 0;
    }
    void *p = a->head->data + a->used;
    a->used += n;
    memset(p, 0, n);
    return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
    char *d = arena_alloc(a, n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

void arena_free(Arena *a)
{
    ArenaBlock *b = a->head;
    while (b) {
        ArenaBlock *n = b->next;
        gc_free(b);
        b = n;
    }
    arena_init(a);
}
