/*
 * fakenvml: a stand-in libnvidia-ml.so.1 for machines without an NVIDIA GPU.
 *
 * Implements a subset of the NVML C API with the ABI of NVIDIA's nvml.h
 * (struct layouts, versioned structs, return codes), driven by a plain-text
 * state file named by the FAKE_NVML_STATE environment variable. The file is
 * re-read whenever its inode, size or mtime (nanoseconds) changes; every API
 * call does one stat() to check.
 *
 * State file (one directive per line, '#' starts a comment, tokens separated
 * by blanks, values containing blanks in double quotes, \xHH for any byte):
 *
 *   driver 570.124.06
 *   cuda 12080
 *   init_error DRIVER_NOT_LOADED|LIB_RM_VERSION_MISMATCH|NO_PERMISSION|UNKNOWN
 *   gpu <index> key=value ...
 *   holder <gpu> <pid> <MiB> [graphics] [invisible] [ghost] [sm=N] [mem=N] [enc=N] [dec=N]
 *
 * gpu keys: name uuid serial pci total_mib baseline_mib reserved_mib util_pct
 * mem_util_pct temp_c power_mw power_limit_mw fan_pct (-1 = no fan) error
 * (GPU_IS_LOST|NOT_SUPPORTED|UNKNOWN|...) hang_ms, and the health figures:
 * remap_corr remap_unc remap_pending remap_failure (nvmlDeviceGetRemappedRows),
 * retired_pending (nvmlDeviceGetRetiredPagesPendingStatus), ecc_mode (0/1),
 * ecc_unc_volatile ecc_corr_volatile ecc_unc_aggregate ecc_corr_aggregate
 * (nvmlDeviceGetTotalEccErrors), clock_reasons (a bit mask; default: idle or
 * none), persistence (0/1), health_error (an error name every health query
 * returns: RESET_REQUIRED, NO_PERMISSION, ...), unsupported (a comma list of
 * remap,retired,ecc,clocks,persistence,events,recovery,fabric,memory: those
 * return NOT_SUPPORTED; "recovery" also makes nvmlDeviceGetFieldValues as a
 * whole return it and drops nvmlEventTypeGpuRecoveryAction from the supported
 * event types, as a driver before R565; "memory" makes both memory info calls
 * return it, as on a unified-memory GPU such as the GB10).
 *
 * recovery_action=N (unsigned): field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230)
 * of nvmlDeviceGetFieldValues (NVML_GPU_RECOVERY_ACTION_NONE 0, GPU_RESET 1,
 * NODE_REBOOT 2, DRAIN_P2P 3, DRAIN_AND_RESET 4, ...). Absent: that value's
 * nvmlReturn is NOT_SUPPORTED, as from a driver before R565; every other
 * fieldId always answers NOT_SUPPORTED per value.
 *
 * Fabric (nvmlDeviceGetGpuFabricInfo, nvmlDeviceGetGpuFabricInfoV with
 * nvmlGpuFabricInfo_v2 or _v3): fabric_state (0 NOT_SUPPORTED, 1 NOT_STARTED,
 * 2 IN_PROGRESS, 3 COMPLETED, or those names), fabric_status (an nvmlReturn_t
 * name or number, SUCCESS/0 by default), fabric_health_mask (decimal or 0x..),
 * fabric_clique (cliqueId), fabric_cluster_uuid (32 hex digits, dashes
 * allowed: clusterUuid's 16 bytes), fabric_health_summary (v3 healthSummary).
 * Without fabric_state both calls return NOT_SUPPORTED (no NVSwitch fabric,
 * e.g. a PCIe board).
 *
 *   xid <gpu> <code>      one critical Xid event (nvmlEventTypeXidCriticalError,
 *                         eventData = code).
 *   recovery <gpu> <N>    one GPU recovery action event
 *                         (nvmlEventTypeGpuRecoveryAction, eventData = N).
 *                         An event set delivers the xid and recovery lines
 *                         listed after those of their kind present when it
 *                         was created, in file order, once each, and only
 *                         those of a type it registered for that GPU (the
 *                         others are passed over for good).
 *                         nvmlDeviceGetSupportedEventTypes: ECC single/double
 *                         bit, Xid, recovery action (0x1|0x2|0x8|0x8000);
 *                         nvmlDeviceRegisterEvents asked for any other type
 *                         returns NOT_SUPPORTED and registers none, as nvml.h
 *                         says.
 * display_active (0/1), mig_current mig_pending (0/1), mig_max (what
 * nvmlDeviceGetMaxMigDeviceCount answers while mig_current is 1: default 7,
 * at most 8; 0 while MIG mode is off, as nvml.h says).
 *
 *   mig <gpu> <slot> key=value ...
 *                         one MIG device of a GPU in MIG mode (after that GPU's
 *                         line), at MIG device index <slot> (below mig_max):
 *                         nvmlDeviceGetMigDeviceHandleByIndex answers its
 *                         handle while mig_current is 1, NOT_FOUND for a slot
 *                         without a line. Keys: uuid (default
 *                         MIG-<gpu 8 hex>-0000-5000-8000-<slot 12 hex>),
 *                         profile (default 1g.10gb), name (default the GPU's
 *                         name, " MIG ", the profile), total_mib (default
 *                         9984), gi, ci (nvmlDeviceGetGpuInstanceId and
 *                         nvmlDeviceGetComputeInstanceId; default slot + 1, 0).
 *                         On a MIG handle nvmlDeviceGetName, GetUUID, the
 *                         memory info calls (no baseline: the holders with
 *                         mig=<slot> alone), the process lists (those holders)
 *                         and nvmlDeviceIsMigDeviceHandle answer for the MIG
 *                         device; every other call answers as its GPU does. A
 *                         holder line's mig=<slot> lists the process on that
 *                         MIG device as well as on the GPU.
 *
 * FAKE_NVML_DEVICE (optional): a file kept open from the first nvmlInit to the last nvmlShutdown.
 * proc_util_error (an error nvmlDeviceGetProcessUtilization alone returns, e.g.
 * NOT_SUPPORTED).
 *
 * A holder's sm/mem/enc/dec (percent) make nvmlDeviceGetProcessUtilization
 * report one sample for it, stamped now; a GPU none of whose live holders has
 * them answers NOT_FOUND (no sample in the window), as the driver does.
 *
 * Driver semantics: a plain holder counts (in used memory and in the process
 * list) only while the process has a thread that has not exited: its leader
 * not in state Z, or a defunct leader (Z) whose other threads live on.
 * "invisible" holders count regardless of /proc; "ghost" holders count in
 * used memory but are never listed.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))

/* Older drivers, for the fallback tests: each define hides a group of symbols from dlsym (the code stays,
 * so the calls that remain keep working through it).
 *   FAKENVML_NO_V3     before R510: no *RunningProcesses_v3, no nvmlDeviceGetMemoryInfo_v2
 *   FAKENVML_NO_V2     older still: no *RunningProcesses_v2, nvmlDeviceGetPciInfo_v2/_v3,
 *                      nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2
 *   FAKENVML_NO_POWER  a missing optional query: no nvmlDeviceGetPowerUsage, nvmlDeviceGetEnforcedPowerLimit
 *   FAKENVML_NO_HEALTH a driver before the health queries: no nvmlDeviceGetRemappedRows,
 *                      nvmlDeviceGetRetiredPagesPendingStatus, nvmlEventSet* nor nvmlDeviceRegisterEvents
 *   FAKENVML_NO_FABRIC a driver before the fabric queries (R525): no nvmlDeviceGetGpuFabricInfo,
 *                      nvmlDeviceGetGpuFabricInfoV */
#ifdef FAKENVML_NO_V3
#define EXPORT_V3 HIDDEN
#else
#define EXPORT_V3 EXPORT
#endif
#ifdef FAKENVML_NO_V2
#define EXPORT_V2 HIDDEN
#else
#define EXPORT_V2 EXPORT
#endif
#ifdef FAKENVML_NO_HEALTH
#define EXPORT_HEALTH HIDDEN
#else
#define EXPORT_HEALTH EXPORT
#endif
#ifdef FAKENVML_NO_POWER
#define EXPORT_POWER HIDDEN
#else
#define EXPORT_POWER EXPORT
#endif
#ifdef FAKENVML_NO_FABRIC
#define EXPORT_FABRIC HIDDEN
#else
#define EXPORT_FABRIC EXPORT
#endif

/* ---- nvml.h ABI ------------------------------------------------------- */

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999,
};

