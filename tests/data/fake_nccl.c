/* A stand-in for libnccl (tests/test_nccl_loop.py): each entry point writes its name and arguments as a line
 * of a log and returns 0, or fake_fail_code at the call numbered fake_fail_at (from 0). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static char log_text[1 << 16];
static size_t used;
static long calls;
static long fail_at = -1;
static int fail_code = 3;

const char *fake_log(void) { return log_text; }

void fake_reset(long at, int code) {
    used = 0;
    log_text[0] = 0;
    calls = 0;
    fail_at = at;
    fail_code = code;
}

static int record(const char *line) {
    size_t n = strlen(line);
    if (used + n + 2 < sizeof log_text) {
        memcpy(log_text + used, line, n);
        used += n;
        log_text[used++] = '\n';
        log_text[used] = 0;
    }
    return calls++ == fail_at ? fail_code : 0;
}

#define ADDR(p) ((unsigned long)(size_t)(p))

const char *ncclGetErrorString(int result) { return result ? "fake error" : "no error"; }
int ncclGroupStart(void) { return record("ncclGroupStart"); }
int ncclGroupEnd(void) { return record("ncclGroupEnd"); }

#define COLL7(name)                                                                                        \
    int name(const void *s, void *r, size_t n, int t, int a, void *c, void *st) {                          \
        char b[256];                                                                                       \
        snprintf(b, sizeof b, #name " %lu %lu %zu %d %d %lu %lu", ADDR(s), ADDR(r), n, t, a, ADDR(c), ADDR(st)); \
        return record(b);                                                                                  \
    }
COLL7(ncclAllReduce)
COLL7(ncclReduceScatter)
COLL7(ncclBroadcast)

#define COLL6(name)                                                                                        \
    int name(const void *s, void *r, size_t n, int t, void *c, void *st) {                                 \
        char b[256];                                                                                       \
        snprintf(b, sizeof b, #name " %lu %lu %zu %d %lu %lu", ADDR(s), ADDR(r), n, t, ADDR(c), ADDR(st));  \
        return record(b);                                                                                  \
    }
COLL6(ncclAllGather)
#ifndef NO_ALLTOALL
COLL6(ncclAlltoAll)
#endif

int ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, void *c, void *st) {
    char b[256];
    snprintf(b, sizeof b, "ncclReduce %lu %lu %zu %d %d %d %lu %lu", ADDR(s), ADDR(r), n, t, op, root, ADDR(c), ADDR(st));
    return record(b);
}

#define P2P(name)                                                                                          \
    int name(void *buf, size_t n, int t, int peer, void *c, void *st) {                                    \
        char b[256];                                                                                       \
        snprintf(b, sizeof b, #name " %lu %zu %d %d %lu %lu", ADDR(buf), n, t, peer, ADDR(c), ADDR(st));    \
        return record(b);                                                                                  \
    }
P2P(ncclSend)
P2P(ncclRecv)
