/* tokensleuth's CUDA kernel tracer: loaded by the CUDA driver through CUDA_INJECTION64_PATH.
 *
 * It enables CUPTI's activity API, keeps the records in memory while the engine runs, and writes
 * them once, at exit, to $TOKENSLEUTH_KERNELS_DIR/kernels-<pid>.bin (format: kernels/cupti.py).
 * It calls no CUDA API and adds no synchronisation: CUPTI fills its buffers asynchronously and
 * hands them over when full or when flushed at exit.
 *
 * What it records ($TOKENSLEUTH_CUPTI_MODE):
 *   kernels   every kernel (one record per kernel node of a CUDA graph), memcpy and memset;
 *   graphs    one record per CUDA graph launch (CUPTI's graph-level trace: no node is
 *             instrumented), memcpy and memset, and the kernels launched outside a graph
 *             where CUPTI takes kernel records beside graph-level ones (the header says);
 *   sample:N  as kernels, but the kernel records of CUDA graphs are taken for one graph launch
 *             in N only (kernel activity is switched on at that launch and off at the next),
 *             and every graph launch leaves a marker (kind 4) saying whether it was traced.
 *
 * Timestamps stay on CUPTI's own clock (CLOCK_REALTIME on Linux): no timestamp callback is
 * registered (CUPTI 12.6 Update 2 to 13.0 give kernels zero timestamps with one). The header
 * carries CUPTI's clock less CLOCK_MONOTONIC, read through cuptiGetTimestamp at start and at
 * exit, each the tightest of several brackets; the reader moves the records onto the
 * monotonic clock the engine's output lines are stamped with.
 *
 * The record structs are the newest this CUPTI's headers define, chosen when the library is
 * compiled (TS_KERNEL, TS_MEMCPY, TS_MEMSET, TS_GRAPH: kernels/cupti.py probes for them).
 */
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef TS_KERNEL
#error "compile with -DTS_KERNEL=CUpti_ActivityKernelN (kernels/cupti.py chooses N)"
#endif
#ifndef TS_MEMCPY
#define TS_MEMCPY CUpti_ActivityMemcpy5
#endif
#ifndef TS_MEMSET
#define TS_MEMSET CUpti_ActivityMemset4
#endif

#define BUFFER_SIZE (8u << 20)
#define MODE_KERNELS 0
#define MODE_GRAPHS 1
#define MODE_SAMPLE 2

#pragma pack(push, 1)
typedef struct {
    uint64_t start, end, graph_node, bytes;
    uint32_t name, stream, graph, correlation;
    int32_t grid[3], block[3], static_smem, dynamic_smem;
    uint16_t registers;
    uint8_t kind;  /* 0 kernel, 1 memcpy, 2 memset, 3 graph execution, 4 graph launch marker */
    uint8_t flags; /* a marker: 1 where the launch's kernels were traced */
    uint32_t device;
} record_t;
#pragma pack(pop)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* sample:N's switch and its marker, together (not ``lock``: switching may flush into completed) */
static pthread_mutex_t switching = PTHREAD_MUTEX_INITIALIZER;
static record_t *records;
static size_t n_records, cap_records;
static const char **names;           /* interned: copies */
static size_t n_names, cap_names;
static const char *seen[4096];        /* CUPTI name pointer -> index + 1 (open addressing) */
static uint32_t seen_id[4096];
static uint64_t dropped;             /* CUPTI's own count, and records memory could not hold */
static uint64_t invalid;             /* records CUPTI gave without a start or an end */
static int64_t offset_start, offset_end; /* CUPTI's clock less CLOCK_MONOTONIC (ns) */
static int mode = MODE_KERNELS;
static uint32_t sample_every = 1;
static uint64_t launches;
static int kernels_on;
static CUpti_SubscriberHandle subscriber;
static int initialized;

static int64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t) t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* CUPTI's timestamp less the monotonic clock: the reading bracketed most tightly of 16. */
static int64_t cupti_minus_monotonic(void) {
    int64_t best = 0, width = INT64_MAX;
    for (int i = 0; i < 16; i++) {
        uint64_t c = 0;
        int64_t a = mono_ns();
        if (cuptiGetTimestamp(&c) != CUPTI_SUCCESS) return 0;
        int64_t b = mono_ns();
        if (b - a < width) { width = b - a; best = (int64_t) c - (a + (b - a) / 2); }
    }
    return best;
}

/* The index of name ``p`` (UINT32_MAX where memory ran out). CUPTI hands the same pointer for a
   kernel's every record; a cached pointer is checked against its text, in case a module was
   unloaded and another name took its address. */
