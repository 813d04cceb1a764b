/* A stand-in for the CUDA driver library (libcuda.so.1), for tests on machines without a GPU.

   It exports the driver calls the CUDA device makes, checks them the way the driver does (a
   current context on the calling thread, live handles, copies inside one allocation, launch
   sizes within the limits, one live device pointer per kernel parameter of the cubin, a cubin
   for the device's architecture) and keeps a simulated GPU timeline, so that CUDA events measure
   what they measure on hardware: a launch starts when the stream is free and runs for
   STANDIN_CUDA_KERNEL_MS, an event is stamped when the work before it is done, and a
   synchronizing call moves the host clock to the end of the work it waits for. Kernels do not
   compute anything.

   Settings (environment): STANDIN_CUDA_VERSION (cuDriverGetVersion, default 13000),
   STANDIN_CUDA_SM (compute capability as 90, default 90), STANDIN_CUDA_KERNEL_MS (default 1),
   STANDIN_CUDA_LOG (a file that gets one line per call of interest: "pid call detail result").
   A kernel whose name starts with "standin_illegal_address" or "standin_launch_failed" faults
   like a kernel that does: the launch succeeds and every later call returns the sticky error.

   The cuda-python bindings resolve every call through cuGetProcAddress_v2; the table below
   answers them. Pointers and sizes are those of the _v2 entry points (64-bit). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, NO_DEVICE = 100,
    INVALID_DEVICE = 101, INVALID_IMAGE = 200, INVALID_CONTEXT = 201, NO_BINARY_FOR_GPU = 209,
    INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_READY = 600, ILLEGAL_ADDRESS = 700,
    LAUNCH_FAILED = 719, NOT_SUPPORTED = 801,
};

struct context { int magic; };
struct allocation { CUdeviceptr ptr; size_t size; struct allocation *next; };
struct module { int live; unsigned char *image; size_t size; struct module *next; };
struct function { struct module *module; char name[256]; int params; struct function *next; };
struct event { int magic; int recorded; double at; };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread struct context *current;
static struct context primary = {0x5ca1ab1e};
static int initialized, primary_retained, sticky;
static struct allocation *allocations;
static struct module *modules;
static struct function *functions;
static long live_allocations, live_modules, launches, unloads;
static double clock_offset, stream_free;

static int setting(const char *name, int fallback) {
    const char *value = getenv(name);
    return value && *value ? atoi(value) : fallback;
}

static double setting_ms(const char *name, double fallback) {
    const char *value = getenv(name);
    return value && *value ? atof(value) : fallback;
}

static void note(const char *call, const char *format, ...) __attribute__((format(printf, 2, 3)));

static void note(const char *call, const char *format, ...) {
    const char *path = getenv("STANDIN_CUDA_LOG");
    if (!path || !*path) return;
    FILE *log = fopen(path, "a");
    if (!log) return;
    fprintf(log, "%d %s ", (int)getpid(), call);
    va_list args;
    va_start(args, format);
    vfprintf(log, format, args);
    va_end(args);
    fputc('\n', log);
    fclose(log);
}

/* ---- the simulated timeline, in seconds */
static double host_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9 + clock_offset;
}

static void host_waits_until(double t) {
    double now = host_now();
    if (now < t) clock_offset += t - now;
}

/* the checks every call that works in a context makes first */
static CUresult in_context(void) {
    if (!initialized) return NOT_INITIALIZED;
    if (current != &primary || !primary_retained) return INVALID_CONTEXT;
    return sticky;
}

static struct allocation *allocation_holding(CUdeviceptr ptr, size_t size) {
    for (struct allocation *a = allocations; a; a = a->next)
        if (ptr >= a->ptr && ptr + size <= a->ptr + a->size && ptr + size >= ptr) return a;
    return NULL;
}

