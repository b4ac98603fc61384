/*
 * fakecuda: a stand-in libcuda.so.1 (the CUDA driver API) for machines without an NVIDIA GPU.
 *
 * Implements the few driver calls a readiness probe makes through ctypes (init, device lookup, a context,
 * one allocation written and read back), with the ABI of NVIDIA's cuda.h, checked against CUDA 12.6.3's
 * include/cuda.h (github.com/zspace/system.cuda-12.6, include/cuda.h): CUresult is an int enum (the names
 * and numbers in g_errors below are that header's), CUdevice is int, CUcontext is struct CUctx_st *,
 * CUdeviceptr is unsigned long long (CUdeviceptr_v2 on 64-bit). cuda.h maps cuCtxCreate, cuCtxDestroy,
 * cuDevicePrimaryCtxRelease, cuMemAlloc, cuMemFree, cuMemsetD8, cuMemcpyHtoD and cuMemcpyDtoH to their
 * _v2 symbols; the plain cuCtxCreate, cuCtxDestroy and cuDevicePrimaryCtxRelease (same ABI) are exported
 * too, the 32-bit CUdeviceptr_v1 memory calls (plain cuMemAlloc, ...) are not.
 *
 * Driven by a plain-text state file named by the FAKE_CUDA_STATE environment variable, re-read whenever
 * its inode, size or mtime (nanoseconds) changes; every call checks with one stat(). Without a readable
 * file (ever) cuInit answers CUDA_ERROR_NO_DEVICE.
 *
 * State file (one directive per line, '#' starts a comment, tokens separated by blanks, values containing
 * blanks in double quotes):
 *
 *   driver_version 12080          what cuDriverGetVersion reports (default 12080)
 *   init_error NAME|NUMBER        cuInit returns it (CUDA_ERROR_SYSTEM_NOT_READY, SYSTEM_NOT_READY, 802)
 *   gpu <index> key=value ...     one device; device ordinals follow the order of the gpu lines, <index>
 *                                 only names the GPU (its default PCI id and NVML index)
 *
 * gpu keys (an error is a CUresult name, with or without CUDA_ERROR_, or a number; 0/SUCCESS: none):
 *   pci=0000:17:00.0     PCI bus id (default 0000:XX:00.0, XX = 0x17 + index, as fakenvml's default)
 *   ctx_error=E          cuCtxCreate(_v2) and the first cuDevicePrimaryCtxRetain return E
 *   alloc_error=E        cuMemAlloc_v2 returns E
 *   memcpy_error=E       cuMemsetD8_v2, cuMemcpyHtoD_v2 and cuMemcpyDtoH_v2 return E (nothing copied)
 *   sync_error=E         cuCtxSynchronize returns E
 *   free_error=E         cuMemFree_v2 returns E (the allocation stays)
 *   hang=STEP[,STEP]     init|ctx|alloc|memcpy|sync|free: that call does not return while the state file
 *                        says so (it polls the file every 20 ms; a test kills the process or rewrites it);
 *                        hang=init on any gpu line holds cuInit
 *   slow_ms=N            each of those steps on this GPU takes N ms more (cuInit: the largest slow_ms)
 *   corrupt=1            cuMemcpyDtoH_v2 reads back one bit flipped (in the middle byte)
 *   stuck=1              with hang: a process hung in a call on this GPU cannot be reaped after SIGKILL
 *                        while the state says so, as one stuck in the driver (state D) cannot exit. The
 *                        hung call forks a tracer in a session of its own that PTRACE_SEIZEs the process
 *                        and never waits for it: a dead tracee stays a zombie its parent cannot reap
 *                        (only its tracer can) until the tracer ends. The tracer ends once the state file
 *                        no longer says stuck=1 for this GPU (or cannot be read), and after 300 s at most.
 *   compute_mode=N       what cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE) answers (default 0,
 *                        CU_COMPUTEMODE_DEFAULT; 2 PROHIBITED, 3 EXCLUSIVE_PROCESS); it changes no other
 *                        call: a busy exclusive-process GPU is ctx_error=DEVICE_UNAVAILABLE beside it
 *   total_mib=N          device memory (default 49152): an allocation beyond it, counting this
 *                        process's live allocations and contexts on the GPU, is CUDA_ERROR_OUT_OF_MEMORY
 *   ctx_mib=N            a live context holds N MiB (default 0) in total_mib and in NVML (below)
 *   nvml_state=PATH      a fakenvml state file, and the GPU index there (default: this gpu's index):
 *   nvml_gpu=N           while this process has live allocations (or contexts with ctx_mib) on the GPU,
 *                        PATH holds one line "holder N <pid> <MiB>" for them (their sum, rounded up to
 *                        a MiB), as NVML lists a process once per GPU. Each alloc or free replaces that
 *                        exact line with the new one, the last free (cuMemFree_v2, cuCtxDestroy, the last
 *                        primary release) or a normal exit of the process removes it; SIGKILL leaves it,
 *                        and fakenvml counts it no more once the pid is dead. Writers take
 *                        flock(PATH.fakecuda-lock) and replace PATH atomically (a file next to it renamed
 *                        over it) with an mtime later than the previous one, so fakenvml notices each.
 *   mig=MIG-<uuid>       the line is a MIG device (one compute instance of a GPU in MIG mode), not a GPU:
 *                        it has no ordinal and no PCI id of its own; only CUDA_VISIBLE_DEVICES naming its
 *                        UUID makes it a device (below). Every other key applies to it as to a GPU.
 *   nvml_mig=N           with nvml_state: the holder line carries "mig=N" (fakenvml lists it on the MIG
 *                        device N of GPU nvml_gpu as well as on that GPU), as NVML lists a process of a MIG
 *                        device on the device and on its parent
 *
 * Semantics: every call but cuDriverGetVersion, cuGetErrorName and cuGetErrorString answers
 * CUDA_ERROR_NOT_INITIALIZED before a successful cuInit(0). An ordinal beyond the gpu lines, a malformed
 * or unknown PCI id: CUDA_ERROR_INVALID_DEVICE. No gpu line: cuInit returns CUDA_ERROR_NO_DEVICE. The
 * current context is per thread (cuCtxCreate makes the new one current); memory calls without a live
 * current context: CUDA_ERROR_INVALID_CONTEXT; a device pointer (or range) outside a live allocation:
 * CUDA_ERROR_INVALID_VALUE. Device memory is host memory (calloc), at most 1 GiB per process in all
 * (beyond: CUDA_ERROR_OUT_OF_MEMORY); device addresses start at 0x302000000 and are never reused.
 * CUDA_VISIBLE_DEVICES, where set, is a comma list of positions among the gpu lines that are not MIG
 * devices, or of MIG device UUIDs (MIG-...), as the driver reads it: the devices are those, in that order
 * (their ordinals), up to the first token that is neither or repeats one; a GPU not among them has no
 * ordinal and its PCI id is CUDA_ERROR_INVALID_DEVICE; none visible: cuInit returns CUDA_ERROR_NO_DEVICE.
 * Unset, every gpu line but the MIG devices is a device. cuDeviceGetAttribute answers
 * CU_DEVICE_ATTRIBUTE_COMPUTE_MODE (20) alone; any other attribute is CUDA_ERROR_INVALID_VALUE.
 *
 * Builds for the fallback tests: each define hides a group of symbols from dlsym.
 *   FAKECUDA_NO_V2      an old or foreign libcuda: no *_v2 symbols (cuCtxCreate_v2, cuCtxDestroy_v2,
 *                       cuDevicePrimaryCtxRelease_v2, cuMemAlloc_v2, cuMemFree_v2, cuMemsetD8_v2,
 *                       cuMemcpyHtoD_v2, cuMemcpyDtoH_v2)
 *   FAKECUDA_NO_PCI     no cuDeviceGetByPCIBusId nor cuDeviceGetPCIBusId
 *   FAKECUDA_ONLY_INIT  not NVIDIA's at all: cuInit is the only symbol
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))

#ifdef FAKECUDA_ONLY_INIT
#define EXPORT_BASE HIDDEN
#define EXPORT_V2 HIDDEN
#define EXPORT_PCI HIDDEN
#else
#define EXPORT_BASE EXPORT
#ifdef FAKECUDA_NO_V2
#define EXPORT_V2 HIDDEN
#else
#define EXPORT_V2 EXPORT
#endif
#ifdef FAKECUDA_NO_PCI
#define EXPORT_PCI HIDDEN
#else
#define EXPORT_PCI EXPORT
#endif
#endif

/* ---- cuda.h ABI ------------------------------------------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_SYSTEM_NOT_READY = 802,
    CUDA_ERROR_UNKNOWN = 999,
};

/* Every CUresult of CUDA 12.6's cuda.h (enum cudaError_enum). */
static const struct {
    int code;
    const char *name;
} g_errors[] = {
    {0, "CUDA_SUCCESS"},
    {1, "CUDA_ERROR_INVALID_VALUE"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"},
    {4, "CUDA_ERROR_DEINITIALIZED"},
    {5, "CUDA_ERROR_PROFILER_DISABLED"},
    {6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED"},
    {7, "CUDA_ERROR_PROFILER_ALREADY_STARTED"},
    {8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED"},
    {34, "CUDA_ERROR_STUB_LIBRARY"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE"},
    {100, "CUDA_ERROR_NO_DEVICE"},
    {101, "CUDA_ERROR_INVALID_DEVICE"},
    {102, "CUDA_ERROR_DEVICE_NOT_LICENSED"},
    {200, "CUDA_ERROR_INVALID_IMAGE"},
    {201, "CUDA_ERROR_INVALID_CONTEXT"},
    {202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"},
    {205, "CUDA_ERROR_MAP_FAILED"},
    {206, "CUDA_ERROR_UNMAP_FAILED"},
    {207, "CUDA_ERROR_ARRAY_IS_MAPPED"},
    {208, "CUDA_ERROR_ALREADY_MAPPED"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
    {210, "CUDA_ERROR_ALREADY_ACQUIRED"},
    {211, "CUDA_ERROR_NOT_MAPPED"},
    {212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY"},
    {213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER"},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE"},
    {215, "CUDA_ERROR_UNSUPPORTED_LIMIT"},
    {216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"},
    {218, "CUDA_ERROR_INVALID_PTX"},
    {219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"},
    {220, "CUDA_ERROR_NVLINK_UNCORRECTABLE"},
    {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
    {223, "CUDA_ERROR_JIT_COMPILATION_DISABLED"},
    {224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY"},
    {225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC"},
    {300, "CUDA_ERROR_INVALID_SOURCE"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND"},
    {302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"},
    {303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM"},
    {400, "CUDA_ERROR_INVALID_HANDLE"},
    {401, "CUDA_ERROR_ILLEGAL_STATE"},
    {402, "CUDA_ERROR_LOSSY_QUERY"},
    {500, "CUDA_ERROR_NOT_FOUND"},
    {600, "CUDA_ERROR_NOT_READY"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT"},
    {703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"},
    {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"},
    {708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"},
    {710, "CUDA_ERROR_ASSERT"},
    {711, "CUDA_ERROR_TOO_MANY_PEERS"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"},
    {714, "CUDA_ERROR_HARDWARE_STACK_ERROR"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS"},
    {717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"},
    {718, "CUDA_ERROR_INVALID_PC"},
    {719, "CUDA_ERROR_LAUNCH_FAILED"},
    {720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"},
    {800, "CUDA_ERROR_NOT_PERMITTED"},
    {801, "CUDA_ERROR_NOT_SUPPORTED"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"},
    {805, "CUDA_ERROR_MPS_CONNECTION_FAILED"},
    {806, "CUDA_ERROR_MPS_RPC_FAILURE"},
    {807, "CUDA_ERROR_MPS_SERVER_NOT_READY"},
    {808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED"},
    {809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED"},
    {810, "CUDA_ERROR_MPS_CLIENT_TERMINATED"},
    {811, "CUDA_ERROR_CDP_NOT_SUPPORTED"},
    {812, "CUDA_ERROR_CDP_VERSION_MISMATCH"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
    {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE"},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"},
    {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"},
    {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"},
    {907, "CUDA_ERROR_CAPTURED_EVENT"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"},
    {909, "CUDA_ERROR_TIMEOUT"},
    {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"},
    {911, "CUDA_ERROR_EXTERNAL_DEVICE"},
    {912, "CUDA_ERROR_INVALID_CLUSTER_SIZE"},
    {913, "CUDA_ERROR_FUNCTION_NOT_LOADED"},
    {914, "CUDA_ERROR_INVALID_RESOURCE_TYPE"},
    {915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"},
    {999, "CUDA_ERROR_UNKNOWN"},
};
#define N_ERRORS (sizeof(g_errors) / sizeof(g_errors[0]))

/* cuGetErrorString's prose for the common codes; the others get their name in words. */
static const struct {
    int code;
    const char *text;
} g_error_text[] = {
    {0, "no error"},
    {1, "invalid argument"},
    {2, "out of memory"},
    {3, "initialization error"},
    {4, "driver shutting down"},
    {34, "CUDA driver is a stub library"},
    {46, "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "no CUDA-capable device is detected"},
    {101, "invalid device ordinal"},
    {201, "invalid device context"},
    {214, "uncorrectable ECC error encountered"},
    {304, "OS call failed or operation not supported on this OS"},
    {400, "invalid resource handle"},
    {700, "an illegal memory access was encountered"},
    {802, "system not yet initialized"},
    {803, "system has unsupported display driver / cuda driver combination"},
    {999, "unknown error"},
};

/* ---- state ------------------------------------------------------------ */

#define MAX_GPUS 64
#define MAX_CTX 1024
#define MAX_ALLOCS 1024
#define MIB (1024ULL * 1024ULL)
#define BACKING_CAP (1024ULL * MIB)
#define ADDR_BASE 0x302000000ULL
#define ADDR_ALIGN (2ULL * MIB)
#define HANG_POLL_MS 20
#define DEFAULT_DRIVER_VERSION 12080

enum {
    STEP_INIT = 1,
    STEP_CTX = 2,
    STEP_ALLOC = 4,
    STEP_MEMCPY = 8,
    STEP_SYNC = 16,
    STEP_FREE = 32,
};

static const struct {
    const char *name;
    unsigned int bit;
} g_steps[] = {
    {"init", STEP_INIT}, {"ctx", STEP_CTX},   {"alloc", STEP_ALLOC},
    {"memcpy", STEP_MEMCPY}, {"sync", STEP_SYNC}, {"free", STEP_FREE},
};

struct gpu {
    unsigned int index;
    unsigned int dom, bus, dev, fn;
    int ctx_error, alloc_error, memcpy_error, sync_error, free_error;
    unsigned int hang; /* STEP_* bits */
    unsigned int slow_ms;
    int corrupt;
    int stuck;
    unsigned int compute_mode;
    unsigned long long total_mib;
    unsigned long long ctx_mib;
    char nvml_state[PATH_MAX];
    unsigned int nvml_gpu;
    int nvml_mig; /* -1: none */
    char mig[96]; /* "": a GPU; else the UUID of the MIG device this line is */
};

struct state {
    int init_error;
    int driver_version;
    unsigned int count;
    struct gpu gpus[MAX_GPUS];
};

/* What one allocation or context adds to this process's holder line in a fakenvml state file. */
struct holder {
    pid_t owner;
    int slot;
    unsigned long long bytes;
};

/* This process's holder line for one (fakenvml state file, NVML GPU): its live allocations and contexts
 * there, in all. */
struct nvml_slot {
    pid_t owner;
    char path[PATH_MAX];
    unsigned int gpu;
    int mig;
    unsigned long long bytes;
    char line[112];
};

struct CUctx_st {
    int live;
    int primary;
    unsigned int refs;
    unsigned int gpu_index;
    struct CUctx_st *prev;
    unsigned long long mib;
    struct holder holder;
};

struct alloc {
    int live;
    CUdeviceptr addr;
    size_t size;
    unsigned char *mem;
    struct CUctx_st *ctx;
    struct holder holder;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct state g_state;
static int g_loaded;
static struct stat g_stat;
static int g_initialized;
static struct CUctx_st g_ctx[MAX_CTX];
static unsigned int g_ctx_used; /* slots are never reused: a stale handle stays invalid */
static struct alloc g_allocs[MAX_ALLOCS];
static unsigned long long g_backing;
static CUdeviceptr g_next_addr = ADDR_BASE;
#define MAX_SLOTS 64
static struct nvml_slot g_slots[MAX_SLOTS];
static __thread struct CUctx_st *t_current;

static void warn(const char *path, unsigned int line, const char *what, const char *tok)
{
    fprintf(stderr, "fakecuda: %s:%u: %s: %s\n", path, line, what, tok);
}

static const char *error_name(int code)
{
    for (size_t i = 0; i < N_ERRORS; i++)
        if (g_errors[i].code == code)
            return g_errors[i].name;
    return NULL;
}

/* A CUresult from a name (CUDA_ERROR_X, X, CUDA_SUCCESS, SUCCESS) or a number >= 0; -1 when neither. */
static int parse_error(const char *v)
{
    const char *n = v;
    if (strncasecmp(n, "CUDA_ERROR_", 11) == 0)
        n += 11;
    else if (strncasecmp(n, "CUDA_", 5) == 0)
        n += 5;
    for (size_t i = 0; i < N_ERRORS; i++) {
        const char *full = g_errors[i].name;
        const char *shortname = full + (strncmp(full, "CUDA_ERROR_", 11) == 0 ? 11 : 5);
        if (strcasecmp(n, shortname) == 0)
            return g_errors[i].code;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*v && !*end && !errno && x >= 0 && x <= INT_MAX)
        return (int)x;
    return -1;
}

static int parse_ull(const char *v, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || !*v || *end || *v == '-')
        return -1;
    *out = x;
    return 0;
}

static int parse_uint(const char *v, unsigned int *out)
{
    unsigned long long x;
    if (parse_ull(v, &x) || x > 0xFFFFFFFFull)
        return -1;
    *out = (unsigned int)x;
    return 0;
}

static int hex_field(const char **p, unsigned long *out)
{
    const char *s = *p;
    unsigned long v = 0;
    int n = 0;
    while (isxdigit((unsigned char)*s)) {
        if (++n > 8)
            return -1;
        char c = (char)tolower((unsigned char)*s);
        v = v * 16 + (unsigned long)(c <= '9' ? c - '0' : c - 'a' + 10);
        s++;
    }
    if (n == 0)
        return -1;
    *out = v;
    *p = s;
    return 0;
}

/* "domain:bus:device.function", "domain:bus:device" or "bus:device.function", in hex (cuda.h's forms). */
static int parse_pci(const char *s, unsigned int *dom, unsigned int *bus, unsigned int *dev, unsigned int *fn)
{
    unsigned long a[3], f = 0;
    int n = 0, has_fn = 0;
    const char *p = s;
    for (;;) {
        if (n == 3 || hex_field(&p, &a[n]))
            return -1;
        n++;
        if (*p != ':')
            break;
        p++;
    }
    if (*p == '.') {
        p++;
        if (hex_field(&p, &f))
            return -1;
        has_fn = 1;
    }
    if (*p)
        return -1;
    unsigned long d, b, v;
    if (n == 3) {
        d = a[0], b = a[1], v = a[2];
    } else if (n == 2 && has_fn) {
        d = 0, b = a[0], v = a[1];
    } else {
        return -1;
    }
    if (b > 0xFF || v > 0x1F || f > 0x7)
        return -1;
    *dom = (unsigned int)d, *bus = (unsigned int)b, *dev = (unsigned int)v, *fn = (unsigned int)f;
    return 0;
}

/* Split a line into tokens in place ("quoted values" and key="quoted values"; '#' ends the line). */
static int tokenize(char *s, char **tok, int max)
{
    int n = 0;
    char *w = s;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
            s++;
        if (!*s || *s == '#' || n == max)
            break;
        tok[n++] = w;
        while (*s && *s != ' ' && *s != '\t' && *s != '\r' && *s != '\n') {
            if (*s == '"') {
                s++;
                while (*s && *s != '"')
                    *w++ = *s++;
                if (*s == '"')
                    s++;
            } else {
                *w++ = *s++;
            }
        }
        if (*s)
            s++;
        *w++ = '\0';
    }
    return n;
}

static void gpu_defaults(struct gpu *g, unsigned int index)
{
    memset(g, 0, sizeof(*g));
    g->index = index;
    g->bus = (0x17 + index) & 0xFF;
    g->total_mib = 49152;
    g->nvml_gpu = index;
    g->nvml_mig = -1;
}

static void parse_gpu_key(struct gpu *g, const char *key, const char *val, const char *path,
                          unsigned int ln)
{
    int *err = NULL;
    if (!strcmp(key, "ctx_error"))
        err = &g->ctx_error;
    else if (!strcmp(key, "alloc_error"))
        err = &g->alloc_error;
    else if (!strcmp(key, "memcpy_error"))
        err = &g->memcpy_error;
    else if (!strcmp(key, "sync_error"))
        err = &g->sync_error;
    else if (!strcmp(key, "free_error"))
        err = &g->free_error;
    if (err) {
        int c = parse_error(val);
        if (c < 0)
            warn(path, ln, "unknown CUresult", val);
        else
            *err = c;
    } else if (!strcmp(key, "pci")) {
        if (parse_pci(val, &g->dom, &g->bus, &g->dev, &g->fn))
            warn(path, ln, "bad pci id", val);
    } else if (!strcmp(key, "hang")) {
        char buf[128];
        snprintf(buf, sizeof(buf), "%s", val);
        g->hang = 0;
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            size_t i;
            for (i = 0; i < sizeof(g_steps) / sizeof(g_steps[0]); i++)
                if (!strcmp(t, g_steps[i].name))
                    break;
            if (i < sizeof(g_steps) / sizeof(g_steps[0]))
                g->hang |= g_steps[i].bit;
            else if (strcmp(t, "none"))
                warn(path, ln, "unknown hang step", t);
        }
    } else if (!strcmp(key, "slow_ms")) {
        if (parse_uint(val, &g->slow_ms))
            warn(path, ln, "bad slow_ms", val);
    } else if (!strcmp(key, "corrupt")) {
        unsigned int c;
        if (parse_uint(val, &c))
            warn(path, ln, "bad corrupt", val);
        else
            g->corrupt = c != 0;
    } else if (!strcmp(key, "stuck")) {
        unsigned int c;
        if (parse_uint(val, &c))
            warn(path, ln, "bad stuck", val);
        else
            g->stuck = c != 0;
    } else if (!strcmp(key, "compute_mode")) {
        if (parse_uint(val, &g->compute_mode) || g->compute_mode > 3)
            warn(path, ln, "bad compute_mode", val);
    } else if (!strcmp(key, "total_mib") || !strcmp(key, "ctx_mib")) {
        unsigned long long x;
        if (parse_ull(val, &x) || x > (1ULL << 40))
            warn(path, ln, "bad MiB figure", val);
        else if (key[0] == 't')
            g->total_mib = x;
        else
            g->ctx_mib = x;
    } else if (!strcmp(key, "nvml_state")) {
        if (strlen(val) >= sizeof(g->nvml_state))
            warn(path, ln, "path too long", val);
        else
            snprintf(g->nvml_state, sizeof(g->nvml_state), "%s", val);
    } else if (!strcmp(key, "nvml_gpu")) {
        if (parse_uint(val, &g->nvml_gpu))
            warn(path, ln, "bad nvml_gpu", val);
    } else if (!strcmp(key, "nvml_mig")) {
        unsigned int m;
        if (parse_uint(val, &m) || m > 7) /* fakenvml's MIG device indexes: 0-7 */
            warn(path, ln, "bad nvml_mig", val);
        else
            g->nvml_mig = (int)m;
    } else if (!strcmp(key, "mig")) {
        if (strncmp(val, "MIG-", 4) || strlen(val) >= sizeof(g->mig) || strchr(val, ','))
            warn(path, ln, "bad mig uuid", val);
        else
            snprintf(g->mig, sizeof(g->mig), "%s", val);
    } else {
        warn(path, ln, "unknown gpu key", key);
    }
}

static int parse_file(const char *path, struct state *st)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    memset(st, 0, sizeof(*st));
    st->driver_version = DEFAULT_DRIVER_VERSION;
    char line[8192];
    unsigned int ln = 0;
    while (fgets(line, sizeof(line), f)) {
        ln++;
        char *tok[64];
        int n = tokenize(line, tok, 64);
        if (n == 0)
            continue;
        if (!strcmp(tok[0], "driver_version") && n >= 2) {
            unsigned int v;
            if (parse_uint(tok[1], &v) || v > INT_MAX)
                warn(path, ln, "bad driver_version", tok[1]);
            else
                st->driver_version = (int)v;
        } else if (!strcmp(tok[0], "init_error") && n >= 2) {
            int c = parse_error(tok[1]);
            if (c < 0)
                warn(path, ln, "unknown CUresult", tok[1]);
            else
                st->init_error = c;
        } else if (!strcmp(tok[0], "gpu") && n >= 2) {
            unsigned int idx;
            if (parse_uint(tok[1], &idx)) {
                warn(path, ln, "bad gpu index", tok[1]);
                continue;
            }
            int dup = 0;
            for (unsigned int i = 0; i < st->count; i++)
                dup |= st->gpus[i].index == idx;
            if (dup || st->count == MAX_GPUS) {
                warn(path, ln, dup ? "duplicate gpu index" : "too many gpus", tok[1]);
                continue;
            }
            struct gpu *g = &st->gpus[st->count++];
            gpu_defaults(g, idx);
            for (int i = 2; i < n; i++) {
                char *eq = strchr(tok[i], '=');
                if (!eq) {
                    warn(path, ln, "expected key=value", tok[i]);
                    continue;
                }
                *eq = '\0';
                parse_gpu_key(g, tok[i], eq + 1, path, ln);
            }
        } else {
            warn(path, ln, "unknown directive", tok[0]);
        }
    }
    fclose(f);
    return 0;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* With g_lock held: re-read the state file if it changed. 0 when g_state is usable. */
static int refresh_locked(void)
{
    const char *path = getenv("FAKE_CUDA_STATE");
    struct stat sb;
    if (path && *path && stat(path, &sb) == 0 && (!g_loaded || !same_file(&sb, &g_stat))) {
        static struct state fresh;
        if (parse_file(path, &fresh) == 0) {
            memcpy(&g_state, &fresh, sizeof(g_state));
            g_stat = sb;
            g_loaded = 1;
        }
    }
    return g_loaded ? 0 : -1;
}

static const struct gpu *gpu_by_index(unsigned int index)
{
    for (unsigned int i = 0; i < g_state.count; i++)
        if (g_state.gpus[i].index == index)
            return &g_state.gpus[i];
    return NULL;
}

/* With g_lock held: the positions among the gpu lines of the devices CUDA_VISIBLE_DEVICES leaves visible,
 * by ordinal; returns how many. */
static unsigned int visible_positions(unsigned int *positions)
{
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    unsigned int n = 0, gpus[MAX_GPUS], count = 0;
    for (unsigned int i = 0; i < g_state.count; i++)
        if (!g_state.gpus[i].mig[0])
            gpus[count++] = i;
    if (!env) {
        for (n = 0; n < count; n++)
            positions[n] = gpus[n];
        return n;
    }
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", env);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < MAX_GPUS; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        unsigned int position = UINT_MAX;
        if (!strncmp(t, "MIG-", 4)) {
            for (unsigned int i = 0; i < g_state.count; i++)
                if (!strcmp(g_state.gpus[i].mig, t))
                    position = i;
            if (position == UINT_MAX)
                break;
        } else if (parse_uint(t, &position) || position >= count) {
            break;
        } else {
            position = gpus[position];
        }
        unsigned int seen = 0;
        for (unsigned int i = 0; i < n; i++)
            seen |= positions[i] == position;
        if (seen)
            break;
        positions[n++] = position;
    }
    return n;
}

static const struct gpu *gpu_by_ordinal(CUdevice dev)
{
    unsigned int positions[MAX_GPUS];
    unsigned int n = visible_positions(positions);
    if (dev < 0 || (unsigned int)dev >= n)
        return NULL;
    return &g_state.gpus[positions[dev]];
}

static void sleep_ms(unsigned int ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Lock, refresh and check cuInit; on success the lock stays held. */
static CUresult enter(void)
{
    pthread_mutex_lock(&g_lock);
    refresh_locked();
    if (!g_initialized) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return CUDA_SUCCESS;
}

static CUresult leave(CUresult r)
{
    pthread_mutex_unlock(&g_lock);
    return r;
}

#define STUCK_MAX_MS (300 * 1000)

/* Whether the state says stuck=1 for the GPU named index (any GPU: index UINT_MAX). */
static int stuck_now(unsigned int index)
{
    const char *path = getenv("FAKE_CUDA_STATE");
    struct stat sb;
    int stuck = 0;
    if (!path || stat(path, &sb) != 0) /* the test that wrote it is gone */
        return 0;
    pthread_mutex_lock(&g_lock);
    if (refresh_locked() == 0)
        for (unsigned int i = 0; i < g_state.count; i++)
            if (index == UINT_MAX || g_state.gpus[i].index == index)
                stuck |= g_state.gpus[i].stuck;
    pthread_mutex_unlock(&g_lock);
    return stuck;
}

/* stuck=1: a tracer of this process in a session of its own, which never waits for it, so that once
 * killed this process stays a zombie only the tracer may reap; the tracer ends when the state lets go. */
static void become_unreapable(unsigned int index)
{
    int go[2], seized[2];
    if (pipe(go) != 0)
        return;
    if (pipe(seized) != 0) {
        close(go[0]), close(go[1]);
        return;
    }
    pid_t tracee = getpid();
    pid_t tracer = fork();
    if (tracer == 0) {
        char byte = 0;
        setsid();
        close(go[1]), close(seized[0]);
        for (int fd = 0; fd < 1024; fd++)
            if (fd != go[0] && fd != seized[1])
                close(fd);
        if (read(go[0], &byte, 1) == 1 && ptrace(PTRACE_SEIZE, tracee, 0, 0) == 0 &&
            write(seized[1], "s", 1) == 1) {
            close(seized[1]);
            for (unsigned int waited = 0; waited < STUCK_MAX_MS && stuck_now(index); waited += HANG_POLL_MS)
                sleep_ms(HANG_POLL_MS);
        }
        _exit(0);
    }
    close(go[0]), close(seized[1]);
    if (tracer > 0) {
        char byte = 0;
        prctl(PR_SET_PTRACER, tracer, 0, 0, 0); /* where Yama allows only ancestors to trace */
        if (write(go[1], "g", 1) == 1 && read(seized[0], &byte, 1) != 1)
            fprintf(stderr, "fakecuda: stuck=1: the tracer could not attach\n");
    }
    close(go[1]), close(seized[0]);
}

/* One step of the probe on the GPU named index (all GPUs for STEP_INIT), outside the lock: wait while the
 * state says hang, then slow_ms, then answer the step's error from the state as it is then. */
static CUresult step(unsigned int index, unsigned int bit)
{
    unsigned int slow = 0;
    int traced = 0;
    for (;;) {
        int hanging = 0, stuck = 0;
        pthread_mutex_lock(&g_lock);
        refresh_locked();
        slow = 0;
        for (unsigned int i = 0; i < g_state.count; i++) {
            const struct gpu *g = &g_state.gpus[i];
            if (bit != STEP_INIT && g->index != index)
                continue;
            hanging |= (g->hang & bit) != 0;
            stuck |= g->stuck && (g->hang & bit) != 0;
            if (g->slow_ms > slow)
                slow = g->slow_ms;
        }
        pthread_mutex_unlock(&g_lock);
        if (!hanging)
            break;
        if (stuck && !traced) {
            traced = 1;
            become_unreapable(bit == STEP_INIT ? UINT_MAX : index);
        }
        sleep_ms(HANG_POLL_MS);
    }
    if (slow)
        sleep_ms(slow);
    pthread_mutex_lock(&g_lock);
    refresh_locked();
    CUresult r = CUDA_SUCCESS;
    if (bit == STEP_INIT) {
        r = g_state.init_error;
    } else {
        const struct gpu *g = gpu_by_index(index);
        if (!g)
            r = CUDA_ERROR_INVALID_DEVICE;
        else if (bit == STEP_CTX)
            r = g->ctx_error;
        else if (bit == STEP_ALLOC)
            r = g->alloc_error;
        else if (bit == STEP_MEMCPY)
            r = g->memcpy_error;
        else if (bit == STEP_SYNC)
            r = g->sync_error;
        else if (bit == STEP_FREE)
            r = g->free_error;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

/* ---- NVML holder lines ------------------------------------------------ */

static int lock_nvml(const char *path)
{
    char lock[PATH_MAX + 32];
    snprintf(lock, sizeof(lock), "%s.fakecuda-lock", path);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0)
        while (flock(fd, LOCK_EX) != 0 && errno == EINTR)
            ;
    return fd;
}

static void unlock_nvml(int fd)
{
    if (fd >= 0)
        close(fd); /* drops the flock */
}

/* An mtime strictly after prev and not before now, so fakenvml notices every write. */
static void bump_mtime(int fd, const struct timespec *prev)
{
    struct timespec now, t[2];
    clock_gettime(CLOCK_REALTIME, &now);
    struct timespec floor = *prev;
    floor.tv_nsec += 1000;
    if (floor.tv_nsec >= 1000000000L) {
        floor.tv_sec++;
        floor.tv_nsec -= 1000000000L;
    }
    if (now.tv_sec < floor.tv_sec || (now.tv_sec == floor.tv_sec && now.tv_nsec < floor.tv_nsec))
        now = floor;
    t[0] = now;
    t[1] = now;
    futimens(fd, t);
}

static int write_all(int fd, const char *buf, size_t n)
{
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Replace the first line equal to old_line (if any) with new_line (appended; NULL: none) in path, as a
 * whole new file renamed into place, under the lock. */
static void rewrite_nvml(const char *path, const char *old_line, const char *new_line)
{
    int lk = lock_nvml(path);
    FILE *f = fopen(path, "r");
    char *text = NULL;
    size_t cap = 0, len = 0;
    struct stat sb;
    memset(&sb, 0, sizeof(sb));
    sb.st_mode = 0644;
    if (f) {
        fstat(fileno(f), &sb);
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
            if (len + n > cap) {
                cap = (len + n) * 2;
                char *grown = realloc(text, cap);
                if (!grown)
                    break;
                text = grown;
            }
            memcpy(text + len, chunk, n);
            len += n;
        }
        fclose(f);
    }
    size_t ol = old_line ? strlen(old_line) : 0;
    for (char *p = text; ol && p && p < text + len;) {
        char *eol = memchr(p, '\n', (size_t)(text + len - p));
        size_t n = eol ? (size_t)(eol - p) : (size_t)(text + len - p);
        size_t m = n && p[n - 1] == '\r' ? n - 1 : n;
        if (m == ol && !memcmp(p, old_line, ol)) {
            size_t drop = eol ? n + 1 : n;
            memmove(p, p + drop, (size_t)(text + len - p - drop));
            len -= drop;
            break;
        }
        p = eol ? eol + 1 : text + len;
    }
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.fakecuda-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fprintf(stderr, "fakecuda: cannot write next to %s: %s\n", path, strerror(errno));
    } else {
        fchmod(fd, sb.st_mode & 07777);
        int bad = len && write_all(fd, text, len);
        if (!bad && new_line) {
            char buf[160];
            snprintf(buf, sizeof(buf), "%s%s\n", len && text[len - 1] != '\n' ? "\n" : "", new_line);
            bad = write_all(fd, buf, strlen(buf));
        }
        if (!bad)
            bump_mtime(fd, &sb.st_mtim);
        close(fd);
        if (bad || rename(tmp, path) != 0) {
            fprintf(stderr, "fakecuda: cannot update %s: %s\n", path, strerror(errno));
            unlink(tmp);
        }
    }
    free(text);
    unlock_nvml(lk);
}

/* Add delta (or take it away) from this process's line for (path, gpu), rewriting the line. */
static void slot_update(struct nvml_slot *s, unsigned long long bytes)
{
    char line[sizeof(s->line)] = "";
    s->bytes = bytes;
    if (bytes)
        snprintf(line, sizeof(line), "holder %u %d %llu", s->gpu, (int)s->owner, (bytes + MIB - 1) / MIB);
    if (bytes && s->mig >= 0)
        snprintf(line + strlen(line), sizeof(line) - strlen(line), " mig=%d", s->mig);
    if (strcmp(line, s->line)) {
        rewrite_nvml(s->path, s->line[0] ? s->line : NULL, line[0] ? line : NULL);
        snprintf(s->line, sizeof(s->line), "%s", line);
    }
}

static void holder_add(struct holder *h, const struct gpu *g, unsigned long long bytes)
{
    memset(h, 0, sizeof(*h));
    h->slot = -1;
    if (!g->nvml_state[0] || bytes == 0)
        return;
    pid_t me = getpid();
    int free_slot = -1;
    for (int i = 0; i < MAX_SLOTS; i++) {
        struct nvml_slot *s = &g_slots[i];
        if (s->owner != me) { /* empty, or inherited through fork: not this process's line */
            if (free_slot < 0)
                free_slot = i;
            continue;
        }
        if (s->gpu == g->nvml_gpu && s->mig == g->nvml_mig && !strcmp(s->path, g->nvml_state)) {
            h->slot = i;
            break;
        }
    }
    if (h->slot < 0) {
        if (free_slot < 0)
            return;
        struct nvml_slot *s = &g_slots[free_slot];
        memset(s, 0, sizeof(*s));
        s->owner = me;
        s->gpu = g->nvml_gpu;
        s->mig = g->nvml_mig;
        snprintf(s->path, sizeof(s->path), "%s", g->nvml_state);
        h->slot = free_slot;
    }
    h->owner = me;
    h->bytes = bytes;
    slot_update(&g_slots[h->slot], g_slots[h->slot].bytes + bytes);
}

static void holder_remove(struct holder *h)
{
    if (h->slot < 0 || !h->bytes || h->owner != getpid() || g_slots[h->slot].owner != h->owner)
        return;
    struct nvml_slot *s = &g_slots[h->slot];
    slot_update(s, s->bytes > h->bytes ? s->bytes - h->bytes : 0);
    h->bytes = 0;
}

/* ---- contexts and allocations (g_lock held) --------------------------- */

static struct CUctx_st *ctx_valid(CUcontext ctx)
{
    if (ctx < &g_ctx[0] || ctx >= &g_ctx[MAX_CTX] || !ctx->live)
        return NULL;
    return ctx;
}

static unsigned long long used_bytes(unsigned int index)
{
    unsigned long long used = 0;
    for (unsigned int i = 0; i < g_ctx_used; i++)
        if (g_ctx[i].live && g_ctx[i].gpu_index == index)
            used += g_ctx[i].mib * MIB;
    for (unsigned int i = 0; i < MAX_ALLOCS; i++)
        if (g_allocs[i].live && g_allocs[i].ctx->gpu_index == index)
            used += g_allocs[i].size;
    return used;
}

static CUresult ctx_new(const struct gpu *g, int primary, struct CUctx_st **out)
{
    if (g_ctx_used == MAX_CTX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (used_bytes(g->index) + g->ctx_mib * MIB > g->total_mib * MIB)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct CUctx_st *c = &g_ctx[g_ctx_used++];
    memset(c, 0, sizeof(*c));
    c->live = 1;
    c->primary = primary;
    c->refs = 1;
    c->gpu_index = g->index;
    c->mib = g->ctx_mib;
    holder_add(&c->holder, g, c->mib * MIB);
    *out = c;
    return CUDA_SUCCESS;
}

static void alloc_release(struct alloc *a)
{
    holder_remove(&a->holder);
    free(a->mem);
    g_backing -= a->size;
    memset(a, 0, sizeof(*a));
}

static void ctx_release(struct CUctx_st *c)
{
    for (unsigned int i = 0; i < MAX_ALLOCS; i++)
        if (g_allocs[i].live && g_allocs[i].ctx == c)
            alloc_release(&g_allocs[i]);
    holder_remove(&c->holder);
    c->live = 0;
    if (t_current == c)
        t_current = ctx_valid(c->prev);
}

/* The live allocation holding [p, p + n), or NULL. */
static struct alloc *alloc_find(CUdeviceptr p, size_t n)
{
    for (unsigned int i = 0; i < MAX_ALLOCS; i++) {
        struct alloc *a = &g_allocs[i];
        if (a->live && p >= a->addr && p - a->addr < a->size && n <= a->size - (p - a->addr))
            return a;
    }
    return NULL;
}

/* A normal exit takes this process's holder lines away (SIGKILL leaves them: fakenvml then ignores them,
 * the pid being gone). */
__attribute__((destructor)) static void fakecuda_fini(void)
{
    pthread_mutex_lock(&g_lock);
    pid_t me = getpid();
    for (int i = 0; i < MAX_SLOTS; i++)
        if (g_slots[i].owner == me && g_slots[i].line[0])
            slot_update(&g_slots[i], 0);
    pthread_mutex_unlock(&g_lock);
}

/* ---- API: errors, version, init --------------------------------------- */

EXPORT_BASE CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = error_name(error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static char g_error_words[N_ERRORS][64];
static pthread_once_t g_error_words_once = PTHREAD_ONCE_INIT;

/* "CUDA_ERROR_LAUNCH_FAILED" -> "launch failed". */
static void fill_error_words(void)
{
    for (size_t i = 0; i < N_ERRORS; i++) {
        const char *n = g_errors[i].name;
        n += strncmp(n, "CUDA_ERROR_", 11) == 0 ? 11 : 5;
        size_t j = 0;
        for (; n[j] && j + 1 < sizeof(g_error_words[i]); j++)
            g_error_words[i][j] = n[j] == '_' ? ' ' : (char)tolower((unsigned char)n[j]);
        g_error_words[i][j] = '\0';
    }
}

EXPORT_BASE CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(g_error_text) / sizeof(g_error_text[0]); i++) {
        if (g_error_text[i].code == error) {
            *pStr = g_error_text[i].text;
            return CUDA_SUCCESS;
        }
    }
    for (size_t i = 0; i < N_ERRORS; i++) {
        if (g_errors[i].code == error) {
            pthread_once(&g_error_words_once, fill_error_words);
            *pStr = g_error_words[i];
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    int have = refresh_locked() == 0;
    int done = g_initialized;
    pthread_mutex_unlock(&g_lock);
    if (done)
        return CUDA_SUCCESS;
    if (!have)
        return CUDA_ERROR_NO_DEVICE;
    CUresult r = step(0, STEP_INIT);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_lock);
    refresh_locked();
    unsigned int positions[MAX_GPUS];
    if (visible_positions(positions) == 0)
        r = CUDA_ERROR_NO_DEVICE;
    else
        g_initialized = 1;
    pthread_mutex_unlock(&g_lock);
    return r;
}

EXPORT_BASE CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    *driverVersion = refresh_locked() == 0 ? g_state.driver_version : DEFAULT_DRIVER_VERSION;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

/* ---- API: devices ----------------------------------------------------- */

EXPORT_BASE CUresult cuDeviceGetCount(int *count)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!count)
        return leave(CUDA_ERROR_INVALID_VALUE);
    unsigned int positions[MAX_GPUS];
    *count = (int)visible_positions(positions);
    return leave(CUDA_SUCCESS);
}

EXPORT_BASE CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!gpu_by_ordinal(ordinal))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    *device = ordinal;
    return leave(CUDA_SUCCESS);
}

EXPORT_PCI CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dev || !pciBusId)
        return leave(CUDA_ERROR_INVALID_VALUE);
    unsigned int dom, bus, d, fn;
    if (parse_pci(pciBusId, &dom, &bus, &d, &fn))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    unsigned int positions[MAX_GPUS];
    unsigned int n = visible_positions(positions);
    for (unsigned int o = 0; o < n; o++) {
        const struct gpu *g = &g_state.gpus[positions[o]];
        if (g->dom == dom && g->bus == bus && g->dev == d && g->fn == fn) {
            *dev = (CUdevice)o;
            return leave(CUDA_SUCCESS);
        }
    }
    return leave(CUDA_ERROR_INVALID_DEVICE);
}

#define CU_DEVICE_ATTRIBUTE_COMPUTE_MODE 20

EXPORT_BASE CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    const struct gpu *g = gpu_by_ordinal(dev);
    if (!g)
        return leave(CUDA_ERROR_INVALID_DEVICE);
    if (!pi || attrib != CU_DEVICE_ATTRIBUTE_COMPUTE_MODE)
        return leave(CUDA_ERROR_INVALID_VALUE);
    *pi = (int)g->compute_mode;
    return leave(CUDA_SUCCESS);
}

EXPORT_PCI CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    const struct gpu *g = gpu_by_ordinal(dev);
    if (!g)
        return leave(CUDA_ERROR_INVALID_DEVICE);
    if (!pciBusId || len <= 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.%X", g->dom, g->bus, g->dev, g->fn);
    return leave(CUDA_SUCCESS);
}

/* ---- API: contexts ---------------------------------------------------- */

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    const struct gpu *g = gpu_by_ordinal(dev);
    if (!g)
        return leave(CUDA_ERROR_INVALID_DEVICE);
    unsigned int index = g->index;
    leave(CUDA_SUCCESS);
    if ((r = step(index, STEP_CTX)) != CUDA_SUCCESS || (r = enter()) != CUDA_SUCCESS)
        return r;
    if (!(g = gpu_by_index(index)))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    struct CUctx_st *c;
    if ((r = ctx_new(g, 0, &c)) != CUDA_SUCCESS)
        return leave(r);
    c->prev = t_current;
    t_current = c;
    *pctx = c;
    return leave(CUDA_SUCCESS);
}

EXPORT_V2 CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

EXPORT_BASE CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

static CUresult ctx_destroy(CUcontext ctx)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUctx_st *c = ctx_valid(ctx);
    if (!c || c->primary)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    ctx_release(c);
    return leave(CUDA_SUCCESS);
}

EXPORT_V2 CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    return ctx_destroy(ctx);
}

EXPORT_BASE CUresult cuCtxDestroy(CUcontext ctx)
{
    return ctx_destroy(ctx);
}

static struct CUctx_st *primary_of(unsigned int index)
{
    for (unsigned int i = 0; i < g_ctx_used; i++)
        if (g_ctx[i].live && g_ctx[i].primary && g_ctx[i].gpu_index == index)
            return &g_ctx[i];
    return NULL;
}

EXPORT_BASE CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    const struct gpu *g = gpu_by_ordinal(dev);
    if (!g)
        return leave(CUDA_ERROR_INVALID_DEVICE);
    unsigned int index = g->index;
    struct CUctx_st *c = primary_of(index);
    if (c) {
        c->refs++;
        *pctx = c;
        return leave(CUDA_SUCCESS);
    }
    leave(CUDA_SUCCESS);
    if ((r = step(index, STEP_CTX)) != CUDA_SUCCESS || (r = enter()) != CUDA_SUCCESS)
        return r;
    if (!(g = gpu_by_index(index)))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    if ((c = primary_of(index)) != NULL)
        c->refs++;
    else if ((r = ctx_new(g, 1, &c)) != CUDA_SUCCESS)
        return leave(r);
    *pctx = c;
    return leave(CUDA_SUCCESS);
}

static CUresult primary_release(CUdevice dev)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    const struct gpu *g = gpu_by_ordinal(dev);
    if (!g)
        return leave(CUDA_ERROR_INVALID_DEVICE);
    struct CUctx_st *c = primary_of(g->index);
    if (!c)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    if (--c->refs == 0)
        ctx_release(c);
    return leave(CUDA_SUCCESS);
}

EXPORT_V2 CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    return primary_release(dev);
}

EXPORT_BASE CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return primary_release(dev);
}

EXPORT_BASE CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (ctx && !ctx_valid(ctx))
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    t_current = ctx;
    return leave(CUDA_SUCCESS);
}

EXPORT_BASE CUresult cuCtxSynchronize(void)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUctx_st *c = ctx_valid(t_current);
    if (!c)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    unsigned int index = c->gpu_index;
    leave(CUDA_SUCCESS);
    return step(index, STEP_SYNC);
}

/* ---- API: memory ------------------------------------------------------ */

EXPORT_V2 CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct CUctx_st *c = ctx_valid(t_current);
    if (!c)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    if (!dptr || bytesize == 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    unsigned int index = c->gpu_index;
    leave(CUDA_SUCCESS);
    if ((r = step(index, STEP_ALLOC)) != CUDA_SUCCESS || (r = enter()) != CUDA_SUCCESS)
        return r;
    if (!(c = ctx_valid(t_current)))
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    const struct gpu *g = gpu_by_index(index);
    if (!g)
        return leave(CUDA_ERROR_INVALID_DEVICE);
    unsigned long long total = g->total_mib * MIB, used = used_bytes(index);
    if (used > total || bytesize > total - used || bytesize > BACKING_CAP - g_backing)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    struct alloc *a = NULL;
    for (unsigned int i = 0; i < MAX_ALLOCS && !a; i++)
        if (!g_allocs[i].live)
            a = &g_allocs[i];
    unsigned char *mem = a ? calloc(1, bytesize) : NULL;
    if (!mem)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    a->live = 1;
    a->addr = g_next_addr;
    a->size = bytesize;
    a->mem = mem;
    a->ctx = c;
    g_next_addr += (bytesize + ADDR_ALIGN - 1) / ADDR_ALIGN * ADDR_ALIGN;
    g_backing += bytesize;
    holder_add(&a->holder, g, bytesize);
    *dptr = a->addr;
    return leave(CUDA_SUCCESS);
}

EXPORT_V2 CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct alloc *a = alloc_find(dptr, 0);
    if (!a || a->addr != dptr)
        return leave(CUDA_ERROR_INVALID_VALUE);
    unsigned int index = a->ctx->gpu_index;
    leave(CUDA_SUCCESS);
    if ((r = step(index, STEP_FREE)) != CUDA_SUCCESS || (r = enter()) != CUDA_SUCCESS)
        return r;
    a = alloc_find(dptr, 0);
    if (!a || a->addr != dptr)
        return leave(CUDA_ERROR_INVALID_VALUE);
    alloc_release(a);
    return leave(CUDA_SUCCESS);
}

/* The checks and the step of a memset or copy on [p, p + n); on success g_lock is held and *out is the
 * allocation (re-found after the step: it may have gone meanwhile). */
static CUresult mem_op(CUdeviceptr p, size_t n, const void *host, struct alloc **out, int *corrupt)
{
    CUresult r = enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ctx_valid(t_current))
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    struct alloc *a = alloc_find(p, n);
    if (!a || (!host && n))
        return leave(CUDA_ERROR_INVALID_VALUE);
    unsigned int index = a->ctx->gpu_index;
    leave(CUDA_SUCCESS);
    if ((r = step(index, STEP_MEMCPY)) != CUDA_SUCCESS || (r = enter()) != CUDA_SUCCESS)
        return r;
    if (!(a = alloc_find(p, n)))
        return leave(CUDA_ERROR_INVALID_VALUE);
    const struct gpu *g = gpu_by_index(index);
    *corrupt = g && g->corrupt;
    *out = a;
    return CUDA_SUCCESS;
}

EXPORT_V2 CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    struct alloc *a;
    int corrupt;
    CUresult r = mem_op(dstDevice, N, &uc, &a, &corrupt);
    if (r != CUDA_SUCCESS)
        return r;
    memset(a->mem + (dstDevice - a->addr), uc, N);
    return leave(CUDA_SUCCESS);
}

EXPORT_V2 CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    struct alloc *a;
    int corrupt;
    CUresult r = mem_op(dstDevice, ByteCount, srcHost, &a, &corrupt);
    if (r != CUDA_SUCCESS)
        return r;
    if (ByteCount)
        memcpy(a->mem + (dstDevice - a->addr), srcHost, ByteCount);
    return leave(CUDA_SUCCESS);
}

EXPORT_V2 CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    struct alloc *a;
    int corrupt;
    CUresult r = mem_op(srcDevice, ByteCount, dstHost, &a, &corrupt);
    if (r != CUDA_SUCCESS)
        return r;
    if (ByteCount) {
        memcpy(dstHost, a->mem + (srcDevice - a->addr), ByteCount);
        if (corrupt)
            ((unsigned char *)dstHost)[ByteCount / 2] ^= 0x10;
    }
    return leave(CUDA_SUCCESS);
}
