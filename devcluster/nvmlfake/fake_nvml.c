/*
 * libnvidia-ml.so.1 for tests: the NVML functions the Topos agent calls, answering from a state
 * file that devcluster/nvmlfake/state.py writes from a hardware profile.
 *
 * Compiled against NVIDIA's own nvml.h (the nvidia-nvml-dev wheel), so every signature, struct
 * and constant is the driver's, and loaded by the real pynvml through its ordinary search
 * (`CDLL("libnvidia-ml.so.1")`, found on LD_LIBRARY_PATH).
 *
 * TOPOS_FAKE_NVML_STATE names the state file. It is read at nvmlInit and read again whenever it
 * changes (checked on nvmlInit, nvmlDeviceGetHandleByIndex and nvmlEventSetWait), so a test can
 * inject a fault between two discovery cycles by rewriting it. One line per fact, fields split
 * by single spaces, the last field of a line may hold spaces (names):
 *
 *   driver <text>                 cuda <int>
 *   gpu <i> <field> <values...>   (uuid, name, bus, mem, cc, pcie, power, cpus, nodes, numa,
 *                                  lost, nvlinks, link, ancestor, ecc, retired, remap, clocks,
 *                                  fabric, mig, giprofile, gi, ciprofile, ci, migdev;
 *                                  see state.py, which writes them)
 *   event <gpu> <type> <data>     (an NVML event, delivered once to every set registered for it)
 *   fail <function> <gpu|-1> <nvmlReturn_t>   (that call answers that error)
 *
 * A fact that is absent makes its call answer NVML_ERROR_NOT_SUPPORTED, as an older GPU does.
 * State files replaced while handles are held are kept in memory (handles stay valid).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "nvml.h"

#define MAX_GPUS 64
#define MAX_LINKS 18
#define MAX_WORDS 16
#define MAX_PROFILES 16
#define MAX_GIS 16
#define MAX_CIS 64
#define MAX_EVENTS 256
#define MAX_FAILS 64

enum kind { DEVICE = 1, MIG_DEVICE = 2, GPU_INSTANCE = 3, COMPUTE_INSTANCE = 4 };

/* Handles are stable addresses; what they name is looked up in the current state. */
struct handle {
    int kind;
    int gpu;
    int slot; /* MIG device / GPU instance / compute instance slot */
};

struct link {
    int present, active, remote_type;
    char remote_bus[32];
    unsigned int remote_pci_id;
    unsigned long long counters[5]; /* nvmlNvLinkErrorCounter_t order */
    int has_counters;
};

struct giprofile {
    int index, id, slices, instances, sms, remaining;
    unsigned long long memory_mb;
    char name[96];
};

struct gi {
    int id, profile_id, start, size;
};

struct ciprofile {
    int gi_id, index, slices, instances, sms;
    char name[96];
};

struct ci {
    int gi_id, id, profile_index, start, size;
    char uuid[96];
};

struct gpu {
    int present, lost;
    char uuid[96], name[96], bus[32];
    unsigned int pci_id;
    int has_mem;
    unsigned long long mem_total, mem_free, mem_used;
    int has_cc, cc_major, cc_minor;
    int pcie[4]; /* max gen, max width, current gen, current width; -1 = not supported */
    int has_power;
    unsigned int power_mw;
    int cpu_words, node_words;
    unsigned long cpus[MAX_WORDS], nodes[MAX_WORDS];
    int numa; /* -1 = not supported */
    int nvlinks;
    struct link links[MAX_LINKS];
    int ancestor[MAX_GPUS]; /* nvmlGpuTopologyLevel_t, -1 = not supported */
    int has_ecc;
    unsigned long long ecc[2][2]; /* [corrected, uncorrected][volatile, aggregate] */
    int has_retired, retired_pending;
    unsigned int retired[2]; /* single-bit, double-bit */
    int has_remap;
    unsigned int remap[4]; /* corrected, uncorrected, pending, failure */
    int has_clocks;
    unsigned long long clocks;
    int has_fabric;
    unsigned char cluster[NVML_GPU_FABRIC_UUID_LEN];
    unsigned int fabric_status, clique, fabric_state, health_mask;
    int has_mig, mig_current, mig_pending, mig_max;
    int n_giprofiles, n_gis, n_ciprofiles, n_cis, n_migdevs;
    struct giprofile giprofiles[MAX_PROFILES];
    struct gi gis[MAX_GIS];
    struct ciprofile ciprofiles[MAX_CIS];
    struct ci cis[MAX_CIS];
    int migdevs[MAX_CIS]; /* MIG device index -> compute instance slot */
};

struct event {
    int gpu;
    unsigned long long type, data;
};

struct fail {
    char function[96];
    int gpu;
    nvmlReturn_t code;
};

struct state {
    char driver[80];
    int has_cuda, cuda;
    int n_gpus;
    struct gpu gpus[MAX_GPUS];
    int n_events;
    struct event events[MAX_EVENTS];
    int n_fails;
    struct fail fails[MAX_FAILS];
};