#define NVML_STRUCT_VERSION(data, ver) \
    (unsigned int)(sizeof(data##_v##ver##_t) | ((ver) << 24U))

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_VALUE_NOT_AVAILABLE_UINT 0xFFFFFFFFu

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain, bus, device, pciDeviceId;
} nvmlPciInfo_v1_t;

typedef struct {
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    unsigned int reserved0, reserved1, reserved2, reserved3;
} nvmlPciInfo_v2_t;

typedef struct {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(nvmlMemory, 2)

typedef struct {
    unsigned long long bar1Total, bar1Free, bar1Used;
} nvmlBAR1Memory_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int version;
    unsigned int sensorType;
    int temperature;
} nvmlTemperature_v1_t;
#define nvmlTemperature_v1 NVML_STRUCT_VERSION(nvmlTemperature, 1)

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef nvmlProcessInfo_v2_t nvmlProcessInfo_t; /* v3 has the v2 layout */

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

/* Field values (nvml.h: nvmlValueType_t, nvmlValue_t, nvmlFieldValue_t, NVML_FI_*). */
enum {
    NVML_VALUE_TYPE_DOUBLE = 0,
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
    NVML_VALUE_TYPE_SIGNED_INT = 5,
    NVML_VALUE_TYPE_UNSIGNED_SHORT = 6,
};
typedef unsigned int nvmlValueType_t; /* an enum in nvml.h: 4 bytes */

typedef union {
    double dVal;
    int siVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;   /* CPU time of the value, microseconds since 1970 */
    long long latencyUsec;
    nvmlValueType_t valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230

/* Fabric (nvml.h: nvmlFabricDefs). */
#define NVML_GPU_FABRIC_UUID_LEN 16
#define NVML_GPU_FABRIC_STATE_NOT_SUPPORTED 0
#define NVML_GPU_FABRIC_STATE_NOT_STARTED 1
#define NVML_GPU_FABRIC_STATE_IN_PROGRESS 2
#define NVML_GPU_FABRIC_STATE_COMPLETED 3
typedef unsigned char nvmlGpuFabricState_t;

typedef struct {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;
#define nvmlGpuFabricInfo_v2 NVML_STRUCT_VERSION(nvmlGpuFabricInfo, 2)

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;
typedef nvmlGpuFabricInfo_v3_t nvmlGpuFabricInfoV_t;
#define nvmlGpuFabricInfo_v3 NVML_STRUCT_VERSION(nvmlGpuFabricInfo, 3)

/* The sizes nvml.h's layouts have on x86-64 / aarch64 Linux (LP64). */
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t");
_Static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t");
_Static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 36, "nvmlGpuFabricInfo_v2_t");
_Static_assert(sizeof(nvmlGpuFabricInfo_v3_t) == 40, "nvmlGpuFabricInfo_v3_t");
_Static_assert(nvmlGpuFabricInfo_v2 == 0x02000024u, "nvmlGpuFabricInfo_v2");
_Static_assert(nvmlGpuFabricInfo_v3 == 0x03000028u, "nvmlGpuFabricInfo_v3");

/* ---- state ------------------------------------------------------------ */

#define MAX_GPUS 64
#define MAX_MIG 8
#define MAX_HOLDERS 1024
#define STR_LEN 96

struct mig {
    int present;
    char uuid[STR_LEN];
    char name[STR_LEN];
    char profile[STR_LEN];
    unsigned long long total_mib;
    unsigned int gi, ci;
};

#define H_GRAPHICS 1u
#define H_INVISIBLE 2u
#define H_GHOST 4u

struct gpu {
    int present;
    char name[STR_LEN];
    char uuid[STR_LEN];
    char serial[STR_LEN];
    char pci[STR_LEN];
    unsigned long long total_mib, baseline_mib, reserved_mib;
    unsigned int util_pct, mem_util_pct, temp_c, power_mw, power_limit_mw;
    int fan_pct;
    int error;
    unsigned int hang_ms;
    unsigned int remap_corr, remap_unc, remap_pending, remap_failure;
    unsigned int retired_pending, ecc_mode, persistence;
    unsigned long long ecc_unc_volatile, ecc_corr_volatile, ecc_unc_aggregate, ecc_corr_aggregate;
    long long clock_reasons; /* -1: idle when util_pct is 0, else none */
    int health_error;
    unsigned int unsupported; /* U_* bits */
    unsigned int display_active, mig_current, mig_pending, mig_max;
    struct mig migs[MAX_MIG];
    int proc_util_error;
    int has_recovery; /* recovery_action given */
    unsigned int recovery_action;
    int has_fabric; /* fabric_state given */
    unsigned int fabric_state, fabric_health_mask, fabric_clique, fabric_health_summary;
    int fabric_status;
    unsigned char fabric_cluster_uuid[NVML_GPU_FABRIC_UUID_LEN];
};

#define U_REMAP 1u
#define U_RETIRED 2u
#define U_ECC 4u
#define U_CLOCKS 8u
#define U_PERSISTENCE 16u
#define U_EVENTS 32u
#define U_RECOVERY 64u
#define U_FABRIC 128u
#define U_MEMORY 256u /* unified memory (GB10): the memory info calls answer NOT_SUPPORTED */

/* Event lines of the state file, in file order: xid and recovery lines alike. */
enum event_kind { EV_XID, EV_RECOVERY, EV_KINDS };
#define MAX_EVENTS 512
struct event_line {
    unsigned int gpu;
    enum event_kind kind;
    unsigned long long data; /* the Xid, or the recovery action */
};

struct holder {
    unsigned int gpu;
    unsigned int pid;
    unsigned long long mib;
    unsigned int flags;
    int util[4]; /* sm, mem, enc, dec percent; -1: no sample */
    int mig;     /* the MIG device (slot) it also shows on; -1: none */
};

struct state {
    char driver[STR_LEN];
    int cuda;
    int init_error;
    unsigned int gpu_count;
    struct gpu gpus[MAX_GPUS];
    unsigned int holder_count;
    struct holder holders[MAX_HOLDERS];
    unsigned int event_count;
    struct event_line events[MAX_EVENTS];
    unsigned int kind_count[EV_KINDS]; /* how many of event_count are of each kind */
};

struct nvmlDevice_st {
    unsigned int index;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct state g_state;
static int g_loaded;        /* g_state holds a successfully read file */
static struct stat g_stat;  /* identity of the file g_state came from */
static unsigned int g_init_count;
static struct nvmlDevice_st g_devices[MAX_GPUS];
static struct nvmlDevice_st g_mig_devices[MAX_GPUS * MAX_MIG];
static struct timespec g_start;

static const struct {
    const char *name;
    int code;
} g_error_names[] = {
    {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED},
    {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT},
    {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED},
    {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
    {"NOT_FOUND", NVML_ERROR_NOT_FOUND},
    {"INSUFFICIENT_POWER", NVML_ERROR_INSUFFICIENT_POWER},
    {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
    {"TIMEOUT", NVML_ERROR_TIMEOUT},
    {"IRQ_ISSUE", NVML_ERROR_IRQ_ISSUE},
    {"CORRUPTED_INFOROM", NVML_ERROR_CORRUPTED_INFOROM},
    {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST},
    {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED},
    {"OPERATING_SYSTEM", NVML_ERROR_OPERATING_SYSTEM},
    {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH},
    {"IN_USE", NVML_ERROR_IN_USE},
    {"MEMORY", NVML_ERROR_MEMORY},
    {"NO_DATA", NVML_ERROR_NO_DATA},
    {"INSUFFICIENT_RESOURCES", NVML_ERROR_INSUFFICIENT_RESOURCES},
    {"NOT_READY", NVML_ERROR_NOT_READY},
    {"GPU_NOT_FOUND", NVML_ERROR_GPU_NOT_FOUND},
    {"INVALID_STATE", NVML_ERROR_INVALID_STATE},
    {"UNKNOWN", NVML_ERROR_UNKNOWN},
};

static int error_code(const char *name)
{
    const char *n = name;
    if (strncasecmp(n, "NVML_ERROR_", 11) == 0)
        n += 11;
    for (size_t i = 0; i < sizeof(g_error_names) / sizeof(g_error_names[0]); i++)
        if (strcasecmp(n, g_error_names[i].name) == 0)
            return g_error_names[i].code;
    char *end;
    long v = strtol(name, &end, 10);
    if (*name && !*end && v > 0)
        return (int)v;
    return -1;
}

/* Like error_code, but SUCCESS (or 0) is allowed too: an nvmlReturn_t a struct carries. */
static int return_code(const char *name)
{
    const char *n = name;
    if (strncasecmp(n, "NVML_", 5) == 0)
        n += 5;
    if (!strcasecmp(n, "SUCCESS") || !strcmp(name, "0"))
        return NVML_SUCCESS;
    return error_code(name);
}

static void warn(const char *path, unsigned int line, const char *what, const char *tok)
{
    fprintf(stderr, "fakenvml: %s:%u: %s: %s\n", path, line, what, tok);
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
}

static void gpu_defaults(struct gpu *g, unsigned int i)
{
    memset(g, 0, sizeof(*g));
    g->present = 1;
    copy_str(g->name, sizeof(g->name), "NVIDIA RTX PRO 6000 Blackwell Server Edition");
    snprintf(g->uuid, sizeof(g->uuid), "GPU-fa4e0000-0000-0000-0000-%012x", i);
    snprintf(g->serial, sizeof(g->serial), "16520250%05u", i);
    snprintf(g->pci, sizeof(g->pci), "00000000:%02X:00.0", (0x17 + i) & 0xFF);
    g->total_mib = 49152;
    g->baseline_mib = 3;
    g->reserved_mib = 0;
    g->temp_c = 40;
    g->power_mw = 60000;
    g->power_limit_mw = 600000;
    g->fan_pct = -1;
    g->error = 0;
    g->ecc_mode = 1;
    g->persistence = 1;
    g->clock_reasons = -1;
    g->mig_max = 7;
}

/* Copy one character of a token from *s to *w: "\xHH" is the byte HH (any byte a real driver could
 * return, invalid UTF-8 included), anything else is itself. */
static void copy_char(char **s, char **w)
{
    char *p = *s;
    if (p[0] == '\\' && p[1] == 'x' && isxdigit((unsigned char)p[2]) && isxdigit((unsigned char)p[3])) {
        char hex[3] = {p[2], p[3], '\0'};
        *(*w)++ = (char)strtol(hex, NULL, 16);
        *s = p + 4;
        return;
    }
    *(*w)++ = *p;
    *s = p + 1;
}

/* Split a line into tokens in place. Handles "quoted values" and key="quoted
 * values" and \xHH escapes, and strips comments. Returns the token count. */
static int tokenize(char *s, char **tok, int max)
{
    int n = 0;
    char *w = s;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
            s++;
        if (!*s || *s == '#')
            break;
        if (n == max)
            break;
        tok[n++] = w;
        while (*s && *s != ' ' && *s != '\t' && *s != '\r' && *s != '\n') {
            if (*s == '"') {
                s++;
                while (*s && *s != '"')
                    copy_char(&s, &w);
                if (*s == '"')
                    s++;
            } else {
                copy_char(&s, &w);
            }
        }
        if (*s)
            s++;
        *w++ = '\0';
    }
    return n;
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

/* An unsigned int in decimal or 0x hex (bit masks). */
static int parse_uint_mask(const char *v, unsigned int *out)
{
    if (v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v + 2, &end, 16);
        if (errno || !v[2] || *end || v[2] == '-' || v[2] == '+' || x > 0xFFFFFFFFull)
            return -1;
        *out = (unsigned int)x;
        return 0;
    }
    return parse_uint(v, out);
}

/* 32 hex digits, dashes anywhere between them: 16 bytes. */
static int parse_uuid_bytes(const char *v, unsigned char out[NVML_GPU_FABRIC_UUID_LEN])
{
    unsigned int n = 0;
    unsigned char bytes[NVML_GPU_FABRIC_UUID_LEN] = {0};
    for (const char *p = v; *p; p++) {
        if (*p == '-')
            continue;
        if (!isxdigit((unsigned char)*p) || n >= 2 * NVML_GPU_FABRIC_UUID_LEN)
            return -1;
        int d = isdigit((unsigned char)*p) ? *p - '0' : tolower((unsigned char)*p) - 'a' + 10;
        bytes[n / 2] = (unsigned char)(bytes[n / 2] | (n % 2 ? d : d << 4));
        n++;
    }
    if (n != 2 * NVML_GPU_FABRIC_UUID_LEN)
        return -1;
    memcpy(out, bytes, sizeof(bytes));
    return 0;
}

static int parse_fabric_state(const char *v, unsigned int *out)
{
    static const char *names[4] = {"NOT_SUPPORTED", "NOT_STARTED", "IN_PROGRESS", "COMPLETED"};
    const char *n = v;
    if (strncasecmp(n, "NVML_GPU_FABRIC_STATE_", 22) == 0)
        n += 22;
    for (unsigned int i = 0; i < 4; i++)
        if (!strcasecmp(n, names[i])) {
            *out = i;
            return 0;
        }
    return parse_uint(v, out) || *out > 255 ? -1 : 0; /* nvmlGpuFabricState_t is one byte */
}

static void parse_gpu_key(struct gpu *g, const char *key, const char *val,
                          const char *path, unsigned int ln)
{
    int bad = 0;
    if (!strcmp(key, "name"))
        copy_str(g->name, sizeof(g->name), val);
    else if (!strcmp(key, "uuid"))
        copy_str(g->uuid, sizeof(g->uuid), val);
    else if (!strcmp(key, "serial"))
        copy_str(g->serial, sizeof(g->serial), val);
    else if (!strcmp(key, "pci"))
        copy_str(g->pci, sizeof(g->pci), val);
    else if (!strcmp(key, "total_mib"))
        bad = parse_ull(val, &g->total_mib);
    else if (!strcmp(key, "baseline_mib"))
        bad = parse_ull(val, &g->baseline_mib);
    else if (!strcmp(key, "reserved_mib"))
        bad = parse_ull(val, &g->reserved_mib);
    else if (!strcmp(key, "util_pct"))
        bad = parse_uint(val, &g->util_pct);
    else if (!strcmp(key, "mem_util_pct"))
        bad = parse_uint(val, &g->mem_util_pct);
    else if (!strcmp(key, "temp_c"))
        bad = parse_uint(val, &g->temp_c);
    else if (!strcmp(key, "power_mw"))
        bad = parse_uint(val, &g->power_mw);
    else if (!strcmp(key, "power_limit_mw"))
        bad = parse_uint(val, &g->power_limit_mw);
    else if (!strcmp(key, "hang_ms"))
        bad = parse_uint(val, &g->hang_ms);
    else if (!strcmp(key, "persistence"))
        bad = parse_uint(val, &g->persistence);
    else if (!strcmp(key, "display_active"))
        bad = parse_uint(val, &g->display_active);
    else if (!strcmp(key, "mig_current"))
        bad = parse_uint(val, &g->mig_current);
    else if (!strcmp(key, "mig_pending"))
        bad = parse_uint(val, &g->mig_pending);
    else if (!strcmp(key, "mig_max"))
        bad = parse_uint(val, &g->mig_max) || g->mig_max > MAX_MIG;
    else if (!strcmp(key, "proc_util_error")) {
        int c = error_code(val);
        bad = c < 0;
        if (!bad)
            g->proc_util_error = c;
    }
    else if (!strcmp(key, "fan_pct")) {
        char *end;
        long v = strtol(val, &end, 10);
        bad = (!*val || *end || v > 100);
        if (!bad)
            g->fan_pct = v < 0 ? -1 : (int)v;
    } else if (!strcmp(key, "error")) {
        int c = error_code(val);
        bad = c < 0;
        if (!bad)
            g->error = c;
    } else if (!strcmp(key, "health_error")) {
        int c = error_code(val);
        bad = c < 0;
        if (!bad)
            g->health_error = c;
    } else if (!strcmp(key, "remap_corr"))
        bad = parse_uint(val, &g->remap_corr);
    else if (!strcmp(key, "remap_unc"))
        bad = parse_uint(val, &g->remap_unc);
    else if (!strcmp(key, "remap_pending"))
        bad = parse_uint(val, &g->remap_pending);
    else if (!strcmp(key, "remap_failure"))
        bad = parse_uint(val, &g->remap_failure);
    else if (!strcmp(key, "retired_pending"))
        bad = parse_uint(val, &g->retired_pending);
    else if (!strcmp(key, "ecc_mode"))
        bad = parse_uint(val, &g->ecc_mode);
    else if (!strcmp(key, "persistence"))
        bad = parse_uint(val, &g->persistence);
    else if (!strcmp(key, "ecc_unc_volatile"))
        bad = parse_ull(val, &g->ecc_unc_volatile);
    else if (!strcmp(key, "ecc_corr_volatile"))
        bad = parse_ull(val, &g->ecc_corr_volatile);
    else if (!strcmp(key, "ecc_unc_aggregate"))
        bad = parse_ull(val, &g->ecc_unc_aggregate);
    else if (!strcmp(key, "ecc_corr_aggregate"))
        bad = parse_ull(val, &g->ecc_corr_aggregate);
    else if (!strcmp(key, "clock_reasons")) {
        unsigned long long x;
        bad = parse_ull(val, &x);
        if (!bad)
            g->clock_reasons = (long long)x;
    } else if (!strcmp(key, "unsupported")) {
        char copy[STR_LEN];
        copy_str(copy, sizeof(copy), val);
        for (char *save = NULL, *part = strtok_r(copy, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
            if (!strcmp(part, "remap"))
                g->unsupported |= U_REMAP;
            else if (!strcmp(part, "retired"))
                g->unsupported |= U_RETIRED;
            else if (!strcmp(part, "ecc"))
                g->unsupported |= U_ECC;
            else if (!strcmp(part, "clocks"))
                g->unsupported |= U_CLOCKS;
            else if (!strcmp(part, "persistence"))
                g->unsupported |= U_PERSISTENCE;
            else if (!strcmp(part, "events"))
                g->unsupported |= U_EVENTS;
            else if (!strcmp(part, "recovery"))
                g->unsupported |= U_RECOVERY;
            else if (!strcmp(part, "fabric"))
                g->unsupported |= U_FABRIC;
            else if (!strcmp(part, "memory"))
                g->unsupported |= U_MEMORY;
            else
                bad = 1;
        }
    } else if (!strcmp(key, "recovery_action")) {
        bad = parse_uint(val, &g->recovery_action);
        if (!bad)
            g->has_recovery = 1;
    } else if (!strcmp(key, "fabric_state")) {
        bad = parse_fabric_state(val, &g->fabric_state);
        if (!bad)
            g->has_fabric = 1;
    } else if (!strcmp(key, "fabric_status")) {
        int c = return_code(val);
        bad = c < 0;
        if (!bad)
            g->fabric_status = c;
    } else if (!strcmp(key, "fabric_health_mask"))
        bad = parse_uint_mask(val, &g->fabric_health_mask);
    else if (!strcmp(key, "fabric_clique"))
        bad = parse_uint(val, &g->fabric_clique);
    else if (!strcmp(key, "fabric_health_summary"))
        bad = parse_uint(val, &g->fabric_health_summary) || g->fabric_health_summary > 255;
    else if (!strcmp(key, "fabric_cluster_uuid"))
        bad = parse_uuid_bytes(val, g->fabric_cluster_uuid);
    else {
        warn(path, ln, "unknown gpu key", key);
        return;
    }
    if (bad)
        warn(path, ln, "bad value", val);
}

/* "sm=40" and the like on a holder line: 1 when it was one (and valid). */
static int util_token(const char *tok, struct holder *h)
{
    static const char *keys[4] = {"sm=", "mem=", "enc=", "dec="};
    for (int k = 0; k < 4; k++) {
        size_t n = strlen(keys[k]);
        if (!strncmp(tok, keys[k], n)) {
            unsigned int v;
            if (parse_uint(tok + n, &v) || v > 100)
                return 0;
            h->util[k] = (int)v;
            return 1;
        }
    }
    return 0;
}

/* Parse the whole file into *st. Returns 0, or -1 if the file is unreadable. */
static int parse_file(const char *path, struct state *st)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    memset(st, 0, sizeof(*st));
    copy_str(st->driver, sizeof(st->driver), "570.124.06");
    st->cuda = 12080;
    char line[4096];
    unsigned int ln = 0;
    while (fgets(line, sizeof(line), f)) {
        ln++;
        char *tok[64];
        int n = tokenize(line, tok, 64);
        if (n == 0)
            continue;
        if (!strcmp(tok[0], "driver") && n >= 2) {
            copy_str(st->driver, sizeof(st->driver), tok[1]);
        } else if (!strcmp(tok[0], "cuda") && n >= 2) {
            char *end;
            long v = strtol(tok[1], &end, 10);
            if (*end || v <= 0)
                warn(path, ln, "bad cuda version", tok[1]);
            else
                st->cuda = (int)v;
        } else if (!strcmp(tok[0], "init_error") && n >= 2) {
            int c = error_code(tok[1]);
            if (c < 0)
                warn(path, ln, "unknown error name", tok[1]);
            else
                st->init_error = c;
        } else if (!strcmp(tok[0], "gpu") && n >= 2) {
            unsigned int idx;
            if (parse_uint(tok[1], &idx) || idx >= MAX_GPUS) {
                warn(path, ln, "bad gpu index", tok[1]);
                continue;
            }
            struct gpu *g = &st->gpus[idx];
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
            if (idx + 1 > st->gpu_count)
                st->gpu_count = idx + 1;
        } else if (!strcmp(tok[0], "holder") && n >= 4) {
            struct holder h = {0, 0, 0, 0, {-1, -1, -1, -1}, -1};
            if (parse_uint(tok[1], &h.gpu) || parse_uint(tok[2], &h.pid) ||
                parse_ull(tok[3], &h.mib)) {
                warn(path, ln, "bad holder", tok[1]);
                continue;
            }
            for (int i = 4; i < n; i++) {
                if (!strcmp(tok[i], "graphics"))
                    h.flags |= H_GRAPHICS;
                else if (!strcmp(tok[i], "invisible"))
                    h.flags |= H_INVISIBLE;
                else if (!strcmp(tok[i], "ghost"))
                    h.flags |= H_GHOST;
                else if (!strcmp(tok[i], "compute"))
                    ;
                else if (util_token(tok[i], &h))
                    ;
                else if (!strncmp(tok[i], "mig=", 4)) {
                    unsigned int m;
                    if (parse_uint(tok[i] + 4, &m) || m >= MAX_MIG)
                        warn(path, ln, "bad holder mig", tok[i]);
                    else
                        h.mig = (int)m;
                }
                else
                    warn(path, ln, "unknown holder flag", tok[i]);
            }
            if (st->holder_count < MAX_HOLDERS)
                st->holders[st->holder_count++] = h;
            else
                warn(path, ln, "too many holders", tok[2]);
        } else if (!strcmp(tok[0], "mig") && n >= 3) {
            unsigned int idx, slot;
            if (parse_uint(tok[1], &idx) || idx >= st->gpu_count || !st->gpus[idx].present ||
                parse_uint(tok[2], &slot) || slot >= MAX_MIG) {
                warn(path, ln, "bad mig (after its gpu line, slot below 8)", tok[1]);
                continue;
            }
            struct gpu *g = &st->gpus[idx];
            struct mig *m = &g->migs[slot];
            memset(m, 0, sizeof(*m));
            m->present = 1;
            snprintf(m->uuid, sizeof(m->uuid), "MIG-%08x-0000-5000-8000-%012x", idx, slot);
            copy_str(m->profile, sizeof(m->profile), "1g.10gb");
            m->total_mib = 9984;
            m->gi = slot + 1;
            for (int i = 3; i < n; i++) {
                char *eq = strchr(tok[i], '=');
                if (!eq) {
                    warn(path, ln, "expected key=value", tok[i]);
                    continue;
                }
                *eq = '\0';
                const char *key = tok[i], *val = eq + 1;
                int bad = 0;
                if (!strcmp(key, "uuid"))
                    copy_str(m->uuid, sizeof(m->uuid), val);
                else if (!strcmp(key, "profile"))
                    copy_str(m->profile, sizeof(m->profile), val);
                else if (!strcmp(key, "name"))
                    copy_str(m->name, sizeof(m->name), val);
                else if (!strcmp(key, "total_mib"))
                    bad = parse_ull(val, &m->total_mib);
                else if (!strcmp(key, "gi"))
                    bad = parse_uint(val, &m->gi);
                else if (!strcmp(key, "ci"))
                    bad = parse_uint(val, &m->ci);
                else
                    warn(path, ln, "unknown mig key", key);
                if (bad)
                    warn(path, ln, "bad value", val);
            }
            if (!m->name[0]) {
                char name[STR_LEN];
                snprintf(name, sizeof(name), "%.60s MIG %.30s", g->name, m->profile);
                copy_str(m->name, sizeof(m->name), name);
            }
        } else if ((!strcmp(tok[0], "xid") || !strcmp(tok[0], "recovery")) && n >= 3) {
            struct event_line e = {0, tok[0][0] == 'x' ? EV_XID : EV_RECOVERY, 0};
            unsigned int action;
            int bad = parse_uint(tok[1], &e.gpu);
            if (e.kind == EV_XID)
                bad = bad || parse_ull(tok[2], &e.data);
            else if (!(bad = bad || parse_uint(tok[2], &action)))
                e.data = action;
            if (bad) {
                warn(path, ln, e.kind == EV_XID ? "bad xid" : "bad recovery", tok[1]);
                continue;
            }
            if (st->event_count < MAX_EVENTS) {
                st->events[st->event_count++] = e;
                st->kind_count[e.kind]++;
            } else {
                warn(path, ln, "too many events", tok[2]);
            }
        } else {
            warn(path, ln, "unknown directive", tok[0]);
        }
    }
    fclose(f);
    /* Indices that were skipped in the file still exist, with defaults. */
    for (unsigned int i = 0; i < st->gpu_count; i++)
        if (!st->gpus[i].present)
            gpu_defaults(&st->gpus[i], i);
    return 0;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* With g_lock held: re-read the state file if it changed. Returns 0 when
 * g_state is usable, -1 when no state was ever read. */
static int refresh_locked(void)
{
    const char *path = getenv("FAKE_NVML_STATE");
    struct stat sb;
    if (path && *path && stat(path, &sb) == 0) {
        if (!g_loaded || !same_file(&sb, &g_stat)) {
            static struct state fresh;
            if (parse_file(path, &fresh) == 0) {
                memcpy(&g_state, &fresh, sizeof(g_state));
                g_stat = sb;
                g_loaded = 1;
            }
        }
    }
    return g_loaded ? 0 : -1;
}

/* ---- helpers ---------------------------------------------------------- */

/* The state letter of /proc/<pid>/task/<tid>/stat (tid == pid: the leader), or 0. */
static char task_state(unsigned int pid, unsigned int tid)
{
    char path[96], buf[512];
    snprintf(path, sizeof(path), "/proc/%u/task/%u/stat", pid, tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return 0;
    return p[2];
}

static int exited(char state)
{
    return state == 0 || state == 'Z' || state == 'X' || state == 'x';
}

/* A process holds its memory until every thread has exited: a leader in Z whose
 * other threads live on (a defunct leader) still holds it, a true zombie not. */
static int pid_alive(unsigned int pid)
{
    char state = task_state(pid, pid);
    if (state == 0)
        return 0;
    if (!exited(state))
        return 1;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/task", pid);
    DIR *dir = opendir(path);
    if (!dir)
        return 0;
    int live = 0;
    struct dirent *entry;
    while (!live && (entry = readdir(dir)) != NULL) {
        unsigned int tid = (unsigned int)strtoul(entry->d_name, NULL, 10);
        if (tid != 0 && tid != pid && !exited(task_state(pid, tid)))
            live = 1;
    }
    closedir(dir);
    return live;
}

static int holder_counts(const struct holder *h)
{
    if (h->flags & (H_INVISIBLE | H_GHOST))
        return 1;
    return pid_alive(h->pid);
}

static void sleep_ms(unsigned int ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A consistent copy of one GPU and its holders, taken under the lock (a MIG device: its GPU's, with the
 * MIG device's name, UUID and memory, and the holders shown on it). */
struct dev_view {
    unsigned int index;
    int mig; /* the MIG device's slot; -1: the GPU itself */
    struct gpu g;
    unsigned int nh;
    struct holder h[MAX_HOLDERS];
};

static nvmlReturn_t check_init_locked(void)
{
    if (g_init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    refresh_locked();
    return NVML_SUCCESS;
}

static nvmlReturn_t system_enter(void)
{
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t r = check_init_locked();
    if (r != NVML_SUCCESS)
        pthread_mutex_unlock(&g_lock);
    return r;
}

static void system_leave(void)
{
    pthread_mutex_unlock(&g_lock);
}

/* A MIG device handle's GPU index and slot: 0, or -1 when dev is not one. */
static int mig_handle(nvmlDevice_t dev, unsigned int *idx, unsigned int *slot)
{
    if (dev < &g_mig_devices[0] || dev >= &g_mig_devices[MAX_GPUS * MAX_MIG])
        return -1;
    unsigned int at = (unsigned int)(dev - &g_mig_devices[0]);
    *idx = at / MAX_MIG;
    *slot = at % MAX_MIG;
    return 0;
}

static int handle_index(nvmlDevice_t dev, unsigned int *idx)
{
    if (dev < &g_devices[0] || dev >= &g_devices[MAX_GPUS])
        return -1;
    *idx = (unsigned int)(dev - &g_devices[0]);
    return 0;
}

/* Entry point for every per-device call: validates the handle, copies the
 * device's state, then (outside the lock) applies hang_ms and error. */
static nvmlReturn_t dev_enter(nvmlDevice_t dev, struct dev_view *v, int want_holders)
{
    unsigned int idx = 0, slot = 0;
    int mig = -1;
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t r = check_init_locked();
    if (r == NVML_SUCCESS && mig_handle(dev, &idx, &slot) == 0) {
        /* A MIG device exists while its line does and its GPU is in MIG mode. */
        if (idx >= g_state.gpu_count || !g_state.gpus[idx].mig_current || !g_state.gpus[idx].migs[slot].present)
            r = NVML_ERROR_INVALID_ARGUMENT;
        mig = (int)slot;
    } else if (r == NVML_SUCCESS && (handle_index(dev, &idx) != 0 || idx >= g_state.gpu_count)) {
        r = NVML_ERROR_INVALID_ARGUMENT;
    }
    if (r == NVML_SUCCESS) {
        v->index = idx;
        v->mig = mig;
        v->g = g_state.gpus[idx];
        if (mig >= 0) {
            const struct mig *m = &g_state.gpus[idx].migs[mig];
            copy_str(v->g.name, sizeof(v->g.name), m->name);
            copy_str(v->g.uuid, sizeof(v->g.uuid), m->uuid);
            v->g.total_mib = m->total_mib;
            v->g.baseline_mib = 0;
            v->g.reserved_mib = 0;
        }
        v->nh = 0;
        if (want_holders)
            for (unsigned int i = 0; i < g_state.holder_count; i++)
                if (g_state.holders[i].gpu == idx && (mig < 0 || g_state.holders[i].mig == mig))
                    v->h[v->nh++] = g_state.holders[i];
    }
    pthread_mutex_unlock(&g_lock);
    if (r != NVML_SUCCESS)
        return r;
    if (v->g.hang_ms)
        sleep_ms(v->g.hang_ms);
    if (v->g.error)
        return v->g.error;
    return NVML_SUCCESS;
}

#define DEV_ENTER(dev, v)                                 \
    struct dev_view v##_storage;                          \
    struct dev_view *v = &v##_storage;                    \
    do {                                                  \
        nvmlReturn_t _r = dev_enter((dev), v, 0);         \
        if (_r != NVML_SUCCESS)                           \
            return _r;                                    \
    } while (0)

#define MIB 1048576ull

static unsigned long long used_bytes(const struct dev_view *v)
{
    unsigned long long mib = v->g.baseline_mib;
    for (unsigned int i = 0; i < v->nh; i++)
        if (holder_counts(&v->h[i]))
            mib += v->h[i].mib;
    return mib * MIB;
}

static nvmlReturn_t put_str(char *buf, unsigned int length, const char *s)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(s);
    if (length < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, n + 1);
    return NVML_SUCCESS;
}

static void parse_pci(const char *s, unsigned int *dom, unsigned int *bus, unsigned int *dev,
                      unsigned int *fn)
{
    *dom = *bus = *dev = *fn = 0;
    if (sscanf(s, "%x:%x:%x.%x", dom, bus, dev, fn) != 4) {
        *dom = 0;
        sscanf(s, "%x:%x.%x", bus, dev, fn);
    }
}

#define PCI_DEVICE_ID 0x2BB510DEu
#define PCI_SUBSYS_ID 0x204E10DEu

/* ---- init / system ---------------------------------------------------- */

/* FAKE_NVML_DEVICE names a file the library keeps open while initialised, as the real one keeps
 * /dev/nvidiactl and /dev/nvidiaN open: a test sees who holds "the device" and when it is let go. */
static int g_device_fd = -1;

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t r = NVML_SUCCESS;
    const char *path = getenv("FAKE_NVML_STATE");
    if (!path || !*path || access(path, R_OK) != 0 || refresh_locked() != 0)
        r = NVML_ERROR_DRIVER_NOT_LOADED;
    else if (g_state.init_error)
        r = g_state.init_error;
    if (r == NVML_SUCCESS) {
        if (g_init_count == 0 && g_start.tv_sec == 0)
            clock_gettime(CLOCK_MONOTONIC, &g_start);
        for (unsigned int i = 0; i < MAX_GPUS; i++)
            g_devices[i].index = i;
        const char *device = getenv("FAKE_NVML_DEVICE");
        if (g_init_count == 0 && device && *device && g_device_fd < 0)
            g_device_fd = open(device, O_RDONLY | O_CLOEXEC);
        g_init_count++;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t r = NVML_SUCCESS;
    if (g_init_count == 0)
        r = NVML_ERROR_UNINITIALIZED;
    else
        g_init_count--;
    if (g_init_count == 0 && g_device_fd >= 0) {
        close(g_device_fd);
        g_device_fd = -1;
    }
    pthread_mutex_unlock(&g_lock);
    return r;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "ECC is not supported on vGPU";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS)
        return r;
    r = put_str(version, length, g_state.driver);
    system_leave();
    return r;
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS)
        return r;
    char buf[STR_LEN + 16];
    snprintf(buf, sizeof(buf), "%d.%s", g_state.cuda / 1000, g_state.driver);
    r = put_str(version, length, buf);
    system_leave();
    return r;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS)
        return r;
    *cudaDriverVersion = g_state.cuda;
    system_leave();
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    if (!name || length == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS)
        return r;
    system_leave();
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%u/comm", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NVML_ERROR_NOT_FOUND;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n'))
        buf[--n] = '\0';
    /* Like the real library: truncate to the caller's buffer. */
    snprintf(name, length, "%s", buf);
    return NVML_SUCCESS;
}

/* ---- enumeration ------------------------------------------------------ */

EXPORT_V2 nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS)
        return r;
    *deviceCount = g_state.gpu_count;
    system_leave();
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

EXPORT_V2 nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!device)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS)
        return r;
    if (index >= g_state.gpu_count)
        r = NVML_ERROR_INVALID_ARGUMENT;
    else
        *device = &g_devices[index];
    system_leave();
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS)
        return r;
    r = NVML_ERROR_NOT_FOUND;
    for (unsigned int i = 0; i < g_state.gpu_count; i++)
        if (strcasecmp(g_state.gpus[i].uuid, uuid) == 0) {
            *device = &g_devices[i];
            r = NVML_SUCCESS;
            break;
        }
    system_leave();
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    if (!serial || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS)
        return r;
    r = NVML_ERROR_NOT_FOUND;
    for (unsigned int i = 0; i < g_state.gpu_count; i++)
        if (strcmp(g_state.gpus[i].serial, serial) == 0) {
            *device = &g_devices[i];
            r = NVML_SUCCESS;
            break;
        }
    system_leave();
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    if (!pciBusId || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int d, b, s, f;
    parse_pci(pciBusId, &d, &b, &s, &f);
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS)
        return r;
    r = NVML_ERROR_NOT_FOUND;
    for (unsigned int i = 0; i < g_state.gpu_count; i++) {
        unsigned int d2, b2, s2, f2;
        parse_pci(g_state.gpus[i].pci, &d2, &b2, &s2, &f2);
        if (d == d2 && b == b2 && s == s2 && f == f2) {
            *device = &g_devices[i];
            r = NVML_SUCCESS;
            break;
        }
    }
    system_leave();
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ---- identity --------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *index = v->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    if (!minorNumber)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *minorNumber = v->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    DEV_ENTER(device, v);
    return put_str(name, length, v->g.name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    DEV_ENTER(device, v);
    return put_str(uuid, length, v->g.uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    DEV_ENTER(device, v);
    return put_str(serial, length, v->g.serial);
}

EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, unsigned int *type)
{
    if (!type)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    (void)v;
    *type = 13; /* NVML_BRAND_NVIDIA_RTX */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch)
{
    if (!arch)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    (void)v;
    *arch = 10; /* NVML_DEVICE_ARCH_BLACKWELL */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    (void)v;
    *major = 12;
    *minor = 0;
    return NVML_SUCCESS;
}

static void fill_pci_common(const struct gpu *g, unsigned int *dom, unsigned int *bus,
                            unsigned int *dev)
{
    unsigned int fn;
    parse_pci(g->pci, dom, bus, dev, &fn);
}

EXPORT_V2 nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    memset(pci, 0, sizeof(*pci));
    fill_pci_common(&v->g, &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = PCI_DEVICE_ID;
    pci->pciSubSystemId = PCI_SUBSYS_ID;
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", pci->domain, pci->bus,
             pci->device);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0",
             pci->domain & 0xFFFF, pci->bus & 0xFF, pci->device & 0xFF);
    return NVML_SUCCESS;
}

