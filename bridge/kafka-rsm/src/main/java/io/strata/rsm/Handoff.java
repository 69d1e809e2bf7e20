package io.strata.rsm;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Pattern;
import java.util.zip.CRC32C;

/**
 * A fetch window answered with strata tier's cache files instead of bytes: strata and the broker
 * share the host (the answer came over strata's Unix socket, signed like every answer), so the
 * bridge reads the verified chunk files itself and no byte crosses the socket.
 *
 * <p>What keeps it safe: only files the signed answer names are opened, by a plain name
 * ({@code <16 hex>-<n>.chunk}, never reused by strata, never rewritten, only unlinked) inside the
 * directory it names, which must be absolute and neither group- nor world-writable (nor its
 * parent); links are not followed. Every byte goes through a buffer of this stream, is checked
 * against the CRC-32C of its 64 KiB block (computed by strata from bytes it verified against the
 * manifest) and only then copied to the broker. An answer the bridge cannot use (malformed, or
 * naming a directory that is not absolute and normalised), a file that vanished (evicted), cannot
 * be opened or read, or fails a check (damaged on disk) ends the handoff with {@link Unusable}:
 * {@link FetchStream} asks for the same bytes over the socket instead (naming a damaged file, so
 * strata drops it). A handoff never fails a fetch.
 */
final class Handoff implements FetchStream.Window {
    private static final Logger LOG = LoggerFactory.getLogger(Handoff.class);

    /** Verified bytes buffered per open stream (a whole number of blocks). */
    static final int BUFFER_BYTES = 1 << 20;
    /** Largest block accepted: a buffer holds whole blocks. */
    static final long MAX_BLOCK = BUFFER_BYTES;
    /** Pieces and checksums accepted in one answer (a window is at most 64 MiB). */
    static final int MAX_PIECES = 4096;
    static final int MAX_CRCS = 1 << 16;
    /** Buffers kept for reuse (the broker runs about 10 remote reader threads). */
    private static final int POOL_MAX = 16;
    private static final ConcurrentLinkedQueue<ByteBuffer> POOL = new ConcurrentLinkedQueue<>();
    private static final AtomicInteger POOLED = new AtomicInteger();
    private static final Pattern NAME = Pattern.compile("[0-9a-f]{16}-[0-9]{1,19}\\.chunk");
    /** Directories checked, with the reason they were refused ("" when safe). */
    private static final Map<Path, String> CHECKED_DIRS = new ConcurrentHashMap<>();
    /** Handoffs that cannot be used are logged at most once per this interval, with a count. */
    static final long WARN_INTERVAL_NANOS = 60_000_000_000L;
    private static final Object WARN_LOCK = new Object();
    private static long lastWarn;
    private static boolean warned;
    private static long unusableSinceWarn;

    /** A handoff that cannot go on: the bytes from here must come over the socket. */
    static final class Unusable extends IOException {
        private static final long serialVersionUID = 1L;
        /** The file, when its bytes were damaged (strata drops it); else {@code null}. */
        final String damagedFile;
        /** No handoff can work (the directory is unsafe): stop asking for them. */
        final boolean permanent;

        Unusable(String message, String damagedFile) {
            this(message, damagedFile, false);
        }

        Unusable(String message, String damagedFile, boolean permanent) {
            super(message);
            this.damagedFile = damagedFile;
            this.permanent = permanent;
        }
    }

    /** One file range of the answer, with the checksums of the blocks it touches. */
    static final class Piece {
        final String file;
        final long size;
        final long offset;
        final long len;
        final int[] crcs;

        Piece(String file, long size, long offset, long len, int[] crcs) {
            this.file = file;
            this.size = size;
            this.offset = offset;
            this.len = len;
            this.crcs = crcs;
        }
    }

    final Path dir;
    final long blockSize;
    final long len;
    final boolean partial;
    final List<Piece> pieces;
    private final long asked;

    private int current = -1;
    private FileChannel channel;
    /** Bytes of the current piece handed out. */
    private long inPiece;
    private ByteBuffer buf;
    /** File position of {@code buf}'s first byte, or -1 when it holds nothing verified. */
    private long bufStart = -1;
    private boolean closed;

    private Handoff(Path dir, long blockSize, long len, boolean partial, List<Piece> pieces, long asked) {
        this.dir = dir;
        this.blockSize = blockSize;
        this.len = len;
        this.partial = partial;
        this.pieces = pieces;
        this.asked = asked;
    }

