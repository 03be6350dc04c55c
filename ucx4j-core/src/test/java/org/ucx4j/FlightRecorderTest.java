package org.ucx4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordingFile;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** ucx4j's JFR events: connect/accept, each transfer with size, tag, peer and duration, and close. */
class FlightRecorderTest {
    @Test
    void connectTransfersAndCloseAreRecorded(@TempDir Path dir) throws Exception {
        Path file = dir.resolve("ucx4j.jfr");
        String peer;
        try (Recording rec = new Recording()) {
            rec.enable("org.ucx4j.Transfer");
            rec.enable("org.ucx4j.Connect");
            rec.enable("org.ucx4j.Close");
            rec.start();
            try (Ucx a = Ucx.open(); Ucx b = Ucx.open(); Arena arena = Arena.ofShared()) {
                CompletableFuture<Endpoint> accepted = new CompletableFuture<>();
                try (Listener l = b.listen(0, accepted::complete)) {
                    Endpoint client = a.connect("127.0.0.1", l.port());
                    Endpoint server = accepted.get(10, TimeUnit.SECONDS);
                    peer = client.remoteAddress();
                    MemorySegment in = arena.allocate(4096);
                    CompletableFuture<Long> r = server.recvAsync(in, 33);
                    client.send(Data.pattern(arena, 4096, 1), 33);
                    r.get(10, TimeUnit.SECONDS);
                    try (MemoryRegion region = b.allocateMemory(1 << 20)) {
                        RemoteKey key = client.unpackRemoteKey(region.packRemoteKey());
                        client.get(arena.allocate(1 << 20), key, 0, Duration.ofSeconds(10));
                        client.put(Data.pattern(arena, 65536, 2), key, 4096, Duration.ofSeconds(10));
                        client.flush(Duration.ofSeconds(10));
                        key.close();
                    }
                    client.amSend(new byte[1], new byte[100]);
                    server.amRecv(Duration.ofSeconds(10)).close();
                    client.streamSend(new byte[777]);
                    server.streamRecv(new byte[777], Duration.ofSeconds(10));
                    client.sendFrames(List.of(MemorySegment.ofArray(new byte[300])));
                    server.recvFrames(Duration.ofSeconds(10)).close();
                    client.close();
                }
            }
            rec.stop();
            rec.dump(file);
        }
        List<RecordedEvent> events = RecordingFile.readAllEvents(file);
        List<RecordedEvent> transfers = events.stream()
                .filter(e -> e.getEventType().getName().equals("org.ucx4j.Transfer")).collect(Collectors.toList());
        RecordedEvent send = find(transfers, "send", 4096);
        assertEquals(peer, send.getString("peer"));
        assertEquals("OK", send.getString("status"));
        assertEquals(33, send.getLong("tag") & 0xffffffffL, "user tag in the low 32 bits");
        find(transfers, "recv", 4096);
        RecordedEvent get = find(transfers, "get", 1 << 20);
        assertTrue(!get.getDuration().isNegative());
        find(transfers, "put", 65536);
        find(transfers, "active message send", 100);
        find(transfers, "active message receive", 100);
        find(transfers, "stream send", 777);
        find(transfers, "stream recv", 777);
        find(transfers, "frames send", 300);
        find(transfers, "frames receive", 300);
        List<String> connects = events.stream().filter(e -> e.getEventType().getName().equals("org.ucx4j.Connect"))
                .map(e -> e.getString("direction") + ":" + e.getString("outcome")).collect(Collectors.toList());
        assertTrue(connects.contains("connect:OK") && connects.contains("accept:OK"), connects.toString());
        assertTrue(events.stream().anyMatch(e -> e.getEventType().getName().equals("org.ucx4j.Close")
                && e.getLong("bytesSent") >= 4096), "close event with the endpoint's byte counts");
    }

    private static RecordedEvent find(List<RecordedEvent> events, String operation, long bytes) {
        return events.stream().filter(e -> operation.equals(e.getString("operation")) && e.getLong("bytes") == bytes)
                .findFirst().orElseThrow(() -> new AssertionError("no " + operation + " event of " + bytes
                        + " bytes in " + events.stream().map(e -> e.getString("operation") + "/" + e.getLong("bytes"))
                        .collect(Collectors.toList())));
    }
}
