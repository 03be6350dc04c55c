/**
 * ucx4j: UCX for Java. {@link org.ucx4j.Ucx} opens a UCX context and worker; everything a program uses is in
 * {@code org.ucx4j}. The native layer ({@code org.ucx4j.internal.*}, the only code that touches libucp) is not
 * exported. On the module path run with {@code --enable-native-access=org.ucx4j}; on the class path with
 * {@code --enable-native-access=ALL-UNNAMED}.
 */
module org.ucx4j {
    requires org.slf4j;
    requires jdk.jfr;
    requires jdk.net;

    exports org.ucx4j;
}
