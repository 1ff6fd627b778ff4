/*
 * commsched's NCCL tuner plugin: the channel count of each all-reduce from a table that
 * `commsched nccl-tuner table` writes from a plan (issue 13, item 2).
 *
 * How NCCL uses it (read in NCCL 2.30.7's src/plugin/tuner.cc, src/enqueue.cc, src/init.cc):
 * - NCCL_TUNER_PLUGIN names this library; NCCL looks up ncclTunerPlugin_v6, then v5 ... v2, and
 *   uses the newest it finds. All five are exported so older NCCLs load it too.
 * - init() runs once per communicator; it reads the table named by COMMSCHED_NCCL_TUNER_TABLE.
 *   An init() error would fail the communicator's creation, so a missing or malformed table is
 *   reported (stderr, and NCCL's logger) and init() succeeds with no ranges: NCCL's choice is
 *   kept for every collective.
 * - getCollInfo() gets nBytes = element size x count for an all-reduce (the bucket's bytes) and
 *   the plugin's nChannels replaces NCCL's channel count unless it is 0; enqueue.cc then limits
 *   it to the communicator's channels. Only all-reduces are touched; the cost table (algorithm
 *   and protocol) is left as NCCL made it. Threads per block cannot be set here: NCCL computes
 *   them after the plugin returns (only NCCL_NTHREADS, process-wide, sets them).
 *
 * Table format (text; '#' starts a comment line):
 *   commsched-nccl-tuner 1
 *   <min_bytes> <max_bytes> <channels>     one range per line, inclusive, sorted, disjoint;
 *                                          channels 0..64 (0 = NCCL's choice; NCCL's MAXCHANNELS)
 * A size in no range keeps NCCL's choice.
 *
 * The ABI below is declared from NCCL's headers (src/include/plugin/tuner/tuner_v2.h .. v6.h):
 * the function-pointer layouts and the enum values are what must match.
 */
#define _POSIX_C_SOURCE 200809L /* strtok_r */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef enum { ncclSuccess = 0, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidArgument = 4 } ncclResult_t;
typedef enum { NCCL_LOG_WARN = 2, NCCL_LOG_INFO = 3 } ncclDebugLogLevel;
enum { NCCL_INIT = 1, NCCL_TUNING = 64 };
enum { ncclFuncAllReduce = 4 };
typedef int ncclFunc_t;
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

#define TABLE_ENV "COMMSCHED_NCCL_TUNER_TABLE"
#define TABLE_MAGIC "commsched-nccl-tuner"
#define TABLE_VERSION 1
#define MAX_CHANNELS 64   /* NCCL's MAXCHANNELS (src/include/device.h) */
#define MAX_RANGES 65536
#define MAX_LINE 4096

struct range {
  uint64_t lo, hi;
  int channels;
};

struct context {
  size_t n;
  struct range* ranges;
  ncclDebugLogger_t log;
};