static uint32_t name_of(const char *p) {
    if (!p) p = "(unnamed)";
    size_t h = ((uintptr_t) p >> 4) & 4095;
    size_t i;
    for (i = 0; i < 4096; i++, h = (h + 1) & 4095) {
        if (seen[h] == p && strcmp(names[seen_id[h]], p) == 0) return seen_id[h];
        if (!seen[h]) break;
    }
    for (size_t k = 0; k < n_names; k++) /* a name seen through another pointer */
        if (strcmp(names[k], p) == 0) return (uint32_t) k;
    if (n_names == cap_names) {
        size_t cap = cap_names ? cap_names * 2 : 256;
        const char **grown = realloc(names, cap * sizeof *names);
        if (!grown) return UINT32_MAX;
        names = grown;
        cap_names = cap;
    }
    char *copy = strdup(p);
    if (!copy) return UINT32_MAX;
    names[n_names] = copy;
    if (i < 4096 && !seen[h]) { seen[h] = p; seen_id[h] = (uint32_t) n_names; }
    return (uint32_t) n_names++;
}

/* A zeroed record named ``name`` to fill, or NULL where memory ran out (counted as dropped).
   Called with the lock held. */
static record_t *next_record(const char *name, uint8_t kind) {
    uint32_t id = name_of(name);
    if (id == UINT32_MAX) { dropped++; return NULL; }
    if (n_records == cap_records) {
        size_t cap = cap_records ? cap_records * 2 : 65536;
        record_t *grown = realloc(records, cap * sizeof *records);
        if (!grown) { dropped++; return NULL; }
        records = grown;
        cap_records = cap;
    }
    record_t *r = &records[n_records++];
    memset(r, 0, sizeof *r);
    r->name = id;
    r->kind = kind;
    return r;
}

static const char *copy_kind(uint8_t k) {
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[memcpy HtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[memcpy DtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[memcpy DtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "[memcpy HtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "[memcpy PtoP]";
    default: return "[memcpy]";
    }
}

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUFFER_SIZE);
    *size = *buffer ? BUFFER_SIZE : 0;
    *max_records = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void) size;
    CUpti_Activity *a = NULL;
    pthread_mutex_lock(&lock);
    while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
        if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const TS_KERNEL *k = (const TS_KERNEL *) a;
            if (k->start == 0 || k->end < k->start) { invalid++; continue; }
            record_t *r = next_record(k->name, 0);
            if (!r) continue;
            r->start = k->start; r->end = k->end; r->device = k->deviceId;
            r->graph_node = k->graphNodeId; r->graph = k->graphId;
            r->stream = k->streamId; r->correlation = k->correlationId;
            r->grid[0] = k->gridX; r->grid[1] = k->gridY; r->grid[2] = k->gridZ;
            r->block[0] = k->blockX; r->block[1] = k->blockY; r->block[2] = k->blockZ;
            r->static_smem = k->staticSharedMemory; r->dynamic_smem = k->dynamicSharedMemory;
            r->registers = k->registersPerThread;
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const TS_MEMCPY *m = (const TS_MEMCPY *) a;
            if (m->start == 0 || m->end < m->start) { invalid++; continue; }
            record_t *r = next_record(copy_kind(m->copyKind), 1);
            if (!r) continue;
            r->start = m->start; r->end = m->end; r->bytes = m->bytes; r->device = m->deviceId;
            r->graph_node = m->graphNodeId; r->graph = m->graphId;
            r->stream = m->streamId; r->correlation = m->correlationId;
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const TS_MEMSET *m = (const TS_MEMSET *) a;
            if (m->start == 0 || m->end < m->start) { invalid++; continue; }
            record_t *r = next_record("[memset]", 2);
            if (!r) continue;
            r->start = m->start; r->end = m->end; r->bytes = m->bytes; r->device = m->deviceId;
            r->graph_node = m->graphNodeId; r->graph = m->graphId;
            r->stream = m->streamId; r->correlation = m->correlationId;
#ifdef TS_GRAPH
        } else if (a->kind == CUPTI_ACTIVITY_KIND_GRAPH_TRACE) {
            const TS_GRAPH *g = (const TS_GRAPH *) a;
            if (g->start == 0 || g->end < g->start) { invalid++; continue; }
            record_t *r = next_record("[graph]", 3);
            if (!r) continue;
            r->start = g->start; r->end = g->end; r->device = g->deviceId;
            r->graph = g->graphId; r->stream = g->streamId; r->correlation = g->correlationId;
#endif
        }
    }
    pthread_mutex_unlock(&lock);
    size_t lost = 0; /* asked outside the lock: CUPTI may hold its own while it calls back */
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &lost) == CUPTI_SUCCESS && lost) {
        pthread_mutex_lock(&lock);
        dropped += lost;
        pthread_mutex_unlock(&lock);
    }
    free(buffer);
}