/* ---- error names */
struct error_name { CUresult code; const char *name, *text; };
static const struct error_name error_names[] = {
    {OK, "CUDA_SUCCESS", "no error"},
    {INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for "
     "execution on the device"},
    {INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

static const struct error_name *error_entry(CUresult code) {
    for (size_t i = 0; i < sizeof error_names / sizeof *error_names; i++)
        if (error_names[i].code == code) return &error_names[i];
    return NULL;
}

CUresult cuGetErrorName(CUresult code, const char **name) {
    const struct error_name *entry = error_entry(code);
    if (!name) return INVALID_VALUE;
    *name = entry ? entry->name : NULL;
    return entry ? OK : INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult code, const char **text) {
    const struct error_name *entry = error_entry(code);
    if (!text) return INVALID_VALUE;
    *text = entry ? entry->text : NULL;
    return entry ? OK : INVALID_VALUE;
}

/* ---- driver, device, context */
CUresult cuInit(unsigned int flags) {
    if (flags != 0) return INVALID_VALUE;
    pthread_mutex_lock(&lock);
    initialized = 1;
    pthread_mutex_unlock(&lock);
    note("cuInit", "-");
    return OK;
}

CUresult cuDriverGetVersion(int *version) {
    if (!version) return INVALID_VALUE;
    *version = setting("STANDIN_CUDA_VERSION", 13000);
    return OK;
}

CUresult cuDeviceGetCount(int *count) {
    if (!initialized) return NOT_INITIALIZED;
    if (!count) return INVALID_VALUE;
    *count = 1;
    return OK;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!initialized) return NOT_INITIALIZED;
    if (!device) return INVALID_VALUE;
    if (ordinal != 0) return INVALID_DEVICE;
    *device = 0;
    return OK;
}

CUresult cuDeviceGetName(char *name, int length, CUdevice device) {
    if (!initialized) return NOT_INITIALIZED;
    if (device != 0) return INVALID_DEVICE;
    if (!name || length <= 0) return INVALID_VALUE;
    snprintf(name, (size_t)length, "Standin GPU");
    return OK;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device) {
    if (!initialized) return NOT_INITIALIZED;
    if (device != 0) return INVALID_DEVICE;
    if (!value) return INVALID_VALUE;
    int sm = setting("STANDIN_CUDA_SM", 90);
    switch (attribute) {
    case 1: *value = 1024; break;                /* MAX_THREADS_PER_BLOCK */
    case 2: *value = 1024; break;                /* MAX_BLOCK_DIM_X */
    case 3: *value = 1024; break;                /* MAX_BLOCK_DIM_Y */
    case 4: *value = 64; break;                  /* MAX_BLOCK_DIM_Z */
    case 8: *value = 48 * 1024; break;           /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 16: *value = 132; break;                /* MULTIPROCESSOR_COUNT */
    case 38: *value = 50 * 1024 * 1024; break;   /* L2_CACHE_SIZE */
    case 75: *value = sm / 10; break;            /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *value = sm % 10; break;            /* COMPUTE_CAPABILITY_MINOR */
    default: *value = 0;
    }
    return OK;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice device) {
    if (!initialized) return NOT_INITIALIZED;
    if (device != 0) return INVALID_DEVICE;
    if (!bytes) return INVALID_VALUE;
    *bytes = (size_t)80 << 30;
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(struct context **context, CUdevice device) {
    if (!initialized) return NOT_INITIALIZED;
    if (device != 0) return INVALID_DEVICE;
    if (!context) return INVALID_VALUE;
    pthread_mutex_lock(&lock);
    primary_retained++;
    pthread_mutex_unlock(&lock);
    *context = &primary;
    note("cuDevicePrimaryCtxRetain", "-");
    return OK;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice device) {
    if (!initialized) return NOT_INITIALIZED;
    if (device != 0) return INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    CUresult result = primary_retained > 0 ? (primary_retained--, OK) : INVALID_CONTEXT;
    pthread_mutex_unlock(&lock);
    return result;
}

CUresult cuCtxSetCurrent(struct context *context) {
    if (!initialized) return NOT_INITIALIZED;
    if (context && context != &primary) return INVALID_CONTEXT;
    current = context;
    return OK;
}

CUresult cuCtxGetCurrent(struct context **context) {
    if (!initialized) return NOT_INITIALIZED;
    if (!context) return INVALID_VALUE;
    *context = current;
    return OK;
}

CUresult cuCtxPushCurrent(struct context *context) { return cuCtxSetCurrent(context); }

CUresult cuCtxPopCurrent(struct context **context) {
    if (context) *context = current;
    current = NULL;
    return initialized ? OK : NOT_INITIALIZED;
}

CUresult cuCtxSynchronize(void) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK) host_waits_until(stream_free);
    pthread_mutex_unlock(&lock);
    return result;
}

