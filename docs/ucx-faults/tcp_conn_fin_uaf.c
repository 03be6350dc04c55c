/*
 * Reproducer: use-after-free in UCX's TCP transport (uct_tcp_iface_handle_events) when a peer's CONN_FIN arrives
 * for an endpoint that was destroyed while its own data was still queued. Written for ucx4j's report to OpenUCX;
 * see README.md beside it.
 *
 * One process, two UCP contexts and workers ("server", "client") over UCX_TLS=tcp, each endpoint created from the
 * other worker's address (connect-to-iface, as ucx_perftest does). Per round:
 *   1. one message each way, both workers progressed;
 *   2. the client worker is no longer progressed; the server sends 4 KiB tagged messages until one stays pending
 *      (the socket's send buffer is full);
 *   3. the server force-closes its endpoint (UCP_EP_CLOSE_FLAG_FORCE) and keeps progressing;
 *   4. the client force-closes its endpoint and destroys its worker;
 *   5. the server progresses: uct_tcp_cm_handle_conn_fin() frees the RX-only TCP endpoint while handling the read
 *      event, and uct_tcp_iface_handle_events() then reads ep->conn_state for the write event of the same
 *      epoll_wait result (freed memory: glibc's tcache key overwrites it, so tx_progress jumps through a garbage
 *      function pointer).
 *
 * Build: gcc -O1 -g -o tcp_conn_fin_uaf tcp_conn_fin_uaf.c -I$UCX/include -L$UCX/lib -Wl,-rpath,$UCX/lib -lucp -lucs
 * Run:   ./tcp_conn_fin_uaf [rounds]     (exit 0: no crash; SIGSEGV/SIGABRT: the fault; valgrind shows it at once)
 */
#include <ucp/api/ucp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(x) do { ucs_status_t s_ = (x); if (s_ != UCS_OK) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ucs_status_string(s_)); exit(2); } } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status) {}

static void on_send(void *request, ucs_status_t status, void *arg) { ++*(int*)arg; }

static void on_recv(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info, void *arg)
{
    ++*(int*)arg;
}

static void progress_for(ucp_worker_h worker, double seconds)
{
    double end = now() + seconds;
    while (now() < end) {
        ucp_worker_progress(worker);
    }
}

/* Waits (progressing w1, and w2 unless NULL) for a request whose callback increments *done. */
static void wait_for(ucp_worker_h w1, ucp_worker_h w2, void *request, int *done)
{
    double end = now() + 10;
    if (UCS_PTR_IS_ERR(request)) {
        CHECK(UCS_PTR_STATUS(request));
    }
    if (request == NULL) {
        return;
    }
    while (!*done && now() < end) {
        ucp_worker_progress(w1);
        if (w2 != NULL) {
            ucp_worker_progress(w2);
        }
    }
    ucp_request_free(request);
}

static void open_worker(ucp_context_h *context, ucp_worker_h *worker)
{
    ucp_params_t params = { .field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG };
    ucp_worker_params_t wparams = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                    .thread_mode = UCS_THREAD_MODE_SINGLE };
    CHECK(ucp_init(&params, NULL, context));
    CHECK(ucp_worker_create(*context, &wparams, worker));
}

static ucp_ep_h connect_to(ucp_worker_h from, ucp_worker_h to)
{
    ucp_address_t *address;
    size_t length;
    ucp_ep_h ep;
    CHECK(ucp_worker_get_address(to, &address, &length));
    ucp_ep_params_t params = { .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
                               .address = address, .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                               .err_handler = { on_error, NULL } };
    CHECK(ucp_ep_create(from, &params, &ep));
    ucp_worker_release_address(to, address);
    return ep;
}

/* One 1-byte message from `from` (over ep) to `to`, both workers progressed. */
static void ping(ucp_worker_h from, ucp_ep_h ep, ucp_worker_h to)
{
    static char byte;
    int sent = 0, received = 0;
    ucp_request_param_t sp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.send = on_send, .user_data = &sent };
    ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .cb.recv = on_recv, .user_data = &received };
    void *r = ucp_tag_recv_nbx(to, &byte, 1, 1, ~0ull, &rp);
    void *s = ucp_tag_send_nbx(ep, &byte, 1, 1, &sp);
    wait_for(to, from, r, &received);
    wait_for(from, to, s, &sent);
}

static void force_close(ucp_worker_h worker, ucp_ep_h ep)
{
    int closed = 0;
    ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                  UCP_OP_ATTR_FIELD_FLAGS,
                              .cb.send = on_send, .user_data = &closed, .flags = UCP_EP_CLOSE_FLAG_FORCE };
    wait_for(worker, NULL, ucp_ep_close_nbx(ep, &p), &closed);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 8;
    static char data[4096];
    static void *pending[1 << 15];
    setenv("UCX_TLS", "tcp", 1);
    for (int round = 0; round < rounds; round++) {
        ucp_context_h server_context, client_context;
        ucp_worker_h server, client;
        open_worker(&server_context, &server);
        open_worker(&client_context, &client);
        ucp_ep_h to_client = connect_to(server, client);
        ucp_ep_h to_server = connect_to(client, server);
        ping(server, to_client, client);
        ping(client, to_server, server);

        /* 2. sends until one stays pending for 200 ms: the client reads nothing from here on */
        int completed = 0, posted = 0, npending = 0;
        ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                  .cb.send = on_send, .user_data = &completed };
        while (posted < (int)(sizeof(pending) / sizeof(pending[0]))) {
            int before = completed;
            void *s = ucp_tag_send_nbx(to_client, data, sizeof(data), 3, &p);
            posted++;
            if (UCS_PTR_IS_ERR(s)) {
                CHECK(UCS_PTR_STATUS(s));
            }
            if (s == NULL) {
                continue;
            }
            pending[npending++] = s;
            double end = now() + 0.2;
            while (completed == before && now() < end) {
                ucp_worker_progress(server);
            }
            if (completed == before) {
                break;
            }
        }

        /* 3. the server force-closes its endpoint with that send still queued */
        progress_for(server, 0.05);
        int queued = npending - completed;
        force_close(server, to_client);
        progress_for(server, 0.2);
        for (int i = 0; i < npending; i++) {
            ucp_request_free(pending[i]);
        }
        printf("round %d: %d sends posted, %d still pending at the forced close\n", round, posted, queued);
        fflush(stdout);

        /* 4. the client closes and goes away */
        force_close(client, to_server);
        ucp_worker_destroy(client);
        ucp_cleanup(client_context);

        /* 5. the server handles the client's CONN_FIN and socket close: the use-after-free */
        progress_for(server, 0.3);
        ucp_worker_destroy(server);
        ucp_cleanup(server_context);
    }
    printf("no crash in %d rounds\n", rounds);
    return 0;
}
