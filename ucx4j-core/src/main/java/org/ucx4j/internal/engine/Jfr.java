package org.ucx4j.internal.engine;

import jdk.jfr.Category;
import jdk.jfr.DataAmount;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.EventType;
import jdk.jfr.FlightRecorder;
import jdk.jfr.FlightRecorderListener;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.Recording;
import jdk.jfr.RecordingState;
import jdk.jfr.StackTrace;

/**
 * ucx4j's JDK Flight Recorder events. While no recording has them enabled the hot path pays one static boolean read
 * per message; {@code -Ducx4j.jfr=false} removes even that (the flag is then a constant the JIT folds away).
 */
final class Jfr {
    private Jfr() {}

    static final boolean AVAILABLE = !"false".equals(System.getProperty("ucx4j.jfr"));
    /** True while some recording has {@code org.ucx4j.Transfer} enabled; updated when recordings start or stop. */
    static volatile boolean transfers;

    static {
        if (AVAILABLE) {
            try {
                FlightRecorder.register(TransferEvent.class);
                FlightRecorder.register(ConnectEvent.class);
                FlightRecorder.register(CloseEvent.class);
                FlightRecorder.addListener(new FlightRecorderListener() {
                    @Override
                    public void recordingStateChanged(Recording recording) {
                        refresh();
                    }
                });
                refresh();
            } catch (Throwable t) {
                // JFR not in this runtime: events stay off
            }
        }
    }

    static void refresh() {
        boolean on = false;
        for (Recording r : FlightRecorder.getFlightRecorder().getRecordings()) {
            if (r.getState() == RecordingState.RUNNING) {
                on = true;
                break;
            }
        }
        transfers = on && EventType.getEventType(TransferEvent.class).isEnabled();
    }

    /** A transfer started: its event when recording, else null. */
    static TransferEvent begin() {
        if (AVAILABLE && transfers) {
            TransferEvent e = new TransferEvent();
            e.begin();
            return e;
        }
        return null;
    }

    /** A connect or accept started: its event, or null when JFR is compiled out. */
    static ConnectEvent beginConnect() {
        if (!AVAILABLE) {
            return null;
        }
        ConnectEvent e = new ConnectEvent();
        e.begin();
        return e;
    }

    static void end(TransferEvent e, String operation, long bytes, long tag, EndpointCore ep, String status) {
        e.end();
        if (e.shouldCommit()) {
            e.operation = operation;
            e.bytes = bytes;
            e.tag = tag;
            e.peer = ep == null ? "" : ep.peer;
            e.status = status;
            e.commit();
        }
    }

    @Name("org.ucx4j.Transfer")
    @Label("UCX Transfer")
    @Category({"ucx4j"})
    @Description("A send, receive, stream, active-message, put or get operation, from post to completion")
    @StackTrace(false)
    static final class TransferEvent extends Event {
        @Label("Operation")
        String operation;
        @Label("Bytes")
        @DataAmount
        long bytes;
        @Label("Tag")
        long tag;
        @Label("Peer")
        String peer;
        @Label("Status")
        String status;
    }

    @Name("org.ucx4j.Connect")
    @Label("UCX Connect")
    @Category({"ucx4j"})
    @Description("An outgoing (connect) or incoming (accept) connection: handshake and UCX endpoint creation")
    static final class ConnectEvent extends Event {
        @Label("Direction")
        String direction;
        @Label("Peer")
        String peer;
        @Label("Peer PID")
        long peerPid;
        @Label("Outcome")
        String outcome;
    }

    @Name("org.ucx4j.Close")
    @Label("UCX Endpoint Closed")
    @Category({"ucx4j"})
    @Description("An endpoint was released: closed locally, or lost with its peer")
    @StackTrace(false)
    static final class CloseEvent extends Event {
        @Label("Peer")
        String peer;
        @Label("Reason")
        String reason;
        @Label("Bytes Sent")
        @DataAmount
        long bytesSent;
        @Label("Bytes Received")
        @DataAmount
        long bytesReceived;
    }
}