/* ---- memory: device pointers are host memory, so that copies can be checked and done */
CUresult cuMemAlloc(CUdeviceptr *ptr, size_t size) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK && (!ptr || size == 0)) result = INVALID_VALUE;
    if (result == OK) {
        struct allocation *a = malloc(sizeof *a);
        void *memory = aligned_alloc(256, (size + 255) / 256 * 256);
        if (!a || !memory) {
            free(a);
            free(memory);
            result = OUT_OF_MEMORY;
        } else {
            a->ptr = (CUdeviceptr)(uintptr_t)memory;
            a->size = size;
            a->next = allocations;
            allocations = a;
            live_allocations++;
            *ptr = a->ptr;
        }
    }
    pthread_mutex_unlock(&lock);
    note("cuMemAlloc", "%zu %d", size, result);
    return result;
}

CUresult cuMemFree(CUdeviceptr ptr) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK) {
        struct allocation **link = &allocations;
        while (*link && (*link)->ptr != ptr) link = &(*link)->next;
        if (!*link) {
            result = INVALID_VALUE;
        } else {
            struct allocation *a = *link;
            *link = a->next;
            free((void *)(uintptr_t)a->ptr);
            free(a);
            live_allocations--;
        }
    }
    pthread_mutex_unlock(&lock);
    note("cuMemFree", "%#llx %d", ptr, result);
    return result;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t size) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK && (!src || !allocation_holding(dst, size))) result = INVALID_VALUE;
    if (result == OK) {
        host_waits_until(stream_free);
        memcpy((void *)(uintptr_t)dst, src, size);
    }
    pthread_mutex_unlock(&lock);
    note("cuMemcpyHtoD", "%zu %d", size, result);
    return result;
}

CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t size) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK && (!dst || !allocation_holding(src, size))) result = INVALID_VALUE;
    if (result == OK) {
        host_waits_until(stream_free);
        memcpy(dst, (const void *)(uintptr_t)src, size);
    }
    pthread_mutex_unlock(&lock);
    note("cuMemcpyDtoH", "%zu %d", size, result);
    return result;
}

/* ---- modules: cubins (ELF) for this device's architecture */
struct section { const unsigned char *data; uint64_t size; };

static int image_size(const unsigned char *image, size_t *size) {
    if (memcmp(image, "\x7f" "ELF", 4) != 0 || image[4] != 2) return 0;
    uint64_t section_offset;
    uint16_t entry_size, count;
    memcpy(&section_offset, image + 0x28, 8);
    memcpy(&entry_size, image + 0x3A, 2);
    memcpy(&count, image + 0x3C, 2);
    *size = section_offset + (uint64_t)entry_size * count;
    return 1;
}

/* the section called name, or a NULL one */
static struct section find_section(const struct module *m, const char *name) {
    struct section found = {NULL, 0};
    uint64_t offset;
    uint16_t entry_size, count, names;
    memcpy(&offset, m->image + 0x28, 8);
    memcpy(&entry_size, m->image + 0x3A, 2);
    memcpy(&count, m->image + 0x3C, 2);
    memcpy(&names, m->image + 0x3E, 2);
    const unsigned char *table = m->image + offset;
    uint64_t names_offset;
    memcpy(&names_offset, table + (uint64_t)names * entry_size + 0x18, 8);
    for (uint16_t i = 0; i < count; i++) {
        const unsigned char *header = table + (uint64_t)i * entry_size;
        uint32_t name_index;
        memcpy(&name_index, header, 4);
        if (strcmp((const char *)m->image + names_offset + name_index, name) == 0) {
            uint64_t at, size;
            memcpy(&at, header + 0x18, 8);
            memcpy(&size, header + 0x20, 8);
            found.data = m->image + at;
            found.size = size;
        }
    }
    return found;
}

/* kernel parameters as the cubin records them: one EIATTR_KPARAM_INFO (0x17) per parameter */
static int kernel_params(const struct section info) {
    int params = 0;
    for (uint64_t at = 0; at + 4 <= info.size;) {
        unsigned char format = info.data[at], attribute = info.data[at + 1];
        uint16_t value;
        memcpy(&value, info.data + at + 2, 2);
        if (attribute == 0x17) params++;
        at += 4 + (format == 4 ? value : 0);
    }
    return params;
}