    /**
     * Parses and checks a signed handoff answer to a request for {@code maxBytes} bytes, or up to
     * {@code ahead} of them as files. The answer says which ({@code max_bytes}); strata versions
     * before {@code handoff_max_bytes} leave that out and answer {@code maxBytes}.
     *
     * @throws Unusable (for the rest of the stream) when the answer cannot be used: its bytes
     *     are then read over the socket
     */
    static Handoff parse(byte[] body, long maxBytes, long ahead) throws Unusable {
        try {
            Object parsed = JsonReader.parse(new String(body, StandardCharsets.UTF_8));
            if (!(parsed instanceof Map)) {
                throw new IllegalArgumentException("not a JSON object");
            }
            Map<?, ?> m = (Map<?, ?>) parsed;
            Path dir;
            String dirText = text(m, "dir");
            try {
                dir = Path.of(dirText);
            } catch (InvalidPathException e) {
                throw new IllegalArgumentException("dir " + dirText + " is not a path");
            }
            if (!dir.isAbsolute() || !dir.normalize().equals(dir)) {
                throw new IllegalArgumentException("dir " + dirText + " is not an absolute normalized path");
            }
            long block = number(m, "block_size");
            if (block < 1 || block > MAX_BLOCK || BUFFER_BYTES % block != 0) {
                throw new IllegalArgumentException("block_size " + block + " does not divide " + BUFFER_BYTES);
            }
            long len = number(m, "len");
            long asked = maxBytes;
            if (m.get("max_bytes") != null) {
                asked = number(m, "max_bytes");
                if (asked < maxBytes || asked > ahead) {
                    throw new IllegalArgumentException("max_bytes " + asked + " is not between the " + maxBytes
                        + " and " + ahead + " bytes asked for");
                }
            }
            Object partial = m.get("partial");
            if (!(partial instanceof Boolean)) {
                throw new IllegalArgumentException("partial is not a boolean");
            }
            Object list = m.get("pieces");
            if (!(list instanceof List) || ((List<?>) list).isEmpty() || ((List<?>) list).size() > MAX_PIECES) {
                throw new IllegalArgumentException("pieces is not a list of 1 to " + MAX_PIECES);
            }
            List<Piece> pieces = new ArrayList<>();
            long total = 0;
            for (Object o : (List<?>) list) {
                Piece p = piece(o, block);
                total += p.len;
                pieces.add(p);
            }
            if (total != len || len < 1 || len > asked) {
                throw new IllegalArgumentException("pieces of " + total + " bytes, len " + len + ", asked for " + asked);
            }
            return new Handoff(dir, block, len, (Boolean) partial, pieces, asked);
        } catch (IllegalArgumentException | ArithmeticException e) {
            String msg = "strata tier sent an invalid handoff answer: " + e.getMessage();
            warnUnusable(msg);
            throw new Unusable(msg, null, true);
        }
    }

    /**
     * Logs a handoff that cannot be used although strata and the bridge are set up for it (an
     * invalid answer, files the bridge may not open): at most one line per
     * {@link #WARN_INTERVAL_NANOS}, with a count, since it recurs on every fetch.
     */
    static void warnUnusable(String msg) {
        long count;
        synchronized (WARN_LOCK) {
            unusableSinceWarn++;
            long now = System.nanoTime();
            if (warned && now - lastWarn < WARN_INTERVAL_NANOS) {
                LOG.debug(msg);
                return;
            }
            warned = true;
            lastWarn = now;
            count = unusableSinceWarn;
            unusableSinceWarn = 0;
        }
        LOG.warn("{}; reading these bytes over the socket instead ({} unusable handoffs since the last line)",
            msg, count);
    }

