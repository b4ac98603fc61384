/* Call counting for the benchmark's build of the fake libnvidia-ml.so.1.
 *
 * Linked into the fake library, which is compiled with -finstrument-functions: GCC then calls
 * __cyg_profile_func_enter on entry to every function of the library. A call whose caller lies outside the
 * library is a call INTO the library, i.e. one NVML call made by the program (pynvml through ctypes); calls
 * between the library's own functions are left out. The counts are counted in the library, not guessed from
 * the program's source.
 *
 * With FAKE_NVML_COUNT_DIR set, each process that calls NVML writes into DIR/<pid>, a file of SLOTS
 * fixed-size records {u64 function address, u64 calls, char name[48]} mapped shared, so the benchmark can read
 * a live process's counts at any moment (the start and the end of a measuring window). A forked child starts
 * a file of its own. Without the variable the hook returns at once.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SLOTS 512
#define NAME_LEN 48

struct slot {
    uint64_t fn;
    uint64_t calls;
    char name[NAME_LEN];
};

#define NOI __attribute__((no_instrument_function))
/* Hidden: glibc exports stubs of the hooks, which would otherwise win the dynamic binding. */
#define HOOK __attribute__((no_instrument_function, visibility("hidden")))

static uintptr_t g_lo, g_hi;
static int g_disabled;
static pid_t g_pid;
static struct slot *g_slots;

NOI static int find_range(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t base = (uintptr_t)data;
    if (info->dlpi_addr != base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = base + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (g_lo == 0 || lo < g_lo)
            g_lo = lo;
        if (hi > g_hi)
            g_hi = hi;
    }
    return 1;
}

NOI static int set_up(void *fn)
{
    const char *dir = getenv("FAKE_NVML_COUNT_DIR");
    if (!dir || !*dir) {
        g_disabled = 1;
        return -1;
    }
    if (g_hi == 0) {
        Dl_info info;
        if (!dladdr(fn, &info)) {
            g_disabled = 1;
            return -1;
        }
        dl_iterate_phdr(find_range, info.dli_fbase);
    }
    char path[4096];
    pid_t pid = getpid();
    snprintf(path, sizeof path, "%s/%d", dir, (int)pid);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)(SLOTS * sizeof(struct slot))) != 0) {
        if (fd >= 0)
            close(fd);
        g_disabled = 1;
        return -1;
    }
    void *map = mmap(NULL, SLOTS * sizeof(struct slot), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        g_disabled = 1;
        return -1;
    }
    g_slots = map;
    g_pid = pid;
    return 0;
}

HOOK void __cyg_profile_func_enter(void *fn, void *caller)
{
    if (g_disabled)
        return;
    uintptr_t from = (uintptr_t)caller;
    if (g_hi != 0 && from >= g_lo && from < g_hi)
        return;
    if ((g_slots == NULL || g_pid != getpid()) && set_up(fn) != 0)
        return;
    if (from >= g_lo && from < g_hi) /* the range is known only after the first set-up */
        return;
    uint64_t key = (uint64_t)(uintptr_t)fn;
    for (unsigned int n = 0, i = (unsigned int)((key >> 4) % SLOTS); n < SLOTS; n++, i = (i + 1) % SLOTS) {
        uint64_t seen = __atomic_load_n(&g_slots[i].fn, __ATOMIC_ACQUIRE);
        if (seen == 0) {
            uint64_t expected = 0;
            if (__atomic_compare_exchange_n(&g_slots[i].fn, &expected, key, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                Dl_info info;
                const char *name = dladdr(fn, &info) && info.dli_sname ? info.dli_sname : "?";
                strncpy(g_slots[i].name, name, NAME_LEN - 1);
                seen = key;
            } else {
                seen = expected;
            }
        }
        if (seen == key) {
            __atomic_add_fetch(&g_slots[i].calls, 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

HOOK void __cyg_profile_func_exit(void *fn, void *caller)
{
    (void)fn;
    (void)caller;
}
