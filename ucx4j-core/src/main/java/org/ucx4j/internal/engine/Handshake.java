package org.ucx4j.internal.engine;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetAddress;
import java.net.Socket;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import javax.crypto.AEADBadTagException;
import javax.crypto.Cipher;
import javax.crypto.Mac;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.SecretKeySpec;
import org.ucx4j.UcxException;
import org.ucx4j.internal.ffi.Status;

/**
 * The ucx4j connection handshake, run over a plain TCP socket before any UCX endpoint exists:
 * <ol>
 *   <li>both sides send a hello: magic, protocol version, flags, connection id, pid, host name, shared-memory
 *       settings, a fresh nonce; two processes on one host whose shared-memory FIFO sizes differ are refused,
 *       since UCX would write past the smaller FIFO, and so are two sides that disagree on peer error handling
 *       (UCX does not support endpoints whose error modes differ);
 *   <li>with a shared secret, each side proves it with HMAC-SHA256 over both hellos (both nonces) and says OK or
 *       REJECT;
 *   <li>only then are the UCX worker addresses exchanged, so an unauthenticated peer never learns ours; with a
 *       secret each is sealed (AES-GCM under a key drawn from the secret, both hellos and the direction), so neither
 *       a relay nor an eavesdropper on this socket reads it, and a relay between two ends that have the secret cannot
 *       substitute its own address (it can only pass the exchange on unchanged). A relay that passes a process's
 *       connection back to that same process's listener (a reflection: both hellos, and so both proofs, are that
 *       process's own) is refused by the listener, which knows the nonces its own connects are using;
 *   <li>the side whose address is greater sends {@link #READY} once it waits for a ticket; the other (the arbiter of
 *       the pair) creates its UCX endpoint and answers with that endpoint's number (see {@link EndpointOrder}).
 * </ol>
 * Each side creates a UCX endpoint to the other's worker address (the path {@code ucx_perftest} takes, which
 * keeps shared memory on the fast path). The socket stays open as the liveness channel: a {@link #BYE} byte
 * announces a graceful close (answered by {@link #BYE_ACK} once the receiver has taken in what the closer sent),
 * end-of-stream without it means the peer died.
 */
final class Handshake {
    static final int MAGIC = 0x55435834; // "UCX4"
    // 4: endpoint numbers (EndpointOrder); 5: CREATED / NOT_CREATED answer the number; 6: with a secret, proofs cover
    // both hellos and each worker address carries a MAC (a relay can no longer swap in its own address); 7: a
    // goodbye is acknowledged (BYE_ACK) once the receiver kept what arrived, and the closer waits for that; 8: with a
    // secret, worker addresses go sealed (AES-GCM) instead of in clear with a MAC, and reflections are refused
    static final int VERSION = 8;
    static final int FLAG_SECRET = 1;
    /** The sender's endpoints use no UCX peer error handling (older peers never set it: they always do). */
    static final int FLAG_NO_PEER_ERRORS = 2;
    /** The sender's shared-memory receive FIFO is wedged ({@link Engine#checkSharedMemory}): same-host peers fail. */
    static final int FLAG_SHM_WEDGED = 4;
    static final int MAX_ADDRESS = 1 << 20;
    static final int NONCE = 16;
    /** The AES-GCM tag after a sealed worker address. */
    static final int SEAL_TAG = 16;
    static final byte OK = 1, REJECT = 2, READY = 3, CREATED = 4, NOT_CREATED = 5, BYE = 0x42, BYE_ACK = 0x43;
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final String LOCAL_HOST = localHost();
    /**
     * The nonces of this process's handshakes as a client (with a secret) that are under way, each with its worker's
     * address and its socket's local address: a listener of that worker that gets one of them back from an address
     * other than that is fed a reflection.
     */
    private static final java.util.Map<String, Connect> OWN_NONCES = new java.util.concurrent.ConcurrentHashMap<>();

    private record Connect(byte[] workerAddress, java.net.SocketAddress local) {}