EXPORT_V2 nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_v2_t *pci)
{
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlPciInfo_t full;
    nvmlReturn_t r = nvmlDeviceGetPciInfo_v3(device, &full);
    if (r != NVML_SUCCESS)
        return r;
    memset(pci, 0, sizeof(*pci));
    memcpy(pci->busId, full.busIdLegacy, sizeof(pci->busId));
    pci->domain = full.domain;
    pci->bus = full.bus;
    pci->device = full.device;
    pci->pciDeviceId = full.pciDeviceId;
    pci->pciSubSystemId = full.pciSubSystemId;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_v1_t *pci)
{
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlPciInfo_t full;
    nvmlReturn_t r = nvmlDeviceGetPciInfo_v3(device, &full);
    if (r != NVML_SUCCESS)
        return r;
    memset(pci, 0, sizeof(*pci));
    memcpy(pci->busId, full.busIdLegacy, sizeof(pci->busId));
    pci->domain = full.domain;
    pci->bus = full.bus;
    pci->device = full.device;
    pci->pciDeviceId = full.pciDeviceId;
    return NVML_SUCCESS;
}

/* ---- memory ----------------------------------------------------------- */

static nvmlReturn_t memory_figures(nvmlDevice_t device, unsigned long long *total,
                                   unsigned long long *reserved, unsigned long long *free_,
                                   unsigned long long *used)
{
    struct dev_view *v = malloc(sizeof(*v));
    if (!v)
        return NVML_ERROR_MEMORY;
    nvmlReturn_t r = dev_enter(device, v, 1);
    if (r == NVML_SUCCESS && (v->g.unsupported & U_MEMORY))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        *total = v->g.total_mib * MIB;
        *reserved = v->g.reserved_mib * MIB;
        *used = used_bytes(v);
        unsigned long long taken = *reserved + *used;
        *free_ = taken >= *total ? 0 : *total - taken;
    }
    free(v);
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total, reserved, free_, used;
    nvmlReturn_t r = memory_figures(device, &total, &reserved, &free_, &used);
    if (r != NVML_SUCCESS)
        return r;
    /* v1: "used" is reserved plus allocated memory. */
    memory->total = total;
    memory->free = free_;
    memory->used = used + reserved;
    return NVML_SUCCESS;
}