struct nvmlEventSet_st {
    unsigned long long masks[MAX_GPUS];
    int delivered; /* events of the state file already handed out */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct state *S; /* the current state; earlier ones are kept (handles may point in) */
static int initialized;
static struct timespec loaded_mtime;
static off_t loaded_size;
static ino_t loaded_ino;
static struct handle devices[MAX_GPUS];
static struct handle mig_devices[MAX_GPUS][MAX_CIS];
static struct handle gpu_instances[MAX_GPUS][MAX_GIS];
static struct handle compute_instances[MAX_GPUS][MAX_CIS];

/* ---- the state file -------------------------------------------------------------------- */

static void parse_gpu_line(struct gpu *g, char *field, char *rest)
{
    char *p = rest;
    if (!strcmp(field, "uuid")) {
        sscanf(rest, "%95s", g->uuid);
    } else if (!strcmp(field, "name")) {
        snprintf(g->name, sizeof g->name, "%s", rest);
    } else if (!strcmp(field, "bus")) {
        sscanf(rest, "%31s %x", g->bus, &g->pci_id);
    } else if (!strcmp(field, "mem")) {
        g->has_mem = sscanf(rest, "%llu %llu %llu", &g->mem_total, &g->mem_free, &g->mem_used) == 3;
    } else if (!strcmp(field, "cc")) {
        g->has_cc = sscanf(rest, "%d %d", &g->cc_major, &g->cc_minor) == 2;
    } else if (!strcmp(field, "pcie")) {
        sscanf(rest, "%d %d %d %d", &g->pcie[0], &g->pcie[1], &g->pcie[2], &g->pcie[3]);
    } else if (!strcmp(field, "power")) {
        g->has_power = sscanf(rest, "%u", &g->power_mw) == 1;
    } else if (!strcmp(field, "cpus") || !strcmp(field, "nodes")) {
        unsigned long *words = field[0] == 'c' ? g->cpus : g->nodes;
        int n = 0;
        while (n < MAX_WORDS && *p) {
            char *end;
            words[n] = strtoul(p, &end, 16);
            if (end == p)
                break;
            n++;
            p = end;
        }
        if (field[0] == 'c')
            g->cpu_words = n;
        else
            g->node_words = n;
    } else if (!strcmp(field, "numa")) {
        sscanf(rest, "%d", &g->numa);
    } else if (!strcmp(field, "lost")) {
        g->lost = 1;
    } else if (!strcmp(field, "nvlinks")) {
        sscanf(rest, "%d", &g->nvlinks);
    } else if (!strcmp(field, "link")) {
        int l;
        struct link k = {0};
        int got = sscanf(rest, "%d %d %d %31s %x %llu %llu %llu %llu %llu", &l, &k.active,
                         &k.remote_type, k.remote_bus, &k.remote_pci_id, &k.counters[0],
                         &k.counters[1], &k.counters[2], &k.counters[3], &k.counters[4]);
        if (got >= 5 && l >= 0 && l < MAX_LINKS) {
            k.present = 1;
            k.has_counters = got == 10;
            if (!strcmp(k.remote_bus, "-"))
                k.remote_bus[0] = 0;
            g->links[l] = k;
        }
    } else if (!strcmp(field, "ancestor")) {
        int j, level;
        if (sscanf(rest, "%d %d", &j, &level) == 2 && j >= 0 && j < MAX_GPUS)
            g->ancestor[j] = level;
    } else if (!strcmp(field, "ecc")) {
        g->has_ecc = sscanf(rest, "%llu %llu %llu %llu", &g->ecc[0][0], &g->ecc[1][0],
                            &g->ecc[0][1], &g->ecc[1][1]) == 4;
    } else if (!strcmp(field, "retired")) {
        g->has_retired = sscanf(rest, "%u %u %d", &g->retired[0], &g->retired[1],
                                &g->retired_pending) == 3;
    } else if (!strcmp(field, "remap")) {
        g->has_remap = sscanf(rest, "%u %u %u %u", &g->remap[0], &g->remap[1], &g->remap[2],
                              &g->remap[3]) == 4;
    } else if (!strcmp(field, "clocks")) {
        g->has_clocks = sscanf(rest, "%llx", &g->clocks) == 1;
    } else if (!strcmp(field, "fabric")) {
        char hex[40] = "";
        if (sscanf(rest, "%32s %u %u %u %x", hex, &g->fabric_status, &g->clique,
                   &g->fabric_state, &g->health_mask) == 5) {
            g->has_fabric = 1;
            for (int b = 0; b < NVML_GPU_FABRIC_UUID_LEN && hex[2 * b] && hex[2 * b + 1]; b++) {
                unsigned int v;
                sscanf(hex + 2 * b, "%2x", &v);
                g->cluster[b] = (unsigned char)v;
            }
        }
    } else if (!strcmp(field, "mig")) {
        g->has_mig = sscanf(rest, "%d %d %d", &g->mig_current, &g->mig_pending, &g->mig_max) == 3;
    } else if (!strcmp(field, "giprofile") && g->n_giprofiles < MAX_PROFILES) {
        struct giprofile *f = &g->giprofiles[g->n_giprofiles];
        int used = 0;
        if (sscanf(rest, "%d %d %d %d %d %llu %d %n", &f->index, &f->id, &f->slices,
                   &f->instances, &f->sms, &f->memory_mb, &f->remaining, &used) >= 7) {
            snprintf(f->name, sizeof f->name, "%s", rest + used);
            g->n_giprofiles++;
        }
    } else if (!strcmp(field, "gi") && g->n_gis < MAX_GIS) {
        struct gi *x = &g->gis[g->n_gis];
        if (sscanf(rest, "%d %d %d %d", &x->id, &x->profile_id, &x->start, &x->size) == 4)
            g->n_gis++;
    } else if (!strcmp(field, "ciprofile") && g->n_ciprofiles < MAX_CIS) {
        struct ciprofile *f = &g->ciprofiles[g->n_ciprofiles];
        int used = 0;
        if (sscanf(rest, "%d %d %d %d %d %n", &f->gi_id, &f->index, &f->slices, &f->instances,
                   &f->sms, &used) >= 5) {
            snprintf(f->name, sizeof f->name, "%s", rest + used);
            g->n_ciprofiles++;
        }
    } else if (!strcmp(field, "ci") && g->n_cis < MAX_CIS) {
        struct ci *x = &g->cis[g->n_cis];
        if (sscanf(rest, "%d %d %d %d %d %95s", &x->gi_id, &x->id, &x->profile_index, &x->start,
                   &x->size, x->uuid) == 6)
            g->n_cis++;
    } else if (!strcmp(field, "migdev") && g->n_migdevs < MAX_CIS) {
        int slot;
        if (sscanf(rest, "%d", &slot) == 1)
            g->migdevs[g->n_migdevs++] = slot;
    }
}

static struct state *parse(FILE *f)
{
    struct state *s = calloc(1, sizeof *s);
    char line[4096];
    if (s == NULL)
        return NULL;
    for (int i = 0; i < MAX_GPUS; i++) {
        struct gpu *g = &s->gpus[i];
        g->numa = -1;
        for (int k = 0; k < 4; k++)
            g->pcie[k] = -1;
        for (int j = 0; j < MAX_GPUS; j++)
            g->ancestor[j] = -1;
    }
    while (fgets(line, sizeof line, f)) {
        char word[96], field[32];
        int i, used = 0;
        line[strcspn(line, "\n")] = 0;
        if (sscanf(line, "%95s %n", word, &used) < 1)
            continue;
        char *rest = line + used;
        if (!strcmp(word, "driver")) {
            snprintf(s->driver, sizeof s->driver, "%s", rest);
        } else if (!strcmp(word, "cuda")) {
            s->has_cuda = sscanf(rest, "%d", &s->cuda) == 1;
        } else if (!strcmp(word, "gpu") && sscanf(rest, "%d %31s %n", &i, field, &used) >= 2) {
            if (i < 0 || i >= MAX_GPUS)
                continue;
            s->gpus[i].present = 1;
            if (i >= s->n_gpus)
                s->n_gpus = i + 1;
            parse_gpu_line(&s->gpus[i], field, rest + used);
        } else if (!strcmp(word, "event") && s->n_events < MAX_EVENTS) {
            struct event *e = &s->events[s->n_events];
            if (sscanf(rest, "%d %llx %llu", &e->gpu, &e->type, &e->data) == 3)
                s->n_events++;
        } else if (!strcmp(word, "fail") && s->n_fails < MAX_FAILS) {
            struct fail *x = &s->fails[s->n_fails];
            int code;
            if (sscanf(rest, "%95s %d %d", x->function, &x->gpu, &code) == 3) {
                x->code = (nvmlReturn_t)code;
                s->n_fails++;
            }
        }
    }
    return s;
}

/* Read the state file when it is new or changed. Called with the lock held. */
static nvmlReturn_t refresh(void)
{
    const char *path = getenv("TOPOS_FAKE_NVML_STATE");
    struct stat st;
    if (path == NULL || stat(path, &st) != 0)
        return S != NULL ? NVML_SUCCESS : NVML_ERROR_DRIVER_NOT_LOADED;
    if (S != NULL && st.st_mtim.tv_sec == loaded_mtime.tv_sec &&
        st.st_mtim.tv_nsec == loaded_mtime.tv_nsec && st.st_size == loaded_size &&
        st.st_ino == loaded_ino)
        return NVML_SUCCESS;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return S != NULL ? NVML_SUCCESS : NVML_ERROR_DRIVER_NOT_LOADED;
    struct state *s = parse(f);
    fclose(f);
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    S = s; /* the previous state is leaked on purpose: a test library, a few reloads */
    loaded_mtime = st.st_mtim;
    loaded_size = st.st_size;
    loaded_ino = st.st_ino;
    return NVML_SUCCESS;
}

/* ---- helpers ------------------------------------------------------------------------------ */

#define LOCKED(expr)                                                                         \
    do {                                                                                     \
        pthread_mutex_lock(&lock);                                                           \
        nvmlReturn_t r_ = (expr);                                                            \
        pthread_mutex_unlock(&lock);                                                         \
        return r_;                                                                           \
    } while (0)

static nvmlReturn_t injected(const char *function, int gpu)
{
    for (int k = 0; k < S->n_fails; k++) {
        struct fail *x = &S->fails[k];
        if (!strcmp(x->function, function) && (x->gpu < 0 || x->gpu == gpu))
            return x->code;
    }
    return NVML_SUCCESS;
}

/* The GPU behind a device (or MIG device) handle, after the common checks. */
static nvmlReturn_t device(const char *function, nvmlDevice_t h, struct gpu **out)
{
    const struct handle *x = (const struct handle *)h;
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (x == NULL || (x->kind != DEVICE && x->kind != MIG_DEVICE) || x->gpu < 0 ||
        x->gpu >= S->n_gpus || !S->gpus[x->gpu].present)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = injected(function, x->gpu);
    if (r != NVML_SUCCESS)
        return r;
    if (S->gpus[x->gpu].lost)
        return NVML_ERROR_GPU_IS_LOST;
    *out = &S->gpus[x->gpu];
    return NVML_SUCCESS;
}

static int is_mig(nvmlDevice_t h) { return ((const struct handle *)h)->kind == MIG_DEVICE; }

static nvmlReturn_t text(char *buf, unsigned int length, const char *value)
{
    if (buf == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

static void fill_pci(nvmlPciInfo_t *pci, const char *bus, unsigned int pci_id)
{
    unsigned int domain = 0, b = 0, d = 0;
    memset(pci, 0, sizeof *pci);
    sscanf(bus, "%x:%x:%x", &domain, &b, &d);
    snprintf(pci->busId, sizeof pci->busId, "%s", bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", bus + (strlen(bus) > 12 ? strlen(bus) - 12 : 0));
    pci->domain = domain;
    pci->bus = b;
    pci->device = d;
    pci->pciDeviceId = pci_id;
}

/* ---- initialisation and system ------------------------------------------------------------ */

static nvmlReturn_t init(void)
{
    nvmlReturn_t r = refresh();
    if (r != NVML_SUCCESS)
        return r;
    initialized++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; LOCKED(init()); }
nvmlReturn_t nvmlInit_v2(void) { LOCKED(init()); }

static nvmlReturn_t shutdown_(void)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    initialized--;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) { LOCKED(shutdown_()); }

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t driver_version(char *version, unsigned int length)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = injected("nvmlSystemGetDriverVersion", -1);
    if (r != NVML_SUCCESS)
        return r;
    return S->driver[0] ? text(version, length, S->driver) : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    LOCKED(driver_version(version, length));
}

static nvmlReturn_t cuda_version(int *v)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = injected("nvmlSystemGetCudaDriverVersion", -1);
    if (r != NVML_SUCCESS)
        return r;
    if (!S->has_cuda)
        return NVML_ERROR_NOT_SUPPORTED;
    *v = S->cuda;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { LOCKED(cuda_version(v)); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { LOCKED(cuda_version(v)); }

static nvmlReturn_t count(unsigned int *n)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = injected("nvmlDeviceGetCount", -1);
    if (r != NVML_SUCCESS)
        return r;
    *n = (unsigned int)S->n_gpus;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { LOCKED(count(n)); }

static nvmlReturn_t handle_by_index(unsigned int index, nvmlDevice_t *device)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    refresh();
    if (index >= (unsigned int)S->n_gpus || !S->gpus[index].present)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = injected("nvmlDeviceGetHandleByIndex", (int)index);
    if (r != NVML_SUCCESS)
        return r;
    devices[index] = (struct handle){DEVICE, (int)index, 0};
    *device = (nvmlDevice_t)&devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    LOCKED(handle_by_index(index, device));
}

/* ---- identity and attributes -------------------------------------------------------------- */

static nvmlReturn_t uuid_(nvmlDevice_t h, char *out, unsigned int length)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetUUID", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (is_mig(h)) {
        const struct handle *x = (const struct handle *)h;
        return text(out, length, g->cis[x->slot].uuid);
    }
    return text(out, length, g->uuid);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int length)
{
    LOCKED(uuid_(h, uuid, length));
}

