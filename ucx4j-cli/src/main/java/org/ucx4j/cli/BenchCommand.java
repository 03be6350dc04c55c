package org.ucx4j.cli;

import picocli.CommandLine.Command;

@Command(name = "bench", description = "Benchmarks.", subcommands = {SendRecvBench.class, SweepBench.class, SweepBench.Server.class, SparkJoinBench.class})
final class BenchCommand implements Runnable {
    @Override
    public void run() {
        new picocli.CommandLine(this).usage(System.out);
    }
}
