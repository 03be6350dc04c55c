/*
 * Reproducer: rendezvous active-message sends that a forced close aborts never complete when a pull (receive) of
 * another message from the same buffer was cut short. Written for ucx4j's report to OpenUCX; see README.md beside it.
 *
 * One process, two contexts and workers ("sender" A, "receiver" B), UCP_ERR_HANDLING_MODE_PEER, endpoints from
 * worker addresses. A sends 32 active messages of 8 MiB from one buffer; B's handler keeps every rendezvous
 * announcement (UCS_INPROGRESS). B pulls 10 of them (ucp_am_recv_data_nbx) to the end, then starts an 11th and
 * progresses only a few times (its RTR goes out; A starts sending fragments and fills B's FIFO). A then force-closes
 * its endpoint and progresses; B never progresses again (as a receiver that died or hung). The sends still waiting
 * for B are aborted inside UCX but never completed: not by A's progress, not by ucp_worker_destroy.
 *
 * Build: gcc -O1 -g -o am_rndv_abort_hang am_rndv_abort_hang.c -I$UCX/include -L$UCX/lib -Wl,-rpath,$UCX/lib \
 *            -lucp -lucs
 * Run:   UCX_POSIX_ERROR_HANDLING=y ./am_rndv_abort_hang   (posix shared memory with peer error handling; without
 *        the variable UCX picks tcp over loopback here, where the same happens)
 *        exit 0: every send completed; exit 1: sends left open (the fault).
 */
#include <ucp/api/ucp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x) do { ucs_status_t s_ = (x); if (s_ != UCS_OK) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ucs_status_string(s_)); exit(2); } } while (0)

#define N      32
#define PULLED 10
#define SIZE   (8 << 20)

static void *descs[N];
static int announced;
static ucs_status_t send_status[N];
static int pulled;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status) {}

static void on_send(void *request, ucs_status_t status, void *arg)
{
    send_status[(long)arg] = status;
    ucp_request_free(request);
}

static void on_pull(void *request, ucs_status_t status, size_t length, void *arg) { pulled = 1; }

static void on_close(void *request, ucs_status_t status, void *arg) {}

static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data, size_t length,
                          const ucp_am_recv_param_t *param)
{
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || announced >= N) {
        return UCS_OK;
    }
    descs[announced++] = data;
    return UCS_INPROGRESS;
}

static ucp_worker_h new_worker(ucp_context_h *context)
{
    ucp_config_t *config;
    ucp_params_t params = { .field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM };
    ucp_worker_params_t wparams = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                    .thread_mode = UCS_THREAD_MODE_SINGLE };
    ucp_worker_h worker;
    CHECK(ucp_config_read(NULL, NULL, &config));
    CHECK(ucp_init(&params, config, context));
    ucp_config_release(config);
    CHECK(ucp_worker_create(*context, &wparams, &worker));
    return worker;
}

static ucp_ep_h connect_to(ucp_worker_h from, ucp_worker_h to)
{
    ucp_address_t *address;
    size_t length;
    ucp_ep_h ep;
    ucp_ep_params_t params = {
        .field_mask  = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                       UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .err_mode    = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = { .cb = on_error, .arg = NULL }
    };
    CHECK(ucp_worker_get_address(to, &address, &length));
    params.address = address;
    CHECK(ucp_ep_create(from, &params, &ep));
    ucp_worker_release_address(to, address);
    return ep;
}

static void progress(ucp_worker_h a, ucp_worker_h b, double seconds)
{
    double end = now() + seconds;
    while (now() < end) {
        ucp_worker_progress(a);
        if (b != NULL) {
            ucp_worker_progress(b);
        }
    }
}

static int report(const char *when)
{
    int i, ok = 0, failed = 0, open = 0;
    for (i = 0; i < N; i++) {
        if (send_status[i] == UCS_INPROGRESS) {
            open++;
        } else if (send_status[i] == UCS_OK) {
            ok++;
        } else {
            failed++;
        }
    }
    printf("%-46s sends completed %2d, failed %2d, open %2d\n", when, ok, failed, open);
    return open;
}

int main(void)
{
    ucp_context_h ca, cb;
    unsigned major, minor, release;
    void *buffer = malloc(SIZE), *dest = malloc(SIZE);
    int i;

    memset(buffer, 7, SIZE);
    ucp_get_version(&major, &minor, &release);
    printf("UCX %u.%u.%u\n", major, minor, release);
    ucp_worker_h a = new_worker(&ca), b = new_worker(&cb);
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        .id = 7, .cb = on_am, .flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA
    };
    CHECK(ucp_worker_set_am_recv_handler(b, &hp));
    ucp_ep_h ea = connect_to(a, b), eb = connect_to(b, a);
    progress(a, b, 0.2);

    for (i = 0; i < N; i++) { /* every message from the same buffer */
        ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                  .cb.send = on_send, .user_data = (void*)(long)i };
        send_status[i] = UCS_INPROGRESS;
        void *r = ucp_am_send_nbx(ea, 7, &i, sizeof(i), buffer, SIZE, &p);
        if (!UCS_PTR_IS_PTR(r)) {
            send_status[i] = UCS_PTR_STATUS(r);
        }
    }
    double end = now() + 5;
    while (now() < end && announced < N) {
        ucp_worker_progress(a);
        ucp_worker_progress(b);
    }
    if (announced < PULLED + 1) {
        fprintf(stderr, "only %d rendezvous announcements arrived\n", announced);
        return 2;
    }

    ucp_request_param_t pp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.recv_am = on_pull };
    for (i = 0; i < PULLED; i++) { /* pulls run to the end */
        pulled = 0;
        void *r = ucp_am_recv_data_nbx(b, descs[i], dest, SIZE, &pp);
        if (UCS_PTR_IS_PTR(r)) {
            end = now() + 5;
            while (!pulled && now() < end) {
                ucp_worker_progress(a);
                ucp_worker_progress(b);
            }
            ucp_request_free(r);
        }
    }
    progress(a, b, 0.2);
    report("after 10 pulls:");

    /* one more pull, cut short: B sends its RTR, A fills B's FIFO with fragments, B takes no more */
    ucp_am_recv_data_nbx(b, descs[PULLED], dest, SIZE, &pp);
    for (i = 0; i < 3; i++) {
        ucp_worker_progress(b);
    }
    for (i = 0; i < 10; i++) {
        ucp_worker_progress(a);
    }

    ucp_request_param_t cp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS,
                               .cb.send = on_close, .flags = UCP_EP_CLOSE_FLAG_FORCE };
    ucp_ep_close_nbx(ea, &cp);
    report("right after A's forced close:");
    progress(a, NULL, 3);
    report("after 3 s of A's progress:");
    ucp_worker_destroy(a);
    int open = report("after A's worker destroy:");
    (void)eb;
    return open ? 1 : 0;
}