static nvmlReturn_t name_(nvmlDevice_t h, char *out, unsigned int length)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetName", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    return g->name[0] ? text(out, length, g->name) : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int length)
{
    LOCKED(name_(h, name, length));
}

static nvmlReturn_t memory_(nvmlDevice_t h, nvmlMemory_t *m)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetMemoryInfo", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_mem)
        return NVML_ERROR_NOT_SUPPORTED;
    m->total = g->mem_total;
    m->free = g->mem_free;
    m->used = g->mem_used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) { LOCKED(memory_(h, m)); }

static nvmlReturn_t cc_(nvmlDevice_t h, int *major, int *minor)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetCudaComputeCapability", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_cc)
        return NVML_ERROR_NOT_SUPPORTED;
    *major = g->cc_major;
    *minor = g->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int *major, int *minor)
{
    LOCKED(cc_(h, major, minor));
}

static nvmlReturn_t pci_(nvmlDevice_t h, nvmlPciInfo_t *pci)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetPciInfo", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    fill_pci(pci, g->bus, g->pci_id);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci) { LOCKED(pci_(h, pci)); }

static nvmlReturn_t pcie_(const char *function, nvmlDevice_t h, int k, unsigned int *out)
{
    struct gpu *g;
    nvmlReturn_t r = device(function, h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (g->pcie[k] < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned int)g->pcie[k];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t h, unsigned int *v)
{
    LOCKED(pcie_("nvmlDeviceGetMaxPcieLinkGeneration", h, 0, v));
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t h, unsigned int *v)
{
    LOCKED(pcie_("nvmlDeviceGetMaxPcieLinkWidth", h, 1, v));
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t h, unsigned int *v)
{
    LOCKED(pcie_("nvmlDeviceGetCurrPcieLinkGeneration", h, 2, v));
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t h, unsigned int *v)
{
    LOCKED(pcie_("nvmlDeviceGetCurrPcieLinkWidth", h, 3, v));
}

static nvmlReturn_t power_(nvmlDevice_t h, unsigned int *limit)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetPowerManagementLimit", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_power)
        return NVML_ERROR_NOT_SUPPORTED;
    *limit = g->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t h, unsigned int *limit)
{
    LOCKED(power_(h, limit));
}