    private static Piece piece(Object o, long block) {
        if (!(o instanceof Map)) {
            throw new IllegalArgumentException("a piece is not an object");
        }
        Map<?, ?> m = (Map<?, ?>) o;
        String file = text(m, "file");
        if (!NAME.matcher(file).matches()) {
            throw new IllegalArgumentException("file " + file + " is not a chunk file name");
        }
        long size = number(m, "size");
        long offset = number(m, "offset");
        long len = number(m, "len");
        if (len < 1 || offset < 0 || Math.addExact(offset, len) > size) {
            throw new IllegalArgumentException("piece " + offset + "+" + len + " is outside " + file + " of " + size + " bytes");
        }
        Object crcs = m.get("crc32c");
        long blocks = (offset + len - 1) / block - offset / block + 1;
        if (!(crcs instanceof List) || ((List<?>) crcs).size() != blocks || blocks > MAX_CRCS) {
            throw new IllegalArgumentException("piece of " + file + " does not have " + blocks + " block checksums");
        }
        int[] values = new int[(int) blocks];
        int i = 0;
        for (Object c : (List<?>) crcs) {
            if (!(c instanceof BigDecimal)) {
                throw new IllegalArgumentException("a checksum is not a number");
            }
            long v = ((BigDecimal) c).longValueExact();
            if (v < 0 || v > 0xffffffffL) {
                throw new IllegalArgumentException("checksum " + v + " is not a CRC-32C");
            }
            values[i++] = (int) v;
        }
        return new Piece(file, size, offset, len, values);
    }

    private static String text(Map<?, ?> m, String key) {
        Object v = m.get(key);
        if (!(v instanceof String)) {
            throw new IllegalArgumentException(key + " is not a string");
        }
        return (String) v;
    }

    private static long number(Map<?, ?> m, String key) {
        Object v = m.get(key);
        if (!(v instanceof BigDecimal)) {
            throw new IllegalArgumentException(key + " is not a number");
        }
        return ((BigDecimal) v).longValueExact();
    }

    @Override
    public boolean endsRange() {
        return !partial && len < asked;
    }

    /**
     * This answer's bytes from {@code skip} on, at most {@code want} of them, as a window of its
     * own to read ({@code null} when none are left). The pieces keep their files and the
     * checksums of the blocks they still touch; the window goes on past its end (is partial)
     * unless this answer ended the range there.
     */
    Handoff slice(long skip, long want) {
        if (skip < 0 || skip >= len || want < 1) {
            return null;
        }
        long total = Math.min(want, len - skip);
        List<Piece> out = new ArrayList<>();
        long at = 0;
        long left = total;
        for (Piece p : pieces) {
            long from = Math.max(skip - at, 0);
            at += p.len;
            if (from >= p.len || left == 0) {
                continue;
            }
            long n = Math.min(p.len - from, left);
            long offset = p.offset + from;
            int first = (int) (offset / blockSize - p.offset / blockSize);
            int last = (int) ((offset + n - 1) / blockSize - p.offset / blockSize);
            out.add(new Piece(p.file, p.size, offset, n, Arrays.copyOfRange(p.crcs, first, last + 1)));
            left -= n;
        }
        return new Handoff(dir, blockSize, total, total < want && !endsRange(), out, want);
    }

    @Override
    public int read(byte[] b, int off, int n) throws IOException {
        Objects.checkFromIndexSize(off, n, b.length);
        if (closed) {
            throw new IOException("strata tier handoff is closed");
        }
        if (n == 0) {
            return 0;
        }
        Piece p;
        long pos;
        try {
            while (current < 0 || inPiece == pieces.get(current).len) {
                if (current + 1 == pieces.size()) {
                    return -1;
                }
                next();
            }
            p = pieces.get(current);
            pos = p.offset + inPiece;
            if (bufStart < 0 || pos < bufStart || pos >= bufStart + buf.limit()) {
                fill(p, pos);
            }
        } catch (RuntimeException e) {
            // Whatever went wrong, nothing reached the caller: the bytes come over the socket.
            String msg = "strata tier's cache files in " + dir + " cannot be read: " + e;
            warnUnusable(msg);
            throw new Unusable(msg, null, true);
        }
        int at = (int) (pos - bufStart);
        int count = (int) Math.min(Math.min(n, buf.limit() - at), p.len - inPiece);
        buf.get(at, b, off, count);
        inPiece += count;
        return count;
    }

