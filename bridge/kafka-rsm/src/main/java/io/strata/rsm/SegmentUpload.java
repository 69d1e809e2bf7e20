package io.strata.rsm;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;

/**
 * The body of {@code POST /v1/copy-upload}: {@code u32 N | N bytes of JSON header | the files |
 * 32-byte tag}. The files are read from disk while they are sent, through one fixed buffer, so a
 * segment is never held in memory; the tag, keyed by the connection's session, covers exactly
 * the bytes sent. Exactly the sizes the header declares are sent: a file found shorter fails the
 * call (strata tier then sees a short body and keeps nothing).
 */
final class SegmentUpload implements TierHttp.RequestBody {
    static final String CONTENT_TYPE = "application/vnd.strata.segment-upload";
    /** Bytes read from a file at a time. */
    static final int BUFFER_BYTES = 64 * 1024;

    /** One file of the body: where it is and how many bytes of it the header declares. */
    record Part(Path file, long size) {
    }

    private final byte[] header;
    private final List<Part> parts;
    private final long length;

    /** {@code parts} in body order, with the sizes {@code headerJson} declares. */
    SegmentUpload(String headerJson, List<Part> parts) {
        this.header = headerJson.getBytes(StandardCharsets.UTF_8);
        this.parts = List.copyOf(parts);
        long n = 4L + header.length + TierAuth.TAG_BYTES;
        for (Part p : parts) {
            n += p.size();
        }
        this.length = n;
    }

    @Override
    public String contentType() {
        return CONTENT_TYPE;
    }

    @Override
    public long length() {
        return length;
    }

    /** The request mac covers the JSON header only; the tag covers the files. */
    @Override
    public byte[] signed() {
        return header;
    }

    @Override
    public void write(OutputStream out, byte[] head, SecretKeySpec session, long seq) throws IOException {
        byte[] first = ByteBuffer.allocate(head.length + 4 + header.length)
            .put(head).putInt(header.length).put(header).array();
        out.write(first);
        Mac tag = TierAuth.uploadTag(session, seq);
        ByteBuffer buf = ByteBuffer.allocate(BUFFER_BYTES);
        for (Part p : parts) {
            try (FileChannel ch = openPart(p)) {
                long left = p.size();
                while (left > 0) {
                    buf.clear().limit((int) Math.min(buf.capacity(), left));
                    int n = readPart(ch, buf, p);
                    if (n < 0) {
                        throw new SegmentFileException(p.file() + " ended after " + (p.size() - left) + " of its "
                            + p.size() + " bytes: it changed while it was being copied");
                    }
                    tag.update(buf.array(), 0, n);
                    out.write(buf.array(), 0, n);
                    left -= n;
                }
            }
        }
        out.write(tag.doFinal());
    }

    private static FileChannel openPart(Part p) throws SegmentFileException {
        try {
            return FileChannel.open(p.file(), StandardOpenOption.READ);
        } catch (IOException e) {
            throw new SegmentFileException("cannot open " + p.file() + ": " + e, e);
        }
    }

    private static int readPart(FileChannel ch, ByteBuffer buf, Part p) throws SegmentFileException {
        try {
            return ch.read(buf);
        } catch (IOException e) {
            throw new SegmentFileException("cannot read " + p.file() + ": " + e, e);
        }
    }

    /** A segment file could not be read as declared: a local problem, not strata tier's. */
    static final class SegmentFileException extends IOException {
        private static final long serialVersionUID = 1L;

        SegmentFileException(String message) {
            super(message);
        }

        SegmentFileException(String message, Throwable cause) {
            super(message, cause);
        }
    }
}