static nvmlReturn_t words_(const char *function, nvmlDevice_t h, unsigned int size,
                           unsigned long *out, int cpus)
{
    struct gpu *g;
    nvmlReturn_t r = device(function, h, &g);
    if (r != NVML_SUCCESS)
        return r;
    int have = cpus ? g->cpu_words : g->node_words;
    const unsigned long *words = cpus ? g->cpus : g->nodes;
    if (have == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int k = 0; k < size; k++)
        out[k] = (int)k < have ? words[k] : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t h, unsigned int size, unsigned long *set)
{
    LOCKED(words_("nvmlDeviceGetCpuAffinity", h, size, set, 1));
}

nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t h, unsigned int size, unsigned long *set,
                                         nvmlAffinityScope_t scope)
{
    (void)scope;
    LOCKED(words_("nvmlDeviceGetMemoryAffinity", h, size, set, 0));
}

static nvmlReturn_t numa_(nvmlDevice_t h, unsigned int *node)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetNumaNodeId", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (g->numa < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned int)g->numa;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t h, unsigned int *node) { LOCKED(numa_(h, node)); }

static nvmlReturn_t ancestor_(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuTopologyLevel_t *level)
{
    struct gpu *ga, *gb;
    nvmlReturn_t r = device("nvmlDeviceGetTopologyCommonAncestor", a, &ga);
    if (r != NVML_SUCCESS)
        return r;
    r = device("nvmlDeviceGetTopologyCommonAncestor", b, &gb);
    if (r != NVML_SUCCESS)
        return r;
    int value = ga->ancestor[((const struct handle *)b)->gpu];
    if (value < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *level = (nvmlGpuTopologyLevel_t)value;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b,
                                                 nvmlGpuTopologyLevel_t *level)
{
    LOCKED(ancestor_(a, b, level));
}

/* ---- NVLink ------------------------------------------------------------------------------- */

static nvmlReturn_t link_(const char *function, nvmlDevice_t h, unsigned int l, struct link **out)
{
    struct gpu *g;
    nvmlReturn_t r = device(function, h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (g->nvlinks == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (l >= (unsigned int)g->nvlinks || l >= MAX_LINKS || !g->links[l].present)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = &g->links[l];
    return NVML_SUCCESS;
}

static nvmlReturn_t link_state_(nvmlDevice_t h, unsigned int l, nvmlEnableState_t *active)
{
    struct link *k;
    nvmlReturn_t r = link_("nvmlDeviceGetNvLinkState", h, l, &k);
    if (r == NVML_SUCCESS)
        *active = k->active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return r;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t h, unsigned int l, nvmlEnableState_t *active)
{
    LOCKED(link_state_(h, l, active));
}

static nvmlReturn_t remote_pci_(nvmlDevice_t h, unsigned int l, nvmlPciInfo_t *pci)
{
    struct link *k;
    nvmlReturn_t r = link_("nvmlDeviceGetNvLinkRemotePciInfo", h, l, &k);
    if (r != NVML_SUCCESS)
        return r;
    if (!k->active || !k->remote_bus[0])
        return NVML_ERROR_NOT_SUPPORTED;
    fill_pci(pci, k->remote_bus, k->remote_pci_id);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t h, unsigned int l, nvmlPciInfo_t *pci)
{
    LOCKED(remote_pci_(h, l, pci));
}

static nvmlReturn_t remote_type_(nvmlDevice_t h, unsigned int l, nvmlIntNvLinkDeviceType_t *t)
{
    struct link *k;
    nvmlReturn_t r = link_("nvmlDeviceGetNvLinkRemoteDeviceType", h, l, &k);
    if (r == NVML_SUCCESS)
        *t = k->active ? (nvmlIntNvLinkDeviceType_t)k->remote_type : NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    return r;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t h, unsigned int l,
                                                 nvmlIntNvLinkDeviceType_t *t)
{
    LOCKED(remote_type_(h, l, t));
}

static nvmlReturn_t link_counter_(nvmlDevice_t h, unsigned int l, nvmlNvLinkErrorCounter_t c,
                                  unsigned long long *v)
{
    struct link *k;
    nvmlReturn_t r = link_("nvmlDeviceGetNvLinkErrorCounter", h, l, &k);
    if (r != NVML_SUCCESS)
        return r;
    if (!k->has_counters)
        return NVML_ERROR_NOT_SUPPORTED;
    if ((unsigned int)c > NVML_NVLINK_ERROR_DL_ECC_DATA)
        return NVML_ERROR_INVALID_ARGUMENT;
    *v = k->counters[c];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t h, unsigned int l,
                                             nvmlNvLinkErrorCounter_t c, unsigned long long *v)
{
    LOCKED(link_counter_(h, l, c, v));
}

/* NVLink error counters as field values (one call per GPU): NVML_FI_DEV_NVLINK_ERROR_DL_*,
 * the link in scopeId. Fields this library does not model answer NOT_SUPPORTED each. */
static nvmlReturn_t field_values_(nvmlDevice_t h, int n, nvmlFieldValue_t *values)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetFieldValues", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (n < 0 || (n > 0 && values == NULL))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int k = 0; k < n; k++) {
        nvmlFieldValue_t *v = &values[k];
        unsigned int l = v->scopeId;
        v->timestamp = 0;
        v->latencyUsec = 0;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        if (v->fieldId < NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY || v->fieldId > NVML_FI_DEV_NVLINK_ERROR_DL_CRC)
            continue;
        if (g->nvlinks == 0)
            continue;
        if (l >= (unsigned int)g->nvlinks || l >= MAX_LINKS || !g->links[l].present) {
            v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
            continue;
        }
        struct link *k2 = &g->links[l];
        if (!k2->has_counters)
            continue;
        if (v->fieldId == NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY)
            v->value.ullVal = k2->counters[NVML_NVLINK_ERROR_DL_REPLAY];
        else if (v->fieldId == NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY)
            v->value.ullVal = k2->counters[NVML_NVLINK_ERROR_DL_RECOVERY];
        else
            v->value.ullVal = k2->counters[NVML_NVLINK_ERROR_DL_CRC_FLIT] +
                              k2->counters[NVML_NVLINK_ERROR_DL_CRC_DATA];
        v->nvmlReturn = NVML_SUCCESS;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t h, int n, nvmlFieldValue_t *values)
{
    LOCKED(field_values_(h, n, values));
}

/* ---- health ------------------------------------------------------------------------------- */

static nvmlReturn_t ecc_(nvmlDevice_t h, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
                         unsigned long long *v)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetTotalEccErrors", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_ecc)
        return NVML_ERROR_NOT_SUPPORTED;
    if ((unsigned int)type > 1 || (unsigned int)counter > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    *v = g->ecc[type][counter];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, nvmlMemoryErrorType_t type,
                                         nvmlEccCounterType_t counter, unsigned long long *v)
{
    LOCKED(ecc_(h, type, counter, v));
}

static nvmlReturn_t retired_(nvmlDevice_t h, nvmlPageRetirementCause_t cause, unsigned int *n,
                             unsigned long long *addresses)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetRetiredPages", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_retired)
        return NVML_ERROR_NOT_SUPPORTED;
    if ((unsigned int)cause > 1 || n == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int have = g->retired[cause];
    if (addresses == NULL || *n < have) {
        unsigned int asked = *n;
        *n = have;
        return (have == 0 || (addresses != NULL && asked >= have)) ? NVML_SUCCESS
                                                                    : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int k = 0; k < have; k++)
        addresses[k] = 0x1000ULL * (k + 1) + (cause ? 0x800000ULL : 0);
    *n = have;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t h, nvmlPageRetirementCause_t cause,
                                       unsigned int *n, unsigned long long *addresses)
{
    LOCKED(retired_(h, cause, n, addresses));
}

static nvmlReturn_t retired_pending_(nvmlDevice_t h, nvmlEnableState_t *pending)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetRetiredPagesPendingStatus", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_retired)
        return NVML_ERROR_NOT_SUPPORTED;
    *pending = g->retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t h, nvmlEnableState_t *pending)
{
    LOCKED(retired_pending_(h, pending));
}

static nvmlReturn_t remap_(nvmlDevice_t h, unsigned int *corr, unsigned int *unc,
                           unsigned int *pending, unsigned int *failure)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetRemappedRows", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_remap)
        return NVML_ERROR_NOT_SUPPORTED;
    *corr = g->remap[0];
    *unc = g->remap[1];
    *pending = g->remap[2];
    *failure = g->remap[3];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t h, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failure)
{
    LOCKED(remap_(h, corr, unc, pending, failure));
}

