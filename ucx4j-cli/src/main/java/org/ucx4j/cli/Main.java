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

    /** A command line that runs this tool again in a new JVM (same Java, class path, native access). */
    static java.util.List<String> selfCommand(String... args) {
        java.util.List<String> cmd = new java.util.ArrayList<>();
        cmd.add(java.nio.file.Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("--enable-native-access=ALL-UNNAMED");
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(Main.class.getName());
        cmd.addAll(java.util.List.of(args));
        return cmd;
    }

    public static void main(String[] args) {
        System.exit(new CommandLine(new Main()).execute(args));
    }
}
