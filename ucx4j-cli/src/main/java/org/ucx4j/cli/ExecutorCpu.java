package org.ucx4j.cli;

import java.io.Serializable;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.util.List;
import org.apache.spark.SparkEnv;

/**
 * CPU time of one executor JVM since it started, by what its threads do: Spark's task threads, the shuffle's
 * networking (ucx4j's progress threads, or Netty's shuffle client and server threads), the carriers of virtual
 * threads (ucx4j's block server and reader run on virtual threads), and the rest. Read inside a task with
 * {@code ExecutorProbe.onEach}; JIT compiler and GC threads are not Java threads and count only in the total.
 */
record ExecutorCpu(String executor, double totalS, double tasksS, double networkS, double carriersS, double otherS)
        implements Serializable {

    /** This JVM's figures (live threads only: a thread that has ended took its CPU time with it). */
    static List<ExecutorCpu> local() {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        double tasks = 0, network = 0, carriers = 0, other = 0;
        long[] ids = mx.getAllThreadIds();
        ThreadInfo[] infos = mx.getThreadInfo(ids);
        for (int i = 0; i < ids.length; i++) {
            long ns = mx.getThreadCpuTime(ids[i]);
            if (infos[i] == null || ns < 0) {
                continue;
            }
            double s = ns / 1e9;
            String name = infos[i].getThreadName();
            if (name.startsWith("Executor task launch worker")) {
                tasks += s;
            } else if (name.startsWith("ucx4j-progress") || name.startsWith("shuffle-client")
                    || name.startsWith("shuffle-server")) {
                network += s;
            } else if (name.startsWith("ForkJoinPool-")) {
                carriers += s;
            } else {
                other += s;
            }
        }
        double total = ManagementFactory.getOperatingSystemMXBean()
                instanceof com.sun.management.OperatingSystemMXBean os ? os.getProcessCpuTime() / 1e9 : Double.NaN;
        return List.of(new ExecutorCpu(SparkEnv.get().executorId(), total, tasks, network, carriers, other));
    }
}