static nvmlReturn_t clocks_(const char *function, nvmlDevice_t h, unsigned long long *reasons)
{
    struct gpu *g;
    nvmlReturn_t r = device(function, h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_clocks)
        return NVML_ERROR_NOT_SUPPORTED;
    *reasons = g->clocks;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *reasons)
{
    LOCKED(clocks_("nvmlDeviceGetCurrentClocksEventReasons", h, reasons));
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h, unsigned long long *reasons)
{
    LOCKED(clocks_("nvmlDeviceGetCurrentClocksThrottleReasons", h, reasons));
}

static nvmlReturn_t fabric_v(nvmlDevice_t h, nvmlGpuFabricInfoV_t *info)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetGpuFabricInfoV", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_fabric)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned int version = info->version;
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memcpy(info->clusterUuid, g->cluster, NVML_GPU_FABRIC_UUID_LEN);
    info->status = (nvmlReturn_t)g->fabric_status;
    info->cliqueId = g->clique;
    info->state = g->fabric_state;
    info->healthMask = g->health_mask;
    if (version == nvmlGpuFabricInfo_v3)
        info->healthSummary = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t h, nvmlGpuFabricInfoV_t *info)
{
    LOCKED(fabric_v(h, info));
}

static nvmlReturn_t fabric_v1(nvmlDevice_t h, nvmlGpuFabricInfo_t *info)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetGpuFabricInfo", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_fabric)
        return NVML_ERROR_NOT_SUPPORTED;
    memcpy(info->clusterUuid, g->cluster, NVML_GPU_FABRIC_UUID_LEN);
    info->status = (nvmlReturn_t)g->fabric_status;
    info->cliqueId = g->clique;
    info->state = g->fabric_state;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t h, nvmlGpuFabricInfo_t *info)
{
    LOCKED(fabric_v1(h, info));
}