CUresult cuModuleLoadData(struct module **module, const void *image) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    size_t size = 0;
    if (result == OK && (!module || !image)) result = INVALID_VALUE;
    if (result == OK && !image_size(image, &size)) result = INVALID_IMAGE;
    if (result == OK) {
        uint32_t flags;
        memcpy(&flags, (const unsigned char *)image + 0x30, 4);
        if ((int)((flags >> 8) & 0xff) != setting("STANDIN_CUDA_SM", 90))
            result = NO_BINARY_FOR_GPU;
    }
    if (result == OK) {
        struct module *m = calloc(1, sizeof *m);
        m->image = malloc(size);
        memcpy(m->image, image, size);
        m->size = size;
        m->live = 1;
        m->next = modules;
        modules = m;
        live_modules++;
        *module = m;
    }
    pthread_mutex_unlock(&lock);
    note("cuModuleLoadData", "%zu %d", size, result);
    return result;
}

static int module_is_live(const struct module *module) {
    for (struct module *m = modules; m; m = m->next)
        if (m == module) return m->live;
    return 0;
}

CUresult cuModuleUnload(struct module *module) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK && !module_is_live(module)) result = INVALID_HANDLE;
    if (result == OK) {
        module->live = 0;
        free(module->image);
        module->image = NULL;
        live_modules--;
        unloads++;
    }
    pthread_mutex_unlock(&lock);
    note("cuModuleUnload", "%d", result);
    return result;
}

CUresult cuModuleGetFunction(struct function **function, struct module *module, const char *name) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK && (!function || !name || strlen(name) > 200)) result = INVALID_VALUE;
    if (result == OK && !module_is_live(module)) result = INVALID_HANDLE;
    struct section info = {NULL, 0};
    if (result == OK) {
        char section[256];
        snprintf(section, sizeof section, ".nv.info.%s", name);
        info = find_section(module, section);
        if (!info.data) result = NOT_FOUND;
    }
    if (result == OK) {
        struct function *f = calloc(1, sizeof *f);
        f->module = module;
        snprintf(f->name, sizeof f->name, "%s", name);
        f->params = kernel_params(info);
        f->next = functions;
        functions = f;
        *function = f;
    }
    pthread_mutex_unlock(&lock);
    return result;
}

/* ---- launches and events */
static int function_is_known(const struct function *function) {
    for (struct function *f = functions; f; f = f->next)
        if (f == function) return 1;
    return 0;
}

CUresult cuLaunchKernel(struct function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                        void **extra) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK && (!function_is_known(f) || !module_is_live(f->module)))
        result = INVALID_HANDLE;
    if (result == OK && stream != NULL) result = INVALID_HANDLE;   /* only the default stream */
    if (result == OK && (gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535 ||
                         bx == 0 || by == 0 || bz == 0 || bx > 1024 || by > 1024 || bz > 64 ||
                         (unsigned long long)bx * by * bz > 1024 || shared > 48 * 1024 ||
                         extra != NULL || (f->params > 0 && params == NULL)))
        result = INVALID_VALUE;
    int bad_pointer = 0;
    for (int i = 0; result == OK && i < f->params; i++) {
        CUdeviceptr value;
        memcpy(&value, params[i], sizeof value);
        if (!allocation_holding(value, 1)) bad_pointer = 1;
    }
    if (result == OK) {
        double start = host_now() > stream_free ? host_now() : stream_free;
        stream_free = start + setting_ms("STANDIN_CUDA_KERNEL_MS", 1.0) * 1e-3;
        launches++;
        /* a fault surfaces at the next call, and stays: the context is lost */
        if (bad_pointer || strncmp(f->name, "standin_illegal_address", 23) == 0)
            sticky = ILLEGAL_ADDRESS;
        else if (strncmp(f->name, "standin_launch_failed", 21) == 0)
            sticky = LAUNCH_FAILED;
    }
    pthread_mutex_unlock(&lock);
    note("cuLaunchKernel", "%u %u %d", gx, bx, result);
    return result;
}

CUresult cuEventCreate(struct event **event, unsigned flags) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK && (!event || flags != 0)) result = INVALID_VALUE;
    if (result == OK) {
        *event = calloc(1, sizeof **event);
        (*event)->magic = 0xe7e47;
    }
    pthread_mutex_unlock(&lock);
    return result;
}

CUresult cuEventDestroy(struct event *event) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK && (!event || event->magic != 0xe7e47)) result = INVALID_HANDLE;
    if (result == OK) {
        event->magic = 0;
        free(event);
    }
    pthread_mutex_unlock(&lock);
    return result;
}