    /** What the peer told us, and the socket's streams (which may hold bytes the peer sent after the handshake). */
    record Peer(int connId, long pid, String host, byte[] workerAddress, DataInputStream in, DataOutputStream out,
            DeadlineInput deadline) {}

    /**
     * The socket's input, each read ending by one deadline for the whole handshake (a socket timeout alone bounds
     * each read, so a peer sending a byte now and then could hold the connection for as long as it liked).
     */
    static final class DeadlineInput extends java.io.FilterInputStream {
        private final Socket socket;
        private long deadline;

        DeadlineInput(Socket s, long deadline) throws IOException {
            super(s.getInputStream());
            this.socket = s;
            this.deadline = deadline;
        }

        /** The handshake is over: reads wait as long as the peer stays (the liveness watch). */
        void clear() throws IOException {
            deadline = Long.MAX_VALUE;
            socket.setSoTimeout(0);
        }

        private void arm() throws IOException {
            if (deadline == Long.MAX_VALUE) {
                return;
            }
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                throw new java.net.SocketTimeoutException("handshake timed out");
            }
            socket.setSoTimeout((int) Math.min(Integer.MAX_VALUE, Math.max(1, left / 1_000_000)));
        }

        @Override
        public int read() throws IOException {
            arm();
            return super.read();
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            arm();
            return super.read(b, off, len);
        }
    }

    private Handshake() {}

    /**
     * Runs the handshake on a connected socket; the caller closes it on failure.
     *
     * @throws UcxException for a peer that is not ucx4j, speaks another version, or fails authentication
     * @throws IOException when the socket fails or times out
     */
    static Peer run(Socket s, long deadline, boolean client, int connId, byte[] ourAddress, byte[] secret,
            String shmSettings, boolean peerErrors, boolean shmWedged, String peerName) throws IOException {
        byte[] ourNonce = new byte[NONCE];
        RANDOM.nextBytes(ourNonce);
        String own = client && secret != null ? java.util.HexFormat.of().formatHex(ourNonce) : null;
        if (own != null) {
            OWN_NONCES.put(own, new Connect(ourAddress, s.getLocalSocketAddress()));
        }
        try {
            return run(s, deadline, client, connId, ourAddress, secret, shmSettings, peerErrors, shmWedged, peerName,
                    ourNonce);
        } finally {
            if (own != null) {
                OWN_NONCES.remove(own);
            }
        }
    }

    private static Peer run(Socket s, long deadline, boolean client, int connId, byte[] ourAddress, byte[] secret,
            String shmSettings, boolean peerErrors, boolean shmWedged, String peerName, byte[] ourNonce)
            throws IOException {
        DataOutputStream out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream(), 512));
        DeadlineInput timed = new DeadlineInput(s, deadline);
        DataInputStream in = new DataInputStream(new BufferedInputStream(timed, 512));
        byte[] ourHello = hello(VERSION, (secret != null ? FLAG_SECRET : 0) | (peerErrors ? 0 : FLAG_NO_PEER_ERRORS)
                | (shmWedged ? FLAG_SHM_WEDGED : 0), connId, ProcessHandle.current().pid(), LOCAL_HOST, shmSettings,
                ourNonce);
        out.write(ourHello);
        out.flush();

        int magic = in.readInt();
        if (magic != MAGIC) {
            throw fail(peerName, "the peer is not a ucx4j endpoint", Status.ERR_UNSUPPORTED);
        }
        int version = in.readUnsignedShort();
        if (version != VERSION) {
            throw fail(peerName, "protocol version mismatch: ours is " + VERSION + ", the peer's is " + version,
                    Status.ERR_UNSUPPORTED);
        }
        int flags = in.readUnsignedShort();
        int peerConnId = in.readInt();
        long pid = in.readLong();
        String host = in.readUTF();
        String peerShm = in.readUTF();
        byte[] peerNonce = in.readNBytes(NONCE);
        if (peerNonce.length != NONCE) {
            throw new EOFException("handshake cut short");
        }
        // what both sides said, client first: the proofs and the address MACs cover all of it
        byte[] peerHello = hello(version, flags, peerConnId, pid, host, peerShm, peerNonce);
        byte[] transcript = client ? concat(ourHello, peerHello) : concat(peerHello, ourHello);

        if (host.equals(LOCAL_HOST) && (shmWedged || (flags & FLAG_SHM_WEDGED) != 0)) {
            throw fail(peerName, (shmWedged ? "this" : "the peer's") + " process's shared-memory receive FIFO is "
                    + "wedged (a same-host peer was killed while writing into it), so same-host connections to it "
                    + "cannot receive; that process must reopen its Ucx", Status.ERR_UNREACHABLE);
        }
        // an empty setting: that side opened no shared-memory transport, so UCX cannot use one between the two
        if (host.equals(LOCAL_HOST) && !peerShm.isEmpty() && !shmSettings.isEmpty() && !peerShm.equals(shmSettings)) {
            throw fail(peerName, "shared-memory settings differ (ours: " + shmSettings + "; the peer's: " + peerShm
                    + "); UCX needs them equal in every process on one host", Status.ERR_UNSUPPORTED);
        }
        boolean theirPeerErrors = (flags & FLAG_NO_PEER_ERRORS) == 0;
        if (theirPeerErrors != peerErrors) {
            throw fail(peerName, "peer error handling differs (ours: " + (peerErrors ? "on" : "off")
                    + "; the peer's: " + (theirPeerErrors ? "on" : "off") + "); UCX needs both ends of a connection "
                    + "to agree (UcxOptions.withPeerErrorHandling)", Status.ERR_UNSUPPORTED);
        }
        boolean peerHasSecret = (flags & FLAG_SECRET) != 0;
        if (secret == null && peerHasSecret) {
            throw fail(peerName, "the peer requires a shared secret and none is configured here",
                    Status.ERR_REJECTED);
        }
        if (secret != null && !peerHasSecret) {
            throw fail(peerName, "the peer offered no shared secret", Status.ERR_REJECTED);
        }
        if (secret != null && !client) {
            Connect from = OWN_NONCES.get(java.util.HexFormat.of().formatHex(peerNonce));
            if (from != null && java.util.Arrays.equals(from.workerAddress, ourAddress)
                    && !from.local.equals(s.getRemoteSocketAddress())) {
                // this process's own connect, passed back to it: both proofs would be its own, and the address too
                throw fail(peerName, "the peer's hello is this process's own, from another connection (a relay "
                        + "reflecting one of its connects back to it)", Status.ERR_REJECTED);
            }
        }
        if (secret != null) {
            out.write(mac(secret, client ? 'C' : 'S', transcript, NO_BYTES));
            out.flush();
            byte[] theirs = in.readNBytes(32);
            if (theirs.length != 32) {
                throw new EOFException("handshake cut short");
            }
            boolean good = MessageDigest.isEqual(theirs, mac(secret, client ? 'S' : 'C', transcript, NO_BYTES));
            out.writeByte(good ? OK : REJECT);
            out.flush();
            if (!good) {
                throw fail(peerName, "the peer could not prove the shared secret", Status.ERR_REJECTED);
            }
            int verdict = in.read();
            if (verdict != OK) {
                throw fail(peerName, "the peer rejected our shared secret", Status.ERR_REJECTED);
            }
        }

        out.writeInt(ourAddress.length);
        // with a secret, sealed: only the proven peer reads it, and it is the one that peer sent, not a relay's
        out.write(secret != null ? seal(secret, client ? 'c' : 's', transcript, ourAddress) : ourAddress);
        out.flush();
        int len = in.readInt();
        if (len <= 0 || len > MAX_ADDRESS) {
            throw fail(peerName, "bad worker address length " + len, Status.ERR_INVALID_ADDR);
        }
        int wireLength = secret != null ? len + SEAL_TAG : len;
        byte[] address = in.readNBytes(wireLength);
        if (address.length != wireLength) {
            throw new EOFException("handshake cut short");
        }
        if (secret != null) {
            try {
                address = open(secret, client ? 's' : 'c', transcript, address);
            } catch (AEADBadTagException e) {
                throw fail(peerName, "the peer's worker address is not sealed with the shared secret (a relay "
                        + "between two authenticated ends?)", Status.ERR_REJECTED);
            }
        }
        return new Peer(peerConnId, pid, host, address, in, out, timed);
    }

    private static final byte[] NO_BYTES = new byte[0];

    /** A hello as it goes on the wire (also how a received one is re-encoded for the transcript). */
    private static byte[] hello(int version, int flags, int connId, long pid, String host, String shm, byte[] nonce)
            throws IOException {
        java.io.ByteArrayOutputStream b = new java.io.ByteArrayOutputStream(96);
        DataOutputStream d = new DataOutputStream(b);
        d.writeInt(MAGIC);
        d.writeShort(version);
        d.writeShort(flags);
        d.writeInt(connId);
        d.writeLong(pid);
        d.writeUTF(host);
        d.writeUTF(shm);
        d.write(nonce);
        d.flush();
        return b.toByteArray();
    }

    private static byte[] concat(byte[] a, byte[] b) {
        byte[] out = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    /**
     * HMAC-SHA256 over a label (who says it, and what: 'C'/'S' a side's proof, 'k' a key to seal a worker address), the
     * handshake's transcript (both hellos, so both fresh nonces: no replay; the label: no reflection; the whole
     * exchange: a relay that rewrites a hello fails) and {@code data}.
     */
    private static byte[] mac(byte[] secret, char label, byte[] transcript, byte[] data) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            mac.update((byte) label);
            mac.update(transcript);
            mac.update(data);
            return mac.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }

    /**
     * Seals a worker address with AES-256-GCM. The key is the HMAC of the handshake ({@link #mac}) under the label
     * 'k' followed by the address's own label ('c'/'s': whose address), so each key seals one message only, and a
     * zero nonce is safe.
     */
    private static byte[] seal(byte[] secret, char label, byte[] transcript, byte[] address) {
        try {
            return aesGcm(Cipher.ENCRYPT_MODE, secret, label, transcript).doFinal(address);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("AES/GCM unavailable", e);
        }
    }

    /**
     * Opens what {@link #seal} sealed.
     *
     * @throws AEADBadTagException for bytes not sealed with this key (another secret, or changed on the way)
     */
    private static byte[] open(byte[] secret, char label, byte[] transcript, byte[] sealed)
            throws AEADBadTagException {
        try {
            return aesGcm(Cipher.DECRYPT_MODE, secret, label, transcript).doFinal(sealed);
        } catch (AEADBadTagException e) {
            throw e;
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("AES/GCM unavailable", e);
        }
    }

    private static Cipher aesGcm(int mode, byte[] secret, char label, byte[] transcript)
            throws GeneralSecurityException {
        byte[] key = mac(secret, 'k', transcript, new byte[] {(byte) label});
        Cipher c = Cipher.getInstance("AES/GCM/NoPadding");
        c.init(mode, new SecretKeySpec(key, "AES"), new GCMParameterSpec(SEAL_TAG * 8, new byte[12]));
        return c;
    }

    /** A failed handshake, typed as {@link UcxException#of} types its status (a rejection is unreachable). */
    private static UcxException fail(String peer, String why, int status) {
        String message = "handshake with " + peer + " failed: " + why + " (" + Status.name(status) + ")";
        return switch (status) {
            case Status.ERR_REJECTED, Status.ERR_UNREACHABLE, Status.ERR_INVALID_ADDR ->
                    new org.ucx4j.UnreachableException(message, status);
            default -> new UcxException(message, status);
        };
    }

    /** True if {@code host} (as a peer's handshake names it) is this machine. */
    static boolean isLocal(String host) {
        return LOCAL_HOST.equals(host);
    }

    private static String localHost() {
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            return "localhost";
        }
    }
}