/* ---- MIG (read side: what the profile created) -------------------------------------------- */

static nvmlReturn_t mig_mode_(nvmlDevice_t h, unsigned int *current, unsigned int *pending)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetMigMode", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *current = (unsigned int)g->mig_current;
    *pending = (unsigned int)g->mig_pending;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *current, unsigned int *pending)
{
    LOCKED(mig_mode_(h, current, pending));
}

static struct giprofile *giprofile_by(struct gpu *g, int index, int id)
{
    for (int k = 0; k < g->n_giprofiles; k++)
        if ((index >= 0 && g->giprofiles[k].index == index) || (id >= 0 && g->giprofiles[k].id == id))
            return &g->giprofiles[k];
    return NULL;
}

static nvmlReturn_t gi_profile_info_(nvmlDevice_t h, unsigned int index,
                                     nvmlGpuInstanceProfileInfo_v2_t *info)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetGpuInstanceProfileInfo", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuInstanceProfileInfo_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    struct giprofile *p = giprofile_by(g, (int)index, -1);
    if (p == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    info->id = (unsigned int)p->id;
    info->isP2pSupported = 0;
    info->sliceCount = (unsigned int)p->slices;
    info->instanceCount = (unsigned int)p->instances;
    info->multiprocessorCount = (unsigned int)p->sms;
    info->copyEngineCount = (unsigned int)p->slices;
    info->decoderCount = info->encoderCount = info->jpegCount = info->ofaCount = 0;
    info->memorySizeMB = p->memory_mb;
    snprintf(info->name, sizeof info->name, "%s", p->name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t h, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info)
{
    LOCKED(gi_profile_info_(h, profile, info));
}

static nvmlReturn_t gi_remaining_(nvmlDevice_t h, unsigned int id, unsigned int *n)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetGpuInstanceRemainingCapacity", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_mig || !g->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    struct giprofile *p = giprofile_by(g, -1, (int)id);
    if (p == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *n = (unsigned int)p->remaining;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t h, unsigned int id,
                                                       unsigned int *n)
{
    LOCKED(gi_remaining_(h, id, n));
}

static nvmlReturn_t gis_(nvmlDevice_t h, unsigned int id, nvmlGpuInstance_t *out, unsigned int *n)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetGpuInstances", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_mig || !g->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    if (giprofile_by(g, -1, (int)id) == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    int gpu = ((const struct handle *)h)->gpu;
    unsigned int found = 0;
    for (int k = 0; k < g->n_gis; k++) {
        if (g->gis[k].profile_id != (int)id)
            continue;
        gpu_instances[gpu][k] = (struct handle){GPU_INSTANCE, gpu, k};
        out[found++] = (nvmlGpuInstance_t)&gpu_instances[gpu][k];
    }
    *n = found;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t h, unsigned int id, nvmlGpuInstance_t *out,
                                       unsigned int *n)
{
    LOCKED(gis_(h, id, out, n));
}

