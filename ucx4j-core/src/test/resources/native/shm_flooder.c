/* A plain UCX program that floods a same-host worker's shared-memory FIFO, for the wedged-FIFO test: prints its
 * own worker address ("ADDRESS <hex>"), reads the target's worker address (hex) from stdin, connects with peer error handling (as ucx4j does), prints "FLOODING"
 * once its first message went out, then sends tag messages of argv[1] bytes (default 30000: one bcopy segment with
 * ucx4j's 32 KiB segments, so most of its time is spent copying into the target's FIFO) until it is killed. */
#include <ucp/api/ucp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parent_watch.h"

static int unhex(int c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

int main(int argc, char **argv) {
    start_parent_watch();
    size_t len = argc > 1 ? strtoul(argv[1], NULL, 10) : 30000;
    ucp_tag_t tag = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x5eed;
    ucp_params_t cp; memset(&cp, 0, sizeof(cp));
    cp.field_mask = UCP_PARAM_FIELD_FEATURES;
    cp.features = UCP_FEATURE_TAG;
    ucp_context_h ctx; ucp_worker_h w; ucp_ep_h ep;
    if (ucp_init(&cp, NULL, &ctx) != UCS_OK) return 1;
    ucp_worker_params_t wp; memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucp_worker_create(ctx, &wp, &w) != UCS_OK) return 1;
    ucp_address_t *own; size_t own_len;
    if (ucp_worker_get_address(w, &own, &own_len) != UCS_OK) return 1;
    printf("ADDRESS ");
    for (size_t i = 0; i < own_len; i++) printf("%02x", ((unsigned char *)own)[i]);
    printf("\n"); fflush(stdout);
    static char line[1 << 16];
    if (!fgets(line, sizeof(line), stdin)) return 1;
    size_t n = strcspn(line, "\r\n") / 2;
    unsigned char *addr = malloc(n);
    for (size_t i = 0; i < n; i++) addr[i] = (unsigned char)(unhex(line[2 * i]) << 4 | unhex(line[2 * i + 1]));
    ucp_ep_params_t ep_params; memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.address = (ucp_address_t *)addr;
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    if (ucp_ep_create(w, &ep_params, &ep) != UCS_OK) return 1;
    char *buf = calloc(1, len ? len : 1);
    ucp_request_param_t p; memset(&p, 0, sizeof(p));
    for (unsigned long i = 0;; i++) {
        ucs_status_ptr_t r = ucp_tag_send_nbx(ep, buf, len, tag, &p);
        if (UCS_PTR_IS_ERR(r)) { fprintf(stderr, "send: %s\n", ucs_status_string(UCS_PTR_STATUS(r))); return 2; }
        if (r != NULL) {
            while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(w);
            ucp_request_free(r);
        }
        if (i == 0) { printf("FLOODING\n"); fflush(stdout); }
    }
}
