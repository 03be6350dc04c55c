/*
 * Reproducer, across two processes: rendezvous active-message sends that a forced close aborts never complete when a
 * pull (receive) of another message from the same buffer was cut short. The one-process program beside it
 * (am_rndv_abort_hang.c) shows the same with both workers in one process; this one puts the receiver in a child
 * process, as a receiver that hangs or dies would be. Written for ucx4j's report to OpenUCX; see README.md beside it.
 *
 * The parent is the sender A, the child (fork before any UCX call) the receiver B; worker addresses and the steps go
 * over pipes. A sends 32 active messages of 8 MiB from one buffer; B keeps every rendezvous announcement
 * (UCS_INPROGRESS), pulls 10 of them to the end, starts an 11th and progresses only a few times, then stops
 * progressing. A force-closes its endpoint and progresses for 3 s. Then B progresses again for 2 s (left out with the
 * argument "kill"), then B is killed (SIGKILL), and A progresses 3 s more before its worker's destroy. A reports its
 * sends after each step.
 *
 * Build: gcc -O1 -g -o am_rndv_abort_hang_2proc am_rndv_abort_hang_2proc.c -I$UCX/include -L$UCX/lib \
 *            -Wl,-rpath,$UCX/lib -lucp -lucs
 * Run:   UCX_POSIX_ERROR_HANDLING=y ./am_rndv_abort_hang_2proc [kill]
 *        exit 0: every send completed by the end; exit 1: sends left open at the end.
 */
#include <ucp/api/ucp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(x) do { ucs_status_t s_ = (x); if (s_ != UCS_OK) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ucs_status_string(s_)); exit(2); } } while (0)

#define N      32
#define PULLED 10
#define SIZE   (8 << 20)

enum { CUT = 'c', RESUME = 'r', DONE = 'd' };

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

static void write_all(int fd, const void *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) { perror("write"); exit(2); }
        p = (const char*)p + w; n -= w;
    }
}

static void read_all(int fd, void *p, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r <= 0) { perror("read"); exit(2); }
        p = (char*)p + r; n -= r;
    }
}

/* sends this worker's address over fd, reads the peer's from fd_in and connects to it */
static ucp_ep_h exchange_and_connect(ucp_worker_h w, int fd_out, int fd_in)
{
    ucp_address_t *address;
    size_t length, peer_length;
    ucp_ep_h ep;
    CHECK(ucp_worker_get_address(w, &address, &length));
    write_all(fd_out, &length, sizeof(length));
    write_all(fd_out, address, length);
    ucp_worker_release_address(w, address);
    read_all(fd_in, &peer_length, sizeof(peer_length));
    void *peer = malloc(peer_length);
    read_all(fd_in, peer, peer_length);
    ucp_ep_params_t params = {
        .field_mask  = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                       UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address     = peer,
        .err_mode    = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = { .cb = on_error, .arg = NULL }
    };
    CHECK(ucp_ep_create(w, &params, &ep));
    free(peer);
    return ep;
}

/* progresses w until a step byte arrives on fd (returned), or for `seconds` when fd < 0 (returns 0) */
static int progress_until(ucp_worker_h w, int fd, double seconds)
{
    double end = now() + seconds;
    while (fd >= 0 || now() < end) {
        ucp_worker_progress(w);
        if (fd >= 0) {
            struct pollfd p = { .fd = fd, .events = POLLIN };
            if (poll(&p, 1, 0) > 0) {
                char step;
                read_all(fd, &step, 1);
                return step;
            }
        }
    }
    return 0;
}