/* The GPU instance behind a handle (checked), and its GPU. */
static nvmlReturn_t gi_of(const char *function, nvmlGpuInstance_t h, struct gpu **g, struct gi **x)
{
    const struct handle *k = (const struct handle *)h;
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (k == NULL || k->kind != GPU_INSTANCE)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = device(function, (nvmlDevice_t)&devices[k->gpu], g);
    if (r != NVML_SUCCESS)
        return r;
    if (k->slot >= (*g)->n_gis)
        return NVML_ERROR_INVALID_ARGUMENT;
    *x = &(*g)->gis[k->slot];
    return NVML_SUCCESS;
}

static nvmlReturn_t gi_info_(nvmlGpuInstance_t h, nvmlGpuInstanceInfo_t *info)
{
    struct gpu *g;
    struct gi *x;
    nvmlReturn_t r = gi_of("nvmlGpuInstanceGetInfo", h, &g, &x);
    if (r != NVML_SUCCESS)
        return r;
    info->device = (nvmlDevice_t)&devices[((const struct handle *)h)->gpu];
    info->id = (unsigned int)x->id;
    info->profileId = (unsigned int)x->profile_id;
    info->placement.start = (unsigned int)x->start;
    info->placement.size = (unsigned int)x->size;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t h, nvmlGpuInstanceInfo_t *info)
{
    LOCKED(gi_info_(h, info));
}

static struct ciprofile *ciprofile_by(struct gpu *g, int gi_id, int index)
{
    for (int k = 0; k < g->n_ciprofiles; k++)
        if (g->ciprofiles[k].gi_id == gi_id && g->ciprofiles[k].index == index)
            return &g->ciprofiles[k];
    return NULL;
}