    /** Opens the next piece's file. */
    private void next() throws IOException {
        closeChannel();
        current++;
        inPiece = 0;
        bufStart = -1;
        Piece p = pieces.get(current);
        String unsafe = CHECKED_DIRS.computeIfAbsent(dir, Handoff::checkDir);
        if (!unsafe.isEmpty()) {
            throw new Unusable(unsafe, null, true);
        }
        Path file = dir.resolve(p.file);
        try {
            BasicFileAttributes a = Files.readAttributes(file, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
            if (!a.isRegularFile()) {
                throw new Unusable(file + " is not a regular file", p.file);
            }
            channel = FileChannel.open(file, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS);
            long size = channel.size();
            if (size != p.size) {
                throw new Unusable(file + " holds " + size + " bytes, strata tier said " + p.size, p.file);
            }
        } catch (NoSuchFileException e) {
            throw new Unusable(file + " is gone (evicted from strata tier's cache)", null);
        } catch (Unusable e) {
            throw e;
        } catch (IOException e) {
            if (interrupted(e)) {
                throw e;
            }
            // Not allowed to open it, and the like: no other file of this answer will do better.
            String msg = file + " cannot be opened: " + e;
            warnUnusable(msg);
            throw new Unusable(msg, null, true);
        }
        if (buf == null) {
            buf = borrow();
        }
    }

    /** Reads and verifies the blocks from the one holding {@code pos}, as many as the buffer holds. */
    private void fill(Piece p, long pos) throws IOException {
        long firstBlock = p.offset / blockSize;
        long block = pos / blockSize;
        long start = block * blockSize;
        long pieceEnd = Math.min(p.size, ((p.offset + p.len - 1) / blockSize + 1) * blockSize);
        long end = Math.min(pieceEnd, start + BUFFER_BYTES);
        bufStart = -1;
        buf.clear().limit((int) (end - start));
        long at = start;
        while (buf.hasRemaining()) {
            int got;
            try {
                got = channel.read(buf, at);
            } catch (IOException e) {
                if (interrupted(e)) {
                    throw e;
                }
                // A read error of the disk: strata drops the file and fetches the chunk again.
                throw new Unusable(dir.resolve(p.file) + " cannot be read: " + e, p.file);
            }
            if (got < 0) {
                throw new Unusable(p.file + " ended at " + at + " bytes, strata tier said " + p.size, p.file);
            }
            at += got;
        }
        CRC32C crc = new CRC32C();
        for (long s = start; s < end; s += blockSize) {
            int from = (int) (s - start);
            int to = (int) (Math.min(end, s + blockSize) - start);
            crc.reset();
            crc.update(buf.duplicate().limit(to).position(from));
            int expected = p.crcs[(int) (s / blockSize - firstBlock)];
            if ((int) crc.getValue() != expected) {
                throw new Unusable(String.format("block at %d of %s has crc32c %08x, strata tier verified %08x",
                    s, dir.resolve(p.file), (int) crc.getValue(), expected), p.file);
            }
        }
        buf.position(0);
        bufStart = start;
    }

    /** The calling thread is being stopped: not a fault of the file, and no reason to go on. */
    private static boolean interrupted(IOException e) {
        return e instanceof ClosedByInterruptException || Thread.currentThread().isInterrupted();
    }

    /** "" when {@code dir} (and its parent) is a real directory no group or other user can write. */
    private static String checkDir(Path dir) {
        for (Path d = dir; d != null && d.getNameCount() >= dir.getNameCount() - 1; d = d.getParent()) {
            try {
                PosixFileAttributes a = Files.readAttributes(d, PosixFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
                if (!a.isDirectory()) {
                    return refuse(dir, d + " is not a directory (links are not followed)");
                }
                Set<PosixFilePermission> perms = a.permissions();
                if (perms.contains(PosixFilePermission.GROUP_WRITE) || perms.contains(PosixFilePermission.OTHERS_WRITE)) {
                    return refuse(dir, d + " is writable by its group or others");
                }
            } catch (IOException | UnsupportedOperationException e) {
                return refuse(dir, "cannot inspect " + d + ": " + e);
            }
        }
        return "";
    }

    private static String refuse(Path dir, String why) {
        String msg = "not reading strata tier's cache files in " + dir + ": " + why
            + "; fetches go over the socket (fix tier.cache_dir's permissions, or set strata.fetch.handoff=false)";
        LOG.warn(msg);
        return msg;
    }

    private static ByteBuffer borrow() {
        ByteBuffer b = POOL.poll();
        if (b == null) {
            return ByteBuffer.allocateDirect(BUFFER_BYTES);
        }
        POOLED.decrementAndGet();
        return b;
    }

    private void closeChannel() {
        FileChannel c = channel;
        channel = null;
        if (c != null) {
            try {
                c.close();
            } catch (IOException ignored) {
                // read-only: nothing is lost
            }
        }
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        closeChannel();
        ByteBuffer b = buf;
        buf = null;
        if (b != null && POOLED.incrementAndGet() <= POOL_MAX) {
            POOL.offer(b);
        } else if (b != null) {
            POOLED.decrementAndGet();
        }
    }
}
