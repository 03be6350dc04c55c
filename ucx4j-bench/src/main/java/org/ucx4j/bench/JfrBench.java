package org.ucx4j.bench;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import jdk.jfr.Recording;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.ucx4j.AmMessage;
import org.ucx4j.ProgressMode;

/**
 * What ucx4j's JFR events cost per message: {@code jfr=off}, the hooks present and no recording running (the
 * default); {@code jfr=recording}, a recording with {@code org.ucx4j.Transfer} enabled, every transfer an event.
 * {@link JfrCompiledOutBench} runs the same with the hooks compiled out ({@code -Ducx4j.jfr=false}), the baseline
 * for "no measurable cost when recording is off". Caller mode, loopback pair, 8-byte messages.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = "--enable-native-access=ALL-UNNAMED")
public class JfrBench {
    static final MemorySegment EMPTY = MemorySegment.ofArray(new byte[0]);

    @Param({"off", "recording"})
    public String jfr;

    LoopbackPair pair;
    Arena arena;
    MemorySegment out;
    MemorySegment in;
    Recording recording;

    @Setup(Level.Trial)
    public void setup() throws Exception {
        pair = new LoopbackPair(ProgressMode.CALLER);
        arena = Arena.ofShared();
        out = arena.allocate(8);
        in = arena.allocate(8);
        if (jfr.equals("recording")) {
            recording = new Recording();
            recording.enable("org.ucx4j.Transfer").withThreshold(Duration.ZERO);
            recording.setToDisk(false);
            recording.setMaxSize(64L << 20);
            recording.start();
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        if (recording != null) {
            recording.close();
        }
        pair.close();
        arena.close();
    }

    /** Blocking 8-byte tag send and receive: a send event and a receive event per operation when recording. */
    @Benchmark
    public long sendRecvBlocking() {
        pair.client.send(out, 1);
        return pair.server.recv(in, 1);
    }

    /** Blocking 8-byte active message and receiver-allocated receive. */
    @Benchmark
    public long amSendRecvBlocking() {
        pair.client.amSend(EMPTY, out);
        try (AmMessage m = pair.server.amRecv()) {
            return m.payload().byteSize();
        }
    }
}
