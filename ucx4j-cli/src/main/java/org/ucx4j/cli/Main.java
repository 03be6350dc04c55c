package org.ucx4j.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/** The {@code ucx4j} command. */
@Command(name = "ucx4j", mixinStandardHelpOptions = true, version = "ucx4j 0.1.0",
        description = "UCX for Java: information and benchmarks.",
        subcommands = {InfoCommand.class, BenchCommand.class})
public final class Main implements Runnable {
    @Override
    public void run() {
        new CommandLine(this).usage(System.out);
    }

    public static void main(String[] args) {
        System.exit(new CommandLine(new Main()).execute(args));
    }
}