static void receiver(int to_parent, int from_parent)
{
    ucp_context_h cb;
    ucp_worker_h b = new_worker(&cb);
    void *dest = malloc(SIZE);
    char step;
    int i;
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        .id = 7, .cb = on_am, .flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA
    };
    CHECK(ucp_worker_set_am_recv_handler(b, &hp));
    ucp_ep_h eb = exchange_and_connect(b, to_parent, from_parent);
    double end = now() + 10;
    while (now() < end && announced < N) {
        ucp_worker_progress(b);
    }
    if (announced < PULLED + 1) {
        fprintf(stderr, "receiver: only %d rendezvous announcements arrived\n", announced);
        exit(2);
    }
    ucp_request_param_t pp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.recv_am = on_pull };
    for (i = 0; i < PULLED; i++) { /* pulls run to the end */
        pulled = 0;
        void *r = ucp_am_recv_data_nbx(b, descs[i], dest, SIZE, &pp);
        if (UCS_PTR_IS_PTR(r)) {
            end = now() + 10;
            while (!pulled && now() < end) {
                ucp_worker_progress(b);
            }
            ucp_request_free(r);
        }
    }
    progress_until(b, -1, 0.2);
    /* one more pull, cut short: B sends its RTR, A fills B's FIFO with fragments, B takes no more */
    ucp_am_recv_data_nbx(b, descs[PULLED], dest, SIZE, &pp);
    for (i = 0; i < 3; i++) {
        ucp_worker_progress(b);
    }
    step = CUT;
    write_all(to_parent, &step, 1);
    read_all(from_parent, &step, 1); /* stopped: no progress until told */
    progress_until(b, -1, 2);        /* RESUME */
    step = DONE;
    write_all(to_parent, &step, 1);
    (void)eb;
    pause(); /* until killed */
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
    printf("%-52s sends completed %2d, failed %2d, open %2d\n", when, ok, failed, open);
    fflush(stdout);
    return open;
}

int main(int argc, char **argv)
{
    int kill_only = argc > 1 && strcmp(argv[1], "kill") == 0;
    int down[2], up[2], i;
    unsigned major, minor, release;
    char step;
    if (pipe(down) || pipe(up)) {
        perror("pipe");
        return 2;
    }
    pid_t child = fork();
    if (child == 0) {
        close(down[1]);
        close(up[0]);
        receiver(up[1], down[0]);
        return 0;
    }
    close(down[0]);
    close(up[1]);
    ucp_context_h ca;
    void *buffer = malloc(SIZE);
    memset(buffer, 7, SIZE);
    ucp_get_version(&major, &minor, &release);
    printf("UCX %u.%u.%u, receiver in process %d\n", major, minor, release, (int)child);
    ucp_worker_h a = new_worker(&ca);
    ucp_ep_h ea = exchange_and_connect(a, down[1], up[0]);
    for (i = 0; i < N; i++) { /* every message from the same buffer */
        ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                  .cb.send = on_send, .user_data = (void*)(long)i };
        send_status[i] = UCS_INPROGRESS;
        void *r = ucp_am_send_nbx(ea, 7, &i, sizeof(i), buffer, SIZE, &p);
        if (!UCS_PTR_IS_PTR(r)) {
            send_status[i] = UCS_PTR_STATUS(r);
        }
    }
    if (progress_until(a, up[0], 0) != CUT) {
        return 2;
    }
    report("after 10 pulls and one cut short:");
    for (i = 0; i < 10; i++) {
        ucp_worker_progress(a);
    }
    ucp_request_param_t cp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS,
                               .cb.send = on_close, .flags = UCP_EP_CLOSE_FLAG_FORCE };
    ucp_ep_close_nbx(ea, &cp);
    report("right after A's forced close:");
    progress_until(a, -1, 3);
    report("after 3 s of A's progress (B stopped):");
    if (!kill_only) {
        step = RESUME;
        write_all(down[1], &step, 1);
        if (progress_until(a, up[0], 0) != DONE) {
            return 2;
        }
        report("after B progressed again for 2 s:");
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    progress_until(a, -1, 3);
    report("after B was killed and 3 s of A's progress:");
    ucp_worker_destroy(a);
    int open = report("after A's worker destroy:");
    ucp_cleanup(ca);
    return open ? 1 : 0;
}
