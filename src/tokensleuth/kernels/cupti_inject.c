/* tokensleuth's CUDA kernel tracer: loaded by the CUDA driver through CUDA_INJECTION64_PATH.
 *
 * It enables CUPTI's activity API for concurrent kernels, memcpy and memset (one record per
 * kernel node of a CUDA graph: graph-level tracing is never enabled), keeps the records in
 * memory while the engine runs, and writes them once, at exit, to
 * $TOKENSLEUTH_KERNELS_DIR/kernels-<pid>.bin (format: tokensleuth/kernels/cupti.py). It calls no
 * CUDA API and adds no synchronisation: CUPTI fills its buffers asynchronously and hands them
 * over when full or when flushed at exit.
 *
 * Timestamps are asked on CLOCK_MONOTONIC (the clock the engine's output lines are stamped
 * with); where CUPTI refuses the timestamp callback they stay on its default CLOCK_REALTIME and
 * the header carries the offset between the two clocks, measured at start.
 */
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 kernel_t;
#elif CUPTI_API_VERSION >= 18
typedef CUpti_ActivityKernel9 kernel_t;
#else
#error "the kernel tracer needs CUPTI of CUDA 12.1 or later (CUpti_ActivityKernel9)"
#endif

#define BUFFER_SIZE (8u << 20)

#pragma pack(push, 1)
typedef struct {
    uint64_t start, end, graph_node, bytes;
    uint32_t name, stream, graph, correlation;
    int32_t grid[3], block[3], static_smem, dynamic_smem;
    uint16_t registers;
    uint8_t kind; /* 0 kernel, 1 memcpy, 2 memset */
    uint8_t pad[5];
} record_t;
#pragma pack(pop)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static record_t *records;
static size_t n_records, cap_records;
static const char **names;           /* interned: CUPTI's own pointers first, then copies */
static size_t n_names, cap_names;
static const char *seen[4096];        /* CUPTI name pointer -> index + 1 (open addressing) */
static uint32_t seen_id[4096];
static uint64_t dropped;             /* CUPTI's own count: its buffers were full */
static uint64_t invalid;             /* records CUPTI gave without a start or an end */
static int monotonic;
static int64_t realtime_minus_monotonic;
static int initialized;

static int64_t clock_ns(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (int64_t) t.tv_sec * 1000000000LL + t.tv_nsec;
}

static uint64_t CUPTIAPI monotonic_ns(void) { return (uint64_t) clock_ns(CLOCK_MONOTONIC); }

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

/* A zeroed record to fill, or NULL where memory ran out (the record is then counted as dropped). */
static record_t *next_record(void) {
    if (n_records == cap_records) {
        size_t cap = cap_records ? cap_records * 2 : 65536;
        record_t *grown = realloc(records, cap * sizeof *records);
        if (!grown) { dropped++; return NULL; }
        records = grown;
        cap_records = cap;
    }
    record_t *r = &records[n_records++];
    memset(r, 0, sizeof *r);
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
            const kernel_t *k = (const kernel_t *) a;
            if (k->start == 0 || k->end < k->start) { invalid++; continue; }
            uint32_t name = name_of(k->name);
            record_t *r = name == UINT32_MAX ? NULL : next_record();
            if (!r) { dropped += name == UINT32_MAX; continue; }
            r->start = k->start; r->end = k->end;
            r->graph_node = k->graphNodeId; r->graph = k->graphId;
            r->name = name; r->stream = k->streamId; r->correlation = k->correlationId;
            r->grid[0] = k->gridX; r->grid[1] = k->gridY; r->grid[2] = k->gridZ;
            r->block[0] = k->blockX; r->block[1] = k->blockY; r->block[2] = k->blockZ;
            r->static_smem = k->staticSharedMemory; r->dynamic_smem = k->dynamicSharedMemory;
            r->registers = k->registersPerThread;
            r->kind = 0;
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *) a;
            if (m->start == 0 || m->end < m->start) { invalid++; continue; }
            uint32_t name = name_of(copy_kind(m->copyKind));
            record_t *r = name == UINT32_MAX ? NULL : next_record();
            if (!r) { dropped += name == UINT32_MAX; continue; }
            r->start = m->start; r->end = m->end; r->bytes = m->bytes;
            r->graph_node = m->graphNodeId; r->graph = m->graphId;
            r->name = name; r->stream = m->streamId; r->correlation = m->correlationId;
            r->kind = 1;
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *) a;
            if (m->start == 0 || m->end < m->start) { invalid++; continue; }
            uint32_t name = name_of("[memset]");
            record_t *r = name == UINT32_MAX ? NULL : next_record();
            if (!r) { dropped += name == UINT32_MAX; continue; }
            r->start = m->start; r->end = m->end; r->bytes = m->bytes;
            r->graph_node = m->graphNodeId; r->graph = m->graphId;
            r->name = name; r->stream = m->streamId; r->correlation = m->correlationId;
            r->kind = 2;
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
        const char magic[8] = {'T', 'S', 'K', 'T', 'R', 'C', '1', 0};
        uint32_t head[4] = {1u, (uint32_t) (monotonic ? 0 : 1), runtime, (uint32_t) CUPTI_API_VERSION};
        uint32_t counts[2] = {(uint32_t) n_names, (uint32_t) n_records};
        write_all(f, magic, sizeof magic);
        write_all(f, head, sizeof head);
        write_all(f, &realtime_minus_monotonic, sizeof realtime_minus_monotonic);
        uint64_t lost = dropped + invalid;
        write_all(f, &lost, sizeof lost);
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
    realtime_minus_monotonic = clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC);
    monotonic = cuptiActivityRegisterTimestampCallback(monotonic_ns) == CUPTI_SUCCESS;
    CUptiResult r = cuptiActivityRegisterCallbacks(requested, completed);
    if (r != CUPTI_SUCCESS) { say_failed("cuptiActivityRegisterCallbacks", r); return 1; }
    r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r != CUPTI_SUCCESS) { say_failed("cuptiActivityEnable(CONCURRENT_KERNEL)", r); return 1; }
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    atexit(at_exit);
    return 1;
}