/* Formats once, then hands NCCL's logger the text with '%' doubled: the logger takes a format. */
static void say(ncclDebugLogger_t log, ncclDebugLogLevel level, const char* fmt, ...) {
  char text[1024], escaped[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  if (level == NCCL_LOG_WARN) fprintf(stderr, "commsched NCCL tuner: %s\n", text);
  if (log == NULL) return;
  size_t j = 0;
  for (size_t i = 0; text[i] != '\0' && j + 2 < sizeof escaped; ++i) {
    if (text[i] == '%') escaped[j++] = '%';
    escaped[j++] = text[i];
  }
  escaped[j] = '\0';
  log(level, NCCL_INIT | NCCL_TUNING, __FILE__, __LINE__, escaped);
}

/* A whole decimal number with nothing else: strtoull alone would accept "-1", "+1" and " 1". */
static int parse_u64(const char* token, uint64_t* out) {
  if (token[0] < '0' || token[0] > '9') return 0;
  char* end;
  errno = 0;
  unsigned long long value = strtoull(token, &end, 10);
  if (errno != 0 || *end != '\0') return 0;
  *out = (uint64_t)value;
  return 1;
}

/* Reads the table into ctx; on any error writes the reason to why and returns 0. */
static int read_table(const char* path, struct context* ctx, char* why, size_t why_len) {
  FILE* file = fopen(path, "r");
  if (file == NULL) {
    snprintf(why, why_len, "cannot open %s: %s", path, strerror(errno));
    return 0;
  }
  char line[MAX_LINE + 2];
  int lineno = 0, header = 0, ok = 1;
  size_t cap = 0;
  while (ok && fgets(line, sizeof line, file) != NULL) {
    ++lineno;
    size_t len = strlen(line);
    if (len > MAX_LINE) {
      snprintf(why, why_len, "%s:%d: line longer than %d characters", path, lineno, MAX_LINE);
      ok = 0;
      break;
    }
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
    char* fields[4];
    int n = 0;
    char* rest = NULL; /* strtok_r: communicators may be created on several threads at once */
    for (char* tok = strtok_r(line, " \t", &rest); tok != NULL; tok = strtok_r(NULL, " \t", &rest)) {
      if (n == 0 && tok[0] == '#') break;
      if (n == 4) break;
      fields[n++] = tok;
    }
    if (n == 0) continue;
    if (!header) {
      uint64_t version;
      if (n != 2 || strcmp(fields[0], TABLE_MAGIC) != 0 || !parse_u64(fields[1], &version) ||
          version != TABLE_VERSION) {
        snprintf(why, why_len, "%s:%d: the first line must be '%s %d'", path, lineno, TABLE_MAGIC, TABLE_VERSION);
        ok = 0;
        break;
      }
      header = 1;
      continue;
    }
    uint64_t lo, hi, channels;
    if (n != 3 || !parse_u64(fields[0], &lo) || !parse_u64(fields[1], &hi) || !parse_u64(fields[2], &channels)) {
      snprintf(why, why_len, "%s:%d: expected '<min_bytes> <max_bytes> <channels>' as whole numbers", path, lineno);
      ok = 0;
    } else if (lo > hi) {
      snprintf(why, why_len, "%s:%d: min_bytes %llu is above max_bytes %llu", path, lineno,
               (unsigned long long)lo, (unsigned long long)hi);
      ok = 0;
    } else if (channels > MAX_CHANNELS) {
      snprintf(why, why_len, "%s:%d: channels %llu is above NCCL's %d", path, lineno, (unsigned long long)channels,
               MAX_CHANNELS);
      ok = 0;
    } else if (ctx->n > 0 && lo <= ctx->ranges[ctx->n - 1].hi) {
      snprintf(why, why_len, "%s:%d: range %llu-%llu overlaps or precedes the range before it", path, lineno,
               (unsigned long long)lo, (unsigned long long)hi);
      ok = 0;
    } else if (ctx->n == MAX_RANGES) {
      snprintf(why, why_len, "%s:%d: more than %d ranges", path, lineno, MAX_RANGES);
      ok = 0;
    } else {
      if (ctx->n == cap) {
        size_t grown = cap == 0 ? 64 : 2 * cap;
        struct range* more = realloc(ctx->ranges, grown * sizeof *more);
        if (more == NULL) {
          snprintf(why, why_len, "out of memory reading %s", path);
          ok = 0;
          break;
        }
        ctx->ranges = more;
        cap = grown;
      }
      ctx->ranges[ctx->n++] = (struct range){lo, hi, (int)channels};
    }
  }
  if (ok && ferror(file)) {
    snprintf(why, why_len, "cannot read %s", path);
    ok = 0;
  }
  if (ok && !header) {
    snprintf(why, why_len, "%s: empty, the first line must be '%s %d'", path, TABLE_MAGIC, TABLE_VERSION);
    ok = 0;
  }
  fclose(file);
  return ok;
}

static ncclResult_t start(void** context, ncclDebugLogger_t log) {
  struct context* ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return ncclSystemError;
  ctx->log = log;
  *context = ctx;
  const char* path = getenv(TABLE_ENV);
  char why[1024];
  if (path == NULL || path[0] == '\0') {
    say(log, NCCL_LOG_WARN, "%s is not set; NCCL's choice is kept for every collective", TABLE_ENV);
  } else if (!read_table(path, ctx, why, sizeof why)) {
    free(ctx->ranges);
    ctx->ranges = NULL;
    ctx->n = 0;
    say(log, NCCL_LOG_WARN, "%s; NCCL's choice is kept for every collective", why);
  } else {
    say(log, NCCL_LOG_INFO, "commsched NCCL tuner: %zu size ranges from %s", ctx->n, path);
  }
  return ncclSuccess;
}

/* The range holding nBytes (binary search over sorted, disjoint ranges), or 0: NCCL's choice. */
static int channels_for(const struct context* ctx, size_t nBytes) {
  size_t lo = 0, hi = ctx->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ctx->ranges[mid].hi < nBytes) lo = mid + 1;
    else hi = mid;
  }
  if (lo < ctx->n && ctx->ranges[lo].lo <= nBytes) return ctx->ranges[lo].channels;
  return 0;
}

