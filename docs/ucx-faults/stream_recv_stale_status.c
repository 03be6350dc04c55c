/*
 * Reproducer: ucp_stream_recv_nbx() returns a stale status for a receive that completed inside the call. Written for
 * ucx4j's report to OpenUCX; see README.md beside it.
 *
 * ucp_stream_recv_request_init() sets req->status only when UCX is built with assertions (UCS_ENABLE_ASSERT).
 * When a receive cannot be served in place but all its bytes are already queued (UCP_STREAM_RECV_FLAG_WAITALL over
 * several received fragments), ucp_stream_recv_request() fills it and returns through ucp_request_imm_cmpl_param(),
 * which hands back req->status: whatever the recycled request held before. Here that is UCS_ERR_CANCELED, left by
 * a tag receive canceled just before. The caller gets an error while *length says the whole buffer was filled and the
 * bytes have left the stream.
 *
 * One process, one context (TAG | STREAM), two workers, an endpoint each way from the other worker's address.
 * Per round: a tag receive is posted on the receiving worker, canceled and freed; 64 KiB go over the stream and
 * arrive in several fragments; the receiver asks for 64 KiB with WAITALL.
 *
 * Build: gcc -O1 -g -o stream_recv_stale_status stream_recv_stale_status.c -I$UCX/include -L$UCX/lib \
 *            -Wl,-rpath,$UCX/lib -lucp -lucs
 * Run:   ./stream_recv_stale_status [rounds]   (exit 0: every receive reported UCS_OK; exit 1: the fault)
 *
 * Seen on every run with release builds of 1.16.0-1.20.1; not with 1.13.1-1.15.0 (another code path) or with
 * builds that have assertions on.
 */
#include <ucp/api/ucp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIZE (64 * 1024)

#define CHECK(x) do { ucs_status_t s_ = (x); if (s_ != UCS_OK) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ucs_status_string(s_)); exit(2); } } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void on_send(void *request, ucs_status_t status, void *arg) { *(ucs_status_t*)arg = status; }

static void on_tag_recv(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info, void *arg)
{
    *(ucs_status_t*)arg = status;
}

static void on_stream_recv(void *request, ucs_status_t status, size_t length, void *arg)
{
    *(ucs_status_t*)arg = status;
}

/* Progresses both workers until *status is no longer UCS_INPROGRESS (10 s at most), then frees the request. */
static ucs_status_t wait_for(ucp_worker_h w1, ucp_worker_h w2, void *request, ucs_status_t *status)
{
    double end = now() + 10;
    if (request == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(request)) {
        return UCS_PTR_STATUS(request);
    }
    while (*status == UCS_INPROGRESS && now() < end) {
        ucp_worker_progress(w1);
        ucp_worker_progress(w2);
    }
    if (*status == UCS_INPROGRESS) {
        fprintf(stderr, "request did not complete in 10 s\n");
        exit(2);
    }
    ucp_request_free(request);
    return *status;
}

static ucp_worker_h new_worker(ucp_context_h context)
{
    ucp_worker_params_t params = {
        .field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE
    };
    ucp_worker_h worker;
    CHECK(ucp_worker_create(context, &params, &worker));
    return worker;
}

static ucp_ep_h connect_to(ucp_worker_h from, ucp_worker_h to)
{
    ucp_address_t *address;
    size_t length;
    ucp_ep_h ep;
    ucp_ep_params_t params = { .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS };
    CHECK(ucp_worker_get_address(to, &address, &length));
    params.address = address;
    CHECK(ucp_ep_create(from, &params, &ep));
    ucp_worker_release_address(to, address);
    return ep;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 10, failures = 0, round;
    static unsigned char out[SIZE], in[SIZE], tag_buffer[8];
    ucp_config_t *config;
    ucp_context_h context;
    ucp_params_t params = { .field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG | UCP_FEATURE_STREAM };
    unsigned major, minor, release;

    ucp_get_version(&major, &minor, &release);
    CHECK(ucp_config_read(NULL, NULL, &config));
    CHECK(ucp_init(&params, config, &context));
    ucp_config_release(config);
    ucp_worker_h sender = new_worker(context), receiver = new_worker(context);
    ucp_ep_h to_receiver = connect_to(sender, receiver), to_sender = connect_to(receiver, sender);

    for (round = 0; round < rounds; round++) {
        ucs_status_t tag_status = UCS_INPROGRESS, send_status = UCS_INPROGRESS, recv_status = UCS_INPROGRESS;
        size_t length = 0;
        int i;

        /* 1. A tag receive, canceled: its request goes back to the worker's pool holding UCS_ERR_CANCELED. */
        ucp_request_param_t tag_param = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.recv = on_tag_recv, .user_data = &tag_status
        };
        void *tag_request = ucp_tag_recv_nbx(receiver, tag_buffer, sizeof(tag_buffer), 0xdead, ~0ull, &tag_param);
        ucp_request_cancel(receiver, tag_request);
        if (wait_for(sender, receiver, tag_request, &tag_status) != UCS_ERR_CANCELED) {
            fprintf(stderr, "the tag receive was not canceled\n");
            exit(2);
        }

        /* 2. 64 KiB over the stream; they arrive in several fragments (one receive descriptor each). */
        for (i = 0; i < SIZE; i++) {
            out[i] = (unsigned char)(i * 7 + round);
        }
        memset(in, 0, sizeof(in));
        ucp_request_param_t send_param = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.send = on_send, .user_data = &send_status
        };
        CHECK(wait_for(sender, receiver, ucp_stream_send_nbx(to_receiver, out, SIZE, &send_param), &send_status));
        double end = now() + 1;
        while (now() < end) {
            ucp_worker_progress(sender);
            ucp_worker_progress(receiver);
        }

        /* 3. One receive for all of it: not served in place (WAITALL, first fragment too short), so filled by the
         *    request path inside the call, which returns the recycled request's status. */
        ucp_request_param_t recv_param = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
            .cb.recv_stream = on_stream_recv, .user_data = &recv_status, .flags = UCP_STREAM_RECV_FLAG_WAITALL
        };
        void *request = ucp_stream_recv_nbx(to_sender, in, SIZE, &length, &recv_param);
        int immediate = !UCS_PTR_IS_PTR(request); /* *length is set only then */
        ucs_status_t status = wait_for(sender, receiver, request, &recv_status);
        int intact = memcmp(in, out, SIZE) == 0;
        printf("round %d: %s, status %s, *length %zu, data %s\n", round,
               immediate ? "completed in the call" : "completed later", ucs_status_string(status), length,
               intact ? "intact" : "DIFFERENT");
        if (status != UCS_OK) {
            failures++;
        }
    }
    printf("UCX %u.%u.%u: %d of %d stream receives returned an error for bytes they delivered\n",
           major, minor, release, failures, rounds);
    return failures ? 1 : 0;
}