static nvmlReturn_t ci_profile_info_(nvmlGpuInstance_t h, unsigned int index, unsigned int eng,
                                     nvmlComputeInstanceProfileInfo_v2_t *info)
{
    struct gpu *g;
    struct gi *x;
    nvmlReturn_t r = gi_of("nvmlGpuInstanceGetComputeInstanceProfileInfo", h, &g, &x);
    if (r != NVML_SUCCESS)
        return r;
    if (index >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eng != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        return NVML_ERROR_NOT_SUPPORTED;
    if (info->version != nvmlComputeInstanceProfileInfo_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    struct ciprofile *p = ciprofile_by(g, x->id, (int)index);
    if (p == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    info->id = (unsigned int)p->index;
    info->sliceCount = (unsigned int)p->slices;
    info->instanceCount = (unsigned int)p->instances;
    info->multiprocessorCount = (unsigned int)p->sms;
    info->sharedCopyEngineCount = (unsigned int)x->size;
    info->sharedDecoderCount = info->sharedEncoderCount = 0;
    info->sharedJpegCount = info->sharedOfaCount = 0;
    snprintf(info->name, sizeof info->name, "%s", p->name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t h, unsigned int profile, unsigned int eng,
    nvmlComputeInstanceProfileInfo_v2_t *info)
{
    LOCKED(ci_profile_info_(h, profile, eng, info));
}

static nvmlReturn_t cis_(nvmlGpuInstance_t h, unsigned int index, nvmlComputeInstance_t *out,
                         unsigned int *n)
{
    struct gpu *g;
    struct gi *x;
    nvmlReturn_t r = gi_of("nvmlGpuInstanceGetComputeInstances", h, &g, &x);
    if (r != NVML_SUCCESS)
        return r;
    if (ciprofile_by(g, x->id, (int)index) == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    int gpu = ((const struct handle *)h)->gpu;
    unsigned int found = 0;
    for (int k = 0; k < g->n_cis; k++) {
        if (g->cis[k].gi_id != x->id || g->cis[k].profile_index != (int)index)
            continue;
        compute_instances[gpu][k] = (struct handle){COMPUTE_INSTANCE, gpu, k};
        out[found++] = (nvmlComputeInstance_t)&compute_instances[gpu][k];
    }
    *n = found;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t h, unsigned int profile,
                                                nvmlComputeInstance_t *out, unsigned int *n)
{
    LOCKED(cis_(h, profile, out, n));
}

static nvmlReturn_t ci_info_(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *info)
{
    const struct handle *k = (const struct handle *)h;
    struct gpu *g;
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (k == NULL || k->kind != COMPUTE_INSTANCE)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = device("nvmlComputeInstanceGetInfo", (nvmlDevice_t)&devices[k->gpu], &g);
    if (r != NVML_SUCCESS)
        return r;
    if (k->slot >= g->n_cis)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct ci *c = &g->cis[k->slot];
    int gi_slot = 0;
    for (int s = 0; s < g->n_gis; s++)
        if (g->gis[s].id == c->gi_id)
            gi_slot = s;
    gpu_instances[k->gpu][gi_slot] = (struct handle){GPU_INSTANCE, k->gpu, gi_slot};
    info->device = (nvmlDevice_t)&devices[k->gpu];
    info->gpuInstance = (nvmlGpuInstance_t)&gpu_instances[k->gpu][gi_slot];
    info->id = (unsigned int)c->id;
    info->profileId = (unsigned int)c->profile_index;
    info->placement.start = (unsigned int)c->start;
    info->placement.size = (unsigned int)c->size;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *info)
{
    LOCKED(ci_info_(h, info));
}

static nvmlReturn_t max_mig_(nvmlDevice_t h, unsigned int *n)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetMaxMigDeviceCount", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *n = (unsigned int)g->mig_max;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned int *n)
{
    LOCKED(max_mig_(h, n));
}

static nvmlReturn_t mig_handle_(nvmlDevice_t h, unsigned int index, nvmlDevice_t *out)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceGetMigDeviceHandleByIndex", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!g->has_mig || !g->mig_current || is_mig(h))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= (unsigned int)g->n_migdevs)
        return NVML_ERROR_NOT_FOUND;
    int gpu = ((const struct handle *)h)->gpu;
    mig_devices[gpu][index] = (struct handle){MIG_DEVICE, gpu, g->migdevs[index]};
    *out = (nvmlDevice_t)&mig_devices[gpu][index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned int index,
                                                 nvmlDevice_t *out)
{
    LOCKED(mig_handle_(h, index, out));
}

static nvmlReturn_t instance_id_(const char *function, nvmlDevice_t h, unsigned int *id, int ci)
{
    struct gpu *g;
    nvmlReturn_t r = device(function, h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (!is_mig(h))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct ci *c = &g->cis[((const struct handle *)h)->slot];
    *id = (unsigned int)(ci ? c->id : c->gi_id);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t h, unsigned int *id)
{
    LOCKED(instance_id_("nvmlDeviceGetGpuInstanceId", h, id, 0));
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t h, unsigned int *id)
{
    LOCKED(instance_id_("nvmlDeviceGetComputeInstanceId", h, id, 1));
}

/* ---- events ------------------------------------------------------------------------------- */

static nvmlReturn_t event_set_create_(nvmlEventSet_t *set)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = injected("nvmlEventSetCreate", -1);
    if (r != NVML_SUCCESS)
        return r;
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    s->delivered = S->n_events; /* events already in the file happened before the set existed */
    *set = s;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) { LOCKED(event_set_create_(set)); }

static nvmlReturn_t register_(nvmlDevice_t h, unsigned long long types, nvmlEventSet_t set)
{
    struct gpu *g;
    nvmlReturn_t r = device("nvmlDeviceRegisterEvents", h, &g);
    if (r != NVML_SUCCESS)
        return r;
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    set->masks[((const struct handle *)h)->gpu] |= types;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t h, unsigned long long types, nvmlEventSet_t set)
{
    LOCKED(register_(h, types, set));
}

/* The next event for ``set``, or NVML_ERROR_TIMEOUT. Called with the lock held. */
static nvmlReturn_t next_event(nvmlEventSet_t set, nvmlEventData_t *data)
{
    refresh();
    if (set->delivered > S->n_events)
        set->delivered = S->n_events; /* the file was rewritten with fewer events */
    while (set->delivered < S->n_events) {
        struct event *e = &S->events[set->delivered++];
        if (e->gpu < 0 || e->gpu >= MAX_GPUS || !(set->masks[e->gpu] & e->type))
            continue;
        devices[e->gpu] = (struct handle){DEVICE, e->gpu, 0};
        data->device = (nvmlDevice_t)&devices[e->gpu];
        data->eventType = e->type;
        data->eventData = e->data;
        data->gpuInstanceId = 0xFFFFFFFFu;
        data->computeInstanceId = 0xFFFFFFFFu;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    struct timespec step = {0, 5 * 1000 * 1000};
    if (set == NULL || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int waited = 0;; waited += 5) {
        pthread_mutex_lock(&lock);
        nvmlReturn_t r = initialized ? next_event(set, data) : NVML_ERROR_UNINITIALIZED;
        pthread_mutex_unlock(&lock);
        if (r != NVML_ERROR_TIMEOUT || waited >= timeoutms)
            return r;
        nanosleep(&step, NULL);
    }
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    free(set);
    return NVML_SUCCESS;
}
