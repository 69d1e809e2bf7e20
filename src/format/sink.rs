//! Whole-object compression for text and jsonl: a `Write` that compresses as records arrive,
//! and the matching decompression for restore.

use super::{Compression, DecodeError, Output};
use std::borrow::Cow;
use std::io::{self, Read, Write};

/// zstd level 3 is zstd's own default: a good ratio at several hundred MB/s per core.
const ZSTD_LEVEL: i32 = 3;
/// Approximate state a streaming compressor keeps besides its output buffer.
const GZIP_STATE: usize = 300 << 10;
const ZSTD_STATE: usize = 2 << 20;

/// Counts what reaches the output, so files can roll on their encoded size.
pub(super) struct Counting<W> {
    pub(super) inner: W,
    pub(super) written: u64,
}

impl<W: Write> Write for Counting<W> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf)?;
        self.written += buf.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W> Counting<W> {
    pub(super) fn new(inner: W) -> Self {
        Self { inner, written: 0 }
    }
}

pub(super) enum Sink<W: Output> {
    Plain(Counting<W>),
    Gzip(flate2::write::GzEncoder<Counting<W>>),
    Zstd(zstd::stream::write::Encoder<'static, Counting<W>>),
}

impl<W: Output> Sink<W> {
    pub(super) fn new(c: Compression, out: W) -> io::Result<Self> {
        let out = Counting::new(out);
        Ok(match c {
            Compression::Gzip => Sink::Gzip(flate2::write::GzEncoder::new(
                out,
                flate2::Compression::default(),
            )),
            Compression::Zstd => Sink::Zstd(zstd::stream::write::Encoder::new(out, ZSTD_LEVEL)?),
            Compression::None | Compression::Snappy => Sink::Plain(out),
        })
    }

    fn counting(&self) -> &Counting<W> {
        match self {
            Sink::Plain(c) => c,
            Sink::Gzip(e) => e.get_ref(),
            Sink::Zstd(e) => e.get_ref(),
        }
    }

    /// Memory held: compressor state plus the output's buffers.
    pub(super) fn memory_bytes(&self) -> usize {
        let state = match self {
            Sink::Plain(_) => 0,
            Sink::Gzip(_) => GZIP_STATE,
            Sink::Zstd(_) => ZSTD_STATE,
        };
        state + self.counting().inner.memory_bytes()
    }

    /// Bytes written to the output so far (compressed).
    pub(super) fn output_bytes(&self) -> u64 {
        self.counting().written
    }

    pub(super) fn finish(self) -> io::Result<W> {
        let mut c = match self {
            Sink::Plain(c) => c,
            Sink::Gzip(e) => e.finish()?,
            Sink::Zstd(e) => e.finish()?,
        };
        c.flush()?;
        Ok(c.inner)
    }
}

impl<W: Output> Write for Sink<W> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(v) => v.write(buf),
            Sink::Gzip(e) => e.write(buf),
            Sink::Zstd(e) => e.write(buf),
        }
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Plain(v) => v.write_all(buf),
            Sink::Gzip(e) => e.write_all(buf),
            Sink::Zstd(e) => e.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Undoes [`Sink`]'s compression, at most `limit` decoded bytes; errors say which codec
/// failed.
pub(super) fn decompress(
    c: Compression,
    data: &[u8],
    limit: u64,
) -> Result<Cow<'_, [u8]>, DecodeError> {
    let mut out = Vec::new();
    // One byte past the limit tells "exactly at the limit" from "over it".
    let cap = limit.saturating_add(1);
    match c {
        Compression::None | Compression::Snappy => {
            if data.len() as u64 > limit {
                return Err(super::too_large(limit));
            }
            return Ok(Cow::Borrowed(data));
        }
        Compression::Gzip => flate2::read::MultiGzDecoder::new(data)
            .take(cap)
            .read_to_end(&mut out)
            .map_err(|e| DecodeError::new(None, format!("not valid gzip: {e}")))?,
        Compression::Zstd => zstd::stream::read::Decoder::new(data)
            .and_then(|d| d.take(cap).read_to_end(&mut out))
            .map_err(|e| DecodeError::new(None, format!("not valid zstd: {e}")))?,
    };
    if out.len() as u64 > limit {
        return Err(super::too_large(limit));
    }
    Ok(Cow::Owned(out))
}
