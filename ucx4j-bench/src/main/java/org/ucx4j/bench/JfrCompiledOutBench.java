package org.ucx4j.bench;

import org.openjdk.jmh.annotations.Fork;

/** {@link JfrBench} with ucx4j's JFR hooks compiled out ({@code -Ducx4j.jfr=false}): the baseline. */
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "-Ducx4j.jfr=false"})
public class JfrCompiledOutBench extends JfrBench {
}
