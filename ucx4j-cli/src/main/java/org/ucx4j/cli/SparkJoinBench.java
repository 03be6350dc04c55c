package org.ucx4j.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

/**
 * The seeds' merge benchmark on Spark: two DataFrames joined on their key, then sorted, with Spark's built-in
 * shuffle and with ucx4j's, one after the other on the same {@code local-cluster} in one invocation. Spark needs a
 * JVM of its own (environment, class path, module openings), so this command starts one and runs
 * {@link SparkJoinDriver} there.
 */
@Command(name = "spark-join", description = "Spark join + sort on local-cluster: built-in shuffle vs ucx4j shuffle.")
final class SparkJoinBench implements Callable<Integer> {
    @Option(names = "--rows-per-partition", defaultValue = "2000000", description = "rows per partition of each "
            + "DataFrame, default ${DEFAULT-VALUE}")
    long rowsPerPartition;

    @Option(names = "--partitions", defaultValue = "8", description = "partitions of each DataFrame and of the "
            + "shuffles, default ${DEFAULT-VALUE}")
    int partitions;

    @Option(names = "--frac-match", defaultValue = "0.3", description = "fraction of the right side's keys that "
            + "exist on the left, default ${DEFAULT-VALUE}")
    double fracMatch;

    @Option(names = "--payload-bytes", defaultValue = "0", description = "adds a random string column this wide to "
            + "each row (the seed's rows are two int64s), default ${DEFAULT-VALUE}")
    int payloadBytes;

    @Option(names = "--iterations", defaultValue = "3", description = "timed iterations per backend (after the "
            + "warm-up), default ${DEFAULT-VALUE}")
    int iterations;

    @Option(names = "--warmup", defaultValue = "1", description = "untimed runs of the timed query per backend "
            + "before the timed ones (after a join count that checks both backends agree), default ${DEFAULT-VALUE}")
    int warmup;

    @Option(names = "--executors", defaultValue = "2", description = "executor JVMs, default ${DEFAULT-VALUE}")
    int executors;

    @Option(names = "--executor-memory-mb", defaultValue = "2048", description = "heap per executor, default "
            + "${DEFAULT-VALUE}")
    int executorMemoryMb;

    @Option(names = "--backends", defaultValue = "sort,ucx4j", split = ",", description = "sort (Spark's "
            + "built-in, Netty) and/or ucx4j, run in this order in the first round")
    List<String> backends;

    @Option(names = "--rounds", defaultValue = "2", description = "rounds of all backends, the order reversed in "
            + "every other round (A B, B A, ...), so that neither gains from going second (a warmer driver JVM, "
            + "page cache); default ${DEFAULT-VALUE}")
    int rounds;

    @Option(names = "--conf", description = "extra Spark setting KEY=VALUE for both backends (repeatable), e.g. "
            + "spark.ucx4j.progressMode=blocking")
    Map<String, String> conf = new LinkedHashMap<>();

    @Option(names = "--json", description = "write per-iteration figures to this file")
    Path json;

    @Spec
    CommandSpec spec;

    /** Spark's own module openings for JDK 17+ (its launcher adds them; a plain {@code java} must too). */
    static final List<String> SPARK_JVM_OPTIONS = List.of("-XX:+IgnoreUnrecognizedVMOptions",
            "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
            "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED", "--add-opens=java.base/java.io=ALL-UNNAMED",
            "--add-opens=java.base/java.net=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
            "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
            "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
            "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
            "--add-opens=java.base/sun.nio.cs=ALL-UNNAMED",
            "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED", "-Djdk.reflect.useDirectMethodHandle=false",
            "-Dio.netty.tryReflectionSetAccessible=true");

    @Override
    public Integer call() throws Exception {
        if (partitions < 1 || rowsPerPartition < 1 || iterations < 1 || executors < 1 || rounds < 1 || warmup < 0
                || fracMatch < 0 || fracMatch > 1) {
            throw new UsageException("need partitions, rows, iterations, executors, rounds >= 1, "
                    + "warmup >= 0 and 0 <= frac-match <= 1");
        }
        for (String b : backends) {
            if (!b.equals("sort") && !b.equals("ucx4j")) {
                throw new UsageException("unknown backend '" + b + "': sort or ucx4j");
            }
        }
        if (System.getenv("SPARK_TESTING") != null && sparkOnClassPath()) {
            return new SparkJoinDriver(this).run();
        }
        return runInSparkJvm();
    }

    private static boolean sparkOnClassPath() {
        try {
            Class.forName("org.apache.spark.SparkConf", false, SparkJoinBench.class.getClassLoader());
            return true;
        } catch (ClassNotFoundException e) {
            return false;
        }
    }

    /** Runs this same command in a JVM set up for Spark's {@code local-cluster}; work files go to a temp dir. */
    private int runInSparkJvm() throws IOException, InterruptedException, URISyntaxException {
        Path target = Path.of(Main.class.getProtectionDomain().getCodeSource().getLocation().toURI()).getParent();
        Path sparkClasspath = target.resolve("spark-classpath.txt");
        if (!Files.isRegularFile(sparkClasspath)) {
            throw new IllegalStateException("no " + sparkClasspath + ": rebuild with 'mvn package' (the ./ucx4j "
                    + "launcher does it)");
        }
        List<String> cp = new ArrayList<>();
        for (String e : System.getProperty("java.class.path").split(java.io.File.pathSeparator)) {
            if (!e.contains("slf4j-simple")) { // Spark brings its own SLF4J binding (log4j 2)
                cp.add(e);
            }
        }
        cp.add(Files.readString(sparkClasspath).trim());
        Path work = Files.createTempDirectory("ucx4j-spark-join");
        Path log4j = work.resolve("log4j2.properties");
        Files.writeString(log4j, """
                rootLogger.level = warn
                rootLogger.appenderRef.stderr.ref = console
                appender.console.type = Console
                appender.console.name = console
                appender.console.target = SYSTEM_ERR
                appender.console.layout.type = PatternLayout
                appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
                """);
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("--enable-native-access=ALL-UNNAMED");
        cmd.add("-Xmx2g");
        cmd.addAll(SPARK_JVM_OPTIONS);
        cmd.add("-Dspark.testing=true");
        cmd.add("-Dspark.test.home=" + work);
        cmd.add("-Djava.io.tmpdir=" + work);
        cmd.add("-Dlog4j2.configurationFile=" + log4j);
        cmd.add("-cp");
        cmd.add(String.join(java.io.File.pathSeparator, cp));
        cmd.add(Main.class.getName());
        cmd.addAll(spec.commandLine().getParseResult().originalArgs()); // "bench spark-join ..." as typed
        ProcessBuilder pb = new ProcessBuilder(cmd).inheritIO();
        pb.environment().put("SPARK_TESTING", "1"); // local-cluster from Maven jars: executors reuse this class path
        pb.environment().put("SPARK_SCALA_VERSION", "2.13");
        Process p = pb.start();
        try {
            return p.waitFor();
        } finally {
            p.destroyForcibly();
            try (Stream<Path> files = Files.walk(work)) {
                files.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            }
        }
    }

    void writeJson(List<Map<String, Object>> rows) throws IOException {
        if (json != null) {
            new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValue(json.toFile(), rows);
        }
    }

    static String bytes(double b) {
        String[] units = {"B", "kB", "MB", "GB", "TB"};
        int u = 0;
        while (b >= 1000 && u < units.length - 1) {
            b /= 1000;
            u++;
        }
        return String.format(Locale.ROOT, "%.2f %s", b, units[u]);
    }

    static Map<String, Object> row(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }
}
