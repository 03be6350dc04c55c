package org.ucx4j.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/** The {@code ucx4j} command. */
// INHERIT: every subcommand takes --help (and --version) too, as the one-line usage errors point users to it
@Command(name = "ucx4j", mixinStandardHelpOptions = true, scope = CommandLine.ScopeType.INHERIT,
        version = "ucx4j 0.1.0",
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
        // ucx4j's own settings given as system properties (e.g. ucx4j.ucx.home: which UCX to load) hold for the
        // child too, so both ends of a benchmark load the same UCX
        System.getProperties().stringPropertyNames().stream().filter(k -> k.startsWith("ucx4j.")).sorted()
                .forEach(k -> cmd.add("-D" + k + "=" + System.getProperty(k)));
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(Main.class.getName());
        cmd.addAll(java.util.List.of(args));
        return cmd;
    }

    public static void main(String[] args) {
        Children.killAllAtExit();
        System.exit(commandLine().execute(args));
    }

    /**
     * The command line, where a UCX failure (a configuration UCX refuses, a peer that cannot be reached...) is one
     * line on stderr and exit status 3, and a bad argument (picocli's own usage errors, and the values a command
     * refuses: {@link UsageException}) one line and status 2; other exceptions keep their stack traces.
     */
    static CommandLine commandLine() {
        return new CommandLine(new Main()).setExecutionExceptionHandler((e, cmd, parsed) -> {
            if (e instanceof org.ucx4j.UcxException u) {
                cmd.getErr().println("ucx4j: " + u.getMessage());
                cmd.getErr().flush();
                return 3;
            }
            if (e instanceof UsageException bad) {
                cmd.getErr().println("ucx4j: " + bad.getMessage());
                cmd.getErr().flush();
                return 2;
            }
            throw e;
        }).setParameterExceptionHandler((e, args) -> {
            CommandLine cmd = e.getCommandLine();
            cmd.getErr().println("ucx4j: " + e.getMessage() + " (see: " + cmd.getCommandSpec().qualifiedName(" ")
                    + " --help)");
            cmd.getErr().flush();
            return 2;
        });
    }
}
