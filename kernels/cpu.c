/* Which variant of the multi-ISA kernels runs (kern.h, kernels/variant.h): the CPU is
 * asked once what it has, and every kernel that has variants gets its table here. */
#include "kernels/variant.h"

#include <string.h>

#if defined KERN_X86_VARIANTS && defined __linux__
#include <cpuid.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
#endif

static const char *const isa_names[KISA_COUNT] = {
    [KISA_AUTO] = "auto", [KISA_PORTABLE] = "portable", [KISA_AVX2] = "avx2", [KISA_AVX512] = "avx512",
};

/* __builtin_cpu_supports also checks that the OS saves the registers (XCR0). */
static KIsa detect(void)
{
#ifdef KERN_X86_VARIANTS
    __builtin_cpu_init();
    bool fma = __builtin_cpu_supports("fma");
    if (fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return KISA_AVX512;
    if (fma && __builtin_cpu_supports("avx2"))
        return KISA_AVX2;
#endif
    return KISA_PORTABLE;
}

KIsa kern_isa_cpu(void)
{
    /* a race here only makes two threads detect the same answer */
    static volatile int best;
    if (!best)
        best = (int)detect();
    return (KIsa)best;
}

KIsa kern_isa_resolve(KIsa isa)
{
    KIsa cpu = kern_isa_cpu();
    isa = (KIsa)(isa & ~KISA_BF16);
    return isa <= KISA_AUTO || isa >= KISA_COUNT || isa > cpu ? cpu : isa;
}

const char *kern_isa_name(KIsa isa) { return isa >= 0 && isa < KISA_COUNT ? isa_names[isa] : "?"; }

const char *kern_isa_names(void) { return "avx512, avx2 or portable"; }

int kern_isa_parse(const char *name, KIsa cpu, KIsa *isa)
{
    for (int i = KISA_PORTABLE; i < KISA_COUNT; i++)
        if (strcmp(name, isa_names[i]) == 0) {
            *isa = (KIsa)i;
            return i > (int)cpu ? -2 : 0;
        }
    return -1;
}

/* bf16's kernels (gemm_bf16.c) are AVX-512 code, hence the avx512 variant too. */
bool kern_bf16_cpu(void)
{
    static volatile int has;   /* 1 yes, 2 no */
    if (!has) {
        bool yes = false;
#ifdef KERN_X86_VARIANTS
        yes = kern_isa_cpu() == KISA_AVX512 && __builtin_cpu_supports("avx512bf16");
#endif
        has = yes ? 1 : 2;
    }
    return has == 1;
}

/* AMX's tile data is a 8 KB piece of state that Linux (5.16 on) gives a process only
 * when asked, so that a process that never uses it costs nothing at a context switch:
 * the CPU's bits (CPUID 7: AMX-BF16, AMX-TILE), the OS's (XCR0 bits 17, 18), then the
 * request, which holds for every thread of the process. */
bool kern_amx_cpu(void)
{
    static volatile int has;   /* 1 yes, 2 no */
    if (!has) {
        bool yes = false;
#if defined KERN_X86_VARIANTS && defined __linux__
        unsigned a, b, c, d, lo, hi;
        const char *env = getenv("GRAPHC_AMX");
        if (kern_bf16_cpu() && !(env && strcmp(env, "0") == 0) && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
            (d >> 22 & 1) && (d >> 24 & 1)) {
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            yes = (lo >> 17 & 3) == 3 && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
        }
#endif
        has = yes ? 1 : 2;
    }
    return has == 1;
}

const char *kern_dtype_check(KIsa isa)
{
    if (!kern_isa_bf16(isa))
        return NULL;
    if (!kern_bf16_cpu())
        return "--dtype bf16 needs a CPU with avx512_bf16 (VDPBF16PS), which this one lacks";
    if (kern_isa_resolve(isa) != KISA_AVX512)
        return "--dtype bf16 runs in the avx512 variant only, and a lower one was asked for";
    return NULL;
}

const char *kern_isa_label(KIsa isa)
{
    if (kern_isa_bf16(isa) && !kern_dtype_check(isa))
        return kern_bf16_amx() ? "avx512+bf16+amx" : "avx512+bf16";
    return kern_isa_name(kern_isa_resolve(isa));
}

const KernVariant *kern_variant(KIsa isa)
{
    switch (kern_isa_resolve(isa)) {
#ifdef KERN_X86_VARIANTS
    case KISA_AVX512: return &kern_variant_avx512;
    case KISA_AVX2: return &kern_variant_avx2;
#endif
    default: return &kern_variant_portable;
    }
}
