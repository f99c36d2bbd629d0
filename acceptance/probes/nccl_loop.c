/* The direct NCCL calls issued back to back from C, as nccl-tests' BenchTime loop issues them
 * (src/common.cu): a Python loop around the same calls costs 2-3 us more per call on an H200 host, the whole
 * time of a small message (docs/measurements.md, "What the direct loop is made of").
 *
 * One call of an op is a short list of steps (one collective; or a group of sends and receives); the loop
 * issues the list `times` times. Each step names the entry point's shape, so every call is made through a
 * pointer of its own prototype (nccl.h), never through one cast to another. Built at run time by
 * acceptance/probes/nccl_loop.py with the host's C compiler. */
#include <stddef.h>
#include <stdint.h>

/* kept in step with acceptance/schema/collectives.py's Prototype, where each collective names its own */
enum shape {
    GROUP = 0,   /* ncclGroupStart, ncclGroupEnd */
    COLL7 = 1,   /* ncclAllReduce, ncclReduceScatter (op in arg), ncclBroadcast (root in arg) */
    COLL6 = 2,   /* ncclAllGather, ncclAlltoAll */
    REDUCE = 3,  /* ncclReduce */
    P2P = 4      /* ncclSend (send), ncclRecv (recv): the buffer, count, type, peer */
};

/* kept in step with acceptance/probes/nccl_loop.py's Step */
struct step {
    int32_t shape;
    int32_t dtype;
    int32_t arg;  /* the reduction, the root or the peer */
    int32_t root; /* ncclReduce's root */
    void *fn;
    char *send;
    char *recv;
    size_t count;
    void *comm;
    void *stream;
    size_t send_slot; /* bytes between two calls' send buffers; 0: every call on the same buffer */
    size_t recv_slot; /* and their receive buffers */
    int64_t slots;
};

typedef int (*group_fn)(void);
typedef int (*coll7_fn)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*coll6_fn)(const void *, void *, size_t, int, void *, void *);
typedef int (*reduce_fn)(const void *, void *, size_t, int, int, int, void *, void *);
typedef int (*p2p_fn)(void *, size_t, int, int, void *, void *);

/* Call number `iter` of a loop moves each buffer on by one slot of its own size, as nccl-tests' startColl
 * moves them ("to avoid cache effects": shift = totalnbytes * (iter % (maxbytes / totalnbytes))), so each call
 * reads memory the previous ones did not leave in the GPU's cache. */
static int issue(const struct step *s, int64_t iter) {
    size_t k = (size_t)(s->slots > 1 ? iter % s->slots : 0);
    char *send = s->send ? s->send + s->send_slot * k : s->send;
    char *recv = s->recv ? s->recv + s->recv_slot * k : s->recv;
    switch (s->shape) {
    case GROUP:
        return ((group_fn)s->fn)();
    case COLL7:
        return ((coll7_fn)s->fn)(send, recv, s->count, s->dtype, s->arg, s->comm, s->stream);
    case COLL6:
        return ((coll6_fn)s->fn)(send, recv, s->count, s->dtype, s->comm, s->stream);
    case REDUCE:
        return ((reduce_fn)s->fn)(send, recv, s->count, s->dtype, s->arg, s->root, s->comm, s->stream);
    case P2P:
        return ((p2p_fn)s->fn)(send, s->count, s->dtype, s->arg, s->comm, s->stream);
    default:
        return -1;
    }
}

/* `steps` issued in order, `times` times, as the loop's calls `first`, `first + 1`, ...; the first result
 * other than 0, else 0. Every call is issued even after one failed (a group once started is always ended):
 * a rank that stopped short would leave its peers waiting in collectives it never joins. */
int nccl_loop(const struct step *steps, int nsteps, int64_t first, int64_t times) {
    int failed = 0;
    for (int64_t t = first; t < first + times; t++) {
        for (int i = 0; i < nsteps; i++) {
            int code = issue(steps + i, t);
            if (code != 0 && failed == 0)
                failed = code;
        }
    }
    return failed;
}