static void set_channels(void* context, ncclFunc_t collType, size_t nBytes, int* nChannels) {
  if (context == NULL || nChannels == NULL || collType != ncclFuncAllReduce) return;
  int channels = channels_for((const struct context*)context, nBytes);
  if (channels > 0) *nChannels = channels;
}

static ncclResult_t stop(void* context) {
  struct context* ctx = context;
  if (ctx != NULL) free(ctx->ranges);
  free(ctx);
  return ncclSuccess;
}

/* v5/v6: init(ctx, commId, nRanks, nNodes, logger, nvlDomainInfo, constants); neither pointer is read. */
static ncclResult_t init_v5(void** context, uint64_t commId, size_t nRanks, size_t nNodes, ncclDebugLogger_t log,
                            void* nvlDomainInfo, void* constants) {
  (void)commId, (void)nRanks, (void)nNodes, (void)nvlDomainInfo, (void)constants;
  return start(context, log);
}

/* v2-v4: init(nRanks, nNodes, logger, ctx). */
static ncclResult_t init_v2(size_t nRanks, size_t nNodes, ncclDebugLogger_t log, void** context) {
  (void)nRanks, (void)nNodes;
  return start(context, log);
}

/* v4-v6 */
static ncclResult_t coll_info_v4(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                 float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels) {
  (void)numPipeOps, (void)collCostTable, (void)numAlgo, (void)numProto, (void)regBuff;
  set_channels(context, collType, nBytes, nChannels);
  return ncclSuccess;
}

static ncclResult_t coll_info_v3(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                                 float** collCostTable, int numAlgo, int numProto, int* nChannels) {
  (void)numPipeOps, (void)collCostTable, (void)numAlgo, (void)numProto;
  set_channels(context, collType, nBytes, nChannels);
  return ncclSuccess;
}

/* v2 passes algorithm and protocol out-pointers; both are left unset (NCCL's choice). */
static ncclResult_t coll_info_v2(void* context, ncclFunc_t collType, size_t nBytes, int collNetSupport,
                                 int nvlsSupport, int numPipeOps, int* algorithm, int* protocol, int* nChannels) {
  (void)collNetSupport, (void)nvlsSupport, (void)numPipeOps, (void)algorithm, (void)protocol;
  set_channels(context, collType, nBytes, nChannels);
  return ncclSuccess;
}

typedef ncclResult_t (*init_v5_fn)(void**, uint64_t, size_t, size_t, ncclDebugLogger_t, void*, void*);
typedef ncclResult_t (*init_v2_fn)(size_t, size_t, ncclDebugLogger_t, void**);
typedef ncclResult_t (*info_v4_fn)(void*, ncclFunc_t, size_t, int, float**, int, int, int, int*);
typedef ncclResult_t (*info_v3_fn)(void*, ncclFunc_t, size_t, int, float**, int, int, int*);
typedef ncclResult_t (*info_v2_fn)(void*, ncclFunc_t, size_t, int, int, int, int*, int*, int*);
typedef ncclResult_t (*stop_fn)(void*);
typedef ncclResult_t (*chunk_fn)(void*, ncclFunc_t, size_t, int, int, int, size_t*);

#define NAME "commsched"

EXPORT const struct {
  const char* name;
  init_v5_fn init;
  info_v4_fn getCollInfo;
  stop_fn finalize;
  chunk_fn getChunkSize; /* optional in v6: NULL keeps NCCL's chunk size */
} ncclTunerPlugin_v6 = {NAME, init_v5, coll_info_v4, stop, NULL};

EXPORT const struct {
  const char* name;
  init_v5_fn init;
  info_v4_fn getCollInfo;
  stop_fn finalize;
} ncclTunerPlugin_v5 = {NAME, init_v5, coll_info_v4, stop};

EXPORT const struct {
  const char* name;
  init_v2_fn init;
  info_v4_fn getCollInfo;
  stop_fn destroy;
} ncclTunerPlugin_v4 = {NAME, init_v2, coll_info_v4, stop};

EXPORT const struct {
  const char* name;
  init_v2_fn init;
  info_v3_fn getCollInfo;
  stop_fn destroy;
} ncclTunerPlugin_v3 = {NAME, init_v2, coll_info_v3, stop};

EXPORT const struct {
  const char* name;
  init_v2_fn init;
  info_v2_fn getCollInfo;
  stop_fn destroy;
} ncclTunerPlugin_v2 = {NAME, init_v2, coll_info_v2, stop};
