package org.apache.spark.shuffle.ucx4j;

import java.io.Serializable;

import org.ucx4j.EndpointStats;

/**
 * Traffic on one ucx4j shuffle connection as one executor saw it.
 *
 * @param executor the executor that reports
 * @param peer the other side: an executor id for connections this executor made to fetch, else the peer's address
 * @param fetched true for a connection this executor fetched over, false for one it served blocks on
 * @param stats bytes and messages each way and bandwidth quantiles of transfers of at least 1 MB
 */
public record PeerTraffic(String executor, String peer, boolean fetched, EndpointStats stats) implements Serializable {
}