CUresult cuEventRecord(struct event *event, void *stream) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK && (!event || event->magic != 0xe7e47 || stream)) result = INVALID_HANDLE;
    if (result == OK) {
        double now = host_now();
        event->at = now > stream_free ? now : stream_free;
        event->recorded = 1;
    }
    pthread_mutex_unlock(&lock);
    return result;
}

CUresult cuEventSynchronize(struct event *event) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK && (!event || event->magic != 0xe7e47)) result = INVALID_HANDLE;
    if (result == OK && event->recorded) host_waits_until(event->at);
    pthread_mutex_unlock(&lock);
    return result;
}

CUresult cuEventElapsedTime(float *ms, struct event *start, struct event *end) {
    pthread_mutex_lock(&lock);
    CUresult result = in_context();
    if (result == OK && (!ms || !start || !end)) result = INVALID_VALUE;
    if (result == OK && (start->magic != 0xe7e47 || end->magic != 0xe7e47 ||
                         !start->recorded || !end->recorded))
        result = INVALID_HANDLE;
    if (result == OK && (host_now() < end->at || host_now() < start->at)) result = NOT_READY;
    if (result == OK) *ms = (float)((end->at - start->at) * 1e3);
    pthread_mutex_unlock(&lock);
    return result;
}

/* NVRTC opens the driver library too and asks it for private interfaces: there are none here */
CUresult cuGetExportTable(const void **table, const void *id) {
    (void)id;
    if (table) *table = NULL;
    return NOT_SUPPORTED;
}

/* ---- what the tests read */
long standin_live_allocations(void) { return live_allocations; }
long standin_live_modules(void) { return live_modules; }
long standin_launches(void) { return launches; }
long standin_unloads(void) { return unloads; }

/* ---- cuGetProcAddress: how the cuda-python bindings find every call */
struct entry { const char *name; void *function; };
static const struct entry entries[] = {
    {"cuGetErrorName", (void *)cuGetErrorName}, {"cuGetErrorString", (void *)cuGetErrorString},
    {"cuInit", (void *)cuInit}, {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    {"cuDeviceGetCount", (void *)cuDeviceGetCount}, {"cuDeviceGet", (void *)cuDeviceGet},
    {"cuDeviceGetName", (void *)cuDeviceGetName},
    {"cuDeviceGetAttribute", (void *)cuDeviceGetAttribute},
    {"cuDeviceTotalMem", (void *)cuDeviceTotalMem},
    {"cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease},
    {"cuCtxSetCurrent", (void *)cuCtxSetCurrent}, {"cuCtxGetCurrent", (void *)cuCtxGetCurrent},
    {"cuCtxPushCurrent", (void *)cuCtxPushCurrent}, {"cuCtxPopCurrent", (void *)cuCtxPopCurrent},
    {"cuCtxSynchronize", (void *)cuCtxSynchronize}, {"cuMemAlloc", (void *)cuMemAlloc},
    {"cuMemFree", (void *)cuMemFree}, {"cuMemcpyHtoD", (void *)cuMemcpyHtoD},
    {"cuMemcpyDtoH", (void *)cuMemcpyDtoH}, {"cuModuleLoadData", (void *)cuModuleLoadData},
    {"cuModuleUnload", (void *)cuModuleUnload},
    {"cuModuleGetFunction", (void *)cuModuleGetFunction},
    {"cuLaunchKernel", (void *)cuLaunchKernel}, {"cuEventCreate", (void *)cuEventCreate},
    {"cuEventDestroy", (void *)cuEventDestroy}, {"cuEventRecord", (void *)cuEventRecord},
    {"cuEventSynchronize", (void *)cuEventSynchronize},
    {"cuEventElapsedTime", (void *)cuEventElapsedTime},
};

CUresult cuGetProcAddress_v2(const char *symbol, void **function, int version,
                             unsigned long long flags, int *status) {
    (void)version;
    (void)flags;
    if (!symbol || !function) return INVALID_VALUE;
    *function = NULL;
    for (size_t i = 0; i < sizeof entries / sizeof *entries; i++)
        if (strcmp(entries[i].name, symbol) == 0) *function = entries[i].function;
    if (status) *status = *function ? 0 : 1;   /* SUCCESS, SYMBOL_NOT_FOUND */
    return *function ? OK : NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **function, int version,
                          unsigned long long flags) {
    return cuGetProcAddress_v2(symbol, function, version, flags, NULL);
}