/* sample:N: at each graph launch, kernel records on for one launch in N, off for the others. */
static void CUPTIAPI on_api(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
    (void) userdata;
    const CUpti_CallbackData *cb = (const CUpti_CallbackData *) data;
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_ENTER) return;
    if (cbid != CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch && cbid != CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz) return;
    pthread_mutex_lock(&switching);
    uint64_t n = launches++;
    int on = n % sample_every == 0;
    if (on != kernels_on) {
        if (on) cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        else cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        kernels_on = on;
    }
    uint64_t t = 0;
    cuptiGetTimestamp(&t);
    pthread_mutex_lock(&lock);
    record_t *r = next_record("[graph launch]", 4);
    if (r) { r->start = r->end = t; r->graph = (uint32_t) n; r->flags = (uint8_t) on; r->correlation = cb->correlationId; }
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&switching);
}

static void write_all(FILE *f, const void *p, size_t n) { if (n) fwrite(p, 1, n, f); }

/* One line on why the tracer could not start, beside where its records would have been. */
static void say_failed(const char *what, CUptiResult r) {
    const char *dir = getenv("TOKENSLEUTH_KERNELS_DIR");
    const char *why = NULL;
    char path[4096];
    if (!dir) return;
    cuptiGetResultString(r, &why);
    snprintf(path, sizeof path, "%s/kernels-%ld.err", dir, (long) getpid());
    FILE *f = fopen(path, "w");
    if (f) { fprintf(f, "%s: %s\n", what, why ? why : "unknown CUPTI error"); fclose(f); }
}

static void at_exit(void) {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    offset_end = cupti_minus_monotonic();
    const char *dir = getenv("TOKENSLEUTH_KERNELS_DIR");
    if (!dir) return;
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/kernels-%ld.bin", dir, (long) getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    uint32_t runtime = 0;
    cuptiGetVersion(&runtime);
    pthread_mutex_lock(&lock);
    FILE *f = fopen(tmp, "wb");
    if (f) {
        const char magic[8] = {'T', 'S', 'K', 'T', 'R', 'C', '2', 0};
        /* the mode, and whether kernel records were on at the start (graphs: outside graphs) */
        uint32_t head[4] = {2u, (uint32_t) mode | (mode == MODE_GRAPHS && kernels_on ? 0x100u : 0u), runtime,
                            (uint32_t) CUPTI_API_VERSION};
        int64_t offsets[2] = {offset_start, offset_end};
        uint64_t lost[2] = {dropped, invalid};
        uint32_t counts[4] = {sample_every, (uint32_t) sizeof(record_t), (uint32_t) n_names, (uint32_t) n_records};
        write_all(f, magic, sizeof magic);
        write_all(f, head, sizeof head);
        write_all(f, offsets, sizeof offsets);
        write_all(f, lost, sizeof lost);
        write_all(f, counts, sizeof counts);
        for (size_t i = 0; i < n_names; i++) {
            uint32_t len = (uint32_t) strlen(names[i]);
            write_all(f, &len, sizeof len);
            write_all(f, names[i], len);
        }
        write_all(f, records, n_records * sizeof *records);
        int bad = ferror(f);
        if (fclose(f) == 0 && !bad) rename(tmp, path);
        else remove(tmp);
    }
    pthread_mutex_unlock(&lock);
}

__attribute__((visibility("default"))) int InitializeInjection(void) {
    if (initialized) return 1;
    initialized = 1;
    const char *m = getenv("TOKENSLEUTH_CUPTI_MODE");
    if (m && strcmp(m, "graphs") == 0) mode = MODE_GRAPHS;
    else if (m && strncmp(m, "sample:", 7) == 0 && atoi(m + 7) >= 1) { mode = MODE_SAMPLE; sample_every = (uint32_t) atoi(m + 7); }
    offset_start = cupti_minus_monotonic();
    CUptiResult r = cuptiActivityRegisterCallbacks(requested, completed);
    if (r != CUPTI_SUCCESS) { say_failed("cuptiActivityRegisterCallbacks", r); return 1; }
    if (mode == MODE_GRAPHS) {
#ifdef TS_GRAPH
        r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
        if (r != CUPTI_SUCCESS) { say_failed("cuptiActivityEnable(GRAPH_TRACE)", r); return 1; }
        /* kernels launched outside a graph: their own records, where CUPTI takes both kinds */
        kernels_on = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS;
#else
        say_failed("graph-level tracing (this CUPTI has no CUpti_ActivityGraphTrace)", CUPTI_ERROR_NOT_SUPPORTED);
        return 1;
#endif
    } else {
        r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        if (r != CUPTI_SUCCESS) { say_failed("cuptiActivityEnable(CONCURRENT_KERNEL)", r); return 1; }
        kernels_on = 1;
    }
    if (mode == MODE_SAMPLE) {
        r = cuptiSubscribe(&subscriber, on_api, NULL);
        if (r == CUPTI_SUCCESS) r = cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                                                        CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch);
        if (r == CUPTI_SUCCESS) r = cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                                                        CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz);
        if (r != CUPTI_SUCCESS) { say_failed("cuptiSubscribe (graph launches, for sample:N)", r); return 1; }
    }
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    atexit(at_exit);
    return 1;
}