EXPORT_V3 nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long total, reserved, free_, used;
    nvmlReturn_t r = memory_figures(device, &total, &reserved, &free_, &used);
    if (r != NVML_SUCCESS)
        return r;
    memory->total = total;
    memory->reserved = reserved;
    memory->free = free_;
    memory->used = used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1)
{
    if (!bar1)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    bar1->bar1Total = v->g.total_mib * MIB;
    bar1->bar1Used = 2 * MIB;
    bar1->bar1Free = bar1->bar1Total > bar1->bar1Used ? bar1->bar1Total - bar1->bar1Used : 0;
    return NVML_SUCCESS;
}

/* ---- processes -------------------------------------------------------- */

enum proc_kind { PK_COMPUTE, PK_GRAPHICS, PK_MPS };

static nvmlReturn_t running_processes(nvmlDevice_t device, enum proc_kind kind,
                                      unsigned int *infoCount, void *infos, int version)
{
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev_view *v = malloc(sizeof(*v));
    if (!v)
        return NVML_ERROR_MEMORY;
    nvmlReturn_t r = dev_enter(device, v, 1);
    if (r != NVML_SUCCESS) {
        free(v);
        return r;
    }
    unsigned int n = 0;
    struct holder *list = v->h;
    if (kind != PK_MPS) {
        for (unsigned int i = 0; i < v->nh; i++) {
            const struct holder *h = &v->h[i];
            if (h->flags & H_GHOST)
                continue;
            if (((h->flags & H_GRAPHICS) != 0) != (kind == PK_GRAPHICS))
                continue;
            if (!holder_counts(h))
                continue;
            list[n++] = *h;
        }
    }
    if (*infoCount < n) {
        *infoCount = n;
        r = NVML_ERROR_INSUFFICIENT_SIZE;
    } else if (n > 0 && !infos) {
        r = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        for (unsigned int i = 0; i < n; i++) {
            if (version == 1) {
                nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
                p->pid = list[i].pid;
                p->usedGpuMemory = list[i].mib * MIB;
            } else {
                nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)infos + i;
                p->pid = list[i].pid;
                p->usedGpuMemory = list[i].mib * MIB;
                p->gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
                p->computeInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
            }
        }
        *infoCount = n;
    }
    free(v);
    return r;
}

