/* A plain UCX program (no ucx4j) for the raw-interop test: prints its worker address in hex, reads the Java side's
 * address from stdin, then: receives tag 7 and echoes it back with tag 8, sends "hello from C" with tag 9; echoes
 * the messages of a size sweep (a count on tag 11, then messages of up to 16 MiB on tag 12, back on tag 13); echoes
 * three active messages (id 0; the last one large enough for rendezvous) back with the header's first byte
 * changed to 'C'; echoes 16 stream bytes; and waits for tag 10 before exiting 0. Any failure exits non-zero. */
#include <ucp/api/ucp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parent_watch.h"

static void wait_req(ucp_worker_h w, ucs_status_ptr_t r, const char *what) {
    if (r == NULL) return;
    if (UCS_PTR_IS_ERR(r)) { fprintf(stderr, "%s: %s\n", what, ucs_status_string(UCS_PTR_STATUS(r))); exit(2); }
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(w);
    if (ucp_request_check_status(r) != UCS_OK) { fprintf(stderr, "%s failed\n", what); exit(3); }
    ucp_request_free(r);
}

static size_t recv_tag(ucp_worker_h w, void *buf, size_t len, ucp_tag_t tag) {
    ucp_tag_recv_info_t info;
    ucp_request_param_t p; memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    ucs_status_ptr_t r = ucp_tag_recv_nbx(w, buf, len, tag, (ucp_tag_t)-1, &p);
    if (UCS_PTR_IS_ERR(r)) { fprintf(stderr, "recv: %s\n", ucs_status_string(UCS_PTR_STATUS(r))); exit(4); }
    ucs_status_t st;
    while ((st = ucp_tag_recv_request_test(r, &info)) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(r);
    if (st != UCS_OK || info.length > len) { fprintf(stderr, "recv tag %llu: %s\n", (unsigned long long)tag,
                                                     ucs_status_string(st)); exit(5); }
    return info.length;
}

static void send_tag(ucp_worker_h w, ucp_ep_h ep, const void *buf, size_t len, ucp_tag_t tag) {
    ucp_request_param_t p; memset(&p, 0, sizeof(p));
    wait_req(w, ucp_tag_send_nbx(ep, buf, len, tag, &p), "send");
}

/* the last active message: header, payload, and the rendezvous descriptor when its data is still remote */
static char am_hdr[64];
static size_t am_hdr_len, am_len;
static void *am_data, *am_desc;
static volatile int am_state; /* 0 nothing, 1 rendezvous pending, 2 complete */

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data, size_t length,
                          const ucp_am_recv_param_t *param) {
    am_hdr_len = header_length < sizeof(am_hdr) ? header_length : sizeof(am_hdr);
    memcpy(am_hdr, header, am_hdr_len);
    am_len = length;
    am_data = malloc(length ? length : 1);
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        am_desc = data;
        am_state = 1;
        return UCS_INPROGRESS;
    }
    memcpy(am_data, data, length);
    am_state = 2;
    return UCS_OK;
}

static void echo_am(ucp_worker_h w, ucp_ep_h ep) {
    while (am_state == 0) ucp_worker_progress(w);
    if (am_state == 1) {
        ucp_request_param_t p; memset(&p, 0, sizeof(p));
        wait_req(w, ucp_am_recv_data_nbx(w, am_desc, am_data, am_len, &p), "am recv data");
    }
    am_hdr[0] = 'C';
    ucp_request_param_t p; memset(&p, 0, sizeof(p));
    wait_req(w, ucp_am_send_nbx(ep, 0, am_hdr, am_hdr_len, am_data, am_len, &p), "am send");
    free(am_data);
    am_state = 0;
}

static void echo_stream(ucp_worker_h w, ucp_ep_h ep) {
    char buf[16];
    size_t got;
    ucp_request_param_t p; memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_STREAM_RECV_FLAG_WAITALL;
    wait_req(w, ucp_stream_recv_nbx(ep, buf, sizeof(buf), &got, &p), "stream recv");
    ucp_request_param_t sp; memset(&sp, 0, sizeof(sp));
    wait_req(w, ucp_stream_send_nbx(ep, buf, sizeof(buf), &sp), "stream send");
}

int main(void) {
    start_parent_watch();
    ucp_params_t params; memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_STREAM;
    ucp_context_h ctx; ucp_worker_h w;
    ucp_worker_params_t wp; memset(&wp, 0, sizeof(wp));
    if (ucp_init(&params, NULL, &ctx) != UCS_OK) return 10;
    if (ucp_worker_create(ctx, &wp, &w) != UCS_OK) return 11;
    ucp_am_handler_param_t hp; memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
    hp.id = 0;
    hp.cb = am_cb;
    if (ucp_worker_set_am_recv_handler(w, &hp) != UCS_OK) return 15;
    ucp_address_t *addr; size_t alen;
    if (ucp_worker_get_address(w, &addr, &alen) != UCS_OK) return 12;
    printf("ADDRESS ");
    for (size_t i = 0; i < alen; i++) printf("%02x", ((unsigned char *)addr)[i]);
    printf("\n");
    fflush(stdout);
    char line[65536];
    if (!fgets(line, sizeof(line), stdin)) return 13;
    size_t plen = strlen(line) / 2;
    unsigned char *peer = malloc(plen);
    for (size_t i = 0; i < plen; i++) sscanf(line + 2 * i, "%2hhx", &peer[i]);
    ucp_ep_params_t ep_params; memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.address = (ucp_address_t *)peer;
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ucp_ep_h ep;
    if (ucp_ep_create(w, &ep_params, &ep) != UCS_OK) return 14;
    char buf[256];
    size_t n = recv_tag(w, buf, sizeof(buf), 7);
    send_tag(w, ep, buf, n, 8);
    const char *hello = "hello from C";
    send_tag(w, ep, hello, strlen(hello), 9);
    /* the size sweep: a count (tag 11), then that many messages of up to 16 MiB on tag 12, each echoed on tag 13 */
    unsigned long long count;
    if (recv_tag(w, &count, sizeof(count), 11) != sizeof(count)) { fprintf(stderr, "bad count\n"); return 16; }
    char *big = malloc(16 << 20);
    if (big == NULL) return 17;
    for (unsigned long long i = 0; i < count; i++) {
        size_t len = recv_tag(w, big, 16 << 20, 12);
        send_tag(w, ep, big, len, 13);
    }
    free(big);
    echo_am(w, ep);
    echo_am(w, ep);
    echo_am(w, ep);
    echo_stream(w, ep);
    recv_tag(w, buf, sizeof(buf), 10);
    ucp_request_param_t cp; memset(&cp, 0, sizeof(cp));
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    wait_req(w, ucp_ep_close_nbx(ep, &cp), "close");
    ucp_worker_release_address(w, addr);
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    printf("DONE\n");
    return 0;
}