#define PROC_FN(visibility, name, kind, ver, type)                                           \
    visibility nvmlReturn_t name(nvmlDevice_t device, unsigned int *infoCount, type *infos) \
    {                                                                                        \
        return running_processes(device, kind, infoCount, infos, ver);                       \
    }

PROC_FN(EXPORT, nvmlDeviceGetComputeRunningProcesses, PK_COMPUTE, 1, nvmlProcessInfo_v1_t)
PROC_FN(EXPORT_V2, nvmlDeviceGetComputeRunningProcesses_v2, PK_COMPUTE, 2, nvmlProcessInfo_v2_t)
PROC_FN(EXPORT_V3, nvmlDeviceGetComputeRunningProcesses_v3, PK_COMPUTE, 3, nvmlProcessInfo_t)
PROC_FN(EXPORT, nvmlDeviceGetGraphicsRunningProcesses, PK_GRAPHICS, 1, nvmlProcessInfo_v1_t)
PROC_FN(EXPORT_V2, nvmlDeviceGetGraphicsRunningProcesses_v2, PK_GRAPHICS, 2, nvmlProcessInfo_v2_t)
PROC_FN(EXPORT_V3, nvmlDeviceGetGraphicsRunningProcesses_v3, PK_GRAPHICS, 3, nvmlProcessInfo_t)
PROC_FN(EXPORT, nvmlDeviceGetMPSComputeRunningProcesses, PK_MPS, 1, nvmlProcessInfo_v1_t)
PROC_FN(EXPORT_V2, nvmlDeviceGetMPSComputeRunningProcesses_v2, PK_MPS, 2, nvmlProcessInfo_v2_t)
PROC_FN(EXPORT_V3, nvmlDeviceGetMPSComputeRunningProcesses_v3, PK_MPS, 3, nvmlProcessInfo_t)

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                    nvmlProcessUtilizationSample_t *utilization,
                                                    unsigned int *processSamplesCount,
                                                    unsigned long long lastSeenTimeStamp)
{
    (void)lastSeenTimeStamp;
    if (!processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev_view *v = malloc(sizeof(*v));
    if (!v)
        return NVML_ERROR_MEMORY;
    nvmlReturn_t r = dev_enter(device, v, 1);
    if (r == NVML_SUCCESS && v->g.proc_util_error)
        r = v->g.proc_util_error;
    if (r != NVML_SUCCESS) {
        free(v);
        return r;
    }
    unsigned int n = 0;
    for (unsigned int i = 0; i < v->nh; i++) {
        const struct holder *h = &v->h[i];
        if (h->util[0] < 0 && h->util[1] < 0 && h->util[2] < 0 && h->util[3] < 0)
            continue;
        if ((h->flags & H_GHOST) || !holder_counts(h))
            continue;
        v->h[n++] = *h;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    unsigned long long stamp = (unsigned long long)now.tv_sec * 1000000ull + (unsigned long long)now.tv_nsec / 1000ull;
    if (n == 0) {
        r = NVML_ERROR_NOT_FOUND;
    } else if (!utilization || *processSamplesCount < n) {
        *processSamplesCount = n;
        r = NVML_ERROR_INSUFFICIENT_SIZE;
    } else {
        for (unsigned int i = 0; i < n; i++) {
            nvmlProcessUtilizationSample_t *s = &utilization[i];
            s->pid = v->h[i].pid;
            s->timeStamp = stamp;
            s->smUtil = v->h[i].util[0] < 0 ? 0 : (unsigned int)v->h[i].util[0];
            s->memUtil = v->h[i].util[1] < 0 ? 0 : (unsigned int)v->h[i].util[1];
            s->encUtil = v->h[i].util[2] < 0 ? 0 : (unsigned int)v->h[i].util[2];
            s->decUtil = v->h[i].util[3] < 0 ? 0 : (unsigned int)v->h[i].util[3];
        }
        *processSamplesCount = n;
    }
    free(v);
    return r;
}

/* ---- sensors ---------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                  nvmlUtilization_t *utilization)
{
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    utilization->gpu = v->g.util_pct;
    utilization->memory = v->g.mem_util_pct;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                    unsigned int *samplingPeriodUs)
{
    if (!utilization || !samplingPeriodUs)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    (void)v;
    *utilization = 0;
    *samplingPeriodUs = 167000;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                    unsigned int *samplingPeriodUs)
{
    return nvmlDeviceGetEncoderUtilization(device, utilization, samplingPeriodUs);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensorType,
                                             unsigned int *temp)
{
    if (!temp || sensorType >= 2)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    if (sensorType != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *temp = v->g.temp_c;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temperature)
{
    if (!temperature)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned int t;
    nvmlReturn_t r = nvmlDeviceGetTemperature(device, temperature->sensorType, &t);
    if (r == NVML_SUCCESS)
        temperature->temperature = (int)t;
    return r;
}

EXPORT_POWER nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    if (!power)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *power = v->g.power_mw;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    if (!limit)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *limit = v->g.power_limit_mw;
    return NVML_SUCCESS;
}

EXPORT_POWER nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return nvmlDeviceGetPowerManagementLimit(device, limit);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                             unsigned int *defaultLimit)
{
    return nvmlDeviceGetPowerManagementLimit(device, defaultLimit);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                                 unsigned int *minLimit,
                                                                 unsigned int *maxLimit)
{
    if (!minLimit || !maxLimit)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *minLimit = v->g.power_limit_mw / 4;
    *maxLimit = v->g.power_limit_mw;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                        unsigned long long *energy)
{
    if (!energy)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    /* Energy in mJ as if the current power had been drawn since init. */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long ms = (long long)(now.tv_sec - g_start.tv_sec) * 1000LL +
                   (long long)(now.tv_nsec - g_start.tv_nsec) / 1000000LL;
    if (ms < 0)
        ms = 0;
    *energy = (unsigned long long)v->g.power_mw * (unsigned long long)ms / 1000ull;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans)
{
    if (!numFans)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *numFans = v->g.fan_pct >= 0 ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan,
                                             unsigned int *speed)
{
    if (!speed)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    if (v->g.fan_pct < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (fan != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *speed = (unsigned int)v->g.fan_pct;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    return nvmlDeviceGetFanSpeed_v2(device, 0, speed);
}

EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, unsigned int *pState)
{
    if (!pState)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *pState = v->g.util_pct > 0 ? 0 : 8;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, unsigned int *pState)
{
    return nvmlDeviceGetPerformanceState(device, pState);
}

static nvmlReturn_t get_const_uint(nvmlDevice_t device, unsigned int *out, unsigned int value)
{
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    (void)v;
    *out = value;
    return NVML_SUCCESS;
}

/* Entry of a health query: the device's own error first, then health_error, then NOT_SUPPORTED when the
 * query's group is in the device's unsupported list. */
static nvmlReturn_t health_enter(nvmlDevice_t dev, struct dev_view *v, unsigned int group)
{
    nvmlReturn_t r = dev_enter(dev, v, 0);
    if (r != NVML_SUCCESS)
        return r;
    if (v->g.health_error)
        return v->g.health_error;
    if (v->g.unsupported & group)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, unsigned int *mode)
{
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev_view v;
    nvmlReturn_t r = health_enter(device, &v, U_PERSISTENCE);
    if (r != NVML_SUCCESS)
        return r;
    *mode = v.g.persistence ? 1 : 0; /* NVML_FEATURE_ENABLED / DISABLED */
    return NVML_SUCCESS;
}

EXPORT_HEALTH nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                              unsigned int *uncRows, unsigned int *isPending,
                                              unsigned int *failureOccurred)
{
    if (!corrRows || !uncRows || !isPending || !failureOccurred)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev_view v;
    nvmlReturn_t r = health_enter(device, &v, U_REMAP);
    if (r != NVML_SUCCESS)
        return r;
    *corrRows = v.g.remap_corr;
    *uncRows = v.g.remap_unc;
    *isPending = v.g.remap_pending ? 1 : 0;
    *failureOccurred = v.g.remap_failure ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT_HEALTH nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, unsigned int *isPending)
{
    if (!isPending)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev_view v;
    nvmlReturn_t r = health_enter(device, &v, U_RETIRED);
    if (r != NVML_SUCCESS)
        return r;
    *isPending = v.g.retired_pending ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev_view v;
    nvmlReturn_t r = health_enter(device, &v, U_ECC);
    if (r != NVML_SUCCESS)
        return r;
    *current = *pending = v.g.ecc_mode ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, unsigned int *isActive)
{
    if (!isActive)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *isActive = v->g.display_active ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, unsigned int *display)
{
    if (!display)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *display = v->g.display_active ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, unsigned int *mode)
{
    return get_const_uint(device, mode, 0); /* NVML_COMPUTEMODE_DEFAULT */
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    if (!isMigDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *isMigDevice = v->mig >= 0;
    return NVML_SUCCESS;
}

/* ---- MIG devices (nvml.h's Multi Instance GPU management) ------------- */

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    if (v->mig >= 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = v->g.mig_current ? v->g.mig_max : 0; /* "zero if MIG is not supported or enabled" */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice)
{
    if (!migDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    if (v->mig >= 0 || index >= (v->g.mig_current ? v->g.mig_max : 0))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!v->g.migs[index].present)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = &g_mig_devices[v->index * MAX_MIG + index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    if (!device)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(migDevice, v);
    if (v->mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_devices[v->index];
    return NVML_SUCCESS;
}

static nvmlReturn_t instance_id(nvmlDevice_t device, unsigned int *id, int compute)
{
    if (!id)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    if (v->mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *id = compute ? v->g.migs[v->mig].ci : v->g.migs[v->mig].gi;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, id, 0);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, id, 1);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *g)
{
    return get_const_uint(device, g, 5);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *g)
{
    return get_const_uint(device, g, 5);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *w)
{
    return get_const_uint(device, w, 16);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *w)
{
    return get_const_uint(device, w, 16);
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, unsigned int counter,
                                                unsigned int *value)
{
    if (!value || counter >= 2)
        return NVML_ERROR_INVALID_ARGUMENT;
    return get_const_uint(device, value, 0);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                         unsigned int *pendingMode)
{
    if (!currentMode || !pendingMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *currentMode = v->g.mig_current ? 1 : 0;
    *pendingMode = v->g.mig_pending ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t device, unsigned int *current,
                                                unsigned int *pending)
{
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    (void)v;
    return NVML_ERROR_NOT_SUPPORTED; /* Windows only */
}

EXPORT nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t device, unsigned int *current,
                                             unsigned int *pending)
{
    return nvmlDeviceGetDriverModel_v2(device, current, pending);
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int errorType,
                                                unsigned int counterType,
                                                unsigned long long *eccCounts)
{
    if (!eccCounts || errorType >= 2 || counterType >= 2)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev_view v;
    nvmlReturn_t r = health_enter(device, &v, U_ECC);
    if (r != NVML_SUCCESS)
        return r;
    if (!v.g.ecc_mode)
        return NVML_ERROR_NOT_SUPPORTED; /* what a driver says with ECC off */
    /* errorType 0: corrected, 1: uncorrected; counterType 0: volatile, 1: aggregate */
    if (errorType == 1)
        *eccCounts = counterType == 0 ? v.g.ecc_unc_volatile : v.g.ecc_unc_aggregate;
    else
        *eccCounts = counterType == 0 ? v.g.ecc_corr_volatile : v.g.ecc_corr_aggregate;
    return NVML_SUCCESS;
}

static const unsigned int g_clock_cur[4] = {2100, 2100, 14001, 1950};
static const unsigned int g_clock_max[4] = {2617, 2617, 14001, 2280};

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type,
                                           unsigned int *clock)
{
    if (!clock || type >= 4)
        return NVML_ERROR_INVALID_ARGUMENT;
    DEV_ENTER(device, v);
    *clock = v->g.util_pct > 0 || type == 2 ? g_clock_cur[type] : 180;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned int type,
                                              unsigned int *clock)
{
    if (!clock || type >= 4)
        return NVML_ERROR_INVALID_ARGUMENT;
    return get_const_uint(device, clock, g_clock_max[type]);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                           unsigned long long *reasons)
{
    if (!reasons)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev_view v;
    nvmlReturn_t r = dev_enter(device, &v, 0);
    if (r != NVML_SUCCESS)
        return r;
    if (v.g.unsupported & U_CLOCKS)
        return NVML_ERROR_NOT_SUPPORTED;
    if (v.g.clock_reasons >= 0)
        *reasons = (unsigned long long)v.g.clock_reasons;
    else
        *reasons = v.g.util_pct > 0 ? 0ull : 0x1ull; /* GPU idle */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                              unsigned long long *reasons)
{
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

/* ---- field values ----------------------------------------------------- */

static long long now_usec(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (long long)now.tv_sec * 1000000LL + (long long)now.tv_nsec / 1000LL;
}

/* Only NVML_FI_DEV_GET_GPU_RECOVERY_ACTION is known; every other field answers NOT_SUPPORTED in its own
 * nvmlReturn while the call succeeds, as the driver does for fields a GPU lacks. */
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    if (!values || valuesCount < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev_view v;
    nvmlReturn_t r = health_enter(device, &v, U_RECOVERY);
    if (r != NVML_SUCCESS)
        return r;
    long long stamp = now_usec();
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *f = &values[i];
        f->timestamp = stamp;
        f->latencyUsec = 0;
        f->value.ullVal = 0;
        if (f->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) {
            f->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            if (v.g.has_recovery) {
                f->nvmlReturn = NVML_SUCCESS;
                f->value.uiVal = v.g.recovery_action;
            } else {
                f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; /* a driver before R565 */
            }
        } else {
            f->valueType = NVML_VALUE_TYPE_DOUBLE;
            f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* ---- fabric ------------------------------------------------------------ */

static nvmlReturn_t fabric_enter(nvmlDevice_t device, struct dev_view *v)
{
    nvmlReturn_t r = health_enter(device, v, U_FABRIC);
    if (r == NVML_SUCCESS && !v->g.has_fabric)
        r = NVML_ERROR_NOT_SUPPORTED; /* no NVSwitch fabric: a PCIe board */
    return r;
}

EXPORT_FABRIC nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo)
{
    if (!gpuFabricInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev_view v;
    nvmlReturn_t r = fabric_enter(device, &v);
    if (r != NVML_SUCCESS)
        return r;
    memset(gpuFabricInfo, 0, sizeof(*gpuFabricInfo));
    memcpy(gpuFabricInfo->clusterUuid, v.g.fabric_cluster_uuid, NVML_GPU_FABRIC_UUID_LEN);
    gpuFabricInfo->status = v.g.fabric_status;
    gpuFabricInfo->cliqueId = v.g.fabric_clique;
    gpuFabricInfo->state = (nvmlGpuFabricState_t)v.g.fabric_state;
    return NVML_SUCCESS;
}

/* Takes nvmlGpuFabricInfo_v2 or nvmlGpuFabricInfo_v3 in .version and fills that much. */
EXPORT_FABRIC nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo)
{
    if (!gpuFabricInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int version = gpuFabricInfo->version;
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    struct dev_view v;
    nvmlReturn_t r = fabric_enter(device, &v);
    if (r != NVML_SUCCESS)
        return r;
    if (version == nvmlGpuFabricInfo_v2) {
        nvmlGpuFabricInfo_v2_t *info = (nvmlGpuFabricInfo_v2_t *)gpuFabricInfo;
        memset(info, 0, sizeof(*info));
        info->version = version;
        memcpy(info->clusterUuid, v.g.fabric_cluster_uuid, NVML_GPU_FABRIC_UUID_LEN);
        info->status = v.g.fabric_status;
        info->cliqueId = v.g.fabric_clique;
        info->state = (nvmlGpuFabricState_t)v.g.fabric_state;
        info->healthMask = v.g.fabric_health_mask;
    } else {
        nvmlGpuFabricInfo_v3_t *info = gpuFabricInfo;
        memset(info, 0, sizeof(*info));
        info->version = version;
        memcpy(info->clusterUuid, v.g.fabric_cluster_uuid, NVML_GPU_FABRIC_UUID_LEN);
        info->status = v.g.fabric_status;
        info->cliqueId = v.g.fabric_clique;
        info->state = (nvmlGpuFabricState_t)v.g.fabric_state;
        info->healthMask = v.g.fabric_health_mask;
        info->healthSummary = (unsigned char)v.g.fabric_health_summary;
    }
    return NVML_SUCCESS;
}

/* ---- events ----------------------------------------------------------- */

#define NVML_EVENT_TYPE_XID 0x8ull              /* nvmlEventTypeXidCriticalError */
#define NVML_EVENT_TYPE_RECOVERY 0x8000ull      /* nvmlEventTypeGpuRecoveryAction (R565) */
#define MAX_SETS 16

static const unsigned long long g_event_type[EV_KINDS] = {NVML_EVENT_TYPE_XID, NVML_EVENT_TYPE_RECOVERY};

typedef struct nvmlEventSet_st *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

struct nvmlEventSet_st {
    int used;
    unsigned int seen[EV_KINDS];        /* lines of each kind already passed (delivered or not wanted) */
    unsigned long long types[MAX_GPUS]; /* registered event types per device */
};

_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t");

static struct nvmlEventSet_st g_sets[MAX_SETS];

EXPORT_HEALTH nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = system_enter();
    if (r != NVML_SUCCESS)
        return r;
    r = NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (unsigned int i = 0; i < MAX_SETS; i++) {
        if (!g_sets[i].used) {
            memset(&g_sets[i], 0, sizeof(g_sets[i]));
            g_sets[i].used = 1;
            for (unsigned int k = 0; k < EV_KINDS; k++)
                g_sets[i].seen[k] = g_state.kind_count[k]; /* events from now on, as a real set */
            *set = &g_sets[i];
            r = NVML_SUCCESS;
            break;
        }
    }
    system_leave();
    return r;
}

static int set_valid(nvmlEventSet_t set)
{
    return set >= &g_sets[0] && set < &g_sets[MAX_SETS] && set->used;
}

static unsigned long long supported_events(const struct gpu *g)
{
    unsigned long long types = 0x1ull | 0x2ull | NVML_EVENT_TYPE_XID; /* single/double bit ECC, Xid */
    if (!(g->unsupported & U_RECOVERY))
        types |= NVML_EVENT_TYPE_RECOVERY;
    return types;
}

EXPORT_HEALTH nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types)
{
    if (!types)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev_view v;
    nvmlReturn_t r = health_enter(device, &v, U_EVENTS);
    if (r != NVML_SUCCESS)
        return r;
    *types = supported_events(&v.g);
    return NVML_SUCCESS;
}

EXPORT_HEALTH nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                             nvmlEventSet_t set)
{
    struct dev_view v;
    nvmlReturn_t r = health_enter(device, &v, U_EVENTS);
    if (r != NVML_SUCCESS)
        return r;
    if (types & ~supported_events(&v.g))
        return NVML_ERROR_NOT_SUPPORTED; /* "some of requested event types": none registered */
    pthread_mutex_lock(&g_lock);
    if (!set_valid(set))
        r = NVML_ERROR_INVALID_ARGUMENT;
    else
        set->types[v.index] |= types;
    pthread_mutex_unlock(&g_lock);
    return r;
}

EXPORT_HEALTH nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    if (!data)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int waited = 0;; waited += 10) {
        nvmlReturn_t r = system_enter();
        if (r != NVML_SUCCESS)
            return r;
        if (!set_valid(set)) {
            system_leave();
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        unsigned int ordinal[EV_KINDS] = {0};
        for (unsigned int k = 0; k < EV_KINDS; k++)
            if (set->seen[k] > g_state.kind_count[k])
                set->seen[k] = g_state.kind_count[k]; /* the file lost lines: deliver what comes next */
        /* One walk in file order: each line not yet passed for its kind is delivered or passed over. */
        for (unsigned int i = 0; i < g_state.event_count; i++) {
            struct event_line e = g_state.events[i];
            if (ordinal[e.kind]++ < set->seen[e.kind])
                continue;
            set->seen[e.kind]++;
            unsigned long long type = g_event_type[e.kind];
            if (e.gpu < MAX_GPUS && e.gpu < g_state.gpu_count && (set->types[e.gpu] & type)) {
                memset(data, 0, sizeof(*data));
                data->device = &g_devices[e.gpu];
                data->eventType = type;
                data->eventData = e.data;
                system_leave();
                return NVML_SUCCESS;
            }
        }
        system_leave();
        if (waited >= timeoutms)
            return NVML_ERROR_TIMEOUT;
        sleep_ms(10);
    }
}

EXPORT_HEALTH nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

EXPORT_HEALTH nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t r = set_valid(set) ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        set->used = 0;
    pthread_mutex_unlock(&g_lock);
    return r;
}
